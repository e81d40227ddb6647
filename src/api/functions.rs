//! `/v1/functions`: the named LLM functions plans call (`kind: "llm", function: NAME`). The
//! configured ones (and orca's own planner, replanner, selector and summarizer) are the same
//! for every tenant and changed only in configuration; a tenant declares functions of its own
//! with `PUT /v1/functions/{name}`. Those are stored under the tenant, versioned like
//! workflows (`/v1/functions/{name}/versions`, labels, diffs: `versions.rs`), and copied into
//! a run when it is created, so the run calls what it started with.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, Path, Query, deserialize_located};
use super::registry::{RegistryName, name_from_path, valid_name};
use super::versions::{ChangeNote, KeyId};
use crate::domain::Tenant;
use crate::functions::{FunctionInfo, FunctionSpec, MAX_DECLARED};
use crate::store::Registry;

pub fn routes() -> axum::Router<AppState> {
    use axum::routing::get;
    axum::Router::new()
        .route("/functions", get(list_functions))
        .route(
            "/functions/{name}",
            get(get_function).put(put_function).delete(delete_function),
        )
}

/// One function; a declared one with its version and times.
#[derive(Debug, Serialize, ToSchema)]
pub struct FunctionDetail {
    #[serde(flatten)]
    pub function: FunctionInfo,
    /// The latest version of a declared function (`null` for a configured one).
    pub latest_version: Option<u32>,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// Every named LLM function the caller's plans may call: the configured ones (orca's own
/// planner, replanner, selector and summarizer among them) and the tenant's declared ones
/// (`declared: true`), by name.
#[utoipa::path(get, path = "/v1/functions", tag = "tools", responses((status = 200, body = Vec<FunctionInfo>)))]
pub async fn list_functions(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
) -> Result<Json<Vec<FunctionInfo>>, ApiError> {
    let view = state.engine.tenant_view(&tenant).await?;
    Ok(Json(view.functions().list()))
}

async fn detail(state: &AppState, tenant: &Tenant, name: &str) -> Result<FunctionDetail, ApiError> {
    let view = state.engine.tenant_view(tenant).await?;
    let Some(function) = view.functions().list().into_iter().find(|f| f.name == name) else {
        let names: Vec<String> = view
            .functions()
            .list()
            .into_iter()
            .map(|f| f.name)
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let list = "GET /v1/functions lists them";
        return Err(ApiError::NotFound(crate::suggest::unknown_name(
            "function", list, name, &names,
        )));
    };
    let stored = match function.declared {
        true => {
            (state.definitions)
                .own_entry(Registry::Functions, tenant, name)
                .await?
        }
        false => None,
    };
    Ok(FunctionDetail {
        function,
        latest_version: stored.as_ref().map(|r| r.version),
        created_at: stored.as_ref().map(|r| r.created_at),
        updated_at: stored.as_ref().map(|r| r.updated_at),
    })
}

/// One function.
#[utoipa::path(get, path = "/v1/functions/{name}", tag = "tools",
    params(("name" = String, Path)),
    responses((status = 200, body = FunctionDetail),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json")))]
pub async fn get_function(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(name): Path<String>,
) -> Result<Json<FunctionDetail>, ApiError> {
    Ok(Json(detail(&state, &tenant, &name).await?))
}

/// Whether the tenant may declare, replace or remove a function of that name: not one the
/// server was configured with (or one of orca's own).
fn writable(state: &AppState, name: &str) -> Result<(), ApiError> {
    match state.engine.functions().contains(name) {
        true => Err(ApiError::Conflict(configured(name))),
        false => Ok(()),
    }
}

/// What a caller is told of a configured function it tried to change.
pub(super) fn configured(name: &str) -> String {
    format!(
        "`{name}` is a function this server was configured with (or one of orca's own); it is changed in the configuration's [functions.{name}], not through the API"
    )
}

/// The problems of a declaration, each with a pointer into it: the members `compile` refuses
/// (a prompt that is not a template, a model alias the server lacks, an output schema that is
/// not a JSON Schema).
pub(super) fn problems(state: &AppState, spec: &FunctionSpec) -> Vec<(String, String)> {
    let models = state.engine.models();
    match crate::functions::compile(spec, |alias| models.has_alias(alias)) {
        Ok(_) => Vec::new(),
        Err(problems) => problems,
    }
}

/// Declare (or replace) one of the tenant's LLM functions, as a new version when it changed.
#[utoipa::path(put, path = "/v1/functions/{name}", tag = "tools",
    params(("name" = inline(RegistryName), Path, description = "Function name: 1-64 of lowercase letters, digits, `_`, `.`, `-`, starting with a letter or digit"), ChangeNote),
    request_body(content = FunctionSpec, description = "The function: `prompt` (a `{{ }}` template over `input`), optional `description`, `system`, `model` (a model alias) and `output_schema`"),
    responses((status = 200, description = "Replaced", body = FunctionDetail),
        (status = 201, description = "Declared", body = FunctionDetail),
        (status = 400, description = "Malformed JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "A configured function, or the tenant has declared the most it may", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than server.body_limit_bytes", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body was not sent as application/json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json")))]
pub async fn put_function(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    key: Option<Extension<KeyId>>,
    Path(name): Path<String>,
    Query(note): Query<ChangeNote>,
    JsonBody(mut body): JsonBody,
) -> Result<(StatusCode, Json<FunctionDetail>), ApiError> {
    valid_name(&name)?;
    writable(&state, &name)?;
    let authored = note.authored(key.as_ref().map(|k| &k.0))?;
    name_from_path(&mut body, &name)?;
    let spec: FunctionSpec = deserialize_located(body)?;
    let found = problems(&state, &spec);
    if !found.is_empty() {
        let errors = found.into_iter().map(|(p, m)| FieldError::new(p, m));
        return Err(ApiError::validation_many(errors.collect()));
    }
    let registry = Registry::Functions;
    let own = state.definitions.own_entries(registry, &tenant).await?;
    if own.len() >= MAX_DECLARED && !own.iter().any(|f| f.name == name) {
        return Err(ApiError::Conflict(format!(
            "this tenant has declared {MAX_DECLARED} functions, the most it may; delete one first"
        )));
    }
    let definition = serde_json::to_value(&spec).map_err(ApiError::internal)?;
    let put = (state.definitions)
        .put(registry, &tenant, &name, &definition, authored)
        .await?;
    let status = match put.created {
        true => StatusCode::CREATED,
        false => StatusCode::OK,
    };
    Ok((status, Json(detail(&state, &tenant, &name).await?)))
}

/// Remove one of the tenant's declared functions with its versions; 409 while a run not yet
/// ended uses it, and for a configured one.
#[utoipa::path(delete, path = "/v1/functions/{name}", tag = "tools",
    params(("name" = inline(RegistryName), Path)),
    responses((status = 204, description = "Removed"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid name", body = super::error::Problem, content_type = "application/problem+json")))]
pub async fn delete_function(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    valid_name(&name)?;
    writable(&state, &name)?;
    let registry = Registry::Functions;
    super::versions::in_use(&state, registry, &tenant, &name, None).await?;
    match state.definitions.delete(registry, &tenant, &name).await? {
        true => Ok(StatusCode::NO_CONTENT),
        false => Err(ApiError::NotFound(format!(
            "no declared function `{name}` (GET /v1/functions lists them)"
        ))),
    }
}
