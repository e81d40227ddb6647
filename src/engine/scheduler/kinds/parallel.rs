//! `parallel`: children at once, each with its own held events, combined by the step's
//! aggregation. Child events are released in declaration order, so the event sequence does
//! not depend on timing. Children still running when the aggregation has its answer are
//! dropped, and their attempts closed as cancelled.

use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::Value;

use crate::domain::{ErrorCode, RunError, StepPath, StepStatus};
use crate::plan::{Aggregation, StepSpec};

use crate::engine::runtime::attempts::AttemptEnd;
use crate::engine::runtime::sink::EventSink;
use crate::engine::scheduler::frame::{Frame, Locals};
use crate::engine::scheduler::retries::run_step;

/// A child's result and the events it held, once it finished.
type Finished = Option<(Result<Value, RunError>, EventSink)>;

/// Runs `children`, who sit at `path`.
pub(crate) async fn run(
    frame: &Frame<'_>,
    children: &[StepSpec],
    aggregation: Aggregation,
    path: &StepPath,
    locals: Locals<'_>,
    sink: &mut EventSink,
) -> Result<Value, RunError> {
    let here = Locals { path, ..locals };
    let finished = run_children(frame, children, aggregation, here).await;
    let mut outputs = Vec::new();
    let mut failures = Vec::new();
    for (k, slot) in finished.into_iter().enumerate() {
        let Some((result, held)) = slot else {
            let reason = "another child finished first";
            let end = AttemptEnd::closed(
                StepStatus::Cancelled,
                Some(RunError::new(ErrorCode::Cancelled, reason)),
            )
            .with_reason(reason);
            let key = path.step(children[k].id.as_str());
            frame.ctx.close_open_step(&key, end, sink).await;
            continue;
        };
        sink.absorb(frame.ctx, held).await;
        match result {
            Ok(v) => outputs.push((k, v)),
            Err(e) => failures.push((k, e)),
        }
    }
    combine(children, aggregation, outputs, failures)
}

/// Runs the children until the aggregation has its answer; those still running then are
/// dropped and have no slot.
async fn run_children(
    frame: &Frame<'_>,
    children: &[StepSpec],
    aggregation: Aggregation,
    locals: Locals<'_>,
) -> Vec<Finished> {
    let mut running = FuturesUnordered::new();
    for (k, child) in children.iter().enumerate() {
        running.push(async move {
            let key = locals.key(child);
            let mut held = EventSink::buffered(frame.ctx, &key);
            let result = run_step(frame, child, locals, &mut held).await;
            (k, result, held)
        });
    }
    let mut finished: Vec<Finished> = (0..children.len()).map(|_| None).collect();
    while let Some((k, result, held)) = running.next().await {
        let won = result.is_ok();
        finished[k] = Some((result, held));
        let decided = match aggregation {
            Aggregation::Fastest => won,
            // Done once the earliest child that can still win has an answer.
            Aggregation::FirstSuccess => finished
                .iter()
                .find(|f| !matches!(f, Some((Err(_), _))))
                .is_some_and(|f| matches!(f, Some((Ok(_), _)))),
            Aggregation::All | Aggregation::Merge => false,
        };
        if decided {
            break;
        }
    }
    finished
}

fn combine(
    children: &[StepSpec],
    aggregation: Aggregation,
    outputs: Vec<(usize, Value)>,
    failures: Vec<(usize, RunError)>,
) -> Result<Value, RunError> {
    let all_failed = |failures: &[(usize, RunError)]| {
        let (k, e) = &failures[0];
        RunError::new(
            e.code.clone(),
            format!(
                "all {} children failed; `{}`: {}",
                children.len(),
                children[*k].id,
                e.message
            ),
        )
    };
    match aggregation {
        Aggregation::All => {
            if let Some((k, e)) = failures.into_iter().next() {
                return Err(RunError::new(
                    e.code,
                    format!("child `{}` failed: {}", children[k].id, e.message),
                ));
            }
            Ok(Value::Array(outputs.into_iter().map(|(_, v)| v).collect()))
        }
        Aggregation::Merge if outputs.is_empty() => Err(all_failed(&failures)),
        Aggregation::Merge => Ok(Value::Object(
            outputs
                .into_iter()
                .map(|(k, v)| (children[k].id.to_string(), v))
                .collect(),
        )),
        Aggregation::FirstSuccess | Aggregation::Fastest => match outputs.into_iter().next() {
            Some((_, v)) => Ok(v),
            None => Err(all_failed(&failures)),
        },
    }
}
