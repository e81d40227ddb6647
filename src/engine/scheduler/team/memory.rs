//! An agent's memory around its turn (`memory` in its definition, issue 48): before the turn,
//! the `recall` items of its memory closest to the turn's request, found by a `memory.search`
//! call, go into its system prompt; after it, with `remember`, the `summarizer` function's
//! summary of its conversation is written by a `memory.put` call. Both are tool calls like any
//! (events, attempts at `<turn>/recall`, `<turn>/remember-put`), in the run's own memory only. A
//! recall that fails is told as an `error` event and the turn goes on without it; a failing
//! write fails the turn, as a failing tool step fails its step.

use serde_json::{Value, json};

use crate::domain::attempt_io::ToolInput;
use crate::domain::event::ErrorData;
use crate::domain::{RunError, Segment, StepKind, StepPath};
use crate::llm::Message;
use crate::plan::team::AgentMemory;

use super::handoff::summarize;
use super::turn::last_user_text;
use crate::engine::calls::tool_call::{ToolArguments, ToolCall, call_tool};
use crate::engine::runtime::attempts::{AttemptEnd, NewAttempt};
use crate::engine::runtime::sink::EventSink;
use crate::engine::scheduler::frame::Frame;

/// The longest query a recall sends: the end of a long request is cut.
const MAX_QUERY_CHARS: usize = 2000;

/// What the agent recalls for the request in `messages`, as lines for its system prompt
/// (empty when it recalls nothing).
pub(crate) async fn recalled(
    frame: &Frame<'_>,
    memory: &AgentMemory,
    path: &StepPath,
    messages: &[Message],
    sink: &mut EventSink,
) -> String {
    let request: String = last_user_text(messages)
        .chars()
        .take(MAX_QUERY_CHARS)
        .collect();
    if memory.recall == 0 || request.trim().is_empty() {
        return String::new();
    }
    let mut args = json!({ "query": request, "scope": memory.scope, "limit": memory.recall });
    if let Some(ns) = &memory.namespace {
        args["namespace"] = json!(ns);
    }
    let step = path.join(Segment::Recall);
    let found = match tool_attempt(frame, &step, "memory.search", args, sink).await {
        Ok(found) => found,
        Err(error) => {
            let told = ErrorData {
                error,
                step_id: Some(step.leaf().to_owned()),
            };
            sink.emit(frame.ctx, Some(&step), told).await;
            return String::new();
        }
    };
    let lines: Vec<String> = (found["items"].as_array().into_iter().flatten())
        .map(|item| {
            let value = match &item["value"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            format!("- {}: {value}", item["key"].as_str().unwrap_or_default())
        })
        .collect();
    match lines.is_empty() {
        true => String::new(),
        false => format!(
            "\n\nWhat you remember from earlier conversations (use it when it helps):\n{}",
            lines.join("\n")
        ),
    }
}

/// Writes the summary of `transcript` to the agent's memory, under `session-<id>` (or
/// `run-<id>` for a run of no session).
pub(crate) async fn remember(
    frame: &Frame<'_>,
    memory: &AgentMemory,
    path: &StepPath,
    transcript: &[Message],
    sink: &mut EventSink,
) -> Result<(), RunError> {
    let ctx = frame.ctx;
    let (summary, held) = summarize(frame, &path.join(Segment::Remember), transcript, sink).await?;
    let key = match &ctx.spec.request.session_id {
        Some(session) => format!(
            "session-{}",
            crate::domain::memory::session_segment(session)
        ),
        None => format!("run-{}", ctx.run_id),
    };
    let mut args = json!({ "key": key, "value": summary, "scope": memory.scope });
    if let Some(ns) = &memory.namespace {
        args["namespace"] = json!(ns);
    }
    let written = tool_attempt(
        frame,
        &path.join(Segment::RememberPut),
        "memory.put",
        args,
        sink,
    )
    .await;
    held.close(ctx, sink).await;
    written.map(drop)
}

/// One call of `tool` as its own attempt at `step`.
async fn tool_attempt(
    frame: &Frame<'_>,
    step: &StepPath,
    tool: &str,
    arguments: Value,
    sink: &mut EventSink,
) -> Result<Value, RunError> {
    let ctx = frame.ctx;
    let new = NewAttempt {
        step,
        name: tool,
        kind: StepKind::Tool,
        plan_version: frame.plan_version,
        input: Some(
            ToolInput {
                tool: tool.to_owned(),
                arguments: arguments.clone(),
            }
            .into(),
        ),
    };
    let key = ctx.open_attempt(new, sink).await?;
    let call = ToolCall {
        step,
        call_id: step.leaf(),
        tool,
        arguments: ToolArguments::Json(arguments),
    };
    let result = call_tool(ctx, call, sink).await;
    let end = match &result {
        Ok(output) => AttemptEnd::completed(output.clone()),
        Err(e) => AttemptEnd::failed(e.clone()),
    };
    ctx.close_attempt(&key, end, sink).await;
    result
}
