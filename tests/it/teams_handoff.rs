//! Design 004's handoff and group chat scenarios over HTTP, one test per scenario (named after
//! it), the scripted OpenAI-compatible server answering for every agent by its instructions:
//! control passing by `transfer_to_<agent>` calls, the context each policy gives, limits,
//! human input, streaming, speaker selection (rules and a model), terminations, and resuming
//! after a restart without repeating finished turns.

use serde_json::{Value, json};

use crate::support::scripted_llm::{Reply, ScriptedLlm};
use crate::support::*;

/// Agents by name with their handoff edges; instructions name them ("You are agent NAME."),
/// which the scripted server routes by.
fn agents(defs: &[(&str, Value)]) -> Value {
    let mut map = serde_json::Map::new();
    for (name, handoffs) in defs {
        map.insert(
            (*name).to_owned(),
            json!({
                "description": format!("The {name} desk."),
                "instructions": format!("You are agent {name}."),
                "handoffs": handoffs,
            }),
        );
    }
    Value::Object(map)
}

fn handoff_plan(agents: Value, input: Value) -> Value {
    json!({ "agents": agents, "steps": [ { "id": "team", "kind": "handoff", "input": input } ] })
}

fn chat_plan(names: &[&str], input: Value) -> Value {
    let defs: Vec<(&str, Value)> = names.iter().map(|n| (*n, json!([]))).collect();
    let mut input = input;
    input["participants"] = json!(names);
    json!({ "agents": agents(&defs), "steps": [ { "id": "chat", "kind": "group_chat", "input": input } ] })
}

fn run_body(plan: Value, input: &str) -> Value {
    json!({ "input": input, "orchestration": "fixed", "plan": plan })
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

/// The data of every event of `kind`.
fn data_of(events: &[SseMessage], kind: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e.kind() == kind)
        .map(|e| e.json()["data"].clone())
        .collect()
}

fn handoffs(events: &[SseMessage]) -> Vec<(String, String)> {
    data_of(events, "handoff")
        .iter()
        .map(|d| {
            (
                d["from"].as_str().unwrap().to_owned(),
                d["to"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn speakers(events: &[SseMessage]) -> Vec<String> {
    data_of(events, "speaker")
        .iter()
        .map(|d| d["agent"].as_str().unwrap().to_owned())
        .collect()
}

fn run_id(events: &[SseMessage]) -> String {
    events[0].json()["run_id"].as_str().unwrap().to_owned()
}

fn transfer(to: &str, reason: &str) -> Reply {
    Reply::tool_call(format!("transfer_to_{to}"), json!({ "reason": reason }))
}

fn contents(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[tokio::test]
async fn handoff_basic_handoff() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent triage", transfer("billing", "a refund question"));
    llm.push_for("agent billing", transfer("triage", "refund issued"));
    llm.push_for("agent triage", Reply::text("Your refund is on its way."));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let team = agents(&[
        ("triage", json!(["billing"])),
        ("billing", json!(["triage"])),
    ]);
    let plan = handoff_plan(team, json!({ "start": "triage" }));
    let events = app.stream_run(run_body(plan, "I want a refund")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], "Your refund is on its way.");
    assert_eq!(
        handoffs(&events),
        vec![
            ("triage".to_owned(), "billing".to_owned()),
            ("billing".to_owned(), "triage".to_owned())
        ]
    );
    let reasons: Vec<Value> = data_of(&events, "handoff")
        .iter()
        .map(|d| d["reason"].clone())
        .collect();
    assert_eq!(
        reasons,
        vec![json!("a refund question"), json!("refund issued")]
    );
    // The triage agent is offered its edge as a tool; billing inherits the conversation.
    let triage = llm.requests()[0].clone();
    let tools: Vec<&str> = triage["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, vec!["transfer_to_billing"]);
    let billing = asked(&llm, "agent billing");
    assert_eq!(billing.len(), 1);
    let seen = contents(&billing[0]);
    assert_eq!(seen[1], "I want a refund");
    assert!(
        seen.last().unwrap().contains("a refund question"),
        "{seen:?}"
    );
    assert_eq!(asked(&llm, "agent triage").len(), 2);
    let id = run_id(&events);
    for (turn, context) in [
        ("triage.1", "request"),
        ("billing.2", "inherit"),
        ("triage.3", "inherit"),
    ] {
        let attempts = app.attempts(&id, turn).await;
        assert_eq!(attempts.len(), 1, "{turn}");
        assert_eq!(attempts[0]["input"]["context"], context, "{turn}");
        assert_eq!(attempts[0]["status"], "completed", "{turn}");
    }
}

#[tokio::test]
async fn handoff_max_transitions() {
    let llm = ScriptedLlm::start().await;
    for _ in 0..3 {
        llm.push_for("agent ping", transfer("pong", "yours"));
        llm.push_for("agent pong", transfer("ping", "yours"));
    }
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let team = agents(&[("ping", json!(["pong"])), ("pong", json!(["ping"]))]);
    let plan = handoff_plan(team, json!({ "start": "ping", "max_transitions": 3 }));
    let events = app.stream_run(run_body(plan, "play")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "failed", "{fin}");
    assert_eq!(fin["error"]["code"], "handoff_limit_exceeded", "{fin}");
    assert_eq!(handoffs(&events).len(), 3);
    assert_eq!(llm.request_count(), 4, "no turn after the limit");
    let failed: Vec<Value> = data_of(&events, "step")
        .into_iter()
        .filter(|d| d["step_id"] == "team" && d["status"] == "failed")
        .collect();
    assert_eq!(failed.len(), 1, "not retried: {failed:?}");
    assert_eq!(failed[0]["error"]["code"], "handoff_limit_exceeded");
}

#[tokio::test]
async fn handoff_builder_validation() {
    let app = spawn_app(|_| {}).await;
    let team = agents(&[("triage", json!(["ghost"]))]);
    let plan = handoff_plan(team, json!({ "start": "triage" }));
    let (status, body) = app.post_json("/v1/runs", &run_body(plan, "x")).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["errors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["pointer"] == "/plan/agents/triage/handoffs/0"),
        "{body}"
    );
    let team = agents(&[("triage", json!([]))]);
    let plan = handoff_plan(team, json!({ "start": "nobody" }));
    let (status, body) = app.post_json("/v1/runs", &run_body(plan, "x")).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["errors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["pointer"] == "/plan/steps/0/input/start"),
        "{body}"
    );
    let resp = app
        .client
        .put(app.url("/v1/agents/triage"))
        .json(&json!({ "instructions": "Route.", "handoffs": ["ghost"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["errors"][0]["pointer"], "/handoffs/0", "{body}");
}

#[tokio::test]
async fn handoff_no_handoff_handler() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent helper", Reply::text("Which account?"));
    llm.push_for("agent helper", Reply::text("Account 42 is unlocked."));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let team = agents(&[("helper", json!([]))]);
    let plan = handoff_plan(
        team,
        json!({ "start": "helper", "on_no_handoff": "ask_human" }),
    );
    let run = app.create_run(run_body(plan, "unlock my account")).await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut reader = app.events(&id).await;
    let first = next_input(&mut reader).await;
    assert_eq!(first["prompt"], "Which account?");
    let step = first["step_id"].as_str().unwrap().to_owned();
    let bad = app.answer(&id, &step, json!({ "note": 1 })).await;
    assert_eq!(bad.status(), 422);
    assert_eq!(
        app.answer(&id, &step, json!({ "message": "number 42" }))
            .await
            .status(),
        202
    );
    let second = next_input(&mut reader).await;
    assert_eq!(second["prompt"], "Account 42 is unlocked.");
    let step = second["step_id"].as_str().unwrap().to_owned();
    assert_eq!(
        app.answer(&id, &step, json!({ "done": true }))
            .await
            .status(),
        202
    );
    let fin = final_data(&to_final(reader).await);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], "Account 42 is unlocked.");
    // The message went to the same agent, after its own answer.
    let helper = asked(&llm, "agent helper");
    assert_eq!(helper.len(), 2);
    let seen = contents(&helper[1]);
    assert_eq!(
        &seen[1..],
        ["unlock my account", "Which account?", "number 42"]
    );
    assert_eq!(helper[1][2]["role"], "assistant");
}

/// The data of the next `input_required` event.
async fn next_input(reader: &mut SseReader) -> Value {
    loop {
        let event = reader.next_event().await.expect("the stream goes on");
        if event.kind() == "input_required" {
            return event.json()["data"].clone();
        }
    }
}

#[tokio::test]
async fn handoff_streaming_handoff() {
    let llm = ScriptedLlm::start().await;
    llm.push_for(
        "agent triage",
        Reply::text("Let me route you.")
            .and_tool_call("transfer_to_tech", json!({ "reason": "a crash" })),
    );
    llm.push_for("agent tech", Reply::text("Reinstall the app."));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let team = agents(&[("triage", json!(["tech"])), ("tech", json!([]))]);
    let plan = handoff_plan(team, json!({ "start": "triage" }));
    let events = app.stream_run(run_body(plan, "my app crashes")).await;
    assert_well_formed(&events, 1);
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let k = kinds(&events);
    let at = |kind: &str| k.iter().position(|x| x == kind).unwrap();
    assert!(at("status") < at("token"));
    assert!(at("handoff") < k.len() - 1);
    // The handoff comes before the step's own end.
    let team_done = events
        .iter()
        .position(|e| {
            let d = e.json()["data"].clone();
            e.kind() == "step" && d["step_id"] == "team" && d["status"] == "completed"
        })
        .unwrap();
    // Live, in order: triage speaks, control passes, tech speaks; the step's own record (its
    // turns as attempts) follows when it commits.
    let token_of = |path: &str, last: bool| {
        let mut found = events
            .iter()
            .enumerate()
            .filter(|(_, e)| e.kind() == "token" && e.json()["path"] == path)
            .map(|(i, _)| i);
        if last {
            found.next_back()
        } else {
            found.next()
        }
        .unwrap_or_else(|| panic!("no token of {path}"))
    };
    assert!(token_of("team/triage.1", true) < at("handoff"));
    assert!(at("handoff") < token_of("team/tech.2", false));
    assert!(at("handoff") < team_done);
    let handoff = events[at("handoff")].json();
    assert_eq!(handoff["step_id"], "team");
    assert_eq!(
        handoff["data"],
        json!({ "from": "triage", "to": "tech", "reason": "a crash" })
    );
    // Tokens say whose turn they belong to.
    let tokens: Vec<Value> = events
        .iter()
        .filter(|e| e.kind() == "token")
        .map(|e| e.json())
        .collect();
    let text_at = |path: &str| -> String {
        tokens
            .iter()
            .filter(|t| t["path"] == path)
            .map(|t| t["data"]["text"].as_str().unwrap())
            .collect()
    };
    assert_eq!(text_at("team/triage.1"), "Let me route you.");
    assert_eq!(text_at("team/tech.2"), "Reinstall the app.");
    assert!(tokens.iter().all(|t| t["step_id"] == "llm-1"), "{tokens:?}");
}

#[tokio::test]
async fn handoff_three_targets() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent triage", transfer("tech", "it is broken"));
    llm.push_for("agent tech", Reply::text("Fixed."));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let team = agents(&[
        (
            "triage",
            json!(["billing", { "to": "tech", "description": "Repairs things." }, "sales"]),
        ),
        ("billing", json!([])),
        ("tech", json!([])),
        ("sales", json!([])),
    ]);
    let plan = handoff_plan(team, json!({ "start": "triage" }));
    let events = app.stream_run(run_body(plan, "my router is broken")).await;
    let fin = final_data(&events);
    assert_eq!(fin["output"], "Fixed.", "{fin}");
    let offered: Vec<Value> = llm.requests()[0]["tools"].as_array().unwrap().clone();
    let names: Vec<&str> = offered
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec![
            "transfer_to_billing",
            "transfer_to_tech",
            "transfer_to_sales"
        ]
    );
    assert!(
        offered[1]["function"]["description"]
            .as_str()
            .unwrap()
            .contains("Repairs things.")
    );
    assert!(
        offered[0]["function"]["description"]
            .as_str()
            .unwrap()
            .contains("The billing desk.")
    );
    assert_eq!(
        handoffs(&events),
        vec![("triage".to_owned(), "tech".to_owned())]
    );
    assert!(asked(&llm, "agent billing").is_empty());
    assert!(asked(&llm, "agent sales").is_empty());
}

#[tokio::test]
async fn handoff_context_policies() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent triage", transfer("inh", "r1"));
    llm.push_for("agent inh", transfer("sum", "r2"));
    llm.push_for("Summarise the conversation", Reply::text("SUMMARY-OF-IT"));
    llm.push_for("agent sum", transfer("iso", "r3"));
    llm.push_for(
        "agent iso",
        Reply::text("thinking").and_tool_call("transfer_to_last", json!({ "reason": "r4" })),
    );
    llm.push_for("agent last", Reply::text("final word"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let team = agents(&[
        ("triage", json!([{ "to": "inh", "context": "inherit" }])),
        ("inh", json!([{ "to": "sum", "context": "summarize" }])),
        ("sum", json!([{ "to": "iso", "context": "isolate" }])),
        (
            "iso",
            json!([{ "to": "last", "context": "last_n", "last_n": 2 }]),
        ),
        ("last", json!([])),
    ]);
    let plan = handoff_plan(team, json!({ "start": "triage" }));
    let events = app.stream_run(run_body(plan, "ORIGINAL REQUEST")).await;
    let fin = final_data(&events);
    assert_eq!(fin["output"], "final word", "{fin}");
    // inherit: the whole transcript (request, the transfer call and its result), then the note.
    let inh = &asked(&llm, "agent inh")[0];
    let roles: Vec<&str> = inh.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
    assert_eq!(inh[1]["content"], "ORIGINAL REQUEST");
    assert!(!inh[0]["content"].as_str().unwrap().contains("agent triage"));
    // summarize: the summary instead of the conversation.
    let summarizer = asked(&llm, "Summarise the conversation");
    assert_eq!(summarizer.len(), 1);
    assert!(contents(&summarizer[0])[1].contains("ORIGINAL REQUEST"));
    let sum = contents(&asked(&llm, "agent sum")[0]);
    assert_eq!(sum.len(), 3, "{sum:?}");
    assert!(sum[1].contains("SUMMARY-OF-IT"), "{sum:?}");
    assert!(
        !sum.iter().any(|c| c.contains("ORIGINAL REQUEST")),
        "{sum:?}"
    );
    // isolate: only the request and the reason.
    let iso = contents(&asked(&llm, "agent iso")[0]);
    assert_eq!(iso.len(), 3, "{iso:?}");
    assert_eq!(iso[1], "ORIGINAL REQUEST");
    assert!(
        iso[2].contains("r3") && !iso.iter().any(|c| c.contains("SUMMARY")),
        "{iso:?}"
    );
    // last_n 2: the last two turns of the conversation — the note iso was handed with and
    // its reply — then the new note. The transfer call and its result are no turns: they
    // neither count nor go along.
    let last = &asked(&llm, "agent last")[0];
    let roles: Vec<&str> = last.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"], "{last:?}");
    assert!(
        last[1]["content"].as_str().unwrap().contains("r3"),
        "{last:?}"
    );
    assert_eq!(last[2]["content"], "thinking");
    assert!(last[2].get("tool_calls").is_none(), "{last:?}");
    assert!(
        last[3]["content"].as_str().unwrap().contains("r4"),
        "{last:?}"
    );
    // Each turn's attempt shows what it received and by which policy.
    let id = run_id(&events);
    for (turn, context, received) in [
        ("inh.2", "inherit", 4),
        ("sum.3", "summarize", 2),
        ("iso.4", "isolate", 2),
        ("last.5", "last_n", 3),
    ] {
        let a = &app.attempts(&id, turn).await[0];
        assert_eq!(a["input"]["context"], context, "{turn}");
        assert_eq!(
            a["input"]["messages"].as_array().unwrap().len(),
            received,
            "{turn}"
        );
    }
    assert_eq!(
        app.attempts(&id, "summary-2").await[0]["status"],
        "completed"
    );
}

#[tokio::test]
async fn handoff_resumed_after_a_restart_does_not_repeat_turns() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent triage", transfer("billing", "money"));
    llm.push_for(
        "agent billing",
        Reply::text("never finished").stall_after(2),
    );
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        c.llm.openai.read_timeout_ms = 30_000;
    })
    .await;
    let team = agents(&[("triage", json!(["billing"])), ("billing", json!([]))]);
    let plan = handoff_plan(team, json!({ "start": "triage" }));
    let run = app.create_run(run_body(plan, "refund please")).await;
    let id = run["id"].as_str().unwrap().to_owned();
    llm.wait_for_requests(2).await;
    let dir = app.stop().await;
    llm.push_for("agent billing", Reply::text("Refunded."));
    let app = spawn_app_in(dir, |c| use_scripted(c, &llm)).await;
    let fin = final_data(&app.follow(&id).await);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], "Refunded.");
    assert_eq!(
        asked(&llm, "agent triage").len(),
        1,
        "triage's turn was not taken again"
    );
    let billing = asked(&llm, "agent billing");
    assert_eq!(billing.len(), 2);
    assert_eq!(
        billing[0], billing[1],
        "the resumed turn received the same context"
    );
    let history = app.history(&id).await;
    let handoffs: Vec<&Value> = history.iter().filter(|e| e["kind"] == "handoff").collect();
    assert_eq!(handoffs.len(), 1, "{handoffs:?}");
    assert_eq!(app.attempts(&id, "triage.1").await.len(), 1);
}

#[tokio::test]
async fn groupchat_roundrobin() {
    let llm = ScriptedLlm::start().await;
    for round in 1..=2 {
        for n in ["a", "b", "c"] {
            llm.push_for(&format!("agent {n}"), Reply::text(format!("{n}{round}")));
        }
    }
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = chat_plan(
        &["a", "b", "c"],
        json!({ "termination": { "max_rounds": 6 } }),
    );
    let events = app.stream_run(run_body(plan, "discuss")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(speakers(&events), ["a", "b", "c", "a", "b", "c"]);
    let out = &fin["output"];
    assert_eq!(out["rounds"], 6);
    assert_eq!(out["last"], "c2");
    assert_eq!(
        out["transcript"][3],
        json!({ "agent": "a", "round": 4, "text": "a2" })
    );
    // b's second turn: the prompt, a's line, its own line, c's, a's, by name.
    let b = contents(&asked(&llm, "agent b")[1]);
    assert_eq!(&b[1..], ["discuss", "[a]: a1", "b1", "[c]: c1", "[a]: a2"]);
    assert_eq!(asked(&llm, "agent b")[1][2]["role"], "user");
    assert_eq!(asked(&llm, "agent b")[1][3]["role"], "assistant");
}

#[tokio::test]
async fn groupchat_keyword_termination() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent a", Reply::text("a draft"));
    llm.push_for("agent b", Reply::text("looks good, DONE"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = chat_plan(&["a", "b"], json!({ "termination": { "keyword": "DONE" } }));
    let events = app.stream_run(run_body(plan, "write")).await;
    let out = final_data(&events)["output"].clone();
    assert_eq!(out["rounds"], 2, "{out}");
    assert_eq!(out["last"], "looks good, DONE");
    assert_eq!(llm.request_count(), 2);
}

#[tokio::test]
async fn groupchat_max_rounds() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = chat_plan(
        &["a", "b"],
        json!({ "max_rounds": 5, "termination": { "keyword": "NEVER" } }),
    );
    let events = app.stream_run(run_body(plan, "talk")).await;
    let out = final_data(&events)["output"].clone();
    assert_eq!(out["rounds"], 5, "{out}");
    assert_eq!(out["transcript"].as_array().unwrap().len(), 5);
    assert_eq!(llm.request_count(), 5);
}

#[tokio::test]
async fn groupchat_composite_any() {
    let llm = ScriptedLlm::start().await;
    for text in ["one", "two", "DONE three"] {
        llm.push(Reply::text(text));
    }
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let any = json!({ "any": [ { "max_rounds": 10 }, { "keyword": "DONE" } ] });
    let plan = chat_plan(&["a", "b"], json!({ "termination": any }));
    let out = final_data(&app.stream_run(run_body(plan, "go")).await)["output"].clone();
    assert_eq!(out["rounds"], 3, "the keyword ended it: {out}");
    // `all` waits for every condition: the keyword in round 1 alone does not end the chat.
    llm.push(Reply::text("DONE early"));
    llm.push(Reply::text("DONE again"));
    let all = json!({ "all": [ { "max_rounds": 2 }, { "keyword": "DONE" } ] });
    let plan = chat_plan(&["a", "b"], json!({ "termination": all }));
    let out = final_data(&app.stream_run(run_body(plan, "go")).await)["output"].clone();
    assert_eq!(out["rounds"], 2, "{out}");
}

#[tokio::test]
async fn groupchat_streaming_speaker() {
    let app = spawn_app(|_| {}).await;
    let plan = chat_plan(
        &["ann", "bob", "cy"],
        json!({ "termination": { "max_rounds": 4 } }),
    );
    let events = app.stream_run(run_body(plan, "the launch plan")).await;
    assert_well_formed(&events, 1);
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let said = data_of(&events, "speaker");
    assert_eq!(said.len(), 4);
    let rounds: Vec<u64> = said.iter().map(|d| d["round"].as_u64().unwrap()).collect();
    assert_eq!(rounds, [1, 2, 3, 4]);
    assert!(
        events
            .iter()
            .filter(|e| e.kind() == "speaker")
            .all(|e| e.json()["step_id"] == "chat")
    );
    // The offline model speaks in the chat, naming itself.
    let out = &fin["output"];
    assert_eq!(
        out["transcript"][1]["text"],
        "bob (turn 1): my take on \"the launch plan\"."
    );
    assert_eq!(out["last"], "ann (turn 2): my take on \"the launch plan\".");
}

#[tokio::test]
async fn groupchat_random_selector_repeats_with_its_seed() {
    let app = spawn_app(|_| {}).await;
    let selector = json!({ "kind": "random", "seed": 42 });
    let plan = chat_plan(
        &["a", "b", "c"],
        json!({ "selector": selector, "max_rounds": 8 }),
    );
    let first = speakers(&app.stream_run(run_body(plan.clone(), "x")).await);
    let second = speakers(&app.stream_run(run_body(plan, "x")).await);
    assert_eq!(first.len(), 8);
    assert_eq!(first, second);
    assert_ne!(
        first,
        ["a", "b", "c", "a", "b", "c", "a", "b"],
        "not round robin"
    );
}

#[tokio::test]
async fn groupchat_llm_selector_retries_then_falls_back() {
    let llm = ScriptedLlm::start().await;
    // Round 1: not JSON, then an unknown name: the fallback (round robin) picks `a`.
    llm.push_for("You moderate a group chat", Reply::text("b should talk"));
    llm.push_for(
        "You moderate a group chat",
        Reply::json(json!({ "speaker": "zed" })),
    );
    // Round 2: a valid choice.
    llm.push_for(
        "You moderate a group chat",
        Reply::json(json!({ "speaker": "c" })),
    );
    llm.push_for("agent a", Reply::text("from a"));
    llm.push_for("agent c", Reply::text("from c"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let selector = json!({ "kind": "llm", "retries": 1, "fallback": "round_robin" });
    let plan = chat_plan(
        &["a", "b", "c"],
        json!({ "selector": selector, "max_rounds": 2 }),
    );
    let events = app.stream_run(run_body(plan, "decide")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(speakers(&events), ["a", "c"]);
    let errors = data_of(&events, "error");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["code"], "invalid_llm_output");
    assert!(
        errors[0]["message"]
            .as_str()
            .unwrap()
            .contains("`zed` is not a participant")
    );
    let selector = asked(&llm, "You moderate a group chat");
    assert_eq!(selector.len(), 3);
    // The wrong answer went back with what was wrong.
    let retry = contents(&selector[1]);
    assert!(retry.last().unwrap().contains("not JSON"), "{retry:?}");
    assert_eq!(
        llm.requests()[0]["response_format"]["json_schema"]["schema"]["properties"]["speaker"]["enum"],
        json!(["a", "b", "c"])
    );
    // The second selection sees who spoke last.
    assert!(contents(&selector[2])[1].contains("Last speaker: `a`"));
}

#[tokio::test]
async fn groupchat_five_agents_twenty_rounds() {
    let app = spawn_app(|_| {}).await;
    let names = ["a1", "a2", "a3", "a4", "a5"];
    let plan = chat_plan(&names, json!({}));
    let events = app.stream_run(run_body(plan, "a long meeting")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let out = &fin["output"];
    assert_eq!(out["rounds"], 20, "the default safety limit");
    let order = speakers(&events);
    assert_eq!(order.len(), 20);
    for (i, s) in order.iter().enumerate() {
        assert_eq!(s, names[i % 5]);
    }
    assert_eq!(out["last"], "a5 (turn 4): my take on \"a long meeting\".");
    assert_eq!(fin["usage"]["llm_calls"], 20);
}

#[tokio::test]
async fn groupchat_token_budget() {
    let llm = ScriptedLlm::start().await;
    for n in 0..6 {
        llm.push(Reply::text(format!("line {n}")).usage(30, 10));
    }
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = chat_plan(
        &["a", "b"],
        json!({ "termination": { "token_budget": 100 } }),
    );
    let events = app.stream_run(run_body(plan, "spend")).await;
    let fin = final_data(&events);
    assert_eq!(fin["output"]["rounds"], 3, "40 tokens a round: {fin}");
    assert_eq!(fin["usage"]["prompt_tokens"], 90);
    assert_eq!(fin["usage"]["completion_tokens"], 30);
}

#[tokio::test]
async fn groupchat_resumed_after_a_restart_does_not_repeat_turns() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent a", Reply::text("a says"));
    llm.push_for("agent b", Reply::text("never finished").stall_after(2));
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        c.llm.openai.read_timeout_ms = 30_000;
    })
    .await;
    let plan = chat_plan(&["a", "b", "c"], json!({ "max_rounds": 3 }));
    let run = app.create_run(run_body(plan, "resume me")).await;
    let id = run["id"].as_str().unwrap().to_owned();
    llm.wait_for_requests(2).await;
    let dir = app.stop().await;
    llm.push_for("agent b", Reply::text("b says"));
    llm.push_for("agent c", Reply::text("c says"));
    let app = spawn_app_in(dir, |c| use_scripted(c, &llm)).await;
    let fin = final_data(&app.follow(&id).await);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let texts: Vec<&str> = fin["output"]["transcript"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["a says", "b says", "c says"]);
    assert_eq!(
        asked(&llm, "agent a").len(),
        1,
        "a's finished turn was not taken again"
    );
    assert_eq!(asked(&llm, "agent b").len(), 2);
    let history = app.history(&id).await;
    let rounds: Vec<u64> = history
        .iter()
        .filter(|e| e["kind"] == "speaker")
        .map(|e| e["data"]["round"].as_u64().unwrap())
        .collect();
    assert_eq!(rounds, [1, 2, 3]);
}

#[tokio::test]
async fn handoff_offline_model_hands_off_once() {
    let app = spawn_app(|_| {}).await;
    let team = agents(&[
        ("triage", json!(["billing", "tech"])),
        ("billing", json!(["triage"])),
        ("tech", json!([])),
    ]);
    let plan = handoff_plan(team, json!({ "start": "triage" }));
    let events = app.stream_run(run_body(plan, "a billing question")).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    // The offline model hands off by the agent's name, once: billing answers.
    assert_eq!(
        handoffs(&events),
        vec![("triage".to_owned(), "billing".to_owned())]
    );
    let reason = &data_of(&events, "handoff")[0]["reason"];
    assert_eq!(reason, "The request is for billing.");
    assert!(
        fin["output"]
            .as_str()
            .unwrap()
            .contains("a billing question"),
        "{fin}"
    );
}

#[tokio::test]
async fn groupchat_llm_selection_is_not_asked_again_after_a_restart() {
    let llm = ScriptedLlm::start().await;
    let moderator = "You moderate a group chat";
    llm.push_for(moderator, Reply::json(json!({ "speaker": "b" })));
    llm.push_for(moderator, Reply::json(json!({ "speaker": "a" })));
    llm.push_for("agent b", Reply::text("never finished").stall_after(2));
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        c.llm.openai.read_timeout_ms = 30_000;
    })
    .await;
    let selector = json!({ "kind": "llm" });
    let plan = chat_plan(
        &["a", "b"],
        json!({ "selector": selector, "max_rounds": 2 }),
    );
    let run = app.create_run(run_body(plan, "pick well")).await;
    let id = run["id"].as_str().unwrap().to_owned();
    llm.wait_for_requests(2).await;
    let dir = app.stop().await;
    llm.push_for("agent b", Reply::text("b first"));
    llm.push_for("agent a", Reply::text("a second"));
    let app = spawn_app_in(dir, |c| use_scripted(c, &llm)).await;
    let fin = final_data(&app.follow(&id).await);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"]["last"], "a second");
    assert_eq!(fin["output"]["transcript"][0]["agent"], "b");
    assert_eq!(asked(&llm, moderator).len(), 2, "round 1's choice was kept");
    assert_eq!(asked(&llm, "agent b").len(), 2);
}

#[tokio::test]
async fn handoff_waiting_for_a_human_resumes_without_asking_the_agent_again() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent helper", Reply::text("Which account?"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let team = agents(&[("helper", json!([]))]);
    let plan = handoff_plan(
        team,
        json!({ "start": "helper", "on_no_handoff": "ask_human" }),
    );
    let run = app.create_run(run_body(plan, "unlock it")).await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut reader = app.events(&id).await;
    let asked_first = next_input(&mut reader).await;
    drop(reader);
    let dir = app.stop().await;
    let app = spawn_app_in(dir, |c| use_scripted(c, &llm)).await;
    let mut reader = app.events(&id).await;
    skip_to(&mut reader, "input_required", 1).await;
    let again = next_input(&mut reader).await;
    assert_eq!(
        again, asked_first,
        "the same question, asked again after the restart"
    );
    let step = again["step_id"].as_str().unwrap();
    assert_eq!(
        app.answer(&id, step, json!({ "done": true }))
            .await
            .status(),
        202
    );
    let fin = final_data(&to_final(reader).await);
    assert_eq!(fin["output"], "Which account?", "{fin}");
    assert_eq!(
        asked(&llm, "agent helper").len(),
        1,
        "the agent's turn was not taken again"
    );
}

#[tokio::test]
async fn handoff_last_n_one_hands_over_the_last_turn_not_the_transfer() {
    let llm = ScriptedLlm::start().await;
    llm.push_for("agent triage", transfer("billing", "a refund"));
    llm.push_for("agent billing", Reply::text("refunded"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let team = agents(&[
        (
            "triage",
            json!([{ "to": "billing", "context": "last_n", "last_n": 1 }]),
        ),
        ("billing", json!([])),
    ]);
    let plan = handoff_plan(team, json!({ "start": "triage" }));
    let events = app.stream_run(run_body(plan, "MY ORDER #7")).await;
    assert_eq!(final_data(&events)["output"], "refunded");
    // The last turn of the conversation is the user's request; then the handoff note.
    let billing = contents(&asked(&llm, "agent billing")[0]);
    assert_eq!(billing.len(), 3, "{billing:?}");
    assert_eq!(billing[1], "MY ORDER #7");
    assert!(billing[2].contains("a refund"), "{billing:?}");
}
