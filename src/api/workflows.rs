//! `/v1/workflows`: the fixed-workflow registry. A tenant lists, reads, creates or replaces
//! (`PUT`, validated in full: 422 with every problem) and deletes its own workflows, and reads
//! the shared ones loaded from the workflows directory at start (see [`crate::workflows`]).

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::domain::Tenant;
use crate::plan::validate_workflow;
use crate::store::WorkflowRecord;

use super::AppState;
use super::error::ApiError;
use super::extract::{JsonBody, Path, Query};
use super::registry::{self, Named, RegistryName, name_from_path, text, valid_name};
use super::versions::{ChangeNote, KeyId};

/// A workflow in `GET /v1/workflows`.
#[derive(Debug, Serialize, ToSchema)]
pub struct WorkflowSummary {
    pub name: String,
    pub description: Option<String>,
    pub version: Option<String>,
    /// Loaded from the workflows directory: readable by every tenant, not deletable.
    pub shared: bool,
    /// The latest version's number (every change is a version: `GET …/{name}/versions`).
    pub latest_version: u32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A workflow with its definition (`GET`/`PUT /v1/workflows/{name}`).
#[derive(Debug, Serialize, ToSchema)]
pub struct WorkflowDetail {
    pub name: String,
    pub description: Option<String>,
    pub version: Option<String>,
    pub shared: bool,
    /// The latest version's number (every change is a version: `GET …/{name}/versions`).
    pub latest_version: u32,
    /// The definition as stored: the `PUT` body, with `name` filled in.
    #[schema(value_type = Object)]
    pub definition: Value,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<WorkflowRecord> for WorkflowSummary {
    fn from(w: WorkflowRecord) -> Self {
        WorkflowSummary {
            description: text(&w.definition, "description"),
            version: text(&w.definition, "version"),
            name: w.name,
            shared: w.shared,
            latest_version: w.version,
            created_at: w.created_at,
            updated_at: w.updated_at,
        }
    }
}

impl From<WorkflowRecord> for WorkflowDetail {
    fn from(w: WorkflowRecord) -> Self {
        WorkflowDetail {
            description: text(&w.definition, "description"),
            version: text(&w.definition, "version"),
            name: w.name,
            shared: w.shared,
            latest_version: w.version,
            definition: w.definition,
            created_at: w.created_at,
            updated_at: w.updated_at,
        }
    }
}

/// What a workflow definition is, in the OpenAPI document.
pub(super) const WORKFLOW_NOTE: &str = "A FixedWorkflow (schemas/FixedWorkflow.schema.json in \
    the repository); `name`, when given, must be the path's name. Validated in full: any \
    problem is a 422 listing every one with a JSON Pointer.";

/// The body of `PUT /v1/workflows/{name}` in the OpenAPI document: an outline of
/// `schemas/FixedWorkflow.schema.json`, which the handler checks the body against in full.
#[derive(ToSchema)]
#[schema(description = WORKFLOW_NOTE)]
#[allow(dead_code)] // described, never built
struct WorkflowDefinition {
    #[schema(inline, required = false)]
    name: RegistryName,
    #[schema(value_type = Vec<Object>, min_items = 1, max_items = 500)]
    steps: Vec<Value>,
}

/// List the caller's workflows and the shared ones, by name.
#[utoipa::path(
    get, path = "/v1/workflows", tag = "workflows",
    responses((status = 200, body = Vec<WorkflowSummary>))
)]
pub async fn list_workflows(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
) -> Result<Json<Vec<WorkflowSummary>>, ApiError> {
    let list = state.workflows.list(&tenant).await?;
    Ok(Json(list.into_iter().map(WorkflowSummary::from).collect()))
}

/// Get a workflow: the caller's own, else a shared one of that name.
#[utoipa::path(
    get, path = "/v1/workflows/{name}", tag = "workflows",
    params(("name" = inline(RegistryName), Path, description = "Workflow name")),
    responses(
        (status = 200, body = WorkflowDetail),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid name", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_workflow(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(name): Path<String>,
) -> Result<Json<WorkflowDetail>, ApiError> {
    let workflow = registry::get(&state, Named::Workflow, &tenant, &name).await?;
    Ok(Json(workflow.into()))
}

/// Create or replace one of the caller's workflows.
///
/// The body is the workflow definition (`schemas/FixedWorkflow.schema.json`); without a
/// `name` the path's name is used. It is validated in full (schema, step ids, dependencies and
/// cycles, tools and their arguments): any problem is a 422 listing every one with a JSON
/// Pointer into the body. 201 when created, 200 when replaced. A shared workflow of the same
/// name is not changed: the caller's own one shadows it for the caller.
#[utoipa::path(
    put, path = "/v1/workflows/{name}", tag = "workflows",
    params(("name" = inline(RegistryName), Path, description = "Workflow name: 1-64 of lowercase letters, digits, `_`, `.`, `-`, starting with a letter or digit"), ChangeNote),
    request_body(content = inline(WorkflowDefinition), description = "The workflow definition"),
    responses(
        (status = 201, description = "Created", body = WorkflowDetail),
        (status = 200, description = "Replaced", body = WorkflowDetail),
        (status = 400, description = "Malformed JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body was not sent as application/json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid workflow", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn put_workflow(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    key: Option<Extension<KeyId>>,
    Path(name): Path<String>,
    Query(note): Query<ChangeNote>,
    JsonBody(mut definition): JsonBody,
) -> Result<(StatusCode, Json<WorkflowDetail>), ApiError> {
    valid_name(&name)?;
    name_from_path(&mut definition, &name)?;
    let authored = note.authored(key.as_ref().map(|k| &k.0))?;
    // Validated with the registered agents and workflows it names; stored as written (a
    // step's `agent@2` keeps its version), so a run uses what they are when it starts.
    let mut resolved = definition.clone();
    let resolution = state
        .agents
        .resolve_references(&tenant, &mut resolved)
        .await?;
    let view = state.engine.tenant_view(&tenant).await?;
    let validated = validate_workflow(&resolved, view.catalog()).err();
    let problems = resolution.with(validated.unwrap_or_default());
    if !problems.is_empty() {
        return Err(ApiError::problems(problems));
    }
    let put = (state.workflows)
        .put(&tenant, &name, &definition, authored)
        .await?;
    let (status, stored) = registry::stored(&state, Named::Workflow, &tenant, &name, put).await?;
    Ok((status, Json(stored.into())))
}

/// Delete one of the caller's workflows. Shared ones (from the workflows directory) cannot be
/// deleted: 409.
#[utoipa::path(
    delete, path = "/v1/workflows/{name}", tag = "workflows",
    params(("name" = inline(RegistryName), Path, description = "Workflow name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid name", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "A shared workflow", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn delete_workflow(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    registry::delete(&state, Named::Workflow, &tenant, &name).await
}
