//! Per-tenant quotas over HTTP: runs in progress, runs per minute and tokens per day, each
//! refused with 429 `quota_exceeded` and `Retry-After`; usage over the API and in the
//! metrics; a tenant's own quota beside the default; the limit across two replicas.

use orca::domain::quota::Quota;
use serde_json::{Value, json};

use crate::support::*;

const OPERATOR_KEY: &str = "operator-0123456789abcdef";

fn waiting() -> Value {
    json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
        { "id": "ask", "kind": "user_input", "input": { "prompt": "Go on?" } }] } })
}

/// POSTs a run: its status, `Retry-After` and body.
async fn post_run(client: &reqwest::Client, url: &str, body: &Value) -> (u16, Option<u64>, Value) {
    let resp = client.post(url).json(body).send().await.unwrap();
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    (status, retry, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn runs_in_progress_past_the_quota_are_refused_until_one_ends() {
    let app = spawn_app(|c| {
        two_tenants(c, ["key-a-0123456789abcdef", "key-b-0123456789abcdef"]);
        c.auth.operator_keys = vec![orca::config::Secret::new(OPERATOR_KEY)];
        c.quotas.default = Quota {
            running_runs: 2,
            ..Default::default()
        };
        c.quotas.tenants.insert("b".into(), Quota::default());
    })
    .await;
    let (a, b) = (
        bearer_client("key-a-0123456789abcdef"),
        bearer_client("key-b-0123456789abcdef"),
    );
    let runs = app.url("/v1/runs");
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (status, _, run) = post_run(&a, &runs, &waiting()).await;
        assert_eq!(status, 201, "{run}");
        ids.push(run["id"].as_str().unwrap().to_owned());
    }
    let (status, retry, problem) = post_run(&a, &runs, &waiting()).await;
    assert_eq!(
        (status, problem["code"].clone()),
        (429, json!("quota_exceeded")),
        "{problem}"
    );
    assert_eq!(retry, Some(5));
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("running_runs") && detail.contains("2 runs in progress"),
        "{detail}"
    );
    // Tenant b has its own quota (none).
    for _ in 0..3 {
        assert_eq!(post_run(&b, &runs, &waiting()).await.0, 201);
    }
    let usage: Value = a
        .get(app.url("/v1/usage"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(usage["tenant"], "a");
    assert_eq!(usage["usage"]["running_runs"], 2, "{usage}");
    assert_eq!(usage["quota"]["running_runs"], 2, "{usage}");
    let metrics = a
        .get(app.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"orca_quota_refusals_total{tenant="a",quota="running_runs"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"orca_tenant_runs_in_progress{tenant="a"} 2"#),
        "{metrics}"
    );
    // A tenant's key reads its own tenant's series only; an operator's key reads them all.
    assert!(!metrics.contains(r#"tenant="b""#), "{metrics}");
    let operator = bearer_client(OPERATOR_KEY);
    let all = operator.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(all.status(), 200);
    let all = all.text().await.unwrap();
    assert!(
        all.contains(r#"orca_tenant_runs_in_progress{tenant="a"} 2"#)
            && all.contains(r#"orca_tenant_runs_in_progress{tenant="b"} 3"#),
        "{all}"
    );
    let b_reads = b.get(app.url("/metrics")).send().await.unwrap();
    let b_reads = b_reads.text().await.unwrap();
    assert!(
        b_reads.contains(r#"orca_tenant_runs_in_progress{tenant="b"} 3"#)
            && !b_reads.contains(r#"tenant="a""#),
        "{b_reads}"
    );
    // An operator's key is no tenant's: it reads nothing under /v1.
    let refused = operator.get(app.url("/v1/runs")).send().await.unwrap();
    assert_eq!(refused.status(), 403);

    // One ends: another fits.
    let cancel = a
        .post(app.url(&format!("/v1/runs/{}/cancel", ids[0])))
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), 202);
    let url = app.url(&format!("/v1/runs/{}", ids[0]));
    poll_json(&a, &url, |r| r["status"] == "cancelled").await;
    assert_eq!(post_run(&a, &runs, &waiting()).await.0, 201);
}

#[tokio::test]
async fn runs_per_minute_and_tokens_per_day_are_refused_with_when_to_try_again() {
    let app = spawn_app(|c| {
        c.quotas.default = Quota {
            runs_per_minute: 3,
            ..Default::default()
        }
    })
    .await;
    let runs = app.url("/v1/runs");
    let calc = calc_in(None);
    for _ in 0..3 {
        assert_eq!(post_run(&app.client, &runs, &calc).await.0, 201);
    }
    let (status, retry, problem) = post_run(&app.client, &runs, &calc).await;
    assert_eq!(
        (status, problem["code"].clone()),
        (429, json!("quota_exceeded")),
        "{problem}"
    );
    let retry = retry.unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("runs_per_minute"),
        "{problem}"
    );
    // A fork is a new run too.
    let (_, list) = app.get_json("/v1/runs?limit=1").await;
    let id = list["runs"][0]["id"].as_str().unwrap();
    let (status, _) = app
        .post_json(&format!("/v1/runs/{id}/fork"), &json!({}))
        .await;
    assert_eq!(status, 429);

    let app = spawn_app(|c| {
        c.quotas.default = Quota {
            tokens_per_day: 1,
            ..Default::default()
        }
    })
    .await;
    let events = app
        .stream_run(json!({ "input": "hello", "orchestration": "simple" }))
        .await;
    let used = final_data(&events)["usage"].clone();
    assert!(used["prompt_tokens"].as_u64().unwrap() > 0, "{used}");
    let (status, retry, problem) = post_run(
        &app.client,
        &app.url("/v1/runs"),
        &json!({ "input": "again" }),
    )
    .await;
    assert_eq!(
        (status, problem["code"].clone()),
        (429, json!("quota_exceeded")),
        "{problem}"
    );
    assert!((1..=86_400).contains(&retry.unwrap()));
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("tokens_per_day"),
        "{problem}"
    );
    let (_, usage) = app.get_json("/v1/usage").await;
    assert!(
        usage["usage"]["tokens_today"].as_u64().unwrap() > 0,
        "{usage}"
    );
}

#[tokio::test]
async fn a_quota_holds_across_two_replicas_however_many_ask_at_once() {
    let replicas = TwoReplicas::start(&[
        ("ORCA_LLM__PROVIDER", "offline"),
        ("ORCA_QUOTAS__DEFAULT__RUNNING_RUNS", "3"),
    ])
    .await;
    let (a, b) = (&replicas.a, &replicas.b);
    let tries = (0..30).map(|i| {
        let server = if i % 2 == 0 { a } else { b };
        let url = server.url("/v1/runs");
        let client = server.client.clone();
        async move { post_run(&client, &url, &waiting()).await.0 }
    });
    let answers = futures::future::join_all(tries).await;
    let created = answers.iter().filter(|s| **s == 201).count();
    assert_eq!(created, 3, "{answers:?}");
    assert!(
        answers.iter().all(|s| *s == 201 || *s == 429),
        "{answers:?}"
    );
}

#[tokio::test]
async fn higher_priority_runs_leave_the_queue_and_higher_priority_steps_start_first() {
    let app = spawn_app(|c| c.engine.max_running_runs = 1).await;
    // One run holds the only slot; three wait for it with different priorities.
    let blocker = app
        .create_run(
            json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
            { "id": "hold", "kind": "wait", "input": { "duration_ms": 600000 } }] } }),
        )
        .await;
    let blocker = blocker["id"].as_str().unwrap().to_owned();
    let url = app.url(&format!("/v1/runs/{blocker}"));
    poll_json(&app.client, &url, |r| r["status"] == "running").await;
    let mut ids = Vec::new();
    for priority in [0, 10, 5] {
        let run = app.create_run(calc_at(priority)).await;
        let id = run["id"].as_str().unwrap().to_owned();
        wait_queued(&app.client, &app, &id).await;
        ids.push(id);
    }
    let (_, detail) = app.get_json(&format!("/v1/runs/{}", ids[1])).await;
    assert_eq!(detail["request"]["priority"], 10);
    assert_eq!(
        app.post_json(&format!("/v1/runs/{blocker}/cancel"), &json!({}))
            .await
            .0,
        202
    );
    let mut started = Vec::new();
    for id in &ids {
        let url = app.url(&format!("/v1/runs/{id}"));
        let run = poll_json(&app.client, &url, |r| r["status"] == "succeeded").await;
        started.push((
            run["started_at"].as_str().unwrap().to_owned(),
            run["request"]["priority"].clone(),
        ));
    }
    started.sort_by(|a, b| a.0.cmp(&b.0));
    let order: Vec<Value> = started.into_iter().map(|(_, p)| p).collect();
    assert_eq!(
        order,
        [json!(10), json!(5), Value::Null],
        "the default priority (0) is left out"
    );

    // Steps: with one at a time, the ready ones start by priority.
    let step = |id: &str, priority: i64| {
        json!({ "id": id, "kind": "tool", "priority": priority,
        "input": { "tool": "math.calculate", "arguments": { "expression": "1 + 1" } } })
    };
    let plan = json!({ "settings": { "max_parallel_steps": 1 },
        "steps": [step("low", 0), step("high", 10), step("mid", 5)] });
    let events = app
        .stream_run(json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
        .await;
    let starts: Vec<String> = events
        .iter()
        .map(SseMessage::json)
        .filter(|e| e["kind"] == "step" && e["data"]["status"] == "running")
        .map(|e| e["step_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(starts, ["high", "mid", "low"]);
    let (status, problem) = app
        .post_json("/v1/runs", &json!({ "input": "x", "priority": 5000 }))
        .await;
    assert_eq!(
        (status, problem["errors"][0]["pointer"].clone()),
        (422, json!("/priority")),
        "{problem}"
    );
}

/// Waits until run `id` waits for a slot: its `queued` event is stored.
async fn wait_queued(client: &reqwest::Client, app: &TestApp, id: &str) {
    let events = app.url(&format!("/v1/runs/{id}/events"));
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let stored: Value = client
            .get(&events)
            .header("accept", "application/json")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if stored.as_array().is_some_and(|e| !e.is_empty()) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the run never queued");
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn a_tenants_priority_orders_its_own_runs_and_tenants_share_the_queue_fairly() {
    // And one tenant's queued runs cannot fill the queue: `queued_runs` keeps room for others.
    let app = spawn_app(|c| {
        two_tenants(c, ["key-a-0123456789abcdef", "key-b-0123456789abcdef"]);
        c.engine.max_running_runs = 1;
        c.engine.max_queued_runs = 5;
        c.quotas.default.max_priority = Some(100);
        c.quotas.default.queued_runs = 3;
    })
    .await;
    let (a, b) = (
        bearer_client("key-a-0123456789abcdef"),
        bearer_client("key-b-0123456789abcdef"),
    );
    let runs = app.url("/v1/runs");
    // Past the operator's cap: refused, naming it.
    let (status, _, problem) =
        post_run(&a, &runs, &json!({ "input": "x", "priority": 1000 })).await;
    assert_eq!(
        (status, problem["errors"][0]["pointer"].clone()),
        (422, json!("/priority")),
        "{problem}"
    );
    let message = problem["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("at most 100") && message.contains("max_priority"),
        "{message}"
    );

    // Tenant a holds the only slot, then queues three runs at its highest priority; tenant b
    // queues one at priority 0 after them.
    let hold = json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
        { "id": "hold", "kind": "wait", "input": { "duration_ms": 600000 } }] } });
    let (_, _, blocker) = post_run(&a, &runs, &hold).await;
    let blocker = blocker["id"].as_str().unwrap().to_owned();
    poll_json(&a, &app.url(&format!("/v1/runs/{blocker}")), |r| {
        r["status"] == "running"
    })
    .await;
    let mut queued = Vec::new();
    for (client, tenant, priority) in [(&a, "a", 100), (&a, "a", 100), (&a, "a", 100), (&b, "b", 0)]
    {
        let (status, _, run) = post_run(client, &runs, &calc_at(priority)).await;
        assert_eq!(status, 201, "{run}");
        let id = run["id"].as_str().unwrap().to_owned();
        wait_queued(client, &app, &id).await;
        queued.push((client, tenant, id));
    }
    // The queue has room for one more, but not for a fourth of a's.
    let (status, retry, problem) = post_run(&a, &runs, &calc_at(0)).await;
    assert_eq!((status, retry), (429, Some(1)), "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("`queued_runs` is 3") && detail.contains("3 runs queued"),
        "{detail}"
    );
    let cancel = a
        .post(app.url(&format!("/v1/runs/{blocker}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), 202);
    let mut started = Vec::new();
    for (client, tenant, id) in queued {
        let url = app.url(&format!("/v1/runs/{id}"));
        let run = poll_json(client, &url, |r| r["status"] == "succeeded").await;
        started.push((run["started_at"].as_str().unwrap().to_owned(), tenant));
    }
    started.sort();
    let order: Vec<&str> = started.into_iter().map(|(_, t)| t).collect();
    // Tenant a had the slot last: b's turn comes first, whatever a's priority.
    assert_eq!(order, ["b", "a", "a", "a"]);
}

/// A run of one `math.calculate` step, in `session` when given.
fn calc_in(session: Option<&str>) -> Value {
    let mut body = json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [{
        "id": "a", "kind": "tool",
        "input": { "tool": "math.calculate", "arguments": { "expression": "1 + 1" } } }] } });
    if let Some(s) = session {
        body["session_id"] = json!(s);
    }
    body
}

/// A run of one `math.calculate` step at `priority`.
fn calc_at(priority: i64) -> Value {
    let mut body = calc_in(None);
    body["priority"] = json!(priority);
    body
}

/// Creates a run and waits for its end; its id.
async fn finished_run(app: &TestApp, body: Value) -> String {
    let run = app.create_run(body).await;
    let id = run["id"].as_str().unwrap().to_owned();
    app.follow(&id).await;
    id
}

#[tokio::test]
async fn deleting_runs_or_sessions_or_sweeping_them_gives_no_quota_back() {
    // runs_per_minute: deleted runs (one by one, and a session's) still count.
    let app = spawn_app(|c| {
        c.quotas.default = Quota {
            runs_per_minute: 3,
            ..Default::default()
        }
    })
    .await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        ids.push(finished_run(&app, calc_in(None)).await);
    }
    ids.push(finished_run(&app, calc_in(Some("s"))).await);
    for id in &ids[..2] {
        let resp = app
            .client
            .delete(app.url(&format!("/v1/runs/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 204);
    }
    let resp = app
        .client
        .delete(app.url("/v1/sessions/s"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    let (status, _, problem) = post_run(&app.client, &app.url("/v1/runs"), &calc_in(None)).await;
    assert_eq!(
        (status, problem["code"].clone()),
        (429, json!("quota_exceeded")),
        "{problem}"
    );
    let (_, usage) = app.get_json("/v1/usage").await;
    assert_eq!(usage["usage"]["runs_last_minute"], 3, "{usage}");

    // tokens_per_day: a deleted session's tokens still count.
    let app = spawn_app(|c| {
        c.quotas.default = Quota {
            tokens_per_day: 1,
            ..Default::default()
        }
    })
    .await;
    let run = app
        .create_run(json!({ "input": "hello", "orchestration": "simple", "session_id": "t" }))
        .await;
    app.follow(run["id"].as_str().unwrap()).await;
    let (_, before) = app.get_json("/v1/usage").await;
    let spent = before["usage"]["tokens_today"].as_u64().unwrap();
    assert!(spent > 0, "{before}");
    let resp = app
        .client
        .delete(app.url("/v1/sessions/t"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    let (_, after) = app.get_json("/v1/usage").await;
    assert_eq!(after["usage"]["tokens_today"], spent, "{after}");
    let (status, _, problem) = post_run(
        &app.client,
        &app.url("/v1/runs"),
        &json!({ "input": "again" }),
    )
    .await;
    assert_eq!(
        (status, problem["code"].clone()),
        (429, json!("quota_exceeded")),
        "{problem}"
    );

    // The retention sweeper's deletes give nothing back either.
    let app = spawn_app(|c| {
        c.retention.finished_run_days = 30;
        c.quotas.default = Quota {
            runs_per_minute: 2,
            ..Default::default()
        };
    })
    .await;
    let pool = crate::support::db::pool(app.dir.path()).await;
    let then = orca::store::fmt_time(chrono::Utc::now() - chrono::TimeDelta::days(40));
    let mut swept = Vec::new();
    for _ in 0..2 {
        let id = finished_run(&app, calc_in(None)).await;
        swept.push(id.clone());
        sqlx::query("UPDATE runs SET finished_at = $1 WHERE id = $2")
            .bind(&then)
            .bind(&id)
            .execute(&pool)
            .await
            .unwrap();
    }
    // The periodic sweep may take some of them first: whichever does, all are gone.
    app.retention.sweep_now().await.unwrap();
    for id in &swept {
        assert_eq!(app.get_json(&format!("/v1/runs/{id}")).await.0, 404);
    }
    let (status, _, problem) = post_run(&app.client, &app.url("/v1/runs"), &calc_in(None)).await;
    assert_eq!(
        (status, problem["code"].clone()),
        (429, json!("quota_exceeded")),
        "{problem}"
    );
}
