//! Agents as data (issue 11): the definition format (`schemas/Agent.schema.json`), its
//! validation — every problem at once, each with a JSON Pointer, design 004's "build-time
//! safety" — and the agents directory loaded at start.
//!
//! An agent names its instructions, model alias, tools, optional output schema, the agents it
//! may hand off to (each edge with the context the target receives) and its middleware.
//! Validation checks the shape, then meaning: the model alias exists, every tool exists, every
//! handoff target is a known agent (not itself, not twice), every middleware is a built-in one,
//! and the output schema compiles. Running agents is the engine's (later) business; this
//! module never does IO but reading the directory.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::LazyLock;

use anyhow::Context;
use serde_json::Value;

use crate::plan::{Catalog, JsonSchema, Problem};
use crate::store::{Registry, Store};

/// `schemas/Agent.schema.json`.
pub const AGENT_SCHEMA: &str = include_str!("../schemas/Agent.schema.json");

/// The middleware orca ships, by name.
pub const MIDDLEWARE: [&str; 6] = [
    "retry",
    "audit_log",
    "guardrail",
    "rate_limit",
    "response_cache",
    "tool_approval",
];

static SCHEMA: LazyLock<crate::schema::ShippedSchema> =
    LazyLock::new(|| crate::schema::ShippedSchema::compile(AGENT_SCHEMA));

/// What an agent definition may refer to besides tools: model aliases and other agents.
pub struct AgentCatalog<'a> {
    pub catalog: Catalog<'a>,
    pub has_model: &'a dyn Fn(&str) -> bool,
    pub has_agent: &'a dyn Fn(&str) -> bool,
}

/// Checks an agent definition named `name`; every problem, each with a pointer into it.
pub fn validate_agent(name: &str, definition: &Value, known: &AgentCatalog<'_>) -> Vec<Problem> {
    let shape: Vec<Problem> = crate::schema::member_violations(&SCHEMA, definition, |_| None)
        .into_iter()
        .map(|v| Problem::new(v.pointer, v.message))
        .collect();
    if !shape.is_empty() {
        return shape;
    }
    let mut problems = Vec::new();
    if let Some(model) = definition.get("model").and_then(Value::as_str)
        && !(known.has_model)(model)
    {
        problems.push(Problem::new(
            "/model",
            format!("no model alias `{model}` is configured (llm.models)"),
        ));
    }
    for (i, tool) in strings(definition, "tools") {
        if !known.catalog.tools.contains(tool) {
            problems.push(Problem::new(
                format!("/tools/{i}"),
                format!("unknown tool `{tool}`"),
            ));
        }
    }
    handoff_problems(name, definition, known, &mut problems);
    // Names and configurations, as a plan's middleware are checked.
    crate::plan::team::middleware_list(definition.get("middleware"), "/middleware", &mut problems);
    for (i, item) in items(definition, "middleware") {
        if item.get("name").and_then(Value::as_str) != Some("tool_approval") {
            continue;
        }
        for (j, tool) in strings(item.get("config").unwrap_or(&Value::Null), "tools") {
            if !known.catalog.tools.contains(tool) {
                problems.push(Problem::new(
                    format!("/middleware/{i}/config/tools/{j}"),
                    format!("unknown tool `{tool}`"),
                ));
            }
        }
    }
    if let Some(schema) = definition.get("output_schema")
        && let Err(e) = JsonSchema::compile(schema)
    {
        problems.push(Problem::new(
            "/output_schema",
            format!("not a valid JSON Schema: {e}"),
        ));
    }
    problems
}

fn handoff_problems(
    name: &str,
    definition: &Value,
    known: &AgentCatalog<'_>,
    problems: &mut Vec<Problem>,
) {
    let mut seen = HashSet::new();
    for (i, item) in items(definition, "handoffs") {
        let (target, at) = match item {
            Value::String(s) => (s.as_str(), format!("/handoffs/{i}")),
            other => (
                other.get("to").and_then(Value::as_str).unwrap_or_default(),
                format!("/handoffs/{i}/to"),
            ),
        };
        let problem = if target == name {
            Some(format!("an agent cannot hand off to itself (`{target}`)"))
        } else if !seen.insert(target) {
            Some(format!("`{target}` is listed twice"))
        } else if !(known.has_agent)(target) {
            Some(format!("no agent named `{target}`"))
        } else {
            None
        };
        if let Some(message) = problem {
            problems.push(Problem::new(at, message));
        }
        if item.get("context").and_then(Value::as_str) == Some("last_n")
            && item.get("last_n").is_none()
        {
            problems.push(Problem::new(
                format!("/handoffs/{i}/last_n"),
                "`last_n` is required with context `last_n`",
            ));
        }
    }
}

fn items<'a>(definition: &'a Value, key: &str) -> impl Iterator<Item = (usize, &'a Value)> {
    definition
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

fn strings<'a>(definition: &'a Value, key: &str) -> impl Iterator<Item = (usize, &'a str)> {
    items(definition, key).filter_map(|(i, v)| Some((i, v.as_str()?)))
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
        has_model: known.has_model,
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
    crate::workflows::check_name(&name).map_err(anyhow::Error::msg)?;
    if let Value::Object(map) = &mut definition {
        map.insert("name".into(), Value::String(name.clone()));
    }
    Ok((name, definition))
}

/// Copies into the plan document `doc` the registered agents and workflows its steps name
/// (and those they name in turn: handoff targets, workflow agents, the steps of nested
/// workflows) that the plan does not define itself, so the run executes — and resumes —
/// exactly what was validated. Names found nowhere are left for validation to report.
pub async fn resolve_references(
    store: &Store,
    tenant: &crate::domain::Tenant,
    doc: &mut Value,
) -> crate::store::Result<()> {
    let Some(members) = doc.as_object_mut() else {
        return Ok(());
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
            if let Some(found) = store.get_entry(Registry::Agents, tenant, &name).await? {
                wanted.definition(&found.definition);
                agents.insert(name, found.definition);
            }
        } else if let Some(name) = wanted.workflows.pop() {
            if workflows.contains_key(&name) {
                continue;
            }
            if let Some(found) = store.get_entry(Registry::Workflows, tenant, &name).await? {
                wanted.definition(&found.definition);
                wanted.steps(found.definition.get("steps"));
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
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolRegistry;
    use serde_json::json;

    fn check(definition: Value) -> Vec<(String, String)> {
        let tools = ToolRegistry::with_builtins(&crate::config::ToolsConfig::default());
        let known = AgentCatalog {
            catalog: Catalog {
                tools: &tools,
                functions: None,
                models: None,
            },
            has_model: &|m| m == "default",
            has_agent: &|a| a == "writer" || a == "critic",
        };
        validate_agent("researcher", &definition, &known)
            .into_iter()
            .map(|p| (p.pointer, p.message))
            .collect()
    }

    #[test]
    fn a_good_agent_passes_and_every_problem_is_pointed_at() {
        let good = json!({ "instructions": "Research.", "model": "default", "tools": ["clock.now"],
            "handoffs": ["writer", { "to": "critic", "context": "last_n", "last_n": 3 }],
            "middleware": ["audit_log", { "name": "guardrail", "config": { "patterns": ["sk-\\w+"] } }],
            "output_schema": { "type": "object" } });
        assert_eq!(check(good), []);
        let bad = json!({ "instructions": "Research.", "model": "gpt-9", "tools": ["nope"],
            "handoffs": ["researcher", "ghost", "writer", "writer", { "to": "critic", "context": "last_n" }],
            "middleware": ["teleport", { "name": "guardrail", "config": { "patterns": ["("] } },
                { "name": "tool_approval", "config": { "tools": ["clock.now", "nope"] } }],
            "output_schema": { "type": "wrong" } });
        let pointers: Vec<String> = check(bad).into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            pointers,
            [
                "/model",
                "/tools/0",
                "/handoffs/0",
                "/handoffs/1",
                "/handoffs/3",
                "/handoffs/4/last_n",
                "/middleware/0",
                "/middleware/1/config/patterns/0",
                "/middleware/2/config/tools/1",
                "/output_schema"
            ]
        );
        let shape = check(json!({ "tools": "clock.now", "extra": 1 }));
        assert!(shape.iter().any(|(p, _)| p == "/instructions"), "{shape:?}");
        assert!(shape.iter().any(|(p, _)| p == "/extra"), "{shape:?}");
    }
}
