//! The instruction-count guard's workload: `--runs N` in-process 10-step chains of instant
//! tools (`math.calculate "1 + 1"`) with SQLite persistence, each created and followed to
//! `final` as `POST /v1/runs` with a stream does, one at a time on a one-thread runtime.
//!
//! Run under callgrind twice with different `--runs` (`.ci/instructions` does), the difference
//! divided by the difference in runs is the instructions one run costs, start-up excluded: a
//! figure that does not depend on the machine's speed or load, held to the budget in
//! `benches/instructions.budget`.
//!
//! Usage: `cargo run --example bench_instructions -- --runs 10`

use futures::StreamExt;
use orca::Created;
use orca::RunRequest;
use orca::app::App;
use orca::config::{Config, ProviderChoice};
use orca::domain::{EventKind, Orchestration, Tenant};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn chain(n: usize) -> Value {
    let steps: Vec<Value> = (0..n)
        .map(|i| {
            let after: Vec<String> = (i > 0).then(|| format!("s{}", i - 1)).into_iter().collect();
            json!({ "id": format!("s{i}"), "kind": "tool", "depends_on": after,
                    "input": { "tool": "math.calculate", "arguments": { "expression": "1 + 1" } } })
        })
        .collect();
    json!({ "steps": steps })
}

async fn one_run(app: &App, plan: &Value) {
    let engine = app.engine();
    let tenant = Tenant::default_tenant();
    let request = RunRequest {
        input: json!("bench"),
        orchestration: Orchestration::Fixed,
        plan: Some(plan.clone()),
        ..Default::default()
    };
    let admitted = engine.admit(&tenant, request).await.expect("a valid plan");
    let Created::New(_, Some(opened)) = engine
        .create_run(&tenant, admitted, None, true)
        .await
        .expect("run")
    else {
        panic!("a new run, opened");
    };
    let mut events = std::pin::pin!(app.events().follow_opened(opened, CancellationToken::new()));
    while let Some(ev) = events.next().await {
        let ev = ev.expect("event");
        if ev.kind == EventKind::Final {
            let data = ev.data.to_data();
            assert_eq!(data["status"], "succeeded", "{data}");
            return;
        }
    }
    panic!("the stream ended without `final`");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs: usize = match &args[..] {
        [flag, n] if flag == "--runs" => n.parse().expect("--runs N"),
        [] => 10,
        _ => panic!("usage: bench_instructions [--runs N]"),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = Config::default();
        config.server.bind = "127.0.0.1:0".into();
        config.database.url = format!("sqlite://{}", dir.path().join("bench.db").display());
        config.llm.provider = ProviderChoice::Offline;
        let app = App::build(config).await.expect("app");
        let plan = chain(10);
        for _ in 0..runs {
            one_run(&app, &plan).await;
        }
    });
}
