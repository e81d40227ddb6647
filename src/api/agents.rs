//! `/v1/agents`: the agent registry. A tenant lists, reads, creates or replaces (`PUT`,
//! validated in full: 422 with every problem and its pointer) and deletes its own agents, and
//! reads the shared ones loaded from the agents directory at start (see [`crate::agents`]).

use std::collections::HashSet;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::AppState;
use super::error::ApiError;
use super::extract::{JsonBody, Path, Query};
use super::registry::{self, Named, RegistryName, name_from_path, text, valid_name};
use super::versions::{ChangeNote, KeyId};
use crate::domain::Tenant;
use crate::plan::{AgentCatalog, validate_agent};
use crate::store::RegistryRecord;

/// An agent in `GET /v1/agents`.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentSummary {
    pub name: String,
    pub description: Option<String>,
    /// Loaded from the agents directory: readable by every tenant, not deletable.
    pub shared: bool,
    /// The latest version's number (every change is a version: `GET …/{name}/versions`).
    pub latest_version: u32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// An agent with its definition (`GET`/`PUT /v1/agents/{name}`).
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentDetail {
    pub name: String,
    pub description: Option<String>,
    pub shared: bool,
    /// The latest version's number (every change is a version: `GET …/{name}/versions`).
    pub latest_version: u32,
    /// The definition as stored (`schemas/Agent.schema.json`): the `PUT` body, with `name`
    /// filled in.
    #[schema(value_type = Object)]
    pub definition: Value,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The body of `PUT /v1/agents/{name}` in the OpenAPI document: an outline of
/// `schemas/Agent.schema.json`, which the handler checks the body against in full.
#[derive(ToSchema)]
#[schema(
    description = "An Agent (schemas/Agent.schema.json in the repository: handoffs are \
    agent names or {to, context: inherit|summarize|isolate|last_n, last_n}, middleware are \
    built-in names (retry, audit_log, guardrail, rate_limit, response_cache, tool_approval) or \
    {name, config}; `kind: workflow` makes a registered workflow act as the agent); `name`, \
    when given, must be the path's name. Validated in full: any problem is a 422 listing every \
    one with a JSON Pointer."
)]
#[allow(dead_code)] // described, never built
struct AgentDefinition {
    #[schema(inline, required = false)]
    name: RegistryName,
    #[schema(max_length = 4000, required = false)]
    description: String,
    #[schema(min_length = 1, max_length = 32768)]
    instructions: String,
    #[schema(min_length = 1, required = false)]
    model: String,
    #[schema(max_items = 128, required = false)]
    tools: Vec<String>,
    #[schema(value_type = Object, required = false)]
    output_schema: Value,
    #[schema(max_items = 64, required = false)]
    handoffs: Vec<Value>,
    #[schema(max_items = 32, required = false)]
    middleware: Vec<Value>,
    #[schema(value_type = Object, required = false)]
    metadata: Value,
}

impl From<RegistryRecord> for AgentSummary {
    fn from(a: RegistryRecord) -> Self {
        AgentSummary {
            description: text(&a.definition, "description"),
            name: a.name,
            shared: a.shared,
            latest_version: a.version,
            created_at: a.created_at,
            updated_at: a.updated_at,
        }
    }
}

impl From<RegistryRecord> for AgentDetail {
    fn from(a: RegistryRecord) -> Self {
        AgentDetail {
            description: text(&a.definition, "description"),
            name: a.name,
            shared: a.shared,
            latest_version: a.version,
            definition: a.definition,
            created_at: a.created_at,
            updated_at: a.updated_at,
        }
    }
}

/// List the caller's agents and the shared ones, by name.
#[utoipa::path(
    get, path = "/v1/agents", tag = "agents",
    responses((status = 200, body = Vec<AgentSummary>))
)]
pub async fn list_agents(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
) -> Result<Json<Vec<AgentSummary>>, ApiError> {
    let list = state.agents.list(&tenant).await?;
    Ok(Json(list.into_iter().map(AgentSummary::from).collect()))
}

/// Get an agent: the caller's own, else a shared one of that name.
#[utoipa::path(
    get, path = "/v1/agents/{name}", tag = "agents",
    params(("name" = inline(RegistryName), Path, description = "Agent name")),
    responses(
        (status = 200, body = AgentDetail),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid name", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_agent(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(name): Path<String>,
) -> Result<Json<AgentDetail>, ApiError> {
    let agent = registry::get(&state, Named::Agent, &tenant, &name).await?;
    Ok(Json(agent.into()))
}

/// Create or replace one of the caller's agents.
///
/// The body is the agent (`schemas/Agent.schema.json`); without a `name` the path's name is
/// used. It is validated in full — shape, model alias, tools, handoff targets (agents the
/// caller can read, not itself), middleware, output schema — and any problem is a 422 listing
/// every one with a JSON Pointer into the body. 201 when created, 200 when replaced.
#[utoipa::path(
    put, path = "/v1/agents/{name}", tag = "agents",
    params(("name" = inline(RegistryName), Path, description = "Agent name: 1-64 of lowercase letters, digits, `_`, `.`, `-`, starting with a letter or digit"), ChangeNote),
    request_body(content = inline(AgentDefinition), description = "The agent definition"),
    responses(
        (status = 201, description = "Created", body = AgentDetail),
        (status = 200, description = "Replaced", body = AgentDetail),
        (status = 400, description = "Malformed JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid agent", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn put_agent(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    key: Option<Extension<KeyId>>,
    Path(name): Path<String>,
    Query(note): Query<ChangeNote>,
    JsonBody(mut definition): JsonBody,
) -> Result<(StatusCode, Json<AgentDetail>), ApiError> {
    valid_name(&name)?;
    name_from_path(&mut definition, &name)?;
    let authored = note.authored(key.as_ref().map(|k| &k.0))?;
    let others: HashSet<String> = (state.agents.list(&tenant).await?)
        .into_iter()
        .map(|a| a.name)
        .collect();
    let view = state.engine.tenant_view(&tenant).await?;
    // In a block of its own: the catalog's closures are not `Send`, and must be gone before
    // the next await.
    let problems = {
        let has_agent = |agent: &str| others.contains(agent);
        let known = AgentCatalog {
            catalog: view.catalog(),
            has_agent: &has_agent,
        };
        validate_agent(&name, &definition, &known)
    };
    if !problems.is_empty() {
        return Err(ApiError::problems(problems));
    }
    let put = (state.agents)
        .put(&tenant, &name, &definition, authored)
        .await?;
    let (status, stored) = registry::stored(&state, Named::Agent, &tenant, &name, put).await?;
    Ok((status, Json(stored.into())))
}

/// Delete one of the caller's agents. Shared ones (from the agents directory) cannot be
/// deleted: 409.
#[utoipa::path(
    delete, path = "/v1/agents/{name}", tag = "agents",
    params(("name" = inline(RegistryName), Path, description = "Agent name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "A shared agent", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid name", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn delete_agent(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    registry::delete(&state, Named::Agent, &tenant, &name).await
}
