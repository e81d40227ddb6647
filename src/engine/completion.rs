//! The completion checker (design 001): how a plan run ended, decided by written rules over
//! what its scheduler committed. In order:
//!
//! 1. A run limit was passed → `error`, with the limit's code; a detected loop →
//!    `partial` with the outputs of the steps that completed (by id), or `error` if none did.
//! 2. A step failed under stop-on-first-failure → `error`, naming the step.
//! 3. The plan's answer step completed → `success`, whatever was still to run (skipped).
//! 4. The plan's `output` cannot be rendered → `error`.
//! 5. Every step that ran completed → `success`.
//! 6. Some steps failed under continue-on-failure → `partial`: the output, and the first
//!    failure with how many there were.
//!
//! A run past its time limit ends `timeout` before this is asked; the run task then keeps
//! what completed as the run's output ([`completed_outputs`]), as it does for a run that
//! ends `error` on any other run limit (rule 1).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::domain::{ErrorCode, RunError, StepId, StepStatus};

use super::checkpoint::StepResult;
use super::executor::Outcome;

/// What a plan run's scheduler knows when it ends.
pub struct Facts<'a> {
    /// A passed limit or a stopping failure (rules 1 and 2; the scheduler tells them apart
    /// when it records them).
    pub stopped: Option<RunError>,
    /// The answer step completed (rule 3).
    pub answered: bool,
    /// The run's output as the plan defines it (rule 4).
    pub output: Result<Value, RunError>,
    /// Top-level steps that failed for good, in plan order.
    pub failed: Vec<(&'a StepId, &'a RunError)>,
    /// The outputs of the top-level steps that completed, by id (`None` if none did).
    pub completed: Option<Value>,
}

/// The outcome the rules give.
pub fn judge(facts: Facts<'_>) -> Outcome {
    if let Some(error) = facts.stopped {
        return match facts.completed {
            Some(done) if error.code == ErrorCode::LoopDetected => Outcome::Partial(done, error),
            _ => Outcome::Failed(error),
        };
    }
    let output = match facts.output {
        Ok(output) => output,
        Err(e) => return Outcome::Failed(e),
    };
    if facts.answered {
        return Outcome::Success(output);
    }
    let Some((id, first)) = facts.failed.first() else {
        return Outcome::Success(output);
    };
    let error = RunError::new(
        first.code.clone(),
        format!(
            "{} step(s) failed; first: `{id}`: {}",
            facts.failed.len(),
            first.message
        ),
    );
    Outcome::Partial(output, error)
}

/// What a plan run had completed, by step id: the output a run cut off by its time limit
/// keeps. `None` when nothing completed.
pub fn completed_outputs(steps: &BTreeMap<String, StepResult>) -> Option<Value> {
    let done: serde_json::Map<String, Value> = steps
        .iter()
        .filter(|(_, r)| r.status == StepStatus::Completed)
        .map(|(id, r)| (id.clone(), r.output.clone().unwrap_or(Value::Null)))
        .collect();
    (!done.is_empty()).then_some(Value::Object(done))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn outcome_name(o: &Outcome) -> &'static str {
        match o {
            Outcome::Success(_) => "success",
            Outcome::Partial(..) => "partial",
            Outcome::Failed(_) => "error",
        }
    }

    #[test]
    #[rustfmt::skip]
    fn the_rules_in_order() {
        let a = StepId::new("a").unwrap();
        let flaky = RunError::new(ErrorCode::from("flaky"), "no");
        let limit = RunError::new(ErrorCode::StepLimitExceeded, "too many");
        let bad_output = RunError::new(ErrorCode::BadReference, "output: no");
        let looped = RunError::new(ErrorCode::LoopDetected, "again");
        let facts = |stopped: Option<&RunError>, answered, output, failed, completed| Facts {
            stopped: stopped.cloned(),
            answered,
            output,
            failed,
            completed,
        };
        let done = Some(json!({ "a": 1 }));
        let cases: Vec<(&str, Facts<'_>, &str)> = vec![
            ("a limit wins over an answer", facts(Some(&limit), true, Ok(json!(1)), vec![], done.clone()), "error"),
            ("a loop keeps what completed", facts(Some(&looped), false, Ok(json!(1)), vec![], done.clone()), "partial"),
            ("a loop with nothing completed", facts(Some(&looped), false, Ok(json!(1)), vec![], None), "error"),
            ("the answer step wins over failures", facts(None, true, Ok(json!(1)), vec![(&a, &flaky)], None), "success"),
            ("an output that cannot render", facts(None, false, Err(bad_output), vec![], None), "error"),
            ("everything completed", facts(None, false, Ok(json!(1)), vec![], None), "success"),
            ("failures under continue-on-failure", facts(None, false, Ok(json!(1)), vec![(&a, &flaky)], None), "partial"),
        ];
        for (name, facts, want) in cases {
            assert_eq!(outcome_name(&judge(facts)), want, "{name}");
        }
    }

    #[test]
    fn a_cut_off_run_keeps_what_completed() {
        let mut steps = BTreeMap::new();
        steps.insert("a".to_owned(), StepResult::of(&Ok(json!(1))));
        steps.insert(
            "b".to_owned(),
            StepResult::of(&Err(RunError::new(ErrorCode::from("x"), "m"))),
        );
        assert_eq!(completed_outputs(&steps), Some(json!({ "a": 1 })));
        assert_eq!(completed_outputs(&BTreeMap::new()), None);
    }
}
