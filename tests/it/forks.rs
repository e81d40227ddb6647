//! Time travel over HTTP: `POST /v1/runs/{id}/fork` from a checkpoint or before a step, with
//! another input or plan, at every nesting level, across a restart, for plan runs, reactive
//! runs and conversations; the family links (`parent`, `?parent_id=`); every bad request.

use serde_json::{Value, json};

use crate::support::scripted_llm::{Reply, ScriptedLlm};
use crate::support::server::{skip_to, to_final};
use crate::support::tools::{Probe, nested_plan};
use crate::support::*;

fn counted(id: &str, deps: &[&str], value: &str) -> Value {
    json!({ "id": id, "kind": "tool", "depends_on": deps,
            "input": { "tool": "test.count", "arguments": { "key": id, "value": value } } })
}

/// a → b → c, each counted; c echoes the input's `word`, and is the run's output.
fn chain() -> Value {
    json!({ "steps": [
        counted("a", &[], "A"),
        counted("b", &["a"], "{{ steps.a.output.value }}B"),
        counted("c", &["b"], "{{ steps.b.output.value }}-{{ input.word }}"),
    ], "output": "{{ steps.c.output.value }}" })
}

async fn fork(app: &TestApp, id: &str, body: Value) -> (u16, Value) {
    app.post_json(&format!("/v1/runs/{id}/fork"), &body).await
}

/// Forks `id` as `body` asks (201) and follows the fork to its end.
async fn fork_to_end(app: &TestApp, id: &str, body: Value) -> (Value, Vec<SseMessage>) {
    let (status, forked) = fork(app, id, body.clone()).await;
    assert_eq!(status, 201, "{body} → {forked}");
    let events = app.follow(forked["id"].as_str().unwrap()).await;
    (forked, events)
}

fn stepped(events: &[SseMessage]) -> Vec<String> {
    let mut ids: Vec<String> = events
        .iter()
        .map(SseMessage::json)
        .filter(|e| e["kind"] == "step" && e["data"]["status"] == "running")
        .map(|e| e["step_id"].as_str().unwrap_or_default().to_owned())
        .collect();
    ids.dedup();
    ids
}

#[tokio::test]
async fn a_fork_resumes_from_the_chosen_checkpoint_without_re_running_what_came_before_it() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let body = json!({ "input": { "word": "one" }, "orchestration": "fixed", "plan": chain() });
    let events = app.stream_run(body).await;
    assert_eq!(final_data(&events)["output"], "AB-one");
    let parent = events[0].json()["run_id"].as_str().unwrap().to_owned();
    let (_, checkpoints) = app
        .get_json(&format!("/v1/runs/{parent}/checkpoints"))
        .await;
    let first = &checkpoints[0];
    assert_eq!(
        first["state"]["steps"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["a"],
        "{first}"
    );

    // From checkpoint 1 (after `a`): `a` is not run again, its output is kept.
    let (forked, events) = fork_to_end(&app, &parent, json!({ "checkpoint": 1 })).await;
    let fork_id = forked["id"].as_str().unwrap().to_owned();
    assert_eq!(
        forked["parent"],
        json!({ "run_id": parent, "checkpoint": 1 })
    );
    assert_eq!(forked["status"], "queued");
    let fin = final_data(&events);
    assert_eq!(
        (fin["status"].clone(), fin["output"].clone()),
        (json!("succeeded"), json!("AB-one")),
        "{fin}"
    );
    assert_eq!(
        (probe.calls("a"), probe.calls("b"), probe.calls("c")),
        (1, 2, 2)
    );
    assert_eq!(stepped(&events), ["b", "c"]);
    let first = events[..3].iter().map(SseMessage::json).collect::<Vec<_>>();
    let running = first
        .iter()
        .find(|e| e["data"]["status"] == "running")
        .unwrap();
    let said = running["data"]["message"].as_str().unwrap();
    assert!(
        said.contains(&parent) && said.contains("checkpoint 1"),
        "{said}"
    );
    let plan = events
        .iter()
        .map(SseMessage::json)
        .find(|e| e["kind"] == "plan")
        .unwrap();
    assert_eq!(
        (
            plan["data"]["version"].clone(),
            plan["data"]["reason"].clone()
        ),
        (json!(1), json!("fork"))
    );
    // Its history tells the whole story: `a`'s attempt came with it.
    let run = app.get_json(&format!("/v1/runs/{fork_id}")).await.1;
    assert_eq!(
        run["step_counts"],
        json!({ "completed": 3, "failed": 0, "skipped": 0 }),
        "{run}"
    );
    let a = app.attempts(&fork_id, "a").await;
    let parents_a = app.attempts(&parent, "a").await;
    assert_eq!(a, parents_a);
    let (_, listed) = app.get_json(&format!("/v1/runs?parent_id={parent}")).await;
    let listed: Vec<&Value> = listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["id"])
        .collect();
    assert_eq!(listed, [&json!(fork_id)]);
    let (_, plans) = app.get_json(&format!("/v1/runs/{fork_id}/plans")).await;
    assert_eq!(plans[0]["plan"], chain());

    // Before `c`, with another input: only `c` runs, and it reads the new input.
    let body = json!({ "before_step": "c", "input": { "word": "two" } });
    let (forked, events) = fork_to_end(&app, &parent, body).await;
    assert_eq!(
        forked["parent"],
        json!({ "run_id": parent, "checkpoint": 2, "before_step": "c" })
    );
    assert_eq!(forked["input"], json!({ "word": "two" }));
    assert_eq!(final_data(&events)["output"], "AB-two");
    assert_eq!(
        (probe.calls("a"), probe.calls("b"), probe.calls("c")),
        (1, 2, 3)
    );

    // With `c` changed: `a` and `b` are kept. With `a` changed: everything after it runs too.
    let mut plan = chain();
    plan["steps"][2]["input"]["arguments"]["value"] = json!("{{ steps.b.output.value }}!");
    let (_, events) = fork_to_end(&app, &parent, json!({ "plan": plan })).await;
    assert_eq!(final_data(&events)["output"], "AB!");
    assert_eq!(stepped(&events), ["c"]);
    let mut plan = chain();
    plan["steps"][0]["input"]["arguments"]["value"] = json!("Z");
    let (forked, events) = fork_to_end(&app, &parent, json!({ "plan": plan.clone() })).await;
    assert_eq!(final_data(&events)["output"], "ZB-one");
    assert_eq!(stepped(&events), ["a", "b", "c"]);
    let (_, plans) = app
        .get_json(&format!(
            "/v1/runs/{}/plans",
            forked["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(
        (plans[0]["reason"].clone(), plans[0]["plan"].clone()),
        (json!("fork"), plan)
    );

    // A fork of a fork links to its own parent; the tree is read a level at a time.
    let (_, grandchild) = fork(&app, &fork_id, json!({ "checkpoint": 0 })).await;
    assert_eq!(grandchild["parent"]["run_id"], fork_id.as_str());
    let (_, listed) = app.get_json(&format!("/v1/runs?parent_id={fork_id}")).await;
    assert_eq!(listed["runs"].as_array().unwrap().len(), 1);
    let (_, listed) = app.get_json(&format!("/v1/runs?parent_id={parent}")).await;
    assert_eq!(listed["runs"].as_array().unwrap().len(), 4);
}

#[tokio::test]
async fn a_fork_is_refused_clearly_and_writes_nothing_for_bad_requests() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |c| {
        two_tenants(c, ["key-a-0123456789abcdef", "key-b-0123456789abcdef"])
    })
    .await;
    let (client_a, client_b) = (
        bearer_client("key-a-0123456789abcdef"),
        bearer_client("key-b-0123456789abcdef"),
    );
    let as_tenant = |client: &reqwest::Client| {
        let (client, base) = (client.clone(), app.url(""));
        move |path: String, body: Value| {
            let (client, base) = (client.clone(), base.clone());
            async move {
                let resp = client
                    .post(format!("{base}{path}"))
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                let status = resp.status().as_u16();
                (status, resp.json::<Value>().await.unwrap_or(Value::Null))
            }
        }
    };
    let (a, b) = (as_tenant(&client_a), as_tenant(&client_b));
    let body = json!({ "input": { "word": "one" }, "orchestration": "fixed", "plan": chain() });
    let (status, run) = a("/v1/runs".into(), body).await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/runs/{id}/fork");
    let url = app.url(&format!("/v1/runs/{id}"));
    poll_json(&client_a, &url, |r| r["status"] == "succeeded").await;

    for (bad, pointer) in [
        (json!({ "checkpoint": 99 }), "/checkpoint"),
        (json!({ "checkpoint": -1 }), "/checkpoint"),
        (
            json!({ "checkpoint": 1, "before_step": "b" }),
            "/before_step",
        ),
        (json!({ "before_step": "nope" }), "/before_step"),
        (json!({ "before_step": "" }), "/before_step"),
        (json!({ "before_step": "a//b" }), "/before_step"),
        (json!({ "input": 5 }), "/input"),
        (json!({ "input": "" }), "/input"),
        (
            json!({ "plan": { "steps": [{ "id": "a", "kind": "bogus", "input": {} }] } }),
            "/plan/steps/0/kind",
        ),
        (json!({ "extra": true }), ""),
    ] {
        let (status, problem) = a(path.clone(), bad.clone()).await;
        assert_eq!(status, 422, "{bad} → {problem}");
        assert_eq!(problem["code"], "validation_failed");
        let at = problem["errors"][0]["pointer"].as_str().unwrap_or_default();
        assert!(at.starts_with(pointer), "{bad} → {problem}");
    }
    // Another tenant's run is as unknown as a missing one.
    assert_eq!(b(path.clone(), json!({})).await.0, 404);
    assert_eq!(a("/v1/runs/not-a-run/fork".into(), json!({})).await.0, 404);
    let missing = "/v1/runs/0191e7a4-0000-7000-8000-000000000000/fork";
    assert_eq!(a(missing.into(), json!({})).await.0, 404);
    let raw = client_a
        .post(app.url(&path))
        .header("content-type", "application/json")
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 400);
    // Nothing was made.
    let (_, listed) = get(&client_a, &app.url(&format!("/v1/runs?parent_id={id}"))).await;
    assert_eq!(listed["runs"], json!([]), "{listed}");
    assert_eq!(probe.calls("a"), 1);

    // The same Idempotency-Key makes one fork.
    let keyed = || {
        client_a
            .post(app.url(&path))
            .header("idempotency-key", "fork-1")
            .json(&json!({ "checkpoint": 2 }))
            .send()
    };
    let first = keyed().await.unwrap();
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.unwrap();
    let again = keyed().await.unwrap();
    assert_eq!(again.status(), 200);
    let again: Value = again.json().await.unwrap();
    assert_eq!(first["id"], again["id"]);
    let (_, listed) = get(&client_a, &app.url(&format!("/v1/runs?parent_id={id}"))).await;
    assert_eq!(listed["runs"].as_array().unwrap().len(), 1);
    let (status, _) = get(&client_a, &app.url("/v1/runs?parent_id=nope")).await;
    assert_eq!(status, 422);
}

async fn get(client: &reqwest::Client, url: &str) -> (u16, Value) {
    let resp = client.get(url).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_fork_inside_nested_steps_keeps_their_finished_children_across_a_restart() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let run = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "plan": nested_plan() }))
        .await;
    let parent = run["id"].as_str().unwrap().to_owned();
    let mut reader = app.events(&parent).await;
    skip_to(&mut reader, "input_required", 1).await;
    assert_eq!(app.answer(&parent, "ask", json!("ok")).await.status(), 202);
    skip_to(&mut reader, "input_required", 1).await;
    drop(reader);

    // The parent waits at the second item's question; the fork starts there too.
    let (status, forked) = fork(&app, &parent, json!({})).await;
    assert_eq!(status, 201, "{forked}");
    let id = forked["id"].as_str().unwrap().to_owned();
    let mut reader = app.events(&id).await;
    skip_to(&mut reader, "input_required", 1).await;
    drop(reader);
    let dir = app.stop().await;

    let app = spawn_probed_app(Some(dir), &probe, |_| {}).await;
    let mut reader = app.events(&id).await;
    // Asked before the stop, and again once resumed.
    skip_to(&mut reader, "input_required", 2).await;
    assert_eq!(app.answer(&id, "ask", json!("ok")).await.status(), 202);
    let events = to_final(reader).await;
    assert_eq!(final_data(&events)["status"], "succeeded");
    for key in ["first", "left", "right", "tally-1", "tally-2"] {
        assert_eq!(probe.calls(key), 1, "`{key}` ran again in the fork");
    }
    // The question of the first item, answered in the parent, was not asked of the fork.
    let asked: Vec<Value> = app
        .attempts(&id, "ask")
        .await
        .into_iter()
        .map(|a| a["path"].clone())
        .collect();
    assert!(
        asked.contains(&json!("outer/each[0]")),
        "carried: {asked:?}"
    );
    let asked_live = app
        .stored_events(&id)
        .await
        .into_iter()
        .filter(|e| e["kind"] == "input_required")
        .count();
    assert_eq!(
        asked_live, 2,
        "asked before and after the restart, for the second item only"
    );

    // Before a nested step: the first item's question is asked again, what came before it
    // is kept.
    let body = json!({ "before_step": "outer/each[0]/ask" });
    let (status, forked) = fork(&app, &parent, body).await;
    assert_eq!(status, 201, "{forked}");
    let id = forked["id"].as_str().unwrap().to_owned();
    let mut reader = app.events(&id).await;
    let asked = loop {
        let event = reader.next_event().await.expect("the fork asks").json();
        if event["kind"] == "input_required" {
            break event;
        }
    };
    drop(reader);
    assert_eq!(asked["path"], "outer/each[0]", "{asked}");
    for key in ["first", "left", "right", "tally-1"] {
        assert_eq!(probe.calls(key), 1, "`{key}` ran again in the fork");
    }
    for run in [parent.as_str(), id.as_str()] {
        app.post_json(&format!("/v1/runs/{run}/cancel"), &json!({}))
            .await;
    }
}

#[tokio::test]
async fn reactive_runs_and_conversations_fork_at_their_version_and_round() {
    let llm = ScriptedLlm::start().await;
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |c| use_scripted(c, &llm)).await;
    // A reactive run whose `flaky` step fails once and is re-planned around.
    let calc = |id: &str, deps: &[&str], e: &str| {
        json!({ "id": id, "kind": "tool", "depends_on": deps,
        "input": { "tool": "math.calculate", "arguments": { "expression": e } } })
    };
    let flaky = json!({ "id": "flaky", "kind": "tool", "depends_on": ["ok"],
        "input": { "tool": "test.flaky", "arguments": { "key": "flaky", "failures": 5 } } });
    let v2 = json!({ "steps": [calc("ok", &[], "1 + 1"), calc("other", &["ok"], "{{ steps.ok.output.result }} * 10")],
        "output": "{{ steps.other.output.result }}" });
    llm.push(Reply::json(json!({ "strategy": "alternative", "reason": "avoid it", "completes_task": true, "plan": v2 })));
    let body = json!({ "input": "x", "orchestration": "reactive",
        "plan": { "steps": [calc("ok", &[], "1 + 1"), flaky] } });
    let events = app.stream_run(body).await;
    assert_eq!(final_data(&events)["output"], 20);
    let parent = events[0].json()["run_id"].as_str().unwrap().to_owned();
    let asked = llm.requests().len();

    let (forked, events) = fork_to_end(&app, &parent, json!({ "before_step": "other" })).await;
    let fin = final_data(&events);
    assert_eq!(
        (fin["status"].clone(), fin["output"].clone()),
        (json!("succeeded"), json!(20)),
        "{fin}"
    );
    assert_eq!(stepped(&events), ["other"]);
    assert_eq!(
        llm.requests().len(),
        asked,
        "the fork at version 2 asks no model"
    );
    let (_, plans) = app
        .get_json(&format!(
            "/v1/runs/{}/plans",
            forked["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(plans.as_array().unwrap().len(), 2);
    assert_eq!(plans[1]["strategy"], "alternative");

    // A conversation forked after its tool round asks the model once more, and only that.
    llm.push(Reply::tool_call(
        "math.calculate",
        json!({ "expression": "6 * 7" }),
    ));
    llm.push(Reply::text("It is 42."));
    let events = app
        .stream_run(json!({ "input": "what is 6 * 7?", "orchestration": "simple" }))
        .await;
    assert_eq!(final_data(&events)["output"], "It is 42.");
    let talk = events[0].json()["run_id"].as_str().unwrap().to_owned();
    let (_, checkpoints) = app.get_json(&format!("/v1/runs/{talk}/checkpoints")).await;
    let after_tools = checkpoints
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["state"]["messages"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"))
        })
        .expect("a checkpoint after the tool round");
    let at = after_tools["id"].as_u64().unwrap();
    let before = llm.requests().len();
    llm.push(Reply::text("Forty-two."));
    let (_, events) = fork_to_end(&app, &talk, json!({ "checkpoint": at })).await;
    assert_eq!(final_data(&events)["output"], "Forty-two.");
    assert_eq!(llm.requests().len(), before + 1);
    let tool_calls = events.iter().filter(|e| e.kind() == "tool_call").count();
    assert_eq!(tool_calls, 0, "the tool round is not run again");
    let sent = llm.requests().last().unwrap().to_string();
    assert!(
        sent.contains("6 * 7"),
        "the fork's model call carries the conversation: {sent}"
    );
    // A conversation keeps its messages: another input is refused past its start.
    let (status, problem) = fork(&app, &talk, json!({ "checkpoint": at, "input": "other" })).await;
    assert_eq!(
        (status, problem["errors"][0]["pointer"].clone()),
        (422, json!("/input")),
        "{problem}"
    );
    let (status, problem) = fork(&app, &talk, json!({ "plan": { "steps": [] } })).await;
    assert_eq!(
        (status, problem["errors"][0]["pointer"].clone()),
        (422, json!("/plan")),
        "{problem}"
    );
}

#[tokio::test]
async fn a_run_forked_through_another_replica_runs_there_and_is_answered_through_either() {
    let replicas = TwoReplicas::start(&[("ORCA_LLM__PROVIDER", "offline")]).await;
    let (a, b) = (&replicas.a, &replicas.b);
    let calc = |id: &str, deps: &[&str], e: &str| {
        json!({ "id": id, "kind": "tool", "depends_on": deps,
        "input": { "tool": "math.calculate", "arguments": { "expression": e } } })
    };
    let plan = json!({ "steps": [
        calc("first", &[], "6 * 7"),
        { "id": "ask", "kind": "user_input", "depends_on": ["first"], "input": { "prompt": "Add what?" } },
        calc("after", &["ask"], "{{ steps.first.output.result }} + {{ steps.ask.output }}"),
    ], "output": "{{ steps.after.output.result }}" });
    let parent = a.start_plan(plan).await;
    drop(a.until_asked(&parent, 1).await);

    let resp = b
        .client
        .post(b.url(&format!("/v1/runs/{parent}/fork")))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let fork: Value = resp.json().await.unwrap();
    let id = fork["id"].as_str().unwrap().to_owned();
    let reader = b.until_asked(&id, 1).await;
    assert_eq!(
        a.answer(&id, "ask", json!(1)).await,
        202,
        "answered through the other replica"
    );
    let fin = crate::support::app::final_data(&to_final(reader).await);
    assert_eq!(
        (fin["status"].clone(), fin["output"].clone()),
        (json!("succeeded"), json!(43)),
        "{fin}"
    );
    let firsts: Vec<Value> = b
        .steps(&id)
        .await
        .into_iter()
        .filter(|s| s["step_id"] == "first")
        .collect();
    assert_eq!(
        firsts,
        a.steps(&parent)
            .await
            .into_iter()
            .filter(|s| s["step_id"] == "first")
            .collect::<Vec<_>>()
    );
    let stepped = b
        .stored_events(&id)
        .await
        .into_iter()
        .any(|e| e["kind"] == "step" && e["step_id"] == "first");
    assert!(!stepped, "`first` ran again in the fork");
    // The parent waits on as it was.
    assert_eq!(
        b.answered_to_final(&parent, 1, "ask", json!(2)).await["output"],
        44
    );
}

/// A run of `text`-sized steps at two nesting levels: a sequential holding a counted child and
/// a loop of two more, each echoing the input's `text` (its attempt holds it twice).
fn bulky() -> Value {
    let echo = |id: &str| {
        json!({ "id": id, "kind": "tool", "input": { "tool": "test.count",
            "arguments": { "key": id, "value": "{{ input.text }}" } } })
    };
    json!({ "steps": [{ "id": "outer", "kind": "sequential", "input": { "steps": [
        echo("first"),
        { "id": "each", "kind": "loop", "input": { "for_each": [1, 2], "max_iterations": 2,
            "steps": [echo("tally")] } },
    ] } }] })
}

const TEXT_BYTES: usize = 20_000;

/// A tenant (by its API key) at one server: runs, forks and reads its usage.
struct Caller<'a> {
    app: &'a TestApp,
    key: &'static str,
}

impl Caller<'_> {
    async fn send(&self, request: reqwest::RequestBuilder) -> (u16, Option<u64>, Value) {
        let resp = request.bearer_auth(self.key).send().await.unwrap();
        let retry = (resp.headers().get("retry-after")).and_then(|v| v.to_str().ok()?.parse().ok());
        let status = resp.status().as_u16();
        (status, retry, resp.json().await.unwrap_or(Value::Null))
    }

    /// A finished bulky run's id.
    async fn bulky_run(&self) -> String {
        let body = json!({ "input": { "text": "x".repeat(TEXT_BYTES) }, "orchestration": "fixed",
            "plan": bulky() });
        let (status, _, run) = self
            .send(self.app.client.post(self.app.url("/v1/runs")).json(&body))
            .await;
        assert_eq!(status, 201, "{run}");
        let id = run["id"].as_str().unwrap().to_owned();
        self.to_end(&id).await;
        id
    }

    async fn to_end(&self, id: &str) {
        let events = self.app.events_with_key(id, self.key).await;
        let events = events.read_to_final().await;
        assert_eq!(final_data(&events)["status"], "succeeded", "{id}");
    }

    /// Forks `id` as `body` asks: status, `Retry-After`, body.
    async fn fork(&self, id: &str, body: Value) -> (u16, Option<u64>, Value) {
        let url = self.app.url(&format!("/v1/runs/{id}/fork"));
        self.send(self.app.client.post(url).json(&body)).await
    }

    /// Forks `id` (201) and follows the fork to its end.
    async fn forked(&self, id: &str, body: Value) -> String {
        let (status, _, fork) = self.fork(id, body).await;
        assert_eq!(status, 201, "{fork}");
        let fork = fork["id"].as_str().unwrap().to_owned();
        self.to_end(&fork).await;
        fork
    }

    /// `(forks_today, fork_bytes_today)`.
    async fn forks_today(&self) -> (u64, u64) {
        let (_, _, usage) = self
            .send(self.app.client.get(self.app.url("/v1/usage")))
            .await;
        let of = |k: &str| usage["usage"][k].as_u64().unwrap();
        (of("forks_today"), of("fork_bytes_today"))
    }
}

const KEYS: [&str; 3] = [
    "key-a-0123456789abcdef",
    "key-b-0123456789abcdef",
    "key-c-0123456789abcdef",
];

fn three_tenants(c: &mut orca::config::Config) {
    c.auth.api_keys = KEYS
        .iter()
        .zip(["a", "b", "c"])
        .map(|(key, tenant)| orca::config::ApiKey {
            user: None,
            key: orca::config::Secret::new(*key),
            tenant: tenant.into(),
        })
        .collect();
}

#[tokio::test]
async fn forks_are_held_to_each_tenants_daily_count_and_bytes_whatever_is_deleted() {
    use orca::domain::quota::Quota;
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, three_tenants).await;
    let a = Caller {
        app: &app,
        key: KEYS[0],
    };
    let parent = a.bulky_run().await;
    // What a fork of the whole run copies is measured, with the default quota; its nested
    // steps' attempts (three, each holding the text as input and output) are counted.
    let whole = a.forked(&parent, json!({})).await;
    let (forks, full) = a.forks_today().await;
    assert_eq!(forks, 1);
    assert!(full > 6 * TEXT_BYTES as u64, "{full}");
    a.forked(&parent, json!({ "checkpoint": 0 })).await;
    let (forks, used) = a.forks_today().await;
    let start = used - full;
    assert_eq!(forks, 2);
    assert!(start < TEXT_BYTES as u64, "{start}");
    let dir = app.stop().await;

    // Room for one more whole fork today, and four forks; b may fork once; c's day is smaller
    // than one whole fork. The ledger survives the restart.
    let app = spawn_probed_app(Some(dir), &probe, |c| {
        three_tenants(c);
        let limits = |forks_per_day, fork_bytes_per_day| Quota {
            forks_per_day,
            fork_bytes_per_day,
            ..Quota::default()
        };
        let tenants = &mut c.quotas.tenants;
        tenants.insert("a".into(), limits(4, 2 * full + start + full / 2));
        tenants.insert("b".into(), limits(1, 0));
        tenants.insert("c".into(), limits(0, full / 2));
    })
    .await;
    let [a, b, c] = KEYS.map(|key| Caller { app: &app, key });
    assert_eq!(a.forks_today().await, (2, full + start));
    a.forked(&parent, json!({})).await;
    let (status, retry, problem) = a.fork(&parent, json!({})).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (429, Some("quota_exceeded")),
        "{problem}"
    );
    assert!(
        retry.is_some_and(|s| (1..=86_400).contains(&s)),
        "{retry:?}"
    );
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("`fork_bytes_per_day`") && detail.contains("would copy"),
        "{detail}"
    );
    // A smaller fork still fits the bytes, and is the day's fourth.
    a.forked(&parent, json!({ "checkpoint": 0 })).await;
    // Deleting a fork gives nothing back.
    let deleted = a
        .send(app.client.delete(app.url(&format!("/v1/runs/{whole}"))))
        .await;
    assert_eq!(deleted.0, 204, "{:?}", deleted.2);
    let (status, _, problem) = a.fork(&parent, json!({ "checkpoint": 0 })).await;
    assert_eq!(status, 429, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("`forks_per_day` is 4"),
        "{problem}"
    );
    assert_eq!(a.forks_today().await, (4, 2 * full + 2 * start));

    // Another tenant's forks are its own: b forks while a is at both limits, then meets its own.
    let theirs = b.bulky_run().await;
    b.forked(&theirs, json!({})).await;
    let (status, _, problem) = b.fork(&theirs, json!({ "checkpoint": 0 })).await;
    assert_eq!(status, 429, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("forks_per_day"),
        "{problem}"
    );

    // A fork larger than a whole day's bytes can never fit: 413, and nothing is written.
    let big = c.bulky_run().await;
    let (status, retry, problem) = c.fork(&big, json!({})).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (413, Some("payload_too_large")),
        "{problem}"
    );
    assert_eq!(retry, None);
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("would copy") && detail.contains("earlier"),
        "{detail}"
    );
    let (_, _, listed) = c
        .send(
            app.client
                .get(app.url(&format!("/v1/runs?parent_id={big}"))),
        )
        .await;
    assert_eq!(listed["runs"].as_array().map(Vec::len), Some(0), "{listed}");
    assert_eq!(c.forks_today().await, (0, 0));
    // Forking it from the start copies less, and fits.
    c.forked(&big, json!({ "checkpoint": 0 })).await;
    let metrics = (app.client.get(app.url("/metrics")).bearer_auth(KEYS[2]))
        .send()
        .await
        .unwrap();
    let metrics = metrics.text().await.unwrap();
    assert!(
        metrics.contains(r#"quota="fork_bytes_per_day""#),
        "refusals are counted by quota: {metrics}"
    );
}

#[tokio::test]
async fn a_fork_before_a_step_that_does_not_exist_says_so_and_lists_the_steps_that_do() {
    let app = spawn_app(|_| {}).await;
    let calc = |id: &str, deps: &[&str], expression: &str| {
        json!({ "id": id, "kind": "tool", "depends_on": deps,
                "input": { "tool": "math.calculate", "arguments": { "expression": expression } } })
    };
    let plan = json!({ "steps": [
        calc("figures", &[], "1200 * 3"),
        calc("profit", &["figures"], "3600 - 2400"),
    ]});
    let events = app
        .stream_run(json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
        .await;
    let parent = events[0].json()["run_id"].as_str().unwrap().to_owned();
    for step in ["review", "review/each[0]/ask"] {
        let (status, problem) = fork(&app, &parent, json!({ "before_step": step })).await;
        assert_eq!(status, 422, "{problem}");
        let said = problem["errors"][0]["message"].as_str().unwrap_or_default();
        assert_eq!(
            said,
            format!("no step `{step}` exists in run `{parent}`; its steps are `figures`, `profit`"),
            "{problem}"
        );
    }
    // A step that exists is forked before, as before.
    let (status, forked) = fork(&app, &parent, json!({ "before_step": "profit" })).await;
    assert_eq!(status, 201, "{forked}");
}
