//! Schedules over HTTP: created, read, changed and deleted with every bad input refused;
//! ticks that start runs linked to their schedule; missed ticks after downtime following the
//! schedule's policy across a restart; and a cron that fires once per tick across two
//! replicas sharing PostgreSQL.

use serde_json::{Value, json};
use std::collections::BTreeMap;

use crate::support::TwoReplicas;
use crate::support::db::pool;
use crate::support::{TestApp, poll_json, spawn_app, spawn_app_in, two_tenants};

fn calculation() -> Value {
    json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
        { "id": "a", "kind": "tool", "input": { "tool": "math.calculate",
          "arguments": { "expression": "6 * 7" } } }
    ] } })
}

async fn send(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    key: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut req = app
        .client
        .request(method, app.url(path))
        .header("authorization", format!("Bearer {key}"));
    if let Some(body) = body {
        req = req.json(body);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn pointers(problem: &Value) -> Vec<&str> {
    problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn schedules_are_created_read_changed_and_deleted_and_bad_ones_are_refused_whole() {
    let (key_a, key_b) = ("key-for-team-a-0123456789", "key-for-team-b-0123456789");
    let app = spawn_app(|c| two_tenants(c, [key_a, key_b])).await;
    use reqwest::Method;

    let body = json!({ "name": "nightly report", "cron": "30 2 * * *",
        "timezone": "Europe/Paris", "run": calculation() });
    let (status, created) = send(&app, Method::POST, "/v1/schedules", key_a, Some(&body)).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["enabled"], true);
    assert_eq!(created["missed"], "skip");
    assert_eq!(created["fire_count"], 0);
    let times = created["next_fire_times"].as_array().unwrap();
    assert_eq!(times.len(), 5);
    assert_eq!(times[0], created["next_fire_at"]);
    // 02:30 in Paris is 01:30 UTC in winter, 00:30 UTC in summer.
    for t in times {
        let t = t.as_str().unwrap();
        assert!(
            t.ends_with("T01:30:00Z") || t.ends_with("T00:30:00Z"),
            "{t}"
        );
    }

    // Another tenant sees none of it.
    let path = format!("/v1/schedules/{id}");
    let (status, problem) = send(&app, Method::GET, &path, key_b, None).await;
    assert_eq!((status, problem["code"].as_str()), (404, Some("not_found")));
    let (_, list) = send(&app, Method::GET, "/v1/schedules", key_b, None).await;
    assert_eq!(list["schedules"], json!([]));
    let (status, _) = send(&app, Method::DELETE, &path, key_b, None).await;
    assert_eq!(status, 404);
    let (_, list) = send(&app, Method::GET, "/v1/schedules", key_a, None).await;
    assert_eq!(list["schedules"][0]["id"], id.as_str());

    // Disabled: no next tick shown. Switched to an interval: ticks a minute apart from now.
    let patch = json!({ "enabled": false });
    let (status, off) = send(&app, Method::PATCH, &path, key_a, Some(&patch)).await;
    assert_eq!(status, 200, "{off}");
    assert_eq!(
        (off["next_fire_at"].clone(), off["next_fire_times"].clone()),
        (json!(null), json!([]))
    );
    let patch = json!({ "enabled": true, "interval_ms": 60_000, "missed": "catch_up_one" });
    let (status, every) = send(&app, Method::PATCH, &path, key_a, Some(&patch)).await;
    assert_eq!(status, 200, "{every}");
    assert_eq!(
        (every["cron"].clone(), every["timezone"].clone()),
        (json!(null), json!("UTC"))
    );
    let ticks: Vec<chrono::DateTime<chrono::Utc>> = every["next_fire_times"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ticks.len(), 5);
    assert!(
        ticks
            .windows(2)
            .all(|w| (w[1] - w[0]).num_milliseconds() == 60_000)
    );

    // Every problem of a body at once, each where it is.
    let bad = json!({ "cron": "61 * * * *", "timezone": "Mars/Olympus",
        "name": "n".repeat(201),
        "run": { "input": "x", "orchestration": "fixed", "workflow": "no-such-workflow" } });
    let (status, problem) = send(&app, Method::POST, "/v1/schedules", key_a, Some(&bad)).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (422, Some("validation_failed")),
        "{problem}"
    );
    let found = pointers(&problem);
    for want in ["/name", "/timezone", "/run/workflow"] {
        assert!(found.contains(&want), "{want} in {found:?}");
    }
    for (bad, pointer) in [
        (json!({ "run": calculation() }), "/cron"),
        (
            json!({ "cron": "* * * * *", "interval_ms": 1000, "run": calculation() }),
            "/interval_ms",
        ),
        (
            json!({ "interval_ms": 999, "run": calculation() }),
            "/interval_ms",
        ),
        (
            json!({ "interval_ms": 5000, "timezone": "Europe/Paris", "run": calculation() }),
            "/timezone",
        ),
        (
            json!({ "cron": "0 0 31 2 *", "run": calculation() }),
            "/cron",
        ),
        (
            json!({ "cron": "* * * * *", "run": { "input": 5 } }),
            "/run/input",
        ),
        (
            json!({ "cron": "* * * * *", "run": calculation(), "colour": "red" }),
            "",
        ),
        (json!({ "cron": "* * * * *" }), ""),
        (
            json!({ "cron": "* * * * *", "run": calculation(), "missed": "always" }),
            "/missed",
        ),
    ] {
        let (status, problem) = send(&app, Method::POST, "/v1/schedules", key_a, Some(&bad)).await;
        assert_eq!(status, 422, "{bad}: {problem}");
        assert!(
            pointers(&problem).iter().any(|p| p.starts_with(pointer)),
            "{bad}: {problem}"
        );
    }
    let (status, _) = send(
        &app,
        Method::PATCH,
        &path,
        key_a,
        Some(&json!({ "cron": "nope" })),
    )
    .await;
    assert_eq!(status, 422);
    let (status, _) = send(
        &app,
        Method::PATCH,
        &path,
        key_a,
        Some(&json!({ "id": "x" })),
    )
    .await;
    assert_eq!(status, 422);
    let resp = app
        .client
        .post(app.url("/v1/schedules"))
        .header("authorization", format!("Bearer {key_a}"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    // Nothing refused was stored or changed.
    let (_, list) = send(&app, Method::GET, "/v1/schedules", key_a, None).await;
    assert_eq!(list["schedules"].as_array().unwrap().len(), 1);
    assert_eq!(list["schedules"][0]["interval_ms"], 60_000);

    let (status, _) = send(&app, Method::DELETE, &path, key_a, None).await;
    assert_eq!(status, 204);
    let (status, _) = send(&app, Method::GET, &path, key_a, None).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn an_interval_schedule_starts_runs_that_link_back_to_it() {
    let app = spawn_app(|_| {}).await;
    let body = json!({ "name": "every second", "interval_ms": 1000, "run": calculation() });
    let (status, created) = app.post_json("/v1/schedules", &body).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let path = app.url(&format!("/v1/schedules/{id}"));
    let two = poll_json(&app.client, &path, |s| s["fire_count"].as_u64() >= Some(2)).await;

    let (_, fires) = app.get_json(&format!("/v1/schedules/{id}/fires")).await;
    let fires = fires["fires"].as_array().unwrap().clone();
    assert!(fires.len() >= 2, "{fires:?}");
    assert_eq!(fires[0]["run_id"], two["last_run_id"], "newest first");
    assert_eq!(fires[0]["fire_at"], two["last_fire_at"]);
    for fire in &fires {
        let run_id = fire["run_id"].as_str().unwrap();
        let run = poll_json(&app.client, &app.url(&format!("/v1/runs/{run_id}")), |r| {
            r["finished_at"].is_string()
        })
        .await;
        assert_eq!(run["status"], "succeeded", "{run}");
        assert_eq!(run["output"]["result"], 42);
        assert_eq!(
            run["schedule"],
            json!({ "id": id, "fire_at": fire["fire_at"] })
        );
    }
    // A run started by a request has no schedule.
    let run = app.create_run(calculation()).await;
    assert_eq!(run["schedule"], Value::Null);
}

#[tokio::test]
async fn missed_ticks_after_downtime_follow_each_schedules_policy() {
    let app = spawn_app(|_| {}).await;
    let mut ids = BTreeMap::new();
    for missed in ["skip", "catch_up_one"] {
        let body = json!({ "interval_ms": 3_600_000, "missed": missed, "run": calculation() });
        let (status, created) = app.post_json("/v1/schedules", &body).await;
        assert_eq!(status, 201, "{created}");
        ids.insert(missed, created["id"].as_str().unwrap().to_owned());
    }
    let dir = app.stop().await;

    // The servers were down for an hour and a half: each schedule's tick of 30 minutes ago
    // passed unseen.
    let db = pool(dir.path()).await;
    let now = chrono::Utc::now();
    let fmt =
        |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    sqlx::query("UPDATE schedules SET anchor_at = $1, next_fire_at = $2")
        .bind(fmt(now - chrono::Duration::minutes(90)))
        .bind(fmt(now - chrono::Duration::minutes(30)))
        .execute(&db)
        .await
        .unwrap();
    db.close().await;

    let app = spawn_app_in(dir, |_| {}).await;
    let moved_on = |s: &Value| {
        s["next_fire_at"]
            .as_str()
            .and_then(|t| t.parse::<chrono::DateTime<chrono::Utc>>().ok())
            .is_some_and(|t| t > now)
    };
    let caught_up = app.url(&format!("/v1/schedules/{}", ids["catch_up_one"]));
    let caught_up = poll_json(&app.client, &caught_up, moved_on).await;
    let skipped = app.url(&format!("/v1/schedules/{}", ids["skip"]));
    let skipped = poll_json(&app.client, &skipped, moved_on).await;

    // Both wait for the tick of 30 minutes from now; only catch_up_one fired the missed one.
    for s in [&caught_up, &skipped] {
        let next: chrono::DateTime<chrono::Utc> =
            s["next_fire_at"].as_str().unwrap().parse().unwrap();
        assert!(
            (next - (now + chrono::Duration::minutes(30)))
                .num_seconds()
                .abs()
                < 5,
            "{s}"
        );
    }
    assert_eq!(skipped["fire_count"], 0, "{skipped}");
    assert_eq!(skipped["last_run_id"], Value::Null);
    assert_eq!(caught_up["fire_count"], 1, "{caught_up}");
    let run_id = caught_up["last_run_id"].as_str().unwrap();
    let (_, run) = app.get_json(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(run["schedule"]["id"], caught_up["id"]);
    assert_eq!(run["schedule"]["fire_at"], caught_up["last_fire_at"]);
    let (_, runs) = app.get_json("/v1/runs").await;
    assert_eq!(
        runs["runs"].as_array().unwrap().len(),
        1,
        "one run in all: {runs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cron_fires_once_per_tick_across_two_replicas() {
    let replicas = TwoReplicas::start(&[("ORCA_LLM__PROVIDER", "offline")]).await;
    let (a, b) = (&replicas.a, &replicas.b);

    // Every second, created through one replica; both fire it.
    let body = json!({ "cron": "* * * * * *", "run": calculation() });
    let resp = a
        .client
        .post(a.url("/v1/schedules"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let id = resp.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/schedules/{id}");
    poll_json(&b.client, &b.url(&path), |s| {
        s["fire_count"].as_u64() >= Some(4)
    })
    .await;
    let resp = b
        .client
        .patch(b.url(&path))
        .json(&json!({ "enabled": false }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);

    let runs: Value = a
        .client
        .get(a.url("/v1/runs?limit=200"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut per_tick: BTreeMap<String, usize> = BTreeMap::new();
    for run in runs["runs"].as_array().unwrap() {
        assert_eq!(run["schedule"]["id"], id.as_str(), "{run}");
        *per_tick
            .entry(run["schedule"]["fire_at"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert!(per_tick.len() >= 4, "{per_tick:?}");
    assert!(
        per_tick.values().all(|&n| n == 1),
        "one run per tick: {per_tick:?}"
    );
    let fires: Value = a
        .client
        .get(a.url(&format!("{path}/fires")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for fire in fires["fires"].as_array().unwrap() {
        assert_eq!(
            per_tick.get(fire["fire_at"].as_str().unwrap()),
            Some(&1),
            "{fire}"
        );
    }
}
