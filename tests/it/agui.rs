//! `POST /v1/agui` driven by the AG-UI protocol's own client (`@ag-ui/client`'s HttpAgent,
//! through `tests/browser/agui.mjs`), which checks event order, with every event checked
//! against `@ag-ui/core`'s schemas; plus the request checks, over plain HTTP.

use orca::config::{ApiKey, Secret};
use serde_json::{Value, json};

use crate::support::app::{TestApp, spawn_app, use_scripted};
use crate::support::node;
use crate::support::scripted_llm::{Reply, ScriptedLlm};

/// Runs the AG-UI client script; one report per call, then the agent's messages and state.
async fn client(app: &TestApp, script: Value, key: Option<&str>) -> (Vec<Value>, Value) {
    let script = script.to_string();
    let mut args = vec![app.base.as_str(), script.as_str()];
    args.extend(key);
    let mut lines = node::json_lines(&node::run("agui.mjs", &args).await);
    let agent = lines.pop().expect("the agent's end state");
    for call in &lines {
        assert_eq!(
            call["invalid"],
            json!([]),
            "events outside the AG-UI schemas: {call}"
        );
    }
    (lines, agent)
}

fn types(call: &Value) -> Vec<&str> {
    call["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect()
}

fn first<'a>(call: &'a Value, kind: &str) -> &'a Value {
    call["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {call}"))
}

fn text(call: &Value) -> String {
    call["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|e| e["delta"].as_str().unwrap())
        .collect()
}

async fn orca_run(app: &TestApp, call: &Value) -> Value {
    let id = first(call, "RUN_STARTED")["metadata"]["orca"]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.get_json(&format!("/v1/runs/{id}")).await.1
}

#[tokio::test]
async fn an_ag_ui_client_runs_a_chat_with_a_tool_call() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::tool_call("math.calculate", json!({"expression": "6 * 7"})).usage(11, 3));
    let answer = "The answer is 42.";
    llm.push(Reply::text(answer).usage(20, 5));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let script = json!({
        "threadId": "thread-1",
        "messages": [{"id": "u1", "role": "user", "content": "What is 6 times 7? Use a tool."}],
        "calls": [{"runId": "agui-run-1", "forwardedProps": {"orca": {"orchestration": "simple"}}}],
    });
    let (calls, agent) = client(&app, script, None).await;
    let call = &calls[0];
    assert_eq!(call["error"], Value::Null, "{call}");
    let kinds = types(call);
    assert_eq!(kinds.first(), Some(&"RUN_STARTED"));
    assert_eq!(kinds.last(), Some(&"RUN_FINISHED"));
    for kind in [
        "STATE_SNAPSHOT",
        "STATE_DELTA",
        "STEP_STARTED",
        "STEP_FINISHED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_END",
    ] {
        assert!(kinds.contains(&kind), "no {kind}: {kinds:?}");
    }
    let started = first(call, "RUN_STARTED");
    assert_eq!(
        (started["threadId"].as_str(), started["runId"].as_str()),
        (Some("thread-1"), Some("agui-run-1"))
    );
    assert_eq!(
        first(call, "TOOL_CALL_START")["toolCallName"],
        "math.calculate"
    );
    assert!(
        first(call, "TOOL_CALL_RESULT")["content"]
            .as_str()
            .unwrap()
            .contains("42")
    );
    assert_eq!(text(call), answer);
    let finished = first(call, "RUN_FINISHED");
    assert_eq!(finished["result"], answer);
    assert_eq!(finished["usage"][0]["inputTokens"], 31, "{finished}");
    assert_eq!(call["result"], answer, "the client's own result");
    // The client's view, built from the events: the tool call, its result, the answer.
    let messages = agent["messages"].as_array().unwrap();
    assert_eq!(messages.last().unwrap()["content"], answer, "{agent}");
    assert!(messages.iter().any(|m| m["role"] == "tool"), "{agent}");
    assert_eq!(agent["state"]["status"], "succeeded");

    // Underneath, an ordinary orca run of the thread's session.
    let run = orca_run(&app, call).await;
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["session_id"], "thread-1");
    assert_eq!(run["metadata"]["agui_run_id"], "agui-run-1");
}

/// A fixed workflow whose human input is nested in a `sequential` step.
fn nested_approval() -> Value {
    let schema = json!({"type": "object", "required": ["approved", "note"],
        "properties": {"approved": {"type": "boolean"}, "note": {"type": "string", "minLength": 3}}});
    json!({
        "name": "nested-approval",
        "steps": [
            {"id": "quote", "kind": "tool", "input": {"tool": "math.calculate", "arguments": {"expression": "{{ input.amount }} * 2"}}},
            {"id": "review", "kind": "sequential", "depends_on": ["quote"], "input": {"steps": [
                {"id": "stamp", "kind": "tool", "input": {"tool": "clock.now", "arguments": {}}},
                {"id": "approve", "kind": "user_input",
                 "input": {"prompt": "Approve spending {{ steps.quote.output.result }}?", "schema": schema}}
            ]}}
        ],
        "output": {"decision": "{{ steps.review.output }}"}
    })
}

#[tokio::test]
async fn a_nested_human_input_is_an_interrupt_that_a_resumed_run_answers() {
    let app = spawn_app(|_| {}).await;
    let orca =
        json!({"orchestration": "fixed", "workflow": nested_approval(), "input": {"amount": 60}});
    let script = json!({
        "threadId": "thread-2",
        "messages": [{"id": "u1", "role": "user", "content": "spend it"}],
        "calls": [
            {"runId": "first", "forwardedProps": {"orca": orca}},
            {"runId": "refused", "resume": {"status": "resolved", "payload": {"approved": true, "note": "ok"}}},
            {"runId": "second", "resume": {"status": "resolved", "payload": {"approved": true, "note": "go ahead"}}},
        ],
    });
    let (calls, _) = client(&app, script, None).await;
    let finished = first(&calls[0], "RUN_FINISHED");
    assert_eq!(finished["outcome"]["type"], "interrupt", "{finished}");
    let interrupt = &finished["outcome"]["interrupts"][0];
    assert_eq!(interrupt["reason"], "input_required");
    assert_eq!(interrupt["message"], "Approve spending 120?");
    assert_eq!(
        interrupt["responseSchema"]["required"],
        json!(["approved", "note"])
    );

    // An answer the schema refuses: a 422 before any stream, and the run still waits.
    let refused = calls[1]["error"].as_str().unwrap_or_default();
    assert!(
        refused.contains("422") && refused.contains("/note"),
        "{refused}"
    );

    let resumed = &calls[2];
    assert_eq!(resumed["error"], Value::Null, "{resumed}");
    let kinds = types(resumed);
    assert_eq!(kinds.first(), Some(&"RUN_STARTED"));
    // The step the interrupt left open is reopened, then finished, in this AG-UI run.
    let reopened = first(resumed, "STEP_STARTED");
    assert_eq!(reopened["stepName"], "review", "{resumed}");
    let done = first(resumed, "RUN_FINISHED");
    assert_eq!(
        done["result"]["decision"],
        json!({"approved": true, "note": "go ahead"})
    );
    assert_eq!(done["outcome"], Value::Null, "success: {done}");
    let restarted: Vec<&Value> = resumed["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "STEP_STARTED" && e["stepName"] == "quote")
        .collect();
    assert!(
        restarted.is_empty(),
        "a step done before the interrupt is not started again"
    );
    assert_eq!(orca_run(&app, resumed).await["status"], "succeeded");
}

#[tokio::test]
async fn a_failing_run_ends_with_run_error_and_its_code() {
    let app = spawn_app(|_| {}).await;
    let plan = json!({"steps": [{"id": "read", "kind": "tool",
        "input": {"tool": "fs.read", "arguments": {"path": "missing.txt"}}}]});
    let script = json!({
        "threadId": "thread-3",
        "messages": [{"id": "u1", "role": "user", "content": "read it"}],
        "calls": [{"runId": "fails", "forwardedProps": {"orca": {"orchestration": "fixed", "plan": plan}}}],
    });
    let (calls, _) = client(&app, script, None).await;
    let error = first(&calls[0], "RUN_ERROR");
    assert_eq!(error["code"], "file_not_found", "{error}");
    assert!(!types(&calls[0]).contains(&"RUN_FINISHED"));
}

#[tokio::test]
async fn the_client_sends_the_api_key_and_is_refused_without_it() {
    const KEY: &str = "agui-test-key-0123456789";
    let app = spawn_app(|c| {
        c.auth.api_keys = vec![ApiKey {
            user: None,
            key: Secret::new(KEY),
            tenant: "a".into(),
        }];
    })
    .await;
    let script = |run: &str| {
        json!({
            "threadId": "t", "messages": [{"id": "u1", "role": "user", "content": "What is 2 + 3?"}],
            "calls": [{"runId": run, "forwardedProps": {"orca": {"orchestration": "simple"}}}],
        })
    };
    let (calls, _) = client(&app, script("no-key"), None).await;
    assert!(
        calls[0]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("401"),
        "{}",
        calls[0]
    );
    let (calls, _) = client(&app, script("with-key"), Some(KEY)).await;
    assert_eq!(calls[0]["error"], Value::Null, "{}", calls[0]);
    assert_eq!(
        first(&calls[0], "RUN_FINISHED")["result"],
        "The result is 5."
    );
}

async fn post(app: &TestApp, body: &Value) -> (u16, String) {
    let response = app
        .client
        .post(app.url("/v1/agui"))
        .json(body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn ag_ui_requests_are_checked_before_any_stream() {
    let app = spawn_app(|_| {}).await;
    let user = json!([{"id": "u1", "role": "user", "content": "hi"}]);
    let cases = [
        (json!({"runId": "r", "messages": user}), 422, "/threadId"),
        (
            json!({"threadId": "", "runId": "r", "messages": user}),
            422,
            "/threadId",
        ),
        (
            json!({"threadId": "t", "runId": "r", "messages": [{"id": "a", "role": "assistant", "content": "x"}]}),
            422,
            "/messages",
        ),
        (
            json!({"threadId": "t", "runId": "r", "messages": user, "forwardedProps": {"orca": {"colour": 1}}}),
            422,
            "/forwardedProps/orca/colour",
        ),
        (
            json!({"threadId": "t", "runId": "r", "messages": user, "forwardedProps": {"orca": {"orchestration": "fixed", "workflow": "nope"}}}),
            422,
            "/forwardedProps/orca/workflow",
        ),
        (
            json!({"threadId": "t", "runId": "r", "messages": [], "resume": [{"interruptId": "elsewhere", "status": "resolved"}]}),
            422,
            "/resume/0/interruptId",
        ),
        (
            json!({"threadId": "t", "runId": "r", "messages": [], "resume": [{"interruptId": "orca:01a20000-0000-7000-8000-000000000000:ask", "status": "resolved", "payload": 1}]}),
            404,
            "not_found",
        ),
    ];
    for (body, status, needle) in cases {
        let (got, text) = post(&app, &body).await;
        assert_eq!(got, status, "{body} → {text}");
        assert!(text.contains(needle), "{body} → {text}");
    }

    // A run that waits: answered with a wrong step → 409; cancelled through `resume`.
    let orca =
        json!({"orchestration": "fixed", "workflow": nested_approval(), "input": {"amount": 1}});
    let (status, stream) = post(
        &app,
        &json!({"threadId": "t", "runId": "w", "messages": user,
        "forwardedProps": {"orca": orca}}),
    )
    .await;
    assert_eq!(status, 200);
    let start = stream.find("\"run_id\":\"").unwrap() + 10;
    let run = &stream[start..start + 36];
    let wrong = format!("orca:{run}:stamp");
    let (status, text) = post(
        &app,
        &json!({"threadId": "t", "runId": "w2", "messages": [],
        "resume": [{"interruptId": wrong, "status": "resolved", "payload": {}}]}),
    )
    .await;
    assert_eq!(status, 409, "{text}");
    let cancel = format!("orca:{run}:approve");
    let (status, stream) = post(
        &app,
        &json!({"threadId": "t", "runId": "w3", "messages": [],
        "resume": [{"interruptId": cancel, "status": "cancelled"}]}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        stream.contains(r#""outcome":{"type":"cancelled"}"#),
        "{stream}"
    );
    let (_, run) = app.get_json(&format!("/v1/runs/{run}")).await;
    assert_eq!(run["status"], "cancelled");
}
