//! Middleware around an agent's turn: the plan's run-wide `middleware` (outermost), then the
//! agent's own, in order — built-ins only ([`Builtin`]), so a chain is data.
//!
//! A turn runs m1 → m2 → agent → m2 → m1. Each layer's *before* sees (and may change) the
//! turn's input messages in order, and may answer itself instead (a short circuit: the layers
//! inside it and the model are never called); each *after* sees (and may change) the answer in
//! reverse order. Inside the turn, the chain also wraps every model call — the streamed text
//! passes the guardrails innermost first before any `token` event carries it, and `retry`
//! retries failed calls ([`Chain::model_wrap`]) — and every tool call (`tool_approval` asks a
//! human, [`approval`]).
//!
//! What the built-ins do:
//! - `retry`: a model call of the turn that fails retryably is tried again, up to
//!   `max_attempts`, after `initial_delay_ms` doubling; each retry is an `error` event (text a
//!   failed call had streamed stays in the log; the retry's text follows it).
//! - `audit_log`: after the turn, a record `{agent, input_messages, answer_chars, tool_calls,
//!   from_model}` is logged (target `orca::audit`, info) and added to the turn's `audit`
//!   (an `agent` step stores it in its attempt input).
//! - `guardrail`: input messages are redacted, or (with `block`) the turn answers its
//!   `refusal` without calling the model; the model's text is redacted as it streams, or
//!   fails the turn with `guardrail_blocked` (`block`); an answer that did not come from the
//!   model (a cached one, a workflow agent's) is checked whole.
//! - `rate_limit`: a turn waits until the agent started fewer than `per_minute` turns in the
//!   last minute of the run.
//! - `response_cache`: the agent asked the same messages again in the run answers what it
//!   answered then (a short circuit); a turn stopped by its caller (a handoff) is not kept.
//!   The cache lives in the run's memory ([`crate::engine::runtime::middleware_state::RunState`]), empty
//!   again after a restart.
//! - `tool_approval`: see [`approval`].

pub(crate) mod approval;
pub(crate) mod guard;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::domain::RunError;
use crate::domain::attempt_io::AuditEntry;
use crate::llm::Message;
use crate::plan::middleware_spec::{Builtin, Guardrail};
use crate::plan::{AgentSpec, Team};

use super::turn::TurnEnd;
use crate::engine::calls::converse::{ModelWrap, Retry};
use crate::engine::runtime::context::RunContext;
use guard::{GuardChain, GuardStream};

/// An agent's middleware, outermost first.
pub(crate) struct Chain {
    layers: Vec<Layer>,
}

enum Layer {
    Retry(Retry),
    Audit,
    Guard(Arc<Guardrail>),
    RateLimit(u32),
    Cache,
    Approval(Vec<String>),
}

/// What a layer's *before* decided.
enum Flow {
    Next,
    /// The answer, without calling what is inside.
    Answer(String, Value),
}

impl Chain {
    /// The run-wide middleware, then the agent's. Configurations were validated with the
    /// plan; one that does not parse (it cannot) is left out.
    pub(crate) fn for_agent(team: &Team, agent: &AgentSpec) -> Chain {
        let layers = team
            .middleware
            .iter()
            .chain(&agent.middleware)
            .filter_map(|spec| Builtin::parse(spec).ok())
            .map(|builtin| match builtin {
                Builtin::Retry {
                    max_attempts,
                    initial_delay_ms,
                } => Layer::Retry(Retry {
                    max_attempts,
                    initial_delay: Duration::from_millis(initial_delay_ms),
                }),
                Builtin::AuditLog => Layer::Audit,
                Builtin::Guardrail(g) => Layer::Guard(Arc::new(g)),
                Builtin::RateLimit { per_minute } => Layer::RateLimit(per_minute),
                Builtin::ResponseCache => Layer::Cache,
                Builtin::ToolApproval { tools } => Layer::Approval(tools),
            })
            .collect();
        Chain { layers }
    }

    /// The turn's model calls: streamed text through the guardrails, innermost first (the
    /// order answers go back out); the innermost `retry`.
    pub(crate) fn model_wrap(&self) -> ModelWrap {
        let guards: Vec<Arc<Guardrail>> = self
            .layers
            .iter()
            .rev()
            .filter_map(|l| match l {
                Layer::Guard(g) => Some(g.clone()),
                _ => None,
            })
            .collect();
        let retry = self.layers.iter().rev().find_map(|l| match l {
            Layer::Retry(r) => Some(*r),
            _ => None,
        });
        ModelWrap {
            filters: (!guards.is_empty()).then(|| {
                Arc::new(GuardChain(guards)) as Arc<dyn crate::engine::calls::model::Filters>
            }),
            retry,
        }
    }

    /// Whether a call of `tool` waits for a human.
    pub(crate) fn needs_approval(&self, tool: &str) -> bool {
        self.layers
            .iter()
            .any(|l| matches!(l, Layer::Approval(tools) if tools.iter().any(|t| t == tool)))
    }
}

/// Who wrote a turn's answer, as the afters see it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AnsweredBy {
    /// The agent's model: its text streamed through the guardrails as it came.
    Model,
    /// A layer (the cache, a guardrail's refusal) or the agent's workflow.
    Other,
}

/// Runs `agent`'s turn on `messages` through `chain`: the befores in order, `inner` (unless a
/// layer answered), the afters of the layers entered in reverse order.
pub(crate) async fn around_turn<F, Fut>(
    chain: &Chain,
    ctx: &RunContext,
    agent: &AgentSpec,
    messages: Vec<Message>,
    inner: F,
) -> Result<TurnEnd, RunError>
where
    F: FnOnce(Vec<Message>) -> Fut,
    Fut: Future<Output = Result<TurnEnd, RunError>>,
{
    let mut messages = messages;
    // What each layer entered was given.
    let mut seen: Vec<Vec<Message>> = Vec::with_capacity(chain.layers.len());
    let mut answered = None;
    for layer in &chain.layers {
        seen.push(messages.clone());
        if let Flow::Answer(text, value) = before(layer, ctx, agent, &mut messages).await {
            answered = Some((text, value));
            break;
        }
    }
    let (mut end, by, entered) = match answered {
        Some((text, value)) => {
            let end = short_circuit(agent, messages, text, value);
            // The layer that answered has no after of its own.
            (end, AnsweredBy::Other, seen.len() - 1)
        }
        None => {
            let by = match agent.workflow {
                None => AnsweredBy::Model,
                Some(_) => AnsweredBy::Other,
            };
            (inner(messages).await?, by, seen.len())
        }
    };
    for i in (0..entered).rev() {
        after(&chain.layers[i], ctx, agent, &seen[i], &mut end, by)?;
    }
    Ok(end)
}

async fn before(
    layer: &Layer,
    ctx: &RunContext,
    agent: &AgentSpec,
    messages: &mut [Message],
) -> Flow {
    match layer {
        Layer::Guard(g) => {
            for m in messages.iter_mut() {
                let content = match m {
                    Message::User { content }
                    | Message::Assistant { content, .. }
                    | Message::Tool { content, .. } => content,
                    Message::System { .. } => continue,
                };
                match GuardStream::apply(g, content) {
                    Ok(text) => *content = text,
                    // Only `block` fails: the request is refused, the model never sees it.
                    Err(_) => return Flow::Answer(g.refusal.clone(), json!(g.refusal)),
                }
            }
            Flow::Next
        }
        Layer::RateLimit(per_minute) => {
            ctx.middleware.admit_turn(&agent.name, *per_minute).await;
            Flow::Next
        }
        Layer::Cache => match ctx.middleware.cached(&agent.name, &cache_key(messages)) {
            Some((text, value)) => Flow::Answer(text, value),
            None => Flow::Next,
        },
        Layer::Retry(_) | Layer::Audit | Layer::Approval(_) => Flow::Next,
    }
}

fn after(
    layer: &Layer,
    ctx: &RunContext,
    agent: &AgentSpec,
    input: &[Message],
    end: &mut TurnEnd,
    by: AnsweredBy,
) -> Result<(), RunError> {
    let from_model = by == AnsweredBy::Model;
    match layer {
        // The model's text passed this guardrail as it streamed.
        Layer::Guard(g) if !from_model => {
            end.text = GuardStream::apply(g, &end.text)?;
            if end.value.is_string() {
                end.value = Value::String(end.text.clone());
            }
        }
        // A turn a caller stopped (a handoff) did more than answer: replaying its text would
        // drop that, so only answers are kept.
        Layer::Cache if ended_in_answer(end) => {
            let key = cache_key(input);
            ctx.middleware
                .remember(&agent.name, &key, &end.text, &end.value);
        }
        Layer::Audit => {
            let tool_calls = end
                .messages
                .iter()
                .skip(1 + input.len())
                .filter(|m| matches!(m, Message::Tool { .. }))
                .count();
            let answer_chars = end.text.chars().count();
            tracing::info!(
                target: "orca::audit",
                run_id = %ctx.run_id,
                agent = %agent.name,
                input_messages = input.len(),
                answer_chars,
                tool_calls,
                from_model,
                "agent turn"
            );
            end.audit.push(AuditEntry {
                agent: agent.name.clone(),
                input_messages: input.len(),
                answer_chars,
                tool_calls,
                from_model,
            });
        }
        _ => {}
    }
    Ok(())
}

/// A turn a layer answered: the conversation as if the agent had said it.
fn short_circuit(agent: &AgentSpec, messages: Vec<Message>, text: String, value: Value) -> TurnEnd {
    let mut all = vec![Message::System {
        content: agent.instructions.clone(),
    }];
    all.extend(messages);
    all.push(Message::Assistant {
        content: text.clone(),
        tool_calls: Vec::new(),
    });
    TurnEnd {
        text,
        value,
        messages: all,
        audit: Vec::new(),
    }
}

/// Whether the turn ended with the agent's answer (not stopped after a tool round).
fn ended_in_answer(end: &TurnEnd) -> bool {
    matches!(end.messages.last(), Some(Message::Assistant { tool_calls, .. }) if tool_calls.is_empty())
}

fn cache_key(messages: &[Message]) -> String {
    serde_json::to_string(messages).unwrap_or_default()
}
