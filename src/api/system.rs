//! Health, readiness, metrics, the tool, function and model lists and the OpenAPI document.

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::domain::Tenant;
use crate::llm::router::ModelInfo;
use crate::metrics::Audience;
use crate::tools::ToolInfo;

use super::AppState;
use super::error::ApiError;

/// Liveness: 200 while the process serves HTTP.
#[utoipa::path(get, path = "/healthz", tag = "system", responses((status = 200, description = "Alive")))]
pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

/// Readiness: 200 when the store answers.
#[utoipa::path(get, path = "/readyz", tag = "system", responses(
    (status = 200, description = "Ready"),
    (status = 503, description = "The store is unreachable or refuses writes", body = super::error::Problem, content_type = "application/problem+json"),
))]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    if !state.events.is_healthy() {
        return Err(ApiError::Unavailable(
            "the store refuses writes; runs resume once it takes them again".into(),
        ));
    }
    // A write, not a read: a full disk or a read-only file system still answers reads.
    state
        .events
        .probe_write()
        .await
        .map_err(|_| ApiError::Unavailable("the store does not take writes".into()))?;
    Ok(Json(json!({ "status": "ready" })))
}

/// Prometheus metrics (OpenMetrics text).
#[utoipa::path(get, path = "/metrics", tag = "system", responses((status = 200, description = "Metrics", content_type = "application/openmetrics-text")))]
pub async fn metrics(
    State(state): State<AppState>,
    Extension(reader): Extension<super::Reader>,
) -> Result<Response, ApiError> {
    let by_status = state.runs.count_by_status().await?;
    let tenants = state.runs.usage_by_tenant().await?;
    let task_queues = state.engine.tasks().queue_depths().await?;
    let memory = state.engine.memory().usage_by_tenant().await?;
    let audience = match &reader {
        super::Reader::Operator => Audience::Operator,
        super::Reader::Tenant(t) => Audience::Tenant(&t.0),
    };
    let text = state
        .engine
        .render_metrics(&by_status, &tenants, &task_queues, &memory, audience);
    Ok((
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

/// Every tool the caller may use, with the JSON Schema of its arguments.
///
/// The tools orca started with and the caller's own declared HTTP tools.
#[utoipa::path(get, path = "/v1/tools", tag = "tools", responses((status = 200, body = Vec<ToolInfo>)))]
pub async fn list_tools(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
) -> Result<Json<Vec<ToolInfo>>, ApiError> {
    Ok(Json(
        state.engine.tenant_view(&tenant).await?.tools().list(),
    ))
}

/// Every model alias a run may name as `model`, sorted by name: the provider that answers
/// through it and the model name it sends. The server's default is marked; no endpoint
/// address or key is shown.
#[utoipa::path(get, path = "/v1/models", tag = "models", responses((status = 200, body = Vec<ModelInfo>)))]
pub async fn list_models(State(state): State<AppState>) -> Json<Vec<ModelInfo>> {
    Json(state.engine.models().models())
}

pub async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_string_pretty(&super::openapi()).unwrap_or_default(),
    )
        .into_response()
}
