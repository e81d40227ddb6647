//! The real `orca` binary as a child process, for tests that kill it: on a loopback port, with
//! its database in a directory the test keeps across restarts. Plus waits that fail instead of
//! hanging on keep-alives.

use serde_json::{Value, json};

use super::app::{PATIENCE, SseMessage, SseReader};

/// Reads events until the `n`th of `kind`, failing (instead of hanging on keep-alives) if
/// they do not come.
pub async fn skip_to(reader: &mut SseReader, kind: &str, n: usize) {
    let seen = async {
        let mut seen = 0;
        while seen < n {
            if reader
                .next_event()
                .await
                .expect("the stream goes on")
                .kind()
                == kind
            {
                seen += 1;
            }
        }
    };
    tokio::time::timeout(PATIENCE, seen)
        .await
        .unwrap_or_else(|_| panic!("{n} `{kind}` events did not come"));
}

/// Reads to `final`, failing (instead of hanging on keep-alives) if the run does not end.
pub async fn to_final(reader: SseReader) -> Vec<SseMessage> {
    tokio::time::timeout(PATIENCE, reader.read_to_final())
        .await
        .expect("the run ends")
}

/// Two replicas (the real binary) sharing one PostgreSQL database, started with `env`. Keep
/// the value for as long as they are used: the servers stop first, then their database.
pub struct TwoReplicas {
    pub a: Server,
    pub b: Server,
    _dirs: [tempfile::TempDir; 2],
    _pg: super::db::PgServer,
}

impl TwoReplicas {
    pub async fn start(env: &[(&str, &str)]) -> TwoReplicas {
        let pg = super::db::PgServer::start();
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let db = super::db::database_url_on(&pg.url, dirs[0].path());
        TwoReplicas {
            a: Server::start_on(dirs[0].path(), &db, env).await,
            b: Server::start_on(dirs[1].path(), &db, env).await,
            _dirs: dirs,
            _pg: pg,
        }
    }
}

/// The real `orca` binary on a loopback port, with its database in `dir`.
pub struct Server {
    child: std::process::Child,
    base: String,
    pub client: reqwest::Client,
}

impl Server {
    pub async fn start(dir: &std::path::Path) -> Server {
        Self::start_with(dir, &[("ORCA_LLM__PROVIDER", "offline")]).await
    }

    /// Starts the server with `llm` (the scripted model server, OpenAI's wire format) as its
    /// `openai` provider.
    pub async fn start_scripted(
        dir: &std::path::Path,
        llm: &super::scripted_llm::ScriptedLlm,
    ) -> Server {
        let base = llm.base_url();
        let env = [
            ("ORCA_LLM__PROVIDER", "openai"),
            ("OPENAI_BASE_URL", base.as_str()),
            ("OPENAI_API_KEY", "sk-test-secret-key-0123456789"),
        ];
        Self::start_with(dir, &env).await
    }

    /// Starts the server with these environment variables (e.g. a scripted model's URL).
    pub async fn start_with(dir: &std::path::Path, env: &[(&str, &str)]) -> Server {
        Self::start_on(dir, &super::db::database_url(dir), env).await
    }

    /// Starts the server on the database `db` (several servers may share one on Postgres),
    /// working in `dir`.
    pub async fn start_on(dir: &std::path::Path, db: &str, env: &[(&str, &str)]) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_orca"))
            .args([
                "serve",
                "--bind",
                &format!("127.0.0.1:{port}"),
                "--database-url",
                db,
            ])
            .env(
                "RUST_LOG",
                std::env::var("ORCA_TEST_SERVER_LOG").unwrap_or("warn".into()),
            )
            .env(
                "ORCA_DATABASE__LEASE_TTL_MS",
                super::db::TEST_LEASE_TTL_MS.to_string(),
            )
            // After the defaults above, so a test may set its own.
            .envs(env.iter().copied())
            .current_dir(dir)
            // Through a pipe, not the test's own stderr (which may be a file): a test that
            // caps the server's file sizes must not cap its logs.
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut logs = child.stderr.take().expect("piped");
        std::thread::spawn(move || std::io::copy(&mut logs, &mut std::io::stderr()));
        let server = Server {
            child,
            base: format!("http://127.0.0.1:{port}"),
            client: reqwest::Client::new(),
        };
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let ready = server.client.get(server.url("/readyz")).send().await;
            if ready.is_ok_and(|r| r.status() == 200) {
                return server;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the server did not start"
            );
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// The server's resident memory in bytes (Linux: `VmRSS` of `/proc/PID/status`).
    pub fn rss_bytes(&self) -> u64 {
        self.status_kb("VmRSS") * 1024
    }

    /// The server's own resident memory in bytes (Linux: `RssAnon`): heap, stacks, the
    /// allocator's arenas; not the pages of its executable (`RssFile`), which a debug build
    /// inflates several times over.
    pub fn anonymous_rss_bytes(&self) -> u64 {
        self.status_kb("RssAnon") * 1024
    }

    /// A `kB` field of `/proc/PID/status`.
    fn status_kb(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("/proc/PID/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} in /proc/PID/status"))
    }

    /// Starts a fixed run of `plan`; its id.
    pub async fn start_plan(&self, plan: Value) -> String {
        let body = json!({ "input": "x", "orchestration": "fixed", "plan": plan });
        let resp = self.client.post(self.url("/v1/runs")).json(&body).send();
        let run: Value = resp.await.unwrap().json().await.unwrap();
        run["id"].as_str().unwrap().to_owned()
    }

    /// Reads a run's events from the start until the `n`th `input_required`.
    pub async fn until_asked(&self, id: &str, n: usize) -> SseReader {
        let resp = self.client.get(self.url(&format!("/v1/runs/{id}/events")));
        let mut reader = SseReader::new(resp.send().await.unwrap());
        skip_to(&mut reader, "input_required", n).await;
        reader
    }

    /// Answers the run's pending `step_id`; the status.
    pub async fn answer(&self, id: &str, step_id: &str, value: Value) -> u16 {
        let body = json!({ "step_id": step_id, "value": value });
        let url = self.url(&format!("/v1/runs/{id}/input"));
        let resp = self.client.post(url).json(&body).send().await.unwrap();
        resp.status().as_u16()
    }

    /// Waits for the run's `n`th `input_required`, answers `step_id` with `value` (accepted:
    /// 202) and reads the rest of the run to `final`: the `final` event's data.
    pub async fn answered_to_final(
        &self,
        id: &str,
        n: usize,
        step_id: &str,
        value: Value,
    ) -> Value {
        let reader = self.until_asked(id, n).await;
        assert_eq!(self.answer(id, step_id, value).await, 202);
        super::app::final_data(&to_final(reader).await)
    }

    /// The run's step attempts.
    pub async fn steps(&self, id: &str) -> Vec<Value> {
        let url = self.url(&format!("/v1/runs/{id}/steps"));
        self.client
            .get(url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// The run's stored events, as JSON (`GET .../events` with `accept: application/json`).
    pub async fn stored_events(&self, id: &str) -> Vec<Value> {
        stored_events(&self.client, &self.url(&format!("/v1/runs/{id}/events"))).await
    }

    /// Polls the run's step attempts until one of step `step_id` at `path` (`null`: the top
    /// level) is stored as `completed`; all of them then. Fails after the test's patience.
    pub async fn until_completed(&self, id: &str, path: Value, step_id: &str) -> Vec<Value> {
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let steps = self.steps(id).await;
            let done = steps.iter().any(|s| {
                s["step_id"] == step_id && s["path"] == path && s["status"] == "completed"
            });
            if done {
                return steps;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{path}/{step_id} never completed"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Freezes the process (SIGSTOP), as a stop-the-world pause would.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Lets a paused process go on (SIGCONT).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: sending a signal to our own child process.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// Caps the size of the files the server may write (RLIMIT_FSIZE, as `ulimit -f` would),
    /// or lifts the cap: a write past it fails as on a full disk.
    pub fn limit_file_size(&self, bytes: Option<u64>) {
        let limit = libc::rlimit {
            rlim_cur: bytes.unwrap_or(libc::RLIM_INFINITY),
            rlim_max: libc::RLIM_INFINITY,
        };
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: prlimit only reads the struct we pass; the process is our own child.
        let done = unsafe { libc::prlimit(pid, libc::RLIMIT_FSIZE, &limit, std::ptr::null_mut()) };
        assert_eq!(done, 0, "prlimit: {}", std::io::Error::last_os_error());
    }

    /// A gauge of the server's `/metrics`.
    pub async fn gauge(&self, name: &str) -> f64 {
        let text = self.client.get(self.url("/metrics")).send().await.unwrap();
        let text = text.text().await.unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no gauge {name} in {text}"))
    }

    /// Asks the server to stop (SIGTERM) and waits until it has.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: sending a signal to our own child process.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        self.child.wait().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The stored events at `url` (a run's `/events`), as JSON.
pub(crate) async fn stored_events(client: &reqwest::Client, url: &str) -> Vec<Value> {
    client
        .get(url)
        .header("accept", "application/json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}
