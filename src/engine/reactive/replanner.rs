//! Asking the `replanner` function for the next plan version, and holding its answer to the
//! rules: a strategy the policy allows for the trigger, a plan that validates like any plan,
//! and completed steps left as they were (they are never run again and keep their outputs).
//! An answer that breaks them goes back to the model with its problems, up to
//! `engine.max_plan_repairs` times, like a first plan.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::domain::event::ErrorData;
use crate::domain::replan::{PlanChange, PlanDiff, Strategy, Trigger};
use crate::domain::{ErrorCode, RunError, StepPath, StepStatus};
use crate::functions;
use crate::llm::Message;
use crate::plan::{self, Problem, ValidPlan};

use crate::domain::run::input_text;
use crate::engine::calls::function_call;
use crate::engine::fixed;
use crate::engine::planner::{self, Call};
use crate::engine::runtime::checkpoint::PlanProgress;
use crate::engine::runtime::completion;
use crate::engine::runtime::context::RunContext;

pub use crate::domain::replan::REPLANNING_STEP;

/// A plan version as the run keeps it.
#[derive(Debug, Clone)]
pub struct Version {
    pub number: u32,
    pub doc: Value,
    /// How it came to be (`None` for the first).
    pub change: Option<PlanChange>,
}

/// A new version, validated, with how it came to be.
pub struct Replanned {
    pub doc: Value,
    pub plan: ValidPlan,
    pub change: PlanChange,
}

/// What the replanner answers (see [`plan::schema::replan_schema`]).
#[derive(Deserialize)]
struct Answer {
    strategy: Strategy,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    plan: Option<Value>,
    #[serde(default)]
    restore_version: Option<u32>,
    /// Whether the new version still does the whole task; asked for, never assumed.
    #[serde(default)]
    completes_task: Option<bool>,
}

/// Asks for the version after `versions.last()`, answering `trigger`. `Ok(Err(problems))`
/// when no answer passed after the repairs; `Err` when the model could not be asked.
pub async fn replan(
    ctx: &RunContext,
    trigger: &Trigger,
    versions: &[Version],
    progress: &PlanProgress,
) -> Result<Result<Replanned, Vec<Problem>>, RunError> {
    let function = function_call::configured(ctx, functions::REPLANNER)?;
    let allowed = ctx.services.config.replan_policy.allowed(trigger.kind);
    let current = versions.last().expect("a run re-plans a plan it has");
    let input = replanning_input(ctx, trigger, allowed, versions, progress);
    let mut messages = function_call::opening(ctx, &function, &input)?;
    let mut problems = Vec::new();
    for round in 0..=ctx.services.config.max_plan_repairs {
        let call = Call {
            step: REPLANNING_STEP,
            schema_name: "replan",
            plan_version: current.number,
        };
        let text = planner::ask(ctx, &function, &messages, call, round).await?;
        let rules = Rules {
            ctx,
            trigger,
            allowed,
            versions,
            progress,
        };
        problems = match planner::parse(&text).and_then(|doc| read_answer(&doc)) {
            Ok(answer) => match rules.check(answer) {
                Ok(replanned) => return Ok(Ok(replanned)),
                Err(problems) => problems,
            },
            Err(problem) => vec![problem],
        };
        tell_problems(ctx, &problems).await;
        messages.push(Message::Assistant {
            content: text,
            tool_calls: vec![],
        });
        messages.push(Message::User {
            content: planner::repair_request(&problems),
        });
    }
    Ok(Err(problems))
}

/// The version the user asked to go back to (`POST /v1/runs/{id}/replan` with
/// `restore_version`), as the next version: strategy `restore`, the user's trigger, and
/// validated again like any stored plan. The API takes only a version before the current one
/// and versions only grow, so a version the run lacks is a problem as for an invalid answer.
pub fn restore(
    ctx: &RunContext,
    trigger: &Trigger,
    versions: &[Version],
    wanted: u32,
) -> Result<Result<Replanned, Vec<Problem>>, RunError> {
    let current = versions.last().expect("a run re-plans a plan it has");
    let Some(earlier) = versions
        .iter()
        .find(|v| v.number == wanted && wanted < current.number)
    else {
        return Ok(Err(vec![Problem::new(
            "/restore_version",
            format!(
                "the run has no plan version {wanted} before its current version {}",
                current.number
            ),
        )]));
    };
    let plan = fixed::revalidate(ctx, &earlier.doc)?;
    let change = PlanChange {
        trigger: trigger.clone(),
        strategy: Strategy::Restore,
        explanation: format!("the user asked to go back to version {wanted}"),
        diff: PlanDiff::between(&current.doc, &earlier.doc),
        restored_version: Some(wanted),
        completes_task: true,
    };
    Ok(Ok(Replanned {
        doc: earlier.doc.clone(),
        plan,
        change,
    }))
}

fn read_answer(doc: &Value) -> Result<Answer, Problem> {
    Answer::deserialize(doc).map_err(|e| {
        Problem::new(
            "",
            format!(
                "the answer must be {{\"strategy\", \"reason\", \"completes_task\", \"plan\" or \"restore_version\"}}: {e}"
            ),
        )
    })
}

async fn tell_problems(ctx: &RunContext, problems: &[Problem]) {
    let told = ErrorData {
        error: RunError::new(
            ErrorCode::InvalidPlan,
            format!(
                "the new plan is invalid: {}",
                crate::plan::list_problems(problems)
            ),
        ),
        step_id: Some(REPLANNING_STEP.to_owned()),
    };
    ctx.emit(Some(&StepPath::top(REPLANNING_STEP)), told).await;
}

/// What the replanner is told: the task, the trigger, the strategies it may use, the current
/// plan and the earlier versions, what completed (with outputs), and what plans may use.
fn replanning_input(
    ctx: &RunContext,
    trigger: &Trigger,
    allowed: &[Strategy],
    versions: &[Version],
    progress: &PlanProgress,
) -> Value {
    let current = versions.last().expect("a run re-plans a plan it has");
    let planning = planner::planning_input(ctx);
    json!({
        "task": input_text(&ctx.spec.request.input),
        "trigger": trigger.describe(),
        "trigger_detail": trigger,
        "strategies": allowed.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        "version": current.number,
        "plan": current.doc,
        "earlier_versions": versions.iter().map(|v| v.number).collect::<Vec<_>>(),
        "completed": completion::completed_outputs(&progress.steps).unwrap_or_else(|| json!({})),
        "tools": planning["tools"],
        "functions": planning["functions"],
        "limits": planning["limits"],
    })
}

/// The rules a new version is held to.
struct Rules<'a> {
    ctx: &'a RunContext,
    trigger: &'a Trigger,
    allowed: &'a [Strategy],
    versions: &'a [Version],
    progress: &'a PlanProgress,
}

impl Rules<'_> {
    fn check(&self, answer: Answer) -> Result<Replanned, Vec<Problem>> {
        if !self.allowed.contains(&answer.strategy) {
            let allowed: Vec<&str> = self.allowed.iter().map(|s| s.as_str()).collect();
            return Err(vec![Problem::new(
                "/strategy",
                format!(
                    "`{}` is not allowed for a {} trigger; use one of: {}",
                    answer.strategy.as_str(),
                    self.trigger.kind.as_str(),
                    allowed.join(", ")
                ),
            )]);
        }
        let Some(completes_task) = answer.completes_task else {
            return Err(vec![Problem::new(
                "/completes_task",
                "say whether the new plan still does the whole task (`true`) or only part of it, \
                 or only what could not be done (`false`)",
            )]);
        };
        let current = self.versions.last().expect("a run re-plans a plan it has");
        let (doc, restored_version) = self.new_document(&answer, current)?;
        let plan = plan::validate_plan(&doc, self.ctx.services.catalog()).map_err(|problems| {
            problems
                .into_iter()
                .map(|p| Problem::new(format!("/plan{}", p.pointer), p.message))
                .collect::<Vec<_>>()
        })?;
        self.completed_steps_kept(answer.strategy, &current.doc, &doc)?;
        let change = PlanChange {
            trigger: self.trigger.clone(),
            strategy: answer.strategy,
            explanation: answer.reason,
            diff: PlanDiff::between(&current.doc, &doc),
            restored_version,
            completes_task,
        };
        Ok(Replanned { doc, plan, change })
    }

    /// The plan document the answer stands for: the current one (`retry`), an earlier one
    /// (`restore`) or the one it wrote.
    fn new_document(
        &self,
        answer: &Answer,
        current: &Version,
    ) -> Result<(Value, Option<u32>), Vec<Problem>> {
        match answer.strategy {
            Strategy::Retry => Ok((current.doc.clone(), None)),
            Strategy::Restore => {
                let wanted = answer.restore_version;
                let earlier = wanted.and_then(|n| {
                    self.versions
                        .iter()
                        .find(|v| v.number == n && n < current.number)
                });
                match earlier {
                    Some(v) => Ok((v.doc.clone(), Some(v.number))),
                    None => Err(vec![Problem::new(
                        "/restore_version",
                        format!(
                            "`restore` needs `restore_version`, one of the earlier versions 1 to {}",
                            current.number.saturating_sub(1)
                        ),
                    )]),
                }
            }
            _ => match &answer.plan {
                Some(plan) if plan.is_object() => Ok((plan.clone(), None)),
                _ => Err(vec![Problem::new(
                    "/plan",
                    format!(
                        "`{}` needs the new plan in `plan`",
                        answer.strategy.as_str()
                    ),
                )]),
            },
        }
    }

    /// Completed steps are never run again: a new version keeps their definitions (`partial`
    /// and `alternative` keep every one of them), and `alternative` replaces the failed step.
    fn completed_steps_kept(
        &self,
        strategy: Strategy,
        before: &Value,
        after: &Value,
    ) -> Result<(), Vec<Problem>> {
        let steps = |doc: &Value| -> Vec<(String, Value)> {
            doc.get("steps")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|s| Some((s.get("id")?.as_str()?.to_owned(), s.clone())))
                .collect()
        };
        let (old, new) = (steps(before), steps(after));
        let find = |list: &[(String, Value)], id: &str| {
            list.iter()
                .position(|(i, _)| i == id)
                .map(|p| (p, list[p].1.clone()))
        };
        let mut problems = Vec::new();
        for (id, result) in &self.progress.steps {
            if result.status != StepStatus::Completed {
                continue;
            }
            let Some((_, was)) = find(&old, id) else {
                continue;
            };
            match find(&new, id) {
                Some((at, now)) if now != was && strategy != Strategy::Restore => {
                    problems.push(Problem::new(
                        format!("/plan/steps/{at}"),
                        format!(
                            "step `{id}` completed and is not run again: keep its definition, or give a new step another id"
                        ),
                    ))
                }
                None if matches!(strategy, Strategy::Partial | Strategy::Alternative) => {
                    problems.push(Problem::new(
                        "/plan/steps",
                        format!(
                            "`{}` keeps the completed steps: `{id}` is missing",
                            strategy.as_str()
                        ),
                    ))
                }
                _ => {}
            }
        }
        if strategy == Strategy::Alternative
            && let Some(failed) = &self.trigger.step_id
            && let (Some((_, was)), Some((at, now))) = (find(&old, failed), find(&new, failed))
            && was == now
        {
            problems.push(Problem::new(
                format!("/plan/steps/{at}"),
                format!(
                    "`alternative` replaces the failed step `{failed}`: change it, or remove it"
                ),
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}
