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

#[tokio::test]
async fn a_bad_cron_and_a_bad_zone_are_told_together_in_the_users_terms() {
    let app = spawn_app(|_| {}).await;
    for (cron, fragments) in [
        ("61 * * * *", &["minute field is `61`", "0-59"][..]),
        ("* 24 * * *", &["hour field is `24`", "0-23"]),
        ("* * 32 * *", &["day-of-month field is `32`", "1-31"]),
        ("* * * 13 *", &["month field is `13`", "1-12 or JAN-DEC"]),
        ("* * * * 9", &["day-of-week field is `9`", "0-7"]),
        ("60 0 9 * * *", &["seconds field is `60`", "0-59"]),
        ("*/0 * * * *", &["minute field is `*/0`", "step `/0`"]),
        (
            "every day",
            &[
                "2 fields",
                "five (minute hour day-of-month month day-of-week)",
            ],
        ),
    ] {
        let body = json!({ "cron": cron, "timezone": "Mars/Olympus", "run": calculation() });
        let (status, problem) = app.post_json("/v1/schedules", &body).await;
        assert_eq!(status, 422, "{cron}: {problem}");
        let errors = problem["errors"].as_array().unwrap();
        let at = |pointer: &str| {
            errors
                .iter()
                .find(|e| e["pointer"] == pointer)
                .and_then(|e| e["message"].as_str())
                .unwrap_or_else(|| panic!("{cron}: no {pointer} in {problem}"))
                .to_owned()
        };
        assert!(at("/timezone").contains("Mars/Olympus"), "{problem}");
        let message = at("/cron");
        for fragment in fragments.iter().chain(&["e.g. `0 9 * * 1-5`"]) {
            assert!(
                message.contains(fragment),
                "{cron}: `{fragment}` in {message}"
            );
        }
        assert!(!message.contains("Component error"), "{message}");
    }
    // Two bad fields: one problem each, both at /cron.
    let body = json!({ "cron": "61 24 * * *", "run": calculation() });
    let (_, problem) = app.post_json("/v1/schedules", &body).await;
    let messages: Vec<&str> = problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["pointer"] == "/cron")
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert_eq!(messages.len(), 2, "{problem}");
    assert!(
        messages[0].contains("minute") && messages[1].contains("hour"),
        "{messages:?}"
    );
}

#[tokio::test]
async fn a_full_queue_makes_the_scheduler_back_off_and_say_why() {
    // No run can be queued: every tick's run is refused with 503 overloaded.
    let app = spawn_app(|c| c.engine.max_queued_runs = 0).await;
    let body = json!({ "interval_ms": 1000, "run": calculation() });
    let (status, created) = app.post_json("/v1/schedules", &body).await;
    assert_eq!(status, 201, "{created}");
    let path = app.url(&format!(
        "/v1/schedules/{}",
        created["id"].as_str().unwrap()
    ));
    let held = poll_json(&app.client, &path, |s| s["retries"].as_u64() >= Some(1)).await;
    assert!(
        held["retry_reason"]
            .as_str()
            .is_some_and(|why| why.contains("too many runs are waiting")),
        "{held}"
    );
    assert!(held["retry_at"].is_string(), "{held}");
    // Over a window of 5 s the tick is tried again at most a few times (after 1, 2, 4 s),
    // not at every look at the store.
    let before = held["retries"].as_u64().unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let (_, after) = app
        .get_json(&format!(
            "/v1/schedules/{}",
            created["id"].as_str().unwrap()
        ))
        .await;
    let attempts = after["retries"].as_u64().unwrap() - before;
    assert!(attempts <= 3, "{attempts} attempts in 5 s: {after}");
    assert_eq!(after["fire_count"], 0);
    let (_, runs) = app.get_json("/v1/runs").await;
    assert_eq!(runs["runs"], json!([]));
}

#[tokio::test]
async fn runs_made_under_a_ticks_old_key_cannot_keep_the_schedule_from_firing() {
    let app = spawn_app(|_| {}).await;
    let body = json!({ "cron": "* * * * * *", "run": calculation() });
    let (status, created) = app.post_json("/v1/schedules", &body).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    // The tenant makes runs of its own under the keys its schedule's next ticks used to get.
    let first: chrono::DateTime<chrono::Utc> =
        created["next_fire_at"].as_str().unwrap().parse().unwrap();
    let ticks: Vec<_> = (2..8)
        .map(|s| first + chrono::Duration::seconds(s))
        .collect();
    let mut hostile = Vec::new();
    for tick in &ticks {
        let fire_at = tick.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let resp = app
            .client
            .post(app.url("/v1/runs"))
            .header("idempotency-key", format!("schedule:{id}:{fire_at}"))
            .json(&json!({ "input": "not the schedule's body" }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        hostile.push(resp.json::<Value>().await.unwrap()["id"].clone());
        // The key the scheduler uses now is one no client can send.
        let resp = app
            .client
            .post(app.url("/v1/runs"))
            .header("idempotency-key", format!("schedule {id} {fire_at}"))
            .json(&calculation())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 422);
    }
    let path = app.url(&format!("/v1/schedules/{id}"));
    let time = |v: &Value| v.as_str()?.parse::<chrono::DateTime<chrono::Utc>>().ok();
    let last = *ticks.last().unwrap();
    poll_json(&app.client, &path, |s| {
        time(&s["last_fire_at"]).is_some_and(|t| t >= last)
    })
    .await;
    let (_, fires) = app.get_json(&format!("/v1/schedules/{id}/fires")).await;
    for tick in &ticks {
        let fire = fires["fires"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| time(&f["fire_at"]) == Some(*tick))
            .unwrap_or_else(|| panic!("no fire at {tick}: {fires}"));
        assert!(!hostile.contains(&fire["run_id"]), "{fire}");
        let (_, run) = app
            .get_json(&format!("/v1/runs/{}", fire["run_id"].as_str().unwrap()))
            .await;
        assert_eq!(run["schedule"]["id"], id.as_str(), "{run}");
    }
}

#[tokio::test]
async fn a_revoked_tenants_schedules_stay_quiet_after_a_restart() {
    let (key_a, key_b) = ("key-for-team-a-0123456789", "key-for-team-b-0123456789");
    let app = spawn_app(|c| two_tenants(c, [key_a, key_b])).await;
    use reqwest::Method;
    let body = json!({ "cron": "* * * * * *", "run": calculation() });
    let mut ids = Vec::new();
    for key in [key_a, key_b] {
        let (status, created) = send(&app, Method::POST, "/v1/schedules", key, Some(&body)).await;
        assert_eq!(status, 201, "{created}");
        ids.push(created["id"].as_str().unwrap().to_owned());
    }
    let a_path = format!("/v1/schedules/{}", ids[0]);
    let deadline = std::time::Instant::now() + crate::support::PATIENCE;
    while send(&app, Method::GET, &a_path, key_a, None).await.1["fire_count"].as_u64() < Some(1) {
        assert!(
            std::time::Instant::now() < deadline,
            "a's schedule never fired"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let dir = app.stop().await;
    let runs_of_a = |dir: std::path::PathBuf| async move {
        let db = pool(&dir).await;
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE tenant = 'a'")
            .fetch_one(&db)
            .await
            .unwrap();
        db.close().await;
        n
    };
    let before = runs_of_a(dir.path().to_owned()).await;

    // a's key is removed; b's stays.
    let app = spawn_app_in(dir, |c| {
        two_tenants(c, [key_a, key_b]);
        c.auth.api_keys.retain(|k| k.tenant == "b");
    })
    .await;
    let b_path = format!("/v1/schedules/{}", ids[1]);
    let (_, b) = send(&app, Method::GET, &b_path, key_b, None).await;
    let b_count = b["fire_count"].as_u64().unwrap();
    let deadline = std::time::Instant::now() + crate::support::PATIENCE;
    while send(&app, Method::GET, &b_path, key_b, None).await.1["fire_count"].as_u64()
        < Some(b_count + 3)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "b's schedule stopped firing"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let dir = app.stop().await;
    assert_eq!(
        runs_of_a(dir.path().to_owned()).await,
        before,
        "a revoked tenant's schedule started a run"
    );
}

#[tokio::test]
async fn one_tenants_many_schedules_cannot_crowd_out_anothers_ticks_and_the_caps_answer_clearly() {
    let (key_a, key_b) = ("key-for-team-a-0123456789", "key-for-team-b-0123456789");
    let app = spawn_app(|c| {
        two_tenants(c, [key_a, key_b]);
        c.quotas.tenants.insert(
            "a".into(),
            orca::domain::quota::Quota {
                schedules: 30,
                schedule_fires_per_minute: 20,
                ..Default::default()
            },
        );
    })
    .await;
    use reqwest::Method;
    let every_second = json!({ "cron": "* * * * * *", "run": calculation() });
    let mut a_ids = Vec::new();
    for _ in 0..30 {
        let (status, created) = send(
            &app,
            Method::POST,
            "/v1/schedules",
            key_a,
            Some(&every_second),
        )
        .await;
        assert_eq!(status, 201, "{created}");
        a_ids.push(created["id"].as_str().unwrap().to_owned());
    }
    // The 31st is refused, naming the quota and its value.
    let (status, problem) = send(
        &app,
        Method::POST,
        "/v1/schedules",
        key_a,
        Some(&every_second),
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (429, Some("quota_exceeded")),
        "{problem}"
    );
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("`schedules` is 30"), "{detail}");

    let (status, created) = send(
        &app,
        Method::POST,
        "/v1/schedules",
        key_b,
        Some(&every_second),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let b_id = created["id"].as_str().unwrap().to_owned();
    let b_path = format!("/v1/schedules/{b_id}");
    let deadline = std::time::Instant::now() + crate::support::PATIENCE;
    while send(&app, Method::GET, &b_path, key_b, None).await.1["fire_count"].as_u64() < Some(8) {
        assert!(
            std::time::Instant::now() < deadline,
            "b's schedule fell behind"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // b's ticks are all there, a second apart, each with its run.
    let (_, fires) = send(&app, Method::GET, &format!("{b_path}/fires"), key_b, None).await;
    let mut fires = fires["fires"].as_array().unwrap().clone();
    fires.reverse();
    let at = |f: &Value| {
        f["fire_at"]
            .as_str()
            .unwrap()
            .parse::<chrono::DateTime<chrono::Utc>>()
            .unwrap()
    };
    for pair in fires.windows(2) {
        assert_eq!((at(&pair[1]) - at(&pair[0])).num_seconds(), 1, "{pair:?}");
    }
    for fire in &fires {
        assert!(fire["run_id"].is_string(), "{fire}");
    }
    // a's schedules started at most 20 runs in their first minute; the ticks past it are
    // recorded, each with its reason.
    let mut started = 0;
    let mut rate = 0;
    for id in &a_ids {
        let (_, fires) = send(
            &app,
            Method::GET,
            &format!("/v1/schedules/{id}/fires"),
            key_a,
            None,
        )
        .await;
        for fire in fires["fires"].as_array().unwrap() {
            if fire["run_id"].is_string() {
                started += 1;
            } else {
                assert_eq!(fire["reason"], "rate", "{fire}");
                assert!(
                    fire["error"]
                        .as_str()
                        .unwrap()
                        .contains("`schedule_fires_per_minute` is 20"),
                    "{fire}"
                );
                rate += 1;
            }
        }
    }
    assert!(started <= 20, "{started} runs");
    assert!(rate > 0, "no tick of a was refused");
}
