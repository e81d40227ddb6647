//! [`TestRun`]: a working [`RunContext`] for a unit test in a line or a few —
//! `RunContext::for_test().plan(json!({...})).build().await`.
//!
//! The context has what a real run's has: the offline model, the built-in tools, an event
//! hub with its writer, and a store, with the run's row in it. The store is an in-memory
//! SQLite database of the test's own: a *named* one in shared-cache mode, its name a URI
//! filename (`sqlite:file:orca-test-<uuid>?mode=memory&cache=shared`), so every connection
//! of the pool opens the same data. A plain `sqlite::memory:` will not do: the store's pool
//! reads its URL again for each connection, and sqlx gives each such parse a database of its
//! own; nor will `sqlite://<name>?mode=memory`, whose name SQLite does not share. The
//! database lives as long as one of the pool's connections is open. The store runs no writer or reader
//! thread for an in-memory database (they would open it as a file); its writes go through the
//! pool, whose shared-cache locks sqlx waits out.
//!
//! The spec is built from JSON (`{"input": "go", "orchestration": "fixed"}` and whatever
//! [`TestRun::spec`] adds), so a test names only the fields it cares about.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::domain::run::RunSpec;
use crate::domain::{Counters, Run, RunId, RunStatus, Tenant};
use crate::llm::LlmRouter;
use crate::store::{Guards, Store};
use crate::stream::EventHub;
use crate::tools::ToolRegistry;
use crate::tools::http::declared::DeclaredTools;

use super::context::{EffectiveLimits, RunContext, RunSeed, Services};

/// A run context to be built for a test; every knob has a default that runs.
pub struct TestRun {
    config: Config,
    /// Spec fields over the defaults.
    spec: Map<String, Value>,
    plan: Option<Value>,
    pause: Arc<tokio::sync::watch::Sender<bool>>,
}

impl RunContext {
    /// A [`TestRun`] with the defaults: a `fixed` run of input `"go"`, the configured limits.
    pub fn for_test() -> TestRun {
        let spec = json!({"input": "go", "orchestration": "fixed"});
        TestRun {
            config: Config::default(),
            spec: spec.as_object().cloned().unwrap_or_default(),
            plan: None,
            pause: Default::default(),
        }
    }
}

impl TestRun {
    /// Sets these fields of the run's spec (`{"limits": {"max_steps": 2}}`, `{"session_id":
    /// "s"}`, `{"orchestration": "simple"}`).
    pub fn spec(mut self, fields: Value) -> TestRun {
        if let Value::Object(fields) = fields {
            self.spec.extend(fields);
        }
        self
    }

    /// Sets the run's limits (the spec's `limits`; what it leaves unset is the configured
    /// default).
    pub fn limits(self, limits: Value) -> TestRun {
        self.spec(json!({ "limits": limits }))
    }

    /// The run's plan, validated against the built-in tools when the context is built.
    pub fn plan(mut self, plan: Value) -> TestRun {
        self.plan = Some(plan);
        self
    }

    /// Changes the configuration the services are built from.
    pub fn config(mut self, change: impl FnOnce(&mut Config)) -> TestRun {
        change(&mut self.config);
        self
    }

    /// The run's pause switch, as the engine keeps it (`send_replace(true)` asks for a pause).
    pub fn pause(mut self, pause: Arc<tokio::sync::watch::Sender<bool>>) -> TestRun {
        self.pause = pause;
        self
    }

    /// The context, on a fresh in-memory store holding the run's row.
    pub async fn build(self) -> RunContext {
        let services = services(&self.config).await;
        let spec: RunSpec = serde_json::from_value(Value::Object(self.spec)).expect("a spec");
        let plan = self.plan.map(|plan| {
            let valid = crate::plan::validate_plan(&plan, &services.tools).expect("a valid plan");
            Arc::new(valid)
        });
        let run = Run {
            status: RunStatus::Running,
            orchestration: spec.request.orchestration,
            ..Run::queued(RunId::new(), &spec, None)
        };
        let tenant = Tenant::default_tenant();
        let guards = Guards {
            session: None,
            session_idle: None,
            quota: services.quotas.of(&tenant.0),
            user: None,
            user_quota: Default::default(),
        };
        (services.store)
            .insert_run(&tenant, &run, &spec, None, guards, &[])
            .await
            .expect("the run's row is stored");
        let seed = RunSeed {
            limits: EffectiveLimits::of(&spec, &self.config.engine),
            run,
            tenant,
            spec,
            plan,
            counters: Counters::default(),
            last_seq: 0,
            pause: self.pause,
            released: Vec::new(),
        };
        let (cancel, stop) = (CancellationToken::new(), CancellationToken::new());
        RunContext::new(seed, cancel, stop, services)
    }
}

/// The services of `config` on a store of their own.
async fn services(config: &Config) -> Services {
    let name = uuid::Uuid::now_v7().simple();
    let url = format!("sqlite:file:orca-test-{name}?mode=memory&cache=shared");
    let store = Store::connect(&url, 4).await.expect("an in-memory store");
    let (hub, _writer) = EventHub::start(store.clone(), 1024);
    Services {
        llm: LlmRouter::from_config(config).expect("the offline model"),
        tools: ToolRegistry::with_builtins(&config.tools),
        functions: Default::default(),
        hub,
        tasks: crate::store::tasks::Tasks::new(store.clone()),
        memory: crate::store::memory::Memory::new(
            store.clone(),
            Arc::new(config.memory.clone()),
            None,
            crate::metrics::Metrics::new(),
        ),
        store,
        metrics: crate::metrics::Metrics::new(),
        inputs: Default::default(),
        replans: Default::default(),
        config: Arc::new(config.engine.clone()),
        context: Arc::new(config.context.clone()),
        selector: Default::default(),
        telemetry: Default::default(),
        declared: DeclaredTools::new(&config.tools).expect("no declared tools"),
        lease: Default::default(),
        hooks: Default::default(),
        quotas: Arc::new(config.quotas.clone()),
        bodies: Arc::new(super::context::Bodies::new(
            config.webhooks.clone(),
            Default::default(),
        )),
    }
}
