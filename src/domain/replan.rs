//! Re-planning as data: what triggered a new plan version, the strategy the re-planner used,
//! and how the version differs from the one before. Stored with each version
//! (`GET /v1/runs/{id}/plans`) and carried by its `plan` event.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::RunError;
use super::text_enum::text_enum;

/// The step re-planning calls are recorded as.
pub const REPLANNING_STEP: &str = "replanner";

text_enum! {
    /// Why a reactive run needs a new plan.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ToSchema)]
    pub enum TriggerKind {
        /// A step failed after its retries.
        StepFailed = "step_failed",
        /// A step's `expect` condition was false for its output.
        UnexpectedResult = "unexpected_result",
        /// A step ran past its `timeout_ms` (after its retries).
        StepTimeout = "step_timeout",
        /// The user asked for a change (`POST /v1/runs/{id}/replan`).
        User = "user",
        /// The run is close to a limit (its token budget).
        LimitNear = "limit_near",
    }
}

/// What triggered a new plan version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Trigger {
    pub kind: TriggerKind,
    /// The step that failed or surprised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    /// Its error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// The user's message, or which limit is near.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The number of the user's request (`user` triggers), 1 for a run's first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<u64>,
}

impl Trigger {
    /// One line for people: the kind and what it is about.
    pub fn describe(&self) -> String {
        let mut text = self.kind.as_str().to_owned();
        if let Some(step) = &self.step_id {
            text.push_str(&format!(" at step `{step}`"));
        }
        if let Some(error) = &self.error {
            text.push_str(&format!(": {} ({})", error.message, error.code));
        }
        if let Some(message) = &self.message {
            text.push_str(&format!(": {message}"));
        }
        text
    }
}

text_enum! {
    /// How a re-planner answers a trigger.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ToSchema)]
    pub enum Strategy {
        /// The same plan again: what failed runs again.
        Retry = "retry",
        /// The failed part replaced by another way.
        Alternative = "alternative",
        /// The steps not yet run rewritten; the completed ones kept.
        Partial = "partial",
        /// A whole new plan; completed outputs are in its context.
        Complete = "complete",
        /// Back to an earlier version.
        Restore = "restore",
    }
}

/// How a plan version differs from the one before, by top-level step id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PlanDiff {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Steps in both whose definitions differ.
    pub changed: Vec<String>,
    /// The plan's `settings`, `variables` or `output` differ.
    pub plan_changed: bool,
}

/// A plan document's top-level steps by id (steps without a string id left out).
pub fn steps_by_id(doc: &Value) -> BTreeMap<&str, &Value> {
    doc.get("steps")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| Some((s.get("id")?.as_str()?, s)))
        .collect()
}

impl PlanDiff {
    /// The difference from plan document `before` to `after`.
    pub fn between(before: &Value, after: &Value) -> PlanDiff {
        let (old, new) = (steps_by_id(before), steps_by_id(after));
        let mut diff = PlanDiff {
            added: new
                .keys()
                .filter(|id| !old.contains_key(*id))
                .map(|id| id.to_string())
                .collect(),
            removed: old
                .keys()
                .filter(|id| !new.contains_key(*id))
                .map(|id| id.to_string())
                .collect(),
            changed: new
                .iter()
                .filter(|(id, step)| old.get(*id).is_some_and(|o| o != *step))
                .map(|(id, _)| id.to_string())
                .collect(),
            plan_changed: false,
        };
        diff.plan_changed = ["settings", "variables", "context", "output"]
            .iter()
            .any(|k| before.get(k) != after.get(k));
        diff
    }
}

/// Everything a version after the first records about how it came to be.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanChange {
    pub trigger: Trigger,
    pub strategy: Strategy,
    /// What the re-planner said of its choice.
    pub explanation: String,
    pub diff: PlanDiff,
    /// For `restore`: the version gone back to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_version: Option<u32>,
    /// The re-planner's word on whether the new version still does the whole task (`false`:
    /// it does part of it, or only says what could not be done). Versions stored before it
    /// was asked read `true`.
    #[serde(default = "whole_task")]
    pub completes_task: bool,
}

fn whole_task() -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_diff_names_steps_added_removed_and_changed() {
        let before = json!({ "steps": [
            { "id": "a", "kind": "wait", "input": { "duration_ms": 1 } },
            { "id": "b", "kind": "wait", "input": { "duration_ms": 1 } },
            { "id": "c", "kind": "wait", "input": { "duration_ms": 1 } }] });
        let after = json!({ "steps": [
            { "id": "a", "kind": "wait", "input": { "duration_ms": 1 } },
            { "id": "c", "kind": "wait", "input": { "duration_ms": 2 } },
            { "id": "d", "kind": "wait", "input": { "duration_ms": 1 } }],
            "output": "{{ steps.d.output }}" });
        let diff = PlanDiff::between(&before, &after);
        assert_eq!(diff.added, ["d"]);
        assert_eq!(diff.removed, ["b"]);
        assert_eq!(diff.changed, ["c"]);
        assert!(diff.plan_changed);
        assert_eq!(PlanDiff::between(&after, &after), PlanDiff::default());
    }
}
