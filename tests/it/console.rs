//! The run console, driven in a real headless Chromium (Debian's `chromium`, through npm's
//! `playwright-core`) against the real server: `tests/browser/console.mjs` clicks through it,
//! and these tests check afterwards, over the API, that what the browser did really happened.
//! Screenshots of every page land in `target/console-screenshots/`.
//!
//! Needs `node`, `npm ci --prefix tests/browser` and `/usr/bin/chromium` (or `$CHROMIUM`);
//! `.ci/run` installs them. Without them these tests fail and say what is missing.

use std::path::{Path, PathBuf};

use orca::config::{ApiKey, ModelAlias, Secret};
use serde_json::{Value, json};

use crate::support::app::{TestApp, final_data, spawn_app, use_scripted};
use crate::support::node;
use crate::support::scripted_llm::{Reply, ScriptedLlm};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn screenshots() -> PathBuf {
    Path::new(ROOT).join("target/console-screenshots")
}

/// Runs one scenario of the browser script (with its extra argument, if any); returns its
/// JSON report lines.
async fn browser(scenario: &str, base: &str, arg: Option<&str>) -> Vec<Value> {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).exists(),
        "no Chromium at {chromium}: `apt-get install chromium`, or set CHROMIUM"
    );
    let shots = screenshots().join(scenario);
    let mut args = vec![scenario, base, shots.to_str().expect("a UTF-8 path")];
    args.extend(arg);
    node::json_lines(&node::run("console.mjs", &args).await)
}

fn finding<'a>(report: &'a [Value], name: &str) -> &'a Value {
    report
        .iter()
        .find(|l| l["ok"] == name)
        .unwrap_or_else(|| panic!("no `{name}` in the report: {report:?}"))
}

fn approve_spend() -> Value {
    let schema = json!({
        "type": "object", "required": ["approved", "note"],
        "properties": {"approved": {"type": "boolean"}, "note": {"type": "string", "minLength": 3}}
    });
    json!({
        "name": "approve-spend",
        "description": "Quote an amount with tax, ask a human, record when.",
        "input_schema": {"type": "object", "required": ["amount"], "properties": {"amount": {"type": "number"}}},
        "steps": [
            {"id": "quote", "kind": "tool",
             "input": {"tool": "math.calculate", "arguments": {"expression": "{{ input.amount }} * 1.2"}}},
            {"id": "approve", "kind": "user_input", "depends_on": ["quote"],
             "input": {"prompt": "Approve spending {{ input.amount }} ({{ steps.quote.output.result }} with tax)?", "schema": schema}},
            {"id": "record", "kind": "tool", "depends_on": ["approve"],
             "input": {"tool": "clock.now", "arguments": {}}}
        ],
        "output": {"decision": "{{ steps.approve.output }}", "at": "{{ steps.record.output.iso }}"}
    })
}

async fn put_workflow(app: &TestApp, body: &Value) {
    let response = app
        .client
        .put(app.url("/v1/workflows/approve-spend"))
        .json(body)
        .send()
        .await
        .expect("PUT workflow");
    assert!(
        response.status().is_success(),
        "{}",
        response.text().await.unwrap_or_default()
    );
}

fn assert_png(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|_| panic!("no screenshot {}", path.display()));
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
        "{} is not a page",
        path.display()
    );
}

#[tokio::test]
async fn the_console_follows_answers_and_replays_runs_in_a_real_browser() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::tool_call(
        "math.calculate",
        json!({"expression": "6 * 7"}),
    ));
    let answer =
        "The answer is 42: six times seven, computed with the calculator tool as you asked.";
    // Held after its first three words until the browser has seen them (it posts to the
    // release URL), and paced so that its replay at 1x takes over a second.
    llm.push(Reply::text(answer).chunk_delay(80).hold_after(4));
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        // The hold lasts as long as the browser takes to see the words: no read timeout
        // may cut it first.
        c.llm.openai.read_timeout_ms = 60_000;
        for provider in c.llm.providers.values_mut() {
            provider.read_timeout_ms = 60_000;
        }
    })
    .await;
    put_workflow(&app, &approve_spend()).await;

    let arg = json!({ "release": llm.release_url() }).to_string();
    let report = browser("runs", &app.base, Some(&arg)).await;

    let live = finding(&report, "live");
    let (_, run) = app
        .get_json(&format!("/v1/runs/{}", live["run_id"].as_str().unwrap()))
        .await;
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["output"], answer, "the page's output is the run's");
    assert_eq!(live["output"], answer);
    let partial = live["partial"].as_str().unwrap();
    assert!(
        !partial.is_empty() && answer.starts_with(partial.trim_end()),
        "{partial:?}"
    );

    let human = finding(&report, "human");
    let (_, run) = app
        .get_json(&format!("/v1/runs/{}", human["run_id"].as_str().unwrap()))
        .await;
    assert_eq!(run["status"], "succeeded");
    assert_eq!(
        run["input"],
        json!({"amount": 120}),
        "the schema form sent a number"
    );
    assert_eq!(
        run["output"]["decision"],
        json!({"approved": true, "note": "approved for Q3"})
    );
    let cancelled = finding(&report, "cancel");
    let (_, run) = app
        .get_json(&format!(
            "/v1/runs/{}",
            cancelled["run_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(run["status"], "cancelled");
    finding(&report, "replay");
    finding(&report, "tabs");
    finding(&report, "lists");
    for page in [
        "new-run",
        "run-live",
        "run-input",
        "plan",
        "timeline",
        "steps",
        "runs",
        "workflows",
    ] {
        assert_png(&screenshots().join("runs").join(format!("{page}.png")));
    }
}

#[tokio::test]
async fn the_console_searches_runs_again_picks_models_and_times_waits_and_failures() {
    let app = spawn_app(|c| {
        for alias in ["zeta-small", "alpha-large"] {
            c.llm
                .models
                .insert(alias.into(), ModelAlias::new("offline", "offline"));
        }
    })
    .await;
    put_workflow(&app, &approve_spend()).await;
    // A finished run with every part of a request a second run must repeat.
    let request = json!({
        "input": "예산을 100% 늘려 줘: what is 17 * 23?",
        "orchestration": "simple",
        "model": "alpha-large",
        "limits": {"max_steps": 9},
        "metadata": {"team": "search"},
        "session_id": "papercuts"
    });
    let first = app.create_run(request.clone()).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.follow(&first).await;
    // `%` in a search is a percent sign: this one must not match "100%".
    let other = app
        .create_run(json!({"input": "raise it by 1000 won", "orchestration": "simple"}))
        .await;
    app.follow(other["id"].as_str().unwrap()).await;
    // A failure that takes (nearly) no time, after a wait that does: a sliver on a plain chart,
    // which the timeline must still draw visibly. How short it is depends on the machine's
    // load, so the browser checks every failed bar's drawn width, whatever its duration.
    let failed = app
        .create_run(
            json!({"input": "fail fast", "orchestration": "fixed", "plan": {"steps": [
                {"id": "pause", "kind": "wait", "input": {"duration_ms": 600}},
                {"id": "broken", "kind": "tool", "depends_on": ["pause"],
                 "input": {"tool": "math.calculate", "arguments": {"expression": "1 +"}}}
            ]}}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let events = app.follow(&failed).await;
    assert_eq!(final_data(&events)["status"], "failed");
    let (_, steps) = app.get_json(&format!("/v1/runs/{failed}/steps")).await;
    let broken: Vec<&Value> = steps
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["step_id"] == "broken")
        .collect();
    assert!(
        broken
            .iter()
            .all(|s| s["status"] == "failed" && s["duration_ms"].as_u64().is_some()),
        "{steps}"
    );
    // A run that waits for a human.
    let waiting = app
        .create_run(json!({"input": {"amount": 5}, "workflow": "approve-spend"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut stream = app.events(&waiting).await;
    while let Some(event) = stream.next_event().await {
        if event.kind() == "input_required" {
            break;
        }
    }

    let runs = json!({"first": first, "failed": failed, "waiting": waiting}).to_string();
    let report = browser("papercuts", &app.base, Some(&runs)).await;

    finding(&report, "fonts");
    finding(&report, "ticking");
    finding(&report, "stopped");
    finding(&report, "axis");
    let again = finding(&report, "again")["run_id"].as_str().unwrap();
    assert_ne!(again, first);
    let (_, original) = app.get_json(&format!("/v1/runs/{first}")).await;
    let (_, rerun) = app.get_json(&format!("/v1/runs/{again}")).await;
    assert_eq!(original["request"], request);
    assert_eq!(
        rerun["request"], request,
        "the second run asked for the same"
    );
    let picked = finding(&report, "model")["run_id"].as_str().unwrap();
    let (_, run) = app.get_json(&format!("/v1/runs/{picked}")).await;
    assert_eq!(run["request"]["model"], "zeta-small");
    let search = finding(&report, "search");
    let mut shown: Vec<&str> = search["run_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    shown.sort_unstable();
    let mut want = vec![first.as_str(), again];
    want.sort_unstable();
    assert_eq!(
        shown, want,
        "the search shows the runs whose input has 100%"
    );
    for page in ["timeline-axis", "run-again", "search"] {
        assert_png(&screenshots().join("papercuts").join(format!("{page}.png")));
    }
}

#[tokio::test]
async fn the_console_shows_each_plan_version_with_its_trigger_and_diff() {
    let app = spawn_app(|_| {}).await;
    // The offline model plans five steps, the first fails, and it re-plans.
    let events = app
        .stream_run(
            json!({"input": "read missing.txt, analyse it, then write a summary",
                           "orchestration": "reactive"}),
        )
        .await;
    let run_id = events[0].json()["run_id"].as_str().unwrap().to_owned();
    let (_, versions) = app.get_json(&format!("/v1/runs/{run_id}/plans")).await;
    assert_eq!(versions.as_array().map(Vec::len), Some(2), "{versions}");

    let report = browser("plans", &app.base, Some(&run_id)).await;
    finding(&report, "plans");
    assert_png(&screenshots().join("plans").join("plan-versions.png"));
}

#[tokio::test]
async fn the_console_asks_for_the_api_key_and_uses_it() {
    const KEY: &str = "console-test-key-0123456789";
    let app = spawn_app(|c| {
        c.auth.api_keys = vec![ApiKey {
            user: None,
            key: Secret::new(KEY),
            tenant: "a".into(),
        }];
    })
    .await;
    let report = browser("key", &app.base, Some(KEY)).await;
    finding(&report, "key");
    assert_png(&screenshots().join("key").join("api-key.png"));
}

#[tokio::test]
async fn the_console_shows_schedules_their_runs_and_disables_and_deletes_them() {
    let app = spawn_app(|_| {}).await;
    let run = json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
        { "id": "a", "kind": "tool", "input": { "tool": "math.calculate",
          "arguments": { "expression": "1 + 1" } } } ] } });
    let mut ids = Vec::new();
    for body in [
        json!({ "name": "every second", "interval_ms": 1000, "run": run }),
        json!({ "name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Paris", "run": run }),
    ] {
        let (status, created) = app.post_json("/v1/schedules", &body).await;
        assert_eq!(status, 201, "{created}");
        ids.push(created["id"].as_str().unwrap().to_owned());
    }
    let report = browser("schedules", &app.base, Some(&ids.join(","))).await;
    finding(&report, "schedules");
    assert_png(&screenshots().join("schedules").join("schedules.png"));
    let (_, kept) = app.get_json(&format!("/v1/schedules/{}", ids[0])).await;
    assert_eq!(kept["enabled"], false, "the browser disabled it: {kept}");
    let (status, _) = app.get_json(&format!("/v1/schedules/{}", ids[1])).await;
    assert_eq!(status, 404, "the browser deleted it");
    // Created in the form (a cron schedule), then edited into an interval.
    let (_, list) = app.get_json("/v1/schedules").await;
    let made: Vec<&Value> = list["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| !ids.contains(&s["id"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(made.len(), 1, "{list}");
    let made = made[0];
    assert_eq!(made["name"], "every two hours", "{made}");
    assert_eq!(
        (&made["interval_ms"], &made["cron"]),
        (&json!(7_200_000), &Value::Null)
    );
    assert_eq!(
        made["run"],
        json!({"input": "morning report", "orchestration": "simple"})
    );
    assert_eq!(made["enabled"], true);
}

fn run_id(run: &Value) -> String {
    run["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_console_marks_a_run_that_succeeded_in_part_and_filters_for_it() {
    let app = spawn_app(|_| {}).await;
    let calc = |id: &str, e: &str| json!({ "id": id, "kind": "tool", "input": { "tool": "math.calculate", "arguments": { "expression": e } } });
    // One step fails, the other completes, and the plan goes on: `succeeded`, `partial`.
    let partial = run_id(
        &app.create_run(json!({ "input": "x", "orchestration": "fixed", "plan": {
            "settings": { "stop_on_first_failure": false },
            "steps": [calc("broken", "1 +"), calc("fine", "1 + 1")] } }))
            .await,
    );
    let plain = run_id(
        &app.create_run(json!({ "input": "y", "orchestration": "fixed",
            "plan": { "steps": [calc("fine", "2 + 2")] } }))
            .await,
    );
    for id in [&partial, &plain] {
        app.follow(id).await;
    }
    let (_, run) = app.get_json(&format!("/v1/runs/{partial}")).await;
    assert_eq!(
        (&run["status"], &run["completion"]),
        (&json!("succeeded"), &json!("partial"))
    );
    let arg = json!({ "partial": partial, "plain": plain }).to_string();
    let report = browser("partial", &app.base, Some(&arg)).await;
    assert_eq!(finding(&report, "partial")["shown"], json!([partial]));
    for page in ["runs-partial", "run-partial"] {
        assert_png(&screenshots().join("partial").join(format!("{page}.png")));
    }
}

#[tokio::test]
async fn the_console_cancels_runs_again_and_deletes_the_runs_ticked_on_the_list() {
    let app = spawn_app(|_| {}).await;
    put_workflow(&app, &approve_spend()).await;
    let mut waiting = Vec::new();
    for amount in [1, 2] {
        let id = run_id(
            &app.create_run(json!({"input": {"amount": amount}, "workflow": "approve-spend"}))
                .await,
        );
        let url = app.url(&format!("/v1/runs/{id}"));
        crate::support::app::poll_json(&app.client, &url, |r| r["status"] == "waiting_input").await;
        waiting.push(id);
    }
    let request = json!({ "input": "once more", "orchestration": "fixed", "metadata": {"batch": "yes"},
        "plan": { "steps": [{ "id": "a", "kind": "tool", "input": { "tool": "math.calculate",
        "arguments": { "expression": "2 * 21" } } }] } });
    let done = run_id(&app.create_run(request.clone()).await);
    app.follow(&done).await;

    let arg = json!({ "waiting": waiting, "done": done }).to_string();
    let report = browser("batch", &app.base, Some(&arg)).await;
    for id in &waiting {
        let (_, run) = app.get_json(&format!("/v1/runs/{id}")).await;
        assert_eq!(run["status"], "cancelled", "{run}");
    }
    let again = finding(&report, "batch")["again"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(again, done);
    let (_, rerun) = app.get_json(&format!("/v1/runs/{again}")).await;
    assert_eq!(rerun["request"], request, "the new run asked for the same");
    let (status, _) = app.get_json(&format!("/v1/runs/{done}")).await;
    assert_eq!(status, 404, "the browser deleted it");
    assert_png(&screenshots().join("batch").join("runs-batch.png"));
}

#[tokio::test]
async fn the_console_starts_a_run_with_every_option_and_shows_its_plan_for_review_as_a_graph() {
    let receiver = axum::Router::new().route("/hook", axum::routing::post(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, receiver).await.unwrap() });
    let app = spawn_app(|c| {
        c.webhooks.secret = Secret::new("whsec-test-key-0123456789");
        c.tools.http_allow_private = true;
    })
    .await;
    let report = browser("options", &app.base, Some(&hook)).await;
    let id = finding(&report, "options")["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, run) = app.get_json(&format!("/v1/runs/{id}")).await;
    let request = &run["request"];
    assert_eq!(request["orchestration"], "planner", "{run}");
    assert_eq!(request["review_plans"], true, "{run}");
    assert_eq!(request["priority"], 7, "{run}");
    assert_eq!(request["session_id"], "options-1", "{run}");
    assert_eq!(request["concurrency"], "enqueue", "{run}");
    assert_eq!(request["webhook"], json!({ "url": hook }), "{run}");
    let (_, plans) = app.get_json(&format!("/v1/runs/{id}/plans")).await;
    assert!(
        !plans.as_array().unwrap().is_empty(),
        "the reviewed plan ran: {plans}"
    );
    for page in ["new-run-options", "review-graph"] {
        assert_png(&screenshots().join("options").join(format!("{page}.png")));
    }
}

#[tokio::test]
async fn the_console_marks_the_step_a_live_run_is_running_on_its_plan_graph() {
    let app = spawn_app(|_| {}).await;
    // `hold` waits a minute: the browser sees it running, then cancels the run.
    let run = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
            { "id": "first", "kind": "tool", "input": { "tool": "math.calculate", "arguments": { "expression": "1 + 1" } } },
            { "id": "hold", "kind": "wait", "depends_on": ["first"], "input": { "duration_ms": 60000 } },
            { "id": "then", "kind": "tool", "depends_on": ["hold"], "input": { "tool": "math.calculate", "arguments": { "expression": "2 + 2" } } }
        ] } }))
        .await;
    let id = run_id(&run);
    let report = browser("highlight", &app.base, Some(&id)).await;
    finding(&report, "highlight");
    let (_, run) = app.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(
        run["status"], "cancelled",
        "the browser cancelled it: {run}"
    );
    assert_png(&screenshots().join("highlight").join("plan-running.png"));
}

#[tokio::test]
async fn the_console_shows_a_session_and_changes_its_variables() {
    let app = spawn_app(|_| {}).await;
    let resp = app
        .client
        .patch(app.url("/v1/sessions/chat-7"))
        .json(&json!({ "variables": { "n": 3 } }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let run = app
        .create_run(
            json!({ "input": "x", "orchestration": "fixed", "session_id": "chat-7", "concurrency": "enqueue",
            "plan": { "steps": [{ "id": "a", "kind": "tool", "input": { "tool": "math.calculate",
                "arguments": { "expression": "{{ session.n }} + 1" } } }] } }),
        )
        .await;
    let id = run["id"].as_str().unwrap();
    app.follow(id).await;
    let report = browser("session", &app.base, Some(id)).await;
    finding(&report, "session");
    assert_png(&screenshots().join("session").join("session.png"));
    let (_, session) = app.get_json("/v1/sessions/chat-7").await;
    assert_eq!(
        session["variables"],
        json!({ "topic": { "animal": "cats" } }),
        "{session}"
    );
}

#[tokio::test]
async fn the_console_shows_a_runs_webhook_and_its_attempts() {
    // A receiver that takes every delivery.
    let receiver = axum::Router::new().route("/hook", axum::routing::post(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, receiver).await.unwrap() });
    let app = spawn_app(|c| {
        c.webhooks.secret = Secret::new("whsec-test-key-0123456789");
        c.tools.http_allow_private = true;
    })
    .await;
    let run = app
        .create_run(
            json!({ "input": "x", "orchestration": "fixed", "webhook": { "url": hook },
            "plan": { "steps": [{ "id": "a", "kind": "tool", "input": { "tool": "math.calculate",
                "arguments": { "expression": "1 + 1" } } }] } }),
        )
        .await;
    let id = run["id"].as_str().unwrap();
    // Delivered first: the page shows the state it loads when the panel opens.
    let deadline = std::time::Instant::now() + crate::support::PATIENCE;
    loop {
        let (_, d) = app.get_json(&format!("/v1/runs/{id}/webhook")).await;
        if d["state"] == "delivered" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{d}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let report = browser("webhook", &app.base, Some(id)).await;
    finding(&report, "webhook");
    assert_png(&screenshots().join("webhook").join("webhook.png"));
}

#[tokio::test]
async fn the_console_shows_a_forks_family_forks_a_run_and_takes_a_reactive_run_back() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let calc = |id: &str, deps: &[&str], e: &str| {
        json!({ "id": id, "kind": "tool", "depends_on": deps,
        "input": { "tool": "math.calculate", "arguments": { "expression": e } } })
    };
    let plan = json!({ "steps": [
        calc("a", &[], "1 + 1"),
        calc("b", &["a"], "{{ steps.a.output.result }} * 10"),
        calc("c", &["b"], "{{ steps.b.output.result }} + {{ input.n }}"),
    ], "output": "{{ steps.c.output.result }}" });
    let run = app
        .create_run(json!({ "input": { "n": 1 }, "orchestration": "fixed", "plan": plan }))
        .await;
    let parent = run["id"].as_str().unwrap().to_owned();
    app.follow(&parent).await;
    let (status, fork) = app
        .post_json(
            &format!("/v1/runs/{parent}/fork"),
            &json!({ "checkpoint": 2 }),
        )
        .await;
    assert_eq!(status, 201, "{fork}");
    let fork = fork["id"].as_str().unwrap().to_owned();
    // A reactive run at version 2, waiting for an answer.
    let ask = |id: &str| json!({ "id": id, "kind": "user_input", "depends_on": ["a"], "input": { "prompt": "Go on?" } });
    let v2 = json!({ "steps": [calc("a", &[], "1 + 1"), ask("ask2")] });
    llm.push(Reply::json(
        json!({ "strategy": "complete", "reason": "r", "completes_task": true, "plan": v2 }),
    ));
    let run = app
        .create_run(json!({ "input": "x", "orchestration": "reactive",
            "plan": { "steps": [calc("a", &[], "1 + 1"), ask("ask")] } }))
        .await;
    let reactive = run["id"].as_str().unwrap().to_owned();
    let waiting = |app: &TestApp, id: String, version: u64| {
        let url = app.url(&format!("/v1/runs/{id}"));
        let client = app.client.clone();
        async move {
            crate::support::app::poll_json(&client, &url, |r| {
                r["status"] == "waiting_input" && r["plan_version"] == version
            })
            .await
        }
    };
    waiting(&app, reactive.clone(), 1).await;
    let (status, _) = app
        .post_json(
            &format!("/v1/runs/{reactive}/replan"),
            &json!({ "message": "ask again" }),
        )
        .await;
    assert_eq!(status, 202);
    waiting(&app, reactive.clone(), 2).await;

    let arg = format!("{parent},{fork},{reactive}");
    let report = browser("fork", &app.base, Some(&arg)).await;
    let made = finding(&report, "fork")["made"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_png(&screenshots().join("fork").join("family.png"));
    let (_, made) = app.get_json(&format!("/v1/runs/{made}")).await;
    assert_eq!(
        made["parent"],
        json!({ "run_id": parent, "checkpoint": 1 }),
        "{made}"
    );
    assert_eq!(made["input"], json!({ "n": 5 }));
    let events = app.follow(made["id"].as_str().unwrap()).await;
    assert_eq!(final_data(&events)["output"], 25);
    let versions = waiting(&app, reactive.clone(), 3).await;
    assert_eq!(versions["plan_version"], 3);
    let (_, plans) = app.get_json(&format!("/v1/runs/{reactive}/plans")).await;
    assert_eq!(plans[2]["restored_version"], 1, "{plans}");
    app.post_json(&format!("/v1/runs/{reactive}/cancel"), &json!({}))
        .await;
}

#[tokio::test]
async fn the_console_pauses_and_resumes_a_run() {
    let app = spawn_app(|_| {}).await;
    let run = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
            { "id": "ask", "kind": "user_input", "input": { "prompt": "Go on?" } },
            { "id": "next", "kind": "tool", "depends_on": ["ask"], "input": { "tool": "math.calculate",
              "arguments": { "expression": "1 + 1" } } }] } }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let url = app.url(&format!("/v1/runs/{id}"));
    crate::support::app::poll_json(&app.client, &url, |r| r["status"] == "waiting_input").await;
    let report = browser("pause", &app.base, Some(&id)).await;
    finding(&report, "pause");
    assert_png(&screenshots().join("pause").join("paused.png"));
    let events = app.stored_events(&id).await;
    let at = |pred: &dyn Fn(&Value) -> bool| events.iter().position(pred).unwrap();
    let paused = at(&|e| e["kind"] == "status" && e["data"]["status"] == "paused");
    let next = at(&|e| e["kind"] == "step" && e["step_id"] == "next");
    assert!(paused < next, "`next` started only after the pause");
}

#[tokio::test]
async fn the_console_shows_a_plan_under_review_and_approves_it() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let plan = json!({ "steps": [{ "id": "one", "kind": "tool", "input": { "tool": "math.calculate",
        "arguments": { "expression": "6 * 7" } } }], "output": "{{ steps.one.output.result }}" });
    llm.push(Reply::json(plan.clone()));
    let run = app
        .create_run(json!({ "input": "x", "orchestration": "planner", "review_plans": true }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let url = app.url(&format!("/v1/runs/{id}"));
    crate::support::app::poll_json(&app.client, &url, |r| r["status"] == "waiting_input").await;
    let report = browser("review", &app.base, Some(&id)).await;
    finding(&report, "review");
    assert_png(&screenshots().join("review").join("review.png"));
    let (_, run) = app.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(run["output"], 42, "{run}");
    let (_, plans) = app.get_json(&format!("/v1/runs/{id}/plans")).await;
    assert_eq!(plans[0]["plan"], plan);
}

#[tokio::test]
async fn console_files_are_served_with_a_strict_policy_and_can_be_turned_off() {
    let app = spawn_app(|_| {}).await;
    let page = app.client.get(app.url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(page.text().await.unwrap().contains("/console/app.js"));
    let script = app
        .client
        .get(app.url("/console/run.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        script.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    let missing = app
        .client
        .get(app.url("/console/secret.txt"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(
        missing.headers()["content-type"],
        "application/problem+json"
    );

    let off = spawn_app(|c| c.server.console = false).await;
    let (status, problem) = off.get_json("/").await;
    assert_eq!((status, problem["code"].as_str()), (404, Some("not_found")));
}

#[tokio::test]
async fn the_console_edits_a_workflow_and_an_agent_in_place() {
    let app = spawn_app(|_| {}).await;
    put_workflow(&app, &approve_spend()).await;
    let agent = json!({ "description": "Finds facts.", "instructions": "You research.",
        "tools": ["clock.now", "math.calculate"], "model": "default" });
    let response = app
        .client
        .put(app.url("/v1/agents/researcher"))
        .json(&agent)
        .send()
        .await
        .expect("PUT agent");
    assert_eq!(response.status(), 201);
    let report = browser("registry", &app.base, None).await;
    finding(&report, "registry");
    let (_, workflow) = app.get_json("/v1/workflows/approve-spend").await;
    let mut wanted = approve_spend();
    wanted["description"] = json!("Quote, ask, record: edited in the console.");
    assert_eq!(
        workflow["definition"], wanted,
        "only the description changed"
    );
    let (_, agent) = app.get_json("/v1/agents/researcher").await;
    assert_eq!(
        agent["definition"]["instructions"],
        "You research, and cite."
    );
    assert_eq!(agent["description"], "Finds facts, edited.");
    for page in ["workflow-refused", "agent-edited"] {
        assert_png(&screenshots().join("registry").join(format!("{page}.png")));
    }
}

#[tokio::test]
async fn the_console_shows_versions_diffs_and_moves_a_label() {
    let app = spawn_app(|_| {}).await;
    put_workflow(&app, &approve_spend()).await;
    let mut second = approve_spend();
    second["description"] = json!("Quote, ask, record: the second version.");
    let response = app
        .client
        .put(app.url("/v1/workflows/approve-spend?message=Say%20what%20changed&author=the-test"))
        .json(&second)
        .send()
        .await
        .expect("PUT workflow");
    assert_eq!(response.status(), 200);
    for (word, status) in [("Say", 201), ("Shout", 200)] {
        let function = json!({ "prompt": format!("{word} {{{{ input.text }}}}") });
        let response = (app
            .client
            .put(app.url("/v1/functions/shout"))
            .json(&function))
        .send()
        .await
        .expect("PUT function");
        assert_eq!(response.status(), status);
    }

    let report = browser("versions", &app.base, None).await;
    let seen = finding(&report, "versions");

    let (_, versions) = app.get_json("/v1/workflows/approve-spend/versions").await;
    assert_eq!(
        versions["labels"],
        json!({"production": 1}),
        "the label the browser moved"
    );
    assert_eq!(
        versions["latest_version"], 2,
        "moving a label stores no version"
    );
    let (_, run) = app
        .get_json(&format!("/v1/runs/{}", seen["run_id"].as_str().unwrap()))
        .await;
    assert_eq!(run["request"]["workflow"], "approve-spend@1", "{run}");
    let pinned: Vec<(&Value, &Value)> = (run["definitions"].as_array().into_iter().flatten())
        .filter(|d| d["kind"] == "workflow")
        .map(|d| (&d["name"], &d["version"]))
        .collect();
    assert_eq!(pinned, [(&json!("approve-spend"), &json!(1))], "{run}");
    assert!(seen["fact"].as_str().unwrap().contains("approve-spend v1"));
    assert!(
        seen["function_diff"].to_string().contains("Shout"),
        "{seen}"
    );
    for page in [
        "versions",
        "versions-label",
        "versions-run",
        "versions-function",
    ] {
        assert_png(&screenshots().join("versions").join(format!("{page}.png")));
    }
}

#[tokio::test]
async fn the_console_shows_workers_and_their_tasks_and_filters_them() {
    let app = spawn_app(|_| {}).await;
    let tool = json!({"queue": "shouts", "input_schema": {"type": "object", "required": ["text"],
                      "properties": {"text": {"type": "string"}}}});
    let resp = app.client.put(app.url("/v1/tools/text.shout")).json(&tool);
    assert_eq!(resp.send().await.unwrap().status(), 201);
    let call = |text: &str| {
        json!({"input": "x", "orchestration": "fixed", "plan": {"steps": [{"id": "s", "kind": "tool",
               "input": {"tool": "text.shout", "arguments": {"text": text}}}]}})
    };
    let first = app.create_run(call("claimed")).await;
    let poll = json!({"worker_id": "w-console", "queue": "shouts", "wait_ms": 5000});
    let mut tasks = Vec::new();
    while tasks.is_empty() {
        let resp = app.client.post(app.url("/v1/workers/poll")).json(&poll);
        let got: Value = resp.send().await.unwrap().json().await.unwrap();
        tasks = got["tasks"].as_array().cloned().unwrap_or_default();
    }
    let claimed = tasks[0]["id"].as_str().unwrap().to_owned();
    let beat = json!({"worker_id": "w-console", "progress": {"done": 1, "of": 2}});
    let resp = app
        .client
        .post(app.url(&format!("/v1/tasks/{claimed}/heartbeat")));
    assert_eq!(resp.json(&beat).send().await.unwrap().status(), 200);
    let second = app.create_run(call("queued")).await;
    let second = second["id"].as_str().unwrap();
    let url = app.url(&format!("/v1/tasks?run_id={second}"));
    let listed = crate::support::app::poll_json(&app.client, &url, |page| {
        page["tasks"][0]["id"].is_string()
    })
    .await;
    let queued = listed["tasks"][0]["id"].as_str().unwrap().to_owned();
    let run_id = first["id"].as_str().unwrap();
    let arg = format!("{queued},{claimed},{run_id}");
    let report = browser("tasks", &app.base, Some(&arg)).await;
    finding(&report, "tasks");
    assert_png(&screenshots().join("tasks").join("tasks.png"));
}
