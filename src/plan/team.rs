//! Teams of agents inside a plan: the plan's `agents`, `workflows` and run-wide `middleware`,
//! compiled into a [`Team`], and the typed inputs of the multi-agent step kinds (`agent`,
//! `handoff`, `group_chat`, `workflow`).
//!
//! A plan is self-contained: the agents and workflows its steps name are in the plan document
//! (the API copies registered ones in when a run is created), so a run and its resume execute
//! exactly what was validated. Pure, like the rest of `plan`: no IO.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::Problem;
use super::agent::{AgentCatalog, validate_agent};
use super::catalog::Catalog;
use super::graph::ValidPlan;
use super::spec::JsonSchema;
use super::template::Template;
use crate::domain::StepId;
use crate::domain::text_enum::text_enum;

/// The agents, nested workflows and run-wide middleware a plan's steps use.
#[derive(Debug, Clone, Default)]
pub struct Team {
    pub agents: BTreeMap<String, Arc<AgentSpec>>,
    /// Nested workflows by name, each validated as a plan (its steps see the same `agents`).
    pub workflows: BTreeMap<String, Arc<ValidPlan>>,
    /// Around every agent turn and tool call, outside each agent's own middleware.
    pub middleware: Vec<MiddlewareSpec>,
}

impl Team {
    pub fn agent(&self, name: &str) -> Option<&Arc<AgentSpec>> {
        self.agents.get(name)
    }

    pub fn is_empty(&self) -> bool {
        self.agents.is_empty() && self.workflows.is_empty() && self.middleware.is_empty()
    }
}

/// One agent, compiled from its definition (`schemas/Agent.schema.json`).
#[derive(Debug, Clone)]
pub struct AgentSpec {
    pub name: String,
    pub description: Option<String>,
    /// The system prompt; empty for a workflow agent.
    pub instructions: String,
    /// A model alias; the run's model when `None`.
    pub model: Option<String>,
    pub tools: Vec<String>,
    pub output_schema: Option<JsonSchema>,
    pub handoffs: Vec<HandoffEdge>,
    /// Outermost first.
    pub middleware: Vec<MiddlewareSpec>,
    /// A workflow acting as this agent (`kind: "workflow"`).
    pub workflow: Option<String>,
    /// What it recalls from memory before its turn and writes there after (`memory`).
    pub memory: Option<AgentMemory>,
}

/// An agent's memory settings (`memory` in its definition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentMemory {
    /// Items recalled for its turn's request and put before it (0: none).
    pub recall: u32,
    /// Whose memory: `user` (the default), `session` or `shared`.
    pub scope: String,
    /// A namespace below the scope.
    pub namespace: Option<String>,
    /// Writes a summary of its conversation to memory (key `session-<id>`) when its turn ends.
    pub remember: bool,
}

impl AgentMemory {
    fn of(definition: Option<&Value>) -> Option<AgentMemory> {
        let m = definition?;
        let text = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_owned);
        Some(AgentMemory {
            recall: m.get("recall").and_then(Value::as_u64).unwrap_or(0) as u32,
            scope: text("scope").unwrap_or_else(|| "user".into()),
            namespace: text("namespace"),
            remember: m.get("remember").and_then(Value::as_bool).unwrap_or(false),
        })
    }
}

/// One edge of the handoff graph: whom control may pass to, with which context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoffEdge {
    pub to: String,
    pub context: ContextPolicy,
    pub description: Option<String>,
}

/// What the target of a handoff receives of the conversation so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextPolicy {
    /// Everything said so far.
    Inherit,
    /// A summary written by the `summarizer` function.
    Summarize,
    /// Only the original request and the handoff's reason.
    Isolate,
    /// The last `n` messages.
    LastN(u32),
}

impl ContextPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ContextPolicy::Inherit => "inherit",
            ContextPolicy::Summarize => "summarize",
            ContextPolicy::Isolate => "isolate",
            ContextPolicy::LastN(_) => "last_n",
        }
    }
}

/// A middleware by name, with its configuration (`{}` when none).
#[derive(Debug, Clone, PartialEq)]
pub struct MiddlewareSpec {
    pub name: String,
    pub config: Map<String, Value>,
}

/// `agent`: one turn of an agent, or of a hub with its spokes.
#[derive(Debug, Clone)]
pub struct AgentStep {
    pub agent: String,
    /// The run input's text when `None`.
    pub prompt: Option<Template>,
    /// Earlier agent steps whose exchanges come first.
    pub history: Vec<StepId>,
    /// Agents the hub may ask (`ask_<spoke>` tools).
    pub spokes: Vec<String>,
}

/// `handoff`: control passes between agents by `transfer_to_<agent>` calls.
#[derive(Debug, Clone)]
pub struct HandoffStep {
    pub start: String,
    pub prompt: Option<Template>,
    pub max_transitions: u32,
    pub on_no_handoff: NoHandoff,
}

/// What happens when the active agent answers without handing off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoHandoff {
    End,
    AskHuman,
}

/// `group_chat`: participants take turns on one transcript.
#[derive(Debug, Clone)]
pub struct GroupChatStep {
    pub participants: Vec<String>,
    pub prompt: Option<Template>,
    pub selector: SpeakerSelector,
    pub termination: Option<Termination>,
    /// A safety limit whatever the termination says.
    pub max_rounds: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpeakerSelector {
    pub kind: SelectorKind,
    pub seed: Option<u64>,
    /// The model alias an `llm` selector asks; the run's when `None`.
    pub model: Option<String>,
    /// How often a wrong name is sent back before `fallback` decides.
    pub retries: u32,
    pub fallback: SelectorKind,
}

text_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum SelectorKind {
        RoundRobin = "round_robin",
        Random = "random",
        Llm = "llm",
    }
}

/// When a group chat ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Termination {
    MaxRounds(u32),
    /// An answer containing the keyword.
    Keyword(String),
    /// Tokens the chat's model calls used, prompt and completion.
    TokenBudget(u64),
    Any(Vec<Termination>),
    All(Vec<Termination>),
}

/// What a termination is checked against after each round.
pub struct ChatState<'a> {
    pub rounds: u32,
    pub last_text: &'a str,
    pub tokens: u64,
}

impl Termination {
    pub fn holds(&self, state: &ChatState<'_>) -> bool {
        match self {
            Termination::MaxRounds(n) => state.rounds >= *n,
            Termination::Keyword(k) => state.last_text.contains(k.as_str()),
            Termination::TokenBudget(n) => state.tokens >= *n,
            Termination::Any(all) => all.iter().any(|t| t.holds(state)),
            Termination::All(all) => all.iter().all(|t| t.holds(state)),
        }
    }

    /// Parses a termination the schema already checked; `None` if it could not.
    pub fn parse(raw: &Value) -> Option<Termination> {
        let (key, value) = raw.as_object()?.iter().next()?;
        let list = || -> Option<Vec<Termination>> {
            value.as_array()?.iter().map(Termination::parse).collect()
        };
        Some(match key.as_str() {
            "max_rounds" => Termination::MaxRounds(u32::try_from(value.as_u64()?).ok()?),
            "keyword" => Termination::Keyword(value.as_str()?.to_owned()),
            "token_budget" => Termination::TokenBudget(value.as_u64()?),
            "any" => Termination::Any(list()?),
            "all" => Termination::All(list()?),
            _ => return None,
        })
    }
}

/// `workflow`: a workflow run inside the step.
#[derive(Debug, Clone)]
pub struct WorkflowStep {
    pub workflow: String,
    /// The run input when `None`.
    pub input: Option<Template>,
}

/// The names a plan's steps may use besides tools and functions.
#[derive(Debug, Clone, Default)]
pub struct TeamNames {
    pub agents: BTreeSet<String>,
    pub workflows: BTreeSet<String>,
}

/// The default `max_transitions` of a handoff step.
pub const DEFAULT_MAX_TRANSITIONS: u32 = 10;
/// The default `max_rounds` of a group chat.
pub const DEFAULT_MAX_ROUNDS: u32 = 20;

/// Checks the plan's `agents`, `middleware` and the names of its `workflows`; the agents
/// compiled, and every problem with a pointer into the plan. Nested workflows are validated
/// by the caller (they are plans).
pub fn check_team(
    doc: &Map<String, Value>,
    catalog: Catalog<'_>,
    outer: Option<&TeamNames>,
) -> (Team, TeamNames, Vec<Problem>) {
    let mut problems = Vec::new();
    let mut names = outer.cloned().unwrap_or_default();
    let raw_agents = doc.get("agents").and_then(Value::as_object);
    names
        .agents
        .extend(raw_agents.into_iter().flatten().map(|(k, _)| k.clone()));
    names.workflows.extend(
        doc.get("workflows")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, _)| k.clone()),
    );
    let mut team = Team::default();
    let has_agent = |agent: &str| names.agents.contains(agent);
    let known = AgentCatalog {
        catalog,
        has_agent: &has_agent,
    };
    for (name, definition) in raw_agents.into_iter().flatten() {
        let at = format!("/agents/{}", super::template::escape_pointer(name));
        let found = validate_agent(name, definition, &known);
        let mut ok = found.is_empty();
        problems.extend(
            found
                .into_iter()
                .map(|p| Problem::new(format!("{at}{}", p.pointer), p.message)),
        );
        if let Some(w) = definition.get("workflow").and_then(Value::as_str)
            && !names.workflows.contains(w)
        {
            problems.push(Problem::new(
                format!("{at}/workflow"),
                format!(
                    "no workflow named `{w}` (neither in the plan's `workflows` nor registered)"
                ),
            ));
            ok = false;
        }
        if ok && let Some(agent) = compile_agent(name, definition) {
            team.agents.insert(name.clone(), Arc::new(agent));
        }
    }
    team.middleware = middleware_list(doc.get("middleware"), "/middleware", &mut problems);
    (team, names, problems)
}

/// Middleware items as written (names checked against the built-ins).
pub fn middleware_list(
    raw: Option<&Value>,
    pointer: &str,
    problems: &mut Vec<Problem>,
) -> Vec<MiddlewareSpec> {
    let mut out = Vec::new();
    for (i, item) in raw
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let (name, config, at) = match item {
            Value::String(s) => (s.clone(), Map::new(), format!("{pointer}/{i}")),
            other => (
                other
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                other
                    .get("config")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default(),
                format!("{pointer}/{i}/name"),
            ),
        };
        if !super::middleware_spec::NAMES.contains(&name.as_str()) {
            problems.push(Problem::new(
                at,
                format!(
                    "unknown middleware `{name}`; orca has {}",
                    super::middleware_spec::NAMES.join(", ")
                ),
            ));
            continue;
        }
        let spec = MiddlewareSpec { name, config };
        problems.extend(super::middleware_spec::config_problems(
            &spec,
            item,
            &format!("{pointer}/{i}"),
        ));
        out.push(spec);
    }
    out
}

/// An agent definition that passed [`validate_agent`], typed.
pub fn compile_agent(name: &str, definition: &Value) -> Option<AgentSpec> {
    let text = |k: &str| definition.get(k).and_then(Value::as_str).map(str::to_owned);
    let handoffs = definition
        .get("handoffs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|h| match h {
            Value::String(to) => Some(HandoffEdge {
                to: to.clone(),
                context: ContextPolicy::Inherit,
                description: None,
            }),
            obj => {
                let context = match obj.get("context").and_then(Value::as_str) {
                    Some("summarize") => ContextPolicy::Summarize,
                    Some("isolate") => ContextPolicy::Isolate,
                    Some("last_n") => ContextPolicy::LastN(
                        obj.get("last_n")
                            .and_then(Value::as_u64)
                            .and_then(|n| u32::try_from(n).ok())
                            .unwrap_or(1),
                    ),
                    _ => ContextPolicy::Inherit,
                };
                Some(HandoffEdge {
                    to: obj.get("to")?.as_str()?.to_owned(),
                    context,
                    description: obj
                        .get("description")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                })
            }
        })
        .collect();
    let mut ignored = Vec::new();
    let output_schema = match definition.get("output_schema") {
        Some(s) => Some(JsonSchema::compile(s).ok()?),
        None => None,
    };
    Some(AgentSpec {
        name: name.to_owned(),
        description: text("description"),
        instructions: text("instructions").unwrap_or_default(),
        model: text("model"),
        tools: definition
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect(),
        output_schema,
        handoffs,
        middleware: middleware_list(definition.get("middleware"), "", &mut ignored),
        workflow: (text("kind").as_deref() == Some("workflow"))
            .then(|| text("workflow"))
            .flatten(),
        memory: AgentMemory::of(definition.get("memory")),
    })
}

/// The selector of a group chat input the schema already checked.
pub fn parse_selector(raw: Option<&Value>) -> Option<SpeakerSelector> {
    let mut selector = SpeakerSelector {
        kind: SelectorKind::RoundRobin,
        seed: None,
        model: None,
        retries: 2,
        fallback: SelectorKind::RoundRobin,
    };
    match raw {
        None => {}
        Some(Value::String(s)) => selector.kind = SelectorKind::parse(s)?,
        Some(obj) => {
            selector.kind = SelectorKind::parse(obj.get("kind")?.as_str()?)?;
            selector.seed = obj.get("seed").and_then(Value::as_u64);
            selector.model = obj.get("model").and_then(Value::as_str).map(str::to_owned);
            if let Some(r) = obj.get("retries").and_then(Value::as_u64) {
                selector.retries = u32::try_from(r).ok()?;
            }
            if let Some(f) = obj.get("fallback").and_then(Value::as_str) {
                selector.fallback = SelectorKind::parse(f)?;
            }
        }
    }
    Some(selector)
}

/// The agents a handoff starting at `start` may reach, `start` first, then in the order the
/// edges are met (breadth first).
pub fn reachable(team: &BTreeMap<String, Arc<AgentSpec>>, start: &str) -> Vec<String> {
    let mut out = vec![start.to_owned()];
    let mut i = 0;
    while i < out.len() {
        if let Some(agent) = team.get(&out[i]) {
            for edge in &agent.handoffs {
                if !out.contains(&edge.to) {
                    out.push(edge.to.clone());
                }
            }
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn terminations_compose() {
        let t = Termination::parse(&json!({ "any": [ { "max_rounds": 3 }, { "all": [ { "keyword": "DONE" }, { "token_budget": 10 } ] } ] })).unwrap();
        let state = |rounds, last_text, tokens| ChatState {
            rounds,
            last_text,
            tokens,
        };
        assert!(!t.holds(&state(1, "DONE", 5)));
        assert!(t.holds(&state(1, "DONE", 10)));
        assert!(t.holds(&state(3, "", 0)));
        assert!(!t.holds(&state(2, "done", 99)));
        assert_eq!(Termination::parse(&json!({ "nope": 1 })), None);
    }

    #[test]
    fn selectors_have_defaults() {
        let s = parse_selector(Some(
            &json!({ "kind": "llm", "fallback": "random", "seed": 7 }),
        ))
        .unwrap();
        assert_eq!(s.kind, SelectorKind::Llm);
        assert_eq!(s.fallback, SelectorKind::Random);
        assert_eq!(s.retries, 2);
        assert_eq!(parse_selector(None).unwrap().kind, SelectorKind::RoundRobin);
        assert_eq!(parse_selector(Some(&json!("teleport"))), None);
    }
}
