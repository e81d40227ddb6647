//! Sessions over HTTP: variables set through the API and read by the session's next run,
//! its runs and history, deleting it whole (refused while a run of it goes on), and every bad
//! input refused; tenants do not see each other's sessions.

use serde_json::{Value, json};

use crate::support::{TestApp, spawn_app};
use orca::config::ApiKey;

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
    let app = spawn_app(|c| {
        c.auth.api_keys = [(key_a, "a"), (key_b, "b")]
            .map(|(key, tenant)| ApiKey {
                key: orca::config::Secret::new(key),
                tenant: tenant.into(),
            })
            .to_vec();
    })
    .await;
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
