//! What the offline model does in a team of agents, deterministically: it hands off (calls an
//! offered `transfer_to_<agent>` tool) when the request names that agent and no handoff
//! happened yet in the conversation, says a short line naming itself in a group chat, and
//! answers the group chat's `llm` speaker selector with the participant after the last
//! speaker.

use serde_json::{Value, json};

use crate::llm::{Message, ToolCall, ToolSpec};

/// The prefix of the tools that hand a conversation over (the engine's handoff step).
const TRANSFER: &str = "transfer_to_";
/// What the engine's note to a handoff's target says (a conversation with one was handed off).
const HANDED: &str = "handed the conversation to you";
/// How the engine's group chat note names the speaker.
const CHAT_NOTE: (&str, &str) = ("You are `", "`, one of the participants of a group chat");

/// A transfer call when an offered transfer tool's agent is named in `user_text` and nobody
/// handed off yet; `id` is the call's id.
pub fn transfer(
    messages: &[Message],
    user_text: &str,
    tools: &[ToolSpec],
    id: String,
) -> Option<ToolCall> {
    let handed = messages
        .iter()
        .any(|m| matches!(m, Message::User { content } if content.contains(HANDED)));
    if handed {
        return None;
    }
    let lower = user_text.to_lowercase();
    let tool = tools.iter().find(|t| {
        t.name
            .strip_prefix(TRANSFER)
            .is_some_and(|agent| !agent.is_empty() && lower.contains(&agent.to_lowercase()))
    })?;
    let agent = &tool.name[TRANSFER.len()..];
    Some(ToolCall {
        id,
        name: tool.name.clone(),
        arguments: json!({ "reason": format!("The request is for {agent}.") }).to_string(),
    })
}

/// The request a handoff's target should answer when `user_text` is the engine's handoff
/// note: the first user message that is not a note; `user_text` itself otherwise.
pub fn request_behind<'a>(messages: &'a [Message], user_text: &'a str) -> &'a str {
    if !user_text.contains(HANDED) {
        return user_text;
    }
    messages
        .iter()
        .find_map(|m| match m {
            Message::User { content } if !content.contains(HANDED) => Some(content.as_str()),
            _ => None,
        })
        .unwrap_or(user_text)
}

/// A group chat participant's line, when the system prompt says it is in one.
pub fn chat_line(system: Option<&str>, messages: &[Message], topic: &str) -> Option<String> {
    let system = system?;
    let end = system.find(CHAT_NOTE.1)?;
    let start = system[..end].rfind(CHAT_NOTE.0)? + CHAT_NOTE.0.len();
    let name = &system[start..end];
    let turn = 1 + messages
        .iter()
        .filter(|m| matches!(m, Message::Assistant { .. }))
        .count();
    let topic: String = topic.trim().chars().take(60).collect();
    let mut line = format!("{name} (turn {turn}): my take on \"{topic}\".");
    // A participant told to say a word when the matter is settled (`say DONE when …`) says it
    // once two lines were spoken before its own: the chat's keyword termination then holds.
    let spoken = messages
        .iter()
        .filter(|m| !matches!(m, Message::System { .. }))
        .count()
        .saturating_sub(1);
    if let Some(word) = closing_word(system)
        && spoken >= 2
    {
        line.push_str(&format!(" Settled: {word}"));
    }
    Some(line)
}

/// The word an agent's instructions ask it to say to close a discussion: `say WORD` with WORD
/// in capitals (at least two letters).
fn closing_word(system: &str) -> Option<&str> {
    system.split("say ").skip(1).find_map(|rest| {
        let word = rest.split(|c: char| !c.is_ascii_alphanumeric()).next()?;
        (word.len() >= 2 && word.chars().all(|c| c.is_ascii_uppercase())).then_some(word)
    })
}

/// The speaker selector's answer: the participant after the one `prompt` names as the last
/// speaker (the first when none spoke yet).
pub fn speaker(schema: &Value, prompt: &str) -> Value {
    let names: Vec<&str> = schema
        .pointer("/properties/speaker/enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let last = prompt
        .split("Last speaker: `")
        .nth(1)
        .and_then(|rest| rest.split('`').next());
    let next = match last.and_then(|l| names.iter().position(|n| *n == l)) {
        Some(i) => names.get((i + 1) % names.len()),
        None => names.first(),
    };
    json!({ "speaker": next.copied().unwrap_or_default() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: json!({}),
        }
    }

    fn user(s: &str) -> Message {
        Message::User { content: s.into() }
    }

    #[test]
    fn hands_off_once_to_a_named_agent() {
        let tools = [tool("transfer_to_billing"), tool("transfer_to_tech")];
        let ask = |m: &[Message], text: &str| transfer(m, text, &tools, "c1".into());
        let call = ask(&[], "A Billing question").unwrap();
        assert_eq!(call.name, "transfer_to_billing");
        assert!(ask(&[], "hello").is_none());
        let noted = [Message::User {
            content: format!("`triage` {HANDED} (`billing`)."),
        }];
        assert!(ask(&noted, "billing again").is_none());
        let asked = [user("my bill"), noted[0].clone()];
        assert_eq!(
            request_behind(&asked, "`triage` handed the conversation to you"),
            "my bill"
        );
        assert_eq!(request_behind(&asked, "plain"), "plain");
    }

    #[test]
    fn chats_and_selects_deterministically() {
        let system = "Be nice.\n\nYou are `critic`, one of the participants of a group chat.";
        let line = chat_line(Some(system), &[], "the plan").unwrap();
        assert_eq!(line, "critic (turn 1): my take on \"the plan\".");
        assert_eq!(chat_line(Some("You are orca"), &[], "x"), None);
        let schema = json!({ "properties": { "speaker": { "enum": ["a", "b", "c"] } } });
        assert_eq!(speaker(&schema, "no one yet")["speaker"], "a");
        assert_eq!(speaker(&schema, "Last speaker: `c`\n")["speaker"], "a");
        assert_eq!(speaker(&schema, "Last speaker: `a`\n")["speaker"], "b");
    }
}
