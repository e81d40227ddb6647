//! Agents as data (issue 11): [`Agents`], the handle the API and the engine read and write the
//! agent registry through (the SQL is the store's, `store/registry.rs`), the agents directory
//! loaded at start, and `resolve_references` (the registered agents and workflows a plan names,
//! copied into it when a run is created).
//!
//! An agent names its instructions, model alias, tools, optional output schema, the agents it
//! may hand off to (each edge with the context the target receives) and its middleware. The
//! definition's checks are `plan::agent`'s (`validate_agent`), since a plan's own agents are
//! checked the same way. Running agents is the engine's business; this module never does IO
//! but reading the directory and the registry.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use crate::domain::Tenant;
use crate::domain::definition::{DefinitionKind, Pin, Reference, Version, digest, unknown_version};
use crate::plan::Problem;
use crate::plan::agent::{AgentCatalog, items, validate_agent};
use crate::store::{self, Registry, RegistryRecord, Store};

/// The agent registry as a tenant sees it: its own agents beside the shared ones (a tenant's
/// own one shadows a shared one of the same name). Definitions are validated by the caller
/// before they are put. A cheap-clone handle.
#[derive(Clone)]
pub struct Agents {
    store: Store,
}

impl Agents {
    pub fn new(store: Store) -> Agents {
        Agents { store }
    }

    /// The tenant's agents and the shared ones, by name.
    pub async fn list(&self, tenant: &Tenant) -> store::Result<Vec<RegistryRecord>> {
        self.store.list_entries(Registry::Agents, tenant).await
    }

    /// The tenant's own agent of that name, else the shared one.
    pub async fn get(&self, tenant: &Tenant, name: &str) -> store::Result<Option<RegistryRecord>> {
        self.store.get_entry(Registry::Agents, tenant, name).await
    }

    /// Creates or replaces the tenant's own agent, as a new version when it changed.
    pub async fn put(
        &self,
        tenant: &Tenant,
        name: &str,
        definition: &Value,
        authored: store::Authored<'_>,
    ) -> store::Result<store::Put> {
        self.store
            .put_entry(Registry::Agents, tenant, name, definition, authored)
            .await
    }

    /// Deletes the tenant's own agent: whether there was one. Shared ones stay.
    pub async fn delete(&self, tenant: &Tenant, name: &str) -> store::Result<bool> {
        self.store
            .delete_entry(Registry::Agents, tenant, name)
            .await
    }

    /// What a caller is told of an agent the tenant cannot read: the nearest name and the
    /// known ones ([`crate::suggest::unknown_name`]).
    pub async fn unknown(&self, tenant: &Tenant, name: &str) -> store::Result<String> {
        let names = self.store.entry_names(Registry::Agents, tenant).await?;
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let list = "GET /v1/agents lists them";
        Ok(crate::suggest::unknown_name("agent", list, name, &names))
    }

    /// [`resolve_references`] in the registries the tenant reads.
    pub async fn resolve_references(
        &self,
        tenant: &Tenant,
        doc: &mut Value,
    ) -> store::Result<Resolution> {
        resolve_references(&self.store, tenant, doc).await
    }

    /// [`resolve_over`] in the registries the tenant reads.
    pub async fn resolve_over(
        &self,
        tenant: &Tenant,
        doc: &mut Value,
        overlay: &Overlay,
    ) -> store::Result<Resolution> {
        resolve_over(&self.store, tenant, doc, overlay).await
    }
}

/// Loads every `*.json` file of `dir` as an agent (a definition without `name` takes the file's
/// stem), validates them together — handoff targets may name each other — and makes them the
/// shared agents. One invalid file stops the start, with every problem of every file. An empty
/// `dir` means none (and removes those of an earlier start).
pub async fn load_dir(
    dir: &Path,
    store: &Store,
    known: &AgentCatalog<'_>,
) -> anyhow::Result<usize> {
    let mut agents: Vec<(String, Value)> = Vec::new();
    let mut report = String::new();
    if !dir.as_os_str().is_empty() {
        for path in crate::workflows::json_files(dir, "agents.dir").await? {
            match read_agent(&path).await {
                Ok(agent) if agents.iter().any(|(n, _)| *n == agent.0) => {
                    let _ = writeln!(
                        report,
                        "{}: agent `{}` is defined twice",
                        path.display(),
                        agent.0
                    );
                }
                Ok(agent) => agents.push(agent),
                Err(e) => {
                    let _ = writeln!(report, "{}: {e}", path.display());
                }
            }
        }
    }
    let names: HashSet<String> = agents.iter().map(|(n, _)| n.clone()).collect();
    let has_agent = |n: &str| names.contains(n);
    let together = AgentCatalog {
        catalog: known.catalog,
        has_agent: &has_agent,
    };
    for (name, definition) in &agents {
        let problems = validate_agent(name, definition, &together);
        if !problems.is_empty() {
            let _ = writeln!(report, "agent `{name}` is not valid:");
            for p in problems {
                let _ = writeln!(report, "  {} {}", p.pointer, p.message);
            }
        }
    }
    if !report.is_empty() {
        anyhow::bail!(
            "the agents directory {} has problems:\n{report}",
            dir.display()
        );
    }
    store
        .sync_shared(Registry::Agents, &agents)
        .await
        .context("storing the shared agents")?;
    Ok(agents.len())
}

async fn read_agent(path: &Path) -> anyhow::Result<(String, Value)> {
    let text = tokio::fs::read_to_string(path).await?;
    let mut definition: Value = serde_json::from_str(&text).context("not JSON")?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_owned();
    let name = match definition.get("name").and_then(Value::as_str) {
        Some(n) => n.to_owned(),
        None => stem,
    };
    crate::domain::ids::check_name(&name).map_err(anyhow::Error::msg)?;
    if let Value::Object(map) = &mut definition {
        map.insert("name".into(), Value::String(name.clone()));
    }
    Ok((name, definition))
}

/// Copies into the plan document `doc` the registered agents and workflows its steps name
/// (and those they name in turn: handoff targets, workflow agents, the steps of nested
/// workflows) that the plan does not define itself, so the run executes — and resumes —
/// exactly what was validated. Names found nowhere are left for validation to report.
///
/// A step may name a version (`billing@2`) or a label (`inner@production`): that version is
/// copied in under the bare name, and the reference is rewritten to the bare name, so the
/// resolved document names definitions as a plan without versions does (a run resumes from
/// it, whatever a label points at by then). A run uses one version of each name.
pub async fn resolve_references(
    store: &Store,
    tenant: &Tenant,
    doc: &mut Value,
) -> crate::store::Result<Resolution> {
    resolve_over(store, tenant, doc, &Overlay::default()).await
}

/// What resolving a plan's references did: the version of each registered definition copied
/// in (the latest, or the one a reference names), and the references refused, each with a
/// pointer into the document (an unknown version or label, two versions of one name, a
/// version of a name the plan defines itself). A caller refuses the document when there are
/// any.
#[derive(Debug, Default)]
pub struct Resolution {
    pub pins: Vec<Pin>,
    pub problems: Vec<Problem>,
}

impl Resolution {
    /// Every problem of a document resolved then validated: the references' own, then
    /// validation's but those at a refused reference (validation saw it as the bare name it
    /// was rewritten to, or as the text it could not parse, and says less).
    pub fn with(&self, validation: Vec<Problem>) -> Vec<Problem> {
        let refused = |p: &Problem| self.problems.iter().any(|r| r.pointer == p.pointer);
        let mut all = self.problems.clone();
        all.extend(validation.into_iter().filter(|p| !refused(p)));
        all
    }
}

/// Agents and workflows that stand in front of the registries: those of a bundle being
/// applied, which a definition of the same bundle may name before they are stored.
#[derive(Debug, Default)]
pub struct Overlay {
    pub agents: serde_json::Map<String, Value>,
    pub workflows: serde_json::Map<String, Value>,
    /// The tenant's own definitions the apply removes (`prune`): absent, not read from the
    /// store.
    pub removed: HashSet<(DefinitionKind, String)>,
    /// The declared tools the tenant will have, for a run body checked over the bundle.
    pub tools: Option<Vec<crate::domain::DeclaredTool>>,
    /// The declared functions the tenant will have, likewise.
    pub functions: Option<Vec<crate::functions::FunctionSpec>>,
}

impl Overlay {
    /// Whether the apply removes the tenant's definition `name` of `kind`.
    pub fn removes(&self, kind: DefinitionKind, name: &str) -> bool {
        self.removed.contains(&(kind, name.to_owned()))
    }
}

/// [`resolve_references`], taking a name from `overlay` before the registries (no pin is
/// recorded for those: they are not stored yet). A reference with a version names a stored
/// version, even of a name the bundle defines.
pub async fn resolve_over(
    store: &Store,
    tenant: &Tenant,
    doc: &mut Value,
    overlay: &Overlay,
) -> crate::store::Result<Resolution> {
    let Some(members) = doc.as_object_mut() else {
        return Ok(Resolution::default());
    };
    let mut agents = take_map(members, "agents");
    let mut workflows = take_map(members, "workflows");
    let mut uses = Uses::default();
    uses.steps(members.get_mut("steps"), "/steps");
    for (name, definition) in &agents {
        uses.definition(definition, &member("/agents", name));
    }
    for (name, definition) in &mut workflows {
        uses.workflow(definition, &member("/workflows", name));
    }
    let own = Own {
        agents: agents.keys().cloned().collect(),
        workflows: workflows.keys().cloned().collect(),
    };
    let mut copier = Copier {
        store,
        tenant,
        overlay,
        found: HashMap::new(),
        chosen: HashMap::new(),
        pins: Vec::new(),
    };
    // Bounded by the schema's limits on both maps: past them, validation reports the plan.
    while agents.len() <= 64 && workflows.len() <= 32 {
        let Some(used) = uses.list.pop_front() else {
            break;
        };
        if own.defines(&used) {
            if used.reference.version != Version::Latest {
                uses.problems.push(own.refused(&used));
            }
            continue;
        }
        let Some(mut definition) = copier.copy(&used, &mut uses.problems).await? else {
            continue;
        };
        let name = used.reference.name;
        uses.within = copier.within(used.kind, &name);
        match used.kind {
            DefinitionKind::Agent => {
                uses.definition(&definition, &member("/agents", &name));
                agents.insert(name, definition);
            }
            _ => {
                uses.workflow(&mut definition, &member("/workflows", &name));
                workflows.insert(name, definition);
            }
        }
        uses.within = None;
    }
    if !agents.is_empty() {
        members.insert("agents".into(), Value::Object(agents));
    }
    if !workflows.is_empty() {
        members.insert("workflows".into(), Value::Object(workflows));
    }
    // Declared functions named at a version, in the plan and in what was copied in.
    let calls = crate::functions::resolve_versions(store, tenant, doc).await?;
    let mut pins = copier.pins;
    pins.extend(
        calls
            .chosen
            .iter()
            .map(|r| pin(DefinitionKind::Function, r)),
    );
    let mut problems = uses.problems;
    problems.extend(calls.problems);
    Ok(Resolution { pins, problems })
}

/// The pin of a registry entry, at the version it was read at.
pub fn pin(kind: DefinitionKind, entry: &RegistryRecord) -> Pin {
    Pin {
        kind,
        name: entry.name.clone(),
        version: entry.version,
        digest: digest(&entry.definition),
        shared: entry.shared,
    }
}

fn take_map(
    members: &mut serde_json::Map<String, Value>,
    key: &str,
) -> serde_json::Map<String, Value> {
    match members.remove(key) {
        Some(Value::Object(map)) => map,
        Some(other) => {
            // Not an object: put it back for validation to report.
            members.insert(key.into(), other);
            serde_json::Map::new()
        }
        None => serde_json::Map::new(),
    }
}

fn member(map: &str, name: &str) -> String {
    format!("{map}/{}", crate::schema::escape_pointer(name))
}

/// One name a plan uses for an agent or a workflow, and where.
struct Use {
    kind: DefinitionKind,
    reference: Reference,
    /// As written (`billing@2`), for messages.
    written: String,
    /// Where, in the resolved document.
    pointer: String,
    /// The registered definition it is written in, when not in the plan itself: a message
    /// about it says so, since its pointer is into the definition as copied in.
    within: Option<String>,
}

impl Use {
    fn problem(&self, message: String) -> Problem {
        match &self.within {
            Some(within) => Problem::new(&self.pointer, format!("{message} (in {within})")),
            None => Problem::new(&self.pointer, message),
        }
    }
}

/// The names still to look up, in the order the document uses them, and the references
/// refused so far.
#[derive(Default)]
struct Uses {
    list: VecDeque<Use>,
    problems: Vec<Problem>,
    /// See [`Use::within`]: set while a copied definition is read.
    within: Option<String>,
}

impl Uses {
    /// The names steps use, children included; a reference with a version is rewritten to
    /// the bare name.
    fn steps(&mut self, steps: Option<&mut Value>, at: &str) {
        let Some(steps) = steps.and_then(Value::as_array_mut) else {
            return;
        };
        for (i, step) in steps.iter_mut().enumerate() {
            let kind = step.get("kind").and_then(Value::as_str).map(str::to_owned);
            let Some(input) = step.get_mut("input") else {
                continue;
            };
            let at = format!("{at}/{i}/input");
            let agent = DefinitionKind::Agent;
            match kind.as_deref() {
                Some("agent") => {
                    self.one(agent, input, "agent", &at);
                    self.each(agent, input, "spokes", &at);
                }
                Some("handoff") => self.one(agent, input, "start", &at),
                Some("group_chat") => self.each(agent, input, "participants", &at),
                Some("workflow") => self.one(DefinitionKind::Workflow, input, "workflow", &at),
                _ => self.steps(input.get_mut("steps"), &format!("{at}/steps")),
            }
        }
    }

    fn one(&mut self, kind: DefinitionKind, input: &mut Value, key: &str, at: &str) {
        if let Some(value) = input.get_mut(key) {
            self.name(kind, value, format!("{at}/{key}"));
        }
    }

    fn each(&mut self, kind: DefinitionKind, input: &mut Value, key: &str, at: &str) {
        let values = input.get_mut(key).and_then(Value::as_array_mut);
        for (j, value) in values.into_iter().flatten().enumerate() {
            self.name(kind, value, format!("{at}/{key}/{j}"));
        }
    }

    /// One reference of a step: `name`, or `name@version` rewritten to `name`. Anything else
    /// (not a string, not a valid name) is left for validation to report.
    fn name(&mut self, kind: DefinitionKind, value: &mut Value, pointer: String) {
        let Some(text) = value.as_str() else {
            return;
        };
        let written = text.to_owned();
        let reference = match Reference::parse(text) {
            Ok(r) => r,
            Err(message) if text.contains('@') => {
                let noun = match kind {
                    DefinitionKind::Agent => "an agent",
                    _ => "a workflow",
                };
                let message = format!("`{text}` is not a reference to {noun}: {message}");
                self.problems.push(Problem::new(pointer, message));
                return;
            }
            Err(_) => Reference {
                name: written.clone(),
                version: Version::Latest,
            },
        };
        if text.contains('@') {
            *value = Value::String(reference.name.clone());
        }
        self.list.push_back(Use {
            kind,
            reference,
            written,
            pointer,
            within: self.within.clone(),
        });
    }

    /// A workflow's names: its steps' and those of its own agents and workflows.
    fn workflow(&mut self, definition: &mut Value, at: &str) {
        self.definition(definition, at);
        self.steps(definition.get_mut("steps"), &format!("{at}/steps"));
    }

    /// The names an agent definition uses (handoff targets, its workflow), or a workflow's
    /// own agents and workflows, as written: only steps name versions.
    fn definition(&mut self, definition: &Value, at: &str) {
        let mut bare = |kind: DefinitionKind, name: &str, pointer: String| {
            self.list.push_back(Use {
                kind,
                reference: Reference {
                    name: name.to_owned(),
                    version: Version::Latest,
                },
                written: name.to_owned(),
                pointer,
                within: self.within.clone(),
            });
        };
        for (i, item) in items(definition, "handoffs") {
            let target = item
                .as_str()
                .or_else(|| item.get("to").and_then(Value::as_str));
            if let Some(target) = target {
                bare(DefinitionKind::Agent, target, format!("{at}/handoffs/{i}"));
            }
        }
        if let Some(w) = definition.get("workflow").and_then(Value::as_str) {
            bare(DefinitionKind::Workflow, w, format!("{at}/workflow"));
        }
        for key in ["agents", "workflows"] {
            for (name, inner) in definition
                .get(key)
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                self.definition(inner, &member(&format!("{at}/{key}"), name));
            }
        }
    }
}

/// The names a plan defines itself, before any is copied in.
struct Own {
    agents: HashSet<String>,
    workflows: HashSet<String>,
}

impl Own {
    fn defines(&self, used: &Use) -> bool {
        let names = match used.kind {
            DefinitionKind::Agent => &self.agents,
            _ => &self.workflows,
        };
        names.contains(&used.reference.name)
    }

    fn refused(&self, used: &Use) -> Problem {
        let (noun, name) = (used.kind.as_str(), &used.reference.name);
        used.problem(format!(
            "`{}` names a version of a registered {noun}, but the plan defines its own {noun} \
             `{name}` (in its `{noun}s`); name it without a version, or rename one of them",
            used.written
        ))
    }
}

/// What a reference names, as looked up once.
#[derive(Clone)]
enum Lookup {
    /// The bundle's definition, not stored yet.
    Bundle(Value),
    Stored(RegistryRecord),
    /// No definition of that name: left for validation to report.
    Unknown,
    /// The name has no such version: what the caller is told.
    NoVersion(String),
}

/// Looks references up and copies in one version of each name.
struct Copier<'a> {
    store: &'a Store,
    tenant: &'a Tenant,
    overlay: &'a Overlay,
    /// Each reference looked up, by kind, name and version asked.
    found: HashMap<(DefinitionKind, String, String), Lookup>,
    /// The definition copied in for each name, and the first reference that named it.
    chosen: HashMap<(DefinitionKind, String), (Option<u32>, String)>,
    pins: Vec<Pin>,
}

impl Copier<'_> {
    /// The definition to copy in for `used`, if it is the first use of its name; a problem
    /// when the name has no such version, or when an earlier use took another version.
    async fn copy(
        &mut self,
        used: &Use,
        problems: &mut Vec<Problem>,
    ) -> crate::store::Result<Option<Value>> {
        let lookup = self.look_up(used.kind, &used.reference).await?;
        let (definition, version) = match &lookup {
            Lookup::Unknown => return Ok(None),
            Lookup::NoVersion(message) => {
                problems.push(used.problem(message.clone()));
                return Ok(None);
            }
            Lookup::Bundle(definition) => (definition.clone(), None),
            Lookup::Stored(found) => (found.definition.clone(), Some(found.version)),
        };
        let key = (used.kind, used.reference.name.clone());
        if let Some((first, written)) = self.chosen.get(&key) {
            if *first != version {
                let (noun, name) = (used.kind.as_str(), &used.reference.name);
                problems.push(used.problem(format!(
                    "{noun} `{name}` is named as {} and as {}; a run uses one version of each \
                     {noun}: name the same one everywhere",
                    described(written, *first),
                    described(&used.written, version),
                )));
            }
            return Ok(None);
        }
        self.chosen.insert(key, (version, used.written.clone()));
        if let Lookup::Stored(found) = &lookup {
            self.pins.push(pin(used.kind, found));
        }
        Ok(Some(definition))
    }

    async fn look_up(
        &mut self,
        kind: DefinitionKind,
        reference: &Reference,
    ) -> crate::store::Result<Lookup> {
        let key = (kind, reference.name.clone(), reference.version.to_string());
        if let Some(hit) = self.found.get(&key) {
            return Ok(hit.clone());
        }
        let (registry, bundle) = match kind {
            DefinitionKind::Agent => (Registry::Agents, &self.overlay.agents),
            _ => (Registry::Workflows, &self.overlay.workflows),
        };
        let (name, version) = (&reference.name, &reference.version);
        let lookup = match bundle.get(name) {
            Some(definition) if *version == Version::Latest => Lookup::Bundle(definition.clone()),
            // Pruned by the apply being checked: gone with its versions.
            None if self.overlay.removes(kind, name) => Lookup::Unknown,
            _ => match (self.store)
                .get_entry_at(registry, self.tenant, name, version)
                .await?
            {
                Some(found) => Lookup::Stored(found),
                None => {
                    self.missing(registry, reference, bundle.contains_key(name))
                        .await?
                }
            },
        };
        self.found.insert(key, lookup.clone());
        Ok(lookup)
    }

    /// Why a reference found nothing: no such name (validation tells), or no such version.
    async fn missing(
        &self,
        registry: Registry,
        reference: &Reference,
        in_bundle: bool,
    ) -> crate::store::Result<Lookup> {
        let (name, version) = (&reference.name, &reference.version);
        let kind = registry.kind();
        let definitions = store::Definitions::new(self.store.clone());
        if let Some(owner) = definitions.owner(registry, self.tenant, name).await? {
            let (numbers, labels) = definitions.known(registry, &owner, name).await?;
            return Ok(Lookup::NoVersion(unknown_version(
                kind, name, version, &numbers, &labels,
            )));
        }
        Ok(match in_bundle {
            true => Lookup::NoVersion(format!(
                "{} `{name}` is not stored yet (this bundle creates it), so it has no version \
                 {version}; name it without a version",
                kind.as_str()
            )),
            false => Lookup::Unknown,
        })
    }

    /// How a message names a definition copied in.
    fn within(&self, kind: DefinitionKind, name: &str) -> Option<String> {
        let key = (kind, name.to_owned());
        let version = self.chosen.get(&key).and_then(|(v, _)| *v);
        Some(match version {
            Some(v) => format!("{} `{name}` version {v}", kind.as_str()),
            None => format!("the bundle's {} `{name}`", kind.as_str()),
        })
    }
}

/// A reference and the version it names, for a message.
fn described(written: &str, version: Option<u32>) -> String {
    match version {
        Some(v) => format!("`{written}` (version {v})"),
        None => format!("`{written}` (the bundle's definition)"),
    }
}
