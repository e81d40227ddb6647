//! Validation of plans and workflows: the schema first, then every check a schema cannot
//! express, all problems reported at once, each with a JSON Pointer into the document.
//!
//! Owns the meaning of a plan: unique ids, known dependencies, no cycles, known tools and
//! their literal arguments, references that point at data that will exist, CEL that parses,
//! branch targets that depend on their branch. It must not trust the schema to have passed:
//! the semantic checks run on whatever shape they find and skip what they cannot read, so an
//! odd document gives problems, never a panic.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use petgraph::algo::tarjan_scc;
use petgraph::graph::{DiGraph, NodeIndex};
use serde_json::{Map, Value};

use super::Problem;
use super::catalog::{Catalog, KnownFunctions, KnownTools};
use super::condition::{CelRef, Condition};
use super::graph::{SessionReads, ValidPlan};
use super::schema::{self, AGENT_PLAN, FIXED_WORKFLOW};
use super::spec::{
    Aggregation, JsonSchema, KindSpec, LoopOver, SchemaViolation, StepSpec, WaitSpec,
};
use super::team::{Team, TeamNames, check_team};
use super::template::{Reference, Root, Template, escape_pointer};
use crate::domain::{Orchestration, Plan, PlanSettings, RetryPolicy, Step, StepId, StepKind};

#[path = "validate_team.rs"]
mod team_steps;

/// Deepest nesting of composite steps (a parallel in a loop in a sequential is 3 levels).
pub const MAX_NESTING: usize = 8;
/// Most steps in a plan, children included.
pub const MAX_TOTAL_STEPS: usize = 2000;
/// The plan id used when a plan gives none.
pub const DEFAULT_PLAN_ID: &str = "plan";

/// A validated fixed workflow.
#[derive(Debug, Clone)]
pub struct Workflow {
    pub name: String,
    pub description: Option<String>,
    pub version: Option<String>,
    /// The JSON Schema the run input must satisfy, as given.
    pub input_schema: Option<Value>,
    pub plan: ValidPlan,
    input_validator: Option<JsonSchema>,
}

impl Workflow {
    /// Every way `input` breaks the workflow's input schema (none when it has no schema).
    pub fn check_input(&self, input: &Value) -> Vec<SchemaViolation> {
        self.input_validator
            .as_ref()
            .map(|s| s.check(input))
            .unwrap_or_default()
    }
}

/// Validates an AgentPlan document against `schemas/AgentPlan.schema.json` and every semantic
/// rule. The plan's orchestration is `planner`; set another with
/// [`ValidPlan::with_orchestration`].
pub fn validate_plan<'c>(
    value: &Value,
    catalog: impl Into<Catalog<'c>>,
) -> Result<ValidPlan, Vec<Problem>> {
    let catalog = catalog.into();
    let schema_problems = schema::problems(&AGENT_PLAN, value);
    let checked = Checker::run(value, catalog, None);
    let id = value
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_PLAN_ID)
        .to_owned();
    let name = value.get("name").and_then(Value::as_str).map(str::to_owned);
    let description = value
        .get("description")
        .and_then(Value::as_str)
        .map(str::to_owned);
    finish(
        schema_problems,
        checked,
        Header {
            id,
            name,
            description,
            orchestration: Orchestration::Planner,
        },
    )
}

/// A workflow definition as a plan document: the workflow-only fields removed.
pub fn workflow_plan_doc(mut definition: Value) -> Value {
    if let Some(obj) = definition.as_object_mut() {
        obj.remove("version");
        obj.remove("input_schema");
    }
    definition
}

/// Validates a FixedWorkflow document: the workflow fields, then the plan it holds (whose
/// pointers are the same as in an AgentPlan, the plan fields being at the top level).
pub fn validate_workflow<'c>(
    value: &Value,
    catalog: impl Into<Catalog<'c>>,
) -> Result<Workflow, Vec<Problem>> {
    validate_workflow_within(value, catalog.into(), None)
}

/// [`validate_workflow`], for a workflow nested in a plan whose agents and workflows
/// (`outer`) its steps may name.
fn validate_workflow_within(
    value: &Value,
    catalog: Catalog<'_>,
    outer: Option<&TeamNames>,
) -> Result<Workflow, Vec<Problem>> {
    let problems = schema::problems(&FIXED_WORKFLOW, value);
    let mut checked = Checker::run(value, catalog, outer);
    let text = |k: &str| value.get(k).and_then(Value::as_str).map(str::to_owned);
    let input_schema = value.get("input_schema").cloned();
    let input_validator = match input_schema.as_ref().filter(|s| s.is_object()) {
        Some(s) => match JsonSchema::compile(s) {
            Ok(v) => Some(v),
            Err(e) => {
                checked.problems.push(Problem::new(
                    "/input_schema",
                    format!("not a valid JSON Schema: {e}"),
                ));
                None
            }
        },
        None => None,
    };
    let name = text("name").unwrap_or_default();
    let header = Header {
        id: text("id").unwrap_or_else(|| name.clone()),
        name: Some(name.clone()),
        description: text("description"),
        orchestration: Orchestration::Fixed,
    };
    let plan = finish(problems, checked, header)?;
    Ok(Workflow {
        name,
        description: text("description"),
        version: text("version"),
        input_schema,
        plan,
        input_validator,
    })
}

struct Header {
    id: String,
    name: Option<String>,
    description: Option<String>,
    orchestration: Orchestration,
}

/// Combines schema and semantic results: a plan only when both found nothing.
fn finish(
    mut problems: Vec<Problem>,
    checked: Checked,
    header: Header,
) -> Result<ValidPlan, Vec<Problem>> {
    let schema_passed = problems.is_empty();
    problems.extend(checked.problems);
    // Shape problems repeat what the schema says in worse words; they only matter if the
    // schema let something through that the typed parse could not read.
    if schema_passed {
        problems.extend(checked.shape);
    }
    let mut seen = HashSet::new();
    problems.retain(|p| seen.insert((p.pointer.clone(), p.message.clone())));
    if !problems.is_empty() {
        return Err(problems);
    }
    let (Some(specs), Some(steps)) = (checked.specs, checked.steps) else {
        // Unreachable while every `None` above comes with a problem; reported, not panicked,
        // should a future check forget one.
        return Err(vec![Problem::new("", "the plan could not be read")]);
    };
    let plan = Plan {
        id: header.id,
        version: 1,
        orchestration: header.orchestration,
        name: header.name,
        description: header.description,
        steps,
        context: checked.variables,
        settings: checked.settings,
        output: checked.output_raw,
        session_variables: checked.session_raw,
        agents: checked.agents_raw,
        workflows: checked.workflows_raw,
        middleware: checked.middleware_raw,
    };
    let mut valid = ValidPlan::new(plan, specs, checked.dependencies, checked.output);
    valid.set_session_writes(checked.session_writes);
    valid.set_session_reads(checked.session_reads);
    valid.set_team(checked.team);
    Ok(valid)
}

/// What the semantic pass found and built.
struct Checked {
    problems: Vec<Problem>,
    shape: Vec<Problem>,
    /// Top-level specs, when every step could be built.
    specs: Option<Vec<StepSpec>>,
    steps: Option<Vec<Step>>,
    /// Per top-level step, the positions of its dependencies in declaration order.
    dependencies: Vec<Vec<usize>>,
    variables: Map<String, Value>,
    settings: PlanSettings,
    output: Option<Template>,
    output_raw: Option<Value>,
    /// `session_variables` as written, and parsed.
    session_raw: Map<String, Value>,
    session_writes: Vec<(String, Template)>,
    /// The plan's agents, nested workflows and middleware, compiled; the raw members are
    /// kept in the domain plan.
    team: Team,
    agents_raw: Map<String, Value>,
    workflows_raw: Map<String, Value>,
    middleware_raw: Vec<Value>,
    session_reads: SessionReads,
}

impl Checked {
    /// The plan's `agents`, `workflows` and `middleware` as written, for the domain plan.
    fn keep_team_members(&mut self, doc: &Map<String, Value>) {
        let member_of = |k: &str| doc.get(k).and_then(Value::as_object).cloned();
        self.agents_raw = member_of("agents").unwrap_or_default();
        self.workflows_raw = member_of("workflows").unwrap_or_default();
        self.middleware_raw = doc
            .get("middleware")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
    }
}

/// Where a step id was first declared.
struct Declared {
    pointer: String,
    /// Position of the top-level step that holds it (itself for top-level steps).
    top: usize,
    /// The id of the composite step directly holding it; `None` for top-level steps.
    parent: Option<String>,
}

/// What the step being checked may read.
#[derive(Clone)]
struct Ctx {
    /// This step's id (empty when unreadable).
    id: String,
    /// The id of its top-level ancestor (itself at the top level).
    top_id: String,
    /// Step ids its templates and conditions may reference.
    readable: HashSet<String>,
    item: bool,
    index: bool,
    /// For a child of a sequential or loop body: the ids of its later siblings, which a branch
    /// there may choose between. `None` at the top level and inside a parallel.
    later_siblings: Option<Vec<String>>,
    top_level: bool,
    depth: usize,
}

struct Checker<'a> {
    catalog: Catalog<'a>,
    tools: &'a dyn KnownTools,
    functions: Option<&'a dyn KnownFunctions>,
    problems: Vec<Problem>,
    shape: Vec<Problem>,
    /// Declared variable names; `None` when `variables` is unreadable (the schema says why).
    vars: Option<HashSet<String>>,
    declared: HashMap<String, Declared>,
    /// Top-level id → position (first declaration).
    top: HashMap<String, usize>,
    /// Raw `depends_on` strings per top-level step, for branch-target checks.
    raw_deps: Vec<Vec<String>>,
    total_steps: usize,
    /// The agents and workflows steps may name.
    names: TeamNames,
    team: Team,
    /// The session variables its templates and conditions read.
    session_reads: SessionReads,
}

impl<'a> Checker<'a> {
    fn run(doc: &'a Value, catalog: Catalog<'a>, outer: Option<&TeamNames>) -> Checked {
        let mut c = Checker {
            catalog,
            tools: catalog.tools,
            functions: catalog.functions,
            problems: Vec::new(),
            shape: Vec::new(),
            vars: None,
            declared: HashMap::new(),
            top: HashMap::new(),
            raw_deps: Vec::new(),
            total_steps: 0,
            names: TeamNames::default(),
            team: Team::default(),
            session_reads: SessionReads::default(),
        };
        let Some(doc) = doc.as_object() else {
            c.shape.push(Problem::new("", "a plan is a JSON object"));
            return c.into_checked(None, None, Vec::new(), Map::new(), None);
        };
        let (team, names, problems) = check_team(doc, catalog, outer);
        c.problems.extend(problems);
        c.team = team;
        c.names = names;
        c.nested_workflows(doc);
        let variables = match doc.get("variables") {
            None => Some(Map::new()),
            Some(Value::Object(m)) => Some(m.clone()),
            Some(_) => None,
        };
        c.vars = variables
            .as_ref()
            .map(|m| m.keys().cloned().collect::<HashSet<_>>());
        let empty = Vec::new();
        let raw_steps = match doc.get("steps") {
            Some(Value::Array(steps)) => steps,
            _ => {
                c.shape
                    .push(Problem::new("/steps", "`steps` must be an array"));
                &empty
            }
        };

        // Ids first: references and dependencies may point forward.
        c.declare_all(raw_steps);
        let dependencies = c.dependencies(raw_steps);
        c.cycles(raw_steps, &dependencies);
        let (specs, steps) = c.top_steps(raw_steps, &dependencies);
        let output = doc.get("output").and_then(|raw| c.output(raw));
        let session_writes = doc
            .get("session_variables")
            .map(|raw| c.session_variables(raw))
            .unwrap_or_default();
        let settings = match doc.get("settings") {
            None => PlanSettings::default(),
            Some(raw) => serde_json::from_value(raw.clone()).unwrap_or_else(|e| {
                c.shape.push(Problem::new("/settings", e.to_string()));
                PlanSettings::default()
            }),
        };
        if let Some(answer) = &settings.answer_step
            && !c.top.contains_key(answer.as_str())
        {
            let message = match c.declared.get(answer.as_str()) {
                Some(_) => {
                    format!("`{answer}` is a child step; the answer step is a top-level one")
                }
                None => format!("no step has the id `{answer}`"),
            };
            c.problems
                .push(Problem::new("/settings/answer_step", message));
        }
        for (i, id) in settings.breakpoints.iter().enumerate() {
            if !c.declared.contains_key(id.as_str()) {
                let near = crate::suggest::did_you_mean(id, c.declared.keys().map(|k| k.as_str()));
                let message = format!("no step has the id `{id}`{near}");
                let pointer = format!("/settings/breakpoints/{i}");
                c.problems.push(Problem::new(pointer, message));
            }
        }
        let output_raw = doc.get("output").cloned();
        let mut checked = c.into_checked(
            specs,
            steps,
            dependencies,
            variables.unwrap_or_default(),
            output,
        );
        checked.settings = settings;
        checked.output_raw = output_raw;
        if let Some(Value::Object(raw)) = doc.get("session_variables") {
            checked.session_raw = raw.clone();
        }
        checked.session_writes = session_writes;
        checked.keep_team_members(doc);
        checked
    }

    /// Declares every step id (children included) and keeps each top-level step's raw
    /// `depends_on`.
    fn declare_all(&mut self, raw_steps: &[Value]) {
        for (i, raw) in raw_steps.iter().enumerate() {
            self.declare(raw, &format!("/steps/{i}"), i, None, 0);
            self.raw_deps.push(
                raw.get("depends_on")
                    .and_then(Value::as_array)
                    .map(|d| {
                        d.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default(),
            );
        }
        if self.total_steps > MAX_TOTAL_STEPS {
            self.problems.push(Problem::new(
                "/steps",
                format!(
                    "the plan has {} steps in all, children included; at most {MAX_TOTAL_STEPS} are allowed",
                    self.total_steps
                ),
            ));
        }
    }

    /// The typed spec and the domain step of every top-level step; `None` as soon as one
    /// cannot be built (its problems are recorded).
    fn top_steps(
        &mut self,
        raw_steps: &[Value],
        dependencies: &[Vec<usize>],
    ) -> (Option<Vec<StepSpec>>, Option<Vec<Step>>) {
        let mut specs = Some(Vec::with_capacity(raw_steps.len()));
        let mut steps = Some(Vec::with_capacity(raw_steps.len()));
        for (i, raw) in raw_steps.iter().enumerate() {
            let id = raw
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let readable = ancestors(i, dependencies)
                .into_iter()
                .filter_map(|a| raw_steps[a].get("id").and_then(Value::as_str))
                .map(str::to_owned)
                .collect();
            let ctx = Ctx {
                id: id.clone(),
                top_id: id,
                readable,
                item: false,
                index: false,
                later_siblings: None,
                top_level: true,
                depth: 0,
            };
            let pointer = format!("/steps/{i}");
            let spec = self.step(raw, &pointer, &ctx);
            let step = self.domain_step(raw, &pointer, &dependencies[i], raw_steps);
            match (spec, step) {
                (Some(spec), Some(step)) => {
                    if let (Some(specs), Some(steps)) = (&mut specs, &mut steps) {
                        specs.push(spec);
                        steps.push(step);
                    }
                }
                _ => {
                    specs = None;
                    steps = None;
                }
            }
        }
        (specs, steps)
    }

    /// The plan's `output` template: it may read every top-level step.
    fn output(&mut self, raw: &Value) -> Option<Template> {
        let ctx = self.plan_level();
        self.template(raw, "/output", &ctx)
    }

    /// The plan's `session_variables`: names, and templates that read what `output` reads.
    fn session_variables(&mut self, raw: &Value) -> Vec<(String, Template)> {
        let Some(members) = raw.as_object() else {
            self.shape.push(Problem::new(
                "/session_variables",
                "`session_variables` must be an object",
            ));
            return Vec::new();
        };
        let ctx = self.plan_level();
        let mut out = Vec::new();
        for (name, value) in members {
            let pointer = member("/session_variables", name);
            if !crate::plan::template::is_variable_name(name) {
                self.problems.push(Problem::new(
                    pointer,
                    format!(
                        "`{name}` is not a session variable name: 1-64 letters, digits, `_` or `-`"
                    ),
                ));
                continue;
            }
            if let Some(t) = self.template(value, &pointer, &ctx) {
                out.push((name.clone(), t));
            }
        }
        out
    }

    /// What plan-level templates (`output`, `session_variables`) may read: every top-level step.
    fn plan_level(&self) -> Ctx {
        Ctx {
            id: String::new(),
            top_id: String::new(),
            readable: self.top.keys().cloned().collect(),
            item: false,
            index: false,
            later_siblings: None,
            top_level: true,
            depth: 0,
        }
    }

    fn into_checked(
        self,
        specs: Option<Vec<StepSpec>>,
        steps: Option<Vec<Step>>,
        dependencies: Vec<Vec<usize>>,
        variables: Map<String, Value>,
        output: Option<Template>,
    ) -> Checked {
        Checked {
            problems: self.problems,
            shape: self.shape,
            specs,
            steps,
            dependencies,
            variables,
            settings: PlanSettings::default(),
            output,
            output_raw: None,
            session_raw: Map::new(),
            session_writes: Vec::new(),
            team: self.team,
            agents_raw: Map::new(),
            workflows_raw: Map::new(),
            middleware_raw: Vec::new(),
            session_reads: self.session_reads,
        }
    }

    /// Records the ids of `raw` and its descendants, reporting duplicates.
    fn declare(
        &mut self,
        raw: &Value,
        pointer: &str,
        top: usize,
        parent: Option<&str>,
        depth: usize,
    ) {
        self.total_steps += 1;
        let id = raw.get("id").and_then(Value::as_str);
        if let Some(id) = id {
            if let Some(first) = self.declared.get(id) {
                self.problems.push(Problem::new(
                    format!("{pointer}/id"),
                    format!(
                        "duplicate step id `{id}`: the step at {} has it already",
                        first.pointer
                    ),
                ));
            } else {
                self.declared.insert(
                    id.to_owned(),
                    Declared {
                        pointer: pointer.to_owned(),
                        top,
                        parent: parent.map(str::to_owned),
                    },
                );
                if parent.is_none() {
                    self.top.insert(id.to_owned(), top);
                }
            }
        }
        if depth >= MAX_NESTING {
            // Reported by `step`; going deeper would only multiply problems.
            return;
        }
        if let Some(children) = children_of(raw) {
            for (j, child) in children.iter().enumerate() {
                self.declare(
                    child,
                    &format!("{pointer}/input/steps/{j}"),
                    top,
                    Some(id.unwrap_or_default()),
                    depth + 1,
                );
            }
        }
    }

    /// Resolves every top-level `depends_on` entry to a position, reporting unknown ones.
    fn dependencies(&mut self, raw_steps: &[Value]) -> Vec<Vec<usize>> {
        let mut all = Vec::with_capacity(raw_steps.len());
        for (i, raw) in raw_steps.iter().enumerate() {
            let mut deps: Vec<usize> = Vec::new();
            let entries = raw.get("depends_on").and_then(Value::as_array);
            for (j, dep) in entries.into_iter().flatten().enumerate() {
                let Some(dep) = dep.as_str() else { continue };
                let pointer = format!("/steps/{i}/depends_on/{j}");
                if let Some(&d) = self.top.get(dep) {
                    if !deps.contains(&d) {
                        deps.push(d);
                    }
                } else if let Some(declared) = self.declared.get(dep) {
                    let top_id = raw_steps[declared.top]
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    self.problems.push(Problem::new(
                        pointer,
                        format!(
                            "`{dep}` is a child step of `{}`: depend on the top-level step `{top_id}` instead",
                            declared.parent.as_deref().unwrap_or_default()
                        ),
                    ));
                } else {
                    self.problems.push(Problem::new(
                        pointer,
                        format!("unknown dependency: no step has the id `{dep}`"),
                    ));
                }
            }
            all.push(deps);
        }
        all
    }

    /// Reports one cycle per strongly connected component, its steps in running order.
    fn cycles(&mut self, raw_steps: &[Value], dependencies: &[Vec<usize>]) {
        let mut graph: DiGraph<usize, ()> = DiGraph::with_capacity(raw_steps.len(), 0);
        let nodes: Vec<NodeIndex> = (0..raw_steps.len()).map(|i| graph.add_node(i)).collect();
        for (i, deps) in dependencies.iter().enumerate() {
            for &d in deps {
                graph.add_edge(nodes[d], nodes[i], ());
            }
        }
        let id_of = |i: usize| {
            raw_steps[i]
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned()
        };
        let mut found: Vec<Vec<usize>> = Vec::new();
        for scc in tarjan_scc(&graph) {
            let members: HashSet<usize> = scc.iter().map(|n| graph[*n]).collect();
            let Some(&start) = members.iter().min() else {
                continue;
            };
            let self_loop = dependencies[start].contains(&start);
            if members.len() == 1 && !self_loop {
                continue;
            }
            found.push(shortest_cycle(start, &members, dependencies));
        }
        found.sort();
        for cycle in found {
            // The pointer is the dependency that closes the cycle: the first step's entry
            // naming the last.
            let (first, last) = (cycle[0], cycle[cycle.len() - 1]);
            let j = raw_steps[first]
                .get("depends_on")
                .and_then(Value::as_array)
                .and_then(|d| d.iter().position(|v| v.as_str() == Some(&id_of(last))))
                .unwrap_or(0);
            let mut names: Vec<String> = cycle.iter().map(|&i| id_of(i)).collect();
            names.push(id_of(first));
            self.problems.push(Problem::new(
                format!("/steps/{first}/depends_on/{j}"),
                format!("cycle: {}", names.join(" → ")),
            ));
        }
    }

    /// Checks one step (and its children) and builds its spec; `None` if anything is wrong.
    fn step(&mut self, raw: &Value, pointer: &str, ctx: &Ctx) -> Option<StepSpec> {
        let Some(obj) = raw.as_object() else {
            self.shape
                .push(Problem::new(pointer, "a step is a JSON object"));
            return None;
        };
        let id = obj
            .get("id")
            .and_then(Value::as_str)
            .and_then(|s| StepId::new(s).ok());
        let kind = obj
            .get("kind")
            .and_then(|k| serde_json::from_value::<StepKind>(k.clone()).ok());
        let name = obj.get("name").and_then(Value::as_str).map(str::to_owned);
        let timeout_ms = match obj.get("timeout_ms") {
            None => Some(None),
            Some(v) => v.as_u64().map(Some),
        };
        let retry_policy = match obj.get("retry_policy") {
            None => Some(None),
            Some(v) => serde_json::from_value::<RetryPolicy>(v.clone())
                .ok()
                .map(Some),
        };
        let expect = match obj.get("expect") {
            None => Some(None),
            Some(raw) => self
                .condition(raw, &format!("{pointer}/expect"), ctx)
                .map(Some),
        };
        let input = obj.get("input").and_then(Value::as_object);
        let reported_before = self.problems.len() + self.shape.len();
        if ctx.depth > MAX_NESTING {
            self.problems.push(Problem::new(
                pointer,
                format!("steps nest too deeply: at most {MAX_NESTING} levels of parallel, sequential and loop"),
            ));
            return None;
        }
        let kind_spec = match (kind, input) {
            (Some(kind), Some(input)) => self.kind(kind, input, &format!("{pointer}/input"), ctx),
            _ => None,
        };
        let (Some(id), Some(kind_spec), Some(timeout_ms), Some(retry_policy), Some(expect)) =
            (id, kind_spec, timeout_ms, retry_policy, expect)
        else {
            // A part that failed without saying why (the schema should have): say something.
            if self.problems.len() + self.shape.len() == reported_before {
                self.shape.push(Problem::new(
                    pointer,
                    "this step could not be read: it needs a valid `id`, a plan `kind` and an `input` object",
                ));
            }
            return None;
        };
        Some(StepSpec {
            id,
            name,
            retry_policy,
            timeout_ms,
            priority: obj.get("priority").and_then(Value::as_i64).unwrap_or(0),
            expect,
            pointer: pointer.to_owned(),
            metadata: obj
                .get("metadata")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
            kind: kind_spec,
        })
    }

    /// The kind-specific part of a step, from its `input`.
    fn kind(
        &mut self,
        kind: StepKind,
        input: &Map<String, Value>,
        pointer: &str,
        ctx: &Ctx,
    ) -> Option<KindSpec> {
        match kind {
            StepKind::Llm => self.llm(input, pointer, ctx),
            StepKind::Tool => self.tool(input, pointer, ctx),
            StepKind::Branch => self.branch(input, pointer, ctx),
            StepKind::Parallel => {
                let aggregation = match input.get("aggregation") {
                    None => Some(Aggregation::All),
                    Some(a) => a.as_str().and_then(Aggregation::parse),
                };
                let steps = self.children(input, pointer, ctx, Body::Parallel);
                Some(KindSpec::Parallel {
                    steps: steps?,
                    aggregation: aggregation?,
                })
            }
            StepKind::Sequential => Some(KindSpec::Sequential {
                steps: self.children(input, pointer, ctx, Body::Sequence)?,
            }),
            StepKind::Loop => self.repeat(input, pointer, ctx),
            StepKind::Wait => self.wait(input, pointer),
            StepKind::UserInput => {
                let prompt = input
                    .get("prompt")
                    .and_then(|p| self.template(p, &member(pointer, "prompt"), ctx));
                let schema = self.json_schema(input.get("schema"), &member(pointer, "schema"));
                Some(KindSpec::UserInput {
                    prompt: prompt?,
                    schema: schema?,
                })
            }
            StepKind::Agent => self.agent_step(input, pointer, ctx),
            StepKind::Handoff => self.handoff_step(input, pointer, ctx),
            StepKind::GroupChat => self.group_chat_step(input, pointer, ctx),
            StepKind::Workflow => self.workflow_step(input, pointer, ctx),
        }
    }

    fn llm(&mut self, input: &Map<String, Value>, pointer: &str, ctx: &Ctx) -> Option<KindSpec> {
        let at = |name: &str| member(pointer, name);
        if let Some(function) = input.get("function") {
            return self.function_call(function, input.get("arguments"), pointer, ctx);
        }
        let prompt = input
            .get("prompt")
            .and_then(|p| self.template(p, &at("prompt"), ctx));
        let system = match input.get("system") {
            None => Some(None),
            Some(s) => self.template(s, &at("system"), ctx).map(Some),
        };
        let model = input
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let output_schema = self.json_schema(input.get("output_schema"), &at("output_schema"));
        Some(KindSpec::Llm {
            prompt: prompt?,
            system: system?,
            model,
            output_schema: output_schema?,
        })
    }

    /// An `llm` step that calls a named function with `arguments`.
    fn function_call(
        &mut self,
        function: &Value,
        arguments: Option<&Value>,
        pointer: &str,
        ctx: &Ctx,
    ) -> Option<KindSpec> {
        let at = |name: &str| member(pointer, name);
        let empty = Value::Object(Map::new());
        let arguments = self.template(arguments.unwrap_or(&empty), &at("arguments"), ctx);
        let name = function.as_str()?;
        let known = self.functions.is_some_and(|f| f.has_function(name));
        if !known {
            let names = self
                .functions
                .map(|f| f.function_names())
                .unwrap_or_default();
            self.problems.push(Problem::new(
                at("function"),
                format!(
                    "unknown LLM function `{name}`; known functions: {}",
                    names.join(", ")
                ),
            ));
            return None;
        }
        Some(KindSpec::Function {
            function: name.to_owned(),
            arguments: arguments?,
        })
    }

    fn tool(&mut self, input: &Map<String, Value>, pointer: &str, ctx: &Ctx) -> Option<KindSpec> {
        let at = |name: &str| member(pointer, name);
        let empty = Value::Object(Map::new());
        let raw_args = input.get("arguments").unwrap_or(&empty);
        let arguments = self.template(raw_args, &at("arguments"), ctx);
        let tool = input.get("tool").and_then(Value::as_str)?;
        if !self.tools.has_tool(tool) {
            let known = self.tools.tool_names();
            self.problems.push(Problem::new(
                at("tool"),
                format!("unknown tool `{tool}`; known tools: {}", known.join(", ")),
            ));
            return None;
        }
        // Arguments with templates are only known at run time; the registry checks them then.
        // Literal ones are checked now, so a plan fails before it runs.
        let problems = match &arguments {
            Some(a) if !a.has_references() => self.tools.argument_problems(tool, raw_args),
            _ => Vec::new(),
        };
        if !problems.is_empty() {
            for e in problems {
                self.problems.push(Problem::new(
                    format!("{}{}", at("arguments"), e.pointer),
                    e.message,
                ));
            }
            return None;
        }
        Some(KindSpec::Tool {
            tool: tool.to_owned(),
            arguments: arguments?,
        })
    }

    fn branch(&mut self, input: &Map<String, Value>, pointer: &str, ctx: &Ctx) -> Option<KindSpec> {
        let at = |name: &str| member(pointer, name);
        let condition = input
            .get("condition")
            .and_then(|c| self.condition(c, &at("condition"), ctx));
        let then = self.branch_targets(input.get("then"), &at("then"), ctx);
        let otherwise = self.branch_targets(input.get("else"), &at("else"), ctx);
        let (condition, then, otherwise) = (condition?, then?, otherwise?);
        for (k, t) in otherwise.iter().enumerate() {
            if then.contains(t) {
                self.problems.push(Problem::new(
                    format!("{}/{k}", at("else")),
                    format!("`{t}` is in both `then` and `else`"),
                ));
            }
        }
        Some(KindSpec::Branch {
            condition,
            then,
            otherwise,
        })
    }

    /// A `loop` step.
    fn repeat(&mut self, input: &Map<String, Value>, pointer: &str, ctx: &Ctx) -> Option<KindSpec> {
        let at = |name: &str| member(pointer, name);
        let max_iterations = input
            .get("max_iterations")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok());
        let over = match (input.get("for_each"), input.get("while")) {
            (Some(each), None) => self.for_each(each, &at("for_each"), ctx),
            (None, Some(cond)) => {
                // `while` runs before each iteration and may read the body's results from the
                // previous one, and `index`.
                let mut inner = ctx.clone();
                inner.index = true;
                inner.item = false;
                if let Some(children) = input.get("steps").and_then(Value::as_array) {
                    for child in children {
                        collect_ids(child, &mut inner.readable);
                    }
                }
                self.condition(cond, &at("while"), &inner)
                    .map(LoopOver::While)
            }
            // Both or neither: the schema's `oneOf` says so.
            _ => None,
        };
        let body = if matches!(over, Some(LoopOver::While(_))) || input.contains_key("while") {
            Body::While
        } else {
            Body::ForEach
        };
        let steps = self.children(input, pointer, ctx, body);
        Some(KindSpec::Loop {
            over: over?,
            max_iterations: max_iterations?,
            steps: steps?,
        })
    }

    fn wait(&mut self, input: &Map<String, Value>, pointer: &str) -> Option<KindSpec> {
        match (input.get("duration_ms"), input.get("until")) {
            (Some(ms), None) => ms
                .as_u64()
                .map(|ms| KindSpec::Wait(WaitSpec::Duration { ms })),
            (None, Some(Value::String(until))) => match DateTime::parse_from_rfc3339(until) {
                Ok(t) => Some(KindSpec::Wait(WaitSpec::Until(t.with_timezone(&Utc)))),
                Err(e) => {
                    self.problems.push(Problem::new(
                        member(pointer, "until"),
                        format!("`{until}` is not an RFC 3339 date-time such as 2026-03-01T12:00:00Z ({e})"),
                    ));
                    None
                }
            },
            _ => None,
        }
    }

    fn for_each(&mut self, raw: &Value, pointer: &str, ctx: &Ctx) -> Option<LoopOver> {
        if !(raw.is_string() || raw.is_array()) {
            return None; // The schema's `type` says so.
        }
        let template = self.template(raw, pointer, ctx)?;
        match (&template, raw) {
            (Template::Ref(_) | Template::Array(_), _)
            | (Template::Literal(_), Value::Array(_)) => Some(LoopOver::ForEach(template)),
            _ => {
                self.problems.push(Problem::new(
                    pointer,
                    "`for_each` must be one reference such as `{{ steps.list.output }}` (with no text around it) or an array",
                ));
                None
            }
        }
    }

    fn children(
        &mut self,
        input: &Map<String, Value>,
        pointer: &str,
        ctx: &Ctx,
        body: Body,
    ) -> Option<Vec<StepSpec>> {
        let raw = input.get("steps").and_then(Value::as_array)?;
        let ids: Vec<String> = raw
            .iter()
            .map(|c| {
                c.get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        let mut specs = Some(Vec::with_capacity(raw.len()));
        for (j, child) in raw.iter().enumerate() {
            let mut inner = ctx.clone();
            inner.top_level = false;
            inner.depth = ctx.depth + 1;
            inner.id = ids[j].clone();
            match body {
                Body::Parallel => inner.later_siblings = None,
                Body::Sequence | Body::ForEach | Body::While => {
                    inner.readable.extend(ids[..j].iter().cloned());
                    inner.later_siblings = Some(ids[j + 1..].to_vec());
                }
            }
            match body {
                Body::ForEach => {
                    inner.item = true;
                    inner.index = true;
                }
                Body::While => {
                    inner.item = false;
                    inner.index = true;
                }
                Body::Parallel | Body::Sequence => {}
            }
            let spec = self.step(child, &format!("{pointer}/steps/{j}"), &inner);
            match (spec, &mut specs) {
                (Some(spec), Some(specs)) => specs.push(spec),
                _ => specs = None,
            }
        }
        specs
    }

    fn branch_targets(
        &mut self,
        raw: Option<&Value>,
        pointer: &str,
        ctx: &Ctx,
    ) -> Option<Vec<StepId>> {
        let Some(raw) = raw else {
            return Some(Vec::new());
        };
        let targets = raw.as_array()?;
        let mut out = Some(Vec::with_capacity(targets.len()));
        for (k, t) in targets.iter().enumerate() {
            let Some(t) = t.as_str() else {
                out = None;
                continue;
            };
            let at = format!("{pointer}/{k}");
            let problem = if ctx.top_level {
                match self.top.get(t) {
                    Some(&pos) if self.raw_deps[pos].contains(&ctx.id) => None,
                    Some(_) => Some(format!(
                        "`{t}` must list `{}` in its `depends_on` to be one of its branches",
                        ctx.id
                    )),
                    None if self.declared.contains_key(t) => Some(format!(
                        "`{t}` is a child step; a top-level branch chooses between top-level steps that depend on it"
                    )),
                    None => Some(format!("no step has the id `{t}`")),
                }
            } else {
                match &ctx.later_siblings {
                    Some(later) if later.iter().any(|s| s == t) => None,
                    Some(_) => Some(format!(
                        "`{t}` is not a later step of the same sequence: a branch inside a sequence or loop chooses between the steps after it"
                    )),
                    None => Some(
                        "a branch inside a parallel step has no later steps to choose between"
                            .to_owned(),
                    ),
                }
            };
            match (problem, StepId::new(t)) {
                (None, Ok(id)) => {
                    if let Some(out) = &mut out {
                        out.push(id);
                    }
                }
                (Some(message), _) => {
                    self.problems.push(Problem::new(at, message));
                    out = None;
                }
                (None, Err(_)) => out = None,
            }
        }
        out
    }

    /// Parses a template and checks every reference it makes.
    fn template(&mut self, raw: &Value, pointer: &str, ctx: &Ctx) -> Option<Template> {
        let template = match Template::parse(raw) {
            Ok(t) => t,
            Err(errors) => {
                for e in errors {
                    self.problems.push(Problem::new(
                        format!("{pointer}{}", e.pointer),
                        format!("bad reference: {}", e.message),
                    ));
                }
                return None;
            }
        };
        let mut ok = true;
        for (rel, reference) in template.references() {
            if let Root::Session(name) = &reference.root {
                self.session_reads.name(name);
            }
            if let Some(message) = self.reference_problem(reference, ctx) {
                self.problems
                    .push(Problem::new(format!("{pointer}{rel}"), message));
                ok = false;
            }
        }
        ok.then_some(template)
    }

    fn reference_problem(&self, r: &Reference, ctx: &Ctx) -> Option<String> {
        let shown = format!("`{{{{ {r} }}}}`");
        match &r.root {
            Root::Input => None,
            Root::Step { id, .. } => self.step_ref_problem(id, &shown, ctx),
            Root::Var(name) => self.var_problem(name, &shown),
            Root::Session(_) => None,
            Root::CurrentStep(_) => ctx.id.is_empty().then(|| {
                format!("{shown}: `step` is only defined inside a step, not in the plan's `output` or `session_variables`")
            }),
            Root::Item => (!ctx.item).then(|| {
                format!("{shown}: `item` is only defined inside the body of a `for_each` loop")
            }),
            Root::Index => {
                (!ctx.index).then(|| format!("{shown}: `index` is only defined inside a loop body"))
            }
        }
    }

    fn step_ref_problem(&self, id: &str, shown: &str, ctx: &Ctx) -> Option<String> {
        if ctx.readable.contains(id) {
            return None;
        }
        Some(if !ctx.id.is_empty() && id == ctx.id {
            format!("{shown}: a step cannot read its own result")
        } else if !self.declared.contains_key(id) {
            format!("{shown}: no step has the id `{id}`")
        } else if ctx.top_level
            && let Some(Declared { top, .. }) = self.declared.get(id).filter(|d| d.parent.is_some())
        {
            let holder = self
                .top
                .iter()
                .find(|(_, pos)| *pos == top)
                .map_or("its top-level step", |(id, _)| id.as_str());
            format!(
                "{shown}: `{id}` is a child step inside `{holder}`; only top-level steps can be read from here, so read `{holder}`'s output"
            )
        } else if ctx.top_level {
            format!(
                "{shown}: `{id}` is not a dependency of `{}`, so it may not have run yet; add it to `depends_on` (directly or through another step)",
                ctx.id
            )
        } else {
            format!(
                "{shown}: `{id}` is neither a dependency of the top-level step `{}` nor an earlier step of the same sequence, so it may not have run yet",
                ctx.top_id
            )
        })
    }

    fn var_problem(&self, name: &str, shown: &str) -> Option<String> {
        let vars = self.vars.as_ref()?;
        (!vars.contains(name))
            .then(|| format!("{shown}: no variable `{name}` is declared in `variables`"))
    }

    /// Compiles a CEL condition and checks what it reads.
    fn condition(&mut self, raw: &Value, pointer: &str, ctx: &Ctx) -> Option<Condition> {
        let source = raw.as_str()?;
        let condition = match Condition::compile(source) {
            Ok(c) => c,
            Err(e) => {
                self.problems.push(Problem::new(
                    pointer,
                    format!("invalid CEL expression: {}", e.replace('\n', " ")),
                ));
                return None;
            }
        };
        let mut ok = true;
        for r in condition.references() {
            match r {
                CelRef::Session(name) => self.session_reads.name(name),
                CelRef::AnySession => self.session_reads.all = true,
                _ => {}
            }
            let problem = match r {
                CelRef::Input
                | CelRef::AnyStep
                | CelRef::AnyVar
                | CelRef::Session(_)
                | CelRef::AnySession => None,
                CelRef::CurrentStep => ctx
                    .id
                    .is_empty()
                    .then(|| "`step` is only defined inside a step".to_owned()),
                CelRef::Local(name) => local_problem(name, ctx),
                CelRef::AnyLocal => {
                    (!ctx.index).then(|| "`local` is only defined inside a loop body".to_owned())
                }
                CelRef::Step(id) => self.step_ref_problem(id, &format!("`steps.{id}`"), ctx),
                CelRef::Var(name) => self.var_problem(name, &format!("`vars.{name}`")),
                CelRef::Item => (!ctx.item).then(|| {
                    "`item` is only defined inside the body of a `for_each` loop".to_owned()
                }),
                CelRef::Index => {
                    (!ctx.index).then(|| "`index` is only defined inside a loop".to_owned())
                }
                CelRef::Output => (!pointer.ends_with("/expect"))
                    .then(|| "`output` is only defined in a step's `expect` condition".to_owned()),
                CelRef::Unknown(name) => Some(format!(
                    "unknown scope `{name}`: a condition can read {}",
                    crate::plan::template::SCOPES.replace(" or ", " and ")
                )),
            };
            if let Some(message) = problem {
                self.problems.push(Problem::new(pointer, message));
                ok = false;
            }
        }
        ok.then_some(condition)
    }

    /// Compiles an optional JSON Schema given in the plan. `Some(None)` when absent.
    fn json_schema(&mut self, raw: Option<&Value>, pointer: &str) -> Option<Option<JsonSchema>> {
        let Some(raw) = raw else {
            return Some(None);
        };
        if !raw.is_object() {
            return None;
        }
        match JsonSchema::compile(raw) {
            Ok(s) => Some(Some(s)),
            Err(e) => {
                self.problems.push(Problem::new(
                    pointer,
                    format!("not a valid JSON Schema: {e}"),
                ));
                None
            }
        }
    }

    /// The domain step of a top-level step: the document's fields, `input` as given.
    fn domain_step(
        &mut self,
        raw: &Value,
        pointer: &str,
        deps: &[usize],
        raw_steps: &[Value],
    ) -> Option<Step> {
        let obj = raw.as_object()?;
        let id = StepId::new(obj.get("id")?.as_str()?).ok()?;
        let kind = serde_json::from_value::<StepKind>(obj.get("kind")?.clone()).ok()?;
        let mut step = Step::new(id, kind, obj.get("input")?.clone());
        step.name = obj.get("name").and_then(Value::as_str).map(str::to_owned);
        step.description = obj
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned);
        step.timeout_ms = obj.get("timeout_ms").and_then(Value::as_u64);
        step.priority = obj.get("priority").and_then(Value::as_i64).unwrap_or(0);
        step.expect = obj.get("expect").and_then(Value::as_str).map(str::to_owned);
        step.retry_policy = match obj.get("retry_policy") {
            None => None,
            Some(v) => match serde_json::from_value(v.clone()) {
                Ok(p) => Some(p),
                Err(e) => {
                    self.shape.push(Problem::new(
                        format!("{pointer}/retry_policy"),
                        e.to_string(),
                    ));
                    return None;
                }
            },
        };
        step.metadata = obj
            .get("metadata")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        step.depends_on = deps
            .iter()
            .filter_map(|&d| raw_steps[d].get("id").and_then(Value::as_str))
            .filter_map(|s| StepId::new(s).ok())
            .collect();
        Some(step)
    }
}

#[derive(Clone, Copy)]
enum Body {
    Parallel,
    Sequence,
    ForEach,
    While,
}

fn children_of(raw: &Value) -> Option<&Vec<Value>> {
    match raw.get("kind").and_then(Value::as_str) {
        Some("parallel" | "sequential" | "loop") => raw.get("input")?.get("steps")?.as_array(),
        _ => None,
    }
}

/// The ids of `raw` and every step inside it.
fn collect_ids(raw: &Value, out: &mut HashSet<String>) {
    if let Some(id) = raw.get("id").and_then(Value::as_str) {
        out.insert(id.to_owned());
    }
    for child in children_of(raw).into_iter().flatten() {
        collect_ids(child, out);
    }
}

/// Every step `i` depends on, directly or not (cycles tolerated: they are reported elsewhere).
fn ancestors(i: usize, dependencies: &[Vec<usize>]) -> Vec<usize> {
    let mut seen = vec![false; dependencies.len()];
    let mut stack: Vec<usize> = dependencies[i].clone();
    let mut out = Vec::new();
    while let Some(d) = stack.pop() {
        if d == i || std::mem::replace(&mut seen[d], true) {
            continue;
        }
        out.push(d);
        stack.extend(dependencies[d].iter().copied());
    }
    out
}

/// The shortest cycle through `start` inside one strongly connected component, in running
/// order (each step runs before the next): a breadth-first search along dependents.
fn shortest_cycle(
    start: usize,
    members: &HashSet<usize>,
    dependencies: &[Vec<usize>],
) -> Vec<usize> {
    // Dependents restricted to the component, in declaration order for a stable answer.
    let mut dependents: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &m in members {
        for &d in &dependencies[m] {
            if members.contains(&d) {
                dependents.entry(d).or_default().push(m);
            }
        }
    }
    for list in dependents.values_mut() {
        list.sort_unstable();
    }
    let mut parent: HashMap<usize, usize> = HashMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(n) = queue.pop_front() {
        for &next in dependents.get(&n).into_iter().flatten() {
            if next == start {
                let mut path = vec![n];
                let mut cur = n;
                while cur != start {
                    cur = parent[&cur];
                    path.push(cur);
                }
                path.reverse();
                return path;
            }
            if next != start && !parent.contains_key(&next) {
                parent.insert(next, n);
                queue.push_back(next);
            }
        }
    }
    // A component of more than one node always has a cycle through each member.
    vec![start]
}

/// The AgentPlan document of a domain plan: what [`validate_plan`] reads back. Absent and
/// default values are left out, so a stored plan round-trips to the document it came from.
pub(crate) fn plan_document(plan: &Plan) -> Value {
    let head = PlanHead {
        id: Some(&plan.id),
        name: plan.name.as_deref(),
        description: plan.description.as_deref(),
        variables: &plan.context,
        settings: &plan.settings,
    };
    let mut doc = head.document(
        plan.steps.iter().map(step_document).collect(),
        plan.output.as_ref(),
    );
    if !plan.session_variables.is_empty()
        && let Value::Object(members) = &mut doc
    {
        members.insert(
            "session_variables".into(),
            Value::Object(plan.session_variables.clone()),
        );
    }
    if let Value::Object(members) = &mut doc {
        if !plan.agents.is_empty() {
            members.insert("agents".into(), Value::Object(plan.agents.clone()));
        }
        if !plan.workflows.is_empty() {
            members.insert("workflows".into(), Value::Object(plan.workflows.clone()));
        }
        if !plan.middleware.is_empty() {
            members.insert("middleware".into(), Value::Array(plan.middleware.clone()));
        }
    }
    doc
}

/// The plan-level members of an AgentPlan document.
pub(crate) struct PlanHead<'a> {
    pub id: Option<&'a str>,
    pub name: Option<&'a str>,
    pub description: Option<&'a str>,
    pub variables: &'a Map<String, Value>,
    pub settings: &'a PlanSettings,
}

impl PlanHead<'_> {
    /// The document with these members, `steps` and `output`; absent and default values are
    /// left out.
    pub(crate) fn document(&self, steps: Vec<Value>, output: Option<&Value>) -> Value {
        let mut doc = Map::new();
        let text = |s: &str| Value::String(s.to_owned());
        if let Some(id) = self.id {
            doc.insert("id".into(), text(id));
        }
        if let Some(name) = self.name {
            doc.insert("name".into(), text(name));
        }
        if let Some(description) = self.description {
            doc.insert("description".into(), text(description));
        }
        if !self.variables.is_empty() {
            doc.insert("variables".into(), Value::Object(self.variables.clone()));
        }
        if *self.settings != PlanSettings::default() {
            let settings = serde_json::to_value(self.settings).unwrap_or_default();
            doc.insert("settings".into(), without_nulls(settings));
        }
        doc.insert("steps".into(), Value::Array(steps));
        if let Some(output) = output {
            doc.insert("output".into(), output.clone());
        }
        Value::Object(doc)
    }
}

/// The document form of one domain step (run-time fields such as status are not part of it).
pub(crate) fn step_document(step: &Step) -> Value {
    let mut doc = Map::new();
    doc.insert("id".into(), Value::String(step.id.to_string()));
    doc.insert("kind".into(), Value::String(step.kind.as_str().to_owned()));
    if let Some(name) = &step.name {
        doc.insert("name".into(), Value::String(name.clone()));
    }
    if let Some(description) = &step.description {
        doc.insert("description".into(), Value::String(description.clone()));
    }
    if !step.depends_on.is_empty() {
        doc.insert(
            "depends_on".into(),
            step.depends_on
                .iter()
                .map(|d| Value::String(d.to_string()))
                .collect(),
        );
    }
    if let Some(policy) = &step.retry_policy {
        doc.insert(
            "retry_policy".into(),
            serde_json::to_value(policy).unwrap_or_default(),
        );
    }
    if let Some(ms) = step.timeout_ms {
        doc.insert("timeout_ms".into(), Value::from(ms));
    }
    if step.priority != 0 {
        doc.insert("priority".into(), Value::from(step.priority));
    }
    if let Some(expect) = &step.expect {
        doc.insert("expect".into(), Value::String(expect.clone()));
    }
    if !step.metadata.is_empty() {
        doc.insert("metadata".into(), Value::Object(step.metadata.clone()));
    }
    doc.insert("input".into(), step.input.clone());
    Value::Object(doc)
}

/// Serialised settings carry `null` for absent options, which the schema (rightly) refuses.
pub(crate) fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        other => other,
    }
}

/// Why `local.NAME` cannot be read where `ctx` is; `None` when it can.
fn local_problem(name: &str, ctx: &Ctx) -> Option<String> {
    match name {
        "item" => (!ctx.item).then(|| {
            "`local.item` is only defined inside the body of a `for_each` loop".to_owned()
        }),
        "index" => (!ctx.index).then(|| "`local.index` is only defined inside a loop".to_owned()),
        other => Some(format!(
            "`local.{other}`: `local` holds a loop body's `local.item` and `local.index`"
        )),
    }
}

/// The pointer of member `name` of the object at `pointer`.
fn member(pointer: &str, name: &str) -> String {
    format!("{pointer}/{}", escape_pointer(name))
}
