//! One agent's turn: its instructions as the system prompt, its model, its tools, the
//! model-and-tools loop ([`converse`]) until it answers; an answer held to the agent's output
//! schema (sent back once to be repaired); a workflow agent runs its workflow instead.
//!
//! The turn's model rounds and tool calls are steps `llm-N` and `tool-N-M` at the turn's
//! path, so their attempts and events say whose turn they belong to. The conversation is
//! checkpointed (as a finished "child" `<path>/convo`) after every model reply and every tool
//! result, so a turn resumed after a restart goes on from there and never calls a finished
//! tool or model round again.

use serde_json::Value;

use crate::domain::attempt_io::AuditEntry;
use crate::domain::{ErrorCode, RunError, StepPath};
use crate::llm::{Message, ResponseSchema, ToolCall as ModelToolCall, ToolSpec};
use crate::plan::{AgentSpec, JsonSchema};

use super::chain::{Chain, approval, around_turn};
use crate::engine::calls::converse::{self, Hooks, ModelWrap, Setup};
use crate::engine::calls::model::structured;
use crate::engine::calls::tool_call::may_use;
use crate::engine::runtime::checkpoint::Conversation;
use crate::engine::runtime::context::RunContext;
use crate::engine::runtime::sink::EventSink;
use crate::engine::scheduler::frame::Frame;

/// A turn with nothing added.
pub(crate) struct Plain;

impl Hooks for Plain {}

/// How a turn ended.
#[derive(Debug, Clone)]
pub(crate) struct TurnEnd {
    /// The answer's text (what the agent said last).
    pub text: String,
    /// The answer: the text, or the JSON value its output schema asked for.
    pub value: Value,
    /// The whole conversation, the system prompt first.
    pub messages: Vec<Message>,
    /// What the `audit_log` middleware recorded of the turn (one record per such layer).
    pub audit: Vec<AuditEntry>,
}

/// Takes `agent`'s turn on `messages` (the conversation after its system prompt), its steps at
/// `path`, inside its middleware (the plan's, then its own).
pub(crate) async fn take_turn(
    frame: &Frame<'_>,
    agent: &AgentSpec,
    path: &StepPath,
    messages: Vec<Message>,
    hooks: &mut impl Hooks,
    sink: &mut EventSink,
) -> Result<TurnEnd, RunError> {
    let chain = Chain::for_agent(&frame.team, agent);
    let within = &chain;
    around_turn(&chain, frame.ctx, agent, messages, move |messages| {
        run_turn(frame, agent, path, messages, hooks, within, sink)
    })
    .await
}

/// The turn itself, inside the middleware (`chain` wraps its model and tool calls).
async fn run_turn(
    frame: &Frame<'_>,
    agent: &AgentSpec,
    path: &StepPath,
    messages: Vec<Message>,
    hooks: &mut impl Hooks,
    chain: &Chain,
    sink: &mut EventSink,
) -> Result<TurnEnd, RunError> {
    if let Some(workflow) = &agent.workflow {
        return workflow_turn(frame, workflow, path, messages, sink).await;
    }
    let setup = turn_setup(frame, agent, path)?;
    let convo_key = path.conversation();
    let mut convo = opening(frame, agent, &convo_key, messages, sink).await?;
    let mut progress = TurnHooks {
        frame,
        agent,
        convo_key,
        hooks,
        chain,
        wrap: chain.model_wrap(),
    };
    let text = converse::converse(frame.ctx, &setup, &mut convo, &mut progress, sink).await?;
    if progress.hooks.stopped() {
        // Handed off: what the agent said on its way out is the turn's text.
        return Ok(TurnEnd::new(
            Value::String(text.clone()),
            text,
            convo.messages,
        ));
    }
    let (text, value) = match &agent.output_schema {
        None => (text.clone(), Value::String(text)),
        Some(schema) => {
            let mut turn = Turn {
                agent: &agent.name,
                setup: &setup,
                convo: &mut convo,
                progress: &mut progress,
            };
            turn.held_to(frame.ctx, schema, text, sink).await?
        }
    };
    convo.messages.push(Message::Assistant {
        content: text.clone(),
        tool_calls: Vec::new(),
    });
    if let Some(memory) = agent.memory.as_ref().filter(|m| m.remember) {
        super::memory::remember(frame, memory, path, &convo.messages, sink).await?;
    }
    Ok(TurnEnd::new(value, text, convo.messages))
}

impl TurnEnd {
    fn new(value: Value, text: String, messages: Vec<Message>) -> TurnEnd {
        TurnEnd {
            text,
            value,
            messages,
            audit: Vec::new(),
        }
    }
}

/// A workflow agent's turn: its workflow on the last message the agent received.
async fn workflow_turn(
    frame: &Frame<'_>,
    workflow: &str,
    path: &StepPath,
    mut messages: Vec<Message>,
    sink: &mut EventSink,
) -> Result<TurnEnd, RunError> {
    let request = last_user_text(&messages);
    let value =
        super::workflow::run_named(frame, workflow, Value::String(request), path, sink).await?;
    let text = text_of(&value);
    messages.push(Message::Assistant {
        content: text.clone(),
        tool_calls: Vec::new(),
    });
    Ok(TurnEnd::new(value, text, messages))
}

/// What the agent's conversation talks to: its model (else the run's), its tools (the
/// caller's hooks add theirs), its output schema, at `path`, holding the plan's slots.
fn turn_setup(frame: &Frame<'_>, agent: &AgentSpec, path: &StepPath) -> Result<Setup, RunError> {
    let ctx = frame.ctx;
    let alias = agent
        .model
        .clone()
        .or_else(|| ctx.spec.request.model.clone());
    let route = ctx
        .services
        .llm
        .route(alias.as_deref())
        .map_err(|e| e.to_run_error())?;
    Ok(Setup {
        route,
        alias,
        tools: agent_tools(ctx, agent),
        max_rounds: ctx.services.config.max_tool_rounds,
        plan_version: frame.plan_version,
        path: path.clone(),
        response_schema: agent
            .output_schema
            .as_ref()
            .map(|s| ResponseSchema::new("agent_output", s.schema.clone())),
        slots: Some(frame.slots.clone()),
    })
}

/// The conversation a checkpoint kept at `convo_key`, else a new one: the agent's
/// instructions (with what it recalls from memory), then `messages`.
async fn opening(
    frame: &Frame<'_>,
    agent: &AgentSpec,
    convo_key: &StepPath,
    messages: Vec<Message>,
    sink: &mut EventSink,
) -> Result<Conversation, RunError> {
    if let Some(convo) = frame.children.replay::<Conversation>(convo_key)? {
        return Ok(convo);
    }
    let recalled = match &agent.memory {
        Some(memory) => {
            let turn = convo_key.parent();
            super::memory::recalled(frame, memory, &turn, &messages, sink).await
        }
        None => String::new(),
    };
    let mut opening = vec![Message::System {
        content: format!("{}{recalled}", agent.instructions),
    }];
    opening.extend(messages);
    Ok(Conversation {
        round: 0,
        messages: opening,
        answer: None,
    })
}

/// A conversation under way, for what follows its first answer.
struct Turn<'t, P> {
    agent: &'t str,
    setup: &'t Setup,
    convo: &'t mut Conversation,
    progress: &'t mut P,
}

impl<P: Hooks> Turn<'_, P> {
    /// The answer `text` as JSON valid against `schema`: sent back once with what is wrong, a
    /// second bad answer failing the turn with `invalid_llm_output`.
    async fn held_to(
        &mut self,
        ctx: &RunContext,
        schema: &JsonSchema,
        text: String,
        sink: &mut EventSink,
    ) -> Result<(String, Value), RunError> {
        let problem = match structured(&text, schema) {
            Ok(value) => return Ok((text, value)),
            Err(problem) => problem,
        };
        // The answer is sent back: the conversation goes on.
        self.convo.answer = None;
        self.convo.messages.push(Message::Assistant {
            content: text,
            tool_calls: Vec::new(),
        });
        self.convo.messages.push(Message::User {
            content: format!(
                "{} Answer again with only JSON valid against this schema: {}",
                problem.message, schema.schema
            ),
        });
        let text = converse::converse(ctx, self.setup, self.convo, self.progress, sink).await?;
        let value = structured(&text, schema).map_err(|e| {
            RunError::new(
                ErrorCode::InvalidLlmOutput,
                format!(
                    "agent `{}` answered invalid JSON twice: {}",
                    self.agent, e.message
                ),
            )
        })?;
        Ok((text, value))
    }
}

/// The tools `agent` may call, as the model sees them: its own, within the run's allow-list.
fn agent_tools(ctx: &RunContext, agent: &AgentSpec) -> Vec<ToolSpec> {
    ctx.services
        .tools
        .list()
        .into_iter()
        .filter(|t| agent.tools.contains(&t.name) && may_use(ctx, &t.name))
        .map(|t| ToolSpec {
            name: t.name,
            description: t.description,
            parameters: t.input_schema,
        })
        .collect()
}

/// The turn's own hooks around its caller's: checkpoints the turn's conversation, offers the
/// caller's tools and routes their calls to it, refuses tools the agent was not given, and
/// wraps model and tool calls in the agent's middleware.
struct TurnHooks<'f, 'h, H> {
    frame: &'f Frame<'f>,
    agent: &'f AgentSpec,
    convo_key: StepPath,
    hooks: &'h mut H,
    /// The agent's middleware, around its tool calls.
    chain: &'f Chain,
    /// The same, around its model calls.
    wrap: ModelWrap,
}

impl<H: Hooks> Hooks for TurnHooks<'_, '_, H> {
    async fn saved(&mut self, ctx: &RunContext, convo: &Conversation) {
        self.frame
            .children
            .record(ctx, &self.convo_key, convo)
            .await;
        self.hooks.saved(ctx, convo).await;
    }

    fn tools(&self) -> Vec<ToolSpec> {
        self.hooks.tools()
    }

    async fn intercept(
        &mut self,
        ctx: &RunContext,
        call: &ModelToolCall,
        sink: &mut EventSink,
    ) -> Option<Result<Value, RunError>> {
        if let Some(answer) = self.hooks.intercept(ctx, call, sink).await {
            return Some(answer);
        }
        if self.agent.tools.contains(&call.name) {
            return None;
        }
        Some(Err(RunError::new(
            ErrorCode::ToolNotFound,
            format!(
                "agent `{}` may not use tool `{}`; its tools: {}",
                self.agent.name,
                call.name,
                self.agent.tools.join(", ")
            ),
        )))
    }

    fn stopped(&self) -> bool {
        self.hooks.stopped()
    }

    fn model_wrap(&self) -> ModelWrap {
        // The agent's middleware; where it sets nothing, the caller's hooks.
        let caller = self.hooks.model_wrap();
        ModelWrap {
            filters: self.wrap.filters.clone().or(caller.filters),
            retry: self.wrap.retry.or(caller.retry),
        }
    }

    async fn admit(
        &mut self,
        ctx: &RunContext,
        step: &StepPath,
        call: &ModelToolCall,
    ) -> Result<Option<RunError>, RunError> {
        if let held @ (Ok(Some(_)) | Err(_)) = self.hooks.admit(ctx, step, call).await {
            return held;
        }
        if !self.chain.needs_approval(&call.name) {
            return Ok(None);
        }
        approval::ask(ctx, self.agent, step, call).await
    }
}

/// The last user message's text (what a workflow agent is asked).
pub(crate) fn last_user_text(messages: &[Message]) -> String {
    messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::User { content } => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// A value as message text: strings as they are, anything else as JSON.
pub(crate) fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
