//! The `simple` executor: the run input goes to the model with the run's tools; the
//! model-and-tools loop ([`super::calls::converse`]) runs until the model answers, and its answer is
//! the run's output. A run of a session first gets the session's earlier turns, summarised
//! past the token budget ([`super::session::history`]).
//!
//! The conversation is checkpointed after every model reply and every tool result; a run
//! resumed after a restart continues from its last checkpoint, so neither a tool that already
//! answered nor a model round that already replied is called again.

use async_trait::async_trait;
use serde_json::Value;

use crate::domain::{ErrorCode, RunError, StepPath};
use crate::llm::{Message, ToolSpec};

use super::calls::converse::{self, Hooks, Setup};
use super::calls::tool_call::may_use;
use super::runtime::checkpoint::{self, Conversation, ConversationDelta, Delta, Restored};
use super::runtime::context::RunContext;
use super::runtime::outcome::{Executor, Outcome};
use super::runtime::sink::EventSink;
use super::session;
use crate::domain::plan::NO_PLAN;
use crate::domain::run::input_text;

const SYSTEM_PROMPT: &str = "You are orca, a helpful assistant. Answer concisely. \
Use the tools you are given when they help; never invent their results.";

pub struct Simple;

#[async_trait]
impl Executor for Simple {
    async fn execute(&self, ctx: &RunContext) -> Outcome {
        let route = match ctx.services.llm.route(ctx.spec.request.model.as_deref()) {
            Ok(p) => p,
            Err(e) => return Outcome::Failed(e.to_run_error()),
        };
        let (mut convo, saved) = match restore(ctx).await {
            Ok(Some(convo)) => {
                let saved = convo.messages.len();
                (convo, saved)
            }
            Ok(None) => {
                let convo = Conversation {
                    round: 0,
                    messages: opening_messages(ctx).await,
                    answer: None,
                };
                (convo, 0)
            }
            Err(e) => return Outcome::Failed(e),
        };
        let setup = Setup {
            route,
            alias: ctx.spec.request.model.clone(),
            tools: run_tools(ctx),
            max_rounds: ctx.services.config.max_tool_rounds,
            plan_version: NO_PLAN,
            path: StepPath::root(),
            response_schema: None,
            slots: None,
        };
        let mut checkpoints = Checkpoints { saved };
        let answer = converse::converse(
            ctx,
            &setup,
            &mut convo,
            &mut checkpoints,
            &mut EventSink::Live,
        )
        .await;
        match answer {
            Ok(text) => Outcome::Success(Value::String(text)),
            Err(e) => Outcome::Failed(e),
        }
    }
}

/// Checkpoints what the conversation gained whenever the loop says it must survive a
/// restart.
struct Checkpoints {
    /// Messages already in a checkpoint (none: the first checkpoint holds them all).
    saved: usize,
}

impl Hooks for Checkpoints {
    async fn saved(&mut self, ctx: &RunContext, convo: &Conversation) {
        // A resumed conversation that holds its answer needs nothing else: a run whose model
        // answered at once checkpoints the answer alone, not its opening messages.
        let answer_alone = self.saved == 0 && convo.answer.is_some();
        let delta = ConversationDelta {
            reset: self.saved == 0,
            round: convo.round,
            messages: if answer_alone {
                Vec::new()
            } else {
                convo.messages[self.saved..].to_vec()
            },
            answer: convo.answer.clone(),
        };
        self.saved = convo.messages.len();
        checkpoint::save(ctx, NO_PLAN, &Delta::Conversation(delta)).await;
    }
}

/// The tools the run may use, as the model sees them.
fn run_tools(ctx: &RunContext) -> Vec<ToolSpec> {
    ctx.services
        .tools
        .list()
        .into_iter()
        .filter(|t| may_use(ctx, &t.name))
        .map(|t| ToolSpec {
            name: t.name,
            description: t.description,
            parameters: t.input_schema,
        })
        .collect()
}

/// The system prompt (the run's `instructions`, else the built-in one; with the summary of the session's older turns, if any), the session's
/// later exchanges, and the run input.
async fn opening_messages(ctx: &RunContext) -> Vec<Message> {
    let history = session::history(ctx).await;
    let prompt = ctx
        .spec
        .request
        .instructions
        .as_deref()
        .unwrap_or(SYSTEM_PROMPT);
    let system = match history.summary {
        Some(summary) => {
            format!("{prompt}\n\nSummary of the conversation so far: {summary}")
        }
        None => prompt.to_owned(),
    };
    let mut messages = vec![Message::System { content: system }];
    messages.extend(history.turns);
    messages.push(Message::User {
        content: input_text(&ctx.spec.request.input),
    });
    messages
}

/// The conversation a resumed run's (or a fork's) checkpoints hold; `None` for a first start
/// or a run that stopped before its first checkpoint.
async fn restore(ctx: &RunContext) -> Result<Option<Conversation>, RunError> {
    if !ctx.restores() {
        return Ok(None);
    }
    match checkpoint::restore(ctx).await? {
        Restored::Nothing => Ok(None),
        Restored::Conversation(convo) => Ok(Some(convo)),
        Restored::Plan(_) => Err(RunError::new(
            ErrorCode::InternalError,
            "the run's checkpoints hold a plan, not a conversation",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
