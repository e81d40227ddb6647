//! `spawn_app`: the real server on a random loopback port with a temp database (SQLite, or a
//! schema on `ORCA_TEST_POSTGRES`) and a temp workspace, through the same `App::build` path as `main`. Plus a small SSE reader.

use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use orca::app::App;
use orca::config::{Config, ModelAlias, ProviderChoice, ProviderConfig, ProviderKind, Secret};
use serde_json::Value;
use tempfile::TempDir;
use tokio::sync::oneshot;

use super::scripted_llm::ScriptedLlm;

/// Longest any test waits for something that should happen at once; a hang fails instead of
/// stalling the suite.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Polls `GET url` (every 50 ms, within [`PATIENCE`]) until `done` holds of its JSON body,
/// and returns that body.
pub async fn poll_json(
    client: &reqwest::Client,
    url: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let resp = client.get(url).send().await.expect("GET");
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if done(&body) {
            return body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{url} never got there: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client that sends `key` as `Authorization: Bearer` with every request.
pub fn bearer_client(key: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    let bearer = format!("Bearer {key}").parse().expect("a header value");
    headers.insert(reqwest::header::AUTHORIZATION, bearer);
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("a client")
}

/// API keys for tenants `a` and `b` (the two keys given, in that order).
pub fn two_tenants(c: &mut Config, [key_a, key_b]: [&str; 2]) {
    c.auth.api_keys = [(key_a, "a"), (key_b, "b")]
        .map(|(key, tenant)| orca::config::ApiKey {
            user: None,
            key: Secret::new(key),
            tenant: tenant.into(),
        })
        .to_vec();
}

pub struct TestApp {
    pub base: String,
    pub client: reqwest::Client,
    pub dir: TempDir,
    /// Asks the app's retention sweeper for a sweep now.
    pub retention: orca::RetentionHandle,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

/// A config for tests: loopback port 0, a database and a workspace in `dir`, offline LLM, and
/// `auto` runs resolved without asking the model (so a scripted model's replies go to the run
/// itself; `tests/it/selector.rs` turns `selector.use_llm` back on).
pub fn test_config(dir: &TempDir) -> Config {
    let mut c = Config::default();
    c.server.bind = "127.0.0.1:0".into();
    c.database.url = super::db::database_url(dir.path());
    c.database.lease_ttl_ms = super::db::TEST_LEASE_TTL_MS;
    c.tools.workspace_dir = workspace(dir);
    c.llm.provider = ProviderChoice::Offline;
    c.llm.offline_token_delay_ms = 0;
    c.selector.use_llm = false;
    c
}

/// Which dialect of the scripted server `use_scripted` points the `default` alias at: env
/// `ORCA_TEST_LLM`, `openai` (the default), `anthropic` or `ollama`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestLlm {
    OpenAi,
    Anthropic,
    Ollama,
}

/// The dialect this test run uses; panics on an unknown `ORCA_TEST_LLM`, so a typo cannot
/// quietly test the default.
pub fn test_llm() -> TestLlm {
    match std::env::var("ORCA_TEST_LLM").as_deref() {
        Err(_) | Ok("" | "openai") => TestLlm::OpenAi,
        Ok("anthropic") => TestLlm::Anthropic,
        Ok("ollama") => TestLlm::Ollama,
        Ok(other) => panic!("ORCA_TEST_LLM={other}: expected `openai`, `anthropic` or `ollama`"),
    }
}

/// Points the config at a scripted server, with fast retries and timeouts. The `openai`
/// provider always points at its OpenAI dialect (tests add aliases on it); with
/// `ORCA_TEST_LLM=anthropic` (or `ollama`) the `default` alias goes to the provider `scripted`
/// of that kind on the same server and script instead.
pub fn use_scripted(c: &mut Config, llm: &ScriptedLlm) {
    use_scripted_openai(c, llm);
    let (kind, base_url, model) = match test_llm() {
        TestLlm::OpenAi => return,
        TestLlm::Anthropic => (
            ProviderKind::Anthropic,
            llm.anthropic_base_url(),
            "claude-test",
        ),
        TestLlm::Ollama => (ProviderKind::Ollama, llm.ollama_base_url(), "llama-test"),
    };
    let provider = ProviderConfig {
        kind,
        api_key: Secret::new(TEST_KEY),
        max_retries: 2,
        retry_initial_delay_ms: 10,
        retry_max_delay_ms: 50,
        read_timeout_ms: 2_000,
        connect_timeout_ms: 1_000,
        ..ProviderConfig::openai(base_url)
    };
    c.llm.providers.insert("scripted".into(), provider);
    c.llm
        .models
        .insert("default".into(), ModelAlias::new("scripted", model));
}

/// [`use_scripted`] with the OpenAI dialect whatever `ORCA_TEST_LLM` says, for tests of
/// OpenAI's own rules.
/// The scripted server's OpenAI dialect for chat and for embeddings (`text-embedding-3-small`
/// as `memory.embedding_model`).
pub fn use_scripted_embeddings(c: &mut Config, llm: &ScriptedLlm) {
    use_scripted_openai(c, llm);
    let alias = orca::config::ModelAlias::new("openai", "text-embedding-3-small");
    c.llm.models.insert("embedder".into(), alias);
    c.memory.embedding_model = "embedder".into();
}

pub fn use_scripted_openai(c: &mut Config, llm: &ScriptedLlm) {
    c.llm.provider = ProviderChoice::Openai;
    c.llm.openai.base_url = llm.base_url();
    c.llm.openai.api_key = Secret::new(TEST_KEY);
    c.llm.openai.max_retries = 2;
    c.llm.openai.retry_initial_delay_ms = 10;
    c.llm.openai.retry_max_delay_ms = 50;
    c.llm.openai.read_timeout_ms = 2_000;
    c.llm.openai.connect_timeout_ms = 1_000;
}

const TEST_KEY: &str = "sk-test-secret-key-0123456789";

/// A request's messages (OpenAI-shaped) without the opening user turn the Anthropic provider
/// adds before a conversation that starts with the assistant (the Messages API requires a
/// user turn first), so tests about history can assert one conversation for both dialects.
/// In anthropic mode it checks that the opening is there; otherwise the messages are returned
/// as they are.
pub fn after_opening(messages: &[Value]) -> Vec<Value> {
    let mut messages = messages.to_vec();
    if test_llm() == TestLlm::Anthropic {
        let roles: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
        assert_eq!(
            roles.get(1..3),
            Some(&["user", "assistant"][..]),
            "the opening user turn: {roles:?}"
        );
        messages.remove(1);
    }
    messages
}

/// Sets how structured answers are asked for on the provider the `default` alias uses.
pub fn set_structured_output(c: &mut Config, mode: orca::config::StructuredOutput) {
    c.llm.openai.structured_output = mode;
    if let Some(p) = c.llm.providers.get_mut("scripted") {
        p.structured_output = Some(mode);
    }
}

pub fn workspace(dir: &TempDir) -> PathBuf {
    dir.path().join("workspace")
}

pub async fn spawn_app(configure: impl FnOnce(&mut Config)) -> TestApp {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(workspace(&dir)).expect("workspace");
    spawn_app_in(dir, configure).await
}

/// Starts an app on an existing directory (a restart keeps the database).
pub async fn spawn_app_in(dir: TempDir, configure: impl FnOnce(&mut Config)) -> TestApp {
    spawn_app_with(dir, configure, None).await
}

/// Starts an app whose tools include the probe's test tools (`test.count`, `test.flaky`,
/// `test.sleep`).
pub async fn spawn_probed_app(
    dir: Option<TempDir>,
    probe: &super::tools::Probe,
    configure: impl FnOnce(&mut Config),
) -> TestApp {
    let dir = match dir {
        Some(d) => d,
        None => {
            let d = tempfile::tempdir().expect("temp dir");
            std::fs::create_dir_all(workspace(&d)).expect("workspace");
            d
        }
    };
    spawn_app_with(dir, configure, Some(probe)).await
}

async fn spawn_app_with(
    dir: TempDir,
    configure: impl FnOnce(&mut Config),
    probe: Option<&super::tools::Probe>,
) -> TestApp {
    let mut config = test_config(&dir);
    configure(&mut config);
    let app = match probe {
        None => App::build(config).await.expect("app builds"),
        Some(probe) => {
            let mut tools = orca::tools::ToolRegistry::with_builtins(&config.tools);
            for t in probe.tools() {
                tools.register(t);
            }
            let llm = orca::llm::LlmRouter::from_config(&config).expect("llm router");
            App::build_with(config, llm, tools)
                .await
                .expect("app builds")
        }
    };
    let base = format!("http://{}", app.local_addr());
    let retention = app.retention();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(app.run_until_stopped(async move {
        let _ = rx.await;
    }));
    TestApp {
        base,
        client: reqwest::Client::new(),
        dir,
        retention,
        stop: Some(tx),
        task: Some(task),
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Stops the server gracefully and hands back its directory.
    pub async fn stop(mut self) -> TempDir {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(PATIENCE, task)
                .await
                .expect("server stops in time")
                .expect("server task")
                .expect("server ran cleanly");
        }
        let dir = tempfile::tempdir().expect("temp dir");
        // Move our TempDir out by swapping in a fresh one (TestApp implements Drop).
        std::mem::replace(&mut self.dir, dir)
    }

    /// POSTs a run and returns the run object (201).
    pub async fn create_run(&self, body: Value) -> Value {
        let resp = self
            .client
            .post(self.url("/v1/runs"))
            .json(&body)
            .send()
            .await
            .expect("POST /v1/runs");
        assert_eq!(
            resp.status(),
            201,
            "{}",
            resp.text().await.unwrap_or_default()
        );
        resp.json().await.expect("run json")
    }

    /// POSTs a run with `Accept: text/event-stream` and reads the stream to `final`.
    pub async fn stream_run(&self, body: Value) -> Vec<SseMessage> {
        let resp = self
            .client
            .post(self.url("/v1/runs"))
            .header("accept", "text/event-stream")
            .json(&body)
            .send()
            .await
            .expect("POST /v1/runs");
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        let location = resp.headers()["location"].to_str().unwrap().to_owned();
        let events = SseReader::new(resp).read_to_final().await;
        let run_id = events[0].json()["run_id"].as_str().unwrap().to_owned();
        assert_eq!(
            location,
            format!("/v1/runs/{run_id}"),
            "Location names the run"
        );
        events
    }

    /// Opens a run's event stream from its first event.
    pub async fn events(&self, run_id: &str) -> SseReader {
        let request = self
            .client
            .get(self.url(&format!("/v1/runs/{run_id}/events")));
        let resp = request.send().await.expect("GET events");
        assert_eq!(resp.status(), 200);
        SseReader::new(resp)
    }

    /// [`Self::events`] with API key `key`.
    pub async fn events_with_key(&self, run_id: &str, key: &str) -> SseReader {
        let request = self
            .client
            .get(self.url(&format!("/v1/runs/{run_id}/events")));
        let resp = request.bearer_auth(key).send().await.expect("GET events");
        SseReader::new(resp)
    }

    /// Answers a run's `input_required` for `step_id`.
    pub async fn answer(&self, run_id: &str, step_id: &str, value: Value) -> reqwest::Response {
        self.client
            .post(self.url(&format!("/v1/runs/{run_id}/input")))
            .json(&serde_json::json!({ "step_id": step_id, "value": value }))
            .send()
            .await
            .expect("POST input")
    }

    /// Follows a run's event stream to `final`.
    pub async fn follow(&self, run_id: &str) -> Vec<SseMessage> {
        let resp = self
            .client
            .get(self.url(&format!("/v1/runs/{run_id}/events")))
            .send()
            .await
            .expect("GET events");
        assert_eq!(resp.status(), 200);
        SseReader::new(resp).read_to_final().await
    }

    /// The stored attempts of one step of a run (`GET /v1/runs/{id}/steps`), in start order.
    pub async fn attempts(&self, run_id: &str, step_id: &str) -> Vec<Value> {
        let (status, steps) = self.get_json(&format!("/v1/runs/{run_id}/steps")).await;
        assert_eq!(status, 200, "{steps}");
        steps
            .as_array()
            .expect("steps array")
            .iter()
            .filter(|s| s["step_id"] == step_id)
            .cloned()
            .collect()
    }

    /// The run's whole history as JSON.
    pub async fn history(&self, run_id: &str) -> Vec<Value> {
        self.client
            .get(self.url(&format!("/v1/runs/{run_id}/events")))
            .header("accept", "application/json")
            .send()
            .await
            .expect("GET events json")
            .json()
            .await
            .expect("events array")
    }

    /// The run's stored events, as JSON.
    pub async fn stored_events(&self, id: &str) -> Vec<Value> {
        let url = self.url(&format!("/v1/runs/{id}/events"));
        super::server::stored_events(&self.client, &url).await
    }

    /// The text of `/metrics`.
    pub async fn metrics(&self) -> String {
        let resp = self.client.get(self.url("/metrics")).send().await.unwrap();
        resp.text().await.unwrap()
    }

    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        let resp = self.client.get(self.url(path)).send().await.expect("GET");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// POSTs `body` as JSON; the status and the response body (`null` if not JSON).
    pub async fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        let resp = self.client.post(self.url(path)).json(body).send();
        let resp = resp.await.expect("POST");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// The `orca` client binary with `args`, pointed at this server (`ORCA_URL`), with no API
    /// key from the test's environment, killed when dropped; its standard streams are the
    /// caller's to set.
    pub fn orca_command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_orca"));
        command
            .args(args)
            .env("ORCA_URL", &self.base)
            .env_remove("ORCA_API_KEY")
            .kill_on_drop(true);
        command
    }

    /// The `orca` client binary against this server (`ORCA_URL`), standard input from
    /// `stdin`; its output once it exits, within PATIENCE.
    pub async fn orca(&self, args: &[&str], stdin: &str) -> std::process::Output {
        use std::process::Stdio;
        use tokio::io::AsyncWriteExt;
        let mut child = self
            .orca_command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("orca starts");
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.as_bytes()).await.unwrap();
        drop(input);
        tokio::time::timeout(PATIENCE, child.wait_with_output())
            .await
            .expect("orca finishes in time")
            .expect("orca output")
    }

    /// PUTs `body` as JSON; the status and the response body (`null` if not JSON).
    pub async fn put_json(&self, path: &str, body: &Value) -> (u16, Value) {
        let resp = self.client.put(self.url(path)).json(body).send();
        let resp = resp.await.expect("PUT");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// One SSE message: a comment, or an event with its fields.
#[derive(Debug, Clone, PartialEq)]
pub struct SseMessage {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
    pub comment: Option<String>,
}

impl SseMessage {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).expect("event data is JSON")
    }
    pub fn kind(&self) -> &str {
        self.event.as_deref().unwrap_or("")
    }
}

/// A minimal SSE parser over a reqwest response (comments kept, so keep-alives are visible).
pub struct SseReader {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
}

impl SseReader {
    pub fn new(resp: reqwest::Response) -> Self {
        SseReader {
            body: resp.bytes_stream().boxed(),
            buf: String::new(),
        }
    }

    /// The next message (event or comment), or None at the end of the stream.
    pub async fn next(&mut self) -> Option<SseMessage> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut msg = SseMessage {
                    id: None,
                    event: None,
                    data: String::new(),
                    comment: None,
                };
                for line in block.lines() {
                    if let Some(c) = line.strip_prefix(':') {
                        msg.comment = Some(c.trim().to_owned());
                    } else if let Some((field, value)) = line.split_once(':') {
                        let value = value.strip_prefix(' ').unwrap_or(value);
                        match field {
                            "id" => msg.id = Some(value.to_owned()),
                            "event" => msg.event = Some(value.to_owned()),
                            "data" => {
                                if !msg.data.is_empty() {
                                    msg.data.push('\n');
                                }
                                msg.data.push_str(value);
                            }
                            _ => {}
                        }
                    }
                }
                return Some(msg);
            }
            let chunk = tokio::time::timeout(PATIENCE, self.body.next())
                .await
                .expect("the stream went silent");
            match chunk {
                Some(Ok(bytes)) => self.buf.push_str(&String::from_utf8_lossy(&bytes)),
                _ => return None,
            }
        }
    }

    /// The next event, skipping comments.
    pub async fn next_event(&mut self) -> Option<SseMessage> {
        loop {
            let m = self.next().await?;
            if m.event.is_some() {
                return Some(m);
            }
        }
    }

    /// Reads events until `final` (included) or the end of the stream.
    pub async fn read_to_final(mut self) -> Vec<SseMessage> {
        let mut out = Vec::new();
        while let Some(m) = self.next_event().await {
            let last = m.kind() == "final";
            out.push(m);
            if last {
                break;
            }
        }
        out
    }
}

/// Asserts seq rises by exactly one from `first`, SSE ids equal seq, and the last is `final`.
pub fn assert_well_formed(events: &[SseMessage], first: u64) {
    assert!(!events.is_empty(), "no events");
    for (i, ev) in events.iter().enumerate() {
        let data = ev.json();
        let seq = data["seq"].as_u64().expect("seq");
        assert_eq!(
            seq,
            first + i as u64,
            "seq gap or duplicate at {i}: {events:#?}"
        );
        assert_eq!(
            ev.id.as_deref(),
            Some(seq.to_string().as_str()),
            "id == seq"
        );
        assert_eq!(
            data["kind"].as_str(),
            ev.event.as_deref(),
            "event name == kind"
        );
    }
    assert_eq!(events.last().unwrap().kind(), "final");
    assert_eq!(
        events.iter().filter(|e| e.kind() == "final").count(),
        1,
        "exactly one final"
    );
}

pub fn kinds(events: &[SseMessage]) -> Vec<String> {
    events.iter().map(|e| e.kind().to_owned()).collect()
}

/// The `final` event's data.
pub fn final_data(events: &[SseMessage]) -> Value {
    events.last().expect("events").json()["data"].clone()
}
