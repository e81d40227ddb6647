//! What the provider conformance tests share (`llm_provider.rs`, `anthropic.rs`,
//! `ollama.rs`): a client configuration for one scripted dialect, a plain request, a tool, and
//! a stream read to its end.

use std::time::Duration;

use futures::StreamExt;
use orca::config::{OpenAiConfig, Secret};
use orca::llm::{ChatRequest, Error, LlmEvent, LlmProvider, Message, ToolCall, ToolSpec};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The read timeout of the test configs: long enough for a loaded CI machine to send a chunk,
/// short enough that the timeout tests stay fast.
pub const READ_TIMEOUT_MS: u64 = 300;
/// How long "promptly" is allowed to be.
pub const PROMPTLY: Duration = Duration::from_secs(2);

/// A provider at `base_url` with `key`, quick retries and the short read timeout.
pub fn config(base_url: String, key: &str) -> OpenAiConfig {
    OpenAiConfig {
        base_url,
        api_key: Secret::new(key),
        connect_timeout_ms: 1_000,
        read_timeout_ms: READ_TIMEOUT_MS,
        max_retries: 2,
        retry_initial_delay_ms: 10,
        retry_max_delay_ms: 50,
        ..Default::default()
    }
}

/// A system prompt and one user message, to `model`.
pub fn request(model: &str) -> ChatRequest {
    ChatRequest::new(
        model,
        vec![
            Message::System {
                content: "Be brief.".into(),
            },
            Message::User {
                content: "Say hello.".into(),
            },
        ],
    )
}

/// A tool taking any object.
pub fn tool(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("the {name} tool"),
        parameters: json!({"type": "object"}),
    }
}

/// Every event of one answer, or the first error.
pub async fn run(provider: &dyn LlmProvider, request: ChatRequest) -> Result<Vec<LlmEvent>, Error> {
    let mut stream = provider.stream(request, CancellationToken::new()).await?;
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        events.push(item?);
    }
    Ok(events)
}

/// The text deltas of `events`, in order.
pub fn text_deltas(events: &[LlmEvent]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

/// The tool calls of `events`, in order.
pub fn tool_calls(events: &[LlmEvent]) -> Vec<&ToolCall> {
    events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::ToolCall(c) => Some(c),
            _ => None,
        })
        .collect()
}
