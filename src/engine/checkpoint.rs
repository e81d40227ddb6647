//! Checkpoints: typed, versioned snapshots of a run's progress, written through the event
//! writer (so each is durable before any later event of its run) and read back on resume.
//!
//! Stored JSON is `{"format": 2, "kind": "plan" | "conversation", ...}`. Checkpoints written
//! before formats were numbered (format 1: `{"plan_version", "steps", "variables"}` or
//! `{"conversation": {...}}`) are still read, so a server upgraded mid-run resumes its runs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::domain::{ErrorCode, RunError, StepStatus};
use crate::llm::Message;
use crate::store::Record;

use super::context::RunContext;

/// The format this build writes.
pub const FORMAT: u32 = 2;

/// What a checkpoint holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Snapshot {
    /// A plan run: the result of every top-level step that finished, and the variables.
    Plan(PlanProgress),
    /// A simple run: the conversation with the model so far.
    Conversation(Conversation),
}

/// A plan run's progress.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PlanProgress {
    pub plan_version: u32,
    /// By step id: completed, failed and skipped top-level steps.
    pub steps: BTreeMap<String, StepResult>,
    #[serde(default)]
    pub variables: Map<String, Value>,
}

/// How one step finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    pub status: StepStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
}

/// A conversation with a model that may call tools, as a simple run (or an agent) keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    /// The model round the conversation is in (1-based; 0 before the first call).
    pub round: u32,
    pub messages: Vec<Message>,
}

#[derive(Serialize, Deserialize)]
struct Stored {
    format: u32,
    #[serde(flatten)]
    snapshot: Snapshot,
}

/// Format 1: plan progress as it is, or a conversation under one key.
#[derive(Deserialize)]
#[serde(untagged)]
enum Legacy {
    Conversation { conversation: Conversation },
    Plan(PlanProgress),
}

impl Snapshot {
    pub fn to_json(&self) -> Value {
        serde_json::to_value(Stored {
            format: FORMAT,
            snapshot: self.clone(),
        })
        .expect("checkpoints serialise")
    }

    /// Reads a stored checkpoint of any format this build knows.
    pub fn from_json(state: Value) -> Result<Snapshot, String> {
        match state.get("format").map(Value::as_u64) {
            None => serde_json::from_value::<Legacy>(state)
                .map(|legacy| match legacy {
                    Legacy::Conversation { conversation } => Snapshot::Conversation(conversation),
                    Legacy::Plan(progress) => Snapshot::Plan(progress),
                })
                .map_err(|e| e.to_string()),
            Some(Some(n)) if n == u64::from(FORMAT) => serde_json::from_value::<Stored>(state)
                .map(|s| s.snapshot)
                .map_err(|e| e.to_string()),
            Some(other) => Err(format!(
                "checkpoint format {} is not one this build reads (it writes {FORMAT})",
                other.map_or_else(|| "(not a number)".to_owned(), |n| n.to_string())
            )),
        }
    }
}

/// Queues checkpoint `id` of the run; it is written in order with the run's events.
pub async fn save(ctx: &RunContext, id: u64, plan_version: u32, snapshot: &Snapshot) {
    ctx.record(Record::Checkpoint {
        run: ctx.run_id,
        id,
        plan_version,
        state: snapshot.to_json(),
    })
    .await;
}

/// The run's newest checkpoint and its id, `None` if it has none.
pub async fn latest(ctx: &RunContext) -> Result<Option<(u64, Snapshot)>, RunError> {
    let stored = ctx
        .services
        .store()
        .latest_checkpoint(ctx.run_id)
        .await
        .map_err(|e| {
            RunError::new(
                ErrorCode::StoreUnavailable,
                format!("could not read the run's checkpoint: {e}"),
            )
        })?;
    let Some(checkpoint) = stored else {
        return Ok(None);
    };
    let snapshot = Snapshot::from_json(checkpoint.state).map_err(|e| {
        RunError::new(
            ErrorCode::InternalError,
            format!("the run's checkpoint {} cannot be read: {e}", checkpoint.id),
        )
    })?;
    Ok(Some((checkpoint.id, snapshot)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn snapshots_round_trip_with_their_format() {
        let mut progress = PlanProgress {
            plan_version: 1,
            ..Default::default()
        };
        progress.steps.insert(
            "a".into(),
            StepResult {
                status: StepStatus::Completed,
                output: Some(json!(3)),
                error: None,
            },
        );
        let snapshot = Snapshot::Plan(progress);
        let stored = snapshot.to_json();
        assert_eq!(stored["format"], FORMAT);
        assert_eq!(stored["kind"], "plan");
        assert_eq!(stored["steps"]["a"]["status"], "completed");
        assert_eq!(Snapshot::from_json(stored).unwrap(), snapshot);
    }

    #[test]
    fn format_1_checkpoints_are_still_read() {
        let plan = json!({"plan_version": 1, "variables": {"x": 1},
            "steps": {"a": {"status": "failed", "error": {"code": "flaky", "message": "m"}}}});
        let Snapshot::Plan(p) = Snapshot::from_json(plan).unwrap() else {
            panic!("not a plan")
        };
        assert_eq!(p.steps["a"].error.as_ref().unwrap().code, "flaky");
        assert_eq!(p.variables["x"], 1);
        let convo = json!({"conversation": {"round": 2, "messages": []}});
        let Snapshot::Conversation(c) = Snapshot::from_json(convo).unwrap() else {
            panic!("not a conversation")
        };
        assert_eq!(c.round, 2);
    }

    #[test]
    fn unknown_formats_are_refused() {
        let err = Snapshot::from_json(json!({"format": 99, "kind": "plan"})).unwrap_err();
        assert!(err.contains("format 99"), "{err}");
    }
}
