//! Teams of agents inside a plan: an agent's turn ([`turn`]) with the middleware around it
//! ([`middleware`]), a hub with its spokes ([`spokes`]), control passed between agents
//! ([`handoff`]), a group chat ([`chat`]) and workflows nested in a step ([`workflow`]). Each
//! runs inside one step of the plan, its work (model rounds, tool calls, inner steps) recorded
//! as attempts at paths below that step, its events carrying those paths.

pub(crate) mod chain;
pub(crate) mod chat;
pub(crate) mod handoff;
pub(crate) mod memory;
pub(crate) mod spokes;
pub(crate) mod turn;
pub(crate) mod workflow;

use serde_json::Value;

use crate::domain::{AttemptInput, RunError, StepKind, StepPath};

use super::frame::Frame;
use crate::engine::runtime::attempts::{AttemptEnd, AttemptKey, HeldEnd, NewAttempt};
use crate::engine::runtime::sink::EventSink;

/// A tool name a model may call for `prefix` + agent `name` (tool names allow letters,
/// digits, `_` and `-`; agent names may also hold `.`).
pub(crate) fn tool_name(prefix: &str, name: &str) -> String {
    format!("{prefix}{}", name.replace('.', "_"))
}

/// One part of a team step's work: a turn, a speaker selection or a summary.
pub(crate) struct Part<'a> {
    /// Its place: a turn, selection or summary inside the team step.
    pub at: &'a StepPath,
    /// The agent, or what the part does.
    pub name: &'a str,
    pub kind: StepKind,
}

/// Opens the attempt of `part`: what it received is its input, so
/// `GET /v1/runs/{id}/steps` shows what each agent saw.
pub(crate) async fn open_part(
    frame: &Frame<'_>,
    part: Part<'_>,
    input: AttemptInput,
    sink: &mut EventSink,
) -> Result<AttemptKey, RunError> {
    let new = NewAttempt {
        step: part.at,
        name: part.name,
        kind: part.kind,
        plan_version: frame.plan_version,
        input: Some(input),
    };
    frame.ctx.open_attempt(new, sink).await
}

/// How an attempt [`open_part`] opened ended, held open until the record of its work is
/// checkpointed.
pub(crate) fn hold_part(
    frame: &Frame<'_>,
    key: AttemptKey,
    result: &Result<Value, RunError>,
) -> HeldEnd {
    HeldEnd::new(key, AttemptEnd::of(frame.ctx, result))
}
