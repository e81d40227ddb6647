//! Benchmark: starts `target/release/orca serve` on loopback (offline provider without token
//! pacing, temp database) and measures, over several rounds:
//! - simple runs per second (streamed to `final`, `--concurrency` at a time),
//! - POST-to-first-event latency (p50, p99),
//! - events per second delivered to one SSE client (one run with a long answer),
//! - the server's resident memory after its first run (VmRSS) and its peak (VmHWM).
//!
//! Usage: `cargo build --release && cargo run --release --example bench -- [--rounds 5]
//! [--runs 400] [--concurrency 16] [--bin target/release/orca]`

use std::time::{Duration, Instant};

use futures::StreamExt;

#[path = "common/server.rs"]
mod server;
use server::start;

/// What this benchmark sets beside the offline provider.
const ENV: &[(&str, &str)] = &[
    ("ORCA_LLM__OFFLINE_TOKEN_DELAY_MS", "0"),
    ("ORCA_ENGINE__MAX_RUNNING_RUNS", "256"),
];

struct Args {
    rounds: usize,
    runs: usize,
    concurrency: usize,
    bin: String,
}

fn args() -> Args {
    let mut a = Args {
        rounds: 5,
        runs: 400,
        concurrency: 16,
        bin: "target/release/orca".into(),
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
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    a
}

/// Streams one run to `final`; returns (time to first event, events seen).
async fn stream_run(client: &reqwest::Client, base: &str, input: &str) -> (Duration, usize) {
    let t0 = Instant::now();
    let resp = client
        .post(format!("{base}/v1/runs"))
        .header("accept", "text/event-stream")
        // `simple` named, not left to the auto selector: the figure is the simple executor's,
        // without a selector model call in front of it.
        .json(&serde_json::json!({ "input": input, "orchestration": "simple" }))
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut first = None;
    let mut buf = Vec::new();
    let mut events = 0;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.expect("chunk");
        first.get_or_insert_with(|| t0.elapsed());
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = buf.drain(..pos + 2).collect();
            if block.starts_with(b"id:") {
                events += 1;
                if block.windows(12).any(|w| w == b"event: final") {
                    return (first.unwrap_or_default(), events);
                }
            }
        }
    }
    panic!("stream ended before final");
}

/// The server's peak resident memory (`VmHWM`).
fn peak_rss_mib(pid: u32) -> f64 {
    memory_mib(pid, "VmHWM:")
}

/// A memory figure of `/proc/PID/status` in MiB (`VmRSS:`, `VmHWM:`).
fn memory_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn summary(name: &str, unit: &str, mut xs: Vec<f64>) {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let median = xs[xs.len() / 2];
    println!(
        "| {name} | {median:.2} {unit} | {:.2} – {:.2} {unit} |",
        xs[0],
        xs[xs.len() - 1]
    );
}

#[tokio::main]
async fn main() {
    let a = args();
    let server = start(&a.bin, ENV).await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(a.concurrency)
        .build()
        .expect("client");
    let base = server.base.clone();

    // Design 001: under 50 MB resident after the first model call.
    stream_run(&client, &base, "10 + 20 계산해줘").await;
    let after_first = memory_mib(server.child.id(), "VmRSS:");
    // Warm-up.
    for _ in 0..20 {
        stream_run(&client, &base, "10 + 20 계산해줘").await;
    }

    let (mut rps, mut p50s, mut p99s, mut eps) = (vec![], vec![], vec![], vec![]);
    let long_input = "word ".repeat(5_000);
    for round in 1..=a.rounds {
        // Throughput: `runs` simple runs (a tool call and two model rounds each).
        let t0 = Instant::now();
        let results: Vec<(Duration, usize)> = futures::stream::iter(0..a.runs)
            .map(|_| stream_run(&client, &base, "10 + 20 계산해줘"))
            .buffer_unordered(a.concurrency)
            .collect()
            .await;
        let secs = t0.elapsed().as_secs_f64();
        rps.push(a.runs as f64 / secs);

        // Latency, one at a time so queueing does not hide it.
        let mut firsts = Vec::new();
        for _ in 0..200 {
            firsts.push(stream_run(&client, &base, "hello").await.0);
        }
        firsts.sort();
        p50s.push(percentile(&firsts, 0.50).as_secs_f64() * 1000.0);
        p99s.push(percentile(&firsts, 0.99).as_secs_f64() * 1000.0);

        // Events per second to one SSE client.
        let t0 = Instant::now();
        let (_, n) = stream_run(&client, &base, &long_input).await;
        eps.push(n as f64 / t0.elapsed().as_secs_f64());
        eprintln!(
            "round {round}: {:.0} runs/s ({} events/run), p50 {:.2} ms, {:.0} events/s",
            rps[rps.len() - 1],
            results[0].1,
            p50s[p50s.len() - 1],
            eps[eps.len() - 1]
        );
    }
    println!("| measure | median | range ({} rounds) |", a.rounds);
    println!("|---|---|---|");
    summary(
        &format!("simple runs per second (concurrency {})", a.concurrency),
        "runs/s",
        rps,
    );
    summary("POST → first event, p50", "ms", p50s);
    summary("POST → first event, p99", "ms", p99s);
    summary("events per second to one SSE client", "events/s", eps);
    println!("| server memory (VmRSS) after the first run | {after_first:.1} MiB | |");
    println!(
        "| server peak memory (VmHWM) | {:.1} MiB | |",
        peak_rss_mib(server.child.id())
    );
}
