//! The `simple` executor: the run input goes to the model; tool calls the model asks for are
//! executed (validated against each tool's schema first) and answered back, for a bounded
//! number of rounds; the model's last text is the run's output.
//!
//! Each LLM round is a step `llm-N` and each tool call a step `tool-N-M`, so `GET .../steps`
//! shows every call with its timing. A failing tool does not fail the run: the model is told
//! the error and decides; a failing model does.
//!
//! The conversation is checkpointed after every model reply that asks for tools and after
//! every tool result; a run resumed after a restart continues from its last checkpoint, so a
//! tool that already answered is not called again.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::domain::{EventKind, RunError, StepKind, StepStatus};
use crate::llm::{self, ChatRequest, Message, ToolCall, ToolSpec};
use crate::store::Record;
use crate::tools::ToolError;

use super::Outcome;
use super::context::RunContext;
use super::steps::{ModelError, ModelReply, call_model};

const SYSTEM_PROMPT: &str = "You are orca, a helpful assistant. Answer concisely. \
Use the tools you are given when they help; never invent their results.";

/// The user-facing text of a run input: a string as is; an object's `message`, `prompt` or
/// `text` field when it is a string; otherwise the JSON text.
pub fn input_text(input: &Value) -> String {
    match input {
        Value::String(s) => s.clone(),
        Value::Object(m) => ["message", "prompt", "text"]
            .iter()
            .find_map(|k| m.get(*k).and_then(Value::as_str))
            .map(str::to_owned)
            .unwrap_or_else(|| input.to_string()),
        other => other.to_string(),
    }
}

/// A simple run's checkpoint: the conversation so far, stored after every model reply that
/// asks for tools and after every tool result, so that a run resumed after a restart goes on
/// from there instead of asking the model again and re-running tools that already ran.
#[derive(Debug, Serialize, Deserialize)]
struct Conversation {
    /// The model round the conversation is in (1-based).
    round: u32,
    messages: Vec<Message>,
}

/// Simple runs have no plan; their checkpoints and attempts carry plan version 0.
const NO_PLAN: u32 = 0;

pub async fn execute(ctx: &RunContext) -> Outcome {
    let (provider, model) = match ctx.services.llm.resolve(ctx.spec.model.as_deref()) {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(RunError::new(e.code(), e.to_string())),
    };
    let (mut convo, mut checkpoint_id) = match restore(ctx).await {
        Ok(Some(restored)) => restored,
        Ok(None) => (
            Conversation {
                round: 0,
                messages: opening_messages(ctx).await,
            },
            0,
        ),
        Err(e) => return Outcome::Failed(e),
    };
    // After a restart, a step that runs again gets the next attempt number.
    let attempts = if ctx.resumed {
        ctx.highest_attempts().await
    } else {
        Default::default()
    };
    let attempt_of = |step_id: &str| attempts.get(step_id).map_or(1, |a| a + 1);

    let tools: Vec<ToolSpec> = ctx
        .services
        .tools
        .list()
        .into_iter()
        .filter(|t| allowed(ctx, &t.name))
        .map(|t| ToolSpec {
            name: t.name,
            description: t.description,
            parameters: t.input_schema,
        })
        .collect();

    let max_rounds = ctx.services.config.max_tool_rounds;
    loop {
        // Answer the tool calls of the model's last reply that have no result yet (all of them,
        // unless this run resumed in the middle of a tool round).
        for (i, call) in unanswered_calls(&convo.messages) {
            let tool_step = format!("tool-{}-{}", convo.round, i + 1);
            let content = match run_tool(ctx, &tool_step, attempt_of(&tool_step), &call).await {
                Ok(output) => output.to_string(),
                Err(RunErrorOrStop::Stop(e)) => return Outcome::Failed(e),
                Err(RunErrorOrStop::ToolFailed(e)) => json!({ "error": e }).to_string(),
            };
            convo.messages.push(Message::Tool {
                call_id: call.id.clone(),
                content,
            });
            checkpoint_id += 1;
            checkpoint(ctx, checkpoint_id, &convo).await;
        }

        convo.round += 1;
        let round = convo.round;
        if round > max_rounds + 1 {
            return Outcome::Failed(RunError::new(
                "tool_rounds_exceeded",
                format!("the model kept calling tools after {max_rounds} rounds"),
            ));
        }
        let step_id = format!("llm-{round}");
        let attempt = attempt_of(&step_id);
        if let Err(e) = ctx
            .step_started(&step_id, "llm", StepKind::Llm, attempt, NO_PLAN, Some(json!({ "model": ctx.spec.model.clone().unwrap_or_else(|| "default".into()), "round": round })))
            .await
        {
            return Outcome::Failed(e);
        }
        let mut request = ChatRequest::new(model.clone(), convo.messages.clone());
        // On the last allowed round the model gets no tools, so it must answer in text.
        if round <= max_rounds {
            request.tools = tools.clone();
        }
        let reply = match call_llm(ctx, &*provider, request, &step_id).await {
            Ok(r) => r,
            Err(e) => {
                let status = if ctx.cancel.is_cancelled() {
                    StepStatus::Cancelled
                } else {
                    StepStatus::Failed
                };
                ctx.step_finished(&step_id, attempt, status, None, Some(e.clone()))
                    .await;
                return Outcome::Failed(e);
            }
        };
        ctx.step_finished(
            &step_id,
            attempt,
            StepStatus::Completed,
            Some(json!({ "text": reply.text, "tool_calls": reply.tool_calls.len() })),
            None,
        )
        .await;

        if reply.tool_calls.is_empty() {
            return Outcome::Success(Value::String(reply.text));
        }
        convo.messages.push(Message::Assistant {
            content: reply.text,
            tool_calls: reply.tool_calls,
        });
        checkpoint_id += 1;
        checkpoint(ctx, checkpoint_id, &convo).await;
    }
}

/// The system prompt, the session's earlier exchanges, and the run input.
async fn opening_messages(ctx: &RunContext) -> Vec<Message> {
    let mut messages = vec![Message::System {
        content: SYSTEM_PROMPT.to_owned(),
    }];
    if let Some(session) = &ctx.spec.session_id {
        match ctx
            .services
            .hub
            .store()
            .session_history(&ctx.tenant, session, ctx.run_id, 20)
            .await
        {
            Ok(pairs) => {
                for (input, output) in pairs {
                    messages.push(Message::User {
                        content: input_text(&input),
                    });
                    messages.push(Message::Assistant {
                        content: input_text(&output),
                        tool_calls: vec![],
                    });
                }
            }
            Err(e) => {
                tracing::warn!(error = ?e, "loading session history failed; continuing without")
            }
        }
    }
    messages.push(Message::User {
        content: input_text(&ctx.spec.input),
    });
    messages
}

/// The conversation of a resumed run's last checkpoint and that checkpoint's id; `None` for a
/// first start or a run that stopped before its first checkpoint.
async fn restore(ctx: &RunContext) -> Result<Option<(Conversation, u64)>, RunError> {
    if !ctx.resumed {
        return Ok(None);
    }
    let last = ctx
        .services
        .hub
        .store()
        .last_checkpoint(ctx.run_id)
        .await
        .map_err(|e| {
            RunError::new(
                "store_unavailable",
                format!("could not read the run's checkpoint: {e}"),
            )
        })?;
    let Some((id, _, mut state)) = last else {
        return Ok(None);
    };
    let convo = serde_json::from_value(state["conversation"].take()).map_err(|e| {
        RunError::new(
            "internal_error",
            format!("the run's checkpoint {id} cannot be read: {e}"),
        )
    })?;
    Ok(Some((convo, id)))
}

async fn checkpoint(ctx: &RunContext, id: u64, convo: &Conversation) {
    ctx.services
        .hub
        .record(Record::Checkpoint {
            run: ctx.run_id,
            id,
            plan_version: NO_PLAN,
            state: json!({ "conversation": convo }),
        })
        .await;
}

/// The tool calls of the last assistant message that no later tool message answers, with
/// their position in that message.
fn unanswered_calls(messages: &[Message]) -> Vec<(usize, ToolCall)> {
    let Some(pos) = messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant { .. }))
    else {
        return Vec::new();
    };
    let Message::Assistant { tool_calls, .. } = &messages[pos] else {
        unreachable!("rposition found an assistant message");
    };
    let answered: HashSet<&str> = messages[pos + 1..]
        .iter()
        .filter_map(|m| match m {
            Message::Tool { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    tool_calls
        .iter()
        .enumerate()
        .filter(|(_, c)| !answered.contains(c.id.as_str()))
        .map(|(i, c)| (i, c.clone()))
        .collect()
}

fn allowed(ctx: &RunContext, tool: &str) -> bool {
    ctx.spec
        .tools
        .as_ref()
        .is_none_or(|list| list.iter().any(|t| t == tool))
}

async fn call_llm(
    ctx: &RunContext,
    provider: &dyn llm::LlmProvider,
    request: ChatRequest,
    step_id: &str,
) -> Result<ModelReply, RunError> {
    call_model(ctx, provider, request, step_id, EventKind::Token)
        .await
        .map_err(|e| match e {
            ModelError::Llm(e) => RunError::new(e.code(), e.to_string()),
            ModelError::Limit(e) => e,
        })
}

enum RunErrorOrStop {
    /// The tool failed; the model is told and the run goes on.
    ToolFailed(RunError),
    /// A run limit was hit: the run ends.
    Stop(RunError),
}

async fn run_tool(
    ctx: &RunContext,
    step_id: &str,
    attempt: u32,
    call: &ToolCall,
) -> Result<Value, RunErrorOrStop> {
    // Arguments as the model wrote them: JSON when they parse, the raw text otherwise.
    let parsed: Result<Value, _> = serde_json::from_str(&call.arguments);
    let shown_args = parsed
        .as_ref()
        .cloned()
        .unwrap_or_else(|_| Value::String(call.arguments.clone()));
    ctx.step_started(
        step_id,
        &call.name,
        StepKind::Tool,
        attempt,
        NO_PLAN,
        Some(json!({ "tool": call.name, "arguments": shown_args })),
    )
    .await
    .map_err(RunErrorOrStop::Stop)?;
    ctx.count_tool_call();
    ctx.emit(
        EventKind::ToolCall,
        Some(step_id),
        json!({ "call_id": call.id, "tool": call.name, "arguments": shown_args }),
    )
    .await;

    let result = match parsed {
        Err(e) => Err(RunError::new(
            "invalid_tool_arguments",
            format!("the arguments for `{}` are not valid JSON: {e}", call.name),
        )),
        Ok(_) if !allowed(ctx, &call.name) || !ctx.services.tools.contains(&call.name) => {
            Err(RunError::new(
                "tool_not_found",
                format!("no tool named `{}` is available to this run", call.name),
            ))
        }
        Ok(args) => invoke_with_timeout(ctx, &call.name, args).await,
    };

    match result {
        Ok(output) => {
            ctx.emit(
                EventKind::ToolResult,
                Some(step_id),
                json!({ "call_id": call.id, "tool": call.name, "output": output }),
            )
            .await;
            ctx.step_finished(
                step_id,
                attempt,
                StepStatus::Completed,
                Some(output.clone()),
                None,
            )
            .await;
            Ok(output)
        }
        Err(err) => {
            ctx.emit(
                EventKind::ToolResult,
                Some(step_id),
                json!({ "call_id": call.id, "tool": call.name, "error": err }),
            )
            .await;
            ctx.emit(
                EventKind::Error,
                Some(step_id),
                json!({ "code": err.code, "message": err.message, "step_id": step_id }),
            )
            .await;
            ctx.step_finished(
                step_id,
                attempt,
                StepStatus::Failed,
                None,
                Some(err.clone()),
            )
            .await;
            Err(RunErrorOrStop::ToolFailed(err))
        }
    }
}

async fn invoke_with_timeout(ctx: &RunContext, tool: &str, args: Value) -> Result<Value, RunError> {
    let timeout = std::time::Duration::from_millis(ctx.services.config.tool_timeout_ms);
    let cancel = ctx.cancel.child_token();
    match tokio::time::timeout(timeout, ctx.services.tools.invoke(tool, args, &cancel)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(tool_error(e)),
        Err(_) => {
            cancel.cancel();
            Err(RunError::new(
                "tool_timeout",
                format!("`{tool}` did not finish within {} ms", timeout.as_millis()),
            ))
        }
    }
}

fn tool_error(e: ToolError) -> RunError {
    RunError::new(e.code(), e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_text_picks_the_message() {
        let cases = [
            (json!("hi"), "hi"),
            (json!({"message": "hello"}), "hello"),
            (json!({"prompt": "p"}), "p"),
            (json!({"a": 1}), "{\"a\":1}"),
            (json!(5), "5"),
        ];
        for (input, want) in cases {
            assert_eq!(input_text(&input), want);
        }
    }
}
