//! Benchmark: the cost of agents, with instant models (the offline provider, no token delay)
//! and SQLite persistence on (events, attempts, checkpoints), in-process (the engine API).
//!
//! - per agent turn: (a 10-agent chain − a 1-agent chain) / 9, beside the same for plain
//!   `llm` steps and `tool` steps — the turn's own overhead is the difference to `llm`;
//! - per group-chat round: (a 20-round chat − a 1-round chat) / 19, 5 participants;
//! - a 5-agent, 20-round group chat end to end.
//!
//! Medians over `--runs` runs per round, then the median and range of `--rounds` rounds.
//!
//! Usage: `cargo run --release --example bench_teams -- [--runs 50] [--rounds 5]`

use std::time::{Duration, Instant};

use futures::StreamExt;
use orca::Created;
use orca::Follow;
use orca::RunRequest;
use orca::app::App;
use orca::config::{Config, ProviderChoice};
use orca::domain::{EventKind, Orchestration, Tenant};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const NAMES: [&str; 5] = ["ada", "bo", "cy", "di", "ed"];

fn team() -> Value {
    let mut agents = serde_json::Map::new();
    for n in NAMES {
        agents.insert(
            n.into(),
            json!({ "description": format!("Agent {n}."), "instructions": format!("You are {n}. Answer briefly.") }),
        );
    }
    Value::Object(agents)
}

/// A chain of `n` steps of `kind` (agent, llm or tool).
fn chain(kind: &str, n: usize) -> Value {
    let steps: Vec<Value> = (0..n)
        .map(|i| {
            let input = match kind {
                "agent" => json!({ "agent": NAMES[i % NAMES.len()], "prompt": "What is 1 + 1?" }),
                "llm" => json!({ "prompt": "What is 1 + 1?" }),
                _ => json!({ "tool": "math.calculate", "arguments": { "expression": "1 + 1" } }),
            };
            let deps: Vec<String> = if i == 0 {
                vec![]
            } else {
                vec![format!("s{}", i - 1)]
            };
            json!({ "id": format!("s{i}"), "kind": kind, "depends_on": deps, "input": input })
        })
        .collect();
    json!({ "agents": team(), "steps": steps })
}

fn chat(rounds: u32) -> Value {
    json!({ "agents": team(), "steps": [{ "id": "chat", "kind": "group_chat", "input": {
        "participants": NAMES, "prompt": "Discuss 1 + 1.", "max_rounds": rounds,
        "termination": { "max_rounds": rounds } } }] })
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

async fn run(app: &App, plan: &Value) -> Duration {
    let request = RunRequest {
        input: json!("bench"),
        orchestration: Orchestration::Fixed,
        plan: Some(plan.clone()),
        ..Default::default()
    };
    let t0 = Instant::now();
    let engine = app.engine();
    let tenant = Tenant::default_tenant();
    let admitted = engine.admit(&tenant, request).await.expect("a valid plan");
    let created = engine
        .create_run(&tenant, admitted, None, Follow::Later)
        .await
        .expect("run");
    let (Created::New(r, _) | Created::Existing(r)) = created;
    let mut events = std::pin::pin!(app.events().follow(r.id, 0, CancellationToken::new()));
    while let Some(ev) = events.next().await {
        let ev = ev.expect("event");
        if ev.kind == EventKind::Final {
            let data = ev.data.to_data();
            assert_eq!(data["status"], "succeeded", "{data}");
            break;
        }
    }
    t0.elapsed()
}

/// (per unit, the whole longer run): medians per round, then the median and range over rounds.
async fn per_unit(
    app: &App,
    long: &Value,
    short: &Value,
    units: u32,
    runs: usize,
    rounds: usize,
) -> (Vec<Duration>, Duration) {
    let mut per = Vec::new();
    let mut whole = Vec::new();
    for _ in 0..rounds {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            a.push(run(app, long).await);
            b.push(run(app, short).await);
        }
        let (ma, mb) = (median(a), median(b));
        whole.push(ma);
        per.push(ma.saturating_sub(mb) / units);
    }
    per.sort();
    (per, median(whole))
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[tokio::main]
async fn main() {
    let (mut runs, mut rounds) = (50usize, 5usize);
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
    config.engine.max_running_runs = 256;
    let app = App::build(config).await.expect("app");

    println!("| measure | median of rounds | range | longer run, median |");
    println!("|---|---|---|---|");
    for kind in ["tool", "llm", "agent"] {
        let (per, whole) = per_unit(&app, &chain(kind, 10), &chain(kind, 1), 9, runs, rounds).await;
        println!(
            "| per `{kind}` step in a chain | {:.1} µs | {:.1} – {:.1} µs | {:.2} ms |",
            us(per[per.len() / 2]),
            us(per[0]),
            us(per[per.len() - 1]),
            whole.as_secs_f64() * 1e3
        );
    }
    let (per, whole) = per_unit(&app, &chat(20), &chat(1), 19, runs, rounds).await;
    println!(
        "| per group-chat round (5 agents) | {:.1} µs | {:.1} – {:.1} µs | {:.2} ms (5 agents, 20 rounds, end to end) |",
        us(per[per.len() / 2]),
        us(per[0]),
        us(per[per.len() - 1]),
        whole.as_secs_f64() * 1e3
    );
}
