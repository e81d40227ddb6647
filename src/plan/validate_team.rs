//! The checks of the multi-agent step kinds (`agent`, `handoff`, `group_chat`, `workflow`):
//! every agent and workflow they name is one of the plan's (the API copies registered ones in
//! when a run is created), a hub-and-spoke team has a hub, and a group chat's selector and
//! termination are readable.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::{Checker, Ctx, member};
use crate::domain::StepId;
use crate::plan::Problem;
use crate::plan::graph::ValidPlan;
use crate::plan::spec::{KindSpec, StepSpec};
use crate::plan::team::{
    AgentStep, DEFAULT_MAX_ROUNDS, DEFAULT_MAX_TRANSITIONS, GroupChatStep, HandoffStep, NoHandoff,
    Team, Termination, WorkflowStep, parse_selector, reachable,
};
use crate::plan::template::{Template, escape_pointer};

impl Checker<'_> {
    pub(super) fn agent_step(
        &mut self,
        input: &Map<String, Value>,
        pointer: &str,
        ctx: &Ctx,
    ) -> Option<KindSpec> {
        let at = |name: &str| member(pointer, name);
        let prompt = self.optional_template(input.get("prompt"), &at("prompt"), ctx);
        let spokes = self.agent_names(input.get("spokes"), &at("spokes"));
        let Some(agent) = input.get("agent").and_then(Value::as_str) else {
            let message = if input.contains_key("spokes") {
                "a hub-and-spoke team needs a hub: name the agent that delegates to the spokes in `agent`"
            } else {
                "`agent` names the agent that takes the turn"
            };
            self.problems.push(Problem::new(at("agent"), message));
            return None;
        };
        let known = self.known_agent(agent, &at("agent"));
        if spokes.iter().flatten().any(|s| s == agent) {
            self.problems.push(Problem::new(
                at("spokes"),
                format!("the hub `{agent}` cannot be one of its own spokes"),
            ));
            return None;
        }
        let mut history = Vec::new();
        for (i, raw) in input
            .get("history")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let Some(id) = raw.as_str() else { continue };
            let shown = format!("`{id}`");
            if let Some(message) = self.step_ref_problem(id, &shown, ctx) {
                self.problems
                    .push(Problem::new(format!("{}/{i}", at("history")), message));
                continue;
            }
            history.extend(StepId::new(id).ok());
        }
        Some(KindSpec::Agent(AgentStep {
            agent: known.then(|| agent.to_owned())?,
            prompt: prompt?,
            history,
            spokes: spokes?,
        }))
    }

    pub(super) fn handoff_step(
        &mut self,
        input: &Map<String, Value>,
        pointer: &str,
        ctx: &Ctx,
    ) -> Option<KindSpec> {
        let at = |name: &str| member(pointer, name);
        let prompt = self.optional_template(input.get("prompt"), &at("prompt"), ctx);
        let start = input.get("start").and_then(Value::as_str)?;
        let known = self.known_agent(start, &at("start"));
        let max_transitions = match input.get("max_transitions") {
            None => Some(DEFAULT_MAX_TRANSITIONS),
            Some(v) => v.as_u64().and_then(|n| u32::try_from(n).ok()),
        };
        let on_no_handoff = match input.get("on_no_handoff").and_then(Value::as_str) {
            None | Some("end") => Some(NoHandoff::End),
            Some("ask_human") => Some(NoHandoff::AskHuman),
            Some(_) => None,
        };
        Some(KindSpec::Handoff(HandoffStep {
            start: known.then(|| start.to_owned())?,
            prompt: prompt?,
            max_transitions: max_transitions?,
            on_no_handoff: on_no_handoff?,
        }))
    }

    pub(super) fn group_chat_step(
        &mut self,
        input: &Map<String, Value>,
        pointer: &str,
        ctx: &Ctx,
    ) -> Option<KindSpec> {
        let at = |name: &str| member(pointer, name);
        let prompt = self.optional_template(input.get("prompt"), &at("prompt"), ctx);
        let participants = self.agent_names(input.get("participants"), &at("participants"));
        let selector = parse_selector(input.get("selector"));
        let termination = match input.get("termination") {
            None => Some(None),
            Some(raw) => Termination::parse(raw).map(Some),
        };
        let max_rounds = match input.get("max_rounds") {
            None => Some(DEFAULT_MAX_ROUNDS),
            Some(v) => v.as_u64().and_then(|n| u32::try_from(n).ok()),
        };
        let participants = participants?;
        if participants.is_empty() {
            self.problems.push(Problem::new(
                at("participants"),
                "a group chat needs at least one participant",
            ));
            return None;
        }
        Some(KindSpec::GroupChat(GroupChatStep {
            participants,
            prompt: prompt?,
            selector: selector?,
            termination: termination?,
            max_rounds: max_rounds?,
        }))
    }

    pub(super) fn workflow_step(
        &mut self,
        input: &Map<String, Value>,
        pointer: &str,
        ctx: &Ctx,
    ) -> Option<KindSpec> {
        let at = |name: &str| member(pointer, name);
        let workflow = input.get("workflow").and_then(Value::as_str)?;
        let known = self.names.workflows.contains(workflow);
        if !known {
            self.problems.push(Problem::new(
                at("workflow"),
                format!(
                    "no workflow named `{workflow}` (define it in the plan's `workflows` or PUT /v1/workflows/{workflow})"
                ),
            ));
        }
        let input_template = match input.get("input") {
            None => Some(None),
            Some(raw) => self.template(raw, &at("input"), ctx).map(Some),
        };
        Some(KindSpec::Workflow(WorkflowStep {
            workflow: known.then(|| workflow.to_owned())?,
            input: input_template?,
        }))
    }

    /// Whether `name` is an agent of the plan; a problem at `pointer` when not.
    fn known_agent(&mut self, name: &str, pointer: &str) -> bool {
        if self.names.agents.contains(name) {
            return true;
        }
        let registered = self.catalog.registered_agents.iter();
        let known = self.names.agents.iter().chain(registered);
        let near = crate::suggest::did_you_mean(name, known.map(String::as_str));
        self.problems.push(Problem::new(
            pointer,
            format!(
                "no agent named `{name}`{near} (define it in the plan's `agents` or PUT /v1/agents/{name})"
            ),
        ));
        false
    }

    /// A list of agent names, each known; `Some(empty)` when absent.
    fn agent_names(&mut self, raw: Option<&Value>, pointer: &str) -> Option<Vec<String>> {
        let Some(raw) = raw else {
            return Some(Vec::new());
        };
        let mut out = Some(Vec::new());
        for (i, name) in raw.as_array()?.iter().enumerate() {
            let Some(name) = name.as_str() else {
                out = None;
                continue;
            };
            if !self.known_agent(name, &format!("{pointer}/{i}")) {
                out = None;
            }
            if let Some(out) = &mut out {
                out.push(name.to_owned());
            }
        }
        out
    }

    /// An optional template: `Some(None)` when absent, `None` when it has a problem.
    fn optional_template(
        &mut self,
        raw: Option<&Value>,
        pointer: &str,
        ctx: &Ctx,
    ) -> Option<Option<Template>> {
        match raw {
            None => Some(None),
            Some(raw) => self.template(raw, pointer, ctx).map(Some),
        }
    }
}

impl Checker<'_> {
    /// Validates the plan's `workflows` (each a workflow whose steps may name the plan's
    /// agents and workflows) into the team, and refuses workflows that nest themselves.
    pub(super) fn nested_workflows(&mut self, doc: &Map<String, Value>) {
        let Some(raw) = doc.get("workflows").and_then(Value::as_object) else {
            return;
        };
        let names = self.names.clone();
        let mut refs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (name, definition) in raw {
            let at = format!("/workflows/{}", escape_pointer(name));
            match super::validate_workflow_within(definition, self.catalog, Some(&names)) {
                Ok(workflow) => {
                    refs.insert(name.clone(), nested_names(&workflow.plan, &self.team));
                    self.team
                        .workflows
                        .insert(name.clone(), Arc::new(workflow.plan));
                }
                Err(problems) => self.problems.extend(
                    problems
                        .into_iter()
                        .map(|p| Problem::new(format!("{at}{}", p.pointer), p.message)),
                ),
            }
        }
        for start in refs.keys() {
            if let Some(cycle) = cycle_from(start, &refs) {
                self.problems.push(Problem::new(
                    format!("/workflows/{}", escape_pointer(start)),
                    format!("workflows nest in a cycle: {}", cycle.join(" → ")),
                ));
            }
        }
    }
}

/// The workflows a plan's steps run: `workflow` steps and workflow agents, at any depth.
pub(crate) fn nested_names(plan: &ValidPlan, team: &Team) -> BTreeSet<String> {
    fn walk(spec: &StepSpec, team: &Team, out: &mut BTreeSet<String>) {
        let agents: Vec<String> = match &spec.kind {
            KindSpec::Workflow(w) => {
                out.insert(w.workflow.clone());
                Vec::new()
            }
            KindSpec::Agent(a) => std::iter::once(a.agent.clone())
                .chain(a.spokes.iter().cloned())
                .collect(),
            KindSpec::GroupChat(g) => g.participants.clone(),
            KindSpec::Handoff(h) => reachable(&team.agents, &h.start),
            _ => Vec::new(),
        };
        out.extend(
            agents
                .iter()
                .filter_map(|a| team.agents.get(a)?.workflow.clone()),
        );
        for child in spec.children() {
            walk(child, team, out);
        }
    }
    let mut out = BTreeSet::new();
    for spec in plan.specs() {
        walk(spec, team, &mut out);
    }
    out
}

/// A path from `start` back to itself through `refs`, if there is one.
fn cycle_from(start: &str, refs: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    let mut path = vec![start.to_owned()];
    let mut seen = BTreeSet::new();
    fn dfs(
        at: &str,
        start: &str,
        refs: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in refs.get(at).into_iter().flatten() {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if dfs(next, start, refs, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    dfs(start, start, refs, &mut path, &mut seen).then_some(path)
}
