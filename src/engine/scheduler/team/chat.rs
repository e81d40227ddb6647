//! `group_chat`: participants take turns on one shared transcript. Each round a selector
//! picks the speaker (`round_robin`; `random`, seeded so a run repeats its order; or `llm`,
//! the model naming the next speaker, a wrong name sent back up to `retries` times before the
//! `fallback` selector decides), a `speaker` event announces it, and the speaker takes a turn
//! seeing the transcript (its own messages as its answers, the others' as user messages
//! prefixed `[name]: `). After each round the termination is checked against the rounds, the
//! last answer and the tokens the chat's model calls used; `max_rounds` always applies.
//!
//! A selection is attempt `select-<r>` and a turn attempt `<agent>.<r>` at the step's key;
//! both are recorded as finished children, so a resumed chat goes on at the next round
//! without asking the selector or any speaker again.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::domain::attempt_io::{
    ChatOutput, ChatSelection, ChatSelectionInput, ChatTurnInput, Envelope, Said,
};
use crate::domain::event::{ErrorData, SpeakerData};
use crate::domain::{ErrorCode, RunError, Segment, StepKind, StepPath};
use crate::llm::{Message, ResponseSchema};
use crate::plan::team::{ChatState, GroupChatStep, SelectorKind};

use super::turn::{Plain, take_turn};
use super::{Part, hold_part, open_part};
use crate::engine::calls::function_call::{self, FunctionCall};
use crate::engine::calls::model::TextKind;
use crate::engine::runtime::attempts::HeldEnd;
use crate::engine::runtime::context::RunContext;
use crate::engine::runtime::sink::EventSink;
use crate::engine::scheduler::frame::Frame;

/// The name the `llm` selector's structured output goes by (the offline model knows it).
pub const SPEAKER_SCHEMA: &str = "speaker_choice";

/// What the `llm` selector is told.
const SELECTOR_SYSTEM: &str = "You moderate a group chat. Read the conversation and choose \
who speaks next: the participant whose contribution is needed now. Answer only with JSON \
{\"speaker\": \"<name>\"}.";

/// A finished selection or turn, as checkpointed.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Done {
    agent: String,
    text: Option<String>,
    /// Tokens its model calls used (prompt and completion).
    tokens: u64,
}

/// What every part of one chat reads.
struct Chat<'c, 'f> {
    frame: &'c Frame<'f>,
    /// The step's key: its parts sit below it.
    key: &'c StepPath,
    step: &'c GroupChatStep,
    prompt: &'c str,
}

/// Runs a group chat at `key` on `prompt` until its termination holds.
pub(crate) async fn run(
    frame: &Frame<'_>,
    key: &StepPath,
    step: &GroupChatStep,
    prompt: String,
    sink: &mut EventSink,
) -> Result<Value, RunError> {
    let chat = Chat {
        frame,
        key,
        step,
        prompt: &prompt,
    };
    let mut said: Vec<Said> = Vec::new();
    let mut tokens = 0u64;
    let mut round = 0;
    loop {
        round += 1;
        // The `speaker` event goes out live, as the choice is recorded: once, even across a
        // restart (a replayed choice was announced before it).
        let select = key.join(Segment::Selection(round));
        let (chosen, held) = once(frame, &select, async {
            let (chosen, held) = chat.select(round, &said, sink).await?;
            let data = SpeakerData {
                agent: chosen.agent.clone(),
                round,
            };
            frame.ctx.emit(Some(key), data).await;
            Ok((chosen, held))
        })
        .await?;
        HeldEnd::close_all(held, frame.ctx, sink).await;
        let turn_key = key.turn(&chosen.agent, round);
        let (spoken, held) = once(frame, &turn_key, async {
            chat.speak(&chosen.agent, round, &said, sink).await
        })
        .await?;
        HeldEnd::close_all(held, frame.ctx, sink).await;
        tokens += chosen.tokens + spoken.tokens;
        let text = spoken.text.unwrap_or_default();
        let state = ChatState {
            rounds: round,
            last_text: &text,
            tokens,
        };
        let ended = step.termination.as_ref().is_some_and(|t| t.holds(&state));
        said.push(Said {
            agent: spoken.agent,
            round,
            text,
        });
        if ended || round >= step.max_rounds {
            break;
        }
    }
    let last = said.last().map(|s| s.text.clone()).unwrap_or_default();
    let output = ChatOutput {
        transcript: said,
        rounds: round,
        last,
    };
    Ok(output.to_json())
}

/// The record at `record_key` when a run before a restart finished it, else `work`'s result,
/// recorded (see [`crate::engine::scheduler::progress::Children::once`]), with the attempt `work` holds
/// open for the caller to close now that the record is checkpointed.
async fn once(
    frame: &Frame<'_>,
    record_key: &StepPath,
    work: impl std::future::Future<Output = Result<(Done, Option<HeldEnd>), RunError>>,
) -> Result<(Done, Option<HeldEnd>), RunError> {
    let (done, held) = frame.children.once(frame.ctx, record_key, work).await?;
    Ok((done, held.flatten()))
}

/// The tokens the run's model calls used so far.
fn tokens_used(ctx: &RunContext) -> u64 {
    let usage = ctx.usage();
    usage.prompt_tokens + usage.completion_tokens
}

impl Chat<'_, '_> {
    /// Round `round`'s speaker.
    async fn select(
        &self,
        round: u32,
        said: &[Said],
        sink: &mut EventSink,
    ) -> Result<(Done, Option<HeldEnd>), RunError> {
        let before = tokens_used(self.frame.ctx);
        let (agent, held) = match self.step.selector.kind {
            SelectorKind::Llm => self.ask_selector(round, said, sink).await?,
            kind => (self.by_rule(kind, round), None),
        };
        let done = Done {
            agent,
            text: None,
            tokens: tokens_used(self.frame.ctx).saturating_sub(before),
        };
        Ok((done, held))
    }

    /// The speaker a rule picks: round robin, or the seeded random choice (a pure function of
    /// the seed and the round, so a resumed chat picks the same).
    fn by_rule(&self, kind: SelectorKind, round: u32) -> String {
        let participants = &self.step.participants;
        let n = participants.len() as u64;
        let i = match kind {
            SelectorKind::Random => {
                let seed = self
                    .step
                    .selector
                    .seed
                    .unwrap_or_else(|| fnv1a(self.frame.ctx.run_id.to_string().as_bytes()));
                splitmix64(seed.wrapping_add(u64::from(round))) % n
            }
            SelectorKind::RoundRobin | SelectorKind::Llm => u64::from(round - 1) % n,
        };
        participants[i as usize].clone()
    }

    /// Asks the `llm` selector, as attempt `select-<round>` (held open until the choice is
    /// recorded); a wrong answer is sent back up to `retries` times, then the fallback rule
    /// decides (an `error` event says so).
    async fn ask_selector(
        &self,
        round: u32,
        said: &[Said],
        sink: &mut EventSink,
    ) -> Result<(String, Option<HeldEnd>), RunError> {
        let event_key = self.key.join(Segment::Selection(round));
        let schema = json!({
            "type": "object", "additionalProperties": false, "required": ["speaker"],
            "properties": { "speaker": { "type": "string", "enum": self.step.participants } }
        });
        let call = FunctionCall {
            step: &event_key,
            name: "speaker_selector",
            plan_version: self.frame.plan_version,
            model: self.step.selector.model.as_deref(),
            schema: Some(ResponseSchema::new(SPEAKER_SCHEMA, schema)),
            text: TextKind::Quiet,
            input: Some(
                ChatSelectionInput {
                    round,
                    participants: self.step.participants.clone(),
                }
                .into(),
            ),
        };
        let mut open = function_call::open(self.frame.ctx, call, sink).await?;
        let answered = self.selector_rounds(&mut open, said).await;
        let chosen = match &answered {
            Ok(Ok(name)) => Ok(ChatSelection::named(name).to_json()),
            Ok(Err(problem)) => Ok(ChatSelection::unnamed(problem).to_json()),
            Err(e) => Err(e.clone()),
        };
        let held = open.held(self.frame.ctx, &chosen);
        let (answered, held) = held.kept_with(answered, self.frame.ctx, sink).await?;
        let problem = match answered {
            Ok(name) => return Ok((name, Some(held))),
            Err(problem) => problem,
        };
        let fallback = self.by_rule(self.step.selector.fallback, round);
        let error = RunError::new(
            ErrorCode::InvalidLlmOutput,
            format!(
                "the speaker selector named no participant in {} tries ({problem}); the fallback chose `{fallback}`",
                self.step.selector.retries + 1
            ),
        );
        let data = ErrorData {
            error,
            step_id: Some(event_key.leaf().to_owned()),
        };
        sink.emit(self.frame.ctx, Some(&event_key), data).await;
        Ok((fallback, Some(held)))
    }

    /// The selector's model calls: a participant's name, or what was wrong with the last
    /// answer.
    async fn selector_rounds(
        &self,
        open: &mut function_call::Open,
        said: &[Said],
    ) -> Result<Result<String, String>, RunError> {
        let step = self.step;
        let mut messages = vec![
            Message::System {
                content: SELECTOR_SYSTEM.into(),
            },
            Message::User {
                content: self.selection_prompt(said),
            },
        ];
        let mut problem = String::new();
        for _ in 0..=step.selector.retries {
            let reply = open.ask(self.frame.ctx, messages.clone()).await?;
            match named(&reply.text, &step.participants) {
                Ok(name) => return Ok(Ok(name)),
                Err(p) => problem = p,
            }
            messages.push(Message::Assistant {
                content: reply.text,
                tool_calls: Vec::new(),
            });
            messages.push(Message::User {
                content: format!(
                    "{problem}. Answer again with only {{\"speaker\": \"<name>\"}}, the name one of: {}.",
                    step.participants.join(", ")
                ),
            });
        }
        Ok(Err(problem))
    }

    /// What the `llm` selector reads: the participants, the conversation and the last speaker.
    fn selection_prompt(&self, said: &[Said]) -> String {
        let mut out = String::from("Participants:\n");
        for p in &self.step.participants {
            let about = self
                .frame
                .team
                .agent(p)
                .and_then(|a| a.description.clone())
                .unwrap_or_default();
            out.push_str(&format!("- {p}: {about}\n"));
        }
        out.push_str(&format!("\nThe conversation:\n[user]: {}\n", self.prompt));
        for s in said {
            out.push_str(&format!("[{}]: {}\n", s.agent, s.text));
        }
        if let Some(last) = said.last() {
            out.push_str(&format!("\nLast speaker: `{}`\n", last.agent));
        }
        out.push_str("\nWho speaks next?");
        out
    }

    /// `speaker`'s turn in round `round`, as attempt `<speaker>.<round>` (held open until the
    /// turn is recorded).
    async fn speak(
        &self,
        speaker: &str,
        round: u32,
        said: &[Said],
        sink: &mut EventSink,
    ) -> Result<(Done, Option<HeldEnd>), RunError> {
        let frame = self.frame;
        let Some(agent) = frame.team.agent(speaker) else {
            return Err(RunError::new(
                ErrorCode::InvalidStep,
                format!("the plan has no agent `{speaker}`"),
            ));
        };
        let mut agent = (**agent).clone();
        agent.instructions =
            chat_instructions(&agent.instructions, speaker, &self.step.participants);
        let messages = seen_by(speaker, self.prompt, said);
        let path = self.key.turn(speaker, round);
        let input = ChatTurnInput {
            agent: speaker.to_owned(),
            round,
            messages: messages.clone(),
        };
        let part = Part {
            at: &path,
            name: speaker,
            kind: StepKind::Agent,
        };
        let attempt = open_part(frame, part, input.into(), sink).await?;
        let before = tokens_used(frame.ctx);
        let end = take_turn(frame, &agent, &path, messages, &mut Plain, sink).await;
        let shown = end.as_ref().map(|e| e.value.clone()).map_err(Clone::clone);
        let held = hold_part(frame, attempt, &shown);
        let (end, held) = held.kept_with(end, frame.ctx, sink).await?;
        let done = Done {
            agent: speaker.to_owned(),
            text: Some(end.text),
            tokens: tokens_used(frame.ctx).saturating_sub(before),
        };
        Ok((done, Some(held)))
    }
}

/// splitmix64's output function: a well-mixed 64-bit value of `x`.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a: a stable hash (the run id as a default seed).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The participant a selector's answer names, or what is wrong with it.
fn named(text: &str, participants: &[String]) -> Result<String, String> {
    let value: Value =
        serde_json::from_str(text.trim()).map_err(|e| format!("the answer is not JSON ({e})"))?;
    let Some(name) = value.get("speaker").and_then(Value::as_str) else {
        return Err("the answer has no `speaker` string".into());
    };
    if participants.iter().any(|p| p == name) {
        Ok(name.to_owned())
    } else {
        Err(format!("`{name}` is not a participant"))
    }
}

/// An agent's instructions with a note saying it is in a group chat, with whom, and how to
/// read it.
fn chat_instructions(instructions: &str, speaker: &str, participants: &[String]) -> String {
    let others: Vec<&str> = participants
        .iter()
        .map(String::as_str)
        .filter(|p| *p != speaker)
        .collect();
    let with = if others.is_empty() {
        String::new()
    } else {
        format!(" with {}", others.join(", "))
    };
    let note = format!(
        "You are `{speaker}`, one of the participants of a group chat{with}. The others' \
         messages begin with their name in brackets, like `[name]: ...`. Say your part briefly."
    );
    if instructions.is_empty() {
        note
    } else {
        format!("{instructions}\n\n{note}")
    }
}

/// The transcript as `speaker` sees it: the prompt, its own answers as its messages, the
/// others' as user messages with their names.
pub(crate) fn seen_by(speaker: &str, prompt: &str, said: &[Said]) -> Vec<Message> {
    let mut out = vec![Message::User {
        content: prompt.to_owned(),
    }];
    for s in said {
        out.push(if s.agent == speaker {
            Message::Assistant {
                content: s.text.clone(),
                tool_calls: Vec::new(),
            }
        } else {
            Message::User {
                content: format!("[{}]: {}", s.agent, s.text),
            }
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_answers_are_checked() {
        let p = vec!["a".to_owned(), "b".to_owned()];
        assert_eq!(named(r#"{"speaker":"b"}"#, &p), Ok("b".into()));
        assert!(
            named(r#"{"speaker":"zed"}"#, &p)
                .unwrap_err()
                .contains("zed")
        );
        assert!(named("b", &p).unwrap_err().contains("not JSON"));
    }

    #[test]
    fn the_random_rule_is_a_function_of_seed_and_round() {
        let picks: Vec<u64> = (1..=8).map(|r| splitmix64(7 + r) % 3).collect();
        let again: Vec<u64> = (1..=8).map(|r| splitmix64(7 + r) % 3).collect();
        assert_eq!(picks, again);
        assert!(picks.iter().any(|&i| i != picks[0]), "{picks:?}");
        assert_ne!(fnv1a(b"run-1"), fnv1a(b"run-2"));
    }

    #[test]
    fn speakers_see_the_others_by_name() {
        let said = vec![
            Said {
                agent: "a".into(),
                round: 1,
                text: "one".into(),
            },
            Said {
                agent: "b".into(),
                round: 2,
                text: "two".into(),
            },
        ];
        let seen = seen_by("a", "topic", &said);
        assert_eq!(seen.len(), 3);
        assert!(matches!(&seen[1], Message::Assistant { content, .. } if content == "one"));
        assert!(matches!(&seen[2], Message::User { content } if content == "[b]: two"));
    }
}
