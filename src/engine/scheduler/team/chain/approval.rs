//! `tool_approval`: a call of a named tool waits for a human's decision, per call, through the
//! run's human-input path ([`RunContext::wait_for_input`]) — the run shows `waiting_input`, an
//! `input_required` event names the tool and its arguments, `POST /v1/runs/{id}/input` answers
//! `{"decision": "approve" | "deny", "reason"?}` for step `<tool step>-approval` (e.g.
//! `tool-1-1-approval`). Approved, the tool runs; denied, the model is told "denied by a human:
//! <reason>" as the call's error and goes on.
//!
//! The answer is stored before it is delivered (at the tool step's path), so a run resumed
//! after a restart takes a stored answer without asking again, and otherwise asks again: the
//! turn's checkpoint still holds the call unanswered, and the tool runs only once decided.

use std::sync::LazyLock;

use serde_json::{Value, json};

use crate::domain::{ErrorCode, RunError, StepPath};
use crate::llm::ToolCall as ModelToolCall;
use crate::plan::{AgentSpec, JsonSchema};

use crate::engine::calls::tool_call::ToolArguments;
use crate::engine::runtime::context::RunContext;

static DECISION: LazyLock<JsonSchema> = LazyLock::new(|| {
    JsonSchema::compile(&json!({
        "type": "object",
        "required": ["decision"],
        "additionalProperties": false,
        "properties": {
            "decision": { "enum": ["approve", "deny"] },
            "reason": { "type": "string", "maxLength": 2000 }
        }
    }))
    .expect("the decision schema compiles")
});

/// Asks a human whether `agent` may make `call` (tool step `step`): `None` when approved, the
/// error the model is told when denied.
pub(crate) async fn ask(
    ctx: &RunContext,
    agent: &AgentSpec,
    step: &StepPath,
    call: &ModelToolCall,
) -> Result<Option<RunError>, RunError> {
    let arguments = ToolArguments::from_text(&call.arguments).shown();
    let prompt = format!(
        "Agent `{}` wants to call the tool `{}` with the arguments {}. Approve or deny it?",
        agent.name, call.name, arguments
    );
    let answer = ctx
        .wait_for_input(&step.approval(), &prompt, Some(&DECISION))
        .await?;
    if answer.get("decision").and_then(Value::as_str) == Some("approve") {
        return Ok(None);
    }
    let reason = answer
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or("no reason given");
    Ok(Some(RunError::new(
        ErrorCode::ToolDenied,
        format!("denied by a human: {reason}"),
    )))
}
