//! History by relevance and memory's operator surface (issue 48), over HTTP: a session's new
//! turn holds its earlier turns most relevant to it (by text, and by meaning through an
//! embeddings server as strict as OpenAI's) within the token budget; the turns kept for it go
//! with the session; `/metrics` counts each tenant's memory (items, bytes, searches, writes)
//! and shows a tenant only its own; expired items stop counting once the sweep has run.

use serde_json::{Value, json};

use crate::support::app::{TestApp, bearer_client, final_data, poll_json, spawn_app};
use crate::support::scripted_llm::{Reply, ScriptedLlm};

/// About 20 tokens: a turn (question and answer, with framing) is about 45.
fn padded(text: &str) -> String {
    format!("{text}{}", " apple".repeat(15))
}

/// The user and assistant texts of a recorded chat request, in order (the system prompt
/// left out).
fn conversation(request: &Value) -> Vec<String> {
    (request["messages"].as_array().expect("messages"))
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn turn(app: &TestApp, llm: &ScriptedLlm, session: &str, question: &str, answer: &str) {
    llm.push(Reply::text(padded(answer)));
    let events = app
        .stream_run(
            json!({ "input": padded(question), "orchestration": "simple", "session_id": session }),
        )
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
}

/// Four turns on four subjects, then a fifth asking `question`: what the fifth's model call
/// held of the earlier conversation, oldest first.
async fn fifth_turn_sees(
    app: &TestApp,
    llm: &ScriptedLlm,
    session: &str,
    question: &str,
) -> String {
    let subjects = [
        ("my cat naps on the windowsill", "a sunny cat"),
        ("which sencha should I brew", "a shaded tea"),
        ("I practise the cello daily", "a patient musician"),
        ("the weather in the harbour", "grey and windy"),
    ];
    for (q, a) in subjects {
        turn(app, llm, session, q, a).await;
    }
    llm.push(Reply::text("noted"));
    let events = app
        .stream_run(json!({ "input": question, "orchestration": "simple", "session_id": session }))
        .await;
    assert_eq!(final_data(&events)["status"], "succeeded");
    let requests = llm.requests();
    conversation(requests.last().expect("a request")).join(" | ")
}

/// Keeps the session's turns by relevance, with room for two of the four.
fn relevant(c: &mut orca::config::Config) {
    c.context.session_history = orca::config::SessionHistory::Relevant;
    c.context.session_token_budget = 120;
}

#[tokio::test]
async fn a_new_turn_holds_the_earlier_turns_most_relevant_to_it_within_the_budget() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_app(|c| {
        crate::support::app::use_scripted(c, &llm);
        relevant(c);
    })
    .await;
    let seen = fifth_turn_sees(&app, &llm, "chat", "tell me about my cat again").await;
    // The cat turn (the oldest, but relevant) and the harbour one (the newest), in their
    // order; the tea and the cello, newer but irrelevant, left out.
    let cat = seen.find("cat naps").expect(&seen);
    let harbour = seen.find("harbour").expect(&seen);
    assert!(cat < harbour, "{seen}");
    assert!(
        !seen.contains("sencha") && !seen.contains("cello"),
        "{seen}"
    );
    assert!(seen.ends_with("tell me about my cat again"), "{seen}");
    // Nothing was summarised: five model calls for five runs.
    assert_eq!(llm.request_count(), 5);

    // The turns are kept in the session's memory, one item per earlier run, and go with it.
    let kept = kept_turns(&app).await;
    assert_eq!(kept.as_array().unwrap().len(), 4, "{kept}");
    assert_eq!(kept[0]["session_id"], "chat", "{kept}");
    let resp = (app.client.delete(app.url("/v1/sessions/chat")).send()).await;
    assert_eq!(resp.unwrap().status(), 204);
    assert_eq!(kept_turns(&app).await, json!([]));
}

async fn kept_turns(app: &TestApp) -> Value {
    let (status, listed) = app
        .get_json("/v1/memory?namespace=session/chat/turns")
        .await;
    assert_eq!(status, 200, "{listed}");
    listed["items"].clone()
}

#[tokio::test]
async fn turns_are_ranked_by_meaning_through_an_embeddings_server_as_strict_as_openais() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_app(|c| {
        crate::support::app::use_scripted_embeddings(c, &llm);
        relevant(c);
    })
    .await;
    // No word of the question is in the turn it finds: "kitten" means what "cat" does.
    let seen = fifth_turn_sees(&app, &llm, "by-meaning", "kitten").await;
    assert!(seen.contains("my cat naps"), "{seen}");
    assert!(
        !seen.contains("sencha") && !seen.contains("cello"),
        "{seen}"
    );
    assert!(
        llm.embedded().contains(&"kitten".to_owned()),
        "the question was embedded: {:?}",
        llm.embedded()
    );
    let metrics = app.metrics().await;
    assert!(
        metrics.contains(r#"orca_memory_searches_total{tenant="default",mode="meaning"} 4"#),
        "one search per run with earlier turns: {metrics}"
    );
}

const KEY_A: &str = "tenant-a-key-0123456789";
const KEY_B: &str = "tenant-b-key-0123456789";

async fn put(app: &TestApp, key: &str, path: &str, body: Value) -> u16 {
    let resp = bearer_client(key).put(app.url(path)).json(&body).send();
    resp.await.expect("PUT").status().as_u16()
}

async fn metrics_of(app: &TestApp, key: &str) -> String {
    let resp = bearer_client(key).get(app.url("/metrics")).send().await;
    resp.expect("GET /metrics").text().await.unwrap()
}

#[tokio::test]
async fn metrics_count_each_tenants_memory_and_the_sweep_frees_expired_bytes() {
    let app = spawn_app(|c| {
        use orca::config::{ApiKey, Secret};
        let key = |key: &str, tenant: &str| ApiKey {
            key: Secret::new(key),
            tenant: tenant.into(),
            user: None,
        };
        c.auth.api_keys = vec![key(KEY_A, "a"), key(KEY_B, "b")];
        c.memory.max_tenant_bytes = 300;
    })
    .await;
    let note = |n: usize| json!({ "value": "x".repeat(n) });
    // About 200 bytes that expire in a second, and 50 that stay.
    let brief = json!({ "value": "y".repeat(200), "ttl_seconds": 1 });
    assert_eq!(
        put(&app, KEY_A, "/v1/memory/scratch/brief", brief).await,
        201
    );
    assert_eq!(
        put(&app, KEY_A, "/v1/memory/notes/one", note(50)).await,
        201
    );
    assert_eq!(
        put(&app, KEY_B, "/v1/memory/notes/one", note(10)).await,
        201
    );
    let search = json!({ "namespace": "notes", "query": "x" });
    let resp = bearer_client(KEY_A)
        .post(app.url("/v1/memory/search"))
        .json(&search);
    assert_eq!(resp.send().await.unwrap().status(), 200);

    let mine = metrics_of(&app, KEY_A).await;
    for series in [
        r#"orca_tenant_memory_items{tenant="a"} 2"#,
        r#"orca_tenant_memory_bytes{tenant="a"} 254"#,
        r#"orca_memory_writes_total{tenant="a",outcome="stored"} 2"#,
        r#"orca_memory_searches_total{tenant="a",mode="text"} 1"#,
    ] {
        assert!(mine.contains(series), "{series} in {mine}");
    }
    assert!(
        !mine.contains(r#"tenant="b""#),
        "a tenant sees only its own: {mine}"
    );
    assert!(
        metrics_of(&app, KEY_B)
            .await
            .contains(r#"orca_tenant_memory_bytes{tenant="b"} 12"#)
    );

    // Expired, the brief item is gone for reads at once, but its bytes count until the sweep:
    // another namespace's put past the tenant's bytes is refused (and counted)...
    let client = bearer_client(KEY_A);
    let url = app.url("/v1/memory/scratch/brief");
    poll_json(&client, &url, |b| b["code"] == "not_found").await;
    assert_eq!(
        put(&app, KEY_A, "/v1/memory/notes/two", note(100)).await,
        413
    );
    let mine = metrics_of(&app, KEY_A).await;
    assert!(
        mine.contains(r#"orca_memory_writes_total{tenant="a",outcome="refused"} 1"#),
        "{mine}"
    );
    // ...and after it, taken.
    app.retention.sweep_now().await.unwrap();
    let mine = metrics_of(&app, KEY_A).await;
    assert!(
        mine.contains(r#"orca_tenant_memory_items{tenant="a"} 1"#),
        "{mine}"
    );
    assert_eq!(
        put(&app, KEY_A, "/v1/memory/notes/two", note(100)).await,
        201
    );
    // Tenant b's item, with no time to live, was not touched.
    let b = bearer_client(KEY_B)
        .get(app.url("/v1/memory/notes/one"))
        .send()
        .await;
    assert_eq!(b.unwrap().status(), 200);
}
