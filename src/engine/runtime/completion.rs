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
//! When the run ends, its whole history has a say ([`account`], over every plan version and
//! step attempt the store holds, so a resumed run is judged like one never stopped):
//!
//! 7. A `success` whose plan came from a re-plan that did only part of the task (the
//!    re-planner said so in `completes_task`: a recovery step standing in for the work, a
//!    plan wrapped up near a limit) is `partial`, with the failure that made it — unless the
//!    user asked for a new plan since, which redefines the task.
//!
//! Every ending gets a reason in a sentence and, for plan runs, the counts of completed,
//! failed and skipped top-level steps (each step id once, by its last attempt).
//!
//! A run past its time limit ends `timeout` before this is asked; the run task then keeps
//! what completed as the run's output ([`completed_outputs`]: each completed top-level step's
//! output under its id, so the keys say which steps it came from), as it does for a run that
//! ends `error` (a run limit, rule 1; a failed step, rule 2; any other failure) or is
//! cancelled.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use crate::domain::replan::TriggerKind;
use crate::domain::{ErrorCode, RunError, StepAttempt, StepCounts, StepId, StepStatus};
use crate::store::PlanRecord;

use super::checkpoint::StepResult;
use super::outcome::Outcome;

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

/// What a plan run's history says about how it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Account {
    pub counts: StepCounts,
    /// The last plan version, when there were re-plans.
    pub last_version: Option<u32>,
    /// Rule 7: why the plan in force does only part of the task.
    pub short: Option<RunError>,
}

/// Reads a plan run's history: `plans` oldest first, `attempts` every step attempt it made.
pub fn account<'a>(
    plans: &[PlanRecord],
    attempts: impl IntoIterator<Item = &'a StepAttempt>,
) -> Account {
    let mut last: HashMap<&str, (u32, u32, StepStatus)> = HashMap::new();
    for a in attempts.into_iter().filter(|a| a.path.is_none()) {
        let at = (a.plan_version, a.attempt, a.status);
        let entry = last.entry(a.step_id.as_str()).or_insert(at);
        if (at.0, at.1) >= (entry.0, entry.1) {
            *entry = at;
        }
    }
    let mut seen = std::collections::HashSet::new();
    let mut counts = StepCounts::default();
    for plan in plans {
        let steps = plan.plan.get("steps").and_then(Value::as_array);
        for id in steps
            .into_iter()
            .flatten()
            .filter_map(|s| s.get("id")?.as_str())
        {
            if !seen.insert(id) {
                continue;
            }
            match last.get(id).map(|&(_, _, status)| status) {
                Some(StepStatus::Completed) => counts.completed += 1,
                Some(StepStatus::Failed) => counts.failed += 1,
                _ => counts.skipped += 1,
            }
        }
    }
    let mut short = None;
    for plan in plans.iter().skip(1) {
        let (Some(trigger), Some(strategy)) = (&plan.trigger, plan.strategy) else {
            continue;
        };
        let whole = plan.completes_task.unwrap_or(true);
        if whole && trigger.kind == TriggerKind::User {
            short = None;
        } else if !whole {
            let code = trigger
                .error
                .as_ref()
                .map_or(ErrorCode::TaskIncomplete, |e| e.code.clone());
            let said = plan.explanation.as_deref().unwrap_or_default();
            short = Some(RunError::new(
                code,
                format!(
                    "the task was not done: after {}, plan version {} (`{}`) does only part of it{}",
                    trigger.describe(),
                    plan.version,
                    strategy.as_str(),
                    if said.is_empty() {
                        String::new()
                    } else {
                        format!(" ({said})")
                    }
                ),
            ));
        }
    }
    Account {
        counts,
        last_version: plans.last().filter(|_| plans.len() > 1).map(|p| p.version),
        short,
    }
}

/// The sentence a `success` gets: what its plan came to.
pub fn success_reason(account: Option<&Account>) -> String {
    let Some(account) = account else {
        return "the model answered".to_owned();
    };
    let StepCounts {
        completed,
        failed,
        skipped,
    } = account.counts;
    let mut text = format!("{completed} step{} completed", plural(completed));
    if skipped > 0 {
        text.push_str(&format!(", {skipped} skipped"));
    }
    if let Some(version) = account.last_version {
        text.push_str(&format!("; plan version {version} did the whole task"));
        if failed > 0 {
            text.push_str(&format!(
                " after {failed} step{} failed in an earlier version",
                plural(failed)
            ));
        }
    }
    text
}

fn plural(n: u32) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// What a plan run had completed, by step id: the output a run that ends without its answer
/// (timed out, failed, cancelled) keeps. `None` when nothing completed.
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

    /// What a re-planned version says it does: the whole task, or stands in for a part.
    #[derive(Clone, Copy)]
    enum Covers {
        TheTask,
        AStandIn,
    }

    fn version(n: u32, ids: &[&str], change: Option<(TriggerKind, Covers)>) -> PlanRecord {
        let steps: Vec<Value> = ids.iter().map(|id| json!({ "id": id })).collect();
        let trigger = change.map(|(kind, _)| crate::domain::replan::Trigger {
            kind,
            step_id: Some("b".into()),
            error: (kind == TriggerKind::StepFailed)
                .then(|| RunError::new(ErrorCode::from("file_not_found"), "gone")),
            message: None,
            request: None,
        });
        PlanRecord {
            version: n,
            reason: "x".into(),
            plan: json!({ "steps": steps }).into(),
            trigger,
            strategy: change.map(|_| crate::domain::replan::Strategy::Alternative),
            explanation: Some("said".into()),
            diff: None,
            restored_version: None,
            completes_task: change.map(|(_, covers)| matches!(covers, Covers::TheTask)),
            created_at: crate::domain::now(),
        }
    }

    fn attempt(id: &str, version: u32, status: StepStatus) -> StepAttempt {
        StepAttempt {
            step_id: id.into(),
            path: None,
            name: id.into(),
            kind: crate::domain::StepKind::Tool,
            status,
            attempt: 1,
            plan_version: version,
            input: None,
            output: None,
            error: None,
            started_at: crate::domain::now(),
            completed_at: None,
            duration_ms: None,
        }
    }

    #[test]
    fn the_history_counts_each_step_once_and_knows_a_stand_in_from_the_task() {
        use StepStatus::*;
        let attempts = [
            attempt("a", 1, Completed),
            attempt("b", 1, Failed),
            attempt("r", 2, Completed),
            // A nested child does not count; the planner's own step is not in any plan.
            StepAttempt {
                path: Some(crate::domain::StepPath::top("r")),
                ..attempt("child", 2, Failed)
            },
            attempt("replanner", 1, Completed),
        ];
        let v1 = version(1, &["a", "b", "c"], None);
        let stand_in = version(
            2,
            &["a", "r"],
            Some((TriggerKind::StepFailed, Covers::AStandIn)),
        );
        let got = account(&[v1.clone(), stand_in.clone()], &attempts);
        let counts = StepCounts {
            completed: 2,
            failed: 1,
            skipped: 1,
        };
        assert_eq!(got.counts, counts);
        assert_eq!(got.last_version, Some(2));
        let short = got.short.expect("version 2 stands in for the task");
        assert_eq!(short.code.as_str(), "file_not_found");
        assert!(
            short.message.contains("version 2") && short.message.contains("(said)"),
            "{short:?}"
        );

        // The user's word redefines the task.
        let asked = version(3, &["a", "r"], Some((TriggerKind::User, Covers::TheTask)));
        let got = account(&[v1.clone(), stand_in.clone(), asked], &attempts);
        assert_eq!(got.short, None);
        // Near a limit, with no failure to name.
        let wrapped = version(
            2,
            &["a", "r"],
            Some((TriggerKind::LimitNear, Covers::AStandIn)),
        );
        let got = account(&[v1.clone(), wrapped], &attempts);
        assert_eq!(got.short.unwrap().code, ErrorCode::TaskIncomplete);
        // A whole-task version after a failure: success, with the failure counted.
        let whole = version(
            2,
            &["a", "r"],
            Some((TriggerKind::StepFailed, Covers::TheTask)),
        );
        let got = account(&[v1.clone(), whole], &attempts);
        assert_eq!((&got.short, got.counts), (&None, counts));
        assert_eq!(
            success_reason(Some(&got)),
            "2 steps completed, 1 skipped; plan version 2 did the whole task after 1 step failed in an earlier version"
        );
        assert_eq!(success_reason(None), "the model answered");
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
