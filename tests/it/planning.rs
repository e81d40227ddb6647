//! Planning and its parts, over HTTP: named LLM functions, the planner, the re-planner, the
//! auto selector. The model side is the scripted OpenAI-compatible server.

use orca::config::FunctionConfig;
use serde_json::{Value, json};

use crate::support::scripted_llm::{Reply, ScriptedLlm};
use crate::support::*;

fn classify() -> FunctionConfig {
    FunctionConfig {
        description: Some("Labels the sentiment of a text.".into()),
        system: Some("You label text.".into()),
        prompt: Some("Label: {{ input.text }}".into()),
        output_schema: Some(json!({ "type": "object", "required": ["sentiment"],
            "properties": { "sentiment": { "enum": ["positive", "negative"] } } })),
        ..Default::default()
    }
}

#[tokio::test]
async fn llm_functions_are_listed_and_called_from_plans() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::json(json!({ "sentiment": "positive" })));
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        c.functions.insert("classify".into(), classify());
    })
    .await;

    let (status, list) = app.get_json("/v1/functions").await;
    assert_eq!(status, 200);
    let names: Vec<(&str, bool)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["name"].as_str().unwrap(), f["builtin"].as_bool().unwrap()))
        .collect();
    for builtin in ["planner", "replanner", "selector", "summarizer"] {
        assert!(names.contains(&(builtin, true)), "{names:?}");
    }
    assert!(names.contains(&("classify", false)), "{names:?}");

    let plan = json!({ "steps": [{ "id": "label", "kind": "llm",
        "input": { "function": "classify", "arguments": { "text": "{{ input.review }}" } } }] });
    let events = app
        .stream_run(json!({ "input": { "review": "great product" }, "orchestration": "fixed", "plan": plan }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], json!({ "sentiment": "positive" }));
    let sent = &llm.requests()[0];
    assert_eq!(sent["messages"][0]["content"], "You label text.");
    assert_eq!(sent["messages"][1]["content"], "Label: great product");
    assert_eq!(sent["response_format"]["type"], "json_schema");
}

#[tokio::test]
async fn plans_calling_unknown_functions_or_mixing_prompt_and_function_are_refused() {
    let app = spawn_app(|_| {}).await;
    let cases = [
        (
            json!({ "function": "nope" }),
            "/plan/steps/0/input/function",
            "unknown LLM function `nope`",
        ),
        (
            json!({ "function": "summarizer", "prompt": "x" }),
            "/plan/steps/0/input",
            "takes only `arguments`",
        ),
        (
            json!({ "prompt": "x", "arguments": {} }),
            "/plan/steps/0/input",
            "`arguments` go with a `function`",
        ),
    ];
    for (input, pointer, want) in cases {
        let plan = json!({ "steps": [{ "id": "s", "kind": "llm", "input": input }] });
        let resp = app
            .client
            .post(app.url("/v1/runs"))
            .json(&json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 422);
        let problem: Value = resp.json().await.unwrap();
        let errors = problem["errors"].as_array().unwrap();
        assert!(
            errors
                .iter()
                .any(|e| e["pointer"] == pointer && e["message"].as_str().unwrap().contains(want)),
            "{pointer} {want}: {problem}"
        );
    }
}

#[tokio::test]
async fn a_bad_function_in_the_configuration_stops_the_start_naming_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(&dir);
    config.functions.insert(
        "broken".into(),
        FunctionConfig {
            prompt: Some("{{ input.text".into()),
            model: Some("no-such-model".into()),
            ..Default::default()
        },
    );
    let err = match orca::app::App::build(config).await {
        Ok(_) => panic!("the app started with a broken function"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("functions.broken.prompt"), "{err}");
    assert!(
        err.contains("functions.broken.model: no model alias `no-such-model`"),
        "{err}"
    );
}

pub(crate) fn count_plan() -> Value {
    json!({ "steps": [
        { "id": "calc", "kind": "tool", "input": { "tool": "math.calculate", "arguments": { "expression": "6 * 7" } } },
        { "id": "more", "kind": "tool", "depends_on": ["calc"],
          "input": { "tool": "math.calculate", "arguments": { "expression": "{{ steps.calc.output.result }} + 1" } } },
    ], "output": "{{ steps.more.output.result }}" })
}

async fn planner_run(app: &TestApp, input: &str) -> Vec<SseMessage> {
    app.stream_run(json!({ "input": input, "orchestration": "planner" }))
        .await
}

fn run_id(events: &[SseMessage]) -> String {
    events[0].json()["run_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_planner_writes_a_plan_that_runs_as_version_1() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::json(count_plan()));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let events = planner_run(&app, "six times seven, plus one").await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], 43);
    // The plan streamed as it was written, then was announced as version 1.
    assert!(
        events
            .iter()
            .any(|e| e.kind() == "json_partial" && e.json()["step_id"] == "planner")
    );
    let plan = events.iter().find(|e| e.kind() == "plan").unwrap().json();
    assert_eq!(plan["data"]["version"], 1);
    assert_eq!(plan["data"]["reason"], "initial");
    let (_, plans) = app
        .get_json(&format!("/v1/runs/{}/plans", run_id(&events)))
        .await;
    assert_eq!(plans[0]["plan"], count_plan());
    // The planner saw the task, the tools with their schemas, and the limits, and was asked
    // for structured output.
    let asked = &llm.requests()[0];
    assert_eq!(asked["response_format"]["type"], "json_schema");
    let prompt = asked["messages"][1]["content"].as_str().unwrap();
    assert!(prompt.contains("six times seven, plus one"), "{prompt}");
    assert!(
        prompt.contains("math.calculate") && prompt.contains("\"expression\""),
        "{prompt}"
    );
    assert!(prompt.contains("max_steps"), "{prompt}");
}

#[tokio::test]
async fn an_invalid_plan_is_sent_back_with_its_problems_and_repaired() {
    let llm = ScriptedLlm::start().await;
    // An unknown tool and a dependency cycle, then the fixed plan.
    llm.push(Reply::json(json!({ "steps": [
        { "id": "a", "kind": "tool", "depends_on": ["b"], "input": { "tool": "shell.exec", "arguments": {} } },
        { "id": "b", "kind": "tool", "depends_on": ["a"], "input": { "tool": "math.calculate", "arguments": { "expression": "1" } } },
    ] })));
    llm.push(Reply::json(count_plan()));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let events = planner_run(&app, "six times seven, plus one").await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let errors: Vec<Value> = events
        .iter()
        .filter(|e| e.kind() == "error")
        .map(|e| e.json()["data"].clone())
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["code"], "invalid_plan");
    let repair = llm.requests()[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        repair.contains("/steps/0/input/tool") && repair.contains("shell.exec"),
        "{repair}"
    );
    assert!(repair.contains("cycle"), "{repair}");
    assert_eq!(app.attempts(&run_id(&events), "planner").await.len(), 2);
}

#[tokio::test]
async fn a_plan_still_invalid_after_the_repairs_falls_back_as_configured() {
    let broken = json!({ "steps": [{ "id": "x", "kind": "tool", "input": { "tool": "nope" } }] });
    // Default: answer as a simple run.
    let llm = ScriptedLlm::start().await;
    for _ in 0..3 {
        llm.push(Reply::json(broken.clone()));
    }
    llm.push(Reply::text("a plain answer"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let events = planner_run(&app, "anything").await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], "a plain answer");
    assert!(
        events
            .iter()
            .any(|e| e.kind() == "error" && e.json()["data"]["code"] == "planning_failed")
    );
    assert_eq!(
        llm.request_count(),
        4,
        "one plan and two repairs, then the simple answer"
    );

    // Configured to fail: planning_failed, naming the problems.
    let llm = ScriptedLlm::start().await;
    for _ in 0..3 {
        llm.push(Reply::json(broken.clone()));
    }
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        c.engine.planning_fallback = orca::config::PlanningFallback::Fail;
    })
    .await;
    let fin = final_data(&planner_run(&app, "anything").await);
    assert_eq!(fin["status"], "failed", "{fin}");
    assert_eq!(fin["error"]["code"], "planning_failed");
    assert!(
        fin["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool `nope`"),
        "{fin}"
    );
}

#[tokio::test]
async fn model_errors_while_planning_are_retried_then_fail_cleanly_with_a_code() {
    let llm = ScriptedLlm::start().await;
    for _ in 0..3 {
        llm.push(Reply::status(500).message("upstream exploded"));
    }
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let fin = final_data(&planner_run(&app, "anything").await);
    assert_eq!(fin["status"], "failed", "{fin}");
    assert_eq!(fin["error"]["code"], "llm_error");
    assert_eq!(
        llm.request_count(),
        3,
        "first try and the provider's two retries"
    );
}

#[tokio::test]
async fn the_offline_model_plans_the_five_step_sample() {
    let app = spawn_app(|_| {}).await;
    std::fs::write(
        workspace(&app.dir).join("hello.txt"),
        "Hello from the workspace. It is a small file.\n",
    )
    .unwrap();
    let events = planner_run(&app, "read hello.txt, analyse it, then write a summary").await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let completed: Vec<String> = events
        .iter()
        .map(|e| e.json()["data"].clone())
        .filter(|d| d["status"] == "completed" && d["step_id"] != "planner")
        .map(|d| d["step_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(completed.len(), 5, "{completed:?}");
    assert!(
        fin["output"].as_str().unwrap().contains("46 bytes"),
        "{fin}"
    );
}

#[tokio::test]
async fn a_planner_run_resumed_after_its_plan_was_made_runs_that_plan_without_planning_again() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::json(json!({ "steps": [
        { "id": "calc", "kind": "tool", "input": { "tool": "math.calculate", "arguments": { "expression": "2 + 2" } } },
        { "id": "ok", "kind": "user_input", "depends_on": ["calc"], "input": { "prompt": "go on?" } },
    ], "output": "{{ steps.calc.output.result }}" })));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let run = app
        .create_run(json!({ "input": "add", "orchestration": "planner" }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut reader = app.events(&id).await;
    skip_to(&mut reader, "input_required", 1).await;
    drop(reader);
    let dir = app.stop().await;
    let app = spawn_app_in(dir, |c| use_scripted(c, &llm)).await;
    let mut reader = app.events(&id).await;
    skip_to(&mut reader, "input_required", 2).await;
    assert_eq!(app.answer(&id, "ok", json!(true)).await.status(), 202);
    let fin = final_data(&to_final(reader).await);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], 4);
    assert_eq!(llm.request_count(), 1, "the planner was asked once");
    let (_, plans) = app.get_json(&format!("/v1/runs/{id}/plans")).await;
    assert_eq!(plans.as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn the_answer_step_ends_the_run_and_skips_what_is_left() {
    let probe = crate::support::tools::Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let plan = json!({ "settings": { "answer_step": "answer", "max_parallel_steps": 4 }, "steps": [
        { "id": "fact", "kind": "tool", "input": { "tool": "math.calculate", "arguments": { "expression": "6 * 7" } } },
        { "id": "slow", "kind": "tool", "input": { "tool": "test.sleep", "arguments": { "key": "slow", "ms": 30000 } } },
        { "id": "after_slow", "kind": "tool", "depends_on": ["slow"], "input": { "tool": "test.count", "arguments": { "key": "after" } } },
        { "id": "answer", "kind": "tool", "depends_on": ["fact"], "input": { "tool": "math.calculate", "arguments": { "expression": "{{ steps.fact.output.result }} + 1" } } },
    ] });
    let started = std::time::Instant::now();
    let events = app
        .stream_run(json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
        .await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "the run waited for `slow`"
    );
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["completion"], "success");
    assert_eq!(
        fin["output"]["result"], 43,
        "the answer step's output is the run's"
    );
    let status_of = |id: &str| {
        events
            .iter()
            .map(|e| e.json()["data"].clone())
            .rfind(|d| d["step_id"] == id)
            .unwrap()
    };
    assert_eq!(status_of("slow")["status"], "cancelled");
    assert_eq!(status_of("slow")["reason"], "the answer step completed");
    assert_eq!(status_of("after_slow")["status"], "skipped");
    assert_eq!(probe.calls("after"), 0);
}

#[tokio::test]
async fn an_answer_step_that_is_not_a_top_level_step_is_refused() {
    let app = spawn_app(|_| {}).await;
    for (answer, want) in [
        ("nope", "no step has the id `nope`"),
        ("inner", "is a child step"),
    ] {
        let plan = json!({ "settings": { "answer_step": answer }, "steps": [
            { "id": "seq", "kind": "sequential", "input": { "steps": [
                { "id": "inner", "kind": "wait", "input": { "duration_ms": 1 } }] } }] });
        let resp = app
            .client
            .post(app.url("/v1/runs"))
            .json(&json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 422);
        let problem: Value = resp.json().await.unwrap();
        assert!(
            problem["errors"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["pointer"] == "/plan/settings/answer_step"
                    && e["message"].as_str().unwrap().contains(want)),
            "{problem}"
        );
    }
}

#[tokio::test]
async fn a_run_past_its_time_limit_keeps_what_completed_as_its_output() {
    let app = spawn_app(|_| {}).await;
    let plan = json!({ "steps": [
        { "id": "fact", "kind": "tool", "input": { "tool": "math.calculate", "arguments": { "expression": "6 * 7" } } },
        { "id": "long", "kind": "wait", "depends_on": ["fact"], "input": { "duration_ms": 60000 } },
    ] });
    let events = app
        .stream_run(
            json!({ "input": "x", "orchestration": "fixed", "plan": plan,
                            "limits": { "max_duration_ms": 300 } }),
        )
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "timed_out", "{fin}");
    assert_eq!(fin["completion"], "timeout");
    assert_eq!(fin["output"]["fact"]["result"], 42, "{fin}");
    assert!(fin["output"].get("long").is_none(), "{fin}");
}

#[tokio::test]
async fn planner_failure_samples_rate_limits_pass_malformed_streams_fail_timeouts_keep_work() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = json!({ "steps": [{ "id": "fact", "kind": "tool",
        "input": { "tool": "math.calculate", "arguments": { "expression": "6 * 7" } } }] });

    // 429 and 500 are retried by the provider; the plan then runs.
    llm.push(Reply::status(429).retry_after_ms(10));
    llm.push(Reply::status(500));
    llm.push(Reply::json(plan.clone()));
    let fin = final_data(&planner_run(&app, "six times seven").await);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"]["result"], 42);

    // A malformed stream is not retried: a clean failure with its code.
    llm.push(Reply::malformed());
    let fin = final_data(&planner_run(&app, "six times seven").await);
    assert_eq!(fin["status"], "failed", "{fin}");
    assert_eq!(fin["error"]["code"], "llm_malformed_response");

    // Past the time limit: `timed_out`, completion `timeout`, what completed is the output.
    llm.push(Reply::json(json!({ "steps": [
        { "id": "fact", "kind": "tool", "input": { "tool": "math.calculate", "arguments": { "expression": "6 * 7" } } },
        { "id": "long", "kind": "wait", "depends_on": ["fact"], "input": { "duration_ms": 60000 } },
    ] })));
    let events = app
        .stream_run(json!({ "input": "x", "orchestration": "planner", "limits": { "max_duration_ms": 500 } }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "timed_out", "{fin}");
    assert_eq!(fin["completion"], "timeout");
    assert_eq!(fin["output"]["fact"]["result"], 42, "{fin}");
}

#[tokio::test]
async fn a_planned_200_step_chain_runs_to_the_end() {
    let llm = ScriptedLlm::start().await;
    let mut steps = vec![json!({ "id": "s0", "kind": "tool",
        "input": { "tool": "math.calculate", "arguments": { "expression": "0 + 1" } } })];
    for i in 1..200 {
        steps.push(json!({ "id": format!("s{i}"), "kind": "tool", "depends_on": [format!("s{}", i - 1)],
            "input": { "tool": "math.calculate",
                       "arguments": { "expression": format!("{{{{ steps.s{}.output.result }}}} + 1", i - 1) } } }));
    }
    llm.push(Reply::json(
        json!({ "steps": steps, "output": "{{ steps.s199.output.result }}" }),
    ));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let events = app
        .stream_run(json!({ "input": "count to 200", "orchestration": "planner",
                            "limits": { "max_steps": 201 } }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], 200);
    assert_eq!(fin["usage"]["tool_calls"], 200);
}

#[tokio::test]
async fn providers_without_json_schema_get_the_schema_in_the_prompt() {
    use orca::config::StructuredOutput;
    for (mode, format) in [
        (StructuredOutput::JsonObject, Some("json_object")),
        (StructuredOutput::Prompt, None),
    ] {
        let llm = ScriptedLlm::start().await;
        llm.push(Reply::json(count_plan()));
        let app = spawn_app(|c| {
            use_scripted(c, &llm);
            set_structured_output(c, mode);
        })
        .await;
        let fin = final_data(&planner_run(&app, "count").await);
        assert_eq!(fin["status"], "succeeded", "{mode:?}: {fin}");
        let sent = &llm.requests()[0];
        // Anthropic has no JSON mode: `json_object` is the schema in the prompt alone.
        let format = format.filter(|_| test_llm() != TestLlm::Anthropic);
        assert_eq!(
            sent["response_format"]["type"].as_str(),
            format,
            "{mode:?}: {sent}"
        );
        let system = sent["messages"][0]["content"].as_str().unwrap();
        assert!(
            system.contains("valid against this JSON Schema"),
            "{system}"
        );
        assert!(
            system.contains("\"steps\""),
            "the AgentPlan schema is in the prompt"
        );
    }
}

#[tokio::test]
async fn a_token_budget_spent_by_planning_ends_the_run_with_its_code() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::json(count_plan()).usage(700, 400));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let events = app
        .stream_run(json!({ "input": "count", "orchestration": "planner",
                            "limits": { "max_tokens": 1000 } }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "failed", "{fin}");
    assert_eq!(fin["error"]["code"], "token_limit_exceeded");
    assert_eq!(fin["usage"]["prompt_tokens"], 700);
    assert_eq!(fin["usage"]["tool_calls"], 0, "nothing ran past the budget");
}
