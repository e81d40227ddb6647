//! Runs: what a caller asked for ([`RunSpec`]) and what the service reports ([`Run`]).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::error::RunError;
use super::ids::RunId;
use super::schedule::ScheduleFire;
use super::text_enum::text_enum;

/// What a new run does when its session already has a run in progress ("double-texting").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionConcurrency {
    /// Both run at once.
    #[default]
    Parallel,
    /// The new run is refused (409).
    Reject,
    /// The new run waits, `queued` and holding no running slot, until the session's earlier
    /// runs have ended.
    Enqueue,
    /// The session's runs in progress are cancelled (their history kept); the new run starts
    /// once they have ended.
    Interrupt,
}

/// Where a forked run came from (`POST /v1/runs/{id}/fork`): its parent and the checkpoint it
/// starts from (`Run.parent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ForkOrigin {
    /// The run it was forked from.
    #[schema(value_type = String, format = Uuid)]
    pub run_id: RunId,
    /// The parent's checkpoint the fork starts from (0: before the first, from the start).
    pub checkpoint: u64,
    /// The step the fork was asked to start before (`before_step`), if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_step: Option<String>,
}

text_enum! {
    /// How a run is orchestrated. `auto` is resolved by the selector before execution starts.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ToSchema, Default)]
    pub enum Orchestration {
        #[default]
        Auto = "auto",
        Simple = "simple",
        Fixed = "fixed",
        Planner = "planner",
        Reactive = "reactive",
    }
}

text_enum! {
    /// Who decided a run's orchestration.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ToSchema)]
    pub enum SelectedBy {
        /// The request named an orchestration other than `auto`.
        Request = "request",
        /// A rule: the request's `plan` or `workflow`, or a `[[selector.rules]]` entry.
        Rule = "rule",
        /// The model, answering the OrchestrationType schema.
        Llm = "llm",
        /// `selector.default`: no rule decided and the model was not asked, or failed.
        Default = "default",
    }
}

/// How a run's orchestration was chosen: stored with the run once decided, so a resumed run
/// runs what was chosen instead of choosing again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Selection {
    /// The orchestration that runs the run; never `auto`.
    pub orchestration: Orchestration,
    pub by: SelectedBy,
    /// The deciding rule's name when `by` is `rule` (`request_plan` and `request_workflow` for
    /// a plan or workflow in the request); otherwise `null`.
    pub rule: Option<String>,
    /// Why, in a sentence.
    pub reason: String,
}

text_enum! {
    /// The lifecycle of a run: `queued → running ⇄ waiting_input → terminal`, and
    /// `running ⇄ paused` while a pause (`POST /v1/runs/{id}/pause`, or a breakpoint) holds it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ToSchema)]
    pub enum RunStatus {
        Queued = "queued",
        Running = "running",
        WaitingInput = "waiting_input",
        /// Paused: no step runs or starts until `POST /v1/runs/{id}/resume`; it holds no running
        /// slot and its clock stands still.
        Paused = "paused",
        Succeeded = "succeeded",
        Failed = "failed",
        Cancelled = "cancelled",
        TimedOut = "timed_out",
    }
}

impl RunStatus {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled | RunStatus::TimedOut
        )
    }
}

text_enum! {
    /// How a terminal run ended, from the caller's point of view.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, ToSchema)]
    pub enum Completion {
        Success = "success",
        Partial = "partial",
        Error = "error",
        Timeout = "timeout",
        Cancelled = "cancelled",
    }
}

impl Completion {
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
    /// The schedule tick that started the run. Left out of the stored JSON when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleFire>,
    /// The run and checkpoint a fork starts from. Left out of the stored JSON when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<ForkOrigin>,
    /// The system prompt of a `simple` run, instead of the built-in one. Left out of the
    /// stored JSON when absent, so earlier requests keep their fingerprints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Where the run's summary is POSTed once it ends. Left out of the stored JSON when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
    /// What the request asked it to do about its session's runs in progress (`None`: the
    /// configured default). Left out of the stored JSON when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<SessionConcurrency>,
    /// Higher-priority runs leave the queue for a running slot first (default 0). Left out
    /// of the stored JSON when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i64,
    /// Each plan version a model writes waits for a person's review before it runs (see
    /// `engine::review`). Left out of the stored JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub review_plans: bool,
    /// The HTTP tools the tenant had declared through the API when the run was created (those
    /// the run may call): the run calls these, on whichever replica resumes it, whatever the
    /// tenant declares or removes meanwhile. Not part of the request: left out of its
    /// fingerprint, never shown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub declared_tools: Vec<super::http_tool::HttpToolSpec>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl RunSpec {
    /// What the run does about its session's runs in progress: the request's policy, else
    /// `default`; `None` for a run of no session.
    pub fn session_policy(&self, default: SessionConcurrency) -> Option<SessionConcurrency> {
        self.session_id
            .as_ref()
            .map(|_| self.concurrency.unwrap_or(default))
    }

    /// What an `Idempotency-Key` is checked against: a SHA-256 of the request as accepted, in
    /// canonical JSON (object members sorted), so two bodies that are equal as JSON values
    /// match however they were spelled (member order, white space), and defaults spelled out
    /// (`"orchestration": "auto"`, `"metadata": {}`) match their absence. A plan resolved from
    /// a `workflow` is left out: the same request naming a workflow that has since been
    /// replaced is still the same request.
    pub fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut request = self.clone();
        request.declared_tools.clear();
        if request.workflow.is_some() {
            request.plan = None;
        }
        let value = serde_json::to_value(&request).unwrap_or(Value::Null);
        let mut text = String::new();
        write_canonical(&value, &mut text);
        let digest = Sha256::digest(text.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    }
}

/// JSON text with every object's members in key order, whatever order the map keeps.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<_> = map.iter().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// What a plan run's top-level steps came to, over all its plan versions: each step id counts
/// once, by how its last attempt ended. A step dropped by a new plan version before it ended,
/// cut off, or never started counts as skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StepCounts {
    pub completed: u32,
    pub failed: u32,
    pub skipped: u32,
}

/// The run object of the API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Run {
    #[schema(value_type = String, format = Uuid)]
    pub id: RunId,
    pub status: RunStatus,
    pub completion: Option<Completion>,
    /// Why the run ended with its `completion`, in a sentence (set when terminal).
    pub completion_reason: Option<String>,
    /// What its plan's top-level steps came to (set when a plan run ends; `null` for runs
    /// that ran no plan).
    pub step_counts: Option<StepCounts>,
    /// The orchestration running the run: the request's, or what `auto` resolved to (`auto`
    /// only while the model is still to be asked).
    pub orchestration: Orchestration,
    /// How the orchestration was chosen; `null` until it is (an `auto` run waiting to ask the
    /// model) and for runs stored before selections were recorded.
    pub selected: Option<Selection>,
    #[schema(schema_with = input_schema)]
    pub input: Value,
    /// Any JSON value: the run's output; null until it ends.
    pub output: Option<Value>,
    pub error: Option<RunError>,
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
    pub session_id: Option<String>,
    /// The schedule and tick that started the run; `null` for a run started by a request.
    pub schedule: Option<ScheduleFire>,
    /// The run and checkpoint this run was forked from; `null` for a run that is no fork.
    pub parent: Option<ForkOrigin>,
    pub plan_version: Option<u32>,
    pub usage: Usage,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// `Run.input` in the OpenAPI document: a string or an object, as the request gave it (no
/// `value_type` names a union of two JSON types).
fn input_schema() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Object]))
        .description(Some("The run's input as given."))
        .build()
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

    fn spec(input: Value) -> RunSpec {
        RunSpec {
            input,
            orchestration: Orchestration::Auto,
            workflow: None,
            plan: None,
            model: None,
            tools: None,
            limits: Limits::default(),
            metadata: Map::new(),
            session_id: None,
            schedule: None,
            fork: None,
            instructions: None,
            webhook: None,
            concurrency: None,
            review_plans: false,
            priority: 0,
            declared_tools: Vec::new(),
        }
    }

    #[test]
    fn fingerprints_compare_json_values_not_spellings() {
        let a = spec(serde_json::from_str(r#"{"a": 1, "b": {"x": [1, 2], "y": null}}"#).unwrap());
        let b = spec(serde_json::from_str(r#"{ "b": {"y": null, "x": [1,2]},"a":1 }"#).unwrap());
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert!(a.fingerprint().starts_with("sha256:"));
        let c = spec(serde_json::from_str(r#"{"a": 1, "b": {"x": [2, 1], "y": null}}"#).unwrap());
        assert_ne!(a.fingerprint(), c.fingerprint());
        let mut d = a.clone();
        d.metadata.insert("team".into(), "docs".into());
        assert_ne!(a.fingerprint(), d.fingerprint());
    }

    #[test]
    fn a_plan_resolved_from_a_workflow_is_not_part_of_the_fingerprint() {
        let mut a = spec("hi".into());
        a.workflow = Some("report".into());
        a.plan = Some(serde_json::json!({"steps": [1]}));
        let mut b = a.clone();
        b.plan = Some(serde_json::json!({"steps": [2]}));
        assert_eq!(a.fingerprint(), b.fingerprint());
        let mut c = spec("hi".into());
        c.plan = Some(serde_json::json!({"steps": [1]}));
        let mut d = c.clone();
        d.plan = Some(serde_json::json!({"steps": [2]}));
        assert_ne!(c.fingerprint(), d.fingerprint());
    }
}
