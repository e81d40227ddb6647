//! [`settle`]: one step, top-level or nested, with its retry policy and timeout; [`run_step`]
//! runs a nested one to its end. Every attempt is recorded through
//! [`RunContext::open_attempt`]/[`RunContext::close_attempt`]; the step's events (its
//! attempts, retries and body) go to the caller's sink.
//!
//! A step's last attempt is closed only after its result is checkpointed, by [`run_step`]
//! for a child and by the scheduler's commit for a top-level step: a completed attempt is
//! never durable without the checkpoint that keeps it from running again.

use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::domain::{ErrorCode, RetryPolicy, RunError, StepPath};
use crate::plan::{KindSpec, StepSpec};
use tokio::sync::SemaphorePermit;

use super::frame::{Frame, Locals, current_step};
use super::kinds::{self, StepIo};
use crate::engine::runtime::attempts::{AttemptEnd, AttemptKey, HeldEnd, NewAttempt};
use crate::engine::runtime::context::RunContext;
use crate::engine::runtime::sink::EventSink;

/// Opens the next attempt of `spec` at `path` now (the caller passed the pause gate), its
/// `running` event into `sink`.
pub(crate) async fn open(
    ctx: &RunContext,
    plan_version: u32,
    spec: &StepSpec,
    path: &StepPath,
    sink: &mut EventSink,
) -> Result<AttemptKey, RunError> {
    let new = NewAttempt {
        step: &path.step(spec.id.as_str()),
        name: spec.display_name(),
        kind: spec.step_kind(),
        plan_version,
        input: None,
    };
    ctx.open_now(new, sink).await
}

/// Opens the next attempt of `spec` at `path` once no pause holds it: a breakpoint on the
/// step pauses the run before its first attempt.
async fn open_gated(
    ctx: &RunContext,
    plan_version: u32,
    spec: &StepSpec,
    path: &StepPath,
    sink: &mut EventSink,
) -> Result<AttemptKey, RunError> {
    let step = path.step(spec.id.as_str());
    ctx.breakpoint(&step).await?;
    ctx.pause_gate(&step).await;
    open(ctx, plan_version, spec, path, sink).await
}

/// A step whose attempts are over: what it gave, and its last attempt, held open until the
/// result is checkpointed.
pub(crate) struct Settled {
    pub result: Result<Value, RunError>,
    pub last: HeldEnd,
}

/// Runs a child step `spec` (at `locals.path`, inside a `sequential`, `loop` or `parallel`)
/// to its end: checkpoints its result and closes its last attempt. A child that finished
/// before a restart is not run again. Boxed: step kinds that hold other steps call it again.
pub(crate) fn run_step<'f>(
    frame: &'f Frame<'f>,
    spec: &'f StepSpec,
    locals: Locals<'f>,
    sink: &'f mut EventSink,
) -> BoxFuture<'f, Result<Value, RunError>> {
    Box::pin(async move {
        let ctx = frame.ctx;
        let key = locals.key(spec);
        if let Some(result) = frame.children.finished_before(&key) {
            return result;
        }
        let settled = settle(frame, spec, locals, None, sink).await?;
        frame.children.finished(ctx, &key, &settled.result).await;
        settled.last.close(ctx, sink).await;
        settled.result
    })
}

/// Runs `spec` (at `locals.path`) until an attempt succeeds or its retry policy (and the
/// run's retry budget) gives up, and hands back its last attempt unclosed (see [`Settled`]).
/// `opened` is its first attempt when the caller already opened it. An error here means the
/// step could not go on at all (the run is ending, or past a limit); its open attempt is then
/// closed with the run.
pub(crate) async fn settle(
    frame: &Frame<'_>,
    spec: &StepSpec,
    locals: Locals<'_>,
    opened: Option<AttemptKey>,
    sink: &mut EventSink,
) -> Result<Settled, RunError> {
    let ctx = frame.ctx;
    let key = locals.key(spec);
    let policy = spec
        .retry_policy
        .clone()
        .or_else(|| frame.default_retry.clone())
        .unwrap_or_else(RetryPolicy::none);
    // Leaf work (a model, a tool, a timer) holds one of the plan's slots while an attempt
    // runs; a step opened before it had one (a top-level step, announced at its start)
    // takes it now.
    let mut slot = leaf_slot(frame, spec).await?;
    let mut attempt = match opened {
        Some(key) => key,
        None => open_gated(ctx, frame.plan_version, spec, locals.path, sink).await?,
    };
    let mut tries = 0u32;
    loop {
        tries += 1;
        let mut io = StepIo {
            sink: &mut *sink,
            input: None,
        };
        let me = current_step(spec, locals.path, attempt.attempt);
        let here = Locals {
            step: Some(&me),
            ..locals
        };
        let result = bounded(spec, kinds::run(frame, spec, here, &mut io))
            .await
            .and_then(|output| match &spec.expect {
                Some(expect) => frame.meets(here, expect, &output).map(|()| output),
                None => Ok(output),
            });
        let input = io.input;
        let error = match result {
            Ok(output) => {
                let end = AttemptEnd::completed(output.clone()).with_input(input);
                return Ok(Settled {
                    result: Ok(output),
                    last: HeldEnd::new(attempt, end),
                });
            }
            Err(e) => e,
        };
        let may_retry =
            tries < policy.max_attempts && policy.allows(&error.code) && ctx.take_retry();
        if !may_retry {
            let end = AttemptEnd::failed(error.clone()).with_input(input);
            return Ok(Settled {
                result: Err(error),
                last: HeldEnd::new(attempt, end),
            });
        }
        let delay = policy.delay(tries + 1);
        let end = AttemptEnd::retrying(error, delay).with_input(input);
        ctx.close_attempt(&attempt, end, sink).await;
        frame.children.clear(ctx, &key).await;
        drop(slot);
        tokio::time::sleep(delay).await;
        slot = leaf_slot(frame, spec).await?;
        attempt = open_gated(ctx, frame.plan_version, spec, locals.path, sink).await?;
    }
}

/// A slot for a step whose kind is leaf work; `None` for the others (steps that hold other
/// steps take no slot, so nested steps can never wait on their own parent; a human answer is
/// no work).
async fn leaf_slot<'f>(
    frame: &'f Frame<'f>,
    spec: &StepSpec,
) -> Result<Option<SemaphorePermit<'f>>, RunError> {
    match spec.kind {
        KindSpec::Tool { .. }
        | KindSpec::Llm { .. }
        | KindSpec::Function { .. }
        | KindSpec::Wait(_) => frame.slot().await.map(Some),
        _ => Ok(None),
    }
}

/// The step's body, within the step's `timeout_ms` when it has one.
async fn bounded(
    spec: &StepSpec,
    body: impl Future<Output = Result<Value, RunError>>,
) -> Result<Value, RunError> {
    let Some(ms) = spec.timeout_ms else {
        return body.await;
    };
    match tokio::time::timeout(Duration::from_millis(ms), body).await {
        Ok(result) => result,
        Err(_) => Err(RunError::new(
            ErrorCode::StepTimeout,
            format!("the step did not finish within {ms} ms"),
        )),
    }
}
