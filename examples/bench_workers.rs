//! Benchmark: worker tools (issue 47) over HTTP against `orca serve` (release build, SQLite).
//!
//! - **Throughput**: `--tasks` tasks queued through one queue (one run of one call each, all
//!   queued before the clock starts), then drained by 1 and by 8 workers, each
//!   a loop that long-polls for up to 16 tasks and completes each one at once: tasks/s from the
//!   first poll until the last completion is answered (then every run is checked to have
//!   succeeded).
//! - **Added latency**: one run at a time, a one-step run calling a worker tool (served by one
//!   worker already waiting in a long poll) against the same run calling the built-in
//!   `math.calculate`: POST → `final` on the stream, the medians' difference.
//!
//! Usage: `cargo build --release && cargo run --release --example bench_workers --
//! [--rounds 3] [--tasks 2000] [--calls 200] [--bin target/release/orca]`

#[path = "common/server.rs"]
mod server;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

struct Args {
    rounds: usize,
    tasks: usize,
    calls: usize,
    bin: String,
}

fn args() -> Args {
    let mut a = Args {
        rounds: 3,
        tasks: 2000,
        calls: 200,
        bin: "target/release/orca".into(),
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    for pair in v.chunks(2) {
        let [flag, value] = pair else {
            panic!("flags take a value: {v:?}")
        };
        match flag.as_str() {
            "--rounds" => a.rounds = value.parse().expect("--rounds N"),
            "--tasks" => a.tasks = value.parse().expect("--tasks N"),
            "--calls" => a.calls = value.parse().expect("--calls N"),
            "--bin" => a.bin = value.clone(),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

async fn declare(client: &reqwest::Client, base: &str) {
    let tool = json!({"queue": "bench", "description": "Echoes its text.",
        "input_schema": {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}});
    let resp = client
        .put(format!("{base}/v1/tools/bench.echo"))
        .json(&tool)
        .send()
        .await
        .expect("PUT tool");
    assert!(resp.status().is_success(), "declare: {}", resp.status());
}

fn call(id: &str, tool: &str, arguments: Value) -> Value {
    json!({"id": id, "kind": "tool", "input": {"tool": tool, "arguments": arguments}})
}

async fn create(client: &reqwest::Client, base: &str, steps: Vec<Value>) -> String {
    let body = json!({"input": "bench", "orchestration": "fixed", "plan": {"steps": steps}});
    let resp = client
        .post(format!("{base}/v1/runs"))
        .json(&body)
        .send()
        .await
        .expect("POST run");
    assert_eq!(resp.status().as_u16(), 201, "{:?}", resp.text().await);
    let run: Value = resp.json().await.expect("run JSON");
    run["id"].as_str().expect("run id").to_owned()
}

/// Reads the run's stream until `final`; returns its status.
async fn to_final(client: &reqwest::Client, base: &str, id: &str) -> String {
    let resp = client
        .get(format!("{base}/v1/runs/{id}/events"))
        .send()
        .await
        .expect("GET events");
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    while let Some(chunk) = body.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk.expect("a chunk")));
        if let Some(at) = text.find("event: final\n") {
            let data = text[at..].lines().find_map(|l| l.strip_prefix("data: "));
            if let Some(data) = data {
                let event: Value = serde_json::from_str(data).expect("final JSON");
                return event["data"]["status"].as_str().unwrap_or("?").to_owned();
            }
        }
    }
    panic!("the stream of {id} ended without final")
}

/// One worker: long-polls for up to 16 tasks and completes each, until `stop` or until the
/// workers have completed `target` tasks between them.
async fn worker(
    base: String,
    id: String,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
    target: usize,
) {
    let client = reqwest::Client::new();
    while !stop.load(Ordering::Relaxed) && done.load(Ordering::Relaxed) < target {
        let body = json!({"worker_id": id, "queue": "bench", "max_tasks": 16, "wait_ms": 200});
        let resp = client
            .post(format!("{base}/v1/workers/poll"))
            .json(&body)
            .send()
            .await;
        let Ok(resp) = resp else { continue };
        let polled: Value = resp.json().await.unwrap_or(Value::Null);
        for task in polled["tasks"].as_array().into_iter().flatten() {
            let path = format!("{base}/v1/tasks/{}/complete", task["id"].as_str().unwrap());
            let output = json!({"worker_id": id, "output": task["arguments"]});
            let resp = client.post(path).json(&output).send().await;
            assert!(
                resp.is_ok_and(|r| r.status().is_success()),
                "a completion failed"
            );
            done.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Queues `tasks` tasks, then drains them with `workers` workers: tasks per second.
async fn throughput(base: &str, tasks: usize, workers: usize) -> f64 {
    let client = reqwest::Client::new();
    let mut ids = Vec::new();
    for r in 0..tasks {
        let step = call("c", "bench.echo", json!({"text": format!("task {r}")}));
        ids.push(create(&client, base, vec![step]).await);
    }
    // Every call queued before the clock starts (metrics: the queue's depth).
    loop {
        let text = client.get(format!("{base}/metrics")).send().await;
        let text = text.expect("metrics").text().await.expect("metrics text");
        let queued = text
            .lines()
            .find(|l| l.starts_with("orca_tasks_queued{") && l.contains("queue=\"bench\""))
            .and_then(|l| l.rsplit(' ').next()?.parse::<usize>().ok())
            .unwrap_or(0);
        if queued >= tasks {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            tokio::spawn(worker(
                base.to_owned(),
                format!("bench-{w}"),
                stop.clone(),
                done.clone(),
                tasks,
            ))
        })
        .collect();
    for h in handles {
        h.await.expect("a worker");
    }
    // Every completion answered (the task's end stored): the clock stops.
    let elapsed = start.elapsed();
    assert_eq!(done.load(Ordering::Relaxed), tasks, "each task once");
    for id in &ids {
        assert_eq!(to_final(&client, base, id).await, "succeeded");
    }
    tasks as f64 / elapsed.as_secs_f64()
}

/// Median POST → `final` of `calls` one-step runs calling `tool`, one at a time.
async fn latency(base: &str, calls: usize, tool: &str, arguments: Value) -> f64 {
    let client = reqwest::Client::new();
    let mut times = Vec::with_capacity(calls);
    for _ in 0..calls {
        let start = Instant::now();
        let id = create(&client, base, vec![call("s", tool, arguments.clone())]).await;
        assert_eq!(to_final(&client, base, &id).await, "succeeded");
        times.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    median(&mut times)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn range(values: &[f64]) -> (f64, f64) {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

#[tokio::main]
async fn main() {
    let a = args();
    let mut one = Vec::new();
    let mut eight = Vec::new();
    let mut builtin = Vec::new();
    let mut worker_call = Vec::new();
    for round in 0..a.rounds {
        for (workers, into) in [(1, &mut one), (8, &mut eight)] {
            let srv = server::start(&a.bin, &[]).await;
            declare(&reqwest::Client::new(), &srv.base).await;
            let rate = throughput(&srv.base, a.tasks, workers).await;
            eprintln!("round {round}: {workers} worker(s): {rate:.0} tasks/s");
            into.push(rate);
        }
        let srv = server::start(&a.bin, &[]).await;
        declare(&reqwest::Client::new(), &srv.base).await;
        let stop = Arc::new(AtomicBool::new(false));
        let served = tokio::spawn(worker(
            srv.base.clone(),
            "bench-latency".into(),
            stop.clone(),
            Arc::new(AtomicUsize::new(0)),
            usize::MAX,
        ));
        let math = json!({"expression": "1 + 1"});
        let b = latency(&srv.base, a.calls, "math.calculate", math).await;
        let w = latency(&srv.base, a.calls, "bench.echo", json!({"text": "hi"})).await;
        stop.store(true, Ordering::Relaxed);
        let _ = served.await;
        eprintln!("round {round}: POST→final median: built-in {b:.2} ms, worker tool {w:.2} ms");
        builtin.push(b);
        worker_call.push(w);
    }
    let report = |name: &str, unit: &str, values: &mut Vec<f64>| {
        let (lo, hi) = range(values);
        let m = median(values);
        println!("{name}: median {m:.2} {unit} (range {lo:.2} – {hi:.2})");
    };
    report("tasks/s, 1 worker", "tasks/s", &mut one);
    report("tasks/s, 8 workers", "tasks/s", &mut eight);
    report("POST→final, math.calculate", "ms", &mut builtin);
    report("POST→final, worker tool", "ms", &mut worker_call);
    let added: Vec<f64> = worker_call
        .iter()
        .zip(&builtin)
        .map(|(w, b)| w - b)
        .collect();
    report("added per call", "ms", &mut added.clone());
}
