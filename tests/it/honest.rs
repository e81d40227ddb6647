//! What a run reports is what happened: every event of nested work carries its path, live and
//! in history; a run's `completion`, its reason and its step counts follow from what its steps
//! did, at every nesting level and across a kill -9; a limit keeps what completed.

use serde_json::{Value, json};

use crate::support::scripted_llm::{Reply, ScriptedLlm};
use crate::support::*;

/// Steps at every nesting level, each calling a tool or the model: children of `sequential`,
/// `parallel` and `loop`, and a step of a nested workflow.
fn nested_plan() -> Value {
    let calc = |id: &str, expression: &str| {
        json!({ "id": id, "kind": "tool",
                "input": { "tool": "math.calculate", "arguments": { "expression": expression } } })
    };
    json!({
        "workflows": { "inner": { "name": "inner", "steps": [calc("w1", "3 + 3")] } },
        "steps": [
            { "id": "seq", "kind": "sequential", "input": { "steps": [
                calc("t1", "1 + 1"),
                { "id": "l1", "kind": "llm", "input": { "prompt": "say hi" } } ] } },
            { "id": "par", "kind": "parallel", "input": { "steps": [calc("t2", "2 + 2")] } },
            { "id": "lp", "kind": "loop", "input": { "for_each": [1, 2], "max_iterations": 2,
              "steps": [calc("t3", "{{ item }} + 1")] } },
            { "id": "wf", "kind": "workflow", "input": { "workflow": "inner" } },
        ]
    })
}

/// The nested steps' ids and the path their events must carry (a loop's children are below
/// the iteration, `lp[<index>]`).
fn expected_path(step_id: &str) -> Option<&'static str> {
    match step_id {
        "t1" | "l1" => Some("seq"),
        "t2" => Some("par"),
        "t3" => Some("lp["),
        "w1" => Some("wf"),
        _ => None,
    }
}

/// Every event of a nested step, of every kind, carries its path.
fn assert_nested_paths(events: &[Value]) {
    let mut kinds_seen = std::collections::BTreeSet::new();
    for event in events {
        let Some(step_id) = event["step_id"].as_str() else {
            continue;
        };
        let Some(want) = expected_path(step_id) else {
            continue;
        };
        let kind = event["kind"].as_str().unwrap_or_default();
        let path = event["path"].as_str().unwrap_or_else(|| {
            panic!("a `{kind}` event of nested step `{step_id}` has no path: {event}")
        });
        assert!(
            path.starts_with(want),
            "{kind} of {step_id} at `{path}`: {event}"
        );
        kinds_seen.insert(kind.to_owned());
    }
    for kind in ["step", "tool_call", "tool_result", "token", "usage"] {
        assert!(
            kinds_seen.contains(kind),
            "no `{kind}` event of a nested step: {kinds_seen:?}"
        );
    }
}

#[tokio::test]
async fn every_event_of_nested_work_carries_its_path_live_and_in_history() {
    let app = spawn_app(|_| {}).await;
    let events = app
        .stream_run(json!({ "input": "go", "orchestration": "fixed", "plan": nested_plan() }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let live: Vec<Value> = events.iter().map(|e| e.json()).collect();
    assert_nested_paths(&live);

    let id = live[0]["run_id"].as_str().unwrap();
    let history = app.stored_events(id).await;
    assert_nested_paths(&history);
    assert_eq!(history, live, "history tells what the stream told");
}

fn calc(id: &str, expression: &str) -> Value {
    json!({ "id": id, "kind": "tool",
            "input": { "tool": "math.calculate", "arguments": { "expression": expression } } })
}

/// A run ended by a limit keeps, in its final event and its run object, the outputs of the
/// steps that completed before it.
#[tokio::test]
async fn a_run_ended_by_a_limit_keeps_what_completed() {
    let app = spawn_app(|_| {}).await;
    let mut b = calc("b", "{{ steps.a.output.result }} + 1");
    b["depends_on"] = json!(["a"]);
    let mut c = calc("c", "{{ steps.b.output.result }} + 1");
    c["depends_on"] = json!(["b"]);
    let seq = json!({ "id": "seq", "kind": "sequential", "depends_on": ["a"],
        "input": { "steps": [calc("s1", "10 + 1"), calc("s2", "10 + 2")] } });
    let cases = [
        // At the top level: a and b completed, c is one step too many.
        (
            json!({ "steps": [calc("a", "1 + 1"), b, c] }),
            2,
            json!(["a", "b"]),
        ),
        // Inside a sequential step: the limit falls on its second child.
        (
            json!({ "steps": [calc("a", "1 + 1"), seq] }),
            3,
            json!(["a"]),
        ),
    ];
    for (plan, max_steps, kept) in cases {
        let events = app
            .stream_run(
                json!({ "input": "go", "orchestration": "fixed", "plan": plan,
                                "limits": { "max_steps": max_steps } }),
            )
            .await;
        let fin = final_data(&events);
        assert_eq!(fin["status"], "failed", "{fin}");
        assert_eq!(fin["error"]["code"], "step_limit_exceeded", "{fin}");
        let output = fin["output"]
            .as_object()
            .unwrap_or_else(|| panic!("no output: {fin}"));
        let ids: Vec<&String> = output.keys().collect();
        assert_eq!(json!(ids), kept, "{fin}");
        assert_eq!(fin["output"]["a"]["result"], 2);
        let id = events[0].json()["run_id"].as_str().unwrap().to_owned();
        let (_, run) = app.get_json(&format!("/v1/runs/{id}")).await;
        assert_eq!(run["output"], fin["output"], "the run object keeps it too");
    }
}

/// `completion`, `completion_reason` and `step_counts` agree in the final event and the run
/// object; the final event's data.
async fn final_and_run(app: &TestApp, body: Value) -> Value {
    let events = app.stream_run(body).await;
    let fin = final_data(&events);
    let id = events[0].json()["run_id"].as_str().unwrap().to_owned();
    let (_, run) = app.get_json(&format!("/v1/runs/{id}")).await;
    for key in [
        "completion",
        "completion_reason",
        "step_counts",
        "output",
        "error",
    ] {
        assert_eq!(
            run[key], fin[key],
            "{key}: the run object says what `final` said"
        );
    }
    fin
}

fn counts(completed: u64, failed: u64, skipped: u64) -> Value {
    json!({ "completed": completed, "failed": failed, "skipped": skipped })
}

/// The README's reactive example: `read` fails, the offline re-planner replaces it and all
/// that needed it by one step that says what could not be done. That is not the task done.
#[tokio::test]
async fn a_recovery_answer_standing_in_for_the_task_is_partial_and_says_why() {
    let app = spawn_app(|_| {}).await;
    let fin = final_and_run(
        &app,
        json!({ "input": "read missing.txt, analyse it, then write a summary",
                "orchestration": "reactive" }),
    )
    .await;
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["completion"], "partial", "{fin}");
    assert_eq!(fin["error"]["code"], "file_not_found", "{fin}");
    let reason = fin["completion_reason"].as_str().unwrap();
    assert!(
        reason.contains("not done") && reason.contains("`read`") && reason.contains("version 2"),
        "{reason}"
    );
    // read failed; measure, analyse, summarise and answer never ran; recover completed.
    assert_eq!(fin["step_counts"], counts(1, 1, 4), "{fin}");
}

/// A failure is `partial` under continue-on-failure wherever it happens: a top-level step, or
/// a child of `sequential`, `parallel`, `loop` or a nested workflow failing its parent. A
/// branch not taken is not a failure.
#[tokio::test]
async fn completion_and_counts_say_what_happened_at_every_nesting_level() {
    let app = spawn_app(|_| {}).await;
    let bad = calc("bad", "1 / 0");
    let after = json!({ "id": "after", "kind": "tool", "depends_on": ["failing"],
        "input": { "tool": "math.calculate", "arguments": { "expression": "1" } } });
    let nestings = [
        bad.clone(),
        json!({ "id": "seq", "kind": "sequential", "input": { "steps": [calc("ok", "1"), bad.clone()] } }),
        json!({ "id": "par", "kind": "parallel", "input": { "steps": [calc("ok", "1"), bad.clone()] } }),
        json!({ "id": "lp", "kind": "loop", "input": { "for_each": [1], "max_iterations": 1,
            "steps": [bad.clone()] } }),
        json!({ "id": "wf", "kind": "workflow", "input": { "workflow": "inner" } }),
    ];
    for failing in nestings {
        let mut failing = failing;
        let where_ = failing["id"].as_str().unwrap().to_owned();
        failing["id"] = json!("failing");
        let plan = json!({
            "settings": { "stop_on_first_failure": false },
            "workflows": { "inner": { "name": "inner", "steps": [calc("w", "1"), bad.clone()] } },
            "steps": [calc("first", "2 + 2"), failing, after.clone()],
            "output": "{{ steps.first.output.result }}",
        });
        let fin = final_and_run(
            &app,
            json!({ "input": "go", "orchestration": "fixed", "plan": plan }),
        )
        .await;
        assert_eq!(fin["completion"], "partial", "{where_}: {fin}");
        assert_eq!(fin["output"], 4, "{where_}: {fin}");
        assert_eq!(fin["error"]["code"], "math_error", "{where_}: {fin}");
        let reason = fin["completion_reason"].as_str().unwrap();
        assert!(reason.contains("`failing`"), "{where_}: {reason}");
        // first completed; failing failed; after, which needed it, was skipped.
        assert_eq!(fin["step_counts"], counts(1, 1, 1), "{where_}: {fin}");
    }

    let branching = json!({ "steps": [
        { "id": "pick", "kind": "branch", "input": { "condition": "1 == 1",
          "then": ["yes"], "else": ["no"] } },
        { "id": "yes", "kind": "tool", "depends_on": ["pick"],
          "input": { "tool": "math.calculate", "arguments": { "expression": "1" } } },
        { "id": "no", "kind": "tool", "depends_on": ["pick"],
          "input": { "tool": "math.calculate", "arguments": { "expression": "2" } } },
    ] });
    let fin = final_and_run(
        &app,
        json!({ "input": "go", "orchestration": "fixed", "plan": branching }),
    )
    .await;
    assert_eq!(fin["completion"], "success", "{fin}");
    assert_eq!(fin["step_counts"], counts(2, 0, 1), "{fin}");
    assert_eq!(
        fin["completion_reason"], "2 steps completed, 1 skipped",
        "{fin}"
    );

    let simple = final_and_run(&app, json!({ "input": "hello", "orchestration": "simple" })).await;
    assert_eq!(simple["completion"], "success", "{simple}");
    assert_eq!(
        simple["step_counts"],
        Value::Null,
        "a run with no plan has no steps to count"
    );
    assert_eq!(
        simple["completion_reason"], "the model answered",
        "{simple}"
    );
}

/// A re-planner's answer says whether the new plan does the whole task; the run is judged on
/// its whole history after a kill -9 and a resume, and a limit keeps what completed then too.
#[tokio::test]
async fn completion_and_limits_hold_across_a_kill_9() {
    let llm = ScriptedLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("workspace")).unwrap();
    let server = Server::start_scripted(dir.path(), &llm).await;
    let read = json!({ "id": "read", "kind": "tool", "depends_on": ["fact"],
        "input": { "tool": "fs.read", "arguments": { "path": "missing.txt" } } });
    let ask = json!({ "id": "ask", "kind": "user_input", "depends_on": ["fact"],
        "input": { "prompt": "The file is missing. Say so?" } });
    let v1 = json!({ "steps": [calc("fact", "6 * 7"), read] });
    let start = |body: Value| {
        let resp = server
            .client
            .post(server.url("/v1/runs"))
            .json(&body)
            .send();
        async move {
            let run: Value = resp.await.unwrap().json().await.unwrap();
            run["id"].as_str().unwrap().to_owned()
        }
    };
    // Two reactive runs whose step `read` failed; each re-planner answer puts a question in
    // its place, once as the whole task and once as a stand-in for it.
    let mut waiting = Vec::new();
    for (completes_task, completion) in [(false, "partial"), (true, "success")] {
        llm.push(Reply::json(
            json!({ "strategy": "alternative", "reason": "ask instead",
            "completes_task": completes_task,
            "plan": { "steps": [calc("fact", "6 * 7"), ask.clone()] } }),
        ));
        let id = start(json!({ "input": "x", "orchestration": "reactive", "plan": v1 })).await;
        drop(server.until_asked(&id, 1).await);
        waiting.push((id, completion));
    }
    // A fixed plan that passes its step limit after the question.
    let mut b = calc("b", "1 + 1");
    b["depends_on"] = json!(["ask"]);
    let mut c = calc("c", "2 + 2");
    c["depends_on"] = json!(["b"]);
    let mut asked = ask.clone();
    asked["depends_on"] = json!(["a"]);
    let limited = start(json!({ "input": "x", "orchestration": "fixed",
        "plan": { "steps": [calc("a", "1"), asked, b, c] }, "limits": { "max_steps": 3 } }))
    .await;
    drop(server.until_asked(&limited, 1).await);
    server.kill();

    // Resumed, each run asks again (its second `input_required`) before it takes the answer.
    let server = Server::start_scripted(dir.path(), &llm).await;
    let run_of = |id: &str| {
        let resp = server
            .client
            .get(server.url(&format!("/v1/runs/{id}")))
            .send();
        async move { resp.await.unwrap().json::<Value>().await.unwrap() }
    };
    for (id, completion) in waiting {
        let fin = server.answered_to_final(&id, 2, "ask", json!("yes")).await;
        assert_eq!(fin["completion"], completion, "{fin}");
        // fact completed (kept by version 2), read failed, ask completed.
        assert_eq!(fin["step_counts"], counts(2, 1, 0), "{fin}");
        let reason = fin["completion_reason"].as_str().unwrap();
        if completion == "partial" {
            assert_eq!(fin["error"]["code"], "file_not_found", "{fin}");
            assert!(
                reason.contains("does only part of it (ask instead)"),
                "{reason}"
            );
        } else {
            assert_eq!(
                reason,
                "2 steps completed; plan version 2 did the whole task after 1 step failed in an earlier version"
            );
        }
        assert_causal(&server.stored_events(&id).await);
        let run = run_of(&id).await;
        for key in ["completion", "completion_reason", "step_counts"] {
            assert_eq!(run[key], fin[key], "{key}");
        }
    }
    let fin = server
        .answered_to_final(&limited, 2, "ask", json!("yes"))
        .await;
    assert_eq!(fin["error"]["code"], "step_limit_exceeded", "{fin}");
    let kept: Vec<&String> = fin["output"].as_object().unwrap().keys().collect();
    assert_eq!(kept, ["a", "ask", "b"], "{fin}");
    assert_eq!(fin["step_counts"], counts(3, 0, 1), "{fin}");
    assert_eq!(run_of(&limited).await["output"], fin["output"]);
}

/// An agent's `history` hands over whole exchanges (each earlier agent's prompt, then its
/// answer), at the top level and inside a `sequential` and a `loop` step, and after a kill -9
/// between the draft and the edit (the draft's prompt is read back from the stored history).
#[tokio::test]
async fn an_agents_history_is_whole_exchanges_at_every_level_and_after_a_kill_9() {
    let llm = ScriptedLlm::start().await;
    for draft in ["draft one", "draft two", "draft three"] {
        llm.push_for("You are the writer", Reply::text(draft));
    }
    for edit in ["edit one", "edit two", "edit three"] {
        llm.push_for("You are the editor", Reply::text(edit));
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_scripted(dir.path(), &llm).await;
    let agent = |id: &str, who: &str, prompt: &str, history: &[&str]| {
        json!({ "id": id, "kind": "agent",
                "input": { "agent": who, "prompt": prompt, "history": history } })
    };
    let with_deps = |mut step: Value, deps: &[&str]| {
        step["depends_on"] = json!(deps);
        step
    };
    let plan = json!({
        "agents": {
            "writer": { "description": "Writes.", "instructions": "You are the writer." },
            "editor": { "description": "Edits.", "instructions": "You are the editor." },
        },
        "steps": [
            agent("w", "writer", "Draft a line about {{ input }}", &[]),
            { "id": "ask", "kind": "user_input", "depends_on": ["w"], "input": { "prompt": "Edit?" } },
            with_deps(agent("e", "editor", "Tighten it", &["w"]), &["ask"]),
            { "id": "seq", "kind": "sequential", "depends_on": ["e"], "input": { "steps": [
                agent("w2", "writer", "Draft another", &[]),
                agent("e2", "editor", "Tighten that one", &["w2"]) ] } },
            { "id": "lp", "kind": "loop", "depends_on": ["seq"], "input": {
                "for_each": ["rain"], "max_iterations": 1, "steps": [
                agent("w3", "writer", "Draft about {{ local.item }}", &[]),
                agent("e3", "editor", "Tighten the {{ local.item }} one", &["w3"]) ] } },
        ]
    });
    let body = json!({ "input": "the sea", "orchestration": "fixed", "plan": plan });
    let resp = server
        .client
        .post(server.url("/v1/runs"))
        .json(&body)
        .send();
    let id = resp.await.unwrap().json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    drop(server.until_asked(&id, 1).await);
    server.kill();

    let server = Server::start_scripted(dir.path(), &llm).await;
    let fin = server.answered_to_final(&id, 2, "ask", json!("yes")).await;
    assert_eq!(fin["completion"], "success", "{fin}");
    assert_causal(&server.stored_events(&id).await);
    let edits: Vec<Vec<(String, String)>> = llm
        .requests()
        .iter()
        .filter(|r| r["messages"][0]["content"] == "You are the editor.")
        .map(|r| {
            r["messages"].as_array().unwrap()[1..]
                .iter()
                .map(|m| {
                    let text = m["content"].as_str().unwrap_or_default().to_owned();
                    (m["role"].as_str().unwrap().to_owned(), text)
                })
                .collect()
        })
        .collect();
    let exchange = |asked: &str, draft: &str, now: &str| {
        vec![
            ("user".to_owned(), asked.to_owned()),
            ("assistant".to_owned(), draft.to_owned()),
            ("user".to_owned(), now.to_owned()),
        ]
    };
    assert_eq!(
        edits,
        [
            exchange("Draft a line about the sea", "draft one", "Tighten it"),
            exchange("Draft another", "draft two", "Tighten that one"),
            exchange("Draft about rain", "draft three", "Tighten the rain one"),
        ]
    );
}

/// Events are in causal order: every event of a step (its tokens, tool calls, questions, usage,
/// children) comes after the step's `running` and before its end, a nested step runs inside
/// its parent, and a tool result follows its call. Checked over a whole stream.
fn assert_causal(events: &[Value]) {
    let key_of = |e: &Value| -> Option<String> {
        let id = e["step_id"].as_str()?;
        Some(match e["path"].as_str() {
            Some(path) => format!("{path}/{id}"),
            None => id.to_owned(),
        })
    };
    let mut open = std::collections::HashSet::new();
    let mut calls = std::collections::HashSet::new();
    for e in events {
        let Some(key) = key_of(e) else { continue };
        let (kind, seq) = (e["kind"].as_str().unwrap(), &e["seq"]);
        if let Some(path) = e["path"].as_str() {
            // A loop's children sit below the iteration: `lp[0]` is inside step `lp`.
            let parent = match path.strip_suffix(']').and_then(|p| p.rsplit_once('[')) {
                Some((step, _)) => step,
                None => path,
            };
            assert!(
                open.contains(parent),
                "#{seq} {kind} of `{key}` outside its parent: {e}"
            );
        }
        match (kind, e["data"]["status"].as_str()) {
            ("step", Some("running")) => {
                open.insert(key);
            }
            ("step", Some("skipped")) => {}
            ("step", Some("completed" | "failed" | "cancelled")) => {
                assert!(open.remove(&key), "#{seq} `{key}` ended before it ran: {e}");
            }
            _ => {
                assert!(
                    open.contains(&key),
                    "#{seq} {kind} of `{key}` outside its run: {e}"
                );
                let call = e["data"]["call_id"].clone();
                if kind == "tool_call" {
                    calls.insert(call.to_string());
                } else if kind == "tool_result" {
                    assert!(
                        calls.contains(&call.to_string()),
                        "#{seq} result before its call: {e}"
                    );
                }
            }
        }
    }
}

fn example(path: &str) -> Value {
    let file = format!("{}/examples/{path}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap()
}

/// The team examples (a handoff whose billing desk answers from a tool result, a sequential
/// team, a group chat) and plans with model and tool work at every nesting level stream, and
/// store, their events in causal order while tokens still stream live.
#[tokio::test]
async fn events_are_stored_and_streamed_in_causal_order_at_every_level() {
    let app = spawn_app(|_| {}).await;
    for a in ["tech", "billing", "triage"] {
        let (status, body) = app
            .put_json(
                &format!("/v1/agents/{a}"),
                &example(&format!("agents/{a}.json")),
            )
            .await;
        assert!(status < 300, "{status} {body}");
    }
    let calc = |id: &str| calc(id, "40 + 2");
    let with_deps = |mut step: Value, deps: &[&str]| {
        step["depends_on"] = json!(deps);
        step
    };
    let llm =
        |id: &str, prompt: &str| json!({ "id": id, "kind": "llm", "input": { "prompt": prompt } });
    let nested = json!({ "input": "go", "orchestration": "fixed", "plan": {
        "workflows": { "inner": { "name": "inner",
            "steps": [calc("w1"), with_deps(llm("w2", "say {{ steps.w1.output.result }}"), &["w1"])] } },
        "steps": [
            { "id": "seq", "kind": "sequential", "input": { "steps": [
                calc("t1"), llm("l1", "say {{ steps.t1.output.result }}"),
                { "id": "par", "kind": "parallel", "input": { "steps": [
                    llm("l2", "hello"),
                    { "id": "inner_seq", "kind": "sequential", "input": { "steps": [
                        calc("t2"), llm("l3", "say {{ steps.t2.output.result }}")] } } ] } } ] } },
            { "id": "lp", "kind": "loop", "input": { "for_each": [1, 2], "max_iterations": 2,
              "steps": [calc("t3"), llm("l4", "say {{ local.item }}")] } },
            { "id": "wf", "kind": "workflow", "input": { "workflow": "inner" } },
        ] } });
    let runs = [
        example("teams/handoff.json"),
        example("teams/sequential.json"),
        example("teams/chat.json"),
        nested,
        json!({ "input": "What is 10 + 20?", "orchestration": "simple" }),
    ];
    for body in runs {
        let events = app.stream_run(body.clone()).await;
        let fin = final_data(&events);
        assert_eq!(fin["completion"], "success", "{fin}");
        let live: Vec<Value> = events.iter().map(|e| e.json()).collect();
        assert!(
            live.iter().any(|e| e["kind"] == "token"),
            "tokens stream: {body}"
        );
        assert_causal(&live);
        let id = live[0]["run_id"].as_str().unwrap();
        assert_eq!(
            app.stored_events(id).await,
            live,
            "history tells what the stream told"
        );
    }
}

/// A question inside a `sequential` step, after a tool: the step is announced running before
/// it asks, and the tool it follows before both.
#[tokio::test]
async fn a_nested_question_comes_after_what_led_to_it() {
    let app = spawn_app(|_| {}).await;
    let plan = json!({ "steps": [{ "id": "seq", "kind": "sequential", "input": { "steps": [
        calc("t1", "1 + 1"),
        { "id": "ask", "kind": "user_input", "input": { "prompt": "Go on?" } } ] } }] });
    let run = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut reader = app.events(&id).await;
    skip_to(&mut reader, "input_required", 1).await;
    let answered = app.answer(&id, "ask", json!("yes")).await;
    assert_eq!(answered.status(), 202);
    let fin = final_data(&to_final(reader).await);
    assert_eq!(fin["completion"], "success", "{fin}");
    assert_causal(&app.stored_events(&id).await);
}

/// Ten model calls streaming tokens at once, in `parallel`: every event reaches the live
/// reader, in seq order, as stored. Events of one run are queued in the order their seqs are
/// given: queued out of order, a reader met a gap the store could not fill yet, replayed past
/// it, and lost the event in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_emitted_at_once_reach_a_live_reader_in_seq_order() {
    let app = spawn_app(|_| {}).await;
    let children: Vec<Value> = (0..10)
        .map(|i| json!({ "id": format!("l{i}"), "kind": "llm", "input": { "prompt": format!("write {i}") } }))
        .collect();
    let plan = json!({ "settings": { "max_parallel_steps": 10 }, "steps": [
        { "id": "par", "kind": "parallel", "input": { "steps": children } }] });
    for _ in 0..5 {
        let body = json!({ "input": "go", "orchestration": "fixed", "plan": plan });
        let events = app.stream_run(body).await;
        let live: Vec<Value> = events.iter().map(|e| e.json()).collect();
        let seqs: Vec<u64> = live.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        let want: Vec<u64> = (1..=seqs.len() as u64).collect();
        assert_eq!(seqs, want, "every seq, in order");
        let id = live[0]["run_id"].as_str().unwrap();
        assert_eq!(
            app.stored_events(id).await,
            live,
            "the stream told what history tells"
        );
    }
}
