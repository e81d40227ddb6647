//! A store that stops taking writes mid-run and comes back (SQLite): the real binary, its
//! database file on a "disk" that fills up — the process's file size limit lowered until no
//! write fits (RLIMIT_FSIZE, the kernel's EFBIG, as `ulimit -f` would), then lifted.

use serde_json::{Value, json};

use crate::support::{PATIENCE, Server, SseReader, skip_to, to_final};

/// Polls `GET /readyz` until it answers `status`.
async fn until_ready_is(server: &Server, status: u16) {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let got = server
            .client
            .get(server.url("/readyz"))
            .send()
            .await
            .unwrap();
        if got.status() == status {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/readyz never answered {status}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

async fn post(server: &Server, body: &Value) -> reqwest::Response {
    let resp = server.client.post(server.url("/v1/runs")).json(body);
    resp.send().await.unwrap()
}

async fn stream(server: &Server, id: &str) -> SseReader {
    let resp = server
        .client
        .get(server.url(&format!("/v1/runs/{id}/events")));
    SseReader::new(resp.send().await.unwrap())
}

/// The id of the run a `POST /v1/runs` created.
async fn created(resp: reqwest::Response) -> String {
    assert_eq!(resp.status(), 201);
    let run: Value = resp.json().await.unwrap();
    run["id"].as_str().unwrap().to_owned()
}

/// A new run is taken and succeeds.
async fn runs_to_success(server: &Server) {
    let id = created(post(server, &plan()).await).await;
    let events = to_final(stream(server, &id).await).await;
    let last: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
    assert_eq!(last["data"]["status"], "succeeded", "{last}");
}

fn plan() -> Value {
    let calc = |id: &str, expression: &str| {
        json!({ "id": id, "kind": "tool", "input": { "tool": "math.calculate",
                "arguments": { "expression": expression } } })
    };
    json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
        calc("a", "20 + 1"),
        { "id": "w", "kind": "wait", "depends_on": ["a"], "input": { "duration_ms": 300 } },
        { "id": "seq", "kind": "sequential", "depends_on": ["w"], "input": { "steps": [
            calc("b", "{{ steps.a.output.result }} * 2") ] } } ] } })
}

#[tokio::test]
async fn a_store_that_fills_up_mid_run_refuses_new_runs_and_heals_when_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("orca.db").display());
    let server = Server::start_on(dir.path(), &db, &[("ORCA_LLM__PROVIDER", "offline")]).await;
    let id = created(post(&server, &plan()).await).await;
    let mut reader = stream(&server, &id).await;
    skip_to(&mut reader, "step", 1).await;

    // The disk fills up while the run waits.
    server.limit_file_size(Some(0));
    until_ready_is(&server, 503).await;
    let refused = post(&server, &plan()).await;
    assert_eq!(
        refused.status(),
        503,
        "nothing is acknowledged that is not stored"
    );
    assert!(refused.headers().contains_key("retry-after"));
    let (status, run) = get(&server, &format!("/v1/runs/{id}")).await;
    assert_eq!((status, run["status"].as_str()), (200, Some("running")));

    // Space returns: ready again, and the run goes on by itself to its end.
    server.limit_file_size(None);
    until_ready_is(&server, 200).await;
    let events = to_final(reader).await;
    let last: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
    assert_eq!(last["data"]["status"], "succeeded", "{last}");
    assert_eq!(last["data"]["output"]["result"], 42, "{last}");
    let (_, steps) = get(&server, &format!("/v1/runs/{id}/steps")).await;
    let completed = |step: &str| {
        steps
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["step_id"] == step && s["status"] == "completed")
            .count()
    };
    assert_eq!((completed("a"), completed("b")), (1, 1), "{steps}");

    // And a new run is taken again.
    runs_to_success(&server).await;

    // A second outage, with no run writing: `/readyz` finds it by itself, and heals again.
    server.limit_file_size(Some(0));
    until_ready_is(&server, 503).await;
    assert_eq!(post(&server, &plan()).await.status(), 503);
    server.limit_file_size(None);
    until_ready_is(&server, 200).await;
    runs_to_success(&server).await;
    let (_, listed) = get(&server, "/v1/runs?status=running").await;
    assert_eq!(listed["runs"], json!([]), "no run is left running");
}

async fn get(server: &Server, path: &str) -> (u16, Value) {
    let resp = server.client.get(server.url(path)).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}
