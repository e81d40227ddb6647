//! Plan review: a run whose request set `review_plans` shows each plan version a model wrote
//! (the planner's first plan, each version the re-planner writes) to a person before it runs.
//!
//! The run waits as for any human input (`waiting_input`, its slot given back, its clock
//! paused), with an `input_required` event of kind `plan_review` that carries the version and
//! the plan. The answer (`POST /v1/runs/{id}/input`) is one of:
//!
//! - `{"decision": "approve"}`: the plan runs as written;
//! - `{"decision": "edit", "plan": {...}}`: the reviewer's plan runs instead, once it
//!   validates like any plan (when it does not, its problems go out as an `error` event and
//!   the review is asked again, up to `engine.max_plan_repairs` more times);
//! - `{"decision": "reject", "reason": "..."}`: the planner (or re-planner) writes another,
//!   told the reason.
//!
//! A review is asked at `review-<version>-<digest>-<round>`, the digest naming the plan and the
//! round counting on across the plans written for one version (the `attempt`): a plan written
//! again after a rejection, even the very same one, is asked under a new id. A run stopped
//! while it waited plans again when resumed; the same plan finds its stored answers (and asks
//! on where they end), another plan is asked about afresh.

use std::sync::LazyLock;

use serde_json::{Value, json};

use crate::domain::event::ErrorData;
use crate::domain::{ErrorCode, RunError, Segment, StepPath};
use crate::plan::{self, JsonSchema, ValidPlan};

use super::runtime::context::RunContext;

/// What a review answer must look like.
static ANSWER: LazyLock<JsonSchema> = LazyLock::new(|| {
    JsonSchema::compile(&json!({
        "type": "object",
        "required": ["decision"],
        "additionalProperties": false,
        "properties": {
            "decision": { "enum": ["approve", "edit", "reject"] },
            "plan": { "type": "object" },
            "reason": { "type": "string", "minLength": 1, "maxLength": 8000 }
        },
        "allOf": [
            { "if": { "properties": { "decision": { "const": "edit" } } },
              "then": { "required": ["plan"] } },
            { "if": { "properties": { "decision": { "const": "reject" } } },
              "then": { "required": ["reason"] } }
        ]
    }))
    .expect("the review answer schema compiles")
});

/// What the review decided.
pub enum Verdict {
    /// This plan runs: the one proposed, or the reviewer's edit of it.
    Run {
        doc: Value,
        plan: Box<ValidPlan>,
        edited: bool,
    },
    /// Write another: the reviewer's reason.
    Rejected(String),
}

/// Has plan version `version` (`doc`, validated as `plan`) reviewed when the run asks for
/// reviews; `Run` as proposed at once when it does not. `attempt` counts the plans written for
/// this version before this one (0 for the first).
pub async fn review(
    ctx: &RunContext,
    version: u32,
    attempt: u32,
    doc: Value,
    plan: ValidPlan,
) -> Result<Verdict, RunError> {
    if !ctx.spec.request.review_plans {
        return Ok(Verdict::Run {
            doc,
            plan: Box::new(plan),
            edited: false,
        });
    }
    let digest = digest(&doc);
    let mut problems = String::new();
    let rounds = ctx.services.config.max_plan_repairs + 1;
    for round in 1..=rounds {
        let step = StepPath::root().join(Segment::Review {
            version,
            plan: &digest,
            round: attempt.saturating_mul(rounds).saturating_add(round),
        });
        let prompt = prompt(version, &problems);
        let answer = ctx
            .wait_for_review(&step, &prompt, &ANSWER, version, &doc)
            .await?;
        let field = |name: &str| answer.get(name).cloned().unwrap_or(Value::Null);
        match field("decision").as_str() {
            Some("approve") => {
                return Ok(Verdict::Run {
                    doc,
                    plan: Box::new(plan),
                    edited: false,
                });
            }
            Some("reject") => {
                let reason = field("reason").as_str().unwrap_or_default().to_owned();
                return Ok(Verdict::Rejected(reason));
            }
            _ => {}
        }
        let edited = field("plan");
        match plan::validate_plan(&edited, ctx.services.catalog()) {
            Ok(valid) => {
                return Ok(Verdict::Run {
                    doc: edited,
                    plan: Box::new(valid),
                    edited: true,
                });
            }
            Err(found) => {
                problems = crate::plan::list_problems(&found);
                let told = ErrorData {
                    error: RunError::new(
                        ErrorCode::InvalidPlan,
                        format!("the edited plan is invalid: {problems}"),
                    ),
                    step_id: Some(step.leaf().to_owned()),
                };
                ctx.emit(Some(&step), told).await;
            }
        }
    }
    Ok(Verdict::Rejected(format!(
        "the reviewer's edits did not validate: {problems}"
    )))
}

fn prompt(version: u32, problems: &str) -> String {
    let mut text = format!(
        "Review plan version {version} before it runs: approve it, edit it (send the whole plan), or reject it with a reason for the planner."
    );
    if !problems.is_empty() {
        text.push_str(&format!(" Your last edit was invalid: {problems}"));
    }
    text
}

/// The first 8 hex digits of the SHA-256 of the plan's JSON text (its keys sorted).
fn digest(doc: &Value) -> String {
    use sha2::{Digest, Sha256};
    let hash = Sha256::digest(doc.to_string().as_bytes());
    hash.iter().take(4).map(|b| format!("{b:02x}")).collect()
}
