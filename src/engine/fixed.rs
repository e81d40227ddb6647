//! The `fixed` executor: runs the plan the request resolved to (a registered or inline
//! workflow, or a ready plan) on the [`Scheduler`]. On a resume it restores the run's
//! checkpoints, so completed steps are not run again.
//!
//! [`run_plan`] is the part every plan-running executor shares: announce a plan version (or,
//! resumed, restore where it stood) and run it to its end.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::domain::event::PlanData;
use crate::domain::replan::PlanChange;
use crate::domain::{ErrorCode, RunError};
use crate::plan::{self, ValidPlan};
use crate::store::Record;

use super::runtime::checkpoint::{self, PlanProgress, Restored};
use super::runtime::context::RunContext;
use super::runtime::outcome::{Executor, Outcome};
use super::scheduler::Scheduler;

/// The version of a run's first plan.
pub use crate::domain::plan::FIRST_VERSION;

pub struct Fixed;

#[async_trait]
impl Executor for Fixed {
    async fn execute(&self, ctx: &RunContext) -> Outcome {
        let plan = match the_plan(ctx) {
            Ok(p) => p,
            Err(e) => return Outcome::Failed(e),
        };
        let doc = ctx
            .spec
            .request
            .plan
            .clone()
            .unwrap_or_else(|| plan.document());
        run_plan(ctx, plan, &doc).await
    }
}

/// Runs `plan` (version 1, the document `doc`) to its end: announced on a first start,
/// restored from the run's checkpoints on a resume.
pub async fn run_plan(ctx: &RunContext, plan: Arc<ValidPlan>, doc: &Value) -> Outcome {
    if let Some(ms) = plan.plan().settings.max_execution_time_ms {
        ctx.clock.tighten(std::time::Duration::from_millis(ms));
    }
    let first_start = ctx.run().plan_version.is_none();
    let progress = if first_start {
        announce_plan(ctx, &plan, doc, FIRST_VERSION, None).await;
        PlanProgress::default()
    } else {
        if !ctx.resumed {
            // A fork's first start: its stream shows the plan it goes on with.
            let doc = std::sync::Arc::new(doc.clone());
            show_plan(ctx, &plan, doc, FIRST_VERSION, "fork", None).await;
        }
        match restore(ctx).await {
            Ok(p) => p,
            Err(e) => return Outcome::Failed(e),
        }
    };
    Scheduler::new(ctx, plan, FIRST_VERSION, progress)
        .run()
        .await
}

/// The plan validated when the run was created or, after a restart, the stored plan
/// document validated again (against today's tools).
fn the_plan(ctx: &RunContext) -> Result<Arc<ValidPlan>, RunError> {
    if let Some(plan) = &ctx.plan {
        return Ok(plan.clone());
    }
    let Some(doc) = ctx.spec.request.plan.as_ref() else {
        return Err(RunError::new(ErrorCode::InvalidPlan, "the run has no plan"));
    };
    revalidate(ctx, doc).map(Arc::new)
}

/// A stored plan document validated again, against today's tools and functions.
pub fn revalidate(ctx: &RunContext, doc: &Value) -> Result<ValidPlan, RunError> {
    plan::validate_plan(doc, ctx.services.catalog()).map_err(|problems| {
        RunError::new(
            ErrorCode::InvalidPlan,
            format!(
                "the plan no longer validates: {}",
                plan::list_problems(&problems)
            ),
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

/// Stores plan `version` and emits the `plan` event (with the critical path). Its reason is
/// `initial`, or for a later version the kind of its trigger.
pub async fn announce_plan(
    ctx: &RunContext,
    plan: &ValidPlan,
    doc: &Value,
    version: u32,
    change: Option<PlanChange>,
) {
    let reason = change
        .as_ref()
        .map_or("initial", |c| c.trigger.kind.as_str());
    // One copy of the document for the store, the run's ledger and the event.
    let doc = std::sync::Arc::new(doc.clone());
    ctx.record(Record::Plan {
        run: ctx.run_id,
        version,
        reason: reason.to_owned(),
        plan: std::sync::Arc::clone(&doc),
        change: change.clone().map(Box::new),
    })
    .await;
    ctx.update_run(|r| r.plan_version = Some(version));
    ctx.save_run().await;
    show_plan(ctx, plan, doc, version, reason, change).await;
}

/// Emits the `plan` event of version `version` (with the critical path).
pub async fn show_plan(
    ctx: &RunContext,
    plan: &ValidPlan,
    doc: std::sync::Arc<Value>,
    version: u32,
    reason: &str,
    change: Option<PlanChange>,
) {
    let announced = PlanData {
        version,
        reason: reason.to_owned(),
        plan: doc,
        critical_path: plan.critical_path().iter().map(|s| s.to_string()).collect(),
        critical_path_ms: plan.critical_path_ms(),
        change,
    };
    ctx.emit(None, announced).await;
}
