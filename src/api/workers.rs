//! The worker protocol (issue 47): `POST /v1/workers/poll` (a long poll that claims tasks of a
//! queue under a lease), `POST /v1/tasks/{id}/heartbeat|complete|fail`, and what shows them:
//! `GET /v1/workers`, `GET /v1/tasks`, `GET /v1/tasks/{id}`. Everything is the caller's
//! tenant's: another tenant's task is 404. A refused heartbeat or completion is 409 `conflict`
//! with a `reason` and changes nothing (`store::tasks` decides, in one statement each).

use std::time::Duration;

use axum::extract::State;
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, Path, Query, deserialize_located};
use crate::domain::Tenant;
use crate::store::tasks::{
    Poll, Refusal, Reported, Retry, SeenWorker, Task, TaskError, TaskFilter, TaskStatus,
};

/// The longest a poll waits for a task.
const MAX_WAIT_MS: u64 = 30_000;
/// How often a waiting poll looks again although no bell rang (a backoff that ran out).
const RECHECK: Duration = Duration::from_secs(1);
/// How recently a worker polled to be listed.
const SEEN_WITHIN_MS: i64 = 5 * 60 * 1000;

/// The worker protocol's routes, under `/v1`.
pub fn routes() -> axum::Router<AppState> {
    use axum::routing::{get, post};
    axum::Router::new()
        .route("/workers", get(list_workers))
        .route("/workers/poll", post(poll_tasks))
        .route("/tasks", get(list_tasks))
        .route("/tasks/{id}", get(get_task))
        .route("/tasks/{id}/heartbeat", post(heartbeat_task))
        .route("/tasks/{id}/complete", post(complete_task))
        .route("/tasks/{id}/fail", post(fail_task))
}

/// A task as workers and listings see it.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskView {
    pub id: String,
    pub tool: String,
    pub queue: String,
    #[schema(value_type = Object)]
    pub arguments: Value,
    /// The same on every offer of this task: key your side effects by it.
    pub idempotency_key: String,
    pub status: TaskStatus,
    /// Claims so far (1-based once claimed).
    pub attempt: u32,
    pub max_attempts: u32,
    pub run_id: String,
    pub step_id: String,
    /// The step's parents, `/`-separated; `null` at the top.
    pub path: Option<String>,
    pub call_id: String,
    pub worker_id: Option<String>,
    pub heartbeat_ms: Option<u64>,
    pub start_to_close_ms: u64,
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// The last progress a heartbeat gave: any JSON.
    pub progress: Option<Value>,
    /// What the worker completed it with: any JSON.
    pub output: Option<Value>,
    pub error: Option<TaskError>,
    pub created_at: DateTime<Utc>,
    pub claimed_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl From<Task> for TaskView {
    fn from(t: Task) -> Self {
        TaskView {
            id: t.id,
            tool: t.tool,
            queue: t.queue,
            arguments: t.arguments,
            idempotency_key: t.idempotency_key,
            status: t.status,
            attempt: t.attempt,
            max_attempts: t.max_attempts,
            run_id: t.run_id.to_string(),
            step_id: t.step_id,
            path: t.path,
            call_id: t.call_id,
            worker_id: t.worker_id,
            heartbeat_ms: t.heartbeat_ms,
            start_to_close_ms: t.start_to_close_ms,
            lease_expires_at: t.lease_expires_at,
            progress: t.progress,
            output: t.output,
            error: t.error,
            created_at: t.created_at,
            claimed_at: t.claimed_at,
            finished_at: t.finished_at,
        }
    }
}

/// What a worker asks for.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PollBody {
    /// `[A-Za-z0-9_.:-]{1,128}`: who is asking (one id per worker process).
    pub worker_id: String,
    pub queue: String,
    /// Only these tools of the queue; empty or absent: any.
    #[serde(default)]
    pub tools: Vec<String>,
    /// 1 to 32.
    #[serde(default = "one")]
    pub max_tasks: u32,
    /// 0 to 30000: how long to wait for a task.
    #[serde(default = "max_wait")]
    pub wait_ms: u64,
}

fn one() -> u32 {
    1
}
fn max_wait() -> u64 {
    MAX_WAIT_MS
}

/// The tasks claimed for the worker (none when `wait_ms` passed first).
#[derive(Debug, Serialize, ToSchema)]
pub struct Polled {
    pub tasks: Vec<TaskView>,
}

fn id_ok(id: &str, max: usize) -> bool {
    (1..=max).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c))
}

impl PollBody {
    fn problems(&self) -> Vec<FieldError> {
        let mut out = Vec::new();
        if !id_ok(&self.worker_id, 128) {
            out.push(FieldError::new(
                "/worker_id",
                "1 to 128 of letters, digits, `_`, `.`, `:` and `-`",
            ));
        }
        if !id_ok(&self.queue, 64) {
            out.push(FieldError::new(
                "/queue",
                "1 to 64 of letters, digits, `_`, `.`, `:` and `-`",
            ));
        }
        if self.tools.len() > 64 {
            out.push(FieldError::new("/tools", "at most 64 tools"));
        }
        for (i, tool) in self.tools.iter().enumerate() {
            if !id_ok(tool, 64) {
                out.push(FieldError::new(format!("/tools/{i}"), "not a tool name"));
            }
        }
        if !(1..=32).contains(&self.max_tasks) {
            out.push(FieldError::new("/max_tasks", "between 1 and 32"));
        }
        if self.wait_ms > MAX_WAIT_MS {
            out.push(FieldError::new("/wait_ms", "between 0 and 30000"));
        }
        out
    }
}

fn checked<T: serde::de::DeserializeOwned>(body: Value) -> Result<T, ApiError> {
    deserialize_located(body)
}

/// Poll a queue for tasks: claims up to `max_tasks` for this worker under a lease, answering as
/// soon as one is claimed or after `wait_ms` with none.
#[utoipa::path(post, path = "/v1/workers/poll", tag = "workers",
    request_body = PollBody,
    responses((status = 200, body = Polled),
        (status = 400, description = "Not JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body was not sent as application/json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 429, description = "The tenant holds too many polls open", body = super::error::Problem, content_type = "application/problem+json")))]
pub async fn poll_tasks(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    JsonBody(body): JsonBody,
) -> Result<Json<Polled>, ApiError> {
    let body: PollBody = checked(body)?;
    let problems = body.problems();
    if !problems.is_empty() {
        return Err(ApiError::validation_many(problems));
    }
    let tasks = state.engine.tasks();
    let cap = state.config.tools.worker_max_polls_per_tenant;
    let Some(_held) = tasks.hub().enter_poll(&tenant.0, cap) else {
        return Err(ApiError::TooManyRequests {
            message: format!(
                "this tenant already holds {cap} polls open on this server \
                 (tools.worker_max_polls_per_tenant)"
            ),
            retry_after_secs: 1,
        });
    };
    let poll = Poll {
        tenant: &tenant,
        worker_id: &body.worker_id,
        queue: &body.queue,
        tools: &body.tools,
        max_tasks: body.max_tasks,
    };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(body.wait_ms);
    loop {
        let bell = tasks.hub().queued_bell();
        let rang = bell.notified();
        tokio::pin!(rang);
        rang.as_mut().enable();
        let claimed = tasks.claim(&poll).await?;
        let now = tokio::time::Instant::now();
        if !claimed.is_empty() || now >= deadline {
            let tasks = claimed.into_iter().map(TaskView::from).collect();
            return Ok(Json(Polled { tasks }));
        }
        tokio::select! {
            () = &mut rang => {}
            () = tokio::time::sleep(RECHECK.min(deadline - now)) => {}
            () = state.shutdown.cancelled() => return Ok(Json(Polled { tasks: Vec::new() })),
        }
    }
}

/// A heartbeat, with progress the run's clients see.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatBody {
    pub worker_id: String,
    /// Any JSON; the run's clients see it.
    #[serde(default)]
    pub progress: Option<Value>,
}

/// The claim's new lease.
#[derive(Debug, Serialize, ToSchema)]
pub struct Lease {
    pub lease_expires_at: Option<DateTime<Utc>>,
}

/// A task's completion.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteBody {
    pub worker_id: String,
    /// Any JSON: the tool call's result.
    pub output: Value,
}

/// A task's failure.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FailBody {
    pub worker_id: String,
    pub error: TaskError,
    /// Offer the task again while attempts remain (the default), or fail it now.
    #[serde(default = "yes")]
    pub retryable: bool,
}

fn yes() -> bool {
    true
}

/// What a refusal or an unknown task answers.
fn refused<T>(reported: Reported<T>, id: &str) -> Result<T, ApiError> {
    match reported {
        Reported::Done(t) => Ok(t),
        Reported::Unknown => Err(ApiError::NotFound(format!("no task `{id}`"))),
        Reported::Refused(why) => Err(ApiError::TaskConflict {
            reason: why.as_str(),
            detail: match why {
                Refusal::Cancelled => "the task was cancelled (its run was): stop working on it",
                Refusal::LeaseExpired => "this claim lapsed: the task was offered again or ended",
                Refusal::NotYours => "another worker holds this task",
                Refusal::Finished => "the task has already ended; a second report changes nothing",
            }
            .into(),
        }),
    }
}

fn worker_ok(worker: &str) -> Result<(), ApiError> {
    match id_ok(worker, 128) {
        true => Ok(()),
        false => Err(ApiError::validation(
            "/worker_id",
            "1 to 128 of letters, digits, `_`, `.`, `:` and `-`",
        )),
    }
}

/// Extend the claim's lease, optionally with progress.
#[utoipa::path(post, path = "/v1/tasks/{id}/heartbeat", tag = "workers",
    params(("id" = String, Path, format = Uuid)), request_body = HeartbeatBody,
    responses((status = 200, body = Lease),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Refused: `reason` says why", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 400, description = "Not JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body was not sent as application/json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json")))]
pub async fn heartbeat_task(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<Lease>, ApiError> {
    task_id_ok(&id)?;
    let body: HeartbeatBody = checked(body)?;
    worker_ok(&body.worker_id)?;
    let tasks = state.engine.tasks();
    let reported = (tasks.heartbeat(&tenant, &id, &body.worker_id, body.progress.as_ref())).await?;
    let task = refused(reported, &id)?;
    Ok(Json(Lease {
        lease_expires_at: task.lease_expires_at,
    }))
}

/// Complete the claimed task with its output: accepted once.
#[utoipa::path(post, path = "/v1/tasks/{id}/complete", tag = "workers",
    params(("id" = String, Path, format = Uuid)), request_body = CompleteBody,
    responses((status = 200, body = TaskView),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Refused: `reason` says why", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 400, description = "Not JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body was not sent as application/json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json")))]
pub async fn complete_task(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<TaskView>, ApiError> {
    task_id_ok(&id)?;
    let body: CompleteBody = checked(body)?;
    worker_ok(&body.worker_id)?;
    let tasks = state.engine.tasks();
    let reported = tasks
        .complete(&tenant, &id, &body.worker_id, &body.output)
        .await?;
    Ok(Json(refused(reported, &id)?.into()))
}

/// Fail the claimed task: offered again after its backoff while attempts remain and
/// `retryable`, else failed (and so the step that called it).
#[utoipa::path(post, path = "/v1/tasks/{id}/fail", tag = "workers",
    params(("id" = String, Path, format = Uuid)), request_body = FailBody,
    responses((status = 200, body = TaskView),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Refused: `reason` says why", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 400, description = "Not JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body was not sent as application/json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json")))]
pub async fn fail_task(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<TaskView>, ApiError> {
    task_id_ok(&id)?;
    let body: FailBody = checked(body)?;
    worker_ok(&body.worker_id)?;
    let code_ok = (1..=64).contains(&body.error.code.len())
        && (body.error.code.chars())
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !code_ok {
        return Err(ApiError::validation(
            "/error/code",
            "a snake_case word of at most 64 characters",
        ));
    }
    if body.error.message.chars().count() > 4000 {
        return Err(ApiError::validation(
            "/error/message",
            "at most 4000 characters",
        ));
    }
    let retry = if body.retryable {
        Retry::Allowed
    } else {
        Retry::Never
    };
    let tasks = state.engine.tasks();
    let reported = (tasks.fail(&tenant, &id, &body.worker_id, &body.error, retry)).await?;
    Ok(Json(refused(reported, &id)?.into()))
}

/// One task of the caller's tenant.
#[utoipa::path(get, path = "/v1/tasks/{id}", tag = "workers",
    params(("id" = String, Path, format = Uuid)),
    responses((status = 200, body = TaskView),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json")))]
pub async fn get_task(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Json<TaskView>, ApiError> {
    task_id_ok(&id)?;
    let task = state.engine.tasks().get_for(&tenant, &id).await?;
    task.map(|t| Json(t.into()))
        .ok_or_else(|| ApiError::NotFound(format!("no task `{id}`")))
}

/// Filters of `GET /v1/tasks`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct TaskQuery {
    #[param(value_type = Option<TaskStatus>)]
    pub status: Option<String>,
    #[param(pattern = "^[A-Za-z0-9_.:-]{1,64}$")]
    pub queue: Option<String>,
    #[param(pattern = "^[A-Za-z0-9_.:-]{1,64}$")]
    pub tool: Option<String>,
    #[param(format = Uuid)]
    pub run_id: Option<String>,
    /// At most 200; 50 by default.
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    #[param(pattern = "^[0-9]{1,15}:[0-9a-f-]{36}$")]
    pub cursor: Option<String>,
}

/// A page of tasks, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskList {
    pub tasks: Vec<TaskView>,
    pub next_cursor: Option<String>,
}

/// The caller's tasks, newest first, filtered.
#[utoipa::path(get, path = "/v1/tasks", tag = "workers", params(TaskQuery),
    responses((status = 200, body = TaskList),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json")))]
pub async fn list_tasks(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Query(q): Query<TaskQuery>,
) -> Result<Json<TaskList>, ApiError> {
    let status = match q.status.as_deref() {
        Some(s) => Some(TaskStatus::parse(s).ok_or_else(|| {
            ApiError::validation(
                "/query/status",
                "queued, claimed, completed, failed or cancelled",
            )
        })?),
        None => None,
    };
    for (name, value) in [("queue", &q.queue), ("tool", &q.tool)] {
        if value.as_deref().is_some_and(|v| !id_ok(v, 64)) {
            return Err(ApiError::validation(
                &format!("/query/{name}"),
                "1 to 64 of letters, digits, `_`, `.`, `:` and `-`",
            ));
        }
    }
    if q.run_id
        .as_deref()
        .is_some_and(|r| uuid::Uuid::parse_str(r).is_err())
    {
        return Err(ApiError::validation("/query/run_id", "not a run id"));
    }
    let limit = q.limit.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(ApiError::validation("/query/limit", "between 1 and 200"));
    }
    let after = match q.cursor.as_deref() {
        Some(c) => Some(parse_cursor(c)?),
        None => None,
    };
    let filter = TaskFilter {
        status,
        queue: q.queue.as_deref(),
        tool: q.tool.as_deref(),
        run_id: q.run_id.as_deref(),
        limit: limit + 1,
        after: after.as_ref().map(|(ms, id)| (*ms, id.as_str())),
    };
    let mut tasks = state.engine.tasks().list(&tenant, &filter).await?;
    let next_cursor = match tasks.len() > limit as usize {
        true => {
            tasks.truncate(limit as usize);
            tasks
                .last()
                .map(|t| format!("{}:{}", t.created_at.timestamp_millis(), t.id))
        }
        false => None,
    };
    let tasks = tasks.into_iter().map(TaskView::from).collect();
    Ok(Json(TaskList { tasks, next_cursor }))
}

/// Task ids are UUIDs: anything else is no task (and never reaches the store).
fn task_id_ok(id: &str) -> Result<(), ApiError> {
    match uuid::Uuid::parse_str(id) {
        Ok(_) => Ok(()),
        Err(_) => Err(ApiError::NotFound(format!(
            "no task `{}`",
            id.escape_debug()
        ))),
    }
}

fn parse_cursor(cursor: &str) -> Result<(i64, String), ApiError> {
    cursor
        .split_once(':')
        .and_then(|(ms, id)| Some((ms.parse().ok()?, id.to_owned())))
        .ok_or_else(|| ApiError::validation("/query/cursor", "not a cursor this server gave"))
}

/// A worker that polled recently.
#[derive(Debug, Serialize, ToSchema)]
pub struct WorkerView {
    pub worker_id: String,
    pub queues: Vec<String>,
    pub tools: Vec<String>,
    pub last_poll_at: DateTime<Utc>,
    /// Tasks it holds now.
    pub in_flight: u64,
}

/// The workers that polled in the last five minutes.
#[derive(Debug, Serialize, ToSchema)]
pub struct WorkerList {
    pub workers: Vec<WorkerView>,
}

/// The caller's workers that polled in the last five minutes, most recent first.
#[utoipa::path(get, path = "/v1/workers", tag = "workers",
    responses((status = 200, body = WorkerList)))]
pub async fn list_workers(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
) -> Result<Json<WorkerList>, ApiError> {
    let seen = state
        .engine
        .tasks()
        .workers(&tenant, SEEN_WITHIN_MS)
        .await?;
    let workers = seen
        .into_iter()
        .map(|w: SeenWorker| WorkerView {
            worker_id: w.worker_id,
            queues: w.queues,
            tools: w.tools,
            last_poll_at: w.last_poll_at,
            in_flight: w.in_flight,
        })
        .collect();
    Ok(Json(WorkerList { workers }))
}
