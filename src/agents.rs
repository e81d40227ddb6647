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

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use crate::domain::Tenant;
use crate::domain::definition::{DefinitionKind, Pin, digest};
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
    ) -> store::Result<Vec<Pin>> {
        resolve_references(&self.store, tenant, doc).await
    }

    /// [`resolve_over`] in the registries the tenant reads.
    pub async fn resolve_over(
        &self,
        tenant: &Tenant,
        doc: &mut Value,
        overlay: &Overlay,
    ) -> store::Result<Vec<Pin>> {
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
/// exactly what was validated. Names found nowhere are left for validation to report. Returns
/// the version of each definition copied in (the latest, when the plan is resolved).
pub async fn resolve_references(
    store: &Store,
    tenant: &Tenant,
    doc: &mut Value,
) -> crate::store::Result<Vec<Pin>> {
    resolve_over(store, tenant, doc, &Overlay::default()).await
}

/// Agents and workflows that stand in front of the registries: those of a bundle being
/// applied, which a definition of the same bundle may name before they are stored.
#[derive(Debug, Default)]
pub struct Overlay {
    pub agents: serde_json::Map<String, Value>,
    pub workflows: serde_json::Map<String, Value>,
}

/// [`resolve_references`], taking a name from `overlay` before the registries (no pin is
/// recorded for those: they are not stored yet).
pub async fn resolve_over(
    store: &Store,
    tenant: &Tenant,
    doc: &mut Value,
    overlay: &Overlay,
) -> crate::store::Result<Vec<Pin>> {
    let mut pins = Vec::new();
    let Some(members) = doc.as_object_mut() else {
        return Ok(pins);
    };
    let mut agents = take_map(members, "agents");
    let mut workflows = take_map(members, "workflows");
    let mut wanted = Wanted::default();
    wanted.steps(members.get("steps"));
    for definition in agents.values().chain(workflows.values()) {
        wanted.definition(definition);
    }
    // Bounded by the schema's limits on both maps: past them, validation reports the plan.
    while agents.len() <= 64 && workflows.len() <= 32 {
        if let Some(name) = wanted.agents.pop() {
            if agents.contains_key(&name) {
                continue;
            }
            if let Some(definition) = overlay.agents.get(&name) {
                wanted.definition(definition);
                agents.insert(name, definition.clone());
            } else if let Some(found) = store.get_entry(Registry::Agents, tenant, &name).await? {
                wanted.definition(&found.definition);
                pins.push(pin(DefinitionKind::Agent, &found));
                agents.insert(name, found.definition);
            }
        } else if let Some(name) = wanted.workflows.pop() {
            if workflows.contains_key(&name) {
                continue;
            }
            if let Some(definition) = overlay.workflows.get(&name) {
                wanted.definition(definition);
                wanted.steps(definition.get("steps"));
                workflows.insert(name, definition.clone());
            } else if let Some(found) = store.get_entry(Registry::Workflows, tenant, &name).await? {
                wanted.definition(&found.definition);
                wanted.steps(found.definition.get("steps"));
                pins.push(pin(DefinitionKind::Workflow, &found));
                workflows.insert(name, found.definition);
            }
        } else {
            break;
        }
    }
    if !agents.is_empty() {
        members.insert("agents".into(), Value::Object(agents));
    }
    if !workflows.is_empty() {
        members.insert("workflows".into(), Value::Object(workflows));
    }
    Ok(pins)
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

/// Agent and workflow names still to look up.
#[derive(Default)]
struct Wanted {
    agents: Vec<String>,
    workflows: Vec<String>,
}

impl Wanted {
    /// The names steps use, children included.
    fn steps(&mut self, steps: Option<&Value>) {
        for step in steps.and_then(Value::as_array).into_iter().flatten() {
            let input = step.get("input");
            let text = |k: &str| input.and_then(|i| i.get(k)).and_then(Value::as_str);
            let list = |k: &str| {
                input
                    .and_then(|i| i.get(k))
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            };
            match step.get("kind").and_then(Value::as_str) {
                Some("agent") => {
                    self.agents.extend(text("agent").map(str::to_owned));
                    self.agents.extend(list("spokes"));
                }
                Some("handoff") => self.agents.extend(text("start").map(str::to_owned)),
                Some("group_chat") => self.agents.extend(list("participants")),
                Some("workflow") => self.workflows.extend(text("workflow").map(str::to_owned)),
                _ => self.steps(input.and_then(|i| i.get("steps"))),
            }
        }
    }

    /// The names an agent definition uses (handoff targets, its workflow), or a workflow's
    /// own agents and workflows.
    fn definition(&mut self, definition: &Value) {
        for (_, item) in items(definition, "handoffs") {
            let target = item
                .as_str()
                .or_else(|| item.get("to").and_then(Value::as_str));
            self.agents.extend(target.map(str::to_owned));
        }
        if let Some(w) = definition.get("workflow").and_then(Value::as_str) {
            self.workflows.push(w.to_owned());
        }
        for key in ["agents", "workflows"] {
            for inner in definition
                .get(key)
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                self.definition(inner.1);
            }
        }
    }
}
