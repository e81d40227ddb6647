//! The model-and-tools loop: the model answers or asks for tools; the tools it asks for run
//! (through [`call_tool`]) and their results go back to it, for a bounded number of rounds,
//! until it answers in text. A simple run is one such loop; an agent's turn will be another.
//!
//! Each model round is a step `llm-N` and each tool call a step `tool-N-M`, so the history
//! shows every call with its timing. A failing tool does not end the loop: the model is told
//! the error and decides. A failing model, or a run limit, does.
//!
//! The caller keeps the [`Conversation`] and is told after everything that must survive a
//! restart (a reply asking for tools, a tool result, the final answer), so it can checkpoint;
//! a loop started on a restored conversation answers the calls still unanswered and goes on
//! from there, or gives the answer it already has. A round's attempt is stored as finished
//! only after the caller was told ([`HeldEnd`]), so a finished round never runs again.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

use serde_json::{Value, json};

use crate::domain::attempt_io::{Envelope, ModelRoundInput, ModelRoundOutput, ToolInput};
use crate::domain::event::ErrorData;
use crate::domain::{AttemptInput, ErrorCode, RunError, Segment, StepKind, StepPath, StepStatus};
use crate::llm::router::ModelRoute;
use crate::llm::{ChatRequest, Message, ResponseSchema, ToolCall as ModelToolCall, ToolSpec};

use super::model::{Filters, ModelReply, TextKind, call_model_filtered};
use super::tool_call::{ToolArguments, ToolCall, call_tool};
use crate::engine::runtime::attempts::{AttemptEnd, HeldEnd, NewAttempt};
use crate::engine::runtime::checkpoint::Conversation;
use crate::engine::runtime::context::RunContext;
use crate::engine::runtime::sink::EventSink;

/// What a loop talks to and may use.
pub struct Setup {
    /// The model alias with its fallbacks.
    pub route: ModelRoute,
    /// The alias the caller asked for, as step inputs show it (`None`: the default).
    pub alias: Option<String>,
    pub tools: Vec<ToolSpec>,
    /// Rounds in which the model may call tools; the round after them gets no tools, so the
    /// model must answer in text.
    pub max_rounds: u32,
    pub plan_version: u32,
    /// Where the loop's steps sit (the root for a simple run; an agent's turn for its turn).
    pub path: StepPath,
    /// Structured output asked of every model round (an agent's `output_schema`).
    pub response_schema: Option<ResponseSchema>,
    /// A plan's slots for leaf work: each model call and tool call holds one while it runs
    /// (`None` for a simple run, which has no plan).
    pub slots: Option<Arc<Semaphore>>,
}

impl Setup {
    /// One of the plan's slots, if the loop runs in a plan, held until the permit drops.
    async fn slot(&self) -> Result<Option<SemaphorePermit<'_>>, RunError> {
        match &self.slots {
            None => Ok(None),
            Some(slots) => slots
                .acquire()
                .await
                .map(Some)
                .map_err(|_| RunError::new(ErrorCode::Cancelled, "the run is ending")),
        }
    }
}

/// What the caller of a loop handles itself: told of every message that must survive a
/// restart, it may add tools and answer their calls, stop the loop, wrap its model calls and
/// hold its tool calls. Each method's default does nothing.
pub trait Hooks: Send {
    /// The loop's conversation gained what must survive a restart (the caller checkpoints).
    fn saved(
        &mut self,
        _ctx: &RunContext,
        _convo: &Conversation,
    ) -> impl std::future::Future<Output = ()> + Send {
        async {}
    }

    /// Tools offered besides the [`Setup`]'s (handoffs, spokes); their calls are the hooks'
    /// to answer ([`Hooks::intercept`]).
    fn tools(&self) -> Vec<ToolSpec> {
        Vec::new()
    }

    /// Answers a tool call the conversation handles itself (a spoke, a handoff, a tool the
    /// agent may not use); `None` leaves it to the tool registry.
    fn intercept(
        &mut self,
        _ctx: &RunContext,
        _call: &ModelToolCall,
        _sink: &mut EventSink,
    ) -> impl std::future::Future<Output = Option<Result<Value, RunError>>> + Send {
        async { None }
    }

    /// Whether the loop ends after the current tool round (control was handed off).
    fn stopped(&self) -> bool {
        false
    }

    /// How model calls are wrapped (an agent's middleware): filters on their streamed text,
    /// retries.
    fn model_wrap(&self) -> ModelWrap {
        ModelWrap::default()
    }

    /// Whether tool call `step` may run; an agent's middleware may ask a human first. `Ok(None)` runs it, `Ok(Some(e))` answers it with `e` instead (the model
    /// is told), `Err` ends the loop.
    fn admit(
        &mut self,
        _ctx: &RunContext,
        _step: &StepPath,
        _call: &ModelToolCall,
    ) -> impl std::future::Future<Output = Result<Option<RunError>, RunError>> + Send {
        async { Ok(None) }
    }
}

/// What an agent's middleware does to its model calls.
#[derive(Clone, Default)]
pub struct ModelWrap {
    /// Streamed text passes these before any event carries it.
    pub filters: Option<Arc<dyn Filters>>,
    /// Retryable failures are tried again.
    pub retry: Option<Retry>,
}

/// Tries a model call up to `max_attempts` times, waiting `initial_delay` and doubling it.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub max_attempts: u32,
    pub initial_delay: Duration,
}

/// Runs the loop on `convo` until the model answers in text; the answer is the result.
pub async fn converse(
    ctx: &RunContext,
    setup: &Setup,
    convo: &mut Conversation,
    hooks: &mut impl Hooks,
    sink: &mut EventSink,
) -> Result<String, RunError> {
    if let Some(answer) = &convo.answer {
        return Ok(answer.clone());
    }
    loop {
        // Answer the tool calls of the model's last reply that have no result yet (all of
        // them, unless the loop resumed in the middle of a tool round).
        for (i, call) in unanswered_calls(&convo.messages) {
            let step = setup.path.join(Segment::ToolCall(convo.round, i + 1));
            let mut held = None;
            let result = match hooks.intercept(ctx, &call, sink).await {
                Some(Ok(output)) => Ok(output),
                Some(Err(e)) if ctx.breached().is_some() || ctx.cancel.is_cancelled() => {
                    Err(Stop::Run(e))
                }
                Some(Err(e)) => Err(Stop::Tool(e)),
                None => match hooks.admit(ctx, &step, &call).await {
                    Ok(None) => {
                        let (result, end) = tool_round(ctx, setup, &step, &call, sink).await;
                        held = end;
                        result
                    }
                    Ok(Some(refused)) => Err(Stop::Tool(refused)),
                    Err(e) => Err(Stop::Run(e)),
                },
            };
            let content = match result {
                Ok(Value::String(text)) => text,
                Ok(output) => output.to_string(),
                Err(Stop::Run(e)) => return Err(e),
                Err(Stop::Tool(e)) => json!({ "error": e }).to_string(),
            };
            convo.messages.push(Message::Tool {
                call_id: call.id.clone(),
                content,
            });
            hooks.saved(ctx, convo).await;
            HeldEnd::close_all(held, ctx, sink).await;
        }
        if hooks.stopped() {
            return Ok(last_text(&convo.messages));
        }

        convo.round += 1;
        if convo.round > setup.max_rounds + 1 {
            return Err(RunError::new(
                ErrorCode::ToolRoundsExceeded,
                format!(
                    "the model kept calling tools after {} rounds",
                    setup.max_rounds
                ),
            ));
        }
        let (wrap, hook_tools) = (hooks.model_wrap(), hooks.tools());
        let (text, tool_calls, held) =
            model_round(ctx, setup, convo, &wrap, hook_tools, sink).await?;
        if tool_calls.is_empty() {
            convo.answer = Some(text.clone());
            hooks.saved(ctx, convo).await;
            held.close(ctx, sink).await;
            return Ok(text);
        }
        convo.messages.push(Message::Assistant {
            content: text,
            tool_calls,
        });
        hooks.saved(ctx, convo).await;
        held.close(ctx, sink).await;
    }
}

/// One model call as step `llm-N` (offered the setup's tools, then the hooks'): the reply's
/// text, the tool calls it asks for, and the round's attempt, held open until the reply is
/// checkpointed.
async fn model_round(
    ctx: &RunContext,
    setup: &Setup,
    convo: &Conversation,
    wrap: &ModelWrap,
    hook_tools: Vec<ToolSpec>,
    sink: &mut EventSink,
) -> Result<(String, Vec<ModelToolCall>, HeldEnd), RunError> {
    let _slot = setup.slot().await?;
    let round = convo.round;
    let step = setup.path.join(Segment::ModelRound(round));
    let alias = setup.alias.clone().unwrap_or_else(|| "default".into());
    let input = AttemptInput::from(ModelRoundInput {
        model: alias,
        round,
    });
    let new = NewAttempt {
        step: &step,
        name: "llm",
        kind: StepKind::Llm,
        plan_version: setup.plan_version,
        input: Some(input.clone()),
    };
    let key = ctx.open_attempt(new, sink).await?;
    let mut request = ChatRequest::new(setup.route.alias(), convo.messages.clone());
    if round <= setup.max_rounds {
        request.tools = [setup.tools.clone(), hook_tools].concat();
    }
    request.response_schema = setup.response_schema.clone();
    let text_kind = match setup.response_schema {
        Some(_) => TextKind::Json,
        None => TextKind::Prose,
    };
    match call_wrapped(ctx, setup, request, &step, text_kind, wrap).await {
        Ok(reply) => {
            let summary = ModelRoundOutput {
                text: reply.text.clone(),
                tool_calls: reply.tool_calls.len(),
            };
            let end = AttemptEnd::completed(summary.to_json());
            let end = match reply.answered_by {
                Some(_) => end.with_input(reply.mark_input(Some(input))),
                None => end,
            };
            Ok((reply.text, reply.tool_calls, HeldEnd::new(key, end)))
        }
        Err(e) => {
            let status = if ctx.cancel.is_cancelled() {
                StepStatus::Cancelled
            } else {
                StepStatus::Failed
            };
            ctx.close_attempt(&key, AttemptEnd::closed(status, Some(e.clone())), sink)
                .await;
            Err(e)
        }
    }
}

/// One model call under the middleware's filters and retries; each retry is announced as an
/// `error` event of the step.
async fn call_wrapped(
    ctx: &RunContext,
    setup: &Setup,
    request: ChatRequest,
    step: &StepPath,
    text_kind: TextKind,
    wrap: &ModelWrap,
) -> Result<ModelReply, RunError> {
    let mut attempt = 1;
    loop {
        let filters = wrap.filters.as_deref();
        let call =
            call_model_filtered(ctx, &setup.route, request.clone(), step, text_kind, filters);
        let error = match call.await {
            Ok(reply) => return Ok(reply),
            Err(e) => e,
        };
        let Some(retry) = wrap.retry.filter(|r| attempt < r.max_attempts) else {
            return Err(error);
        };
        if !error.code.retryable() || ctx.cancel.is_cancelled() || ctx.breached().is_some() {
            return Err(error);
        }
        let delay = retry.initial_delay * 2u32.saturating_pow(attempt - 1);
        let told = ErrorData {
            error: RunError::new(
                error.code.clone(),
                format!(
                    "{} (middleware `retry`: attempt {} of {} in {} ms)",
                    error.message,
                    attempt + 1,
                    retry.max_attempts,
                    delay.as_millis()
                ),
            ),
            step_id: Some(step.leaf().to_owned()),
        };
        ctx.emit(Some(step), told).await;
        tokio::time::sleep(delay).await;
        attempt += 1;
    }
}

/// Why a tool step did not give an output.
enum Stop {
    /// The tool failed; the model is told and the loop goes on.
    Tool(RunError),
    /// A run limit was hit: the loop ends.
    Run(RunError),
}

/// One tool call the model asked for, as step `tool-N-M`: its result, and its attempt held
/// open until the result is checkpointed (`None` when there is nothing left to close).
async fn tool_round(
    ctx: &RunContext,
    setup: &Setup,
    step: &StepPath,
    call: &ModelToolCall,
    sink: &mut EventSink,
) -> (Result<Value, Stop>, Option<HeldEnd>) {
    let _slot = match setup.slot().await {
        Ok(slot) => slot,
        Err(e) => return (Err(Stop::Run(e)), None),
    };
    let arguments = ToolArguments::from_text(&call.arguments);
    let new = NewAttempt {
        step,
        name: &call.name,
        kind: StepKind::Tool,
        plan_version: setup.plan_version,
        input: Some(
            ToolInput {
                tool: call.name.clone(),
                arguments: arguments.shown(),
            }
            .into(),
        ),
    };
    let key = match ctx.open_attempt(new, sink).await {
        Ok(key) => key,
        Err(e) => return (Err(Stop::Run(e)), None),
    };
    let request = ToolCall {
        step,
        call_id: &call.id,
        tool: &call.name,
        arguments,
    };
    match call_tool(ctx, request, sink).await {
        Ok(output) => {
            let held = HeldEnd::new(key, AttemptEnd::completed(output.clone()));
            (Ok(output), Some(held))
        }
        Err(error) if ctx.breached().is_some() => {
            // A run limit or a detected loop: the conversation ends here.
            ctx.close_attempt(&key, AttemptEnd::failed(error.clone()), sink)
                .await;
            (Err(Stop::Run(error)), None)
        }
        Err(error) => {
            let told = ErrorData {
                error: error.clone(),
                step_id: Some(step.leaf().to_owned()),
            };
            sink.emit(ctx, Some(step), told).await;
            let held = HeldEnd::new(key, AttemptEnd::failed(error.clone()));
            (Err(Stop::Tool(error)), Some(held))
        }
    }
}

/// The text of the last assistant message (what a conversation stopped by a handoff said).
fn last_text(messages: &[Message]) -> String {
    messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::Assistant { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// The tool calls of the last assistant message that no later tool message answers, with
/// their position in that message.
fn unanswered_calls(messages: &[Message]) -> Vec<(usize, ModelToolCall)> {
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
