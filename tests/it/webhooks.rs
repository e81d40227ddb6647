//! Completion webhooks over real HTTP: a receiver on loopback verifies each delivery's
//! signature as a user's would, answers 500 then 200, and the run's `/webhook` shows both
//! attempts; a tenant's default URL and a schedule's run body report too; a delivery queued
//! before a restart goes out after it; refused destinations and a server without a signing
//! key are refused when the run is created.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::support::{PATIENCE, TestApp, spawn_app, spawn_app_in};

const SECRET: &str = "whsec-test-key-0123456789";

/// What the receiver got: each delivery's body, once its signature checked out.
#[derive(Clone, Default)]
struct Received {
    bodies: Arc<Mutex<Vec<Value>>>,
    /// Answers to give, in order; 200 once they run out.
    answers: Arc<Mutex<Vec<u16>>>,
    /// How long each answer takes.
    delay: Duration,
}

/// Checks `Orca-Signature: t=…,v1=…` as a receiver would: HMAC-SHA256 over `<t>.<body>` with
/// the shared secret, and a timestamp within five minutes.
fn verified(headers: &HeaderMap, body: &[u8]) -> bool {
    let Some(header) = headers.get("orca-signature").and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let mut t = None;
    let mut v1 = None;
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => v1 = Some(v.to_owned()),
            _ => {}
        }
    }
    let (Some(t), Some(v1)) = (t, v1) else {
        return false;
    };
    if (chrono::Utc::now().timestamp() - t).abs() > 300 {
        return false;
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    let want: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    want == v1
}

async fn receiver(received: Received) -> String {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let received = received.clone();
            async move {
                if !verified(&headers, &body) {
                    return StatusCode::UNAUTHORIZED;
                }
                received
                    .bodies
                    .lock()
                    .unwrap()
                    .push(serde_json::from_slice(&body).unwrap());
                let answer = {
                    let mut answers = received.answers.lock().unwrap();
                    if answers.is_empty() {
                        200
                    } else {
                        answers.remove(0)
                    }
                };
                tokio::time::sleep(received.delay).await;
                StatusCode::from_u16(answer).unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/hook")
}

fn with_webhooks(c: &mut orca::config::Config) {
    c.webhooks.secret = orca::config::Secret::new(SECRET);
    c.webhooks.backoff_ms = 50;
    c.tools.http_allow_private = true;
}

fn calculation(webhook: Option<&str>) -> Value {
    let mut body = json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
        { "id": "a", "kind": "tool", "input": { "tool": "math.calculate",
          "arguments": { "expression": "6 * 7" } } } ] } });
    if let Some(url) = webhook {
        body["webhook"] = json!({ "url": url });
    }
    body
}

/// Polls the run's webhook until `done` holds of it.
async fn delivery(app: &TestApp, run_id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (status, d) = app.get_json(&format!("/v1/runs/{run_id}/webhook")).await;
        if status == 200 && done(&d) {
            return d;
        }
        assert!(
            Instant::now() < deadline,
            "the webhook of {run_id} never got there: {d}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_finished_run_posts_its_signed_summary_and_retries_until_accepted() {
    let received = Received::default();
    received.answers.lock().unwrap().push(500);
    let url = receiver(received.clone()).await;
    let app = spawn_app(with_webhooks).await;

    let run = app.create_run(calculation(Some(&url))).await;
    let id = run["id"].as_str().unwrap();
    let d = delivery(&app, id, |d| d["state"] == "delivered").await;
    let attempts = d["attempts"].as_array().unwrap();
    let codes: Vec<&Value> = attempts.iter().map(|a| &a["status_code"]).collect();
    assert_eq!(codes, [&json!(500), &json!(200)], "{d}");
    assert_eq!(attempts[0]["error"], "answered 500");
    assert_eq!(d["url"], url.as_str());

    let bodies = received.bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 2, "each attempt carried a valid signature");
    assert_eq!(bodies[1]["type"], "run.finished");
    assert_eq!(bodies[1]["run"]["id"], id);
    assert_eq!(bodies[1]["run"]["status"], "succeeded");
    assert_eq!(bodies[1]["run"]["output"]["result"], 42);

    // `orca runs show` says where it went and how it went.
    let out = app.orca(&["runs", "show", id], "").await;
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains(&format!("delivered after 2 attempts → {url}")),
        "{shown}"
    );

    // The request a run shows names its webhook; a run without one has none.
    let (_, shown) = app.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(shown["request"]["webhook"], json!({ "url": url }));
    let plain = app.create_run(calculation(None)).await;
    let (status, none) = app
        .get_json(&format!(
            "/v1/runs/{}/webhook",
            plain["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!((status, none["state"].clone()), (200, json!("none")));
}

#[tokio::test]
async fn a_tenants_default_and_a_schedules_runs_report_and_a_queued_delivery_survives_a_restart() {
    let received = Received::default();
    let url = receiver(received.clone()).await;
    let configure = |c: &mut orca::config::Config| {
        with_webhooks(c);
        c.webhooks.tenants.insert("default".into(), url.clone());
    };
    let app = spawn_app(configure).await;

    // A run waiting for a human when the server stops: its delivery waits in the store.
    let waiting = app
        .create_run(
            json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
            { "id": "ok", "kind": "user_input", "input": { "prompt": "Go?" } } ] } }),
        )
        .await;
    let waiting_id = waiting["id"].as_str().unwrap().to_owned();
    let mut events = app.events(&waiting_id).await;
    while events.next_event().await.expect("the run asks").kind() != "input_required" {}
    drop(events);
    let d = delivery(&app, &waiting_id, |d| d["state"] == "pending").await;
    assert_eq!(
        d["attempts"],
        json!([]),
        "nothing is sent before the run ends"
    );
    let dir = app.stop().await;

    let app = spawn_app_in(dir, configure).await;
    // Asked again once the restarted server has resumed it.
    let mut events = app.events(&waiting_id).await;
    crate::support::skip_to(&mut events, "input_required", 2).await;
    assert_eq!(
        app.answer(&waiting_id, "ok", json!("yes")).await.status(),
        202
    );
    delivery(&app, &waiting_id, |d| d["state"] == "delivered").await;

    // A schedule's run body names no webhook: the tenant's default applies to its runs.
    let body = json!({ "interval_ms": 1000, "run": calculation(None) });
    let (status, schedule) = app.post_json("/v1/schedules", &body).await;
    assert_eq!(status, 201, "{schedule}");
    let path = app.url(&format!(
        "/v1/schedules/{}",
        schedule["id"].as_str().unwrap()
    ));
    let fired =
        crate::support::poll_json(&app.client, &path, |s| s["last_run_id"].is_string()).await;
    let fired = fired["last_run_id"].as_str().unwrap().to_owned();
    delivery(&app, &fired, |d| d["state"] == "delivered").await;
    let bodies = received.bodies.lock().unwrap().clone();
    let ids: Vec<&str> = bodies
        .iter()
        .map(|b| b["run"]["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&waiting_id.as_str()) && ids.contains(&fired.as_str()),
        "{ids:?}"
    );
    assert_eq!(
        ids.iter().filter(|i| **i == waiting_id).count(),
        1,
        "delivered once: {ids:?}"
    );
}

#[tokio::test]
async fn refused_destinations_and_a_server_without_a_signing_key_are_refused() {
    // No key: a run cannot name a webhook.
    let unsigned = spawn_app(|_| {}).await;
    let (status, problem) = unsigned
        .post_json("/v1/runs", &calculation(Some("https://example.com/hook")))
        .await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["errors"][0]["pointer"], "/webhook", "{problem}");

    // Signed, but private addresses are not allowed: an address is refused at once, a name
    // that resolves to one when the delivery connects.
    let app = spawn_app(|c| c.webhooks.secret = orca::config::Secret::new(SECRET)).await;
    for (url, pointer) in [
        ("http://127.0.0.1:9/hook", "/webhook/url"),
        ("ftp://example.com/hook", "/webhook/url"),
        ("not a url", "/webhook/url"),
    ] {
        let (status, problem) = app.post_json("/v1/runs", &calculation(Some(url))).await;
        assert_eq!(status, 422, "{url}: {problem}");
        let pointers: Vec<&str> = problem["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["pointer"].as_str().unwrap())
            .collect();
        assert!(pointers.contains(&pointer), "{url}: {problem}");
    }
    let (status, problem) = app
        .post_json(
            "/v1/runs",
            &json!({ "input": "x", "webhook": { "url": "https://e.com", "secret": "x" } }),
        )
        .await;
    assert_eq!(status, 422, "{problem}");

    let run = app
        .create_run(calculation(Some("http://localhost:9/hook")))
        .await;
    let d = delivery(&app, run["id"].as_str().unwrap(), |d| {
        d["state"] == "failed"
    })
    .await;
    let attempts = d["attempts"].as_array().unwrap();
    assert_eq!(
        attempts.len(),
        1,
        "a refused destination is not retried: {d}"
    );
    assert!(
        attempts[0]["error"].as_str().unwrap().contains("refused"),
        "{d}"
    );
    assert_eq!(attempts[0]["status_code"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_deliver_each_runs_webhook_once() {
    use crate::support::Server;
    use crate::support::db::{PgServer, database_url_on};
    // A slow receiver: while one replica sends, the other sees the same deliveries due.
    let received = Received {
        delay: Duration::from_millis(100),
        ..Default::default()
    };
    let url = receiver(received.clone()).await;
    let pg = PgServer::start();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let db = database_url_on(&pg.url, dirs[0].path());
    let env = [
        ("ORCA_LLM__PROVIDER", "offline"),
        ("ORCA_WEBHOOKS__SECRET", SECRET),
        ("ORCA_TOOLS__HTTP_ALLOW_PRIVATE", "true"),
    ];
    let replicas = [
        Server::start_on(dirs[0].path(), &db, &env).await,
        Server::start_on(dirs[1].path(), &db, &env).await,
    ];
    // All at once, so their deliveries fall due together.
    let posts = (0..20).map(|i| {
        let server = &replicas[i % 2];
        let body = calculation(Some(&url));
        async move {
            let resp = server
                .client
                .post(server.url("/v1/runs"))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 201);
            resp.json::<Value>().await.unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    });
    let ids: Vec<String> = futures::future::join_all(posts).await;
    let deadline = Instant::now() + PATIENCE;
    for id in &ids {
        loop {
            let d: Value = replicas[0]
                .client
                .get(replicas[0].url(&format!("/v1/runs/{id}/webhook")))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if d["state"] == "delivered" {
                assert_eq!(d["attempts"].as_array().unwrap().len(), 1, "{d}");
                break;
            }
            assert!(Instant::now() < deadline, "{id}: {d}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let bodies = received.bodies.lock().unwrap().clone();
    for id in &ids {
        let n = bodies
            .iter()
            .filter(|b| b["run"]["id"] == id.as_str())
            .count();
        assert_eq!(n, 1, "run {id} was delivered {n} times");
    }
    assert_eq!(bodies.len(), ids.len());
}

#[tokio::test]
async fn a_run_that_names_no_webhook_says_so() {
    let app = spawn_app(|_| {}).await;
    let run = app.create_run(json!({ "input": "10 + 20" })).await;
    let (status, d) = app
        .get_json(&format!("/v1/runs/{}/webhook", run["id"].as_str().unwrap()))
        .await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(
        (d["state"].clone(), d["url"].clone()),
        (json!("none"), Value::Null)
    );
    assert_eq!(d["attempts"], json!([]));
    let missing = "/v1/runs/0191e7a4-0000-7000-8000-000000000000/webhook";
    assert_eq!(app.get_json(missing).await.0, 404);
}

/// A run that waits for a person (step `ok`), so that its delivery waits in the store.
fn waiting(webhook: Option<&str>) -> Value {
    let mut body = json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
        { "id": "ok", "kind": "user_input", "input": { "prompt": "Go?" } } ] } });
    if let Some(url) = webhook {
        body["webhook"] = json!({ "url": url });
    }
    body
}

/// Waits until the run asks for its input.
async fn until_asked(app: &TestApp, id: &str, n: usize) {
    let mut events = app.events(id).await;
    crate::support::skip_to(&mut events, "input_required", n).await;
}

/// Deliveries queued while the receiver's address was allowed (a run's own URL, its tenant's
/// default, a schedule's run body, and a fork made afterwards of a run that named it) are
/// judged again at their attempt: the allowance is gone after a restart, so each fails at
/// once with the reason, and the receiver gets none of them.
#[tokio::test]
async fn every_attempt_is_judged_by_the_destination_policy_in_force_whatever_its_urls_source() {
    let received = Received::default();
    let url = receiver(received.clone()).await;
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/hook")
        .to_owned();
    let allowed = |c: &mut orca::config::Config| {
        c.webhooks.secret = orca::config::Secret::new(SECRET);
        c.webhooks.backoff_ms = 50;
        c.tools.http_allow = vec![addr.clone()];
        c.webhooks.tenants.insert("default".into(), url.clone());
    };
    let app = spawn_app(allowed).await;
    let own = app.create_run(waiting(Some(&url))).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let default = app.create_run(waiting(None)).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let body = json!({ "interval_ms": 1000, "run": waiting(Some(&url)) });
    let (status, schedule) = app.post_json("/v1/schedules", &body).await;
    assert_eq!(status, 201, "{schedule}");
    let path = format!("/v1/schedules/{}", schedule["id"].as_str().unwrap());
    let fired = crate::support::poll_json(&app.client, &app.url(&path), |s| {
        s["last_run_id"].is_string()
    })
    .await;
    let scheduled = fired["last_run_id"].as_str().unwrap().to_owned();
    let deleted = app.client.delete(app.url(&path)).send().await.unwrap();
    assert_eq!(deleted.status(), 204);
    // A finished run that named the receiver, delivered while it was allowed: forked later.
    let parent = app.create_run(calculation(Some(&url))).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    delivery(&app, &parent, |d| d["state"] == "delivered").await;
    for id in [&own, &default, &scheduled] {
        until_asked(&app, id, 1).await;
        assert_eq!(delivery(&app, id, |_| true).await["url"], url.as_str());
    }
    let dir = app.stop().await;

    // The operator takes the allowance (and the tenant's default) away and restarts.
    let app = spawn_app_in(dir, |c| {
        c.webhooks.secret = orca::config::Secret::new(SECRET);
        c.webhooks.backoff_ms = 50;
    })
    .await;
    let (status, fork) = app
        .post_json(
            &format!("/v1/runs/{parent}/fork"),
            &json!({ "checkpoint": 0 }),
        )
        .await;
    assert_eq!(status, 201, "{fork}");
    let fork = fork["id"].as_str().unwrap().to_owned();
    for id in [&own, &default, &scheduled] {
        until_asked(&app, id, 2).await;
        assert_eq!(app.answer(id, "ok", json!("yes")).await.status(), 202);
    }
    for id in [&own, &default, &scheduled, &fork] {
        let d = delivery(&app, id, |d| d["state"] != "pending").await;
        assert_eq!(d["state"], "failed", "{id}: {d}");
        let attempts = d["attempts"].as_array().unwrap();
        assert_eq!(
            attempts.len(),
            1,
            "a refused destination is not retried: {d}"
        );
        let error = attempts[0]["error"].as_str().unwrap();
        assert!(
            error.starts_with("destination refused: 127.0.0.1 is not a public address"),
            "{d}"
        );
        assert_eq!(attempts[0]["status_code"], Value::Null, "{d}");
    }
    let got: Vec<String> = received
        .bodies
        .lock()
        .unwrap()
        .iter()
        .map(|b| b["run"]["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(got, [parent], "only the run delivered while allowed");
}

/// A tenant's default URL is checked as the configuration loads, as a run's own URL is when
/// the run is created: an address the policy refuses stops the start, naming the key; a name
/// is judged when the delivery connects.
#[tokio::test]
async fn a_tenants_default_url_is_checked_at_load_and_again_at_its_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::support::test_config(&dir);
    config.webhooks.secret = orca::config::Secret::new(SECRET);
    config
        .webhooks
        .tenants
        .insert("team-a".into(), "http://[::ffff:0:7f00:1]:9/hook".into());
    let err = orca::app::App::build(config)
        .await
        .err()
        .expect("a refused default URL stops the start")
        .to_string();
    assert!(
        err.contains("webhooks.tenants.team-a") && err.contains("not a public address"),
        "{err}"
    );

    let received = Received::default();
    let url = receiver(received.clone()).await;
    let named = url.replace("127.0.0.1", "localhost");
    let app = spawn_app(|c| {
        c.webhooks.secret = orca::config::Secret::new(SECRET);
        c.webhooks.tenants.insert("default".into(), named.clone());
    })
    .await;
    let run = app.create_run(calculation(None)).await;
    let d = delivery(&app, run["id"].as_str().unwrap(), |d| {
        d["state"] != "pending"
    })
    .await;
    assert_eq!(d["state"], "failed", "{d}");
    let error = d["attempts"][0]["error"].as_str().unwrap();
    assert!(error.starts_with("destination refused:"), "{d}");
    assert!(received.bodies.lock().unwrap().is_empty());
}

/// IPv6 spellings that carry a loopback IPv4 address are refused as that address is: the
/// IPv4-translated form among them (`::ffff:0:0:0/96`).
#[tokio::test]
async fn ipv6_forms_carrying_loopback_are_refused_as_webhook_destinations() {
    let received = Received::default();
    let url = receiver(received.clone()).await;
    let port = url.rsplit(':').next().unwrap().trim_end_matches("/hook");
    let app = spawn_app(|c| c.webhooks.secret = orca::config::Secret::new(SECRET)).await;
    for host in [
        "[::ffff:0:7f00:1]",
        "[::ffff:7f00:1]",
        "[64:ff9b::7f00:1]",
        "[2002:7f00:1::]",
    ] {
        let hook = format!("http://{host}:{port}/hook");
        let (status, problem) = app.post_json("/v1/runs", &calculation(Some(&hook))).await;
        assert_eq!(status, 422, "{hook}: {problem}");
        assert_eq!(problem["errors"][0]["pointer"], "/webhook/url", "{problem}");
        let message = problem["errors"][0]["message"].as_str().unwrap();
        assert!(message.contains("not a public address"), "{problem}");
    }
}

/// A receiver that never answers within the test: it counts the requests it holds.
async fn hanging_receiver() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let held = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = held.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::future::pending::<StatusCode>().await
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/hook"), held)
}

/// Tenant a's receivers hang (its attempts would each wait out a 30 s timeout); tenant b's
/// delivery still arrives at once, and a holds no more than its caps: per tenant, and per
/// destination.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_hanging_receivers_do_not_delay_another_tenants_delivery() {
    use std::sync::atomic::Ordering::SeqCst;
    const KEYS: [&str; 2] = ["key-of-tenant-a-0123456789", "key-of-tenant-b-0123456789"];
    let (hang_1, held_1) = hanging_receiver().await;
    let (hang_2, held_2) = hanging_receiver().await;
    let received = Received::default();
    let prompt = receiver(received.clone()).await;
    let app = spawn_app(|c| {
        with_webhooks(c);
        c.webhooks.timeout_ms = 30_000;
        c.webhooks.max_in_flight_per_tenant = 3;
        c.webhooks.max_in_flight_per_destination = 2;
        crate::support::two_tenants(c, KEYS);
    })
    .await;
    let [a, b] = KEYS.map(crate::support::bearer_client);
    for i in 0..10 {
        let hook = if i % 2 == 0 { &hang_1 } else { &hang_2 };
        let resp = a
            .post(app.url("/v1/runs"))
            .json(&calculation(Some(hook)))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
    }
    let deadline = Instant::now() + PATIENCE;
    while held_1.load(SeqCst) + held_2.load(SeqCst) < 3 {
        assert!(
            Instant::now() < deadline,
            "tenant a's attempts did not go out at once: {} and {} held",
            held_1.load(SeqCst),
            held_2.load(SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let asked = Instant::now();
    let resp = b
        .post(app.url("/v1/runs"))
        .json(&calculation(Some(&prompt)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let id = resp.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let url = app.url(&format!("/v1/runs/{id}/webhook"));
    let d = crate::support::poll_json(&b, &url, |d| d["state"] != "pending").await;
    let waited = asked.elapsed();
    assert_eq!(d["state"], "delivered", "{d}");
    assert!(
        waited < Duration::from_secs(10),
        "tenant b waited {waited:?} behind tenant a's hanging receivers"
    );
    // Tenant a holds its cap of 3 and no more, at most 2 on one destination.
    let (one, two) = (held_1.load(SeqCst), held_2.load(SeqCst));
    assert_eq!(one + two, 3, "{one} + {two} attempts of tenant a in flight");
    assert!(one <= 2 && two <= 2, "{one} and {two} on one destination");
}

/// kill -9 of the real binary while a receiver holds the request: after the restart, the
/// delivery's history lists the attempt that was cut off (`interrupted`) and the one that
/// delivered, and the receiver got exactly as many requests as the history lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_cut_off_by_a_kill_shows_in_the_history_with_its_retry() {
    use crate::support::Server;
    use std::sync::atomic::Ordering::SeqCst;
    // The first request is held until the server dies; the others answer 200.
    let got = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = got.clone();
    let hook = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let counter = counter.clone();
            async move {
                if counter.fetch_add(1, SeqCst) == 0 {
                    std::future::pending::<()>().await;
                }
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, hook).await.unwrap() });

    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("ORCA_LLM__PROVIDER", "offline"),
        ("ORCA_WEBHOOKS__SECRET", SECRET),
        ("ORCA_WEBHOOKS__BACKOFF_MS", "50"),
        // The kill comes well within an attempt's time; the claim is held 5 s past it.
        ("ORCA_WEBHOOKS__TIMEOUT_MS", "3000"),
        ("ORCA_TOOLS__HTTP_ALLOW_PRIVATE", "true"),
    ];
    let server = Server::start_with(dir.path(), &env).await;
    let resp = server
        .client
        .post(server.url("/v1/runs"))
        .json(&calculation(Some(&url)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let id = resp.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let deadline = Instant::now() + PATIENCE;
    while got.load(SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the receiver got nothing");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.kill();

    let server = Server::start_with(dir.path(), &env).await;
    let path = server.url(&format!("/v1/runs/{id}/webhook"));
    let d = crate::support::poll_json(&server.client, &path, |d| d["state"] == "delivered").await;
    let attempts = d["attempts"].as_array().unwrap();
    let outcomes: Vec<&Value> = attempts.iter().map(|a| &a["outcome"]).collect();
    assert_eq!(
        outcomes,
        [&json!("interrupted"), &json!("delivered")],
        "{d}"
    );
    assert_eq!(attempts[0]["status_code"], Value::Null, "{d}");
    assert!(
        attempts[0]["error"].as_str().unwrap().contains("stopped"),
        "{d}"
    );
    assert_eq!(attempts[1]["attempt"], 2, "{d}");
    assert_eq!(
        got.load(SeqCst),
        attempts.len(),
        "the receiver's count: {d}"
    );
}
