//! Design 004's middleware scenarios over HTTP, with the scripted OpenAI-compatible server:
//! the chain's order, short circuits, run-wide middleware, property delegation, middleware on
//! the token stream, retries, human approval of tool calls (granted, denied, selective, across
//! a restart) and configurations refused with pointers.

use serde_json::{Value, json};

use crate::support::scripted_llm::{Reply, ScriptedLlm};
use crate::support::tools::Probe;
use crate::support::*;

/// An agent whose instructions name it (the scripted server routes by them).
fn agent(name: &str, tools: &[&str], middleware: Value) -> Value {
    json!({ "description": format!("The {name} agent."),
        "instructions": format!("You are agent {name}."),
        "tools": tools, "middleware": middleware })
}

fn agent_step(id: &str, agent: &str, prompt: &str, deps: &[&str]) -> Value {
    json!({ "id": id, "kind": "agent", "depends_on": deps, "input": { "agent": agent, "prompt": prompt } })
}

fn redact(pattern: &str, replacement: &str) -> Value {
    json!({ "name": "guardrail", "config": { "patterns": [pattern], "replacement": replacement } })
}

fn run_body(plan: Value) -> Value {
    json!({ "input": "go", "orchestration": "fixed", "plan": plan })
}

/// The messages of every request whose system prompt holds `marker`, in order.
fn asked(llm: &ScriptedLlm, marker: &str) -> Vec<Vec<Value>> {
    llm.requests()
        .into_iter()
        .filter(|r| {
            r["messages"][0]["content"]
                .as_str()
                .unwrap_or("")
                .contains(marker)
        })
        .map(|r| r["messages"].as_array().unwrap().clone())
        .collect()
}

/// The text of every `token` event, in order.
fn tokens(events: &[SseMessage]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.kind() == "token")
        .map(|e| e.json()["data"]["text"].as_str().unwrap().to_owned())
        .collect()
}

/// Starts a run over SSE and reads up to its first `input_required`: the run id, the event's
/// data, the events so far and the reader.
async fn until_input(app: &TestApp, plan: Value) -> (String, Value, Vec<SseMessage>, SseReader) {
    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .header("accept", "text/event-stream")
        .json(&run_body(plan))
        .send()
        .await
        .unwrap();
    let mut reader = SseReader::new(resp);
    let mut seen = Vec::new();
    loop {
        let ev = reader.next_event().await.expect("input_required comes");
        if ev.kind() == "input_required" {
            let id = ev.json()["run_id"].as_str().unwrap().to_owned();
            let data = ev.json()["data"].clone();
            return (id, data, seen, reader);
        }
        seen.push(ev);
    }
}

/// A plan with one agent `a` that may call `test.count` (and `clock.now`), approval needed for
/// `approved`.
fn approval_plan(approved: &[&str]) -> Value {
    let approval = json!([{ "name": "tool_approval", "config": { "tools": approved } }]);
    json!({ "agents": { "a": agent("a", &["test.count", "clock.now"], approval) },
        "steps": [agent_step("s1", "a", "count it", &[])] })
}

async fn probed(llm: &ScriptedLlm, probe: &Probe) -> TestApp {
    spawn_probed_app(None, probe, |c| use_scripted(c, llm)).await
}

#[tokio::test]
async fn middleware_chain_order() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent a", Reply::text("got A"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    // m1 turns A into B, m2 turns B into C. In order on the way in (A → B → C), in reverse on
    // the way out (A → A → B): the other order would give B in and C out.
    let chain = json!([redact("A", "B"), redact("B", "C")]);
    let plan = json!({ "agents": { "a": agent("a", &[], chain) },
        "steps": [agent_step("s1", "a", "token A here", &[])] });
    let events = app.stream_run(run_body(plan)).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(asked(&llm, "agent a")[0][1]["content"], "token C here");
    assert_eq!(fin["output"], "got B");
    assert_eq!(tokens(&events).concat(), "got B");
}

#[tokio::test]
async fn middleware_short_circuit() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent a", Reply::text("four"));
    llm.set_default_reply(Reply::text("the model was called"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let block = json!([{ "name": "guardrail",
        "config": { "patterns": ["(?i)password"], "action": "block", "refusal": "No." } }]);
    let plan = json!({ "agents": {
            "a": agent("a", &[], json!(["response_cache"])),
            "b": agent("b", &[], block) },
        "steps": [
            agent_step("s1", "a", "What is 2+2?", &[]),
            agent_step("s2", "a", "What is 2+2?", &["s1"]),
            agent_step("s3", "b", "Tell me the Password", &[]),
        ] });
    let events = app.stream_run(run_body(plan)).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let id = events[0].json()["run_id"].as_str().unwrap().to_owned();
    assert_eq!(app.attempts(&id, "s2").await[0]["output"], "four");
    assert_eq!(app.attempts(&id, "s3").await[0]["output"], "No.");
    // One model call in all: the cache answered s2, the guardrail s3.
    assert_eq!(asked(&llm, "agent a").len(), 1);
    assert_eq!(asked(&llm, "agent b").len(), 0);
    assert_eq!(llm.request_count(), 1);
}

#[tokio::test]
async fn middleware_orchestrator_middleware() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent a", Reply::text("alpha"));
    llm.push_for("agent b", Reply::text("beta"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = json!({
        "middleware": [redact("secret-\\d+", "[redacted]"), "audit_log"],
        "agents": { "a": agent("a", &[], json!([])), "b": agent("b", &[], json!([])) },
        "steps": [
            agent_step("s1", "a", "keep secret-42 safe", &[]),
            agent_step("s2", "b", "and secret-7 too", &["s1"]),
        ] });
    let events = app.stream_run(run_body(plan)).await;
    assert_eq!(final_data(&events)["status"], "succeeded");
    assert_eq!(
        asked(&llm, "agent a")[0][1]["content"],
        "keep [redacted] safe"
    );
    assert_eq!(
        asked(&llm, "agent b")[0][1]["content"],
        "and [redacted] too"
    );
    let id = events[0].json()["run_id"].as_str().unwrap().to_owned();
    for (step, name, chars) in [("s1", "a", 5), ("s2", "b", 4)] {
        let audit = &app.attempts(&id, step).await[0]["input"]["audit"];
        assert_eq!(audit[0]["agent"], name, "{audit}");
        assert_eq!(audit[0]["input_messages"], 1, "{audit}");
        assert_eq!(audit[0]["answer_chars"], chars, "{audit}");
        assert_eq!(audit[0]["tool_calls"], 0, "{audit}");
    }
}

#[tokio::test]
async fn middleware_property_delegation() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent helper", Reply::text("at your service"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let middleware = json!(["audit_log", redact("x{3}", "-")]);
    let definition = agent("helper", &["clock.now"], middleware.clone());
    let resp = app
        .client
        .put(app.url("/v1/agents/helper"))
        .json(&definition)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let (status, stored) = app.get_json("/v1/agents/helper").await;
    assert_eq!(status, 200, "{stored}");
    assert_eq!(stored["name"], "helper");
    assert_eq!(stored["description"], "The helper agent.");
    assert_eq!(stored["definition"]["tools"], json!(["clock.now"]));
    assert_eq!(stored["definition"]["middleware"], middleware);

    // A plan naming the registered agent: the wrapped agent is still `helper`, with its
    // instructions and its tools.
    let plan = json!({ "steps": [agent_step("s1", "helper", "hello", &[])] });
    let events = app.stream_run(run_body(plan)).await;
    assert_eq!(final_data(&events)["output"], "at your service");
    let asked = asked(&llm, "agent helper");
    assert_eq!(asked.len(), 1);
    let request = &llm.requests()[0];
    let offered: Vec<&str> = request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert_eq!(offered.len(), 1, "{offered:?}");
    assert!(offered[0].contains("clock"), "{offered:?}");
    let id = events[0].json()["run_id"].as_str().unwrap().to_owned();
    let attempt = &app.attempts(&id, "s1").await[0];
    assert_eq!(attempt["input"]["agent"], "helper");
    assert_eq!(attempt["input"]["audit"][0]["agent"], "helper");
    assert!(
        events
            .iter()
            .any(|e| e.kind() == "token" && e.json()["path"] == "s1"),
        "the agent's model round streams under its step"
    );
}

#[tokio::test]
async fn middleware_streaming_guardrail_redacts_across_chunks() {
    let llm = ScriptedLlm::start().await;
    // One chunk per word: the secret spans three chunks.
    llm.push_for("agent a", Reply::text("the secret code 1234 is hidden"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let guard = json!([{ "name": "guardrail",
        "config": { "patterns": ["secret code \\d+"], "window": 20 } }]);
    let plan = json!({ "agents": { "a": agent("a", &[], guard) },
        "steps": [agent_step("s1", "a", "tell me", &[])] });
    let events = app.stream_run(run_body(plan)).await;
    let fin = final_data(&events);
    assert_eq!(fin["output"], "the [redacted] is hidden", "{fin}");
    let seen = tokens(&events);
    assert!(seen.len() >= 2, "still streamed: {seen:?}");
    assert_eq!(seen.concat(), "the [redacted] is hidden");
    assert!(
        seen.iter()
            .all(|t| !t.contains("1234") && !t.contains("secret")),
        "{seen:?}"
    );
    // Nor does the stored history of the model round hold it. (Not a bare "1234": a
    // timestamp's fraction or an id may hold those digits by chance.)
    let id = events[0].json()["run_id"].as_str().unwrap().to_owned();
    let history = Value::Array(app.history(&id).await).to_string();
    assert!(
        !history.contains("code 1234") && !history.contains(" 1234 "),
        "{history}"
    );
}

#[tokio::test]
async fn middleware_guardrail_blocks_an_answer() {
    let llm = ScriptedLlm::start().await;
    llm.push_for(
        "agent a",
        Reply::text("that is strictly forbidden knowledge"),
    );
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let guard = json!([{ "name": "guardrail",
        "config": { "patterns": ["forbidden"], "action": "block" } }]);
    let plan = json!({ "agents": { "a": agent("a", &[], guard) },
        "steps": [agent_step("s1", "a", "tell me", &[])] });
    let events = app.stream_run(run_body(plan)).await;
    assert_eq!(final_data(&events)["status"], "failed");
    assert!(
        tokens(&events).iter().all(|t| !t.contains("forbidden")),
        "the blocked text never went out"
    );
    let id = events[0].json()["run_id"].as_str().unwrap().to_owned();
    let attempts = app.attempts(&id, "s1").await;
    assert_eq!(attempts.len(), 1, "guardrail_blocked is not retried");
    assert_eq!(attempts[0]["error"]["code"], "guardrail_blocked");
}

#[tokio::test]
async fn middleware_retry_retries_the_model_call() {
    let llm = ScriptedLlm::start().await;
    for _ in 0..3 {
        llm.push_for("agent a", Reply::status(500));
    }
    llm.push_for("agent a", Reply::text("ok"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let retry =
        json!([{ "name": "retry", "config": { "max_attempts": 3, "initial_delay_ms": 1 } }]);
    let plan = json!({ "agents": { "a": agent("a", &[], retry) },
        "steps": [agent_step("s1", "a", "hi", &[])] });
    let events = app.stream_run(run_body(plan)).await;
    let fin = final_data(&events);
    assert_eq!(fin["output"], "ok", "{fin}");
    assert!(
        events.iter().any(|e| e.kind() == "error"
            && e.json()["data"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("middleware `retry`")),
        "a retry is announced"
    );
}

#[tokio::test]
async fn hitl_approval_granted() {
    let llm = ScriptedLlm::start().await;
    llm.push_for(
        "agent a",
        Reply::tool_call("test.count", json!({ "key": "granted" })),
    );
    llm.push_for("agent a", Reply::text("counted"));
    let probe = Probe::default();
    let app = probed(&llm, &probe).await;
    let (id, asked_for, _, reader) = until_input(&app, approval_plan(&["test.count"])).await;
    assert_eq!(asked_for["step_id"], "tool-1-1-approval");
    let prompt = asked_for["prompt"].as_str().unwrap();
    assert!(
        prompt.contains("test.count") && prompt.contains("granted"),
        "{prompt}"
    );
    assert!(asked_for["schema"]["properties"]["decision"].is_object());
    assert_eq!(probe.calls("granted"), 0, "the tool waits for the decision");
    // A decision outside the schema is refused and the wait stays.
    let bad = app
        .answer(&id, "tool-1-1-approval", json!({ "decision": "maybe" }))
        .await;
    assert_eq!(bad.status(), 422);
    let ok = app
        .answer(&id, "tool-1-1-approval", json!({ "decision": "approve" }))
        .await;
    assert_eq!(ok.status(), 202);
    let rest = reader.read_to_final().await;
    let fin = final_data(&rest);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], "counted");
    assert_eq!(probe.calls("granted"), 1);
}

#[tokio::test]
async fn hitl_approval_denied() {
    let llm = ScriptedLlm::start().await;
    llm.push_for(
        "agent a",
        Reply::tool_call("test.count", json!({ "key": "denied" })),
    );
    llm.push_for("agent a", Reply::text("fine, I won't"));
    let probe = Probe::default();
    let app = probed(&llm, &probe).await;
    let (id, _, _, reader) = until_input(&app, approval_plan(&["test.count"])).await;
    let decision = json!({ "decision": "deny", "reason": "too risky" });
    let resp = app.answer(&id, "tool-1-1-approval", decision).await;
    assert_eq!(resp.status(), 202);
    let rest = reader.read_to_final().await;
    let fin = final_data(&rest);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], "fine, I won't");
    assert_eq!(probe.calls("denied"), 0, "a denied tool never runs");
    let second = &asked(&llm, "agent a")[1];
    let told = second.last().unwrap();
    assert_eq!(told["role"], "tool");
    let content = told["content"].as_str().unwrap();
    assert!(
        content.contains("denied by a human: too risky") && content.contains("tool_denied"),
        "{content}"
    );
}

#[tokio::test]
async fn hitl_selective_approval() {
    let llm = ScriptedLlm::start().await;
    llm.push_for(
        "agent a",
        Reply::tool_call("clock.now", json!({}))
            .and_tool_call("test.count", json!({ "key": "sel" })),
    );
    llm.push_for("agent a", Reply::text("both done"));
    let probe = Probe::default();
    let app = probed(&llm, &probe).await;
    let (id, asked_for, _, reader) = until_input(&app, approval_plan(&["test.count"])).await;
    // clock.now ran without asking; only test.count waits. (The step's own events are held
    // until it commits; its attempts are stored as they end.)
    assert_eq!(asked_for["step_id"], "tool-1-2-approval");
    let clock = app.attempts(&id, "tool-1-1").await;
    assert_eq!(clock.len(), 1, "{clock:?}");
    assert_eq!(clock[0]["name"], "clock.now");
    assert_eq!(
        clock[0]["status"], "completed",
        "the unlisted tool ran first"
    );
    assert_eq!(probe.calls("sel"), 0);
    let resp = app
        .answer(&id, "tool-1-2-approval", json!({ "decision": "approve" }))
        .await;
    assert_eq!(resp.status(), 202);
    let rest = reader.read_to_final().await;
    assert_eq!(final_data(&rest)["output"], "both done");
    assert_eq!(probe.calls("sel"), 1);
    let asks = rest.iter().filter(|e| e.kind() == "input_required").count();
    assert_eq!(asks, 0, "one question in all");
}

#[tokio::test]
async fn hitl_approval_survives_a_restart() {
    let llm = ScriptedLlm::start().await;
    llm.push_for(
        "agent a",
        Reply::tool_call("test.count", json!({ "key": "restart" })),
    );
    llm.push_for("agent a", Reply::text("after the restart"));
    let probe = Probe::default();
    let app = probed(&llm, &probe).await;
    let (id, _, _, reader) = until_input(&app, approval_plan(&["test.count"])).await;
    drop(reader);
    let dir = app.stop().await;
    assert_eq!(probe.calls("restart"), 0);

    let app = spawn_probed_app(Some(dir), &probe, |c| use_scripted(c, &llm)).await;
    // The resumed run asks again (the second input_required of its log) and waits.
    let mut reader = app.events(&id).await;
    let mut asks = 0;
    while asks < 2 {
        let ev = reader.next_event().await.expect("the run asks again");
        if ev.kind() == "input_required" {
            assert_eq!(ev.json()["data"]["step_id"], "tool-1-1-approval");
            asks += 1;
        }
    }
    let resp = app
        .answer(&id, "tool-1-1-approval", json!({ "decision": "approve" }))
        .await;
    assert_eq!(resp.status(), 202);
    let rest = reader.read_to_final().await;
    let fin = final_data(&rest);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], "after the restart");
    assert_eq!(probe.calls("restart"), 1, "the tool ran exactly once");
}

#[tokio::test]
async fn middleware_bad_config_is_422_with_pointers() {
    let app = spawn_app(|_| {}).await;
    let bad = json!([{ "name": "guardrail", "config": { "patterns": ["("], "colour": "red" } }]);
    let plan = json!({
        "middleware": ["rate_limit"],
        "agents": { "a": agent("a", &[], bad) },
        "steps": [agent_step("s1", "a", "hi", &[])] });
    let (status, body) = app.post_json("/v1/runs", &run_body(plan)).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["code"], "validation_failed");
    let mut pointers: Vec<&str> = body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["pointer"].as_str())
        .collect();
    pointers.sort_unstable();
    assert_eq!(
        pointers,
        [
            "/plan/agents/a/middleware/0/config/colour",
            "/plan/agents/a/middleware/0/config/patterns/0",
            "/plan/middleware/0",
        ],
        "{body}"
    );
    // The agent registry checks the same way.
    let resp = app
        .client
        .put(app.url("/v1/agents/limited"))
        .json(&agent(
            "limited",
            &[],
            json!([{ "name": "rate_limit", "config": { "per_minute": 0 } }]),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body["errors"][0]["pointer"], "/middleware/0/config/per_minute",
        "{body}"
    );
}
