//! `/v1/runs`: create (streaming or not), read, list, delete, events (SSE or JSON), steps,
//! cancel.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::domain::definition::Pin;
use crate::domain::run::RunRequest;
use crate::domain::{Completion, Event, Orchestration, Run, RunId, RunStatus, StepAttempt, Tenant};
use crate::engine::intake::{Admitted, Refused};
use crate::engine::{self, Created, Follow};
use crate::store::RunFilter;
use crate::stream::Opened;

use super::AppState;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, Path, Query, deserialize_located};
use super::users::BoundUser;

/// `GET /v1/runs` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunList {
    pub runs: Vec<Run>,
    pub next_cursor: Option<String>,
}

/// `cursor` of `GET /v1/runs` in the OpenAPI document; the handler reads it as a run id.
#[derive(ToSchema)]
#[schema(description = "`next_cursor` of the previous page")]
#[allow(dead_code)] // described, never built
struct PageCursor(uuid::Uuid);

/// The `text/event-stream` answer of `POST /v1/runs` and `GET /v1/runs/{id}/events` in the
/// OpenAPI document; [`sse`] writes it.
#[derive(ToSchema)]
#[schema(description = "Server-Sent Events")]
#[allow(dead_code)] // described, never built
struct ServerSentEvents(String);

fn wants_sse(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"))
}

pub(super) fn parse_run_id(s: &str) -> Result<RunId, ApiError> {
    RunId::parse(s).ok_or_else(|| ApiError::NotFound(format!("no run `{s}`")))
}

/// The run id, if it names a run of the caller's: another tenant's run is as unknown as a
/// missing one.
pub(super) async fn own_run(
    state: &AppState,
    tenant: &Tenant,
    id: &str,
) -> Result<RunId, ApiError> {
    let id = parse_run_id(id)?;
    load_run(state, tenant, id).await?;
    Ok(id)
}

async fn load_run(state: &AppState, tenant: &Tenant, id: RunId) -> Result<Run, ApiError> {
    Ok(stored_run(state, tenant, id).await?.run)
}

/// The tenant's run `id` with its spec, or 404.
async fn stored_run(
    state: &AppState,
    tenant: &Tenant,
    id: RunId,
) -> Result<crate::store::StoredRun, ApiError> {
    (state.runs.get(tenant, id).await?).ok_or_else(|| ApiError::NotFound(format!("no run `{id}`")))
}

/// Create a run.
///
/// With `Accept: text/event-stream` the answer is the run's event stream, from its first event
/// to `final`; otherwise 201 with the run object while the run proceeds in the background.
#[utoipa::path(
    post, path = "/v1/runs", tag = "runs",
    request_body = RunRequest,
    params(("Idempotency-Key" = Option<String>, Header, nullable = false, min_length = 1, max_length = 255, pattern = "^[!-~]+$",
        description = "Same key (per caller) returns the first run")),
    responses(
        (status = 201, description = "Run created", body = Run),
        (status = 200, description = "Existing run for this Idempotency-Key (JSON), or the event stream (text/event-stream: a new run's, or for a repeated key the first run's from its first event); `Location` names the run either way",
            content((Run = "application/json"), (inline(ServerSentEvents) = "text/event-stream"))),
        (status = 400, description = "Malformed JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body was not sent as application/json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The session is busy and the run's concurrency is `reject`, or the session was deleted", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid request", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 429, description = "The tenant is at a quota (`Retry-After` says when to try again)", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "Too many queued runs", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn create_run(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Extension(bound): Extension<BoundUser>,
    headers: HeaderMap,
    JsonBody(mut body): JsonBody,
) -> Result<Response, ApiError> {
    bound.stamp(&mut body)?;
    let key = idempotency_key(&headers)?;
    let follow = match wants_sse(&headers) {
        true => Follow::Stream,
        false => Follow::Later,
    };
    let (run, fresh, opened) = start_run(&state, &tenant, body, key, follow).await?;
    let location =
        HeaderValue::from_str(&format!("/v1/runs/{}", run.id)).map_err(ApiError::internal)?;
    if follow == Follow::Stream {
        let events = match opened {
            Some(opened) => state
                .events
                .follow_opened(opened, state.shutdown.clone())
                .left_stream(),
            None => state
                .events
                .follow(run.id, 0, state.shutdown.clone())
                .right_stream(),
        };
        // Where the run lives: a client whose stream drops before the first event resumes
        // from `GET {location}/events` without asking again.
        let mut streamed = sse(&state, events);
        streamed.headers_mut().insert(header::LOCATION, location);
        return Ok(streamed);
    }
    let status = if fresh {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, [(header::LOCATION, location)], Json(run)).into_response())
}

/// Checks a `POST /v1/runs` body against its schema, has the engine admit it (every problem
/// of what it names is one 422, see `engine::intake`) and creates the run, or finds the one
/// an idempotency key already made: the run, whether it is new, and (when `follow` asks, for
/// a new run) its live channel, opened before its first event. Shared with the AG-UI
/// endpoint.
pub(super) async fn start_run(
    state: &AppState,
    tenant: &Tenant,
    body: Value,
    key: Option<String>,
    follow: Follow,
) -> Result<(Run, bool, Option<Opened>), ApiError> {
    let admitted = admit_body(state, tenant, body).await?;
    let created = state
        .engine
        .create_run(tenant, admitted, key.as_deref(), follow)
        .await
        .map_err(creation_error)?;
    Ok(match created {
        Created::New(r, opened) => (r, true, opened),
        Created::Existing(r) => (r, false, None),
    })
}

/// Has the engine admit a run body ([`engine::intake::admit_body`]): the run to create, or
/// every problem at once as one 422.
pub(super) async fn admit_body(
    state: &AppState,
    tenant: &Tenant,
    body: Value,
) -> Result<Admitted, ApiError> {
    state
        .engine
        .admit_body(tenant, body)
        .await
        .map_err(|refused| match refused {
            Refused::Invalid(problems) => ApiError::problems(problems),
            Refused::Store(e) => e.into(),
        })
}

/// What creating a run (or a fork) failing tells the caller.
pub(super) fn creation_error(e: engine::Error) -> ApiError {
    match e {
        engine::Error::Overloaded | engine::Error::StoreDown => {
            ApiError::Unavailable(e.to_string())
        }
        engine::Error::IdempotencyKeyReused => ApiError::IdempotencyKeyReused,
        engine::Error::QuotaExceeded(exceeded) => ApiError::TooManyRequests {
            message: exceeded.describe(),
            retry_after_secs: exceeded.retry_after_secs,
        },
        engine::Error::ForkTooLarge { .. } => ApiError::TooLarge(e.to_string()),
        engine::Error::SessionBusy(_) | engine::Error::Conflict(_) => {
            ApiError::Conflict(e.to_string())
        }
        engine::Error::Store(e) => {
            // Logged with its cause; the caller learns only that it may try again.
            tracing::error!(error = ?e, "storing a new run failed");
            ApiError::Unavailable("the store cannot take the run now; try again".into())
        }
        other => ApiError::internal(other),
    }
}

pub(super) fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let bad = || {
        ApiError::validation(
            "/headers/idempotency-key",
            "Idempotency-Key must be 1-255 visible ASCII characters",
        )
    };
    let s = v.to_str().map_err(|_| bad())?;
    if s.is_empty() || s.len() > 255 || !s.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad());
    }
    Ok(Some(s.to_owned()))
}

/// `GET /v1/runs/{id}`: the run object, and the request that started it.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunDetail {
    #[serde(flatten)]
    pub run: Run,
    /// The body of `POST /v1/runs` that started the run, as accepted: what was given, with the
    /// orchestration as requested and a workflow by its name; posting it again starts the
    /// same run anew.
    #[serde(serialize_with = "posted")]
    pub request: RunRequest,
}

/// A run's request as a `POST /v1/runs` body ([`RunRequest::posted`]): what was given, the
/// orchestration as requested (not what `auto` chose), a workflow by its name. A plan's
/// registered agents and workflows are in it as the run copied them in.
fn posted<S: serde::Serializer>(request: &RunRequest, s: S) -> Result<S::Ok, S::Error> {
    request.posted().serialize(s)
}

/// Get a run, with the request that started it (`request`, a `POST /v1/runs` body that runs
/// it again).
#[utoipa::path(
    get, path = "/v1/runs/{id}", tag = "runs",
    params(("id" = String, Path, description = "Run id")),
    responses(
        (status = 200, body = RunDetail),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_run(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Json<RunDetail>, ApiError> {
    let id = parse_run_id(&id)?;
    let stored = state
        .runs
        .get(&tenant, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no run `{id}`")))?;
    Ok(Json(RunDetail {
        run: stored.run,
        request: stored.spec.request,
    }))
}

/// Delete a finished run with everything it owns: events, step attempts, plans, checkpoints.
///
/// A run that has not finished is a 409: cancel it first. Its idempotency key is free again
/// once it is deleted.
#[utoipa::path(
    delete, path = "/v1/runs/{id}", tag = "runs",
    params(("id" = String, Path, description = "Run id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The run has not finished", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn delete_run(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = parse_run_id(&id)?;
    match state.engine.delete_run(&tenant, id).await {
        Ok(()) => Ok(StatusCode::NO_CONTENT),
        Err(engine::Error::NotFound) => Err(ApiError::NotFound(format!("no run `{id}`"))),
        Err(engine::Error::Conflict(message)) => Err(ApiError::Conflict(message)),
        Err(engine::Error::Store(e)) => Err(e.into()),
        Err(e) => Err(ApiError::internal(e)),
    }
}

/// The longest `q` of `GET /v1/runs`, in characters.
const MAX_SEARCH_CHARS: usize = 200;

/// `q` of `GET /v1/runs` as the store takes it: None when empty (no filter).
fn search_text(v: &str) -> Result<Option<String>, String> {
    if v.chars().count() > MAX_SEARCH_CHARS {
        return Err(format!("q must be at most {MAX_SEARCH_CHARS} characters"));
    }
    // PostgreSQL text cannot hold NUL, and no input contains one.
    if v.contains('\0') {
        return Err("q must not contain a NUL character".into());
    }
    Ok(Some(v.to_owned()).filter(|t| !t.is_empty()))
}

/// List runs, newest first.
///
/// Filters: `status`, `completion` (`partial`: runs that succeeded with only part of the task
/// done), `orchestration`, `session_id`, `created_after`, `created_before` (RFC 3339),
/// `metadata.KEY=VALUE`, `q` (text the input contains, ignoring case; `%` and `_` match
/// themselves), `parent_id` (the forks of a run); `limit` (1-200, default 50); `cursor` from
/// the previous page. An unknown parameter is a 422 that lists the known ones.
#[utoipa::path(
    get, path = "/v1/runs", tag = "runs",
    params(
        ("status" = Option<RunStatus>, Query),
        ("completion" = Option<Completion>, Query, description = "Only runs that ended with this completion; `partial`: succeeded with only part of the task done"),
        ("orchestration" = Option<Orchestration>, Query),
        ("session_id" = Option<String>, Query, min_length = 1, max_length = 200, description = "Only the runs of this session"),
        ("user_id" = Option<String>, Query, pattern = "^[A-Za-z0-9_.:@~-]{1,128}$", description = "Only the runs of this user (a key bound to a user sees only its own)"),
        ("created_after" = Option<String>, Query, format = DateTime),
        ("created_before" = Option<String>, Query, format = DateTime),
        // The handler refuses a NUL (PostgreSQL text cannot hold one) as it refuses a long `q`.
        ("q" = Option<String>, Query, max_length = 200, pattern = "^[^\\u0000]*$", description = "Only runs whose input contains this text (a string input as the string, an object input as its JSON text), ignoring case (on SQLite, of ASCII letters only). `%` and `_` match themselves; empty means no filter."),
        ("parent_id" = Option<String>, Query, format = Uuid, description = "Only the runs forked from this run (`POST /v1/runs/{id}/fork`)"),
        ("limit" = Option<u32>, Query, maximum = 200, minimum = 1),
        ("cursor" = inline(Option<PageCursor>), Query),
    ),
    responses(
        (status = 200, body = RunList),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_runs(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Extension(bound): Extension<BoundUser>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<RunList>, ApiError> {
    let mut filter = filter_of(&params)?;
    filter.user_id = bound.narrow(filter.user_id)?;
    let limit = filter.limit;
    filter.limit += 1; // one more tells whether a next page exists
    let mut runs = state.runs.list(&tenant, &filter).await?;
    let next_cursor = if runs.len() > limit as usize {
        runs.truncate(limit as usize);
        runs.last().map(|r| r.id.to_string())
    } else {
        None
    };
    Ok(Json(RunList { runs, next_cursor }))
}

/// The query parameters `GET /v1/runs` knows, as an unknown one's problem lists them.
const RUN_LIST_PARAMETERS: &[&str] = &[
    "status",
    "completion",
    "orchestration",
    "session_id",
    "user_id",
    "parent_id",
    "created_after",
    "created_before",
    "q",
    "metadata.KEY",
    "limit",
    "cursor",
];

/// The filter `GET /v1/runs`'s query asks for, or every problem of it as one 422.
fn filter_of(params: &[(String, String)]) -> Result<RunFilter, ApiError> {
    let mut filter = RunFilter {
        limit: 50,
        ..Default::default()
    };
    let mut errors = Vec::new();
    let time = |v: &str| DateTime::parse_from_rfc3339(v).map(|t| t.with_timezone(&Utc));
    let mut seen = std::collections::HashSet::new();
    for (k, v) in params {
        if let Err(e) = super::extract::given_once(&mut seen, k) {
            errors.push(e);
            continue;
        }
        let pointer = format!("/query/{}", super::extract::escape_pointer(k));
        let mut refuse = |message: String| errors.push(FieldError::new(pointer.clone(), message));
        match k.as_str() {
            "status" => match RunStatus::parse(v) {
                Some(s) => filter.status = Some(s),
                None => refuse(format!("unknown status `{v}`")),
            },
            "completion" => match Completion::parse(v) {
                Some(c) => filter.completion = Some(c),
                None => refuse(format!(
                    "unknown completion `{v}` (known: `success`, `partial`, `error`, `timeout` or `cancelled`)"
                )),
            },
            "orchestration" => match Orchestration::parse(v) {
                Some(o) => filter.orchestration = Some(o),
                None => refuse(format!("unknown orchestration `{v}`")),
            },
            "session_id" => match v.chars().count() {
                1..=200 => filter.session_id = Some(v.clone()),
                _ => refuse("a session id is 1-200 characters".into()),
            },
            "user_id" => match crate::domain::memory::check_user_id(v) {
                Ok(()) => filter.user_id = Some(v.clone()),
                Err(message) => refuse(message),
            },
            "created_after" => match time(v) {
                Ok(t) => filter.created_after = Some(t),
                Err(_) => refuse("expected an RFC 3339 time".into()),
            },
            "created_before" => match time(v) {
                Ok(t) => filter.created_before = Some(t),
                Err(_) => refuse("expected an RFC 3339 time".into()),
            },
            "limit" => match super::extract::page_limit(v) {
                Ok(n) => filter.limit = n,
                Err(message) => refuse(message),
            },
            "q" => match search_text(v) {
                Ok(text) => filter.text = text,
                Err(message) => refuse(message),
            },
            "cursor" => match RunId::parse(v) {
                Some(id) => filter.before_id = Some(id),
                None => refuse("not a cursor from this API".into()),
            },
            "parent_id" => match RunId::parse(v) {
                Some(id) => filter.parent = Some(id),
                None => refuse("not a run id".into()),
            },
            key if key.starts_with("metadata.") && key.len() > "metadata.".len() => {
                filter
                    .metadata
                    .push((key["metadata.".len()..].to_owned(), v.clone()));
            }
            _ => errors.push(super::extract::unknown_parameter(k, RUN_LIST_PARAMETERS)),
        }
    }
    if errors.is_empty() {
        Ok(filter)
    } else {
        Err(ApiError::validation_many(errors))
    }
}

#[derive(Debug, Deserialize)]
pub struct EventsQuery {
    after: Option<String>,
}

/// A run's events.
///
/// Server-Sent Events by default: the history, then live events until `final`. Resume with
/// `Last-Event-ID: N` or `?after=N`. A finished run with no event after N answers 204 No Content
/// at once (a browser's EventSource stops reconnecting on 204). N at or above 2^63 means "after
/// everything"; N beyond the 64-bit range is a 422. With `Accept: application/json`, the
/// history (events after N) as an array.
#[utoipa::path(
    get, path = "/v1/runs/{id}/events", tag = "runs",
    params(
        ("id" = String, Path),
        // `usize`: an integer with no `format` (int64 stops at 2^63); the handler reads a u64.
        ("after" = Option<usize>, Query, maximum = 18446744073709551615u64, description = "Only events with seq > after"),
        ("Last-Event-ID" = Option<usize>, Header, nullable = false, maximum = 18446744073709551615u64, description = "Same as after"),
    ),
    responses(
        (status = 200, description = "text/event-stream, or a JSON array with Accept: application/json",
            content((Vec<Event> = "application/json"), (inline(ServerSentEvents) = "text/event-stream"))),
        (status = 204, description = "The run has finished and no event follows `after` / `Last-Event-ID` (event streams only)"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "`after` or `Last-Event-ID` is not a non-negative 64-bit integer", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn run_events(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    Query(q): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = own_run(&state, &tenant, &id).await?;
    let mut after = 0u64;
    if let Some(v) = headers.get("last-event-id") {
        after = v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| {
                ApiError::validation(
                    "/headers/last-event-id",
                    "Last-Event-ID must be an event seq",
                )
            })?;
    }
    if let Some(v) = q.after {
        after = v
            .parse()
            .map_err(|_| ApiError::validation("/query/after", "after must be an event seq"))?;
    }
    let json_wanted = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/json") && !v.contains("text/event-stream"));
    if json_wanted {
        let mut all = Vec::new();
        loop {
            let page = state.history.events_after(id, after, 1000).await?;
            let n = page.len();
            if let Some(last) = page.last() {
                after = last.seq;
            }
            all.extend(page);
            if n < 1000 {
                break;
            }
        }
        return Ok(Json(all).into_response());
    }
    // A finished run with nothing after `after` ends the request at once: 204 tells a
    // reconnecting EventSource (which sends `Last-Event-ID` after `final`) to stop reconnecting,
    // where an empty 200 stream would make it reconnect forever. `?after=N` gets the same.
    let tail = state.history.tail(id).await?;
    let tail = tail.ok_or_else(|| ApiError::NotFound(format!("no run `{id}`")))?;
    if tail.ended_by(after) {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let events = state.events.follow(id, after, state.shutdown.clone());
    Ok(sse(&state, events))
}

/// The SSE response for a run's events (replay, then live, then `final`).
fn sse(
    state: &AppState,
    events: impl Stream<Item = Result<Arc<Event>, crate::store::Error>> + Send + 'static,
) -> Response {
    let keep_alive = Duration::from_secs(state.config.server.keep_alive_secs);
    super::sse::response(events, keep_alive)
}

/// Every step attempt of a run, in start order.
#[utoipa::path(
    get, path = "/v1/runs/{id}/steps", tag = "runs",
    params(("id" = String, Path)),
    responses(
        (status = 200, body = Vec<StepView>),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn run_steps(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Json<Vec<StepView>>, ApiError> {
    let id = parse_run_id(&id)?;
    let stored = stored_run(&state, &tenant, id).await?;
    let pins = &stored.spec.definitions;
    let attempts = state.history.step_attempts(id).await?;
    Ok(Json(
        (attempts.into_iter())
            .map(|attempt| StepView {
                definition: definition_of(&attempt, pins),
                attempt,
            })
            .collect(),
    ))
}

/// A step attempt as `GET /v1/runs/{id}/steps` shows it: with the version of the registered
/// definition it ran, when it ran one.
#[derive(Debug, Serialize, ToSchema)]
pub struct StepView {
    #[serde(flatten)]
    pub attempt: StepAttempt,
    /// The registered agent, workflow or declared tool the attempt ran, at the version the
    /// run uses (one of the run's `definitions`); absent for a step that ran none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub definition: Option<Pin>,
}

/// The pin of the definition an attempt names in its input (`agent`, `workflow`, the `tool`
/// of a tool step, the `function` of an llm step), if the run uses a registered one of that
/// name.
fn definition_of(attempt: &StepAttempt, pins: &[Pin]) -> Option<Pin> {
    use crate::domain::definition::DefinitionKind as Kind;
    let input = attempt.input.as_ref()?;
    let named = |key: &str| input.get(key).and_then(Value::as_str);
    let (kind, name) = match (named("agent"), named("workflow")) {
        (Some(agent), _) => (Kind::Agent, agent),
        (None, Some(workflow)) => (Kind::Workflow, workflow),
        _ if attempt.kind == crate::domain::StepKind::Tool => (Kind::Tool, named("tool")?),
        _ if attempt.kind == crate::domain::StepKind::Llm => (Kind::Function, named("function")?),
        _ => return None,
    };
    pins.iter()
        .find(|p| p.kind == kind && p.name == name)
        .cloned()
}

/// Cancel a run: it ends `cancelled`; in-flight LLM and tool calls are aborted.
#[utoipa::path(
    post, path = "/v1/runs/{id}/cancel", tag = "runs",
    params(("id" = String, Path)),
    responses(
        (status = 202, description = "Cancellation requested", body = Run),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Already terminal", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn cancel_run(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Run>), ApiError> {
    let id = parse_run_id(&id)?;
    match state.engine.cancel(&tenant, id).await {
        Ok(run) => Ok((StatusCode::ACCEPTED, Json(run))),
        Err(engine::Error::NotFound) => Err(ApiError::NotFound(format!("no run `{id}`"))),
        Err(engine::Error::AlreadyTerminal(s)) => {
            Err(ApiError::Conflict(format!("the run is already {s}")))
        }
        Err(e) => Err(ApiError::internal(e)),
    }
}

/// The body of `POST /v1/runs/{id}/replan`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplanRequest {
    /// What the user wants changed; the re-planner reads it. Optional with `restore_version`.
    #[serde(default)]
    pub message: Option<String>,
    /// Go back to this earlier plan version (1 to the current one minus 1) instead of asking
    /// the re-planner: it becomes the next version, with strategy `restore`; the completed
    /// steps it has keep their outputs, the rest run.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub restore_version: Option<u32>,
}

/// The longest re-plan message accepted, in characters.
const MAX_REPLAN_MESSAGE: usize = 8_000;

/// Ask a running `reactive` run for a new plan version, with a message for the re-planner.
/// Accepted while the run waits for input too; the request is stored before the 202.
#[utoipa::path(
    post, path = "/v1/runs/{id}/replan", tag = "runs",
    params(("id" = String, Path)),
    request_body = ReplanRequest,
    responses(
        (status = 202, description = "Stored; the run re-plans next", body = Run),
        (status = 400, description = "Malformed JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Terminal, or not a reactive run", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than server.body_limit_bytes", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body was not sent as application/json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn request_replan(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<(StatusCode, Json<Run>), ApiError> {
    let id = parse_run_id(&id)?;
    let request: ReplanRequest = deserialize_located(body)?;
    let message = match (
        request.message.as_deref().map(str::trim),
        request.restore_version,
    ) {
        (Some(m), _) if !m.is_empty() && m.chars().count() <= MAX_REPLAN_MESSAGE => m.to_owned(),
        (None, Some(version)) => format!("go back to plan version {version}"),
        _ => {
            return Err(ApiError::validation_many(vec![FieldError::new(
                "/message",
                format!(
                    "`message` must be 1 to {MAX_REPLAN_MESSAGE} characters of text (it may be left out with `restore_version`)"
                ),
            )]));
        }
    };
    let asked = state
        .engine
        .request_replan(&tenant, id, &message, request.restore_version);
    match asked.await {
        Ok(_) => Ok((
            StatusCode::ACCEPTED,
            Json(load_run(&state, &tenant, id).await?),
        )),
        Err(engine::Error::NotFound) => Err(ApiError::NotFound(format!("no run `{id}`"))),
        Err(engine::Error::AlreadyTerminal(s)) => {
            Err(ApiError::Conflict(format!("the run is already {s}")))
        }
        Err(engine::Error::Conflict(message)) => Err(ApiError::Conflict(message)),
        Err(engine::Error::Invalid(problems)) => Err(ApiError::problems(problems)),
        Err(engine::Error::Store(e)) => {
            tracing::error!(error = ?e, "storing a re-plan request failed");
            Err(ApiError::Unavailable(
                "the request could not be stored; send it again".into(),
            ))
        }
        Err(e) => Err(ApiError::internal(e)),
    }
}

/// The body of `POST /v1/runs/{id}/input`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InputAnswer {
    /// The step_id of the input_required event.
    #[schema(min_length = 1)]
    pub step_id: String,
    /// Any JSON value; the step's schema, when it has one, decides.
    pub value: Value,
}

/// Answer a run's `input_required` event.
#[utoipa::path(
    post, path = "/v1/runs/{id}/input", tag = "runs",
    params(("id" = String, Path)),
    request_body = InputAnswer,
    responses(
        (status = 202, description = "Accepted; the run continues", body = Run),
        (status = 400, description = "Malformed JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The run is not waiting on that step", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than server.body_limit_bytes", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body was not sent as application/json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "The value fails the step's schema", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn submit_input(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<(StatusCode, Json<Run>), ApiError> {
    let id = parse_run_id(&id)?;
    let mut errors = Vec::new();
    match body.get("step_id") {
        Some(Value::String(s)) if !s.is_empty() => {}
        Some(_) => errors.push(FieldError::new(
            "/step_id",
            "`step_id` must be a non-empty string",
        )),
        None => errors.push(FieldError::new("/step_id", "`step_id` is required")),
    }
    if body.get("value").is_none() {
        errors.push(FieldError::new("/value", "`value` is required"));
    }
    if let Some(obj) = body.as_object() {
        for k in obj.keys().filter(|k| *k != "step_id" && *k != "value") {
            errors.push(FieldError::new(
                format!("/{}", super::extract::escape_pointer(k)),
                format!("`{k}` is not a known field"),
            ));
        }
    } else {
        errors = vec![FieldError::new(
            "",
            "the body must be an object {step_id, value}",
        )];
    }
    if !errors.is_empty() {
        return Err(ApiError::validation_many(errors));
    }
    let answer: InputAnswer = deserialize_located(body)?;
    answer_input(&state, &tenant, id, &answer.step_id, answer.value).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(load_run(&state, &tenant, id).await?),
    ))
}

/// Gives a waiting step its answer, with the API's errors: 404 unknown run, 409 not waiting
/// on that step or terminal, 422 an answer its schema refuses. Shared with the AG-UI endpoint.
pub(super) async fn answer_input(
    state: &AppState,
    tenant: &Tenant,
    id: RunId,
    step_id: &str,
    value: Value,
) -> Result<(), ApiError> {
    match state.engine.submit_input(tenant, id, step_id, value).await {
        Ok(()) => Ok(()),
        Err(engine::SubmitError::Engine(engine::Error::NotFound)) => {
            Err(ApiError::NotFound(format!("no run `{id}`")))
        }
        Err(engine::SubmitError::Engine(engine::Error::AlreadyTerminal(s))) => {
            Err(ApiError::Conflict(format!("the run is already {s}")))
        }
        Err(engine::SubmitError::Engine(engine::Error::Store(e))) => {
            tracing::error!(error = ?e, "storing an answer failed");
            Err(ApiError::Unavailable(
                "the answer could not be stored; send it again".into(),
            ))
        }
        Err(engine::SubmitError::Engine(e)) => Err(ApiError::internal(e)),
        Err(engine::SubmitError::Input(engine::runtime::input::InputError::Invalid(problems))) => {
            Err(ApiError::validation_many(
                problems
                    .into_iter()
                    .map(|p| FieldError::new(p.pointer, p.message))
                    .collect(),
            ))
        }
        Err(engine::SubmitError::Input(e)) => Err(ApiError::Conflict(e.to_string())),
    }
}
