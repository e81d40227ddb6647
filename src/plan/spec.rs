//! Typed step specifications: what the engine executes, parsed once at validation, with
//! templates, conditions and answer schemas ready to use.
//!
//! Owns nothing but the types; [`super::validate`] builds them and guarantees what their docs
//! say (ids unique, targets valid, conditions compiled). Nothing here does IO.

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::condition::Condition;
use super::team::{AgentStep, GroupChatStep, HandoffStep, WorkflowStep};
use super::template::Template;
use crate::domain::text_enum::text_enum;
use crate::domain::{RetryPolicy, StepId, StepKind};
pub use crate::schema::SchemaViolation;

/// One step, typed. Top-level steps and children share this shape; only top-level steps have
/// dependencies (kept in the domain step and in [`super::ValidPlan`]'s adjacency).
#[derive(Debug, Clone)]
pub struct StepSpec {
    pub id: StepId,
    pub name: Option<String>,
    pub retry_policy: Option<RetryPolicy>,
    pub timeout_ms: Option<u64>,
    /// Among top-level steps ready at once, higher ones start first (default 0).
    pub priority: i64,
    /// The condition its output must meet (`expect`).
    pub expect: Option<Condition>,
    /// Where the step sits in the plan document, e.g. `/steps/2/input/steps/0`, so run-time
    /// errors can point at what the author wrote.
    pub pointer: String,
    /// The step's free-form `metadata`, readable as `step.metadata` while it runs.
    pub metadata: serde_json::Map<String, Value>,
    pub kind: KindSpec,
}

impl StepSpec {
    pub fn step_kind(&self) -> StepKind {
        self.kind.step_kind()
    }

    /// The display name: `name` if given, else the id.
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or(self.id.as_str())
    }

    /// The child steps of a parallel, sequential or loop step; empty for the other kinds.
    pub fn children(&self) -> &[StepSpec] {
        match &self.kind {
            KindSpec::Parallel { steps, .. }
            | KindSpec::Sequential { steps }
            | KindSpec::Loop { steps, .. } => steps,
            _ => &[],
        }
    }

    /// This step or a descendant with id `id`.
    pub fn find(&self, id: &str) -> Option<&StepSpec> {
        if self.id.as_str() == id {
            return Some(self);
        }
        self.children().iter().find_map(|c| c.find(id))
    }
}

/// The kind-specific part of a step.
#[derive(Debug, Clone)]
pub enum KindSpec {
    Llm {
        prompt: Template,
        system: Option<Template>,
        /// A model alias; the run's model when `None`.
        model: Option<String>,
        /// When set, the answer must be JSON valid against it; the step outputs that JSON.
        output_schema: Option<JsonSchema>,
    },
    /// An `llm` step that calls a named function: its prompt, system prompt, model and output
    /// schema are the function's; `arguments` are its `input`.
    Function {
        /// A function of the registry the plan was validated against.
        function: String,
        /// `{}` when the plan gave none.
        arguments: Template,
    },
    Tool {
        /// A tool of the registry the plan was validated against.
        tool: String,
        /// `{}` when the plan gave none. Literal parts already passed the tool's schema.
        arguments: Template,
    },
    Branch {
        condition: Condition,
        /// Steps to run when true. Top-level: each lists the branch in `depends_on`; inside a
        /// sequential or loop body: later siblings.
        then: Vec<StepId>,
        /// Steps to run when false (may be empty).
        otherwise: Vec<StepId>,
    },
    Parallel {
        steps: Vec<StepSpec>,
        aggregation: Aggregation,
    },
    Sequential {
        steps: Vec<StepSpec>,
    },
    Loop {
        over: LoopOver,
        max_iterations: u32,
        steps: Vec<StepSpec>,
    },
    Wait(WaitSpec),
    UserInput {
        prompt: Template,
        schema: Option<JsonSchema>,
    },
    Agent(AgentStep),
    Handoff(HandoffStep),
    GroupChat(GroupChatStep),
    Workflow(WorkflowStep),
}

impl KindSpec {
    pub fn step_kind(&self) -> StepKind {
        match self {
            KindSpec::Llm { .. } | KindSpec::Function { .. } => StepKind::Llm,
            KindSpec::Tool { .. } => StepKind::Tool,
            KindSpec::Branch { .. } => StepKind::Branch,
            KindSpec::Parallel { .. } => StepKind::Parallel,
            KindSpec::Sequential { .. } => StepKind::Sequential,
            KindSpec::Loop { .. } => StepKind::Loop,
            KindSpec::Wait(_) => StepKind::Wait,
            KindSpec::UserInput { .. } => StepKind::UserInput,
            KindSpec::Agent(_) => StepKind::Agent,
            KindSpec::Handoff(_) => StepKind::Handoff,
            KindSpec::GroupChat(_) => StepKind::GroupChat,
            KindSpec::Workflow(_) => StepKind::Workflow,
        }
    }
}

text_enum! {
    /// How a parallel step combines its children's outputs.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum Aggregation {
        /// The array of child outputs in declaration order; fails if any child fails.
        #[default]
        All = "all",
        /// An object child id → output of the children that succeeded; fails only if all fail.
        Merge = "merge",
        /// The output of the first child, in declaration order, that succeeds.
        FirstSuccess = "first_success",
        /// The output of the first child to succeed; the others are cancelled.
        Fastest = "fastest",
    }
}

/// What drives a loop.
#[derive(Debug, Clone)]
pub enum LoopOver {
    /// Resolved in the loop step's scope; must give an array. `item` is each element.
    ForEach(Template),
    /// Checked before each iteration with `index` = iterations done; the body's steps hold the
    /// previous iteration's results.
    While(Condition),
}

/// How long a wait step waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitSpec {
    Duration { ms: u64 },
    Until(DateTime<Utc>),
}

/// A JSON Schema given in a plan, compiled at validation.
#[derive(Clone)]
pub struct JsonSchema {
    pub schema: Value,
    validator: Arc<jsonschema::Validator>,
}

impl fmt::Debug for JsonSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("JsonSchema").field(&self.schema).finish()
    }
}

impl PartialEq for JsonSchema {
    fn eq(&self, other: &Self) -> bool {
        self.schema == other.schema
    }
}

impl JsonSchema {
    /// Compiles `schema` (draft 2020-12 unless it says otherwise). Remote `$ref`s are not
    /// fetched: the crate is built without a network retriever.
    pub fn compile(schema: &Value) -> Result<JsonSchema, String> {
        let validator = jsonschema::validator_for(schema).map_err(|e| e.to_string())?;
        Ok(JsonSchema {
            schema: schema.clone(),
            validator: Arc::new(validator),
        })
    }

    /// Every violation of `value`; empty when it is valid.
    pub fn check(&self, value: &Value) -> Vec<SchemaViolation> {
        crate::schema::violations(&self.validator, value)
    }

    pub fn is_valid(&self, value: &Value) -> bool {
        self.validator.is_valid(value)
    }
}
