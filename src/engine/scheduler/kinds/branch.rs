//! `branch`: evaluates its CEL condition; the steps of the arm not taken are skipped.

use serde_json::Value;

use crate::domain::attempt_io::{BranchOutput, Envelope};
use crate::domain::{RunError, StepId};
use crate::plan::Condition;

use crate::engine::scheduler::frame::{Frame, Locals};

pub(crate) fn run(
    frame: &Frame<'_>,
    condition: &Condition,
    locals: Locals<'_>,
) -> Result<Value, RunError> {
    let taken = frame.check(locals, condition)?;
    Ok(BranchOutput::new(taken).to_json())
}

/// The steps a branch with this output does not run.
pub(crate) fn arm_not_taken<'s>(
    output: &Value,
    then: &'s [StepId],
    otherwise: &'s [StepId],
) -> &'s [StepId] {
    if BranchOutput::read(output).is_some_and(|b| b.result) {
        otherwise
    } else {
        then
    }
}
