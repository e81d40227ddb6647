//! One run's life on its task: wait for a slot, run the executor under the run's cancel token,
//! time limit and the server's shutdown, then finalise — the terminal row and the `final`
//! event, written together after every earlier event is durable.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::domain::event::FinalData;
use crate::domain::{Completion, ErrorCode, Payload, RunError, RunStatus, StepStatus};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::task::TaskTracker;

use super::runtime::checkpoint::{self, Restored};
use super::runtime::completion;
use super::runtime::context::RunContext;
use super::runtime::context::Services;
use super::runtime::outcome::{Executor, Outcome};
use super::runtime::{queue, slots};
use super::selector;
use super::{fixed, planner, reactive, simple};
use crate::domain::RunId;
use crate::domain::run::Settled;

/// What the engine shares with its run tasks.
pub(super) struct Inner {
    pub(super) services: Services,
    pub(super) slots: Arc<slots::Slots>,
    pub(super) queue: queue::Queue,
    /// The tokens of live run tasks. A std mutex: insert/remove/lookup only.
    pub(super) live: Mutex<HashMap<RunId, Handles>>,
    pub(super) tracker: TaskTracker,
    /// Fired on server stop: run tasks leave their runs as they are and exit.
    pub(super) shutdown: CancellationToken,
    /// Wakes [`Engine::keep_leases`] early: another replica handed runs back.
    pub(super) claim_now: tokio::sync::Notify,
    /// Wakes [`Engine::supervise_store`]: a run task stopped for the store has ended.
    pub(super) resume_now: tokio::sync::Notify,
}

/// A live run task's tokens.
pub(super) struct Handles {
    /// The user's cancel: the run ends `cancelled`.
    pub(super) cancel: CancellationToken,
    /// Leave the run as it is: the server stops (a child of `shutdown`), or another replica
    /// took the run over.
    pub(super) stop: CancellationToken,
    /// Whether the run is to pause (see [`pause`]).
    pub(super) pause: Arc<tokio::sync::watch::Sender<bool>>,
}

/// How a run ended, from the run task's point of view.
pub(super) enum Ending {
    Done(Outcome),
    Cancelled,
    TimedOut(Duration),
}

/// How a run task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Left {
    /// Finalized, or left for later on a stop.
    Done,
    /// Stopped because the store refused writes: to be resumed once it takes them again.
    ForTheStore,
}

/// One run's whole life, from waiting for a slot to its final event, under its trace span.
///
/// `stop` fires when the run must be left as it is for later: the server stops, or another
/// replica took the run over.
pub(super) async fn drive(inner: &Inner, ctx: RunContext, stop: CancellationToken) -> Left {
    let run = ctx.run();
    let span = ctx.services.telemetry.start_run(
        &ctx.run_id.to_string(),
        run.orchestration.as_str(),
        &ctx.tenant.0,
        ctx.resumed,
    );
    *ctx.trace.lock().expect("trace lock") = span;
    let left = live(inner, &ctx, &stop).await;
    // Not finalized (the server stopped, or the store went down): the run resumes later, in a
    // new trace.
    let trace = ctx.trace.lock().expect("trace lock").take();
    let stopped = opentelemetry::KeyValue::new("orca.run.status", "interrupted");
    crate::telemetry::annotate(trace.as_ref(), vec![stopped]);
    crate::telemetry::end(trace, None);
    left
}

async fn live(inner: &Inner, ctx: &RunContext, stop: &CancellationToken) -> Left {
    if !ctx.resumed {
        ctx.emit(None, Payload::status(RunStatus::Queued)).await;
    }
    tokio::select! {
        () = ctx.services.hooks.before_start(ctx) => {}
        () = ctx.cancel.cancelled() => {
            inner.queue.leave(&ctx.tenant);
            finalize(ctx, Ending::Cancelled).await;
            return Left::Done;
        }
        () = stop.cancelled() => {
            inner.queue.leave(&ctx.tenant);
            return Left::Done;
        }
    }
    let permit = tokio::select! {
        p = inner.slots.acquire(&ctx.tenant, ctx.spec.request.priority) => p,
        _ = ctx.cancel.cancelled() => {
            inner.queue.leave(&ctx.tenant);
            finalize(ctx, Ending::Cancelled).await;
            return Left::Done;
        }
        _ = stop.cancelled() => {
            inner.queue.leave(&ctx.tenant);
            return Left::Done;
        }
    };
    inner.queue.leave(&ctx.tenant);
    let Some(permit) = permit else {
        return Left::Done;
    };
    ctx.hold_slot(inner.slots.clone(), permit);

    ctx.update_run(|r| {
        r.started_at.get_or_insert_with(crate::domain::now);
    });
    let message = match ctx.resumed {
        true => Some("resumed after a restart".to_owned()),
        false => ctx.services.hooks.start_note(ctx),
    };
    // Every start announces the orchestration choice once it is made; a choice left to the
    // model is announced by `selector::settle` when the model has answered.
    let selected = ctx.run().selected;
    ctx.set_status_selected(RunStatus::Running, message.as_deref(), selected)
        .await;
    if ctx.resumed {
        ctx.restore_attempts().await;
    }

    // The time limit counts from this (re)start, paused while the run waits for a human.
    let mut health = inner.services.hub.health();
    let ending = tokio::select! {
        outcome = guarded(execute(ctx)) => Ending::Done(outcome),
        _ = ctx.cancel.cancelled() => Ending::Cancelled,
        _ = ctx.clock.expired() => Ending::TimedOut(ctx.clock.budget()),
        _ = stop.cancelled() => {
            // Leave the run as it is; the next start (or another replica) resumes it.
            inner.services.inputs.forget(ctx.run_id);
            inner.services.hub.flush().await;
            return Left::Done;
        }
        _ = health.down() => {
            // The store refuses writes: stop where the run is, as for a server stop. What it
            // queued is written once the store is back, and the engine resumes it then.
            inner.services.inputs.forget(ctx.run_id);
            tracing::warn!("the store is down: the run stops until it is back");
            return Left::ForTheStore;
        }
    };
    // A cancel also reaches the executor through its token and may make it fail first;
    // the caller asked for a cancel, so that is what the run records.
    let ending = if ctx.cancel.is_cancelled() {
        Ending::Cancelled
    } else {
        ending
    };
    finalize(ctx, ending).await;
    Left::Done
}

async fn execute(ctx: &RunContext) -> Outcome {
    let orchestration = match selector::settle(ctx).await {
        Ok(o) => o,
        Err(e) => return Outcome::Failed(e),
    };
    executor_of(orchestration).execute(ctx).await
}

/// The executor of a settled orchestration.
fn executor_of(orchestration: Settled) -> &'static dyn Executor {
    match orchestration {
        Settled::Simple => &simple::Simple,
        Settled::Fixed => &fixed::Fixed,
        Settled::Planner => &planner::Planner,
        Settled::Reactive => &reactive::Reactive,
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
                ErrorCode::InternalError,
                "the run hit an internal error; see the server log",
            ))
        }
    }
}

/// What an ending means for the run: its completion, output and error.
fn conclude(ending: Ending) -> (Completion, Option<serde_json::Value>, Option<RunError>) {
    match ending {
        Ending::Done(Outcome::Success(out)) => (Completion::Success, Some(out), None),
        Ending::Done(Outcome::Partial(out, err)) => (Completion::Partial, Some(out), Some(err)),
        Ending::Done(Outcome::Failed(err)) => (Completion::Error, None, Some(err)),
        Ending::Cancelled => (
            Completion::Cancelled,
            None,
            Some(RunError::new(ErrorCode::Cancelled, "the run was cancelled")),
        ),
        Ending::TimedOut(budget) => (
            Completion::Timeout,
            None,
            Some(RunError::new(
                ErrorCode::TimedOut,
                format!(
                    "the run exceeded its time limit of {} ms",
                    budget.as_millis()
                ),
            )),
        ),
    }
}

/// The outputs of the top-level steps a plan run had completed, from its checkpoints.
async fn completed_so_far(ctx: &RunContext) -> Option<serde_json::Value> {
    // Checkpoints queued before the cut-off are written first.
    ctx.services.hub.flush().await;
    match checkpoint::restore(ctx).await {
        Ok(Restored::Plan(progress)) => completion::completed_outputs(&progress.steps),
        _ => None,
    }
}

/// What a plan run's stored history says about its end (see [`completion::account`]);
/// `None` for a run that ran no plan, or whose history could not be read (logged).
async fn account_of(ctx: &RunContext) -> Option<completion::Account> {
    // A run that started here holds its whole history in its ledger.
    if let Some(account) = ctx.account_from_ledger() {
        return account;
    }
    // Attempts closed just now, and everything queued before, are read back.
    ctx.services.hub.flush().await;
    let store = ctx.services.store();
    let read = async {
        let plans = store.list_plans(ctx.run_id).await?;
        if plans.is_empty() {
            return Ok(None);
        }
        let attempts = store.step_attempts(ctx.run_id).await?;
        Ok::<_, crate::store::Error>(Some(completion::account(&plans, &attempts)))
    };
    read.await.unwrap_or_else(|e| {
        tracing::warn!(error = ?e, "could not read the run's history to count its steps");
        None
    })
}

/// Ends a run: closes open step attempts, then writes the terminal row with its `final` event
/// atomically, after every earlier event is durable, and only then broadcasts `final`.
pub(super) async fn finalize(ctx: &RunContext, ending: Ending) {
    ctx.services.inputs.forget(ctx.run_id);
    // A plan run that ends without its answer (cut off by its time limit or another run limit,
    // failed, cancelled) keeps what its completed top-level steps produced, by step id.
    let kept = match &ending {
        Ending::TimedOut(_) | Ending::Cancelled | Ending::Done(Outcome::Failed(_)) => {
            completed_so_far(ctx).await
        }
        Ending::Done(_) => None,
    };
    let (mut completion, output, mut error) = conclude(ending);
    let output = output.or(kept);
    if let Some(err) = &error {
        let step_status = match completion {
            Completion::Cancelled => StepStatus::Cancelled,
            _ => StepStatus::Failed,
        };
        ctx.close_open_attempts(step_status, err).await;
    }
    let account = account_of(ctx).await;
    if completion == Completion::Success
        && let Some(short) = account.as_ref().and_then(|a| a.short.clone())
    {
        completion = Completion::Partial;
        error = Some(short);
    }
    let reason = match &error {
        Some(err) => err.message.clone(),
        None => completion::success_reason(account.as_ref()),
    };
    let status = completion.status();
    ctx.emit(None, Payload::status(status)).await;
    let mut run = ctx.run();
    run.status = status;
    run.completion = Some(completion);
    run.completion_reason = Some(reason);
    run.step_counts = account.map(|a| a.counts);
    run.output = output;
    run.error = error;
    run.finished_at = Some(crate::domain::now());
    let span = ctx.trace.lock().expect("trace lock").take();
    let ended = opentelemetry::KeyValue::new("orca.run.status", status.as_str());
    crate::telemetry::annotate(span.as_ref(), vec![ended]);
    let failed = matches!(status, RunStatus::Failed | RunStatus::TimedOut);
    crate::telemetry::end(span, run.error.as_ref().filter(|_| failed));

    let data = FinalData {
        status,
        completion,
        completion_reason: run.completion_reason.clone(),
        step_counts: run.step_counts,
        output: run.output.clone(),
        usage: run.usage,
        error: run.error.clone(),
    };
    // Queued after everything the run queued, and written with it: the row and `final` in
    // one batch. Waited for until stored, unless the run is left for later meanwhile (the
    // server stops: whoever resumes it ends it).
    let hub = &ctx.services.hub;
    let stamp = || ctx.next_event(None, Payload::Final(data));
    tokio::select! {
        stored = hub.end(&ctx.emit_order, run, stamp) => if !stored {
            tracing::warn!("another replica took the run over before it ended here; it ends there");
            return;
        },
        () = ctx.stop.cancelled() => return,
    }
    ctx.services.hooks.after_end(ctx);
    ctx.services.metrics.run_finished(status.as_str());
    tracing::info!(status = status.as_str(), "run finished");
}
