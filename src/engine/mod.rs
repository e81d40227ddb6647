//! The engine: owns every run task. It admits runs (a global limit on running runs; the rest
//! wait as `queued`, and past a queue limit new runs are refused), drives each on its own tokio
//! task with a cancellation token and a time limit, hands it to the executor of its
//! orchestration type, and finalises it.
//!
//! Invariants:
//! - Every run task is tracked (a [`TaskTracker`]); none is fire-and-forget.
//! - A run ends exactly once: its terminal row and its `final` event are written together,
//!   after every earlier event is durable.
//! - A server stop is not a cancel: runs are left as they are in the store and resumed on the
//!   next start.

pub mod clock;
pub mod context;
pub mod dag;
pub mod fixed;
pub mod input;
pub mod simple;
pub mod steps;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::config::EngineConfig;
use crate::domain::run::RunSpec;
use crate::domain::{
    Completion, EventKind, Orchestration, Run, RunError, RunId, RunStatus, StepStatus, Tenant,
};
use crate::store::{self, Inserted, StoredRun};

pub use context::{EffectiveLimits, RunContext, RunSeed, Services};

/// How an executor ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    Success(Value),
    /// Some of the work succeeded: an output and what went wrong.
    Partial(Value, RunError),
    Failed(RunError),
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("too many runs are waiting; try again later")]
    Overloaded,
    #[error("run not found")]
    NotFound,
    #[error("the run is already {0}")]
    AlreadyTerminal(&'static str),
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

    pub fn services(&self) -> &Services {
        &self.inner.services
    }

    fn config(&self) -> &EngineConfig {
        &self.inner.services.config
    }

    /// Stores a new run as `queued` and starts its task. The spec must already be validated.
    pub async fn create_run(
        &self,
        tenant: &Tenant,
        spec: RunSpec,
        idempotency_key: Option<&str>,
    ) -> Result<Created, Error> {
        if self.inner.queued.load(Ordering::SeqCst) >= self.config().max_queued_runs {
            return Err(Error::Overloaded);
        }
        let orchestration = match spec.orchestration {
            // The selector arrives with the planner; until then `auto` means `simple`.
            Orchestration::Auto => Orchestration::Simple,
            o => o,
        };
        let run = Run {
            id: RunId::new(),
            status: RunStatus::Queued,
            completion: None,
            orchestration,
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
        let store = self.inner.services.hub.store();
        match store
            .insert_run(tenant, &run, &spec, idempotency_key)
            .await?
        {
            Inserted::Existing(prev) => return Ok(Created::Existing(prev.run)),
            Inserted::New => {}
        }
        let stored = StoredRun {
            run: run.clone(),
            tenant: tenant.clone(),
            spec,
        };
        self.spawn(stored, 0, false);
        Ok(Created::New(run))
    }

    /// Resumes every run the store holds as not terminal (after a stop or a crash).
    pub async fn resume_unfinished(&self) -> Result<usize, Error> {
        let store = self.inner.services.hub.store();
        let runs = store.unfinished_runs().await?;
        let n = runs.len();
        for stored in runs {
            let last = store.last_seq(stored.run.id).await?;
            self.spawn(stored, last, true);
        }
        Ok(n)
    }

    /// Asks a run to stop. Returns the run as it is now.
    pub async fn cancel(&self, tenant: &Tenant, id: RunId) -> Result<Run, Error> {
        let store = self.inner.services.hub.store();
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
                let ctx = self.context(&stored, last, CancellationToken::new());
                finalize(&ctx, Ending::Cancelled).await;
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
        let store = self.inner.services.hub.store();
        let stored = store
            .get_run(tenant, id)
            .await
            .map_err(|e| SubmitError::Engine(e.into()))?
            .ok_or(SubmitError::Engine(Error::NotFound))?;
        if stored.run.status.is_terminal() {
            return Err(SubmitError::Engine(Error::AlreadyTerminal(
                stored.run.status.as_str(),
            )));
        }
        self.inner
            .services
            .inputs
            .answer(id, step_id, value)
            .map_err(SubmitError::Input)
    }

    /// Number of runs waiting for a slot.
    pub fn queued(&self) -> usize {
        self.inner.queued.load(Ordering::SeqCst)
    }

    fn limits(&self, spec: &RunSpec) -> EffectiveLimits {
        let c = self.config();
        let l = spec.limits;
        EffectiveLimits {
            max_steps: l.max_steps.unwrap_or(c.max_steps),
            max_duration_ms: l.max_duration_ms.unwrap_or(c.max_run_duration_ms),
            max_replans: l.max_replans.unwrap_or(c.max_replans),
            max_retries: l.max_retries.unwrap_or(c.max_retries),
            max_tokens: l.max_tokens.unwrap_or(c.max_tokens),
        }
    }

    fn context(&self, stored: &StoredRun, last_seq: u64, cancel: CancellationToken) -> RunContext {
        RunContext::new(
            RunSeed {
                run: stored.run.clone(),
                tenant: stored.tenant.clone(),
                spec: stored.spec.clone(),
                limits: self.limits(&stored.spec),
                last_seq,
            },
            cancel,
            self.inner.services.clone(),
        )
    }

    fn spawn(&self, stored: StoredRun, last_seq: u64, resumed: bool) {
        let cancel = CancellationToken::new();
        self.inner
            .live
            .lock()
            .expect("live lock")
            .insert(stored.run.id, cancel.clone());
        self.inner.queued.fetch_add(1, Ordering::SeqCst);
        let ctx = self.context(&stored, last_seq, cancel);
        let engine = self.clone();
        let span = tracing::info_span!("run", run_id = %stored.run.id, tenant = %stored.tenant.0);
        self.inner.tracker.spawn(
            async move {
                let id = stored.run.id;
                engine.drive(ctx, resumed).await;
                engine.inner.live.lock().expect("live lock").remove(&id);
            }
            .instrument(span),
        );
    }

    /// One run's whole life, from waiting for a slot to its final event.
    async fn drive(&self, ctx: RunContext, resumed: bool) {
        let inner = &self.inner;
        if !resumed {
            ctx.emit(
                EventKind::Status,
                None,
                json!({ "status": RunStatus::Queued }),
            )
            .await;
        }
        let permit = tokio::select! {
            p = inner.slots.clone().acquire_owned() => p,
            _ = ctx.cancel.cancelled() => {
                inner.queued.fetch_sub(1, Ordering::SeqCst);
                finalize(&ctx, Ending::Cancelled).await;
                return;
            }
            _ = inner.shutdown.cancelled() => {
                inner.queued.fetch_sub(1, Ordering::SeqCst);
                return;
            }
        };
        inner.queued.fetch_sub(1, Ordering::SeqCst);
        let Ok(_permit) = permit else { return };

        ctx.update_run(|r| {
            r.started_at.get_or_insert_with(crate::domain::now);
        });
        let orchestration = ctx.run().orchestration;
        let extra = if resumed {
            Some(("message", json!("resumed after a restart")))
        } else {
            None
        };
        ctx.set_status(RunStatus::Running, extra).await;
        if resumed {
            ctx.close_interrupted_attempts().await;
        }

        // The time limit counts from this (re)start, paused while the run waits for a human.
        let ending = tokio::select! {
            outcome = guarded(execute(&ctx, orchestration)) => Ending::Done(outcome),
            _ = ctx.cancel.cancelled() => Ending::Cancelled,
            _ = ctx.clock.expired() => Ending::TimedOut(ctx.clock.budget()),
            _ = inner.shutdown.cancelled() => {
                // Leave the run as it is; the next start resumes it.
                inner.services.inputs.forget(ctx.run_id);
                inner.services.hub.flush().await;
                return;
            }
        };
        // A cancel also reaches the executor through its token and may make it fail first;
        // the caller asked for a cancel, so that is what the run records.
        let ending = if ctx.cancel.is_cancelled() {
            Ending::Cancelled
        } else {
            ending
        };
        finalize(&ctx, ending).await;
    }
}

async fn execute(ctx: &RunContext, orchestration: Orchestration) -> Outcome {
    match orchestration {
        Orchestration::Auto | Orchestration::Simple => simple::execute(ctx).await,
        Orchestration::Fixed => fixed::execute(ctx).await,
        other => Outcome::Failed(RunError::new(
            "not_supported",
            format!("orchestration `{}` is not available yet", other.as_str()),
        )),
    }
}

/// Runs an executor, turning a panic (a bug in a tool or step) into a failed run instead of a
/// run left `running` forever.
async fn guarded(fut: impl std::future::Future<Output = Outcome>) -> Outcome {
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(fut).catch_unwind().await {
        Ok(outcome) => outcome,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(panic = %what, "an executor panicked");
            Outcome::Failed(RunError::new(
                "internal_error",
                "the run hit an internal error; see the server log",
            ))
        }
    }
}

enum Ending {
    Done(Outcome),
    Cancelled,
    TimedOut(Duration),
}

/// Ends a run: closes open step attempts, then writes the terminal row with its `final` event
/// atomically, after every earlier event is durable, and only then broadcasts `final`.
async fn finalize(ctx: &RunContext, ending: Ending) {
    ctx.services.inputs.forget(ctx.run_id);
    let (completion, output, error) = match ending {
        Ending::Done(Outcome::Success(out)) => (Completion::Success, Some(out), None),
        Ending::Done(Outcome::Partial(out, err)) => (Completion::Partial, Some(out), Some(err)),
        Ending::Done(Outcome::Failed(err)) => (Completion::Error, None, Some(err)),
        Ending::Cancelled => (
            Completion::Cancelled,
            None,
            Some(RunError::new("cancelled", "the run was cancelled")),
        ),
        Ending::TimedOut(budget) => (
            Completion::Timeout,
            None,
            Some(RunError::new(
                "timed_out",
                format!(
                    "the run exceeded its time limit of {} ms",
                    budget.as_millis()
                ),
            )),
        ),
    };
    let step_status = match completion {
        Completion::Cancelled => StepStatus::Cancelled,
        _ => StepStatus::Failed,
    };
    if let Some(err) = &error {
        ctx.close_open_attempts(step_status, err).await;
    }
    let status = completion.status();
    ctx.emit(EventKind::Status, None, json!({ "status": status }))
        .await;
    let mut run = ctx.run();
    run.status = status;
    run.completion = Some(completion);
    run.output = output;
    run.error = error;
    run.usage = ctx.usage();
    run.finished_at = Some(crate::domain::now());

    let mut data = json!({
        "status": status,
        "completion": completion,
        "output": run.output,
        "usage": run.usage,
    });
    if let Some(e) = &run.error {
        data["error"] = serde_json::to_value(e).unwrap_or(Value::Null);
    }
    let hub = &ctx.services.hub;
    hub.flush().await;
    let final_event = Arc::new(ctx.next_event(EventKind::Final, None, data));
    match hub.store().finish_run(&run, &final_event).await {
        Ok(()) => hub.publish_persisted(final_event),
        Err(e) => tracing::error!(error = ?e, "could not store the end of the run"),
    }
    ctx.services.metrics.run_finished(status.as_str());
    tracing::info!(status = status.as_str(), "run finished");
}
