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
//! instead of failing a run. A tenant may declare functions of its own through the API
//! ([`FunctionSpec`], versioned like workflows): a run copies the tenant's declarations when it
//! is created and sees them beside the configured ones ([`FunctionRegistry::with_declared`]).
//! A plan's step may name a declared function's version (`classify@2`, `classify@production`):
//! [`resolve_versions`] reads those from the store, the one IO here.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::config::FunctionConfig;
pub use crate::domain::function::FunctionSpec;
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
    /// Declared by a tenant through the API.
    pub declared: bool,
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
    /// Declared by the caller's tenant through the API (`PUT /v1/functions/{name}`), not
    /// configured.
    pub declared: bool,
}

/// The most functions one tenant may declare.
pub const MAX_DECLARED: usize = 128;

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
                Err(found) => problems.extend(found.into_iter().map(|(member, message)| {
                    match member.is_empty() {
                        true => format!("functions.{name}: {message}"),
                        false => format!("functions.{name}.{member}: {message}"),
                    }
                })),
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

    /// These functions and a tenant's `declared` ones beside them. A configured function keeps
    /// its name; a declaration that no longer compiles (a model alias removed since) is
    /// skipped, with a warning, so a step calling it fails as calling an unknown function does.
    pub fn with_declared(
        &self,
        declared: &[FunctionSpec],
        is_model: impl Fn(&str) -> bool,
    ) -> FunctionRegistry {
        if declared.is_empty() {
            return self.clone();
        }
        let mut functions = (*self.functions).clone();
        for spec in declared {
            if functions.contains_key(&spec.name) {
                continue;
            }
            match compile(spec, &is_model) {
                Ok(f) => {
                    functions.insert(spec.name.clone(), Arc::new(f));
                }
                Err(problems) => {
                    let problems: Vec<String> = (problems.into_iter())
                        .map(|(pointer, message)| format!("{pointer}: {message}"))
                        .collect();
                    tracing::warn!(function = %spec.name, problems = ?problems, "skipping a declared function");
                }
            }
        }
        FunctionRegistry {
            functions: Arc::new(functions),
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
                declared: f.declared,
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

/// A declaration as the configuration would give it.
fn config_of(spec: &FunctionSpec) -> FunctionConfig {
    FunctionConfig {
        description: Some(spec.description.clone()),
        system: spec.system.clone(),
        prompt: Some(spec.prompt.clone()),
        model: spec.model.clone(),
        output_schema: spec.output_schema.clone(),
    }
}

/// A declared function ready to call, or every problem, each with the JSON Pointer of the
/// member that holds it (`/prompt`, `/model`, `/output_schema`).
pub fn compile(
    spec: &FunctionSpec,
    is_model: impl Fn(&str) -> bool,
) -> Result<LlmFunction, Vec<(String, String)>> {
    let pointed = |(member, message)| (format!("/{member}"), message);
    check(&spec.name, config_of(spec), false, &is_model)
        .map(|f| LlmFunction {
            declared: true,
            ..f
        })
        .map_err(|problems| problems.into_iter().map(pointed).collect())
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

/// A function's members checked: the function, or every problem as (the member that holds it,
/// empty for the name; a sentence).
fn check(
    name: &str,
    config: FunctionConfig,
    builtin: bool,
    is_model: &impl Fn(&str) -> bool,
) -> Result<LlmFunction, Vec<(&'static str, String)>> {
    let mut problems = Vec::new();
    let valid_name = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !valid_name {
        problems.push((
            "",
            "a function name is 1-64 letters, digits, `_`, `-` or `.`".to_owned(),
        ));
    }
    let prompt_text = config.prompt.unwrap_or_default();
    let prompt = if prompt_text.trim().is_empty() {
        problems.push(("prompt", "a function needs a prompt".to_owned()));
        None
    } else {
        match Template::parse(&Value::String(prompt_text.clone())) {
            Ok(t) => Some(t),
            Err(errors) => {
                problems.extend(errors.into_iter().map(|e| ("prompt", e.message)));
                None
            }
        }
    };
    if let Some(model) = &config.model
        && !is_model(model)
    {
        problems.push(("model", format!("no model alias `{model}`")));
    }
    let output_schema = match &config.output_schema {
        None => None,
        Some(s) => match JsonSchema::compile(s) {
            Ok(s) => Some(s),
            Err(e) => {
                problems.push(("output_schema", format!("not a valid JSON Schema: {e}")));
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
            declared: false,
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

/// What [`resolve_versions`] found: the declared functions a plan names at a version, as
/// stored (the run keeps that version instead of the latest), and the references refused,
/// each with a pointer into the document.
#[derive(Debug, Default)]
pub struct VersionedCalls {
    pub chosen: Vec<crate::store::RegistryRecord>,
    pub problems: Vec<crate::plan::Problem>,
}

/// Rewrites each `llm` step's `function: "name@3"` (or `name@label`) in the plan document
/// `doc`, at any depth (children, the plan's `workflows`), to the bare name, and reads the
/// version it names. A run uses one version of each function: a plan naming one at two
/// versions (or at a version and bare, the latest, when those differ) is a problem, as are an
/// unknown version or label and a version of a function not declared through the API.
pub async fn resolve_versions(
    store: &crate::store::Store,
    tenant: &crate::domain::Tenant,
    doc: &mut Value,
) -> crate::store::Result<VersionedCalls> {
    use crate::domain::definition::{DefinitionKind, Reference, Version, unknown_version};
    use crate::plan::Problem;
    let registry = crate::store::Registry::Functions;
    // Most plans name no version: a walk without pointers tells, before one that builds them.
    let mut called = std::collections::BTreeSet::new();
    crate::plan::functions_called(doc, &mut called);
    if !called.iter().any(|name| name.contains('@')) {
        return Ok(VersionedCalls::default());
    }
    let mut calls = Vec::new();
    calls_in(doc, String::new(), &mut calls);
    // Only the names some call gives a version; a bare call of one reads the latest, which
    // must be that same version.
    let versioned: std::collections::BTreeSet<String> = (calls.iter())
        .filter_map(|(_, text)| text.split_once('@').map(|(name, _)| name.to_owned()))
        .collect();
    calls.retain(|(_, text)| versioned.contains(text.split('@').next().unwrap_or_default()));
    let mut found = VersionedCalls::default();
    // Each name's version as first read, and where.
    let mut read: BTreeMap<String, (u32, String)> = BTreeMap::new();
    for (pointer, text) in &calls {
        let reference = match Reference::parse(text) {
            Ok(r) => r,
            Err(message) => {
                found.problems.push(Problem::new(pointer.clone(), message));
                continue;
            }
        };
        let name = reference.name.clone();
        if let Some(slot) = doc.pointer_mut(pointer) {
            *slot = Value::String(name.clone());
        }
        let Some(record) = store
            .get_entry_at(registry, tenant, &name, &reference.version)
            .await?
        else {
            let definitions = crate::store::Definitions::new(store.clone());
            let message = match definitions.owner(registry, tenant, &name).await? {
                Some(owner) => {
                    let (numbers, labels) = definitions.known(registry, &owner, &name).await?;
                    let kind = DefinitionKind::Function;
                    unknown_version(kind, &name, &reference.version, &numbers, &labels)
                }
                None => format!(
                    "no declared function `{name}`: only functions declared through the API (PUT /v1/functions/{{name}}) have versions"
                ),
            };
            found.problems.push(Problem::new(pointer.clone(), message));
            continue;
        };
        match read.get(&name) {
            Some((version, first)) if *version != record.version => {
                let asked = match &reference.version {
                    Version::Latest => format!("the latest (v{})", record.version),
                    _ => format!("v{}", record.version),
                };
                found.problems.push(Problem::new(
                    pointer.clone(),
                    format!(
                        "function `{name}` is called at v{version} (at {first}) and at {asked} here; a run uses one version of each function"
                    ),
                ));
            }
            Some(_) => {}
            None => {
                read.insert(name, (record.version, pointer.clone()));
                found.chosen.push(record);
            }
        }
    }
    Ok(found)
}

/// Every `llm` step's `function` in `doc` with its pointer, at any depth.
fn calls_in(doc: &Value, at: String, calls: &mut Vec<(String, String)>) {
    match doc {
        Value::Object(map) => {
            let llm = map.get("kind").and_then(Value::as_str) == Some("llm");
            let function = map.get("input").and_then(|i| i.get("function"));
            if let Some(Value::String(text)) = function.filter(|_| llm) {
                calls.push((format!("{at}/input/function"), text.clone()));
            }
            for (key, value) in map {
                calls_in(
                    value,
                    format!("{at}/{}", crate::schema::escape_pointer(key)),
                    calls,
                );
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                calls_in(item, format!("{at}/{i}"), calls);
            }
        }
        _ => {}
    }
}

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
