//! Plan review over HTTP (`review_plans`): a model-written plan version waits for a person,
//! who approves it, edits it or rejects it with a reason the planner and re-planner read;
//! bad answers; across a restart. The model is the scripted OpenAI-compatible server.

use serde_json::{Value, json};

use crate::support::scripted_llm::{Reply, ScriptedLlm};
use crate::support::server::to_final;
use crate::support::tools::Probe;
use crate::support::*;

fn calc(id: &str, deps: &[&str], expression: &str) -> Value {
    let mut step = json!({ "id": id, "kind": "tool",
        "input": { "tool": "math.calculate", "arguments": { "expression": expression } } });
    if !deps.is_empty() {
        step["depends_on"] = json!(deps);
    }
    step
}

/// Reads events to the next `input_required`; its event.
async fn next_review(reader: &mut SseReader) -> Value {
    loop {
        let event = reader.next_event().await.expect("the run asks").json();
        assert_ne!(event["kind"], "final", "the run ended: {event}");
        if event["kind"] == "input_required" {
            assert_eq!(event["data"]["kind"], "plan_review", "{event}");
            return event;
        }
    }
}

/// Approves the review asked at `step` and reads the run to its end: it succeeds with `output`.
async fn approve_to_end(app: &TestApp, id: &str, step: &Value, reader: SseReader, output: Value) {
    let (status, _) = answer(app, id, step, json!({ "decision": "approve" })).await;
    assert_eq!(status, 202);
    let fin = final_data(&to_final(reader).await);
    assert_eq!(
        (fin["status"].clone(), fin["output"].clone()),
        (json!("succeeded"), output),
        "{fin}"
    );
}

async fn answer(app: &TestApp, id: &str, step: &Value, value: Value) -> (u16, Value) {
    let body = json!({ "step_id": step, "value": value });
    app.post_json(&format!("/v1/runs/{id}/input"), &body).await
}

#[tokio::test]
async fn a_planners_plan_waits_for_approval_and_is_rejected_then_edited() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let first = json!({ "steps": [calc("one", &[], "1 + 1")] });
    llm.push(Reply::json(first.clone()));
    let run = app
        .create_run(json!({ "input": "add", "orchestration": "planner", "review_plans": true }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut reader = app.events(&id).await;
    let asked = next_review(&mut reader).await;
    assert_eq!(
        (
            asked["data"]["plan_version"].clone(),
            asked["data"]["plan"].clone()
        ),
        (json!(1), first)
    );
    let step = asked["data"]["step_id"].clone();
    assert!(step.as_str().unwrap().starts_with("review-1-"), "{asked}");
    let (_, stored) = app.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(stored["status"], "waiting_input");
    assert!(
        app.attempts(&id, "one").await.is_empty(),
        "the plan ran before it was approved"
    );

    for bad in [
        json!({ "decision": "maybe" }),
        json!({ "decision": "edit" }),
        json!({ "decision": "reject" }),
        json!({ "decision": "approve", "extra": 1 }),
    ] {
        let (status, problem) = answer(&app, &id, &step, bad.clone()).await;
        assert_eq!(status, 422, "{bad} → {problem}");
    }
    // Rejected: the planner writes another, told why.
    let second = json!({ "steps": [calc("one", &[], "1 + 1"), calc("two", &["one"], "{{ steps.one.output.result }} * 10")] });
    llm.push(Reply::json(second.clone()));
    let (status, body) = answer(
        &app,
        &id,
        &step,
        json!({ "decision": "reject", "reason": "multiply by ten as well" }),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let asked = next_review(&mut reader).await;
    assert_eq!(asked["data"]["plan"], second);
    let told = llm.requests()[1].to_string();
    assert!(told.contains("multiply by ten as well"), "{told}");

    // An invalid edit is refused in the run and asked again; a valid one runs.
    let step = asked["data"]["step_id"].clone();
    let bad_edit = json!({ "steps": [calc("one", &[], "1 + 1"), { "id": "x", "kind": "tool",
        "input": { "tool": "no.such.tool", "arguments": {} } }] });
    let (status, _) = answer(
        &app,
        &id,
        &step,
        json!({ "decision": "edit", "plan": bad_edit }),
    )
    .await;
    assert_eq!(status, 202);
    let again = next_review(&mut reader).await;
    assert_ne!(again["data"]["step_id"], step, "asked again as a new round");
    assert!(
        again["data"]["prompt"]
            .as_str()
            .unwrap()
            .contains("no.such.tool"),
        "{again}"
    );
    let edited = json!({ "steps": [calc("one", &[], "1 + 1"), calc("two", &["one"], "{{ steps.one.output.result }} * 100")],
        "output": "{{ steps.two.output.result }}" });
    let (status, _) = answer(
        &app,
        &id,
        &again["data"]["step_id"],
        json!({ "decision": "edit", "plan": edited.clone() }),
    )
    .await;
    assert_eq!(status, 202);
    let fin = final_data(&to_final(reader).await);
    assert_eq!(
        (fin["status"].clone(), fin["output"].clone()),
        (json!("succeeded"), json!(200)),
        "{fin}"
    );
    let (_, plans) = app.get_json(&format!("/v1/runs/{id}/plans")).await;
    assert_eq!(plans.as_array().unwrap().len(), 1);
    assert_eq!(plans[0]["plan"], edited);
    assert_eq!(llm.requests().len(), 2);
}

#[tokio::test]
async fn a_re_planned_version_waits_for_review_and_a_rejection_goes_to_the_re_planner() {
    let llm = ScriptedLlm::start().await;
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |c| use_scripted(c, &llm)).await;
    let flaky = json!({ "id": "flaky", "kind": "tool", "depends_on": ["ok"],
        "input": { "tool": "test.flaky", "arguments": { "key": "flaky", "failures": 5 } } });
    let v1 = json!({ "steps": [calc("ok", &[], "1 + 1"), flaky] });
    let alternative = |expression: &str| {
        Reply::json(
            json!({ "strategy": "alternative", "reason": "avoid it", "completes_task": true,
            "plan": { "steps": [calc("ok", &[], "1 + 1"), calc("other", &["ok"], expression)],
                      "output": "{{ steps.other.output.result }}" } }),
        )
    };
    llm.push(alternative("{{ steps.ok.output.result }} + 1"));
    llm.push(alternative("{{ steps.ok.output.result }} * 21"));
    let run = app
        .create_run(
            json!({ "input": "x", "orchestration": "reactive", "plan": v1, "review_plans": true }),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut reader = app.events(&id).await;
    // The request's own plan is not reviewed; the re-planner's version 2 is.
    let asked = next_review(&mut reader).await;
    assert_eq!(asked["data"]["plan_version"], 2);
    let (status, _) = answer(
        &app,
        &id,
        &asked["data"]["step_id"],
        json!({ "decision": "reject", "reason": "the answer must be 42" }),
    )
    .await;
    assert_eq!(status, 202);
    let asked = next_review(&mut reader).await;
    assert_eq!(asked["data"]["plan_version"], 2);
    let told = llm.requests()[1].to_string();
    assert!(told.contains("the answer must be 42"), "{told}");
    approve_to_end(&app, &id, &asked["data"]["step_id"], reader, json!(42)).await;
    let (_, plans) = app.get_json(&format!("/v1/runs/{id}/plans")).await;
    assert_eq!(
        plans.as_array().unwrap().len(),
        2,
        "a rejected version is never stored"
    );
    let message = plans[1]["trigger"]["message"].as_str().unwrap();
    assert!(message.contains("the answer must be 42"), "{message}");
}

#[tokio::test]
async fn a_review_pending_at_a_restart_is_asked_again_and_its_plan_then_runs() {
    let llm = ScriptedLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let app = spawn_app_in(dir, |c| use_scripted(c, &llm)).await;
    let plan = json!({ "steps": [calc("one", &[], "20 + 22")], "output": "{{ steps.one.output.result }}" });
    llm.push(Reply::json(plan.clone()));
    let run = app
        .create_run(json!({ "input": "add", "orchestration": "planner", "review_plans": true }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut reader = app.events(&id).await;
    let asked = next_review(&mut reader).await;
    drop(reader);
    let dir = app.stop().await;

    // Resumed, the run plans again; the same plan is asked about at the same place.
    llm.push(Reply::json(plan));
    let app = spawn_app_in(dir, |c| use_scripted(c, &llm)).await;
    let mut reader = app.events(&id).await;
    next_review(&mut reader).await;
    let again = next_review(&mut reader).await;
    assert_eq!(again["data"]["step_id"], asked["data"]["step_id"]);
    approve_to_end(&app, &id, &again["data"]["step_id"], reader, json!(42)).await;
}

#[tokio::test]
async fn reviews_are_refused_for_runs_no_model_plans() {
    let app = spawn_app(|_| {}).await;
    for orchestration in ["simple", "fixed"] {
        let body = json!({ "input": "x", "orchestration": orchestration, "review_plans": true,
            "plan": { "steps": [calc("one", &[], "1 + 1")] } });
        let (status, problem) = app.post_json("/v1/runs", &body).await;
        assert_eq!(status, 422, "{problem}");
        let pointers: Vec<&Value> = problem["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["pointer"])
            .collect();
        assert!(pointers.contains(&&json!("/review_plans")), "{problem}");
    }
    let (status, problem) = app
        .post_json("/v1/runs", &json!({ "input": "x", "review_plans": "yes" }))
        .await;
    assert_eq!(
        (status, problem["errors"][0]["pointer"].clone()),
        (422, json!("/review_plans")),
        "{problem}"
    );
}

#[tokio::test]
async fn a_plan_under_review_on_one_replica_is_approved_through_another() {
    let replicas = TwoReplicas::start(&[("ORCA_LLM__PROVIDER", "offline")]).await;
    let (a, b) = (&replicas.a, &replicas.b);
    let body =
        json!({ "input": "10 + 20 계산해줘", "orchestration": "planner", "review_plans": true });
    let run: Value = a
        .client
        .post(a.url("/v1/runs"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = run["id"].as_str().unwrap().to_owned();
    let reader = a.until_asked(&id, 1).await;
    let asked = a
        .stored_events(&id)
        .await
        .into_iter()
        .rfind(|e| e["kind"] == "input_required")
        .unwrap();
    assert_eq!(asked["data"]["kind"], "plan_review");
    let refused = b
        .answer(
            &id,
            asked["data"]["step_id"].as_str().unwrap(),
            json!({ "decision": "later" }),
        )
        .await;
    assert_eq!(
        refused, 422,
        "the answer is checked on the replica that takes it"
    );
    let step = asked["data"]["step_id"].as_str().unwrap();
    assert_eq!(
        b.answer(&id, step, json!({ "decision": "approve" })).await,
        202
    );
    let fin = final_data(&to_final(reader).await);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let (_, plans): (u16, Value) = {
        let resp = b
            .client
            .get(b.url(&format!("/v1/runs/{id}/plans")))
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.json().await.unwrap())
    };
    assert_eq!(plans[0]["plan"], asked["data"]["plan"]);
}

/// The offline model acts on a rejection: its next plan does what the reason says (a last
/// step that explains, then, told to drop it, the first plan again), and each plan is asked
/// about under its own step id, the first plan written again too.
#[tokio::test]
async fn the_offline_planner_acts_on_a_rejection_and_each_plan_is_asked_anew() {
    let app = spawn_app(|_| {}).await;
    let run = app
        .create_run(
            json!({ "input": "10 + 20 계산해줘", "orchestration": "planner",
                            "review_plans": true }),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut reader = app.events(&id).await;
    let first = next_review(&mut reader).await;
    let plan = first["data"]["plan"].clone();
    assert_eq!(plan["steps"][0]["id"], "calc", "{first}");
    let reject = |why: &str| json!({ "decision": "reject", "reason": why });

    let step = first["data"]["step_id"].clone();
    let (status, _) = answer(&app, &id, &step, reject("explain the sum in words")).await;
    assert_eq!(status, 202);
    let second = next_review(&mut reader).await;
    let revised = &second["data"]["plan"];
    assert_eq!(
        (revised["steps"][0].clone(), revised["steps"][1].clone()),
        (
            plan["steps"][0].clone(),
            json!({ "id": "revise", "kind": "llm", "depends_on": ["calc"], "input": {
                "prompt": "Revise the work as asked: explain the sum in words Done so far: {{ steps.calc.output }}" } })
        ),
        "{second}"
    );

    let (status, _) = answer(
        &app,
        &id,
        &second["data"]["step_id"],
        reject("drop the revise step"),
    )
    .await;
    assert_eq!(status, 202);
    let third = next_review(&mut reader).await;
    assert_eq!(third["data"]["plan"], plan, "{third}");
    // The same plan as the first, asked under a round of its own: 3 asks per plan
    // (engine.max_plan_repairs 2 + 1), so the third plan's first ask is round 7.
    let first_id = step.as_str().unwrap();
    let again = format!("{}-7", first_id.strip_suffix("-1").unwrap());
    assert_eq!(third["data"]["step_id"], again.as_str());
    let ids = [&step, &second["data"]["step_id"], &third["data"]["step_id"]];
    assert!(ids[0] != ids[1] && ids[1] != ids[2], "{ids:?}");

    let (status, _) = answer(&app, &id, ids[2], json!({ "decision": "approve" })).await;
    assert_eq!(status, 202);
    let fin = final_data(&to_final(reader).await);
    assert_eq!(fin["status"], "succeeded", "{fin}");
}
