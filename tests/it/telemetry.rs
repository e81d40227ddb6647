//! OpenTelemetry traces, received by an OTLP/HTTP (JSON) receiver the test runs on loopback:
//! the spans of a run, its attempts (nested under their parent step), its model calls with the
//! GenAI attributes and real token counts, and its tool calls; errors marked; nothing sent when
//! telemetry is off.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::post;
use serde_json::{Value, json};

use crate::support::app::{final_data, spawn_app, use_scripted};
use crate::support::scripted_llm::{Reply, ScriptedLlm};

type Spans = Arc<Mutex<Vec<Value>>>;

/// An OTLP receiver: `POST /v1/traces` bodies, flattened to their spans.
async fn receiver() -> (String, Spans) {
    let spans: Spans = Arc::default();
    let store = spans.clone();
    let app = Router::new().route(
        "/v1/traces",
        post(move |body: axum::Json<Value>| async move {
            for rs in body["resourceSpans"].as_array().into_iter().flatten() {
                assert_eq!(rs["resource"]["attributes"][0]["key"], "service.name");
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    store
                        .lock()
                        .unwrap()
                        .extend(ss["spans"].as_array().cloned().unwrap_or_default());
                }
            }
            "{}"
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, spans)
}

fn attr<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

fn attr_str<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    attr(span, key)?["stringValue"].as_str()
}

fn attr_int(span: &Value, key: &str) -> Option<i64> {
    attr(span, key)?["intValue"].as_str()?.parse().ok()
}

fn by_id<'a>(spans: &'a [Value], id: &Value) -> &'a Value {
    spans
        .iter()
        .find(|s| s["spanId"] == *id)
        .unwrap_or_else(|| panic!("no span {id}"))
}

#[tokio::test]
async fn runs_attempts_model_and_tool_calls_are_traced_with_genai_attributes() {
    let (url, spans) = receiver().await;
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::tool_call("math.calculate", json!({"expression": "6 * 7"})).usage(11, 3));
    llm.push(Reply::text("It is 42.").usage(20, 5));
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        c.telemetry.otlp_endpoint = url.clone();
    })
    .await;
    let prompt = "What is six times seven, secretly?";
    let events = app
        .stream_run(json!({"input": prompt, "orchestration": "simple"}))
        .await;
    assert_eq!(final_data(&events)["status"], "succeeded");
    let chat_run = events[0].json()["run_id"].as_str().unwrap().to_owned();
    let plan = json!({"steps": [{"id": "outer", "kind": "sequential", "input": {"steps": [
        {"id": "read", "kind": "tool", "input": {"tool": "fs.read", "arguments": {"path": "missing.txt"}}}]}}]});
    let events = app
        .stream_run(json!({"input": "x", "orchestration": "fixed", "plan": plan}))
        .await;
    assert_eq!(final_data(&events)["status"], "failed");
    let failed_run = events[0].json()["run_id"].as_str().unwrap().to_owned();
    app.stop().await; // flushes the exporter

    let spans = spans.lock().unwrap().clone();
    let run = spans
        .iter()
        .find(|s| s["name"] == "run" && attr_str(s, "orca.run.id") == Some(&chat_run))
        .expect("a run span");
    assert_eq!(attr_str(run, "orca.run.orchestration"), Some("simple"));
    assert!(run.get("parentSpanId").is_none(), "a run is a trace's root");
    let trace: Vec<&Value> = spans
        .iter()
        .filter(|s| s["traceId"] == run["traceId"])
        .collect();
    let chats: Vec<&&Value> = trace
        .iter()
        .filter(|s| attr_str(s, "gen_ai.operation.name") == Some("chat"))
        .collect();
    assert_eq!(chats.len(), 2, "{trace:?}");
    let tokens: Vec<(i64, i64)> = chats
        .iter()
        .map(|s| {
            (
                attr_int(s, "gen_ai.usage.input_tokens").unwrap(),
                attr_int(s, "gen_ai.usage.output_tokens").unwrap(),
            )
        })
        .collect();
    assert!(
        tokens.contains(&(11, 3)) && tokens.contains(&(20, 5)),
        "{tokens:?}"
    );
    for chat in &chats {
        assert!(
            chat["name"].as_str().unwrap().starts_with("chat "),
            "{chat}"
        );
        assert_eq!(attr_str(chat, "gen_ai.provider.name"), Some("openai"));
        assert!(attr_str(chat, "gen_ai.request.model").is_some());
        let attempt = by_id(&spans, &chat["parentSpanId"]);
        assert!(
            attr_str(attempt, "orca.step.kind").is_some(),
            "a model call sits in an attempt: {attempt}"
        );
        assert_eq!(attempt["parentSpanId"], run["spanId"]);
    }
    let tool = trace
        .iter()
        .find(|s| s["name"] == "execute_tool math.calculate")
        .expect("a tool span");
    assert_eq!(attr_str(tool, "gen_ai.tool.name"), Some("math.calculate"));
    assert!(attr_str(tool, "gen_ai.tool.call.id").is_some());
    assert!(
        !serde_json::to_string(&spans).unwrap().contains("secretly"),
        "no prompt text in spans"
    );

    let failed = spans
        .iter()
        .find(|s| s["name"] == "run" && attr_str(s, "orca.run.id") == Some(&failed_run))
        .unwrap();
    assert_eq!(failed["status"]["code"], 2);
    assert_eq!(attr_str(failed, "error.type"), Some("file_not_found"));
    let inner = spans
        .iter()
        .find(|s| attr_str(s, "orca.step.key") == Some("outer/read"))
        .expect("the nested attempt");
    let outer = by_id(&spans, &inner["parentSpanId"]);
    assert_eq!(
        attr_str(outer, "orca.step.id"),
        Some("outer"),
        "nested under its parent step"
    );
    assert_eq!(outer["parentSpanId"], failed["spanId"]);
    assert_eq!(attr_str(inner, "error.type"), Some("file_not_found"));
    let read = spans
        .iter()
        .find(|s| s["name"] == "execute_tool fs.read")
        .unwrap();
    assert_eq!(read["parentSpanId"], inner["spanId"]);
    assert_eq!(read["status"]["code"], 2);
}

#[tokio::test]
async fn nothing_is_sent_when_telemetry_is_off() {
    let (_url, spans) = receiver().await;
    let app = spawn_app(|_| {}).await;
    let events = app
        .stream_run(json!({"input": "What is 2 + 3?", "orchestration": "simple"}))
        .await;
    assert_eq!(final_data(&events)["status"], "succeeded");
    app.stop().await;
    assert!(spans.lock().unwrap().is_empty());
}
