//! The `fixed` executor: runs the plan the request resolved to (a registered or inline
//! workflow, or a ready plan) on the [`Scheduler`]. On a resume it restores the last
//! checkpoint, so completed steps are not run again.

use std::sync::Arc;

use async_trait::async_trait;

use crate::domain::event::PlanData;
use crate::domain::{ErrorCode, RunError};
use crate::plan::{self, ValidPlan};
use crate::store::Record;

use super::checkpoint::{self, PlanProgress, Restored};
use super::context::RunContext;
use super::executor::{Executor, Outcome};
use super::scheduler::Scheduler;

const PLAN_VERSION: u32 = 1;

pub struct Fixed;

#[async_trait]
impl Executor for Fixed {
    async fn execute(&self, ctx: &RunContext) -> Outcome {
        let plan = match the_plan(ctx) {
            Ok(p) => p,
            Err(e) => return Outcome::Failed(e),
        };
        if let Some(ms) = plan.plan().settings.max_execution_time_ms {
            ctx.clock.tighten(std::time::Duration::from_millis(ms));
        }
        let first_start = ctx.run().plan_version.is_none();
        let progress = if first_start {
            announce_plan(ctx, &plan, "initial").await;
            PlanProgress::default()
        } else {
            match restore(ctx).await {
                Ok(p) => p,
                Err(e) => return Outcome::Failed(e),
            }
        };
        Scheduler::new(ctx, plan, PLAN_VERSION, progress)
            .run()
            .await
    }
}

/// The plan validated when the run was created or, after a restart, the stored plan
/// document validated again (against today's tools).
fn the_plan(ctx: &RunContext) -> Result<Arc<ValidPlan>, RunError> {
    if let Some(plan) = &ctx.plan {
        return Ok(plan.clone());
    }
    let Some(doc) = ctx.spec.plan.as_ref() else {
        return Err(RunError::new(ErrorCode::InvalidPlan, "the run has no plan"));
    };
    plan::validate_plan(doc, ctx.services.catalog())
        .map(Arc::new)
        .map_err(|problems| {
            let list: Vec<String> = problems
                .iter()
                .map(|p| format!("{} {}", p.pointer, p.message))
                .collect();
            RunError::new(
                ErrorCode::InvalidPlan,
                format!("the plan no longer validates: {}", list.join("; ")),
            )
        })
}

/// Where the plan stood when the run stopped, as its checkpoints say.
async fn restore(ctx: &RunContext) -> Result<PlanProgress, RunError> {
    match checkpoint::restore(ctx).await? {
        Restored::Nothing => Ok(PlanProgress::default()),
        Restored::Plan(progress) => Ok(progress),
        Restored::Conversation(_) => Err(RunError::new(
            ErrorCode::InternalError,
            "the run's checkpoints hold a conversation, not a plan",
        )),
    }
}

/// Stores the plan version and emits the `plan` event (with the critical path).
async fn announce_plan(ctx: &RunContext, plan: &ValidPlan, reason: &str) {
    let doc = ctx.spec.plan.clone().unwrap_or_else(|| plan.document());
    ctx.record(Record::Plan {
        run: ctx.run_id,
        version: PLAN_VERSION,
        reason: reason.to_owned(),
        plan: doc.clone(),
    })
    .await;
    ctx.update_run(|r| r.plan_version = Some(PLAN_VERSION));
    ctx.save_run().await;
    let announced = PlanData {
        version: PLAN_VERSION,
        reason: reason.to_owned(),
        plan: doc,
        critical_path: plan.critical_path().iter().map(|s| s.to_string()).collect(),
        critical_path_ms: plan.critical_path_ms(),
    };
    ctx.emit(None, announced).await;
}
