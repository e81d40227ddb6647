//! History does not grow forever: `DELETE /v1/runs/{id}` for a finished run, and the retention
//! sweeper deleting finished runs past `retention.finished_run_days`, each with every row the
//! run owns.

use std::collections::BTreeMap;

use orca::config::{ApiKey, Secret};
use orca::store::RUN_TABLES;
use serde_json::{Value, json};
use sqlx::AnyPool;

use crate::support::*;

const KEY_A: &str = "key-for-team-a-0123456789";
const KEY_B: &str = "key-for-team-b-0123456789";

/// A plan run leaves rows in events, step attempts, plans and checkpoints.
fn plan() -> Value {
    json!({ "steps": [
        { "id": "a", "kind": "tool", "input": { "tool": "math.calculate", "arguments": { "expression": "6 * 7" } } },
        { "id": "b", "kind": "tool", "depends_on": ["a"], "input": { "tool": "math.calculate", "arguments": { "expression": "{{ steps.a.output.result }} + 1" } } },
    ]})
}

/// With a question answered on the way, a plan run leaves rows in every table a run owns.
fn answered_plan() -> Value {
    json!({ "steps": [
        { "id": "a", "kind": "tool", "input": { "tool": "math.calculate", "arguments": { "expression": "6 * 7" } } },
        { "id": "ok", "kind": "user_input", "depends_on": ["a"], "input": { "prompt": "go on?" } },
        { "id": "b", "kind": "tool", "depends_on": ["ok"], "input": { "tool": "math.calculate", "arguments": { "expression": "{{ steps.a.output.result }} + 1" } } },
    ]})
}

fn waiting_plan() -> Value {
    json!({ "steps": [{ "id": "ask", "kind": "user_input", "input": { "prompt": "go on?" } }] })
}

/// A second connection to the app's database, to look at rows the API no longer shows.
async fn db(app: &TestApp) -> AnyPool {
    crate::support::db::pool(app.dir.path()).await
}

/// Rows per table (the run's own row under `runs`).
async fn rows_of(pool: &AnyPool, id: &str) -> BTreeMap<&'static str, i64> {
    let mut counts = BTreeMap::new();
    for table in RUN_TABLES.iter().copied() {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM {table} WHERE run_id = $1"
        )))
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap();
        counts.insert(table, n);
    }
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap();
    counts.insert("runs", n);
    counts
}

async fn finished_plan_run(app: &TestApp) -> String {
    let run = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "plan": answered_plan() }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut reader = app.events(&id).await;
    while reader.next_event().await.expect("the run asks").kind() != "input_required" {}
    let answered = app.answer(&id, "ok", json!(true)).await;
    assert_eq!(answered.status(), 202);
    let events = reader.read_to_final().await;
    assert_eq!(final_data(&events)["status"], "succeeded");
    id
}

async fn send(app: &TestApp, method: reqwest::Method, key: Option<&str>, path: &str) -> u16 {
    let mut req = app.client.request(method, app.url(path));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    req.send().await.expect("request").status().as_u16()
}

/// Marks runs as finished (or, for unfinished ones, created) `days` ago.
async fn age(pool: &AnyPool, ids: &[&str], days: i64) {
    let then = orca::store::fmt_time(chrono::Utc::now() - chrono::TimeDelta::days(days));
    for id in ids {
        sqlx::query(
            "UPDATE runs SET created_at = $1,
                finished_at = CASE WHEN finished_at IS NULL THEN NULL ELSE $1 END
             WHERE id = $2",
        )
        .bind(&then)
        .bind(id)
        .execute(pool)
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn deleting_a_finished_run_removes_it_and_everything_it_owns() {
    let app = spawn_app(|_| {}).await;
    let doomed = finished_plan_run(&app).await;
    let kept = finished_plan_run(&app).await;
    let pool = db(&app).await;
    // A fixed run makes no re-plan requests; give the doomed one a row there too, so every
    // table a run owns is checked.
    sqlx::query(
        "INSERT INTO replan_requests (run_id, seq, message, created_at) VALUES ($1, 1, 'x', '')",
    )
    .bind(&doomed)
    .execute(&pool)
    .await
    .unwrap();
    // As if it had named a webhook, tried once.
    for statement in [
        "INSERT INTO webhook_deliveries (run_id, tenant, url, state, created_at) VALUES ($1, 'default', 'https://e.com', 'failed', '')",
        "INSERT INTO webhook_attempts (run_id, attempt, at, duration_ms) VALUES ($1, 1, '', 0)",
    ] {
        sqlx::query(statement)
            .bind(&doomed)
            .execute(&pool)
            .await
            .unwrap();
    }
    // As if it had called a worker tool.
    sqlx::query(
        "INSERT INTO tasks (id, tenant, queue, tool, run_id, step_id, call_id, call_key,
            generation, idempotency_key, arguments, status, max_attempts, backoff_ms,
            max_backoff_ms, schedule_to_start_ms, start_to_close_ms, not_before_ms,
            start_deadline_ms, created_at_ms)
         VALUES ('t', 'default', 'q', 'w.t', $1, 's', 's', 'k', 0, 'k', '{}', 'completed', 1, 0,
            0, 1, 1, 0, 0, 0)",
    )
    .bind(&doomed)
    .execute(&pool)
    .await
    .unwrap();
    // As if a schedule's tick had started it.
    sqlx::query(
        "INSERT INTO schedule_fires (schedule_id, fire_at, run_id, fired_at) VALUES ('s', 't', $1, '')",
    )
    .bind(&doomed)
    .execute(&pool)
    .await
    .unwrap();
    let before = rows_of(&pool, &doomed).await;
    assert!(before.values().all(|n| *n > 0), "{before:?}");
    let kept_before = rows_of(&pool, &kept).await;

    let resp = app
        .client
        .delete(app.url(&format!("/v1/runs/{doomed}")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    assert_eq!(resp.text().await.unwrap(), "");

    for path in ["", "/events", "/steps", "/plans", "/checkpoints"] {
        let (status, body) = app.get_json(&format!("/v1/runs/{doomed}{path}")).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (404, Some("not_found")),
            "{path}"
        );
    }
    assert!(rows_of(&pool, &doomed).await.values().all(|n| *n == 0));
    assert_eq!(rows_of(&pool, &kept).await, kept_before);
    let (_, list) = app.get_json("/v1/runs").await;
    let listed: Vec<&str> = list["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [kept.as_str()]);
    // Gone is gone.
    let path = format!("/v1/runs/{doomed}");
    assert_eq!(send(&app, reqwest::Method::DELETE, None, &path).await, 404);
}

#[tokio::test]
async fn only_a_finished_run_of_the_caller_can_be_deleted() {
    let app = spawn_app(|c| {
        c.auth.api_keys = vec![
            ApiKey {
                user: None,
                key: Secret::new(KEY_A),
                tenant: "a".into(),
            },
            ApiKey {
                user: None,
                key: Secret::new(KEY_B),
                tenant: "b".into(),
            },
        ];
    })
    .await;
    let create = |plan: Value| {
        let app = &app;
        async move {
            let resp = app
                .client
                .post(app.url("/v1/runs"))
                .bearer_auth(KEY_A)
                .json(&json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 201);
            resp.json::<Value>().await.unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let events = |id: String| {
        let app = &app;
        async move { app.events_with_key(&id, KEY_A).await }
    };
    use reqwest::Method;

    // Not finished: 409, and the run is untouched.
    let waiting = create(waiting_plan()).await;
    let mut reader = events(waiting.clone()).await;
    while reader.next_event().await.expect("events").kind() != "input_required" {}
    let path = format!("/v1/runs/{waiting}");
    let resp = app
        .client
        .delete(app.url(&path))
        .bearer_auth(KEY_A)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 409);
    assert_eq!(resp.json::<Value>().await.unwrap()["code"], "conflict");
    assert_eq!(send(&app, Method::GET, Some(KEY_A), &path).await, 200);

    // Another tenant's finished run is as unknown as a missing one, and stays.
    let done = create(plan()).await;
    let fin = events(done.clone()).await.read_to_final().await;
    assert_eq!(final_data(&fin)["status"], "succeeded");
    let done_path = format!("/v1/runs/{done}");
    assert_eq!(
        send(&app, Method::DELETE, Some(KEY_B), &done_path).await,
        404
    );
    assert_eq!(send(&app, Method::GET, Some(KEY_A), &done_path).await, 200);
    // Unknown and malformed ids, and no credentials.
    let unknown = "/v1/runs/01900000-0000-7000-8000-000000000000";
    assert_eq!(send(&app, Method::DELETE, Some(KEY_A), unknown).await, 404);
    assert_eq!(
        send(&app, Method::DELETE, Some(KEY_A), "/v1/runs/nope").await,
        404
    );
    assert_eq!(send(&app, Method::DELETE, None, &done_path).await, 401);
    // The owner deletes it.
    assert_eq!(
        send(&app, Method::DELETE, Some(KEY_A), &done_path).await,
        204
    );

    // Once cancelled (finished), the waiting run can go too.
    let cancel = format!("/v1/runs/{waiting}/cancel");
    assert_eq!(send(&app, Method::POST, Some(KEY_A), &cancel).await, 202);
    let rest = reader.read_to_final().await;
    assert_eq!(final_data(&rest)["status"], "cancelled");
    assert_eq!(send(&app, Method::DELETE, Some(KEY_A), &path).await, 204);
}

#[tokio::test]
async fn finished_runs_past_retention_are_swept_in_batches_and_the_rest_kept() {
    let app = spawn_app(|c| {
        c.retention.finished_run_days = 30;
        c.retention.batch_runs = 2;
    })
    .await;
    let mut old = Vec::new();
    for _ in 0..5 {
        old.push(finished_plan_run(&app).await);
    }
    let recent = finished_plan_run(&app).await;
    let waiting = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "plan": waiting_plan() }))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut reader = SseReader::new(
        app.client
            .get(app.url(&format!("/v1/runs/{waiting}/events")))
            .send()
            .await
            .unwrap(),
    );
    while reader.next_event().await.expect("events").kind() != "input_required" {}

    let pool = db(&app).await;
    let old_refs: Vec<&str> = old.iter().map(String::as_str).collect();
    age(&pool, &old_refs, 40).await;
    // Old but unfinished: never swept.
    age(&pool, &[waiting.as_str()], 40).await;
    // Finished 29 days ago: within retention.
    age(&pool, &[recent.as_str()], 29).await;

    assert_eq!(app.retention.sweep_now().await.unwrap(), 5);
    for id in &old {
        assert!(rows_of(&pool, id).await.values().all(|n| *n == 0), "{id}");
        assert_eq!(app.get_json(&format!("/v1/runs/{id}")).await.0, 404);
    }
    for id in [&recent, &waiting] {
        assert_eq!(rows_of(&pool, id).await["runs"], 1);
        assert_eq!(app.get_json(&format!("/v1/runs/{id}")).await.0, 200);
    }
    assert_eq!(app.retention.sweep_now().await.unwrap(), 0);
}

#[tokio::test]
async fn with_retention_off_nothing_is_swept() {
    let app = spawn_app(|c| c.retention.finished_run_days = 0).await;
    let id = finished_plan_run(&app).await;
    age(&db(&app).await, &[id.as_str()], 10_000).await;
    assert_eq!(app.retention.sweep_now().await.unwrap(), 0);
    assert_eq!(app.get_json(&format!("/v1/runs/{id}")).await.0, 200);
}

#[tokio::test]
async fn the_sweeper_sweeps_on_its_own_at_start() {
    let app = spawn_app(|_| {}).await;
    let id = finished_plan_run(&app).await;
    age(&db(&app).await, &[id.as_str()], 31).await;
    let dir = app.stop().await;
    // The default retention (30 days) applies; the first sweep runs at start, before the
    // sweeper takes any request, so this one finds nothing left to delete.
    let app = spawn_app_in(dir, |_| {}).await;
    assert_eq!(app.retention.sweep_now().await.unwrap(), 0);
    assert_eq!(app.get_json(&format!("/v1/runs/{id}")).await.0, 404);
    assert!(
        rows_of(&db(&app).await, &id)
            .await
            .values()
            .all(|n| *n == 0)
    );
}

#[tokio::test]
async fn every_table_keyed_by_run_id_is_listed_for_deletion() {
    let dir = tempfile::tempdir().unwrap();
    let url = crate::support::db::database_url(dir.path());
    orca::store::Store::migrate(&url).await.unwrap();
    let pool = crate::support::db::pool(dir.path()).await;
    let tables_with_run_id = if crate::support::db::on_postgres() {
        "SELECT table_name::text FROM information_schema.columns
         WHERE table_schema = current_schema() AND column_name = 'run_id' ORDER BY 1"
    } else {
        "SELECT m.name FROM sqlite_master m, pragma_table_info(m.name) p
         WHERE m.type = 'table' AND p.name = 'run_id' ORDER BY m.name"
    };
    let tables: Vec<String> = sqlx::query_scalar(tables_with_run_id)
        .fetch_all(&pool)
        .await
        .unwrap();
    let mut listed: Vec<&str> = RUN_TABLES.to_vec();
    listed.sort();
    assert_eq!(
        tables, listed,
        "a table with a run_id column must be in store::RUN_TABLES so deleting a run deletes its rows"
    );
}
