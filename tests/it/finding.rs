//! Finding sessions and runs (issue 43): `GET /v1/sessions` lists the caller's sessions, the
//! one with the newest run first, a page at a time, with what tells them apart; `GET /v1/runs`
//! filters by `session_id` and by `completion` (`partial`: succeeded with only part of the task
//! done); an unknown parameter of a list names the known ones. Tenant b never sees a's
//! sessions. The console's Sessions page, in Chromium.

use serde_json::{Value, json};

use crate::support::app::{TestApp, final_data, spawn_app, two_tenants};
use crate::support::node;

fn calc(id: &str, expression: &str) -> Value {
    json!({ "id": id, "kind": "tool",
            "input": { "tool": "math.calculate", "arguments": { "expression": expression } } })
}

/// A run of `session` (none: no session) that succeeds, or with `partial`, succeeds with one of
/// its steps failed under continue-on-failure.
fn run_in(session: Option<&str>, partial: bool) -> Value {
    let second = if partial {
        calc("second", "1 / 0")
    } else {
        calc("second", "3 + 3")
    };
    let mut body = json!({ "input": "go", "orchestration": "fixed", "plan": {
        "settings": { "stop_on_first_failure": false },
        "steps": [calc("first", "2 + 2"), second],
        "output": "{{ steps.first.output.result }}" } });
    if let Some(s) = session {
        body["session_id"] = json!(s);
    }
    body
}

/// Streams a run to its end; its id.
async fn finished(app: &TestApp, client: &reqwest::Client, body: Value) -> String {
    let resp = client
        .post(app.url("/v1/runs"))
        .header("accept", "text/event-stream")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let events = crate::support::app::SseReader::new(resp)
        .read_to_final()
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    events[0].json()["run_id"].as_str().unwrap().to_owned()
}

async fn get(app: &TestApp, client: &reqwest::Client, path: &str) -> (u16, Value) {
    let resp = client.get(app.url(path)).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn ids(list: &Value, key: &str) -> Vec<String> {
    list[key]
        .as_array()
        .unwrap_or_else(|| panic!("no `{key}`: {list}"))
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Every session of the caller, walked a page of `limit` at a time through `next_cursor`.
async fn every_page(app: &TestApp, client: &reqwest::Client, limit: u32) -> Vec<String> {
    let mut all = Vec::new();
    let mut path = format!("/v1/sessions?limit={limit}");
    for _ in 0..20 {
        let (status, page) = get(app, client, &path).await;
        assert_eq!(status, 200, "{page}");
        assert!(page["sessions"].as_array().unwrap().len() <= limit as usize);
        all.extend(ids(&page, "sessions"));
        match page["next_cursor"].as_str() {
            Some(c) => path = format!("/v1/sessions?limit={limit}&cursor={c}"),
            None => return all,
        }
    }
    panic!("the pages never end: {all:?}");
}

#[tokio::test]
async fn sessions_are_listed_newest_run_first_per_tenant_a_page_at_a_time() {
    let (key_a, key_b) = ("key-for-team-a-0123456789", "key-for-team-b-0123456789");
    let app = spawn_app(|c| two_tenants(c, [key_a, key_b])).await;
    let a = crate::support::app::bearer_client(key_a);
    let b = crate::support::app::bearer_client(key_b);

    // a: `talk` has two runs (the second partial), `notes/β` one between them; `vars` only
    // variables; `gone` is deleted. b: its own `talk` and `b-only`.
    let first = finished(&app, &a, run_in(Some("talk"), false)).await;
    finished(&app, &a, run_in(Some("notes/β"), false)).await;
    finished(&app, &a, run_in(Some("gone"), false)).await;
    let last = finished(&app, &a, run_in(Some("talk"), true)).await;
    finished(&app, &a, run_in(None, false)).await;
    let patched = a
        .patch(app.url("/v1/sessions/vars"))
        .json(&json!({ "variables": { "x": 1, "y": "two" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(patched.status(), 200);
    let patched = a
        .patch(app.url("/v1/sessions/talk"))
        .json(&json!({ "variables": { "topic": "cats" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(patched.status(), 200);
    let deleted = a.delete(app.url("/v1/sessions/gone")).send().await.unwrap();
    assert_eq!(deleted.status(), 204);
    finished(&app, &b, run_in(Some("talk"), false)).await;
    finished(&app, &b, run_in(Some("b-only"), false)).await;

    let (status, list) = get(&app, &a, "/v1/sessions").await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(
        ids(&list, "sessions"),
        ["talk", "notes/β", "vars"],
        "newest run first, variables-only last, the deleted one gone: {list}"
    );
    assert_eq!(list["next_cursor"], Value::Null);
    let talk = &list["sessions"][0];
    assert_eq!(
        (talk["run_count"].clone(), talk["variable_count"].clone()),
        (json!(2), json!(1)),
        "{talk}"
    );
    assert_eq!(talk["last_run"]["id"], last.as_str(), "{talk}");
    assert_eq!(talk["last_run"]["status"], "succeeded", "{talk}");
    assert_eq!(talk["last_run"]["completion"], "partial", "{talk}");
    let (_, first_run) = get(&app, &a, &format!("/v1/runs/{first}")).await;
    let (_, last_run) = get(&app, &a, &format!("/v1/runs/{last}")).await;
    assert_eq!(talk["first_run_at"], first_run["created_at"], "{talk}");
    assert_eq!(talk["last_run_at"], last_run["created_at"], "{talk}");
    let vars = &list["sessions"][2];
    assert_eq!(vars["run_count"], 0, "{vars}");
    assert_eq!(vars["variable_count"], 2, "{vars}");
    assert_eq!(
        (vars["last_run"].clone(), vars["first_run_at"].clone()),
        (Value::Null, Value::Null)
    );

    // A page at a time: the same sessions, in the same order, whatever the page size.
    for limit in [1, 2] {
        assert_eq!(
            every_page(&app, &a, limit).await,
            ["talk", "notes/β", "vars"]
        );
    }

    // Tenant b sees its own sessions only, its `talk` with its own single run.
    let (_, list_b) = get(&app, &b, "/v1/sessions").await;
    assert_eq!(ids(&list_b, "sessions"), ["b-only", "talk"], "{list_b}");
    assert_eq!(list_b["sessions"][1]["run_count"], 1, "{list_b}");
    assert_eq!(list_b["sessions"][1]["variable_count"], 0, "{list_b}");
    assert_eq!(every_page(&app, &b, 1).await, ["b-only", "talk"]);
    // A cursor made from a's page shows b nothing of a's.
    let (_, page) = get(&app, &a, "/v1/sessions?limit=1").await;
    let cursor = page["next_cursor"].as_str().unwrap();
    let (status, after) = get(&app, &b, &format!("/v1/sessions?cursor={cursor}")).await;
    assert_eq!(status, 200, "{after}");
    for s in after["sessions"].as_array().unwrap() {
        assert!(
            ["b-only", "talk"].contains(&s["id"].as_str().unwrap()),
            "{after}"
        );
        assert_eq!(s["run_count"], 1, "b's own, not a's: {after}");
    }

    // Bad pages are refused, each named.
    for (query, pointer, says) in [
        ("limit=0", "/query/limit", "1 to 200"),
        ("cursor=nope", "/query/cursor", "not a cursor"),
        ("limit=1&limit=2", "/query/limit", "more than once"),
    ] {
        let (status, problem) = get(&app, &a, &format!("/v1/sessions?{query}")).await;
        assert_eq!(status, 422, "{query}: {problem}");
        assert_eq!(problem["errors"][0]["pointer"], pointer, "{problem}");
        let message = problem["errors"][0]["message"].as_str().unwrap();
        assert!(message.contains(says), "{query}: {message}");
    }
}

#[tokio::test]
async fn runs_are_found_by_session_and_by_completion() {
    let app = spawn_app(|_| {}).await;
    let c = &app.client;
    let whole = finished(&app, c, run_in(Some("s"), false)).await;
    let partial = finished(&app, c, run_in(Some("s"), true)).await;
    let elsewhere = finished(&app, c, run_in(Some("t"), true)).await;
    let alone = finished(&app, c, run_in(None, false)).await;

    for (query, want) in [
        ("session_id=s", vec![&partial, &whole]),
        ("session_id=t", vec![&elsewhere]),
        ("session_id=none", vec![]),
        ("completion=partial", vec![&elsewhere, &partial]),
        ("completion=success", vec![&alone, &whole]),
        ("completion=error", vec![]),
        ("completion=partial&session_id=s", vec![&partial]),
        ("session_id=s&limit=1", vec![&partial]),
    ] {
        let want: Vec<&str> = want.into_iter().map(String::as_str).collect();
        let (status, list) = get(&app, c, &format!("/v1/runs?{query}")).await;
        assert_eq!(status, 200, "{query}: {list}");
        assert_eq!(ids(&list, "runs"), want, "{query}: {list}");
    }
    let (_, list) = get(&app, c, "/v1/runs?completion=partial").await;
    assert_eq!(list["runs"][0]["status"], "succeeded");
    assert_eq!(list["runs"][0]["completion"], "partial");
    // The next page of a filtered list is filtered too.
    let (_, page) = get(&app, c, "/v1/runs?session_id=s&limit=1").await;
    let cursor = page["next_cursor"].as_str().unwrap();
    let (_, next) = get(
        &app,
        c,
        &format!("/v1/runs?session_id=s&limit=1&cursor={cursor}"),
    )
    .await;
    assert_eq!(ids(&next, "runs"), [whole.as_str()]);
}

#[tokio::test]
async fn an_unknown_parameter_of_a_list_is_named_with_the_nearest_and_every_known_one() {
    let app = spawn_app(|_| {}).await;
    let c = &app.client;
    let whole = finished(&app, c, run_in(None, false)).await;
    for (path, wrong, near, known) in [
        (
            "/v1/runs?sesion_id=s",
            "sesion_id",
            "session_id",
            &[
                "status",
                "completion",
                "session_id",
                "parent_id",
                "q",
                "metadata.KEY",
                "limit",
                "cursor",
            ][..],
        ),
        (
            "/v1/runs?completed=partial",
            "completed",
            "completion",
            &["completion"][..],
        ),
        (
            "/v1/sessions?limt=2",
            "limt",
            "limit",
            &["limit", "cursor"][..],
        ),
        (
            &format!("/v1/runs/{whole}/checkpoints?aftr=1"),
            "aftr",
            "after",
            &["after", "limit"][..],
        ),
    ] {
        let (status, problem) = get(&app, c, path).await;
        assert_eq!(status, 422, "{path}: {problem}");
        assert_eq!(
            problem["errors"][0]["pointer"],
            format!("/query/{wrong}"),
            "{problem}"
        );
        let message = problem["errors"][0]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("unknown parameter `{wrong}`")),
            "{message}"
        );
        assert!(
            message.contains(&format!("did you mean `{near}`?")),
            "{message}"
        );
        for name in known {
            assert!(
                message.contains(&format!("`{name}`")),
                "{name} not listed: {message}"
            );
        }
    }
    let (status, problem) = get(&app, c, "/v1/runs?completion=half").await;
    assert_eq!(status, 422, "{problem}");
    let message = problem["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("unknown completion `half`") && message.contains("`partial`"),
        "{message}"
    );
}

/// The console's Sessions page: a nav link, the list with each session's runs and last run
/// (a partial one said so), and a click through to the session.
#[tokio::test]
async fn the_console_lists_sessions_and_opens_one() {
    let app = spawn_app(|_| {}).await;
    let c = &app.client;
    finished(&app, c, run_in(Some("older"), false)).await;
    let last = finished(&app, c, run_in(Some("newer"), true)).await;
    let shots = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/console-screenshots/sessions-list");
    let args = [app.base.as_str(), shots.to_str().unwrap(), last.as_str()];
    let report = node::json_lines(&node::run("sessions.mjs", &args).await);
    let found = report
        .iter()
        .find(|l| l["ok"] == "sessions")
        .unwrap_or_else(|| panic!("{report:?}"));
    assert_eq!(found["rows"], json!(["newer", "older"]), "{found}");
    assert_eq!(found["completion"], "partial", "{found}");
    assert_eq!(found["opened"], "Session newer", "{found}");
}
