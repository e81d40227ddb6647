//! One streamed model call, shared by every executor and step kind: text deltas go out live,
//! usage is counted (and checked against the run's token limit) and announced.

use std::time::Instant;

use futures::StreamExt;

use crate::domain::event::UsageData;
use crate::domain::{Payload, RunError};
use crate::llm::{self, ChatRequest, LlmEvent};

use super::context::RunContext;

/// How the model's text streams out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    /// Prose: `token` events.
    Prose,
    /// Structured output being written: `json_partial` events.
    Json,
}

/// What one model call produced.
pub struct ModelReply {
    pub text: String,
    pub tool_calls: Vec<llm::ToolCall>,
}

/// Calls the model. Text streams live as `token`/`json_partial` events of `step_id` (it never
/// waits in a sink: watching the model write is the point of streaming); the call's usage is
/// counted and announced, and a call that crosses `max_tokens` fails.
pub async fn call_model(
    ctx: &RunContext,
    provider: &dyn llm::LlmProvider,
    request: ChatRequest,
    step_id: &str,
    text_kind: TextKind,
) -> Result<ModelReply, RunError> {
    let started = Instant::now();
    ctx.count_llm_call();
    let llm_error = |e: llm::Error| e.to_run_error();
    let mut stream = provider
        .stream(request, ctx.cancel.child_token())
        .await
        .map_err(llm_error)?;
    let mut reply = ModelReply {
        text: String::new(),
        tool_calls: Vec::new(),
    };
    let mut usage = llm::Usage::default();
    while let Some(item) = stream.next().await {
        match item.map_err(llm_error)? {
            LlmEvent::TextDelta(delta) => {
                reply.text.push_str(&delta);
                let piece = match text_kind {
                    TextKind::Prose => Payload::token(delta),
                    TextKind::Json => Payload::json_partial(delta),
                };
                ctx.emit(Some(step_id), piece).await;
            }
            LlmEvent::ToolCall(call) => reply.tool_calls.push(call),
            LlmEvent::Usage(u) => usage = u,
        }
    }
    ctx.services.metrics.llm_call(
        started.elapsed().as_secs_f64(),
        usage.prompt_tokens,
        usage.completion_tokens,
    );
    let announced = UsageData {
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
    };
    ctx.emit(Some(step_id), announced).await;
    ctx.add_llm_usage(usage.prompt_tokens, usage.completion_tokens)?;
    Ok(reply)
}
