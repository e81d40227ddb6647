//! The `planner` executor: the model writes a plan, orca keeps it honest, the scheduler runs it.
//!
//! The `planner` function (see [`crate::functions`]) gets the task, the tools the run may use
//! (with their input schemas), the LLM functions plans may call and the run's limits, and
//! answers an AgentPlan as structured output, streamed as `json_partial` events of the step
//! `planner`. The answer is validated like any plan; when it fails, the problems (pointer and
//! message) go back to the model, which tries again, up to `engine.max_plan_repairs` times.
//! Still invalid, the run answers as `simple` or fails with `planning_failed`, as
//! `engine.planning_fallback` says. A valid plan is version 1, reason `initial`, and runs on
//! the scheduler like a fixed plan. A run resumed after the plan was made runs the stored
//! version on; one resumed while planning plans again.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::config::PlanningFallback;
use crate::domain::attempt_io::{Envelope, PlanningOutput, RepairInput};
use crate::domain::event::ErrorData;
use crate::domain::{ErrorCode, RunError, StepPath};
use crate::functions::{self, LlmFunction};
use crate::llm::Message;
use crate::plan::{self, Problem, ValidPlan};

use super::calls::function_call::{self, FunctionCall};
use super::fixed::{self, run_plan};
use super::review::{self, Verdict};
use super::runtime::checkpoint::{self, Restored};
use super::runtime::context::RunContext;
use super::runtime::outcome::{Executor, Outcome};
use super::runtime::sink::EventSink;
use super::simple::Simple;
use crate::domain::plan::NO_PLAN;
use crate::domain::run::input_text;

/// The step the planning calls are recorded as.
const PLANNING_STEP: &str = "planner";
pub struct Planner;

#[async_trait]
impl Executor for Planner {
    async fn execute(&self, ctx: &RunContext) -> Outcome {
        if let Some(version) = ctx.run().plan_version {
            return match stored_plan(ctx, version).await {
                Ok((plan, doc)) => run_plan(ctx, Arc::new(plan), &doc).await,
                Err(e) => Outcome::Failed(e),
            };
        }
        if ctx.restores()
            && let Ok(Restored::Conversation(_)) = checkpoint::restore(ctx).await
        {
            // Stopped while answering as `simple` after planning failed: go on with that.
            return Simple.execute(ctx).await;
        }
        match make_plan(ctx).await {
            Ok(Planned::Valid(plan, doc)) => run_plan(ctx, Arc::new(*plan), &doc).await,
            Ok(Planned::Invalid(problems)) => fall_back(ctx, &problems).await,
            Err(e) => Outcome::Failed(e),
        }
    }
}

/// What planning gave: a plan, or the problems of the last answer.
pub enum Planned {
    Valid(Box<ValidPlan>, Value),
    Invalid(Vec<Problem>),
}

/// The latest stored version of the run's plan, validated again.
async fn stored_plan(ctx: &RunContext, version: u32) -> Result<(ValidPlan, Value), RunError> {
    let plans = ctx
        .services
        .store()
        .list_plans(ctx.run_id)
        .await
        .map_err(|e| {
            RunError::new(
                ErrorCode::StoreUnavailable,
                format!("could not read the run's plan: {e}"),
            )
        })?;
    let Some(stored) = plans.into_iter().find(|p| p.version == version) else {
        return Err(RunError::new(
            ErrorCode::InternalError,
            format!("the run's plan version {version} is not stored"),
        ));
    };
    let valid = fixed::revalidate(ctx, &stored.plan)?;
    Ok((valid, std::sync::Arc::unwrap_or_clone(stored.plan)))
}

/// Asks the planner function for a plan, sending the problems back while it is invalid (and
/// the reviewer's reason while a review rejects it, see [`super::review`]).
pub async fn make_plan(ctx: &RunContext) -> Result<Planned, RunError> {
    let function = function_call::configured(ctx, functions::PLANNER)?;
    let mut messages = opening(ctx, &function)?;
    let repairs = ctx.services.config.max_plan_repairs;
    let mut problems = Vec::new();
    for round in 0..=repairs {
        let call = Call {
            step: PLANNING_STEP,
            schema_name: "agent_plan",
            plan_version: NO_PLAN,
        };
        let text = ask(ctx, &function, &messages, call, round).await?;
        problems = match parse(&text) {
            Ok(doc) => match plan::validate_plan(&doc, ctx.services.catalog()) {
                Ok(valid) => {
                    match review::review(ctx, fixed::FIRST_VERSION, round, doc, valid).await? {
                        Verdict::Run { doc, plan, .. } => return Ok(Planned::Valid(plan, doc)),
                        Verdict::Rejected(reason) => {
                            problems = vec![rejected(&reason)];
                            messages.push(Message::Assistant {
                                content: text,
                                tool_calls: vec![],
                            });
                            messages.push(Message::User {
                                content: rejection_request(&reason),
                            });
                            continue;
                        }
                    }
                }
                Err(problems) => problems,
            },
            Err(problem) => vec![problem],
        };
        let told = ErrorData {
            error: RunError::new(
                ErrorCode::InvalidPlan,
                format!(
                    "the plan is invalid: {}",
                    crate::plan::list_problems(&problems)
                ),
            ),
            step_id: Some(PLANNING_STEP.to_owned()),
        };
        ctx.emit(Some(&StepPath::top(PLANNING_STEP)), told).await;
        messages.push(Message::Assistant {
            content: text,
            tool_calls: vec![],
        });
        messages.push(Message::User {
            content: repair_request(&problems),
        });
    }
    Ok(Planned::Invalid(problems))
}

/// The system prompt and the planner's prompt, rendered with what the run may use.
fn opening(ctx: &RunContext, function: &LlmFunction) -> Result<Vec<Message>, RunError> {
    function_call::opening(ctx, function, &planning_input(ctx))
}

/// What the planner is told: the task, the run's tools and the functions plans may call, and
/// the limits.
pub fn planning_input(ctx: &RunContext) -> Value {
    let tools: Vec<Value> = ctx
        .services
        .tools
        .list()
        .into_iter()
        .filter(|t| super::calls::tool_call::may_use(ctx, &t.name))
        .map(|t| json!({ "name": t.name, "description": t.description, "input_schema": t.input_schema }))
        .collect();
    let callable: Vec<Value> = ctx
        .services
        .functions
        .list()
        .into_iter()
        .filter(|f| {
            !matches!(
                f.name.as_str(),
                functions::PLANNER | functions::REPLANNER | functions::SELECTOR
            )
        })
        .map(|f| json!({ "name": f.name, "description": f.description }))
        .collect();
    let l = ctx.limits;
    json!({
        "task": input_text(&ctx.spec.request.input),
        "tools": tools,
        "functions": callable,
        "limits": {
            "max_steps": l.max_steps,
            "max_duration_ms": l.max_duration_ms,
            "max_retries": l.max_retries,
            "max_tokens": l.max_tokens,
        },
    })
}

/// Where a planning call is recorded: its step, the name its answer's schema is sent under,
/// and the plan version its attempts carry.
#[derive(Clone, Copy)]
pub(super) struct Call<'a> {
    pub step: &'a str,
    pub schema_name: &'a str,
    pub plan_version: u32,
}

/// One planning call of `function`, recorded as an attempt of `call.step`; the model's text.
pub(super) async fn ask(
    ctx: &RunContext,
    function: &LlmFunction,
    messages: &[Message],
    call: Call<'_>,
    round: u32,
) -> Result<String, RunError> {
    let step = StepPath::top(call.step);
    let mut sink = EventSink::Live;
    let asked = FunctionCall {
        plan_version: call.plan_version,
        input: Some(RepairInput { repair: round }.into()),
        ..FunctionCall::of(function, &step, call.step, call.schema_name)
    };
    let mut open = function_call::open(ctx, asked, &mut sink).await?;
    let reply = open.ask(ctx, messages.to_vec()).await;
    let shown = match &reply {
        Ok(r) => Ok(PlanningOutput {
            characters: r.text.chars().count(),
        }
        .to_json()),
        Err(e) => Err(e.clone()),
    };
    open.close(ctx, &shown, &mut sink).await;
    reply.map(|r| r.text)
}

/// The answer as a JSON document, or the problem with it.
pub(super) fn parse(text: &str) -> Result<Value, Problem> {
    serde_json::from_str(text.trim())
        .map_err(|e| Problem::new("", format!("the answer is not JSON: {e}")))
}

/// The problem a rejected plan leaves, should no later one pass.
pub(super) fn rejected(reason: &str) -> Problem {
    Problem::new("", format!("the reviewer rejected the plan: {reason}"))
}

/// What the planner is told when the reviewer rejected its plan.
pub(super) fn rejection_request(reason: &str) -> String {
    format!(
        "The reviewer rejected this plan: {reason}\nAnswer with a new whole plan as JSON that meets their reason."
    )
}

pub(super) fn repair_request(problems: &[Problem]) -> String {
    let list: Vec<String> = problems
        .iter()
        .map(|p| {
            let at = if p.pointer.is_empty() {
                "(the plan)"
            } else {
                &p.pointer
            };
            format!("- {at}: {}", p.message)
        })
        .collect();
    format!(
        "The plan is not valid:\n{}\nAnswer with the whole corrected plan as JSON.",
        list.join("\n")
    )
}

/// Planning did not give a valid plan: answer as `simple`, or fail, as configured.
pub(super) async fn fall_back(ctx: &RunContext, problems: &[Problem]) -> Outcome {
    let error = RunError::new(
        ErrorCode::PlanningFailed,
        format!(
            "no valid plan after {} repairs: {}",
            ctx.services.config.max_plan_repairs,
            crate::plan::list_problems(problems)
        ),
    );
    match ctx.services.config.planning_fallback {
        PlanningFallback::Fail => Outcome::Failed(error),
        PlanningFallback::Simple => {
            let told = ErrorData {
                error,
                step_id: Some(PLANNING_STEP.to_owned()),
            };
            ctx.emit(Some(&StepPath::top(PLANNING_STEP)), told).await;
            Simple.execute(ctx).await
        }
    }
}
