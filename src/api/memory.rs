//! `/v1/memory` (issue 48): a tenant's memory items by namespace and key. `PUT`, `GET` and
//! `DELETE /v1/memory/{namespace}/{key}` (the namespace's segments joined by `/`, the key last),
//! `GET /v1/memory?namespace=` (a namespace and those below it, by key prefix, paged) and
//! `POST /v1/memory/search`. A key bound to a user reaches only its own memory
//! ([`BoundUser::may_use`]); what a put would take past a limit is 413 and stores nothing.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, Path, Query, deserialize_located};
use super::users::BoundUser;
use crate::domain::Tenant;
use crate::domain::memory::{MemoryItem, Namespace, Owner, SearchMode, check_key};
use crate::store::memory::{NewItem, Put, Searched};

/// The longest TTL a put may ask: ten years, in seconds.
const MAX_TTL_SECS: u64 = 10 * 366 * 24 * 3600;

pub fn routes() -> axum::Router<AppState> {
    use axum::routing::{get, post};
    axum::Router::new()
        .route("/memory", get(list_items))
        .route("/memory/search", post(search))
        .route(
            "/memory/{*path}",
            get(get_item).put(put_item).delete(delete_item),
        )
}

/// A put's body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutItem {
    /// Any JSON value (at most `memory.max_item_bytes` as JSON text).
    pub value: Value,
    /// Forget the item this many seconds from now (1 to ten years); none: kept until deleted.
    #[schema(minimum = 1, maximum = 316224000)]
    pub ttl_seconds: Option<u64>,
}

/// A search's body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchBody {
    /// Where to search: this namespace and those below it.
    pub namespace: String,
    /// What to look for (1-2,000 characters).
    pub query: String,
    /// Items at most (1 to `memory.max_search_results`, default 10).
    #[schema(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    #[serde(default)]
    pub mode: SearchMode,
}

/// What a search found, best first.
#[derive(Debug, Serialize, ToSchema)]
pub struct SearchResult {
    pub items: Vec<MemoryItem>,
    /// How they were ranked: `text` or `meaning`.
    pub mode: SearchMode,
}

/// A page of items.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryList {
    pub items: Vec<MemoryItem>,
    /// Pass as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// `GET /v1/memory`'s query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub namespace: String,
    #[serde(default)]
    pub key_prefix: String,
    pub limit: Option<u32>,
    pub cursor: Option<String>,
}

/// `{namespace}/{key}` of a path, both checked.
fn item_path(path: &str) -> Result<(Namespace, String), ApiError> {
    let Some((namespace, key)) = path.rsplit_once('/') else {
        return Err(ApiError::validation(
            "/path/namespace",
            "name a namespace and a key: /v1/memory/NAMESPACE/KEY",
        ));
    };
    let namespace =
        Namespace::parse(namespace).map_err(|m| ApiError::validation("/path/namespace", m))?;
    check_key(key).map_err(|m| ApiError::validation("/path/key", m))?;
    Ok((namespace, key.to_owned()))
}

/// Put an item: its value under a key in a namespace, replacing what was there.
///
/// 201 when the key was new, 200 when it replaced a value (`revision` counts the writes).
/// Past `memory.max_item_bytes`, the namespace's `memory.max_namespace_items` or the tenant's
/// `memory.max_tenant_bytes`: 413 `payload_too_large`, and nothing is stored.
#[utoipa::path(put, path = "/v1/memory/{namespace}/{key}", tag = "memory",
    params(
        ("namespace" = String, Path, pattern = "^[A-Za-z0-9_.:@~-]{1,128}(/[A-Za-z0-9_.:@~-]{1,128}){0,7}$", description = "1-8 segments joined by `/` (letters, digits, `_ - . : @ ~`): `user/ID/…` is a user's, `session/ID/…` a session's, anything else the tenant's"),
        ("key" = String, Path, pattern = "^[A-Za-z0-9_.:@~-]{1,256}$"),
    ),
    request_body = PutItem,
    responses(
        (status = 200, description = "Replaced", body = MemoryItem),
        (status = 201, description = "Created", body = MemoryItem),
        (status = 400, description = "Not JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 403, description = "A key bound to a user writing the tenant's memory", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "Another user's memory (a key bound to a user)", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Past a memory limit", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body was not sent as application/json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "The embedding model failed", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn put_item(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Extension(bound): Extension<BoundUser>,
    Path(path): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let (namespace, key) = item_path(&path)?;
    if !body.is_object() {
        return Err(ApiError::validation(
            "",
            "the body is a JSON object: {\"value\": …}",
        ));
    }
    let body: PutItem = deserialize_located(body)?;
    if let Some(ttl) = body.ttl_seconds
        && !(1..=MAX_TTL_SECS).contains(&ttl)
    {
        return Err(ApiError::validation(
            "/ttl_seconds",
            format!("a TTL is 1 to {MAX_TTL_SECS} seconds"),
        ));
    }
    bound.may_use(&state, &tenant, &namespace, true).await?;
    let (user_id, session_id) = match namespace.owner() {
        Owner::User(user) => (Some(user.to_owned()), None),
        Owner::Session(session) => {
            let user = state.sessions.user(&tenant, session).await?.flatten();
            (user, Some(session.to_owned()))
        }
        Owner::Tenant | Owner::Everyone => (None, None),
    };
    let memory = state.engine.memory();
    let embedding = (memory.embedding_of(&key, &body.value).await).map_err(embedding_failed)?;
    let item = NewItem {
        namespace: &namespace,
        key: &key,
        value: &body.value,
        ttl_secs: body.ttl_seconds,
        user_id: user_id.as_deref(),
        session_id: session_id.as_deref(),
        written_by: None,
        embedding: embedding.as_ref().map(|(v, m)| (v.as_slice(), m.as_str())),
    };
    match memory.put(&tenant, item).await? {
        Put::Stored(item, true) => Ok((StatusCode::CREATED, Json(item)).into_response()),
        Put::Stored(item, false) | Put::Replayed(item) => Ok(Json(item).into_response()),
        Put::TooLarge(why) => Err(ApiError::TooLarge(why)),
    }
}

/// Get an item (404 when it is missing, expired, or another user's).
#[utoipa::path(get, path = "/v1/memory/{namespace}/{key}", tag = "memory",
    params(
        ("namespace" = String, Path, pattern = "^[A-Za-z0-9_.:@~-]{1,128}(/[A-Za-z0-9_.:@~-]{1,128}){0,7}$", description = "Segments joined by `/`"),
        ("key" = String, Path, pattern = "^[A-Za-z0-9_.:@~-]{1,256}$"),
    ),
    responses(
        (status = 200, body = MemoryItem),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_item(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Extension(bound): Extension<BoundUser>,
    Path(path): Path<String>,
) -> Result<Json<MemoryItem>, ApiError> {
    let (namespace, key) = item_path(&path)?;
    bound.may_use(&state, &tenant, &namespace, false).await?;
    let item = state.engine.memory().get(&tenant, &namespace, &key).await?;
    item.map(Json).ok_or_else(|| no_item(&namespace, &key))
}

fn no_item(namespace: &Namespace, key: &str) -> ApiError {
    ApiError::NotFound(format!(
        "no item `{key}` in the memory namespace `{}`",
        namespace.as_str()
    ))
}

/// Delete an item (404 when there is none).
#[utoipa::path(delete, path = "/v1/memory/{namespace}/{key}", tag = "memory",
    params(
        ("namespace" = String, Path, pattern = "^[A-Za-z0-9_.:@~-]{1,128}(/[A-Za-z0-9_.:@~-]{1,128}){0,7}$", description = "Segments joined by `/`"),
        ("key" = String, Path, pattern = "^[A-Za-z0-9_.:@~-]{1,256}$"),
    ),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn delete_item(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Extension(bound): Extension<BoundUser>,
    Path(path): Path<String>,
) -> Result<StatusCode, ApiError> {
    let (namespace, key) = item_path(&path)?;
    bound.may_use(&state, &tenant, &namespace, true).await?;
    match state
        .engine
        .memory()
        .delete(&tenant, &namespace, &key)
        .await?
    {
        true => Ok(StatusCode::NO_CONTENT),
        false => Err(no_item(&namespace, &key)),
    }
}

/// List the items of a namespace and the namespaces below it, by namespace then key.
///
/// `key_prefix` keeps the keys that start with it; `limit` (1-200, default 50); `cursor` from
/// the previous page. Expired items are not listed.
#[utoipa::path(get, path = "/v1/memory", tag = "memory",
    params(
        ("namespace" = String, Query, pattern = "^[A-Za-z0-9_.:@~-]{1,128}(/[A-Za-z0-9_.:@~-]{1,128}){0,7}$", description = "Segments joined by `/`"),
        ("key_prefix" = Option<String>, Query, max_length = 256),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200),
        ("cursor" = Option<String>, Query, pattern = "^([0-9a-f]{2})+$", description = "`next_cursor` of the previous page"),
    ),
    responses(
        (status = 200, body = MemoryList),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_items(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Extension(bound): Extension<BoundUser>,
    Query(query): Query<ListQuery>,
) -> Result<Json<MemoryList>, ApiError> {
    let namespace = Namespace::parse(&query.namespace)
        .map_err(|m| ApiError::validation("/query/namespace", m))?;
    let limit = query.limit.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(ApiError::validation("/query/limit", "a limit is 1 to 200"));
    }
    if query.key_prefix.len() > crate::domain::memory::MAX_KEY {
        return Err(ApiError::validation(
            "/query/key_prefix",
            "a key prefix is at most 256 characters",
        ));
    }
    let after =
        match &query.cursor {
            Some(c) => Some(decode_cursor(c).ok_or_else(|| {
                ApiError::validation("/query/cursor", "not a cursor from this API")
            })?),
            None => None,
        };
    bound.may_use(&state, &tenant, &namespace, false).await?;
    let after = after.as_ref().map(|(n, k)| (n.as_str(), k.as_str()));
    let page = (state.engine.memory())
        .list(&tenant, &namespace, &query.key_prefix, after, limit)
        .await?;
    Ok(Json(MemoryList {
        items: page.items,
        next_cursor: page.next.map(|(n, k)| encode_cursor(&n, &k)),
    }))
}

/// A page cursor: `namespace` and `key` joined by a newline, in hex.
fn encode_cursor(namespace: &str, key: &str) -> String {
    super::extract::hex_of(&format!("{namespace}\n{key}"))
}

/// Any even run of hex digits is a place to start after: a cursor not made here starts
/// wherever its text sorts.
fn decode_cursor(text: &str) -> Option<(String, String)> {
    if text.is_empty() {
        return None;
    }
    let text = super::extract::text_of_hex(text)?;
    let (namespace, key) = text.split_once('\n').unwrap_or((&text, ""));
    Some((namespace.replace('\0', ""), key.replace('\0', "")))
}

/// Search a namespace (and those below it) for the items closest to a query, best first.
///
/// `mode`: `text` (full-text, stemmed English words: items sharing more, and rarer, words
/// first), `meaning` (cosine similarity of embeddings; needs `memory.embedding_model`), or
/// `auto` (meaning when an embedding model is configured, else text).
#[utoipa::path(post, path = "/v1/memory/search", tag = "memory",
    request_body = SearchBody,
    responses(
        (status = 200, body = SearchResult),
        (status = 503, description = "The embedding model failed", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 400, description = "Not JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "Another user's memory (a key bound to a user)", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body was not sent as application/json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn search(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Extension(bound): Extension<BoundUser>,
    JsonBody(body): JsonBody,
) -> Result<Json<SearchResult>, ApiError> {
    let body: SearchBody = deserialize_located(body)?;
    let mut errors = Vec::new();
    let namespace = Namespace::parse(&body.namespace)
        .map_err(|m| errors.push(FieldError::new("/namespace", m)))
        .ok();
    if body.query.trim().is_empty() || body.query.chars().count() > 2000 {
        errors.push(FieldError::new("/query", "a query is 1-2,000 characters"));
    }
    let max = state.engine.memory().limits().max_search_results;
    let limit = body.limit.unwrap_or(10.min(max));
    if !(1..=max).contains(&limit) {
        errors.push(FieldError::new(
            "/limit",
            format!("a limit is 1 to {max} (memory.max_search_results)"),
        ));
    }
    let Some(namespace) = namespace.filter(|_| errors.is_empty()) else {
        return Err(ApiError::validation_many(errors));
    };
    bound.may_use(&state, &tenant, &namespace, false).await?;
    let searched = (state.engine.memory())
        .search(&tenant, &namespace, &body.query, limit, body.mode)
        .await?;
    match searched {
        Searched::Found(items, mode) => Ok(Json(SearchResult { items, mode })),
        Searched::NoEmbedder => Err(ApiError::validation(
            "/mode",
            "no embedding model is configured (memory.embedding_model); search by `text`",
        )),
        Searched::Embedding(e) => Err(embedding_failed(e)),
    }
}

/// The embedding model failing: 503, the caller may try again.
fn embedding_failed(e: crate::llm::Error) -> ApiError {
    ApiError::Unavailable(format!("the embedding model failed: {e}"))
}
