//! Benchmark: do slow readers slow runs down? Starts `target/release/orca serve` on loopback
//! (offline provider with its default pacing, 5 ms a token, so a 3,000-word answer streams for
//! about 15 s; temp SQLite database; the default 64 running slots) and measures, for three
//! setups, how long `--short` short runs take from POST to `final` (all streamed at once):
//! - `short only`: nothing else runs;
//! - `+ long, no reader`: `--long` 3,000-word runs started just before, nobody reading them;
//! - `+ long, slow readers`: the same long runs, each followed by a reader that takes 200 bytes
//!   every 20 ms.
//!
//! The long runs' own durations (started → finished, from the run objects) are reported too.
//! If readers slowed runs, the third setup would be slower than the second.
//!
//! Usage: `cargo build --release && cargo run --release --example bench_readers --
//! [--short 1000] [--long 50] [--bin target/release/orca]`

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[path = "common/server.rs"]
mod server;
use server::start;

/// What this benchmark sets beside the offline provider.
const ENV: &[(&str, &str)] = &[("ORCA_SERVER__MAX_CONNECTIONS", "4096")];

struct Args {
    short: usize,
    long: usize,
    bin: String,
}

fn args() -> Args {
    let mut a = Args {
        short: 1000,
        long: 50,
        bin: "target/release/orca".into(),
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    for pair in v.chunks(2) {
        let val = pair.get(1).cloned().unwrap_or_default();
        match pair[0].as_str() {
            "--short" => a.short = val.parse().expect("--short N"),
            "--long" => a.long = val.parse().expect("--long N"),
            "--bin" => a.bin = val,
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// Streams one short run to `final`: POST → final.
async fn short_run(client: reqwest::Client, base: String) -> Duration {
    let t0 = Instant::now();
    let resp = client
        .post(format!("{base}/v1/runs"))
        .header("accept", "text/event-stream")
        .json(&json!({ "input": "10 + 20 계산해줘", "orchestration": "simple" }))
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut tail = Vec::new();
    while let Some(chunk) = body.next().await {
        tail.extend_from_slice(&chunk.expect("body"));
        if String::from_utf8_lossy(&tail).contains("event: final") {
            break;
        }
        let keep = tail.len().saturating_sub(64);
        tail.drain(..keep);
    }
    t0.elapsed()
}

/// Starts a 3,000-word run; with `slow`, a reader that takes 200 bytes every 20 ms follows it.
async fn long_run(
    client: &reqwest::Client,
    base: &str,
    slow: bool,
) -> (String, Option<tokio::task::JoinHandle<()>>) {
    let input = "word ".repeat(3000);
    let run: Value = client
        .post(format!("{base}/v1/runs"))
        .json(&json!({ "input": input, "orchestration": "simple" }))
        .send()
        .await
        .expect("POST")
        .json()
        .await
        .expect("run");
    let id = run["id"].as_str().expect("id").to_owned();
    let reader = slow.then(|| {
        let addr = base.trim_start_matches("http://").to_owned();
        let path = format!("/v1/runs/{id}/events");
        tokio::spawn(async move {
            let mut s = tokio::net::TcpStream::connect(&addr)
                .await
                .expect("connect");
            let request = format!("GET {path} HTTP/1.1\r\nHost: orca\r\n\r\n");
            s.write_all(request.as_bytes()).await.expect("request");
            let mut buf = [0u8; 200];
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
    });
    (id, reader)
}

/// Seconds from a run's start to its end, once it has ended.
async fn duration_of(client: &reqwest::Client, base: &str, id: &str) -> f64 {
    loop {
        let run: Value = client
            .get(format!("{base}/v1/runs/{id}"))
            .send()
            .await
            .expect("GET")
            .json()
            .await
            .expect("run");
        if let (Some(s), Some(f)) = (run["started_at"].as_str(), run["finished_at"].as_str()) {
            let s = chrono::DateTime::parse_from_rfc3339(s).expect("time");
            let f = chrono::DateTime::parse_from_rfc3339(f).expect("time");
            return (f - s).num_milliseconds() as f64 / 1000.0;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

async fn setup(
    bin: &str,
    short: usize,
    long: usize,
    readers: Option<bool>,
) -> (f64, f64, Option<f64>) {
    let server = start(bin, ENV).await;
    let client = reqwest::Client::new();
    let mut longs = Vec::new();
    if let Some(slow) = readers {
        for _ in 0..long {
            longs.push(long_run(&client, &server.base, slow).await);
        }
    }
    let shorts = (0..short).map(|_| tokio::spawn(short_run(client.clone(), server.base.clone())));
    let mut times = Vec::new();
    for t in futures::future::join_all(shorts).await {
        times.push(t.expect("short run").as_secs_f64());
    }
    let mut long_times = Vec::new();
    for (id, reader) in longs {
        long_times.push(duration_of(&client, &server.base, &id).await);
        if let Some(r) = reader {
            r.abort();
        }
    }
    let p90 = {
        let mut t = times.clone();
        t.sort_by(f64::total_cmp);
        t[t.len() * 9 / 10]
    };
    let long_median = (!long_times.is_empty()).then(|| median(long_times));
    (median(times), p90, long_median)
}

#[tokio::main]
async fn main() {
    let a = args();
    println!("| setup | short runs POST → final, p50 | p90 | long runs, median duration |");
    println!("|---|---|---|---|");
    for (name, readers) in [
        ("short only", None),
        ("+ long, no reader", Some(false)),
        ("+ long, slow readers", Some(true)),
    ] {
        let (p50, p90, long) = setup(&a.bin, a.short, a.long, readers).await;
        let long = long.map_or("–".to_owned(), |l| format!("{l:.2} s"));
        println!("| {name} | {p50:.2} s | {p90:.2} s | {long} |");
    }
}
