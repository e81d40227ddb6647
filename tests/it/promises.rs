//! Promises that must hold where users meet them: at every nesting level, across a restart, at
//! and past every limit. Each test here failed before the change it came with.

use serde_json::{Value, json};

use crate::support::tools::Probe;
use crate::support::*;

fn count(id: &str, deps: &[&str]) -> Value {
    json!({ "id": id, "kind": "tool", "depends_on": deps,
            "input": { "tool": "test.count", "arguments": { "key": id } } })
}

fn run_id(events: &[SseMessage]) -> String {
    events[0].json()["run_id"].as_str().unwrap().to_owned()
}

async fn run_plan(app: &TestApp, plan: Value) -> Vec<SseMessage> {
    app.stream_run(json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
        .await
}

/// Starts a plan run in the background and follows its events until `until` says stop;
/// returns the run id and the reader, positioned after that event.
async fn start_until(
    app: &TestApp,
    body: Value,
    until: impl Fn(&Value) -> bool,
) -> (String, SseReader) {
    let run = app.create_run(body).await;
    let id = run["id"].as_str().unwrap().to_owned();
    let resp = app
        .client
        .get(app.url(&format!("/v1/runs/{id}/events")))
        .send()
        .await
        .unwrap();
    let mut reader = SseReader::new(resp);
    loop {
        let ev = reader.next_event().await.expect("the awaited event comes");
        if until(&ev.json()) {
            return (id, reader);
        }
    }
}

fn is_input_required(ev: &Value) -> bool {
    ev["kind"] == "input_required"
}

#[tokio::test]
async fn a_fastest_parallel_closes_its_losers_in_history() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let plan = json!({ "steps": [{ "id": "race", "kind": "parallel", "input": {
        "aggregation": "fastest",
        "steps": [
            { "id": "slow", "kind": "tool", "input": { "tool": "test.sleep", "arguments": { "key": "s", "ms": 20000 } } },
            { "id": "quick", "kind": "tool", "input": { "tool": "test.count", "arguments": { "key": "q" } } },
        ] } }] });
    let events = run_plan(&app, plan).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"]["key"], "q");
    let id = run_id(&events);
    let slow = app.attempts(&id, "slow").await;
    assert_eq!(slow.len(), 1, "{slow:?}");
    assert_eq!(slow[0]["status"], "cancelled", "{slow:?}");
    assert!(slow[0]["completed_at"].is_string(), "{slow:?}");
    assert_eq!(slow[0]["path"], "race");
    let told: Vec<Value> = events
        .iter()
        .map(|e| e.json()["data"].clone())
        .filter(|d| d["step_id"] == "slow" && d["status"] == "cancelled")
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0]["reason"], "another child finished first");
}

#[tokio::test]
async fn max_parallel_steps_covers_the_children_of_a_parallel_step() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let waits: Vec<Value> = (0..4)
        .map(|i| json!({ "id": format!("w{i}"), "kind": "wait", "input": { "duration_ms": 100 } }))
        .collect();
    let plan = json!({ "settings": { "max_parallel_steps": 1 },
        "steps": [{ "id": "fan", "kind": "parallel", "input": { "steps": waits } }] });
    let events = run_plan(&app, plan).await;
    assert_eq!(final_data(&events)["status"], "succeeded");
    let id = run_id(&events);
    let mut spans = Vec::new();
    for i in 0..4 {
        let a = app.attempts(&id, &format!("w{i}")).await;
        let start = a[0]["started_at"].as_str().unwrap().to_owned();
        let end = a[0]["completed_at"].as_str().unwrap().to_owned();
        spans.push((start, end));
    }
    spans.sort();
    // Fixed-width RFC 3339 times compare in time order as strings.
    for pair in spans.windows(2) {
        assert!(
            pair[1].0 >= pair[0].1,
            "two waits ran at once under a limit of 1: {spans:?}"
        );
    }
}

#[tokio::test]
async fn a_plans_max_execution_time_ends_the_run_as_timed_out() {
    let app = spawn_app(|_| {}).await;
    let plan = json!({ "settings": { "max_execution_time_ms": 300 },
        "steps": [{ "id": "long", "kind": "wait", "input": { "duration_ms": 30000 } }] });
    let started = std::time::Instant::now();
    let events = run_plan(&app, plan).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "timed_out", "{fin}");
    assert_eq!(fin["completion"], "timeout");
    assert_eq!(fin["error"]["code"], "timed_out");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "the plan ran past its limit"
    );
}

/// Three counted tool calls, a human answer, one more call.
fn chain_with_a_pause() -> Value {
    json!({ "steps": [
        count("c1", &[]),
        count("c2", &["c1"]),
        count("c3", &["c2"]),
        { "id": "pause", "kind": "user_input", "depends_on": ["c3"], "input": { "prompt": "go on?" } },
        count("c5", &["pause"]),
    ]})
}

/// Starts the chain, stops the server while it waits, restarts it, answers, and returns the
/// final event's data.
async fn chain_across_a_restart(max_steps: u64) -> Value {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let body = json!({ "input": "x", "orchestration": "fixed", "plan": chain_with_a_pause(),
                       "limits": { "max_steps": max_steps } });
    let (id, reader) = start_until(&app, body, is_input_required).await;
    drop(reader);
    let dir = app.stop().await;
    let app = spawn_probed_app(Some(dir), &probe, |_| {}).await;
    let resp = app
        .client
        .get(app.url(&format!("/v1/runs/{id}/events")))
        .header("last-event-id", "0")
        .send()
        .await
        .unwrap();
    let mut reader = SseReader::new(resp);
    let mut asks = 0;
    while asks < 2 {
        if reader.next_event().await.unwrap().kind() == "input_required" {
            asks += 1;
        }
    }
    let answered = app
        .client
        .post(app.url(&format!("/v1/runs/{id}/input")))
        .json(&json!({ "step_id": "pause", "value": "yes" }))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 202);
    final_data(&reader.read_to_final().await)
}

#[tokio::test]
async fn usage_and_limit_counts_carry_on_across_a_restart() {
    // Six attempts in all: c1, c2, c3, the wait the stop interrupted, the wait again, c5.
    let fin = chain_across_a_restart(6).await;
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["usage"]["tool_calls"], 4, "{fin}");
    // One fewer allowed: the count from before the restart still counts.
    let fin = chain_across_a_restart(5).await;
    assert_eq!(fin["status"], "failed", "{fin}");
    assert_eq!(fin["error"]["code"], "step_limit_exceeded", "{fin}");
}
