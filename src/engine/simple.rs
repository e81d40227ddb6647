//! The `simple` executor: the run input goes to the model; tool calls the model asks for are
//! executed (validated against each tool's schema first) and answered back, for a bounded
//! number of rounds; the model's last text is the run's output.
//!
//! Each LLM round is a step `llm-N` and each tool call a step `tool-N-M`, so `GET .../steps`
//! shows every call with its timing. A failing tool does not fail the run: the model is told
//! the error and decides; a failing model does.

use serde_json::{Value, json};

use crate::domain::{EventKind, RunError, StepKind, StepStatus};
use crate::llm::{self, ChatRequest, Message, ToolSpec};
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

pub async fn execute(ctx: &RunContext) -> Outcome {
    let (provider, model) = match ctx.services.llm.resolve(ctx.spec.model.as_deref()) {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(RunError::new(e.code(), e.to_string())),
    };

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
    for round in 1..=max_rounds + 1 {
        let step_id = format!("llm-{round}");
        if let Err(e) = ctx
            .step_started(&step_id, "llm", StepKind::Llm, 1, 0, Some(json!({ "model": ctx.spec.model.clone().unwrap_or_else(|| "default".into()), "round": round })))
            .await
        {
            return Outcome::Failed(e);
        }
        let mut request = ChatRequest::new(model.clone(), messages.clone());
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
                ctx.step_finished(&step_id, 1, status, None, Some(e.clone()))
                    .await;
                return Outcome::Failed(e);
            }
        };
        ctx.step_finished(
            &step_id,
            1,
            StepStatus::Completed,
            Some(json!({ "text": reply.text, "tool_calls": reply.tool_calls.len() })),
            None,
        )
        .await;

        if reply.tool_calls.is_empty() {
            return Outcome::Success(Value::String(reply.text));
        }
        messages.push(Message::Assistant {
            content: reply.text.clone(),
            tool_calls: reply.tool_calls.clone(),
        });
        for (i, call) in reply.tool_calls.iter().enumerate() {
            let tool_step = format!("tool-{round}-{}", i + 1);
            let content = match run_tool(ctx, &tool_step, call).await {
                Ok(output) => output.to_string(),
                Err(RunErrorOrStop::Stop(e)) => return Outcome::Failed(e),
                Err(RunErrorOrStop::ToolFailed(e)) => json!({ "error": e }).to_string(),
            };
            messages.push(Message::Tool {
                call_id: call.id.clone(),
                content,
            });
        }
    }
    Outcome::Failed(RunError::new(
        "tool_rounds_exceeded",
        format!("the model kept calling tools after {max_rounds} rounds"),
    ))
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
    call: &llm::ToolCall,
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
        1,
        0,
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
                1,
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
            ctx.step_finished(step_id, 1, StepStatus::Failed, None, Some(err.clone()))
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
