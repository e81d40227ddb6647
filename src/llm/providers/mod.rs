//! The providers behind [`LlmProvider`](super::LlmProvider): an OpenAI-compatible client over
//! HTTP, Anthropic's Messages API, Ollama's native API, and the offline demonstration provider.
//!
//! Each provider owns its wire format; nothing provider-shaped may leave this module, and no
//! provider may know about runs, events or the store.

pub mod anthropic;
pub(crate) mod http;
pub mod offline;
pub mod ollama;
pub mod openai;

pub use anthropic::AnthropicProvider;
pub use offline::OfflineProvider;
pub use ollama::OllamaProvider;
pub use openai::OpenAiProvider;
