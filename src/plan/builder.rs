//! [`PlanBuilder`]: plans written in Rust, for library users and tests.
//!
//! The builder only assembles an AgentPlan document and hands it to [`validate_plan`], so a
//! built plan is exactly the plan the same JSON would give, with the same problems. It must not
//! check anything itself, nor panic on bad ids: those come back as [`Problem`]s from `build`.

use serde_json::{Map, Value, json};

use super::Problem;
use super::catalog::Catalog;
use super::graph::ValidPlan;
use super::spec::Aggregation;
use super::validate::{PlanHead, step_document, validate_plan};
use crate::domain::{PlanSettings, RetryPolicy, Step};

/// One step in document form, for the builder and for child steps of composites.
#[derive(Debug, Clone, PartialEq)]
pub struct StepDraft(Map<String, Value>);

impl StepDraft {
    /// A step of any kind with its `input` configuration.
    pub fn new(id: impl Into<String>, kind: &str, input: Value) -> Self {
        let mut m = Map::new();
        m.insert("id".into(), Value::String(id.into()));
        m.insert("kind".into(), Value::String(kind.to_owned()));
        m.insert("input".into(), input);
        StepDraft(m)
    }

    pub fn llm(id: impl Into<String>, prompt: impl Into<String>) -> Self {
        StepDraft::new(id, "llm", json!({ "prompt": prompt.into() }))
    }

    pub fn tool(id: impl Into<String>, tool: &str, arguments: Value) -> Self {
        StepDraft::new(id, "tool", json!({ "tool": tool, "arguments": arguments }))
    }

    pub fn branch(
        id: impl Into<String>,
        condition: &str,
        then: &[&str],
        otherwise: &[&str],
    ) -> Self {
        StepDraft::new(
            id,
            "branch",
            json!({ "condition": condition, "then": then, "else": otherwise }),
        )
    }

    pub fn parallel(
        id: impl Into<String>,
        children: impl IntoIterator<Item = impl Into<StepDraft>>,
        aggregation: Aggregation,
    ) -> Self {
        StepDraft::new(
            id,
            "parallel",
            json!({ "steps": drafts(children), "aggregation": aggregation.as_str() }),
        )
    }

    pub fn sequential(
        id: impl Into<String>,
        children: impl IntoIterator<Item = impl Into<StepDraft>>,
    ) -> Self {
        StepDraft::new(id, "sequential", json!({ "steps": drafts(children) }))
    }

    /// A loop over the array `for_each` resolves to.
    pub fn for_each(
        id: impl Into<String>,
        for_each: Value,
        max_iterations: u32,
        children: impl IntoIterator<Item = impl Into<StepDraft>>,
    ) -> Self {
        StepDraft::new(
            id,
            "loop",
            json!({ "for_each": for_each, "max_iterations": max_iterations, "steps": drafts(children) }),
        )
    }

    /// A loop that runs while the CEL `condition` holds.
    pub fn while_loop(
        id: impl Into<String>,
        condition: &str,
        max_iterations: u32,
        children: impl IntoIterator<Item = impl Into<StepDraft>>,
    ) -> Self {
        StepDraft::new(
            id,
            "loop",
            json!({ "while": condition, "max_iterations": max_iterations, "steps": drafts(children) }),
        )
    }

    pub fn wait_ms(id: impl Into<String>, ms: u64) -> Self {
        StepDraft::new(id, "wait", json!({ "duration_ms": ms }))
    }

    pub fn user_input(id: impl Into<String>, prompt: impl Into<String>) -> Self {
        StepDraft::new(id, "user_input", json!({ "prompt": prompt.into() }))
    }

    pub fn name(self, name: impl Into<String>) -> Self {
        self.set("name", Value::String(name.into()))
    }

    pub fn description(self, description: impl Into<String>) -> Self {
        self.set("description", Value::String(description.into()))
    }

    pub fn timeout_ms(self, ms: u64) -> Self {
        self.set("timeout_ms", Value::from(ms))
    }

    pub fn retry(self, policy: &RetryPolicy) -> Self {
        self.set(
            "retry_policy",
            serde_json::to_value(policy).unwrap_or_default(),
        )
    }

    pub fn metadata(mut self, key: impl Into<String>, value: Value) -> Self {
        let entry = self
            .0
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(m) = entry {
            m.insert(key.into(), value);
        }
        self
    }

    /// Adds a dependency (top-level steps only; validation rejects it on a child).
    pub fn depends_on(mut self, id: impl Into<String>) -> Self {
        self.push_dependency(id.into());
        self
    }

    fn push_dependency(&mut self, id: String) {
        let entry = self
            .0
            .entry("depends_on")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(deps) = entry {
            deps.push(Value::String(id));
        }
    }

    fn set(mut self, key: &str, value: Value) -> Self {
        self.0.insert(key.to_owned(), value);
        self
    }

    pub fn into_value(self) -> Value {
        Value::Object(self.0)
    }
}

impl From<Step> for StepDraft {
    fn from(step: Step) -> Self {
        match step_document(&step) {
            Value::Object(m) => StepDraft(m),
            // `step_document` always builds an object.
            _ => StepDraft(Map::new()),
        }
    }
}

impl From<&Step> for StepDraft {
    fn from(step: &Step) -> Self {
        StepDraft::from(step.clone())
    }
}

fn drafts(children: impl IntoIterator<Item = impl Into<StepDraft>>) -> Vec<Value> {
    children
        .into_iter()
        .map(|c| c.into().into_value())
        .collect()
}

/// Builds a plan step by step; `build` validates it like a JSON plan.
///
/// ```
/// use orca::{config::ToolsConfig, plan::PlanBuilder, tools::ToolRegistry};
/// use serde_json::json;
///
/// let tools = ToolRegistry::with_builtins(&ToolsConfig::default());
/// let plan = PlanBuilder::new()
///     .id("p")
///     .llm_step("s1", "Summarise {{ input }}")
///     .tool_step("s2", "math.calculate", json!({"expression": "1 + 1"}))
///     .depends_on("s1")
///     .output(json!("{{ steps.s2.output }}"))
///     .build(&tools)
///     .expect("a valid plan");
/// assert_eq!(plan.len(), 2);
///
/// // Problems are reported all at once, each with a JSON Pointer.
/// let problems = PlanBuilder::new()
///     .tool_step("a", "no.such.tool", json!({}))
///     .depends_on("missing")
///     .build(&tools)
///     .unwrap_err();
/// assert_eq!(problems.len(), 2);
/// ```
#[derive(Debug, Clone, Default)]
pub struct PlanBuilder {
    id: Option<String>,
    name: Option<String>,
    description: Option<String>,
    variables: Map<String, Value>,
    settings: PlanSettings,
    steps: Vec<StepDraft>,
    output: Option<Value>,
    /// Misuse found while building (e.g. `depends_on` before any step), reported by `build`.
    problems: Vec<Problem>,
}

impl PlanBuilder {
    pub fn new() -> Self {
        PlanBuilder::default()
    }

    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Declares a run variable and its initial value.
    pub fn variable(mut self, name: impl Into<String>, value: Value) -> Self {
        self.variables.insert(name.into(), value);
        self
    }

    /// Changes the settings in place, starting from the defaults.
    pub fn settings(mut self, configure: impl FnOnce(&mut PlanSettings)) -> Self {
        configure(&mut self.settings);
        self
    }

    /// Adds any step: a [`StepDraft`] or a domain [`Step`].
    pub fn step(mut self, step: impl Into<StepDraft>) -> Self {
        self.steps.push(step.into());
        self
    }

    pub fn llm_step(self, id: impl Into<String>, prompt: impl Into<String>) -> Self {
        self.step(StepDraft::llm(id, prompt))
    }

    pub fn tool_step(self, id: impl Into<String>, tool: &str, arguments: Value) -> Self {
        self.step(StepDraft::tool(id, tool, arguments))
    }

    pub fn branch(
        self,
        id: impl Into<String>,
        condition: &str,
        then: &[&str],
        otherwise: &[&str],
    ) -> Self {
        self.step(StepDraft::branch(id, condition, then, otherwise))
    }

    pub fn parallel(
        self,
        id: impl Into<String>,
        children: impl IntoIterator<Item = impl Into<StepDraft>>,
        aggregation: Aggregation,
    ) -> Self {
        self.step(StepDraft::parallel(id, children, aggregation))
    }

    pub fn sequential(
        self,
        id: impl Into<String>,
        children: impl IntoIterator<Item = impl Into<StepDraft>>,
    ) -> Self {
        self.step(StepDraft::sequential(id, children))
    }

    pub fn wait_ms(self, id: impl Into<String>, ms: u64) -> Self {
        self.step(StepDraft::wait_ms(id, ms))
    }

    pub fn user_input(self, id: impl Into<String>, prompt: impl Into<String>) -> Self {
        self.step(StepDraft::user_input(id, prompt))
    }

    /// Makes the last added step depend on `id`.
    pub fn depends_on(mut self, id: impl Into<String>) -> Self {
        let id = id.into();
        match self.steps.last_mut() {
            Some(step) => step.push_dependency(id),
            None => self.problems.push(Problem::new(
                "/steps",
                format!("`depends_on(\"{id}\")` was called before any step was added"),
            )),
        }
        self
    }

    /// The plan's output template.
    pub fn output(mut self, output: Value) -> Self {
        self.output = Some(output);
        self
    }

    /// The AgentPlan document built so far.
    pub fn document(&self) -> Value {
        let head = PlanHead {
            id: self.id.as_deref(),
            name: self.name.as_deref(),
            description: self.description.as_deref(),
            variables: &self.variables,
            settings: &self.settings,
        };
        let steps = self
            .steps
            .iter()
            .cloned()
            .map(StepDraft::into_value)
            .collect();
        head.document(steps, self.output.as_ref())
    }

    /// Validates the plan exactly as [`validate_plan`] would validate [`Self::document`].
    pub fn build<'c>(self, catalog: impl Into<Catalog<'c>>) -> Result<ValidPlan, Vec<Problem>> {
        let result = validate_plan(&self.document(), catalog);
        if self.problems.is_empty() {
            return result;
        }
        let mut problems = self.problems;
        if let Err(more) = result {
            problems.extend(more);
        }
        Err(problems)
    }
}
