//! The `reactive` executor: a planned run that changes its plan when reality disagrees.
//!
//! Version 1 is the request's plan, or the planner's (as in [`super::planner`]). The
//! [`Scheduler`] runs it and reports every committed step; after each report the executor
//! looks for a trigger (design 003):
//!
//! - a step failed after its retries (`step_failed`), ran out of time (`step_timeout`) or
//!   gave an output its `expect` condition rejects (`unexpected_result`);
//! - the user asked for a change (`POST /v1/runs/{id}/replan`, stored before it is
//!   acknowledged, then woken through [`Wakes`]; the wait does not end a step early unless a
//!   request came);
//! - the run's token or step use reached `engine.limit_near_ratio` of its limit (once).
//!
//! On a trigger the plan is abandoned where it stands (finished steps committed, running
//! ones cancelled), the `replanner` function answers with a strategy the policy allows for
//! that trigger and the new plan ([`replanner`]), and version N+1 runs on a fresh scheduler
//! with the completed steps it keeps carried over: they never run again and keep their
//! outputs. Each version is stored with its trigger, strategy and diff, and announced by a
//! `plan` event carrying the same.
//!
//! Nothing loops forever: re-plans count against `max_replans` (the versions are the count,
//! so a resumed run counts on); a failure that already triggered a re-plan coming back the
//! same (step, code and message), or a model-written version equal to an earlier one, ends
//! the run with `loop_detected` — `partial` with the outputs so far, or `error`.
//!
//! Resuming: the stored versions, the checkpoints (a version's first checkpoint carries what
//! it kept) and the stored user requests are all the executor needs. A failure restored from
//! the checkpoints that no version answered yet is a trigger again, so a run killed while it
//! re-planned asks again.

mod replanner;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};
use tokio::sync::Notify;

use crate::domain::event::ErrorData;
use crate::domain::replan::{PlanDiff, Strategy, Trigger, TriggerKind};
use crate::domain::{ErrorCode, RunError, StepPath, StepStatus};
use crate::plan::{Problem, ValidPlan};
use crate::store::PlanRecord;

use super::fixed::{self, FIRST_VERSION};
use super::planner::{self, Planned};
use super::review::{self, Verdict};
use super::runtime::checkpoint::{self, Delta, PlanDelta, PlanProgress, Restored};
use super::runtime::context::RunContext;
use super::runtime::outcome::{Executor, Outcome};
use super::scheduler::{Next, Report, Scheduler};
use super::simple::Simple;
use replanner::{Replanned, Version};

pub struct Reactive;

#[async_trait]
impl Executor for Reactive {
    async fn execute(&self, ctx: &RunContext) -> Outcome {
        let registered = ctx.services.replans.register(ctx.run_id);
        match Run::start(ctx).await {
            Ok(Start::Ready(run)) => run.drive(ctx, &registered.notify).await,
            Ok(Start::Done(outcome)) => outcome,
            Err(e) => Outcome::Failed(e),
        }
    }
}

enum Start {
    Ready(Run),
    /// The run ended before any plan ran (planning failed and fell back, or failed).
    Done(Outcome),
}

/// A reactive run's plan versions and where the current one stands.
struct Run {
    versions: Vec<Version>,
    plan: Arc<ValidPlan>,
    /// Where the current version starts from (taken by its scheduler).
    progress: PlanProgress,
    /// The number of the last user request a version answered.
    requests_answered: u64,
    /// A `limit_near` re-plan happened (it happens once).
    limit_near_done: bool,
    /// The `replan_limit_exceeded` error event went out.
    replan_limit_told: bool,
    /// The version the user's pending request asked to go back to (`restore_version`): the
    /// next version is that one, without asking the re-planner.
    restore_asked: Option<u32>,
}

/// What to do about a trigger.
enum Decision {
    Replan,
    /// The plan goes on as if nothing triggered (the policy allows no strategy for it, the
    /// re-plans are spent, or a run limit was passed).
    GoOn,
    /// The same failure came back after a re-plan.
    Loop(RunError),
}

impl Run {
    /// Version 1 on a first start; the stored versions and checkpoints on a resume.
    async fn start(ctx: &RunContext) -> Result<Start, RunError> {
        let stored = ctx
            .services
            .store()
            .list_plans(ctx.run_id)
            .await
            .map_err(|e| {
                RunError::new(
                    ErrorCode::StoreUnavailable,
                    format!("could not read the run's plans: {e}"),
                )
            })?;
        if stored.is_empty() {
            return Self::first(ctx).await;
        }
        let versions: Vec<Version> = stored.into_iter().map(version_of).collect();
        let current = versions.last().expect("not empty");
        let plan = Arc::new(fixed::revalidate(ctx, &current.doc)?);
        if !ctx.resumed {
            // A fork's first start: its stream shows the version it goes on with.
            let doc = Arc::new(current.doc.clone());
            fixed::show_plan(
                ctx,
                &plan,
                doc,
                current.number,
                "fork",
                current.change.clone(),
            )
            .await;
        }
        let progress = match checkpoint::restore(ctx).await? {
            Restored::Plan(p) if p.plan_version == current.number => p,
            Restored::Plan(p) => carry(&p, &plan, current.number),
            _ => PlanProgress::default(),
        };
        Ok(Start::Ready(Run::new(versions, plan, progress)))
    }

    /// The first version: the request's plan, or the planner's.
    async fn first(ctx: &RunContext) -> Result<Start, RunError> {
        if ctx.restores()
            && let Ok(Restored::Conversation(_)) = checkpoint::restore(ctx).await
        {
            // Stopped while answering as `simple` after planning failed: go on with that.
            return Ok(Start::Done(Simple.execute(ctx).await));
        }
        let (plan, doc) = match (&ctx.plan, &ctx.spec.request.plan) {
            (Some(plan), Some(doc)) => (plan.clone(), doc.clone()),
            (None, Some(doc)) => (Arc::new(fixed::revalidate(ctx, doc)?), doc.clone()),
            _ => match planner::make_plan(ctx).await? {
                Planned::Valid(plan, doc) => (Arc::new(*plan), doc),
                Planned::Invalid(problems) => {
                    return Ok(Start::Done(planner::fall_back(ctx, &problems).await));
                }
            },
        };
        fixed::announce_plan(ctx, &plan, &doc, FIRST_VERSION, None).await;
        let first = Version {
            number: FIRST_VERSION,
            doc,
            change: None,
        };
        Ok(Start::Ready(Run::new(
            vec![first],
            plan,
            PlanProgress::default(),
        )))
    }

    fn new(versions: Vec<Version>, plan: Arc<ValidPlan>, progress: PlanProgress) -> Run {
        let triggers = || {
            versions
                .iter()
                .filter_map(|v| v.change.as_ref())
                .map(|c| &c.trigger)
        };
        Run {
            requests_answered: triggers().filter_map(|t| t.request).max().unwrap_or(0),
            limit_near_done: triggers().any(|t| t.kind == TriggerKind::LimitNear),
            replan_limit_told: false,
            restore_asked: None,
            versions,
            plan,
            progress,
        }
    }

    fn current(&self) -> &Version {
        self.versions.last().expect("a reactive run has a plan")
    }

    /// Runs versions until one ends without a trigger that re-plans.
    async fn drive(mut self, ctx: &RunContext, wake: &Notify) -> Outcome {
        loop {
            tighten_clock(ctx, &self.plan);
            // A failure restored from the checkpoints that no version answered yet.
            let restored = restored_failure(&self.progress);
            let progress = std::mem::take(&mut self.progress);
            let mut scheduler =
                Scheduler::new(ctx, self.plan.clone(), self.current().number, progress);
            let trigger = match restored {
                Some(t) => Some(t),
                None => match self.watch(ctx, &mut scheduler, wake).await {
                    Ok(t) => t,
                    Err(e) => return Outcome::Failed(e),
                },
            };
            let Some(trigger) = trigger else {
                return scheduler.finish().await;
            };
            match self.decide(ctx, &trigger).await {
                Decision::GoOn => return scheduler.run().await,
                Decision::Loop(error) => {
                    let progress = scheduler.abandon("the run is ending").await;
                    return loop_detected(ctx, error, &progress).await;
                }
                Decision::Replan => {}
            }
            let reason = format!("a new plan replaces this one ({})", trigger.kind.as_str());
            let progress = scheduler.abandon(&reason).await;
            let replanned = match self.restore_asked.take() {
                Some(version) => replanner::restore(ctx, &trigger, &self.versions, version),
                None => self.replan_reviewed(ctx, &trigger, &progress).await,
            };
            match replanned {
                Ok(Ok(replanned)) => {
                    if let Some(error) = self.repeats_a_version(&replanned) {
                        return loop_detected(ctx, error, &progress).await;
                    }
                    self.adopt(ctx, replanned, &progress).await;
                }
                Ok(Err(problems)) => {
                    let error = RunError::new(
                        ErrorCode::PlanningFailed,
                        format!(
                            "no valid new plan after {} repairs: {}",
                            ctx.services.config.max_plan_repairs,
                            crate::plan::list_problems(&problems)
                        ),
                    );
                    return ended(error, &progress);
                }
                Err(error) => return ended(error, &progress),
            }
        }
    }

    /// Runs the scheduler until a trigger, or to its end (`None`).
    async fn watch(
        &mut self,
        ctx: &RunContext,
        scheduler: &mut Scheduler<'_>,
        wake: &Notify,
    ) -> Result<Option<Trigger>, RunError> {
        let mut check_requests = true;
        loop {
            if check_requests {
                check_requests = false;
                if let Some(trigger) = self.pending_request(ctx).await? {
                    return Ok(Some(trigger));
                }
            }
            if let Some(trigger) = self.limit_near(ctx) {
                return Ok(Some(trigger));
            }
            match scheduler.next_or_woken(wake).await {
                Next::Report(report) => {
                    if let Some(trigger) = trigger_of(ctx, &report) {
                        return Ok(Some(trigger));
                    }
                }
                Next::Woken => check_requests = true,
                Next::Done => return Ok(None),
            }
        }
    }

    /// The user's requests no version answered yet, as one trigger; the last one may ask to
    /// go back to an earlier version ([`Self::restore_asked`]).
    async fn pending_request(&mut self, ctx: &RunContext) -> Result<Option<Trigger>, RunError> {
        let pending = ctx
            .services
            .store()
            .replan_requests_after(ctx.run_id, self.requests_answered)
            .await
            .map_err(|e| {
                RunError::new(
                    ErrorCode::StoreUnavailable,
                    format!("could not read the run's re-plan requests: {e}"),
                )
            })?;
        let Some(last) = pending.last() else {
            return Ok(None);
        };
        self.restore_asked = last.restore_version;
        let message: Vec<&str> = pending.iter().map(|r| r.message.as_str()).collect();
        Ok(Some(Trigger {
            kind: TriggerKind::User,
            step_id: None,
            error: None,
            message: Some(message.join("\n")),
            request: Some(last.seq),
        }))
    }

    /// `limit_near` once the run's tokens or steps reach the configured share of their limit.
    fn limit_near(&self, ctx: &RunContext) -> Option<Trigger> {
        if self.limit_near_done {
            return None;
        }
        let ratio = ctx.services.config.limit_near_ratio;
        let usage = ctx.usage();
        let tokens = usage.prompt_tokens + usage.completion_tokens;
        let steps = ctx.counters().steps;
        let near = |used: u64, limit: u64| limit > 0 && used as f64 >= ratio * limit as f64;
        let message = if near(tokens, ctx.limits.max_tokens) {
            format!(
                "the run has used {tokens} of its {} tokens",
                ctx.limits.max_tokens
            )
        } else if near(steps, ctx.limits.max_steps) {
            format!(
                "the run has started {steps} of its {} steps",
                ctx.limits.max_steps
            )
        } else {
            return None;
        };
        Some(Trigger {
            kind: TriggerKind::LimitNear,
            step_id: None,
            error: None,
            message: Some(message),
            request: None,
        })
    }

    async fn decide(&mut self, ctx: &RunContext, trigger: &Trigger) -> Decision {
        // The policy says what the re-planner may do; a user going back to a version they
        // name does not ask it.
        let policy = &ctx.services.config.replan_policy;
        if ctx.breached().is_some()
            || (self.restore_asked.is_none() && policy.allowed(trigger.kind).is_empty())
        {
            self.restore_asked = None;
            return Decision::GoOn;
        }
        if let Some(error) = self.failed_again(trigger) {
            return Decision::Loop(error);
        }
        let used = u64::from(self.current().number - FIRST_VERSION);
        if used >= ctx.limits.max_replans {
            self.restore_asked = None;
            if !self.replan_limit_told {
                self.replan_limit_told = true;
                let told = ErrorData {
                    error: RunError::new(
                        ErrorCode::ReplanLimitExceeded,
                        format!(
                            "{} needs a new plan, but the run has used its {} re-plans",
                            trigger.describe(),
                            ctx.limits.max_replans
                        ),
                    ),
                    step_id: trigger.step_id.clone(),
                };
                let step = trigger.step_id.as_deref().map(StepPath::top);
                ctx.emit(step.as_ref(), told).await;
            }
            return Decision::GoOn;
        }
        Decision::Replan
    }

    /// The same step failing the same way after a re-plan that answered that failure.
    fn failed_again(&self, trigger: &Trigger) -> Option<RunError> {
        let (step, error) = (trigger.step_id.as_ref()?, trigger.error.as_ref()?);
        let answered = self.versions.iter().find(|v| {
            v.change.as_ref().is_some_and(|c| {
                c.trigger.step_id.as_ref() == Some(step)
                    && c.trigger
                        .error
                        .as_ref()
                        .is_some_and(|e| e.code == error.code && e.message == error.message)
            })
        })?;
        Some(RunError::new(
            ErrorCode::LoopDetected,
            format!(
                "step `{step}` failed again as it did before version {} was made: {} ({})",
                answered.number, error.message, error.code
            ),
        ))
    }

    /// A model-written version equal (as JSON, key order aside) to an earlier one.
    fn repeats_a_version(&self, replanned: &Replanned) -> Option<RunError> {
        if matches!(
            replanned.change.strategy,
            Strategy::Retry | Strategy::Restore
        ) {
            return None;
        }
        let same = self.versions.iter().find(|v| v.doc == replanned.doc)?;
        Some(RunError::new(
            ErrorCode::LoopDetected,
            format!(
                "the re-planner answered with version {}'s plan again (strategy `{}`)",
                same.number,
                replanned.change.strategy.as_str()
            ),
        ))
    }

    /// Asks the re-planner for the next version and, when the run reviews plans, the
    /// reviewer (see [`review`]): a rejected version goes back to the re-planner with the
    /// reviewer's reason, up to `engine.max_plan_repairs` times.
    async fn replan_reviewed(
        &self,
        ctx: &RunContext,
        trigger: &Trigger,
        progress: &PlanProgress,
    ) -> Result<Result<Replanned, Vec<Problem>>, RunError> {
        let number = self.current().number + 1;
        let mut trigger = trigger.clone();
        let mut reason = String::new();
        for attempt in 0..=ctx.services.config.max_plan_repairs {
            let replanned = match replanner::replan(ctx, &trigger, &self.versions, progress).await?
            {
                Ok(replanned) => replanned,
                Err(problems) => return Ok(Err(problems)),
            };
            let Replanned {
                doc,
                plan,
                mut change,
            } = replanned;
            match review::review(ctx, number, attempt, doc, plan).await? {
                Verdict::Run { doc, plan, edited } => {
                    if edited {
                        change.explanation.push_str(" (edited by the reviewer)");
                        change.diff = PlanDiff::between(&self.current().doc, &doc);
                    }
                    let plan = *plan;
                    return Ok(Ok(Replanned { doc, plan, change }));
                }
                Verdict::Rejected(why) => {
                    let told = format!("The reviewer rejected the new plan: {why}");
                    trigger.message = Some(match trigger.message.take() {
                        Some(message) => format!("{message}\n{told}"),
                        None => told,
                    });
                    reason = why;
                }
            }
        }
        Ok(Err(vec![planner::rejected(&reason)]))
    }

    /// Makes `replanned` the current version: stored, announced, and started from what the
    /// abandoned one completed.
    async fn adopt(&mut self, ctx: &RunContext, replanned: Replanned, before: &PlanProgress) {
        let number = self.current().number + 1;
        let Replanned { doc, plan, change } = replanned;
        fixed::announce_plan(ctx, &plan, &doc, number, Some(change.clone())).await;
        let carried = carry(before, &plan, number);
        let kept = PlanDelta {
            plan_version: number,
            reset: true,
            steps: carried.steps.clone(),
            variables: Some(carried.variables.clone()),
            ..Default::default()
        };
        checkpoint::save(ctx, number, &Delta::Plan(kept)).await;
        if let Some(request) = change.trigger.request {
            self.requests_answered = request;
        }
        self.limit_near_done |= change.trigger.kind == TriggerKind::LimitNear;
        self.plan = Arc::new(plan);
        self.progress = carried;
        self.versions.push(Version {
            number,
            doc,
            change: Some(change),
        });
    }
}

fn version_of(record: PlanRecord) -> Version {
    Version {
        number: record.version,
        change: record.change(),
        doc: std::sync::Arc::unwrap_or_clone(record.plan),
    }
}

/// What version `number` (`plan`) starts from: the completed steps it still has, with their
/// outputs, and the variables (the new plan's over the old).
fn carry(before: &PlanProgress, plan: &ValidPlan, number: u32) -> PlanProgress {
    let steps = before
        .steps
        .iter()
        .filter(|(id, r)| r.status == StepStatus::Completed && plan.position(id).is_some())
        .map(|(id, r)| (id.clone(), r.clone()))
        .collect();
    let mut variables: Map<String, Value> = before.variables.clone();
    variables.extend(plan.plan().context.clone());
    PlanProgress {
        plan_version: number,
        steps,
        children: Default::default(),
        variables,
        released: Vec::new(),
    }
}

/// The trigger a committed step gives, if any. Run limits are final: no trigger past them.
fn trigger_of(ctx: &RunContext, report: &Report) -> Option<Trigger> {
    if report.status != StepStatus::Failed || ctx.breached().is_some() {
        return None;
    }
    let error = report.error.clone()?;
    failure_trigger(report.step_id.as_str(), error)
}

fn failure_trigger(step_id: &str, error: RunError) -> Option<Trigger> {
    let kind = match error.code {
        ErrorCode::UnexpectedResult => TriggerKind::UnexpectedResult,
        ErrorCode::StepTimeout => TriggerKind::StepTimeout,
        ErrorCode::Cancelled
        | ErrorCode::Interrupted
        | ErrorCode::TimedOut
        | ErrorCode::LoopDetected
        | ErrorCode::StepLimitExceeded
        | ErrorCode::TokenLimitExceeded => return None,
        _ => TriggerKind::StepFailed,
    };
    Some(Trigger {
        kind,
        step_id: Some(step_id.to_owned()),
        error: Some(error),
        message: None,
        request: None,
    })
}

/// A failed top-level step in restored progress: the run stopped before answering it.
fn restored_failure(progress: &PlanProgress) -> Option<Trigger> {
    progress
        .steps
        .iter()
        .find_map(|(id, r)| match (&r.status, &r.error) {
            (StepStatus::Failed, Some(error)) => failure_trigger(id, error.clone()),
            _ => None,
        })
}

fn tighten_clock(ctx: &RunContext, plan: &ValidPlan) {
    if let Some(ms) = plan.plan().settings.max_execution_time_ms {
        ctx.clock.tighten(std::time::Duration::from_millis(ms));
    }
}

/// Ends the run with `error`: `partial` with the outputs of the steps that completed, or
/// `error` when none did.
fn ended(error: RunError, progress: &PlanProgress) -> Outcome {
    match super::runtime::completion::completed_outputs(&progress.steps) {
        Some(done) => Outcome::Partial(done, error),
        None => Outcome::Failed(error),
    }
}

/// Says what repeated (an `error` event `loop_detected`), then ends the run.
async fn loop_detected(ctx: &RunContext, error: RunError, progress: &PlanProgress) -> Outcome {
    let told = ErrorData {
        error: error.clone(),
        step_id: None,
    };
    ctx.emit(None, told).await;
    ended(error, progress)
}
