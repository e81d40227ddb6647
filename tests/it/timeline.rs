//! `GET /v1/runs/{id}/timeline` over HTTP on real runs: a chain with a parallel fan-out, a
//! retried step, a wait for a human, a simple run with a tool call, and tenant isolation.
//! Durations come from test tools and a scripted model that take a known minimum time, so the
//! assertions are lower bounds and relations, never timings of the machine.

use std::time::Instant;

use orca::config::{ApiKey, Secret};
use serde_json::{Value, json};

use crate::support::scripted_llm::{Reply, ScriptedLlm};
use crate::support::tools::Probe;
use crate::support::*;

async fn timeline(app: &TestApp, run_id: &str) -> Value {
    let (status, body) = app.get_json(&format!("/v1/runs/{run_id}/timeline")).await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn run_plan(app: &TestApp, plan: Value) -> String {
    let events = app
        .stream_run(json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    events[0].json()["run_id"].as_str().unwrap().to_owned()
}

fn span<'t>(t: &'t Value, id: &str) -> &'t Value {
    t["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no span {id} in {:#}", t["spans"]))
}

fn span_ids(t: &Value) -> Vec<String> {
    t["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

/// The critical path as labels: span ids, `queue`, `backoff(SPAN)`.
fn path_labels(t: &Value) -> Vec<String> {
    t["critical_path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| match p["kind"].as_str().unwrap() {
            "step" => p["span"].as_str().unwrap().to_owned(),
            "backoff" => format!("backoff({})", p["span"].as_str().unwrap()),
            other => other.to_owned(),
        })
        .collect()
}

fn ms(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a duration: {v}"))
}

/// The breakdown's parts add up: `accounted + orchestrator = total`, and every category fits
/// in the accounted time.
fn assert_adds_up(t: &Value) {
    let b = &t["breakdown"];
    assert_eq!(
        ms(&b["accounted_ms"]) + ms(&b["orchestrator_ms"]),
        ms(&b["total_ms"]),
        "{b}"
    );
    assert_eq!(ms(&b["total_ms"]), ms(&t["duration_ms"]));
    for part in [
        "model_ms",
        "tools_ms",
        "timers_ms",
        "human_ms",
        "backoff_ms",
        "queue_ms",
    ] {
        assert!(ms(&b[part]) <= ms(&b["accounted_ms"]), "{part}: {b}");
    }
}

#[tokio::test]
async fn a_chain_with_a_fan_out_shows_spans_parents_and_the_critical_path() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let plan = json!({ "steps": [
        { "id": "a", "kind": "tool",
          "input": { "tool": "test.count", "arguments": { "key": "a", "delay_ms": 30 } } },
        { "id": "fan", "kind": "parallel", "depends_on": ["a"], "input": { "steps": [
            { "id": "fast", "kind": "tool",
              "input": { "tool": "test.count", "arguments": { "key": "fast", "delay_ms": 60 } } },
            { "id": "slow", "kind": "tool",
              "input": { "tool": "test.sleep", "arguments": { "key": "slow", "ms": 300 } } }
        ] } },
        { "id": "z", "kind": "tool", "depends_on": ["fan"],
          "input": { "tool": "test.count", "arguments": { "key": "z", "delay_ms": 10 } } }
    ]});
    let id = run_plan(&app, plan).await;
    let t = timeline(&app, &id).await;

    assert_eq!(t["run_id"], id);
    assert_eq!(t["status"], "succeeded");
    assert_eq!(t["as_of"], t["finished_at"]);
    let mut ids = span_ids(&t);
    ids.sort();
    assert_eq!(ids, ["a#1", "fan#1", "fan/fast#1", "fan/slow#1", "z#1"]);
    assert_eq!(span(&t, "fan/fast#1")["parent"], "fan#1");
    assert_eq!(span(&t, "fan/slow#1")["path"], "fan");
    assert_eq!(span(&t, "fan#1")["parent"], Value::Null);
    assert_eq!(span(&t, "fan#1")["kind"], "parallel");
    for leaf in ["a#1", "fan/fast#1", "fan/slow#1", "z#1"] {
        assert_eq!(span(&t, leaf)["tool_calls"], 1, "{leaf}");
        assert_eq!(span(&t, leaf)["status"], "completed", "{leaf}");
    }
    assert_eq!(span(&t, "fan#1")["tool_calls"], 0);
    assert!(ms(&span(&t, "fan/slow#1")["duration_ms"]) >= 300);

    // The slower child held the fan-out, and with it `z`; the container itself is not a link.
    assert_eq!(path_labels(&t), ["queue", "a#1", "fan/slow#1", "z#1"]);

    // The children ran side by side: their time is counted once.
    let b = &t["breakdown"];
    let tool_spans: u64 = ["a#1", "fan/fast#1", "fan/slow#1", "z#1"]
        .iter()
        .map(|s| ms(&span(&t, s)["duration_ms"]))
        .sum();
    assert!(ms(&b["tools_ms"]) >= 30 + 300 + 10, "{b}");
    assert!(ms(&b["tools_ms"]) + 30 <= tool_spans, "{b} vs {tool_spans}");
    assert_eq!(b["model_ms"], 0);
    assert_adds_up(&t);

    assert_eq!(t["totals"]["steps"], 5);
    assert_eq!(t["totals"]["attempts"], 5);
    assert_eq!(t["totals"]["tool_calls"], 4);
    assert_eq!(t["totals"]["retries"], 0);
    let decisions = t["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    assert_eq!(decisions[0]["kind"], "selection");
    assert_eq!(decisions[0]["detail"]["orchestration"], "fixed");
    assert_eq!(decisions[0]["detail"]["by"], "request");
    assert_eq!(decisions[1]["kind"], "plan");
    assert_eq!(decisions[1]["detail"]["version"], 1);
    assert_eq!(decisions[1]["detail"]["reason"], "initial");
    assert!(decisions[1]["detail"].get("plan").is_none());
}

#[tokio::test]
async fn a_retried_step_shows_its_backoff_waits() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let plan = json!({ "steps": [{
        "id": "flaky", "kind": "tool",
        "retry_policy": { "max_attempts": 4, "strategy": "linear", "initial_delay_ms": 60,
                          "max_delay_ms": 1000, "retryable_errors": ["flaky"] },
        "input": { "tool": "test.flaky", "arguments": { "key": "r", "failures": 2 } }
    }]});
    let id = run_plan(&app, plan).await;
    let t = timeline(&app, &id).await;

    assert_eq!(span_ids(&t), ["flaky#1", "flaky#2", "flaky#3"]);
    for (s, status, code) in [
        ("flaky#1", "failed", json!("flaky")),
        ("flaky#2", "failed", json!("flaky")),
        ("flaky#3", "completed", Value::Null),
    ] {
        assert_eq!(span(&t, s)["status"], status, "{s}");
        assert_eq!(span(&t, s)["error_code"], code, "{s}");
        // Each attempt's tool call is its own, although all were announced at the commit.
        assert_eq!(span(&t, s)["tool_calls"], 1, "{s}");
    }
    let backoffs: Vec<&Value> = t["waits"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["kind"] == "backoff")
        .collect();
    assert_eq!(backoffs.len(), 2, "{:#}", t["waits"]);
    // Linear from 60 ms: 60, then 120.
    for (w, (failed, next, at_least)) in backoffs
        .iter()
        .zip([("flaky#1", "flaky#2", 60), ("flaky#2", "flaky#3", 120)])
    {
        assert_eq!(w["step_id"], "flaky");
        assert_eq!(w["span"], failed);
        assert!(ms(&w["duration_ms"]) >= at_least, "{w}");
        assert_eq!(w["start"], span(&t, failed)["end"]);
        assert_eq!(w["end"], span(&t, next)["start"]);
    }
    assert!(ms(&t["breakdown"]["backoff_ms"]) >= 180);
    assert_eq!(t["totals"]["retries"], 2);
    assert_eq!(t["totals"]["steps"], 1);
    assert_eq!(
        path_labels(&t),
        [
            "queue",
            "flaky#1",
            "backoff(flaky#1)",
            "flaky#2",
            "backoff(flaky#2)",
            "flaky#3"
        ]
    );
    assert_adds_up(&t);
}

#[tokio::test]
async fn a_wait_for_a_human_is_human_time_open_while_it_lasts() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    let plan = json!({ "steps": [
        { "id": "prepare", "kind": "tool",
          "input": { "tool": "test.count", "arguments": { "key": "p" } } },
        { "id": "approve", "kind": "user_input", "depends_on": ["prepare"],
          "input": { "prompt": "go?" } },
        { "id": "done", "kind": "tool", "depends_on": ["approve"],
          "input": { "tool": "test.count", "arguments": { "key": "d" } } }
    ]});
    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .header("accept", "text/event-stream")
        .json(&json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
        .send()
        .await
        .unwrap();
    let mut reader = SseReader::new(resp);
    let id = loop {
        let ev = reader.next_event().await.expect("the run asks");
        let data = ev.json();
        if ev.kind() == "status" && data["data"]["status"] == "waiting_input" {
            break data["run_id"].as_str().unwrap().to_owned();
        }
    };
    let asked = Instant::now();

    // While it waits: the wait and the asking attempt are open, and measured up to now.
    let t = timeline(&app, &id).await;
    assert_eq!(t["status"], "waiting_input");
    assert_eq!(t["finished_at"], Value::Null);
    let waits = t["waits"].as_array().unwrap();
    let human = waits.iter().find(|w| w["kind"] == "human_input").unwrap();
    assert_eq!(human["step_id"], "approve");
    assert_eq!(human["span"], "approve#1");
    assert_eq!(human["end"], Value::Null);
    assert_eq!(span(&t, "approve#1")["end"], Value::Null);
    assert_eq!(span(&t, "approve#1")["status"], "running");
    assert_eq!(path_labels(&t).last().unwrap(), "approve#1");
    assert_eq!(
        t["critical_path"].as_array().unwrap().last().unwrap()["end"],
        t["as_of"]
    );
    assert_adds_up(&t);

    // The wait began before the test saw it and ends no sooner than the answer is sent.
    let waited = asked.elapsed();
    let resp = app.answer(&id, "approve", json!("yes")).await;
    assert_eq!(resp.status(), 202);
    let rest = reader.read_to_final().await;
    assert_eq!(final_data(&rest)["status"], "succeeded");

    let t = timeline(&app, &id).await;
    let human: Vec<&Value> = t["waits"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["kind"] == "human_input")
        .collect();
    assert_eq!(human.len(), 1);
    assert!(human[0]["end"].is_string());
    let human_ms = ms(&t["breakdown"]["human_ms"]);
    assert!(
        human_ms >= waited.as_millis() as u64,
        "{human_ms} < {waited:?}"
    );
    assert_eq!(ms(&human[0]["duration_ms"]), human_ms);
    // It lies inside the attempt that asked.
    assert!(human_ms <= ms(&span(&t, "approve#1")["duration_ms"]) + 1);
    assert_eq!(
        path_labels(&t),
        ["queue", "prepare#1", "approve#1", "done#1"]
    );
    assert_adds_up(&t);
}

#[tokio::test]
async fn a_simple_run_splits_model_and_tool_time_and_counts_tokens() {
    let llm = ScriptedLlm::start().await;
    llm.push(
        Reply::tool_call("test.sleep", json!({ "key": "s", "ms": 150 }))
            .usage(11, 3)
            .delay_before_first_chunk(100),
    );
    llm.push(
        Reply::text("All done")
            .usage(20, 2)
            .delay_before_first_chunk(80),
    );
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |c| use_scripted(c, &llm)).await;
    let events = app.stream_run(json!({ "input": "sleep a bit" })).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let id = events[0].json()["run_id"].as_str().unwrap().to_owned();
    let t = timeline(&app, &id).await;

    assert_eq!(span_ids(&t), ["llm-1#1", "tool-1-1#1", "llm-2#1"]);
    let llm1 = span(&t, "llm-1#1");
    assert_eq!(llm1["kind"], "llm");
    assert_eq!(llm1["tokens"], json!({ "prompt": 11, "completion": 3 }));
    assert_eq!(
        (llm1["llm_calls"].as_u64(), llm1["tool_calls"].as_u64()),
        (Some(1), Some(0))
    );
    assert!(ms(&llm1["duration_ms"]) >= 100);
    let tool = span(&t, "tool-1-1#1");
    assert_eq!(tool["name"], "test.sleep");
    assert_eq!(
        (tool["llm_calls"].as_u64(), tool["tool_calls"].as_u64()),
        (Some(0), Some(1))
    );
    assert!(ms(&tool["duration_ms"]) >= 150);
    assert_eq!(
        span(&t, "llm-2#1")["tokens"],
        json!({ "prompt": 20, "completion": 2 })
    );

    let b = &t["breakdown"];
    assert!(ms(&b["model_ms"]) >= 180, "{b}");
    assert!(ms(&b["tools_ms"]) >= 150, "{b}");
    assert_eq!(b["human_ms"], 0);
    assert_eq!(b["backoff_ms"], 0);
    assert_adds_up(&t);
    assert_eq!(
        path_labels(&t),
        ["queue", "llm-1#1", "tool-1-1#1", "llm-2#1"]
    );
    // The totals agree with the run's own usage.
    let totals = &t["totals"];
    for (total, usage) in [
        ("llm_calls", "llm_calls"),
        ("tool_calls", "tool_calls"),
        ("prompt_tokens", "prompt_tokens"),
        ("completion_tokens", "completion_tokens"),
    ] {
        assert_eq!(totals[total], fin["usage"][usage], "{total}");
    }
    assert_eq!(totals["prompt_tokens"], 31);
    // The one choice a simple run makes: its orchestration (`auto`, no rule, model not asked).
    let decisions = t["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0]["kind"], "selection");
    assert_eq!(decisions[0]["detail"]["orchestration"], "simple");
    assert_eq!(decisions[0]["detail"]["by"], "default");
}

#[tokio::test]
async fn another_tenants_run_is_not_found() {
    let (key_a, key_b) = ("key-for-team-a-0123456789", "key-for-team-b-0123456789");
    let app = spawn_app(|c| {
        c.auth.api_keys = vec![
            ApiKey {
                user: None,
                key: Secret::new(key_a),
                tenant: "a".into(),
            },
            ApiKey {
                user: None,
                key: Secret::new(key_b),
                tenant: "b".into(),
            },
        ];
    })
    .await;
    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .bearer_auth(key_a)
        .json(&json!({ "input": "hello" }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let run: Value = resp.json().await.unwrap();
    let id = run["id"].as_str().unwrap();

    let get = |path: String, key: &'static str| {
        let req = app.client.get(app.url(&path)).bearer_auth(key);
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap())
        }
    };
    let (status, body) = get(format!("/v1/runs/{id}/timeline"), key_a).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["run_id"], id);
    let (status, body) = get(format!("/v1/runs/{id}/timeline"), key_b).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    let unknown = "0193a000-0000-7000-8000-000000000000";
    let (status, _) = get(format!("/v1/runs/{unknown}/timeline"), key_a).await;
    assert_eq!(status, 404);
    let (status, _) = get("/v1/runs/not-a-run/timeline".into(), key_a).await;
    assert_eq!(status, 404);
}
