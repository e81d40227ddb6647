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
use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use eventsource_stream::{Event as SseEvent, EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use reqwest::header::{ACCEPT, HeaderMap, RETRY_AFTER};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::{OpenAiConfig, Secret, StructuredOutput};
use crate::llm::{
    ChatRequest, Error, LlmEvent, LlmProvider, LlmStream, Message, ToolCall, ToolSpec, Usage,
};

/// Error messages taken from a provider's body are cut to this many characters: enough to say
/// what went wrong, short enough for an event or a log line.
const MAX_ERROR_MESSAGE_CHARS: usize = 300;
/// An error body is read up to this size; anything longer is not an error message worth keeping.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// An OpenAI-compatible chat model reached over HTTP.
#[derive(Debug)]
pub struct OpenAiProvider {
    /// The provider's configured name, for logs (`openai` for `[llm.openai]`).
    name: String,
    client: reqwest::Client,
    /// `{base}/chat/completions`, computed once.
    endpoint: String,
    api_key: Secret,
    /// The longest silence allowed while waiting for headers or between two events.
    read_timeout: Duration,
    retry: RetryPolicy,
    structured_output: StructuredOutput,
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
        let url = reqwest::Url::parse(base)
            .map_err(|e| format!("{key}.base_url `{base}` is not a valid URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "{key}.base_url `{base}` must be an http:// or https:// URL"
            ));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(cfg.connect_timeout_ms.max(1)))
            .user_agent(concat!("orca/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("could not build the HTTP client for the LLM provider: {e}"))?;
        Ok(OpenAiProvider {
            name: name.to_owned(),
            client,
            endpoint: format!("{base}/chat/completions"),
            api_key: cfg.api_key.clone(),
            read_timeout: Duration::from_millis(cfg.read_timeout_ms.max(1)),
            retry: RetryPolicy {
                max_retries: cfg.max_retries,
                initial_delay: Duration::from_millis(cfg.retry_initial_delay_ms),
                max_delay: Duration::from_millis(cfg.retry_max_delay_ms),
            },
            structured_output: cfg.structured_output,
        })
    }

    /// Sends the request, retrying 429, 5xx and connect failures with backoff. Returns the first
    /// successful response, whose body has not been read yet.
    async fn send_with_retries(
        &self,
        body: &wire::Request<'_>,
    ) -> Result<reqwest::Response, Error> {
        let mut attempt = 0;
        loop {
            let failure = match self.send_once(body).await {
                Ok(response) => return Ok(response),
                Err(failure) => failure,
            };
            if !failure.worth_resending() || attempt >= self.retry.max_retries {
                return Err(failure.error);
            }
            let delay = self.retry.delay(attempt, failure.retry_after);
            tracing::warn!(
                attempt = attempt + 1,
                max_retries = self.retry.max_retries,
                delay_ms = delay.as_millis() as u64,
                code = %failure.error.code(),
                error = %failure.error,
                "LLM request failed before its first byte; retrying"
            );
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    async fn send_once(&self, body: &wire::Request<'_>) -> Result<reqwest::Response, Failure> {
        let mut request = self
            .client
            .post(&self.endpoint)
            .header(ACCEPT, "text/event-stream")
            .json(body);
        // Local servers (Ollama, llama.cpp) need no key; an empty Bearer header confuses some.
        if !self.api_key.is_empty() {
            request = request.bearer_auth(self.api_key.expose());
        }
        let response = match tokio::time::timeout(self.read_timeout, request.send()).await {
            Err(_) => {
                return Err(Failure::from(Error::Timeout(format!(
                    "no response headers within {} ms",
                    self.read_timeout.as_millis()
                ))));
            }
            Ok(Err(e)) => return Err(self.transport_failure(e)),
            Ok(Ok(response)) => response,
        };

        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = parse_retry_after(response.headers());
        // Redact before anything is cut: truncation could otherwise leave half a key behind.
        let body = self.redact(
            String::from_utf8_lossy(&read_error_body(response, self.read_timeout).await)
                .into_owned(),
        );
        let status = status.as_u16();
        let error = match status {
            429 => Error::RateLimited { retry_after },
            _ => Error::Status {
                status,
                message: error_message(status, body.as_bytes()),
            },
        };
        Err(Failure { error, retry_after })
    }

    fn transport_failure(&self, e: reqwest::Error) -> Failure {
        let timed_out = e.is_timeout();
        let detail = self.redact(error_chain(&e.without_url()));
        if timed_out {
            // Only the connect timeout can fire inside reqwest: the read timeout is ours.
            Failure::from(Error::Connect(format!("connecting timed out: {detail}")))
        } else {
            Failure::from(Error::Connect(detail))
        }
    }

    fn redact(&self, text: String) -> String {
        redact(&self.api_key, text)
    }
}

#[async_trait]
impl LlmProvider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.name
    }

    async fn stream(
        &self,
        request: ChatRequest,
        cancel: CancellationToken,
    ) -> Result<LlmStream, Error> {
        let (request, json_mode) = schema_in_prompt(request, self.structured_output);
        let names = ToolNames::new(&request.tools);
        let mut body = wire::Request::new(&request, &names);
        if json_mode {
            body.json_mode();
        }
        // Dropping the losing branch aborts the in-flight request or backoff sleep.
        let response = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(Error::Cancelled),
            result = self.send_with_retries(&body) => result?,
        };
        let state = ChunkStream {
            events: Box::pin(response.bytes_stream().eventsource()),
            cancel,
            read_timeout: self.read_timeout,
            api_key: self.api_key.clone(),
            names,
            tool_calls: BTreeMap::new(),
            usage: None,
            saw_finish_reason: false,
            pending: Default::default(),
            finished: false,
        };
        let stream = futures::stream::unfold(state, |mut state| async move {
            let item = state.next_item().await?;
            Some((item, state))
        });
        Ok(stream.boxed())
    }
}

/// When and how often a request that failed before its first byte is tried again.
#[derive(Debug, Clone, Copy)]
struct RetryPolicy {
    max_retries: u32,
    initial_delay: Duration,
    max_delay: Duration,
}

impl RetryPolicy {
    /// The wait before retry number `attempt + 1`: the server's Retry-After when it gave one,
    /// else exponential backoff; both capped at `max_delay` so a hostile or confused server
    /// cannot park a run for an hour.
    fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let wait = retry_after.unwrap_or_else(|| {
            let factor = 2u32.saturating_pow(attempt);
            self.initial_delay.saturating_mul(factor)
        });
        wait.min(self.max_delay)
    }
}

/// One failed attempt, and when the provider asked us to come back.
struct Failure {
    error: Error,
    retry_after: Option<Duration>,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure {
            error,
            retry_after: None,
        }
    }
}

impl Failure {
    /// Whether this client sends the request again itself: when the error's code is
    /// retryable, except a timeout waiting for headers, which already used the whole read
    /// timeout (a step's retry policy may still try again).
    fn worth_resending(&self) -> bool {
        self.error.retryable() && !matches!(self.error, Error::Timeout(_))
    }
}

/// `Retry-After` as delta-seconds or an HTTP date; OpenAI's `retry-after-ms` wins when present
/// because it is more precise.
fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = header(RETRY_AFTER.as_str())?;
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = date.signed_duration_since(chrono::Utc::now());
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

/// Reads at most [`MAX_ERROR_BODY_BYTES`] of an error response, giving up after `timeout`:
/// the body only decorates an error we already have.
async fn read_error_body(response: reqwest::Response, timeout: Duration) -> Vec<u8> {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    let read = async {
        while let Some(Ok(chunk)) = chunks.next().await {
            body.extend_from_slice(&chunk);
            if body.len() >= MAX_ERROR_BODY_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(timeout, read).await;
    body.truncate(MAX_ERROR_BODY_BYTES);
    body
}

/// A short human message for an error response: the body's `error.message` (OpenAI and most
/// compatible servers), a few other common shapes, the text itself when it is short, or the
/// status's reason phrase.
fn error_message(status: u16, body: &[u8]) -> String {
    let from_json = serde_json::from_slice::<Value>(body).ok().and_then(|v| {
        let text = |v: &Value| v.as_str().map(str::to_owned);
        v.pointer("/error/message")
            .and_then(text)
            .or_else(|| v.get("error").and_then(text))
            .or_else(|| v.get("message").and_then(text))
            .or_else(|| v.get("detail").and_then(text))
    });
    let message = from_json.unwrap_or_else(|| {
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        if !text.is_empty() && !text.starts_with('<') && !text.starts_with('{') {
            text.to_owned()
        } else {
            reqwest::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("no error message")
                .to_owned()
        }
    });
    truncate_chars(&collapse_whitespace(&message), MAX_ERROR_MESSAGE_CHARS)
}

fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// An error and its sources, `a: b: c`, so a connect failure says *why* (refused, DNS, TLS).
/// The operating system's error numbers (`Connection refused (os error 111)`) are dropped:
/// this text reaches run errors and events, where the words help and the number only tells
/// which OS the server runs on.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = without_os_error_numbers(&e.to_string());
    let mut source = e.source();
    while let Some(s) = source {
        let part = without_os_error_numbers(&s.to_string());
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// `text` without the ` (os error N)` suffixes `std::io::Error` puts after its message.
fn without_os_error_numbers(text: &str) -> String {
    const MARK: &str = " (os error ";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(MARK) {
        let after = &rest[at + MARK.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && after[digits..].starts_with(')') {
            out.push_str(&rest[..at]);
            rest = &after[digits + 1..];
        } else {
            out.push_str(&rest[..at + MARK.len()]);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Removes the API key from text that came from outside (error bodies may echo it).
fn redact(key: &Secret, text: String) -> String {
    let key = key.expose();
    if key.is_empty() || !text.contains(key) {
        text
    } else {
        text.replace(key, "***")
    }
}

/// OpenAI only accepts function names matching `^[a-zA-Z0-9_-]{1,64}$`, while our tools have
/// dotted names (`clock.now`). This table maps each offered tool to a valid, unique wire name
/// for one request and maps the model's answer back.
#[derive(Debug, Default)]
struct ToolNames {
    to_wire: HashMap<String, String>,
    from_wire: HashMap<String, String>,
}

impl ToolNames {
    fn new(tools: &[ToolSpec]) -> Self {
        let mut names = ToolNames::default();
        for tool in tools {
            if names.to_wire.contains_key(&tool.name) {
                continue;
            }
            let base = wire_name(&tool.name);
            let mut candidate = base.clone();
            let mut n = 2;
            while names.from_wire.contains_key(&candidate) {
                let suffix = format!("_{n}");
                let keep = 64usize.saturating_sub(suffix.len()).min(base.len());
                candidate = format!("{}{suffix}", &base[..keep]);
                n += 1;
            }
            names.to_wire.insert(tool.name.clone(), candidate.clone());
            names.from_wire.insert(candidate, tool.name.clone());
        }
        names
    }

    fn wire<'a>(&'a self, name: &'a str) -> Cow<'a, str> {
        match self.to_wire.get(name) {
            Some(wire) => Cow::Borrowed(wire),
            None => Cow::Owned(wire_name(name)),
        }
    }

    /// Our name for a name the model used; names we did not rename pass through unchanged.
    fn ours(&self, name: &str) -> String {
        self.from_wire
            .get(name)
            .cloned()
            .unwrap_or_else(|| name.to_owned())
    }
}

/// `name` with every character OpenAI refuses replaced by `_`, cut to 64 ASCII characters.
/// For servers without JSON Schema output: the schema moves into the system prompt, and
/// (`json_object`) JSON mode is asked for instead. `true` when JSON mode is wanted.
fn schema_in_prompt(mut request: ChatRequest, mode: StructuredOutput) -> (ChatRequest, bool) {
    if mode == StructuredOutput::JsonSchema {
        return (request, false);
    }
    let Some(schema) = request.response_schema.take() else {
        return (request, false);
    };
    let instruction = format!(
        "Answer with one JSON value only, no prose and no code fences, valid against this JSON \
         Schema:\n{}",
        schema.schema
    );
    match request.messages.first_mut() {
        Some(Message::System { content }) => {
            content.push_str("\n\n");
            content.push_str(&instruction);
        }
        _ => request.messages.insert(
            0,
            Message::System {
                content: instruction,
            },
        ),
    }
    (request, mode == StructuredOutput::JsonObject)
}

fn wire_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if out.is_empty() {
        out.push('_');
    }
    out
}

type SseStream =
    Pin<Box<dyn Stream<Item = Result<SseEvent, EventStreamError<reqwest::Error>>> + Send>>;

/// The state of one streamed answer: SSE events in, [`LlmEvent`]s out.
struct ChunkStream {
    events: SseStream,
    cancel: CancellationToken,
    read_timeout: Duration,
    api_key: Secret,
    names: ToolNames,
    /// Tool calls being assembled, by their `index` in the deltas.
    tool_calls: BTreeMap<u32, PartialToolCall>,
    /// The last usage seen; yielded once, at the end, so it is always the final event.
    usage: Option<Usage>,
    saw_finish_reason: bool,
    /// Events decoded from one chunk and not yet handed out.
    pending: std::collections::VecDeque<LlmEvent>,
    /// Set after `[DONE]`, the end of the body, or an error: nothing more will be read.
    finished: bool,
}

#[derive(Debug, Default)]
struct PartialToolCall {
    id: String,
    name: String,
    arguments: String,
}

impl ChunkStream {
    async fn next_item(&mut self) -> Option<Result<LlmEvent, Error>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            if self.finished {
                return None;
            }
            let next = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return self.fail(Error::Cancelled),
                next = tokio::time::timeout(self.read_timeout, self.events.next()) => next,
            };
            let result = match next {
                Err(_) => Err(Error::Timeout(format!(
                    "no data from the provider for {} ms",
                    self.read_timeout.as_millis()
                ))),
                Ok(None) if self.saw_finish_reason => {
                    // Lenient: some servers end the body after finish_reason without `[DONE]`.
                    self.finish()
                }
                Ok(None) => Err(Error::Malformed(
                    "the stream ended before `[DONE]` or a finish_reason".into(),
                )),
                Ok(Some(Err(e))) => Err(self.stream_error(e)),
                Ok(Some(Ok(event))) => self.handle(&event.data),
            };
            if let Err(e) = result {
                return self.fail(e);
            }
        }
    }

    fn fail(&mut self, error: Error) -> Option<Result<LlmEvent, Error>> {
        self.finished = true;
        self.pending.clear();
        Some(Err(error))
    }

    fn stream_error(&self, e: EventStreamError<reqwest::Error>) -> Error {
        match e {
            EventStreamError::Transport(e) => Error::Connect(redact(
                &self.api_key,
                format!(
                    "the connection broke mid-stream: {}",
                    error_chain(&e.without_url())
                ),
            )),
            EventStreamError::Utf8(_) => Error::Malformed("the stream is not UTF-8".into()),
            EventStreamError::Parser(_) => {
                Error::Malformed("the stream is not valid Server-Sent Events".into())
            }
        }
    }

    /// Decodes one `data:` payload into pending events.
    fn handle(&mut self, data: &str) -> Result<(), Error> {
        let data = data.trim();
        if data == "[DONE]" {
            return self.finish();
        }
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
                        self.pending.push_back(LlmEvent::TextDelta(text));
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
                self.flush_tool_calls()?;
            }
        }
        Ok(())
    }

    /// Queues every assembled tool call, in index order.
    fn flush_tool_calls(&mut self) -> Result<(), Error> {
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
            self.pending.push_back(LlmEvent::ToolCall(ToolCall {
                id,
                name: self.names.ours(&call.name),
                arguments: call.arguments,
            }));
        }
        Ok(())
    }

    /// The answer is complete: queue what is left and stop reading.
    fn finish(&mut self) -> Result<(), Error> {
        self.flush_tool_calls()?;
        if let Some(usage) = self.usage.take() {
            self.pending.push_back(LlmEvent::Usage(usage));
        }
        self.finished = true;
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
        stream_options: StreamOptions,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tools: Vec<Tool<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        response_format: Option<ResponseFormat<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        temperature: Option<f32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        max_tokens: Option<u32>,
    }

    impl<'a> Request<'a> {
        pub(super) fn new(request: &'a ChatRequest, names: &'a ToolNames) -> Self {
            Request {
                model: &request.model,
                messages: request
                    .messages
                    .iter()
                    .map(|m| WireMessage::new(m, names))
                    .collect(),
                stream: true,
                stream_options: StreamOptions {
                    include_usage: true,
                },
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
                response_format: request.response_schema.as_ref().map(|s| ResponseFormat {
                    kind: "json_schema",
                    json_schema: Some(JsonSchema {
                        name: wire_name(&s.name),
                        schema: &s.schema,
                        strict: true,
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
    use crate::llm::ResponseSchema;

    #[test]
    fn os_error_numbers_are_dropped() {
        for (text, want) in [
            (
                "tcp connect error: Connection refused (os error 111)",
                "tcp connect error: Connection refused",
            ),
            ("a (os error 2): b (os error 13)", "a: b"),
            ("no number (os error x)", "no number (os error x)"),
            ("plain", "plain"),
        ] {
            assert_eq!(without_os_error_numbers(text), want);
        }
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_retries: 5,
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1_000),
        }
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let cases = [
            (0, None, 100),
            (1, None, 200),
            (2, None, 400),
            (3, None, 800),
            (4, None, 1_000),
            (40, None, 1_000),
            (0, Some(Duration::from_millis(300)), 300),
            (0, Some(Duration::from_secs(3600)), 1_000),
        ];
        for (attempt, retry_after, want_ms) in cases {
            assert_eq!(
                policy().delay(attempt, retry_after),
                Duration::from_millis(want_ms),
                "attempt {attempt}, retry_after {retry_after:?}"
            );
        }
    }

    #[test]
    fn retry_after_headers() {
        type Headers = &'static [(&'static str, &'static str)];
        let cases: &[(Headers, Option<Duration>)] = &[
            (&[("retry-after", "2")], Some(Duration::from_secs(2))),
            (&[("retry-after", " 0 ")], Some(Duration::ZERO)),
            (
                &[("retry-after-ms", "250")],
                Some(Duration::from_millis(250)),
            ),
            (
                &[("retry-after", "9"), ("retry-after-ms", "120")],
                Some(Duration::from_millis(120)),
            ),
            (
                &[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")],
                Some(Duration::ZERO),
            ),
            (&[("retry-after", "soon")], None),
            (&[("retry-after-ms", "-5")], None),
            (&[], None),
        ];
        for (headers, want) in cases {
            let mut map = HeaderMap::new();
            for (k, v) in *headers {
                map.insert(
                    reqwest::header::HeaderName::from_static(k),
                    v.parse().unwrap(),
                );
            }
            assert_eq!(parse_retry_after(&map), *want, "{headers:?}");
        }
    }

    #[test]
    fn error_messages_are_short_and_come_from_the_body() {
        let long = "x".repeat(1000);
        let cases = [
            (
                400,
                json!({"error": {"message": "bad  model\nname", "type": "invalid"}}).to_string(),
                "bad model name".to_owned(),
            ),
            (
                404,
                json!({"error": "model not found"}).to_string(),
                "model not found".into(),
            ),
            (422, json!({"detail": "nope"}).to_string(), "nope".into()),
            (400, "plain text".into(), "plain text".into()),
            (502, "<html>gateway</html>".into(), "Bad Gateway".into()),
            (400, String::new(), "Bad Request".into()),
            (
                400,
                json!({"error": {"message": long}}).to_string(),
                format!("{}…", "x".repeat(300)),
            ),
        ];
        for (status, body, want) in cases {
            assert_eq!(error_message(status, body.as_bytes()), want, "{body}");
        }
    }

    #[test]
    fn tool_names_are_made_valid_and_mapped_back() {
        let spec = |name: &str| ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: json!({"type": "object"}),
        };
        let names = ToolNames::new(&[spec("clock.now"), spec("clock_now"), spec("web-search")]);
        assert_eq!(names.wire("clock.now"), "clock_now");
        assert_eq!(names.wire("clock_now"), "clock_now_2");
        assert_eq!(names.wire("web-search"), "web-search");
        assert_eq!(names.ours("clock_now"), "clock.now");
        assert_eq!(names.ours("clock_now_2"), "clock_now");
        // A name the model made up (or a server that keeps dots) passes through.
        assert_eq!(names.ours("fs.read"), "fs.read");
        assert_eq!(wire_name(&"ü".repeat(100)).len(), 64);
    }

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
        request.response_schema = Some(ResponseSchema::new("answer.v1", json!({"type": "object"})));
        request.max_tokens = Some(64);
        let names = ToolNames::new(&request.tools);
        let body = serde_json::to_value(wire::Request::new(&request, &names)).unwrap();
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
    fn redaction_removes_the_key() {
        let key = Secret::new("sk-abc123");
        assert_eq!(
            redact(&key, "bad key sk-abc123!".into()),
            "bad key ***!".to_owned()
        );
        assert_eq!(redact(&Secret::default(), "text".into()), "text");
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
        assert_eq!(provider.endpoint, "http://127.0.0.1:1/v1/chat/completions");
    }
}
