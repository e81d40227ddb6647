//! Run events: the unit of streaming and of history. One [`Event`] is one SSE message.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::ids::RunId;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Status,
    Plan,
    Step,
    Token,
    JsonPartial,
    ToolCall,
    ToolResult,
    InputRequired,
    Handoff,
    Speaker,
    Usage,
    Error,
    Final,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Status => "status",
            EventKind::Plan => "plan",
            EventKind::Step => "step",
            EventKind::Token => "token",
            EventKind::JsonPartial => "json_partial",
            EventKind::ToolCall => "tool_call",
            EventKind::ToolResult => "tool_result",
            EventKind::InputRequired => "input_required",
            EventKind::Handoff => "handoff",
            EventKind::Speaker => "speaker",
            EventKind::Usage => "usage",
            EventKind::Error => "error",
            EventKind::Final => "final",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        serde_json::from_value(Value::String(s.to_owned())).ok()
    }
}

/// One event of a run. `seq` starts at 1 and rises by exactly one per event of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Event {
    pub seq: u64,
    #[schema(value_type = String, format = Uuid)]
    pub run_id: RunId,
    pub kind: EventKind,
    pub ts: DateTime<Utc>,
    pub step_id: Option<String>,
    #[schema(value_type = Object)]
    pub data: Value,
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
            data: serde_json::json!({"text": "{"}),
        };
        let v = serde_json::to_value(&ev).unwrap();
        assert_eq!(v["seq"], 42);
        assert_eq!(v["kind"], "json_partial");
        assert_eq!(v["step_id"], "s2");
        assert_eq!(
            EventKind::parse("json_partial"),
            Some(EventKind::JsonPartial)
        );
    }
}
