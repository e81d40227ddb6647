//! Runs: what a caller asks for ([`RunRequest`]), what a run is stored with ([`RunSpec`]: the
//! request and what orca added) and what the service reports ([`Run`]).

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

/// An orchestration that runs a run: what a request names, or what `auto` settles to. Never
/// `auto`, so an executor exists for every value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Settled {
    Simple,
    Fixed,
    Planner,
    Reactive,
}

impl Orchestration {
    /// The orchestration that runs, unless this is `auto` (still to be settled).
    pub fn settled(self) -> Option<Settled> {
        match self {
            Orchestration::Auto => None,
            Orchestration::Simple => Some(Settled::Simple),
            Orchestration::Fixed => Some(Settled::Fixed),
            Orchestration::Planner => Some(Settled::Planner),
            Orchestration::Reactive => Some(Settled::Reactive),
        }
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

/// A run request: the body a client POSTs to `/v1/runs` (its shape checked first against
/// `schemas/RunRequest.schema.json`, then deserialised into this, unknown members refused),
/// the body a schedule's tick starts, the request a fork copies, and what the stored
/// [`RunSpec`] carries whole. `Engine::admit` checks what it names.
///
/// Adding a field is one edit here plus the room that reads it (`review_plans`: read only by
/// `engine/review.rs`). A new field takes `#[serde(default, skip_serializing_if = ..)]` its
/// default, so the stored form of earlier runs, and the fingerprints of the keys they were
/// sent with, stay as they were.
///
/// Serialised, it is the stored form: the members of its first version (`workflow` to
/// `session_id`) are written even when absent (`null`, `{}`, every limit), the webhook by its
/// URL alone. [`RunRequest::posted`] is the body form a client sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    #[schema(value_type = Object)]
    pub input: Value,
    #[serde(default)]
    pub orchestration: Orchestration,
    /// A registered workflow's name, or an inline workflow.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub workflow: Option<Value>,
    /// A plan document to run. Once admitted, the plan the run runs: the request's with the
    /// registered agents and workflows it names copied in, or the plan its `workflow` (or a
    /// selector rule's) resolved to.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub plan: Option<Value>,
    #[serde(default)]
    pub model: Option<String>,
    /// The allow-list of tool names.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
    #[serde(default)]
    pub session_id: Option<String>,
    /// The system prompt of a `simple` run instead of the built-in one (at most 32 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Where the run's summary is POSTed, signed, once it ends: `{"url": ...}` in a body, the
    /// URL alone in the stored form (once admitted: the request's, else the tenant's default).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "webhook_url"
    )]
    #[schema(value_type = Option<Object>)]
    pub webhook: Option<String>,
    /// What the run does when its session has a run in progress (the configured default when
    /// `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<SessionConcurrency>,
    /// Higher-priority runs leave the queue for a running slot first (-1000 to 1000, default 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i64,
    /// Each plan version a model writes (the planner's, the re-planner's) waits for a
    /// person's review before it runs: an `input_required` of kind `plan_review`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub review_plans: bool,
    /// The user of the tenant the run is for: its memory (`user/ID/…`), its quota, its
    /// sessions. A key bound to a user sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// A request's `webhook` as either form has it: `{"url": ...}` (a body) or the URL (stored).
fn webhook_url<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Target {
        url: String,
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Given {
        Stored(String),
        Posted(Target),
    }
    Ok(Option::<Given>::deserialize(d)?.map(|given| match given {
        Given::Stored(url) | Given::Posted(Target { url }) => url,
    }))
}

impl RunRequest {
    /// A request of `input` with every other field at its default; change fields with struct
    /// update syntax (`RunRequest { plan, ..RunRequest::new(input) }`).
    pub fn new(input: impl Into<Value>) -> RunRequest {
        RunRequest {
            input: input.into(),
            ..Default::default()
        }
    }

    /// The request as a `POST /v1/runs` body: what was given, so posting it again starts the
    /// same run anew (a run's `request` in responses). It is the stored form without what a
    /// body leaves out: absent members (`null`), unset limits, empty `metadata`, and the plan
    /// a `workflow` resolved to; the webhook is `{"url": ...}` again.
    pub fn posted(&self) -> Map<String, Value> {
        let Ok(Value::Object(mut body)) = serde_json::to_value(self) else {
            return Map::new();
        };
        if let Some(Value::Object(limits)) = body.get_mut("limits") {
            limits.retain(|_, v| !v.is_null());
        }
        let unset = |key: &str, v: &Value| match v {
            Value::Null => key != "input",
            Value::Object(map) => map.is_empty() && matches!(key, "limits" | "metadata"),
            _ => false,
        };
        body.retain(|key, v| !unset(key, v));
        if self.workflow.is_some() {
            body.remove("plan");
        }
        if let Some(url) = body.remove("webhook") {
            body.insert("webhook".into(), serde_json::json!({ "url": url }));
        }
        body
    }
}

/// What a run is stored with so any replica, after any restart, runs (and resumes) it: the
/// request, and what orca added to it. The request's members and these sit side by side in
/// the stored JSON, as they always have.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    /// The request as admitted (see [`RunRequest::plan`] and [`RunRequest::webhook`]).
    #[serde(flatten)]
    pub request: RunRequest,
    /// The schedule tick that started the run. Left out of the stored JSON when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleFire>,
    /// The run and checkpoint a fork starts from. Left out of the stored JSON when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<ForkOrigin>,
    /// The HTTP tools the tenant had declared through the API when the run was created (those
    /// the run may call): the run calls these, on whichever replica resumes it, whatever the
    /// tenant declares or removes meanwhile. Not part of the request: left out of its
    /// fingerprint, never shown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub declared_tools: Vec<super::worker_tool::DeclaredTool>,
    /// The LLM functions the tenant had declared through the API when the run was created: the
    /// run calls these, whatever the tenant declares or removes meanwhile. Not part of the
    /// request: left out of its fingerprint, never shown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub declared_functions: Vec<super::function::FunctionSpec>,
    /// The exact version of every registered definition the run uses (its workflow, the
    /// agents and workflows its plan names, the declared tools it may call), recorded when it
    /// is created. Not part of the request: left out of its fingerprint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub definitions: Vec<super::definition::Pin>,
}

impl RunSpec {
    /// The spec of a run of `request`, to which orca has added nothing yet.
    pub fn new(request: RunRequest) -> RunSpec {
        RunSpec {
            request,
            ..Default::default()
        }
    }

    /// What the run does about its session's runs in progress: the request's policy, else
    /// `default`; `None` for a run of no session.
    pub fn session_policy(&self, default: SessionConcurrency) -> Option<SessionConcurrency> {
        let request = &self.request;
        (request.session_id.as_ref()).map(|_| request.concurrency.unwrap_or(default))
    }

    /// What an `Idempotency-Key` is checked against: a SHA-256 of the request as accepted, in
    /// canonical JSON (object members sorted), so two bodies that are equal as JSON values
    /// match however they were spelled (member order, white space), and defaults spelled out
    /// (`"orchestration": "auto"`, `"metadata": {}`) match their absence. A plan resolved from
    /// a `workflow` is left out: the same request naming a workflow that has since been
    /// replaced is still the same request. The schedule tick and the fork's origin are in it.
    pub fn fingerprint(&self) -> String {
        let mut request = self.clone();
        request.declared_tools.clear();
        request.declared_functions.clear();
        request.definitions.clear();
        if request.request.workflow.is_some() {
            request.request.plan = None;
        }
        let value = serde_json::to_value(&request).unwrap_or(Value::Null);
        super::definition::digest(&value)
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
    /// The user of the tenant the run is for; `null` for a run of no user.
    #[serde(default)]
    pub user_id: Option<String>,
    /// The schedule and tick that started the run; `null` for a run started by a request.
    pub schedule: Option<ScheduleFire>,
    /// The run and checkpoint this run was forked from; `null` for a run that is no fork.
    pub parent: Option<ForkOrigin>,
    pub plan_version: Option<u32>,
    /// The version of every registered definition the run uses (see `RunSpec::definitions`):
    /// what it runs wherever and whenever it resumes.
    #[serde(default)]
    pub definitions: Vec<super::definition::Pin>,
    pub usage: Usage,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl Run {
    /// The row of a new run `id` of `spec`, `queued` now: its orchestration the one `selected`
    /// (`auto` until it is decided). Fixtures change what they need with struct update syntax.
    pub fn queued(id: RunId, spec: &RunSpec, selected: Option<Selection>) -> Run {
        Run {
            id,
            status: RunStatus::Queued,
            completion: None,
            completion_reason: None,
            step_counts: None,
            orchestration: (selected.as_ref()).map_or(Orchestration::Auto, |s| s.orchestration),
            selected,
            input: spec.request.input.clone(),
            output: None,
            error: None,
            metadata: spec.request.metadata.clone(),
            session_id: spec.request.session_id.clone(),
            user_id: spec.request.user_id.clone(),
            schedule: spec.schedule.clone(),
            parent: spec.fork.clone(),
            plan_version: None,
            definitions: spec.definitions.clone(),
            usage: Usage::default(),
            created_at: super::now(),
            started_at: None,
            finished_at: None,
        }
    }
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

/// The user-facing text of a run input: a string as is; an object's `message`, `prompt` or
/// `text` field when it is a string; otherwise the JSON text.
pub fn input_text(input: &Value) -> String {
    match input {
        Value::String(s) => s.clone(),
        Value::Object(m) => ["message", "prompt", "text"]
            .iter()
            .find_map(|k| m.get(*k).and_then(Value::as_str))
            .map(str::to_owned)
            .unwrap_or_else(|| input.to_string()),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every orchestration but `auto` runs as itself; `auto` has to be settled first.
    #[test]
    fn every_orchestration_but_auto_is_settled() {
        for o in Orchestration::ALL {
            let settled = o.settled();
            assert_eq!(settled.is_none(), o == Orchestration::Auto, "{o:?}");
            if let Some(runs) = settled {
                assert_eq!(format!("{runs:?}").to_lowercase(), o.as_str());
            }
        }
    }

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
        RunSpec::new(RunRequest::new(input))
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
        d.request.metadata.insert("team".into(), "docs".into());
        assert_ne!(a.fingerprint(), d.fingerprint());
    }

    /// A stored spec with every field the request can give and orca can add, as rows hold it.
    fn stored_with_every_field() -> Value {
        serde_json::json!({
            "input": { "q": "hi" },
            "orchestration": "reactive",
            "workflow": null,
            "plan": { "steps": [{ "id": "a", "kind": "llm", "input": { "prompt": "x" } }] },
            "model": "offline",
            "tools": ["math.calculate"],
            "limits": { "max_steps": 9, "max_duration_ms": null, "max_replans": 2,
                        "max_retries": null, "max_tokens": 5000 },
            "metadata": { "team": "docs" },
            "session_id": "s-1",
            "schedule": { "id": "sch-1", "fire_at": "2026-01-02T03:04:05Z" },
            "fork": { "run_id": "0190f0a0-0000-7000-8000-000000000001", "checkpoint": 3,
                      "before_step": "b" },
            "instructions": "Be brief.",
            "webhook": "https://example.com/hook",
            "concurrency": "enqueue",
            "priority": -3,
            "review_plans": true,
            "declared_tools": [{ "name": "weather", "description": "", "method": "GET",
                                 "url": "https://example.com/w", "headers": {},
                                 "input_schema": { "type": "object", "properties": {} },
                                 "max_response_bytes": 1024, "timeout_ms": 1000 }]
        })
    }

    /// Keys sent before must still match, and rows stored before must read and write back as
    /// they are: the stored form and the fingerprint of a spec with every field, and of the
    /// first stored form (only the fields every row has), pinned.
    #[test]
    fn stored_specs_and_their_fingerprints_stay_as_they_were() {
        let every: RunSpec = serde_json::from_value(stored_with_every_field()).unwrap();
        assert_eq!(
            serde_json::to_value(&every).unwrap(),
            stored_with_every_field()
        );
        assert_eq!(
            every.fingerprint(),
            "sha256:40573f27ae9a93d9039fa294928e1228b5be935c08dd9f7c1890fb82f22628ab"
        );
        let first = serde_json::json!({
            "input": "hello", "orchestration": "auto", "workflow": null, "plan": null,
            "model": null, "tools": null,
            "limits": { "max_steps": null, "max_duration_ms": null, "max_replans": null,
                        "max_retries": null, "max_tokens": null },
            "metadata": {}, "session_id": null
        });
        let first_spec: RunSpec = serde_json::from_value(first.clone()).unwrap();
        assert_eq!(serde_json::to_value(&first_spec).unwrap(), first);
        assert_eq!(
            first_spec.fingerprint(),
            "sha256:0e2d18977da9080b6b0546fc395051128e6a88022167bb44163725d7834ea6a1"
        );
        // A row older still (no `limits`, `metadata`) reads with their defaults.
        let oldest: RunSpec =
            serde_json::from_value(serde_json::json!({"input": "hello", "orchestration": "auto"}))
                .unwrap();
        assert_eq!(oldest, first_spec);
    }

    #[test]
    fn a_plan_resolved_from_a_workflow_is_not_part_of_the_fingerprint() {
        let mut a = spec("hi".into());
        a.request.workflow = Some("report".into());
        a.request.plan = Some(serde_json::json!({"steps": [1]}));
        let mut b = a.clone();
        b.request.plan = Some(serde_json::json!({"steps": [2]}));
        assert_eq!(a.fingerprint(), b.fingerprint());
        let mut c = spec("hi".into());
        c.request.plan = Some(serde_json::json!({"steps": [1]}));
        let mut d = c.clone();
        d.request.plan = Some(serde_json::json!({"steps": [2]}));
        assert_ne!(c.fingerprint(), d.fingerprint());
    }

    /// A body is read into the one request type, shown back as it was given (the stored
    /// form's absences left out, the webhook as `{url}`), and that body reads back the same.
    #[test]
    fn a_request_reads_from_a_body_and_from_the_stored_form_and_is_shown_as_given() {
        let body = serde_json::json!({
            "input": "hi", "orchestration": "planner", "model": "offline", "tools": [],
            "limits": { "max_steps": 4 }, "metadata": { "a": 1 }, "session_id": "s",
            "instructions": "short", "webhook": { "url": "https://example.com/h" },
            "concurrency": "reject", "priority": 7, "review_plans": true
        });
        let request: RunRequest = serde_json::from_value(body.clone()).unwrap();
        assert_eq!(request.webhook.as_deref(), Some("https://example.com/h"));
        assert_eq!(Value::Object(request.posted()), body);
        let stored = serde_json::to_value(&request).unwrap();
        assert_eq!(stored["webhook"], "https://example.com/h");
        assert_eq!(stored["limits"]["max_tokens"], Value::Null);
        assert_eq!(
            serde_json::from_value::<RunRequest>(stored).unwrap(),
            request
        );
        let bare = RunRequest::new("hello");
        let shown = serde_json::json!({ "input": "hello", "orchestration": "auto" });
        assert_eq!(Value::Object(bare.posted()), shown);
        // A workflow is shown by its name, not the plan it resolved to.
        let named = RunRequest {
            workflow: Some("report".into()),
            plan: Some(serde_json::json!({ "steps": [] })),
            ..RunRequest::new("x")
        };
        assert!(!named.posted().contains_key("plan"));
        // Unknown members of a body are refused; a spec's own members are not the request's.
        let unknown = serde_json::json!({ "input": "x", "colour": "red" });
        assert!(serde_json::from_value::<RunRequest>(unknown).is_err());
        let scheduled = serde_json::json!({ "input": "x", "schedule": null });
        assert!(serde_json::from_value::<RunRequest>(scheduled).is_err());
    }
}
