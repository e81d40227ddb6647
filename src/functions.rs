//! Named LLM functions (design 001's function registry): a prompt template, a system prompt, a
//! model alias and an output schema under one name. Plans call them (`kind: "llm", function:
//! "summarize"`), and orca's own decisions are functions too — the planner, the re-planner, the
//! selector and the summariser — so an operator changes their prompts in configuration, not in
//! code.
//!
//! A function's prompt is a `{{ }}` template over `input`: the arguments of the call (a plan
//! step's `arguments`, or what the engine hands the planner). The registry is built once at
//! start from the built-ins and `[functions.NAME]` of the configuration, and checked whole then
//! (templates parse, schemas compile, model aliases exist), so a bad function stops the start
//! instead of failing a run. It does no IO and knows nothing of runs.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::config::FunctionConfig;
use crate::plan::schema::{AGENT_PLAN_SCHEMA, ORCHESTRATION_TYPE_SCHEMA, replan_schema};
use crate::plan::{JsonSchema, Template};

/// The names of the functions orca itself calls.
pub const PLANNER: &str = "planner";
pub const REPLANNER: &str = "replanner";
pub const SELECTOR: &str = "selector";
pub const SUMMARIZER: &str = "summarizer";

/// A function, checked and ready to call.
#[derive(Debug, Clone)]
pub struct LlmFunction {
    pub name: String,
    pub description: String,
    pub system: Option<String>,
    pub prompt: Template,
    /// The prompt as written, for the function list.
    pub prompt_text: String,
    pub model: Option<String>,
    pub output_schema: Option<JsonSchema>,
    pub builtin: bool,
}

/// A function as `GET /v1/functions` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct FunctionInfo {
    pub name: String,
    pub description: String,
    pub system: Option<String>,
    pub prompt: String,
    pub model: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<Value>,
    /// One of orca's own (planner, re-planner, selector, summariser), perhaps reconfigured.
    pub builtin: bool,
}

/// Every function by name. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct FunctionRegistry {
    functions: Arc<BTreeMap<String, Arc<LlmFunction>>>,
}

impl FunctionRegistry {
    /// The built-ins with `configured` over them. `is_model` says whether a model alias
    /// exists. Every problem is reported, each naming the key that holds it.
    pub fn build(
        configured: &BTreeMap<String, FunctionConfig>,
        is_model: impl Fn(&str) -> bool,
    ) -> Result<FunctionRegistry, Vec<String>> {
        let mut specs: BTreeMap<String, (FunctionConfig, bool)> = builtins()
            .into_iter()
            .map(|(name, f)| (name.to_owned(), (f, true)))
            .collect();
        for (name, given) in configured {
            let entry = specs
                .entry(name.clone())
                .or_insert_with(|| (FunctionConfig::default(), false));
            overlay(&mut entry.0, given);
        }
        let mut problems = Vec::new();
        let mut functions = BTreeMap::new();
        for (name, (config, builtin)) in specs {
            match check(&name, config, builtin, &is_model) {
                Ok(f) => {
                    functions.insert(name, Arc::new(f));
                }
                Err(mut p) => problems.append(&mut p),
            }
        }
        if problems.is_empty() {
            Ok(FunctionRegistry {
                functions: Arc::new(functions),
            })
        } else {
            Err(problems)
        }
    }

    pub fn get(&self, name: &str) -> Option<Arc<LlmFunction>> {
        self.functions.get(name).cloned()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.functions.contains_key(name)
    }

    /// Every function, by name.
    pub fn list(&self) -> Vec<FunctionInfo> {
        self.functions
            .values()
            .map(|f| FunctionInfo {
                name: f.name.clone(),
                description: f.description.clone(),
                system: f.system.clone(),
                prompt: f.prompt_text.clone(),
                model: f.model.clone(),
                output_schema: f.output_schema.as_ref().map(|s| s.schema.clone()),
                builtin: f.builtin,
            })
            .collect()
    }
}

/// What plan validation asks of the functions: whether a step's function exists.
impl crate::plan::KnownFunctions for FunctionRegistry {
    fn has_function(&self, name: &str) -> bool {
        self.contains(name)
    }

    fn function_names(&self) -> Vec<String> {
        self.list().into_iter().map(|f| f.name).collect()
    }
}

/// `given`'s members replace `base`'s.
fn overlay(base: &mut FunctionConfig, given: &FunctionConfig) {
    let FunctionConfig {
        description,
        system,
        prompt,
        model,
        output_schema,
    } = given.clone();
    base.description = description.or(base.description.take());
    base.system = system.or(base.system.take());
    base.prompt = prompt.or(base.prompt.take());
    base.model = model.or(base.model.take());
    base.output_schema = output_schema.or(base.output_schema.take());
}

fn check(
    name: &str,
    config: FunctionConfig,
    builtin: bool,
    is_model: &impl Fn(&str) -> bool,
) -> Result<LlmFunction, Vec<String>> {
    let key = |member: &str| format!("functions.{name}.{member}");
    let mut problems = Vec::new();
    let valid_name = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !valid_name {
        problems.push(format!(
            "functions.{name}: a function name is 1-64 letters, digits, `_`, `-` or `.`"
        ));
    }
    let prompt_text = config.prompt.unwrap_or_default();
    let prompt = if prompt_text.trim().is_empty() {
        problems.push(format!("{}: a function needs a prompt", key("prompt")));
        None
    } else {
        match Template::parse(&Value::String(prompt_text.clone())) {
            Ok(t) => Some(t),
            Err(errors) => {
                for e in errors {
                    problems.push(format!("{}: {}", key("prompt"), e.message));
                }
                None
            }
        }
    };
    if let Some(model) = &config.model
        && !is_model(model)
    {
        problems.push(format!("{}: no model alias `{model}`", key("model")));
    }
    let output_schema = match &config.output_schema {
        None => None,
        Some(s) => match JsonSchema::compile(s) {
            Ok(s) => Some(s),
            Err(e) => {
                problems.push(format!(
                    "{}: not a valid JSON Schema: {e}",
                    key("output_schema")
                ));
                None
            }
        },
    };
    match prompt {
        Some(prompt) if problems.is_empty() => Ok(LlmFunction {
            name: name.to_owned(),
            description: config.description.unwrap_or_default(),
            system: config.system,
            prompt,
            prompt_text,
            model: config.model,
            output_schema,
            builtin,
        }),
        _ => Err(problems),
    }
}

fn shipped(text: &str) -> Value {
    serde_json::from_str(text).expect("shipped schemas are JSON")
}

/// orca's own functions, as shipped; configuration may replace any member.
fn builtins() -> Vec<(&'static str, FunctionConfig)> {
    let text = |s: &str| Some(s.to_owned());
    vec![
        (
            PLANNER,
            FunctionConfig {
                description: text("Writes a plan (an AgentPlan) for a task."),
                system: text(PLANNER_SYSTEM),
                prompt: text(PLANNER_PROMPT),
                model: None,
                output_schema: Some(shipped(AGENT_PLAN_SCHEMA)),
            },
        ),
        (
            REPLANNER,
            FunctionConfig {
                description: text(
                    "Writes the next version of a plan after a failure, a surprise or the user's word.",
                ),
                system: text(REPLANNER_SYSTEM),
                prompt: text(REPLANNER_PROMPT),
                model: None,
                output_schema: Some(replan_schema()),
            },
        ),
        (
            SELECTOR,
            FunctionConfig {
                description: text("Picks how to orchestrate a request."),
                system: text(SELECTOR_SYSTEM),
                prompt: text("{{ input.task }}"),
                model: None,
                output_schema: Some(shipped(ORCHESTRATION_TYPE_SCHEMA)),
            },
        ),
        (
            SUMMARIZER,
            FunctionConfig {
                description: text("Summarises earlier turns of a conversation."),
                system: text(SUMMARIZER_SYSTEM),
                prompt: text("{{ input.transcript }}"),
                model: None,
                output_schema: None,
            },
        ),
    ]
}

const PLANNER_SYSTEM: &str = "You are the planner of orca, an orchestration service. Turn the \
user's task into a plan: a JSON AgentPlan whose steps use only the tools and LLM functions \
listed, each tool with arguments valid against its input schema. Steps pass data with \
references such as {{ steps.ID.output }} and may depend on earlier steps with depends_on. Keep \
the plan as small as the task allows and within the limits. Answer with the plan as JSON only.";

const PLANNER_PROMPT: &str = "Task: {{ input.task }}

Tools (name, description, input schema): {{ input.tools }}

LLM functions (kind llm with `function`): {{ input.functions }}

Limits: {{ input.limits }}";

const REPLANNER_SYSTEM: &str = "You are the re-planner of orca. A running plan needs a new \
version. Choose one of the allowed strategies and answer with JSON: {\"strategy\", \"reason\", \
\"completes_task\", \"plan\"}; completes_task is false when the new plan does only part of the \
task or only says what could not be done. Completed steps must keep their ids and are not run again; their outputs stay \
available as {{ steps.ID.output }}. Use only the tools and functions listed.";

const REPLANNER_PROMPT: &str = "Task: {{ input.task }}

Why a new plan is needed: {{ input.trigger }}

Allowed strategies: {{ input.strategies }}

The current plan (version {{ input.version }}): {{ input.plan }}

Completed steps and their outputs: {{ input.completed }}

Tools: {{ input.tools }}

LLM functions: {{ input.functions }}";

const SELECTOR_SYSTEM: &str = "You choose how orca runs a request. Answer with JSON \
{\"orchestrationType\": ...}: \"simple\" for one model answer (with tool calls if needed), \
\"planner\" for a task that needs several steps planned up front, \"reactive\" for a multi-step \
task likely to need changes of plan as results come in.";

const SUMMARIZER_SYSTEM: &str = "Summarise the conversation below in a few sentences: the user's \
goals, what was decided, and facts the assistant will need later. Write the summary only.";

#[cfg(test)]
mod tests {
    use super::*;

    fn models(name: &str) -> bool {
        name == "default" || name == "fast"
    }

    #[test]
    fn the_builtins_are_there_and_configuration_replaces_their_members() {
        let mut configured = BTreeMap::new();
        configured.insert(
            "planner".to_owned(),
            FunctionConfig {
                model: Some("fast".into()),
                ..Default::default()
            },
        );
        let registry = FunctionRegistry::build(&configured, models).unwrap();
        let planner = registry.get(PLANNER).unwrap();
        assert_eq!(planner.model.as_deref(), Some("fast"));
        assert!(planner.builtin);
        assert!(planner.output_schema.is_some(), "the shipped schema stays");
        for name in [REPLANNER, SELECTOR, SUMMARIZER] {
            assert!(registry.contains(name), "{name}");
        }
    }

    #[test]
    fn every_problem_names_its_key() {
        let mut configured = BTreeMap::new();
        configured.insert(
            "translate".to_owned(),
            FunctionConfig {
                prompt: Some("Translate {{ input.text".into()),
                model: Some("huge".into()),
                output_schema: Some(serde_json::json!({"type": "nope"})),
                ..Default::default()
            },
        );
        configured.insert("empty".to_owned(), FunctionConfig::default());
        let problems = FunctionRegistry::build(&configured, models).unwrap_err();
        let all = problems.join("\n");
        for want in [
            "functions.translate.prompt",
            "functions.translate.model: no model alias `huge`",
            "functions.translate.output_schema",
            "functions.empty.prompt: a function needs a prompt",
        ] {
            assert!(all.contains(want), "{want} missing in:\n{all}");
        }
    }
}
