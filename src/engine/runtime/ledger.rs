//! What a run has queued of its plans and step attempts, kept beside the store for the run's
//! own reads: its end's account ([`super::completion::account`]) and the inputs of finished
//! steps. A run that started in this task queued its whole history through it, so those
//! reads need neither a flush of the writer nor a query. A resumed run's history began in
//! another process: its ledger is not whole, and it reads the store as before.
//!
//! The ledger folds records as the store does: an attempt's later write replaces the earlier
//! one but keeps its input when it brings none (the upsert's `COALESCE`), and a plan version
//! already there is left as it is (`ON CONFLICT DO NOTHING`).

use std::collections::HashMap;
use std::sync::Arc;

use crate::domain::{StepAttempt, StepPath};
use crate::store::{PlanRecord, Record};

use super::completion::{Account, account};
use super::context::RunContext;

/// A step attempt's row key: plan version, step key (`path/id`), attempt.
type AttemptKey = (u32, StepPath, u32);

#[derive(Debug, Default)]
pub(super) struct Ledger {
    /// Whether it holds the run's whole history (false for a resumed run).
    whole: bool,
    plans: Vec<PlanRecord>,
    /// The records queued, shared with the store's batch (no copy of inputs and outputs).
    attempts: HashMap<AttemptKey, Arc<StepAttempt>>,
}

impl Ledger {
    /// A ledger for a run whose history starts now: it holds all of it.
    pub fn whole() -> Ledger {
        Ledger {
            whole: true,
            ..Ledger::default()
        }
    }

    /// A ledger for a run with a past (resumed, or a fork): it keeps nothing and says so.
    pub fn partial() -> Ledger {
        Ledger::default()
    }

    /// Notes a record queued for the store.
    pub fn note(&mut self, record: &Record) {
        if !self.whole {
            return;
        }
        match record {
            Record::Attempt(_, a) => {
                let key = (a.plan_version, a.step(), a.attempt);
                match self.attempts.get_mut(&key) {
                    // Copied only to keep an input the later write does not bring.
                    Some(before) if a.input.is_none() && before.input.is_some() => {
                        let mut merged = (**a).clone();
                        merged.input = before.input.clone();
                        *before = Arc::new(merged);
                    }
                    Some(before) => *before = Arc::clone(a),
                    None => {
                        self.attempts.insert(key, Arc::clone(a));
                    }
                }
            }
            Record::Plan {
                version,
                reason,
                plan,
                change,
                ..
            } if self.plans.iter().all(|p| p.version != *version) => {
                self.plans.push(PlanRecord::new(
                    *version,
                    reason.clone(),
                    plan.clone(),
                    change.as_deref().cloned(),
                    crate::domain::now(),
                ));
                self.plans.sort_by_key(|p| p.version);
            }
            _ => {}
        }
    }

    /// The run's plan versions (oldest first) and step attempts, when the ledger is whole.
    pub fn history(&self) -> Option<(&[PlanRecord], Vec<&StepAttempt>)> {
        self.whole.then(|| {
            (
                &self.plans[..],
                self.attempts.values().map(|a| &**a).collect(),
            )
        })
    }
}

impl RunContext {
    /// What the run's history says about its end, when its ledger holds the whole of it (a
    /// run that started here): `Some(None)` for a run that ran no plan; `None` when the
    /// history must be read from the store.
    pub fn account_from_ledger(&self) -> Option<Option<Account>> {
        self.ledger
            .lock()
            .expect("ledger lock")
            .history()
            .map(|(plans, attempts)| (!plans.is_empty()).then(|| account(plans, attempts)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{RunId, StepKind, StepStatus};
    use serde_json::json;

    fn attempt(status: StepStatus, input: Option<serde_json::Value>) -> Record {
        let a = StepAttempt {
            step_id: "a".into(),
            path: None,
            plan_version: 1,
            attempt: 1,
            name: "a".into(),
            kind: StepKind::Tool,
            status,
            input,
            output: None,
            error: None,
            started_at: crate::domain::now(),
            completed_at: None,
            duration_ms: None,
        };
        Record::Attempt(RunId::new(), Arc::new(a))
    }

    fn plan(version: u32, reason: &str) -> Record {
        Record::Plan {
            run: RunId::new(),
            version,
            reason: reason.into(),
            plan: json!({ "steps": [] }).into(),
            change: None,
        }
    }

    #[test]
    fn records_fold_as_the_store_folds_them() {
        let mut ledger = Ledger::whole();
        ledger.note(&attempt(StepStatus::Running, Some(json!({ "x": 1 }))));
        ledger.note(&attempt(StepStatus::Completed, None));
        ledger.note(&plan(1, "initial"));
        ledger.note(&plan(1, "again"));
        let (plans, attempts) = ledger.history().unwrap();
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0].status, StepStatus::Completed);
        assert_eq!(attempts[0].input, Some(json!({ "x": 1 })), "input kept");
        assert_eq!(plans.len(), 1);
        assert_eq!(plans[0].reason, "initial", "a stored version stays");
    }

    #[test]
    fn a_resumed_runs_ledger_is_not_whole_and_says_so() {
        let mut ledger = Ledger::partial();
        ledger.note(&plan(2, "failure"));
        assert!(ledger.history().is_none());
    }
}
