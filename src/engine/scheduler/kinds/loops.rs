//! `loop`: its body once per item of a `for_each` list, or while a condition holds, never
//! more than `max_iterations` times. The output is the list of each iteration's last output.

use std::collections::HashMap;

use serde_json::Value;

use crate::domain::{ErrorCode, RunError, StepPath};
use crate::plan::{LoopOver, StepSpec, StepState};

use crate::engine::runtime::sink::EventSink;
use crate::engine::scheduler::frame::{Frame, Locals};
use crate::engine::scheduler::retries::run_step;

/// A loop step's configuration.
pub(crate) struct Body<'a> {
    pub over: &'a LoopOver,
    pub max_iterations: u32,
    pub steps: &'a [StepSpec],
}

/// Runs the loop whose body's steps sit at `path[i]` in iteration `i`.
pub(crate) async fn run(
    frame: &Frame<'_>,
    body: Body<'_>,
    path: &StepPath,
    locals: Locals<'_>,
    sink: &mut EventSink,
) -> Result<Value, RunError> {
    let Body {
        over,
        max_iterations,
        steps: body,
    } = body;
    let items: Option<Vec<Value>> = match over {
        LoopOver::ForEach(list) => match frame.resolve(locals, list)? {
            Value::Array(items) => Some(items),
            other => {
                return Err(RunError::new(
                    ErrorCode::BadReference,
                    format!("for_each must give an array, got {other}"),
                ));
            }
        },
        LoopOver::While(_) => None,
    };
    let mut outputs = Vec::new();
    let mut siblings: HashMap<String, StepState> = locals.results.cloned().unwrap_or_default();
    for i in 0u64.. {
        let item = match (&items, over) {
            (Some(list), _) => match list.get(i as usize) {
                Some(v) => Some(v),
                None => break,
            },
            (None, LoopOver::While(condition)) => {
                let here = Locals {
                    path,
                    results: Some(&siblings),
                    item: None,
                    index: Some(i),
                    ..locals
                };
                if !frame.check(here, condition)? {
                    break;
                }
                None
            }
            (None, LoopOver::ForEach(_)) => unreachable!("for_each loops have items"),
        };
        if i >= u64::from(max_iterations) {
            return Err(too_many(over, max_iterations));
        }
        let mut last = Value::Null;
        let inside = path.iteration(i as usize);
        for child in body {
            let here = Locals {
                path: &inside,
                results: Some(&siblings),
                item,
                index: Some(i),
                ..locals
            };
            let out = run_step(frame, child, here, sink).await?;
            siblings.insert(child.id.to_string(), StepState::completed(out.clone()));
            last = out;
        }
        outputs.push(last);
    }
    Ok(Value::Array(outputs))
}

fn too_many(over: &LoopOver, max_iterations: u32) -> RunError {
    let message = match over {
        LoopOver::ForEach(_) => {
            format!("the list has more than max_iterations ({max_iterations}) items")
        }
        LoopOver::While(_) => {
            format!("the loop was still going after max_iterations ({max_iterations})")
        }
    };
    RunError::new(ErrorCode::LoopLimitExceeded, message)
}
