//! `POST /v1/runs/{id}/pause` and `/resume`: hold a run between steps and let it go on (see
//! `engine::pause`). A plan's `settings.breakpoints` pause it the same way, before the steps
//! they name.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};

use crate::domain::{Run, Tenant};
use crate::engine::{self, Pause};

use super::AppState;
use super::error::ApiError;
use super::extract::Path;
use super::runs::parse_run_id;

/// Pause a run: the steps running finish, none starts, and once nothing runs the run is
/// `paused`, holding no running slot, its time limit not counting. Pausing a paused run
/// changes nothing; a tenant may have `quotas.paused_runs` runs paused at once.
#[utoipa::path(
    post, path = "/v1/runs/{id}/pause", tag = "runs",
    params(("id" = String, Path)),
    responses(
        (status = 202, description = "Recorded; the run is `paused` once its running steps finish", body = Run),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The run has ended", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 429, description = "The tenant has `quotas.paused_runs` runs paused already (`quota_exceeded`, with `Retry-After`)", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn pause_run(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Run>), ApiError> {
    set_paused(&state, &tenant, &id, Pause::Wanted).await
}

/// Resume a paused run (or one asked to pause, or held at a breakpoint): it takes a running
/// slot again and goes on. The resume is stored before the answer, with the breakpoints it
/// lets the run past: it holds on every replica, and after a restart.
#[utoipa::path(
    post, path = "/v1/runs/{id}/resume", tag = "runs",
    params(("id" = String, Path)),
    responses(
        (status = 202, description = "Recorded; the run goes on", body = Run),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The run is not paused, or has ended", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn resume_run(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Run>), ApiError> {
    set_paused(&state, &tenant, &id, Pause::Lifted).await
}

async fn set_paused(
    state: &AppState,
    tenant: &Tenant,
    id: &str,
    pause: Pause,
) -> Result<(StatusCode, Json<Run>), ApiError> {
    let run_id = parse_run_id(id)?;
    match state.engine.set_paused(tenant, run_id, pause).await {
        Ok(run) => Ok((StatusCode::ACCEPTED, Json(run))),
        Err(engine::Error::NotFound) => Err(ApiError::NotFound(format!("no run `{id}`"))),
        Err(engine::Error::AlreadyTerminal(s)) => {
            Err(ApiError::Conflict(format!("the run is already {s}")))
        }
        Err(engine::Error::Conflict(why)) => Err(ApiError::Conflict(why)),
        Err(engine::Error::QuotaExceeded(exceeded)) => Err(ApiError::TooManyRequests {
            message: exceeded.describe(),
            retry_after_secs: exceeded.retry_after_secs,
        }),
        Err(engine::Error::Store(e)) => Err(e.into()),
        Err(e) => Err(ApiError::internal(e)),
    }
}
