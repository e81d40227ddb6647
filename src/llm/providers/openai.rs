//! The OpenAI-compatible provider: `POST {base}/chat/completions` with `stream: true`, read back
//! as Server-Sent Events. Works against OpenAI and the servers that copy its API (vLLM, Ollama,
//! llama.cpp, LiteLLM).
//!
//! This module owns the wire shapes (private to this file), the retries of a request that failed
//! before its first byte, and the turning of `chat.completion.chunk`s into [`LlmEvent`]s. It must
//! not retry once the body has started (the caller may already have shown tokens), must not
//! panic on anything the server sends, and must never put the API key into an error, a log line
//! or anything else that can leave the process.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::http::{
    Auth, Decode, Endpoint, Failure, MAX_ERROR_MESSAGE_CHARS, ToolNames, collapse_whitespace,
    decoded_stream, redact, schema_in_prompt, sse_frames, truncate_chars,
};
use crate::config::{OpenAiConfig, Secret, StructuredOutput};
use crate::domain::ids::tool_wire_name;
use crate::llm::{
    ChatRequest, Error, LlmEvent, LlmProvider, LlmStream, Message, SchemaDialect, ToolCall, Usage,
};

/// An OpenAI-compatible chat model reached over HTTP.
#[derive(Debug)]
pub struct OpenAiProvider {
    /// The provider's configured name, for logs (`openai` for `[llm.openai]`).
    name: String,
    /// `{base}/chat/completions`.
    endpoint: Endpoint,
    /// `{base}/embeddings`.
    embeddings: Endpoint,
    /// Structured-output modes a model refused with a 400, by model: the weaker mode it takes
    /// instead, for the life of the process.
    downgraded: Mutex<HashMap<String, StructuredOutput>>,
}

impl OpenAiProvider {
    /// Builds the HTTP client. Fails (with a message for the operator) when the base URL is not
    /// a usable http(s) URL.
    pub fn new(cfg: &OpenAiConfig) -> Result<Self, String> {
        Self::build("openai", "llm.openai", cfg)
    }

    /// The provider `[llm.providers.NAME]`.
    pub fn named(name: &str, cfg: &OpenAiConfig) -> Result<Self, String> {
        Self::build(name, &format!("llm.providers.{name}"), cfg)
    }

    fn build(name: &str, key: &str, cfg: &OpenAiConfig) -> Result<Self, String> {
        let base = cfg.effective_base_url();
        Ok(OpenAiProvider {
            name: name.to_owned(),
            endpoint: Endpoint::new(key, base, "/chat/completions", cfg, Auth::Bearer)?,
            embeddings: Endpoint::new(key, base, "/embeddings", cfg, Auth::Bearer)?,
            downgraded: Mutex::new(HashMap::new()),
        })
    }

    /// The mode to ask `model` in: the configured one, or the weaker one it fell back to.
    fn mode_for(&self, model: &str, configured: StructuredOutput) -> StructuredOutput {
        let downgraded = self.downgraded.lock().unwrap_or_else(|e| e.into_inner());
        downgraded
            .get(model)
            .copied()
            .map_or(configured, |d| d.max(configured))
    }

    /// Remembers that `model` refused `mode`; the mode to try next, if there is a weaker one.
    fn downgrade(
        &self,
        model: &str,
        mode: StructuredOutput,
        why: &Error,
    ) -> Option<StructuredOutput> {
        let next = weaker(mode)?;
        let mut downgraded = self.downgraded.lock().unwrap_or_else(|e| e.into_inner());
        let known = downgraded.get(model).copied();
        if known.is_none_or(|k| k < next) {
            downgraded.insert(model.to_owned(), next);
            tracing::warn!(
                provider = %self.name,
                model,
                refused = ?mode,
                now = ?next,
                error = %why,
                "the provider refused this structured-output mode; asking in a weaker one from now on"
            );
        }
        Some(next)
    }

    /// Sends `request` asking for structured output in `mode`.
    async fn send(
        &self,
        request: &ChatRequest,
        mode: StructuredOutput,
    ) -> Result<(reqwest::Response, ToolNames), Failure> {
        let (request, json_mode) = schema_in_prompt(request.clone(), mode);
        let names = ToolNames::new(&request.tools);
        let mut body = wire::Request::new(&request, &names, mode);
        if json_mode {
            body.json_mode();
        }
        let response = self.endpoint.send(&body, "text/event-stream").await?;
        Ok((response, names))
    }
}

/// The next weaker structured-output mode, if any.
fn weaker(mode: StructuredOutput) -> Option<StructuredOutput> {
    match mode {
        StructuredOutput::Strict => Some(StructuredOutput::JsonSchema),
        StructuredOutput::JsonSchema => Some(StructuredOutput::JsonObject),
        StructuredOutput::JsonObject => Some(StructuredOutput::Prompt),
        StructuredOutput::Prompt => None,
    }
}

/// Whether a failure is the server refusing how structured output was asked for: a 400
/// blaming `response_format` (OpenAI's `param`), or, from servers that give no `param`, a
/// 400 whose message names it.
fn refuses_response_format(failure: &Failure) -> bool {
    let Error::Status {
        status: 400,
        message,
    } = &failure.error
    else {
        return false;
    };
    match failure.param.as_deref() {
        Some(param) => param.starts_with("response_format"),
        None => {
            let message = message.to_ascii_lowercase();
            message.contains("response_format") || message.contains("json_schema")
        }
    }
}

#[async_trait]
impl LlmProvider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.name
    }

    /// `POST /embeddings` (`{model, input: [texts], encoding_format: "float"}`): the vectors
    /// of `data`, put back in the order of `index`.
    async fn embed(&self, model: &str, texts: &[String]) -> Result<Vec<Vec<f32>>, Error> {
        let body =
            serde_json::json!({ "model": model, "input": texts, "encoding_format": "float" });
        let answer = super::http::json_answer(&self.embeddings, &body).await?;
        let data = answer.get("data").and_then(Value::as_array);
        let mut indexed: Vec<(u64, Vec<f32>)> = Vec::new();
        for item in data.into_iter().flatten() {
            let index = item.get("index").and_then(Value::as_u64);
            let vector = item.get("embedding").and_then(super::http::vector_of);
            match (index, vector) {
                (Some(i), Some(v)) => indexed.push((i, v)),
                _ => {
                    return Err(Error::Malformed(
                        "an embedding without its index or vector".into(),
                    ));
                }
            }
        }
        indexed.sort_by_key(|(i, _)| *i);
        super::http::one_each(texts, indexed.into_iter().map(|(_, v)| v).collect())
    }

    fn schema_dialect(&self, mode: StructuredOutput) -> SchemaDialect {
        match mode {
            StructuredOutput::Strict => SchemaDialect::OpenAiStrict,
            _ => SchemaDialect::AsWritten,
        }
    }

    async fn stream(
        &self,
        request: ChatRequest,
        cancel: CancellationToken,
    ) -> Result<LlmStream, Error> {
        let model = request.model.clone();
        let mut mode = self.mode_for(&model, request.capabilities.structured_output);
        let send = async {
            let first = self.send(&request, mode).await;
            match first {
                Err(failure)
                    if request.response_schema.is_some() && refuses_response_format(&failure) =>
                {
                    // Asked once more, one mode weaker; remembered for this model.
                    let Some(next) = self.downgrade(&model, mode, &failure.error) else {
                        return Err(failure.error);
                    };
                    mode = next;
                    self.send(&request, mode).await.map_err(|f| f.error)
                }
                other => other.map_err(|f| f.error),
            }
        };
        // Dropping the losing branch aborts the in-flight request or backoff sleep.
        let (response, names) = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(Error::Cancelled),
            result = send => result?,
        };
        let key = self.endpoint.key().clone();
        let chunks = Chunks {
            api_key: key.clone(),
            names,
            tool_calls: BTreeMap::new(),
            usage: None,
            saw_finish_reason: false,
        };
        Ok(decoded_stream(
            sse_frames(response, &key),
            chunks,
            cancel,
            self.endpoint.read_timeout,
        ))
    }
}

/// One streamed answer's `chat.completion.chunk`s read into [`LlmEvent`]s.
struct Chunks {
    api_key: Secret,
    names: ToolNames,
    /// Tool calls being assembled, by their `index` in the deltas.
    tool_calls: BTreeMap<u32, PartialToolCall>,
    /// The last usage seen; yielded once, at the end, so it is always the final event.
    usage: Option<Usage>,
    saw_finish_reason: bool,
}

#[derive(Debug, Default)]
struct PartialToolCall {
    id: String,
    name: String,
    arguments: String,
}

impl Decode for Chunks {
    fn decode(&mut self, frame: &str, out: &mut VecDeque<LlmEvent>) -> Result<bool, Error> {
        if frame.trim() == "[DONE]" {
            self.finish(out)?;
            return Ok(true);
        }
        self.handle(frame, out)?;
        Ok(false)
    }

    fn ended_early(&mut self, out: &mut VecDeque<LlmEvent>) -> Result<(), Error> {
        if self.saw_finish_reason {
            // Lenient: some servers end the body after finish_reason without `[DONE]`.
            return self.finish(out);
        }
        Err(Error::Malformed(
            "the stream ended before `[DONE]` or a finish_reason".into(),
        ))
    }
}

impl Chunks {
    /// Decodes one `data:` payload into `out`.
    fn handle(&mut self, data: &str, out: &mut VecDeque<LlmEvent>) -> Result<(), Error> {
        let data = data.trim();
        let chunk: wire::Chunk = serde_json::from_str(data).map_err(|e| {
            // Redact before cutting, so no part of a key can survive in the snippet.
            let snippet = redact(&self.api_key, data.to_owned());
            Error::Malformed(format!(
                "a chunk is not a chat.completion.chunk ({e}); it starts with `{}`",
                truncate_chars(&snippet, 60)
            ))
        })?;
        if let Some(error) = chunk.error {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| error.to_string());
            let message = redact(&self.api_key, collapse_whitespace(&message));
            return Err(Error::Malformed(format!(
                "the provider reported an error mid-stream: {}",
                truncate_chars(&message, MAX_ERROR_MESSAGE_CHARS)
            )));
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(Usage {
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
            });
        }
        for choice in chunk.choices {
            if let Some(delta) = choice.delta {
                for text in [delta.content, delta.refusal].into_iter().flatten() {
                    if !text.is_empty() {
                        out.push_back(LlmEvent::TextDelta(text));
                    }
                }
                for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
                    // `index` is required by OpenAI; a server that omits it sends one call per
                    // delta array, so its position there is the best guess.
                    let index = call.index.unwrap_or(position as u32);
                    let slot = self.tool_calls.entry(index).or_default();
                    if let Some(id) = call.id.filter(|id| !id.is_empty()) {
                        slot.id = id;
                    }
                    if let Some(function) = call.function {
                        if let Some(name) = function.name.filter(|n| !n.is_empty()) {
                            slot.name = name;
                        }
                        if let Some(arguments) = function.arguments {
                            slot.arguments.push_str(&arguments);
                        }
                    }
                }
            }
            if choice.finish_reason.is_some() {
                self.saw_finish_reason = true;
                self.flush_tool_calls(out)?;
            }
        }
        Ok(())
    }

    /// Queues every assembled tool call, in index order.
    fn flush_tool_calls(&mut self, out: &mut VecDeque<LlmEvent>) -> Result<(), Error> {
        for (index, call) in std::mem::take(&mut self.tool_calls) {
            if call.name.is_empty() {
                return Err(Error::Malformed(format!(
                    "tool call #{index} arrived without a function name"
                )));
            }
            let id = if call.id.is_empty() {
                format!("call_{index}")
            } else {
                call.id
            };
            out.push_back(LlmEvent::ToolCall(ToolCall {
                id,
                name: self.names.ours(&call.name),
                arguments: call.arguments,
            }));
        }
        Ok(())
    }

    /// The answer is complete: queue what is left.
    fn finish(&mut self, out: &mut VecDeque<LlmEvent>) -> Result<(), Error> {
        self.flush_tool_calls(out)?;
        if let Some(usage) = self.usage.take() {
            out.push_back(LlmEvent::Usage(usage));
        }
        Ok(())
    }
}

/// The OpenAI chat-completions wire format, as far as orca uses it.
mod wire {
    use super::*;

    #[derive(Debug, Serialize)]
    pub(super) struct Request<'a> {
        model: &'a str,
        messages: Vec<WireMessage<'a>>,
        stream: bool,
        /// Usage in the last chunk; left out for servers that refuse the option.
        #[serde(skip_serializing_if = "Option::is_none")]
        stream_options: Option<StreamOptions>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tools: Vec<Tool<'a>>,
        /// `false` for models that must call one tool at a time (only sent with tools: OpenAI
        /// refuses it without).
        #[serde(skip_serializing_if = "Option::is_none")]
        parallel_tool_calls: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        response_format: Option<ResponseFormat<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        temperature: Option<f32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        max_tokens: Option<u32>,
    }

    impl<'a> Request<'a> {
        /// The body of `request`, a schema in it sent `strict` only in the strict mode.
        pub(super) fn new(
            request: &'a ChatRequest,
            names: &'a ToolNames,
            mode: StructuredOutput,
        ) -> Self {
            let capabilities = &request.capabilities;
            Request {
                model: &request.model,
                messages: request
                    .messages
                    .iter()
                    .map(|m| WireMessage::new(m, names))
                    .collect(),
                stream: true,
                stream_options: capabilities.stream_usage.then_some(StreamOptions {
                    include_usage: true,
                }),
                tools: request
                    .tools
                    .iter()
                    .map(|t| Tool {
                        kind: "function",
                        function: Function {
                            name: names.wire(&t.name),
                            description: &t.description,
                            parameters: &t.parameters,
                        },
                    })
                    .collect(),
                parallel_tool_calls: (!capabilities.parallel_tool_calls
                    && !request.tools.is_empty())
                .then_some(false),
                response_format: request.response_schema.as_ref().map(|s| ResponseFormat {
                    kind: "json_schema",
                    json_schema: Some(JsonSchema {
                        name: tool_wire_name(&s.name),
                        schema: &s.schema,
                        strict: s.strict && mode == StructuredOutput::Strict,
                    }),
                }),
                temperature: request.temperature,
                max_tokens: request.max_tokens,
            }
        }

        /// Asks for JSON mode (`{"type": "json_object"}`) instead of a schema.
        pub(super) fn json_mode(&mut self) {
            self.response_format = Some(ResponseFormat {
                kind: "json_object",
                json_schema: None,
            });
        }
    }

    #[derive(Debug, Serialize)]
    struct StreamOptions {
        include_usage: bool,
    }

    #[derive(Debug, Serialize)]
    #[serde(tag = "role", rename_all = "lowercase")]
    enum WireMessage<'a> {
        System {
            content: &'a str,
        },
        User {
            content: &'a str,
        },
        Assistant {
            /// `null` rather than `""` next to tool calls: some servers reject an empty string.
            content: Option<&'a str>,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            tool_calls: Vec<WireToolCall<'a>>,
        },
        Tool {
            tool_call_id: &'a str,
            content: &'a str,
        },
    }

    impl<'a> WireMessage<'a> {
        fn new(message: &'a Message, names: &'a ToolNames) -> Self {
            match message {
                Message::System { content } => WireMessage::System { content },
                Message::User { content } => WireMessage::User { content },
                Message::Assistant {
                    content,
                    tool_calls,
                } => WireMessage::Assistant {
                    content: (!content.is_empty() || tool_calls.is_empty())
                        .then_some(content.as_str()),
                    tool_calls: tool_calls
                        .iter()
                        .map(|c| WireToolCall {
                            id: &c.id,
                            kind: "function",
                            function: FunctionCall {
                                name: names.wire(&c.name),
                                // Servers parse this; an empty string is not JSON.
                                arguments: if c.arguments.trim().is_empty() {
                                    "{}"
                                } else {
                                    &c.arguments
                                },
                            },
                        })
                        .collect(),
                },
                Message::Tool { call_id, content } => WireMessage::Tool {
                    tool_call_id: call_id,
                    content,
                },
            }
        }
    }

    #[derive(Debug, Serialize)]
    struct WireToolCall<'a> {
        id: &'a str,
        #[serde(rename = "type")]
        kind: &'static str,
        function: FunctionCall<'a>,
    }

    #[derive(Debug, Serialize)]
    struct FunctionCall<'a> {
        name: Cow<'a, str>,
        arguments: &'a str,
    }

    #[derive(Debug, Serialize)]
    struct Tool<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        function: Function<'a>,
    }

    #[derive(Debug, Serialize)]
    struct Function<'a> {
        name: Cow<'a, str>,
        description: &'a str,
        parameters: &'a Value,
    }

    #[derive(Debug, Serialize)]
    struct ResponseFormat<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        json_schema: Option<JsonSchema<'a>>,
    }

    #[derive(Debug, Serialize)]
    struct JsonSchema<'a> {
        name: String,
        schema: &'a Value,
        strict: bool,
    }

    /// One `chat.completion.chunk`. Every field is optional on purpose: compatible servers
    /// differ in what they leave out, and a missing field is not worth failing a run over.
    #[derive(Debug, Deserialize)]
    pub(super) struct Chunk {
        #[serde(default)]
        pub choices: Vec<Choice>,
        #[serde(default)]
        pub usage: Option<WireUsage>,
        /// Some servers report failures inside the stream instead of with a status.
        #[serde(default)]
        pub error: Option<Value>,
    }

    #[derive(Debug, Deserialize)]
    pub(super) struct Choice {
        #[serde(default)]
        pub delta: Option<Delta>,
        #[serde(default)]
        pub finish_reason: Option<String>,
    }

    #[derive(Debug, Deserialize)]
    pub(super) struct Delta {
        #[serde(default)]
        pub content: Option<String>,
        #[serde(default)]
        pub refusal: Option<String>,
        #[serde(default)]
        pub tool_calls: Option<Vec<ToolCallDelta>>,
    }

    #[derive(Debug, Deserialize)]
    pub(super) struct ToolCallDelta {
        #[serde(default)]
        pub index: Option<u32>,
        #[serde(default)]
        pub id: Option<String>,
        #[serde(default)]
        pub function: Option<FunctionDelta>,
    }

    #[derive(Debug, Deserialize)]
    pub(super) struct FunctionDelta {
        #[serde(default)]
        pub name: Option<String>,
        #[serde(default)]
        pub arguments: Option<String>,
    }

    #[derive(Debug, Deserialize)]
    pub(super) struct WireUsage {
        #[serde(default)]
        pub prompt_tokens: u64,
        #[serde(default)]
        pub completion_tokens: u64,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::llm::{ResponseSchema, ToolSpec};

    #[test]
    fn request_body_has_the_openai_shape() {
        let mut request = ChatRequest::new(
            "gpt-test",
            vec![
                Message::System {
                    content: "be brief".into(),
                },
                Message::User {
                    content: "what time is it?".into(),
                },
                Message::Assistant {
                    content: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "call_1".into(),
                        name: "clock.now".into(),
                        arguments: String::new(),
                    }],
                },
                Message::Tool {
                    call_id: "call_1".into(),
                    content: "{\"iso\":\"2026-01-01T00:00:00Z\"}".into(),
                },
            ],
        );
        request.tools = vec![ToolSpec {
            name: "clock.now".into(),
            description: "the time".into(),
            parameters: json!({"type": "object"}),
        }];
        request.response_schema = Some(ResponseSchema {
            strict: true,
            ..ResponseSchema::new("answer.v1", json!({"type": "object"}))
        });
        request.max_tokens = Some(64);
        let names = ToolNames::new(&request.tools);
        let body = serde_json::to_value(wire::Request::new(
            &request,
            &names,
            StructuredOutput::Strict,
        ))
        .unwrap();
        assert_eq!(
            body,
            json!({
                "model": "gpt-test",
                "stream": true,
                "stream_options": {"include_usage": true},
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "what time is it?"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_1", "type": "function",
                         "function": {"name": "clock_now", "arguments": "{}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_1",
                     "content": "{\"iso\":\"2026-01-01T00:00:00Z\"}"},
                ],
                "tools": [{"type": "function", "function": {
                    "name": "clock_now", "description": "the time",
                    "parameters": {"type": "object"}}}],
                "response_format": {"type": "json_schema", "json_schema": {
                    "name": "answer_v1", "schema": {"type": "object"}, "strict": true}},
                "max_tokens": 64,
            })
        );
    }

    #[test]
    fn new_rejects_unusable_base_urls() {
        for base in ["not a url", "ftp://example.com/v1"] {
            let cfg = OpenAiConfig {
                base_url: base.into(),
                ..OpenAiConfig::default()
            };
            assert!(OpenAiProvider::new(&cfg).is_err(), "{base}");
        }
        let cfg = OpenAiConfig {
            base_url: "http://127.0.0.1:1/v1/".into(),
            ..OpenAiConfig::default()
        };
        let provider = OpenAiProvider::new(&cfg).unwrap();
        assert_eq!(
            provider.endpoint.url(),
            "http://127.0.0.1:1/v1/chat/completions"
        );
    }
}
