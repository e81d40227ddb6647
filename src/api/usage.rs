//! `GET /v1/usage`: what the caller's tenant uses now, against its quota (`[quotas]`).

use axum::extract::State;
use axum::{Extension, Json};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::Tenant;
use crate::domain::quota::{Quota, Usage};

use super::AppState;
use super::error::ApiError;

/// A tenant's usage and quota.
#[derive(Debug, Serialize, ToSchema)]
pub struct TenantUsage {
    pub tenant: String,
    pub usage: Usage,
    /// Its limits; 0 is none. Past one, a new run is refused with 429 `quota_exceeded`.
    pub quota: Quota,
}

/// The caller's usage: runs in progress, runs created in the last minute, tokens of the runs
/// created today (UTC), and the quota each is held to.
#[utoipa::path(
    get, path = "/v1/usage", tag = "system",
    responses((status = 200, body = TenantUsage))
)]
pub async fn tenant_usage(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
) -> Result<Json<TenantUsage>, ApiError> {
    let usage = state.runs.usage(&tenant).await?;
    Ok(Json(TenantUsage {
        quota: state.config.quotas.of(&tenant.0),
        tenant: tenant.0,
        usage,
    }))
}
