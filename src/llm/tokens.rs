//! Counting tokens with a real tokenizer: OpenAI's `o200k_base` byte-pair encoding (the
//! GPT-4o family's), from `tiktoken-rs`, whose vocabulary ships inside the crate (no download).
//!
//! Other models split text differently, so counts are an estimate for them, but a far better
//! one than characters or words: orca uses them to keep a session's history within its token
//! budget. The encoding is built once, on first use (a few hundred milliseconds).

use tiktoken_rs::CoreBPE;

use super::Message;

/// Tokens OpenAI's chat format adds around each message (role and separators).
const PER_MESSAGE: u32 = 3;

fn encoding() -> &'static CoreBPE {
    tiktoken_rs::o200k_base_singleton()
}

/// The number of tokens in `text`.
pub fn count(text: &str) -> u32 {
    if text.is_empty() {
        return 0;
    }
    u32::try_from(encoding().encode_ordinary(text).len()).unwrap_or(u32::MAX)
}

/// The tokens one message takes in a prompt: its text, its tool calls, and the framing.
pub fn count_message(message: &Message) -> u32 {
    let body = match message {
        Message::System { content } | Message::User { content } => count(content),
        Message::Tool { call_id, content } => count(call_id).saturating_add(count(content)),
        Message::Assistant {
            content,
            tool_calls,
        } => tool_calls.iter().fold(count(content), |n, call| {
            n.saturating_add(count(&call.name))
                .saturating_add(count(&call.arguments))
        }),
    };
    body.saturating_add(PER_MESSAGE)
}

/// The tokens `messages` take in a prompt.
pub fn count_messages(messages: &[Message]) -> u32 {
    messages
        .iter()
        .fold(0u32, |n, m| n.saturating_add(count_message(m)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_tokens_not_characters() {
        assert_eq!(count(""), 0);
        assert_eq!(count("hello"), 1);
        assert_eq!(count("hello world"), 2);
        // A long word of common letters is a few tokens, far fewer than its characters.
        let word = "internationalization";
        let n = count(word);
        assert!(n > 1 && (n as usize) < word.len() / 3, "{n}");
        // Many repeats of a short word are about one token each.
        let text = "cat ".repeat(100);
        let n = count(&text);
        assert!((95..=105).contains(&n), "{n}");
    }

    #[test]
    fn messages_count_their_framing() {
        let user = Message::User {
            content: "hello world".into(),
        };
        assert_eq!(count_message(&user), 2 + PER_MESSAGE);
        assert_eq!(count_messages(&[user.clone(), user]), 2 * (2 + PER_MESSAGE));
    }
}
