//! One streamed model call, shared by every executor and step kind: text deltas go out live,
//! usage is counted (and checked against the run's token limit) and announced.

use std::time::Instant;

use futures::StreamExt;

use serde_json::Value;

use crate::domain::event::UsageData;
use crate::domain::{ErrorCode, Payload, RunError};
use crate::llm::{self, ChatRequest, LlmEvent, Message, ResponseSchema};
use crate::plan::JsonSchema;

use super::context::RunContext;

/// How the model's text streams out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    /// Prose: `token` events.
    Prose,
    /// Structured output being written: `json_partial` events.
    Json,
    /// Nothing streamed: text that is not the run's (a session summary).
    Quiet,
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
                    TextKind::Quiet => continue,
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

/// What one model call asks, its templates rendered.
pub struct Prompt<'a> {
    pub system: Option<String>,
    pub user: String,
    /// A model alias; the run's model when `None`.
    pub model: Option<&'a str>,
    /// When set, the answer must be JSON valid against it, and is that JSON.
    pub output_schema: Option<&'a JsonSchema>,
}

/// Asks the model once, as step `step_id`: the text, or with an output schema the JSON value
/// the model answered (streamed as `json_partial`, checked against the schema).
pub async fn ask(ctx: &RunContext, step_id: &str, prompt: Prompt<'_>) -> Result<Value, RunError> {
    let alias = prompt.model.or(ctx.spec.model.as_deref());
    let (provider, model) = ctx
        .services
        .llm
        .resolve(alias)
        .map_err(|e| e.to_run_error())?;
    let mut messages = Vec::new();
    if let Some(content) = prompt.system {
        messages.push(Message::System { content });
    }
    messages.push(Message::User {
        content: prompt.user,
    });
    let mut request = ChatRequest::new(model, messages);
    let text_kind = match prompt.output_schema {
        Some(schema) => {
            request.response_schema = Some(ResponseSchema {
                name: "step_output".into(),
                schema: schema.schema.clone(),
            });
            TextKind::Json
        }
        None => TextKind::Prose,
    };
    let reply = call_model(ctx, &*provider, request, step_id, text_kind).await?;
    match prompt.output_schema {
        None => Ok(Value::String(reply.text)),
        Some(schema) => structured(&reply.text, schema),
    }
}

/// The model's answer as JSON valid against `schema`.
pub fn structured(text: &str, schema: &JsonSchema) -> Result<Value, RunError> {
    let value: Value = serde_json::from_str(text.trim()).map_err(|e| {
        RunError::new(
            ErrorCode::InvalidLlmOutput,
            format!("the model's answer is not JSON: {e}"),
        )
    })?;
    let problems: Vec<String> = schema
        .check(&value)
        .into_iter()
        .map(|v| format!("{} {}", v.pointer, v.message))
        .collect();
    if !problems.is_empty() {
        return Err(RunError::new(
            ErrorCode::InvalidLlmOutput,
            format!(
                "the model's answer breaks output_schema: {}",
                problems.join("; ")
            ),
        ));
    }
    Ok(value)
}
