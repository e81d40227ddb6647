//! Benchmark: what planning costs orca itself, model time excluded.
//!
//! - **Validate a 50-step plan**: `orca::plan::validate_plan` on a 50-step chain whose steps
//!   pass data with `{{ }}` references (schema, ids, cycles, references, tool arguments).
//! - **Validate and store a 50-step plan**: the same, then the plan version written to SQLite
//!   (`Store::append`, one transaction, as the engine stores a version).
//! - **One re-plan**: a reactive run (in-process, offline model, no token pacing) whose 10-step
//!   chain fails at its last step; the offline re-planner answers `alternative`. Overhead =
//!   time from the failed step's `step` event to the first `step` event of version 2, minus
//!   the re-planner's model call (its `running` → `completed` events): abandoning the version,
//!   rendering the prompt, parsing, validating and checking the answer, storing and announcing
//!   version 2, checkpointing what it keeps, and starting its scheduler.
//!
//! Usage: `cargo run --release --example bench_replan -- [--runs 200] [--rounds 5]`

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use orca::Created;
use orca::Follow;
use orca::RunRequest;
use orca::app::App;
use orca::config::{Config, ProviderChoice};
use orca::domain::{EventKind, Orchestration, RunId, Tenant};
use orca::store::{Record, Store};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn chain(n: usize, failing_last: bool) -> Value {
    let mut steps = vec![json!({ "id": "s0", "kind": "tool",
        "input": { "tool": "math.calculate", "arguments": { "expression": "0 + 1" } } })];
    for i in 1..n {
        let last = i == n - 1;
        let input = if last && failing_last {
            json!({ "tool": "fs.read", "arguments": { "path": "missing.txt" } })
        } else {
            json!({ "tool": "math.calculate",
                    "arguments": { "expression": format!("{{{{ steps.s{}.output.result }}}} + 1", i - 1) } })
        };
        steps.push(json!({ "id": format!("s{i}"), "kind": "tool",
                           "depends_on": [format!("s{}", i - 1)], "input": input }));
    }
    json!({ "steps": steps })
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Median and range over rounds of the per-round medians.
fn summary(rounds: &[Duration]) -> String {
    let mut sorted = rounds.to_vec();
    sorted.sort();
    format!(
        "{:.1} µs | {:.1} – {:.1} µs",
        micros(median(rounds.to_vec())),
        micros(sorted[0]),
        micros(sorted[sorted.len() - 1])
    )
}

async fn replan_overhead(app: &App) -> Duration {
    let request = RunRequest {
        input: json!("count, then read the file"),
        orchestration: Orchestration::Reactive,
        plan: Some(chain(10, true)),
        ..Default::default()
    };
    let engine = app.engine();
    let tenant = Tenant::default_tenant();
    // Admitted as the API admits a request: the engine validates the plan once.
    let admitted = engine.admit(&tenant, request).await.expect("a valid plan");
    let run = match engine
        .create_run(&tenant, admitted, None, Follow::Later)
        .await
        .expect("run")
    {
        Created::New(r, _) | Created::Existing(r) => r,
    };
    let times = replan_times(app, run.id).await;
    let model = times.replanner_done - times.replanner_start;
    let whole = times.v2_first_step - times.failed;
    (whole - model).to_std().expect("the events come in order")
}

struct Times {
    failed: DateTime<Utc>,
    replanner_start: DateTime<Utc>,
    replanner_done: DateTime<Utc>,
    v2_first_step: DateTime<Utc>,
}

async fn replan_times(app: &App, run: RunId) -> Times {
    let mut events = std::pin::pin!(app.events().follow(run, 0, CancellationToken::new()));
    let (mut failed, mut start, mut done, mut first) = (None, None, None, None);
    let mut version = 1;
    while let Some(ev) = events.next().await {
        let ev = ev.expect("event");
        let d = ev.data.to_data();
        match ev.kind {
            EventKind::Plan => version = d["version"].as_u64().unwrap_or(1),
            EventKind::Step if d["status"] == "failed" && failed.is_none() => failed = Some(ev.ts),
            EventKind::Step if d["step_id"] == "replanner" && d["status"] == "running" => {
                start = Some(ev.ts)
            }
            EventKind::Step if d["step_id"] == "replanner" && d["status"] == "completed" => {
                done = Some(ev.ts)
            }
            EventKind::Step if version == 2 && first.is_none() => first = Some(ev.ts),
            EventKind::Final => {
                assert_eq!(d["status"], "succeeded", "{d}");
                break;
            }
            _ => {}
        }
    }
    Times {
        failed: failed.expect("a step failed"),
        replanner_start: start.expect("the re-planner ran"),
        replanner_done: done.expect("the re-planner answered"),
        v2_first_step: first.expect("version 2 ran"),
    }
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
    config.llm.offline_token_delay_ms = 0;
    config.tools.workspace_dir = dir.path().join("workspace");
    std::fs::create_dir_all(&config.tools.workspace_dir).expect("workspace");
    config.engine.max_running_runs = 256;
    let store_url = format!("sqlite://{}", dir.path().join("plans.db").display());
    let app = App::build(config).await.expect("app");
    Store::migrate(&store_url).await.expect("migrate");
    let store = Store::connect(&store_url, 4).await.expect("store");

    let plan50 = chain(50, false);
    let catalog = app.engine();
    let (mut validate, mut store_too, mut replan) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let mut v = Vec::with_capacity(runs);
        let mut s = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t0 = Instant::now();
            let valid = orca::plan::validate_plan(&plan50, catalog.catalog()).expect("valid");
            v.push(t0.elapsed());
            assert_eq!(valid.specs().len(), 50);
            let t0 = Instant::now();
            orca::plan::validate_plan(&plan50, catalog.catalog()).expect("valid");
            let record = Record::Plan {
                run: RunId::new(),
                version: 1,
                reason: "initial".into(),
                plan: plan50.clone().into(),
                change: None,
            };
            store.append(&[record]).await.expect("stored");
            s.push(t0.elapsed());
        }
        validate.push(median(v));
        store_too.push(median(s));
        let mut r = Vec::with_capacity(runs);
        for _ in 0..runs.min(100) {
            r.push(replan_overhead(&app).await);
        }
        replan.push(median(r));
    }
    println!("| measure | median | range |");
    println!("|---|---|---|");
    println!("| validate a 50-step plan | {} |", summary(&validate));
    println!(
        "| validate and store a 50-step plan | {} |",
        summary(&store_too)
    );
    println!(
        "| one re-plan, model time excluded | {} |",
        summary(&replan)
    );
}
