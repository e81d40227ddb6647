//! `sequential`: children one after another, each seeing its earlier siblings' results; a
//! branch among them skips the later siblings of the arm it did not take.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::domain::event::StepData;
use crate::domain::{RunError, StepPath, StepStatus};
use crate::plan::{KindSpec, StepSpec, StepState};

use super::arm_not_taken;
use crate::engine::runtime::sink::EventSink;
use crate::engine::scheduler::frame::{Frame, Locals};
use crate::engine::scheduler::retries::run_step;

/// Runs `children`, who sit at `path`; the last one's output.
pub(crate) async fn run(
    frame: &Frame<'_>,
    children: &[StepSpec],
    path: &StepPath,
    locals: Locals<'_>,
    sink: &mut EventSink,
) -> Result<Value, RunError> {
    run_all(frame, children, path, locals, sink)
        .await
        .map(|(last, _)| last)
}

/// Runs `children`, who sit at `path`: the last one's output, and every child's result (with
/// what `locals` could already read).
pub(crate) async fn run_all(
    frame: &Frame<'_>,
    children: &[StepSpec],
    path: &StepPath,
    locals: Locals<'_>,
    sink: &mut EventSink,
) -> Result<(Value, HashMap<String, StepState>), RunError> {
    let mut siblings: HashMap<String, StepState> = locals.results.cloned().unwrap_or_default();
    let mut skipped: HashSet<&str> = HashSet::new();
    let mut last = Value::Null;
    for child in children {
        if skipped.contains(child.id.as_str()) {
            siblings.insert(child.id.to_string(), StepState::skipped());
            let event = StepData::new(
                child.id.as_str(),
                child.display_name(),
                child.step_kind(),
                StepStatus::Skipped,
                0,
            )
            .at(path)
            .with_reason("its branch was not taken");
            sink.emit(frame.ctx, Some(&path.step(child.id.as_str())), event)
                .await;
            continue;
        }
        let here = Locals {
            path,
            results: Some(&siblings),
            ..locals
        };
        let out = run_step(frame, child, here, sink).await?;
        if let KindSpec::Branch {
            then, otherwise, ..
        } = &child.kind
        {
            skipped.extend(
                arm_not_taken(&out, then, otherwise)
                    .iter()
                    .map(|s| s.as_str()),
            );
        }
        siblings.insert(child.id.to_string(), StepState::completed(out.clone()));
        last = out;
    }
    Ok((last, siblings))
}
