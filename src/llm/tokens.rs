//! Counting tokens where a budget must be checked before a call (a session's history, a
//! model's context window) and where no provider reports them (the offline provider).
//! Everything else counts the usage the provider reported.
//!
//! By default counts are a cheap estimate that costs no memory: word pieces, digit groups,
//! punctuation and non-ASCII characters, about what GPT-4o-class encodings give for English
//! and code. `llm.tokenizer = "o200k_base"` counts with OpenAI's `o200k_base` byte-pair
//! encoding instead (from `tiktoken-rs`, vocabulary inside the crate): exact for the GPT-4o
//! family, but building it takes a few hundred milliseconds and ~40 MB of memory, so it is
//! built only when configured, on first use.
//!
//! The choice is process-wide ([`use_tokenizer`], set once at start): counting is a pure
//! function everywhere else.

use std::sync::OnceLock;

use super::Message;

/// Tokens OpenAI's chat format adds around each message (role and separators).
const PER_MESSAGE: u32 = 3;

/// The choice is configuration (`llm.tokenizer`); counting is here.
pub use crate::config::Tokenizer;

static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();

/// Chooses how this process counts; the first call wins (the configuration is read once).
pub fn use_tokenizer(tokenizer: Tokenizer) {
    let _ = TOKENIZER.set(tokenizer);
}

fn tokenizer() -> Tokenizer {
    TOKENIZER.get().copied().unwrap_or_default()
}

/// The number of tokens in `text`.
pub fn count(text: &str) -> u32 {
    count_with(tokenizer(), text)
}

/// The number of tokens in `text` counted by `tokenizer`.
pub fn count_with(tokenizer: Tokenizer, text: &str) -> u32 {
    if text.is_empty() {
        return 0;
    }
    let n = match tokenizer {
        Tokenizer::Estimate => estimate(text),
        Tokenizer::O200kBase => tiktoken_rs::o200k_base_singleton()
            .encode_ordinary(text)
            .len(),
    };
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The estimate: a run of ASCII letters is one token per started six letters after the first,
/// a run of digits one per three, a run of ASCII punctuation one per two, every other
/// non-space character one.
fn estimate(text: &str) -> usize {
    #[derive(PartialEq, Clone, Copy)]
    enum Run {
        None,
        Letters,
        Digits,
        Punctuation,
    }
    let cost = |run: Run, n: usize| match run {
        Run::None => 0,
        Run::Letters => 1 + (n - 1) / 6,
        Run::Digits => n.div_ceil(3),
        Run::Punctuation => n.div_ceil(2),
    };
    let (mut tokens, mut run, mut n) = (0, Run::None, 0);
    for c in text.chars() {
        let kind = if c.is_ascii_alphabetic() {
            Run::Letters
        } else if c.is_ascii_digit() {
            Run::Digits
        } else if c.is_ascii_punctuation() {
            Run::Punctuation
        } else {
            Run::None
        };
        if kind != run {
            tokens += cost(run, n);
            (run, n) = (kind, 0);
        }
        n += 1;
        if kind == Run::None && !c.is_whitespace() {
            tokens += 1;
        }
    }
    tokens + cost(run, n)
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
    fn both_count_tokens_not_characters() {
        for tokenizer in [Tokenizer::Estimate, Tokenizer::O200kBase] {
            let count = |text: &str| count_with(tokenizer, text);
            assert_eq!(count(""), 0);
            assert_eq!(count("hello"), 1, "{tokenizer:?}");
            assert_eq!(count("hello world"), 2, "{tokenizer:?}");
            // A long word of common letters is a few tokens, far fewer than its characters.
            let word = "internationalization";
            let n = count(word);
            assert!(n > 1 && (n as usize) < word.len() / 3, "{tokenizer:?}: {n}");
            // Many repeats of a short word are about one token each.
            let n = count(&"cat ".repeat(100));
            assert!((95..=105).contains(&n), "{tokenizer:?}: {n}");
        }
    }

    #[test]
    fn the_estimate_stays_near_the_real_encoding() {
        let samples = [
            "The quick brown fox jumps over the lazy dog.",
            "fn main() { println!(\"{}\", 6 * 7); }",
            "{\"steps\": [{\"id\": \"calc\", \"kind\": \"tool\", \"input\": {\"tool\": \"math.calculate\"}}]}",
            "Orchestration of language-model agents over HTTP, streamed as Server-Sent Events.",
            "1234567890 and 3.14159",
        ];
        for text in samples {
            let real = f64::from(count_with(Tokenizer::O200kBase, text));
            let guess = f64::from(count_with(Tokenizer::Estimate, text));
            let ratio = guess / real;
            assert!((0.7..=1.5).contains(&ratio), "{text}: {guess} vs {real}");
        }
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
