//! `/v1/runs/{id}/plans`, `/v1/runs/{id}/checkpoints` and `/v1/runs/{id}/timeline`: what a
//! planned run decided, where it can resume from, and where its time went. Read-only; the
//! engine writes the history, `crate::timeline` computes the timeline from it.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};

use crate::domain::Tenant;
use crate::store::{Checkpoint, PlanRecord};
use crate::timeline::{self, Timeline};

use super::AppState;
use super::error::{ApiError, FieldError};
use super::extract::{Path, Query};
use super::runs::{own_run, parse_run_id};

/// What runs recorded, under `/v1`: plan versions, checkpoints, the timeline.
pub fn routes() -> axum::Router<AppState> {
    use axum::routing::get;
    axum::Router::new()
        .route("/runs/{id}/plans", get(run_plans))
        .route("/runs/{id}/checkpoints", get(run_checkpoints))
        .route("/runs/{id}/timeline", get(run_timeline))
}

/// Every plan version of a run, oldest first, with the reason it was made (`initial`, or the
/// replan trigger). Empty for runs that do not plan.
#[utoipa::path(
    get, path = "/v1/runs/{id}/plans", tag = "runs",
    params(("id" = String, Path, description = "Run id")),
    responses(
        (status = 200, body = Vec<PlanRecord>),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn run_plans(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Json<Vec<PlanRecord>>, ApiError> {
    let id = own_run(&state, &tenant, &id).await?;
    Ok(Json(state.history.plans(id).await?))
}

/// A run's timeline: spans, waits, critical path, latency breakdown and decisions.
///
/// Every step attempt is a span (with its parent, tokens and calls); waits are queue, human
/// input and retry backoff; the critical path is the chain of what actually ran up to the
/// end; the breakdown splits the run's time into model, tools, timers, human, backoff, queue
/// and orchestrator; decisions are plans, re-plans, loop detection and status messages. Works for a run still going: what is open is measured up to `as_of`, the time of the
/// answer. `docs/api.md`, "Timeline", defines every figure.
#[utoipa::path(
    get, path = "/v1/runs/{id}/timeline", tag = "runs",
    params(("id" = String, Path, description = "Run id")),
    responses(
        (status = 200, body = Timeline),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn run_timeline(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Json<Timeline>, ApiError> {
    let id = parse_run_id(&id)?;
    let history = state
        .history
        .timeline(&tenant, id, &timeline::UNUSED_EVENT_KINDS)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no run `{id}`")))?;
    Ok(Json(timeline::build(
        &history.run,
        &history.attempts,
        &history.events,
        crate::domain::now(),
    )))
}

/// Checkpoints per page unless `limit` says otherwise, and the most a page holds.
const PAGE: u32 = 100;
const MAX_PAGE: u32 = 1000;

/// A run's checkpoints, oldest first, a page at a time.
///
/// Each checkpoint records what changed since the one before (a step's result, a child's
/// result, the messages a conversation gained). `after` (a checkpoint id) and `limit`
/// (1-1000, default 100) page through them; a `Link: <...>; rel="next"` header points at the
/// next page while there is one.
#[utoipa::path(
    get, path = "/v1/runs/{id}/checkpoints", tag = "runs",
    params(
        ("id" = String, Path, description = "Run id"),
        // Any u64: an id past every stored one is an empty page, never an error. `usize`: an
        // integer with no `format` (int64 stops at 2^63).
        ("after" = Option<usize>, Query, maximum = 18446744073709551615u64, description = "Only checkpoints with an id above this one"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "Checkpoints per page (default 100)"),
    ),
    responses(
        (status = 200, body = Vec<Checkpoint>, headers(("Link" = String, description = "The next page, while there is one"))),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn run_checkpoints(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let (after, limit) = page_of(&params)?;
    let id = own_run(&state, &tenant, &id).await?;
    // One more than asked tells whether a next page exists.
    let mut page = state
        .history
        .checkpoints_after(id, after, limit + 1)
        .await?;
    let mut headers = HeaderMap::new();
    if page.len() > limit as usize {
        page.truncate(limit as usize);
        let last = page.last().map_or(after, |c| c.id);
        let next = format!("</v1/runs/{id}/checkpoints?after={last}&limit={limit}>; rel=\"next\"");
        if let Ok(v) = HeaderValue::from_str(&next) {
            headers.insert(header::LINK, v);
        }
    }
    Ok((headers, Json(page)).into_response())
}

/// `after` and `limit` of a checkpoint page, every problem reported at once.
fn page_of(params: &[(String, String)]) -> Result<(u64, u32), ApiError> {
    let mut after = 0;
    let mut limit = PAGE;
    let mut errors = Vec::new();
    for (k, v) in params {
        let pointer = format!("/query/{}", super::extract::escape_pointer(k));
        match k.as_str() {
            "after" => match v.parse::<u64>() {
                Ok(n) => after = n,
                Err(_) => errors.push(FieldError::new(pointer, "after must be a checkpoint id")),
            },
            "limit" => match v.parse::<u32>() {
                Ok(n) if (1..=MAX_PAGE).contains(&n) => limit = n,
                _ => errors.push(FieldError::new(
                    pointer,
                    format!("limit must be an integer from 1 to {MAX_PAGE}"),
                )),
            },
            _ => errors.push(super::extract::unknown_parameter(k, &["after", "limit"])),
        }
    }
    if errors.is_empty() {
        Ok((after, limit))
    } else {
        Err(ApiError::validation_many(errors))
    }
}
