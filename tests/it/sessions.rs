//! Sessions over HTTP: variables set through the API and read by the session's next run,
//! its runs and history, deleting it whole (refused while a run of it goes on), and every bad
//! input refused; tenants do not see each other's sessions.

use serde_json::{Value, json};

use crate::support::{TestApp, poll_json, spawn_app, two_tenants};

async fn patch(app: &TestApp, path: &str, body: &Value) -> (u16, Value) {
    let resp = app
        .client
        .patch(app.url(path))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// A plan that doubles the session's `n`.
fn doubling(session: &str) -> Value {
    json!({ "input": "x", "orchestration": "fixed", "session_id": session, "plan": { "steps": [
        { "id": "twice", "kind": "tool", "input": { "tool": "math.calculate",
          "arguments": { "expression": "{{ session.n }} * 2" } } } ] } })
}

async fn finished(app: &TestApp, body: Value) -> Value {
    let run = app.create_run(body).await;
    let id = run["id"].as_str().unwrap().to_owned();
    app.follow(&id).await;
    app.get_json(&format!("/v1/runs/{id}")).await.1
}

#[tokio::test]
async fn variables_set_through_the_api_reach_the_sessions_next_run() {
    let app = spawn_app(|_| {}).await;
    let (status, _) = app.get_json("/v1/sessions/s1").await;
    assert_eq!(status, 404, "a session nothing has named");

    let (status, session) = patch(
        &app,
        "/v1/sessions/s1",
        &json!({ "variables": { "n": 21, "note": "hi" } }),
    )
    .await;
    assert_eq!(status, 200, "{session}");
    assert_eq!(session["variables"], json!({ "n": 21, "note": "hi" }));
    assert_eq!(
        (session["run_count"].clone(), session["runs"].clone()),
        (json!(0), json!([]))
    );

    let run = finished(&app, doubling("s1")).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["output"]["result"], 42);

    // `null` deletes; the rest stays.
    let (status, session) = patch(
        &app,
        "/v1/sessions/s1",
        &json!({ "variables": { "note": null, "n": 5 } }),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(session["variables"], json!({ "n": 5 }));
    assert_eq!(session["run_count"], 1);
    assert_eq!(session["runs"][0]["id"], run["id"]);
    let again = finished(&app, doubling("s1")).await;
    assert_eq!(again["output"]["result"], 10);

    // Its history: each succeeded run's input and output, oldest first.
    let (status, history) = app.get_json("/v1/sessions/s1/history").await;
    assert_eq!(status, 200, "{history}");
    let turns = history["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0]["run_id"], run["id"]);
    assert_eq!(turns[1]["output"]["result"], 10);
    assert_eq!(history["summary"], Value::Null);
    let (_, session) = app.get_json("/v1/sessions/s1").await;
    assert_eq!(session["runs"][0]["id"], again["id"], "newest first");
}

#[tokio::test]
async fn a_session_is_deleted_whole_and_only_once_its_runs_have_finished() {
    let app = spawn_app(|_| {}).await;
    let done = finished(&app, doubling("s2")).await;
    patch(&app, "/v1/sessions/s2", &json!({ "variables": { "n": 1 } })).await;
    let waiting = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "session_id": "s2",
            "plan": { "steps": [{ "id": "ok", "kind": "user_input", "input": { "prompt": "Go?" } }] } }))
        .await;
    let waiting_id = waiting["id"].as_str().unwrap().to_owned();
    let mut events = app.events(&waiting_id).await;
    while events.next_event().await.expect("asks").kind() != "input_required" {}

    let resp = app
        .client
        .delete(app.url("/v1/sessions/s2"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 409);
    let problem: Value = resp.json().await.unwrap();
    assert!(
        problem["detail"].as_str().unwrap().contains(&waiting_id),
        "{problem}"
    );
    let (_, session) = app.get_json("/v1/sessions/s2").await;
    assert_eq!(
        (session["run_count"].clone(), session["variables"].clone()),
        (json!(2), json!({ "n": 1 })),
        "nothing deleted"
    );

    let (status, _) = app
        .post_json(&format!("/v1/runs/{waiting_id}/cancel"), &json!({}))
        .await;
    assert_eq!(status, 202);
    events.read_to_final().await;
    let resp = app
        .client
        .delete(app.url("/v1/sessions/s2"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    for path in [
        "/v1/sessions/s2".to_owned(),
        format!("/v1/runs/{}", done["id"].as_str().unwrap()),
        format!("/v1/runs/{waiting_id}"),
    ] {
        let (status, _) = app.get_json(&path).await;
        assert_eq!(status, 404, "{path}");
    }
    let resp = app
        .client
        .delete(app.url("/v1/sessions/s2"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
}

#[tokio::test]
async fn bad_session_input_is_refused_and_tenants_do_not_see_each_others_sessions() {
    let (key_a, key_b) = ("key-for-team-a-0123456789", "key-for-team-b-0123456789");
    let app = spawn_app(|c| two_tenants(c, [key_a, key_b])).await;
    let send = |method: reqwest::Method, path: &str, key: &str, body: Option<Value>| {
        let mut req = app.client.request(method, app.url(path)).bearer_auth(key);
        if let Some(b) = body {
            req = req.json(&b);
        }
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    use reqwest::Method;
    let (status, _) = send(
        Method::PATCH,
        "/v1/sessions/shared",
        key_a,
        Some(json!({ "variables": { "k": 1 } })),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = send(Method::GET, "/v1/sessions/shared", key_b, None).await;
    assert_eq!(status, 404, "b does not see a's session");
    let (status, _) = send(Method::DELETE, "/v1/sessions/shared", key_b, None).await;
    assert_eq!(status, 404);
    let (_, b_view) = send(
        Method::PATCH,
        "/v1/sessions/shared",
        key_b,
        Some(json!({ "variables": { "k": 2 } })),
    )
    .await;
    assert_eq!(
        b_view["variables"],
        json!({ "k": 2 }),
        "b's session of the same name is its own"
    );
    let (_, a_view) = send(Method::GET, "/v1/sessions/shared", key_a, None).await;
    assert_eq!(a_view["variables"], json!({ "k": 1 }));

    let too_many: serde_json::Map<String, Value> =
        (0..65).map(|i| (format!("v{i}"), json!(i))).collect();
    let long_id = format!("/v1/sessions/{}", "s".repeat(201));
    for (path, body, pointer) in [
        (
            "/v1/sessions/x",
            json!({ "variables": { "bad name": 1, "ok": 2, "a/b": 3 } }),
            "/variables/bad name",
        ),
        (
            "/v1/sessions/x",
            json!({ "variables": too_many }),
            "/variables",
        ),
        (
            "/v1/sessions/x",
            json!({ "variables": {}, "extra": true }),
            "",
        ),
        ("/v1/sessions/x", json!({ "variables": [1] }), "/variables"),
        (long_id.as_str(), json!({ "variables": {} }), "/id"),
    ] {
        let (status, problem) = send(Method::PATCH, path, key_a, Some(body.clone())).await;
        assert_eq!(status, 422, "{body}: {problem}");
        let pointers: Vec<&str> = problem["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["pointer"].as_str().unwrap())
            .collect();
        assert!(
            pointers.iter().any(|p| p.starts_with(pointer)),
            "{body}: {problem}"
        );
    }
    let (_, problem) = send(
        Method::PATCH,
        "/v1/sessions/x",
        key_a,
        Some(json!({ "variables": { "bad name": 1, "a/b": 3 } })),
    )
    .await;
    assert_eq!(
        problem["errors"].as_array().unwrap().len(),
        2,
        "every bad name: {problem}"
    );
    let (status, _) = send(Method::GET, "/v1/sessions/x", key_a, None).await;
    assert_eq!(status, 404, "nothing refused was stored");
}

#[tokio::test]
async fn orca_sessions_sets_shows_unsets_and_deletes() {
    let app = spawn_app(|_| {}).await;
    let out = app
        .orca(&["sessions", "set", "s3", "n=4", "topic=cats"], "")
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = finished(&app, doubling("s3")).await;
    assert_eq!(run["output"]["result"], 8, "the number 4, not the text");
    let out = app.orca(&["sessions", "show", "s3"], "").await;
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("n = 4") && shown.contains("topic = \"cats\""),
        "{shown}"
    );
    assert!(shown.contains(run["id"].as_str().unwrap()), "{shown}");
    let out = app
        .orca(&["sessions", "unset", "s3", "topic", "--json"], "")
        .await;
    let session: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(session["variables"], json!({ "n": 4 }));
    let out = app.orca(&["sessions", "history", "s3"], "").await;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\"result\":8"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = app.orca(&["sessions", "set", "s3", "bad name=1"], "").await;
    assert_eq!(out.status.code(), Some(2));
    let out = app.orca(&["sessions", "delete", "s3"], "").await;
    assert!(out.status.success());
    let out = app.orca(&["sessions", "show", "s3"], "").await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("404"));
}

/// `body` with the session policy `concurrency`.
fn with_policy(mut body: Value, concurrency: &str) -> Value {
    body["concurrency"] = json!(concurrency);
    body
}

/// A run of `session` that waits for a human at step `ok`.
fn asking(session: &str, concurrency: Option<&str>) -> Value {
    let mut body = json!({ "input": "x", "orchestration": "fixed", "session_id": session,
        "plan": { "steps": [{ "id": "ok", "kind": "user_input", "input": { "prompt": "Go?" } }] } });
    if let Some(c) = concurrency {
        body["concurrency"] = json!(c);
    }
    body
}

/// Starts a run that asks for input; its id once it asks.
async fn waiting(app: &TestApp, session: &str) -> String {
    let run = app.create_run(asking(session, None)).await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut events = app.events(&id).await;
    while events.next_event().await.expect("asks").kind() != "input_required" {}
    id
}

fn time(run: &Value, field: &str) -> chrono::DateTime<chrono::Utc> {
    run[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field}: {run}"))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_sessions_busy_run_rejects_queues_or_is_interrupted_by_the_next_as_asked() {
    let app = spawn_app(|_| {}).await;

    // reject: 409 while the session has a run in progress, nothing created.
    let first = waiting(&app, "c1").await;
    let (status, problem) = app
        .post_json("/v1/runs", &with_policy(doubling("c1"), "reject"))
        .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (409, Some("conflict")),
        "{problem}"
    );
    let (_, session) = app.get_json("/v1/sessions/c1").await;
    assert_eq!(session["run_count"], 1);

    // enqueue: accepted, and it starts only once the earlier run has ended.
    let (status, _) = patch(&app, "/v1/sessions/c1", &json!({ "variables": { "n": 3 } })).await;
    assert_eq!(status, 200);
    let queued = app.create_run(with_policy(doubling("c1"), "enqueue")).await;
    let queued_id = queued["id"].as_str().unwrap().to_owned();
    assert_eq!(app.answer(&first, "ok", json!("go")).await.status(), 202);
    app.follow(&queued_id).await;
    let (_, first_run) = app.get_json(&format!("/v1/runs/{first}")).await;
    let (_, queued_run) = app.get_json(&format!("/v1/runs/{queued_id}")).await;
    assert_eq!(queued_run["status"], "succeeded", "{queued_run}");
    assert_eq!(queued_run["output"]["result"], 6);
    assert!(
        time(&queued_run, "started_at") >= time(&first_run, "finished_at"),
        "{first_run} {queued_run}"
    );

    // interrupt: the run in progress is cancelled, its history kept, and the new one runs.
    let second = waiting(&app, "c1").await;
    let interrupting = app
        .create_run(with_policy(doubling("c1"), "interrupt"))
        .await;
    let interrupting_id = interrupting["id"].as_str().unwrap().to_owned();
    app.follow(&interrupting_id).await;
    let (_, second_run) = app.get_json(&format!("/v1/runs/{second}")).await;
    assert_eq!(second_run["status"], "cancelled", "{second_run}");
    let kinds: Vec<String> = app
        .history(&second)
        .await
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        kinds.contains(&"input_required".to_owned())
            && kinds.last().map(String::as_str) == Some("final"),
        "{kinds:?}"
    );
    let (_, interrupting_run) = app.get_json(&format!("/v1/runs/{interrupting_id}")).await;
    assert_eq!(interrupting_run["status"], "succeeded");
    assert!(time(&interrupting_run, "started_at") >= time(&second_run, "finished_at"));

    // parallel (the default): both at once.
    let third = waiting(&app, "c1").await;
    let alongside = finished(&app, doubling("c1")).await;
    assert_eq!(alongside["status"], "succeeded");
    let (_, third_run) = app.get_json(&format!("/v1/runs/{third}")).await;
    assert_eq!(third_run["status"], "waiting_input");

    // Bad input: a policy without a session, an unknown one.
    for (body, pointer) in [
        (
            json!({ "input": "x", "concurrency": "reject" }),
            "/concurrency",
        ),
        (with_policy(doubling("c1"), "sometimes"), "/concurrency"),
    ] {
        let (status, problem) = app.post_json("/v1/runs", &body).await;
        assert_eq!(status, 422, "{problem}");
        assert_eq!(problem["errors"][0]["pointer"], pointer, "{problem}");
    }
}

#[tokio::test]
async fn the_configured_default_applies_when_the_request_names_no_policy() {
    let app =
        spawn_app(|c| c.engine.session_concurrency = orca::domain::SessionConcurrency::Reject)
            .await;
    waiting(&app, "c2").await;
    let (status, _) = app.post_json("/v1/runs", &asking("c2", None)).await;
    assert_eq!(status, 409);
    let (status, _) = app
        .post_json("/v1/runs", &asking("c2", Some("parallel")))
        .await;
    assert_eq!(status, 201, "the request's own policy wins");
    let (status, _) = app.post_json("/v1/runs", &asking("other", None)).await;
    assert_eq!(status, 201, "another session is not busy");
    // `orca run --session S --concurrency P` asks the same.
    let out = app
        .orca(
            &["run", "hello", "--session", "c2", "--concurrency", "reject"],
            "",
        )
        .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("409"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = app
        .orca(
            &[
                "run",
                "hello",
                "--session",
                "quiet",
                "--concurrency",
                "reject",
            ],
            "",
        )
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reject_and_enqueue_hold_across_two_replicas() {
    use crate::support::{Server, TwoReplicas};
    let replicas = TwoReplicas::start(&[("ORCA_LLM__PROVIDER", "offline")]).await;
    let (a, b) = (&replicas.a, &replicas.b);
    let post = |server: &Server, body: Value| {
        let req = server.client.post(server.url("/v1/runs")).json(&body);
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap())
        }
    };
    // Forty rejecting requests for an idle session through both replicas at once: one gets in.
    let tries = (0..40).map(|i| post(if i % 2 == 0 { a } else { b }, asking("c3", Some("reject"))));
    let answers = futures::future::join_all(tries).await;
    let created: Vec<&Value> = answers
        .iter()
        .filter(|(s, _)| *s == 201)
        .map(|(_, r)| r)
        .collect();
    assert_eq!(created.len(), 1, "{answers:?}");
    assert!(
        answers.iter().all(|(s, _)| *s == 201 || *s == 409),
        "{answers:?}"
    );
    let first_id = created[0]["id"].as_str().unwrap().to_owned();
    // Either replica streams and answers it, whichever runs it.
    let mut asked = a.until_asked(&first_id, 1).await;
    let sum = json!({ "input": "x", "orchestration": "fixed", "session_id": "c3", "concurrency": "enqueue",
        "plan": { "steps": [{ "id": "sum", "kind": "tool", "input": { "tool": "math.calculate",
            "arguments": { "expression": "1 + 1" } } }] } });
    let (status, queued) = post(b, sum).await;
    assert_eq!(status, 201);
    let queued_id = queued["id"].as_str().unwrap().to_owned();
    assert_eq!(a.answer(&first_id, "ok", json!("go")).await, 202);
    crate::support::skip_to(&mut asked, "final", 1).await;
    let resp = b
        .client
        .get(b.url(&format!("/v1/runs/{queued_id}/events")))
        .send()
        .await
        .unwrap();
    let mut events = crate::support::SseReader::new(resp);
    crate::support::skip_to(&mut events, "final", 1).await;
    let get = |server: &Server, id: String| {
        let req = server.client.get(server.url(&format!("/v1/runs/{id}")));
        async move { req.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let first_run = get(a, first_id).await;
    let queued_run = get(b, queued_id).await;
    assert_eq!(queued_run["status"], "succeeded", "{queued_run}");
    assert!(
        time(&queued_run, "started_at") >= time(&first_run, "finished_at"),
        "{first_run} {queued_run}"
    );
}

#[tokio::test]
async fn the_wait_for_a_sessions_turn_does_not_count_against_the_runs_time_limit() {
    let app = spawn_app(|_| {}).await;
    // The session is busy for 800 ms; the queued run may take 400 ms of its own.
    let busy = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "session_id": "c4",
            "plan": { "steps": [{ "id": "w", "kind": "wait", "input": { "duration_ms": 800 } }] } }))
        .await;
    let mut queued = with_policy(doubling("c4"), "enqueue");
    queued["limits"] = json!({ "max_duration_ms": 400 });
    patch(&app, "/v1/sessions/c4", &json!({ "variables": { "n": 1 } })).await;
    let queued = app.create_run(queued).await;
    let id = queued["id"].as_str().unwrap();
    app.follow(id).await;
    let (_, run) = app.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let (_, busy) = app
        .get_json(&format!("/v1/runs/{}", busy["id"].as_str().unwrap()))
        .await;
    assert!(
        time(&run, "started_at") >= time(&busy, "finished_at"),
        "{busy} {run}"
    );
}

/// A JSON string value of exactly `bytes` bytes as JSON text (its quotes included).
fn sized(bytes: usize) -> Value {
    json!("x".repeat(bytes - 2))
}

#[tokio::test]
async fn a_sessions_variables_are_bounded_and_a_change_past_a_limit_writes_nothing() {
    let app = spawn_app(|c| {
        c.context.session_max_variable_bytes = 100;
        c.context.session_max_variables = 3;
        c.context.session_max_total_bytes = 250;
    })
    .await;
    let path = "/v1/sessions/b";
    let refused = |(status, problem): (u16, Value), limit: &str, value: &str, used: &str| {
        assert_eq!(
            (status, problem["code"].clone()),
            (413, json!("payload_too_large")),
            "{problem}"
        );
        let detail = problem["detail"].as_str().unwrap();
        assert!(
            detail.contains(limit) && detail.contains(value) && detail.contains(used),
            "{detail}"
        );
    };
    // One value: at the limit, then past it (beside a change that would fit: none written).
    let (status, _) = patch(&app, path, &json!({ "variables": { "a": sized(100) } })).await;
    assert_eq!(status, 200);
    refused(
        patch(
            &app,
            path,
            &json!({ "variables": { "b": 1, "a": sized(101) } }),
        )
        .await,
        "session_max_variable_bytes",
        "100",
        "101",
    );
    // Count: at the limit, then past it.
    let (status, _) = patch(&app, path, &json!({ "variables": { "b": 1, "c": 2 } })).await;
    assert_eq!(status, 200);
    refused(
        patch(&app, path, &json!({ "variables": { "c": 3, "d": 4 } })).await,
        "session_max_variables",
        "3",
        "4",
    );
    // Total: 100 + 100 + 50 is at the limit; 100 + 100 + 100 is past it.
    let (status, _) = patch(
        &app,
        path,
        &json!({ "variables": { "b": sized(100), "c": sized(50) } }),
    )
    .await;
    assert_eq!(status, 200);
    refused(
        patch(&app, path, &json!({ "variables": { "c": sized(100) } })).await,
        "session_max_total_bytes",
        "250",
        "300",
    );
    let (_, session) = app.get_json(path).await;
    assert_eq!(
        session["variables"],
        json!({ "a": sized(100), "b": sized(100), "c": sized(50) }),
        "nothing of a refused change was written"
    );

    // A run's `session_variables` past a limit: the run fails, nothing is stored.
    let writing = |vars: Value| {
        json!({ "input": "x", "orchestration": "fixed", "session_id": "b", "plan": {
            "steps": [{ "id": "one", "kind": "tool", "input": { "tool": "math.calculate",
                "arguments": { "expression": "1 + 1" } } }],
            "session_variables": vars } })
    };
    for (vars, limit) in [
        (json!({ "e": 1 }), "session_max_variables"),
        (json!({ "a": sized(101) }), "session_max_variable_bytes"),
        (json!({ "c": sized(51) }), "session_max_total_bytes"),
    ] {
        let run = finished(&app, writing(vars)).await;
        assert_eq!(run["status"], "failed", "{run}");
        assert_eq!(run["error"]["code"], "session_limit_exceeded", "{run}");
        assert!(
            run["error"]["message"].as_str().unwrap().contains(limit),
            "{run}"
        );
    }
    let (_, after) = app.get_json(path).await;
    assert_eq!(after["variables"], session["variables"]);
    // Within the limits a run writes (at the total's limit exactly).
    let run = finished(&app, writing(json!({ "c": sized(50) }))).await;
    assert_eq!(run["status"], "succeeded", "{run}");
}

/// `orca_session_variable_bytes_read_total` now.
async fn session_bytes_read(app: &TestApp) -> u64 {
    let metrics = app.metrics().await;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("orca_session_variable_bytes_read_total "))
        .unwrap_or_else(|| panic!("no session bytes counter in {metrics}"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_run_reads_only_the_session_variables_its_plan_names() {
    let app = spawn_app(|c| c.context.session_max_variable_bytes = 1 << 20).await;
    let big = sized(200_000);
    let (status, _) = patch(
        &app,
        "/v1/sessions/r",
        &json!({ "variables": { "big": big, "n": 2 } }),
    )
    .await;
    assert_eq!(status, 200);
    let before = session_bytes_read(&app).await;
    for _ in 0..5 {
        let run = finished(&app, doubling("r")).await;
        assert_eq!(run["output"]["result"], 4, "{run}");
    }
    let after = session_bytes_read(&app).await;
    // `n` is `2`: one byte per run; `big` was never read.
    assert_eq!(after - before, 5, "bytes read by five runs naming only `n`");

    // A run that names `big` reads it.
    let run = finished(
        &app,
        json!({ "input": "x", "orchestration": "fixed", "session_id": "r", "plan": {
            "steps": [{ "id": "one", "kind": "tool", "input": { "tool": "math.calculate",
                "arguments": { "expression": "1 + 1" } } }],
            "output": { "big": "{{ session.big }}" } } }),
    )
    .await;
    assert_eq!(run["output"]["big"], big);
    assert_eq!(session_bytes_read(&app).await - after, 200_000);
}

#[tokio::test]
async fn a_session_delete_raced_with_new_runs_is_all_or_nothing() {
    use futures::StreamExt;
    let app = spawn_app(|c| c.engine.max_running_runs = 16).await;
    const RUNS: usize = 240;
    let calc = json!({ "input": "x", "orchestration": "fixed", "session_id": "race",
        "concurrency": "parallel", "plan": { "steps": [{ "id": "a", "kind": "tool",
        "input": { "tool": "math.calculate", "arguments": { "expression": "1 + 1" } } }] } });
    let made: Vec<Value> = futures::stream::iter(0..RUNS)
        .map(|_| finished(&app, calc.clone()))
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(made.iter().all(|r| r["status"] == "succeeded"));

    // New runs that never finish by themselves: one stored before the delete makes it 409.
    let post = || {
        let client = app.client.clone();
        let url = app.url("/v1/runs");
        async move {
            let body = asking("race", Some("parallel"));
            client
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let delete = {
        let req = app.client.delete(app.url("/v1/sessions/race"));
        async move { req.send().await.unwrap().status().as_u16() }
    };
    let posts = futures::future::join_all((0..20).map(|_| post()));
    let (deleted, posted) = tokio::join!(delete, posts);

    let pool = crate::support::db::pool(app.dir.path()).await;
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE session_id = 'race'")
        .fetch_one(&pool)
        .await
        .unwrap();
    let orphans: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE run_id NOT IN (SELECT id FROM runs)")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(orphans, 0, "no history outlives its run");
    let created = posted.iter().filter(|s| **s == 201).count();
    let count = |pool: sqlx::AnyPool| async move {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE session_id = 'race'")
            .fetch_one(&pool)
            .await
            .unwrap();
        n as usize
    };
    match deleted {
        204 => {
            assert!(posted.iter().all(|s| *s == 409), "{posted:?}");
            assert_eq!(stored, 0, "every run of the deleted session is gone");
        }
        409 => {
            assert!(created > 0, "refused with nothing in progress: {posted:?}");
            assert_eq!(stored as usize, RUNS + created, "nothing deleted");
            // Cancel the new runs; then the session is deleted whole.
            let (_, session) = app.get_json("/v1/sessions/race").await;
            for run in session["runs"].as_array().unwrap() {
                if run["status"] == "succeeded" {
                    continue;
                }
                let id = run["id"].as_str().unwrap();
                let (status, _) = app
                    .post_json(&format!("/v1/runs/{id}/cancel"), &json!({}))
                    .await;
                assert_eq!(status, 202);
                let url = app.url(&format!("/v1/runs/{id}"));
                poll_json(&app.client, &url, |r| r["status"] == "cancelled").await;
            }
            let resp = app.client.delete(app.url("/v1/sessions/race")).send().await;
            assert_eq!(resp.unwrap().status(), 204);
            assert_eq!(count(pool.clone()).await, 0, "every run is gone");
        }
        other => panic!("DELETE answered {other}"),
    }
    // A deleted session stays deleted: no run is created in it again.
    assert_eq!(app.get_json("/v1/sessions/race").await.0, 404);
    assert_eq!(post().await, 409);
    assert_eq!(count(pool).await, 0);
}
