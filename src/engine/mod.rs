//! The engine: owns every run task. It admits runs (a global limit on running runs; the rest
//! wait as `queued`, and past a queue limit new runs are refused), drives each on its own tokio
//! task ([`run`]) with a cancellation token and a time limit, hands it to the [`Executor`] of
//! its orchestration type, and finalises it.
//!
//! Reading order: [`Engine`] (this file) → [`run`] (one run's life) → [`executor`] (the
//! orchestration types: [`simple`], [`fixed`] on the [`scheduler`]) → what executors use:
//! [`context`], [`attempts`], [`sink`], [`checkpoint`], [`model`], [`tool_call`],
//! [`converse`].
//!
//! Invariants:
//! - Every run task is tracked (a [`TaskTracker`]); none is fire-and-forget.
//! - A run ends exactly once: its terminal row and its `final` event are written together,
//!   after every earlier event is durable.
//! - A server stop is not a cancel: runs are left as they are in the store and resumed on the
//!   next start.

pub mod attempts;
pub mod checkpoint;
pub mod clock;
pub mod completion;
pub mod context;
pub mod converse;
pub mod executor;
pub mod fixed;
pub mod input;
pub mod middleware;
pub mod model;
pub mod planner;
pub mod reactive;
mod run;
pub mod scheduler;
pub mod selector;
pub mod session;
pub mod simple;
pub mod sink;
pub mod tool_call;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::domain::run::RunSpec;
use crate::domain::{Orchestration, Run, RunId, RunStatus, Tenant};
use crate::functions::FunctionRegistry;
use crate::llm::LlmRouter;
use crate::plan::{Catalog, ValidPlan};
use crate::store::{self, Idempotency, Inserted, StoredRun};
use crate::tools::ToolRegistry;

pub use context::{EffectiveLimits, RunContext, RunSeed, Services};
pub use executor::{Executor, Outcome};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("too many runs are waiting; try again later")]
    Overloaded,
    #[error("run not found")]
    NotFound,
    #[error("the run is already {0}")]
    AlreadyTerminal(&'static str),
    /// The request does not fit the run (e.g. a re-plan asked of a run that does not re-plan).
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Store(#[from] store::Error),
}

#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    services: Services,
    slots: Arc<Semaphore>,
    queued: AtomicUsize,
    /// Cancellation tokens of live run tasks. A std mutex: insert/remove/lookup only.
    live: Mutex<HashMap<RunId, CancellationToken>>,
    tracker: TaskTracker,
    /// Fired on server stop: run tasks leave their runs as they are and exit.
    shutdown: CancellationToken,
}

#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(transparent)]
    Engine(Error),
    #[error(transparent)]
    Input(input::InputError),
}

/// What [`Engine::create_run`] did.
pub enum Created {
    New(Run),
    /// The idempotency key was used before: this is that run.
    Existing(Run),
}

impl Engine {
    pub fn new(services: Services, tracker: TaskTracker, shutdown: CancellationToken) -> Engine {
        let slots = Arc::new(Semaphore::new(services.config.max_running_runs));
        Engine {
            inner: Arc::new(Inner {
                services,
                slots,
                queued: AtomicUsize::new(0),
                live: Mutex::new(HashMap::new()),
                tracker,
                shutdown,
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

    /// The Prometheus text of the engine's metrics, with the run counts by status given.
    pub fn render_metrics(&self, runs_by_status: &[(String, i64)]) -> String {
        let services = &self.inner.services;
        services
            .metrics
            .render(runs_by_status, services.hub.open_streams())
    }

    /// Number of runs waiting for a slot.
    pub fn queued(&self) -> usize {
        self.inner.queued.load(Ordering::SeqCst)
    }

    /// Stores a new run as `queued` and starts its task. The spec must already be validated;
    /// `plan` is the plan validated from `spec.plan`, kept so it is not parsed again.
    pub async fn create_run(
        &self,
        tenant: &Tenant,
        spec: RunSpec,
        plan: Option<ValidPlan>,
        idempotency_key: Option<&str>,
    ) -> Result<Created, Error> {
        if self.queued() >= self.inner.services.config.max_queued_runs {
            return Err(Error::Overloaded);
        }
        // The request as it came, before the selector may add a rule's workflow plan to it.
        let fingerprint = idempotency_key.map(|_| spec.fingerprint());
        let (mut spec, mut plan) = (spec, plan);
        let selected =
            selector::at_creation(&self.inner.services, tenant, &mut spec, &mut plan).await?;
        let run = Run {
            id: RunId::new(),
            status: RunStatus::Queued,
            completion: None,
            orchestration: selected
                .as_ref()
                .map_or(Orchestration::Auto, |s| s.orchestration),
            selected,
            input: spec.input.clone(),
            output: None,
            error: None,
            metadata: spec.metadata.clone(),
            session_id: spec.session_id.clone(),
            plan_version: None,
            usage: Default::default(),
            created_at: crate::domain::now(),
            started_at: None,
            finished_at: None,
        };
        let store = self.inner.services.store();
        let idempotency = idempotency_key
            .zip(fingerprint.as_deref())
            .map(|(key, fingerprint)| Idempotency { key, fingerprint });
        match store.insert_run(tenant, &run, &spec, idempotency).await? {
            Inserted::Existing(prev) => return Ok(Created::Existing(prev.run)),
            Inserted::New => {}
        }
        let stored = StoredRun {
            run: run.clone(),
            tenant: tenant.clone(),
            spec,
            counters: Default::default(),
        };
        self.spawn(stored, 0, plan.map(Arc::new));
        Ok(Created::New(run))
    }

    /// Resumes every run the store holds as not terminal and no task runs (after a stop, a
    /// crash, or the store coming back); the number of runs it found unfinished.
    pub async fn resume_unfinished(&self) -> Result<usize, Error> {
        let store = self.inner.services.store();
        let runs = store.unfinished_runs().await?;
        let n = runs.len();
        for stored in runs {
            if self
                .inner
                .live
                .lock()
                .expect("live lock")
                .contains_key(&stored.run.id)
            {
                continue;
            }
            let last = store.last_seq(stored.run.id).await?;
            self.spawn(stored, last, None);
        }
        Ok(n)
    }

    /// Watches the store: each time it takes writes again after refusing them, waits until
    /// everything queued meanwhile is written, then resumes the runs that stopped. Runs until
    /// the server stops; the caller tracks the task.
    pub async fn supervise_store(self) {
        let hub = self.inner.services.hub.clone();
        let mut health = hub.health();
        loop {
            tokio::select! {
                _ = self.inner.shutdown.cancelled() => return,
                _ = health.down() => {}
            }
            tokio::select! {
                _ = self.inner.shutdown.cancelled() => return,
                _ = health.up() => {}
            }
            hub.flush().await;
            match self.resume_unfinished().await {
                Ok(n) => tracing::info!(runs = n, "the store is back: stopped runs resume"),
                Err(e) => {
                    tracing::error!(error = ?e, "resuming runs after the store came back failed")
                }
            }
        }
    }

    /// Asks a run to stop. Returns the run as it is now.
    pub async fn cancel(&self, tenant: &Tenant, id: RunId) -> Result<Run, Error> {
        let store = self.inner.services.store();
        let stored = store.get_run(tenant, id).await?.ok_or(Error::NotFound)?;
        if stored.run.status.is_terminal() {
            return Err(Error::AlreadyTerminal(stored.run.status.as_str()));
        }
        let token = self.inner.live.lock().expect("live lock").get(&id).cloned();
        match token {
            Some(t) => t.cancel(),
            None => {
                // No task holds it (it cannot happen after resume_unfinished, but a stored run
                // must never be stuck): end it here.
                let last = store.last_seq(id).await?;
                let ctx = self.context(&stored, last, None, CancellationToken::new());
                run::finalize(&ctx, run::Ending::Cancelled).await;
            }
        }
        Ok(stored.run)
    }

    /// Answers a run's pending `user_input` step.
    pub async fn submit_input(
        &self,
        tenant: &Tenant,
        id: RunId,
        step_id: &str,
        value: Value,
    ) -> Result<(), SubmitError> {
        let stored = self
            .inner
            .services
            .store()
            .get_run(tenant, id)
            .await
            .map_err(|e| SubmitError::Engine(e.into()))?
            .ok_or(SubmitError::Engine(Error::NotFound))?;
        if stored.run.status.is_terminal() {
            return Err(SubmitError::Engine(Error::AlreadyTerminal(
                stored.run.status.as_str(),
            )));
        }
        // Stored before it is delivered: once this returns, the answer survives a crash.
        let inputs = &self.inner.services.inputs;
        let waiting = inputs
            .take(id, step_id, &value)
            .map_err(SubmitError::Input)?;
        let stored = self
            .inner
            .services
            .store()
            .save_answer(id, &waiting.step_key, &value)
            .await;
        match stored {
            Ok(()) => {
                waiting.deliver(value);
                Ok(())
            }
            Err(e) => {
                inputs.put_back(id, waiting);
                Err(SubmitError::Engine(e.into()))
            }
        }
    }

    /// Asks a running reactive run for a new plan: the request is stored (once this returns
    /// it survives a crash), then the run is woken; it re-plans with `message` as the user's
    /// word, also while it waits for input.
    pub async fn request_replan(
        &self,
        tenant: &Tenant,
        id: RunId,
        message: &str,
    ) -> Result<u64, Error> {
        let stored = self
            .inner
            .services
            .store()
            .get_run(tenant, id)
            .await?
            .ok_or(Error::NotFound)?;
        if stored.run.status.is_terminal() {
            return Err(Error::AlreadyTerminal(stored.run.status.as_str()));
        }
        if stored.run.orchestration != crate::domain::Orchestration::Reactive {
            return Err(Error::Conflict(format!(
                "only reactive runs re-plan; this run is `{}`",
                stored.run.orchestration.as_str()
            )));
        }
        let seq = self
            .inner
            .services
            .store()
            .save_replan_request(id, message)
            .await?;
        self.inner.services.replans.wake(id);
        Ok(seq)
    }

    fn limits(&self, spec: &RunSpec) -> EffectiveLimits {
        let c = &self.inner.services.config;
        let l = spec.limits;
        EffectiveLimits {
            max_steps: l.max_steps.unwrap_or(c.max_steps),
            max_duration_ms: l.max_duration_ms.unwrap_or(c.max_run_duration_ms),
            max_replans: l.max_replans.unwrap_or(c.max_replans),
            max_retries: l.max_retries.unwrap_or(c.max_retries),
            max_tokens: l.max_tokens.unwrap_or(c.max_tokens),
        }
    }

    fn context(
        &self,
        stored: &StoredRun,
        last_seq: u64,
        plan: Option<Arc<ValidPlan>>,
        cancel: CancellationToken,
    ) -> RunContext {
        let seed = RunSeed {
            run: stored.run.clone(),
            tenant: stored.tenant.clone(),
            spec: stored.spec.clone(),
            plan,
            limits: self.limits(&stored.spec),
            counters: stored.counters,
            last_seq,
        };
        RunContext::new(seed, cancel, self.inner.services.clone())
    }

    /// Starts the task of a stored run, unless it has one already.
    fn spawn(&self, stored: StoredRun, last_seq: u64, plan: Option<Arc<ValidPlan>>) {
        let cancel = CancellationToken::new();
        {
            let mut live = self.inner.live.lock().expect("live lock");
            if live.contains_key(&stored.run.id) {
                return;
            }
            live.insert(stored.run.id, cancel.clone());
        }
        self.inner.queued.fetch_add(1, Ordering::SeqCst);
        let ctx = self.context(&stored, last_seq, plan, cancel);
        let engine = self.clone();
        let span = tracing::info_span!("run", run_id = %stored.run.id, tenant = %stored.tenant.0);
        self.inner.tracker.spawn(
            async move {
                let id = stored.run.id;
                run::drive(&engine.inner, ctx).await;
                engine.inner.live.lock().expect("live lock").remove(&id);
            }
            .instrument(span),
        );
    }
}
