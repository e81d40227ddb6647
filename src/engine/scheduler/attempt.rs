//! [`run_step`]: one step, top-level or nested, with its retry policy and timeout. Every
//! attempt is recorded through [`RunContext::open_attempt`]/[`RunContext::close_attempt`];
//! the step's events (its attempts, retries and body) go to the caller's sink.

use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::domain::{ErrorCode, RetryPolicy, RunError};
use crate::plan::StepSpec;

use super::super::attempts::{AttemptEnd, AttemptKey, NewAttempt};
use super::super::sink::EventSink;
use super::frame::{Frame, Locals};
use super::kinds::{self, StepIo};

/// Where a step's first attempt stands when [`run_step`] is called.
pub(crate) enum FirstAttempt {
    /// The scheduler already opened and announced it.
    Opened(AttemptKey),
    /// Not opened yet: open it with this number.
    Number(u32),
}

/// Opens attempt `attempt` of `spec`, its `running` event into `sink`.
pub(crate) async fn open(
    frame: &Frame<'_>,
    spec: &StepSpec,
    attempt: u32,
    sink: &mut EventSink,
) -> AttemptKey {
    let new = NewAttempt {
        step_id: spec.id.as_str(),
        name: spec.display_name(),
        kind: spec.step_kind(),
        attempt,
        plan_version: frame.plan_version,
        input: None,
    };
    frame.ctx.open_attempt(new, sink).await
}

/// Runs `spec` until an attempt succeeds or its retry policy (and the run's retry budget)
/// gives up. Boxed: step kinds that hold other steps call it again.
pub(crate) fn run_step<'f>(
    frame: &'f Frame<'f>,
    spec: &'f StepSpec,
    locals: Locals<'f>,
    first: FirstAttempt,
    sink: &'f mut EventSink,
) -> BoxFuture<'f, Result<Value, RunError>> {
    Box::pin(async move {
        let ctx = frame.ctx;
        let policy = spec
            .retry_policy
            .clone()
            .or_else(|| frame.default_retry.clone())
            .unwrap_or_else(RetryPolicy::none);
        let mut key = match first {
            FirstAttempt::Opened(key) => key,
            FirstAttempt::Number(n) => open(frame, spec, n, sink).await,
        };
        let mut tries = 0u32;
        loop {
            tries += 1;
            let mut io = StepIo {
                sink: &mut *sink,
                input: None,
            };
            let result = bounded(spec, kinds::run(frame, spec, locals, &mut io)).await;
            let input = io.input;
            let error = match result {
                Ok(output) => {
                    let end = AttemptEnd::completed(output.clone()).with_input(input);
                    ctx.close_attempt(&key, end, sink).await;
                    return Ok(output);
                }
                Err(e) => e,
            };
            let may_retry =
                tries < policy.max_attempts && policy.allows(&error.code) && ctx.take_retry();
            if !may_retry {
                let end = AttemptEnd::failed(error.clone()).with_input(input);
                ctx.close_attempt(&key, end, sink).await;
                return Err(error);
            }
            let delay = policy.delay(tries + 1);
            let end = AttemptEnd::retrying(error, delay).with_input(input);
            ctx.close_attempt(&key, end, sink).await;
            tokio::time::sleep(delay).await;
            key = open(frame, spec, key.attempt + 1, sink).await;
        }
    })
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
