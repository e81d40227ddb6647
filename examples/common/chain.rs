//! The benchmarks' plans of instant tool steps (`math.calculate "1 + 1"`) and one in-process
//! run of a plan to `final`, created and followed as `POST /v1/runs` with a stream does.
//! Shared through `#[path = "common/chain.rs"] mod chain;`.

use futures::StreamExt;
use orca::Created;
use orca::RunRequest;
use orca::app::App;
use orca::domain::{EventKind, Orchestration, Tenant};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// An instant tool step after `deps`.
pub fn step(id: String, deps: Vec<String>) -> Value {
    json!({ "id": id, "kind": "tool", "depends_on": deps,
            "input": { "tool": "math.calculate", "arguments": { "expression": "1 + 1" } } })
}

/// A plan of `n` steps, each after the one before.
pub fn chain(n: usize) -> Value {
    let steps: Vec<Value> = (0..n)
        .map(|i| {
            let after: Vec<String> = (i > 0).then(|| format!("s{}", i - 1)).into_iter().collect();
            step(format!("s{i}"), after)
        })
        .collect();
    json!({ "steps": steps })
}

/// Admits, creates and follows one `fixed` run of `plan` to its `final`, which must say
/// `succeeded`.
pub async fn run_to_final(app: &App, plan: &Value) {
    let engine = app.engine();
    let tenant = Tenant::default_tenant();
    let request = RunRequest {
        input: json!("bench"),
        orchestration: Orchestration::Fixed,
        plan: Some(plan.clone()),
        ..Default::default()
    };
    // Admitted as the API admits a request: the engine validates the plan once.
    let admitted = engine.admit(&tenant, request).await.expect("a valid plan");
    // Opened before the run starts, as `POST /v1/runs` with a stream does.
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
