//! `/v1/tools/{name}`: one tool's listing, and HTTP tools declared (and removed) through the
//! API when `tools.http_api` allows it. A declared tool belongs to the declaring tenant: it is
//! stored under the tenant (it survives a restart, and every replica reads it from the store)
//! and no other tenant sees or calls it. Its headers may read only the variables of
//! `tools.http_api_env`. Tools orca started with cannot be replaced or removed.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, Path, Query, deserialize_located};
use super::versions::{ChangeNote, KeyId};
use crate::domain::Tenant;
use crate::tools::http::HttpToolSpec;
use crate::tools::http::declared::MAX_PER_TENANT;

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

async fn detail(state: &AppState, tenant: &Tenant, name: &str) -> Result<ToolDetail, ApiError> {
    let view = state.engine.tenant_view(tenant).await?;
    let info = view
        .tools()
        .info(name)
        .ok_or_else(|| ApiError::NotFound(format!("no tool `{name}`")))?;
    let http = view
        .declared
        .iter()
        .find(|s| s.name == name && !state.engine.tools().is_fixed(name))
        .map(HttpToolSpec::redacted);
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
    Extension(tenant): Extension<Tenant>,
    Path(name): Path<String>,
) -> Result<Json<ToolDetail>, ApiError> {
    Ok(Json(detail(&state, &tenant, &name).await?))
}

fn writable(state: &AppState, name: &str) -> Result<(), ApiError> {
    if !state.engine.declared_tools().enabled() {
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
    params(("name" = String, Path), ChangeNote),
    request_body(content = Object, description = "An HTTP tool declaration (schemas/HttpTool.schema.json)"),
    responses((status = 200, description = "Replaced", body = ToolDetail),
        (status = 201, description = "Declared", body = ToolDetail),
        (status = 400, description = "Malformed JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than server.body_limit_bytes", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body was not sent as application/json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 403, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json")))]
pub async fn put_tool(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    key: Option<Extension<KeyId>>,
    Path(name): Path<String>,
    Query(note): Query<ChangeNote>,
    JsonBody(mut body): JsonBody,
) -> Result<(StatusCode, Json<ToolDetail>), ApiError> {
    writable(&state, &name)?;
    let authored = note.authored(key.as_ref().map(|k| &k.0))?;
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
    let declared = state.engine.declared_tools();
    let problems = declared.problems(&spec);
    if !problems.is_empty() {
        return Err(ApiError::validation_many(
            problems
                .into_iter()
                .map(|(p, m)| FieldError::new(p, m))
                .collect(),
        ));
    }
    declared
        .build(&spec)
        .map_err(|e| ApiError::validation("/input_schema", e.to_string()))?;
    let view = state.engine.tenant_view(&tenant).await?;
    if view.declared.len() >= MAX_PER_TENANT && !view.declared.iter().any(|s| s.name == name) {
        return Err(ApiError::Conflict(format!(
            "this tenant has declared {MAX_PER_TENANT} tools, the most it may; delete one first"
        )));
    }
    let put = (state.engine)
        .declare_http_tool(&tenant, &spec, authored)
        .await?;
    let status = if put.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(detail(&state, &tenant, &name).await?)))
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
    Extension(tenant): Extension<Tenant>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    writable(&state, &name)?;
    let registry = crate::store::Registry::HttpTools;
    super::versions::in_use(&state, registry, &tenant, &name, None).await?;
    if state.engine.remove_http_tool(&tenant, &name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no declared tool `{name}`")))
    }
}
