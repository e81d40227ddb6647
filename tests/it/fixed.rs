//! Fixed workflows and plans on the DAG engine, over HTTP: ordering, fan-out/fan-in, branches,
//! parallelism limits, failures, retries, timeouts, loops, human input, checkpoints and resume.
//! Test tools count their calls, so a re-executed step would show.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::tools::Probe;
use crate::support::*;

fn count(id: &str, deps: &[&str], value: Value) -> Value {
    json!({ "id": id, "kind": "tool", "depends_on": deps,
            "input": { "tool": "test.count", "arguments": { "key": id, "value": value } } })
}

async fn run_plan(app: &TestApp, plan: Value, input: Value) -> Vec<SseMessage> {
    app.stream_run(json!({ "input": input, "orchestration": "fixed", "plan": plan }))
        .await
}

fn step_events(events: &[SseMessage], status: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.kind() == "step" && e.json()["data"]["status"] == status)
        .map(|e| e.json()["data"]["step_id"].as_str().unwrap().to_owned())
        .collect()
}

fn run_id(events: &[SseMessage]) -> String {
    events[0].json()["run_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_sequential_chain_passes_data_along() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let plan = json!({ "steps": [
        count("a", &[], json!("{{ input.start }}")),
        count("b", &["a"], json!("{{ steps.a.output.value }}-b")),
        count("c", &["b"], json!("{{ steps.b.output.value }}-c")),
    ]});
    let events = run_plan(&app, plan, json!({ "start": "go" })).await;
    assert_well_formed(&events, 1);
    assert_eq!(step_events(&events, "completed"), ["a", "b", "c"]);
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"]["value"], "go-b-c");
    for k in ["a", "b", "c"] {
        assert_eq!(probe.calls(k), 1);
    }
    // The plan event carries the plan and its critical path.
    let plan_ev = events.iter().find(|e| e.kind() == "plan").unwrap().json()["data"].clone();
    assert_eq!(plan_ev["version"], 1);
    assert_eq!(plan_ev["reason"], "initial");
    assert_eq!(plan_ev["critical_path"], json!(["a", "b", "c"]));
    let id = run_id(&events);
    let (_, plans) = app.get_json(&format!("/v1/runs/{id}/plans")).await;
    assert_eq!(plans[0]["version"], 1);
    let (_, checkpoints) = app.get_json(&format!("/v1/runs/{id}/checkpoints")).await;
    assert_eq!(
        checkpoints.as_array().unwrap().len(),
        3,
        "one per completed step"
    );
    assert_eq!(checkpoints[2]["state"]["steps"]["c"]["status"], "completed");
    let (_, run) = app.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(run["orchestration"], "fixed");
    assert_eq!(run["plan_version"], 1);
    // Each attempt stores the input it resolved its references to.
    let c = app.attempts(&id, "c").await;
    assert_eq!(
        c[0]["input"],
        json!({ "tool": "test.count", "arguments": { "key": "c", "value": "go-b-c" } })
    );
}

#[tokio::test]
async fn a_diamond_fans_out_and_in() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let plan = json!({ "steps": [
        count("a", &[], json!(1)),
        count("b", &["a"], json!("b")),
        count("c", &["a"], json!("c")),
        count("d", &["b", "c"], json!(["{{ steps.b.output.value }}", "{{ steps.c.output.value }}"])),
    ]});
    let events = run_plan(&app, plan.clone(), json!("x")).await;
    assert_eq!(final_data(&events)["output"]["value"], json!(["b", "c"]));
    assert_eq!(step_events(&events, "completed"), ["a", "b", "c", "d"]);
    // Deterministic: the same plan gives the same event sequence.
    let again = run_plan(&app, plan, json!("x")).await;
    let shape = |evs: &[SseMessage]| -> Vec<(String, Option<String>, Value)> {
        evs.iter()
            .map(|e| {
                let j = e.json();
                (
                    e.kind().to_owned(),
                    j["step_id"].as_str().map(str::to_owned),
                    j["data"]["status"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(shape(&events), shape(&again));
}

#[tokio::test]
async fn a_branch_takes_one_arm_and_skips_the_other() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let plan = |n: i64| {
        json!({ "steps": [
            { "id": "check", "kind": "branch", "input": { "condition": format!("input.n > {n}"), "then": ["big"], "else": ["small"] } },
            count("big", &["check"], json!("big")),
            count("small", &["check"], json!("small")),
            count("after_big", &["big"], json!("after")),
        ]})
    };
    let events = run_plan(&app, plan(10), json!({ "n": 5 })).await;
    assert_eq!(final_data(&events)["status"], "succeeded");
    assert_eq!(step_events(&events, "skipped"), ["big", "after_big"]);
    assert_eq!(probe.calls("small"), 1);
    assert_eq!(probe.calls("big"), 0);

    let events = run_plan(&app, plan(1), json!({ "n": 5 })).await;
    assert_eq!(step_events(&events, "skipped"), ["small"]);
    assert_eq!(probe.calls("big"), 1);
    assert_eq!(probe.calls("after_big"), 1);
}

#[tokio::test]
async fn invalid_plans_are_refused_with_every_problem_located() {
    let app = spawn_app(|_| {}).await;
    let plan = json!({ "steps": [
        { "id": "a", "kind": "tool", "depends_on": ["c"], "input": { "tool": "math.calculate", "arguments": { "expression": "1" } } },
        { "id": "b", "kind": "tool", "depends_on": ["a"], "input": { "tool": "math.calculate", "arguments": { "expression": 5 } } },
        { "id": "c", "kind": "tool", "depends_on": ["b"], "input": { "tool": "nope.tool" } },
        { "id": "d", "kind": "tool", "depends_on": ["zzz"], "input": { "tool": "math.calculate", "arguments": { "expression": "{{ steps.a.output }}" } } },
    ]});
    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .json(&json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);
    let body: Value = resp.json().await.unwrap();
    let errors = body["errors"].as_array().unwrap();
    let text = serde_json::to_string(errors).unwrap();
    assert!(
        text.contains("/plan/steps/1/input/arguments/expression"),
        "{text}"
    );
    assert!(text.contains("/plan/steps/2/input/tool"), "{text}");
    assert!(text.contains("/plan/steps/3/depends_on/0"), "{text}");
    let cycle = errors
        .iter()
        .find(|e| e["message"].as_str().unwrap().contains("cycle"))
        .expect("a cycle error");
    let msg = cycle["message"].as_str().unwrap();
    for s in ["a", "b", "c"] {
        assert!(msg.contains(s), "{msg}");
    }
    // Nothing was created.
    let (_, list) = app.get_json("/v1/runs").await;
    assert_eq!(list["runs"], json!([]));
}

#[tokio::test]
async fn a_ten_way_parallel_step_respects_max_parallel_steps() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let children: Vec<Value> = (0..10)
        .map(|i| json!({ "id": format!("c{i}"), "kind": "tool",
                         "input": { "tool": "test.count", "arguments": { "key": "fan", "value": i, "delay_ms": 20 } } }))
        .collect();
    let plan = json!({
        "settings": { "max_parallel_steps": 3 },
        "steps": [{ "id": "fan", "kind": "parallel", "input": { "steps": children, "aggregation": "all" } }]
    });
    let events = run_plan(&app, plan, json!("x")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let values: Vec<i64> = fin["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["value"].as_i64().unwrap())
        .collect();
    assert_eq!(values, (0..10).collect::<Vec<_>>());
    assert_eq!(probe.calls("fan"), 10);
    assert_eq!(
        probe.max_in_flight(),
        3,
        "never more than 3 at once, and 3 were used"
    );
}

#[tokio::test]
async fn top_level_fan_out_respects_max_parallel_steps_too() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let steps: Vec<Value> = (0..10)
        .map(|i| json!({ "id": format!("s{i}"), "kind": "tool",
                         "input": { "tool": "test.count", "arguments": { "key": "top", "delay_ms": 20 } } }))
        .collect();
    let events = run_plan(
        &app,
        json!({ "settings": { "max_parallel_steps": 3 }, "steps": steps }),
        json!("x"),
    )
    .await;
    assert_eq!(final_data(&events)["status"], "succeeded");
    assert_eq!(probe.max_in_flight(), 3);
}

#[tokio::test]
async fn stop_on_first_failure_versus_continue() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let plan = |stop: bool| {
        json!({ "settings": { "stop_on_first_failure": stop }, "steps": [
            { "id": "bad", "kind": "tool", "input": { "tool": "test.flaky", "arguments": { "key": format!("bad-{stop}") } } },
            count(&format!("after-{stop}"), &["bad"], json!(1)),
            count(&format!("independent-{stop}"), &["bad2"], json!(1)),
            { "id": "bad2", "kind": "tool", "depends_on": ["bad"], "input": { "tool": "math.calculate", "arguments": { "expression": "1" } } },
            count(&format!("free-{stop}"), &[], json!(1)),
        ]})
    };
    let events = run_plan(&app, plan(true), json!("x")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "failed");
    assert_eq!(fin["completion"], "error");
    assert_eq!(fin["error"]["code"], "flaky");
    assert_eq!(probe.calls("after-true"), 0);

    let events = run_plan(&app, plan(false), json!("x")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["completion"], "partial");
    assert_eq!(fin["error"]["code"], "flaky");
    assert_eq!(probe.calls("free-false"), 1, "independent work goes on");
    assert_eq!(
        probe.calls("after-false"),
        0,
        "dependents of the failure are skipped"
    );
    assert!(step_events(&events, "skipped").contains(&"after-false".to_owned()));
}

#[tokio::test]
async fn all_parallel_children_failing_fails_the_step() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    for aggregation in ["all", "merge", "first_success", "fastest"] {
        let children: Vec<Value> = (0..3)
            .map(|i| json!({ "id": format!("{aggregation}-c{i}"), "kind": "tool",
                             "input": { "tool": "test.flaky", "arguments": { "key": format!("{aggregation}{i}") } } }))
            .collect();
        let plan = json!({ "steps": [{ "id": "p", "kind": "parallel", "input": { "steps": children, "aggregation": aggregation } }] });
        let events = run_plan(&app, plan, json!("x")).await;
        let fin = final_data(&events);
        assert_eq!(fin["status"], "failed", "{aggregation}: {fin}");
        assert_eq!(fin["error"]["code"], "flaky", "{aggregation}");
    }
}

#[tokio::test]
async fn parallel_aggregations_combine_children() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let children = json!([
        { "id": "slow_ok", "kind": "tool", "input": { "tool": "test.count", "arguments": { "key": "s", "value": "slow", "delay_ms": 300 } } },
        { "id": "fails", "kind": "tool", "input": { "tool": "test.flaky", "arguments": { "key": "f" } } },
        { "id": "fast_ok", "kind": "tool", "input": { "tool": "test.count", "arguments": { "key": "q", "value": "fast" } } },
    ]);
    let out = |aggregation: &str| {
        let plan = json!({ "steps": [{ "id": "p", "kind": "parallel", "input": { "steps": children.clone(), "aggregation": aggregation } }] });
        let app = &app;
        async move { final_data(&run_plan(app, plan, json!("x")).await) }
    };
    let merged = out("merge").await;
    assert_eq!(merged["completion"], "success");
    assert_eq!(merged["output"]["slow_ok"]["value"], "slow");
    assert_eq!(merged["output"]["fast_ok"]["value"], "fast");
    assert!(merged["output"].get("fails").is_none());
    assert_eq!(out("first_success").await["output"]["value"], "slow");
    assert_eq!(out("fastest").await["output"]["value"], "fast");
    assert_eq!(out("all").await["status"], "failed");
}

#[tokio::test]
async fn retries_back_off_then_succeed_and_every_attempt_is_stored() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let plan = json!({ "steps": [{
        "id": "flaky", "kind": "tool",
        "retry_policy": { "max_attempts": 4, "strategy": "linear", "initial_delay_ms": 60, "max_delay_ms": 1000, "retryable_errors": ["flaky"] },
        "input": { "tool": "test.flaky", "arguments": { "key": "r", "failures": 2 } }
    }]});
    let events = run_plan(&app, plan, json!("x")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(probe.calls("r"), 3);
    let times = probe.times("r");
    let gap1 = times[1] - times[0];
    let gap2 = times[2] - times[1];
    // Linear: 60 ms, then 120 ms (no jitter); generous upper bounds for a loaded machine.
    assert!(
        gap1 >= Duration::from_millis(60) && gap1 < Duration::from_millis(1000),
        "{gap1:?}"
    );
    assert!(
        gap2 >= Duration::from_millis(120) && gap2 < Duration::from_millis(1100),
        "{gap2:?}"
    );
    assert_eq!(step_events(&events, "retrying"), ["flaky", "flaky"]);
    let (_, steps) = app
        .get_json(&format!("/v1/runs/{}/steps", run_id(&events)))
        .await;
    let attempts: Vec<(u64, &str)> = steps
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["attempt"].as_u64().unwrap(),
                s["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(attempts, [(1, "failed"), (2, "failed"), (3, "completed")]);
}

#[tokio::test]
async fn a_step_timeout_fails_the_step() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let plan = json!({ "steps": [{ "id": "slow", "kind": "tool", "timeout_ms": 100,
        "input": { "tool": "test.sleep", "arguments": { "key": "z", "ms": 10000 } } }] });
    let events = run_plan(&app, plan, json!("x")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "failed");
    assert_eq!(fin["error"]["code"], "step_timeout");
}

#[tokio::test]
async fn loops_iterate_and_are_bounded() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let plan = json!({ "steps": [{ "id": "each", "kind": "loop", "input": {
        "for_each": "{{ input.items }}", "max_iterations": 10,
        "steps": [{ "id": "body", "kind": "tool", "input": { "tool": "test.count", "arguments": { "key": "loop", "value": "{{ item }}#{{ index }}" } } }]
    }}]});
    let events = run_plan(&app, plan, json!({ "items": ["a", "b", "c"] })).await;
    let fin = final_data(&events);
    let values: Vec<&str> = fin["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["value"].as_str().unwrap())
        .collect();
    assert_eq!(values, ["a#0", "b#1", "c#2"]);

    let forever = json!({ "steps": [{ "id": "spin", "kind": "loop", "input": {
        "while": "true", "max_iterations": 3,
        "steps": [{ "id": "tick", "kind": "tool", "input": { "tool": "test.count", "arguments": { "key": "spin" } } }]
    }}]});
    let events = run_plan(&app, forever, json!("x")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "failed");
    assert_eq!(fin["error"]["code"], "loop_limit_exceeded");
    assert_eq!(probe.calls("spin"), 3);
}

fn approval_plan() -> Value {
    json!({ "steps": [
        count("prepare", &[], json!("draft")),
        { "id": "approve", "kind": "user_input", "depends_on": ["prepare"], "input": {
            "prompt": "Publish {{ steps.prepare.output.value }}?",
            "schema": { "type": "object", "required": ["approved"], "properties": { "approved": { "type": "boolean" } } } } },
        { "id": "decide", "kind": "branch", "depends_on": ["approve"], "input": {
            "condition": "steps.approve.output.approved == true", "then": ["publish"], "else": ["discard"] } },
        count("publish", &["decide"], json!("published")),
        count("discard", &["decide"], json!("discarded")),
    ]})
}

async fn start_and_wait_for_input(app: &TestApp, plan: Value) -> (String, SseReader) {
    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .header("accept", "text/event-stream")
        .json(&json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
        .send()
        .await
        .unwrap();
    let mut reader = SseReader::new(resp);
    let mut id = None;
    loop {
        let ev = reader.next_event().await.expect("input_required comes");
        id.get_or_insert_with(|| ev.json()["run_id"].as_str().unwrap().to_owned());
        if ev.kind() == "input_required" {
            let d = ev.json()["data"].clone();
            assert_eq!(d["step_id"], "approve");
            assert_eq!(d["prompt"], "Publish draft?");
            assert!(d["schema"].is_object());
            break;
        }
    }
    // The status change follows the input_required event.
    let ev = reader.next_event().await.unwrap();
    assert_eq!(ev.json()["data"]["status"], "waiting_input");
    (id.unwrap(), reader)
}

async fn answer(app: &TestApp, id: &str, body: Value) -> reqwest::Response {
    app.client
        .post(app.url(&format!("/v1/runs/{id}/input")))
        .json(&body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn human_input_approved_denied_and_invalid() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;

    let (id, reader) = start_and_wait_for_input(&app, approval_plan()).await;
    let (_, run) = app.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(run["status"], "waiting_input");
    // Wrong step: 409. Invalid value: 422 with a pointer. Neither consumes the wait.
    assert_eq!(
        answer(&app, &id, json!({ "step_id": "prepare", "value": {} }))
            .await
            .status(),
        409
    );
    let resp = answer(
        &app,
        &id,
        json!({ "step_id": "approve", "value": { "approved": "yes" } }),
    )
    .await;
    assert_eq!(resp.status(), 422);
    let problem: Value = resp.json().await.unwrap();
    assert_eq!(problem["errors"][0]["pointer"], "/value/approved");
    assert_eq!(
        answer(&app, &id, json!({ "step_id": "approve" }))
            .await
            .status(),
        422
    );
    let resp = answer(
        &app,
        &id,
        json!({ "step_id": "approve", "value": { "approved": true } }),
    )
    .await;
    assert_eq!(resp.status(), 202);
    let rest = reader.read_to_final().await;
    assert_eq!(final_data(&rest)["status"], "succeeded");
    assert_eq!(probe.calls("publish"), 1);
    assert_eq!(probe.calls("discard"), 0);
    // Answering again: the run is no longer waiting.
    assert_eq!(
        answer(
            &app,
            &id,
            json!({ "step_id": "approve", "value": { "approved": true } })
        )
        .await
        .status(),
        409
    );

    let (id, reader) = start_and_wait_for_input(&app, approval_plan()).await;
    assert_eq!(
        answer(
            &app,
            &id,
            json!({ "step_id": "approve", "value": { "approved": false } })
        )
        .await
        .status(),
        202
    );
    let rest = reader.read_to_final().await;
    assert_eq!(final_data(&rest)["status"], "succeeded");
    assert_eq!(probe.calls("discard"), 1);
    assert_eq!(probe.calls("publish"), 1);
}

#[tokio::test]
async fn a_waiting_run_survives_a_restart_without_redoing_finished_steps() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let (id, reader) = start_and_wait_for_input(&app, approval_plan()).await;
    drop(reader);
    assert_eq!(probe.calls("prepare"), 1);

    let dir = app.stop().await;
    let app = spawn_probed_app(Some(dir), &probe, |_| {}).await;
    // After the restart the run asks again and waits.
    let resp = app
        .client
        .get(app.url(&format!("/v1/runs/{id}/events")))
        .send()
        .await
        .unwrap();
    let mut reader = SseReader::new(resp);
    let mut asks = 0;
    loop {
        let ev = reader.next_event().await.unwrap();
        if ev.kind() == "input_required" {
            asks += 1;
            if asks == 2 {
                break;
            }
        }
    }
    let resp = answer(
        &app,
        &id,
        json!({ "step_id": "approve", "value": { "approved": true } }),
    )
    .await;
    assert_eq!(resp.status(), 202);
    let rest = reader.read_to_final().await;
    assert_eq!(final_data(&rest)["status"], "succeeded");
    assert_eq!(
        probe.calls("prepare"),
        1,
        "the completed step did not run again"
    );
    assert_eq!(probe.calls("publish"), 1);
    let history = app.history(&id).await;
    let prepare_runs = history
        .iter()
        .filter(|e| {
            e["kind"] == "step" && e["step_id"] == "prepare" && e["data"]["status"] == "running"
        })
        .count();
    assert_eq!(prepare_runs, 1);
    // The wait the stop interrupted is closed as such; the answered one is a new attempt.
    let approve: Vec<(Value, Value, Value)> = app
        .attempts(&id, "approve")
        .await
        .iter()
        .map(|s| {
            (
                s["attempt"].clone(),
                s["status"].clone(),
                s["error"]["code"].clone(),
            )
        })
        .collect();
    assert_eq!(
        approve,
        [
            (json!(1), json!("cancelled"), json!("interrupted")),
            (json!(2), json!("completed"), Value::Null),
        ]
    );
}

#[tokio::test]
async fn a_killed_server_resumes_from_its_checkpoint() {
    // A real crash: the orca binary killed with SIGKILL while a run waits on a step.
    let dir = tempfile::tempdir().unwrap();
    let plan = json!({ "steps": [
        { "id": "first", "kind": "tool", "input": { "tool": "math.calculate", "arguments": { "expression": "6 * 7" } } },
        { "id": "wait", "kind": "user_input", "depends_on": ["first"], "input": { "prompt": "go on?" } },
        { "id": "last", "kind": "tool", "depends_on": ["wait"], "input": { "tool": "math.calculate", "arguments": { "expression": "{{ steps.first.output.result }} + 1" } } },
    ]});
    let server = Server::start(dir.path()).await;
    let id = server.start_plan(plan).await;
    drop(server.until_asked(&id, 1).await);
    server.kill();

    let server = Server::start(dir.path()).await;
    let resp = server
        .client
        .get(server.url(&format!("/v1/runs/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let run: Value = resp.json().await.unwrap();
    assert_ne!(run["status"], "succeeded");
    let fin = server.answered_to_final(&id, 2, "wait", json!("yes")).await;
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"]["result"], 43);
    let history = server.stored_events(&id).await;
    let first_runs = history
        .iter()
        .filter(|e| {
            e["kind"] == "step" && e["step_id"] == "first" && e["data"]["status"] == "running"
        })
        .count();
    assert_eq!(first_runs, 1, "the completed step was not executed again");
    let seqs: Vec<u64> = history.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
}

#[tokio::test]
async fn llm_steps_stream_text_and_hold_json_to_a_schema() {
    use crate::support::scripted_llm::{Reply, ScriptedLlm};
    let llm = ScriptedLlm::start().await;
    // Slow enough that an attempt's start and end reach the store in different batches.
    llm.push(Reply::text("a short summary").delay_before_first_chunk(50));
    // Breaks the schema where a strict provider cannot hold the model (minLength is outside
    // OpenAI's strict subset): orca's own check catches it, and the step is retried.
    llm.push(Reply::json(json!({ "title": "F" })));
    llm.push(Reply::json(json!({ "title": "Fixed" })));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = json!({ "steps": [
        { "id": "summary", "kind": "llm", "input": { "prompt": "Summarise {{ input.text }}", "system": "Be brief." } },
        { "id": "meta", "kind": "llm", "depends_on": ["summary"],
          "retry_policy": { "max_attempts": 2, "initial_delay_ms": 1, "retryable_errors": ["invalid_llm_output"] },
          "input": { "prompt": "Title for: {{ steps.summary.output }}",
                     "output_schema": { "type": "object", "required": ["title"], "properties": { "title": { "type": "string", "minLength": 2 } } } } },
    ], "output": { "summary": "{{ steps.summary.output }}", "title": "{{ steps.meta.output.title }}" } });
    let events = run_plan(&app, plan, json!({ "text": "a long text" })).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(
        fin["output"],
        json!({ "summary": "a short summary", "title": "Fixed" })
    );
    assert!(
        events
            .iter()
            .any(|e| e.kind() == "token" && e.json()["step_id"] == "summary")
    );
    assert!(
        events
            .iter()
            .any(|e| e.kind() == "json_partial" && e.json()["step_id"] == "meta")
    );
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[0]["messages"][0]["content"], "Be brief.");
    assert_eq!(reqs[0]["messages"][1]["content"], "Summarise a long text");
    assert_eq!(reqs[1]["response_format"]["type"], "json_schema");
    assert_eq!(fin["usage"]["llm_calls"], 3);
    // The stored attempt keeps the prompt it resolved to.
    let summary = &app.attempts(&run_id(&events), "summary").await[0];
    assert_eq!(summary["status"], "completed");
    assert_eq!(summary["input"]["prompt"], "Summarise a long text");
    assert_eq!(summary["input"]["system"], "Be brief.");
}

#[tokio::test]
async fn a_cancel_during_a_wait_step_ends_the_run_at_once() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let plan = json!({ "steps": [{ "id": "seq", "kind": "sequential", "input": { "steps": [
        { "id": "first", "kind": "tool", "input": { "tool": "test.count", "arguments": { "key": "seq" } } },
        { "id": "nap", "kind": "wait", "input": { "duration_ms": 600000 } },
        { "id": "never", "kind": "tool", "input": { "tool": "test.count", "arguments": { "key": "never" } } },
    ]}}]});
    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .header("accept", "text/event-stream")
        .json(&json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
        .send()
        .await
        .unwrap();
    let mut reader = SseReader::new(resp);
    let first = reader.next_event().await.unwrap();
    let id = first.json()["run_id"].as_str().unwrap().to_owned();
    // The first child's attempt is stored once it ran; then the wait is in progress.
    loop {
        let (_, steps) = app.get_json(&format!("/v1/runs/{id}/steps")).await;
        if steps
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["step_id"] == "nap")
        {
            break;
        }
        tokio::task::yield_now().await;
    }
    let resp = app
        .client
        .post(app.url(&format!("/v1/runs/{id}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let rest = reader.read_to_final().await;
    assert_eq!(final_data(&rest)["status"], "cancelled");
    assert_eq!(probe.calls("seq"), 1);
    assert_eq!(probe.calls("never"), 0);
    let nap = app.attempts(&id, "nap").await;
    assert_eq!(nap[0]["status"], "cancelled");
}

#[tokio::test]
async fn a_registered_workflow_runs_by_name_and_checks_its_input() {
    let app = spawn_app(|_| {}).await;
    let definition: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/workflows/publish-report.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let resp = app
        .client
        .put(app.url("/v1/workflows/publish-report"))
        .json(&definition)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    // The workflow's input_schema is enforced at POST.
    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .json(&json!({ "input": { "topic": "Q3", "threshold": "high" }, "orchestration": "fixed", "workflow": "publish-report" }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);
    let problem: Value = resp.json().await.unwrap();
    assert_eq!(problem["errors"][0]["pointer"], "/input/threshold");
    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .json(&json!({ "input": "x", "orchestration": "fixed", "workflow": "no-such-flow" }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);

    // Below the threshold: the branch archives, no human needed.
    let events = app
        .stream_run(json!({ "input": { "topic": "Q3", "threshold": 5000 }, "orchestration": "fixed", "workflow": "publish-report" }))
        .await;
    assert_well_formed(&events, 1);
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"]["profit"], 1200);
    // Skipped steps read as null.
    assert_eq!(fin["output"]["draft"], Value::Null);
    assert_eq!(step_events(&events, "skipped"), ["draft", "approve"]);
    let plan_ev = events.iter().find(|e| e.kind() == "plan").unwrap().json()["data"].clone();
    assert_eq!(
        plan_ev["critical_path"],
        json!(["figures", "profit", "check", "draft", "approve"])
    );
}

#[tokio::test]
async fn a_panicking_tool_fails_its_run_and_nothing_else() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let plan =
        json!({ "steps": [{ "id": "boom", "kind": "tool", "input": { "tool": "test.panic" } }] });
    let events = run_plan(&app, plan, json!("x")).await;
    assert_well_formed(&events, 1);
    let fin = final_data(&events);
    assert_eq!(fin["status"], "failed");
    assert_eq!(fin["error"]["code"], "internal_error");
    assert!(
        !fin["error"]["message"].as_str().unwrap().contains("buggy"),
        "no internals leak"
    );
    assert_eq!(app.get_json("/healthz").await.0, 200);
    let events = run_plan(
        &app,
        json!({ "steps": [count("fine", &[], json!(1))] }),
        json!("x"),
    )
    .await;
    assert_eq!(final_data(&events)["status"], "succeeded");
}

#[tokio::test]
async fn stopping_on_a_failure_abandons_steps_in_flight() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    // Both orders: the failing step started before the slow one, and after it (a failure is
    // not held back behind a slower step that started first).
    for (n, slow_first) in [false, true].into_iter().enumerate() {
        let bad = json!({ "id": "bad", "kind": "tool",
            "input": { "tool": "test.flaky", "arguments": { "key": format!("stop{n}") } } });
        let slow = json!({ "id": "slow", "kind": "tool",
            "input": { "tool": "test.sleep", "arguments": { "key": format!("slow{n}"), "ms": 600000 } } });
        let steps = if slow_first { [slow, bad] } else { [bad, slow] };
        // Would wait ten minutes for `slow` if the failure did not stop it (the reader gives
        // up after PATIENCE).
        let events = run_plan(&app, json!({ "steps": steps }), json!("x")).await;
        let fin = final_data(&events);
        assert_eq!(fin["status"], "failed", "slow first: {slow_first}");
        assert_eq!(fin["error"]["code"], "flaky");
        assert!(
            events.iter().any(|e| e.kind() == "step"
                && e.json()["step_id"] == "slow"
                && e.json()["data"]["status"] == "cancelled"),
            "slow first: {slow_first}: {:?}",
            kinds(&events)
        );
        let id = run_id(&events);
        assert_eq!(app.attempts(&id, "slow").await[0]["status"], "cancelled");
        assert_eq!(app.attempts(&id, "bad").await[0]["status"], "failed");
    }
}
