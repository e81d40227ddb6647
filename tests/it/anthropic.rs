//! The Anthropic provider against the scripted server's Messages dialect: streaming, tool
//! calls and results, structured answers through a forced tool, retries before the first byte,
//! errors inside the stream, timeouts, cancellation, keeping the key secret; and the scripted
//! dialect itself refusing what Anthropic refuses.

use std::time::{Duration, Instant};

use futures::StreamExt;
use orca::config::OpenAiConfig;
use orca::llm::providers::AnthropicProvider;
use orca::llm::{
    Capabilities, ChatRequest, Error, LlmEvent, LlmProvider, Message, ResponseSchema, ToolCall,
    ToolSpec, Usage,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::conformance::{
    self, PROMPTLY, READ_TIMEOUT_MS, run, text_deltas, tool, tool_calls,
};
use crate::support::scripted_llm::{Reply, ScriptedLlm};

const KEY: &str = "sk-ant-orca-test-key-0123456789abcdef";

fn config(llm: &ScriptedLlm) -> OpenAiConfig {
    conformance::config(llm.anthropic_base_url(), KEY)
}

fn provider_with(cfg: OpenAiConfig) -> AnthropicProvider {
    AnthropicProvider::named("claude", &cfg).expect("provider")
}

fn provider(llm: &ScriptedLlm) -> AnthropicProvider {
    provider_with(config(llm))
}

fn request() -> ChatRequest {
    conformance::request("claude-test")
}

#[tokio::test]
async fn streamed_text_arrives_in_deltas_then_usage() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::text("Hello world from orca").usage(7, 4));

    let events = run(&provider(&llm), request()).await.expect("answer");

    let deltas = text_deltas(&events);
    assert!(deltas.len() >= 4, "{deltas:?}");
    assert_eq!(deltas.concat(), "Hello world from orca");
    assert_eq!(
        events.last(),
        Some(&LlmEvent::Usage(Usage {
            prompt_tokens: 7,
            completion_tokens: 4
        }))
    );
    let recorded = &llm.recorded()[0];
    assert_eq!(recorded.api_key.as_deref(), Some(KEY));
    assert_eq!(recorded.authorization, None);
    assert_eq!(
        recorded.wire,
        json!({
            "model": "claude-test",
            "max_tokens": 4096,
            "system": "Be brief.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hello."}]}],
            "stream": true,
        })
    );
    // The OpenAI-shaped view other tests assert on.
    assert_eq!(
        recorded.body["messages"],
        json!([{"role": "system", "content": "Be brief."},
               {"role": "user", "content": "Say hello."}])
    );
}

#[tokio::test]
async fn parallel_tool_calls_are_assembled_and_named_back() {
    let llm = ScriptedLlm::start().await;
    llm.push(
        Reply::text("Checking.")
            .and_tool_call("clock_now", json!({"timezone": "Asia/Seoul"}))
            .and_tool_call("math_calculate", json!({"expression": "10 + 20"}))
            .usage(20, 12),
    );
    let mut request = request();
    request.tools = vec![tool("clock.now"), tool("math.calculate")];

    let events = run(&provider(&llm), request).await.expect("answer");

    assert_eq!(text_deltas(&events).concat(), "Checking.");
    let calls = tool_calls(&events);
    assert_eq!(calls.len(), 2, "{events:?}");
    assert_eq!(calls[0].name, "clock.now");
    assert_eq!(calls[0].arguments, r#"{"timezone":"Asia/Seoul"}"#);
    assert_eq!(calls[1].name, "math.calculate");
    assert_eq!(calls[1].arguments, r#"{"expression":"10 + 20"}"#);
    assert_ne!(calls[0].id, calls[1].id);
    assert!(matches!(events.last(), Some(LlmEvent::Usage(u)) if u.prompt_tokens == 20));

    let wire = &llm.wire_requests()[0];
    assert_eq!(
        wire["tools"],
        json!([
            {"name": "clock_now", "description": "the clock.now tool",
             "input_schema": {"type": "object"}},
            {"name": "math_calculate", "description": "the math.calculate tool",
             "input_schema": {"type": "object"}},
        ])
    );
    assert!(wire.get("tool_choice").is_none(), "{wire}");
    let view = &llm.requests()[0];
    assert_eq!(view["tools"][1]["function"]["name"], "math_calculate");
}

#[tokio::test]
async fn one_call_at_a_time_is_asked_for_when_the_model_needs_it() {
    let llm = ScriptedLlm::start().await;
    let mut request = request();
    request.tools = vec![tool("clock.now")];
    request.capabilities = Capabilities {
        parallel_tool_calls: false,
        ..Capabilities::default()
    };

    run(&provider(&llm), request).await.expect("answer");

    assert_eq!(
        llm.wire_requests()[0]["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
    assert_eq!(llm.requests()[0]["parallel_tool_calls"], false);
}

#[tokio::test]
async fn tool_results_go_back_as_tool_result_blocks() {
    let llm = ScriptedLlm::start().await;
    let mut request = request();
    request.tools = vec![tool("clock.now")];
    request.messages.extend([
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![
                ToolCall {
                    id: "toolu_7".into(),
                    name: "clock.now".into(),
                    arguments: "{}".into(),
                },
                ToolCall {
                    id: "toolu_8".into(),
                    name: "clock.now".into(),
                    arguments: r#"{"tz":"UTC"}"#.into(),
                },
            ],
        },
        Message::Tool {
            call_id: "toolu_7".into(),
            content: r#"{"time":"09:30"}"#.into(),
        },
        Message::Tool {
            call_id: "toolu_8".into(),
            content: r#"{"time":"00:30"}"#.into(),
        },
    ]);

    let events = run(&provider(&llm), request).await.expect("accepted");
    assert!(!text_deltas(&events).is_empty());

    let wire = &llm.wire_requests()[0];
    assert_eq!(
        wire["messages"][1],
        json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_7", "name": "clock_now", "input": {}},
            {"type": "tool_use", "id": "toolu_8", "name": "clock_now", "input": {"tz": "UTC"}}]})
    );
    assert_eq!(
        wire["messages"][2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_7", "content": "{\"time\":\"09:30\"}"},
            {"type": "tool_result", "tool_use_id": "toolu_8", "content": "{\"time\":\"00:30\"}"}]})
    );
    let view = &llm.requests()[0];
    assert_eq!(
        view["messages"][2],
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "toolu_7", "type": "function",
             "function": {"name": "clock_now", "arguments": "{}"}},
            {"id": "toolu_8", "type": "function",
             "function": {"name": "clock_now", "arguments": "{\"tz\":\"UTC\"}"}}]})
    );
    assert_eq!(
        view["messages"][3],
        json!({"role": "tool", "tool_call_id": "toolu_7", "content": "{\"time\":\"09:30\"}"})
    );
}

#[tokio::test]
async fn a_structured_answer_comes_through_a_forced_tool_as_text() {
    let llm = ScriptedLlm::start().await;
    let answer = json!({"orchestrationType": "planner"});
    llm.push(Reply::json(answer.clone()))
        .push(Reply::json(answer.clone()));
    let schema = json!({"type": "object", "required": ["orchestrationType"],
        "properties": {"orchestrationType": {"enum": ["simple", "planner"]}}});
    let structured = |tools: Vec<ToolSpec>| {
        let mut request = request();
        request.tools = tools;
        request.response_schema = Some(ResponseSchema::new("selector", schema.clone()));
        request
    };
    let provider = provider(&llm);

    for tools in [vec![], vec![tool("clock.now")]] {
        let events = run(&provider, structured(tools)).await.expect("answer");
        let deltas = text_deltas(&events);
        assert!(deltas.len() > 1, "the answer streams in pieces: {deltas:?}");
        assert_eq!(
            serde_json::from_str::<Value>(&deltas.concat()).unwrap(),
            answer
        );
        assert!(tool_calls(&events).is_empty(), "{events:?}");
    }

    let wire = llm.wire_requests();
    assert_eq!(
        wire[0]["tool_choice"],
        json!({"type": "tool", "name": "selector"})
    );
    assert_eq!(wire[0]["tools"][0]["input_schema"], schema);
    assert_eq!(wire[1]["tool_choice"], json!({"type": "any"}));
    assert_eq!(
        wire[1]["tools"][1]["name"], "selector",
        "the answer tool is last"
    );
    let view = &llm.requests()[1];
    assert_eq!(
        view["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "selector", "schema": schema}})
    );
    assert_eq!(view["tools"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn weaker_modes_put_the_schema_in_the_system_prompt() {
    let llm = ScriptedLlm::start().await;
    let mut request = request();
    request.response_schema = Some(ResponseSchema::new("answer", json!({"type": "array"})));
    request.capabilities = Capabilities {
        structured_output: orca::config::StructuredOutput::JsonObject,
        ..Capabilities::default()
    };

    run(&provider(&llm), request).await.expect("answer");

    let wire = &llm.wire_requests()[0];
    assert!(wire.get("tools").is_none() && wire.get("tool_choice").is_none());
    let system = wire["system"].as_str().unwrap();
    assert!(
        system.starts_with("Be brief.") && system.contains("\"array\""),
        "{system}"
    );
}

#[tokio::test]
async fn rate_limits_wait_for_retry_after_and_overload_is_retried() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::status(429).retry_after(1))
        .push(Reply::status(529))
        .push(Reply::text("after the wait"));
    let provider = provider_with(OpenAiConfig {
        retry_max_delay_ms: 5_000,
        ..config(&llm)
    });

    let started = Instant::now();
    let events = run(&provider, request()).await.expect("answer");

    assert!(started.elapsed() >= Duration::from_millis(950));
    assert_eq!(text_deltas(&events).concat(), "after the wait");
    assert_eq!(llm.request_count(), 3);
}

#[tokio::test]
async fn persistent_overload_gives_up_retryable() {
    let llm = ScriptedLlm::start().await;
    llm.set_default_reply(Reply::status(529).message("Overloaded"));

    let err = run(&provider(&llm), request()).await.unwrap_err();

    assert!(
        matches!(&err, Error::Status { status: 529, message } if message == "Overloaded"),
        "{err:?}"
    );
    assert_eq!(err.code(), "llm_error");
    assert!(err.retryable());
    assert_eq!(llm.request_count(), 3, "1 try + max_retries (2)");
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::status(400).message("max_tokens: too large"))
        .push(Reply::status(401).message("invalid x-api-key"));
    let provider = provider(&llm);

    for (status, message) in [(400, "max_tokens: too large"), (401, "invalid x-api-key")] {
        let err = run(&provider, request()).await.unwrap_err();
        assert!(
            matches!(&err, Error::Status { status: s, message: m } if *s == status && m == message),
            "{err:?}"
        );
        assert_eq!(err.code(), "llm_rejected");
    }
    assert_eq!(llm.request_count(), 2);
}

#[tokio::test]
async fn errors_inside_the_stream_are_mapped_and_not_retried() {
    let llm = ScriptedLlm::start().await;
    let provider = provider(&llm);
    type Expected = fn(&Error) -> bool;
    let cases: [(&str, Expected); 3] = [
        ("overloaded_error", |e| {
            matches!(e, Error::Status { status: 529, .. })
        }),
        ("rate_limit_error", |e| {
            matches!(e, Error::RateLimited { .. })
        }),
        ("invalid_request_error", |e| {
            matches!(e, Error::Status { status: 400, .. })
        }),
    ];
    for (kind, expected) in cases {
        llm.push(Reply::stream_error("Partial answer", kind));
        let mut stream = provider
            .stream(request(), CancellationToken::new())
            .await
            .unwrap();
        let mut seen = Vec::new();
        let err = loop {
            match stream.next().await {
                Some(Ok(event)) => seen.push(event),
                Some(Err(e)) => break e,
                None => panic!("{kind}: the stream ended without the error"),
            }
        };
        assert_eq!(text_deltas(&seen).concat(), "Partial answer", "{kind}");
        assert!(expected(&err), "{kind}: {err:?}");
        assert!(
            stream.next().await.is_none(),
            "{kind}: nothing after an error"
        );
    }
    assert_eq!(
        llm.request_count(),
        3,
        "never retried once the body started"
    );
}

#[tokio::test]
async fn broken_streams_are_malformed_not_panics() {
    let llm = ScriptedLlm::start().await;
    let provider = provider(&llm);
    let cases = [
        ("garbage event", Reply::malformed()),
        ("cut before message_stop", Reply::truncated()),
        ("empty body", Reply::raw(Vec::<String>::new())),
        (
            "an event of the wrong shape",
            Reply::raw([r#"{"type":"content_block_delta","index":"zero"}"#]),
        ),
    ];
    for (case, reply) in cases {
        llm.push(reply);
        let err = run(&provider, request()).await.unwrap_err();
        assert!(matches!(err, Error::Malformed(_)), "{case}: {err:?}");
    }
    assert_eq!(llm.request_count(), 4);
}

#[tokio::test]
async fn a_stalled_stream_times_out_after_the_read_timeout() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::stalled())
        .push(Reply::text("Hello there").stall_after(2));
    let provider = provider(&llm);

    for case in ["silent after headers", "silent mid-stream"] {
        let started = Instant::now();
        let err = run(&provider, request()).await.unwrap_err();
        let elapsed = started.elapsed();
        assert!(matches!(err, Error::Timeout(_)), "{case}: {err:?}");
        assert!(
            elapsed >= Duration::from_millis(READ_TIMEOUT_MS - 50) && elapsed < PROMPTLY,
            "{case}: {elapsed:?}"
        );
    }
    assert_eq!(llm.request_count(), 2);
}

#[tokio::test]
async fn cancellation_ends_the_stream_and_the_request() {
    let llm = ScriptedLlm::start().await;
    // The opening and the first word, then silence.
    llm.push(Reply::text("first then nothing").stall_after(2));
    let provider = provider_with(OpenAiConfig {
        read_timeout_ms: 60_000,
        ..config(&llm)
    });
    let cancel = CancellationToken::new();
    let mut stream = provider.stream(request(), cancel.clone()).await.unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        LlmEvent::TextDelta("first ".into())
    );

    let started = Instant::now();
    let (next, ()) = tokio::join!(stream.next(), async { cancel.cancel() });

    assert!(matches!(next, Some(Err(Error::Cancelled))), "{next:?}");
    assert!(stream.next().await.is_none());
    assert!(started.elapsed() < PROMPTLY);
    drop(stream);
    llm.wait_for_aborted_streams(1).await;

    // Cancelled before the call: nothing is sent.
    let cancel = CancellationToken::new();
    cancel.cancel();
    assert!(matches!(
        provider.stream(request(), cancel).await,
        Err(Error::Cancelled)
    ));
    assert_eq!(llm.request_count(), 1);
}

#[tokio::test]
async fn the_api_key_never_appears_in_errors() {
    let echo = format!("invalid x-api-key: {KEY}");
    let llm = ScriptedLlm::start().await;
    let provider = provider(&llm);
    let cases = [
        Reply::status(401).message(echo.clone()),
        Reply::status(529).message(echo.clone()),
        Reply::raw([format!("not json {KEY}")]),
        Reply::raw([json!({"type": "error",
            "error": {"type": "api_error", "message": echo}})
        .to_string()]),
    ];
    let mut errors = Vec::new();
    for reply in cases {
        llm.set_default_reply(reply);
        errors.push(run(&provider, request()).await.unwrap_err());
    }
    let unreachable = provider_with(OpenAiConfig {
        base_url: "http://127.0.0.1:1".into(),
        max_retries: 0,
        ..config(&llm)
    });
    errors.push(run(&unreachable, request()).await.unwrap_err());

    for err in &errors {
        for shown in [format!("{err}"), format!("{err:?}")] {
            assert!(!shown.contains(KEY), "the key leaked: {shown}");
        }
    }
    assert!(errors[0].to_string().contains("invalid x-api-key: ***"));
    assert!(errors[3].to_string().contains("invalid x-api-key: ***"));
    assert!(!format!("{provider:?}").contains(KEY));
}

// ---------------------------------------------------------------------------------------------
// The scripted dialect refuses what Anthropic refuses.

fn valid_body() -> Value {
    json!({
        "model": "claude-test",
        "max_tokens": 64,
        "stream": true,
        "system": "Be brief.",
        "tools": [{"name": "clock_now", "description": "the time",
                   "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "time?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "clock_now", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "09:30"},
                {"type": "text", "text": "and?"}]},
        ],
    })
}

async fn post(llm: &ScriptedLlm, body: &Value, version: bool) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}/v1/messages", llm.anthropic_base_url()))
        .json(body);
    if version {
        request = request.header("anthropic-version", "2023-06-01");
    }
    let response = request.send().await.expect("the scripted server answers");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test]
async fn the_scripted_dialect_refuses_what_anthropic_refuses() {
    let llm = ScriptedLlm::start().await;
    llm.expect_refusals();
    let (status, _) = post(&llm, &valid_body(), true).await;
    assert_eq!(status, 200, "the valid body is taken");
    let (status, body) = post(&llm, &valid_body(), false).await;
    assert_eq!(status, 400, "without anthropic-version");
    assert_eq!(body["error"]["type"], "invalid_request_error");

    type Edit = fn(&mut Value);
    let cases: &[(&str, Edit)] = &[
        ("no max_tokens", |b| {
            b.as_object_mut().unwrap().remove("max_tokens");
        }),
        ("stream not true", |b| b["stream"] = json!(false)),
        ("no messages", |b| b["messages"] = json!([])),
        ("first message from the assistant", |b| {
            b["messages"].as_array_mut().unwrap().remove(0);
        }),
        ("two user messages in a row", |b| {
            b["messages"]
                .as_array_mut()
                .unwrap()
                .push(json!({"role": "user", "content": "more"}));
        }),
        ("a system role inside messages", |b| {
            b["messages"][0] = json!({"role": "system", "content": "hi"});
        }),
        ("an empty text block", |b| {
            b["messages"][1]["content"][0]["text"] = json!("");
        }),
        ("a tool_result in an assistant turn", |b| {
            b["messages"][1]["content"]
                .as_array_mut()
                .unwrap()
                .push(json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}));
        }),
        ("a tool_result answering no tool_use", |b| {
            b["messages"][2]["content"][0]["tool_use_id"] = json!("toolu_9");
        }),
        ("a tool_result after text", |b| {
            b["messages"][2]["content"]
                .as_array_mut()
                .unwrap()
                .reverse();
        }),
        ("a tool_use left unanswered", |b| {
            b["messages"][2]["content"]
                .as_array_mut()
                .unwrap()
                .remove(0);
        }),
        ("a tool_use last", |b| {
            b["messages"].as_array_mut().unwrap().pop();
        }),
        ("a dotted tool name", |b| {
            b["tools"][0]["name"] = json!("clock.now")
        }),
        ("a tool name too long", |b| {
            b["tools"][0]["name"] = json!("x".repeat(65))
        }),
        ("an input schema that is not an object", |b| {
            b["tools"][0]["input_schema"] = json!({"type": "string"})
        }),
        ("tool_choice naming a tool not offered", |b| {
            b["tool_choice"] = json!({"type": "tool", "name": "answer"})
        }),
        ("temperature above 1", |b| b["temperature"] = json!(1.5)),
    ];
    for (case, edit) in cases {
        let mut body = valid_body();
        edit(&mut body);
        let (status, answer) = post(&llm, &body, true).await;
        assert_eq!(status, 400, "{case}: {answer}");
        assert_eq!(
            answer,
            json!({"type": "error", "error": {"type": "invalid_request_error",
                "message": answer["error"]["message"]}}),
            "{case}"
        );
        assert!(answer["error"]["message"].is_string(), "{case}");
    }
    assert_eq!(llm.request_count(), 1, "refused requests take no reply");
}

#[tokio::test]
async fn scripted_status_replies_have_anthropic_error_bodies() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::status(529))
        .push(Reply::status(429).retry_after(3))
        .push(Reply::status(500));
    for (status, kind) in [
        (529, "overloaded_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
    ] {
        let response = reqwest::Client::new()
            .post(format!("{}/v1/messages", llm.anthropic_base_url()))
            .header("anthropic-version", "2023-06-01")
            .json(&valid_body())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status);
        if status == 429 {
            assert_eq!(response.headers()["retry-after"], "3");
        }
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], kind);
    }
}
