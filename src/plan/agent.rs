//! An agent definition (`schemas/Agent.schema.json`) and its checks: every problem at once,
//! each with a JSON Pointer (design 004's "build-time safety"). The shape first, then meaning:
//! the model alias exists, every tool exists, every handoff target is a known agent (not
//! itself, not twice), every middleware is a built-in one with a valid configuration, and the
//! output schema compiles.
//!
//! Here, below the registries, because a plan's own `agents` are checked the same way as the
//! registered ones (`PUT /v1/agents/{name}`, `agents.dir`: see `crate::agents`).

use std::collections::HashSet;
use std::sync::LazyLock;

use serde_json::Value;

use super::Problem;
use super::catalog::Catalog;
use super::spec::JsonSchema;

/// `schemas/Agent.schema.json`.
pub const AGENT_SCHEMA: &str = include_str!("../../schemas/Agent.schema.json");

static SCHEMA: LazyLock<crate::schema::ShippedSchema> =
    LazyLock::new(|| crate::schema::ShippedSchema::compile(AGENT_SCHEMA));

/// What an agent definition may refer to: the catalog's tools and model aliases, and other
/// agents (those of the same plan, of the same directory, or the tenant's registered ones:
/// the caller knows which).
pub struct AgentCatalog<'a> {
    pub catalog: Catalog<'a>,
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
        && !known.catalog.has_model(model)
    {
        problems.push(Problem::new(
            "/model",
            format!("no model alias `{model}` is configured (llm.models)"),
        ));
    }
    for (i, tool) in strings(definition, "tools") {
        if !known.catalog.tools.has_tool(tool) {
            problems.push(Problem::new(
                format!("/tools/{i}"),
                format!("unknown tool `{tool}`"),
            ));
        }
    }
    handoff_problems(name, definition, known, &mut problems);
    // Names and configurations, as a plan's middleware are checked.
    super::team::middleware_list(definition.get("middleware"), "/middleware", &mut problems);
    for (i, item) in items(definition, "middleware") {
        if item.get("name").and_then(Value::as_str) != Some("tool_approval") {
            continue;
        }
        for (j, tool) in strings(item.get("config").unwrap_or(&Value::Null), "tools") {
            if !known.catalog.tools.has_tool(tool) {
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

pub(crate) fn items<'a>(
    definition: &'a Value,
    key: &str,
) -> impl Iterator<Item = (usize, &'a Value)> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::catalog::KnownModels;
    use crate::plan::catalog::fake::BuiltinTools;
    use serde_json::json;

    /// One model alias: `default`.
    struct Models;

    impl KnownModels for Models {
        fn has_model(&self, alias: &str) -> bool {
            alias == "default"
        }
    }

    fn check(definition: Value) -> Vec<(String, String)> {
        let tools = BuiltinTools::new();
        let known = AgentCatalog {
            catalog: Catalog {
                tools: &tools,
                functions: None,
                models: Some(&Models),
                registered_agents: &[],
            },
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
