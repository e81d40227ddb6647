//! What a run reports is what happened: every event of nested work carries its path, live and
//! in history.

use serde_json::{Value, json};

use crate::support::*;

/// Steps at every nesting level, each calling a tool or the model: children of `sequential`,
/// `parallel` and `loop`, and a step of a nested workflow.
fn nested_plan() -> Value {
    let calc = |id: &str, expression: &str| {
        json!({ "id": id, "kind": "tool",
                "input": { "tool": "math.calculate", "arguments": { "expression": expression } } })
    };
    json!({
        "workflows": { "inner": { "name": "inner", "steps": [calc("w1", "3 + 3")] } },
        "steps": [
            { "id": "seq", "kind": "sequential", "input": { "steps": [
                calc("t1", "1 + 1"),
                { "id": "l1", "kind": "llm", "input": { "prompt": "say hi" } } ] } },
            { "id": "par", "kind": "parallel", "input": { "steps": [calc("t2", "2 + 2")] } },
            { "id": "lp", "kind": "loop", "input": { "for_each": [1, 2], "max_iterations": 2,
              "steps": [calc("t3", "{{ item }} + 1")] } },
            { "id": "wf", "kind": "workflow", "input": { "workflow": "inner" } },
        ]
    })
}

/// The nested steps' ids and the path their events must carry (a loop's children are below
/// the iteration, `lp[<index>]`).
fn expected_path(step_id: &str) -> Option<&'static str> {
    match step_id {
        "t1" | "l1" => Some("seq"),
        "t2" => Some("par"),
        "t3" => Some("lp["),
        "w1" => Some("wf"),
        _ => None,
    }
}

/// Every event of a nested step, of every kind, carries its path.
fn assert_nested_paths(events: &[Value]) {
    let mut kinds_seen = std::collections::BTreeSet::new();
    for event in events {
        let Some(step_id) = event["step_id"].as_str() else {
            continue;
        };
        let Some(want) = expected_path(step_id) else {
            continue;
        };
        let kind = event["kind"].as_str().unwrap_or_default();
        let path = event["path"].as_str().unwrap_or_else(|| {
            panic!("a `{kind}` event of nested step `{step_id}` has no path: {event}")
        });
        assert!(
            path.starts_with(want),
            "{kind} of {step_id} at `{path}`: {event}"
        );
        kinds_seen.insert(kind.to_owned());
    }
    for kind in ["step", "tool_call", "tool_result", "token", "usage"] {
        assert!(
            kinds_seen.contains(kind),
            "no `{kind}` event of a nested step: {kinds_seen:?}"
        );
    }
}

#[tokio::test]
async fn every_event_of_nested_work_carries_its_path_live_and_in_history() {
    let app = spawn_app(|_| {}).await;
    let events = app
        .stream_run(json!({ "input": "go", "orchestration": "fixed", "plan": nested_plan() }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let live: Vec<Value> = events.iter().map(|e| e.json()).collect();
    assert_nested_paths(&live);

    let id = live[0]["run_id"].as_str().unwrap();
    let history = app.stored_events(id).await;
    assert_nested_paths(&history);
    assert_eq!(history, live, "history tells what the stream told");
}

fn calc(id: &str, expression: &str) -> Value {
    json!({ "id": id, "kind": "tool",
            "input": { "tool": "math.calculate", "arguments": { "expression": expression } } })
}

/// A run ended by a limit keeps, in its final event and its run object, the outputs of the
/// steps that completed before it.
#[tokio::test]
async fn a_run_ended_by_a_limit_keeps_what_completed() {
    let app = spawn_app(|_| {}).await;
    let mut b = calc("b", "{{ steps.a.output.result }} + 1");
    b["depends_on"] = json!(["a"]);
    let mut c = calc("c", "{{ steps.b.output.result }} + 1");
    c["depends_on"] = json!(["b"]);
    let seq = json!({ "id": "seq", "kind": "sequential", "depends_on": ["a"],
        "input": { "steps": [calc("s1", "10 + 1"), calc("s2", "10 + 2")] } });
    let cases = [
        // At the top level: a and b completed, c is one step too many.
        (
            json!({ "steps": [calc("a", "1 + 1"), b, c] }),
            2,
            json!(["a", "b"]),
        ),
        // Inside a sequential step: the limit falls on its second child.
        (
            json!({ "steps": [calc("a", "1 + 1"), seq] }),
            3,
            json!(["a"]),
        ),
    ];
    for (plan, max_steps, kept) in cases {
        let events = app
            .stream_run(
                json!({ "input": "go", "orchestration": "fixed", "plan": plan,
                                "limits": { "max_steps": max_steps } }),
            )
            .await;
        let fin = final_data(&events);
        assert_eq!(fin["status"], "failed", "{fin}");
        assert_eq!(fin["error"]["code"], "step_limit_exceeded", "{fin}");
        let output = fin["output"]
            .as_object()
            .unwrap_or_else(|| panic!("no output: {fin}"));
        let ids: Vec<&String> = output.keys().collect();
        assert_eq!(json!(ids), kept, "{fin}");
        assert_eq!(fin["output"]["a"]["result"], 2);
        let id = events[0].json()["run_id"].as_str().unwrap().to_owned();
        let (_, run) = app.get_json(&format!("/v1/runs/{id}")).await;
        assert_eq!(run["output"], fin["output"], "the run object keeps it too");
    }
}
