//! The LLM layer: one provider-neutral conversation shape, a streaming provider trait, the
//! providers (OpenAI-compatible, Anthropic and Ollama over HTTP, and the offline
//! demonstration provider) and the router from model aliases to providers.
//!
//! Provider wire shapes stay inside `providers/*`: everything that leaves this module is one of
//! the types below, so runs and history never store a provider's JSON.

pub mod embed;
pub mod providers;
pub mod router;
pub mod schema;
pub mod tokens;

use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::{ModelCapabilities, ProviderKind, StructuredOutput};
use crate::domain::{ErrorCode, RunError};

pub use router::LlmRouter;
pub use schema::SchemaDialect;

/// One message of a conversation, in our own shape (not any provider's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    System {
        content: String,
    },
    User {
        content: String,
    },
    Assistant {
        content: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, answered back to the model.
    Tool {
        call_id: String,
        content: String,
    },
}

/// A tool call the model asked for. `arguments` is the JSON text exactly as the model wrote it:
/// it may be invalid, and the caller decides what to do about that.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}

/// Ask the model for JSON held to this schema, in the way [`Capabilities::structured_output`]
/// says. The engine hands a provider the schema already projected to the provider's
/// [`SchemaDialect`], and restores the answer to the full schema's shape itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResponseSchema {
    pub name: String,
    pub schema: Value,
    /// Whether the provider may enforce the schema exactly (OpenAI `strict: true`): set when
    /// the projection lost nothing a valid answer needs.
    pub strict: bool,
}

impl ResponseSchema {
    /// A schema sent as written, not strict.
    pub fn new(name: impl Into<String>, schema: Value) -> Self {
        ResponseSchema {
            name: name.into(),
            schema,
            strict: false,
        }
    }
}

/// What one model can do, resolved from `[llm.models.ALIAS.capabilities]`, its provider's
/// settings and the provider kind's defaults: the engine and the provider choose how to ask by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    pub structured_output: StructuredOutput,
    pub parallel_tool_calls: bool,
    /// Tokens the model can take in (prompt and answer); `None`: unknown, not checked.
    pub context_window: Option<u32>,
    /// Whether the server reports usage at the end of a stream when asked.
    pub stream_usage: bool,
}

impl Default for Capabilities {
    fn default() -> Self {
        Capabilities::for_kind(ProviderKind::Openai)
    }
}

impl Capabilities {
    /// The defaults of a provider kind.
    pub fn for_kind(kind: ProviderKind) -> Capabilities {
        Capabilities {
            structured_output: kind.default_structured_output(),
            parallel_tool_calls: true,
            context_window: None,
            stream_usage: true,
        }
    }

    /// These capabilities with a model's own settings laid over them.
    pub fn with(mut self, model: &ModelCapabilities) -> Capabilities {
        if let Some(mode) = model.structured_output {
            self.structured_output = mode;
        }
        if let Some(parallel) = model.parallel_tool_calls {
            self.parallel_tool_calls = parallel;
        }
        if model.context_window.is_some() {
            self.context_window = model.context_window;
        }
        if let Some(usage) = model.stream_usage {
            self.stream_usage = usage;
        }
        self
    }
}

/// One chat completion request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatRequest {
    /// The provider's own model name (already resolved from an alias by the router).
    pub model: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub response_schema: Option<ResponseSchema>,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
    /// The target model's capabilities (set by the engine for each target it tries).
    pub capabilities: Capabilities,
}

impl ChatRequest {
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> Self {
        Self {
            model: model.into(),
            messages,
            tools: Vec::new(),
            response_schema: None,
            temperature: None,
            max_tokens: None,
            capabilities: Capabilities::default(),
        }
    }
}

/// Token usage of one LLM call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// What a provider stream yields, in order: text deltas and complete tool calls as they become
/// known, and usage (at most once, usually last).
#[derive(Debug, Clone, PartialEq)]
pub enum LlmEvent {
    TextDelta(String),
    ToolCall(ToolCall),
    Usage(Usage),
}

pub type LlmStream = BoxStream<'static, Result<LlmEvent, Error>>;

/// A chat model that streams. Implementations must stop promptly (yielding
/// `Err(Error::Cancelled)` or ending) once `cancel` fires, and must never panic on bad input
/// from the wire.
#[async_trait]
pub trait LlmProvider: Send + Sync + 'static {
    /// A short name for logs and metrics, e.g. `openai` or `offline`.
    fn name(&self) -> &str;

    /// The schema dialect this provider takes for structured answers asked for in `mode`:
    /// the engine projects every response schema to it before the call.
    fn schema_dialect(&self, mode: StructuredOutput) -> SchemaDialect {
        let _ = mode;
        SchemaDialect::AsWritten
    }

    /// Starts one completion. Errors before the first byte (connect, HTTP status) come back
    /// here; errors mid-stream come back as stream items.
    async fn stream(
        &self,
        request: ChatRequest,
        cancel: CancellationToken,
    ) -> Result<LlmStream, Error>;

    /// The embeddings of `texts` by `model`, in their order (memory searched by meaning). A
    /// provider without an embeddings API refuses (`Error::Status` 400).
    async fn embed(&self, model: &str, texts: &[String]) -> Result<Vec<Vec<f32>>, Error> {
        let _ = (model, texts);
        Err(Error::Status {
            status: 400,
            message: format!("the provider `{}` has no embeddings API", self.name()),
        })
    }
}

/// Everything that can go wrong talking to a model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the provider is rate limiting requests (HTTP 429)")]
    RateLimited { retry_after: Option<Duration> },
    #[error("the provider answered HTTP {status}: {message}")]
    Status { status: u16, message: String },
    #[error("the provider did not answer in time ({0})")]
    Timeout(String),
    #[error("could not reach the provider: {0}")]
    Connect(String),
    #[error("the provider sent a malformed stream: {0}")]
    Malformed(String),
    #[error("the call was cancelled")]
    Cancelled,
    #[error("unknown model alias `{0}`")]
    UnknownModel(String),
}

impl Error {
    /// The stable error code carried in events and run errors; it also says whether the
    /// same request may succeed when sent again.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::RateLimited { .. } => ErrorCode::LlmRateLimited,
            Error::Status { status, .. } if *status >= 500 => ErrorCode::LlmError,
            Error::Status { .. } => ErrorCode::LlmRejected,
            Error::Timeout(_) => ErrorCode::LlmTimeout,
            Error::Connect(_) => ErrorCode::LlmUnavailable,
            Error::Malformed(_) => ErrorCode::LlmMalformedResponse,
            Error::Cancelled => ErrorCode::Cancelled,
            Error::UnknownModel(_) => ErrorCode::UnknownModel,
        }
    }

    /// Whether trying the same request again may succeed.
    pub fn retryable(&self) -> bool {
        self.code().retryable()
    }

    /// The error as a run or step error.
    pub fn to_run_error(&self) -> RunError {
        RunError::new(self.code(), self.to_string())
    }
}
