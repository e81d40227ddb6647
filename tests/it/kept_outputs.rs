//! A failed or cancelled run keeps what its completed steps produced (issue 43), as a run cut
//! off by a limit or its time limit does: `output` holds each completed top-level step's
//! output under its id, so the keys say which steps it came from. Whether the run ends at a
//! top-level step or in a child of `sequential`, `parallel` or `loop`, in the `final` event and
//! in `GET /v1/runs/{id}` alike.

use serde_json::{Value, json};

use crate::support::app::{SseMessage, TestApp, final_data, spawn_app};
use crate::support::{skip_to, to_final};

fn calc(id: &str, expression: &str) -> Value {
    json!({ "id": id, "kind": "tool",
            "input": { "tool": "math.calculate", "arguments": { "expression": expression } } })
}

/// A `kind` step (`sequential`, `parallel`, `loop`) with these children.
fn composite(kind: &str, id: &str, children: Vec<Value>) -> Value {
    match kind {
        "loop" => json!({ "id": id, "kind": "loop",
            "input": { "for_each": [1], "max_iterations": 1, "steps": children } }),
        _ => json!({ "id": id, "kind": kind, "input": { "steps": children } }),
    }
}

/// A plan whose `first` and `ok` (a `kind` step whose child completes) complete, then `last`
/// (depending on both) ends the run, followed by `after`, which never runs.
fn plan(kind: &str, last: Value) -> Value {
    let mut last = last;
    last["id"] = json!("last");
    last["depends_on"] = json!(["first", "ok"]);
    json!({ "steps": [
        calc("first", "2 + 2"),
        composite(kind, "ok", vec![calc("c1", "1 + 1")]),
        last,
        { "id": "after", "kind": "tool", "depends_on": ["last"],
          "input": { "tool": "math.calculate", "arguments": { "expression": "1" } } },
    ] })
}

/// The run's `final` event agrees with its run object, and both keep the outputs of `first` and
/// `ok`, by id, as their attempts stored them; the final event's data.
async fn kept(app: &TestApp, events: &[SseMessage], status: &str, case: &str) -> Value {
    let fin = final_data(events);
    let id = events[0].json()["run_id"].as_str().unwrap().to_owned();
    assert_eq!(fin["status"], status, "{case}: {fin}");
    let output = fin["output"]
        .as_object()
        .unwrap_or_else(|| panic!("{case}: no output kept: {fin}"));
    let keys: Vec<&String> = output.keys().collect();
    assert_eq!(keys, ["first", "ok"], "{case}: {fin}");
    assert_eq!(fin["output"]["first"]["result"], 4, "{case}: {fin}");
    let ok = app.attempts(&id, "ok").await;
    assert_eq!(
        fin["output"]["ok"],
        ok.last().unwrap()["output"],
        "{case}: `ok` keeps its stored output"
    );
    assert_ne!(fin["output"]["ok"], Value::Null, "{case}: {fin}");
    let (_, run) = app.get_json(&format!("/v1/runs/{id}")).await;
    for key in ["status", "completion", "output", "error"] {
        assert_eq!(run[key], fin[key], "{case}: the run object's {key}");
    }
    fin
}

#[tokio::test]
async fn a_failed_run_keeps_what_its_completed_steps_produced_at_every_level() {
    let app = spawn_app(|_| {}).await;
    let bad = calc("bad", "1 / 0");
    let cases = [
        ("top level", plan("sequential", bad.clone())),
        (
            "sequential",
            plan(
                "sequential",
                composite("sequential", "x", vec![calc("c2", "5"), bad.clone()]),
            ),
        ),
        (
            "parallel",
            plan(
                "parallel",
                composite("parallel", "x", vec![calc("c2", "5"), bad.clone()]),
            ),
        ),
        (
            "loop",
            plan("loop", composite("loop", "x", vec![bad.clone()])),
        ),
    ];
    for (case, plan) in cases {
        let events = app
            .stream_run(json!({ "input": "go", "orchestration": "fixed", "plan": plan }))
            .await;
        let fin = kept(&app, &events, "failed", case).await;
        assert_eq!(fin["completion"], "error", "{case}: {fin}");
        assert_eq!(fin["error"]["code"], "math_error", "{case}: {fin}");
    }
}

#[tokio::test]
async fn a_cancelled_run_keeps_what_its_completed_steps_produced_at_every_level() {
    let app = spawn_app(|_| {}).await;
    let ask = json!({ "id": "ask", "kind": "user_input", "input": { "prompt": "go on?" } });
    let cases = [
        ("top level", plan("sequential", ask.clone())),
        (
            "sequential",
            plan(
                "sequential",
                composite("sequential", "x", vec![calc("c2", "5"), ask.clone()]),
            ),
        ),
        (
            "parallel",
            plan(
                "parallel",
                composite("parallel", "x", vec![calc("c2", "5"), ask.clone()]),
            ),
        ),
        (
            "loop",
            plan("loop", composite("loop", "x", vec![ask.clone()])),
        ),
    ];
    for (case, plan) in cases {
        let run = app
            .create_run(json!({ "input": "go", "orchestration": "fixed", "plan": plan }))
            .await;
        let id = run["id"].as_str().unwrap().to_owned();
        let mut reader = app.events(&id).await;
        skip_to(&mut reader, "input_required", 1).await;
        let (status, _) = app
            .post_json(&format!("/v1/runs/{id}/cancel"), &json!({}))
            .await;
        assert_eq!(status, 202, "{case}");
        let events = to_final(reader).await;
        let fin = kept(&app, &events, "cancelled", case).await;
        assert_eq!(fin["completion"], "cancelled", "{case}: {fin}");
    }
}
