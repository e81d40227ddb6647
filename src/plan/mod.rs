//! Plans: the AgentPlan and FixedWorkflow formats, their validation, references between steps,
//! CEL conditions, the [`PlanBuilder`] and the analysis of a plan's DAG.
//!
//! Owns what a plan *means*: a JSON document becomes a [`ValidPlan`] (domain plan, typed
//! [`StepSpec`]s with parsed [`Template`]s and compiled [`Condition`]s, a stable topological
//! order, the critical path) or a list of every [`Problem`], each with a JSON Pointer.
//!
//! It must stay pure: no IO, no async, no HTTP, no store. It does not depend on `crate::api`
//! (the API turns [`Problem`]s into problem+json) nor on the engine (which consumes
//! [`ValidPlan`] and resolves templates through a [`Scope`] it builds from its own state).
//! Nor on the registries that own the names a plan uses (tools, functions, models): validation
//! asks a [`Catalog`] of traits they implement, so `plan` sits below them (ARCHITECTURE.md,
//! "Floors"). An agent definition is checked here too ([`agent`]), for a plan's own agents and
//! registered ones alike.
//!
//! Reference syntax, in short (details in [`template`]):
//!
//! ```text
//! {{ input }}  {{ input.a.b }}  {{ input.items[0] }}     the run input
//! {{ steps.ID.output }}  {{ steps.ID.output.x[2] }}      a finished step's output (or .status)
//! {{ vars.NAME }}                                        a declared plan variable
//! {{ session.NAME }}                                     a session variable (null when unset)
//! {{ step.id }}  {{ step.attempt }}  {{ step.metadata.x }}   the current step
//! {{ local.item }}  {{ local.index }}                    loop bodies only
//! {{ item }}  {{ index }}                                the same, by their old names
//! "{{ ref }}" alone keeps the value's JSON type; text around references interpolates.
//! ```

pub mod agent;
#[cfg(test)]
pub mod builder;
pub mod catalog;
pub mod condition;
pub mod graph;
pub mod middleware_spec;
pub mod schema;
pub mod spec;
pub mod team;
pub mod template;
pub mod validate;

#[cfg(test)]
mod tests;

pub use agent::{AgentCatalog, validate_agent};
#[cfg(test)]
pub use builder::{PlanBuilder, StepDraft};
pub use catalog::{Catalog, KnownFunctions, KnownModels, KnownTools};
pub use condition::{CelRef, Condition};
pub use graph::{SessionReads, ValidPlan};
pub use spec::{Aggregation, JsonSchema, KindSpec, LoopOver, SchemaViolation, StepSpec, WaitSpec};
pub use team::{AgentSpec, Team};
#[cfg(test)]
pub use template::resolve;
pub use template::{
    NoResults, Piece, RefError, Reference, RenderError, Root, Scope, Segment, StepField,
    StepResults, StepState, StepView, Template, render_error,
};
pub use validate::{Workflow, validate_plan, validate_workflow, workflow_plan_doc};

/// One problem with a plan or workflow document.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Problem {
    /// JSON Pointer into the document, e.g. `/steps/2/depends_on/0` (`""` = the whole document).
    pub pointer: String,
    pub message: String,
}

impl Problem {
    pub fn new(pointer: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            pointer: pointer.into(),
            message: message.into(),
        }
    }
}

/// Adds to `called` the LLM functions a plan document's `llm` steps call, at any depth
/// (children, nested workflows): a plain walk over the JSON, so it reads an unvalidated
/// document too.
pub fn functions_called(doc: &serde_json::Value, called: &mut std::collections::BTreeSet<String>) {
    use serde_json::Value;
    match doc {
        Value::Object(map) => {
            let function = (map.get("kind").and_then(Value::as_str) == Some("llm"))
                .then(|| map.get("input")?.get("function")?.as_str())
                .flatten();
            called.extend(function.map(str::to_owned));
            map.values().for_each(|v| functions_called(v, called));
        }
        Value::Array(items) => items.iter().for_each(|v| functions_called(v, called)),
        _ => {}
    }
}

/// Problems as one line: `pointer message; ...`.
pub fn list_problems(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("{} {}", p.pointer, p.message))
        .collect::<Vec<_>>()
        .join("; ")
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.pointer.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.pointer, self.message)
        }
    }
}
