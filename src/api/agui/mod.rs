//! `POST /v1/agui`: an orca run spoken as the AG-UI protocol, so AG-UI front-ends (CopilotKit
//! and the like, through `@ag-ui/client`'s `HttpAgent`) connect unchanged.
//!
//! A request (`RunAgentInput`) starts a run from the thread's latest user message, with the
//! thread as the run's session, and streams it as AG-UI events until it ends. When the run asks
//! for human input the AG-UI run ends with an `interrupt` outcome; the next request's `resume`
//! entry answers it (or cancels the run) and streams the rest. The run is an ordinary orca run
//! underneath: `/v1/runs/{id}` and its own resumable event stream see all of it.
//! The mapping itself is in [`translate`].

mod translate;

use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::HeaderValue;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use crate::domain::{RunId, Tenant};

use super::AppState;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, deserialize_located};
use super::runs::{answer_input, start_run};
use translate::{Translator, parse_interrupt_id};

/// An AG-UI `RunAgentInput`. Fields orca does not use (`tools`, `context`, `state`,
/// `parentRunId`, `protocolVersion`) are accepted and ignored.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunAgentInput {
    /// The conversation: orca's `session_id`, so a thread's runs share history.
    #[schema(min_length = 1, max_length = 200)]
    pub thread_id: String,
    /// The client's id for this AG-UI run; echoed in every run event. Sending the same one
    /// again (with the same body) returns the same orca run.
    #[schema(min_length = 1, max_length = 200)]
    pub run_id: String,
    /// The conversation so far; the latest `user` message is the run's input.
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub messages: Vec<Value>,
    /// `{"orca": {...}}` may carry `input`, `orchestration`, `workflow`, `plan`, `model`,
    /// `tools`, `limits`, `metadata` and `instructions`, as in `POST /v1/runs`.
    #[schema(value_type = Option<Object>)]
    pub forwarded_props: Option<Value>,
    /// Answers to the interrupt a previous AG-UI run of this thread ended with.
    pub resume: Option<Vec<ResumeEntry>>,
    // The members below are AG-UI's; orca accepts them (a client sends them) and does not
    // read them: the run's state is orca's own, its tools its tenant's.
    #[schema(value_type = Option<Object>)]
    #[allow(dead_code)]
    pub state: Option<Value>,
    #[schema(value_type = Option<Vec<Object>>)]
    #[allow(dead_code)]
    pub tools: Option<Vec<Value>>,
    #[schema(value_type = Option<Vec<Object>>)]
    #[allow(dead_code)]
    pub context: Option<Vec<Value>>,
    #[allow(dead_code)]
    pub parent_run_id: Option<String>,
    #[allow(dead_code)]
    pub protocol_version: Option<String>,
}

/// An answer to one interrupt.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResumeEntry {
    /// The interrupt's `id`, as the previous run's `RUN_FINISHED` gave it.
    pub interrupt_id: String,
    /// `resolved` answers the step with `payload`; `cancelled` cancels the run.
    pub status: ResumeStatus,
    #[schema(value_type = Option<Object>)]
    pub payload: Option<Value>,
    // Accepted as AG-UI sends it; orca does not read it.
    #[schema(value_type = Option<Object>)]
    #[allow(dead_code)]
    pub metadata: Option<Value>,
}

#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ResumeStatus {
    Resolved,
    Cancelled,
}

/// The `forwardedProps.orca` keys passed on to the run as they are.
const PASSED: [&str; 8] = [
    "orchestration",
    "workflow",
    "plan",
    "model",
    "tools",
    "limits",
    "instructions",
    "input",
];

/// Run an agent over AG-UI.
///
/// Starts an orca run from the thread's latest user message (or answers the interrupt named in
/// `resume`) and streams it as AG-UI events (`text/event-stream`, one JSON event per `data:`
/// line): `RUN_STARTED`, `STATE_SNAPSHOT`/`STATE_DELTA`, `STEP_STARTED`/`STEP_FINISHED`,
/// `TEXT_MESSAGE_*`, `TOOL_CALL_*`, `CUSTOM` (`orca.handoff`, `orca.speaker`, `orca.error`,
/// `orca.json_partial`), then `RUN_FINISHED` (with an `interrupt` outcome when the run waits
/// for input) or `RUN_ERROR`.
#[utoipa::path(
    post, path = "/v1/agui", tag = "runs",
    request_body = RunAgentInput,
    responses(
        (status = 200, description = "The AG-UI event stream (text/event-stream)", body = String, content_type = "text/event-stream"),
        (status = 400, description = "Malformed JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "The interrupt names an unknown run", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The run does not wait on the interrupted step", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body was not sent as application/json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid input, or an answer its schema refuses", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "Too many queued runs", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn run_agent(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    for field in ["threadId", "runId"] {
        let ok = body
            .get(field)
            .and_then(Value::as_str)
            .is_some_and(|v| !v.trim().is_empty() && v.chars().count() <= 200);
        if !ok {
            return Err(ApiError::validation(
                &format!("/{field}"),
                "is required: a string of 1 to 200 characters",
            ));
        }
    }
    let input: RunAgentInput = deserialize_located(body)?;
    let (run, after, mut translator) = match input.resume.as_deref() {
        Some([entry]) => resume(&state, &tenant, &input, entry).await?,
        Some(entries) if entries.len() > 1 => {
            return Err(ApiError::validation(
                "/resume",
                "orca waits on one interrupt at a time: send one resume entry",
            ));
        }
        _ => {
            let run = start(&state, &tenant, &input).await?;
            (run, 0, Translator::new(input.thread_id, input.run_id, run))
        }
    };
    // A resumed run's history, read up to where the interrupt left it: what is running.
    let mut seen = 0;
    while seen < after {
        let page = state.history.events_after(run, seen, 1000).await?;
        let Some(last) = page.last() else { break };
        seen = last.seq;
        page.iter()
            .filter(|e| e.seq <= after)
            .for_each(|e| translator.absorb(e));
    }
    Ok(stream(&state, run, after, translator))
}

/// The run's input: `forwardedProps.orca.input` when given, else the latest user message's
/// text.
fn run_input(input: &RunAgentInput, props: &Map<String, Value>) -> Result<Value, ApiError> {
    if let Some(v) = props.get("input") {
        return Ok(v.clone());
    }
    let latest = input
        .messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .ok_or_else(|| ApiError::validation("/messages", "needs a message with role `user`"))?;
    let text = match &latest["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    };
    if text.trim().is_empty() {
        return Err(ApiError::validation(
            "/messages",
            "the latest user message has no text",
        ));
    }
    Ok(Value::String(text))
}

async fn start(
    state: &AppState,
    tenant: &Tenant,
    input: &RunAgentInput,
) -> Result<RunId, ApiError> {
    let props = match input.forwarded_props.as_ref().map(|p| &p["orca"]) {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => {
            return Err(ApiError::validation(
                "/forwardedProps/orca",
                "must be an object",
            ));
        }
    };
    if let Some(key) = props
        .keys()
        .find(|k| !PASSED.contains(&k.as_str()) && *k != "metadata")
    {
        return Err(ApiError::validation(
            &format!("/forwardedProps/orca/{key}"),
            format!("`{key}` is not a run option"),
        ));
    }
    let mut body = json!({ "input": run_input(input, &props)?, "session_id": input.thread_id });
    for key in PASSED.iter().filter(|k| **k != "input") {
        if let Some(v) = props.get(*key) {
            body[*key] = v.clone();
        }
    }
    let mut metadata = match props.get("metadata") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    metadata.insert("agui_thread_id".into(), json!(input.thread_id));
    metadata.insert("agui_run_id".into(), json!(input.run_id));
    body["metadata"] = Value::Object(metadata);
    let key = Some(format!("agui:{}", input.run_id));
    let (run, _, _) = start_run(state, tenant, body, key, crate::engine::Follow::Later)
        .await
        .map_err(located)?;
    Ok(run.id)
}

/// Points a run request's field errors at where they came from in the AG-UI input.
fn located(err: ApiError) -> ApiError {
    let ApiError::Validation { detail, errors } = err else {
        return err;
    };
    let errors = errors
        .into_iter()
        .map(|e| {
            let pointer = if e.pointer.starts_with("/input") {
                "/messages".to_owned()
            } else if e.pointer.starts_with("/session_id") {
                "/threadId".to_owned()
            } else {
                format!("/forwardedProps/orca{}", e.pointer)
            };
            FieldError::new(pointer, e.message)
        })
        .collect();
    ApiError::Validation { detail, errors }
}

/// Answers (or cancels) the run an interrupt names; the run, the seq the answer follows and
/// a translator for the rest.
async fn resume(
    state: &AppState,
    tenant: &Tenant,
    input: &RunAgentInput,
    entry: &ResumeEntry,
) -> Result<(RunId, u64, Translator), ApiError> {
    let (run, step) = parse_interrupt_id(&entry.interrupt_id).ok_or_else(|| {
        ApiError::validation("/resume/0/interruptId", "not an interrupt of orca's")
    })?;
    // Before the answer: everything after this seq is the resumed run's.
    let tail = state.history.tail(run).await?;
    let after = tail.map(|t| t.last_seq).unwrap_or(0);
    match entry.status {
        ResumeStatus::Resolved => {
            let value = entry.payload.clone().unwrap_or(Value::Null);
            answer_input(state, tenant, run, &step, value).await?;
        }
        ResumeStatus::Cancelled => match state.engine.cancel(tenant, run).await {
            Ok(_) => {}
            Err(crate::engine::Error::NotFound) => {
                return Err(ApiError::NotFound(format!("no run `{run}`")));
            }
            Err(crate::engine::Error::AlreadyTerminal(s)) => {
                return Err(ApiError::Conflict(format!("the run is already {s}")));
            }
            Err(e) => return Err(ApiError::internal(e)),
        },
    }
    let translator = Translator::new(input.thread_id.clone(), input.run_id.clone(), run);
    Ok((run, after, translator))
}

/// The AG-UI event stream: the opening events, then each orca event translated, until the
/// AG-UI run ends (the run finished, failed or waits for input).
fn stream(state: &AppState, run: RunId, after: u64, mut translator: Translator) -> Response {
    let opening = translator.begin();
    let events = state.events.follow(run, after, state.shutdown.clone());
    let rest = events
        .scan((translator, false), |(translator, over), item| {
            let out = if *over {
                None
            } else {
                match item {
                    Ok(ev) => {
                        let (out, ended) = translator.translate(&ev);
                        *over = ended.is_some();
                        Some(out)
                    }
                    Err(e) => {
                        tracing::error!(error = ?e, "reading events failed; closing the AG-UI stream");
                        None
                    }
                }
            };
            futures::future::ready(out)
        })
        .flat_map(futures::stream::iter);
    let all = futures::stream::iter(opening).chain(rest).map(to_sse);
    respond(state, all)
}

fn to_sse(event: Value) -> Result<SseEvent, Infallible> {
    Ok(SseEvent::default().data(event.to_string()))
}

fn respond(
    state: &AppState,
    events: impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static,
) -> Response {
    let keep_alive = KeepAlive::new()
        .interval(Duration::from_secs(state.config.server.keep_alive_secs))
        .text("keep-alive");
    let mut resp = Sse::new(events).keep_alive(keep_alive).into_response();
    resp.headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}
