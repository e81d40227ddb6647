//! Runs: what a caller asked for ([`RunSpec`]) and what the service reports ([`Run`]).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::error::RunError;
use super::ids::RunId;

/// How a run is orchestrated. `auto` is resolved by the selector before execution starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum Orchestration {
    #[default]
    Auto,
    Simple,
    Fixed,
    Planner,
    Reactive,
}

impl Orchestration {
    pub fn as_str(self) -> &'static str {
        match self {
            Orchestration::Auto => "auto",
            Orchestration::Simple => "simple",
            Orchestration::Fixed => "fixed",
            Orchestration::Planner => "planner",
            Orchestration::Reactive => "reactive",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        serde_json::from_value(Value::String(s.to_owned())).ok()
    }
}

/// The lifecycle of a run: `queued → running ⇄ waiting_input → terminal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    WaitingInput,
    Succeeded,
    Failed,
    Cancelled,
    TimedOut,
}

impl RunStatus {
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::WaitingInput,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::TimedOut,
    ];

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled | RunStatus::TimedOut
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::WaitingInput => "waiting_input",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::TimedOut => "timed_out",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        RunStatus::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

/// How a terminal run ended, from the caller's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Completion {
    Success,
    Partial,
    Error,
    Timeout,
    Cancelled,
}

impl Completion {
    pub fn as_str(self) -> &'static str {
        match self {
            Completion::Success => "success",
            Completion::Partial => "partial",
            Completion::Error => "error",
            Completion::Timeout => "timeout",
            Completion::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        serde_json::from_value(Value::String(s.to_owned())).ok()
    }

    /// The terminal status that goes with this completion.
    pub fn status(self) -> RunStatus {
        match self {
            Completion::Success | Completion::Partial => RunStatus::Succeeded,
            Completion::Error => RunStatus::Failed,
            Completion::Timeout => RunStatus::TimedOut,
            Completion::Cancelled => RunStatus::Cancelled,
        }
    }
}

/// Per-run limits; each unset field falls back to the configured default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub max_steps: Option<u64>,
    pub max_duration_ms: Option<u64>,
    pub max_replans: Option<u64>,
    pub max_retries: Option<u64>,
    pub max_tokens: Option<u64>,
}

/// How much of its limits a run has used besides its [`Usage`]: kept with the run so a resumed
/// run goes on counting where it stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Step attempts started, at every level.
    pub steps: u64,
    /// Retries taken from the run's `max_retries`.
    pub retries: u64,
    /// Time counted against the run's time limit (waits for a human excluded).
    pub time_used_ms: u64,
}

/// Token and call counters of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub llm_calls: u64,
    pub tool_calls: u64,
}

/// What the caller asked for, stored with the run so a restarted server can resume it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    pub input: Value,
    pub orchestration: Orchestration,
    #[serde(default)]
    pub workflow: Option<Value>,
    #[serde(default)]
    pub plan: Option<Value>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub metadata: Map<String, Value>,
    #[serde(default)]
    pub session_id: Option<String>,
}

/// The run object of the API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Run {
    #[schema(value_type = String, format = Uuid)]
    pub id: RunId,
    pub status: RunStatus,
    pub completion: Option<Completion>,
    pub orchestration: Orchestration,
    #[schema(value_type = Object)]
    pub input: Value,
    #[schema(value_type = Option<Object>)]
    pub output: Option<Value>,
    pub error: Option<RunError>,
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
    pub session_id: Option<String>,
    pub plan_version: Option<u32>,
    pub usage: Usage,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_and_know_terminality() {
        for st in RunStatus::ALL {
            assert_eq!(RunStatus::parse(st.as_str()), Some(st));
            let json = serde_json::to_value(st).unwrap();
            assert_eq!(json, Value::String(st.as_str().to_owned()));
        }
        assert!(!RunStatus::WaitingInput.is_terminal());
        assert!(RunStatus::TimedOut.is_terminal());
        assert_eq!(Completion::Partial.status(), RunStatus::Succeeded);
        assert_eq!(Completion::Timeout.status(), RunStatus::TimedOut);
    }

    #[test]
    fn orchestration_parses_contract_names() {
        assert_eq!(
            Orchestration::parse("reactive"),
            Some(Orchestration::Reactive)
        );
        assert_eq!(Orchestration::parse("Reactive"), None);
    }
}
