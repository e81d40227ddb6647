//! The Messages API request body, built from our conversation.
//!
//! Anthropic is stricter than OpenAI about conversation shape, so this module owns turning any
//! conversation orca holds into one it accepts: system messages go to the top-level `system`;
//! roles alternate, starting with `user` (same-role messages merge into one turn of several
//! blocks); tool results are `tool_result` blocks at the start of the user turn right after the
//! assistant turn that asked for them; no text block is empty. It must not drop what the model
//! needs to read: a result whose call is not in the turn before becomes text, and a call without
//! a recorded result is answered with an error result.
//!
//! A structured answer is asked for with a forced *answer tool* whose input schema is the
//! response schema; it is always offered last.

use std::collections::HashSet;

use serde::Serialize;
use serde_json::{Value, json};

use crate::llm::providers::http::ToolNames;
use crate::llm::{ChatRequest, Message, ResponseSchema, ToolCall, ToolSpec};

/// `max_tokens` is required by the Messages API; this is sent when the alias sets none.
pub(super) const DEFAULT_MAX_TOKENS: u32 = 4096;
/// The opening user turn of a conversation that would otherwise start with the assistant.
const OPENING: &str = "Continue.";
/// The result sent for a tool call the conversation holds no result for.
const NO_RESULT: &str = "No result was recorded for this tool call.";
const ANSWER_DESCRIPTION: &str = "Give your final answer by calling this tool once: its input \
    is the answer. Call any other tools you need first.";

#[derive(Debug, Serialize)]
pub(super) struct Body {
    model: String,
    max_tokens: u32,
    #[serde(skip_serializing_if = "String::is_empty")]
    system: String,
    messages: Vec<Turn>,
    stream: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ToolChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
}

/// What was offered, for reading the answer back.
#[derive(Debug)]
pub(super) struct Offer {
    pub names: ToolNames,
    /// The wire name of the answer tool, when a structured answer was asked for.
    pub answer_tool: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Role {
    User,
    Assistant,
}

#[derive(Debug, PartialEq, Serialize)]
struct Turn {
    role: Role,
    content: Vec<Block>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        content: String,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

#[derive(Debug, Serialize)]
struct Tool {
    name: String,
    description: String,
    input_schema: Value,
}

#[derive(Debug, PartialEq, Serialize)]
struct ToolChoice {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disable_parallel_tool_use: Option<bool>,
}

/// The body of `request`. A response schema still on it (modes `strict` and `json_schema`)
/// becomes the forced answer tool; the other modes moved it into the prompt already.
pub(super) fn build(request: &ChatRequest) -> (Body, Offer) {
    let mut names = ToolNames::new(&request.tools);
    let mut tools: Vec<Tool> = request.tools.iter().map(|t| tool(t, &names)).collect();
    let answer_tool = request.response_schema.as_ref().map(|schema| {
        let wire = names.reserve(&schema.name);
        tools.push(answer_tool(&wire, schema));
        wire
    });
    let tool_choice = tool_choice(
        tools.len(),
        answer_tool.as_deref(),
        request.capabilities.parallel_tool_calls,
    );
    let system = request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::System { content } if !content.trim().is_empty() => Some(content.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n\n");
    let body = Body {
        model: request.model.clone(),
        max_tokens: request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        system,
        messages: turns(&request.messages, &names),
        stream: true,
        tools,
        tool_choice,
        // Anthropic takes 0 to 1; orca's aliases allow up to 2 (OpenAI's range).
        temperature: request.temperature.map(|t| t.clamp(0.0, 1.0)),
    };
    (body, Offer { names, answer_tool })
}

fn tool(spec: &ToolSpec, names: &ToolNames) -> Tool {
    let mut input_schema = spec.parameters.clone();
    // Anthropic refuses an input schema without `"type": "object"`; ours only ever take objects.
    match &mut input_schema {
        Value::Object(map) => {
            map.entry("type").or_insert_with(|| json!("object"));
        }
        other => *other = json!({"type": "object"}),
    }
    Tool {
        name: names.wire(&spec.name).into_owned(),
        description: spec.description.clone(),
        input_schema,
    }
}

fn answer_tool(wire: &str, schema: &ResponseSchema) -> Tool {
    Tool {
        name: wire.to_owned(),
        description: ANSWER_DESCRIPTION.to_owned(),
        // Already an object schema: the provider asks for the `ObjectRoot` dialect.
        input_schema: schema.schema.clone(),
    }
}

/// The answer tool forced (by name when it is the only tool, else "some tool", so the model
/// can call the others first); parallel calls switched off when the model must not make them.
fn tool_choice(offered: usize, answer: Option<&str>, parallel: bool) -> Option<ToolChoice> {
    let disable_parallel_tool_use = (!parallel).then_some(true);
    let choice = |kind, name: Option<&str>| ToolChoice {
        kind,
        name: name.map(str::to_owned),
        disable_parallel_tool_use,
    };
    match answer {
        Some(name) if offered == 1 => Some(choice("tool", Some(name))),
        Some(_) => Some(choice("any", None)),
        None if offered > 0 && !parallel => Some(choice("auto", None)),
        None => None,
    }
}

/// Our messages (system ones aside) as alternating turns Anthropic accepts.
fn turns(messages: &[Message], names: &ToolNames) -> Vec<Turn> {
    let mut turns: Vec<Turn> = Vec::new();
    for message in messages {
        let (role, blocks) = match message {
            Message::System { .. } => continue,
            Message::User { content } => (Role::User, text(content).into_iter().collect()),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let calls = tool_calls.iter().map(|c| tool_use(c, names));
                let blocks: Vec<Block> = text(content).into_iter().chain(calls).collect();
                (Role::Assistant, blocks)
            }
            Message::Tool { call_id, content } => (
                Role::User,
                vec![Block::ToolResult {
                    tool_use_id: call_id.clone(),
                    content: content.clone(),
                    is_error: false,
                }],
            ),
        };
        push(&mut turns, role, blocks);
    }
    orphan_results_to_text(&mut turns);
    answer_every_call(&mut turns);
    if turns.first().is_none_or(|t| t.role != Role::User) {
        let opening = Turn {
            role: Role::User,
            content: text(OPENING).into_iter().collect(),
        };
        turns.insert(0, opening);
    }
    turns
}

/// A text block, unless the text is empty (Anthropic refuses empty text blocks).
fn text(content: &str) -> Option<Block> {
    (!content.trim().is_empty()).then(|| Block::Text {
        text: content.to_owned(),
    })
}

fn tool_use(call: &ToolCall, names: &ToolNames) -> Block {
    // Anthropic takes the input as an object; the model's text may be empty or invalid.
    let input = serde_json::from_str::<Value>(&call.arguments)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    Block::ToolUse {
        id: call.id.clone(),
        name: names.wire(&call.name).into_owned(),
        input,
    }
}

/// Adds `blocks` as a turn of `role`, merged into the last turn when it has the same role.
fn push(turns: &mut Vec<Turn>, role: Role, blocks: Vec<Block>) {
    if blocks.is_empty() {
        return;
    }
    match turns.last_mut() {
        Some(last) if last.role == role => {
            for block in blocks {
                add(last, block);
            }
        }
        _ => turns.push(Turn {
            role,
            content: blocks,
        }),
    }
}

/// Adds a block to a turn, tool results before any other block (Anthropic's rule).
fn add(turn: &mut Turn, block: Block) {
    if matches!(block, Block::ToolResult { .. }) {
        let at = turn
            .content
            .iter()
            .position(|b| !matches!(b, Block::ToolResult { .. }))
            .unwrap_or(turn.content.len());
        turn.content.insert(at, block);
    } else {
        turn.content.push(block);
    }
}

fn call_ids(turn: &Turn) -> Vec<String> {
    turn.content
        .iter()
        .filter_map(|b| match b {
            Block::ToolUse { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect()
}

/// A tool result whose call is not in the assistant turn right before (a conversation cut
/// short, a result answered twice) is kept as text, which Anthropic takes anywhere.
fn orphan_results_to_text(turns: &mut [Turn]) {
    for i in 0..turns.len() {
        if turns[i].role != Role::User {
            continue;
        }
        let asked: HashSet<String> = match i.checked_sub(1) {
            Some(before) => call_ids(&turns[before]).into_iter().collect(),
            None => HashSet::new(),
        };
        let mut answered = HashSet::new();
        let blocks = std::mem::take(&mut turns[i].content);
        for block in blocks {
            let block = match block {
                Block::ToolResult {
                    tool_use_id,
                    content,
                    ..
                } if !asked.contains(&tool_use_id) || !answered.insert(tool_use_id.clone()) => {
                    Block::Text {
                        text: format!("Result of tool call {tool_use_id}: {content}"),
                    }
                }
                other => other,
            };
            add(&mut turns[i], block);
        }
    }
}

/// Every tool call of an assistant turn gets a result in the user turn right after it
/// (Anthropic refuses a `tool_use` left unanswered); missing ones are answered as errors.
fn answer_every_call(turns: &mut Vec<Turn>) {
    let mut i = 0;
    while i < turns.len() {
        let asked = call_ids(&turns[i]);
        if turns[i].role == Role::Assistant && !asked.is_empty() {
            if turns.get(i + 1).is_none_or(|t| t.role != Role::User) {
                let empty = Turn {
                    role: Role::User,
                    content: Vec::new(),
                };
                turns.insert(i + 1, empty);
            }
            let next = &mut turns[i + 1];
            for id in asked {
                let answered = next.content.iter().any(
                    |b| matches!(b, Block::ToolResult { tool_use_id, .. } if *tool_use_id == id),
                );
                if !answered {
                    let result = Block::ToolResult {
                        tool_use_id: id,
                        content: NO_RESULT.to_owned(),
                        is_error: true,
                    };
                    add(next, result);
                }
            }
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::llm::Capabilities;

    fn user(text: &str) -> Message {
        Message::User {
            content: text.into(),
        }
    }

    fn assistant(text: &str, calls: &[(&str, &str)]) -> Message {
        Message::Assistant {
            content: text.into(),
            tool_calls: calls
                .iter()
                .map(|(id, args)| ToolCall {
                    id: (*id).into(),
                    name: "clock.now".into(),
                    arguments: (*args).into(),
                })
                .collect(),
        }
    }

    fn result(id: &str, content: &str) -> Message {
        Message::Tool {
            call_id: id.into(),
            content: content.into(),
        }
    }

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("the {name} tool"),
            parameters: json!({"properties": {}}),
        }
    }

    fn body(messages: Vec<Message>) -> Value {
        let mut request = ChatRequest::new("claude-test", messages);
        request.tools = vec![spec("clock.now")];
        serde_json::to_value(build(&request).0).unwrap()
    }

    /// A `tool_use` block for a call of `clock_now` with no arguments.
    fn clock_call(id: &str) -> Value {
        json!({"type": "tool_use", "id": id, "name": "clock_now", "input": {}})
    }

    /// Checks each (case, conversation, the `messages` it becomes).
    fn assert_turns(cases: Vec<(&str, Vec<Message>, Value)>) {
        for (case, messages, want) in cases {
            assert_eq!(body(messages)["messages"], want, "{case}");
        }
    }

    /// Roles alternate, starting with the user, with no empty turns.
    #[test]
    fn conversations_become_alternating_turns() {
        assert_turns(vec![
            (
                "system messages are lifted out; same-role messages merge",
                vec![
                    Message::System {
                        content: "be brief".into(),
                    },
                    user("one"),
                    user("two"),
                    Message::System {
                        content: "and kind".into(),
                    },
                ],
                json!([{"role": "user", "content": [
                    {"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}]),
            ),
            (
                "a conversation starting with the assistant gets an opening; empty turns vanish",
                vec![assistant("Hello.", &[]), user(" "), user("hi")],
                json!([
                    {"role": "user", "content": [{"type": "text", "text": OPENING}]},
                    {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
                    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                ]),
            ),
        ]);
    }

    /// Tool calls and their results pair up across turns.
    #[test]
    fn every_tool_call_is_answered_in_the_next_turn() {
        assert_turns(vec![
            (
                "no empty text block next to tool calls; invalid arguments become {}",
                vec![
                    user("time?"),
                    assistant("", &[("c1", ""), ("c2", "not json")]),
                    result("c1", "09:30"),
                    result("c2", "09:31"),
                    user("thanks"),
                ],
                json!([
                    {"role": "user", "content": [{"type": "text", "text": "time?"}]},
                    {"role": "assistant", "content": [clock_call("c1"), clock_call("c2")]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "c1", "content": "09:30"},
                        {"type": "tool_result", "tool_use_id": "c2", "content": "09:31"},
                        {"type": "text", "text": "thanks"}]},
                ]),
            ),
            (
                "results go before the text of their turn",
                vec![
                    user("time?"),
                    assistant("Let me look.", &[("c1", "{\"tz\":\"UTC\"}")]),
                    user("hurry"),
                    result("c1", "09:30"),
                ],
                json!([
                    {"role": "user", "content": [{"type": "text", "text": "time?"}]},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "Let me look."},
                        {"type": "tool_use", "id": "c1", "name": "clock_now",
                         "input": {"tz": "UTC"}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "c1", "content": "09:30"},
                        {"type": "text", "text": "hurry"}]},
                ]),
            ),
            (
                "an unanswered call gets an error result; an orphan result becomes text",
                vec![
                    user("go"),
                    assistant("", &[("c1", "{}")]),
                    result("c9", "stray"),
                ],
                json!([
                    {"role": "user", "content": [{"type": "text", "text": "go"}]},
                    {"role": "assistant", "content": [clock_call("c1")]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "c1", "content": NO_RESULT,
                         "is_error": true},
                        {"type": "text", "text": "Result of tool call c9: stray"}]},
                ]),
            ),
            (
                "a conversation ending in calls gets their results",
                vec![user("go"), assistant("", &[("c1", "{}")])],
                json!([
                    {"role": "user", "content": [{"type": "text", "text": "go"}]},
                    {"role": "assistant", "content": [clock_call("c1")]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "c1", "content": NO_RESULT,
                         "is_error": true}]},
                ]),
            ),
        ]);
    }

    #[test]
    fn system_messages_join_into_the_system_field() {
        let lifted = body(vec![
            Message::System {
                content: "be brief".into(),
            },
            user("x"),
            Message::System {
                content: "and kind".into(),
            },
        ]);
        assert_eq!(lifted["system"], "be brief\n\nand kind");
    }

    #[test]
    fn the_body_has_the_messages_api_shape() {
        let mut request = ChatRequest::new("claude-test", vec![user("hi")]);
        request.tools = vec![spec("clock.now")];
        request.temperature = Some(1.5);
        let body = serde_json::to_value(build(&request).0).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "claude-test",
                "max_tokens": DEFAULT_MAX_TOKENS,
                "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                "stream": true,
                "tools": [{"name": "clock_now", "description": "the clock.now tool",
                           "input_schema": {"type": "object", "properties": {}}}],
                "temperature": 1.0,
            })
        );
    }

    #[test]
    fn a_structured_answer_is_a_forced_tool_offered_last() {
        let schema = json!({"type": "object", "properties": {"plan": {"type": "string"}}});
        let with = |tools: Vec<ToolSpec>, name: &str, parallel: bool| {
            let mut request = ChatRequest::new("claude-test", vec![user("plan")]);
            request.tools = tools;
            request.response_schema = Some(ResponseSchema::new(name, schema.clone()));
            request.capabilities = Capabilities {
                parallel_tool_calls: parallel,
                ..Capabilities::default()
            };
            let (body, offer) = build(&request);
            (serde_json::to_value(body).unwrap(), offer.answer_tool)
        };

        let (body, answer) = with(vec![], "plan.v1", true);
        assert_eq!(answer.as_deref(), Some("plan_v1"));
        assert_eq!(
            body["tool_choice"],
            json!({"type": "tool", "name": "plan_v1"})
        );
        assert_eq!(body["tools"][0]["input_schema"], schema);
        assert_eq!(body["tools"][0]["description"], ANSWER_DESCRIPTION);

        // A tool with the same wire name keeps it; the answer tool gets another.
        let (body, answer) = with(vec![spec("plan.v1")], "plan.v1", false);
        assert_eq!(answer.as_deref(), Some("plan_v1_2"));
        assert_eq!(body["tools"][1]["name"], "plan_v1_2");
        assert_eq!(
            body["tool_choice"],
            json!({"type": "any", "disable_parallel_tool_use": true})
        );
    }

    #[test]
    fn tool_choice_follows_the_offer() {
        let cases = [
            (0, None, true, None),
            (0, None, false, None),
            (2, None, true, None),
            (
                2,
                None,
                false,
                Some(json!({"type": "auto", "disable_parallel_tool_use": true})),
            ),
            (
                1,
                Some("a"),
                true,
                Some(json!({"type": "tool", "name": "a"})),
            ),
            (3, Some("a"), true, Some(json!({"type": "any"}))),
        ];
        for (offered, answer, parallel, want) in cases {
            let got = tool_choice(offered, answer, parallel).map(|c| json!(c));
            assert_eq!(got, want, "{offered} {answer:?} {parallel}");
        }
    }
}
