//! [`Children`]: the finished children of the top-level steps still running, kept (and
//! checkpointed) so that a step resumed after a restart does not run its finished children
//! again — at every level of nesting, in every loop iteration.
//!
//! A child's result is kept once it finished (completed, or failed for good). When a step's
//! attempt ends, what its children left is thrown away: a retry runs them all again, and a
//! finished step's own result stands for them (a top-level step's commit checkpoints that).

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::Value;

use crate::domain::{ErrorCode, RunError, StepStatus};

use super::super::attempts::inside;
use super::super::checkpoint::{self, Delta, PlanDelta, StepResult};
use super::super::context::RunContext;

pub(crate) struct Children {
    plan_version: u32,
    /// By step key (`path/id`). A std mutex: short sections, never across an await.
    done: Mutex<BTreeMap<String, StepResult>>,
}

impl Children {
    /// The children a checkpoint left.
    pub fn new(plan_version: u32, restored: BTreeMap<String, StepResult>) -> Children {
        Children {
            plan_version,
            done: Mutex::new(restored),
        }
    }

    /// The result the child at `key` already finished with, if it did.
    pub fn finished_before(&self, key: &str) -> Option<Result<Value, RunError>> {
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
    pub async fn finished(&self, ctx: &RunContext, key: &str, result: &Result<Value, RunError>) {
        let cleared = self.take_inside(key);
        let mut delta = PlanDelta {
            plan_version: self.plan_version,
            ..Default::default()
        };
        if cleared {
            delta.cleared.push(key.to_owned());
        }
        let kept = StepResult::of(result);
        self.done
            .lock()
            .expect("children lock")
            .insert(key.to_owned(), kept.clone());
        delta.children.insert(key.to_owned(), kept);
        checkpoint::save(ctx, self.plan_version, &Delta::Plan(delta)).await;
    }

    /// The attempt of the step at `key` ended and a retry follows: its children's results go.
    pub async fn clear(&self, ctx: &RunContext, key: &str) {
        if self.take_inside(key) {
            let delta = PlanDelta {
                plan_version: self.plan_version,
                cleared: vec![key.to_owned()],
                ..Default::default()
            };
            checkpoint::save(ctx, self.plan_version, &Delta::Plan(delta)).await;
        }
    }

    /// Forgets the results inside the step at `key`; whether there were any (the caller
    /// checkpoints the clearing then).
    pub fn take_inside(&self, key: &str) -> bool {
        let mut done = self.done.lock().expect("children lock");
        let before = done.len();
        done.retain(|child, _| !inside(child, key));
        done.len() != before
    }
}
