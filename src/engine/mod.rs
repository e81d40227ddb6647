//! The engine: owns every run task. It admits runs (a global limit on running runs; the rest
//! wait as `queued`, and past a queue limit new runs are refused), drives each on its own tokio
//! task ([`run`]) with a cancellation token and a time limit, hands it to the [`Executor`] of
//! its orchestration type, and finalises it.
//!
//! The engine stands on floors (ARCHITECTURE.md, "The engine"): [`runtime`] at the bottom
//! imports no feature; [`calls`] above it; then the features and executors ([`session`],
//! [`review`], [`fork`], [`scheduler`], [`simple`], [`fixed`], [`planner`], [`reactive`],
//! [`selector`]); then [`intake`] and the run task (`run`); `Engine` on top (this file: runs
//! admitted, created, forked, started), with its methods on runs that exist beside it
//! (`control`: cancel, pause, answer, re-plan; `replica`: resume, leases, notices, the store's
//! health).
//!
//! Reading order: [`intake`] (a run request checked and resolved before it is stored) →
//! [`Engine`] (this file) → `run` (one run's life) → the executors ([`simple`], [`fixed`] on
//! the [`scheduler`]) → what they stand on: [`runtime`] and [`calls`].
//!
//! Invariants:
//! - Every run task is tracked (a [`TaskTracker`]); none is fire-and-forget.
//! - A run ends exactly once: its terminal row and its `final` event are written together,
//!   after every earlier event is durable.
//! - A server stop is not a cancel: runs are left as they are in the store and resumed on the
//!   next start.
//! - A run's task runs on the replica that leases it (`store/cluster.rs`): this replica
//!   renews its leases ([`Engine::keep_leases`]), stops a run whose lease another replica
//!   took, takes over runs whose lease lapsed, and passes cancels, answers and re-plan
//!   requests for runs it does not run to the one that does ([`Engine::on_notice`]).

pub mod calls;
mod control;
mod error;
pub mod fixed;
pub mod fork;
pub mod intake;
pub mod planner;
pub mod reactive;
mod replica;
pub mod review;
mod run;
pub mod runtime;
pub mod scheduler;
pub mod selector;
pub mod session;
pub mod simple;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::domain::DeclaredTool;
use crate::domain::quota::Exceeded;
use crate::domain::run::RunSpec;
use crate::domain::{Run, RunId, Tenant};
use crate::functions::{FunctionRegistry, FunctionSpec};
use crate::llm::LlmRouter;
use crate::plan::{Catalog, ValidPlan};
use crate::store::{self, Idempotency, Inserted, StoredRun};
use crate::tools::ToolRegistry;
use crate::tools::http::declared::DeclaredTools;

pub use error::Error;
use run::{Handles, Inner};
use runtime::{input, queue, slots};

pub use runtime::context::{EffectiveLimits, RunContext, RunSeed, Services};

#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

/// Most runs one look takes over.
const CLAIM_BATCH: u32 = 256;

#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(transparent)]
    Engine(Error),
    #[error(transparent)]
    Input(input::InputError),
}

/// What one tenant may use: [`Engine::tenant_view`].
pub struct TenantView {
    /// The tenant's declared HTTP tools, as stored.
    pub declared: Vec<DeclaredTool>,
    /// The tenant's declared LLM functions, as stored.
    pub functions: Vec<FunctionSpec>,
    services: Services,
}

impl TenantView {
    /// Every LLM function the tenant's plans may call: the configured ones and its own.
    pub fn functions(&self) -> &FunctionRegistry {
        &self.services.functions
    }

    /// Every tool the tenant may call.
    pub fn tools(&self) -> &ToolRegistry {
        &self.services.tools
    }

    /// The names the tenant's plans may use.
    pub fn catalog(&self) -> Catalog<'_> {
        self.services.catalog()
    }
}

/// Whether the caller of [`Engine::create_run`] streams the new run's events as they happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// Open the run's live channel before its task can store anything (`Created::New` has it).
    Stream,
    /// No live channel: the caller reads the run later (its row, its stored events).
    Later,
}

/// What [`Engine::set_paused`] asks of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pause {
    /// Hold the run between steps.
    Wanted,
    /// Let a paused run (or one asked to pause, or held at a breakpoint) go on.
    Lifted,
}

/// What [`Engine::create_run`] did.
pub enum Created {
    /// A new run, and its live channel when the caller asked to follow it.
    New(Run, Option<crate::stream::Opened>),
    /// The idempotency key was used before: this is that run.
    Existing(Run),
}

impl Engine {
    pub fn new(
        mut services: Services,
        tracker: TaskTracker,
        shutdown: CancellationToken,
    ) -> Engine {
        services.hooks = services
            .hooks
            .with(session::SessionTurn)
            .with(fork::ForkNote);
        let slots = Arc::new(slots::Slots::new(
            services.config.max_running_runs,
            services.quotas.clone(),
        ));
        Engine {
            inner: Arc::new(Inner {
                services,
                slots,
                queue: queue::Queue::default(),
                live: Mutex::new(HashMap::new()),
                tracker,
                shutdown,
                claim_now: tokio::sync::Notify::new(),
                resume_now: tokio::sync::Notify::new(),
            }),
        }
    }

    /// The tools runs may use.
    pub fn tools(&self) -> &ToolRegistry {
        &self.inner.services.tools
    }

    /// The configured model aliases.
    pub fn models(&self) -> &LlmRouter {
        &self.inner.services.llm
    }

    /// The named LLM functions.
    pub fn functions(&self) -> &FunctionRegistry {
        &self.inner.services.functions
    }

    /// The names plans may use: the tools and the LLM functions.
    pub fn catalog(&self) -> Catalog<'_> {
        self.inner.services.catalog()
    }

    /// The builder of tenants' declared HTTP tools (and their checks).
    pub fn declared_tools(&self) -> &DeclaredTools {
        &self.inner.services.declared
    }

    /// Worker tools' tasks: what the worker protocol claims, heartbeats and completes.
    pub fn tasks(&self) -> &crate::store::tasks::Tasks {
        &self.inner.services.tasks
    }

    /// Memory items: what `/v1/memory` reads and writes, with the same limits as runs.
    pub fn memory(&self) -> &crate::store::memory::Memory {
        &self.inner.services.memory
    }

    /// What `tenant` may use now: the tools orca started with and the tenant's declared ones
    /// (read from the store, so every replica answers the same), with those declarations.
    pub async fn tenant_view(&self, tenant: &Tenant) -> Result<TenantView, store::Error> {
        let services = &self.inner.services;
        let declared = services.declared_tools(tenant).await?;
        let functions = (services.declared_functions(tenant).await?.into_iter())
            .map(|(spec, _)| spec)
            .collect();
        Ok(self.view_with(tenant, declared, functions))
    }

    /// What `tenant` could use with `declared` as its declared HTTP tools and `functions` as
    /// its declared functions (a bundle being applied, checked before it is stored).
    pub fn view_with(
        &self,
        tenant: &Tenant,
        declared: Vec<DeclaredTool>,
        functions: Vec<FunctionSpec>,
    ) -> TenantView {
        let services = self
            .inner
            .services
            .for_tenant(tenant, &declared, &functions);
        TenantView {
            declared,
            functions,
            services,
        }
    }

    /// The Prometheus text of the engine's metrics, with the run counts by status given.
    pub fn render_metrics(
        &self,
        runs_by_status: &[(String, i64)],
        tenants: &[(String, u64, u64)],
        task_queues: &[crate::metrics::QueueDepth],
        memory: &[(String, u64, u64)],
        audience: crate::metrics::Audience<'_>,
    ) -> String {
        let services = &self.inner.services;
        let run_tasks = self.run_tasks();
        let writes = services.store.writes();
        services.metrics.render(
            &crate::metrics::Scrape {
                runs_by_status,
                open_streams: services.hub.open_streams(),
                run_tasks,
                lease_held: services.lease.held(),
                store_statements: writes.statements,
                store_commits: writes.commits,
                tenants,
                task_queues,
                memory,
            },
            audience,
        )
    }

    /// Number of run tasks alive on this replica (queued, running or waiting).
    pub fn run_tasks(&self) -> usize {
        self.inner.live.lock().expect("live lock").len()
    }

    /// Number of runs waiting for a slot.
    pub fn queued(&self) -> usize {
        self.inner.queue.len()
    }

    /// Checks a run body (as `POST /v1/runs` or a schedule's tick sends it) and resolves it
    /// ([`intake::admit_body`]): the run to create, or every problem at once.
    pub async fn admit_body(
        &self,
        tenant: &Tenant,
        body: serde_json::Value,
    ) -> Result<intake::Admitted, intake::Refused> {
        intake::admit_body(&self.inner.services, tenant, body).await
    }

    /// [`Self::admit_body`] with a bundle being applied in front of the registries (its
    /// agents, workflows and tools; the definitions it removes absent): whether a schedule of
    /// the bundle may run the body once the bundle is stored.
    pub async fn admit_body_over(
        &self,
        tenant: &Tenant,
        body: serde_json::Value,
        overlay: Arc<crate::agents::Overlay>,
    ) -> Result<intake::Admitted, intake::Refused> {
        let services = &self.inner.services;
        let bodies = runtime::context::Bodies {
            overlay: Some(overlay),
            ..(*services.bodies).clone()
        };
        let services = runtime::context::Services {
            bodies: Arc::new(bodies),
            ..services.clone()
        };
        intake::admit_body(&services, tenant, body).await
    }

    /// Checks and resolves a typed run request for `tenant` ([`intake::admit`]), as
    /// [`Self::admit_body`] does once the body is parsed (library users with a
    /// [`RunRequest`](crate::domain::run::RunRequest) in hand): the run to create, or every
    /// problem at once.
    pub async fn admit(
        &self,
        tenant: &Tenant,
        request: crate::domain::run::RunRequest,
    ) -> Result<intake::Admitted, intake::Refused> {
        intake::admit(&self.inner.services, tenant, request).await
    }

    /// Stores an admitted run as `queued` and starts its task, or finds the run an idempotency
    /// key already made (the same key with another request is
    /// [`Error::IdempotencyKeyReused`]).
    pub async fn create_run(
        &self,
        tenant: &Tenant,
        admitted: intake::Admitted,
        idempotency_key: Option<&str>,
        follow: Follow,
    ) -> Result<Created, Error> {
        self.accepting(tenant)?;
        let intake::Admitted {
            spec,
            plan,
            selected,
            fingerprint,
        } = admitted;
        let run = Run::queued(RunId::new(), &spec, selected);
        let new = NewRun {
            run,
            spec,
            plan: plan.map(Arc::new),
            fingerprint,
            history: Vec::new(),
        };
        self.start_new(tenant, new, idempotency_key, follow).await
    }

    /// Forks the tenant's run `parent` ([`fork`]): a new run that starts where the parent
    /// stood at the checkpoint the request names, stored with what it starts from and
    /// started like any run.
    pub async fn fork(
        &self,
        tenant: &Tenant,
        parent: RunId,
        request: fork::ForkRequest,
        idempotency_key: Option<&str>,
    ) -> Result<Created, Error> {
        self.accepting(tenant)?;
        let id = RunId::new();
        let services = &self.inner.services;
        let forked = fork::prepare(services, tenant, parent, request, id).await?;
        let mut run = Run::queued(id, &forked.spec, forked.parent.run.selected.clone());
        run.orchestration = forked.parent.run.orchestration;
        run.plan_version = forked.plan_version;
        let new = NewRun {
            run,
            spec: forked.spec,
            plan: forked.plan,
            fingerprint: None,
            history: forked.history,
        };
        self.start_new(tenant, new, idempotency_key, Follow::Later)
            .await
    }

    /// Whether a new run of `tenant` can be taken now: the queue has room, for the tenant too,
    /// and the store takes writes.
    fn accepting(&self, tenant: &Tenant) -> Result<(), Error> {
        let services = &self.inner.services;
        if self.queued() >= services.config.max_queued_runs {
            return Err(Error::Overloaded);
        }
        let limit = services.quotas.of(&tenant.0).queued_runs;
        let used = self.inner.queue.of(tenant) as u64;
        if limit > 0 && used >= limit {
            services.metrics.quota_refused(&tenant.0, "queued_runs");
            return Err(Error::QuotaExceeded(Exceeded::queued(limit, used)));
        }
        // Nothing is acknowledged that cannot be stored: while the writer fails, the run's
        // row might be taken but none of its events.
        if !self.inner.services.hub.is_healthy() {
            return Err(Error::StoreDown);
        }
        Ok(())
    }

    /// Stores a new run (with what its history starts with) as `queued` and starts its task,
    /// or finds the run an idempotency key already made.
    async fn start_new(
        &self,
        tenant: &Tenant,
        new: NewRun,
        idempotency_key: Option<&str>,
        follow: Follow,
    ) -> Result<Created, Error> {
        let NewRun {
            run,
            spec,
            plan,
            fingerprint,
            history,
        } = new;
        let store = self.inner.services.store();
        let fingerprint = match (idempotency_key, fingerprint) {
            (None, _) => String::new(),
            (Some(_), Some(taken)) => taken,
            (Some(_), None) => spec.fingerprint(),
        };
        let idempotency = idempotency_key.map(|key| Idempotency {
            key,
            fingerprint: &fingerprint,
        });
        use crate::domain::SessionConcurrency::{Interrupt, Reject};
        let policy = spec.session_policy(self.inner.services.config.session_concurrency);
        if policy == Some(Interrupt)
            && let Some(session) = &spec.request.session_id
        {
            self.interrupt_session(tenant, session).await?;
        }
        let guards = store::Guards {
            session: spec.request.session_id.as_deref(),
            session_idle: spec
                .request
                .session_id
                .as_deref()
                .filter(|_| policy == Some(Reject)),
            quota: self.inner.services.quotas.of(&tenant.0),
            user: spec.request.user_id.as_deref(),
            user_quota: self.inner.services.quotas.user,
        };
        let inserted = store
            .insert_run(tenant, &run, &spec, idempotency, guards, &history)
            .await?;
        if let Inserted::SessionBusy = inserted {
            return Err(Error::SessionBusy(
                spec.request.session_id.clone().unwrap_or_default(),
            ));
        }
        if let Inserted::SessionDeleted = inserted {
            return Err(Error::Conflict(format!(
                "the session `{}` was deleted; a deleted session's id is not used again",
                spec.request.session_id.as_deref().unwrap_or_default()
            )));
        }
        if let Inserted::SessionOfAnotherUser = inserted {
            return Err(Error::Conflict(format!(
                "the session `{}` is another user's: a session's runs are all one user's",
                spec.request.session_id.as_deref().unwrap_or_default()
            )));
        }
        if let Inserted::ForkTooLarge { bytes, limit } = inserted {
            let metrics = &self.inner.services.metrics;
            metrics.quota_refused(&tenant.0, "fork_bytes_per_day");
            return Err(Error::ForkTooLarge { bytes, limit });
        }
        if let Inserted::QuotaExceeded(exceeded) = inserted {
            self.inner
                .services
                .metrics
                .quota_refused(&tenant.0, exceeded.quota);
            return Err(Error::QuotaExceeded(exceeded));
        }
        if let Inserted::Existing(prev) = inserted {
            // The key names one request: the same key with another request is a client bug
            // (a reused key), and answering with the first run would hide it.
            let stored = store.idempotency_fingerprint(tenant, prev.run.id).await?;
            if stored.is_some_and(|stored| stored != fingerprint) {
                return Err(Error::IdempotencyKeyReused);
            }
            return Ok(Created::Existing(prev.run));
        }
        let stored = StoredRun {
            run: run.clone(),
            tenant: tenant.clone(),
            spec,
            counters: Default::default(),
            cancel_requested: false,
            pause_requested: false,
            breakpoints_released: Vec::new(),
        };
        // Opened before the task can store anything: the stream starts from the hub.
        let opened = (follow == Follow::Stream).then(|| self.inner.services.hub.open_new(run.id));
        self.spawn(stored, 0, plan);
        Ok(Created::New(run, opened))
    }

    /// Deletes a finished run of the tenant's with everything it owns. A run that has not
    /// finished is a [`Error::Conflict`]: it must be cancelled first.
    pub async fn delete_run(&self, tenant: &Tenant, id: RunId) -> Result<(), Error> {
        let store = self.inner.services.store();
        let stored = store.get_run(tenant, id).await?.ok_or(Error::NotFound)?;
        let status = stored.run.status;
        if !status.is_terminal() {
            return Err(Error::Conflict(format!(
                "the run is {}; only a finished run can be deleted (cancel it first)",
                status.as_str()
            )));
        }
        // A finished run never changes again, so nothing can slip in between the check and
        // the delete; zero rows means a concurrent delete won.
        if store.delete_runs(&[id]).await? == 0 {
            return Err(Error::NotFound);
        }
        Ok(())
    }

    /// Declares (or replaces) one of the tenant's HTTP tools, already checked
    /// ([`DeclaredTools::problems`]), as a new version when it changed. Every replica reads
    /// it from the store from then on.
    pub async fn declare_http_tool(
        &self,
        tenant: &Tenant,
        spec: &DeclaredTool,
        authored: store::Authored<'_>,
    ) -> Result<store::Put, store::Error> {
        let definition =
            serde_json::to_value(spec).map_err(|e| store::Error::Corrupt(e.to_string()))?;
        let registry = store::Registry::HttpTools;
        (self.inner.services.store())
            .put_entry(registry, tenant, spec.name(), &definition, authored)
            .await
    }

    /// Removes one of the tenant's declared HTTP tools: whether there was one.
    pub async fn remove_http_tool(
        &self,
        tenant: &Tenant,
        name: &str,
    ) -> Result<bool, store::Error> {
        let registry = store::Registry::HttpTools;
        (self.inner.services.store())
            .delete_entry(registry, tenant, name)
            .await
    }

    /// Cancels every run of the session still in progress (for a new run that interrupts
    /// them); their histories stay. A run that ends meanwhile is left as it ended.
    async fn interrupt_session(&self, tenant: &Tenant, session: &str) -> Result<(), Error> {
        let running = self
            .inner
            .services
            .store()
            .session_unfinished(tenant, session, None)
            .await?;
        for id in running {
            match self.cancel(tenant, id).await {
                Ok(_) | Err(Error::AlreadyTerminal(_) | Error::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn context(
        &self,
        stored: StoredRun,
        last_seq: u64,
        plan: Option<Arc<ValidPlan>>,
        cancel: CancellationToken,
        stop: CancellationToken,
        pause: Arc<tokio::sync::watch::Sender<bool>>,
    ) -> RunContext {
        let services = self.inner.services.for_tenant(
            &stored.tenant,
            &stored.spec.declared_tools,
            &stored.spec.declared_functions,
        );
        let seed = RunSeed {
            limits: EffectiveLimits::of(&stored.spec, &self.inner.services.config),
            run: stored.run,
            tenant: stored.tenant,
            spec: stored.spec,
            plan,
            counters: stored.counters,
            last_seq,
            pause,
            released: stored.breakpoints_released,
        };
        RunContext::new(seed, cancel, stop, services)
    }

    /// Starts the task of a stored run, unless it has one already.
    fn spawn(&self, stored: StoredRun, last_seq: u64, plan: Option<Arc<ValidPlan>>) {
        let cancel = CancellationToken::new();
        let stop = self.inner.shutdown.child_token();
        let pause = Arc::new(tokio::sync::watch::Sender::new(stored.pause_requested));
        {
            let mut live = self.inner.live.lock().expect("live lock");
            if live.contains_key(&stored.run.id) {
                return;
            }
            let handles = Handles {
                cancel: cancel.clone(),
                stop: stop.clone(),
                pause: Arc::clone(&pause),
            };
            live.insert(stored.run.id, handles);
        }
        if stored.cancel_requested {
            cancel.cancel();
        }
        self.inner.queue.enter(&stored.tenant);
        let id = stored.run.id;
        let span = tracing::info_span!("run", run_id = %id, tenant = %stored.tenant.0);
        let ctx = self.context(stored, last_seq, plan, cancel, stop.clone(), pause);
        let engine = self.clone();
        self.inner.tracker.spawn(
            async move {
                let left = run::drive(&engine.inner, ctx, stop).await;
                engine.inner.live.lock().expect("live lock").remove(&id);
                if left == run::Left::ForTheStore {
                    // Its task is gone only now: the supervisor resumes it (at once if the
                    // store is already back).
                    engine.inner.resume_now.notify_one();
                }
            }
            .instrument(span),
        );
    }
}

/// A run about to be stored: its row, spec, validated plan, the fingerprint admission took
/// (if it took one) and what its history starts with (a fork's).
struct NewRun {
    run: Run,
    spec: RunSpec,
    plan: Option<Arc<ValidPlan>>,
    fingerprint: Option<String>,
    history: Vec<store::Record>,
}
