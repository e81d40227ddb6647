//! `/v1/{kind}/{name}/versions`, `/diff` and `/labels` (issue 45): the version history of a
//! workflow, agent, declared HTTP tool or declared LLM function, a diff between any two
//! versions, and labels that point at one version and move atomically. One set of handlers serves the four kinds; the
//! path's first segment says which. Every change is stored by the kinds' own `PUT`s (and by
//! `POST /v1/apply`); here versions are read, labelled and deleted.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::ApiError;
use super::extract::{JsonBody, Path, Query, deserialize_located};
use super::registry::{RegistryName, valid_name};
use crate::domain::Tenant;
use crate::domain::definition::{DefinitionKind, Version, check_label, unknown_version};
use crate::store::{Authored, Labelled, Owner, Registry, VersionRecord};

pub fn routes() -> axum::Router<AppState> {
    use axum::routing::{get, put};
    axum::Router::new()
        .route("/{kind}/{name}/versions", get(list_versions))
        .route(
            "/{kind}/{name}/versions/{version}",
            get(get_version).delete(delete_version),
        )
        .route("/{kind}/{name}/diff", get(diff))
        .route(
            "/{kind}/{name}/labels/{label}",
            put(put_label).delete(delete_label),
        )
}

/// The collections that keep versions, as the path names them.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Collection {
    Workflows,
    Agents,
    Tools,
    Functions,
}

impl Collection {
    fn parse(segment: &str) -> Result<Collection, ApiError> {
        match segment {
            "workflows" => Ok(Collection::Workflows),
            "agents" => Ok(Collection::Agents),
            "tools" => Ok(Collection::Tools),
            "functions" => Ok(Collection::Functions),
            other => Err(ApiError::NotFound(format!(
                "`/v1/{other}` keeps no versions; workflows, agents, tools and functions do"
            ))),
        }
    }

    pub(super) fn registry(self) -> Registry {
        match self {
            Collection::Workflows => Registry::Workflows,
            Collection::Agents => Registry::Agents,
            Collection::Tools => Registry::HttpTools,
            Collection::Functions => Registry::Functions,
        }
    }

    fn noun(self) -> &'static str {
        self.registry().kind().as_str()
    }
}

/// A label's name in the OpenAPI document, as [`check_label`] accepts it (not `latest`).
#[derive(ToSchema)]
#[schema(
    description = "1-64 of lowercase letters, digits, `_`, `.`, `-`, starting with a letter; not `latest`",
    pattern = "^[a-z][a-z0-9_.-]{0,63}$"
)]
#[allow(dead_code)] // described, never built
pub(super) struct LabelName(String);

/// A version as a path or a query names it: a number, a label, or `latest`.
#[derive(ToSchema)]
#[schema(
    description = "A version number (from 1), a label, or `latest`",
    pattern = "^([1-9][0-9]{0,8}|[a-z][a-z0-9_.-]{0,63})$"
)]
#[allow(dead_code)] // described, never built
pub(super) struct VersionRef(String);

/// The version history of a definition.
#[derive(Debug, Serialize, ToSchema)]
pub struct VersionList {
    pub name: String,
    pub kind: DefinitionKind,
    /// Loaded from the server's directory: readable, not changeable through the API.
    pub shared: bool,
    pub latest_version: u32,
    /// Each label and the version it points at.
    #[schema(value_type = Object)]
    pub labels: Map<String, Value>,
    /// Newest first.
    pub versions: Vec<VersionSummary>,
}

/// One version in a history.
#[derive(Debug, Serialize, ToSchema)]
pub struct VersionSummary {
    pub version: u32,
    /// SHA-256 of the definition in canonical JSON.
    pub digest: String,
    /// Who stored it, as they said (`?author=` of the `PUT`, `author` of an apply).
    pub author: Option<String>,
    /// A fingerprint of the API key that stored it (never the key).
    pub key: Option<String>,
    pub message: Option<String>,
    pub created_at: DateTime<Utc>,
    /// The labels pointing at it.
    pub labels: Vec<String>,
}

/// One version with its definition.
#[derive(Debug, Serialize, ToSchema)]
pub struct VersionDetail {
    pub name: String,
    pub kind: DefinitionKind,
    #[serde(flatten)]
    pub summary: VersionSummary,
    /// The definition as stored (a tool's header values hidden).
    #[schema(value_type = Object)]
    pub definition: Value,
}

/// What changed from one version to another.
#[derive(Debug, Serialize, ToSchema)]
pub struct VersionDiff {
    pub name: String,
    pub kind: DefinitionKind,
    pub from: u32,
    pub to: u32,
    /// RFC 6902 operations that turn `from` into `to` (a tool's header values hidden).
    #[schema(value_type = Vec<Object>)]
    pub changes: Value,
}

/// `GET …/diff` parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DiffQuery {
    /// A version number, a label or `latest`.
    #[param(pattern = "^([1-9][0-9]{0,8}|[a-z][a-z0-9_.-]{0,63})$")]
    pub from: String,
    /// A version number, a label or `latest` (the default).
    #[param(pattern = "^([1-9][0-9]{0,8}|[a-z][a-z0-9_.-]{0,63})$")]
    pub to: Option<String>,
}

/// `PUT …/labels/{label}` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LabelBody {
    /// The version the label is to point at.
    #[schema(minimum = 1)]
    pub version: u32,
}

/// A label as it now points.
#[derive(Debug, Serialize, ToSchema)]
pub struct LabelDetail {
    pub label: String,
    pub version: u32,
    /// The version it pointed at before (`null`: the label is new).
    pub previous: Option<u32>,
    pub updated_at: DateTime<Utc>,
}

/// Which API key a request came with: a fingerprint (the first 12 hex digits of its
/// SHA-256), which a version records, never the key. Absent on a server without keys.
#[derive(Debug, Clone)]
pub struct KeyId(pub String);

impl KeyId {
    pub fn of(key: &str) -> KeyId {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(key.as_bytes());
        let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
        KeyId(format!("key:{hex}"))
    }
}

/// What a change records besides its definition: `?message=` and `?author=` of a `PUT`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ChangeNote {
    /// Why it changed (at most 1,000 characters), kept with the version.
    pub message: Option<String>,
    /// Who changed it, as you say (at most 200 characters): a person, a CI job.
    pub author: Option<String>,
}

const MAX_MESSAGE_CHARS: usize = 1_000;
const MAX_AUTHOR_CHARS: usize = 200;

impl ChangeNote {
    /// The note as a version records it, with the key the request came with; 422 when too long.
    pub fn authored<'a>(&'a self, key: Option<&'a KeyId>) -> Result<Authored<'a>, ApiError> {
        let too_long = |text: &Option<String>, max: usize| {
            text.as_ref().is_some_and(|t| t.chars().count() > max)
        };
        if too_long(&self.message, MAX_MESSAGE_CHARS) {
            return Err(ApiError::validation(
                "/message",
                format!("at most {MAX_MESSAGE_CHARS} characters"),
            ));
        }
        if too_long(&self.author, MAX_AUTHOR_CHARS) {
            return Err(ApiError::validation(
                "/author",
                format!("at most {MAX_AUTHOR_CHARS} characters"),
            ));
        }
        Ok(Authored {
            author: self.author.as_deref(),
            key: key.map(|k| k.0.as_str()),
            message: self.message.as_deref(),
        })
    }
}

/// Whose definition the path names, or 404 naming the known ones.
async fn owner(
    state: &AppState,
    collection: Collection,
    tenant: &Tenant,
    name: &str,
) -> Result<Owner, ApiError> {
    valid_name(name)?;
    let registry = collection.registry();
    match state.definitions.owner(registry, tenant, name).await? {
        Some(owner) => Ok(owner),
        None => Err(ApiError::NotFound(
            unknown_definition(state, collection, tenant, name).await?,
        )),
    }
}

async fn unknown_definition(
    state: &AppState,
    collection: Collection,
    tenant: &Tenant,
    name: &str,
) -> Result<String, ApiError> {
    let names = state
        .definitions
        .names(collection.registry(), tenant)
        .await?;
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let list = format!("GET /v1/{}s lists them", collection.noun());
    Ok(crate::suggest::unknown_name(
        collection.noun(),
        &list,
        name,
        &names,
    ))
}

/// The version a path or query names, or 404 listing the versions and labels there are.
pub(super) async fn version_of(
    state: &AppState,
    collection: Collection,
    owner: &Owner,
    name: &str,
    text: &str,
) -> Result<VersionRecord, ApiError> {
    let version = Version::parse(text).map_err(|m| ApiError::validation("/version", m))?;
    let registry = collection.registry();
    if let Some(found) = (state.definitions)
        .version_at(registry, owner, name, &version)
        .await?
    {
        return Ok(found);
    }
    let (numbers, labels) = state.definitions.known(registry, owner, name).await?;
    let kind = registry.kind();
    Err(ApiError::NotFound(unknown_version(
        kind, name, &version, &numbers, &labels,
    )))
}

/// What a reader is shown of a stored definition: a tool's header values hidden (they may
/// hold secrets written as text).
pub(super) fn shown(collection: Collection, mut definition: Value) -> Value {
    if let Collection::Tools = collection
        && let Some(headers) = definition.get_mut("headers").and_then(Value::as_object_mut)
    {
        for value in headers.values_mut() {
            *value = Value::String("<hidden>".into());
        }
    }
    definition
}

/// RFC 6902 operations from `from` to `to`, a tool's header values hidden.
pub(super) fn changes(collection: Collection, from: &Value, to: &Value) -> Value {
    let patch = json_patch::diff(from, to);
    let mut ops = serde_json::to_value(&patch).unwrap_or(Value::Array(Vec::new()));
    if let Collection::Tools = collection {
        for op in ops.as_array_mut().into_iter().flatten() {
            let header = op["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/headers"));
            if let (true, Some(value)) = (header, op.get_mut("value")) {
                *value = shown_headers(value.take());
            }
        }
    }
    ops
}

fn shown_headers(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, _)| (k, Value::String("<hidden>".into())))
                .collect(),
        ),
        _ => Value::String("<hidden>".into()),
    }
}

fn summary(v: VersionRecord, labels: &[crate::store::LabelRecord]) -> VersionSummary {
    VersionSummary {
        labels: (labels.iter())
            .filter(|l| l.version == v.version)
            .map(|l| l.label.clone())
            .collect(),
        version: v.version,
        digest: v.digest,
        author: v.author,
        key: v.key,
        message: v.message,
        created_at: v.created_at,
    }
}

/// The labels of a definition as an object, label → version.
pub(super) async fn label_map(
    state: &AppState,
    registry: Registry,
    owner: &Owner,
    name: &str,
) -> Result<Map<String, Value>, ApiError> {
    let labels = state.definitions.labels(registry, owner, name).await?;
    Ok(labels
        .into_iter()
        .map(|l| (l.label, Value::from(l.version)))
        .collect())
}

/// The version history of a workflow, agent or declared tool, newest first.
#[utoipa::path(
    get, path = "/v1/{kind}/{name}/versions", tag = "definitions",
    params(
        ("kind" = Collection, Path, description = "workflows, agents, tools or functions"),
        ("name" = inline(RegistryName), Path, description = "The definition's name"),
    ),
    responses(
        (status = 200, body = VersionList),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_versions(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path((kind, name)): Path<(String, String)>,
) -> Result<Json<VersionList>, ApiError> {
    let collection = Collection::parse(&kind)?;
    let owner = owner(&state, collection, &tenant, &name).await?;
    let registry = collection.registry();
    let versions = state.definitions.versions(registry, &owner, &name).await?;
    let labels = state.definitions.labels(registry, &owner, &name).await?;
    Ok(Json(VersionList {
        kind: registry.kind(),
        shared: owner.shared(),
        latest_version: owner.latest,
        labels: (labels.iter())
            .map(|l| (l.label.clone(), Value::from(l.version)))
            .collect(),
        versions: versions.into_iter().map(|v| summary(v, &labels)).collect(),
        name,
    }))
}

/// One version (a number, a label, or `latest`) with its definition.
#[utoipa::path(
    get, path = "/v1/{kind}/{name}/versions/{version}", tag = "definitions",
    params(
        ("kind" = Collection, Path, description = "workflows, agents, tools or functions"),
        ("name" = inline(RegistryName), Path, description = "The definition's name"),
        ("version" = inline(VersionRef), Path, description = "A version number, a label or `latest`"),
    ),
    responses(
        (status = 200, body = VersionDetail),
        (status = 404, description = "No such definition, version or label (the message lists those there are)", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_version(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path((kind, name, version)): Path<(String, String, String)>,
) -> Result<Json<VersionDetail>, ApiError> {
    let collection = Collection::parse(&kind)?;
    let owner = owner(&state, collection, &tenant, &name).await?;
    let mut found = version_of(&state, collection, &owner, &name, &version).await?;
    let registry = collection.registry();
    let labels = state.definitions.labels(registry, &owner, &name).await?;
    let definition = shown(collection, std::mem::take(&mut found.definition));
    Ok(Json(VersionDetail {
        kind: registry.kind(),
        summary: summary(found, &labels),
        definition,
        name,
    }))
}

/// What changed from one version to another (`to` defaults to the latest).
#[utoipa::path(
    get, path = "/v1/{kind}/{name}/diff", tag = "definitions",
    params(
        ("kind" = Collection, Path, description = "workflows, agents, tools or functions"),
        ("name" = inline(RegistryName), Path, description = "The definition's name"),
        DiffQuery,
    ),
    responses(
        (status = 200, body = VersionDiff),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn diff(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path((kind, name)): Path<(String, String)>,
    Query(query): Query<DiffQuery>,
) -> Result<Json<VersionDiff>, ApiError> {
    let collection = Collection::parse(&kind)?;
    let owner = owner(&state, collection, &tenant, &name).await?;
    let from = version_of(&state, collection, &owner, &name, &query.from).await?;
    let to = query
        .to
        .as_deref()
        .unwrap_or(crate::domain::definition::LATEST);
    let to = version_of(&state, collection, &owner, &name, to).await?;
    Ok(Json(VersionDiff {
        kind: collection.registry().kind(),
        changes: changes(collection, &from.definition, &to.definition),
        from: from.version,
        to: to.version,
        name,
    }))
}

/// Refuses a change to a shared definition.
fn own(owner: &Owner, collection: Collection, name: &str) -> Result<(), ApiError> {
    if owner.shared() {
        let noun = collection.noun();
        return Err(ApiError::Conflict(format!(
            "{noun} `{name}` was loaded from the server's {noun}s directory; its versions and \
             labels change with that directory, not through the API"
        )));
    }
    Ok(())
}

/// Delete one version. Refused (409) while a run not yet ended uses it (the message names
/// them), for the latest version, and for a version a label points at.
#[utoipa::path(
    delete, path = "/v1/{kind}/{name}/versions/{version}", tag = "definitions",
    params(
        ("kind" = Collection, Path, description = "workflows, agents, tools or functions"),
        ("name" = inline(RegistryName), Path, description = "The definition's name"),
        ("version" = u32, Path, minimum = 1, maximum = 999_999_999, description = "A version number"),
    ),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "In use by a run, the latest, labelled, or a shared definition's", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn delete_version(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path((kind, name, version)): Path<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    let collection = Collection::parse(&kind)?;
    let owner = owner(&state, collection, &tenant, &name).await?;
    let number = match Version::parse(&version) {
        Ok(Version::Number(n)) => n,
        _ => {
            return Err(ApiError::validation(
                "/version",
                format!("delete a version by its number; `{version}` is not one"),
            ));
        }
    };
    own(&owner, collection, &name)?;
    let found = version_of(&state, collection, &owner, &name, &version).await?;
    let registry = collection.registry();
    let noun = collection.noun();
    in_use(&state, registry, &tenant, &name, Some(number)).await?;
    if state
        .definitions
        .delete_version(registry, &tenant, &name, found.version)
        .await?
    {
        return Ok(StatusCode::NO_CONTENT);
    }
    let labels = state.definitions.labels(registry, &owner, &name).await?;
    let pointing: Vec<String> = (labels.into_iter())
        .filter(|l| l.version == number)
        .map(|l| format!("`{}`", l.label))
        .collect();
    Err(ApiError::Conflict(if pointing.is_empty() {
        format!("version {number} is the latest of {noun} `{name}`; store a new one first")
    } else {
        format!(
            "label {} of {noun} `{name}` points at version {number}; move it first",
            pointing.join(", ")
        )
    }))
}

/// 409 naming the runs not yet ended that use `name` (at `version`, or any).
pub(super) async fn in_use(
    state: &AppState,
    registry: Registry,
    tenant: &Tenant,
    name: &str,
    version: Option<u32>,
) -> Result<(), ApiError> {
    let runs = state
        .definitions
        .runs_using(registry, tenant, name, version)
        .await?;
    if runs.is_empty() {
        return Ok(());
    }
    const NAMED: usize = 20;
    let mut ids: Vec<String> = runs.iter().take(NAMED).map(|r| r.to_string()).collect();
    if runs.len() > NAMED {
        ids.push(format!("and {} more", runs.len() - NAMED));
    }
    let noun = registry.kind().as_str();
    let which = match version {
        Some(v) => format!("version {v} of {noun} `{name}`"),
        None => format!("{noun} `{name}`"),
    };
    Err(ApiError::Conflict(format!(
        "{which} is used by {} run(s) not yet ended: {}; wait for them to end or cancel them",
        runs.len(),
        ids.join(", ")
    )))
}

/// Point a label at a version (created, or moved atomically: a run naming `name@label`
/// gets the old version or the new one, never a mix). Moving a label back is the rollback.
#[utoipa::path(
    put, path = "/v1/{kind}/{name}/labels/{label}", tag = "definitions",
    params(
        ("kind" = Collection, Path, description = "workflows, agents, tools or functions"),
        ("name" = inline(RegistryName), Path, description = "The definition's name"),
        ("label" = inline(LabelName), Path, description = "The label"),
    ),
    request_body = LabelBody,
    responses(
        (status = 200, body = LabelDetail),
        (status = 400, description = "Malformed JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such definition or version", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "A shared definition", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn put_label(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path((kind, name, label)): Path<(String, String, String)>,
    JsonBody(body): JsonBody,
) -> Result<Json<LabelDetail>, ApiError> {
    let collection = Collection::parse(&kind)?;
    check_label(&label).map_err(|m| ApiError::validation("/label", m))?;
    let body: LabelBody = deserialize_located(body)?;
    let owner = owner(&state, collection, &tenant, &name).await?;
    own(&owner, collection, &name)?;
    let registry = collection.registry();
    match (state.definitions)
        .set_label(registry, &tenant, &name, &label, body.version)
        .await?
    {
        Labelled::Moved { label, previous } => Ok(Json(LabelDetail {
            label: label.label,
            version: label.version,
            previous,
            updated_at: label.updated_at,
        })),
        Labelled::NoVersion(known) => {
            let known: Vec<String> = known.iter().map(u32::to_string).collect();
            Err(ApiError::NotFound(format!(
                "{} `{name}` has no version {}; its versions: {}",
                collection.noun(),
                body.version,
                known.join(", ")
            )))
        }
    }
}

/// Remove a label.
#[utoipa::path(
    delete, path = "/v1/{kind}/{name}/labels/{label}", tag = "definitions",
    params(
        ("kind" = Collection, Path, description = "workflows, agents, tools or functions"),
        ("name" = inline(RegistryName), Path, description = "The definition's name"),
        ("label" = inline(LabelName), Path, description = "The label"),
    ),
    responses(
        (status = 204, description = "Removed"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "A shared definition", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn delete_label(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path((kind, name, label)): Path<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    let collection = Collection::parse(&kind)?;
    check_label(&label).map_err(|m| ApiError::validation("/label", m))?;
    let owner = owner(&state, collection, &tenant, &name).await?;
    own(&owner, collection, &name)?;
    let registry = collection.registry();
    if (state.definitions)
        .delete_label(registry, &tenant, &name, &label)
        .await?
    {
        return Ok(StatusCode::NO_CONTENT);
    }
    let labels = label_map(&state, registry, &owner, &name).await?;
    let known: Vec<&str> = labels.keys().map(String::as_str).collect();
    Err(ApiError::NotFound(format!(
        "{} `{name}` has no label `{label}`; its labels: {}",
        collection.noun(),
        if known.is_empty() {
            "none".to_owned()
        } else {
            known.join(", ")
        }
    )))
}
