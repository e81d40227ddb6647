//! Benchmark: orchestration overhead per step of the plan engine, with instant tools
//! (`math.calculate "1 + 1"`) and SQLite persistence on (events, step attempts, checkpoints).
//!
//! Shapes: a 10-step chain and a 10-way fan-out. Each is run in-process (the engine API, no
//! HTTP) and over HTTP (a streamed POST on loopback, read to `final`). The per-step overhead is
//! (time of a 10-step run − time of a 1-step run) / 9, medians over many runs.
//!
//! Usage: `cargo run --release --example bench_plan -- [--runs 200] [--rounds 5]`

use std::time::{Duration, Instant};

use futures::StreamExt;
use orca::app::App;
use orca::config::{Config, ProviderChoice};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[path = "common/in_process.rs"]
mod in_process;
#[path = "common/plans.rs"]
mod plans;
use in_process::run_to_final;
use plans::{chain, step};

fn fan_out(n: usize) -> Value {
    let steps: Vec<Value> = (0..n).map(|i| step(format!("s{i}"), vec![])).collect();
    json!({ "settings": { "max_parallel_steps": n.max(1) }, "steps": steps })
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

async fn in_process(app: &App, plan: &Value) -> Duration {
    let t0 = Instant::now();
    run_to_final(app, plan).await;
    t0.elapsed()
}

async fn over_http(client: &reqwest::Client, base: &str, plan: &Value) -> Duration {
    let t0 = Instant::now();
    let resp = client
        .post(format!("{base}/v1/runs"))
        .header("accept", "text/event-stream")
        .json(&json!({ "input": "bench", "orchestration": "fixed", "plan": plan }))
        .send()
        .await
        .expect("POST");
    let mut body = resp.bytes_stream();
    let mut tail = Vec::new();
    while let Some(chunk) = body.next().await {
        tail.extend_from_slice(&chunk.expect("chunk"));
        if tail.windows(12).any(|w| w == b"event: final") {
            break;
        }
        if tail.len() > 64 {
            tail.drain(..tail.len() - 64);
        }
    }
    t0.elapsed()
}

#[tokio::main]
async fn main() {
    let mut runs = 200usize;
    let mut rounds = 5usize;
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        match (pair[0].as_str(), pair.get(1)) {
            ("--runs", Some(v)) => runs = v.parse().expect("--runs N"),
            ("--rounds", Some(v)) => rounds = v.parse().expect("--rounds N"),
            (other, _) => panic!("unknown argument {other}"),
        }
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = Config::default();
    config.server.bind = "127.0.0.1:0".into();
    config.database.url = format!("sqlite://{}", dir.path().join("bench.db").display());
    config.llm.provider = ProviderChoice::Offline;
    config.engine.max_running_runs = 256;
    let app = App::build(config).await.expect("app");
    let base = format!("http://{}", app.local_addr());

    // The same engine serves both paths: keep a handle, serve HTTP in the background.
    let engine_app = App::build({
        let mut c = Config::default();
        c.server.bind = "127.0.0.1:0".into();
        c.database.url = format!("sqlite://{}", dir.path().join("bench-inproc.db").display());
        c.llm.provider = ProviderChoice::Offline;
        c
    })
    .await
    .expect("app");
    let stop = CancellationToken::new();
    let s = stop.clone();
    let server = tokio::spawn(app.run_until_stopped(async move { s.cancelled().await }));
    let client = reqwest::Client::new();

    let shapes = [
        ("10-step chain", chain(10)),
        ("10-way fan-out", fan_out(10)),
    ];
    let one = chain(1);
    println!(
        "| shape | path | per-step overhead, median of rounds | range | 10-step run, median |"
    );
    println!("|---|---|---|---|---|");
    for (name, plan) in &shapes {
        for path in ["in-process", "HTTP + SSE"] {
            let mut per_step = Vec::new();
            let mut whole = Vec::new();
            for _ in 0..rounds {
                let (mut t10, mut t1) = (Vec::new(), Vec::new());
                for _ in 0..runs {
                    let (a, b) = if path == "in-process" {
                        (
                            in_process(&engine_app, plan).await,
                            in_process(&engine_app, &one).await,
                        )
                    } else {
                        (
                            over_http(&client, &base, plan).await,
                            over_http(&client, &base, &one).await,
                        )
                    };
                    t10.push(a);
                    t1.push(b);
                }
                let (m10, m1) = (median(t10), median(t1));
                whole.push(m10);
                per_step.push(m10.saturating_sub(m1) / 9);
            }
            per_step.sort();
            let med = per_step[per_step.len() / 2];
            println!(
                "| {name} | {path} | {:.1} µs | {:.1} – {:.1} µs | {:.2} ms |",
                med.as_secs_f64() * 1e6,
                per_step[0].as_secs_f64() * 1e6,
                per_step[per_step.len() - 1].as_secs_f64() * 1e6,
                median(whole).as_secs_f64() * 1e3,
            );
        }
    }
    stop.cancel();
    let _ = server.await;
}
