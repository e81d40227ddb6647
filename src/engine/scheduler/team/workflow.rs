//! Workflows inside a step (`workflow` steps and workflow agents): the plan's nested workflow
//! runs with its own input and variables, its top-level steps one after another in dependency
//! order at the path of the step that runs it, so its attempts and events say where they
//! come from and a resumed run does not run its finished steps again. Its output is its
//! `output` template, else its last step's output; its failure is the step's, with the inner
//! code.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::domain::{ErrorCode, RunError, StepPath};
use crate::plan::{StepSpec, Team};

use crate::engine::runtime::sink::EventSink;
use crate::engine::scheduler::frame::{Frame, Locals};
use crate::engine::scheduler::kinds::sequential;

/// How deep workflows may nest inside each other at run time (validation refuses cycles; this
/// bounds what it cannot see).
const MAX_DEPTH: usize = 16;

/// Runs the plan's workflow `name` on `input`, its steps at `path`.
pub(crate) async fn run_named(
    frame: &Frame<'_>,
    name: &str,
    input: Value,
    path: &StepPath,
    sink: &mut EventSink,
) -> Result<Value, RunError> {
    let Some(plan) = frame.team.workflows.get(name).cloned() else {
        return Err(RunError::new(
            ErrorCode::InvalidStep,
            format!("the plan has no workflow `{name}`"),
        ));
    };
    if path.depth() > MAX_DEPTH {
        return Err(RunError::new(
            ErrorCode::InvalidStep,
            format!("workflows nest deeper than {MAX_DEPTH} levels"),
        ));
    }
    let inner = Frame {
        ctx: frame.ctx,
        plan_version: frame.plan_version,
        input: Arc::new(input),
        team: merged(&frame.team, plan.team()),
        snapshot: HashMap::new(),
        vars: Arc::new(plan.plan().context.clone()),
        session: frame.session.clone(),
        default_retry: plan.plan().settings.default_retry_policy.clone(),
        slots: frame.slots.clone(),
        children: frame.children.clone(),
    };
    let ordered: Vec<StepSpec> = plan
        .order()
        .iter()
        .map(|&i| plan.specs()[i].clone())
        .collect();
    let (last, results) = sequential::run_all(&inner, &ordered, path, Locals::default(), sink)
        .await
        .map_err(|e| RunError::new(e.code, format!("in workflow `{name}`: {}", e.message)))?;
    match plan.output() {
        None => Ok(last),
        Some(template) => {
            let here = Locals {
                path,
                results: Some(&results),
                ..Locals::default()
            };
            inner.resolve(here, template).map_err(|e| {
                RunError::new(e.code, format!("workflow `{name}`'s output: {}", e.message))
            })
        }
    }
}

/// The outer team with what a nested workflow defines itself added.
fn merged(outer: &Arc<Team>, inner: &Arc<Team>) -> Arc<Team> {
    if inner.is_empty() {
        return outer.clone();
    }
    let mut team = (**outer).clone();
    for (name, agent) in &inner.agents {
        team.agents
            .entry(name.clone())
            .or_insert_with(|| agent.clone());
    }
    for (name, workflow) in &inner.workflows {
        team.workflows
            .entry(name.clone())
            .or_insert_with(|| workflow.clone());
    }
    Arc::new(team)
}
