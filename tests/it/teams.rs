//! Design 004's multi-agent scenarios over HTTP, one test per scenario (named after it), with
//! the scripted OpenAI-compatible server answering for every agent: teams are plain plans of
//! `agent` steps (sequential, parallel, graph, hub and spokes), nested workflows, checkpoints,
//! human input, typed pipelines, streaming and errors.

use serde_json::{Value, json};

use crate::support::scripted_llm::{Reply, ScriptedLlm};
use crate::support::*;

/// Three agents whose instructions name them (the scripted server routes by them).
fn agents(names: &[&str]) -> Value {
    let mut map = serde_json::Map::new();
    for n in names {
        map.insert(
            (*n).to_owned(),
            json!({ "description": format!("The {n} agent."), "instructions": format!("You are agent {n}.") }),
        );
    }
    Value::Object(map)
}

fn agent_step(id: &str, agent: &str, prompt: &str, deps: &[&str]) -> Value {
    json!({ "id": id, "kind": "agent", "depends_on": deps, "input": { "agent": agent, "prompt": prompt } })
}

async fn run_fixed(app: &TestApp, plan: Value, input: Value) -> Vec<SseMessage> {
    app.stream_run(json!({ "input": input, "orchestration": "fixed", "plan": plan }))
        .await
}

/// The user messages of every request to the scripted server whose system prompt holds
/// `marker`, in order.
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

#[tokio::test]
async fn sequential_basic_chain() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent a", Reply::text("alpha"));
    llm.push_for("agent b", Reply::text("alpha beta"));
    llm.push_for("agent c", Reply::text("alpha beta gamma"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = json!({ "agents": agents(&["a", "b", "c"]), "steps": [
        agent_step("s1", "a", "{{ input }}", &[]),
        agent_step("s2", "b", "Extend: {{ steps.s1.output }}", &["s1"]),
        agent_step("s3", "c", "Extend: {{ steps.s2.output }}", &["s2"]),
    ]});
    let events = run_fixed(&app, plan, json!("start")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], "alpha beta gamma");
    let b = asked(&llm, "agent b");
    assert_eq!(b.len(), 1);
    assert_eq!(b[0][1]["content"], "Extend: alpha");
    assert_eq!(
        asked(&llm, "agent c")[0][1]["content"],
        "Extend: alpha beta"
    );
    // Each agent's model round is a step of its own, attributed to the agent step by `path`.
    let tokens: Vec<Value> = events
        .iter()
        .filter(|e| e.kind() == "token")
        .map(|e| e.json())
        .collect();
    assert!(
        tokens
            .iter()
            .any(|t| t["path"] == "s2" && t["step_id"] == "llm-1"),
        "{tokens:?}"
    );
}

#[tokio::test]
async fn error_hubspoke_no_hub() {
    let app = spawn_app(|_| {}).await;
    let plan = json!({ "agents": agents(&["a", "b"]), "steps": [
        { "id": "team", "kind": "agent", "input": { "spokes": ["a", "b"] } }
    ]});
    let (status, body) = app
        .post_json(
            "/v1/runs",
            &json!({ "input": "x", "orchestration": "fixed", "plan": plan }),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    let errors = body["errors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e["pointer"] == "/plan/steps/0/input/agent"
                && e["message"].as_str().unwrap().contains("hub")),
        "{body}"
    );
}
