//! The Ollama provider against the scripted server's native dialect (`/api/chat`): streamed
//! lines, whole tool calls, the schema as `format`, the context window as `num_ctx`, retries
//! before the first byte, errors in the stream, timeouts, cancellation, keeping the key
//! secret; and the scripted dialect refusing what Ollama refuses.

use std::time::Instant;

use futures::StreamExt;
use orca::config::{OpenAiConfig, StructuredOutput};
use orca::llm::providers::OllamaProvider;
use orca::llm::{
    Capabilities, ChatRequest, Error, LlmEvent, LlmProvider, Message, ResponseSchema, ToolCall,
    Usage,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::conformance::{self, PROMPTLY, run, tool};
use crate::support::scripted_llm::{Reply, ScriptedLlm};

const KEY: &str = "sk-ollama-proxy-key-0123456789abcdef";

fn config(llm: &ScriptedLlm) -> OpenAiConfig {
    conformance::config(llm.ollama_base_url(), KEY)
}

fn provider_with(cfg: OpenAiConfig) -> OllamaProvider {
    OllamaProvider::named("local", &cfg).expect("provider")
}

fn provider(llm: &ScriptedLlm) -> OllamaProvider {
    provider_with(config(llm))
}

fn request() -> ChatRequest {
    conformance::request("llama-test")
}

fn text(events: &[LlmEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn streamed_lines_become_text_then_usage() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::text("Hello world from orca").usage(7, 4));
    let mut request = request();
    request.capabilities = Capabilities {
        context_window: Some(32_768),
        ..Capabilities::default()
    };
    request.temperature = Some(0.5);
    request.max_tokens = Some(200);

    let events = run(&provider(&llm), request).await.expect("answer");

    assert!(events.len() >= 5, "several deltas: {events:?}");
    assert_eq!(text(&events), "Hello world from orca");
    assert_eq!(
        events.last(),
        Some(&LlmEvent::Usage(Usage {
            prompt_tokens: 7,
            completion_tokens: 4
        }))
    );
    let recorded = &llm.recorded()[0];
    assert_eq!(
        recorded.authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(
        recorded.wire,
        json!({
            "model": "llama-test",
            "stream": true,
            "messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "Say hello."}],
            "options": {"num_ctx": 32_768, "temperature": 0.5, "num_predict": 200},
        })
    );
    assert_eq!(recorded.body["max_tokens"], 200);
}

#[tokio::test]
async fn whole_tool_calls_get_ids_and_results_go_back_by_name() {
    let llm = ScriptedLlm::start().await;
    llm.push(
        Reply::tool_call("clock_now", json!({"timezone": "Asia/Seoul"}))
            .and_tool_call("math.calculate", json!({"expression": "10 + 20"})),
    );
    let mut first = request();
    first.tools = vec![tool("clock.now"), tool("math.calculate")];

    let events = run(&provider(&llm), first.clone()).await.expect("answer");

    let calls: Vec<&ToolCall> = events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::ToolCall(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 2, "{events:?}");
    assert_eq!(
        (calls[0].id.as_str(), calls[0].name.as_str()),
        ("call_1", "clock.now")
    );
    assert_eq!(calls[0].arguments, r#"{"timezone":"Asia/Seoul"}"#);
    assert_eq!(
        (calls[1].id.as_str(), calls[1].name.as_str()),
        ("call_2", "math.calculate")
    );

    // The results round trip: the scripted server refuses tool messages without a call.
    let mut second = first;
    second.messages.push(Message::Assistant {
        content: String::new(),
        tool_calls: calls.iter().map(|c| (*c).clone()).collect(),
    });
    for (call, result) in calls.iter().zip(["09:30", "30"]) {
        second.messages.push(Message::Tool {
            call_id: call.id.clone(),
            content: result.into(),
        });
    }
    run(&provider(&llm), second).await.expect("accepted");
    let wire = &llm.wire_requests()[1];
    assert_eq!(
        wire["messages"][2]["tool_calls"][0],
        json!({"function": {"name": "clock_now", "arguments": {"timezone": "Asia/Seoul"}}})
    );
    assert_eq!(
        wire["messages"][4],
        json!({"role": "tool", "content": "30", "tool_name": "math_calculate"})
    );
    assert_eq!(
        wire["tools"][0],
        json!({"type": "function", "function": {"name": "clock_now",
            "description": "the clock.now tool", "parameters": {"type": "object"}}})
    );
}

#[tokio::test]
async fn the_schema_is_sent_as_format() {
    let llm = ScriptedLlm::start().await;
    let answer = json!({"orchestrationType": "planner"});
    let schema = json!({"type": "object", "required": ["orchestrationType"]});
    let provider = provider(&llm);
    for mode in [
        StructuredOutput::Strict,
        StructuredOutput::JsonObject,
        StructuredOutput::Prompt,
    ] {
        llm.push(Reply::json(answer.clone()));
        let mut request = request();
        request.response_schema = Some(ResponseSchema::new("selector", schema.clone()));
        request.capabilities.structured_output = mode;
        let events = run(&provider, request).await.expect("answer");
        assert_eq!(
            serde_json::from_str::<Value>(&text(&events)).unwrap(),
            answer
        );
    }
    let wire = llm.wire_requests();
    assert_eq!(wire[0]["format"], schema);
    assert_eq!(wire[1]["format"], "json");
    assert!(wire[2].get("format").is_none());
    for body in &wire[1..] {
        let system = body["messages"][0]["content"].as_str().unwrap();
        assert!(system.contains("orchestrationType"), "{system}");
    }
}

#[tokio::test]
async fn server_errors_are_retried_client_errors_are_not() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::status(503))
        .push(Reply::text("recovered"))
        .push(Reply::status(404).message("model 'llama-test' not found"));
    let provider = provider(&llm);

    let events = run(&provider, request()).await.expect("answer");
    assert_eq!(text(&events), "recovered");
    let err = run(&provider, request()).await.unwrap_err();
    assert!(
        matches!(&err, Error::Status { status: 404, message } if message == "model 'llama-test' not found"),
        "{err:?}"
    );
    assert_eq!(llm.request_count(), 3);
}

#[tokio::test]
async fn errors_inside_the_stream_and_broken_streams() {
    let llm = ScriptedLlm::start().await;
    let provider = provider(&llm);
    llm.push(Reply::stream_error("Partial answer", "api_error"));
    let mut stream = provider
        .stream(request(), CancellationToken::new())
        .await
        .unwrap();
    let mut seen = Vec::new();
    let err = loop {
        match stream.next().await.expect("an error before the end") {
            Ok(event) => seen.push(event),
            Err(e) => break e,
        }
    };
    assert_eq!(text(&seen), "Partial answer");
    assert!(matches!(err, Error::Status { status: 500, .. }), "{err:?}");

    for (case, reply) in [
        ("garbage line", Reply::malformed()),
        ("cut before done", Reply::truncated()),
        ("empty body", Reply::raw(Vec::<String>::new())),
    ] {
        llm.push(reply);
        let err = run(&provider, request()).await.unwrap_err();
        assert!(matches!(err, Error::Malformed(_)), "{case}: {err:?}");
    }
    assert_eq!(
        llm.request_count(),
        4,
        "nothing in a started body is retried"
    );
}

#[tokio::test]
async fn a_stalled_stream_times_out_and_cancellation_stops_it() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::text("Hello there").stall_after(2));
    let started = Instant::now();
    let err = run(&provider(&llm), request()).await.unwrap_err();
    assert!(matches!(err, Error::Timeout(_)), "{err:?}");
    assert!(started.elapsed() < PROMPTLY);

    llm.push(Reply::text("first then nothing").stall_after(2));
    let provider = provider_with(long_read_timeout(&llm));
    let cancel = CancellationToken::new();
    let mut stream = provider.stream(request(), cancel.clone()).await.unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        LlmEvent::TextDelta("first ".into())
    );
    let (next, ()) = tokio::join!(stream.next(), async { cancel.cancel() });
    assert!(matches!(next, Some(Err(Error::Cancelled))), "{next:?}");
    assert!(stream.next().await.is_none());
    drop(stream);
    llm.wait_for_aborted_streams(2).await;
}

fn long_read_timeout(llm: &ScriptedLlm) -> OpenAiConfig {
    OpenAiConfig {
        read_timeout_ms: 60_000,
        ..config(llm)
    }
}

#[tokio::test]
async fn the_key_never_appears_in_errors() {
    let echo = format!("bad key {KEY}");
    let llm = ScriptedLlm::start().await;
    let provider = provider(&llm);
    let mut errors = Vec::new();
    for reply in [
        Reply::status(401).message(echo.clone()),
        Reply::raw([format!("not json {KEY}")]),
        Reply::raw([json!({"error": echo}).to_string()]),
    ] {
        llm.set_default_reply(reply);
        errors.push(run(&provider, request()).await.unwrap_err());
    }
    for err in &errors {
        for shown in [format!("{err}"), format!("{err:?}")] {
            assert!(!shown.contains(KEY), "the key leaked: {shown}");
        }
    }
    assert!(
        errors[0].to_string().contains("bad key ***"),
        "{}",
        errors[0]
    );
    assert!(
        errors[2].to_string().contains("bad key ***"),
        "{}",
        errors[2]
    );
}

#[tokio::test]
async fn the_scripted_dialect_refuses_what_ollama_refuses() {
    let llm = ScriptedLlm::start().await;
    let valid = json!({
        "model": "llama-test",
        "stream": true,
        "messages": [
            {"role": "user", "content": "time?"},
            {"role": "assistant", "content": "",
             "tool_calls": [{"function": {"name": "clock_now", "arguments": {}}}]},
            {"role": "tool", "content": "09:30", "tool_name": "clock_now"},
        ],
    });
    let post = |body: Value| {
        let url = format!("{}/api/chat", llm.ollama_base_url());
        async move {
            let response = reqwest::Client::new()
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.text().await.unwrap())
        }
    };
    let (status, _) = post(valid.clone()).await;
    assert_eq!(status, 200, "the valid body is taken");

    type Edit = fn(&mut Value);
    let cases: &[(&str, Edit)] = &[
        ("no model", |b| b["model"] = json!("")),
        ("format neither json nor a schema", |b| {
            b["format"] = json!("yaml")
        }),
        ("a tool message without a call", |b| {
            b["messages"][1] = json!({"role": "user", "content": "x"})
        }),
        ("a message without content", |b| {
            b["messages"][0] = json!({"role": "user"})
        }),
        ("a message without role", |b| {
            b["messages"][0] = json!({"content": "x"})
        }),
        ("tool call arguments as text", |b| {
            b["messages"][1]["tool_calls"][0]["function"]["arguments"] = json!("{}")
        }),
    ];
    for (case, edit) in cases {
        let mut body = valid.clone();
        edit(&mut body);
        let (status, text) = post(body).await;
        assert_eq!(status, 400, "{case}: {text}");
        let error: Value = serde_json::from_str(&text).unwrap();
        assert!(error["error"].is_string(), "{case}: {text}");
    }
    assert_eq!(llm.request_count(), 1, "refused requests take no reply");
}
