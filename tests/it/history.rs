//! History: replay and resume, listing and pagination, idempotency, restart, metrics, OpenAPI.

use serde_json::{Value, json};

use crate::support::*;

fn run_id(events: &[SseMessage]) -> String {
    events[0].json()["run_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_stored_history_equals_what_the_live_stream_carried() {
    let app = spawn_app(|_| {}).await;
    let live = app.stream_run(json!({ "input": "10 + 20 계산해줘" })).await;
    let stored = app.history(&run_id(&live)).await;
    let live: Vec<Value> = live.iter().map(|e| e.json()).collect();
    assert_eq!(live, stored);
    // Replaying over SSE gives the same again.
    let replay = app.follow(&run_id_from(&live)).await;
    assert_eq!(replay.iter().map(|e| e.json()).collect::<Vec<_>>(), stored);
}

fn run_id_from(events: &[Value]) -> String {
    events[0]["run_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn last_event_id_and_after_resume_without_gap_or_duplicate() {
    let app = spawn_app(|_| {}).await;
    let all = app.stream_run(json!({ "input": "현재 시간 알려줘" })).await;
    let id = run_id(&all);
    let n = all.len() as u64;
    assert!(n > 6);
    for cut in [1, 3, n - 1] {
        let resp = app
            .client
            .get(app.url(&format!("/v1/runs/{id}/events")))
            .header("last-event-id", cut.to_string())
            .send()
            .await
            .unwrap();
        let rest = SseReader::new(resp).read_to_final().await;
        assert_well_formed(&rest, cut + 1);
        assert_eq!(rest.len() as u64, n - cut);
        assert_eq!(rest[0].json(), all[cut as usize].json());

        let resp = app
            .client
            .get(app.url(&format!("/v1/runs/{id}/events?after={cut}")))
            .send()
            .await
            .unwrap();
        let rest2 = SseReader::new(resp).read_to_final().await;
        assert_eq!(kinds(&rest2), kinds(&rest));
    }
}

#[tokio::test]
async fn runs_list_newest_first_with_filters_and_keyset_pages() {
    let app = spawn_app(|_| {}).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let team = if i % 2 == 0 { "red" } else { "blue" };
        let run = app
            .create_run(json!({ "input": format!("hello {i}"), "metadata": { "team": team, "n": i, "vip": i == 4 } }))
            .await;
        ids.push(run["id"].as_str().unwrap().to_owned());
        // Let each run finish so status filters are deterministic.
        app.follow(&ids[i]).await;
    }
    ids.reverse(); // newest first

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/runs?limit=2&cursor={c}"),
            None => "/v1/runs?limit=2".to_owned(),
        };
        let (status, page) = app.get_json(&path).await;
        assert_eq!(status, 200);
        let runs = page["runs"].as_array().unwrap();
        assert!(runs.len() <= 2);
        seen.extend(runs.iter().map(|r| r["id"].as_str().unwrap().to_owned()));
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ids);

    let filtered = |q: &'static str| {
        let app = &app;
        async move {
            let (status, page) = app.get_json(&format!("/v1/runs?{q}")).await;
            assert_eq!(status, 200, "{q}");
            page["runs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["id"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        filtered("metadata.team=red").await,
        vec![ids[0].clone(), ids[2].clone(), ids[4].clone()]
    );
    assert_eq!(filtered("metadata.n=3").await, vec![ids[1].clone()]);
    assert_eq!(filtered("metadata.vip=true").await, vec![ids[0].clone()]);
    assert_eq!(
        filtered("metadata.team=red&metadata.n=2").await,
        vec![ids[2].clone()]
    );
    assert_eq!(filtered("status=succeeded").await.len(), 5);
    assert_eq!(filtered("status=failed").await.len(), 0);
    assert_eq!(filtered("orchestration=simple").await.len(), 5);
    assert_eq!(
        filtered("created_after=2999-01-01T00:00:00Z").await.len(),
        0
    );
    assert_eq!(
        filtered("created_before=2999-01-01T00:00:00Z").await.len(),
        5
    );
}

/// `GET /v1/runs` with API key `key` and the query `query`: the status and the body.
async fn list_with(app: &TestApp, key: &str, query: &[(&str, &str)]) -> (u16, Value) {
    let url = reqwest::Url::parse_with_params(&app.url("/v1/runs"), query).unwrap();
    let resp = app.client.get(url).bearer_auth(key).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

fn listed_ids(page: &Value) -> Vec<String> {
    page["runs"]
        .as_array()
        .unwrap_or_else(|| panic!("{page}"))
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn runs_are_searched_by_their_input_text_within_the_callers_tenant() {
    use orca::config::{ApiKey, Secret};
    let (key_a, key_b) = ("search-key-a-0123456789", "search-key-b-0123456789");
    let app = spawn_app(|c| {
        c.auth.api_keys = [(key_a, "a"), (key_b, "b")]
            .map(|(key, tenant)| ApiKey {
                user: None,
                key: Secret::new(key),
                tenant: tenant.into(),
            })
            .to_vec();
    })
    .await;
    let mut ids = Vec::new();
    let inputs = [
        (key_a, json!("Raise the budget by 100% now")),
        (key_a, json!("Raise the budget by 1000 now")),
        (key_a, json!("rename snake_case keys")),
        (key_a, json!("rename snakeXcase keys")),
        (key_a, json!({ "message": "plan a trip", "city": "Oslo" })),
        (key_a, json!("She said \"Yes\" to 예산")),
        (key_b, json!("Raise the budget by 100% now")),
    ];
    for (key, input) in inputs {
        let resp = app
            .client
            .post(app.url("/v1/runs"))
            .bearer_auth(key)
            .json(&json!({ "input": input, "orchestration": "simple" }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        let run: Value = resp.json().await.unwrap();
        ids.push(run["id"].as_str().unwrap().to_owned());
    }
    let [
        percent,
        thousand,
        underscore,
        letter,
        object,
        quoted,
        theirs,
    ] = <[String; 7]>::try_from(ids).unwrap();

    let cases = [
        // `%` and `_` are the characters themselves, not wildcards.
        ("100%", vec![&percent]),
        ("snake_case", vec![&underscore]),
        ("_", vec![&underscore]),
        // Case-insensitive, newest first.
        ("RAISE the BUDGET", vec![&thousand, &percent]),
        ("SnAkE", vec![&letter, &underscore]),
        // An object input is searched as its JSON text, a string input as the string.
        ("oslo", vec![&object]),
        ("\"city\":\"Oslo\"", vec![&object]),
        ("said \"yes\"", vec![&quoted]),
        ("예산", vec![&quoted]),
        ("\\", vec![]),
        ("nothing has this", vec![]),
    ];
    for (q, want) in cases {
        let (status, page) = list_with(&app, key_a, &[("q", q)]).await;
        assert_eq!(status, 200, "{q}: {page}");
        let want: Vec<String> = want.into_iter().cloned().collect();
        assert_eq!(listed_ids(&page), want, "q={q}");
    }
    // Empty means no filter.
    let (_, page) = list_with(&app, key_a, &[("q", "")]).await;
    assert_eq!(listed_ids(&page).len(), 6);
    // Another tenant's runs never show; that tenant finds its own.
    let (_, page) = list_with(&app, key_b, &[("q", "100%")]).await;
    assert_eq!(listed_ids(&page), [theirs]);
    // With the other filters, a page at a time.
    let (_, first) = list_with(&app, key_a, &[("q", "raise"), ("limit", "1")]).await;
    assert_eq!(listed_ids(&first), [thousand]);
    let cursor = first["next_cursor"].as_str().unwrap();
    let query = [("q", "raise"), ("limit", "1"), ("cursor", cursor)];
    let (_, second) = list_with(&app, key_a, &query).await;
    assert_eq!(listed_ids(&second), [percent]);
    assert!(second["next_cursor"].is_null());
    let query = [("q", "raise"), ("orchestration", "planner")];
    assert!(listed_ids(&list_with(&app, key_a, &query).await.1).is_empty());

    // At most 200 characters (not bytes), no NUL, once: else a 422 that points at `q`.
    let longest = "예".repeat(200);
    assert_eq!(list_with(&app, key_a, &[("q", &longest)]).await.0, 200);
    let too_long = "x".repeat(201);
    let bad: [&[(&str, &str)]; 3] = [
        &[("q", &too_long)],
        &[("q", "a\0b")],
        &[("q", "a"), ("q", "b")],
    ];
    for query in bad {
        let (status, problem) = list_with(&app, key_a, query).await;
        assert_eq!(status, 422, "{query:?}: {problem}");
        assert_eq!(problem["code"], "validation_failed");
        assert_eq!(problem["errors"][0]["pointer"], "/query/q", "{problem}");
    }
}

#[tokio::test]
async fn a_run_shows_the_request_that_started_it_and_that_request_runs_again() {
    let app = spawn_app(|_| {}).await;
    let full = json!({
        "input": "What is 6 times 7? Use a tool.",
        "orchestration": "simple",
        "model": "offline",
        "tools": ["math.calculate"],
        "limits": { "max_steps": 9, "max_tokens": 5000 },
        "metadata": { "team": "search", "n": 3 },
        "session_id": "session-again",
        "instructions": "Answer in one line."
    });
    let workflow = json!({
        "steps": [{ "id": "sum", "kind": "tool",
                    "input": { "tool": "math.calculate", "arguments": { "expression": "{{ input.a }} + 1" } } }],
        "output": { "sum": "{{ steps.sum.output.result }}" }
    });
    let (status, body) = app.put_json("/v1/workflows/add-one", &workflow).await;
    assert!(status < 300, "{body}");
    let plan = json!({ "steps": [{ "id": "four", "kind": "tool",
                                   "input": { "tool": "math.calculate", "arguments": { "expression": "2 + 2" } } }] });
    let cases = [
        // What was given comes back as given, the orchestration as requested.
        (full.clone(), full.clone()),
        (
            json!({ "input": "hello" }),
            json!({ "input": "hello", "orchestration": "auto" }),
        ),
        // A workflow by name, not the plan orca resolved it to.
        (
            json!({ "input": { "a": 41 }, "workflow": "add-one" }),
            json!({ "input": { "a": 41 }, "orchestration": "auto", "workflow": "add-one" }),
        ),
        (
            json!({ "input": "add two and two", "orchestration": "fixed", "plan": plan }),
            json!({ "input": "add two and two", "orchestration": "fixed", "plan": plan }),
        ),
    ];
    for (body, want) in cases {
        let run = app.create_run(body.clone()).await;
        let id = run["id"].as_str().unwrap();
        app.follow(id).await;
        let (status, got) = app.get_json(&format!("/v1/runs/{id}")).await;
        assert_eq!(status, 200);
        assert_eq!(got["request"], want, "{body}");
        // The run object is all there beside it.
        assert_eq!(got["id"], id);
        assert_eq!(got["status"], "succeeded", "{got}");

        // Posted again: a new run with the same request, which ends the same way.
        let again = app.create_run(got["request"].clone()).await;
        let again_id = again["id"].as_str().unwrap();
        assert_ne!(again_id, id);
        app.follow(again_id).await;
        let (_, again) = app.get_json(&format!("/v1/runs/{again_id}")).await;
        assert_eq!(again["request"], want);
        assert_eq!(again["status"], "succeeded", "{again}");
        // (A session's second run has the first in its history, so only those without one
        // must answer alike.)
        if body.get("session_id").is_none() {
            assert_eq!(again["output"], got["output"], "{body}");
        }
    }
    // Lists stay lean: the request is on the run's own page only.
    let (_, list) = app.get_json("/v1/runs").await;
    assert!(list["runs"][0].get("request").is_none());
}

#[tokio::test]
async fn an_idempotency_key_returns_the_first_run() {
    let app = spawn_app(|_| {}).await;
    let post = || {
        app.client
            .post(app.url("/v1/runs"))
            .header("idempotency-key", "order-42")
            .json(&json!({ "input": "hello" }))
            .send()
    };
    let first = post().await.unwrap();
    assert_eq!(first.status(), 201);
    let location = first.headers()["location"].to_str().unwrap().to_owned();
    let first: Value = first.json().await.unwrap();
    assert_eq!(
        location,
        format!("/v1/runs/{}", first["id"].as_str().unwrap())
    );
    let second = post().await.unwrap();
    assert_eq!(second.status(), 200);
    let second: Value = second.json().await.unwrap();
    assert_eq!(first["id"], second["id"]);
    let (_, list) = app.get_json("/v1/runs").await;
    assert_eq!(list["runs"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn an_idempotency_key_reused_with_another_body_is_422() {
    let app = spawn_app(|_| {}).await;
    let post = |key: &'static str, body: &'static str| {
        app.client
            .post(app.url("/v1/runs"))
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let first = post(
        "order-7",
        r#"{"input": "hello", "metadata": {"a": 1, "b": "x"}}"#,
    )
    .await
    .unwrap();
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.unwrap();

    // The same JSON value, spelled differently: the first run, 200.
    let same = post(
        "order-7",
        r#"{ "metadata": {"b": "x", "a": 1},
             "input": "hello" }"#,
    )
    .await
    .unwrap();
    assert_eq!(same.status(), 200);
    let same: Value = same.json().await.unwrap();
    assert_eq!(same["id"], first["id"]);

    // Another body under the same key, also when it asks for a stream: refused.
    for accept in ["application/json", "text/event-stream"] {
        let resp = app
            .client
            .post(app.url("/v1/runs"))
            .header("idempotency-key", "order-7")
            .header("accept", accept)
            .json(&json!({ "input": "goodbye", "metadata": { "a": 1, "b": "x" } }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 422, "{accept}");
        assert_eq!(
            resp.headers()["content-type"].to_str().unwrap(),
            "application/problem+json"
        );
        let problem: Value = resp.json().await.unwrap();
        assert_eq!(problem["code"], "idempotency_key_reused", "{problem}");
        assert_eq!(problem["errors"][0]["pointer"], "/headers/idempotency-key");
    }

    // The key is per caller and per key: another key with that body is a new run.
    let other = post("order-8", r#"{"input": "goodbye"}"#).await.unwrap();
    assert_eq!(other.status(), 201);
    let (_, list) = app.get_json("/v1/runs").await;
    assert_eq!(list["runs"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn history_is_intact_after_a_restart() {
    let app = spawn_app(|_| {}).await;
    let live = app
        .stream_run(json!({ "input": "10 + 20 계산해줘", "metadata": { "k": "v" } }))
        .await;
    let id = run_id(&live);
    let (_, run_before) = app.get_json(&format!("/v1/runs/{id}")).await;
    let (_, steps_before) = app.get_json(&format!("/v1/runs/{id}/steps")).await;
    let events_before = app.history(&id).await;

    let dir = app.stop().await;
    let app = spawn_app_in(dir, |_| {}).await;
    let (status, run_after) = app.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(run_after, run_before);
    assert_eq!(run_after["status"], "succeeded");
    assert_eq!(
        app.get_json(&format!("/v1/runs/{id}/steps")).await.1,
        steps_before
    );
    assert_eq!(app.history(&id).await, events_before);
}

#[tokio::test]
async fn a_slow_client_never_holds_a_run_back() {
    let app = spawn_app(|c| c.engine.event_buffer = 16).await;
    let long_input = "word ".repeat(2_000);
    let run = app.create_run(json!({ "input": long_input })).await;
    let id = run["id"].as_str().unwrap().to_owned();
    // A client that opens the stream and never reads it.
    let stalled = app
        .client
        .get(app.url(&format!("/v1/runs/{id}/events")))
        .send()
        .await
        .unwrap();
    // Another reads to the end: the run finishes although the first client is stuck.
    let events = app.follow(&id).await;
    assert_well_formed(&events, 1);
    assert!(events.len() > 100, "{}", events.len());
    assert_eq!(final_data(&events)["status"], "succeeded");
    // And the stuck client still gets every event, gap-free, when it finally reads.
    let late = SseReader::new(stalled).read_to_final().await;
    assert_well_formed(&late, 1);
    assert_eq!(late.len(), events.len());
}

/// A new run's stream starts from the hub, not the store: opened before the run's first event,
/// it hears all of them. A client that does not read it for a while falls behind the live
/// channel (16 events) and is caught up from the store: every event, in order, as stored.
#[tokio::test]
async fn a_new_runs_stream_that_falls_behind_catches_up_from_the_store() {
    let app = spawn_app(|c| c.engine.event_buffer = 16).await;
    let stalled = app
        .client
        .post(app.url("/v1/runs"))
        .header("accept", "text/event-stream")
        .json(&json!({ "input": "word ".repeat(2_000) }))
        .send()
        .await
        .unwrap();
    assert_eq!(stalled.status(), 200);
    let (_, runs) = app.get_json("/v1/runs").await;
    let id = runs["runs"][0]["id"].as_str().expect("the run").to_owned();
    // The run ends while the POST's stream is not read.
    let events = app.follow(&id).await;
    assert_eq!(final_data(&events)["status"], "succeeded");
    assert!(events.len() > 100, "{}", events.len());
    let late = SseReader::new(stalled).read_to_final().await;
    assert_well_formed(&late, 1);
    let stored: Vec<Value> = app.history(&id).await;
    let late: Vec<Value> = late.iter().map(SseMessage::json).collect();
    assert_eq!(late, stored);
}

#[tokio::test]
async fn health_readiness_tools_and_metrics() {
    let app = spawn_app(|_| {}).await;
    assert_eq!(app.get_json("/healthz").await.0, 200);
    assert_eq!(app.get_json("/readyz").await.0, 200);
    let (status, tools) = app.get_json("/v1/tools").await;
    assert_eq!(status, 200);
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "clock.now",
            "fs.read",
            "math.calculate",
            "memory.get",
            "memory.put",
            "memory.search"
        ]
    );
    for t in tools.as_array().unwrap() {
        assert_eq!(t["input_schema"]["type"], "object");
        assert!(!t["description"].as_str().unwrap().is_empty());
    }

    app.stream_run(json!({ "input": "10 + 20 계산해줘" })).await;
    let text = app.metrics().await;
    for needle in [
        "orca_runs{status=\"succeeded\"} 1",
        "orca_runs_finished_total{status=\"succeeded\"} 1",
        "orca_llm_tokens_total{type=\"completion\"}",
        "orca_step_duration_seconds_count{kind=\"tool\"} 1",
        "orca_llm_request_duration_seconds_count 2",
        "orca_open_streams",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
}

#[tokio::test]
async fn the_checked_in_openapi_yaml_matches_the_code() {
    let generated = orca::openapi::yaml();
    let checked_in = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml"))
        .expect("openapi.yaml exists");
    assert!(
        generated == checked_in,
        "openapi.yaml is stale: run `cargo run -- openapi -o openapi.yaml`"
    );
    let app = spawn_app(|_| {}).await;
    let (status, doc) = app.get_json("/openapi.json").await;
    assert_eq!(status, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    assert_eq!(doc, orca::openapi());
    for path in [
        "/v1/runs",
        "/v1/runs/{id}",
        "/v1/runs/{id}/events",
        "/v1/runs/{id}/cancel",
        "/v1/tools",
        "/metrics",
    ] {
        assert!(doc["paths"][path].is_object(), "{path}");
    }
}
