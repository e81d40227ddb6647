//! `/v1/sessions`: the caller's sessions, a page at a time; `/v1/sessions/{id}`: what the
//! runs sharing a `session_id` share, per tenant: its variables (`session.NAME` in plans) to
//! read and change, its runs, its history (the turns later runs are given, and the summary of
//! older ones), and deleting it whole.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::domain::Tenant;
use crate::store::{Deleted, Refusal, SessionCursor, SessionLimits};

use super::AppState;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, Path, Query, deserialize_located};

/// Runs a session shows.
const RUNS_SHOWN: u32 = 100;

/// Turns a session's history shows (the newest, oldest first).
const TURNS_SHOWN: u32 = 200;

/// Variables one change may set or delete.
const MAX_CHANGES: usize = 64;

/// A session.
#[derive(Debug, Serialize, ToSchema)]
pub struct Session {
    pub id: String,
    /// Its variables: what plans read as `session.NAME`.
    #[schema(value_type = Object)]
    pub variables: Map<String, Value>,
    /// The summary of its older turns, once one was made.
    pub summary: Option<SummaryView>,
    /// Its newest runs (up to 100), newest first.
    pub runs: Vec<SessionRunView>,
    /// How many runs it has in all.
    pub run_count: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SummaryView {
    pub text: String,
    /// Turns (succeeded runs) it covers.
    pub turns: u32,
    pub tokens: u32,
    /// The last run it covers.
    pub through_run: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SessionRunView {
    pub id: String,
    pub status: String,
    /// How the run ended (`success`, `partial`, `error`, `timeout`, `cancelled`); `null`
    /// until it has.
    pub completion: Option<String>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl From<crate::store::SessionRun> for SessionRunView {
    fn from(r: crate::store::SessionRun) -> Self {
        SessionRunView {
            id: r.id.to_string(),
            status: r.status,
            completion: r.completion,
            created_at: r.created_at,
            finished_at: r.finished_at,
        }
    }
}

/// `GET /v1/sessions` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionList {
    pub sessions: Vec<SessionListItem>,
    /// The `cursor` of the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// A session as the list shows it: enough to tell sessions apart and pick one.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionListItem {
    pub id: String,
    /// How many runs it has.
    pub run_count: u64,
    /// How many variables it holds.
    pub variable_count: u64,
    /// When its first run was created; `null` with no run.
    pub first_run_at: Option<DateTime<Utc>>,
    /// When its newest run was created; `null` with no run.
    pub last_run_at: Option<DateTime<Utc>>,
    /// Its newest run; `null` with no run (a session of variables only).
    pub last_run: Option<SessionRunView>,
}

impl From<crate::store::ListedSession> for SessionListItem {
    fn from(s: crate::store::ListedSession) -> Self {
        SessionListItem {
            id: s.id,
            run_count: s.run_count,
            variable_count: s.variable_count,
            first_run_at: s.first_run_at,
            last_run_at: s.last_run.as_ref().map(|r| r.created_at),
            last_run: s.last_run.map(SessionRunView::from),
        }
    }
}

/// A session's history: what its next run is given.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionHistory {
    pub summary: Option<SummaryView>,
    /// The newest turns (up to 200), oldest first: each succeeded run's input and output.
    pub turns: Vec<TurnView>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TurnView {
    pub run_id: String,
    /// The run's input as given: a string or an object.
    pub input: Value,
    /// Any JSON value: what the run output.
    pub output: Value,
}

/// The body of `PATCH /v1/sessions/{id}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateSession {
    /// Variables to set (name → value), or to delete (name → `null`); names as plans' (1-64
    /// of letters, digits, `_`, `-`); at most 64.
    #[schema(value_type = Object)]
    pub variables: Map<String, Value>,
}

/// The `/v1/sessions` routes.
pub fn routes() -> axum::Router<AppState> {
    use axum::routing::get;
    axum::Router::new()
        .route("/sessions", get(list_sessions))
        .route(
            "/sessions/{id}",
            get(get_session)
                .patch(update_session)
                .delete(delete_session),
        )
        .route("/sessions/{id}/history", get(session_history))
}

/// A session id as `POST /v1/runs` takes it: 1-200 characters.
fn valid_id(id: &str) -> Result<(), ApiError> {
    let n = id.chars().count();
    if (1..=200).contains(&n) {
        Ok(())
    } else {
        Err(ApiError::validation(
            "/id",
            "a session id is 1-200 characters",
        ))
    }
}

fn summary_view(s: crate::store::SessionSummary) -> SummaryView {
    SummaryView {
        text: s.text,
        turns: s.turns,
        tokens: s.tokens,
        through_run: s.through.to_string(),
    }
}

/// The session as it stands; `None` when it has no run, variable or summary.
async fn session(state: &AppState, tenant: &Tenant, id: &str) -> Result<Option<Session>, ApiError> {
    let sessions = &state.sessions;
    let variables = sessions.variables(tenant, id).await?;
    let summary = sessions.summary(tenant, id).await?;
    let (runs, run_count) = sessions.runs(tenant, id, RUNS_SHOWN).await?;
    if variables.is_empty() && summary.is_none() && run_count == 0 {
        return Ok(None);
    }
    Ok(Some(Session {
        id: id.to_owned(),
        variables,
        summary: summary.map(summary_view),
        runs: runs.into_iter().map(SessionRunView::from).collect(),
        run_count,
    }))
}

/// The query parameters `GET /v1/sessions` knows.
const LIST_PARAMETERS: &[&str] = &["limit", "cursor", "user_id"];

/// A page cursor of `GET /v1/sessions`: the newest run of the page's last session (`-` for
/// none), a dot, and its id in hex (a session id may hold any character).
fn encode_cursor(c: &SessionCursor) -> String {
    let last = c
        .last_run
        .map_or_else(|| "-".to_owned(), |id| id.to_string());
    format!("{last}.{}", super::extract::hex_of(&c.id))
}

fn decode_cursor(text: &str) -> Option<SessionCursor> {
    let (last, hex) = text.split_once('.')?;
    let last_run = match last {
        "-" => None,
        id => Some(crate::domain::RunId::parse(id)?),
    };
    // Only a place in the order: bytes that are no text still name one.
    let id = super::extract::text_of_hex(hex)?;
    Some(SessionCursor { last_run, id })
}

/// `limit` (default 50) and `cursor` of `GET /v1/sessions`, every problem at once.
type PageQuery = (u32, Option<SessionCursor>, Option<String>);

fn page_of(params: &[(String, String)]) -> Result<PageQuery, ApiError> {
    let (mut limit, mut cursor, mut user) = (50, None, None);
    let mut errors = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (k, v) in params {
        if let Err(e) = super::extract::given_once(&mut seen, k) {
            errors.push(e);
            continue;
        }
        let pointer = format!("/query/{}", super::extract::escape_pointer(k));
        match k.as_str() {
            "limit" => match super::extract::page_limit(v) {
                Ok(n) => limit = n,
                Err(message) => errors.push(FieldError::new(pointer, message)),
            },
            "cursor" => match decode_cursor(v) {
                Some(c) => cursor = Some(c),
                None => errors.push(FieldError::new(pointer, "not a cursor from this API")),
            },
            "user_id" => match crate::domain::memory::check_user_id(v) {
                Ok(()) => user = Some(v.clone()),
                Err(message) => errors.push(FieldError::new(pointer, message)),
            },
            _ => errors.push(super::extract::unknown_parameter(k, LIST_PARAMETERS)),
        }
    }
    if errors.is_empty() {
        Ok((limit, cursor, user))
    } else {
        Err(ApiError::validation_many(errors))
    }
}

/// `cursor` of `GET /v1/sessions` in the OpenAPI document; the handler reads it.
#[derive(ToSchema)]
#[schema(
    description = "`next_cursor` of the previous page",
    pattern = "^(-|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\\.([0-9a-fA-F]{2})*$"
)]
#[allow(dead_code)] // described, never built
struct SessionPageCursor(String);

/// List the caller's sessions, the one with the newest run first (sessions with no run, only
/// variables, come last).
///
/// Each with its run count, variable count, first and newest run's times, and its newest run
/// (id, status, completion). A deleted session is not listed. `limit` (1-200, default 50);
/// `cursor` from the previous page. An unknown parameter is a 422 that lists the known ones.
#[utoipa::path(
    get, path = "/v1/sessions", tag = "sessions",
    params(
        ("limit" = Option<u32>, Query, maximum = 200, minimum = 1),
        ("cursor" = inline(Option<SessionPageCursor>), Query),
        ("user_id" = Option<String>, Query, pattern = "^[A-Za-z0-9_.:@~-]{1,128}$", description = "Only the sessions of this user (a key bound to a user sees only its own)"),
    ),
    responses(
        (status = 200, body = SessionList),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_sessions(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Extension(bound): Extension<super::users::BoundUser>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Json<SessionList>, ApiError> {
    let (limit, cursor, user) = page_of(&params)?;
    let user = bound.narrow(user)?;
    // One more than asked tells whether a next page exists.
    let mut page = state
        .sessions
        .list(&tenant, cursor.as_ref(), user.as_deref(), limit + 1)
        .await?;
    let next_cursor = if page.len() > limit as usize {
        page.truncate(limit as usize);
        page.last().map(|s| {
            encode_cursor(&SessionCursor {
                last_run: s.last_run.as_ref().map(|r| r.id),
                id: s.id.clone(),
            })
        })
    } else {
        None
    };
    Ok(Json(SessionList {
        sessions: page.into_iter().map(SessionListItem::from).collect(),
        next_cursor,
    }))
}

fn no_session(id: &str) -> ApiError {
    ApiError::NotFound(format!("no session `{id}`"))
}

/// A session: its variables, the summary of its older turns, its runs.
#[utoipa::path(
    get, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, min_length = 1, max_length = 200, description = "The session id runs name as `session_id`")),
    responses(
        (status = 200, body = Session),
        (status = 404, description = "No run, variable or summary has this session id", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_session(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Json<Session>, ApiError> {
    valid_id(&id)?;
    session(&state, &tenant, &id)
        .await?
        .map(Json)
        .ok_or_else(|| no_session(&id))
}

/// Set or delete a session's variables.
///
/// `{"variables": {"topic": "cats", "old": null}}` sets `topic` and deletes `old`, in one
/// change; the session's next runs read them as `session.NAME`. A session that does not
/// exist yet starts with them. A change that would pass one of the session's limits (a
/// value's size, the number of variables, their total size: `context.session_max_*`) is
/// refused whole with 413.
#[utoipa::path(
    patch, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, min_length = 1, max_length = 200, description = "The session id")),
    request_body = UpdateSession,
    responses(
        (status = 200, body = Session),
        (status = 400, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The session was deleted", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "The change would pass one of the session's limits (`context.session_max_*`); nothing was written", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body was not sent as application/json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn update_session(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<Session>, ApiError> {
    valid_id(&id)?;
    let change: UpdateSession = deserialize_located(body)?;
    if change.variables.len() > MAX_CHANGES {
        return Err(ApiError::validation(
            "/variables",
            format!("at most {MAX_CHANGES} variables per change"),
        ));
    }
    let bad: Vec<FieldError> = change
        .variables
        .keys()
        .filter(|name| {
            name.is_empty()
                || name.len() > 64
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
        .map(|name| {
            FieldError::new(
                format!("/variables/{}", name.replace('~', "~0").replace('/', "~1")),
                "a variable name is 1-64 of letters, digits, `_` and `-`",
            )
        })
        .collect();
    if !bad.is_empty() {
        return Err(ApiError::validation_many(bad));
    }
    let (unset, set): (Vec<_>, Vec<_>) =
        change.variables.into_iter().partition(|(_, v)| v.is_null());
    let set: Map<String, Value> = set.into_iter().collect();
    let unset: Vec<String> = unset.into_iter().map(|(name, _)| name).collect();
    let limits = SessionLimits::of(&state.config.context);
    let changed = state
        .sessions
        .change_variables(&tenant, &id, (&set, &unset), limits)
        .await?;
    match changed {
        Ok(()) => {}
        Err(refused @ Refusal::Limit { .. }) => {
            return Err(ApiError::TooLarge(refused.describe()));
        }
        Err(Refusal::Deleted) => return Err(ApiError::Conflict(Refusal::Deleted.describe())),
    }
    // Changing nothing in a session nothing has named yet leaves it empty, not missing.
    let found = session(&state, &tenant, &id).await?;
    Ok(Json(found.unwrap_or_else(|| Session {
        id: id.clone(),
        variables: Map::new(),
        summary: None,
        runs: Vec::new(),
        run_count: 0,
    })))
}

/// A session's history: the turns its next run is given (each succeeded run's input and
/// output, the newest 200) and the summary of older ones.
#[utoipa::path(
    get, path = "/v1/sessions/{id}/history", tag = "sessions",
    params(("id" = String, Path, min_length = 1, max_length = 200, description = "The session id")),
    responses(
        (status = 200, body = SessionHistory),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn session_history(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Json<SessionHistory>, ApiError> {
    valid_id(&id)?;
    if session(&state, &tenant, &id).await?.is_none() {
        return Err(no_session(&id));
    }
    let turns = state.sessions.turns(&tenant, &id, TURNS_SHOWN).await?;
    let summary = state.sessions.summary(&tenant, &id).await?;
    Ok(Json(SessionHistory {
        summary: summary.map(summary_view),
        turns: turns
            .into_iter()
            .map(|t| TurnView {
                run_id: t.run_id.to_string(),
                input: t.input,
                output: t.output,
            })
            .collect(),
    }))
}

/// Delete a session: its variables, its summary and its runs with their histories.
///
/// 409 while any of its runs has not finished (cancel them first); nothing is deleted then.
/// Deleted in one transaction: all of it, or nothing. A deleted session's id is not used
/// again: a new run naming it is refused (409).
#[utoipa::path(
    delete, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, min_length = 1, max_length = 200, description = "The session id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "A run of the session has not finished", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn delete_session(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    valid_id(&id)?;
    if session(&state, &tenant, &id).await?.is_none() {
        return Err(no_session(&id));
    }
    match state.sessions.delete(&tenant, &id).await? {
        Deleted::Whole => Ok(StatusCode::NO_CONTENT),
        Deleted::Unfinished(runs) => Err(ApiError::Conflict(format!(
            "{} run(s) of the session have not finished (e.g. {}); cancel them first",
            runs.len(),
            runs[0]
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_cursor_reads_back_as_written_and_refuses_what_none_wrote() {
        let run = crate::domain::RunId::new();
        for (last_run, id) in [
            (Some(run), "talk"),
            (None, "vars only"),
            (Some(run), "notes/β.2 & more"),
            (None, "-"),
        ] {
            let cursor = SessionCursor {
                last_run,
                id: id.to_owned(),
            };
            let text = encode_cursor(&cursor);
            assert!(
                text.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b)),
                "safe in a URL as it is: {text}"
            );
            assert_eq!(decode_cursor(&text), Some(cursor), "{text}");
        }
        for bad in ["", "nope", "-.7", "-.zz", "not-a-run.74", "-"] {
            assert_eq!(decode_cursor(bad), None, "{bad}");
        }
        // Bytes that are no text are still a place in the order (the documented pattern
        // allows any hex).
        let place = decode_cursor("-.ff").map(|c| c.id);
        assert_eq!(place.as_deref(), Some("\u{fffd}"));
    }
}
