//! What `/v1/agents` and `/v1/workflows` share: a registry name as the path gives it, a body's
//! `name` filled in from the path, and the answers a registry gives alike for either kind —
//! an entry or a 404 naming the nearest names, a `PUT`'s entry read back (201 or 200), a
//! delete (204, 409 for a shared entry). What differs (the body's checks, the shapes the
//! entries are shown in) stays in `agents.rs` and `workflows.rs`.

use axum::http::StatusCode;
use serde_json::Value;
use utoipa::ToSchema;

use super::AppState;
use super::error::ApiError;
use crate::domain::Tenant;
use crate::domain::ids::check_name;
use crate::store::{self, RegistryRecord};

/// The registries a name is looked up in.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Named {
    Workflow,
    Agent,
}

impl Named {
    /// What one entry is called in messages.
    fn noun(self) -> &'static str {
        match self {
            Named::Workflow => "workflow",
            Named::Agent => "agent",
        }
    }

    async fn get(
        self,
        state: &AppState,
        tenant: &Tenant,
        name: &str,
    ) -> store::Result<Option<RegistryRecord>> {
        match self {
            Named::Workflow => state.workflows.get(tenant, name).await,
            Named::Agent => state.agents.get(tenant, name).await,
        }
    }

    async fn delete(self, state: &AppState, tenant: &Tenant, name: &str) -> store::Result<bool> {
        match self {
            Named::Workflow => state.workflows.delete(tenant, name).await,
            Named::Agent => state.agents.delete(tenant, name).await,
        }
    }
}

/// 404 for a registry name that does not exist, saying what does (the nearest name, the known
/// ones: [`crate::suggest::unknown_name`]).
pub(crate) async fn not_found(
    state: &AppState,
    registry: Named,
    tenant: &Tenant,
    name: &str,
) -> ApiError {
    let message = match registry {
        Named::Workflow => state.workflows.unknown(tenant, name).await,
        Named::Agent => state.agents.unknown(tenant, name).await,
    };
    match message {
        Ok(message) => ApiError::NotFound(message),
        Err(e) => e.into(),
    }
}

/// `GET /v1/{registry}/{name}`: the tenant's own entry, else a shared one of that name.
pub(super) async fn get(
    state: &AppState,
    registry: Named,
    tenant: &Tenant,
    name: &str,
) -> Result<RegistryRecord, ApiError> {
    valid_name(name)?;
    match registry.get(state, tenant, name).await? {
        Some(entry) => Ok(entry),
        None => Err(not_found(state, registry, tenant, name).await),
    }
}

/// A `PUT`'s answer once the entry is stored: read back rather than rebuilt, so it carries
/// the stored times (a replacement keeps its `created_at`) and version; 201 when created,
/// else 200.
pub(super) async fn stored(
    state: &AppState,
    registry: Named,
    tenant: &Tenant,
    name: &str,
    put: store::Put,
) -> Result<(StatusCode, RegistryRecord), ApiError> {
    let noun = registry.noun();
    let stored = (registry.get(state, tenant, name).await?)
        .filter(|entry| !entry.shared)
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("{noun} `{name}` vanished")))?;
    let status = if put.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, stored))
}

/// `DELETE /v1/{registry}/{name}`: the tenant's own entry with its versions. A shared one
/// (from the registry's directory) cannot be deleted, nor one a run not yet ended uses: 409.
pub(super) async fn delete(
    state: &AppState,
    registry: Named,
    tenant: &Tenant,
    name: &str,
) -> Result<StatusCode, ApiError> {
    valid_name(name)?;
    let kind = match registry {
        Named::Workflow => store::Registry::Workflows,
        Named::Agent => store::Registry::Agents,
    };
    super::versions::in_use(state, kind, tenant, name, None).await?;
    if registry.delete(state, tenant, name).await? {
        return Ok(StatusCode::NO_CONTENT);
    }
    // Not the caller's own: say why when it is a shared one, which the caller can read.
    match registry.get(state, tenant, name).await? {
        Some(entry) if entry.shared => {
            let noun = registry.noun();
            Err(ApiError::Conflict(format!(
                "{noun} `{name}` was loaded from the {noun}s directory and cannot be deleted \
                 through the API"
            )))
        }
        _ => Err(not_found(state, registry, tenant, name).await),
    }
}

/// A registry body's `name`: the path's name when absent, and it must match when present.
pub(super) fn name_from_path(definition: &mut Value, name: &str) -> Result<(), ApiError> {
    if let Value::Object(map) = definition {
        match map.get("name") {
            None => {
                map.insert("name".into(), Value::String(name.to_owned()));
            }
            Some(Value::String(n)) if n == name => {}
            Some(_) => {
                return Err(ApiError::validation(
                    "/name",
                    format!("`name` must be the name in the path, `{name}`"),
                ));
            }
        }
    }
    Ok(())
}

pub(super) fn valid_name(name: &str) -> Result<(), ApiError> {
    check_name(name).map_err(|message| ApiError::validation("/name", message))
}

/// A string member of a stored definition. Stored definitions passed validation, so a
/// present `description`/`version` is a string.
pub(super) fn text(definition: &Value, key: &str) -> Option<String> {
    definition
        .get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// A workflow or agent name in the OpenAPI document (the `{name}` path parameters, a
/// definition's `name`), as [`check_name`] accepts it.
#[derive(ToSchema)]
#[schema(
    description = "1-64 of lowercase letters, digits, `_`, `.`, `-`, starting with a letter or digit",
    pattern = "^[a-z0-9][a-z0-9_.-]{0,63}$"
)]
#[allow(dead_code)] // described, never built
pub(super) struct RegistryName(String);

/// A reference to a registered definition in the OpenAPI document: a name, or a name at a
/// version or a label ([`crate::domain::definition::Reference`]).
#[derive(ToSchema)]
#[schema(
    description = "A registered name, optionally `@` a version (`@3`), a label (`@production`) or `@latest`",
    pattern = "^[a-z0-9][a-z0-9_.-]{0,63}(@([1-9][0-9]{0,8}|[a-z][a-z0-9_.-]{0,63}))?$"
)]
#[allow(dead_code)] // described, never built
pub(super) struct RegistryReference(String);
