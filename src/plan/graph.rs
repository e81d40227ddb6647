//! [`ValidPlan`]: a plan that passed validation, with its DAG analysed once — a stable
//! topological order, adjacency both ways, and the critical path.
//!
//! Owns the invariants the engine relies on (acyclic, every dependency known, specs parsed);
//! fields are private so nothing can break them after validation. It must not schedule or
//! execute anything: the engine decides what runs when.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use serde_json::Value;

use super::Problem;
use super::catalog::Catalog;
use super::spec::StepSpec;
use super::team::Team;
use super::template::Template;
use super::validate::{plan_document, validate_plan};
use crate::domain::{Orchestration, Plan, Step, StepId};

/// A validated plan, ready to run. Cheap to share behind an `Arc` (it is `Send + Sync`).
#[derive(Debug, Clone)]
pub struct ValidPlan {
    plan: Plan,
    /// One spec per top-level step, same order as `plan.steps`.
    specs: Vec<StepSpec>,
    index: HashMap<StepId, usize>,
    /// Top-level positions in a topological order; among steps ready at the same time, the one
    /// declared first comes first, so the order is stable across runs and restores.
    order: Vec<usize>,
    dependencies: Vec<Vec<usize>>,
    dependents: Vec<Vec<usize>>,
    output: Option<Template>,
    /// `session_variables`: what the plan stores for its session when it completes.
    session_writes: Vec<(String, Template)>,
    /// The session variables its own templates and conditions read (not its nested
    /// workflows'; [`ValidPlan::session_reads`] adds those).
    session_reads: SessionReads,
    /// The agents, nested workflows and middleware its steps use.
    team: Arc<Team>,
}

/// The session variables a plan reads: by name, or every one (a condition that reads
/// `session` as a whole, e.g. `size(session)`). A run loads only these.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionReads {
    pub all: bool,
    pub names: std::collections::BTreeSet<String>,
}

impl SessionReads {
    pub fn name(&mut self, name: &str) {
        if !self.names.contains(name) {
            self.names.insert(name.to_owned());
        }
    }

    /// Adds what `other` reads.
    pub fn add(&mut self, other: &SessionReads) {
        self.all |= other.all;
        self.names.extend(other.names.iter().cloned());
    }

    pub fn is_empty(&self) -> bool {
        !self.all && self.names.is_empty()
    }
}

impl ValidPlan {
    /// Assembles the analysis. `dependencies` must be acyclic and in range: validation
    /// guarantees both before calling this.
    pub(super) fn new(
        plan: Plan,
        specs: Vec<StepSpec>,
        dependencies: Vec<Vec<usize>>,
        output: Option<Template>,
    ) -> Self {
        let n = specs.len();
        let index = specs
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id.clone(), i))
            .collect();
        let mut dependents = vec![Vec::new(); n];
        for (i, deps) in dependencies.iter().enumerate() {
            for &d in deps {
                dependents[d].push(i);
            }
        }
        let order = topological_order(&dependencies, &dependents);
        ValidPlan {
            plan,
            specs,
            index,
            order,
            dependencies,
            dependents,
            output,
            session_writes: Vec::new(),
            session_reads: SessionReads::default(),
            team: Arc::default(),
        }
    }

    pub(super) fn set_session_writes(&mut self, writes: Vec<(String, Template)>) {
        self.session_writes = writes;
    }

    pub(super) fn set_session_reads(&mut self, reads: SessionReads) {
        self.session_reads = reads;
    }

    /// The session variables its templates and conditions read, its nested workflows' too.
    pub fn session_reads(&self) -> SessionReads {
        let mut reads = self.session_reads.clone();
        for workflow in self.team.workflows.values() {
            reads.add(&workflow.session_reads());
        }
        reads
    }

    pub(super) fn set_team(&mut self, team: Team) {
        self.team = Arc::new(team);
    }

    /// The agents, nested workflows and middleware its steps use.
    pub fn team(&self) -> &Arc<Team> {
        &self.team
    }

    /// The session variables the plan writes when it completes, by name.
    pub fn session_writes(&self) -> &[(String, Template)] {
        &self.session_writes
    }

    /// Re-validates a stored plan (e.g. from a checkpoint) against today's tools. Its version
    /// and orchestration are kept.
    pub fn from_plan<'c>(
        plan: &Plan,
        catalog: impl Into<Catalog<'c>>,
    ) -> Result<ValidPlan, Vec<Problem>> {
        let valid = validate_plan(&plan_document(plan), catalog)?;
        Ok(valid
            .with_version(plan.version)
            .with_orchestration(plan.orchestration))
    }

    pub fn with_version(mut self, version: u32) -> Self {
        self.plan.version = version;
        self
    }

    pub fn with_orchestration(mut self, orchestration: Orchestration) -> Self {
        self.plan.orchestration = orchestration;
        self
    }

    /// The domain plan: what the store keeps and `plan` events carry.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    pub fn into_plan(self) -> Plan {
        self.plan
    }

    /// The plan as an AgentPlan document (what [`super::validate_plan`] accepts).
    pub fn document(&self) -> Value {
        plan_document(&self.plan)
    }

    /// Top-level steps, typed, in declaration order.
    pub fn specs(&self) -> &[StepSpec] {
        &self.specs
    }

    pub fn len(&self) -> usize {
        self.specs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// The domain step at position `i`.
    pub fn step(&self, i: usize) -> &Step {
        &self.plan.steps[i]
    }

    /// Where a top-level step sits.
    pub fn position(&self, id: &str) -> Option<usize> {
        // `StepId` does not borrow as `str`; ids are short, so building one is cheap.
        StepId::new(id)
            .ok()
            .and_then(|id| self.index.get(&id).copied())
    }

    /// A step anywhere in the plan, children included.
    pub fn spec(&self, id: &str) -> Option<&StepSpec> {
        match self.position(id) {
            Some(i) => Some(&self.specs[i]),
            None => self.specs.iter().find_map(|s| s.find(id)),
        }
    }

    /// Top-level positions in a stable topological order.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// The positions step `i` depends on directly, in declaration order of `depends_on`.
    pub fn dependencies(&self, i: usize) -> &[usize] {
        &self.dependencies[i]
    }

    /// The positions that depend directly on step `i`, ascending.
    pub fn dependents(&self, i: usize) -> &[usize] {
        &self.dependents[i]
    }

    /// Steps nothing depends on, ascending: their outputs make the run's output when the plan
    /// has no `output` template.
    pub fn leaves(&self) -> Vec<usize> {
        (0..self.len())
            .filter(|&i| self.dependents[i].is_empty())
            .collect()
    }

    /// The plan's output template, parsed.
    pub fn output(&self) -> Option<&Template> {
        self.output.as_ref()
    }

    /// The planning weight of step `i`: its metadata's numeric `estimated_ms`, else its
    /// timeout, else 1.
    pub fn weight(&self, i: usize) -> u64 {
        let step = &self.plan.steps[i];
        step.metadata
            .get("estimated_ms")
            .and_then(|v| {
                v.as_u64()
                    .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f.round() as u64))
            })
            .or(step.timeout_ms)
            .unwrap_or(1)
    }

    /// The heaviest chain of dependencies, first step first. Ties go to the step declared
    /// first, so the answer is stable.
    pub fn critical_path(&self) -> Vec<StepId> {
        self.critical_chain()
            .0
            .into_iter()
            .map(|i| self.specs[i].id.clone())
            .collect()
    }

    /// The total weight of the critical path.
    pub fn critical_path_ms(&self) -> u64 {
        self.critical_chain().1
    }

    fn critical_chain(&self) -> (Vec<usize>, u64) {
        let n = self.len();
        let mut best = vec![0u64; n];
        let mut via: Vec<Option<usize>> = vec![None; n];
        for &i in &self.order {
            let mut from: Option<usize> = None;
            for &d in &self.dependencies[i] {
                let better = match from {
                    None => true,
                    Some(f) => best[d] > best[f] || (best[d] == best[f] && d < f),
                };
                if better {
                    from = Some(d);
                }
            }
            best[i] = from.map_or(0, |f| best[f]).saturating_add(self.weight(i));
            via[i] = from;
        }
        let Some(end) = (0..n).max_by_key(|&i| (best[i], Reverse(i))) else {
            return (Vec::new(), 0);
        };
        let mut chain = vec![end];
        let mut cur = end;
        while let Some(prev) = via[cur] {
            chain.push(prev);
            cur = prev;
        }
        chain.reverse();
        (chain, best[end])
    }
}

/// Kahn's algorithm with a min-heap on position: stable by declaration order.
fn topological_order(dependencies: &[Vec<usize>], dependents: &[Vec<usize>]) -> Vec<usize> {
    let mut missing: Vec<usize> = dependencies.iter().map(Vec::len).collect();
    let mut ready: BinaryHeap<Reverse<usize>> = missing
        .iter()
        .enumerate()
        .filter(|(_, m)| **m == 0)
        .map(|(i, _)| Reverse(i))
        .collect();
    let mut order = Vec::with_capacity(dependencies.len());
    while let Some(Reverse(i)) = ready.pop() {
        order.push(i);
        for &next in &dependents[i] {
            missing[next] -= 1;
            if missing[next] == 0 {
                ready.push(Reverse(next));
            }
        }
    }
    order
}
