//! Structured answers against a provider as strict as OpenAI: orca's own schemas (plan,
//! re-plan, selector) and users' schemas (typed agents, output schemas) go out inside the
//! Structured Outputs strict subset, answers written the way a strict model writes them come
//! back whole, a server refusing a mode is asked once more in a weaker one (and remembered),
//! and the scripted server refuses what OpenAI refuses.

use futures::StreamExt;
use orca::config::{ModelAlias, OpenAiConfig, Secret, StructuredOutput};
use orca::llm::providers::OpenAiProvider;
use orca::llm::{ChatRequest, LlmEvent, LlmProvider, Message, ResponseSchema};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::planning::count_plan;
use crate::support::scripted_llm::{Reply, ScriptedLlm};
use crate::support::*;

/// The text a step streamed as `json_partial`, joined.
fn streamed_json(events: &[SseMessage], step: &str) -> String {
    events
        .iter()
        .filter(|e| e.kind() == "json_partial" && e.json()["step_id"] == step)
        .map(|e| {
            e.json()["data"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

#[tokio::test]
async fn a_plan_written_as_a_strict_model_writes_it_runs() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::json(count_plan()));
    let app = spawn_app(|c| use_scripted_openai(c, &llm)).await;
    let events = app
        .stream_run(json!({ "input": "count", "orchestration": "planner" }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], 43);

    let format = &llm.requests()[0]["response_format"];
    assert_eq!(format["json_schema"]["strict"], true, "{format}");
    let sent = format["json_schema"]["schema"].to_string();
    for refused in [
        "\"if\"",
        "\"allOf\"",
        "\"oneOf\"",
        "\"not\"",
        "propertyNames",
        "maxLength",
    ] {
        assert!(!sent.contains(refused), "{refused} went out: {sent}");
    }
    // The model wrote every optional field as null and the arguments as JSON text; the plan
    // that ran had neither.
    let written = streamed_json(&events, "planner");
    assert!(written.contains("\"depends_on\":null"), "{written}");
    assert!(
        written.contains(r#""arguments":"{\"expression\""#),
        "{written}"
    );
    let (_, plans) = app
        .get_json(&format!(
            "/v1/runs/{}/plans",
            events[0].json()["run_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(
        plans[0]["plan"],
        count_plan(),
        "the plan ran as the full schema has it"
    );
}

#[tokio::test]
async fn a_typed_agent_with_an_optional_field_gets_its_answer_without_it() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::json(json!({ "title": "Orcas" })));
    let app = spawn_app(|c| use_scripted_openai(c, &llm)).await;
    let schema = json!({ "type": "object", "required": ["title"], "properties": {
        "title": { "type": "string" },
        "tags": { "type": "array", "items": { "type": "string" }, "uniqueItems": true } } });
    let plan = json!({
        "agents": { "titler": { "instructions": "You write titles.", "output_schema": schema } },
        "steps": [{ "id": "t", "kind": "agent", "input": { "agent": "titler", "prompt": "{{ input }}" } }],
        "output": "{{ steps.t.output }}" });
    let events = app
        .stream_run(json!({ "input": "about orcas", "orchestration": "fixed", "plan": plan }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], json!({ "title": "Orcas" }));
    let sent = &llm.requests()[0]["response_format"]["json_schema"];
    assert_eq!(sent["strict"], true);
    assert_eq!(sent["schema"]["required"], json!(["tags", "title"]));
}

#[tokio::test]
async fn a_model_may_ask_with_the_schema_as_written_and_without_parallel_calls_or_usage() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::json(count_plan()));
    let app = spawn_app(|c| {
        use_scripted_openai(c, &llm);
        let mut alias = ModelAlias::new("openai", "local-model");
        alias.capabilities.structured_output = Some(StructuredOutput::JsonSchema);
        alias.capabilities.parallel_tool_calls = Some(false);
        alias.capabilities.stream_usage = Some(false);
        c.llm.models.insert("default".into(), alias);
    })
    .await;
    let fin = final_data(
        &app.stream_run(json!({ "input": "count", "orchestration": "planner" }))
            .await,
    );
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let sent = &llm.requests()[0];
    let spec = &sent["response_format"]["json_schema"];
    assert_eq!(spec["strict"], false);
    assert!(spec["schema"].to_string().contains("\"if\""), "as written");
    assert!(sent.get("stream_options").is_none(), "{sent}");
    // No tools in a planning call, so no parallel_tool_calls either (OpenAI refuses it alone).
    assert!(sent.get("parallel_tool_calls").is_none(), "{sent}");
}

fn provider(llm: &ScriptedLlm) -> OpenAiProvider {
    OpenAiProvider::new(&OpenAiConfig {
        base_url: llm.base_url(),
        api_key: Secret::new("sk-test"),
        max_retries: 0,
        ..Default::default()
    })
    .unwrap()
}

async fn answer(provider: &OpenAiProvider, request: ChatRequest) -> String {
    let mut stream = provider
        .stream(request, CancellationToken::new())
        .await
        .expect("an answer");
    let mut text = String::new();
    while let Some(event) = stream.next().await {
        if let LlmEvent::TextDelta(delta) = event.expect("an event") {
            text.push_str(&delta);
        }
    }
    text
}

#[tokio::test]
async fn a_refused_strict_schema_is_asked_again_weaker_once_and_remembered() {
    let llm = ScriptedLlm::start().await;
    llm.expect_refusals();
    llm.push(Reply::json(json!({ "steps": [] })));
    llm.push(Reply::json(json!({ "steps": [] })));
    let provider = provider(&llm);
    // The AgentPlan as written, sent strict: outside the subset.
    let plan_schema: Value = serde_json::from_str(orca::plan::schema::AGENT_PLAN_SCHEMA).unwrap();
    let mut request = ChatRequest::new(
        "gpt-test",
        vec![Message::User {
            content: "plan".into(),
        }],
    );
    request.response_schema = Some(ResponseSchema {
        strict: true,
        ..ResponseSchema::new("agent_plan", plan_schema)
    });

    assert_eq!(answer(&provider, request.clone()).await, r#"{"steps":[]}"#);
    let refusals = llm.refusals();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert!(refusals[0].contains("is not permitted") || refusals[0].contains("required"));
    assert_eq!(
        llm.requests()[0]["response_format"]["json_schema"]["strict"],
        false
    );

    // Remembered: the next call goes weaker at once.
    answer(&provider, request).await;
    assert_eq!(llm.refusals().len(), 1);
    assert_eq!(
        llm.requests()[1]["response_format"]["json_schema"]["strict"],
        false
    );
}

#[tokio::test]
async fn the_scripted_server_refuses_what_openai_refuses() {
    let llm = ScriptedLlm::start().await;
    llm.expect_refusals();
    let client = reqwest::Client::new();
    let user = json!({"role": "user", "content": "hi"});
    let call = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]});
    let strict = |schema: Value| json!({"type": "json_schema", "json_schema": {"name": "s", "strict": true, "schema": schema}});
    let closed = |props: Value, required: Value| json!({"type": "object", "additionalProperties": false, "properties": props, "required": required});
    let cases = [
        (
            json!({"messages": [user], "tools": [{"type": "function", "function": {"name": "clock.now", "parameters": {"type": "object"}}}]}),
            "tools[0].function.name",
        ),
        (
            json!({"messages": [user], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]}),
            "tools[0].function.parameters",
        ),
        (
            json!({"messages": [user, {"role": "tool", "tool_call_id": "c9", "content": "x"}]}),
            "messages.[1].role",
        ),
        (json!({"messages": [user, call, user]}), "messages"),
        (
            json!({"messages": [user], "response_format": {"type": "json_object"}}),
            "messages",
        ),
        (
            json!({"messages": [user], "parallel_tool_calls": false}),
            "parallel_tool_calls",
        ),
        (
            json!({"messages": [user], "stream": false, "stream_options": {"include_usage": true}}),
            "stream_options",
        ),
        (
            json!({"messages": [user], "response_format": strict(json!({"type": "object", "properties": {}}))}),
            "response_format",
        ),
        (
            json!({"messages": [user], "response_format": strict(closed(json!({"a": {"type": "string"}}), json!([])))}),
            "response_format",
        ),
        (
            json!({"messages": [user], "response_format": strict(closed(json!({"a": {"type": "string", "minLength": 1}}), json!(["a"])))}),
            "response_format",
        ),
        (
            json!({"messages": [user], "response_format": strict(closed(json!({"a": {"type": "array"}}), json!(["a"])))}),
            "response_format",
        ),
        (
            json!({"messages": [user], "response_format": strict(json!({"anyOf": [{"type": "object"}]}))}),
            "response_format",
        ),
        (
            json!({"messages": [user], "response_format": strict(closed(json!({"a": {"$ref": "#/$defs/gone"}}), json!(["a"])))}),
            "response_format",
        ),
    ];
    for (i, (mut body, param)) in cases.into_iter().enumerate() {
        body["model"] = json!("gpt-test");
        if body.get("stream").is_none() {
            body["stream"] = json!(true);
        }
        let resp = client
            .post(format!("{}/chat/completions", llm.base_url()))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "case {i}: {body}");
        let error: Value = resp.json().await.unwrap();
        assert_eq!(error["error"]["param"], param, "case {i}: {error}");
        assert_eq!(error["error"]["type"], "invalid_request_error");
    }
    assert_eq!(llm.refusals().len(), 13);
    assert_eq!(llm.request_count(), 0, "nothing refused was answered");
}
