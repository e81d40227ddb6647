//! Planning and its parts, over HTTP: named LLM functions, the planner, the re-planner, the
//! auto selector. The model side is the scripted OpenAI-compatible server.

use orca::functions::FunctionConfig;
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
            errors.iter().any(|e| e["pointer"] == pointer
                && e["message"].as_str().unwrap().contains(want)),
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
    assert!(err.contains("functions.broken.model: no model alias `no-such-model`"), "{err}");
}
