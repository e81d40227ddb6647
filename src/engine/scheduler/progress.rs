//! [`Children`]: the finished children of the top-level steps still running, kept (and
//! checkpointed) so that a step resumed after a restart does not run its finished children
//! again — at every level of nesting, in every loop iteration.
//!
//! A child's result is kept once it finished (completed, or failed for good). When a step's
//! attempt ends, what its children left is thrown away: a retry runs them all again, and a
//! finished step's own result stands for them (a top-level step's commit checkpoints that).
//!
//! Teams keep typed records here the same way (an agent's turn, a chat's speaker choice, a
//! conversation under way): [`Children::once`] replays a record or does the work and records
//! it, [`Children::replay`] reads one back. A record that is there but no longer reads as its
//! type fails the run with `internal_error`: doing the work again would break "a finished
//! step never runs again".

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::domain::{ErrorCode, RunError, StepPath, StepStatus};

use crate::engine::runtime::checkpoint::{self, Delta, PlanDelta, StepResult};
use crate::engine::runtime::context::RunContext;

pub(crate) struct Children {
    plan_version: u32,
    /// By place. A std mutex: short sections, never across an await.
    done: Mutex<BTreeMap<StepPath, StepResult>>,
}

impl Children {
    /// The children a checkpoint left.
    pub fn new(plan_version: u32, restored: BTreeMap<StepPath, StepResult>) -> Children {
        Children {
            plan_version,
            done: Mutex::new(restored),
        }
    }

    /// The result the child at `key` already finished with, if it did.
    pub fn finished_before(&self, key: &StepPath) -> Option<Result<Value, RunError>> {
        let done = self.done.lock().expect("children lock");
        done.get(key).map(|r| match r.status {
            StepStatus::Completed => Ok(r.output.clone().unwrap_or(Value::Null)),
            _ => Err(r.error.clone().unwrap_or_else(|| {
                RunError::new(ErrorCode::InternalError, "the step failed before a restart")
            })),
        })
    }

    /// The child at `key` finished with `result`: kept and checkpointed, in place of what its
    /// own children left.
    pub async fn finished(
        &self,
        ctx: &RunContext,
        key: &StepPath,
        result: &Result<Value, RunError>,
    ) {
        let cleared = self.take_inside(key);
        let mut delta = PlanDelta {
            plan_version: self.plan_version,
            ..Default::default()
        };
        if cleared {
            delta.cleared.push(key.clone());
        }
        let kept = StepResult::of(result);
        self.done
            .lock()
            .expect("children lock")
            .insert(key.clone(), kept.clone());
        delta.children.insert(key.clone(), kept);
        checkpoint::save(ctx, self.plan_version, &Delta::Plan(delta)).await;
    }

    /// The attempt of the step at `key` ended and a retry follows: its children's results go.
    pub async fn clear(&self, ctx: &RunContext, key: &StepPath) {
        if self.take_inside(key) {
            let delta = PlanDelta {
                plan_version: self.plan_version,
                cleared: vec![key.clone()],
                ..Default::default()
            };
            checkpoint::save(ctx, self.plan_version, &Delta::Plan(delta)).await;
        }
    }

    /// Forgets the results inside the step at `key`; whether there were any (the caller
    /// checkpoints the clearing then).
    pub fn take_inside(&self, key: &StepPath) -> bool {
        let mut done = self.done.lock().expect("children lock");
        let before = done.len();
        done.retain(|child, _| !key.contains(child));
        done.len() != before
    }

    /// The record the work at `key` left before a restart, read as `T`; `None` when it left
    /// none. A record that does not read as `T` is an `internal_error`, never a re-run.
    pub fn replay<T: DeserializeOwned>(&self, key: &StepPath) -> Result<Option<T>, RunError> {
        let corrupt = |why: String| {
            RunError::new(
                ErrorCode::InternalError,
                format!(
                    "the stored record of `{key}` does not read back ({why}); it is not run again"
                ),
            )
        };
        match self.finished_before(key) {
            None => Ok(None),
            Some(Ok(value)) => serde_json::from_value(value)
                .map(Some)
                .map_err(|e| corrupt(e.to_string())),
            Some(Err(e)) => Err(corrupt(format!(
                "a failure where a record belongs: {}",
                e.message
            ))),
        }
    }

    /// Records `value` as what the work at `key` left (checkpointed; see [`Self::finished`]).
    pub async fn record<T: Serialize>(&self, ctx: &RunContext, key: &StepPath, value: &T) {
        let value = serde_json::to_value(value).expect("records serialise");
        self.finished(ctx, key, &Ok(value)).await;
    }

    /// Replay or record: the record the work at `key` left before a restart, else `work`'s
    /// result, recorded, with what `work` holds open (its attempts' ends, to close now that
    /// the record is checkpointed; `None` for a replayed record, whose ends were closed).
    pub async fn once<T, H>(
        &self,
        ctx: &RunContext,
        key: &StepPath,
        work: impl Future<Output = Result<(T, H), RunError>>,
    ) -> Result<(T, Option<H>), RunError>
    where
        T: Serialize + DeserializeOwned,
    {
        if let Some(done) = self.replay(key)? {
            return Ok((done, None));
        }
        let (done, held) = work.await?;
        self.record(ctx, key, &done).await;
        Ok((done, Some(held)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::engine::runtime::checkpoint::Conversation;

    fn kept(entries: &[(&str, StepResult)]) -> Children {
        let restored: BTreeMap<StepPath, StepResult> = entries
            .iter()
            .map(|(k, r)| (k.parse().unwrap(), r.clone()))
            .collect();
        Children::new(1, restored)
    }

    fn completed(output: Value) -> StepResult {
        StepResult::of(&Ok(output))
    }

    #[test]
    fn a_record_reads_back_as_its_type_or_fails_the_run_never_runs_again() {
        let convo = json!({ "round": 2, "messages": [], "answer": "done" });
        let children = kept(&[
            ("desk/triage.1/convo", completed(convo)),
            ("desk/billing.2/convo", completed(json!({ "round": "two" }))),
            (
                "desk/tech.3/convo",
                StepResult::of(&Err(RunError::new(ErrorCode::Cancelled, "x"))),
            ),
        ]);
        let at = |s: &str| s.parse::<StepPath>().unwrap();

        let read = children.replay::<Conversation>(&at("desk/triage.1/convo"));
        assert_eq!(read.unwrap().unwrap().answer.as_deref(), Some("done"));
        assert!(
            children
                .replay::<Conversation>(&at("desk/none.1/convo"))
                .unwrap()
                .is_none()
        );
        for corrupt in ["desk/billing.2/convo", "desk/tech.3/convo"] {
            let error = children.replay::<Conversation>(&at(corrupt)).unwrap_err();
            assert_eq!(error.code, ErrorCode::InternalError, "{corrupt}");
            assert!(error.message.contains(corrupt), "{}", error.message);
        }
    }
}
