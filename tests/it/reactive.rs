//! Reactive runs over HTTP: triggers (a failed step, an `expect` that fails, the user's word, a
//! limit close), strategies, plan versions with their trigger and diff, loop detection, the
//! re-plan limit, and a run killed while it re-planned. The re-planner is the scripted
//! OpenAI-compatible server.

use serde_json::{Value, json};

use crate::support::scripted_llm::{Reply, ScriptedLlm};
use crate::support::server::{Server, skip_to, to_final};
use crate::support::tools::Probe;
use crate::support::*;

fn replan(strategy: &str, plan: Value) -> Reply {
    Reply::json(
        json!({ "strategy": strategy, "reason": format!("{strategy} it is"), "completes_task": true,
                "plan": plan }),
    )
}

fn calc(id: &str, deps: &[&str], expression: &str) -> Value {
    let mut step = json!({ "id": id, "kind": "tool",
            "input": { "tool": "math.calculate", "arguments": { "expression": expression } } });
    if !deps.is_empty() {
        step["depends_on"] = json!(deps);
    }
    step
}

fn read(id: &str, deps: &[&str], path: &str) -> Value {
    json!({ "id": id, "kind": "tool", "depends_on": deps,
            "input": { "tool": "fs.read", "arguments": { "path": path } } })
}

fn counted(id: &str, value: i64) -> Value {
    json!({ "id": id, "kind": "tool",
            "input": { "tool": "test.count", "arguments": { "key": id, "value": value } } })
}

fn events_of(events: &[SseMessage], kind: &str) -> Vec<Value> {
    events
        .iter()
        .map(|e| e.json())
        .filter(|e| e["kind"] == kind)
        .map(|e| e["data"].clone())
        .collect()
}

async fn plans(app: &TestApp, id: &str) -> Vec<Value> {
    let (status, plans) = app.get_json(&format!("/v1/runs/{id}/plans")).await;
    assert_eq!(status, 200);
    plans.as_array().unwrap().clone()
}

/// Streams a run of `plan` under `orchestration` (with `extra` fields) to its end.
async fn run_plan(
    app: &TestApp,
    orchestration: &str,
    plan: &Value,
    extra: Value,
) -> Vec<SseMessage> {
    let mut body = json!({ "input": "x", "orchestration": orchestration, "plan": plan });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    app.stream_run(body).await
}

/// The final error has `code` and its message says `text`.
fn failed_with(fin: &Value, code: &str, text: &str) {
    assert_eq!(fin["error"]["code"], code, "{fin}");
    let message = fin["error"]["message"].as_str().unwrap();
    assert!(message.contains(text), "{message}");
}

fn run_id(events: &[SseMessage]) -> String {
    events[0].json()["run_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_failed_step_gets_an_alternative_and_completed_steps_never_run_again() {
    let probe = Probe::default();
    let llm = ScriptedLlm::start().await;
    let v2 = json!({ "steps": [
        counted("fact", 42),
        calc("compute", &["fact"], "{{ steps.fact.output.value }} + 1"),
    ], "output": "{{ steps.compute.output.result }}" });
    llm.push(replan("alternative", v2));
    let app = spawn_probed_app(None, &probe, |c| use_scripted(c, &llm)).await;
    let v1 = json!({ "steps": [
        counted("fact", 42),
        read("read", &["fact"], "missing.txt"),
        calc("use", &["read"], "1 + 1"),
    ] });
    let events = app
        .stream_run(
            json!({ "input": "add one to the fact", "orchestration": "reactive", "plan": v1 }),
        )
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], 43);
    assert_eq!(probe.calls("fact"), 1, "a completed step never runs again");

    let announced = events_of(&events, "plan");
    assert_eq!(announced.len(), 2);
    assert_eq!(announced[1]["version"], 2);
    assert_eq!(announced[1]["reason"], "step_failed");
    assert_eq!(announced[1]["strategy"], "alternative");
    assert_eq!(announced[1]["diff"]["added"], json!(["compute"]));

    let id = run_id(&events);
    let versions = plans(&app, &id).await;
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[0]["reason"], "initial");
    assert_eq!(versions[0]["trigger"], Value::Null);
    let v2 = &versions[1];
    assert_eq!(v2["reason"], "step_failed");
    assert_eq!(v2["trigger"]["kind"], "step_failed");
    assert_eq!(v2["trigger"]["step_id"], "read");
    assert_eq!(v2["trigger"]["error"]["code"], "file_not_found");
    assert_eq!(v2["strategy"], "alternative");
    assert_eq!(v2["explanation"], "alternative it is");
    assert_eq!(
        v2["diff"],
        json!({ "added": ["compute"], "removed": ["read", "use"], "changed": [], "plan_changed": true })
    );

    // The re-planner was told what failed and what completed, with its output.
    let asked = llm.requests()[0].to_string();
    assert!(asked.contains("step_failed at step `read`"), "{asked}");
    assert!(asked.contains("file_not_found"), "{asked}");
    assert!(asked.contains(r#"\"fact\":{\"calls\":1"#), "{asked}");
    assert_eq!(llm.requests()[0]["response_format"]["type"], "json_schema");

    let (_, steps) = app.get_json(&format!("/v1/runs/{id}/steps")).await;
    let attempts = |step: &str| -> Vec<(u64, u64)> {
        steps
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["step_id"] == step)
            .map(|a| {
                (
                    a["plan_version"].as_u64().unwrap(),
                    a["attempt"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(attempts("fact"), [(1, 1)]);
    assert_eq!(attempts("compute"), [(2, 1)]);
    assert_eq!(attempts("replanner"), [(1, 1)]);
}

#[tokio::test]
async fn an_expect_that_fails_is_a_trigger_at_any_depth_and_fails_fixed_runs() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let mut nested = calc("c1", &[], "2 + 2");
    nested["expect"] = json!("output.result == 5");
    let v1 =
        json!({ "steps": [{ "id": "seq", "kind": "sequential", "input": { "steps": [nested] } }] });

    // In a fixed run the step fails with the code.
    let events = run_plan(&app, "fixed", &v1, json!({})).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "failed", "{fin}");
    failed_with(&fin, "unexpected_result", "output.result == 5");

    // A top-level `expect` that holds lets the step complete.
    let mut top = calc("top", &[], "2 + 3");
    top["expect"] = json!("output.result == 5 && input == 'x'");
    let events = run_plan(&app, "fixed", &json!({ "steps": [top] }), json!({})).await;
    assert_eq!(final_data(&events)["status"], "succeeded");

    // In a reactive run it is a trigger.
    let mut fixed_step = calc("five", &[], "2 + 3");
    fixed_step["expect"] = json!("output.result == 5");
    llm.push(replan("partial", json!({ "steps": [fixed_step] })));
    let events = run_plan(&app, "reactive", &v1, json!({})).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"]["result"], 5);
    let versions = plans(&app, &run_id(&events)).await;
    assert_eq!(versions[1]["trigger"]["kind"], "unexpected_result");
    assert_eq!(versions[1]["trigger"]["step_id"], "seq");
    assert_eq!(versions[1]["strategy"], "partial");

    // `output` is only defined in `expect`.
    let bad = json!({ "steps": [{ "id": "b", "kind": "branch", "input": {
        "condition": "output > 1", "then": [], "else": [] } }] });
    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .json(&json!({ "input": "x", "orchestration": "fixed", "plan": bad }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);
    let problem: Value = resp.json().await.unwrap();
    assert!(
        problem
            .to_string()
            .contains("only defined in a step's `expect`"),
        "{problem}"
    );
}

#[tokio::test]
async fn the_user_asks_for_a_new_plan_while_the_run_waits_for_input() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let v1 = json!({ "steps": [
        calc("fact", &[], "6 * 7"),
        { "id": "ask", "kind": "user_input", "depends_on": ["fact"], "input": { "prompt": "Go on?" } },
        calc("after", &["ask"], "1 + 1"),
    ] });
    let run = app
        .create_run(json!({ "input": "x", "orchestration": "reactive", "plan": v1 }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut reader = app.events(&id).await;
    skip_to(&mut reader, "input_required", 1).await;

    let post = |body: Value| {
        let url = app.url(&format!("/v1/runs/{id}/replan"));
        let client = app.client.clone();
        async move {
            let resp = client.post(url).json(&body).send().await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    for bad in [
        json!({}),
        json!({ "message": "  " }),
        json!({ "message": "x", "extra": 1 }),
    ] {
        let (status, problem) = post(bad.clone()).await;
        assert_eq!(status, 422, "{bad} → {problem}");
        assert_eq!(problem["code"], "validation_failed");
    }
    let v2 = json!({ "steps": [
        calc("fact", &[], "6 * 7"),
        calc("plus", &["fact"], "{{ steps.fact.output.result }} + 1"),
    ], "output": "{{ steps.plus.output.result }}" });
    llm.push(replan("complete", v2));
    let (status, body) = post(json!({ "message": "skip the question; add one" })).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["id"], id.as_str());

    let events = to_final(reader).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], 43);
    let statuses: Vec<Value> = events_of(&events, "status")
        .into_iter()
        .map(|d| d["status"].clone())
        .collect();
    assert_eq!(
        statuses,
        ["waiting_input", "running", "succeeded"],
        "after waiting, running again"
    );
    let asked = events_of(&events, "step");
    assert!(
        asked
            .iter()
            .any(|s| s["step_id"] == "ask" && s["status"] == "cancelled"),
        "{asked:?}"
    );
    let versions = plans(&app, &id).await;
    assert_eq!(versions[1]["trigger"]["kind"], "user");
    assert_eq!(
        versions[1]["trigger"]["message"],
        "skip the question; add one"
    );
    assert_eq!(versions[1]["trigger"]["request"], 1);
    let prompt = llm.requests()[0].to_string();
    assert!(prompt.contains("skip the question; add one"), "{prompt}");

    // A finished run, a run that does not re-plan, and an unknown run.
    let (status, _) = post(json!({ "message": "again" })).await;
    assert_eq!(status, 409);
    let fixed = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "plan": {
            "steps": [{ "id": "w", "kind": "wait", "input": { "duration_ms": 60000 } }] } }))
        .await;
    let message = json!({ "message": "x" });
    let path = format!("/v1/runs/{}/replan", fixed["id"].as_str().unwrap());
    let (status, problem) = app.post_json(&path, &message).await;
    assert_eq!(status, 409);
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("only reactive runs"), "{detail}");
    let unknown = "/v1/runs/0191e7a4-0000-7000-8000-000000000000/replan";
    assert_eq!(app.post_json(unknown, &message).await.0, 404);
}

#[tokio::test]
async fn the_same_failure_after_a_retry_ends_the_run_as_a_loop_keeping_what_completed() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::json(
        json!({ "strategy": "retry", "reason": "maybe it was passing", "completes_task": true }),
    ));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let v1 = json!({ "steps": [calc("ok", &[], "1 + 1"), read("bad", &["ok"], "missing.txt")] });
    let events = run_plan(&app, "reactive", &v1, json!({})).await;
    let fin = final_data(&events);
    assert_eq!(fin["completion"], "partial", "{fin}");
    assert_eq!(fin["error"]["code"], "loop_detected");
    assert_eq!(fin["output"]["ok"]["result"], 2);
    let told: Vec<Value> = events_of(&events, "error")
        .into_iter()
        .filter(|e| e["code"] == "loop_detected")
        .collect();
    assert_eq!(told.len(), 1);
    assert!(
        told[0]["message"]
            .as_str()
            .unwrap()
            .contains("step `bad` failed again"),
        "{told:?}"
    );
    let versions = plans(&app, &run_id(&events)).await;
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[1]["strategy"], "retry");
    assert_eq!(versions[1]["diff"]["added"], json!([]));
    assert_eq!(llm.request_count(), 1, "no second re-plan");

    // The timeline lists the decisions, and the spans of both versions.
    let (status, timeline) = app
        .get_json(&format!("/v1/runs/{}/timeline", run_id(&events)))
        .await;
    assert_eq!(status, 200);
    let decisions: Vec<&str> = timeline["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(decisions, ["selection", "plan", "replan", "loop_detected"]);
    let replanned = &timeline["decisions"][2]["detail"];
    assert_eq!(replanned["strategy"], "retry");
    assert_eq!(replanned["trigger"]["step_id"], "bad");
    let versions: Vec<u64> = timeline["spans"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["step_id"] == "bad")
        .map(|s| s["plan_version"].as_u64().unwrap())
        .collect();
    assert_eq!(versions, [1, 2]);
}

#[tokio::test]
async fn a_new_plan_equal_to_an_earlier_version_is_a_loop() {
    let llm = ScriptedLlm::start().await;
    let v1 = json!({ "steps": [read("bad", &[], "missing.txt")] });
    llm.push(replan("complete", v1.clone()));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let events = run_plan(&app, "reactive", &v1, json!({})).await;
    let fin = final_data(&events);
    assert_eq!(fin["completion"], "error", "{fin}");
    failed_with(&fin, "loop_detected", "version 1's plan again");
    assert_eq!(plans(&app, &run_id(&events)).await.len(), 1);
}

#[tokio::test]
async fn re_plans_stop_at_max_replans() {
    let llm = ScriptedLlm::start().await;
    llm.push(replan(
        "alternative",
        json!({ "steps": [read("other", &[], "other.txt")] }),
    ));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let v1 = json!({ "steps": [read("bad", &[], "missing.txt")] });
    let events = run_plan(
        &app,
        "reactive",
        &v1,
        json!({ "limits": { "max_replans": 1 } }),
    )
    .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "failed", "{fin}");
    failed_with(&fin, "file_not_found", "other");
    let told: Vec<Value> = events_of(&events, "error")
        .into_iter()
        .filter(|e| e["code"] == "replan_limit_exceeded")
        .collect();
    assert_eq!(told.len(), 1);
    assert_eq!(llm.request_count(), 1);
    assert_eq!(plans(&app, &run_id(&events)).await.len(), 2);
}

#[tokio::test]
async fn an_answer_breaking_the_rules_is_sent_back_and_repaired() {
    let llm = ScriptedLlm::start().await;
    // Not allowed for a failure by this policy.
    llm.push(Reply::json(
        json!({ "strategy": "retry", "reason": "again", "completes_task": true }),
    ));
    // Changes a completed step.
    llm.push(replan(
        "alternative",
        json!({ "steps": [
        calc("ok", &[], "1 + 2"), calc("instead", &["ok"], "3 * 3") ] }),
    ));
    // A dependency cycle.
    llm.push(replan(
        "alternative",
        json!({ "steps": [
        calc("ok", &[], "1 + 1"), calc("x", &["y"], "1"), calc("y", &["x"], "2") ] }),
    ));
    // Right.
    llm.push(replan(
        "alternative",
        json!({ "steps": [
        calc("ok", &[], "1 + 1"), calc("instead", &["ok"], "{{ steps.ok.output.result }} * 3") ],
        "output": "{{ steps.instead.output.result }}" }),
    ));
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        c.engine.max_plan_repairs = 3;
        c.engine.replan_policy.step_failed = vec![orca::domain::replan::Strategy::Alternative];
    })
    .await;
    let v1 = json!({ "steps": [calc("ok", &[], "1 + 1"), read("bad", &["ok"], "missing.txt")] });
    let events = run_plan(&app, "reactive", &v1, json!({})).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], 6);
    let told: Vec<String> = events_of(&events, "error")
        .into_iter()
        .filter(|e| e["step_id"] == "replanner")
        .map(|e| e["message"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(told.len(), 3, "{told:?}");
    assert!(
        told[0].contains("/strategy") && told[0].contains("use one of: alternative"),
        "{told:?}"
    );
    assert!(
        told[1].contains("step `ok` completed and is not run again"),
        "{told:?}"
    );
    assert!(told[2].contains("cycle"), "{told:?}");
    // The problems went back to the model.
    let last = llm.requests()[3].to_string();
    assert!(last.contains("cycle"), "{last}");
}

#[tokio::test]
async fn restore_goes_back_to_an_earlier_version() {
    let probe = Probe::default();
    let llm = ScriptedLlm::start().await;
    let flaky = json!({ "id": "flaky", "kind": "tool", "depends_on": ["ok"],
        "input": { "tool": "test.flaky", "arguments": { "key": "flaky", "failures": 1 } } });
    let v1 = json!({ "steps": [calc("ok", &[], "1 + 1"), flaky] });
    llm.push(replan(
        "alternative",
        json!({ "steps": [calc("ok", &[], "1 + 1"), read("other", &["ok"], "missing.txt")] }),
    ));
    llm.push(Reply::json(json!({ "strategy": "restore", "reason": "the first plan was better", "completes_task": true, "restore_version": 1 })));
    let app = spawn_probed_app(None, &probe, |c| use_scripted(c, &llm)).await;
    let events = run_plan(&app, "reactive", &v1, json!({})).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"]["calls"], 2, "{fin}");
    let versions = plans(&app, &run_id(&events)).await;
    assert_eq!(versions.len(), 3);
    assert_eq!(versions[2]["strategy"], "restore");
    assert_eq!(versions[2]["restored_version"], 1);
    assert_eq!(versions[2]["plan"], versions[0]["plan"]);
    assert_eq!(versions[2]["diff"]["added"], json!(["flaky"]));
    assert_eq!(versions[2]["diff"]["removed"], json!(["other"]));
}

#[tokio::test]
async fn the_user_rolls_a_run_back_to_an_earlier_plan_version_across_a_restart() {
    let llm = ScriptedLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let app = spawn_app_in(dir, |c| use_scripted(c, &llm)).await;
    let ask = |id: &str, deps: &[&str]| json!({ "id": id, "kind": "user_input", "depends_on": deps, "input": { "prompt": "Go on?" } });
    let v1 = json!({ "steps": [
        calc("fact", &[], "6 * 7"), ask("ask", &["fact"]),
        calc("after", &["ask"], "{{ steps.fact.output.result }} + 100"),
    ], "output": "{{ steps.after.output.result }}" });
    let run = app
        .create_run(json!({ "input": "x", "orchestration": "reactive", "plan": v1 }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/runs/{id}/replan");
    let mut reader = app.events(&id).await;
    skip_to(&mut reader, "input_required", 1).await;
    // Version 1 has nothing before it to go back to.
    let (status, problem) = app.post_json(&path, &json!({ "restore_version": 1 })).await;
    assert_eq!(
        (status, problem["errors"][0]["pointer"].clone()),
        (422, json!("/restore_version")),
        "{problem}"
    );

    // The re-planner writes version 2, which asks another question.
    let v2 = json!({ "steps": [
        calc("fact", &[], "6 * 7"), ask("ask2", &["fact"]),
        calc("plus", &["ask2"], "{{ steps.fact.output.result }} + 1"),
    ] });
    llm.push(replan("complete", v2));
    let (status, body) = app
        .post_json(&path, &json!({ "message": "ask differently" }))
        .await;
    assert_eq!(status, 202, "{body}");
    skip_to(&mut reader, "input_required", 1).await;
    for (bad, pointer) in [
        (json!({ "restore_version": 0 }), "/restore_version"),
        (json!({ "restore_version": 2 }), "/restore_version"),
        (json!({ "restore_version": 9 }), "/restore_version"),
        (json!({ "restore_version": "1" }), "/restore_version"),
        (json!({ "restore_version": 1, "message": " " }), "/message"),
    ] {
        let (status, problem) = app.post_json(&path, &bad).await;
        assert_eq!(status, 422, "{bad} → {problem}");
        assert_eq!(
            problem["errors"][0]["pointer"], pointer,
            "{bad} → {problem}"
        );
    }
    // The user goes back to version 1: no model is asked, and version 3 is version 1 again.
    let (status, body) = app.post_json(&path, &json!({ "restore_version": 1 })).await;
    assert_eq!(status, 202, "{body}");
    skip_to(&mut reader, "input_required", 1).await;
    drop(reader);
    assert_eq!(
        llm.requests().len(),
        1,
        "only the first re-plan asked the model"
    );

    // Across a restart the run waits at version 3's question and finishes it.
    let dir = app.stop().await;
    let app = spawn_app_in(dir, |c| use_scripted(c, &llm)).await;
    let versions = plans(&app, &id).await;
    assert_eq!(versions.len(), 3, "{versions:?}");
    let v3 = &versions[2];
    assert_eq!(
        (v3["strategy"].clone(), v3["restored_version"].clone()),
        (json!("restore"), json!(1))
    );
    assert_eq!(v3["trigger"]["kind"], "user");
    assert_eq!(v3["trigger"]["request"], 2);
    assert_eq!(v3["trigger"]["message"], "go back to plan version 1");
    assert_eq!(v3["plan"], versions[0]["plan"]);
    assert_eq!(v3["diff"]["added"], json!(["after", "ask"]));
    let mut reader = app.events(&id).await;
    // Asked at versions 1, 2 and 3 before the stop, and at version 3 again once resumed.
    skip_to(&mut reader, "input_required", 4).await;
    let (status, body) = app
        .post_json(
            &format!("/v1/runs/{id}/input"),
            &json!({ "step_id": "ask", "value": "yes" }),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let events = to_final(reader).await;
    let fin = final_data(&events);
    assert_eq!(
        (fin["status"].clone(), fin["output"].clone()),
        (json!("succeeded"), json!(142)),
        "{fin}"
    );
    let fact_runs = app.attempts(&id, "fact").await;
    assert_eq!(
        fact_runs.len(),
        1,
        "`fact` completed once and was kept by every version: {fact_runs:?}"
    );
    assert_eq!(llm.requests().len(), 1);
}

#[tokio::test]
async fn a_run_close_to_its_token_budget_re_plans_once() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::text("a long answer").usage(700, 200));
    llm.push(
        replan(
            "partial",
            json!({ "steps": [
        { "id": "a", "kind": "llm", "input": { "prompt": "first" } },
        calc("cheap", &["a"], "1 + 1") ] }),
        )
        .usage(10, 10),
    );
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let v1 = json!({ "steps": [
        { "id": "a", "kind": "llm", "input": { "prompt": "first" } },
        { "id": "b", "kind": "llm", "depends_on": ["a"], "input": { "prompt": "second" } } ] });
    let events = run_plan(
        &app,
        "reactive",
        &v1,
        json!({ "limits": { "max_tokens": 1000 } }),
    )
    .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"]["result"], 2);
    let versions = plans(&app, &run_id(&events)).await;
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[1]["reason"], "limit_near");
    let message = versions[1]["trigger"]["message"].as_str().unwrap();
    assert!(message.contains("900 of its 1000 tokens"), "{message}");
    assert_eq!(llm.request_count(), 2, "`a` kept its answer; `b` never ran");
}

#[tokio::test]
async fn a_reactive_run_killed_while_re_planning_resumes_with_the_right_version_and_counts() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::stalled());
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("workspace")).unwrap();
    let server = Server::start_scripted(dir.path(), &llm).await;
    let v1 =
        json!({ "steps": [calc("fact", &[], "6 * 7"), read("read", &["fact"], "missing.txt")] });
    let resp = server
        .client
        .post(server.url("/v1/runs"))
        .json(&json!({ "input": "x", "orchestration": "reactive", "plan": v1 }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let id = resp.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Published means stored, and everything the run queued before it (the failed step's
    // checkpoint and counts) is stored too: kill once the re-planner's attempt is announced.
    let resp = server
        .client
        .get(server.url(&format!("/v1/runs/{id}/events")))
        .send();
    let mut reader = SseReader::new(resp.await.unwrap());
    let replanning = async {
        loop {
            let ev = reader
                .next_event()
                .await
                .expect("the stream goes on")
                .json();
            if ev["kind"] == "step" && ev["data"]["step_id"] == "replanner" {
                break;
            }
        }
    };
    tokio::time::timeout(PATIENCE, replanning)
        .await
        .expect("the run re-plans");
    llm.wait_for_requests(1).await;
    server.kill();

    llm.push(replan(
        "alternative",
        json!({ "steps": [
        calc("fact", &[], "6 * 7"), calc("plus", &["fact"], "{{ steps.fact.output.result }} + 1") ],
        "output": "{{ steps.plus.output.result }}" }),
    ));
    let server = Server::start_scripted(dir.path(), &llm).await;
    let resp = server
        .client
        .get(server.url(&format!("/v1/runs/{id}/events")))
        .send()
        .await;
    let events = to_final(SseReader::new(resp.unwrap())).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], 43);
    assert_eq!(
        fin["usage"]["tool_calls"], 3,
        "fact, read, plus: counted once each"
    );

    let plans: Vec<Value> = server
        .client
        .get(server.url(&format!("/v1/runs/{id}/plans")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(plans.len(), 2);
    assert_eq!(plans[1]["trigger"]["step_id"], "read");
    let steps = server.steps(&id).await;
    let of = |step: &str| -> Vec<(u64, u64, String)> {
        steps
            .iter()
            .filter(|a| a["step_id"] == step)
            .map(|a| {
                (
                    a["plan_version"].as_u64().unwrap(),
                    a["attempt"].as_u64().unwrap(),
                    a["status"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    assert_eq!(of("fact"), [(1, 1, "completed".to_owned())]);
    // The interrupted call's attempt is closed `cancelled` if it was stored before the kill;
    // either way the re-planner answered once, for version 1's failure.
    let replanner = of("replanner");
    let (last, before) = replanner.split_last().unwrap();
    assert_eq!((last.0, last.2.as_str()), (1, "completed"), "{replanner:?}");
    assert!(
        before.iter().all(|a| a.2 == "cancelled") && before.len() <= 1,
        "{replanner:?}"
    );
    assert_eq!(of("plus"), [(2, 1, "completed".to_owned())]);
}

#[tokio::test]
async fn the_offline_model_re_plans_after_a_failure_and_on_the_users_word() {
    let app = spawn_app(|_| {}).await;
    let events = app
        .stream_run(
            json!({ "input": "read missing.txt, analyse it, then write a summary",
                            "orchestration": "reactive" }),
        )
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    // A recovery answer stands in for the task: the run says so.
    assert_eq!(fin["completion"], "partial", "{fin}");
    assert_eq!(fin["error"]["code"], "file_not_found", "{fin}");
    let output = fin["output"].as_str().unwrap();
    assert!(
        output.contains("could not finish") && output.contains("`read`"),
        "{output}"
    );
    let versions = plans(&app, &run_id(&events)).await;
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[0]["plan"]["steps"].as_array().unwrap().len(), 5);
    assert_eq!(versions[1]["strategy"], "alternative");
    assert_eq!(versions[1]["trigger"]["error"]["code"], "file_not_found");
    assert_eq!(versions[1]["diff"]["added"], json!(["recover"]));

    let v1 = json!({ "steps": [
        calc("fact", &[], "6 * 7"),
        { "id": "ask", "kind": "user_input", "depends_on": ["fact"], "input": { "prompt": "Go on?" } },
    ] });
    let run = app
        .create_run(json!({ "input": "x", "orchestration": "reactive", "plan": v1 }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut reader = app.events(&id).await;
    skip_to(&mut reader, "input_required", 1).await;
    let asked = json!({ "message": "just tell me the fact" });
    let (status, _) = app
        .post_json(&format!("/v1/runs/{id}/replan"), &asked)
        .await;
    assert_eq!(status, 202);
    let fin = final_data(&to_final(reader).await);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    // The user's word redefines the task: the revised plan does all of it.
    assert_eq!(fin["completion"], "success", "{fin}");
    let output = fin["output"].as_str().unwrap();
    assert!(
        output.starts_with("Revised as you asked. just tell me the fact"),
        "{output}"
    );
    assert!(
        output.contains("42"),
        "the completed step's output is used: {output}"
    );
    let versions = plans(&app, &id).await;
    assert_eq!(versions[1]["strategy"], "partial");
}

#[tokio::test]
async fn a_child_timing_out_inside_a_parallel_step_is_a_step_timeout_trigger() {
    let probe = Probe::default();
    let llm = ScriptedLlm::start().await;
    llm.push(replan(
        "alternative",
        json!({ "steps": [calc("quick", &[], "2 + 2")] }),
    ));
    let app = spawn_probed_app(None, &probe, |c| use_scripted(c, &llm)).await;
    let slow = json!({ "id": "slow", "kind": "tool", "timeout_ms": 50,
        "input": { "tool": "test.sleep", "arguments": { "key": "slow", "ms": 30000 } } });
    let v1 = json!({ "steps": [{ "id": "par", "kind": "parallel",
        "input": { "steps": [calc("ok", &[], "1 + 1"), slow] } }] });
    let events = run_plan(&app, "reactive", &v1, json!({})).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"]["result"], 4);
    let versions = plans(&app, &run_id(&events)).await;
    assert_eq!(versions[1]["trigger"]["kind"], "step_timeout");
    assert_eq!(versions[1]["trigger"]["step_id"], "par");
    assert_eq!(versions[1]["trigger"]["error"]["code"], "step_timeout");
    assert_eq!(versions[1]["diff"]["removed"], json!(["par"]));
}
