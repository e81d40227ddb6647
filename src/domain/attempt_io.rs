//! What a step attempt shows of its work: the `input` (and the outputs orca makes up itself)
//! that `GET /v1/runs/{id}/steps` returns, one type per step kind and per part of a team step.
//!
//! Each type is an [`Envelope`], made JSON in one place ([`Envelope::to_json`]); an attempt's
//! input can only be made from an [`InputEnvelope`] ([`AttemptInput`]), so no attempt stores
//! an input written by hand. Their JSON is public (the steps endpoint, `docs/`, a plan's
//! `{{steps.<id>.output}}`): renaming a field, or dropping a `null`, is a contract change; the
//! tests below pin every shape. What users' work produces (a tool's result, a model's answer,
//! the arguments a plan resolved) stays [`Value`] inside these envelopes.
//!
//! A model call that a fallback alias answered shows that alias as `answered_by` beside
//! whatever its input is ([`AttemptInput::answered_by`]), or alone ([`AnsweredBy`]).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ids::StepId;

/// One of this module's types: how it becomes the JSON an attempt stores, and is read back.
pub trait Envelope: Serialize + Sized {
    /// The JSON the attempt stores and shows: the one place an envelope becomes a [`Value`].
    fn to_json(&self) -> Value {
        // Plain structs of strings, numbers and JSON values: serialising cannot fail.
        serde_json::to_value(self).expect("an attempt envelope serialises")
    }

    /// The envelope `value` holds, if it holds one of this type.
    fn read(value: &Value) -> Option<Self>
    where
        Self: DeserializeOwned,
    {
        Self::deserialize(value).ok()
    }
}

/// An envelope that is an attempt's `input` (what [`AttemptInput`] is made from).
pub trait InputEnvelope: Envelope {}

/// An attempt's `input` as stored: the JSON of one [`InputEnvelope`].
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptInput(Value);

impl<T: InputEnvelope> From<T> for AttemptInput {
    fn from(input: T) -> AttemptInput {
        AttemptInput(input.to_json())
    }
}

impl AttemptInput {
    /// This input of a model call with the fallback alias that answered it, `by`, as its
    /// `answered_by` member (a call without an input shows [`AnsweredBy`]).
    pub fn answered_by(mut self, by: &str) -> AttemptInput {
        // Every input envelope is a struct, so its JSON is an object.
        if let Value::Object(members) = &mut self.0 {
            members.insert("answered_by".into(), Value::String(by.to_owned()));
        }
        self
    }

    /// The JSON the attempt stores.
    pub fn into_value(self) -> Value {
        self.0
    }
}

macro_rules! envelopes {
    (inputs: $($input:ty),* ; outputs: $($output:ty),* $(,)?) => {
        $(impl Envelope for $input {} impl InputEnvelope for $input {})*
        $(impl Envelope for $output {})*
    };
}

envelopes! {
    inputs: LlmInput, FunctionInput, ToolInput, UserInputInput, AgentInput, WorkflowInput,
        HandoffInput, GroupChatInput, ChatSelectionInput, ModelRoundInput, RepairInput,
        SessionSummaryInput, HandoffSummaryInput, AnsweredBy;
    outputs: BranchOutput, WaitOutput, ChatSelection, ChatOutput, HandoffTurnOutput,
        ModelRoundOutput, PlanningOutput,
}

impl<M: Serialize> Envelope for ChatTurnInput<M> {}
impl<M: Serialize> InputEnvelope for ChatTurnInput<M> {}
impl<M: Serialize> Envelope for HandoffTurnInput<M> {}
impl<M: Serialize> InputEnvelope for HandoffTurnInput<M> {}

/// An `llm` step: its prompt and system prompt as resolved, and the model alias it named.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmInput {
    pub prompt: String,
    /// `null` when the step has none.
    pub system: Option<String>,
    /// `null`: the run's model.
    pub model: Option<String>,
}

/// An `llm` step calling a configured function, with the arguments it resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionInput {
    pub function: String,
    pub arguments: Value,
}

/// A `tool` step, or a tool call a model asked for (`arguments` as the model wrote them: a
/// string when they are not JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInput {
    pub tool: String,
    pub arguments: Value,
}

/// A `user_input` step: the question, as resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserInputInput {
    pub prompt: String,
}

/// An `agent` step: the agent, how it was asked, whose exchanges came first, and its spokes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentInput {
    pub agent: String,
    pub prompt: String,
    pub history: Vec<StepId>,
    pub spokes: Vec<String>,
    /// What its `audit_log` middleware recorded of the turn; absent without one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audit: Vec<AuditEntry>,
}

/// One `audit_log` record of an agent's turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub agent: String,
    /// The messages the agent received.
    pub input_messages: usize,
    pub answer_chars: usize,
    /// The tool calls the turn answered.
    pub tool_calls: usize,
    /// Whether the answer came from the model (not from a middleware, e.g. the cache).
    pub from_model: bool,
}

/// A `workflow` step: the workflow and the input it was given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowInput {
    pub workflow: String,
    pub input: Value,
}

/// A `handoff` step as it starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandoffInput {
    pub start: String,
    pub prompt: String,
    pub max_transitions: u32,
    pub on_no_handoff: OnNoHandoff,
}

/// What a `handoff` step does when an agent answers without handing off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnNoHandoff {
    End,
    AskHuman,
}

/// A `group_chat` step as it starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupChatInput {
    pub participants: Vec<String>,
    pub prompt: String,
    pub max_rounds: u32,
}

/// A group chat's speaker turn (`<agent>.<round>`): what the speaker saw. `M` is a
/// conversation's message (`llm::Message` in the engine, a floor this one cannot name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatTurnInput<M> {
    pub agent: String,
    pub round: u32,
    pub messages: Vec<M>,
}

/// A handoff step's turn (`<agent>.<n>`): what the agent received, and how it came by it
/// (`request`, the handoff's context policy, or `human`). `M` as in [`ChatTurnInput`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandoffTurnInput<M> {
    pub agent: String,
    pub context: String,
    pub messages: Vec<M>,
}

/// A group chat's `llm` speaker selection (`select-<round>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatSelectionInput {
    pub round: u32,
    pub participants: Vec<String>,
}

/// One model round of a conversation (`llm-<round>`): the alias asked (`default`: the run's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRoundInput {
    pub model: String,
    pub round: u32,
}

/// A planning or re-planning call: 0 for the first, then one per repair asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepairInput {
    pub repair: u32,
}

/// A session summary: how many turns it folds in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSummaryInput {
    pub turns: usize,
}

/// A handoff's summary of the transcript so far; also the summarizer function's `input`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandoffSummaryInput {
    pub transcript: String,
}

/// A model call with no input of its own, answered by the fallback alias `answered_by`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnsweredBy {
    pub answered_by: String,
}

/// The `prompt` of any step that has one (`llm`, `user_input`, `agent`, `handoff`,
/// `group_chat`): how a later agent step reads how an earlier step was asked.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Prompted {
    pub prompt: String,
}

impl Prompted {
    /// The prompt the stored `input` of a step carries, if it carries one.
    pub fn of(input: &Value) -> Option<String> {
        Prompted::deserialize(input).ok().map(|p| p.prompt)
    }
}

/// A `branch` step's output: the condition's value and the arm it took.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BranchOutput {
    pub result: bool,
    pub taken: Arm,
}

impl BranchOutput {
    pub fn new(result: bool) -> BranchOutput {
        let taken = if result { Arm::Then } else { Arm::Else };
        BranchOutput { result, taken }
    }
}

/// A branch's arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arm {
    Then,
    Else,
}

/// A `wait` step's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitOutput {
    pub waited_ms: u64,
}

/// The output of a group chat's `llm` speaker selection: the participant named, or `null` and
/// what was wrong with the last answer (the fallback rule then chose).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatSelection {
    pub speaker: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl ChatSelection {
    pub fn named(speaker: impl Into<String>) -> ChatSelection {
        ChatSelection {
            speaker: Some(speaker.into()),
            problem: None,
        }
    }

    pub fn unnamed(problem: impl Into<String>) -> ChatSelection {
        ChatSelection {
            speaker: None,
            problem: Some(problem.into()),
        }
    }
}

/// A `group_chat` step's output: every answer in order, the rounds held, and the last answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatOutput {
    pub transcript: Vec<Said>,
    pub rounds: u32,
    pub last: String,
}

/// One answer of a group chat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Said {
    pub agent: String,
    pub round: u32,
    pub text: String,
}

/// A handoff step's turn's output: what the agent said, and the handoff it made (`null`:
/// none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandoffTurnOutput {
    pub text: String,
    pub handoff: Option<HandoffTo>,
}

/// A handoff: to whom, and why (`null` when the agent gave no reason).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandoffTo {
    pub to: String,
    pub reason: Option<String>,
}

/// A conversation's model round's output: the reply's text and how many tools it called.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRoundOutput {
    pub text: String,
    pub tool_calls: usize,
}

/// A planning or re-planning call's output: the length of the answer (the plan itself is in
/// the `plan` event).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanningOutput {
    pub characters: usize,
}

#[cfg(test)]
mod tests {
    use std::fmt::Debug;

    use serde_json::json;

    use super::*;

    /// `envelope` serialises to exactly `today` (the JSON the attempt showed before the types
    /// existed, written as the code wrote it then) and reads back as itself.
    #[track_caller]
    fn check<T: Envelope + DeserializeOwned + PartialEq + Debug>(envelope: T, today: Value) {
        let json = envelope.to_json();
        assert_eq!(json.to_string(), today.to_string());
        assert_eq!(T::read(&json).as_ref(), Some(&envelope));
    }

    #[test]
    fn every_envelope_has_the_json_it_had_and_reads_back() {
        let (prompt, system, model): (&str, Option<&str>, Option<&str>) = ("hi", None, None);
        let llm = LlmInput {
            prompt: prompt.into(),
            system: None,
            model: None,
        };
        check(
            llm,
            json!({ "prompt": prompt, "system": system, "model": model }),
        );
        let llm = LlmInput {
            prompt: "hi".into(),
            system: Some("be brief".into()),
            model: Some("fast".into()),
        };
        check(
            llm,
            json!({ "prompt": "hi", "system": "be brief", "model": "fast" }),
        );
        let function = FunctionInput {
            function: "classify".into(),
            arguments: json!({ "text": "x" }),
        };
        check(
            function,
            json!({ "function": "classify", "arguments": { "text": "x" } }),
        );
        let tool = ToolInput {
            tool: "calc".into(),
            arguments: json!("not json"),
        };
        check(tool, json!({ "tool": "calc", "arguments": "not json" }));
        check(
            UserInputInput {
                prompt: "ok?".into(),
            },
            json!({ "prompt": "ok?" }),
        );
        check(
            WorkflowInput {
                workflow: "w".into(),
                input: json!([1]),
            },
            json!({ "workflow": "w", "input": [1] }),
        );
        check(RepairInput { repair: 2 }, json!({ "repair": 2 }));
        check(SessionSummaryInput { turns: 3 }, json!({ "turns": 3 }));
        check(
            HandoffSummaryInput {
                transcript: "t".into(),
            },
            json!({ "transcript": "t" }),
        );
        check(
            AnsweredBy {
                answered_by: "local".into(),
            },
            json!({ "answered_by": "local" }),
        );
    }

    #[test]
    fn team_envelopes_have_the_json_they_had_and_read_back() {
        let agent = AgentInput {
            agent: "writer".into(),
            prompt: "go".into(),
            history: vec![StepId::new("research").unwrap()],
            spokes: vec![],
            audit: vec![],
        };
        let today =
            json!({ "agent": "writer", "prompt": "go", "history": ["research"], "spokes": [] });
        check(agent.clone(), today);
        let entry = AuditEntry {
            agent: "writer".into(),
            input_messages: 2,
            answer_chars: 5,
            tool_calls: 0,
            from_model: true,
        };
        let audited = AgentInput {
            audit: vec![entry],
            ..agent
        };
        let today = json!({ "agent": "writer", "prompt": "go", "history": ["research"],
            "spokes": [], "audit": [{ "agent": "writer", "input_messages": 2, "answer_chars": 5,
                "tool_calls": 0, "from_model": true }] });
        check(audited, today);
        let handoff = HandoffInput {
            start: "triage".into(),
            prompt: "help".into(),
            max_transitions: 10,
            on_no_handoff: OnNoHandoff::AskHuman,
        };
        let today = json!({ "start": "triage", "prompt": "help", "max_transitions": 10,
            "on_no_handoff": "ask_human" });
        check(handoff, today);
        let chat = GroupChatInput {
            participants: vec!["a".into(), "b".into()],
            prompt: "topic".into(),
            max_rounds: 4,
        };
        let today = json!({ "participants": ["a", "b"], "prompt": "topic", "max_rounds": 4 });
        check(chat, today);
        let messages = vec![json!({ "role": "user", "content": "topic" })];
        let turn = ChatTurnInput {
            agent: "a".into(),
            round: 1,
            messages: messages.clone(),
        };
        check(
            turn,
            json!({ "agent": "a", "round": 1, "messages": messages }),
        );
        let turn = HandoffTurnInput {
            agent: "billing".into(),
            context: "request".into(),
            messages: messages.clone(),
        };
        let today = json!({ "agent": "billing", "context": "request", "messages": messages });
        check(turn, today);
        let selection = ChatSelectionInput {
            round: 2,
            participants: vec!["a".into()],
        };
        check(selection, json!({ "round": 2, "participants": ["a"] }));
        let round = ModelRoundInput {
            model: "default".into(),
            round: 1,
        };
        check(round, json!({ "model": "default", "round": 1 }));
    }

    #[test]
    fn outputs_have_the_json_they_had_and_read_back() {
        for taken in [true, false] {
            let today = json!({ "result": taken, "taken": if taken { "then" } else { "else" } });
            check(BranchOutput::new(taken), today);
        }
        check(WaitOutput { waited_ms: 5 }, json!({ "waited_ms": 5 }));
        check(ChatSelection::named("a"), json!({ "speaker": "a" }));
        check(
            ChatSelection::unnamed("no name"),
            json!({ "speaker": null, "problem": "no name" }),
        );
        let said = vec![Said {
            agent: "a".into(),
            round: 1,
            text: "one".into(),
        }];
        let chat = ChatOutput {
            transcript: said,
            rounds: 1,
            last: "one".into(),
        };
        let today = json!({ "transcript": [{ "agent": "a", "round": 1, "text": "one" }],
            "rounds": 1, "last": "one" });
        check(chat, today);
        let answered = HandoffTurnOutput {
            text: "done".into(),
            handoff: None,
        };
        check(answered, json!({ "text": "done", "handoff": null }));
        let handed = HandoffTurnOutput {
            text: "".into(),
            handoff: Some(HandoffTo {
                to: "billing".into(),
                reason: None,
            }),
        };
        check(
            handed,
            json!({ "text": "", "handoff": { "to": "billing", "reason": null } }),
        );
        let round = ModelRoundOutput {
            text: "hi".into(),
            tool_calls: 2,
        };
        check(round, json!({ "text": "hi", "tool_calls": 2 }));
        check(PlanningOutput { characters: 9 }, json!({ "characters": 9 }));
    }

    #[test]
    fn a_fallback_that_answered_shows_beside_the_input() {
        let asked = AttemptInput::from(ModelRoundInput {
            model: "fast".into(),
            round: 1,
        });
        assert_eq!(
            asked.answered_by("local").into_value(),
            json!({ "model": "fast", "round": 1, "answered_by": "local" })
        );
    }

    #[test]
    fn a_prompt_is_read_from_any_prompted_input() {
        let llm = LlmInput {
            prompt: "asked".into(),
            system: None,
            model: None,
        };
        assert_eq!(Prompted::of(&llm.to_json()), Some("asked".into()));
        assert_eq!(Prompted::of(&json!({ "tool": "calc" })), None);
        assert_eq!(Prompted::of(&json!("text")), None);
    }
}
