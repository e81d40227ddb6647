//! The auto selector over HTTP: the request, a plan or workflow in it, `[[selector.rules]]`,
//! the model (the scripted server, or the offline model) and the fallback to
//! `selector.default`; the choice on the run object, on the `running` status event and in the
//! timeline; kept across a restart.

use orca::config::{Config, SelectorRuleConfig};
use serde_json::{Value, json};

use crate::support::scripted_llm::{Reply, ScriptedLlm};
use crate::support::*;

fn rule(name: &str, pattern: Option<&str>, keywords: &[&str], target: &str) -> SelectorRuleConfig {
    let (orchestration, workflow) = match target.strip_prefix("workflow:") {
        Some(w) => (None, Some(w.to_owned())),
        None => (Some(target.to_owned()), None),
    };
    SelectorRuleConfig {
        name: name.into(),
        pattern: pattern.map(str::to_owned),
        keywords: keywords.iter().map(|k| k.to_string()).collect(),
        orchestration,
        workflow,
    }
}

/// The selector as shipped: rules given, the model asked when none matches.
fn asking(c: &mut Config, rules: Vec<SelectorRuleConfig>) {
    c.selector.use_llm = true;
    c.selector.rules = rules;
}

/// The `status` events that announce a selection, in order.
fn announced(events: &[SseMessage]) -> Vec<Value> {
    events
        .iter()
        .map(|e| e.json()["data"].clone())
        .filter(|d| d.get("selected").is_some())
        .collect()
}

/// Whether a scripted request was the selector's (structured output named for it).
fn is_selector_request(request: &Value) -> bool {
    let format = &request["response_format"]["json_schema"];
    // Ollama's `format` is the schema alone, without a name: there it is known by its `$id`.
    let by_id = || {
        format["schema"]["$id"]
            .as_str()
            .is_some_and(|id| id.ends_with("/OrchestrationType.schema.json"))
    };
    format["name"] == "orchestration_type" || (test_llm() == TestLlm::Ollama && by_id())
}

#[tokio::test]
async fn a_matching_rule_decides_without_asking_the_model() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::text("Four."));
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        asking(
            c,
            vec![
                rule("arithmetic", Some(r"^[\d\s+\-*/().]+$"), &[], "simple"),
                rule("steps", None, &["then"], "planner"),
            ],
        );
    })
    .await;
    let run = app.create_run(json!({ "input": "2 + 2" })).await;
    // Rules decide as the run is created: the 201 already says how it runs.
    assert_eq!(run["orchestration"], "simple");
    assert_eq!(run["selected"]["by"], "rule");
    assert_eq!(run["selected"]["rule"], "arithmetic");
    assert_eq!(run["selected"]["orchestration"], "simple");
    let reason = run["selected"]["reason"].as_str().unwrap();
    assert!(reason.contains("pattern"), "{reason}");

    let id = run["id"].as_str().unwrap();
    let events = app.follow(id).await;
    assert_well_formed(&events, 1);
    assert_eq!(final_data(&events)["output"], "Four.");
    // Announced once, on the event that starts the run.
    let said = announced(&events);
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(said[0]["status"], "running");
    assert_eq!(said[0]["selected"], run["selected"]);
    assert_eq!(llm.request_count(), 1, "only the run's own model call");
    assert!(!is_selector_request(&llm.requests()[0]));

    // The keyword rule matches a word, case-insensitively; the planner runs.
    let run = app
        .create_run(json!({ "input": "Read it, THEN say hi", "orchestration": "auto" }))
        .await;
    assert_eq!(run["orchestration"], "planner");
    assert_eq!(run["selected"]["rule"], "steps");
    assert!(
        run["selected"]["reason"]
            .as_str()
            .unwrap()
            .contains("keyword `then`"),
        "{run}"
    );
}

#[tokio::test]
async fn the_request_decides_first() {
    let app = spawn_app(|c| asking(c, vec![rule("all", Some("."), &[], "planner")])).await;
    let run = app
        .create_run(json!({ "input": "10 + 20 계산해줘", "orchestration": "simple" }))
        .await;
    assert_eq!(run["orchestration"], "simple");
    assert_eq!(
        run["selected"],
        json!({ "orchestration": "simple", "by": "request", "rule": null,
                "reason": "the request asked for `simple`" })
    );
    let plan = json!({ "steps": [{ "id": "calc", "kind": "tool",
        "input": { "tool": "math.calculate", "arguments": { "expression": "6 * 7" } } }] });
    let events = app.stream_run(json!({ "input": "x", "plan": plan })).await;
    assert_eq!(
        final_data(&events)["output"],
        json!({ "expression": "6 * 7", "result": 42 })
    );
    let said = announced(&events);
    assert_eq!(said[0]["selected"]["orchestration"], "fixed");
    assert_eq!(said[0]["selected"]["by"], "rule");
    assert_eq!(said[0]["selected"]["rule"], "request_plan");
}

#[tokio::test]
async fn a_rule_runs_a_registered_workflow_and_one_whose_workflow_is_missing_is_passed_over() {
    let app = spawn_app(|c| {
        asking(
            c,
            vec![
                rule("gone", None, &["sum"], "workflow:no-such-workflow"),
                rule("sums", None, &["sum", "합계"], "workflow:sum-up"),
            ],
        )
    })
    .await;
    let workflow = json!({ "steps": [{ "id": "add", "kind": "tool",
        "input": { "tool": "math.calculate", "arguments": { "expression": "{{ input.a }} + {{ input.b }}" } } }],
        "input_schema": { "type": "object", "required": ["a", "b"] } });
    let resp = app
        .client
        .put(app.url("/v1/workflows/sum-up"))
        .json(&workflow)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201, "{}", resp.text().await.unwrap());

    let body = json!({ "input": { "message": "Sum these", "a": 2, "b": 3 } });
    let run = app.create_run(body).await;
    assert_eq!(run["orchestration"], "fixed");
    assert_eq!(run["selected"]["rule"], "sums");
    let reason = run["selected"]["reason"].as_str().unwrap();
    assert!(reason.contains("workflow `sum-up`"), "{reason}");
    let events = app.follow(run["id"].as_str().unwrap()).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"]["result"], 5);
    let id = run["id"].as_str().unwrap();
    let (_, plans) = app.get_json(&format!("/v1/runs/{id}/plans")).await;
    assert_eq!(plans[0]["plan"]["steps"][0]["id"], "add");

    // Named in the request, the workflow runs before any rule is looked at.
    let run = app
        .create_run(json!({ "input": { "a": 1, "b": 1 }, "workflow": "sum-up" }))
        .await;
    assert_eq!(
        run["selected"],
        json!({ "orchestration": "fixed", "by": "rule", "rule": "request_workflow",
                "reason": "the request names workflow `sum-up`" })
    );

    // The workflow refuses an input without `a` and `b`: no rule decides, the model is asked
    // (the offline one: one step, so `simple`).
    let run = app.create_run(json!({ "input": "sum nothing" })).await;
    assert_eq!(run["orchestration"], "auto");
    assert_eq!(run["selected"], Value::Null);
    let events = app.follow(run["id"].as_str().unwrap()).await;
    assert_eq!(announced(&events)[0]["selected"]["by"], "llm");
}

#[tokio::test]
async fn the_model_chooses_when_no_rule_matches_and_its_tokens_count() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::json(json!({ "orchestrationType": "planner" })).usage(7, 3));
    llm.push(
        Reply::json(json!({ "steps": [{ "id": "calc", "kind": "tool",
            "input": { "tool": "math.calculate", "arguments": { "expression": "3 * 4" } } }],
            "output": "{{ steps.calc.output.result }}" }))
        .usage(11, 5),
    );
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        asking(c, vec![rule("never", Some("^$"), &[], "simple")]);
    })
    .await;
    let run = app
        .create_run(json!({ "input": "work out 3 * 4 for me" }))
        .await;
    assert_eq!(
        run["orchestration"], "auto",
        "the model is asked once the run starts"
    );
    assert_eq!(run["selected"], Value::Null);

    let id = run["id"].as_str().unwrap();
    let events = app.follow(id).await;
    assert_well_formed(&events, 1);
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], 12);
    // The selector's call is a step of its own, streamed as it is written, and counted.
    assert_eq!(fin["usage"]["prompt_tokens"], 7 + 11);
    assert_eq!(fin["usage"]["completion_tokens"], 3 + 5);
    assert_eq!(fin["usage"]["llm_calls"], 2);
    let partial: String = events
        .iter()
        .map(|e| e.json())
        .filter(|e| e["kind"] == "json_partial" && e["step_id"] == "selector")
        .map(|e| e["data"]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&partial).unwrap(),
        json!({ "orchestrationType": "planner" })
    );
    let said = announced(&events);
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(said[0]["selected"]["by"], "llm");
    assert_eq!(said[0]["selected"]["orchestration"], "planner");
    // Announced after the selector's step and before the plan is made.
    let seq_of = |pred: &dyn Fn(&Value) -> bool| {
        events
            .iter()
            .map(|e| e.json())
            .find(|e| pred(e))
            .map(|e| e["seq"].as_u64().unwrap())
            .unwrap()
    };
    let selector_done = seq_of(&|e| {
        e["kind"] == "step"
            && e["data"]["step_id"] == "selector"
            && e["data"]["status"] == "completed"
    });
    let selection = seq_of(&|e| e["kind"] == "status" && e["data"].get("selected").is_some());
    let plan = seq_of(&|e| e["kind"] == "plan");
    assert!(
        selector_done < selection && selection < plan,
        "{selector_done} {selection} {plan}"
    );

    let requests = llm.requests();
    assert!(is_selector_request(&requests[0]), "{}", requests[0]);
    assert_eq!(
        requests[0]["messages"][1]["content"],
        "work out 3 * 4 for me"
    );
    let (_, stored) = app.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(stored["orchestration"], "planner");
    assert_eq!(stored["selected"], said[0]["selected"]);
    let (_, steps) = app.get_json(&format!("/v1/runs/{id}/steps")).await;
    let selector_step = steps
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step_id"] == "selector")
        .expect("the selector's attempt");
    assert_eq!(selector_step["status"], "completed");
    assert_eq!(
        selector_step["output"],
        json!({ "orchestrationType": "planner" })
    );
    let (_, timeline) = app.get_json(&format!("/v1/runs/{id}/timeline")).await;
    let decision = &timeline["decisions"][0];
    assert_eq!(decision["kind"], "selection", "{timeline}");
    assert_eq!(decision["detail"], stored["selected"]);
}

#[tokio::test]
async fn an_invalid_answer_or_a_model_error_falls_back_to_the_default() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        asking(c, vec![]);
    })
    .await;
    let cases = [
        (
            Reply::json(json!({ "orchestrationType": "sideways" })),
            "invalid_llm_output",
        ),
        (Reply::text("simple, I think"), "not JSON"),
        (
            Reply::json(json!({ "orchestrationType": "fixed" })),
            "the model chose `fixed`, but the request has no workflow or plan",
        ),
        (Reply::status(400).message("bad request"), "bad request"),
    ];
    for (i, (reply, why)) in cases.into_iter().enumerate() {
        llm.push(reply);
        llm.push(Reply::text("Answered simply."));
        let events = app
            .stream_run(json!({ "input": format!("case {i}") }))
            .await;
        let fin = final_data(&events);
        assert_eq!(fin["status"], "succeeded", "{i}: {fin}");
        assert_eq!(fin["output"], "Answered simply.", "{i}");
        let said = announced(&events);
        assert_eq!(said.len(), 1, "{i}: {said:?}");
        let selected = &said[0]["selected"];
        assert_eq!(selected["by"], "default", "{i}: {selected}");
        assert_eq!(selected["orchestration"], "simple", "{i}");
        let reason = selected["reason"].as_str().unwrap();
        assert!(reason.contains(why), "{i}: {why:?} not in {reason:?}");
        assert!(reason.contains("selector.default is `simple`"), "{reason}");
    }
    assert_eq!(llm.pending_replies(), 0);
}

#[tokio::test]
async fn the_selector_call_counts_toward_the_token_limit() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::json(json!({ "orchestrationType": "simple" })).usage(40, 10));
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        asking(c, vec![]);
    })
    .await;
    let events = app
        .stream_run(json!({ "input": "hello", "limits": { "max_tokens": 20 } }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "failed", "{fin}");
    assert_eq!(fin["error"]["code"], "token_limit_exceeded");
    assert_eq!(fin["usage"]["prompt_tokens"], 40);
    assert_eq!(llm.request_count(), 1, "nothing runs past the limit");
}

#[tokio::test]
async fn a_run_resumed_after_a_restart_keeps_its_selection_without_asking_again() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::json(json!({ "orchestrationType": "planner" })));
    llm.push(Reply::json(json!({ "steps": [
        { "id": "calc", "kind": "tool", "input": { "tool": "math.calculate", "arguments": { "expression": "2 + 2" } } },
        { "id": "ok", "kind": "user_input", "depends_on": ["calc"], "input": { "prompt": "go on?" } },
    ], "output": "{{ steps.calc.output.result }}" })));
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        asking(c, vec![]);
    })
    .await;
    let run = app.create_run(json!({ "input": "add, then ask" })).await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut reader = app.events(&id).await;
    skip_to(&mut reader, "input_required", 1).await;
    drop(reader);
    let dir = app.stop().await;

    // The scripted model would now answer `simple`: a second question would show.
    llm.push(Reply::json(json!({ "orchestrationType": "simple" })));
    let app = spawn_app_in(dir, |c| {
        use_scripted(c, &llm);
        asking(c, vec![]);
    })
    .await;
    let mut reader = app.events(&id).await;
    skip_to(&mut reader, "input_required", 2).await;
    assert_eq!(app.answer(&id, "ok", json!(true)).await.status(), 202);
    let fin = final_data(&to_final(reader).await);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], 4);
    assert_eq!(
        llm.request_count(),
        2,
        "the selector and the planner, once each"
    );
    let (_, stored) = app.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(stored["orchestration"], "planner");
    assert_eq!(stored["selected"]["by"], "llm");
    // The restart announced the stored choice again, with its message; the timeline keeps the
    // first announcement as the decision.
    let history = app.history(&id).await;
    let restarts: Vec<&Value> = history
        .iter()
        .filter(|e| e["data"]["message"] == "resumed after a restart")
        .collect();
    assert_eq!(restarts.len(), 1);
    assert_eq!(restarts[0]["data"]["selected"], stored["selected"]);
    let (_, timeline) = app.get_json(&format!("/v1/runs/{id}/timeline")).await;
    let selections = timeline["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"] == "selection")
        .count();
    assert_eq!(selections, 1, "{timeline}");
}

#[tokio::test]
async fn the_offline_model_plans_multi_step_tasks_and_answers_the_rest_simply() {
    let app = spawn_app(|c| asking(c, vec![])).await;
    std::fs::write(
        workspace(&app.dir).join("hello.txt"),
        "Hello from the workspace. It is a small file.\n",
    )
    .unwrap();
    let cases = [
        (
            "read hello.txt, analyse it, then write a summary",
            "planner",
            "46 bytes",
        ),
        ("10 + 20 계산해줘", "simple", "The result is 30."),
        ("현재 시간 알려줘", "simple", "The current time"),
    ];
    for (input, orchestration, answer) in cases {
        let events = app.stream_run(json!({ "input": input })).await;
        let fin = final_data(&events);
        assert_eq!(fin["status"], "succeeded", "{input}: {fin}");
        assert!(
            fin["output"].as_str().unwrap().contains(answer),
            "{input}: {fin}"
        );
        let said = announced(&events);
        assert_eq!(said[0]["selected"]["by"], "llm", "{input}");
        assert_eq!(
            said[0]["selected"]["orchestration"], orchestration,
            "{input}"
        );
    }
}

#[tokio::test]
async fn without_the_model_the_default_decides() {
    let app = spawn_app(|c| c.selector.default = "planner".into()).await;
    let run = app.create_run(json!({ "input": "10 + 20 계산해줘" })).await;
    assert_eq!(run["orchestration"], "planner");
    assert_eq!(
        run["selected"],
        json!({ "orchestration": "planner", "by": "default", "rule": null,
                "reason": "no rule matched and selector.use_llm is off" })
    );
    let (_, listed) = app.get_json("/v1/runs?orchestration=planner").await;
    assert_eq!(listed["runs"][0]["id"], run["id"]);
}

#[tokio::test]
async fn a_bad_rule_stops_the_start_naming_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(&dir);
    config.selector.rules = vec![rule("broken", Some("(unclosed"), &[], "simple")];
    let err = match orca::app::App::build(config).await {
        Ok(_) => panic!("the app started with a broken rule"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        err.contains("selector.rules[0].pattern (rule `broken`)"),
        "{err}"
    );
    assert!(err.contains("not a valid regular expression"), "{err}");
}

#[tokio::test]
async fn a_repeated_idempotency_key_finds_the_run_a_workflow_rule_created() {
    let app = spawn_app(|c| asking(c, vec![rule("sums", None, &["sum"], "workflow:sum-up")])).await;
    let workflow = json!({ "steps": [{ "id": "add", "kind": "tool",
        "input": { "tool": "math.calculate", "arguments": { "expression": "1 + 1" } } }] });
    let resp = app
        .client
        .put(app.url("/v1/workflows/sum-up"))
        .json(&workflow)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let post = |body: Value| {
        app.client
            .post(app.url("/v1/runs"))
            .header("idempotency-key", "sum-once")
            .json(&body)
            .send()
    };
    let first = post(json!({ "input": "sum it" })).await.unwrap();
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["selected"]["rule"], "sums");
    // The same request: the rule's plan added to the stored run does not make it another one.
    let again = post(json!({ "input": "sum it" })).await.unwrap();
    assert_eq!(again.status(), 200);
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["id"], first["id"]);
    // Another body with the key is still refused.
    let other = post(json!({ "input": "sum that" })).await.unwrap();
    assert_eq!(other.status(), 422);
}
