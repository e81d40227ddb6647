//! Users within a tenant (issue 48). A key may be bound to a user (`[[auth.api_keys]]` with
//! `user`): its runs are that user's, its lists hold only that user's runs and sessions, and
//! it reaches no other user's run, session or memory. [`confine`] holds a bound key to its
//! user's part of `/v1`, once, before any handler: a run or session of another user is 404 (as
//! if it did not exist), and what is the tenant's to manage (definitions, schedules, workers,
//! apply) is 403 to it.

use axum::http::Method;
use serde_json::Value;

use super::AppState;
use super::error::ApiError;
use crate::domain::memory::{Namespace, Owner};
use crate::domain::{RunId, Tenant};

/// The user the caller's key is bound to, if it is (`None`: a tenant's key, or no keys).
#[derive(Debug, Clone, Default)]
pub struct BoundUser(pub Option<String>);

impl BoundUser {
    /// The user filter a list applies: the one asked for, and a bound key's own user (asking
    /// for another user's is 403).
    pub fn narrow(&self, asked: Option<String>) -> Result<Option<String>, ApiError> {
        match (&self.0, asked) {
            (Some(me), Some(asked)) if asked != *me => Err(not_yours(me)),
            (Some(me), _) => Ok(Some(me.clone())),
            (None, asked) => Ok(asked),
        }
    }

    /// Gives a run body a bound key's user (`user_id`); another user's id in it is 403.
    pub fn stamp(&self, body: &mut Value) -> Result<(), ApiError> {
        let (Some(me), Some(body)) = (&self.0, body.as_object_mut()) else {
            return Ok(());
        };
        match body.get("user_id") {
            Some(Value::String(given)) if given != me => Err(not_yours(me)),
            _ => {
                body.insert("user_id".into(), Value::String(me.clone()));
                Ok(())
            }
        }
    }

    /// Whether the caller may read (`write`: change) what is under `namespace`: a user's
    /// memory is that user's, a session's is its user's, and the tenant's namespaces are
    /// everyone's to read but only a tenant key's to change. An unbound key may do anything.
    pub async fn may_use(
        &self,
        state: &AppState,
        tenant: &Tenant,
        namespace: &Namespace,
        write: bool,
    ) -> Result<(), ApiError> {
        let Some(me) = &self.0 else { return Ok(()) };
        let allowed = match namespace.owner() {
            Owner::User(user) => user == me,
            Owner::Session(session) => {
                let owner = state.sessions.user(tenant, session).await?;
                owner.flatten().as_deref() == Some(me.as_str())
            }
            Owner::Everyone => false,
            Owner::Tenant if write => {
                return Err(ApiError::Forbidden(format!(
                    "a key bound to the user `{me}` changes only `user/{me}/…` and its \
                     sessions' memory; `{}` is the tenant's",
                    namespace.as_str()
                )));
            }
            Owner::Tenant => true,
        };
        match allowed {
            true => Ok(()),
            false => Err(ApiError::NotFound(format!(
                "no memory namespace `{}`",
                namespace.as_str()
            ))),
        }
    }
}

fn not_yours(me: &str) -> ApiError {
    ApiError::Forbidden(format!(
        "this key is bound to the user `{me}`; it reaches only that user's runs, sessions and \
         memory"
    ))
}

/// Holds a key bound to `me` to its user's part of `/v1` (see the module's doc): `Ok` lets
/// the request through to its handler.
pub(super) async fn confine(
    state: &AppState,
    tenant: &Tenant,
    me: &str,
    method: &Method,
    path: &str,
) -> Result<(), ApiError> {
    let Some(rest) = path.strip_prefix("/v1/") else {
        return Ok(());
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let read = *method == Method::GET || *method == Method::HEAD;
    match parts[..] {
        ["runs"] | ["sessions"] | ["memory", ..] => Ok(()),
        ["runs", id, ..] => {
            let Some(id) = RunId::parse(id) else {
                return Ok(()); // the handler's own 404
            };
            let owner = state.runs.get(tenant, id).await?;
            match owner {
                Some(run) if run.run.user_id.as_deref() != Some(me) => {
                    Err(ApiError::NotFound(format!("no run with id {id}")))
                }
                _ => Ok(()),
            }
        }
        ["sessions", id, ..] => {
            let owner = state.sessions.user(tenant, id).await?;
            match owner.flatten().as_deref() == Some(me) {
                true => Ok(()),
                false => Err(ApiError::NotFound(format!("no session `{id}`"))),
            }
        }
        ["users", id, ..] if id == me => Ok(()),
        ["users", ..] => Err(not_yours(me)),
        [
            "workflows" | "agents" | "tools" | "functions" | "models" | "usage",
            ..,
        ] if read => Ok(()),
        _ => Err(ApiError::Forbidden(format!(
            "this key is bound to the user `{me}`: it reaches its runs, sessions and memory, \
             and reads definitions; `{method} {path}` needs a tenant's key"
        ))),
    }
}

/// `/v1/users/{id}`: a user's data exported and erased.
pub fn routes() -> axum::Router<AppState> {
    use axum::routing::{delete, get};
    axum::Router::new()
        .route("/users/{id}", delete(erase_user))
        .route("/users/{id}/export", get(export_user))
}

/// One session of a user, in an export.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct SessionExport {
    pub id: String,
    #[schema(value_type = Object)]
    pub variables: serde_json::Map<String, Value>,
    /// The summary of its older turns, if one was made.
    pub summary: Option<String>,
}

/// Everything orca keeps of one user of the tenant.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct UserExport {
    pub user_id: String,
    pub exported_at: chrono::DateTime<chrono::Utc>,
    /// The user's runs, newest first (each run's events: `GET /v1/runs/{id}/events`).
    pub runs: Vec<crate::domain::Run>,
    pub sessions: Vec<SessionExport>,
    pub memory: Vec<crate::domain::memory::MemoryItem>,
}

/// What erasing a user removed.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct UserErased {
    pub user_id: String,
    pub runs: u64,
    pub sessions: u64,
    pub memory_items: u64,
}

/// The most runs or sessions one export holds.
const MAX_EXPORTED: u32 = 100_000;

fn checked_user(id: &str) -> Result<(), ApiError> {
    crate::domain::memory::check_user_id(id).map_err(|m| ApiError::validation("/path/id", m))
}

/// Export a user's data: their runs, the sessions of those runs (variables, summary) and
/// their memory items, in one document.
#[utoipa::path(get, path = "/v1/users/{id}/export", tag = "users",
    params(("id" = String, Path, pattern = "^[A-Za-z0-9_.:@~-]{1,128}$", description = "The user id runs name as `user_id`")),
    responses(
        (status = 200, body = UserExport),
        (status = 403, description = "A key bound to another user", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn export_user(
    axum::extract::State(state): axum::extract::State<AppState>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    super::extract::Path(id): super::extract::Path<String>,
) -> Result<axum::Json<UserExport>, ApiError> {
    checked_user(&id)?;
    let filter = crate::store::RunFilter {
        user_id: Some(id.clone()),
        limit: MAX_EXPORTED,
        ..Default::default()
    };
    let runs = state.runs.list(&tenant, &filter).await?;
    let listed = (state.sessions)
        .list(&tenant, None, Some(&id), MAX_EXPORTED)
        .await?;
    let mut sessions = Vec::with_capacity(listed.len());
    for session in listed {
        let variables = state.sessions.variables(&tenant, &session.id).await?;
        let summary = state.sessions.summary(&tenant, &session.id).await?;
        sessions.push(SessionExport {
            id: session.id,
            variables,
            summary: summary.map(|s| s.text),
        });
    }
    let memory = state.users.items(&tenant, &id).await?;
    Ok(axum::Json(UserExport {
        user_id: id,
        exported_at: crate::domain::now(),
        runs,
        sessions,
        memory,
    }))
}

/// Erase a user: their runs with everything they own, the sessions of those runs, their
/// memory; in one transaction, touching nothing of anyone else. 409 (and nothing erased)
/// while a run of theirs has not finished. A tenant's key only.
#[utoipa::path(delete, path = "/v1/users/{id}", tag = "users",
    params(("id" = String, Path, pattern = "^[A-Za-z0-9_.:@~-]{1,128}$", description = "The user id runs name as `user_id`")),
    responses(
        (status = 200, body = UserErased),
        (status = 403, description = "A key bound to a user", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "A run of the user has not finished", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn erase_user(
    axum::extract::State(state): axum::extract::State<AppState>,
    axum::Extension(tenant): axum::Extension<Tenant>,
    axum::Extension(bound): axum::Extension<BoundUser>,
    super::extract::Path(id): super::extract::Path<String>,
) -> Result<axum::Json<UserErased>, ApiError> {
    checked_user(&id)?;
    if bound.0.is_some() {
        return Err(ApiError::Forbidden(
            "erasing a user takes a tenant's key, not a key bound to a user".into(),
        ));
    }
    match state.users.erase(&tenant, &id).await? {
        crate::store::users::Erased::Done {
            runs,
            sessions,
            items,
        } => Ok(axum::Json(UserErased {
            user_id: id,
            runs,
            sessions,
            memory_items: items,
        })),
        crate::store::users::Erased::Unfinished(ids) => {
            let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
            Err(ApiError::Conflict(format!(
                "the user's runs {} have not finished; cancel them first",
                ids.join(", ")
            )))
        }
    }
}
