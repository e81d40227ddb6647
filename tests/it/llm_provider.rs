//! The OpenAI-compatible provider against the scripted server: streaming, tool-call assembly,
//! retries before the first byte, timeouts, cancellation, and keeping the API key secret.

use std::time::{Duration, Instant};

use futures::StreamExt;
use orca::config::{OpenAiConfig, Secret};
use orca::llm::providers::OpenAiProvider;
use orca::llm::{ChatRequest, Error, LlmEvent, LlmProvider, Message, ToolCall, Usage};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::conformance::{
    self, PROMPTLY, READ_TIMEOUT_MS, run, text_deltas, tool, tool_calls,
};
use crate::support::scripted_llm::{Reply, ScriptedLlm};

const KEY: &str = "sk-orca-test-key-0123456789abcdef";

fn config(llm: &ScriptedLlm) -> OpenAiConfig {
    conformance::config(llm.base_url(), KEY)
}

fn provider(llm: &ScriptedLlm) -> OpenAiProvider {
    OpenAiProvider::new(&config(llm)).expect("provider")
}

fn request() -> ChatRequest {
    conformance::request("gpt-test")
}

#[tokio::test]
async fn streamed_text_arrives_as_several_deltas_then_usage() {
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

    let recorded = llm.recorded();
    assert_eq!(recorded.len(), 1);
    assert_eq!(
        recorded[0].authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    let body = &recorded[0].body;
    assert_eq!(body["model"], "gpt-test");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Say hello."},
        ])
    );
    // No tools offered, no structured output asked: the keys are left out, not null.
    assert!(body.get("tools").is_none() && body.get("response_format").is_none());
}

#[tokio::test]
async fn no_key_means_no_authorization_header() {
    let llm = ScriptedLlm::start().await;
    let provider = OpenAiProvider::new(&OpenAiConfig {
        api_key: Secret::default(),
        ..config(&llm)
    })
    .unwrap();
    run(&provider, request()).await.expect("answer");
    assert_eq!(llm.recorded()[0].authorization, None);
}

#[tokio::test]
async fn tool_calls_are_assembled_from_split_deltas() {
    let llm = ScriptedLlm::start().await;
    // A real OpenAI model only knows the wire name (`clock_now`); a lenient server may echo
    // the dotted name. Both must come back as our tool names.
    llm.push(
        Reply::tool_call("clock_now", json!({"timezone": "Asia/Seoul"}))
            .and_tool_call("math.calculate", json!({"expression": "10 + 20"}))
            .usage(20, 12),
    );
    let mut request = request();
    request.tools = vec![tool("clock.now"), tool("math.calculate")];

    let events = run(&provider(&llm), request).await.expect("answer");

    let calls = tool_calls(&events);
    assert_eq!(calls.len(), 2, "{events:?}");
    assert_eq!(calls[0].name, "clock.now");
    assert_eq!(calls[0].arguments, r#"{"timezone":"Asia/Seoul"}"#);
    assert_eq!(calls[1].name, "math.calculate");
    assert_eq!(calls[1].arguments, r#"{"expression":"10 + 20"}"#);
    assert_ne!(calls[0].id, calls[1].id);
    assert!(calls.iter().all(|c| c.id.starts_with("call_scripted_")));
    assert!(matches!(events.last(), Some(LlmEvent::Usage(u)) if u.prompt_tokens == 20));

    let body = &llm.requests()[0];
    let offered: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert_eq!(t["type"], "function");
            t["function"]["name"].as_str().unwrap()
        })
        .collect();
    assert_eq!(offered, ["clock_now", "math_calculate"]);
}

#[tokio::test]
async fn tool_results_and_structured_output_go_out_in_openai_shape() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::json(json!({"orchestrationType": "planner"})));
    let mut request = request();
    request.messages.push(Message::Assistant {
        content: String::new(),
        tool_calls: vec![ToolCall {
            id: "call_7".into(),
            name: "clock.now".into(),
            arguments: "{}".into(),
        }],
    });
    request.messages.push(Message::Tool {
        call_id: "call_7".into(),
        content: r#"{"time":"09:30"}"#.into(),
    });
    request.tools = vec![tool("clock.now")];
    let schema = json!({"type": "object", "required": ["orchestrationType"],
        "additionalProperties": false,
        "properties": {"orchestrationType": {"enum": ["simple", "planner"]}}});
    request.response_schema = Some(orca::llm::ResponseSchema {
        name: "selector".into(),
        schema: schema.clone(),
        strict: true,
    });

    let events = run(&provider(&llm), request).await.expect("answer");

    let deltas = text_deltas(&events);
    assert!(deltas.len() > 1, "structured output streams in pieces");
    let value: serde_json::Value = serde_json::from_str(&deltas.concat()).unwrap();
    assert_eq!(value, json!({"orchestrationType": "planner"}));

    let body = &llm.requests()[0];
    assert_eq!(
        body["messages"][2],
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_7",
            "type": "function", "function": {"name": "clock_now", "arguments": "{}"}}]})
    );
    assert_eq!(
        body["messages"][3],
        json!({"role": "tool", "tool_call_id": "call_7", "content": "{\"time\":\"09:30\"}"})
    );
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema",
               "json_schema": {"name": "selector", "schema": schema, "strict": true}})
    );
}

#[tokio::test]
async fn a_server_error_is_retried_then_succeeds() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::status(500)).push(Reply::text("recovered"));

    let events = run(&provider(&llm), request()).await.expect("answer");

    assert_eq!(text_deltas(&events).concat(), "recovered");
    assert_eq!(llm.request_count(), 2);
}

#[tokio::test]
async fn a_rate_limit_waits_for_retry_after_then_succeeds() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::status(429).retry_after(1))
        .push(Reply::text("after the wait"));
    // Retry-After is honoured up to retry_max_delay_ms, so allow a whole second here.
    let provider = OpenAiProvider::new(&OpenAiConfig {
        retry_max_delay_ms: 5_000,
        ..config(&llm)
    })
    .unwrap();

    let started = Instant::now();
    let events = run(&provider, request()).await.expect("answer");

    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "retried after {:?}, before Retry-After",
        started.elapsed()
    );
    assert_eq!(text_deltas(&events).concat(), "after the wait");
    assert_eq!(llm.request_count(), 2);
}

#[tokio::test]
async fn retry_after_is_capped_by_the_configured_maximum() {
    let llm = ScriptedLlm::start().await;
    // An hour-long Retry-After must not park the call: the cap (50 ms) wins.
    llm.push(Reply::status(429).retry_after(3_600))
        .push(Reply::status(503).retry_after_ms(3_600_000))
        .push(Reply::text("ok"));

    let started = Instant::now();
    let events = run(&provider(&llm), request()).await.expect("answer");

    assert!(started.elapsed() < PROMPTLY, "took {:?}", started.elapsed());
    assert_eq!(text_deltas(&events).concat(), "ok");
    assert_eq!(llm.request_count(), 3);
}

#[tokio::test]
async fn persistent_server_errors_give_up_after_max_retries() {
    let llm = ScriptedLlm::start().await;
    llm.set_default_reply(Reply::status(500).message("the model is overloaded"));

    let err = run(&provider(&llm), request()).await.unwrap_err();

    match &err {
        Error::Status { status, message } => {
            assert_eq!(*status, 500);
            assert_eq!(message, "the model is overloaded");
        }
        other => panic!("expected Status, got {other:?}"),
    }
    assert!(err.retryable());
    assert_eq!(llm.request_count(), 3, "1 try + max_retries (2)");
}

#[tokio::test]
async fn persistent_rate_limits_end_as_rate_limited() {
    let llm = ScriptedLlm::start().await;
    llm.set_default_reply(Reply::status(429).retry_after_ms(20));

    let err = run(&provider(&llm), request()).await.unwrap_err();

    assert!(
        matches!(err, Error::RateLimited { retry_after: Some(d) } if d == Duration::from_millis(20)),
        "{err:?}"
    );
    assert_eq!(err.code(), "llm_rate_limited");
    assert_eq!(llm.request_count(), 3);
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let llm = ScriptedLlm::start().await;
    let long = "x".repeat(2_000);
    llm.push(Reply::status(400).message(format!("The model `gpt-test` does not exist {long}")));

    let err = run(&provider(&llm), request()).await.unwrap_err();

    match &err {
        Error::Status { status, message } => {
            assert_eq!(*status, 400);
            assert!(message.starts_with("The model `gpt-test` does not exist"));
            assert!(
                message.chars().count() <= 301,
                "truncated: {}",
                message.len()
            );
        }
        other => panic!("expected Status, got {other:?}"),
    }
    assert!(!err.retryable());
    assert_eq!(llm.request_count(), 1);
}

#[tokio::test]
async fn an_unreachable_server_is_a_connect_error_after_retries() {
    // A port that was just free: nothing listens there.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let provider = OpenAiProvider::new(&OpenAiConfig {
        base_url: format!("http://127.0.0.1:{port}/v1"),
        api_key: Secret::new(KEY),
        max_retries: 1,
        retry_initial_delay_ms: 10,
        ..OpenAiConfig::default()
    })
    .unwrap();

    let err = run(&provider, request()).await.unwrap_err();

    assert!(matches!(err, Error::Connect(_)), "{err:?}");
    assert_eq!(err.code(), "llm_unavailable");
}

#[tokio::test]
async fn malformed_streams_are_errors_not_panics() {
    let cases = [
        ("garbage chunk", Reply::malformed()),
        ("cut without [DONE]", Reply::truncated()),
        (
            "chunk of the wrong shape",
            Reply::raw([r#"{"choices": "many"}"#, "[DONE]"]),
        ),
        ("bare JSON string", Reply::raw([r#""hello""#, "[DONE]"])),
        (
            "tool call without a name",
            Reply::raw([
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"arguments":"{}"}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
                "[DONE]",
            ]),
        ),
        ("empty body", Reply::raw(Vec::<String>::new())),
    ];
    let llm = ScriptedLlm::start().await;
    let provider = provider(&llm);
    for (case, reply) in cases {
        llm.push(reply);
        let err = run(&provider, request()).await.unwrap_err();
        assert!(matches!(err, Error::Malformed(_)), "{case}: {err:?}");
        assert_eq!(err.code(), "llm_malformed_response");
        assert!(!err.retryable());
    }
    // Nothing malformed is retried: one request per case.
    assert_eq!(llm.request_count(), 6);
}

#[tokio::test]
async fn lenient_servers_are_accepted() {
    let llm = ScriptedLlm::start().await;
    // No [DONE] after a finish_reason, no usage, no index on the tool call, and an id repeated
    // on every delta: seen from some compatible servers.
    llm.push(Reply::raw([
        r#"{"choices":[{"delta":{"content":"Hi"}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"id":"x1","function":{"name":"clock.now","arguments":"{\"a\""}}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"id":"x1","function":{"arguments":":1}"}}]}}]}"#,
        r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
    ]));

    let events = run(&provider(&llm), request()).await.expect("answer");

    assert_eq!(
        events,
        [
            LlmEvent::TextDelta("Hi".into()),
            LlmEvent::ToolCall(ToolCall {
                id: "x1".into(),
                name: "clock.now".into(),
                arguments: r#"{"a":1}"#.into()
            }),
        ]
    );
}

#[tokio::test]
async fn a_stalled_stream_times_out_after_the_read_timeout() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::stalled())
        .push(Reply::text("Hello there").stall_after(2))
        .push(Reply::text("late").delay_before_headers(60_000));
    let provider = provider(&llm);

    for case in ["silent after headers", "silent mid-stream", "no headers"] {
        let started = Instant::now();
        let err = run(&provider, request()).await.unwrap_err();
        let elapsed = started.elapsed();
        assert!(matches!(err, Error::Timeout(_)), "{case}: {err:?}");
        assert!(
            elapsed >= Duration::from_millis(READ_TIMEOUT_MS - 50) && elapsed < PROMPTLY,
            "{case}: timed out after {elapsed:?}"
        );
    }
    // A timeout is not retried inside the provider: the caller decides.
    assert_eq!(llm.request_count(), 3);
}

#[tokio::test]
async fn a_slow_but_steady_stream_is_not_a_timeout() {
    let llm = ScriptedLlm::start().await;
    // Each gap is well under the read timeout, the whole answer well over it.
    llm.push(Reply::text("one two three four five six seven eight").chunk_delay(60));

    let started = Instant::now();
    let events = run(&provider(&llm), request()).await.expect("answer");

    assert!(started.elapsed() > Duration::from_millis(READ_TIMEOUT_MS));
    assert_eq!(
        text_deltas(&events).concat(),
        "one two three four five six seven eight"
    );
}

#[tokio::test]
async fn cancellation_mid_stream_ends_the_stream_and_the_request() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::text("first then nothing").stall_after(2));
    let provider = OpenAiProvider::new(&OpenAiConfig {
        read_timeout_ms: 60_000,
        ..config(&llm)
    })
    .unwrap();
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
    // The server sees the client hang up.
    llm.wait_for_aborted_streams(1).await;
}

#[tokio::test]
async fn cancellation_aborts_a_request_waiting_for_headers_or_a_backoff() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::text("late").delay_before_headers(60_000))
        .push(Reply::status(503).retry_after(60));
    let provider = OpenAiProvider::new(&OpenAiConfig {
        read_timeout_ms: 60_000,
        retry_max_delay_ms: 60_000,
        ..config(&llm)
    })
    .unwrap();

    for n in 1..=2 {
        let cancel = CancellationToken::new();
        let started = Instant::now();
        let (result, ()) = tokio::join!(provider.stream(request(), cancel.clone()), async {
            llm.wait_for_requests(n).await;
            cancel.cancel();
        });
        assert!(matches!(result, Err(Error::Cancelled)), "request {n}");
        assert!(started.elapsed() < PROMPTLY, "request {n}");
    }

    // Already cancelled: nothing is sent.
    let cancel = CancellationToken::new();
    cancel.cancel();
    assert!(matches!(
        provider.stream(request(), cancel).await,
        Err(Error::Cancelled)
    ));
    assert_eq!(llm.request_count(), 2);
}

#[tokio::test]
async fn the_api_key_never_appears_in_errors() {
    let echo = format!("Incorrect API key provided: {KEY}. You can find your key at ...");
    let llm = ScriptedLlm::start().await;
    let provider = provider(&llm);
    let cases = [
        Reply::status(401).message(echo.clone()),
        Reply::status(500).message(echo.clone()),
        Reply::raw([format!("not json {KEY}")]),
        Reply::raw([json!({"error": {"message": echo}}).to_string()]),
        Reply::status(429),
        Reply::stalled(),
    ];
    let mut errors = Vec::new();
    for reply in cases {
        // Make retries see the same reply.
        llm.set_default_reply(reply);
        errors.push(run(&provider, request()).await.unwrap_err());
    }
    let unreachable = OpenAiProvider::new(&OpenAiConfig {
        base_url: "http://127.0.0.1:1/v1".into(),
        max_retries: 0,
        ..config(&llm)
    })
    .unwrap();
    errors.push(run(&unreachable, request()).await.unwrap_err());

    assert_eq!(errors.len(), 7);
    for err in &errors {
        for shown in [format!("{err}"), format!("{err:?}")] {
            assert!(!shown.contains(KEY), "the key leaked: {shown}");
        }
    }
    assert!(
        errors[0]
            .to_string()
            .contains("Incorrect API key provided: ***"),
        "{}",
        errors[0]
    );
    assert!(!format!("{provider:?}").contains(KEY));
}
