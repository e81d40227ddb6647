//! Leaf step bodies of the plan engine: `tool`, `llm`, `wait`. They take inputs whose templates
//! are already resolved, and return the step output or a [`StepError`]. Events they produce
//! go to a [`StepEvents`] buffer that the scheduler emits in a deterministic order; only LLM
//! text (`token`, `json_partial`) streams live.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

use crate::domain::{EventKind, RunError};
use crate::llm::{self, ChatRequest, LlmEvent, Message, ResponseSchema};

use super::context::RunContext;

/// A failed attempt: a stable code, a sentence, and whether trying again may help.
#[derive(Debug, Clone, PartialEq)]
pub struct StepError {
    pub code: String,
    pub message: String,
    pub retryable: bool,
}

impl StepError {
    pub fn new(code: impl Into<String>, message: impl Into<String>, retryable: bool) -> Self {
        StepError {
            code: code.into(),
            message: message.into(),
            retryable,
        }
    }

    pub fn fatal(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(code, message, false)
    }

    pub fn to_run_error(&self) -> RunError {
        RunError::new(self.code.clone(), self.message.clone())
    }
}

impl From<RunError> for StepError {
    fn from(e: RunError) -> Self {
        StepError::fatal(e.code, e.message)
    }
}

/// Events of one step attempt, held back until the scheduler commits the step.
#[derive(Debug, Default)]
pub struct StepEvents {
    pub events: Vec<(String, EventKind, Value)>,
}

impl StepEvents {
    pub fn push(&mut self, step_id: &str, kind: EventKind, data: Value) {
        self.events.push((step_id.to_owned(), kind, data));
    }

    pub fn append(&mut self, other: StepEvents) {
        self.events.extend(other.events);
    }
}

/// Calls a tool (arguments are validated against its schema first), within `timeout`.
pub async fn run_tool(
    ctx: &RunContext,
    step_id: &str,
    tool: &str,
    args: Value,
    timeout: Option<Duration>,
    events: &mut StepEvents,
) -> Result<Value, StepError> {
    let call_id = format!("{step_id}-call");
    events.push(
        step_id,
        EventKind::ToolCall,
        json!({ "call_id": call_id, "tool": tool, "arguments": args }),
    );
    ctx.count_tool_call();
    let allowed = ctx
        .spec
        .tools
        .as_ref()
        .is_none_or(|list| list.iter().any(|t| t == tool));
    let result = if !allowed {
        Err(StepError::fatal(
            "tool_not_found",
            format!("tool `{tool}` is not in this run's allow-list"),
        ))
    } else {
        let cancel = ctx.cancel.child_token();
        let call = ctx.services.tools.invoke(tool, args, &cancel);
        let timeout = timeout.unwrap_or(Duration::from_millis(ctx.services.config.tool_timeout_ms));
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                let retryable =
                    matches!(e, crate::tools::ToolError::Failed { code, .. } if code == "io_error");
                Err(StepError::new(e.code(), e.to_string(), retryable))
            }
            Err(_) => {
                cancel.cancel();
                Err(StepError::new(
                    "tool_timeout",
                    format!("`{tool}` did not finish within {} ms", timeout.as_millis()),
                    true,
                ))
            }
        }
    };
    match &result {
        Ok(output) => events.push(
            step_id,
            EventKind::ToolResult,
            json!({ "call_id": call_id, "tool": tool, "output": output }),
        ),
        Err(e) => events.push(
            step_id,
            EventKind::ToolResult,
            json!({ "call_id": call_id, "tool": tool, "error": e.to_run_error() }),
        ),
    }
    result
}

/// What an `llm` step asks, its templates resolved.
pub struct LlmAsk<'a> {
    pub prompt: String,
    pub system: Option<String>,
    pub model: Option<&'a str>,
    pub output_schema: Option<&'a Value>,
}

/// One model call; with an output schema the answer must be JSON valid against it.
pub async fn run_llm(ctx: &RunContext, step_id: &str, ask: LlmAsk<'_>) -> Result<Value, StepError> {
    let alias = ask.model.or(ctx.spec.model.as_deref());
    let (provider, model) = ctx
        .services
        .llm
        .resolve(alias)
        .map_err(|e| StepError::fatal(e.code(), e.to_string()))?;
    let mut messages = Vec::new();
    if let Some(system) = ask.system {
        messages.push(Message::System { content: system });
    }
    messages.push(Message::User {
        content: ask.prompt,
    });
    let mut request = ChatRequest::new(model, messages);
    if let Some(schema) = ask.output_schema {
        request.response_schema = Some(ResponseSchema {
            name: "step_output".into(),
            schema: schema.clone(),
        });
    }
    let delta_kind = if ask.output_schema.is_some() {
        EventKind::JsonPartial
    } else {
        EventKind::Token
    };
    let reply = call_model(ctx, &*provider, request, step_id, delta_kind)
        .await
        .map_err(|e| match e {
            ModelError::Llm(e) => StepError::new(e.code(), e.to_string(), e.retryable()),
            ModelError::Limit(e) => StepError::from(e),
        })?;
    let text = reply.text;

    let Some(schema) = ask.output_schema else {
        return Ok(Value::String(text));
    };
    let value: Value = serde_json::from_str(text.trim()).map_err(|e| {
        StepError::new(
            "invalid_llm_output",
            format!("the model's answer is not JSON: {e}"),
            true,
        )
    })?;
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| StepError::fatal("invalid_step", format!("output_schema is invalid: {e}")))?;
    let problems: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| format!("{} {}", e.instance_path().as_str(), e))
        .collect();
    if !problems.is_empty() {
        return Err(StepError::new(
            "invalid_llm_output",
            format!(
                "the model's answer breaks output_schema: {}",
                problems.join("; ")
            ),
            true,
        ));
    }
    Ok(value)
}

/// What one model call produced.
pub struct ModelReply {
    pub text: String,
    pub tool_calls: Vec<llm::ToolCall>,
}

/// Why a model call failed: the provider, or a run limit its usage crossed.
pub enum ModelError {
    Llm(llm::Error),
    Limit(RunError),
}

/// One streamed model call, shared by every executor: text deltas go out live as
/// `delta_kind` events, usage is counted (and checked against `max_tokens`) and announced.
pub async fn call_model(
    ctx: &RunContext,
    provider: &dyn llm::LlmProvider,
    request: ChatRequest,
    step_id: &str,
    delta_kind: EventKind,
) -> Result<ModelReply, ModelError> {
    let started = Instant::now();
    ctx.count_llm_call();
    let mut stream = provider
        .stream(request, ctx.cancel.child_token())
        .await
        .map_err(ModelError::Llm)?;
    let mut reply = ModelReply {
        text: String::new(),
        tool_calls: Vec::new(),
    };
    let mut usage = llm::Usage::default();
    while let Some(item) = stream.next().await {
        match item.map_err(ModelError::Llm)? {
            LlmEvent::TextDelta(delta) => {
                reply.text.push_str(&delta);
                ctx.emit(delta_kind, Some(step_id), json!({ "text": delta }))
                    .await;
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
    ctx.emit(
        EventKind::Usage,
        Some(step_id),
        json!({ "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens }),
    )
    .await;
    ctx.add_llm_usage(usage.prompt_tokens, usage.completion_tokens)
        .map_err(ModelError::Limit)?;
    Ok(reply)
}

/// Waits `duration` (the caller's cancellation drops this future).
pub async fn run_wait(duration: Duration) -> Value {
    tokio::time::sleep(duration).await;
    json!({ "waited_ms": duration.as_millis() as u64 })
}
