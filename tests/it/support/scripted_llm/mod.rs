//! A scripted chat server on loopback, standing in for a real model in every integration test.
//! It speaks three dialects on the same script: OpenAI's (`POST /v1/chat/completions`,
//! `openai.rs`), Anthropic's (`POST /v1/messages`, `anthropic.rs`) and Ollama's native one
//! (`POST /api/chat`, `ollama.rs`).
//!
//! Tests push [`Reply`]s into a FIFO; each request takes the next one (or the default reply
//! when the queue is empty, so a run never hangs on a missing script) and answers it as the
//! provider would: streamed frames, or an error status with the provider's error body. Every
//! request is recorded in OpenAI's shape (the Anthropic dialect translates), so assertions hold
//! for both; the raw bodies are kept too. Tests await requests and hang-ups through [`Notify`]
//! instead of sleeping.
//!
//! Each dialect must stay a faithful, boring imitation, at least as strict as the real API: no
//! orca types, no knowledge of runs.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

mod anthropic;
mod embeddings;
mod ollama;
mod openai;

/// Longest `wait_for_*` waits before failing the test instead of hanging the suite.
const WAIT_LIMIT: Duration = Duration::from_secs(20);

/// One scripted answer. Build with a constructor, then adjust with the builder methods:
/// `Reply::text("Hi").usage(3, 1).chunk_delay(20)`.
#[derive(Debug, Clone)]
pub struct Reply {
    kind: Kind,
    usage: Option<(u64, u64)>,
    retry_after: Option<u64>,
    retry_after_ms: Option<u64>,
    error_message: Option<String>,
    /// The `error.param` of a status reply.
    error_param: Option<String>,
    delay_before_headers: Duration,
    delay_before_first_chunk: Duration,
    chunk_delay: Duration,
    /// Send this many frames, then stay silent until the client hangs up.
    stall_after: Option<usize>,
    /// Send this many frames, then wait for [`ScriptedLlm::release_url`] to be called.
    hold_after: Option<usize>,
}

#[derive(Debug, Clone)]
enum Kind {
    Text(String),
    ToolCalls {
        text: Option<String>,
        calls: Vec<(String, String)>,
    },
    Json(Value),
    Status(u16),
    /// A valid start, then a chunk that is not JSON.
    Malformed,
    /// A valid start, then the body ends: no finish_reason, no `[DONE]`.
    Truncated,
    /// These `data:` payloads, verbatim.
    Raw(Vec<String>),
    /// Some text, then the provider reports an error inside the stream (Anthropic's `error`
    /// event of this type; OpenAI's `{"error": ...}` chunk).
    StreamError {
        text: String,
        error_type: String,
    },
}

impl Reply {
    fn new(kind: Kind) -> Self {
        Reply {
            kind,
            usage: None,
            retry_after: None,
            retry_after_ms: None,
            error_message: None,
            error_param: None,
            delay_before_headers: Duration::ZERO,
            delay_before_first_chunk: Duration::ZERO,
            chunk_delay: Duration::ZERO,
            stall_after: None,
            hold_after: None,
        }
    }

    /// Streamed text, one content chunk per word.
    pub fn text(text: impl Into<String>) -> Self {
        Self::new(Kind::Text(text.into()))
    }

    /// One tool call; its arguments are streamed split over several chunks.
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Self::tool_calls([(name, arguments)])
    }

    /// Several tool calls in one answer, with indexes 0, 1, ...
    pub fn tool_calls<N: Into<String>>(calls: impl IntoIterator<Item = (N, Value)>) -> Self {
        Self::new(Kind::ToolCalls {
            text: None,
            calls: calls
                .into_iter()
                .map(|(n, a)| (n.into(), a.to_string()))
                .collect(),
        })
    }

    /// A tool call whose arguments are this exact text (e.g. invalid JSON).
    pub fn tool_call_raw(name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self::new(Kind::ToolCalls {
            text: None,
            calls: vec![(name.into(), arguments.into())],
        })
    }

    /// Adds another tool call to a tool-call reply (or turns a text reply into text + call).
    pub fn and_tool_call(mut self, name: impl Into<String>, arguments: Value) -> Self {
        let call = (name.into(), arguments.to_string());
        self.kind = match self.kind {
            Kind::ToolCalls { text, mut calls } => {
                calls.push(call);
                Kind::ToolCalls { text, calls }
            }
            Kind::Text(text) => Kind::ToolCalls {
                text: Some(text),
                calls: vec![call],
            },
            other => panic!("and_tool_call on a {other:?} reply"),
        };
        self
    }

    /// Structured output: the JSON text of `value` streamed as content in small pieces.
    pub fn json(value: Value) -> Self {
        Self::new(Kind::Json(value))
    }

    /// An error status with an OpenAI-style body `{"error": {"message": ...}}`.
    pub fn status(status: u16) -> Self {
        Self::new(Kind::Status(status))
    }

    /// A chunk that is not JSON after a valid start.
    pub fn malformed() -> Self {
        Self::new(Kind::Malformed)
    }

    /// Some text, then the body ends without finish_reason or `[DONE]`.
    pub fn truncated() -> Self {
        Self::new(Kind::Truncated)
    }

    /// Headers, then silence until the client hangs up.
    pub fn stalled() -> Self {
        Self::text("never sent").stall_after(0)
    }

    /// Some text, then an error of this type inside the stream (`overloaded_error`,
    /// `api_error`, `rate_limit_error`, `invalid_request_error`, ...).
    pub fn stream_error(text: impl Into<String>, error_type: impl Into<String>) -> Self {
        Self::new(Kind::StreamError {
            text: text.into(),
            error_type: error_type.into(),
        })
    }

    /// These `data:` payloads verbatim (add `"[DONE]"` yourself if you want it).
    pub fn raw<S: Into<String>>(payloads: impl IntoIterator<Item = S>) -> Self {
        Self::new(Kind::Raw(payloads.into_iter().map(Into::into).collect()))
    }

    /// The usage chunk's token counts (sent when the request asked for usage).
    pub fn usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Self {
        self.usage = Some((prompt_tokens, completion_tokens));
        self
    }

    /// `Retry-After: secs` on a status reply.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    /// `retry-after-ms: ms` (OpenAI's precise variant) on a status reply.
    pub fn retry_after_ms(mut self, ms: u64) -> Self {
        self.retry_after_ms = Some(ms);
        self
    }

    /// The `error.message` of a status reply.
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.error_message = Some(message.into());
        self
    }

    /// The `error.param` of a status reply (the request field OpenAI blames).
    pub fn param(mut self, param: impl Into<String>) -> Self {
        self.error_param = Some(param.into());
        self
    }

    /// Wait before answering at all (no headers yet).
    pub fn delay_before_headers(mut self, ms: u64) -> Self {
        self.delay_before_headers = Duration::from_millis(ms);
        self
    }

    /// Headers at once, then wait before the first frame.
    pub fn delay_before_first_chunk(mut self, ms: u64) -> Self {
        self.delay_before_first_chunk = Duration::from_millis(ms);
        self
    }

    /// Wait between frames.
    pub fn chunk_delay(mut self, ms: u64) -> Self {
        self.chunk_delay = Duration::from_millis(ms);
        self
    }

    /// Send `frames` frames of the reply, then nothing until the client disconnects. Frames
    /// are counted as OpenAI's (an opening, then one per piece of content); other dialects
    /// stall after the same content.
    pub fn stall_after(mut self, frames: usize) -> Self {
        self.stall_after = Some(frames);
        self
    }

    /// This reply with its frame counts (`stall_after`, `hold_after`, counted in OpenAI's
    /// frames) turned into another dialect's by `frames`.
    pub(super) fn in_frames(self, frames: impl Fn(usize) -> usize) -> Reply {
        Reply {
            stall_after: self.stall_after.map(&frames),
            hold_after: self.hold_after.map(&frames),
            ..self
        }
    }

    /// Send `frames` frames (counted as [`Self::stall_after`] counts them), then wait until
    /// someone posts to [`ScriptedLlm::release_url`], then send the rest: a client can see a
    /// reply part-way on any machine, however loaded, without a timing to guess.
    pub fn hold_after(mut self, frames: usize) -> Self {
        self.hold_after = Some(frames);
        self
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// The JSON body in OpenAI's chat-completions shape, whichever dialect it came in (a JSON
    /// string holding the raw text if it was not JSON).
    pub body: Value,
    /// The body exactly as sent.
    pub wire: Value,
    /// Which endpoint took it.
    pub dialect: Dialect,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The `x-api-key` header (Anthropic's), if any.
    pub api_key: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    OpenAi,
    Anthropic,
    Ollama,
}

/// The running server. Dropping it stops the server.
pub struct ScriptedLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

struct Shared {
    /// A std mutex: every critical section is a few pushes and pops, never across an await.
    script: Mutex<Script>,
    /// Woken whenever a request is recorded.
    requests_changed: Notify,
    /// Woken whenever a streamed reply ends, completed or cut off.
    streams_changed: Notify,
    /// Lets a held reply go on (`POST /release`); a release before the hold is kept.
    release: Notify,
}

struct Script {
    queue: VecDeque<Reply>,
    /// Replies for requests whose system prompt contains a marker (an agent's instructions),
    /// taken before the shared queue: agents running at once get their own scripts.
    routes: Vec<(String, VecDeque<Reply>)>,
    default_reply: Reply,
    requests: Vec<RecordedRequest>,
    /// Why each refused request was refused (400 before any reply was taken), oldest first.
    refusals: Vec<String>,
    /// Whether the test expects refusals; otherwise any refusal fails the test at drop.
    refusals_expected: bool,
    /// Streamed replies the client hung up on before their end.
    aborted_streams: usize,
    completed_streams: usize,
    next_call_id: u64,
    next_completion_id: u64,
    /// Every text an embeddings request carried, in order.
    embedded: Vec<String>,
}

impl ScriptedLlm {
    /// Binds `127.0.0.1:0` and serves until dropped.
    pub async fn start() -> ScriptedLlm {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the scripted LLM");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared {
            script: Mutex::new(Script {
                queue: VecDeque::new(),
                routes: Vec::new(),
                default_reply: Reply::text("This is the scripted default reply."),
                requests: Vec::new(),
                refusals: Vec::new(),
                refusals_expected: false,
                aborted_streams: 0,
                completed_streams: 0,
                next_call_id: 1,
                next_completion_id: 1,
                embedded: Vec::new(),
            }),
            requests_changed: Notify::new(),
            streams_changed: Notify::new(),
            release: Notify::new(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(openai::chat_completions))
            .route("/v1/messages", post(anthropic::messages))
            .route("/api/chat", post(ollama::chat))
            .route("/v1/embeddings", post(embeddings::openai_embeddings))
            .route("/api/embed", post(embeddings::ollama_embed))
            .route("/release", post(release))
            .fallback(not_found)
            .with_state(shared.clone());
        let stop = CancellationToken::new();
        let shutdown = stop.clone().cancelled_owned();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await;
        });
        ScriptedLlm {
            addr,
            shared,
            stop,
            task,
        }
    }

    /// `http://127.0.0.1:PORT/v1`, what `OPENAI_BASE_URL` would be.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Where a POST lets a reply held by [`Reply::hold_after`] go on.
    pub fn release_url(&self) -> String {
        format!("http://{}/release", self.addr)
    }

    /// `http://127.0.0.1:PORT`, the base URL of an `anthropic` provider.
    pub fn anthropic_base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT`, the base URL of an `ollama` provider.
    pub fn ollama_base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues a reply for the next request that has none yet.
    pub fn push(&self, reply: Reply) -> &Self {
        self.shared.lock().queue.push_back(reply);
        self
    }

    /// Queues a reply for the next request whose system message contains `marker`; such
    /// requests take from their own queue first, then from the shared one.
    pub fn push_for(&self, marker: &str, reply: Reply) -> &Self {
        let mut script = self.shared.lock();
        match script.routes.iter_mut().find(|(m, _)| m == marker) {
            Some((_, queue)) => queue.push_back(reply),
            None => script
                .routes
                .push((marker.to_owned(), VecDeque::from([reply]))),
        }
        drop(script);
        self
    }

    /// The reply used when the queue is empty.
    pub fn set_default_reply(&self, reply: Reply) -> &Self {
        self.shared.lock().default_reply = reply;
        self
    }

    /// Scripted replies not taken yet.
    pub fn pending_replies(&self) -> usize {
        self.shared.lock().queue.len()
    }

    /// Every request body so far, oldest first.
    pub fn requests(&self) -> Vec<Value> {
        self.recorded().into_iter().map(|r| r.body).collect()
    }

    /// Every request body exactly as sent, oldest first.
    pub fn wire_requests(&self) -> Vec<Value> {
        self.recorded().into_iter().map(|r| r.wire).collect()
    }

    /// Every request with its headers of interest, oldest first.
    pub fn recorded(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Why each request the server refused (as the real provider would) was refused.
    pub fn refusals(&self) -> Vec<String> {
        self.shared.lock().refusals.clone()
    }

    /// Lets this test's requests be refused. Without it, a server that refused anything fails
    /// the test when dropped: orca must send only what the real provider accepts.
    pub fn expect_refusals(&self) -> &Self {
        self.shared.lock().refusals_expected = true;
        self
    }

    /// Every text an embeddings request carried, in order.
    pub fn embedded(&self) -> Vec<String> {
        self.shared.lock().embedded.clone()
    }

    pub fn request_count(&self) -> usize {
        self.shared.lock().requests.len()
    }

    /// Streamed replies cut off because the client went away before their end.
    pub fn aborted_streams(&self) -> usize {
        self.shared.lock().aborted_streams
    }

    /// Streamed replies sent to their end.
    pub fn completed_streams(&self) -> usize {
        self.shared.lock().completed_streams
    }

    /// Returns once at least `n` requests have arrived; panics after 20 s.
    pub async fn wait_for_requests(&self, n: usize) {
        let what = format!("{n} request(s)");
        self.wait_until(&self.shared.requests_changed, &what, || {
            self.request_count() >= n
        })
        .await;
    }

    /// Returns once at least `n` streamed replies were cut off by the client; panics after 20 s.
    pub async fn wait_for_aborted_streams(&self, n: usize) {
        let what = format!("{n} aborted stream(s)");
        self.wait_until(&self.shared.streams_changed, &what, || {
            self.aborted_streams() >= n
        })
        .await;
    }

    async fn wait_until(&self, notify: &Notify, what: &str, done: impl Fn() -> bool) {
        let wait = async {
            loop {
                // Register interest before checking, so a wake-up between the check and the
                // await is not lost.
                let notified = notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if done() {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(WAIT_LIMIT, wait).await.is_err() {
            panic!(
                "the scripted LLM waited {WAIT_LIMIT:?} for {what}; saw {} request(s)",
                self.request_count()
            );
        }
    }
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        self.stop.cancel();
        // Streams stalled on purpose would keep a graceful shutdown waiting forever.
        self.task.abort();
        let script = self.shared.lock();
        if !script.refusals_expected && !script.refusals.is_empty() && !std::thread::panicking() {
            panic!(
                "the scripted provider refused {} request(s) the real one would refuse too: {:#?}",
                script.refusals.len(),
                script.refusals
            );
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Script> {
        // A test that panicked while holding the lock poisons it; the data is still usable.
        self.script.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `request` and takes its reply: from the queue of the first marker found in
    /// `system` (the request's system text), else the shared queue, else the default.
    fn take_reply(
        &self,
        request: RecordedRequest,
        system: &str,
    ) -> (Reply, MutexGuard<'_, Script>) {
        let mut script = self.lock();
        script.requests.push(request);
        let routed = script
            .routes
            .iter_mut()
            .find(|(marker, queue)| !queue.is_empty() && system.contains(marker.as_str()))
            .and_then(|(_, queue)| queue.pop_front());
        let reply = match routed.or_else(|| script.queue.pop_front()) {
            Some(reply) => reply,
            None => script.default_reply.clone(),
        };
        (reply, script)
    }
}

/// The streamed answer of `reply`: headers at once, then `frames` with the scripted pacing
/// (or as many as `stall_after` allows, then silence).
fn streamed_response(shared: Arc<Shared>, reply: &Reply, mut frames: Vec<String>) -> Response {
    if let Some(n) = reply.stall_after {
        frames.truncate(n);
    }
    let body = SseBody {
        frames: frames.into(),
        first_delay: reply.delay_before_first_chunk,
        chunk_delay: reply.chunk_delay,
        started: false,
        stall: reply.stall_after.is_some(),
        hold_after: reply.hold_after,
        sent: 0,
        guard: StreamGuard {
            shared,
            completed: false,
        },
    };
    let stream = futures::stream::unfold(body, |mut body| async move {
        let frame = body.next().await?;
        Some((Ok::<_, Infallible>(Bytes::from(frame)), body))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .expect("a valid response")
}

/// An error status with `body` and the reply's retry headers.
fn status_response(status: StatusCode, reply: &Reply, body: Value) -> Response {
    let mut response = (status, axum::Json(body)).into_response();
    let headers = response.headers_mut();
    if let Some(secs) = reply.retry_after {
        headers.insert(header::RETRY_AFTER, secs.into());
    }
    if let Some(ms) = reply.retry_after_ms {
        headers.insert("retry-after-ms", ms.into());
    }
    response
}

/// The error message of a status reply: the scripted one, or a default naming the status.
fn error_message(reply: &Reply, status: StatusCode) -> String {
    reply
        .error_message
        .clone()
        .unwrap_or_else(|| format!("scripted error {}", status.as_u16()))
}

fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

async fn release(axum::extract::State(shared): axum::extract::State<Arc<Shared>>) -> StatusCode {
    shared.release.notify_one();
    StatusCode::NO_CONTENT
}

async fn not_found() -> Response {
    let body = json!({"error": {"message": "not found", "type": "invalid_request_error"}});
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

/// Each word with its trailing whitespace, so the pieces concatenate back to `text`.
pub(super) fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        if !c.is_whitespace() && current.ends_with(char::is_whitespace) {
            out.push(std::mem::take(&mut current));
        }
        current.push(c);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

pub(super) fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// The body of a streamed reply: frames with the scripted pacing, then the end or a stall.
struct SseBody {
    frames: VecDeque<String>,
    first_delay: Duration,
    chunk_delay: Duration,
    started: bool,
    stall: bool,
    /// Frames to send before waiting for a release, and how many were sent.
    hold_after: Option<usize>,
    sent: usize,
    guard: StreamGuard,
}

impl SseBody {
    async fn next(&mut self) -> Option<String> {
        let delay = if self.started {
            self.chunk_delay
        } else {
            self.first_delay
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if self.hold_after == Some(self.sent) && !self.frames.is_empty() {
            self.guard.shared.release.notified().await;
        }
        self.started = true;
        self.sent += 1;
        match self.frames.pop_front() {
            Some(frame) => Some(frame),
            None if self.stall => {
                // Until the client hangs up, which drops this future and the guard with it.
                std::future::pending::<()>().await;
                None
            }
            None => {
                self.guard.completed = true;
                None
            }
        }
    }
}

/// Counts how a streamed reply ended when the body is dropped: sent to its end, or cut off by
/// the client going away.
struct StreamGuard {
    shared: Arc<Shared>,
    completed: bool,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        {
            let mut script = self.shared.lock();
            if self.completed {
                script.completed_streams += 1;
            } else {
                script.aborted_streams += 1;
            }
        }
        self.shared.streams_changed.notify_waiters();
    }
}
