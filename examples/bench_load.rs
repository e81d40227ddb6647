//! Benchmark: HTTP load. Starts `orca serve` (a release binary, offline provider, temp SQLite
//! file) on loopback and streams `--runs` runs of a 10-step chain (ten `math.calculate` tool
//! steps, each depending on the one before) with `--concurrency` in flight, each read to its
//! `final` event. Per round, and as the median and range over `--rounds`:
//! - runs per second: runs read to `final` / the round's wall time;
//! - server CPU per run: the server's utime + stime (`/proc/PID/stat`) across the round / runs;
//! - context switches per run: voluntary + nonvoluntary switches summed over the server's
//!   threads (`/proc/PID/task/*/status`) across the round / runs. Switches of a thread that
//!   exited during the round are lost (the round says how many exited); `/proc/PID/status`
//!   alone would count the main thread only;
//! - POST → first SSE event and POST → `final`, p50 and p99 over the round's runs.
//!
//! After the rounds: the server's peak resident memory (VmHWM), and its VmRSS after warm-up and
//! 1 s after the load ended (does memory go back?). Then, once per round, events per second to
//! one stream client: a `simple` run whose offline model answers with ~50,000 token events
//! as fast as it can, streamed on `POST` and read to `final` (events received / POST → `final`). Client and server share the machine: the
//! client's own CPU per run is shown so that its share of the cores is visible, and so is the
//! CPU anything else used in the round (`/proc/stat` busy time minus server and client, as a
//! share of all CPUs): a round with other work beside it is disturbed, and the output says so.
//!
//! Any run that does not end `succeeded`, a stream that ends without `final`, or a POST that
//! is not answered 200 stops the benchmark with a message and exit status 1. Linux only (/proc).
//!
//! Usage: `cargo build --release && cargo run --release --example bench_load -- [--rounds 3]
//! [--runs 1000] [--concurrency 100] [--bin target/release/orca]`

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

#[path = "common/plans.rs"]
mod plans;
#[path = "common/server.rs"]
mod server;
use server::start;

/// What this benchmark sets beside the offline provider: every run in flight admitted at once,
/// and a model that streams its tokens without pausing (the token stream's figure).
const ENV: &[(&str, &str)] = &[
    ("ORCA_ENGINE__MAX_RUNNING_RUNS", "256"),
    ("ORCA_LLM__OFFLINE_TOKEN_DELAY_MS", "0"),
];

/// Words in the token stream's input; the offline model answers with one token event each.
const STREAM_WORDS: usize = 49_990;

/// Runs streamed before the first round (connections opened, caches and statements warm).
const WARM_UP: usize = 50;

struct Args {
    rounds: usize,
    runs: usize,
    concurrency: usize,
    bin: String,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        rounds: 3,
        runs: 1000,
        concurrency: 100,
        bin: "target/release/orca".into(),
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    for pair in v.chunks(2) {
        let Some(val) = pair.get(1) else {
            return Err(format!("{} needs a value", pair[0]));
        };
        let number = |name: &str| -> Result<usize, String> {
            match val.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("{name} takes a positive number, not {val:?}")),
            }
        };
        match pair[0].as_str() {
            "--rounds" => a.rounds = number("--rounds")?,
            "--runs" => a.runs = number("--runs")?,
            "--concurrency" => a.concurrency = number("--concurrency")?,
            "--bin" => a.bin = val.clone(),
            other => {
                return Err(format!(
                    "unknown argument {other} (known: --rounds, --runs, --concurrency, --bin)"
                ));
            }
        }
    }
    Ok(a)
}

/// The request of the workload: a 10-step chain of instant tool steps.
fn chain_request() -> Value {
    json!({ "input": "go", "orchestration": "fixed", "plan": plans::chain(10) })
}

/// One run's times: POST → first SSE event, POST → `final`.
struct Sample {
    first: Duration,
    last: Duration,
}

/// Streams one run to `final` and checks that it ended `succeeded`.
async fn stream_run(client: &reqwest::Client, base: &str, body: &Value) -> Result<Sample, String> {
    let t0 = Instant::now();
    let resp = client
        .post(format!("{base}/v1/runs"))
        .header("accept", "text/event-stream")
        .json(body)
        .send()
        .await
        .map_err(|e| format!("POST /v1/runs: {e}"))?;
    if resp.status() != reqwest::StatusCode::OK {
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        return Err(format!("POST /v1/runs answered {status}: {text}"));
    }
    let mut stream = resp.bytes_stream();
    let (mut buf, mut first) = (Vec::new(), None);
    while let Some(chunk) = stream.next().await {
        buf.extend_from_slice(&chunk.map_err(|e| format!("reading the stream: {e}"))?);
        while let Some(pos) = buf.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = buf.drain(..pos + 2).collect();
            let block = String::from_utf8_lossy(&block);
            let mut lines = block.lines();
            if !block.starts_with("id:") {
                continue; // a comment (keep-alive)
            }
            first.get_or_insert_with(|| t0.elapsed());
            if !lines.any(|l| l == "event: final") {
                continue;
            }
            let last = t0.elapsed();
            check_final(&block)?;
            let first = first.unwrap_or(last);
            return Ok(Sample { first, last });
        }
    }
    Err(format!(
        "a stream ended without `final` (first event {})",
        if first.is_some() {
            "seen"
        } else {
            "never seen"
        }
    ))
}

/// Streams one `simple` run whose answer is [`STREAM_WORDS`] token events; events per second
/// from POST to `final` (all events counted, tokens and the rest).
async fn token_stream(client: &reqwest::Client, base: &str) -> Result<f64, String> {
    let body = json!({ "input": "w ".repeat(STREAM_WORDS), "orchestration": "simple" });
    let t0 = Instant::now();
    let resp = client
        .post(format!("{base}/v1/runs"))
        .header("accept", "text/event-stream")
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("POST /v1/runs: {e}"))?;
    let mut stream = resp.bytes_stream();
    let (mut buf, mut events) = (Vec::new(), 0usize);
    while let Some(chunk) = stream.next().await {
        buf.extend_from_slice(&chunk.map_err(|e| format!("reading the stream: {e}"))?);
        let mut start = 0;
        while let Some(pos) = buf[start..].windows(2).position(|w| w == b"\n\n") {
            let block = &buf[start..start + pos];
            start += pos + 2;
            if !block.starts_with(b"id:") {
                continue;
            }
            events += 1;
            if block.windows(12).any(|w| w == b"event: final") {
                let secs = t0.elapsed().as_secs_f64();
                check_final(&String::from_utf8_lossy(block))?;
                if events < STREAM_WORDS {
                    return Err(format!("only {events} events streamed"));
                }
                return Ok(events as f64 / secs);
            }
        }
        buf.drain(..start);
    }
    Err("the token stream ended without `final`".into())
}

/// The `final` event's data must say `succeeded`.
fn check_final(block: &str) -> Result<(), String> {
    let data = block
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .ok_or_else(|| format!("a `final` event without data: {block}"))?;
    let event: Value =
        serde_json::from_str(data.trim()).map_err(|e| format!("`final` data: {e}: {data}"))?;
    match event["data"]["status"].as_str() {
        Some("succeeded") => Ok(()),
        other => Err(format!(
            "run {} ended {}, not succeeded: {}",
            event["run_id"],
            other.unwrap_or("without a status"),
            event["data"]
        )),
    }
}

/// Streams `runs` runs, `concurrency` at a time; the first failure ends the round.
async fn round_runs(
    client: &reqwest::Client,
    base: &str,
    runs: usize,
    concurrency: usize,
) -> Result<Vec<Sample>, String> {
    let body = chain_request();
    let mut results = futures::stream::iter(0..runs)
        .map(|_| stream_run(client, base, &body))
        .buffer_unordered(concurrency);
    let mut samples = Vec::with_capacity(runs);
    while let Some(sample) = results.next().await {
        samples.push(sample?);
    }
    Ok(samples)
}

/// The machine's clock ticks per second, in which `/proc/PID/stat` counts CPU time.
fn clock_ticks() -> f64 {
    #[cfg(unix)]
    {
        // SAFETY: sysconf reads a constant of the system; it has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        if ticks > 0 {
            return ticks as f64;
        }
    }
    100.0
}

/// A process's user + system CPU time in clock ticks (`/proc/PID/stat` fields 14 and 15).
fn cpu_ticks(pid: &str) -> Result<u64, String> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    match (field(11), field(12)) {
        (Some(utime), Some(stime)) => Ok(utime + stime),
        _ => Err(format!("{path}: no utime/stime in {stat:?}")),
    }
}

/// The machine's busy CPU time in clock ticks, all CPUs (`/proc/stat`: user, nice, system,
/// irq, softirq, steal; not idle or iowait).
fn machine_busy_ticks() -> Result<u64, String> {
    let stat = std::fs::read_to_string("/proc/stat").map_err(|e| format!("/proc/stat: {e}"))?;
    let cpu = stat.lines().next().unwrap_or_default();
    let fields: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    match fields.as_slice() {
        [user, nice, system, _idle, _iowait, irq, softirq, steal, ..] => {
            Ok(user + nice + system + irq + softirq + steal)
        }
        _ => Err(format!("/proc/stat: no CPU times in {cpu:?}")),
    }
}

/// Voluntary + nonvoluntary context switches of each live thread of `pid`, by thread id.
fn switches_by_thread(pid: u32) -> Result<HashMap<String, u64>, String> {
    let dir = format!("/proc/{pid}/task");
    let tasks = std::fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))?;
    let mut out = HashMap::new();
    for task in tasks.flatten() {
        // A thread may exit between the listing and the read: skip it.
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        let switches: u64 = status
            .lines()
            .filter(|l| {
                l.starts_with("voluntary_ctxt_switches:")
                    || l.starts_with("nonvoluntary_ctxt_switches:")
            })
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        out.insert(task.file_name().to_string_lossy().into_owned(), switches);
    }
    Ok(out)
}

/// A memory figure of `/proc/PID/status` in MiB (`VmRSS:`, `VmHWM:`).
fn memory_mib(pid: u32, field: &str) -> Result<f64, String> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .ok_or_else(|| format!("{path}: no {field}"))
}

/// What `/proc` says about the server (and the client) at one moment.
struct Snapshot {
    at: Instant,
    server_ticks: u64,
    client_ticks: u64,
    machine_ticks: u64,
    switches: HashMap<String, u64>,
}

impl Snapshot {
    fn take(pid: u32) -> Result<Snapshot, String> {
        Ok(Snapshot {
            at: Instant::now(),
            server_ticks: cpu_ticks(&pid.to_string())?,
            client_ticks: cpu_ticks("self")?,
            machine_ticks: machine_busy_ticks()?,
            switches: switches_by_thread(pid)?,
        })
    }
}

/// One round's figures.
struct Round {
    runs_per_s: f64,
    server_cpu_us: f64,
    client_cpu_us: f64,
    /// The share of the machine's CPUs busy with anything but this server and client, in %.
    others_pct: f64,
    switches: f64,
    threads_exited: usize,
    first: (f64, f64),
    last: (f64, f64),
}

impl Round {
    /// The figures of `samples`, between the snapshots `a` (before) and `b` (after).
    fn new(a: &Snapshot, b: &Snapshot, mut samples: Vec<Sample>) -> Round {
        let runs = samples.len() as f64;
        let per_run_us = |ticks: u64| ticks as f64 / clock_ticks() * 1e6 / runs;
        // Threads alive at both ends count their difference, threads born during the round
        // count from zero; threads that exited during the round are lost.
        let switches: u64 = b
            .switches
            .iter()
            .map(|(tid, n)| n.saturating_sub(a.switches.get(tid).copied().unwrap_or(0)))
            .sum();
        let threads_exited = a
            .switches
            .keys()
            .filter(|t| !b.switches.contains_key(*t))
            .count();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        samples.sort_by_key(|s| s.first);
        let first = (
            ms(percentile(&samples, 0.50).first),
            ms(percentile(&samples, 0.99).first),
        );
        samples.sort_by_key(|s| s.last);
        let last = (
            ms(percentile(&samples, 0.50).last),
            ms(percentile(&samples, 0.99).last),
        );
        let server = b.server_ticks.saturating_sub(a.server_ticks);
        let client = b.client_ticks.saturating_sub(a.client_ticks);
        let others = (b.machine_ticks - a.machine_ticks).saturating_sub(server + client);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let wall = (b.at - a.at).as_secs_f64();
        Round {
            runs_per_s: runs / wall,
            server_cpu_us: per_run_us(server),
            client_cpu_us: per_run_us(client),
            others_pct: others as f64 / clock_ticks() / (wall * cpus) * 100.0,
            switches: switches as f64 / runs,
            threads_exited,
            first,
            last,
        }
    }
}

/// The nearest-rank percentile of `sorted` (not empty).
fn percentile<T>(sorted: &[T], p: f64) -> &T {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    &sorted[idx]
}

/// The machine: logical CPUs and the CPU model of `/proc/cpuinfo`.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown CPU", |(_, m)| m.trim());
    format!("{cpus} CPUs (nproc), {model}")
}

fn print_header(a: &Args) {
    println!("HTTP load, streamed 10-step chain: {}", machine());
    println!(
        "command: `cargo run --release --example bench_load -- --rounds {} --runs {} \
         --concurrency {} --bin {}` (client and server on the same machine; CPU time in {} \
         clock ticks per second)",
        a.rounds,
        a.runs,
        a.concurrency,
        a.bin,
        clock_ticks()
    );
    println!();
}

fn print_rounds(rounds: &[Round]) {
    println!(
        "| round | runs/s | server CPU/run | client CPU/run | other processes' CPU | \
         ctx switches/run | first event p50 / p99 | `final` p50 / p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (i, r) in rounds.iter().enumerate() {
        let exited = match r.threads_exited {
            0 => String::new(),
            n => format!(" ({n} threads exited, their switches lost)"),
        };
        println!(
            "| {} | {:.0} | {:.0} µs | {:.0} µs | {:.0} % | {:.1}{exited} | {:.2} / {:.2} ms | \
             {:.2} / {:.2} ms |",
            i + 1,
            r.runs_per_s,
            r.server_cpu_us,
            r.client_cpu_us,
            r.others_pct,
            r.switches,
            r.first.0,
            r.first.1,
            r.last.0,
            r.last.1
        );
    }
    println!();
    if rounds.iter().any(|r| r.others_pct > 5.0) {
        println!(
            "Other processes kept more than 5 % of the machine busy in some round: its figures \
             are disturbed.\n"
        );
    }
}

/// A summary row: the median and range of `xs` over the rounds.
fn summary(name: &str, unit: &str, decimals: usize, mut xs: Vec<f64>) {
    xs.sort_by(f64::total_cmp);
    let (median, low, high) = (xs[xs.len() / 2], xs[0], xs[xs.len() - 1]);
    let unit = if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    };
    println!("| {name} | {median:.decimals$}{unit} | {low:.decimals$} – {high:.decimals$}{unit} |");
}

fn print_summary(a: &Args, rounds: &[Round]) {
    let col = |f: fn(&Round) -> f64| rounds.iter().map(f).collect::<Vec<f64>>();
    println!("| measure | median | range ({} rounds) |", rounds.len());
    println!("|---|---|---|");
    let rps = format!("runs per second ({} in flight)", a.concurrency);
    summary(&rps, "runs/s", 0, col(|r| r.runs_per_s));
    summary(
        "server CPU per run (utime + stime)",
        "µs",
        0,
        col(|r| r.server_cpu_us),
    );
    summary("client CPU per run", "µs", 0, col(|r| r.client_cpu_us));
    summary(
        "other processes' CPU (share of the machine)",
        "%",
        0,
        col(|r| r.others_pct),
    );
    summary(
        "server context switches per run",
        "",
        1,
        col(|r| r.switches),
    );
    summary("POST → first event, p50", "ms", 2, col(|r| r.first.0));
    summary("POST → first event, p99", "ms", 2, col(|r| r.first.1));
    summary("POST → `final`, p50", "ms", 2, col(|r| r.last.0));
    summary("POST → `final`, p99", "ms", 2, col(|r| r.last.1));
}

async fn run(a: &Args) -> Result<(), String> {
    let server = start(&a.bin, ENV).await;
    let pid = server.child.id();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(a.concurrency)
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    round_runs(&client, &server.base, WARM_UP, a.concurrency.min(WARM_UP)).await?;
    let rss_warm = memory_mib(pid, "VmRSS:")?;
    let mut rounds = Vec::new();
    for i in 1..=a.rounds {
        let before = Snapshot::take(pid)?;
        let samples = round_runs(&client, &server.base, a.runs, a.concurrency).await?;
        let after = Snapshot::take(pid)?;
        let r = Round::new(&before, &after, samples);
        eprintln!(
            "round {i}: {:.0} runs/s, {:.0} µs server CPU/run, {:.1} switches/run",
            r.runs_per_s, r.server_cpu_us, r.switches
        );
        rounds.push(r);
    }
    let peak = memory_mib(pid, "VmHWM:")?;
    // Idle connections are dropped first, so what the server still holds is its own.
    drop(client);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_after = memory_mib(pid, "VmRSS:")?;
    print_header(a);
    print_rounds(&rounds);
    print_summary(a, &rounds);
    println!("| server memory after warm-up (VmRSS) | {rss_warm:.1} MiB | |");
    println!("| server peak memory (VmHWM) | {peak:.1} MiB | |");
    println!("| server memory 1 s after the load (VmRSS) | {rss_after:.1} MiB | |");
    let client = reqwest::Client::new();
    let mut rates = Vec::new();
    for _ in 0..a.rounds {
        rates.push(token_stream(&client, &server.base).await? / 1000.0);
    }
    summary("events per second to one stream client", "k/s", 0, rates);
    Ok(())
}

#[tokio::main]
async fn main() {
    // `run` owns the server, so it is stopped (dropped) before the process exits.
    let outcome = match args() {
        Ok(a) => run(&a).await,
        Err(e) => Err(e),
    };
    if let Err(e) = outcome {
        eprintln!("bench_load: {e}");
        std::process::exit(1);
    }
}
