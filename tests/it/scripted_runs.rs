//! Simple runs against the scripted OpenAI-compatible server: streaming, tool calls, provider
//! failures, cancellation, limits, queueing, resume after a stop.

use serde_json::{Value, json};

use crate::support::scripted_llm::{Reply, ScriptedLlm};
use crate::support::*;

async fn scripted_app(llm: &ScriptedLlm) -> TestApp {
    spawn_app(|c| use_scripted(c, llm)).await
}

fn run_id(events: &[SseMessage]) -> String {
    events[0].json()["run_id"].as_str().unwrap().to_owned()
}

fn of_kind(events: &[SseMessage], kind: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e.kind() == kind)
        .map(|e| e.json()["data"].clone())
        .collect()
}

#[tokio::test]
async fn a_streamed_run_carries_tokens_usage_and_final() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::text("Hello there, human").usage(7, 3));
    let app = scripted_app(&llm).await;
    let events = app.stream_run(json!({ "input": "hi" })).await;
    assert_well_formed(&events, 1);
    assert_eq!(&kinds(&events)[..3], ["status", "status", "step"]);
    let text: String = of_kind(&events, "token")
        .iter()
        .map(|t| t["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Hello there, human");
    assert!(of_kind(&events, "token").len() >= 3, "streamed in pieces");
    assert_eq!(
        of_kind(&events, "usage"),
        vec![json!({ "prompt_tokens": 7, "completion_tokens": 3 })]
    );
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded");
    assert_eq!(fin["output"], "Hello there, human");
    assert_eq!(
        fin["usage"],
        json!({ "prompt_tokens": 7, "completion_tokens": 3, "llm_calls": 1, "tool_calls": 0 })
    );

    // What the model was sent: the user's message, streaming on, our tools offered.
    let req = &llm.requests()[0];
    assert_eq!(req["stream"], true);
    assert_eq!(req["model"], "gpt-4o-mini");
    assert_eq!(
        req["messages"].as_array().unwrap().last().unwrap()["content"],
        "hi"
    );
    assert!(req["tools"].as_array().unwrap().len() >= 3);

    let (_, run) = app.get_json(&format!("/v1/runs/{}", run_id(&events))).await;
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["completion"], "success");
    assert_eq!(run["usage"]["prompt_tokens"], 7);
    assert!(run["started_at"].is_string() && run["finished_at"].is_string());
}

#[tokio::test]
async fn tool_calls_are_executed_and_answered_back_to_the_model() {
    let llm = ScriptedLlm::start().await;
    llm.push(
        Reply::tool_call("math.calculate", json!({ "expression": "6 * 7" }))
            .and_tool_call("clock.now", json!({ "timezone": "Europe/Paris" })),
    );
    llm.push(Reply::text("It is 42"));
    let app = scripted_app(&llm).await;
    let events = app
        .stream_run(json!({ "input": "what is 6 times 7, and the time in Paris?" }))
        .await;
    assert_well_formed(&events, 1);
    let calls = of_kind(&events, "tool_call");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["tool"], "math.calculate");
    assert_eq!(calls[0]["arguments"], json!({ "expression": "6 * 7" }));
    assert_eq!(calls[1]["tool"], "clock.now");
    let results = of_kind(&events, "tool_result");
    assert_eq!(results[0]["output"]["result"], 42);
    assert_eq!(results[0]["call_id"], calls[0]["call_id"]);
    assert_eq!(results[1]["output"]["timezone"], "Europe/Paris");
    assert_eq!(final_data(&events)["output"], "It is 42");
    assert_eq!(final_data(&events)["usage"]["tool_calls"], 2);

    // The second model call saw both results, tied to their call ids.
    let second = &llm.requests()[1];
    let msgs = second["messages"].as_array().unwrap();
    let tool_msgs: Vec<&Value> = msgs.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tool_msgs.len(), 2);
    assert!(tool_msgs[0]["content"].as_str().unwrap().contains("42"));
    assert_eq!(tool_msgs[0]["tool_call_id"], calls[0]["call_id"]);
}

#[tokio::test]
async fn a_nonexistent_tool_fails_its_step_and_the_model_is_told() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::tool_call("web.search", json!({ "q": "rust" })));
    llm.push(Reply::text("I cannot search the web."));
    let app = scripted_app(&llm).await;
    let events = app.stream_run(json!({ "input": "search rust" })).await;
    let result = &of_kind(&events, "tool_result")[0];
    assert_eq!(result["error"]["code"], "tool_not_found");
    let errors = of_kind(&events, "error");
    assert_eq!(errors[0]["code"], "tool_not_found");
    assert_eq!(final_data(&events)["status"], "succeeded");
    let told = llm.requests()[1]["messages"].to_string();
    assert!(told.contains("tool_not_found"), "{told}");

    let (_, steps) = app
        .get_json(&format!("/v1/runs/{}/steps", run_id(&events)))
        .await;
    let tool_step = steps
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "tool")
        .unwrap()
        .clone();
    assert_eq!(tool_step["status"], "failed");
    assert_eq!(tool_step["error"]["code"], "tool_not_found");
    assert_eq!(tool_step["name"], "web.search");
}

#[tokio::test]
async fn bad_tool_arguments_fail_the_step_with_a_clear_error() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::tool_call("math.calculate", json!({ "expr": 5 })));
    llm.push(Reply::tool_call_raw("math.calculate", "{\"expression\": "));
    llm.push(Reply::text("Giving up."));
    let app = scripted_app(&llm).await;
    let events = app.stream_run(json!({ "input": "compute" })).await;
    let results = of_kind(&events, "tool_result");
    assert_eq!(results.len(), 2);
    for r in &results {
        assert_eq!(r["error"]["code"], "invalid_tool_arguments", "{r}");
    }
    let schema_msg = results[0]["error"]["message"].as_str().unwrap();
    assert!(
        schema_msg.contains("expression") || schema_msg.contains("/expr"),
        "{schema_msg}"
    );
    assert!(
        results[1]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );
    // The raw, unparsable arguments are shown as the model wrote them.
    assert_eq!(
        of_kind(&events, "tool_call")[1]["arguments"],
        "{\"expression\": "
    );
    assert_eq!(final_data(&events)["output"], "Giving up.");
}

async fn failed_run(llm: &ScriptedLlm, app: &TestApp) -> (Vec<SseMessage>, Value) {
    let events = app.stream_run(json!({ "input": "hi" })).await;
    assert_well_formed(&events, 1);
    let fin = final_data(&events);
    assert_eq!(fin["status"], "failed", "{fin}");
    assert_eq!(fin["completion"], "error");
    let history = serde_json::to_string(&app.history(&run_id(&events)).await).unwrap();
    assert!(
        !history.contains("sk-test-secret"),
        "the API key leaked into history"
    );
    let _ = llm;
    (events, fin)
}

#[tokio::test]
async fn a_provider_500_is_retried_then_fails_the_run() {
    let llm = ScriptedLlm::start().await;
    for _ in 0..3 {
        llm.push(Reply::status(500).message("upstream exploded"));
    }
    let app = scripted_app(&llm).await;
    let (_, fin) = failed_run(&llm, &app).await;
    assert_eq!(fin["error"]["code"], "llm_error");
    assert_eq!(llm.request_count(), 3, "first try + max_retries (2)");
}

#[tokio::test]
async fn a_provider_429_is_retried_after_its_retry_after() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::status(429).retry_after_ms(30));
    llm.push(Reply::text("made it"));
    let app = scripted_app(&llm).await;
    let events = app.stream_run(json!({ "input": "hi" })).await;
    assert_eq!(final_data(&events)["output"], "made it");
    assert_eq!(llm.request_count(), 2);
}

#[tokio::test]
async fn a_silent_provider_times_out() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::stalled());
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        c.llm.openai.read_timeout_ms = 300;
    })
    .await;
    let (_, fin) = failed_run(&llm, &app).await;
    assert_eq!(fin["error"]["code"], "llm_timeout");
}

#[tokio::test]
async fn a_malformed_stream_fails_the_run() {
    for reply in [Reply::malformed(), Reply::truncated()] {
        let llm = ScriptedLlm::start().await;
        llm.push(reply);
        let app = scripted_app(&llm).await;
        let (_, fin) = failed_run(&llm, &app).await;
        assert_eq!(fin["error"]["code"], "llm_malformed_response");
    }
}

#[tokio::test]
async fn cancel_mid_stream_aborts_the_llm_call() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::text("one two three four five six").stall_after(3));
    let app = scripted_app(&llm).await;
    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .header("accept", "text/event-stream")
        .json(&json!({ "input": "talk" }))
        .send()
        .await
        .unwrap();
    let mut reader = SseReader::new(resp);
    let mut seen = Vec::new();
    loop {
        let ev = reader.next_event().await.expect("events until a token");
        let is_token = ev.kind() == "token";
        seen.push(ev);
        if is_token {
            break;
        }
    }
    let id = run_id(&seen);
    let resp = app
        .client
        .post(app.url(&format!("/v1/runs/{id}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    seen.extend(reader.read_to_final().await);
    assert_well_formed(&seen, 1);
    let fin = final_data(&seen);
    assert_eq!(fin["status"], "cancelled");
    assert_eq!(fin["completion"], "cancelled");
    llm.wait_for_aborted_streams(1).await;

    let (_, run) = app.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(run["status"], "cancelled");
    let (_, steps) = app.get_json(&format!("/v1/runs/{id}/steps")).await;
    assert_eq!(
        steps[0]["status"],
        "cancelled",
        "{steps:#} {:?}",
        kinds(&seen)
    );
    // A second cancel is a conflict.
    let resp = app
        .client
        .post(app.url(&format!("/v1/runs/{id}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 409);
}

#[tokio::test]
async fn a_stream_resumed_mid_run_has_no_gap_and_no_duplicate() {
    let llm = ScriptedLlm::start().await;
    let words: Vec<String> = (0..30).map(|i| format!("w{i}")).collect();
    llm.push(Reply::text(words.join(" ")).chunk_delay(10));
    let app = scripted_app(&llm).await;
    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .header("accept", "text/event-stream")
        .json(&json!({ "input": "count" }))
        .send()
        .await
        .unwrap();
    let mut reader = SseReader::new(resp);
    let mut first_part = Vec::new();
    for _ in 0..5 {
        first_part.push(reader.next_event().await.unwrap());
    }
    drop(reader); // the client goes away mid-run
    let id = run_id(&first_part);
    let resp = app
        .client
        .get(app.url(&format!("/v1/runs/{id}/events")))
        .header("last-event-id", "5")
        .send()
        .await
        .unwrap();
    let rest = SseReader::new(resp).read_to_final().await;
    let mut all = first_part;
    all.extend(rest);
    assert_well_formed(&all, 1);
    let history = app.history(&id).await;
    assert_eq!(all.iter().map(|e| e.json()).collect::<Vec<_>>(), history);
    let text: String = of_kind(&all, "token")
        .iter()
        .map(|t| t["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, words.join(" "));
}

#[tokio::test]
async fn an_idle_stream_gets_keep_alive_comments() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::stalled());
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        c.server.keep_alive_secs = 1;
        c.llm.openai.read_timeout_ms = 30_000;
    })
    .await;
    let run = app.create_run(json!({ "input": "wait" })).await;
    let id = run["id"].as_str().unwrap();
    let resp = app
        .client
        .get(app.url(&format!("/v1/runs/{id}/events")))
        .send()
        .await
        .unwrap();
    let mut reader = SseReader::new(resp);
    loop {
        let m = reader.next().await.expect("stream open");
        if m.comment.as_deref() == Some("keep-alive") {
            break;
        }
    }
    app.client
        .post(app.url(&format!("/v1/runs/{id}/cancel")))
        .send()
        .await
        .unwrap();
    let rest = reader.read_to_final().await;
    assert_eq!(final_data(&rest)["status"], "cancelled");
}

#[tokio::test]
async fn runs_over_the_running_limit_wait_as_queued() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::stalled());
    llm.push(Reply::text("second done"));
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        c.engine.max_running_runs = 1;
        c.llm.openai.read_timeout_ms = 30_000;
    })
    .await;
    let first = app.create_run(json!({ "input": "first" })).await;
    llm.wait_for_requests(1).await; // the first run holds the only slot
    // ... and its `running` status is stored (published means stored).
    let mut first_events = app.events(first["id"].as_str().unwrap()).await;
    skip_to(&mut first_events, "status", 2).await;
    let second = app.create_run(json!({ "input": "second" })).await;
    let second_id = second["id"].as_str().unwrap();
    let (_, s) = app.get_json(&format!("/v1/runs/{second_id}")).await;
    assert_eq!(s["status"], "queued");
    let (_, list) = app.get_json("/v1/runs?status=queued").await;
    assert_eq!(list["runs"].as_array().unwrap().len(), 1);

    let first_id = first["id"].as_str().unwrap();
    app.client
        .post(app.url(&format!("/v1/runs/{first_id}/cancel")))
        .send()
        .await
        .unwrap();
    let events = app.follow(second_id).await;
    assert_eq!(final_data(&events)["output"], "second done");
    assert_eq!(kinds(&events)[..2], ["status", "status"]);
    assert_eq!(events[0].json()["data"]["status"], "queued");
}

#[tokio::test]
async fn run_limits_stop_runs() {
    // Tokens.
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::text("expensive").usage(100, 50));
    let app = scripted_app(&llm).await;
    let events = app
        .stream_run(json!({ "input": "hi", "limits": { "max_tokens": 10 } }))
        .await;
    assert_eq!(final_data(&events)["error"]["code"], "token_limit_exceeded");

    // Steps: the tool call would be the second step.
    llm.push(Reply::tool_call(
        "math.calculate",
        json!({ "expression": "1+1" }),
    ));
    let events = app
        .stream_run(json!({ "input": "hi", "limits": { "max_steps": 1 } }))
        .await;
    assert_eq!(final_data(&events)["error"]["code"], "step_limit_exceeded");

    // Duration.
    llm.push(Reply::stalled());
    let events = app
        .stream_run(json!({ "input": "hi", "limits": { "max_duration_ms": 200 } }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "timed_out");
    assert_eq!(fin["completion"], "timeout");
    assert_eq!(fin["error"]["code"], "timed_out");
}

#[tokio::test]
async fn a_session_shares_conversation_history() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::text("Nice to meet you, Ada."));
    llm.push(Reply::text("Your name is Ada."));
    let app = scripted_app(&llm).await;
    app.stream_run(json!({ "input": "My name is Ada", "session_id": "s-1" }))
        .await;
    app.stream_run(json!({ "input": "What is my name?", "session_id": "s-1" }))
        .await;
    let msgs = llm.requests()[1]["messages"].clone();
    let contents: Vec<&str> = msgs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(contents.contains(&"My name is Ada"), "{contents:?}");
    assert!(contents.contains(&"Nice to meet you, Ada."), "{contents:?}");
    // Another session starts fresh.
    llm.push(Reply::text("I don't know."));
    app.stream_run(json!({ "input": "What is my name?", "session_id": "s-2" }))
        .await;
    assert!(!llm.requests()[2]["messages"].to_string().contains("Ada"));
}

#[tokio::test]
async fn a_run_interrupted_by_a_stop_resumes_on_the_next_start() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::text("never finished").stall_after(2));
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        c.llm.openai.read_timeout_ms = 30_000;
    })
    .await;
    let run = app.create_run(json!({ "input": "long job" })).await;
    let id = run["id"].as_str().unwrap().to_owned();
    llm.wait_for_requests(1).await;
    let before = app.history(&id).await;
    assert!(before.iter().all(|e| e["kind"] != "final"));

    let dir = app.stop().await;
    llm.push(Reply::text("finished after restart"));
    let app = spawn_app_in(dir, |c| use_scripted(c, &llm)).await;
    let events = app.follow(&id).await;
    assert_well_formed(&events, 1);
    assert_eq!(final_data(&events)["output"], "finished after restart");
    // The history kept what happened before the stop, and says the run was resumed.
    let history = app.history(&id).await;
    assert_eq!(&history[..before.len()], &before[..]);
    assert!(
        history
            .iter()
            .any(|e| e["data"]["message"] == "resumed after a restart")
    );
    let (_, run) = app.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(run["status"], "succeeded");
}

#[tokio::test]
async fn a_resumed_tool_run_keeps_its_conversation_and_runs_no_tool_twice() {
    use crate::support::tools::Probe;
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::tool_call(
        "test.count",
        json!({ "key": "once", "value": 42 }),
    ));
    llm.push(Reply::stalled());
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |c| {
        use_scripted(c, &llm);
        c.llm.openai.read_timeout_ms = 30_000;
    })
    .await;
    let run = app.create_run(json!({ "input": "count once" })).await;
    let id = run["id"].as_str().unwrap().to_owned();
    // The second model call is under way: the tool round is done and checkpointed.
    llm.wait_for_requests(2).await;
    assert_eq!(probe.calls("once"), 1);

    let dir = app.stop().await;
    llm.push(Reply::text("counted to 42"));
    let app = spawn_probed_app(Some(dir), &probe, |c| use_scripted(c, &llm)).await;
    let events = app.follow(&id).await;
    assert_eq!(final_data(&events)["output"], "counted to 42");
    assert_eq!(probe.calls("once"), 1, "the tool did not run again");
    // The resumed model call continues the conversation: it carries the tool's answer.
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    let resumed = requests[2]["messages"].as_array().unwrap().clone();
    assert_eq!(resumed, requests[1]["messages"].as_array().unwrap().clone());
    assert!(
        resumed
            .iter()
            .any(|m| m["role"] == "tool" && m["content"].as_str().unwrap().contains("42")),
        "{resumed:?}"
    );
    // The interrupted model call is closed as such; its retry is a new attempt.
    let llm2: Vec<(u64, String, Value)> = app
        .attempts(&id, "llm-2")
        .await
        .iter()
        .map(|s| {
            (
                s["attempt"].as_u64().unwrap(),
                s["status"].as_str().unwrap().to_owned(),
                s["error"]["code"].clone(),
            )
        })
        .collect();
    assert_eq!(
        llm2,
        [
            (1, "cancelled".to_owned(), json!("interrupted")),
            (2, "completed".to_owned(), Value::Null)
        ]
    );
    let (_, checkpoints) = app.get_json(&format!("/v1/runs/{id}/checkpoints")).await;
    let list = checkpoints.as_array().unwrap();
    assert_eq!(
        list.len(),
        3,
        "one after the model's tool call, one after the tool's result, one with the answer"
    );
    assert!(list[2]["state"]["answer"].is_string(), "{checkpoints}");
}
