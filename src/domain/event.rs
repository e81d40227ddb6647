//! Run events: the unit of streaming and of history. One [`Event`] is one SSE message.
//!
//! What an event carries is typed: [`Payload`] has one variant per event kind, each a serde
//! struct whose JSON is the contract's `data` object. Emitters build payloads, never JSON by
//! hand; [`Event`] keeps the serialised form, which is what the store and the wire hold.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::error::RunError;
use super::ids::RunId;
use super::path::StepPath;
use super::plan::{StepKind, StepStatus};
use super::run::{Completion, RunStatus, Selection, Usage};
use super::text_enum::text_enum;

text_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ToSchema)]
    pub enum EventKind {
        Status = "status",
        Plan = "plan",
        Step = "step",
        Token = "token",
        JsonPartial = "json_partial",
        ToolCall = "tool_call",
        ToolResult = "tool_result",
        InputRequired = "input_required",
        Handoff = "handoff",
        Speaker = "speaker",
        Usage = "usage",
        Error = "error",
        Final = "final",
    }
}

// Its `data` is typed by its kind (`Payload`) and serialises as the kind's data object;
// reading one back decodes `data` by `kind`, so data that does not fit its kind is an error,
// never a value readers index into. (Plain comments: doc comments here reach openapi.yaml.)
/// One event of a run. `seq` starts at 1 and rises by exactly one per event of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "WireEvent")]
pub struct Event {
    pub seq: u64,
    #[schema(value_type = String, format = Uuid)]
    pub run_id: RunId,
    pub kind: EventKind,
    pub ts: DateTime<Utc>,
    pub step_id: Option<String>,
    /// Where `step_id` sits when it is nested in other steps, agents or workflows: their ids
    /// from the top-level step down, `/`-separated (e.g. `team/billing`). Absent at the top.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub path: Option<StepPath>,
    #[schema(value_type = Object)]
    pub data: Payload,
}

/// An event as JSON carries it, before its `data` is decoded by its `kind`.
#[derive(Deserialize)]
struct WireEvent {
    seq: u64,
    run_id: RunId,
    kind: EventKind,
    ts: DateTime<Utc>,
    step_id: Option<String>,
    #[serde(default)]
    path: Option<StepPath>,
    data: Value,
}

impl TryFrom<WireEvent> for Event {
    type Error = String;

    fn try_from(w: WireEvent) -> Result<Event, String> {
        let data = Payload::decode(w.kind, w.data)?;
        Ok(Event {
            seq: w.seq,
            run_id: w.run_id,
            kind: w.kind,
            ts: w.ts,
            step_id: w.step_id,
            path: w.path,
            data,
        })
    }
}

impl Event {
    /// The whole place of the step the event is about (its `path` and `step_id` as one):
    /// the key the store keeps.
    pub fn step(&self) -> Option<StepPath> {
        let id = self.step_id.as_deref()?;
        Some(StepPath::from_parts(self.path.as_ref(), id))
    }

    /// Names the step the event is about (`None` for the run itself), setting `step_id` and
    /// `path` from its place.
    pub fn at(mut self, step: Option<&StepPath>) -> Event {
        self.step_id = step.map(|s| s.leaf().to_owned());
        self.path = step.and_then(StepPath::parent_if_nested);
        self
    }
}

/// The `data` of one event, typed by its kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Payload {
    Status(StatusData),
    Plan(PlanData),
    Step(StepData),
    Token(TextData),
    JsonPartial(TextData),
    ToolCall(ToolCallData),
    ToolResult(ToolResultData),
    InputRequired(InputRequiredData),
    Handoff(HandoffData),
    Speaker(SpeakerData),
    Usage(UsageData),
    Error(ErrorData),
    Final(FinalData),
}

impl Payload {
    pub fn kind(&self) -> EventKind {
        match self {
            Payload::Status(_) => EventKind::Status,
            Payload::Plan(_) => EventKind::Plan,
            Payload::Step(_) => EventKind::Step,
            Payload::Token(_) => EventKind::Token,
            Payload::JsonPartial(_) => EventKind::JsonPartial,
            Payload::ToolCall(_) => EventKind::ToolCall,
            Payload::ToolResult(_) => EventKind::ToolResult,
            Payload::InputRequired(_) => EventKind::InputRequired,
            Payload::Handoff(_) => EventKind::Handoff,
            Payload::Speaker(_) => EventKind::Speaker,
            Payload::Usage(_) => EventKind::Usage,
            Payload::Error(_) => EventKind::Error,
            Payload::Final(_) => EventKind::Final,
        }
    }

    /// Reads the `data` of an event of `kind`; the error says which kind it did not fit.
    pub fn decode(kind: EventKind, data: Value) -> Result<Payload, String> {
        Payload::decode_json(kind, data)
            .map_err(|e| format!("the data of a `{}` event: {e}", kind.as_str()))
    }

    fn decode_json(kind: EventKind, data: Value) -> Result<Payload, serde_json::Error> {
        use serde_json::from_value as read;
        Ok(match kind {
            EventKind::Status => Payload::Status(read(data)?),
            EventKind::Plan => Payload::Plan(read(data)?),
            EventKind::Step => Payload::Step(read(data)?),
            EventKind::Token => Payload::Token(read(data)?),
            EventKind::JsonPartial => Payload::JsonPartial(read(data)?),
            EventKind::ToolCall => Payload::ToolCall(read(data)?),
            EventKind::ToolResult => Payload::ToolResult(read(data)?),
            EventKind::InputRequired => Payload::InputRequired(read(data)?),
            EventKind::Handoff => Payload::Handoff(read(data)?),
            EventKind::Speaker => Payload::Speaker(read(data)?),
            EventKind::Usage => Payload::Usage(read(data)?),
            EventKind::Error => Payload::Error(read(data)?),
            EventKind::Final => Payload::Final(read(data)?),
        })
    }

    /// The JSON `data` object of the event.
    pub fn to_data(&self) -> Value {
        // Payloads hold only strings, numbers, JSON values and maps with string keys, so
        // serialising cannot fail.
        serde_json::to_value(self).expect("event payloads serialise")
    }

    pub fn status(status: RunStatus) -> Payload {
        Payload::Status(StatusData {
            status,
            message: None,
            selected: None,
            progress: None,
        })
    }

    pub fn token(text: impl Into<String>) -> Payload {
        Payload::Token(TextData { text: text.into() })
    }

    pub fn json_partial(text: impl Into<String>) -> Payload {
        Payload::JsonPartial(TextData { text: text.into() })
    }
}

macro_rules! payload_from {
    ($($data:ident => $variant:ident),* $(,)?) => {
        $(impl From<$data> for Payload {
            fn from(d: $data) -> Payload {
                Payload::$variant(d)
            }
        })*
    };
}

payload_from! {
    StatusData => Status, PlanData => Plan, StepData => Step, ToolCallData => ToolCall,
    ToolResultData => ToolResult, InputRequiredData => InputRequired, HandoffData => Handoff,
    SpeakerData => Speaker, UsageData => Usage, ErrorData => Error, FinalData => Final,
}

/// `status`: the run's status changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StatusData {
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// On the `running` event that follows the choice of the run's orchestration (once per
    /// run): what was chosen, by whom, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected: Option<Selection>,
    /// On a `running` event a worker's heartbeat sent while its task runs (the status stays
    /// `running`): `{call_id, tool, task_id, progress}`, `progress` as the worker gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub progress: Option<serde_json::Value>,
}

/// `plan`: a plan was made or replaced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanData {
    pub version: u32,
    /// `initial`, or what made a new version necessary.
    pub reason: String,
    #[schema(value_type = Object)]
    pub plan: std::sync::Arc<Value>,
    /// The heaviest chain of dependencies, first step first.
    pub critical_path: Vec<String>,
    pub critical_path_ms: u64,
    /// For a version after the first: its trigger, strategy, explanation, diff (and, for
    /// `restore`, the version gone back to).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub change: Option<crate::domain::replan::PlanChange>,
}

/// `step`: one step attempt changed state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StepData {
    pub step_id: String,
    /// For a child step: where it sits (see `StepAttempt::path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub path: Option<StepPath>,
    pub name: String,
    pub kind: StepKind,
    pub status: StepStatus,
    /// 0 for steps that never ran (skipped).
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// With status `retrying`: the wait before the next attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<u64>,
    /// Why a step was skipped or cancelled without running to its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl StepData {
    /// A step event with no output, error or timing.
    pub fn new(
        step_id: impl Into<String>,
        name: impl Into<String>,
        kind: StepKind,
        status: StepStatus,
        attempt: u32,
    ) -> StepData {
        StepData {
            step_id: step_id.into(),
            path: None,
            name: name.into(),
            kind,
            status,
            attempt,
            output: None,
            error: None,
            duration_ms: None,
            retry_in_ms: None,
            reason: None,
        }
    }

    /// Where a child step sits; the root (a top-level step) leaves it out.
    pub fn at(mut self, path: &StepPath) -> StepData {
        self.path = (!path.is_root()).then(|| path.clone());
        self
    }

    pub fn with_reason(mut self, reason: impl Into<String>) -> StepData {
        self.reason = Some(reason.into());
        self
    }
}

/// `token` and `json_partial`: a piece of model output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TextData {
    pub text: String,
}

/// `tool_call`: a tool is about to be called.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolCallData {
    pub call_id: String,
    pub tool: String,
    /// As given: JSON, or the raw text when a model wrote arguments that do not parse.
    pub arguments: Value,
}

/// `tool_result`: what a tool call gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolResultData {
    pub call_id: String,
    pub tool: String,
    #[serde(flatten)]
    pub result: ToolOutcome,
    /// For a worker tool's call: the task its workers served, how often it was claimed and
    /// when its last claim began (the time before it waited in the queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskNote>,
}

/// A worker tool's task, as its call's `tool_result` tells it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TaskNote {
    pub task_id: String,
    /// Claims made (1 when the first worker completed it).
    pub attempts: u32,
    /// When the claim that ended it began; `null` when no worker ever took it.
    pub claimed_at: Option<DateTime<Utc>>,
}

/// A tool call's output, or why it failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolOutcome {
    Output(Value),
    Error(RunError),
}

/// `input_required`: the run waits for `POST .../input`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InputRequiredData {
    pub step_id: String,
    pub prompt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// What is asked, when it is not a step's own question: `plan_review` (a plan version
    /// waits for approval; `plan_version` and `plan` say which).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_version: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Value>,
}

/// `handoff`: control passed between agents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct HandoffData {
    pub from: String,
    pub to: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `speaker`: a group chat chose its next speaker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SpeakerData {
    pub agent: String,
    pub round: u32,
}

/// `usage`: one model call's tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UsageData {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// `error`: a failure the run goes on after (a retry, a replan, or a model told of it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ErrorData {
    #[serde(flatten)]
    pub error: RunError,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
}

/// `final`: how the run ended; exactly once, always last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FinalData {
    pub status: RunStatus,
    pub completion: Completion,
    /// Why the run ended with its `completion`, in a sentence.
    #[serde(default)]
    pub completion_reason: Option<String>,
    /// What the plan's top-level steps came to (`null` for runs that ran no plan).
    #[serde(default)]
    pub step_counts: Option<super::run::StepCounts>,
    pub output: Option<Value>,
    pub usage: Usage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_serialises_in_contract_shape() {
        let ev = Event {
            seq: 42,
            run_id: RunId::new(),
            kind: EventKind::JsonPartial,
            ts: Utc::now(),
            step_id: Some("s2".into()),
            path: None,
            data: Payload::json_partial("{"),
        };
        let v = serde_json::to_value(&ev).unwrap();
        assert_eq!(serde_json::from_value::<Event>(v.clone()).unwrap(), ev);
        let mut wrong = v.clone();
        wrong["kind"] = "usage".into();
        let refused = serde_json::from_value::<Event>(wrong)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("the data of a `usage` event"), "{refused}");
        assert_eq!(v["seq"], 42);
        assert_eq!(v["kind"], "json_partial");
        assert_eq!(v["step_id"], "s2");
        assert_eq!(
            EventKind::parse("json_partial"),
            Some(EventKind::JsonPartial)
        );
    }

    #[test]
    fn payloads_serialise_to_the_contract_data() {
        use crate::domain::error::ErrorCode;
        let result = Payload::from(ToolResultData {
            call_id: "c1".into(),
            tool: "fs.read".into(),
            result: ToolOutcome::Error(RunError::new(ErrorCode::FileNotFound, "no such file")),
            task: None,
        });
        assert_eq!(result.kind(), EventKind::ToolResult);
        assert_eq!(
            result.to_data(),
            serde_json::json!({"call_id": "c1", "tool": "fs.read",
                "error": {"code": "file_not_found", "message": "no such file"}})
        );
        let err = Payload::from(ErrorData {
            error: RunError::new(ErrorCode::ToolTimeout, "slow"),
            step_id: Some("s1".into()),
        });
        assert_eq!(
            err.to_data(),
            serde_json::json!({"code": "tool_timeout", "message": "slow", "step_id": "s1"})
        );
        let running = Payload::from(StepData::new(
            "s1",
            "s1",
            StepKind::Tool,
            StepStatus::Running,
            1,
        ));
        assert_eq!(
            running.to_data(),
            serde_json::json!({"step_id": "s1", "name": "s1", "kind": "tool",
                "status": "running", "attempt": 1})
        );
        assert_eq!(
            Payload::token("hi").to_data(),
            serde_json::json!({"text": "hi"})
        );
    }
}
