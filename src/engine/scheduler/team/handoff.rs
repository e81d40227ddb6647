//! `handoff`: control passes between agents by tool calls. The active agent (first the step's
//! `start`) is offered one `transfer_to_<target>` tool per edge of its `handoffs`; calling one
//! ends its turn, a `handoff` event says who passed to whom and why, and the target takes the
//! next turn with what the edge's context policy gives it (everything, a summary, only the
//! request, or the last messages), plus a note naming the handoff and its reason. Control
//! passes only by such a call, never by what an answer says.
//!
//! An answer without a handoff ends the step with that answer (`on_no_handoff: end`) or asks a
//! person (`ask_human`), whose message goes back to the same agent. Each turn is an attempt
//! `<agent>.<n>` at the step's key, its input what the agent received, its model rounds below
//! it; each finished turn (with the handoff it made and what the target receives) is recorded
//! as a finished child, so a resumed step replays finished turns instead of taking them again.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::domain::attempt_io::{
    Envelope, HandoffSummaryInput, HandoffTo, HandoffTurnInput, HandoffTurnOutput,
};
use crate::domain::event::HandoffData;
use crate::domain::{ErrorCode, RunError, Segment, StepKind, StepPath};

use crate::llm::{Message, ToolCall as ModelToolCall, ToolSpec};
use crate::plan::team::{ContextPolicy, HandoffEdge, HandoffStep, NoHandoff};
use crate::plan::{AgentSpec, JsonSchema, Team};

use super::turn::take_turn;
use super::{Part, hold_part, open_part, tool_name};
use crate::engine::calls::converse::Hooks;
use crate::engine::calls::function_call::{self, FunctionCall};
use crate::engine::calls::model::TextKind;
use crate::engine::runtime::attempts::HeldEnd;
use crate::engine::runtime::checkpoint::Conversation;
use crate::engine::runtime::context::RunContext;
use crate::engine::runtime::sink::EventSink;
use crate::engine::scheduler::frame::Frame;

/// Where control is and what was said.
struct State {
    active: String,
    /// Turns taken so far (numbers their paths).
    turn: u32,
    transitions: u32,
    /// The request the step started from.
    request: String,
    /// Everything said so far, system prompts excluded: the request, each agent's messages,
    /// handoff notes and human messages.
    transcript: Vec<Message>,
    /// What the active agent receives on its next turn.
    received: Vec<Message>,
    /// How it came by that (`request`, a context policy, or `human`).
    context: String,
}

/// One finished turn, as checkpointed.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct TurnRecord {
    agent: String,
    text: String,
    value: Value,
    /// The agent's conversation after the turn, its system prompt excluded.
    conversation: Vec<Message>,
    /// The transcript after the turn (and the handoff note, when it handed off).
    transcript: Vec<Message>,
    handoff: Option<Handed>,
}

/// A handoff a turn made, with what its target receives.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Handed {
    to: String,
    reason: Option<String>,
    context: String,
    received: Vec<Message>,
}

/// Runs a handoff step at `key` on `request` until an agent answers for good.
pub(crate) async fn run(
    frame: &Frame<'_>,
    key: &StepPath,
    step: &HandoffStep,
    request: String,
    sink: &mut EventSink,
) -> Result<Value, RunError> {
    let opening = vec![Message::User {
        content: request.clone(),
    }];
    let mut state = State {
        active: step.start.clone(),
        turn: 0,
        transitions: 0,
        request,
        transcript: opening.clone(),
        received: opening,
        context: "request".into(),
    };
    loop {
        state.turn += 1;
        let record_key = key.turn(&state.active, state.turn);
        // The `handoff` event goes out live, before the turn is recorded: a replayed turn was
        // announced before it (at least once for a turn cut by a crash).
        let work = async {
            let (record, held) = take(frame, key, step, &state, sink).await?;
            if let Some(handed) = &record.handoff {
                let data = HandoffData {
                    from: state.active.clone(),
                    to: handed.to.clone(),
                    reason: handed.reason.clone(),
                };
                frame.ctx.emit(Some(key), data).await;
            }
            Ok((record, held))
        };
        let (record, held) = frame.children.once(frame.ctx, &record_key, work).await?;
        HeldEnd::close_all(held.into_iter().flatten(), frame.ctx, sink).await;
        state.transcript = record.transcript.clone();
        if let Some(handed) = record.handoff {
            state.transitions += 1;
            state.active = handed.to;
            state.received = handed.received;
            state.context = handed.context;
            continue;
        }
        if step.on_no_handoff == NoHandoff::End {
            return Ok(record.value);
        }
        let Some(message) = ask_human(frame, key, state.turn, &record.text).await? else {
            return Ok(record.value);
        };
        let said = Message::User { content: message };
        state.transcript.push(said.clone());
        state.received = record.conversation;
        state.received.push(said);
        state.context = "human".into();
    }
}

/// Takes the active agent's turn as attempt `<agent>.<n>`, and the handoff it makes; the
/// attempt (after the summary it asked for, if any) is held open until the caller records the
/// turn, and closed in the order given.
async fn take(
    frame: &Frame<'_>,
    key: &StepPath,
    step: &HandoffStep,
    state: &State,
    sink: &mut EventSink,
) -> Result<(TurnRecord, Vec<HeldEnd>), RunError> {
    let Some(agent) = frame.team.agent(&state.active) else {
        return Err(RunError::new(
            ErrorCode::InvalidStep,
            format!("the plan has no agent `{}`", state.active),
        ));
    };
    let path = key.turn(&agent.name, state.turn);
    let input = HandoffTurnInput {
        agent: agent.name.clone(),
        context: state.context.clone(),
        messages: state.received.clone(),
    };
    let part = Part {
        at: &path,
        name: &agent.name,
        kind: StepKind::Agent,
    };
    let attempt = open_part(frame, part, input.into(), sink).await?;
    let taken = turn(frame, key, step, agent, &path, state, sink).await;
    let shown = taken.as_ref().map(|(r, _)| {
        let handoff = r.handoff.as_ref().map(|h| HandoffTo {
            to: h.to.clone(),
            reason: h.reason.clone(),
        });
        let text = r.text.clone();
        HandoffTurnOutput { text, handoff }.to_json()
    });
    let held = hold_part(frame, attempt, &shown.map_err(Clone::clone));
    let ((record, summary), held) = held.kept_with(taken, frame.ctx, sink).await?;
    Ok((record, summary.into_iter().chain([held]).collect()))
}

/// The turn itself at `path`: the agent answers or hands off (within `max_transitions`), with
/// the summarizer's attempt held open when the handoff's context is a summary.
async fn turn(
    frame: &Frame<'_>,
    key: &StepPath,
    step: &HandoffStep,
    agent: &AgentSpec,
    path: &StepPath,
    state: &State,
    sink: &mut EventSink,
) -> Result<(TurnRecord, Option<HeldEnd>), RunError> {
    let mut hooks = Transfers {
        team: &frame.team,
        edges: &agent.handoffs,
        chosen: None,
    };
    if let Some(saved) = frame
        .children
        .replay::<Conversation>(&path.conversation())?
    {
        // Stopped between the transfer's result and the turn's record: the choice stands.
        hooks.chosen = already_chosen(&saved.messages, &agent.handoffs);
    }
    let end = take_turn(frame, agent, path, state.received.clone(), &mut hooks, sink).await?;
    let mut conversation = end.messages;
    if matches!(conversation.first(), Some(Message::System { .. })) {
        conversation.remove(0);
    }
    let mut transcript = state.transcript.clone();
    transcript.extend(conversation.iter().skip(state.received.len()).cloned());
    let mut summary = None;
    let handoff = match hooks.chosen {
        None => None,
        Some(_) if state.transitions >= step.max_transitions => {
            return Err(RunError::new(
                ErrorCode::HandoffLimitExceeded,
                format!(
                    "`{}` handed off after {} handoffs, the step's max_transitions",
                    agent.name, step.max_transitions
                ),
            ));
        }
        Some((i, reason)) => {
            let edge = &agent.handoffs[i];
            let (received, held) = context_for(frame, key, state, edge, &transcript, sink).await?;
            summary = held;
            let note = handoff_note(&agent.name, &edge.to, reason.as_deref());
            let mut received = received;
            received.push(note.clone());
            transcript.push(note);
            Some(Handed {
                to: edge.to.clone(),
                reason,
                context: edge.context.as_str().to_owned(),
                received,
            })
        }
    };
    let record = TurnRecord {
        agent: agent.name.clone(),
        text: end.text,
        value: end.value,
        conversation,
        transcript,
        handoff,
    };
    Ok((record, summary))
}

/// What the target of `edge` receives of `transcript` (before the handoff note), and the
/// summarizer's held attempt when it was asked.
async fn context_for(
    frame: &Frame<'_>,
    key: &StepPath,
    state: &State,
    edge: &HandoffEdge,
    transcript: &[Message],
    sink: &mut EventSink,
) -> Result<(Vec<Message>, Option<HeldEnd>), RunError> {
    Ok(match edge.context {
        ContextPolicy::Inherit => (transcript.to_vec(), None),
        ContextPolicy::LastN(n) => (last_n(transcript, n as usize), None),
        ContextPolicy::Isolate => {
            let request = Message::User {
                content: state.request.clone(),
            };
            (vec![request], None)
        }
        ContextPolicy::Summarize => {
            let at = key.join(Segment::Summary(state.turn));
            let (summary, held) = summarize(frame, &at, transcript, sink).await?;
            let told = Message::User {
                content: format!("A summary of the conversation so far: {summary}"),
            };
            (vec![told], Some(held))
        }
    })
}

/// The last `n` turns of the conversation: user messages and assistant answers, an answer
/// kept together with the results of the tools it called. Hand-offs (`transfer_to_*` calls
/// and their results) are no part of the conversation: they neither count nor go along (the
/// target gets its own note), and a result whose call is not there is dropped.
fn last_n(transcript: &[Message], n: usize) -> Vec<Message> {
    let is_transfer = |name: &str| name.starts_with("transfer_to_");
    let mut turns: Vec<Vec<Message>> = Vec::new();
    for message in transcript {
        match message {
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let kept: Vec<_> = tool_calls
                    .iter()
                    .filter(|c| !is_transfer(&c.name))
                    .cloned()
                    .collect();
                if content.is_empty() && kept.is_empty() {
                    continue;
                }
                turns.push(vec![Message::Assistant {
                    content: content.clone(),
                    tool_calls: kept,
                }]);
            }
            Message::Tool { call_id, .. } => {
                let answered = turns.last_mut().filter(|turn| {
                    matches!(&turn[0], Message::Assistant { tool_calls, .. }
                        if tool_calls.iter().any(|c| &c.id == call_id))
                });
                // Else a transfer's result, or a result without its call: dropped.
                if let Some(turn) = answered {
                    turn.push(message.clone());
                }
            }
            other => turns.push(vec![other.clone()]),
        }
    }
    let skip = turns.len().saturating_sub(n);
    turns.into_iter().skip(skip).flatten().collect()
}

/// The user message that tells the target it has control, and why.
fn handoff_note(from: &str, to: &str, reason: Option<&str>) -> Message {
    let why = reason.map(|r| format!(" Reason: {r}")).unwrap_or_default();
    Message::User {
        content: format!("`{from}` handed the conversation to you (`{to}`).{why}"),
    }
}

/// Asks a person about the answer of turn `turn`: their message, or `None` when they are done.
async fn ask_human(
    frame: &Frame<'_>,
    key: &StepPath,
    turn: u32,
    answer: &str,
) -> Result<Option<String>, RunError> {
    let schema = JsonSchema::compile(&json!({
        "oneOf": [
            { "type": "object", "required": ["message"], "additionalProperties": false,
              "properties": { "message": { "type": "string", "minLength": 1 } } },
            { "type": "object", "required": ["done"], "additionalProperties": false,
              "properties": { "done": { "const": true } } }
        ]
    }))
    .expect("the answer schema compiles");
    let value = frame
        .ctx
        .wait_for_input(&key.join(Segment::Ask(turn)), answer, Some(&schema))
        .await?;
    Ok(value
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned))
}

/// A summary of `transcript` by the `summarizer` function, as the attempt at `at` (its text is
/// not streamed: it is not the run's answer); a summary's attempt is held open until the turn
/// that carries it is recorded, a failed one is closed at once.
pub(crate) async fn summarize(
    frame: &Frame<'_>,
    at: &StepPath,
    transcript: &[Message],
    sink: &mut EventSink,
) -> Result<(String, HeldEnd), RunError> {
    let ctx = frame.ctx;
    let function = function_call::configured(ctx, crate::functions::SUMMARIZER)?;
    let input = HandoffSummaryInput {
        transcript: transcript_text(transcript),
    };
    // The summarizer's prompt reads the attempt's input as its `input`.
    let messages = function_call::opening(ctx, &function, &input.to_json())?;
    let call = FunctionCall {
        plan_version: frame.plan_version,
        schema: None,
        text: TextKind::Quiet,
        input: Some(input.into()),
        ..FunctionCall::of(&function, at, "summarizer", "summary")
    };
    let mut open = function_call::open(ctx, call, sink).await?;
    let text = open
        .ask(ctx, messages)
        .await
        .map(|reply| reply.text.trim().to_owned());
    let held = open.held(ctx, &text.clone().map(Value::String));
    held.kept_with(text, ctx, sink).await
}

/// The transcript as the summariser reads it.
fn transcript_text(transcript: &[Message]) -> String {
    let mut out = String::new();
    for m in transcript {
        let line = match m {
            Message::System { .. } => continue,
            Message::User { content } => format!("User: {content}"),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let calls: Vec<String> = tool_calls
                    .iter()
                    .map(|c| format!(" [calls {}({})]", c.name, c.arguments))
                    .collect();
                format!("Assistant: {content}{}", calls.concat())
            }
            Message::Tool { content, .. } => format!("Tool result: {content}"),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The active agent's hooks: its handoff edges as `transfer_to_<target>` tools.
struct Transfers<'f> {
    team: &'f Team,
    edges: &'f [HandoffEdge],
    /// The edge taken (its index) and the reason given.
    chosen: Option<(usize, Option<String>)>,
}

impl Hooks for Transfers<'_> {
    fn tools(&self) -> Vec<ToolSpec> {
        self.edges
            .iter()
            .map(|edge| {
                let about = edge
                    .description
                    .clone()
                    .or_else(|| self.team.agent(&edge.to)?.description.clone())
                    .unwrap_or_else(|| format!("the agent `{}`", edge.to));
                ToolSpec {
                    name: tool_name("transfer_to_", &edge.to),
                    description: format!(
                        "Hand the conversation over to `{}` ({about}); it answers from then on.",
                        edge.to
                    ),
                    parameters: json!({
                        "type": "object",
                        "properties": { "reason": { "type": "string", "description": "Why you hand over." } },
                        "required": ["reason"]
                    }),
                }
            })
            .collect()
    }

    async fn intercept(
        &mut self,
        _ctx: &RunContext,
        call: &ModelToolCall,
        _sink: &mut EventSink,
    ) -> Option<Result<Value, RunError>> {
        let i = edge_of(self.edges, &call.name)?;
        if let Some((j, _)) = self.chosen {
            return Some(Err(RunError::new(
                ErrorCode::InvalidToolArguments,
                format!(
                    "control was already handed to `{}` in this turn",
                    self.edges[j].to
                ),
            )));
        }
        self.chosen = Some((i, reason_of(call)));
        Some(Ok(Value::String(format!(
            "Transferred to `{}`.",
            self.edges[i].to
        ))))
    }

    fn stopped(&self) -> bool {
        self.chosen.is_some()
    }
}

/// The edge whose transfer tool is `tool`.
fn edge_of(edges: &[HandoffEdge], tool: &str) -> Option<usize> {
    edges
        .iter()
        .position(|e| tool_name("transfer_to_", &e.to) == tool)
}

/// The `reason` argument of a transfer call, if it has one.
fn reason_of(call: &ModelToolCall) -> Option<String> {
    serde_json::from_str::<Value>(&call.arguments)
        .ok()?
        .get("reason")?
        .as_str()
        .map(str::to_owned)
}

/// A transfer the last reply of a saved conversation made and got its result for.
fn already_chosen(messages: &[Message], edges: &[HandoffEdge]) -> Option<(usize, Option<String>)> {
    let pos = messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant { .. }))?;
    let Message::Assistant { tool_calls, .. } = &messages[pos] else {
        return None;
    };
    let answered = |id: &str| {
        messages[pos + 1..]
            .iter()
            .any(|m| matches!(m, Message::Tool { call_id, .. } if call_id == id))
    };
    tool_calls.iter().find_map(|c| {
        let i = edge_of(edges, &c.name)?;
        answered(&c.id).then(|| (i, reason_of(c)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(s: &str) -> Message {
        Message::User { content: s.into() }
    }

    #[test]
    fn last_n_counts_turns_keeps_calls_with_results_and_leaves_transfers_out() {
        let call = ModelToolCall {
            id: "c1".into(),
            name: "transfer_to_b".into(),
            arguments: "{}".into(),
        };
        let t = vec![
            user("hi"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![call],
            },
            Message::Tool {
                call_id: "c1".into(),
                content: "ok".into(),
            },
            user("more"),
        ];
        // The transfer and its result are no turn of the conversation.
        assert_eq!(last_n(&t, 1), vec![user("more")]);
        assert_eq!(last_n(&t, 2), vec![user("hi"), user("more")]);
        assert_eq!(last_n(&t, 10), vec![user("hi"), user("more")]);
        // A tool call stays with its result, and counts as one turn with it.
        let clock = ModelToolCall {
            id: "c2".into(),
            name: "clock_now".into(),
            arguments: "{}".into(),
        };
        let asked = Message::Assistant {
            content: String::new(),
            tool_calls: vec![clock],
        };
        let result = Message::Tool {
            call_id: "c2".into(),
            content: "09:00".into(),
        };
        let answer = Message::Assistant {
            content: "It is nine.".into(),
            tool_calls: vec![],
        };
        let timed = vec![user("time?"), asked.clone(), result.clone(), answer.clone()];
        assert_eq!(last_n(&timed, 2), vec![asked, result, answer.clone()]);
        assert_eq!(last_n(&timed, 1), vec![answer]);
        // A result whose call is not there is dropped.
        let orphan = vec![
            Message::Tool {
                call_id: "zz".into(),
                content: "x".into(),
            },
            user("u"),
        ];
        assert_eq!(last_n(&orphan, 5), vec![user("u")]);
        let edges = vec![HandoffEdge {
            to: "b".into(),
            context: ContextPolicy::Inherit,
            description: None,
        }];
        assert_eq!(already_chosen(&t[..3], &edges), Some((0, None)));
        assert_eq!(already_chosen(&t[..2], &edges), None);
    }
}
