//! Anthropic's Messages API: `POST {base}/v1/messages` with `stream: true`, read back as
//! Server-Sent Events.
//!
//! This module owns the provider (endpoint, headers, how a structured answer is asked for);
//! `request.rs` owns the body and the conversation rules Anthropic holds it to, `events.rs` the
//! reading of the stream. Like every provider it must not retry once the body has started,
//! must not panic on anything the server sends, and must never let the key out of the process.
//!
//! Structured answers (modes `strict` and `json_schema`) are a forced tool whose input schema
//! is the response schema (so the engine projects it to [`SchemaDialect::ObjectRoot`]); its
//! input streams back as text. Modes `json_object` and `prompt` put the schema in the system
//! prompt.

mod events;
mod request;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::http::{Auth, Endpoint, decoded_stream, schema_in_prompt, sse_frames};
use crate::config::{OpenAiConfig, StructuredOutput};
use crate::llm::{ChatRequest, Error, LlmProvider, LlmStream, SchemaDialect};

/// The API version this provider speaks (its event and error shapes).
const API_VERSION: &str = "2023-06-01";

/// A Claude model reached over Anthropic's Messages API.
#[derive(Debug)]
pub struct AnthropicProvider {
    /// The provider's configured name, for logs.
    name: String,
    /// `{base}/v1/messages`.
    endpoint: Endpoint,
}

impl AnthropicProvider {
    /// The provider `[llm.providers.NAME]` of kind `anthropic`; its base URL is the API's root
    /// (`https://api.anthropic.com`). Fails (with a message for the operator) when the base
    /// URL is not a usable http(s) URL.
    pub fn named(name: &str, cfg: &OpenAiConfig) -> Result<Self, String> {
        let key = format!("llm.providers.{name}");
        let auth = Auth::Header("x-api-key");
        let endpoint = Endpoint::new(&key, &cfg.base_url, "/v1/messages", cfg, auth)?
            .with_header("anthropic-version", API_VERSION);
        Ok(AnthropicProvider {
            name: name.to_owned(),
            endpoint,
        })
    }
}

#[async_trait]
impl LlmProvider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn schema_dialect(&self, mode: StructuredOutput) -> SchemaDialect {
        match mode {
            // A tool's input schema must be an object.
            StructuredOutput::Strict | StructuredOutput::JsonSchema => SchemaDialect::ObjectRoot,
            StructuredOutput::JsonObject | StructuredOutput::Prompt => SchemaDialect::AsWritten,
        }
    }

    async fn stream(
        &self,
        request: ChatRequest,
        cancel: CancellationToken,
    ) -> Result<LlmStream, Error> {
        let mode = request.capabilities.structured_output;
        // Anthropic has no JSON mode: `json_object` is the schema in the prompt, like `prompt`.
        let (request, _json_mode) = schema_in_prompt(request, mode);
        let (body, offer) = request::build(&request);
        // Dropping the losing branch aborts the in-flight request or backoff sleep.
        let response = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(Error::Cancelled),
            result = self.endpoint.send(&body, "text/event-stream") => {
                result.map_err(|f| f.error)?
            }
        };
        let key = self.endpoint.key();
        let decoder = events::Decoder::new(offer.names, offer.answer_tool, key.clone());
        Ok(decoded_stream(
            sse_frames(response, key),
            decoder,
            cancel,
            self.endpoint.read_timeout,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_the_messages_api() {
        let cfg = OpenAiConfig {
            base_url: "https://api.anthropic.com/".into(),
            ..OpenAiConfig::default()
        };
        let provider = AnthropicProvider::named("claude", &cfg).unwrap();
        assert_eq!(
            provider.endpoint.url(),
            "https://api.anthropic.com/v1/messages"
        );
        for base in ["", "not a url", "ftp://example.com"] {
            let cfg = OpenAiConfig {
                base_url: base.into(),
                ..OpenAiConfig::default()
            };
            assert!(AnthropicProvider::named("claude", &cfg).is_err(), "{base}");
        }
        assert_eq!(
            provider.schema_dialect(StructuredOutput::JsonSchema),
            SchemaDialect::ObjectRoot
        );
        assert_eq!(
            provider.schema_dialect(StructuredOutput::Prompt),
            SchemaDialect::AsWritten
        );
    }
}
