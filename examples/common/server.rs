//! The benchmarks' server: `orca serve` (a release binary) on a free loopback port, the
//! offline provider, a SQLite file in a temp dir of its own (or a database given), killed on
//! drop. Shared by the examples through `#[path = "common/server.rs"] mod server;`.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Server {
    pub child: Child,
    pub base: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `bin` with `env` on top of the offline provider and quiet logs; returns once
/// `/healthz` answers.
#[allow(dead_code)] // a benchmark uses `start` or `start_on`
pub async fn start(bin: &str, env: &[(&str, &str)]) -> Server {
    start_on(bin, None, env).await
}

/// [`start`] on `database` (a `--database-url`), or on a SQLite file of its own for `None`.
#[allow(dead_code)]
pub async fn start_on(bin: &str, database: Option<&str>, env: &[(&str, &str)]) -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    let database = database.map_or_else(
        || format!("sqlite://{}", dir.path().join("bench.db").display()),
        str::to_owned,
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    // The server runs in the temp dir, so a relative binary path must be resolved first.
    let bin = std::fs::canonicalize(bin)
        .unwrap_or_else(|e| panic!("{bin}: {e} (run `cargo build --release` first)"));
    let mut child = Command::new(&bin)
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .arg("--database-url")
        .arg(&database)
        .env("ORCA_LLM__PROVIDER", "offline")
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    // 30 s: on a loaded machine (a build beside the benchmark) start-up can take several.
    for _ in 0..1200 {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{} exited before it was healthy: {status}", bin.display());
        }
        if client.get(format!("{base}/healthz")).send().await.is_ok() {
            return Server {
                child,
                base,
                _dir: dir,
            };
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the server did not become healthy within 30 s");
}
