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

fn run_id(events: &[SseMessage]) -> String {
    events[0].json()["run_id"].as_str().unwrap().to_owned()
}

/// The ids of top-level `step` events with `status`, in stream order.
fn steps_with(events: &[SseMessage], status: &str) -> Vec<String> {
    events
        .iter()
        .map(SseMessage::json)
        .filter(|e| e["kind"] == "step" && e["data"]["status"] == status && e.get("path").is_none())
        .map(|e| e["step_id"].as_str().unwrap().to_owned())
        .collect()
}

async fn refused(app: &TestApp, plan: Value) -> Vec<(String, String)> {
    let (status, body) = app
        .post_json(
            "/v1/runs",
            &json!({ "input": "x", "orchestration": "fixed", "plan": plan }),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["pointer"].as_str().unwrap().to_owned(),
                e["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn sequential_accumulate_history() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent a", Reply::text("first idea"));
    llm.push_for("agent b", Reply::text("second idea"));
    llm.push_for("agent c", Reply::text("both combined"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = json!({ "agents": agents(&["a", "b", "c"]), "steps": [
        { "id": "s1", "kind": "agent", "input": { "agent": "a" } },
        { "id": "s2", "kind": "agent", "depends_on": ["s1"], "input": { "agent": "b", "history": ["s1"] } },
        { "id": "s3", "kind": "agent", "depends_on": ["s2"], "input": { "agent": "c", "history": ["s1", "s2"] } },
    ]});
    let fin = final_data(&run_fixed(&app, plan, json!("brainstorm")).await);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    // Whole exchanges: each earlier agent's prompt (the run input by default) and answer.
    let c = &asked(&llm, "agent c")[0];
    let roles: Vec<&str> = c.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "user", "assistant", "user"]
    );
    let contents: Vec<&str> = c[1..]
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        contents,
        [
            "brainstorm",
            "first idea",
            "brainstorm",
            "second idea",
            "brainstorm"
        ]
    );
    assert_eq!(
        asked(&llm, "agent b")[0].len(),
        4,
        "b saw a's exchange only"
    );
}

#[tokio::test]
async fn sequential_ordering() {
    let llm = ScriptedLlm::start().await;
    for n in ["a", "b", "c"] {
        llm.push_for(&format!("agent {n}"), Reply::text(n));
    }
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    // One `sequential` step holding the team: declaration order is execution order.
    let plan = json!({ "agents": agents(&["a", "b", "c"]), "steps": [
        { "id": "team", "kind": "sequential", "input": { "steps": [
            { "id": "first", "kind": "agent", "input": { "agent": "c" } },
            { "id": "second", "kind": "agent", "input": { "agent": "a", "prompt": "after {{ steps.first.output }}" } },
            { "id": "third", "kind": "agent", "input": { "agent": "b", "prompt": "after {{ steps.second.output }}" } },
        ]}}
    ]});
    let events = run_fixed(&app, plan, json!("go")).await;
    assert_well_formed(&events, 1);
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], "b");
    let order: Vec<String> = llm
        .requests()
        .iter()
        .map(|r| r["messages"][0]["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        order,
        ["You are agent c.", "You are agent a.", "You are agent b."]
    );
    let children: Vec<String> = events
        .iter()
        .map(SseMessage::json)
        .filter(|e| {
            e["kind"] == "step" && e["data"]["status"] == "completed" && e["path"] == "team"
        })
        .map(|e| e["step_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(children, ["first", "second", "third"]);
}

#[tokio::test]
async fn parallel_basic_parallel() {
    let llm = ScriptedLlm::start().await;
    for n in ["a", "b", "c"] {
        llm.push_for(&format!("agent {n}"), Reply::text(format!("{n} says hi")));
    }
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = json!({ "agents": agents(&["a", "b", "c"]), "steps": [
        { "id": "fan", "kind": "parallel", "input": { "steps": [
            { "id": "pa", "kind": "agent", "input": { "agent": "a" } },
            { "id": "pb", "kind": "agent", "input": { "agent": "b" } },
            { "id": "pc", "kind": "agent", "input": { "agent": "c" } },
        ]}}
    ]});
    let fin = final_data(&run_fixed(&app, plan, json!("hello")).await);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(
        fin["output"],
        json!(["a says hi", "b says hi", "c says hi"])
    );
    assert_eq!(llm.request_count(), 3);
}

#[tokio::test]
async fn parallel_merge_aggregation() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent a", Reply::text("from a"));
    llm.push_for("agent b", Reply::status(400).message("b is refused"));
    llm.push_for("agent c", Reply::text("from c"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = json!({ "agents": agents(&["a", "b", "c"]), "steps": [
        { "id": "fan", "kind": "parallel", "input": { "aggregation": "merge", "steps": [
            { "id": "pa", "kind": "agent", "input": { "agent": "a" } },
            { "id": "pb", "kind": "agent", "input": { "agent": "b" } },
            { "id": "pc", "kind": "agent", "input": { "agent": "c" } },
        ]}}
    ]});
    let fin = final_data(&run_fixed(&app, plan, json!("hello")).await);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], json!({ "pa": "from a", "pc": "from c" }));
}

#[tokio::test]
async fn parallel_max_concurrency() {
    let llm = ScriptedLlm::start().await;
    llm.set_default_reply(Reply::text("done").delay_before_first_chunk(150));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let children: Vec<Value> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| json!({ "id": format!("p{n}"), "kind": "agent", "input": { "agent": n } }))
        .collect();
    let plan = json!({ "agents": agents(&["a", "b", "c", "d"]),
        "settings": { "max_parallel_steps": 2 },
        "steps": [{ "id": "fan", "kind": "parallel", "input": { "steps": children } }] });
    let events = run_fixed(&app, plan, json!("go")).await;
    assert_eq!(final_data(&events)["status"], "succeeded");
    // The model rounds (leaf work) of the four agents: never more than two at once, and two
    // did overlap.
    let (_, attempts) = app
        .get_json(&format!("/v1/runs/{}/steps", run_id(&events)))
        .await;
    let spans: Vec<(String, String)> = attempts
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["step_id"] == "llm-1")
        .map(|a| {
            (
                a["started_at"].as_str().unwrap().to_owned(),
                a["completed_at"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(spans.len(), 4);
    let most = spans
        .iter()
        .map(|(start, _)| {
            spans
                .iter()
                .filter(|(s, e)| s <= start && start < e)
                .count()
        })
        .max()
        .unwrap();
    assert_eq!(most, 2, "{spans:?}");
}

#[tokio::test]
async fn graph_linear_abc() {
    let llm = ScriptedLlm::start().await;
    for n in ["a", "b", "c"] {
        llm.push_for(&format!("agent {n}"), Reply::text(format!("<{n}>")));
    }
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    // Declared out of order: the edges decide.
    let plan = json!({ "agents": agents(&["a", "b", "c"]), "steps": [
        agent_step("c", "c", "{{ steps.b.output }}", &["b"]),
        agent_step("a", "a", "{{ input }}", &[]),
        agent_step("b", "b", "{{ steps.a.output }}", &["a"]),
    ]});
    let events = run_fixed(&app, plan, json!("x")).await;
    assert_eq!(steps_with(&events, "completed"), ["a", "b", "c"]);
    assert_eq!(asked(&llm, "agent c")[0][1]["content"], "<b>");
    let plan_ev = events.iter().find(|e| e.kind() == "plan").unwrap().json();
    assert_eq!(plan_ev["data"]["critical_path"], json!(["a", "b", "c"]));
}

#[tokio::test]
async fn graph_diamond_fan() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent a", Reply::text("topic"));
    llm.push_for("agent b", Reply::text("pros"));
    llm.push_for("agent c", Reply::text("cons"));
    llm.push_for("agent d", Reply::text("verdict"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = json!({ "agents": agents(&["a", "b", "c", "d"]), "steps": [
        agent_step("a", "a", "{{ input }}", &[]),
        agent_step("b", "b", "pros of {{ steps.a.output }}", &["a"]),
        agent_step("c", "c", "cons of {{ steps.a.output }}", &["a"]),
        agent_step("d", "d", "weigh {{ steps.b.output }} against {{ steps.c.output }}", &["b", "c"]),
    ]});
    let events = run_fixed(&app, plan, json!("x")).await;
    let fin = final_data(&events);
    assert_eq!(fin["output"], "verdict", "{fin}");
    assert_eq!(
        asked(&llm, "agent d")[0][1]["content"],
        "weigh pros against cons"
    );
    let done = steps_with(&events, "completed");
    assert_eq!(done.first().unwrap(), "a");
    assert_eq!(done.last().unwrap(), "d");
}

#[tokio::test]
async fn graph_conditional_edge() {
    let llm = ScriptedLlm::start().await;
    llm.push_for(
        "agent a",
        Reply::json(json!({ "route": "refund", "amount": 30 })),
    );
    llm.push_for("agent refunds", Reply::text("refunded 30"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let mut team = agents(&["refunds", "sales"]);
    team["a"] = json!({ "instructions": "You are agent a.", "output_schema": {
        "type": "object", "required": ["route"], "properties": { "route": { "enum": ["refund", "sale"] }, "amount": { "type": "number" } } } });
    let plan = json!({ "agents": team, "steps": [
        agent_step("triage", "a", "{{ input }}", &[]),
        { "id": "route", "kind": "branch", "depends_on": ["triage"],
          "input": { "condition": "steps.triage.output.route == 'refund'", "then": ["refund"], "else": ["sell"] } },
        agent_step("refund", "refunds", "refund {{ steps.triage.output.amount }}", &["route"]),
        agent_step("sell", "sales", "sell", &["route"]),
    ]});
    let events = run_fixed(&app, plan, json!("my order broke")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(steps_with(&events, "skipped"), ["sell"]);
    assert_eq!(asked(&llm, "agent refunds")[0][1]["content"], "refund 30");
    assert!(asked(&llm, "agent sales").is_empty());
}

#[tokio::test]
async fn graph_cycle_detection() {
    let app = spawn_app(|_| {}).await;
    let plan = json!({ "agents": agents(&["a", "b", "c"]), "steps": [
        agent_step("a", "a", "x", &["c"]),
        agent_step("b", "b", "x", &["a"]),
        agent_step("c", "c", "x", &["b"]),
    ]});
    let errors = refused(&app, plan).await;
    assert!(
        errors
            .iter()
            .any(|(p, m)| p.starts_with("/plan/steps/") && m.contains("cycle")),
        "{errors:?}"
    );
}

#[tokio::test]
async fn graph_builder_validation() {
    let app = spawn_app(|_| {}).await;
    let mut team = agents(&["a"]);
    team["bad"] = json!({ "instructions": "x", "tools": ["no.such.tool"], "handoffs": ["ghost"], "model": "nope" });
    let plan = json!({ "agents": team, "steps": [
        agent_step("one", "missing", "x", &[]),
        agent_step("two", "a", "x", &["nowhere"]),
        { "id": "chat", "kind": "group_chat", "input": { "participants": ["a", "phantom"] } },
        { "id": "nest", "kind": "workflow", "input": { "workflow": "unknown" } },
    ]});
    let errors = refused(&app, plan).await;
    let pointers: Vec<&str> = errors.iter().map(|(p, _)| p.as_str()).collect();
    for expected in [
        "/plan/agents/bad/tools/0",
        "/plan/agents/bad/handoffs/0",
        "/plan/agents/bad/model",
        "/plan/steps/0/input/agent",
        "/plan/steps/1/depends_on/0",
        "/plan/steps/2/input/participants/1",
        "/plan/steps/3/input/workflow",
    ] {
        assert!(
            pointers.contains(&expected),
            "{expected} missing in {errors:?}"
        );
    }
}

#[tokio::test]
async fn checkpoint_store_crud() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent a", Reply::text("one"));
    llm.push_for("agent b", Reply::text("two"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = json!({ "agents": agents(&["a", "b"]), "steps": [
        agent_step("s1", "a", "{{ input }}", &[]),
        agent_step("s2", "b", "{{ steps.s1.output }}", &["s1"]),
    ]});
    let events = run_fixed(&app, plan, json!("x")).await;
    let id = run_id(&events);
    // Read, oldest first: each agent turn's answer as it came, then its step's result.
    let (status, checkpoints) = app.get_json(&format!("/v1/runs/{id}/checkpoints")).await;
    assert_eq!(status, 200);
    let list = checkpoints.as_array().unwrap();
    assert_eq!(list.len(), 4, "{checkpoints}");
    assert_eq!(
        list[0]["state"]["children"]["s1/convo"]["output"]["answer"],
        "one"
    );
    assert_eq!(list[1]["state"]["steps"]["s1"]["output"], "one");
    assert_eq!(
        list[2]["state"]["children"]["s2/convo"]["output"]["answer"],
        "two"
    );
    assert_eq!(list[3]["state"]["steps"]["s2"]["output"], "two");
    // Paged reads agree with the whole list.
    let (_, page) = app
        .get_json(&format!("/v1/runs/{id}/checkpoints?limit=1"))
        .await;
    assert_eq!(page.as_array().unwrap().len(), 1);
    assert_eq!(page[0], list[0]);
    // Delete: a finished run goes with its checkpoints.
    let resp = app
        .client
        .delete(app.url(&format!("/v1/runs/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    let (status, _) = app.get_json(&format!("/v1/runs/{id}/checkpoints")).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn checkpoint_seq_checkpoint_cleanup() {
    let llm = ScriptedLlm::start().await;
    llm.push_for(
        "agent a",
        Reply::tool_call("math.calculate", json!({ "expression": "6 * 7" })),
    );
    llm.push_for("agent a", Reply::text("42"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let mut team = agents(&["a"]);
    team["a"]["tools"] = json!(["math.calculate"]);
    let plan = json!({ "agents": team, "steps": [agent_step("s1", "a", "{{ input }}", &[])] });
    let events = run_fixed(&app, plan, json!("six times seven")).await;
    assert_eq!(final_data(&events)["output"], "42");
    let id = run_id(&events);
    let (_, checkpoints) = app.get_json(&format!("/v1/runs/{id}/checkpoints")).await;
    let list = checkpoints.as_array().unwrap();
    // The turn's conversation was checkpointed while it ran (after the reply asking for the
    // tool, after the tool's result, and with the answer) ...
    let during: Vec<&Value> = list
        .iter()
        .filter(|c| c["state"]["children"].get("s1/convo").is_some())
        .collect();
    assert_eq!(during.len(), 3, "{checkpoints}");
    assert_eq!(
        during[2]["state"]["children"]["s1/convo"]["output"]["answer"],
        "42"
    );
    // ... and cleared when the step committed: the answer stands for it.
    let last = &list.last().unwrap()["state"];
    assert_eq!(last["steps"]["s1"]["output"], "42");
    assert_eq!(last["cleared"], json!(["s1"]), "{last}");
}

#[tokio::test]
async fn checkpoint_checkpoint_on_failure() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent a", Reply::text("kept"));
    llm.push_for("agent b", Reply::status(400).message("refused"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = json!({ "agents": agents(&["a", "b", "c"]), "steps": [
        agent_step("s1", "a", "{{ input }}", &[]),
        agent_step("s2", "b", "{{ steps.s1.output }}", &["s1"]),
        agent_step("s3", "c", "{{ steps.s2.output }}", &["s2"]),
    ]});
    let events = run_fixed(&app, plan, json!("x")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "failed", "{fin}");
    assert_eq!(fin["error"]["code"], "llm_rejected");
    let (_, checkpoints) = app
        .get_json(&format!("/v1/runs/{}/checkpoints", run_id(&events)))
        .await;
    // Checkpoints are deltas: the first turn's answer, then one per finished step, the
    // failure included (the failed turn had no answer to keep).
    let list = checkpoints.as_array().unwrap();
    assert_eq!(list.len(), 3, "{checkpoints}");
    assert_eq!(
        list[0]["state"]["children"]["s1/convo"]["output"]["answer"],
        "kept"
    );
    assert_eq!(list[1]["state"]["steps"]["s1"]["output"], "kept");
    let failed = &list[2]["state"]["steps"]["s2"];
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error"]["code"], "llm_rejected");
    assert_eq!(llm.request_count(), 2, "s3 never ran");
}

#[tokio::test]
async fn typed_pipeline_string_int_chain() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent words", Reply::text("forty-two"));
    llm.push_for("agent numbers", Reply::json(json!(42)));
    llm.push_for("agent doubler", Reply::json(json!(84)));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let int = json!({ "type": "integer" });
    let team = json!({
        "words": { "instructions": "You are agent words." },
        "numbers": { "instructions": "You are agent numbers.", "output_schema": int },
        "doubler": { "instructions": "You are agent doubler.", "output_schema": int },
    });
    let plan = json!({ "agents": team, "steps": [
        agent_step("say", "words", "{{ input }}", &[]),
        agent_step("parse", "numbers", "{{ steps.say.output }}", &["say"]),
        agent_step("double", "doubler", "{{ steps.parse.output }}", &["parse"]),
    ], "output": { "text": "{{ steps.say.output }}", "number": "{{ steps.parse.output }}", "twice": "{{ steps.double.output }}" } });
    let events = run_fixed(&app, plan, json!("the answer")).await;
    let fin = final_data(&events);
    assert_eq!(
        fin["output"],
        json!({ "text": "forty-two", "number": 42, "twice": 84 }),
        "{fin}"
    );
    // The typed agents asked for structured output, and streamed it as JSON.
    let numbers = llm
        .requests()
        .into_iter()
        .find(|r| r["messages"][0]["content"] == "You are agent numbers.")
        .unwrap();
    assert_eq!(numbers["response_format"]["type"], "json_schema");
    assert!(
        events
            .iter()
            .any(|e| e.kind() == "json_partial" && e.json()["path"] == "parse")
    );
}

#[tokio::test]
async fn typed_pipeline_three_stage() {
    let llm = ScriptedLlm::start().await;
    // Stage 2 answers wrongly once and is repaired.
    llm.push_for(
        "agent extract",
        Reply::json(json!({ "city": "Lyon", "days": 3 })),
    );
    llm.push_for("agent plan", Reply::json(json!({ "stops": "museum" })));
    llm.push_for(
        "agent plan",
        Reply::json(json!({ "stops": ["museum", "market"] })),
    );
    llm.push_for(
        "agent budget",
        Reply::json(json!({ "total": 300, "per_day": 100 })),
    );
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let team = json!({
        "extract": { "instructions": "You are agent extract.", "output_schema": { "type": "object",
            "required": ["city", "days"], "properties": { "city": { "type": "string" }, "days": { "type": "integer" } } } },
        "plan": { "instructions": "You are agent plan.", "output_schema": { "type": "object",
            "required": ["stops"], "properties": { "stops": { "type": "array", "items": { "type": "string" } } } } },
        "budget": { "instructions": "You are agent budget.", "output_schema": { "type": "object",
            "required": ["total"], "properties": { "total": { "type": "number" } } } },
    });
    let plan = json!({ "agents": team, "steps": [
        agent_step("e", "extract", "{{ input }}", &[]),
        agent_step("p", "plan", "{{ steps.e.output.days }} days in {{ steps.e.output.city }}", &["e"]),
        agent_step("b", "budget", "{{ steps.p.output.stops }}", &["p"]),
    ]});
    let events = run_fixed(&app, plan, json!("3 days in Lyon")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"]["total"], 300);
    let plan_asks = asked(&llm, "agent plan");
    assert_eq!(plan_asks.len(), 2, "one repair");
    assert_eq!(plan_asks[0][1]["content"], "3 days in Lyon");
    let repair = plan_asks[1].last().unwrap()["content"].as_str().unwrap();
    assert!(repair.contains("/stops"), "{repair}");
    assert_eq!(
        asked(&llm, "agent budget")[0][1]["content"],
        r#"["museum","market"]"#
    );
}

#[tokio::test]
async fn typed_pipeline_agent_executor() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent strict", Reply::text("not json"));
    llm.push_for("agent strict", Reply::json(json!({ "wrong": true })));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let team = json!({ "strict": { "instructions": "You are agent strict.",
        "output_schema": { "type": "object", "required": ["ok"] } } });
    let plan = json!({ "agents": team, "steps": [agent_step("s", "strict", "{{ input }}", &[])] });
    let events = run_fixed(&app, plan, json!("x")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "failed", "{fin}");
    assert_eq!(fin["error"]["code"], "invalid_llm_output");
    assert!(
        fin["error"]["message"].as_str().unwrap().contains("twice"),
        "{fin}"
    );
    assert_eq!(
        llm.request_count(),
        2,
        "repaired once, then the step failed"
    );
}

/// `(kind, path, step_id, status)` of every event, in stream order, with token runs folded
/// into one entry.
fn shape(events: &[SseMessage]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in events.iter().map(SseMessage::json) {
        let kind = e["kind"].as_str().unwrap();
        let mut line = format!(
            "{kind} {}{}",
            e["path"]
                .as_str()
                .map(|p| format!("{p}/"))
                .unwrap_or_default(),
            e["step_id"].as_str().unwrap_or("-")
        );
        if kind == "step" {
            line.push(' ');
            line.push_str(e["data"]["status"].as_str().unwrap());
        }
        if out.last() != Some(&line) || kind != "token" {
            out.push(line);
        }
    }
    out
}

#[tokio::test]
async fn streaming_seq_streaming_events() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent a", Reply::text("one two three"));
    llm.push_for("agent b", Reply::text("four five"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = json!({ "agents": agents(&["a", "b"]), "steps": [
        agent_step("s1", "a", "{{ input }}", &[]),
        agent_step("s2", "b", "{{ steps.s1.output }}", &["s1"]),
    ]});
    let events = run_fixed(&app, plan, json!("go")).await;
    assert_well_formed(&events, 1);
    let seen = shape(&events);
    // Model text and usage go out live, in causal order: what the step held before them (its
    // model round's `running`) goes out first; the rest when it commits.
    let expected = [
        "step s1 running",
        "step s1/llm-1 running",
        "token s1/llm-1",
        "usage s1/llm-1",
        "step s1/llm-1 completed",
        "step s1 completed",
    ];
    let s1: Vec<&String> = seen.iter().filter(|l| l.contains(" s1")).collect();
    assert_eq!(s1, expected.iter().collect::<Vec<_>>(), "{seen:#?}");
    let s2_start = seen.iter().position(|l| l == "step s2 running").unwrap();
    let s1_end = seen.iter().position(|l| l == "step s1 completed").unwrap();
    assert!(s1_end < s2_start, "{seen:#?}");
    // The history replays the same events, paths included.
    let history = app.history(&run_id(&events)).await;
    let live: Vec<Value> = events.iter().map(SseMessage::json).collect();
    assert_eq!(history, live);
}

#[tokio::test]
async fn streaming_parallel_streaming_events() {
    let llm = ScriptedLlm::start().await;
    for n in ["a", "b"] {
        llm.push_for(&format!("agent {n}"), Reply::text(format!("{n} {n} {n}")));
    }
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = json!({ "agents": agents(&["a", "b"]), "steps": [
        { "id": "fan", "kind": "parallel", "input": { "steps": [
            { "id": "pa", "kind": "agent", "input": { "agent": "a" } },
            { "id": "pb", "kind": "agent", "input": { "agent": "b" } },
        ]}}
    ]});
    let events = run_fixed(&app, plan, json!("go")).await;
    assert_well_formed(&events, 1);
    // Every token names the agent step it came from; each agent's text arrives whole.
    for (step, text) in [("pa", "a a a"), ("pb", "b b b")] {
        let streamed: String = events
            .iter()
            .map(SseMessage::json)
            .filter(|e| e["kind"] == "token" && e["path"] == format!("fan/{step}"))
            .map(|e| e["data"]["text"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(streamed, text);
    }
    let seen = shape(&events);
    let end = seen.iter().position(|l| l == "step fan completed").unwrap();
    for child in ["fan/pa completed", "fan/pb completed"] {
        let at = seen
            .iter()
            .position(|l| l == &format!("step {child}"))
            .unwrap();
        assert!(at < end, "{seen:#?}");
    }
}

#[tokio::test]
async fn streaming_graph_streaming_events() {
    let llm = ScriptedLlm::start().await;
    for n in ["a", "b", "c", "d"] {
        llm.push_for(&format!("agent {n}"), Reply::text(n));
    }
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = json!({ "agents": agents(&["a", "b", "c", "d"]), "steps": [
        agent_step("a", "a", "x", &[]),
        agent_step("b", "b", "x", &["a"]),
        agent_step("c", "c", "x", &["a"]),
        agent_step("d", "d", "x", &["b", "c"]),
    ]});
    // Read live, reconnecting half-way with Last-Event-ID: nothing lost, nothing twice.
    let run = app
        .create_run(json!({ "input": "go", "orchestration": "fixed", "plan": plan }))
        .await;
    let id = run["id"].as_str().unwrap();
    let mut first = app.events(id).await;
    let mut events = Vec::new();
    while events.len() < 6 {
        events.push(first.next_event().await.unwrap());
    }
    drop(first);
    let last = events.last().unwrap().json()["seq"].as_u64().unwrap();
    let resp = app
        .client
        .get(app.url(&format!("/v1/runs/{id}/events")))
        .header("Last-Event-ID", last.to_string())
        .send()
        .await
        .unwrap();
    events.extend(SseReader::new(resp).read_to_final().await);
    assert_well_formed(&events, 1);
    let seen = shape(&events);
    let pos = |l: &str| {
        seen.iter()
            .position(|s| s == l)
            .unwrap_or_else(|| panic!("{l} in {seen:#?}"))
    };
    assert!(pos("step a completed") < pos("step b running"));
    assert!(pos("step a completed") < pos("step c running"));
    assert!(pos("step b completed") < pos("step d running"));
    assert!(pos("step c completed") < pos("step d running"));
    assert!(pos("token d/llm-1") < pos("step d completed"));
    assert_eq!(final_data(&events)["output"], "d");
}

#[tokio::test]
async fn error_no_agents() {
    let app = spawn_app(|_| {}).await;
    // Steps naming agents when the plan has none and none are registered.
    let plan = json!({ "steps": [
        { "id": "solo", "kind": "agent", "input": { "agent": "writer" } },
        { "id": "chat", "kind": "group_chat", "input": { "participants": [] } },
    ]});
    let errors = refused(&app, plan).await;
    assert!(
        errors.iter().any(|(p, m)| p == "/plan/steps/0/input/agent"
            && m.contains("no agent named `writer`")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|(p, _)| p == "/plan/steps/1/input/participants"),
        "{errors:?}"
    );
}

#[tokio::test]
async fn error_stop_on_failure() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent a", Reply::status(400).message("no"));
    llm.push_for(
        "agent b",
        Reply::text("slow b").delay_before_first_chunk(100),
    );
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = json!({ "agents": agents(&["a", "b", "c"]), "steps": [
        agent_step("fails", "a", "x", &[]),
        agent_step("independent", "b", "x", &[]),
        agent_step("after", "c", "x", &["fails"]),
    ]});
    let events = run_fixed(&app, plan, json!("go")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "failed", "{fin}");
    assert_eq!(fin["error"]["code"], "llm_rejected");
    assert!(
        asked(&llm, "agent c").is_empty(),
        "nothing after the failure ran"
    );
}

#[tokio::test]
async fn error_continue_on_failure() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent a", Reply::status(400).message("no"));
    llm.push_for("agent b", Reply::text("b is fine"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = json!({ "agents": agents(&["a", "b", "c"]),
        "settings": { "stop_on_first_failure": false }, "steps": [
        agent_step("fails", "a", "x", &[]),
        agent_step("independent", "b", "x", &[]),
        agent_step("after", "c", "x", &["fails"]),
    ]});
    let events = run_fixed(&app, plan, json!("go")).await;
    let fin = final_data(&events);
    // The run goes on past the failure and ends with what it could do.
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["completion"], "partial", "{fin}");
    assert_eq!(fin["error"]["code"], "llm_rejected");
    assert_eq!(fin["output"], "b is fine");
    assert_eq!(asked(&llm, "agent b").len(), 1, "the independent agent ran");
    assert!(asked(&llm, "agent c").is_empty(), "its dependent did not");
    assert_eq!(steps_with(&events, "skipped"), ["after"]);
}

#[tokio::test]
async fn error_parallel_all_fail() {
    let llm = ScriptedLlm::start().await;
    llm.set_default_reply(Reply::status(400).message("everyone refuses"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = json!({ "agents": agents(&["a", "b"]), "steps": [
        { "id": "fan", "kind": "parallel", "input": { "aggregation": "merge", "steps": [
            { "id": "pa", "kind": "agent", "input": { "agent": "a" } },
            { "id": "pb", "kind": "agent", "input": { "agent": "b" } },
        ]}}
    ]});
    let events = run_fixed(&app, plan, json!("go")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "failed", "{fin}");
    assert_eq!(fin["error"]["code"], "llm_rejected");
    assert_eq!(llm.request_count(), 2);
    let failed = steps_with(&events, "failed");
    assert_eq!(failed, ["fan"]);
}

/// A workflow of two agents in sequence, as a plan's `workflows` entry.
fn review_workflow() -> Value {
    json!({ "name": "review", "steps": [
        { "id": "draft", "kind": "agent", "input": { "agent": "writer", "prompt": "Draft: {{ input.topic }}" } },
        { "id": "check", "kind": "agent", "depends_on": ["draft"], "input": { "agent": "critic", "prompt": "Check: {{ steps.draft.output }}" } },
    ], "output": { "draft": "{{ steps.draft.output }}", "verdict": "{{ steps.check.output }}" } })
}

#[tokio::test]
async fn composability_nested_orchestrator() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent writer", Reply::text("a draft"));
    llm.push_for("agent critic", Reply::text("approved"));
    llm.push_for("agent editor", Reply::text("published"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    // The inner team runs as a step of the outer one, and again as an agent (`kind: workflow`).
    let mut team = agents(&["writer", "critic", "editor"]);
    team["reviewer"] =
        json!({ "kind": "workflow", "workflow": "review", "description": "Writes and checks." });
    let plan = json!({ "agents": team, "workflows": { "review": review_workflow() }, "steps": [
        { "id": "inner", "kind": "workflow", "input": { "workflow": "review", "input": { "topic": "{{ input }}" } } },
        agent_step("final", "editor", "Publish {{ steps.inner.output.draft }} ({{ steps.inner.output.verdict }})", &["inner"]),
    ]});
    let events = run_fixed(&app, plan, json!("otters")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], "published");
    assert_eq!(
        asked(&llm, "agent writer")[0][1]["content"],
        "Draft: otters"
    );
    assert_eq!(
        asked(&llm, "agent editor")[0][1]["content"],
        "Publish a draft (approved)"
    );
    let id = run_id(&events);
    // The inner steps are recorded below the outer step.
    let (_, attempts) = app.get_json(&format!("/v1/runs/{id}/steps")).await;
    let draft = attempts
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["step_id"] == "draft")
        .unwrap();
    assert_eq!(draft["path"], "inner");
    assert_eq!(draft["status"], "completed");
}

#[tokio::test]
async fn composability_streaming_forward() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent writer", Reply::text("inner words"));
    llm.push_for("agent critic", Reply::text("fine"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    // Two levels: an outer workflow step runs `outer`, whose step runs `review`.
    let outer = json!({ "name": "outer", "steps": [
        { "id": "deep", "kind": "workflow", "input": { "workflow": "review", "input": "{{ input }}" } }
    ]});
    let plan = json!({ "agents": agents(&["writer", "critic"]),
        "workflows": { "review": review_workflow(), "outer": outer }, "steps": [
        { "id": "top", "kind": "workflow", "input": { "workflow": "outer", "input": { "topic": "rivers" } } },
    ]});
    let events = run_fixed(&app, plan, json!("x")).await;
    assert_well_formed(&events, 1);
    assert_eq!(final_data(&events)["output"]["verdict"], "fine");
    // Inner tokens reach the outer stream attributed to every level.
    let tokens: String = events
        .iter()
        .map(SseMessage::json)
        .filter(|e| e["kind"] == "token" && e["path"] == "top/deep/draft")
        .map(|e| e["data"]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(tokens, "inner words");
    let seen = shape(&events);
    assert!(
        seen.contains(&"step top/deep/check completed".to_owned()),
        "{seen:#?}"
    );
    // The attribution survives replay and a reconnect from the middle.
    let id = run_id(&events);
    let history = app.history(&id).await;
    let live: Vec<Value> = events.iter().map(SseMessage::json).collect();
    assert_eq!(history, live);
    let middle = live.len() / 2;
    let resp = app
        .client
        .get(app.url(&format!("/v1/runs/{id}/events?after={middle}")))
        .send()
        .await
        .unwrap();
    let rest: Vec<Value> = SseReader::new(resp)
        .read_to_final()
        .await
        .iter()
        .map(SseMessage::json)
        .collect();
    assert_eq!(rest, live[middle..].to_vec());
}

#[tokio::test]
async fn composability_failure_propagation() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent writer", Reply::text("a draft"));
    llm.push_for(
        "agent critic",
        Reply::status(400).message("the critic is refused"),
    );
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = json!({ "agents": agents(&["writer", "critic", "editor"]),
        "workflows": { "review": review_workflow() }, "steps": [
        { "id": "inner", "kind": "workflow", "input": { "workflow": "review", "input": { "topic": "t" } } },
        agent_step("final", "editor", "x", &["inner"]),
    ]});
    let events = run_fixed(&app, plan, json!("x")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "failed", "{fin}");
    assert_eq!(
        fin["error"]["code"], "llm_rejected",
        "the inner code: {fin}"
    );
    let message = fin["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("review") && message.contains("the critic is refused"),
        "{message}"
    );
    let outer = events
        .iter()
        .map(SseMessage::json)
        .find(|e| e["kind"] == "step" && e["step_id"] == "inner" && e["data"]["status"] == "failed")
        .unwrap();
    assert_eq!(outer["data"]["error"]["code"], "llm_rejected");
    assert!(asked(&llm, "agent editor").is_empty());
}

#[tokio::test]
async fn registered_agents_and_workflows_are_copied_into_the_run() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent writer", Reply::text("v1 words"));
    llm.push_for("agent critic", Reply::text("ok"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    for (name, body) in [
        ("writer", json!({ "instructions": "You are agent writer." })),
        ("critic", json!({ "instructions": "You are agent critic." })),
    ] {
        let resp = app
            .client
            .put(app.url(&format!("/v1/agents/{name}")))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
    }
    let resp = app
        .client
        .put(app.url("/v1/workflows/review"))
        .json(&review_workflow())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201, "{}", resp.text().await.unwrap());
    let run = app
        .create_run(
            json!({ "input": { "topic": "t" }, "orchestration": "fixed", "workflow": "review" }),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let fin = final_data(&app.follow(&id).await);
    assert_eq!(
        fin["output"],
        json!({ "draft": "v1 words", "verdict": "ok" }),
        "{fin}"
    );
    // The run's plan holds the agents as they were when it started.
    let (_, plans) = app.get_json(&format!("/v1/runs/{id}/plans")).await;
    assert_eq!(
        plans[0]["plan"]["agents"]["writer"]["instructions"],
        "You are agent writer."
    );
}

#[tokio::test]
async fn an_agent_killed_mid_turn_resumes_without_calling_its_tool_again() {
    use crate::support::server::{Server, skip_to, to_final};
    let llm = ScriptedLlm::start().await;
    llm.push_for(
        "agent a",
        Reply::tool_call("math.calculate", json!({ "expression": "6 * 7" })),
    );
    // The second round streams a little, then hangs until the server dies.
    llm.push_for("agent a", Reply::text("forty two and more").stall_after(2));
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("workspace")).unwrap();
    let mut team = agents(&["a", "b"]);
    team["a"]["tools"] = json!(["math.calculate"]);
    let plan = json!({ "agents": team, "steps": [
        agent_step("s1", "a", "{{ input }}", &[]),
        agent_step("s2", "b", "{{ steps.s1.output }}", &["s1"]),
    ]});
    let server = Server::start_scripted(dir.path(), &llm).await;
    let id = server.start_plan(plan).await;
    // A token of round 2 is stored after the checkpoint of the tool's result.
    let resp = server
        .client
        .get(server.url(&format!("/v1/runs/{id}/events")))
        .send()
        .await
        .unwrap();
    let mut reader = SseReader::new(resp);
    skip_to(&mut reader, "token", 1).await;
    drop(reader);
    server.kill();

    llm.push_for("agent a", Reply::text("42"));
    llm.push_for("agent b", Reply::text("noted"));
    let server = Server::start_scripted(dir.path(), &llm).await;
    let resp = server
        .client
        .get(server.url(&format!("/v1/runs/{id}/events")))
        .send()
        .await
        .unwrap();
    let events = to_final(SseReader::new(resp)).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], "noted");
    let steps = server.steps(&id).await;
    let tool_runs = steps
        .iter()
        .filter(|a| a["kind"] == "tool" && a["path"] == "s1")
        .count();
    assert_eq!(tool_runs, 1, "the tool's result came from the checkpoint");
    // The resumed round saw the tool's result.
    let resumed = asked(&llm, "agent a").last().unwrap().clone();
    assert_eq!(resumed[2]["role"], "assistant");
    assert_eq!(resumed[3]["role"], "tool");
    assert!(resumed[3]["content"].as_str().unwrap().contains("42"));
}

#[tokio::test]
async fn a_workflow_acts_as_an_agent_and_as_a_hubs_spoke() {
    let llm = ScriptedLlm::start().await;
    // The hub asks its spoke (a workflow agent) once, then answers.
    llm.push_for(
        "agent hub",
        Reply::tool_call("ask_researchers", json!({ "request": "find otters" })),
    );
    llm.push_for("agent finder", Reply::text("otters live in rivers"));
    llm.push_for("agent hub", Reply::text("otters: rivers"));
    // The same workflow agent alone in a step.
    llm.push_for("agent finder", Reply::text("seals live in the sea"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let research = json!({ "name": "research", "steps": [
        { "id": "find", "kind": "agent", "input": { "agent": "finder", "prompt": "Research: {{ input }}" } }
    ]});
    let mut team = agents(&["hub", "finder"]);
    team["researchers"] =
        json!({ "kind": "workflow", "workflow": "research", "description": "A research team." });
    let plan = json!({ "agents": team, "workflows": { "research": research }, "steps": [
        { "id": "desk", "kind": "agent", "input": { "agent": "hub", "spokes": ["researchers"] } },
        agent_step("solo", "researchers", "seals", &["desk"]),
    ], "output": { "desk": "{{ steps.desk.output }}", "solo": "{{ steps.solo.output }}" } });
    let events = run_fixed(&app, plan, json!("what about otters?")).await;
    let fin = final_data(&events);
    assert_eq!(
        fin["output"],
        json!({ "desk": "otters: rivers", "solo": "seals live in the sea" }),
        "{fin}"
    );
    // The hub was offered its spoke as a tool described by the spoke, and got its answer back.
    let hub = llm
        .requests()
        .into_iter()
        .filter(|r| r["messages"][0]["content"] == "You are agent hub.")
        .collect::<Vec<_>>();
    assert_eq!(hub[0]["tools"][0]["function"]["name"], "ask_researchers");
    let tool_answer = hub[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(tool_answer["role"], "tool");
    assert_eq!(tool_answer["content"], "otters live in rivers");
    let finder = asked(&llm, "agent finder");
    assert_eq!(finder[0][1]["content"], "Research: find otters");
    assert_eq!(finder[1][1]["content"], "Research: seals");
    // The spoke's work is attributed below the hub's step.
    assert!(
        events
            .iter()
            .any(|e| e.kind() == "token" && e.json()["path"] == "desk/researchers.1/find")
    );
}

/// The real binary against the scripted model, its database in `dir`.
async fn scripted_server(
    dir: &std::path::Path,
    llm: &ScriptedLlm,
) -> crate::support::server::Server {
    std::fs::create_dir_all(dir.join("workspace")).unwrap();
    crate::support::server::Server::start_scripted(dir, llm).await
}

#[tokio::test]
async fn an_agent_that_answered_behind_a_waiting_step_is_not_asked_again_after_a_kill() {
    // `s1`'s agent calls a tool, then answers; `s1` commits only once `ask`, started before
    // it, is answered. Killed in between, the resumed agent takes its answer from the
    // checkpoint: no model round or tool call runs twice.
    let llm = ScriptedLlm::start().await;
    let six_sevens = json!({ "expression": "6 * 7" });
    llm.push_for("agent a", Reply::tool_call("math.calculate", six_sevens));
    llm.push_for("agent a", Reply::text("forty-two"));
    let dir = tempfile::tempdir().unwrap();
    let mut team = agents(&["a"]);
    team["a"]["tools"] = json!(["math.calculate"]);
    let plan = json!({ "agents": team, "steps": [
        { "id": "ask", "kind": "user_input", "input": { "prompt": "go on?" } },
        agent_step("s1", "a", "{{ input }}", &[]),
    ], "output": "{{ steps.s1.output }}" });
    let server = scripted_server(dir.path(), &llm).await;
    let id = server.start_plan(plan).await;
    drop(server.until_asked(&id, 1).await);
    server.until_completed(&id, json!("s1"), "llm-2").await;
    server.kill();

    let server = scripted_server(dir.path(), &llm).await;
    let fin = server.answered_to_final(&id, 2, "ask", json!("yes")).await;
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], "forty-two", "{fin}");
    assert_eq!(llm.request_count(), 2, "the model was asked again");
    let steps = server.steps(&id).await;
    let of = |path: Value, id: &str| -> Vec<(Value, Value)> {
        let mine = steps
            .iter()
            .filter(|s| s["path"] == path && s["step_id"] == id);
        mine.map(|s| (s["attempt"].clone(), s["status"].clone()))
            .collect()
    };
    for id in ["llm-1", "tool-1-1", "llm-2"] {
        assert_eq!(
            of(json!("s1"), id),
            [(json!(1), json!("completed"))],
            "{id}"
        );
    }
    let interrupted = [
        (json!(1), json!("cancelled")),
        (json!(2), json!("completed")),
    ];
    assert_eq!(of(Value::Null, "s1"), interrupted);
}

#[tokio::test]
async fn a_chat_and_a_handoff_killed_mid_turn_resume_without_repeating_finished_turns() {
    use crate::support::server::to_final;
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent a", Reply::text("a speaks"));
    llm.push_for(
        "agent triage",
        Reply::tool_call("transfer_to_b", json!({ "reason": "b knows" })),
    );
    // b's turns stream a little, then hang until the server dies.
    llm.push_for("agent b", Reply::text("b is cut off here").stall_after(2));
    llm.push_for("agent b", Reply::text("b is cut off too").stall_after(2));
    let dir = tempfile::tempdir().unwrap();
    let mut team = agents(&["a", "b", "triage"]);
    team["triage"]["handoffs"] = json!(["b"]);
    let plan = json!({ "agents": team, "settings": { "max_parallel_steps": 2 }, "steps": [
        { "id": "chat", "kind": "group_chat", "input": { "participants": ["a", "b"], "max_rounds": 2 } },
        { "id": "desk", "kind": "handoff", "input": { "start": "triage" } },
    ]});
    let server = scripted_server(dir.path(), &llm).await;
    let id = server.start_plan(plan).await;
    // Both b turns have streamed: everything before them is stored.
    let resp = server
        .client
        .get(server.url(&format!("/v1/runs/{id}/events")))
        .send()
        .await
        .unwrap();
    let mut reader = SseReader::new(resp);
    let mut b_turns = std::collections::BTreeSet::new();
    let seen = async {
        while b_turns.len() < 2 {
            let e = reader
                .next_event()
                .await
                .expect("the stream goes on")
                .json();
            if let Some(p) = e["path"].as_str().filter(|p| p.ends_with("/b.2")) {
                b_turns.insert(p.to_owned());
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(20), seen)
        .await
        .expect("both of b's turns streamed");
    drop(reader);
    server.kill();

    llm.push_for("agent b", Reply::text("b finally"));
    llm.push_for("agent b", Reply::text("b finally"));
    let server = scripted_server(dir.path(), &llm).await;
    let resp = server
        .client
        .get(server.url(&format!("/v1/runs/{id}/events")))
        .send()
        .await
        .unwrap();
    let events = to_final(SseReader::new(resp)).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(
        asked(&llm, "agent a").len(),
        1,
        "a's finished chat turn was kept"
    );
    assert_eq!(
        asked(&llm, "agent triage").len(),
        1,
        "triage's handoff was kept"
    );
    assert_eq!(
        asked(&llm, "agent b").len(),
        4,
        "b's cut turns were taken again"
    );
    // The announcements were not repeated.
    let history = server.stored_events(&id).await;
    let count = |kind: &str| history.iter().filter(|e| e["kind"] == kind).count();
    assert_eq!(count("handoff"), 1);
    assert_eq!(count("speaker"), 2);
}

#[tokio::test]
async fn workflows_that_nest_themselves_are_refused() {
    let app = spawn_app(|_| {}).await;
    let ping = json!({ "name": "ping", "steps": [
        { "id": "p", "kind": "workflow", "input": { "workflow": "pong" } } ] });
    let pong = json!({ "name": "pong", "steps": [
        { "id": "q", "kind": "agent", "input": { "agent": "echo" } } ] });
    let mut team = agents(&["a"]);
    team["echo"] = json!({ "kind": "workflow", "workflow": "ping" });
    let plan = json!({ "agents": team, "workflows": { "ping": ping, "pong": pong }, "steps": [
        { "id": "go", "kind": "workflow", "input": { "workflow": "ping" } } ] });
    let errors = refused(&app, plan).await;
    assert!(
        errors
            .iter()
            .any(|(p, m)| p == "/plan/workflows/ping" && m.contains("ping → pong → ping")),
        "{errors:?}"
    );
}

#[tokio::test]
async fn a_workflow_agent_takes_part_in_a_group_chat() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent a", Reply::text("a opens"));
    llm.push_for("agent finder", Reply::text("the team found it"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let research = json!({ "name": "research", "steps": [
        { "id": "find", "kind": "agent", "input": { "agent": "finder" } } ] });
    let mut team = agents(&["a", "finder"]);
    team["team"] = json!({ "kind": "workflow", "workflow": "research" });
    let plan = json!({ "agents": team, "workflows": { "research": research }, "steps": [
        { "id": "chat", "kind": "group_chat", "input": { "participants": ["a", "team"], "max_rounds": 2 } } ] });
    let events = run_fixed(&app, plan, json!("topic")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"]["transcript"][1]["agent"], "team");
    assert_eq!(fin["output"]["last"], "the team found it");
    // The workflow's agent saw the chat's last line as its request.
    let finder = asked(&llm, "agent finder");
    assert!(
        finder[0][1]["content"]
            .as_str()
            .unwrap()
            .contains("a opens"),
        "{finder:?}"
    );
}
