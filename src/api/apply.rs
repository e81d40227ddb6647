//! `POST /v1/apply` and `GET /v1/export` (issue 45): definitions as files. An apply takes a
//! bundle of workflow, agent, tool and function files (JSON or YAML, the folder saying the kind), checks
//! every one as its `PUT` would — with the bundle's own agents, workflows, tools and functions in front of
//! the registries, so files may name each other — and reports every problem at once, each
//! with its file and a pointer into it. Only a bundle without problems is applied, in one
//! transaction: a new version of each definition that changed, nothing for one that did not,
//! and (with `prune`) the tenant's definitions no file names removed. `dry_run` shows that
//! plan of changes and stores nothing. An export writes the tenant's own definitions back as
//! such files, so an export applied again changes nothing. A bundle's `schedules/` files are
//! the tenant's named schedules (`apply_schedules`), written in the same transaction.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::AppState;
use super::apply_schedules::{self, ScheduleFile};
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, deserialize_located};
use super::versions::{ChangeNote, Collection, KeyId, changes, in_use};
use crate::agents::Overlay;
use crate::domain::DeclaredTool;
use crate::domain::Tenant;
use crate::domain::definition::{DefinitionKind, digest};
use crate::domain::ids::check_name;
use crate::functions::{FunctionSpec, MAX_DECLARED};
use crate::plan::agent::{AgentCatalog, validate_agent};
use crate::plan::validate_workflow;
use crate::store::{Registry, RegistryRecord};
use crate::tools::http::declared::MAX_PER_TENANT;

pub fn routes() -> axum::Router<AppState> {
    use axum::routing::{get, post};
    axum::Router::new()
        .route("/apply", post(apply))
        .route("/export", get(export))
}

/// The most files one bundle holds.
pub const MAX_FILES: usize = 1_000;

/// What a header value hidden by an export reads; applied, it keeps the stored value.
const HIDDEN: &str = "<hidden>";

/// One file of a bundle.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BundleFile {
    /// `workflows/NAME.json`, `agents/NAME.yaml`, `tools/NAME.yml`, `functions/NAME.json`,
    /// `schedules/NAME.json`: the folder says the kind.
    pub path: String,
    /// The file's text: one definition, as JSON or YAML.
    pub content: String,
}

/// `POST /v1/apply` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyRequest {
    #[schema(max_items = 1000)]
    pub files: Vec<BundleFile>,
    /// Show the plan of changes; store nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Also remove the tenant's own definitions of the four kinds, and its named schedules,
    /// that no file names (schedules without a name are never removed).
    #[serde(default)]
    pub prune: bool,
    /// Kept with every version the apply stores.
    pub message: Option<String>,
    /// Kept with every version the apply stores.
    pub author: Option<String>,
}

/// What an apply does to one definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Created,
    Changed,
    Unchanged,
    Deleted,
}

/// What a line of the plan changes: a definition of a kind, or a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Workflow,
    Agent,
    Tool,
    Function,
    Schedule,
}

impl From<DefinitionKind> for ChangeKind {
    fn from(kind: DefinitionKind) -> ChangeKind {
        match kind {
            DefinitionKind::Workflow => ChangeKind::Workflow,
            DefinitionKind::Agent => ChangeKind::Agent,
            DefinitionKind::Tool => ChangeKind::Tool,
            DefinitionKind::Function => ChangeKind::Function,
        }
    }
}

/// One line of the plan of changes.
#[derive(Debug, Serialize, ToSchema)]
pub struct Change {
    pub kind: ChangeKind,
    pub name: String,
    /// The file that defines it (`null` for a deletion).
    pub path: Option<String>,
    pub action: Action,
    /// The version it is at after the apply (`null` on a dry run of a change, for a
    /// deletion, and for a schedule: schedules keep no versions).
    pub version: Option<u32>,
    /// The version it was at before (`null` when created).
    pub previous_version: Option<u32>,
    /// RFC 6902 operations from the stored definition (or schedule) to the file's (changed
    /// only).
    #[schema(value_type = Option<Vec<Object>>)]
    pub changes: Option<Value>,
}

/// `POST /v1/apply` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApplyResult {
    /// False on a dry run.
    pub applied: bool,
    /// By kind (workflow, agent, tool, function, schedule), then name.
    pub changes: Vec<Change>,
}

/// `GET /v1/export` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct Bundle {
    pub files: Vec<BundleFile>,
}

/// A definition read from a file of the bundle.
struct Parsed {
    index: usize,
    path: String,
    collection: Collection,
    name: String,
    definition: Value,
}

/// A problem of file `index`: its pointer inside `/files/{index}`, its message after the path.
pub(super) fn problem(
    index: usize,
    path: &str,
    pointer: &str,
    message: impl std::fmt::Display,
) -> FieldError {
    FieldError::new(
        format!("/files/{index}{pointer}"),
        format!("{path}: {message}"),
    )
}

/// The kind and the stem a bundle path names (no kind: a schedule), or why it names none.
fn kind_of(path: &str) -> Result<(Option<Collection>, &str), String> {
    let unsafe_path = path.starts_with('/')
        || path.contains('\\')
        || path
            .split('/')
            .any(|s| s == ".." || s == "." || s.is_empty());
    if unsafe_path {
        return Err("a relative path of the form FOLDER/FILE, without `.` or `..`".into());
    }
    let Some((folder, file)) = path.split_once('/').filter(|(_, f)| !f.contains('/')) else {
        return Err(
            "files sit directly in workflows/, agents/, tools/, functions/ or schedules/".into(),
        );
    };
    let collection = match folder {
        "workflows" => Some(Collection::Workflows),
        "agents" => Some(Collection::Agents),
        "tools" => Some(Collection::Tools),
        "functions" => Some(Collection::Functions),
        "schedules" => None,
        other => {
            return Err(format!(
                "`{other}/` is not a folder apply reads; they are workflows/, agents/, tools/, \
                 functions/ and schedules/"
            ));
        }
    };
    let stem = [".json", ".yaml", ".yml"]
        .iter()
        .find_map(|ext| file.strip_suffix(ext))
        .ok_or("files end in .json, .yaml or .yml")?;
    Ok((collection, stem))
}

/// Reads every file: its kind, name and definition, or its problems; a schedule file's
/// object goes to `schedules`.
fn parse(
    files: &[BundleFile],
    problems: &mut Vec<FieldError>,
    schedules: &mut Vec<ScheduleFile>,
) -> Vec<Parsed> {
    let mut parsed: Vec<Parsed> = Vec::new();
    for (index, file) in files.iter().enumerate() {
        let path = &file.path;
        let (collection, stem) = match kind_of(path) {
            Ok(found) => found,
            Err(message) => {
                problems.push(problem(index, path, "/path", message));
                continue;
            }
        };
        let yaml = !path.ends_with(".json");
        let read: Result<Value, String> = match yaml {
            false => serde_json::from_str(&file.content).map_err(|e| format!("not JSON: {e}")),
            true => yaml_serde::from_str(&file.content).map_err(|e| format!("not YAML: {e}")),
        };
        let mut definition = match read {
            Ok(Value::Object(map)) => Value::Object(map),
            Ok(_) => {
                problems.push(problem(
                    index,
                    path,
                    "/content",
                    "holds one definition, an object",
                ));
                continue;
            }
            Err(message) => {
                problems.push(problem(index, path, "/content", message));
                continue;
            }
        };
        let Some(collection) = collection else {
            schedules.push(ScheduleFile {
                index,
                path: path.clone(),
                stem: stem.to_owned(),
                content: definition,
            });
            continue;
        };
        let name = match definition.get("name") {
            Some(Value::String(n)) => n.clone(),
            Some(_) => {
                problems.push(problem(index, path, "/content/name", "must be a string"));
                continue;
            }
            None => stem.to_owned(),
        };
        if let Err(message) = check_name(&name) {
            problems.push(problem(index, path, "/content/name", message));
            continue;
        }
        definition["name"] = Value::String(name.clone());
        if let Some(first) = parsed
            .iter()
            .find(|p| p.collection.registry() == collection.registry() && p.name == name)
        {
            let noun = collection.registry().kind().as_str();
            problems.push(problem(
                index,
                path,
                "/content/name",
                format!(
                    "{noun} `{name}` is defined twice: here and in {}",
                    first.path
                ),
            ));
            continue;
        }
        parsed.push(Parsed {
            index,
            path: path.clone(),
            collection,
            name,
            definition,
        });
    }
    parsed
}

/// The tenant's own stored definitions of a registry, by name.
async fn own(
    state: &AppState,
    registry: Registry,
    tenant: &Tenant,
) -> Result<BTreeMap<String, RegistryRecord>, ApiError> {
    let list = state.definitions.own_entries(registry, tenant).await?;
    Ok(list.into_iter().map(|e| (e.name.clone(), e)).collect())
}

/// Checks the bundle's tools and puts them in the form they are stored in; a header value
/// an export hid keeps the stored one.
fn check_tools(
    state: &AppState,
    tools: &mut [&mut Parsed],
    stored: &BTreeMap<String, RegistryRecord>,
    problems: &mut Vec<FieldError>,
) -> Vec<DeclaredTool> {
    let declared = state.engine.declared_tools();
    let mut specs = Vec::new();
    for file in tools.iter_mut() {
        let at = |pointer: &str, message: String| {
            problem(
                file.index,
                &file.path,
                &format!("/content{pointer}"),
                message,
            )
        };
        let worker = file.definition.get("queue").is_some();
        if !worker && !declared.enabled() {
            problems.push(at(
                "",
                "declaring HTTP tools through the API is off on this server (tools.http_api)"
                    .into(),
            ));
            continue;
        }
        if state.engine.tools().is_fixed(&file.name) {
            problems.push(at(
                "/name",
                format!(
                    "`{}` is a tool orca was started with; it cannot be changed through the API",
                    file.name
                ),
            ));
            continue;
        }
        let stored_headers = stored
            .get(&file.name)
            .and_then(|r| r.definition.get("headers").cloned());
        if let Some(headers) = file
            .definition
            .get_mut("headers")
            .and_then(Value::as_object_mut)
        {
            for (header, value) in headers.iter_mut() {
                if value.as_str() != Some(HIDDEN) {
                    continue;
                }
                match stored_headers.as_ref().and_then(|h| h.get(header)) {
                    Some(kept) => *value = kept.clone(),
                    None => problems.push(at(&format!("/headers/{header}"), format!("`{HIDDEN}` keeps a stored value, and tool `{}` has none for `{header}`: give the value, or `${{VARIABLE}}`", file.name))),
                }
            }
        }
        let spec = match super::tools::parse_declared(file.definition.clone()) {
            Ok(spec) => spec,
            Err(ApiError::Validation { errors, .. }) => {
                problems.extend(errors.into_iter().map(|e| at(&e.pointer, e.message)));
                continue;
            }
            Err(other) => {
                problems.push(at("", other.to_string()));
                continue;
            }
        };
        let wrong = declared.problems(&spec);
        problems.extend(wrong.into_iter().map(|(p, m)| at(&p, m)));
        if let Err(e) = declared.build(&spec) {
            problems.push(at("/input_schema", e.to_string()));
        }
        match serde_json::to_value(&spec) {
            Ok(stored_form) => file.definition = stored_form,
            Err(e) => problems.push(at("", e.to_string())),
        }
        specs.push(spec);
    }
    specs
}

/// Checks the bundle's functions as `PUT /v1/functions/{name}` would and puts them in the
/// form they are stored in.
fn check_functions(
    state: &AppState,
    functions: &mut [&mut Parsed],
    problems: &mut Vec<FieldError>,
) -> Vec<FunctionSpec> {
    let mut specs = Vec::new();
    for file in functions.iter_mut() {
        let at = |pointer: &str, message: String| {
            let pointer = format!("/content{pointer}");
            problem(file.index, &file.path, &pointer, message)
        };
        if state.engine.functions().contains(&file.name) {
            problems.push(at("/name", super::functions::configured(&file.name)));
            continue;
        }
        let spec: FunctionSpec = match deserialize_located(file.definition.clone()) {
            Ok(spec) => spec,
            Err(ApiError::Validation { errors, .. }) => {
                problems.extend(errors.into_iter().map(|e| at(&e.pointer, e.message)));
                continue;
            }
            Err(other) => {
                problems.push(at("", other.to_string()));
                continue;
            }
        };
        let found = super::functions::problems(state, &spec);
        problems.extend(found.into_iter().map(|(p, m)| at(&p, m)));
        match serde_json::to_value(&spec) {
            Ok(stored_form) => file.definition = stored_form,
            Err(e) => problems.push(at("", e.to_string())),
        }
        specs.push(spec);
    }
    specs
}

/// Apply a bundle of definition files.
///
/// Every file is checked as its `PUT` would check it, with the bundle's own definitions in
/// front of the registries (a workflow may name an agent or a tool of the same bundle). Any
/// problem is a 422 listing every one, each with a pointer `/files/{i}/…` and a message that
/// starts with the file's path; nothing is applied then. Otherwise every definition that
/// changed gets a new version, in one transaction with the removals `prune` asks for.
#[utoipa::path(
    post, path = "/v1/apply", tag = "definitions",
    request_body = ApplyRequest,
    responses(
        (status = 200, body = ApplyResult),
        (status = 400, description = "Malformed JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "A definition `prune` would remove is used by a run not yet ended", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid files: every problem", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn apply(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    key: Option<Extension<KeyId>>,
    JsonBody(body): JsonBody,
) -> Result<Json<ApplyResult>, ApiError> {
    let request: ApplyRequest = deserialize_located(body)?;
    if request.files.len() > MAX_FILES {
        return Err(ApiError::validation(
            "/files",
            format!("at most {MAX_FILES} files"),
        ));
    }
    let note = ChangeNote {
        message: request.message.clone(),
        author: request.author.clone(),
    };
    let authored = note.authored(key.as_ref().map(|k| &k.0))?;
    let mut problems = Vec::new();
    let mut schedule_files = Vec::new();
    let mut parsed = parse(&request.files, &mut problems, &mut schedule_files);
    let stored = Stored {
        workflows: own(&state, Registry::Workflows, &tenant).await?,
        agents: own(&state, Registry::Agents, &tenant).await?,
        tools: own(&state, Registry::HttpTools, &tenant).await?,
        functions: own(&state, Registry::Functions, &tenant).await?,
    };
    let overlay = check(
        &state,
        &tenant,
        request.prune,
        &mut parsed,
        &stored,
        &mut problems,
    )
    .await?;
    let scheduled = apply_schedules::check(
        &state,
        &tenant,
        &schedule_files,
        Arc::new(overlay),
        request.prune,
        &mut problems,
    )
    .await?;
    if !problems.is_empty() {
        return Err(ApiError::validation_many(problems));
    }
    let (mut plan, writes) = plan_of(&parsed, &stored);
    let mut removed = Vec::new();
    if request.prune {
        for (registry, name, record) in stored.unnamed(&parsed) {
            in_use(&state, registry, &tenant, name, None).await?;
            removed.push((registry, name.to_owned()));
            plan.push(Change {
                kind: registry.kind().into(),
                name: name.to_owned(),
                path: None,
                action: Action::Deleted,
                version: None,
                previous_version: Some(record.version),
                changes: None,
            });
        }
    }
    plan.extend(scheduled.plan);
    let applied = !request.dry_run;
    let schedules = scheduled.changes;
    if applied && !(writes.is_empty() && removed.is_empty() && schedules.is_empty()) {
        let puts = (state.definitions)
            .apply(&tenant, &writes, &removed, &schedules, authored)
            .await?;
        if !schedules.is_empty() {
            state.schedules.touched();
        }
        for ((registry, name, _), put) in writes.iter().zip(puts) {
            let line = plan
                .iter_mut()
                .find(|c| c.kind == registry.kind().into() && c.name == *name);
            if let Some(line) = line {
                line.version = Some(put.version);
            }
        }
    }
    plan.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    Ok(Json(ApplyResult {
        applied,
        changes: plan,
    }))
}

/// The tenant's own stored definitions, by kind and name.
struct Stored {
    workflows: BTreeMap<String, RegistryRecord>,
    agents: BTreeMap<String, RegistryRecord>,
    tools: BTreeMap<String, RegistryRecord>,
    functions: BTreeMap<String, RegistryRecord>,
}

impl Stored {
    fn of(&self, collection: Collection) -> &BTreeMap<String, RegistryRecord> {
        match collection {
            Collection::Workflows => &self.workflows,
            Collection::Agents => &self.agents,
            Collection::Tools => &self.tools,
            Collection::Functions => &self.functions,
        }
    }

    /// The stored definitions no file of the bundle names: what `prune` removes.
    fn unnamed<'a>(
        &'a self,
        parsed: &'a [Parsed],
    ) -> impl Iterator<Item = (Registry, &'a str, &'a RegistryRecord)> + 'a {
        [
            Collection::Workflows,
            Collection::Agents,
            Collection::Tools,
            Collection::Functions,
        ]
        .into_iter()
        .flat_map(move |collection| {
            let registry = collection.registry();
            (self.of(collection).iter())
                .filter(move |(name, _)| {
                    !(parsed.iter())
                        .any(|p| p.collection.registry() == registry && p.name == **name)
                })
                .map(move |(name, record)| (registry, name.as_str(), record))
        })
    }
}

/// Checks every definition of the bundle as its `PUT` would, with the bundle's own agents,
/// workflows and tools in front of the registries (and without those `prune` removes): that
/// overlay, for the bundle's schedules.
async fn check(
    state: &AppState,
    tenant: &Tenant,
    prune: bool,
    parsed: &mut [Parsed],
    stored: &Stored,
    problems: &mut Vec<FieldError>,
) -> Result<Overlay, ApiError> {
    // Tools first: the workflows and agents are checked with them.
    let mut tools: Vec<&mut Parsed> = (parsed.iter_mut())
        .filter(|p| matches!(p.collection, Collection::Tools))
        .collect();
    let bundle_tools = check_tools(state, &mut tools, &stored.tools, problems);
    let view = state.engine.tenant_view(tenant).await?;
    // The tools the tenant will have: its stored ones the bundle neither replaces nor prunes,
    // and the bundle's.
    let mut declared: Vec<DeclaredTool> = (view.declared.into_iter())
        .filter(|d| !prune && !bundle_tools.iter().any(|b| b.name() == d.name()))
        .collect();
    declared.extend(bundle_tools);
    if declared.len() > MAX_PER_TENANT {
        problems.push(FieldError::new(
            "/files",
            format!(
                "the tenant would have {} declared tools, more than the {MAX_PER_TENANT} it may",
                declared.len()
            ),
        ));
    }
    let mut functions: Vec<&mut Parsed> = (parsed.iter_mut())
        .filter(|p| matches!(p.collection, Collection::Functions))
        .collect();
    let bundle_functions = check_functions(state, &mut functions, problems);
    let mut own_functions: Vec<FunctionSpec> = (view.functions.into_iter())
        .filter(|d| !prune && !bundle_functions.iter().any(|b| b.name == d.name))
        .collect();
    own_functions.extend(bundle_functions);
    if own_functions.len() > MAX_DECLARED {
        problems.push(FieldError::new(
            "/files",
            format!(
                "the tenant would have {} declared functions, more than the {MAX_DECLARED} it may",
                own_functions.len()
            ),
        ));
    }
    let view = (state.engine).view_with(tenant, declared.clone(), own_functions.clone());
    let removed = (stored.unnamed(parsed).filter(|_| prune))
        .map(|(registry, name, _)| (registry.kind(), name.to_owned()))
        .collect();
    let overlay = Overlay {
        agents: of_kind(parsed, Collection::Agents),
        workflows: of_kind(parsed, Collection::Workflows),
        removed,
        tools: Some(declared),
        functions: Some(own_functions),
    };
    let mut agent_names: HashSet<String> = (state.agents.list(tenant).await?)
        .into_iter()
        .filter(|a| !(prune && stored.agents.contains_key(&a.name)))
        .map(|a| a.name)
        .collect();
    agent_names.extend(overlay.agents.keys().cloned());
    for file in parsed.iter() {
        let at = |p: &str, m: &str| problem(file.index, &file.path, &format!("/content{p}"), m);
        match file.collection {
            Collection::Agents => {
                let has_agent = |agent: &str| agent_names.contains(agent);
                let known = AgentCatalog {
                    catalog: view.catalog(),
                    has_agent: &has_agent,
                };
                let found = validate_agent(&file.name, &file.definition, &known);
                problems.extend(found.iter().map(|p| at(&p.pointer, &p.message)));
            }
            Collection::Workflows => {
                let mut resolved = file.definition.clone();
                let resolution = (state.agents)
                    .resolve_over(tenant, &mut resolved, &overlay)
                    .await?;
                let validated = validate_workflow(&resolved, view.catalog()).err();
                let found = resolution.with(validated.unwrap_or_default());
                problems.extend(found.iter().map(|p| at(&p.pointer, &p.message)));
            }
            Collection::Tools | Collection::Functions => {}
        }
    }
    Ok(overlay)
}

/// Each file's line of the plan (created, changed with its diff, unchanged), and the
/// definitions to store.
fn plan_of(parsed: &[Parsed], stored: &Stored) -> (Vec<Change>, Vec<(Registry, String, Value)>) {
    let mut plan: Vec<Change> = Vec::new();
    let mut writes = Vec::new();
    for file in parsed {
        let registry = file.collection.registry();
        let current = stored.of(file.collection).get(&file.name);
        let same = current.is_some_and(|c| digest(&c.definition) == digest(&file.definition));
        let action = match (current, same) {
            (None, _) => Action::Created,
            (Some(_), true) => Action::Unchanged,
            (Some(_), false) => Action::Changed,
        };
        let diff = (action == Action::Changed)
            .then(|| current.map(|c| changes(file.collection, &c.definition, &file.definition)))
            .flatten();
        if action != Action::Unchanged {
            writes.push((registry, file.name.clone(), file.definition.clone()));
        }
        plan.push(Change {
            kind: registry.kind().into(),
            name: file.name.clone(),
            path: Some(file.path.clone()),
            action,
            version: (action == Action::Unchanged)
                .then(|| current.map(|c| c.version))
                .flatten(),
            previous_version: current.map(|c| c.version),
            changes: diff,
        });
    }
    (plan, writes)
}

/// The bundle's definitions of one kind, by name.
fn of_kind(parsed: &[Parsed], collection: Collection) -> Map<String, Value> {
    (parsed.iter())
        .filter(|p| p.collection.registry() == collection.registry())
        .map(|p| (p.name.clone(), p.definition.clone()))
        .collect()
}

/// Export the tenant's own workflows, agents, declared tools and declared functions, and its
/// named schedules, as files `POST /v1/apply` takes unchanged (applied again, they change
/// nothing). A tool's header values that are text, not `${VARIABLE}` references, are written
/// as `<hidden>`, which an apply reads as "keep the stored value". A schedule's file holds its
/// declarative members only (timing, run, enabled, missed), not its ticks or fires.
#[utoipa::path(
    get, path = "/v1/export", tag = "definitions",
    responses((status = 200, body = Bundle))
)]
pub async fn export(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
) -> Result<Json<Bundle>, ApiError> {
    let mut files = Vec::new();
    for (collection, folder) in [
        (Collection::Workflows, "workflows"),
        (Collection::Agents, "agents"),
        (Collection::Tools, "tools"),
        (Collection::Functions, "functions"),
    ] {
        for record in state
            .definitions
            .own_entries(collection.registry(), &tenant)
            .await?
        {
            let mut definition = record.definition;
            let headers = (definition.get_mut("headers").and_then(Value::as_object_mut))
                .filter(|_| matches!(collection, Collection::Tools));
            if let Some(headers) = headers {
                for value in headers.values_mut() {
                    if !value.as_str().is_some_and(|v| v.contains("${")) {
                        *value = Value::String(HIDDEN.into());
                    }
                }
            }
            let mut content =
                serde_json::to_string_pretty(&definition).map_err(ApiError::internal)?;
            content.push('\n');
            files.push(BundleFile {
                path: format!("{folder}/{}.json", record.name),
                content,
            });
        }
    }
    files.extend(apply_schedules::export(&state, &tenant).await?);
    Ok(Json(Bundle { files }))
}
