//! `/v1/runs/{id}/plans` and `/v1/runs/{id}/checkpoints`: what a planned run decided and
//! where it can resume from. Read-only; the engine writes both.

use axum::extract::State;
use axum::{Extension, Json};

use crate::domain::Tenant;
use crate::store::{Checkpoint, PlanRecord};

use super::AppState;
use super::error::ApiError;
use super::extract::Path;
use super::runs::own_run;

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
    Ok(Json(state.store.list_plans(id).await?))
}

/// A run's checkpoints, oldest first.
#[utoipa::path(
    get, path = "/v1/runs/{id}/checkpoints", tag = "runs",
    params(("id" = String, Path, description = "Run id")),
    responses(
        (status = 200, body = Vec<Checkpoint>),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn run_checkpoints(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Json<Vec<Checkpoint>>, ApiError> {
    let id = own_run(&state, &tenant, &id).await?;
    Ok(Json(state.store.list_checkpoints(id).await?))
}
