//! Benchmark: orca on one SQLite file against 1, 2 and 3 replicas sharing one PostgreSQL
//! database. For each setup, over several rounds:
//! - simple runs per second, `--concurrency` clients at a time, spread round-robin over the
//!   replicas (each run streamed to `final` from the replica it was sent to),
//! - POST-to-first-event latency, one run at a time (p50, p99).
//!
//! Postgres is a throwaway cluster started by `.ci/postgres` with `ORCA_PG_DURABLE=1`:
//! fsync on, `synchronous_commit = off` — a commit survives a crash of orca and of
//! Postgres, as SQLite's WAL with `synchronous = NORMAL` does. Or pass `--postgres URL`.
//!
//! Usage: `cargo build --release && cargo run --release --example bench_replicas --
//! [--rounds 3] [--runs 300] [--concurrency 16] [--bin target/release/orca] [--postgres URL]`

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;

struct Args {
    rounds: usize,
    runs: usize,
    concurrency: usize,
    bin: String,
    postgres: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        rounds: 3,
        runs: 300,
        concurrency: 16,
        bin: "target/release/orca".into(),
        postgres: None,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < v.len() {
        let val = v[i + 1].clone();
        match v[i].as_str() {
            "--rounds" => a.rounds = val.parse().expect("--rounds N"),
            "--runs" => a.runs = val.parse().expect("--runs N"),
            "--concurrency" => a.concurrency = val.parse().expect("--concurrency N"),
            "--bin" => a.bin = val,
            "--postgres" => a.postgres = Some(val),
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    a
}

/// A throwaway Postgres cluster, stopped on drop.
struct Cluster {
    url: String,
    dir: String,
}

impl Cluster {
    fn start() -> Cluster {
        let out = Command::new("bash")
            .args([".ci/postgres", "start"])
            .env("ORCA_PG_DURABLE", "1")
            .stderr(Stdio::inherit())
            .output()
            .expect("run .ci/postgres (from the repository's root)");
        assert!(out.status.success(), ".ci/postgres start failed");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let value = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .unwrap_or_else(|| panic!("no {name} in {text}"))
                .to_owned()
        };
        Cluster {
            url: value("ORCA_TEST_POSTGRES"),
            dir: value("ORCA_PG_DIR"),
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .args([".ci/postgres", "stop", &self.dir])
            .output();
    }
}

struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start(bin: &str, database: &str, dir: &std::path::Path) -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let bin = std::fs::canonicalize(bin)
        .unwrap_or_else(|e| panic!("{bin}: {e} (run `cargo build --release` first)"));
    let child = Command::new(&bin)
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .args(["--database-url", database])
        .env("ORCA_LLM__PROVIDER", "offline")
        .env("ORCA_LLM__OFFLINE_TOKEN_DELAY_MS", "0")
        .env("ORCA_ENGINE__MAX_RUNNING_RUNS", "256")
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    for _ in 0..400 {
        if let Ok(r) = client.get(format!("{base}/readyz")).send().await
            && r.status().is_success()
        {
            return Server { child, base };
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let mut child = child;
    let _ = child.kill();
    let _ = child.wait();
    panic!("the server did not become ready");
}

/// Streams one simple run to `final`; the time to its first event.
async fn stream_run(client: &reqwest::Client, base: &str, input: &str) -> Duration {
    let t0 = Instant::now();
    let resp = client
        .post(format!("{base}/v1/runs"))
        .header("accept", "text/event-stream")
        .json(&serde_json::json!({ "input": input, "orchestration": "simple" }))
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut first = None;
    let mut buf = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.expect("chunk");
        first.get_or_insert_with(|| t0.elapsed());
        buf.extend_from_slice(&chunk);
        if buf.windows(12).any(|w| w == b"event: final") {
            return first.unwrap_or_default();
        }
    }
    panic!("stream ended before final");
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn median_range(mut xs: Vec<f64>) -> (f64, f64, f64) {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (xs[xs.len() / 2], xs[0], xs[xs.len() - 1])
}

/// One setup: `databases` (one per replica, all the same URL on Postgres), measured.
async fn measure(a: &Args, name: &str, database: &str, replicas: usize) {
    let dirs: Vec<tempfile::TempDir> = (0..replicas)
        .map(|_| tempfile::tempdir().unwrap())
        .collect();
    let mut servers = Vec::new();
    for dir in &dirs {
        // One at a time: the first applies the migrations.
        servers.push(start(&a.bin, database, dir.path()).await);
    }
    let bases: Vec<String> = servers.iter().map(|s| s.base.clone()).collect();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(a.concurrency)
        .build()
        .expect("client");
    for i in 0..30 {
        stream_run(&client, &bases[i % replicas], "10 + 20 계산해줘").await;
    }
    let (mut rps, mut p50s, mut p99s) = (vec![], vec![], vec![]);
    for round in 1..=a.rounds {
        let t0 = Instant::now();
        futures::stream::iter(0..a.runs)
            .map(|i| stream_run(&client, &bases[i % replicas], "10 + 20 계산해줘"))
            .buffer_unordered(a.concurrency)
            .collect::<Vec<_>>()
            .await;
        rps.push(a.runs as f64 / t0.elapsed().as_secs_f64());
        let mut firsts = Vec::new();
        for i in 0..200 {
            firsts.push(stream_run(&client, &bases[i % replicas], "hello").await);
        }
        firsts.sort();
        p50s.push(percentile(&firsts, 0.50).as_secs_f64() * 1000.0);
        p99s.push(percentile(&firsts, 0.99).as_secs_f64() * 1000.0);
        eprintln!(
            "{name}, round {round}: {:.0} runs/s, first event p50 {:.2} ms, p99 {:.2} ms",
            rps[round - 1],
            p50s[round - 1],
            p99s[round - 1]
        );
    }
    let (r, rlo, rhi) = median_range(rps);
    let (p50, _, _) = median_range(p50s);
    let (p99, plo, phi) = median_range(p99s);
    println!(
        "| {name} | {r:.0} runs/s | {rlo:.0} – {rhi:.0} | {p50:.2} ms | {p99:.2} ms | {plo:.2} – {phi:.2} ms |"
    );
}

#[tokio::main]
async fn main() {
    let a = args();
    let sqlite_dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}", sqlite_dir.path().join("bench.db").display());
    let cluster = a.postgres.is_none().then(Cluster::start);
    let server = a
        .postgres
        .clone()
        .unwrap_or_else(|| cluster.as_ref().unwrap().url.clone());

    println!(
        "| setup | runs/s, median | range ({} rounds) | first event p50 | p99, median | p99 range |",
        a.rounds
    );
    println!("|---|---|---|---|---|---|");
    measure(&a, "SQLite, 1 replica", &sqlite, 1).await;
    for replicas in 1..=3 {
        // A fresh database per setup: each starts from empty tables.
        let db = format!("bench_{replicas}");
        let status = Command::new("psql")
            .args([&server, "-qc", &format!("DROP DATABASE IF EXISTS {db}")])
            .status()
            .and_then(|_| {
                Command::new("psql")
                    .args([&server, "-qc", &format!("CREATE DATABASE {db}")])
                    .status()
            })
            .expect("psql");
        assert!(status.success(), "creating database {db}");
        let url = match server.rsplit_once('/') {
            Some((host, _)) => format!("{host}/{db}"),
            None => panic!("--postgres must name a database: {server}"),
        };
        let name = format!(
            "PostgreSQL, {replicas} replica{}",
            if replicas > 1 { "s" } else { "" }
        );
        measure(&a, &name, &url, replicas).await;
    }
}
