//! `/v1/tools/{name}`: one tool's listing, and HTTP tools declared (and removed) through the
//! API when `tools.http_api` allows it. Declared tools are stored (they survive a restart) and
//! join the shared registry at once; tools orca started with cannot be replaced or removed.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, Path, deserialize_located};
use crate::store::{Registry, http_tools_tenant};
use crate::tools::http::{HttpTool, HttpToolSpec, destinations};

/// One tool; `http` is its declaration (header values hidden) when it is an HTTP tool declared
/// through the API.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolDetail {
    pub name: String,
    pub description: String,
    #[schema(value_type = Object)]
    pub input_schema: Value,
    #[schema(value_type = Option<Object>)]
    pub http: Option<Value>,
}

async fn detail(state: &AppState, name: &str) -> Result<ToolDetail, ApiError> {
    let info = state
        .engine
        .tools()
        .info(name)
        .ok_or_else(|| ApiError::NotFound(format!("no tool `{name}`")))?;
    let stored = state
        .store
        .get_entry(Registry::HttpTools, &http_tools_tenant(), name)
        .await?
        .filter(|_| !state.engine.tools().is_fixed(name));
    let http = stored
        .and_then(|r| serde_json::from_value::<HttpToolSpec>(r.definition).ok())
        .map(|s| s.redacted());
    Ok(ToolDetail {
        name: info.name,
        description: info.description,
        input_schema: info.input_schema,
        http,
    })
}

/// One tool.
#[utoipa::path(get, path = "/v1/tools/{name}", tag = "tools",
    params(("name" = String, Path)),
    responses((status = 200, body = ToolDetail),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json")))]
pub async fn get_tool(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<ToolDetail>, ApiError> {
    Ok(Json(detail(&state, &name).await?))
}

fn writable(state: &AppState, name: &str) -> Result<(), ApiError> {
    if !state.config.tools.http_api {
        return Err(ApiError::Forbidden(
            "declaring tools through the API is off on this server (tools.http_api)".into(),
        ));
    }
    if state.engine.tools().is_fixed(name) {
        return Err(ApiError::Conflict(format!(
            "`{name}` is a tool orca was started with; it cannot be changed through the API"
        )));
    }
    Ok(())
}

/// Declare (or replace) an HTTP tool; `tools.http_api` must be on.
#[utoipa::path(put, path = "/v1/tools/{name}", tag = "tools",
    params(("name" = String, Path)),
    request_body(content = Object, description = "An HTTP tool declaration (schemas/HttpTool.schema.json)"),
    responses((status = 200, description = "Replaced", body = ToolDetail),
        (status = 201, description = "Declared", body = ToolDetail),
        (status = 403, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json")))]
pub async fn put_tool(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(mut body): JsonBody,
) -> Result<(StatusCode, Json<ToolDetail>), ApiError> {
    writable(&state, &name)?;
    if let Some(obj) = body.as_object_mut() {
        match obj.get("name") {
            None => {
                obj.insert("name".into(), Value::String(name.clone()));
            }
            Some(Value::String(n)) if *n == name => {}
            Some(_) => {
                return Err(ApiError::validation(
                    "/name",
                    "must equal the name in the path",
                ));
            }
        }
    }
    let spec: HttpToolSpec = deserialize_located(body)?;
    let problems = spec.problems();
    if !problems.is_empty() {
        return Err(ApiError::validation_many(
            problems
                .into_iter()
                .map(|(p, m)| FieldError::new(p, m))
                .collect(),
        ));
    }
    let policy = destinations(&state.config.tools).map_err(ApiError::internal)?;
    let tool = HttpTool::new(spec.clone(), policy).map_err(ApiError::internal)?;
    let definition = serde_json::to_value(&spec).map_err(ApiError::internal)?;
    let created = state
        .store
        .put_entry(
            Registry::HttpTools,
            &http_tools_tenant(),
            &name,
            &definition,
        )
        .await?;
    state
        .engine
        .tools()
        .declare(Arc::new(tool))
        .map_err(|m| ApiError::validation("/input_schema", &m))?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(detail(&state, &name).await?)))
}

/// Remove an HTTP tool declared through the API; `tools.http_api` must be on.
#[utoipa::path(delete, path = "/v1/tools/{name}", tag = "tools",
    params(("name" = String, Path)),
    responses((status = 204, description = "Removed"),
        (status = 403, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, body = super::error::Problem, content_type = "application/problem+json")))]
pub async fn delete_tool(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    writable(&state, &name)?;
    let stored = state
        .store
        .delete_entry(Registry::HttpTools, &http_tools_tenant(), &name)
        .await?;
    let declared = state.engine.tools().undeclare(&name);
    if stored || declared {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no declared tool `{name}`")))
    }
}
