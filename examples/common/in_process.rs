//! One in-process run of a plan to `final`, created and followed as `POST /v1/runs` with a
//! stream does. Shared through `#[path = "common/in_process.rs"] mod in_process;`.

use futures::StreamExt;
use orca::Created;
use orca::Follow;
use orca::RunRequest;
use orca::app::App;
use orca::domain::{EventKind, Orchestration, Tenant};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

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
        .create_run(&tenant, admitted, None, Follow::Stream)
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
