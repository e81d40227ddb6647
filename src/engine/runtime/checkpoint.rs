//! Checkpoints: typed, versioned records of a run's progress, written through the event writer
//! (so each is durable before any later event of its run) and read back on resume.
//!
//! Each checkpoint is a *delta*: what changed since the one before (a step's result, a child's
//! result, the children a retried step threw away, the messages a conversation gained). A
//! resumed run folds all of them in order ([`restore`]), so every output is stored once and a
//! long run's checkpoints grow linearly, not quadratically.
//!
//! Stored JSON is `{"format": 2, "kind": "plan" | "conversation", ...}`. Checkpoints written
//! before formats were numbered (format 1: a whole snapshot, `{"plan_version", "steps",
//! "variables"}` or `{"conversation": {...}}`) are still read, as deltas that replace all
//! before them, so a server upgraded mid-run resumes its runs.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::domain::{ErrorCode, RunError, StepPath, StepStatus};
use crate::llm::Message;
use crate::store::{Checkpoint, Record};

use super::context::RunContext;

/// The format this build writes.
pub const FORMAT: u32 = 2;

/// What one checkpoint records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Delta {
    Plan(PlanDelta),
    Conversation(ConversationDelta),
}

/// What a plan run did since its previous checkpoint.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PlanDelta {
    pub plan_version: u32,
    /// This delta replaces everything before it (a format-1 snapshot).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset: bool,
    /// Steps whose children's results were thrown away (the step ended or is tried again),
    /// by step key. Applied first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cleared: Vec<StepPath>,
    /// Top-level steps that committed, by id: completed, failed or skipped.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub steps: BTreeMap<String, StepResult>,
    /// Children (of sequential, parallel and loop steps still running) that finished, by step
    /// place.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub children: BTreeMap<StepPath, StepResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variables: Option<Map<String, Value>>,
    /// Places whose breakpoint the run was resumed past (see [`super::pause`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub released: Vec<StepPath>,
}

/// A plan run's progress: every delta folded.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PlanProgress {
    /// The plan version of the last delta folded in (0 before any).
    pub plan_version: u32,
    pub steps: BTreeMap<String, StepResult>,
    pub children: BTreeMap<StepPath, StepResult>,
    pub variables: Map<String, Value>,
    /// Places whose breakpoint the run was resumed past.
    pub released: Vec<StepPath>,
}

impl PlanProgress {
    fn apply(&mut self, delta: PlanDelta) {
        if delta.reset {
            *self = PlanProgress::default();
        }
        for key in &delta.cleared {
            self.children.retain(|child, _| !key.contains(child));
        }
        self.plan_version = delta.plan_version;
        self.steps.extend(delta.steps);
        self.children.extend(delta.children);
        if let Some(variables) = delta.variables {
            self.variables = variables;
        }
        self.released.extend(delta.released);
    }
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

impl StepResult {
    /// The result a finished step gave: its output, or its error.
    pub fn of(result: &Result<Value, RunError>) -> StepResult {
        match result {
            Ok(output) => StepResult {
                status: StepStatus::Completed,
                output: Some(output.clone()),
                error: None,
            },
            Err(error) => StepResult {
                status: StepStatus::Failed,
                output: None,
                error: Some(error.clone()),
            },
        }
    }
}

/// A conversation with a model that may call tools, as a simple run (or an agent) keeps it;
/// an agent's turn checkpoints it whole (its serde form).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Conversation {
    /// The model round the conversation is in (1-based; 0 before the first call).
    pub round: u32,
    pub messages: Vec<Message>,
    /// The model's final answer, once it gave one (kept so a conversation resumed after it
    /// does not ask the model again).
    #[serde(default)]
    pub answer: Option<String>,
}

/// What a conversation gained since its previous checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConversationDelta {
    /// These messages are the whole conversation (the first checkpoint, a format-1 snapshot).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset: bool,
    pub round: u32,
    pub messages: Vec<Message>,
    /// The model's final answer: the conversation is over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}

impl Conversation {
    fn apply(&mut self, delta: ConversationDelta) {
        if delta.reset {
            self.messages.clear();
        }
        self.round = delta.round;
        self.messages.extend(delta.messages);
        self.answer = delta.answer;
    }
}

#[derive(Serialize, Deserialize)]
struct Stored {
    format: u32,
    #[serde(flatten)]
    delta: Delta,
}

/// Format 1: a whole snapshot, of a conversation under one key, or of plan progress.
#[derive(Deserialize)]
#[serde(untagged)]
enum Legacy {
    Conversation {
        conversation: LegacyConversation,
    },
    Plan {
        #[serde(default)]
        plan_version: u32,
        #[serde(default)]
        steps: BTreeMap<String, StepResult>,
        #[serde(default)]
        variables: Map<String, Value>,
    },
}

#[derive(Deserialize)]
struct LegacyConversation {
    round: u32,
    messages: Vec<Message>,
}

impl Delta {
    pub fn to_json(&self) -> Value {
        serde_json::to_value(Stored {
            format: FORMAT,
            delta: self.clone(),
        })
        .expect("checkpoints serialise")
    }

    /// Reads a stored checkpoint of any format this build knows.
    pub fn from_json(state: Value) -> Result<Delta, String> {
        match state.get("format").map(Value::as_u64) {
            None => serde_json::from_value::<Legacy>(state)
                .map(Legacy::into_delta)
                .map_err(|e| e.to_string()),
            Some(Some(n)) if n == u64::from(FORMAT) => serde_json::from_value::<Stored>(state)
                .map(|s| s.delta)
                .map_err(|e| e.to_string()),
            Some(other) => Err(format!(
                "checkpoint format {} is not one this build reads (it writes {FORMAT})",
                other.map_or_else(|| "(not a number)".to_owned(), |n| n.to_string())
            )),
        }
    }
}

impl Legacy {
    fn into_delta(self) -> Delta {
        match self {
            Legacy::Conversation { conversation } => Delta::Conversation(ConversationDelta {
                reset: true,
                round: conversation.round,
                messages: conversation.messages,
                answer: None,
            }),
            Legacy::Plan {
                plan_version,
                steps,
                variables,
            } => Delta::Plan(PlanDelta {
                plan_version,
                reset: true,
                steps,
                variables: Some(variables),
                ..Default::default()
            }),
        }
    }
}

/// Queues the run's next checkpoint; it is written in order with the run's events.
pub async fn save(ctx: &RunContext, plan_version: u32, delta: &Delta) {
    let id = ctx.checkpoints.fetch_add(1, Ordering::SeqCst) + 1;
    ctx.record(Record::Checkpoint {
        run: ctx.run_id,
        id,
        plan_version,
        state: delta.to_json(),
    })
    .await;
}

/// What a run's checkpoints add up to.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Restored {
    /// No checkpoint yet.
    #[default]
    Nothing,
    Plan(PlanProgress),
    Conversation(Conversation),
}

/// Folds every checkpoint of the run, oldest first, and numbers the run's next checkpoint
/// after them.
pub async fn restore(ctx: &RunContext) -> Result<Restored, RunError> {
    let stored = ctx
        .services
        .store()
        .list_checkpoints(ctx.run_id)
        .await
        .map_err(|e| {
            RunError::new(
                ErrorCode::StoreUnavailable,
                format!("could not read the run's checkpoints: {e}"),
            )
        })?;
    if let Some(last) = stored.last() {
        ctx.checkpoints.fetch_max(last.id, Ordering::SeqCst);
    }
    fold(stored)
}

/// What `stored` checkpoints (one run's, oldest first) add up to.
pub fn fold(stored: impl IntoIterator<Item = Checkpoint>) -> Result<Restored, RunError> {
    let mut restored = Restored::Nothing;
    for checkpoint in stored {
        let unreadable = |e: String| {
            RunError::new(
                ErrorCode::InternalError,
                format!("the run's checkpoint {} cannot be read: {e}", checkpoint.id),
            )
        };
        let delta = Delta::from_json(checkpoint.state).map_err(unreadable)?;
        restored = match (restored, delta) {
            (Restored::Nothing, Delta::Plan(d)) => fold_plan(PlanProgress::default(), d),
            (Restored::Plan(p), Delta::Plan(d)) => fold_plan(p, d),
            (Restored::Nothing, Delta::Conversation(d)) => fold_talk(Conversation::default(), d),
            (Restored::Conversation(c), Delta::Conversation(d)) => fold_talk(c, d),
            _ => {
                return Err(unreadable(
                    "it mixes plan and conversation checkpoints".into(),
                ));
            }
        };
    }
    Ok(restored)
}

/// The id of the first of `stored` (one plan run's checkpoints, oldest first) by which `step`
/// (a top-level step's id, or a nested step's path) had finished: it, or the top-level step
/// it sits in. `None` if it never had.
pub fn first_finishing(stored: &[Checkpoint], step: &StepPath) -> Result<Option<u64>, RunError> {
    let mut progress = PlanProgress::default();
    for checkpoint in stored {
        match Delta::from_json(checkpoint.state.clone()) {
            Ok(Delta::Plan(delta)) => progress.apply(delta),
            Ok(Delta::Conversation(_)) => return Ok(None),
            Err(e) => {
                return Err(RunError::new(
                    ErrorCode::InternalError,
                    format!("the run's checkpoint {} cannot be read: {e}", checkpoint.id),
                ));
            }
        }
        let finished = progress.children.contains_key(step)
            || progress
                .steps
                .keys()
                .any(|id| StepPath::top(id).encloses(step));
        if finished {
            return Ok(Some(checkpoint.id));
        }
    }
    Ok(None)
}

fn fold_plan(mut progress: PlanProgress, delta: PlanDelta) -> Restored {
    progress.apply(delta);
    Restored::Plan(progress)
}

fn fold_talk(mut convo: Conversation, delta: ConversationDelta) -> Restored {
    convo.apply(delta);
    Restored::Conversation(convo)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn completed(v: Value) -> StepResult {
        StepResult::of(&Ok(v))
    }

    #[test]
    fn deltas_round_trip_with_their_format() {
        let mut delta = PlanDelta {
            plan_version: 1,
            ..Default::default()
        };
        delta.steps.insert("a".into(), completed(json!(3)));
        delta.cleared.push(StepPath::top("a"));
        let delta = Delta::Plan(delta);
        let stored = delta.to_json();
        assert_eq!(stored["format"], FORMAT);
        assert_eq!(stored["kind"], "plan");
        assert_eq!(stored["steps"]["a"]["status"], "completed");
        assert!(stored.get("children").is_none(), "{stored}");
        assert_eq!(Delta::from_json(stored).unwrap(), delta);
    }

    fn path(s: &str) -> StepPath {
        s.parse().unwrap()
    }

    #[test]
    fn folding_clears_a_retried_steps_children_and_keeps_the_rest() {
        let mut progress = PlanProgress::default();
        let mut first = PlanDelta::default();
        first.children.insert(path("seq/c1"), completed(json!(1)));
        first
            .children
            .insert(path("each[0]/body"), completed(json!(2)));
        first.children.insert(path("seqx/c"), completed(json!(3)));
        progress.apply(first);
        progress.apply(PlanDelta {
            cleared: vec![path("seq"), path("each")],
            ..Default::default()
        });
        let keys: Vec<&str> = progress.children.keys().map(StepPath::as_str).collect();
        assert_eq!(keys, ["seqx/c"]);
    }

    #[test]
    fn format_1_snapshots_are_still_read_as_resets() {
        let plan = json!({"plan_version": 1, "variables": {"x": 1},
            "steps": {"a": {"status": "failed", "error": {"code": "flaky", "message": "m"}}}});
        let Delta::Plan(p) = Delta::from_json(plan).unwrap() else {
            panic!("not a plan")
        };
        assert!(p.reset);
        assert_eq!(p.steps["a"].error.as_ref().unwrap().code, "flaky");
        assert_eq!(p.variables.unwrap()["x"], 1);
        let convo = json!({"conversation": {"round": 2, "messages": []}});
        let Delta::Conversation(c) = Delta::from_json(convo).unwrap() else {
            panic!("not a conversation")
        };
        assert!(c.reset);
        assert_eq!(c.round, 2);
    }

    #[test]
    fn a_conversations_answer_is_kept_until_a_later_delta_goes_on() {
        let answered = ConversationDelta {
            reset: false,
            round: 2,
            messages: Vec::new(),
            answer: Some("42".into()),
        };
        let stored = Delta::Conversation(answered.clone()).to_json();
        assert_eq!(stored["answer"], "42");
        assert_eq!(
            Delta::from_json(stored).unwrap(),
            Delta::Conversation(answered.clone())
        );
        let asked = |content: &str| Message::User {
            content: content.into(),
        };
        let mut convo = Conversation {
            round: 1,
            messages: vec![asked("q")],
            answer: None,
        };
        convo.apply(answered);
        assert_eq!(
            (convo.answer.as_deref(), convo.messages.len()),
            (Some("42"), 1)
        );
        // Sent back to be repaired: the conversation goes on without an answer.
        convo.apply(ConversationDelta {
            reset: false,
            round: 3,
            messages: vec![asked("again")],
            answer: None,
        });
        assert_eq!((convo.answer.as_deref(), convo.messages.len()), (None, 2));
        // A delta written before answers were kept has none.
        let older = json!({"format": 2, "kind": "conversation", "round": 1, "messages": []});
        let Delta::Conversation(c) = Delta::from_json(older).unwrap() else {
            panic!("not a conversation")
        };
        assert_eq!(c.answer, None);
    }

    #[test]
    fn unknown_formats_are_refused() {
        let err = Delta::from_json(json!({"format": 99, "kind": "plan"})).unwrap_err();
        assert!(err.contains("format 99"), "{err}");
    }

    #[tokio::test]
    async fn deltas_saved_then_restored_give_the_same_progress_and_number_on() {
        let ctx = RunContext::for_test().build().await;
        let mut progress = PlanProgress::default();
        let mut first = PlanDelta {
            plan_version: 1,
            variables: Some(json!({"x": 1}).as_object().unwrap().clone()),
            ..Default::default()
        };
        first.steps.insert("a".into(), completed(json!(1)));
        first.children.insert(path("b/c"), completed(json!(2)));
        let mut second = PlanDelta {
            plan_version: 2,
            cleared: vec![path("b")],
            ..Default::default()
        };
        second.steps.insert("b".into(), completed(json!(3)));
        for delta in [first, second] {
            progress.apply(delta.clone());
            save(&ctx, delta.plan_version, &Delta::Plan(delta)).await;
        }
        ctx.services.hub.flush().await;
        assert_eq!(restore(&ctx).await.unwrap(), Restored::Plan(progress));
        // As a new task of the run would: numbering starts over until it restores.
        ctx.checkpoints.store(0, Ordering::SeqCst);
        restore(&ctx).await.unwrap();
        assert_eq!(ctx.checkpoints.load(Ordering::SeqCst), 2);
        save(&ctx, 2, &Delta::Plan(PlanDelta::default())).await;
        ctx.services.hub.flush().await;
        let stored = ctx.services.store().list_checkpoints(ctx.run_id).await;
        let ids: Vec<u64> = stored.unwrap().iter().map(|c| c.id).collect();
        assert_eq!(ids, [1, 2, 3]);
    }
}
