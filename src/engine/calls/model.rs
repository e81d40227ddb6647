//! One streamed model call, shared by every executor and step kind: text deltas go out live,
//! usage is counted (and checked against the run's token limit) and announced.

use std::time::Instant;

use futures::StreamExt;

use serde_json::Value;

use crate::domain::attempt_io::AnsweredBy;
use crate::domain::event::{ErrorData, UsageData};
use crate::domain::{AttemptInput, ErrorCode, Payload, RunError, StepPath};
use crate::llm::router::{ModelRoute, Target};
use crate::llm::schema::Projection;
use crate::llm::{self, ChatRequest, LlmEvent, Message, ResponseSchema};
use crate::plan::JsonSchema;

use crate::engine::runtime::context::RunContext;

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
    /// The fallback alias that answered, when the alias asked for failed.
    pub answered_by: Option<String>,
}

impl ModelReply {
    /// An attempt's `input` with `answered_by` added when a fallback answered.
    pub fn mark_input(&self, input: Option<AttemptInput>) -> Option<AttemptInput> {
        mark_answered_by(input, self.answered_by.as_deref())
    }
}

/// An attempt's `input` with `answered_by` added when a fallback alias (`by`) answered.
pub fn mark_answered_by(input: Option<AttemptInput>, by: Option<&str>) -> Option<AttemptInput> {
    match (by, input) {
        (Some(by), Some(input)) => Some(input.answered_by(by)),
        (Some(by), None) => Some(
            AnsweredBy {
                answered_by: by.to_owned(),
            }
            .into(),
        ),
        (None, input) => input,
    }
}

/// Streamed text on its way out of a model call (an agent's middleware, e.g. a guardrail):
/// each piece gives what may go out now; the end gives what was held back. An error stops the
/// call (no fallback is tried).
pub trait TextFilter: Send {
    fn push(&mut self, delta: &str) -> Result<String, RunError>;
    fn finish(&mut self) -> Result<String, RunError>;
}

/// Makes a fresh [`TextFilter`] for every model target tried, so text a failed target left
/// held back never reaches the answer of the next.
pub trait Filters: Send + Sync {
    fn start(&self) -> Box<dyn TextFilter>;
}

/// Calls the model of `route`, then its fallbacks in order while a call fails unavailable
/// (rate limited, 5xx, timeout, unreachable) before any text streamed: a fallback taken is
/// announced as an `error` event of `step` with the failure's code. A rejection (4xx), a
/// cancellation or a failure after text streamed ends the call.
pub async fn call_model(
    ctx: &RunContext,
    route: &ModelRoute,
    request: ChatRequest,
    step: &StepPath,
    text_kind: TextKind,
) -> Result<ModelReply, RunError> {
    call_model_filtered(ctx, route, request, step, text_kind, None).await
}

/// [`call_model`] with the streamed text passing `filters` before any event carries it; the
/// reply's text is the filtered text.
pub async fn call_model_filtered(
    ctx: &RunContext,
    route: &ModelRoute,
    request: ChatRequest,
    step: &StepPath,
    text_kind: TextKind,
    filters: Option<&dyn Filters>,
) -> Result<ModelReply, RunError> {
    let targets = route.targets();
    for (i, target) in targets.iter().enumerate() {
        let filter = filters.map(|f| f.start());
        let call = call_target(ctx, target, request.clone(), step, text_kind, filter);
        let failure = match call.await {
            Ok(mut reply) => {
                reply.answered_by = (i > 0).then(|| target.alias.clone());
                return Ok(reply);
            }
            Err(failure) => failure,
        };
        let next = targets.get(i + 1);
        let Some(next) = next.filter(|_| failure.may_fall_back(ctx)) else {
            return Err(failure.error);
        };
        let told = ErrorData {
            error: RunError::new(
                failure.error.code.clone(),
                format!(
                    "model `{}` failed ({}); falling back to `{}`",
                    target.alias, failure.error.message, next.alias
                ),
            ),
            step_id: Some(step.leaf().to_owned()),
        };
        ctx.emit(Some(step), told).await;
    }
    unreachable!("a route has at least one target, and the last one returns")
}

/// Why one target gave no answer, and whether it had begun to answer.
struct Failure {
    error: RunError,
    streamed: bool,
}

impl Failure {
    fn may_fall_back(&self, ctx: &RunContext) -> bool {
        let unavailable = matches!(
            self.error.code,
            ErrorCode::LlmRateLimited
                | ErrorCode::LlmError
                | ErrorCode::LlmTimeout
                | ErrorCode::LlmUnavailable
        );
        unavailable && !self.streamed && !ctx.cancel.is_cancelled()
    }
}

/// One call to one target, under the alias's settings and deadline: the request fitted to the
/// target, its response schema projected for the provider, the call streamed within a trace
/// span and the target's deadline, and the answer restored to the schema's full shape.
async fn call_target(
    ctx: &RunContext,
    target: &Target,
    mut request: ChatRequest,
    step: &StepPath,
    text_kind: TextKind,
    filter: Option<Box<dyn TextFilter>>,
) -> Result<ModelReply, Failure> {
    ctx.lease_ready().await;
    fit_to(target, &mut request).map_err(|error| Failure {
        error,
        streamed: false,
    })?;
    let projection = project(target, &mut request);
    let mut streamed = false;
    let out = Out {
        step,
        text_kind,
        filter,
        streamed: &mut streamed,
    };
    let span = chat_span(ctx, step, target, &request);
    let call = stream_reply(ctx, &*target.provider, request, out);
    let call =
        opentelemetry::context::FutureExt::with_context(call, span.clone().unwrap_or_default());
    let result = within_deadline(target, call).await;
    crate::telemetry::end(span, result.as_ref().err());
    let mut reply = result.map_err(|error| Failure { error, streamed })?;
    if let Some(text) = projection.and_then(|p| p.restore_text(&reply.text)) {
        reply.text = text;
    }
    Ok(reply)
}

/// The request as `target` takes it: its model, the alias's settings where the call sets none,
/// its capabilities; refused if it cannot fit the model's context window.
fn fit_to(target: &Target, request: &mut ChatRequest) -> Result<(), RunError> {
    request.model = target.model.clone();
    request.temperature = request.temperature.or(target.temperature);
    request.max_tokens = request.max_tokens.or(target.max_tokens);
    request.capabilities = target.capabilities;
    match target.capabilities.context_window {
        Some(window) => fits_window(request, window, &target.alias),
        None => Ok(()),
    }
}

/// The response schema as this provider takes it (its dialect of structured output); the
/// projection restores the answer to the full shape afterwards.
fn project(target: &Target, request: &mut ChatRequest) -> Option<Projection> {
    request.response_schema.as_mut().map(|asked| {
        let mode = target.capabilities.structured_output;
        let dialect = target.provider.schema_dialect(mode);
        let projection = Projection::new(&asked.schema, dialect);
        if !projection.changes.is_empty() {
            tracing::debug!(
                schema = %asked.name,
                model = %target.alias,
                faithful = projection.faithful,
                changes = ?projection.changes,
                "response schema projected for the provider"
            );
        }
        asked.schema = projection.schema.clone();
        asked.strict = projection.faithful;
        projection
    })
}

/// The trace span of one chat call under `step`'s attempt, with the settings it was sent with.
fn chat_span(
    ctx: &RunContext,
    step: &StepPath,
    target: &Target,
    request: &ChatRequest,
) -> Option<opentelemetry::Context> {
    let parent = ctx.trace_parent(Some(step));
    let span =
        (ctx.services.telemetry).start_chat(parent.as_ref(), target.provider.name(), &target.model);
    let mut settings = Vec::new();
    if let Some(t) = request.temperature {
        settings.push(opentelemetry::KeyValue::new(
            "gen_ai.request.temperature",
            f64::from(t),
        ));
    }
    if let Some(m) = request.max_tokens {
        settings.push(opentelemetry::KeyValue::new(
            "gen_ai.request.max_tokens",
            i64::from(m),
        ));
    }
    crate::telemetry::annotate(span.as_ref(), settings);
    span
}

/// `call`, failed as `llm_timeout` past the target's deadline (when it has one).
async fn within_deadline<T>(
    target: &Target,
    call: impl std::future::Future<Output = Result<T, RunError>>,
) -> Result<T, RunError> {
    let Some(deadline) = target.timeout else {
        return call.await;
    };
    tokio::time::timeout(deadline, call)
        .await
        .unwrap_or_else(|_| {
            Err(RunError::new(
                ErrorCode::LlmTimeout,
                format!(
                    "model `{}` did not answer within {} ms",
                    target.alias,
                    deadline.as_millis()
                ),
            ))
        })
}

/// Refuses a prompt estimated larger than the model's context window before sending it:
/// servers that truncate silently (Ollama) would otherwise answer a prompt they never read.
fn fits_window(request: &ChatRequest, window: u32, alias: &str) -> Result<(), RunError> {
    let mut prompt = llm::tokens::count_messages(&request.messages);
    for tool in &request.tools {
        let text = format!("{} {} {}", tool.name, tool.description, tool.parameters);
        prompt = prompt.saturating_add(llm::tokens::count(&text));
    }
    if let Some(schema) = &request.response_schema {
        prompt = prompt.saturating_add(llm::tokens::count(&schema.schema.to_string()));
    }
    if prompt <= window {
        return Ok(());
    }
    Err(RunError::new(
        ErrorCode::LlmRejected,
        format!(
            "the prompt (about {prompt} tokens, estimated) does not fit the context window of \
             model `{alias}` ({window} tokens)"
        ),
    ))
}

/// Where one call's text goes: the events of `step`, through the filter if there is one.
struct Out<'a> {
    step: &'a StepPath,
    text_kind: TextKind,
    filter: Option<Box<dyn TextFilter>>,
    /// Set once text has gone out; the caller reads it even when the call timed out.
    streamed: &'a mut bool,
}

impl Out<'_> {
    /// Sends `text` (filtered) and adds it to the reply.
    async fn send(
        &mut self,
        ctx: &RunContext,
        text: String,
        reply: &mut ModelReply,
    ) -> Result<(), RunError> {
        let text = match &mut self.filter {
            None => text,
            Some(f) => f.push(&text)?,
        };
        self.emit(ctx, text, reply).await
    }

    /// Sends what the filter held back until the answer's end, if there is a filter.
    async fn finish(&mut self, ctx: &RunContext, reply: &mut ModelReply) -> Result<(), RunError> {
        let Some(f) = &mut self.filter else {
            return Ok(());
        };
        let text = f.finish()?;
        self.emit(ctx, text, reply).await
    }

    /// Adds filtered `text` to the reply and streams it as the call's text kind asks.
    async fn emit(
        &mut self,
        ctx: &RunContext,
        text: String,
        reply: &mut ModelReply,
    ) -> Result<(), RunError> {
        if text.is_empty() {
            return Ok(());
        }
        reply.text.push_str(&text);
        let piece = match self.text_kind {
            TextKind::Prose => Payload::token(text),
            TextKind::Json => Payload::json_partial(text),
            TextKind::Quiet => return Ok(()),
        };
        *self.streamed = true;
        ctx.emit(Some(self.step), piece).await;
        Ok(())
    }
}

/// Streams one answer. Text streams live as `token`/`json_partial` events of `step` (it
/// never waits in a sink: watching the model write is the point of streaming); the call's
/// usage is counted and announced, and a call that crosses `max_tokens` fails. `out.streamed`
/// is set once text has gone out.
async fn stream_reply(
    ctx: &RunContext,
    provider: &dyn llm::LlmProvider,
    request: ChatRequest,
    mut out: Out<'_>,
) -> Result<ModelReply, RunError> {
    let step = out.step;
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
        answered_by: None,
    };
    let mut usage = llm::Usage::default();
    while let Some(item) = stream.next().await {
        match item.map_err(llm_error)? {
            LlmEvent::TextDelta(delta) => {
                out.send(ctx, delta, &mut reply).await?;
            }
            LlmEvent::ToolCall(call) => reply.tool_calls.push(call),
            LlmEvent::Usage(u) => usage = u,
        }
    }
    out.finish(ctx, &mut reply).await?;
    ctx.services.metrics.llm_call(
        started.elapsed().as_secs_f64(),
        usage.prompt_tokens,
        usage.completion_tokens,
    );
    crate::telemetry::annotate(
        Some(&opentelemetry::Context::current()),
        vec![
            opentelemetry::KeyValue::new("gen_ai.usage.input_tokens", usage.prompt_tokens as i64),
            opentelemetry::KeyValue::new(
                "gen_ai.usage.output_tokens",
                usage.completion_tokens as i64,
            ),
        ],
    );
    let announced = UsageData {
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
    };
    ctx.emit(Some(step), announced).await;
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

/// What [`ask`] got: the answer, and the fallback alias that gave it, if one did.
pub struct Answer {
    pub value: Value,
    pub answered_by: Option<String>,
}

/// Asks the model once, as the step at `step`: the text, or with an output schema the JSON value
/// the model answered (streamed as `json_partial`, checked against the schema).
pub async fn ask(
    ctx: &RunContext,
    step: &StepPath,
    prompt: Prompt<'_>,
) -> Result<Answer, RunError> {
    let alias = prompt.model.or(ctx.spec.request.model.as_deref());
    let route = ctx
        .services
        .llm
        .route(alias)
        .map_err(|e| e.to_run_error())?;
    let mut messages = Vec::new();
    if let Some(content) = prompt.system {
        messages.push(Message::System { content });
    }
    messages.push(Message::User {
        content: prompt.user,
    });
    let mut request = ChatRequest::new(route.alias(), messages);
    let text_kind = match prompt.output_schema {
        Some(schema) => {
            request.response_schema =
                Some(ResponseSchema::new("step_output", schema.schema.clone()));
            TextKind::Json
        }
        None => TextKind::Prose,
    };
    let reply = call_model(ctx, &route, request, step, text_kind).await?;
    let value = match prompt.output_schema {
        None => Value::String(reply.text),
        Some(schema) => structured(&reply.text, schema)?,
    };
    Ok(Answer {
        value,
        answered_by: reply.answered_by,
    })
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
