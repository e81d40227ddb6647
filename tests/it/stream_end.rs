//! Event streams end when nothing is left to send: a reader resuming after `final` (a browser's
//! EventSource reconnecting with `Last-Event-ID`) gets 204 at once, `after` values past 2^63
//! mean "after everything" instead of wrapping to "replay everything", and a reader whose
//! `after` is ahead of a running run is let go when the run ends.

use serde_json::{Value, json};

use crate::support::*;

async fn events_request(
    app: &TestApp,
    id: &str,
    query: &str,
    last_event_id: Option<&str>,
) -> reqwest::Response {
    let mut req = app
        .client
        .get(app.url(&format!("/v1/runs/{id}/events{query}")))
        .header("accept", "text/event-stream");
    if let Some(v) = last_event_id {
        req = req.header("last-event-id", v);
    }
    tokio::time::timeout(PATIENCE, req.send())
        .await
        .expect("the server answers in time")
        .expect("GET events")
}

/// Reads the whole body within PATIENCE: a stream that never ends fails here.
async fn body_within_patience(resp: reqwest::Response) -> String {
    tokio::time::timeout(PATIENCE, resp.text())
        .await
        .expect("the response ends instead of sending keep-alives forever")
        .expect("body")
}

#[tokio::test]
async fn resuming_a_finished_run_at_or_after_final_ends_at_once_with_204() {
    let app = spawn_app(|_| {}).await;
    let all = app.stream_run(json!({ "input": "10 + 20 계산해줘" })).await;
    assert_well_formed(&all, 1);
    let id = all[0].json()["run_id"].as_str().unwrap().to_owned();
    let last = all.len() as u64;
    let beyond_i64 = (1u64 << 63).to_string();
    let max = u64::MAX.to_string();

    // Reconnects with Last-Event-ID: the final seq, past it, and past i64::MAX (which must
    // not wrap to "replay everything").
    for v in [
        last.to_string(),
        (last + 5).to_string(),
        beyond_i64.clone(),
        max.clone(),
    ] {
        let resp = events_request(&app, &id, "", Some(&v)).await;
        assert_eq!(resp.status(), 204, "Last-Event-ID: {v}");
        assert_eq!(body_within_patience(resp).await, "", "Last-Event-ID: {v}");
    }
    // The same through ?after=N.
    for v in [
        last.to_string(),
        (last + 5).to_string(),
        beyond_i64.clone(),
        max.clone(),
    ] {
        let resp = events_request(&app, &id, &format!("?after={v}"), None).await;
        assert_eq!(resp.status(), 204, "after={v}");
        assert_eq!(body_within_patience(resp).await, "", "after={v}");
    }
    // One event short of the end still streams the rest, then ends.
    let resp = events_request(&app, &id, "", Some(&(last - 1).to_string())).await;
    assert_eq!(resp.status(), 200);
    let rest = SseReader::new(resp).read_to_final().await;
    assert_well_formed(&rest, last);
    assert_eq!(rest.len(), 1);

    // The JSON history past the end is empty, not the whole log.
    for v in [last.to_string(), beyond_i64, max] {
        let url = app.url(&format!("/v1/runs/{id}/events?after={v}"));
        let history = crate::support::server::stored_events(&app.client, &url).await;
        assert_eq!(history, Vec::<Value>::new(), "after={v}");
    }

    // Beyond 64 bits is not a seq at all.
    let too_big = "18446744073709551616";
    let resp = events_request(&app, &id, &format!("?after={too_big}"), None).await;
    assert_eq!(resp.status(), 422);
    let resp = events_request(&app, &id, "", Some(too_big)).await;
    assert_eq!(resp.status(), 422);
    let problem: Value = resp.json().await.unwrap();
    assert_eq!(problem["errors"][0]["pointer"], "/headers/last-event-id");
}

#[tokio::test]
async fn a_reader_ahead_of_a_running_run_is_let_go_when_the_run_ends() {
    let app = spawn_app(|_| {}).await;
    let plan = json!({ "steps": [
        { "id": "ask", "kind": "user_input", "input": { "prompt": "go on?" } },
    ]});
    let run = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    // Wait until the run waits for its answer (so it is running, and far below seq 1000).
    let resp = events_request(&app, &id, "", None).await;
    let mut reader = SseReader::new(resp);
    while reader.next_event().await.expect("events").kind() != "input_required" {}

    // A running run keeps the stream open (today's behaviour), even when `after` is ahead.
    let ahead = events_request(&app, &id, "?after=1000", None).await;
    assert_eq!(ahead.status(), 200);
    let resumed = events_request(&app, &id, "", Some("1")).await;
    assert_eq!(resumed.status(), 200);

    let answer = app
        .client
        .post(app.url(&format!("/v1/runs/{id}/input")))
        .json(&json!({ "step_id": "ask", "value": "yes" }))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 202);

    // The reader that asked for everything after 1 gets the rest up to `final`.
    let rest = SseReader::new(resumed).read_to_final().await;
    assert_well_formed(&rest, 2);
    // The reader ahead of the run gets nothing, and its stream ends with the run.
    // (Bounded: keep-alive comments would keep a plain read going forever.)
    let mut ahead = SseReader::new(ahead);
    let end = tokio::time::timeout(PATIENCE, ahead.next_event()).await;
    assert_eq!(end, Ok(None), "the stream ends with the run");
    // And a reconnect after that is told to stop.
    let last = rest.last().unwrap().json()["seq"].as_u64().unwrap();
    let again = events_request(&app, &id, "", Some(&last.to_string())).await;
    assert_eq!(again.status(), 204);
}
