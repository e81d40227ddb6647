//! What every HTTP provider shares: retries with backoff and `Retry-After`, error bodies turned
//! into short messages, key redaction, tool names made valid for the wire, and the schema moved
//! into the prompt for servers without schema support.
//!
//! It also reads streamed bodies for every provider but OpenAI's (which predates it): frames
//! in, a provider's [`Decode`] in the middle, [`LlmEvent`]s out, under the read timeout and the
//! cancellation token.
//!
//! Nothing here knows a provider's wire format beyond the common error body shapes.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::time::Duration;

use eventsource_stream::{EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use reqwest::header::{HeaderMap, RETRY_AFTER};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::{OpenAiConfig, Secret, StructuredOutput};
use crate::domain::ids::tool_wire_name;
use crate::llm::{ChatRequest, Error, LlmEvent, LlmStream, Message, ToolSpec};

/// Error messages taken from a provider's body are cut to this many characters: enough to say
/// what went wrong, short enough for an event or a log line.
pub(crate) const MAX_ERROR_MESSAGE_CHARS: usize = 300;
/// An error body is read up to this size; anything longer is not an error message worth keeping.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// How a provider's requests carry the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Auth {
    /// `Authorization: Bearer KEY` (OpenAI and the servers that copy it).
    Bearer,
    /// The key alone in this header (`x-api-key` for Anthropic).
    Header(&'static str),
}

/// One provider endpoint: the HTTP client, its URL, timeouts, retries and key. Sends a JSON
/// body and hands back the response whose body has not been read, retrying 429, 5xx and
/// connect failures before the first byte; never retries once a body is being read.
#[derive(Debug)]
pub(crate) struct Endpoint {
    client: reqwest::Client,
    url: String,
    /// The longest silence allowed while waiting for headers or between two events.
    pub read_timeout: Duration,
    retry: RetryPolicy,
    key: Secret,
    auth: Auth,
    headers: Vec<(&'static str, &'static str)>,
}

impl Endpoint {
    /// The endpoint `{base}{path}`. Fails (with a message for the operator naming
    /// `config_key`) when the base URL is not a usable http(s) URL.
    pub(crate) fn new(
        config_key: &str,
        base: &str,
        path: &str,
        cfg: &OpenAiConfig,
        auth: Auth,
    ) -> Result<Endpoint, String> {
        let base = base.trim_end_matches('/');
        let url = reqwest::Url::parse(base)
            .map_err(|e| format!("{config_key}.base_url `{base}` is not a valid URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "{config_key}.base_url `{base}` must be an http:// or https:// URL"
            ));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(cfg.connect_timeout_ms.max(1)))
            .user_agent(concat!("orca/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("could not build the HTTP client for the LLM provider: {e}"))?;
        Ok(Endpoint {
            client,
            url: format!("{base}{path}"),
            read_timeout: Duration::from_millis(cfg.read_timeout_ms.max(1)),
            retry: RetryPolicy {
                max_retries: cfg.max_retries,
                initial_delay: Duration::from_millis(cfg.retry_initial_delay_ms),
                max_delay: Duration::from_millis(cfg.retry_max_delay_ms),
            },
            key: cfg.api_key.clone(),
            auth,
            headers: Vec::new(),
        })
    }

    /// Sends this header with every request.
    pub(crate) fn with_header(mut self, name: &'static str, value: &'static str) -> Self {
        self.headers.push((name, value));
        self
    }

    #[cfg(test)]
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The key, to redact from text that came from the server.
    pub(crate) fn key(&self) -> &Secret {
        &self.key
    }

    /// Sends `body`, retrying 429, 5xx and connect failures with backoff. Returns the first
    /// successful response, whose body has not been read yet.
    pub(crate) async fn send(
        &self,
        body: &impl serde::Serialize,
        accept: &'static str,
    ) -> Result<reqwest::Response, Failure> {
        let mut attempt = 0;
        loop {
            let failure = match self.send_once(body, accept).await {
                Ok(response) => return Ok(response),
                Err(failure) => failure,
            };
            if !failure.worth_resending() || attempt >= self.retry.max_retries {
                return Err(failure);
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

    async fn send_once(
        &self,
        body: &impl serde::Serialize,
        accept: &'static str,
    ) -> Result<reqwest::Response, Failure> {
        let mut request = self
            .client
            .post(&self.url)
            .header(reqwest::header::ACCEPT, accept)
            .json(body);
        for (name, value) in &self.headers {
            request = request.header(*name, *value);
        }
        // Local servers (Ollama, llama.cpp) need no key; an empty Bearer header confuses some.
        if !self.key.is_empty() {
            request = match self.auth {
                Auth::Bearer => request.bearer_auth(self.key.expose()),
                Auth::Header(name) => request.header(name, self.key.expose()),
            };
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
        let param = serde_json::from_str::<Value>(&body).ok().and_then(|v| {
            v.pointer("/error/param")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        let status = status.as_u16();
        let error = match status {
            429 => Error::RateLimited { retry_after },
            _ => Error::Status {
                status,
                message: error_message(status, body.as_bytes()),
            },
        };
        Err(Failure {
            error,
            retry_after,
            param,
        })
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

    pub(crate) fn redact(&self, text: String) -> String {
        redact(&self.key, text)
    }
}

/// When and how often a request that failed before its first byte is tried again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    pub max_retries: u32,
    pub initial_delay: Duration,
    pub max_delay: Duration,
}

impl RetryPolicy {
    /// The wait before retry number `attempt + 1`: the server's Retry-After when it gave one,
    /// else exponential backoff; both capped at `max_delay` so a hostile or confused server
    /// cannot park a run for an hour.
    pub(crate) fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let wait = retry_after.unwrap_or_else(|| {
            let factor = 2u32.saturating_pow(attempt);
            self.initial_delay.saturating_mul(factor)
        });
        wait.min(self.max_delay)
    }
}

/// One failed attempt, and when the provider asked us to come back.
pub(crate) struct Failure {
    pub error: Error,
    pub retry_after: Option<Duration>,
    /// The request field a 400 blames (OpenAI's `error.param`), when the body names one.
    pub param: Option<String>,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure {
            error,
            retry_after: None,
            param: None,
        }
    }
}

impl Failure {
    /// Whether this client sends the request again itself: when the error's code is
    /// retryable, except a timeout waiting for headers, which already used the whole read
    /// timeout (a step's retry policy may still try again).
    pub(crate) fn worth_resending(&self) -> bool {
        self.error.retryable() && !matches!(self.error, Error::Timeout(_))
    }
}

/// `Retry-After` as delta-seconds or an HTTP date; OpenAI's `retry-after-ms` wins when present
/// because it is more precise.
pub(crate) fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
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
pub(crate) async fn read_error_body(response: reqwest::Response, timeout: Duration) -> Vec<u8> {
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
pub(crate) fn error_message(status: u16, body: &[u8]) -> String {
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

pub(crate) fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub(crate) fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// An error and its sources, `a: b: c`, so a connect failure says *why* (refused, DNS, TLS).
/// The operating system's error numbers (`Connection refused (os error 111)`) are dropped:
/// this text reaches run errors and events, where the words help and the number only tells
/// which OS the server runs on.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
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
pub(crate) fn without_os_error_numbers(text: &str) -> String {
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
pub(crate) fn redact(key: &Secret, text: String) -> String {
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
pub(crate) struct ToolNames {
    to_wire: HashMap<String, String>,
    from_wire: HashMap<String, String>,
}

impl ToolNames {
    pub(crate) fn new(tools: &[ToolSpec]) -> Self {
        let mut names = ToolNames::default();
        for tool in tools {
            if names.to_wire.contains_key(&tool.name) {
                continue;
            }
            let wire = names.unused_wire_name(&tool.name);
            names.to_wire.insert(tool.name.clone(), wire.clone());
            names.from_wire.insert(wire, tool.name.clone());
        }
        names
    }

    /// A wire name for something offered like a tool that is not one of ours (Anthropic's
    /// answer tool): valid, and unlike every name given so far, so no tool call can be
    /// mistaken for it. Asking again gives another name.
    pub(crate) fn reserve(&mut self, name: &str) -> String {
        let wire = self.unused_wire_name(name);
        self.from_wire.insert(wire.clone(), name.to_owned());
        wire
    }

    fn unused_wire_name(&self, name: &str) -> String {
        let base = tool_wire_name(name);
        let mut candidate = base.clone();
        let mut n = 2;
        while self.from_wire.contains_key(&candidate) {
            let suffix = format!("_{n}");
            let keep = 64usize.saturating_sub(suffix.len()).min(base.len());
            candidate = format!("{}{suffix}", &base[..keep]);
            n += 1;
        }
        candidate
    }

    pub(crate) fn wire<'a>(&'a self, name: &'a str) -> Cow<'a, str> {
        match self.to_wire.get(name) {
            Some(wire) => Cow::Borrowed(wire),
            None => Cow::Owned(tool_wire_name(name)),
        }
    }

    /// Our name for a name the model used; names we did not rename pass through unchanged.
    pub(crate) fn ours(&self, name: &str) -> String {
        self.from_wire
            .get(name)
            .cloned()
            .unwrap_or_else(|| name.to_owned())
    }
}

/// The frames of a streamed body (an SSE event's data, an NDJSON line), or why the body broke.
pub(crate) type Frames = Pin<Box<dyn Stream<Item = Result<String, Error>> + Send>>;

/// A provider's reading of its own streamed frames into [`LlmEvent`]s.
pub(crate) trait Decode: Send + 'static {
    /// Decodes one frame, queueing what it yields in `out`; `Ok(true)` when it was the last.
    fn decode(&mut self, frame: &str, out: &mut VecDeque<LlmEvent>) -> Result<bool, Error>;

    /// What a body that ended before its last frame means: an error, or (for lenient dialects)
    /// an end, with what is left queued in `out`.
    fn ended_early(&mut self, out: &mut VecDeque<LlmEvent>) -> Result<(), Error>;
}

/// The SSE events of `response` as frames (their `data`), with transport failures redacted.
pub(crate) fn sse_frames(response: reqwest::Response, key: &Secret) -> Frames {
    let key = key.clone();
    let frames = response.bytes_stream().eventsource().map(move |event| {
        event.map(|e| e.data).map_err(|e| match e {
            EventStreamError::Transport(e) => broken_body(&key, e),
            EventStreamError::Utf8(_) => Error::Malformed("the stream is not UTF-8".into()),
            EventStreamError::Parser(_) => {
                Error::Malformed("the stream is not valid Server-Sent Events".into())
            }
        })
    });
    Box::pin(frames)
}

/// The lines of a newline-delimited JSON body as frames (blank lines skipped; a last line
/// without its newline still counts), with transport failures redacted.
pub(crate) fn ndjson_frames(response: reqwest::Response, key: &Secret) -> Frames {
    let state = Lines {
        bytes: Box::pin(response.bytes_stream()),
        buffer: Vec::new(),
        ended: false,
        key: key.clone(),
    };
    let frames = futures::stream::unfold(state, |mut state| async move {
        let line = state.next_line().await?;
        Some((line, state))
    });
    Box::pin(frames)
}

struct Lines<S> {
    bytes: Pin<Box<S>>,
    /// Bytes read and not yet handed out as a line.
    buffer: Vec<u8>,
    ended: bool,
    key: Secret,
}

impl<S, B> Lines<S>
where
    S: Stream<Item = Result<B, reqwest::Error>>,
    B: AsRef<[u8]>,
{
    async fn next_line(&mut self) -> Option<Result<String, Error>> {
        loop {
            let cut = match self.buffer.iter().position(|b| *b == b'\n') {
                Some(at) => Some(at + 1),
                None if self.ended => Some(self.buffer.len()),
                None => None,
            };
            if let Some(cut) = cut {
                if cut == 0 {
                    return None;
                }
                let line: Vec<u8> = self.buffer.drain(..cut).collect();
                match String::from_utf8(line) {
                    Ok(line) if line.trim().is_empty() => continue,
                    Ok(line) => return Some(Ok(line)),
                    Err(_) => return Some(Err(Error::Malformed("the stream is not UTF-8".into()))),
                }
            }
            match self.bytes.next().await {
                Some(Ok(chunk)) => self.buffer.extend_from_slice(chunk.as_ref()),
                Some(Err(e)) => return Some(Err(broken_body(&self.key, e))),
                None => self.ended = true,
            }
        }
    }
}

/// The connection failing once the body has started.
pub(crate) fn broken_body(key: &Secret, e: reqwest::Error) -> Error {
    let detail = error_chain(&e.without_url());
    Error::Connect(redact(
        key,
        format!("the connection broke mid-stream: {detail}"),
    ))
}

/// The provider stream of `frames` read by `decoder`: it stops with `Cancelled` as soon as
/// `cancel` fires and with `Timeout` after `read_timeout` without a frame, and yields nothing
/// after its first error.
pub(crate) fn decoded_stream(
    frames: Frames,
    decoder: impl Decode,
    cancel: CancellationToken,
    read_timeout: Duration,
) -> LlmStream {
    let state = Decoding {
        frames,
        decoder,
        cancel,
        read_timeout,
        pending: VecDeque::new(),
        finished: false,
    };
    let stream = futures::stream::unfold(state, |mut state| async move {
        let item = state.next_item().await?;
        Some((item, state))
    });
    stream.boxed()
}

struct Decoding<D> {
    frames: Frames,
    decoder: D,
    cancel: CancellationToken,
    read_timeout: Duration,
    /// Events decoded and not handed out yet.
    pending: VecDeque<LlmEvent>,
    /// Set after the last frame, the end of the body, or an error: nothing more is read.
    finished: bool,
}

impl<D: Decode> Decoding<D> {
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
                _ = self.cancel.cancelled() => Err(Error::Cancelled),
                next = tokio::time::timeout(self.read_timeout, self.frames.next()) => {
                    next.map_err(|_| Error::Timeout(format!(
                        "no data from the provider for {} ms",
                        self.read_timeout.as_millis()
                    )))
                }
            };
            let step = match next {
                Err(e) | Ok(Some(Err(e))) => Err(e),
                Ok(None) => self.decoder.ended_early(&mut self.pending).map(|()| true),
                Ok(Some(Ok(frame))) => self.decoder.decode(&frame, &mut self.pending),
            };
            match step {
                Ok(last) => self.finished = last,
                Err(e) => {
                    self.finished = true;
                    self.pending.clear();
                    return Some(Err(e));
                }
            }
        }
    }
}

/// A short, redacted message a provider reported inside its stream.
pub(crate) fn stream_error_message(key: &Secret, message: &str) -> String {
    let message = redact(key, collapse_whitespace(message));
    truncate_chars(&message, MAX_ERROR_MESSAGE_CHARS)
}

/// For modes without schema support on the wire (`json_object`, `prompt`): the request with
/// its response schema moved into the system prompt, and whether JSON mode should be asked
/// for. Other modes, and requests without a schema, come back unchanged.
pub(crate) fn schema_in_prompt(
    mut request: ChatRequest,
    mode: StructuredOutput,
) -> (ChatRequest, bool) {
    if matches!(
        mode,
        StructuredOutput::Strict | StructuredOutput::JsonSchema
    ) {
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

/// The JSON answer to `body` sent to `endpoint` (with its retries), read within its read
/// timeout: what a non-streamed call (embeddings) gets back.
pub(crate) async fn json_answer(endpoint: &Endpoint, body: &Value) -> Result<Value, Error> {
    let response = endpoint
        .send(body, "application/json")
        .await
        .map_err(|f| f.error)?;
    let read = tokio::time::timeout(endpoint.read_timeout, response.bytes());
    let bytes = read
        .await
        .map_err(|_| Error::Timeout("the answer did not arrive in time".into()))?
        .map_err(|e| Error::Malformed(format!("the answer could not be read: {e}")))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| Error::Malformed(format!("the answer is not JSON: {e}")))
}

/// A JSON array of numbers as a vector; `None` for anything else.
pub(crate) fn vector_of(value: &Value) -> Option<Vec<f32>> {
    let items = value.as_array()?;
    items.iter().map(|x| x.as_f64().map(|f| f as f32)).collect()
}

/// The vectors, when there is one per text.
pub(crate) fn one_each(texts: &[String], vectors: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>, Error> {
    if vectors.len() != texts.len() || vectors.iter().any(Vec::is_empty) {
        return Err(Error::Malformed(format!(
            "{} texts were sent and {} vectors came back",
            texts.len(),
            vectors.len()
        )));
    }
    Ok(vectors)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
        assert_eq!(tool_wire_name(&"ü".repeat(100)).len(), 64);
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
}
