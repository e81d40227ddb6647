//! The `fixed` executor: runs the plan the request resolved to (a registered or inline
//! workflow, or a ready plan) on the DAG engine. On a resume it restores the last checkpoint,
//! so completed steps are not run again.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::domain::{EventKind, RunError};
use crate::plan::{self, ValidPlan};
use crate::store::Record;

use super::Outcome;
use super::context::RunContext;
use super::dag;

const PLAN_VERSION: u32 = 1;

pub async fn execute(ctx: &RunContext) -> Outcome {
    let Some(doc) = ctx.spec.plan.as_ref() else {
        return Outcome::Failed(RunError::new("invalid_plan", "the run has no plan"));
    };
    let valid = match plan::validate_plan(doc, &ctx.services.tools) {
        Ok(v) => v,
        Err(problems) => {
            let list: Vec<String> = problems
                .iter()
                .map(|p| format!("{} {}", p.pointer, p.message))
                .collect();
            return Outcome::Failed(RunError::new(
                "invalid_plan",
                format!("the plan no longer validates: {}", list.join("; ")),
            ));
        }
    };
    let store = ctx.services.hub.store();
    let first_start = ctx.run().plan_version.is_none();
    if first_start {
        announce_plan(ctx, &valid, doc, "initial").await;
    }
    let restored = if first_start {
        dag::Restored::default()
    } else {
        match store.last_checkpoint(ctx.run_id).await {
            Ok(Some((id, _version, state))) => {
                let attempts = ctx.highest_attempts().await;
                dag::restore(&state, attempts, id)
            }
            Ok(None) => dag::Restored {
                attempts: ctx.highest_attempts().await,
                ..Default::default()
            },
            Err(e) => {
                return Outcome::Failed(RunError::new(
                    "store_unavailable",
                    format!("could not read the run's checkpoint: {e}"),
                ));
            }
        }
    };
    dag::execute(ctx, Arc::new(valid), PLAN_VERSION, restored).await
}

/// Stores the plan version and emits the `plan` event (with the critical path).
async fn announce_plan(ctx: &RunContext, valid: &ValidPlan, doc: &Value, reason: &str) {
    ctx.services
        .hub
        .record(Record::Plan {
            run: ctx.run_id,
            version: PLAN_VERSION,
            reason: reason.to_owned(),
            plan: doc.clone(),
        })
        .await;
    ctx.update_run(|r| r.plan_version = Some(PLAN_VERSION));
    ctx.services
        .hub
        .record(Record::RunState(Box::new(ctx.run())))
        .await;
    let critical: Vec<String> = valid
        .critical_path()
        .iter()
        .map(|s| s.to_string())
        .collect();
    ctx.emit(
        EventKind::Plan,
        None,
        json!({
            "version": PLAN_VERSION,
            "reason": reason,
            "plan": doc,
            "critical_path": critical,
            "critical_path_ms": valid.critical_path_ms(),
        }),
    )
    .await;
}
