//! What a run costs the store, counted by the store itself (`orca_store_statements_total`,
//! `orca_store_commits_total`): figures that do not depend on the machine's speed, so a test
//! can hold them. Wall-clock figures stay in BENCHMARKS.md.

use serde_json::{Value, json};

use crate::support::app::{TestApp, final_data, spawn_app};

/// A chain of `n` instant tool steps, each depending on the one before.
fn chain(n: usize) -> Value {
    let steps: Vec<Value> = (0..n)
        .map(|i| {
            let after: Vec<String> = (i > 0).then(|| format!("s{}", i - 1)).into_iter().collect();
            json!({ "id": format!("s{i}"), "kind": "tool", "depends_on": after,
                    "input": { "tool": "math.calculate", "arguments": { "expression": "1 + 1" } } })
        })
        .collect();
    json!({ "input": "go", "orchestration": "fixed", "plan": { "steps": steps } })
}

/// The store's write counters, read from `/metrics`.
async fn writes(app: &TestApp) -> (u64, u64) {
    let text = app.metrics().await;
    let read = |name: &str| -> u64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("/metrics has no {name}:\n{text}"));
        line[name.len() + 1..].parse().unwrap()
    };
    (
        read("orca_store_statements_total"),
        read("orca_store_commits_total"),
    )
}

/// A 10-step run writes its history in batches of at most one statement per table: however
/// the writer happened to cut the run into batches, each commit carries at most its events,
/// step attempts, checkpoints, plan and one write of the run's row (its state and counters
/// folded together, the last of each; its end with `final` included), besides the run's
/// insert (one statement, one commit). On PostgreSQL a batch also reads its leases and
/// notifies the other replicas (one statement each at this size).
#[tokio::test]
async fn a_ten_step_run_writes_one_statement_per_table_per_commit() {
    let app = spawn_app(|_| {}).await;
    let (statements_before, commits_before) = writes(&app).await;
    let events = app.stream_run(chain(10)).await;
    assert_eq!(final_data(&events)["status"], "succeeded");
    let (statements, commits) = writes(&app).await;
    let (statements, commits) = (statements - statements_before, commits - commits_before);

    let per_batch = if crate::support::db::on_postgres() {
        7
    } else {
        5
    };
    assert!(
        commits >= 2,
        "the insert, then the history: {commits} commits"
    );
    let batches = commits - 1;
    assert!(
        statements - 1 <= per_batch * batches,
        "{statements} statements in {commits} commits: more than one per table per batch"
    );
}
