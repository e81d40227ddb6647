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
use crate::domain::DeclaredTool;
use crate::domain::Tenant;
use crate::tools::http::declared::MAX_PER_TENANT;

/// One tool; `http` is its declaration (header values hidden) when it is an HTTP tool declared
/// through the API.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolDetail {
    pub name: String,
    pub description: String,
    #[schema(value_type = Object)]
    pub input_schema: Value,
    /// `builtin` for a tool orca was started with (built in, MCP, configured), `http` or
    /// `worker` for one the tenant declared.
    #[schema(example = "worker")]
    pub kind: &'static str,
    #[schema(value_type = Option<Object>)]
    pub http: Option<Value>,
    /// Its declaration (queue, timeouts, retry) when the tenant's workers serve it.
    #[schema(value_type = Option<Object>)]
    pub worker: Option<Value>,
}

/// A worker tool's declaration as its listing shows it.
fn worker_view(spec: &crate::domain::WorkerToolSpec) -> Value {
    serde_json::to_value(spec).unwrap_or(Value::Null)
}

/// A declared tool from a body: a worker tool when it names a `queue`, else an HTTP tool;
/// each member checked against its kind, problems located.
pub(super) fn parse_declared(body: Value) -> Result<DeclaredTool, ApiError> {
    match body.get("queue") {
        Some(_) => deserialize_located(body).map(DeclaredTool::Worker),
        None => deserialize_located(body).map(DeclaredTool::Http),
    }
}

async fn detail(state: &AppState, tenant: &Tenant, name: &str) -> Result<ToolDetail, ApiError> {
    let view = state.engine.tenant_view(tenant).await?;
    let info = view
        .tools()
        .info(name)
        .ok_or_else(|| ApiError::NotFound(format!("no tool `{name}`")))?;
    let declared = view
        .declared
        .iter()
        .find(|s| s.name() == name && !state.engine.tools().is_fixed(name));
    let (http, worker) = match declared {
        Some(DeclaredTool::Http(spec)) => (Some(spec.redacted()), None),
        Some(DeclaredTool::Worker(spec)) => (None, Some(worker_view(spec))),
        None => (None, None),
    };
    Ok(ToolDetail {
        name: info.name,
        description: info.description,
        input_schema: info.input_schema,
        kind: match (&http, &worker) {
            (_, Some(_)) => "worker",
            (Some(_), _) => "http",
            _ => "builtin",
        },
        http,
        worker,
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

/// Refuses an HTTP tool's declaration or removal while `tools.http_api` is off (worker tools
/// reach nothing from orca, so tenants may always declare them).
fn http_allowed(state: &AppState, http: bool) -> Result<(), ApiError> {
    if http && !state.engine.declared_tools().enabled() {
        return Err(ApiError::Forbidden(
            "declaring HTTP tools through the API is off on this server (tools.http_api)".into(),
        ));
    }
    Ok(())
}

fn writable(state: &AppState, name: &str) -> Result<(), ApiError> {
    if state.engine.tools().is_fixed(name) {
        return Err(ApiError::Conflict(format!(
            "`{name}` is a tool orca was started with; it cannot be changed through the API"
        )));
    }
    Ok(())
}

/// Declare (or replace) a tool: an HTTP tool (`tools.http_api` must be on) or, with a
/// `queue`, a worker tool.
#[utoipa::path(put, path = "/v1/tools/{name}", tag = "tools",
    params(("name" = String, Path), ChangeNote),
    request_body(content = Object, description = "An HTTP tool declaration (schemas/HttpTool.schema.json) or a worker tool's (schemas/WorkerTool.schema.json)"),
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
    let spec = parse_declared(body)?;
    http_allowed(&state, matches!(spec, DeclaredTool::Http(_)))?;
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
    if view.declared.len() >= MAX_PER_TENANT && !view.declared.iter().any(|s| s.name() == name) {
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

/// Remove a tool declared through the API (an HTTP tool only while `tools.http_api` is on).
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
    let view = state.engine.tenant_view(&tenant).await?;
    let worker =
        (view.declared.iter()).any(|t| t.name() == name && matches!(t, DeclaredTool::Worker(_)));
    http_allowed(&state, !worker)?;
    let registry = crate::store::Registry::HttpTools;
    super::versions::in_use(&state, registry, &tenant, &name, None).await?;
    if state.engine.remove_http_tool(&tenant, &name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no declared tool `{name}`")))
    }
}
