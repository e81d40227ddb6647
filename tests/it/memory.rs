//! Memory beyond one session and users within a tenant (issue 48), over HTTP: items put, read,
//! listed, searched and forgotten; limits that answer 413/422 and store nothing; keys bound to
//! users that see only their own runs, sessions and memory; runs that remember through the
//! `memory.*` tools at every nesting level and recall it from another session; and a kill -9
//! between a run's memory write and its step's end that does not write twice.

use serde_json::{Value, json};

use crate::support::app::{TestApp, bearer_client, final_data, poll_json, spawn_app};
use crate::support::scripted_llm::{Reply, ScriptedLlm};
use crate::support::{Server, to_final};

async fn delete(app: &TestApp, client: &reqwest::Client, path: &str) -> u16 {
    let resp = client.delete(app.url(path)).send().await.expect("DELETE");
    resp.status().as_u16()
}

async fn call(
    app: &TestApp,
    client: &reqwest::Client,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = client.request(method, app.url(path));
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.expect("the server answers");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn keys_of(items: &Value) -> Vec<String> {
    (items.as_array().expect("items"))
        .iter()
        .map(|i| {
            format!(
                "{}/{}",
                i["namespace"].as_str().unwrap(),
                i["key"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test]
async fn items_are_put_read_listed_searched_and_forgotten() {
    let app = spawn_app(|_| {}).await;
    let (status, first) = app
        .put_json(
            "/v1/memory/user/alice/prefs/tea",
            &json!({ "value": { "likes": "green tea, sencha above all" } }),
        )
        .await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["revision"], 1);
    assert_eq!(first["user_id"], "alice");
    let (status, second) = app
        .put_json(
            "/v1/memory/user/alice/prefs/tea",
            &json!({ "value": { "likes": "oolong" } }),
        )
        .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["revision"], 2, "a replacing put is a new revision");
    assert_eq!(second["created_at"], first["created_at"]);
    for (path, value) in [
        (
            "/v1/memory/user/alice/prefs/coffee",
            json!("Alice drinks no coffee after noon"),
        ),
        (
            "/v1/memory/user/alice/trips/kyoto",
            json!("Alice visited Kyoto tea farms in May"),
        ),
        (
            "/v1/memory/user/alicia/prefs/tea",
            json!("Alicia prefers black tea"),
        ),
        (
            "/v1/memory/shared/kb/returns",
            json!("Returns are accepted within 30 days"),
        ),
    ] {
        let (status, body) = app.put_json(path, &json!({ "value": value })).await;
        assert_eq!(status, 201, "{path}: {body}");
    }
    let (status, got) = app.get_json("/v1/memory/user/alice/prefs/tea").await;
    assert_eq!(status, 200);
    assert_eq!(got["value"], json!({ "likes": "oolong" }));

    // A namespace lists its items and those below it, not a sibling sharing its prefix.
    let (status, page) = app
        .get_json("/v1/memory?namespace=user/alice&limit=2")
        .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        keys_of(&page["items"]),
        ["user/alice/prefs/coffee", "user/alice/prefs/tea"]
    );
    let cursor = page["next_cursor"].as_str().expect("a next page");
    let (_, rest) = app
        .get_json(&format!(
            "/v1/memory?namespace=user/alice&limit=2&cursor={cursor}"
        ))
        .await;
    assert_eq!(keys_of(&rest["items"]), ["user/alice/trips/kyoto"]);
    assert!(rest["next_cursor"].is_null());
    let (_, prefixed) = app
        .get_json("/v1/memory?namespace=user/alice&key_prefix=cof")
        .await;
    assert_eq!(keys_of(&prefixed["items"]), ["user/alice/prefs/coffee"]);

    // Search: stemmed words, ranked, within the namespace.
    let (status, found) = app
        .post_json(
            "/v1/memory/search",
            &json!({ "namespace": "user/alice", "query": "Which teas did she visit?" }),
        )
        .await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["mode"], "text");
    let found = keys_of(&found["items"]);
    assert_eq!(
        found.first().map(String::as_str),
        Some("user/alice/trips/kyoto"),
        "{found:?}"
    );
    assert!(
        !found.iter().any(|k| k.starts_with("user/alicia")),
        "{found:?}"
    );
    assert!(
        !found.contains(&"user/alice/prefs/coffee".to_owned()),
        "{found:?}"
    );

    assert_eq!(
        delete(&app, &app.client, "/v1/memory/user/alice/prefs/coffee").await,
        204
    );
    assert_eq!(
        delete(&app, &app.client, "/v1/memory/user/alice/prefs/coffee").await,
        404
    );
    let (status, _) = app.get_json("/v1/memory/user/alice/prefs/coffee").await;
    assert_eq!(status, 404);

    // A TTL forgets the item: gone from get, list and search once it passes.
    let (status, _) = app
        .put_json(
            "/v1/memory/session/s1/brief",
            &json!({ "value": "a fleeting note", "ttl_seconds": 1 }),
        )
        .await;
    assert_eq!(status, 201);
    let url = app.url("/v1/memory/session/s1/brief");
    poll_json(&app.client, &url, |b| b["code"] == "not_found").await;
    let (_, listed) = app.get_json("/v1/memory?namespace=session/s1").await;
    assert_eq!(listed["items"], json!([]));
}

#[tokio::test]
async fn limits_answer_413_and_422_and_store_nothing() {
    let app = spawn_app(|c| {
        c.memory.max_item_bytes = 64;
        c.memory.max_namespace_items = 2;
        c.memory.max_tenant_bytes = 70;
    })
    .await;
    let (status, body) = app
        .put_json("/v1/memory/kb/big", &json!({ "value": "x".repeat(100) }))
        .await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["code"], "payload_too_large");
    assert!(
        body["detail"].as_str().unwrap().contains("max_item_bytes"),
        "{body}"
    );
    for key in ["a", "b"] {
        let (status, _) = app
            .put_json(
                &format!("/v1/memory/kb/{key}"),
                &json!({ "value": "small" }),
            )
            .await;
        assert_eq!(status, 201);
    }
    let (status, body) = app
        .put_json("/v1/memory/kb/c", &json!({ "value": "small" }))
        .await;
    assert_eq!(status, 413, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("max_namespace_items"),
        "{body}"
    );
    // Replacing an item of a full namespace is no new item.
    let (status, _) = app
        .put_json("/v1/memory/kb/a", &json!({ "value": "changed" }))
        .await;
    assert_eq!(status, 200);
    // The tenant's bytes: 9 + 7 = 16 stored; 62 more is past 70.
    let (status, body) = app
        .put_json("/v1/memory/other/big", &json!({ "value": "y".repeat(60) }))
        .await;
    assert_eq!(status, 413, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("max_tenant_bytes"),
        "{body}"
    );
    let (_, listed) = app.get_json("/v1/memory?namespace=kb").await;
    assert_eq!(
        keys_of(&listed["items"]),
        ["kb/a", "kb/b"],
        "nothing refused was stored"
    );
    let (status, _) = app.get_json("/v1/memory/other/big").await;
    assert_eq!(status, 404);

    // Bad names, bodies and queries: 422 with a pointer, never a 500.
    for (path, body, pointer) in [
        (
            "/v1/memory/kb/has%20space",
            json!({ "value": 1 }),
            "/path/key",
        ),
        (
            "/v1/memory/a//b/k",
            json!({ "value": 1 }),
            "/path/namespace",
        ),
        ("/v1/memory/kb/k", json!([1, 2]), ""),
        (
            "/v1/memory/onlykey",
            json!({ "value": 1 }),
            "/path/namespace",
        ),
        (
            "/v1/memory/kb/k",
            json!({ "value": 1, "ttl_seconds": 0 }),
            "/ttl_seconds",
        ),
        (
            "/v1/memory/kb/k",
            json!({ "value": 1, "extra": true }),
            "/extra",
        ),
        ("/v1/memory/kb/k", json!({}), "/value"),
    ] {
        let (status, answer) = app.put_json(path, &body).await;
        assert_eq!(status, 422, "{path} {body}: {answer}");
        assert_eq!(
            answer["errors"][0]["pointer"], pointer,
            "{path} {body}: {answer}"
        );
    }
    let deep = ["n"; 9].join("/");
    let (status, _) = app
        .put_json(&format!("/v1/memory/{deep}/k"), &json!({ "value": 1 }))
        .await;
    assert_eq!(status, 422);
    let (status, answer) = app
        .post_json(
            "/v1/memory/search",
            &json!({ "namespace": "kb", "query": " ", "limit": 0 }),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    let pointers: Vec<&str> = (answer["errors"].as_array().unwrap())
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    assert_eq!(pointers, ["/query", "/limit"]);
    let (status, _) = app.get_json("/v1/memory?namespace=kb&cursor=zz").await;
    assert_eq!(status, 422);
    let (status, _) = app.get_json("/v1/memory?namespace=kb&limit=500").await;
    assert_eq!(status, 422);
}

const ALICE: &str = "alice-key-0123456789";
const BOB: &str = "bob-key-0123456789ab";
const ADMIN: &str = "admin-key-0123456789";
const OTHER: &str = "other-tenant-key-0123";

fn users(c: &mut orca::config::Config) {
    use orca::config::{ApiKey, Secret};
    let key = |key: &str, tenant: &str, user: Option<&str>| ApiKey {
        key: Secret::new(key),
        tenant: tenant.into(),
        user: user.map(str::to_owned),
    };
    c.auth.api_keys = vec![
        key(ALICE, "acme", Some("alice")),
        key(BOB, "acme", Some("bob")),
        key(ADMIN, "acme", None),
        key(OTHER, "globex", None),
    ];
}

#[tokio::test]
async fn two_users_with_bound_keys_see_only_their_own_runs_sessions_and_memory() {
    use reqwest::Method;
    let app = spawn_app(users).await;
    let (alice, bob, admin, other) = (
        bearer_client(ALICE),
        bearer_client(BOB),
        bearer_client(ADMIN),
        bearer_client(OTHER),
    );
    let run = |session: &str| json!({ "input": "hello", "orchestration": "simple", "session_id": session });
    let (status, alices) = call(&app, &alice, Method::POST, "/v1/runs", Some(run("s-alice"))).await;
    assert_eq!(status, 201, "{alices}");
    assert_eq!(
        alices["user_id"], "alice",
        "a bound key's run is its user's"
    );
    let alices = alices["id"].as_str().unwrap().to_owned();
    let (status, bobs) = call(&app, &bob, Method::POST, "/v1/runs", Some(run("s-bob"))).await;
    assert_eq!(status, 201, "{bobs}");
    let bobs = bobs["id"].as_str().unwrap().to_owned();
    poll_json(&alice, &app.url(&format!("/v1/runs/{alices}")), |r| {
        r["status"] == "succeeded"
    })
    .await;

    // Runs and sessions: each user lists and reads only their own.
    let (_, listed) = call(&app, &bob, Method::GET, "/v1/runs", None).await;
    let ids: Vec<&str> = (listed["runs"].as_array().unwrap())
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [bobs.as_str()]);
    for path in [
        format!("/v1/runs/{alices}"),
        format!("/v1/runs/{alices}/steps"),
        format!("/v1/runs/{alices}/events"),
        "/v1/sessions/s-alice".to_owned(),
        "/v1/sessions/s-alice/history".to_owned(),
    ] {
        let (status, body) = call(&app, &bob, Method::GET, &path, None).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
    let (status, _) = call(
        &app,
        &bob,
        Method::POST,
        &format!("/v1/runs/{alices}/cancel"),
        None,
    )
    .await;
    assert_eq!(status, 404);
    let (_, sessions) = call(&app, &bob, Method::GET, "/v1/sessions", None).await;
    let names: Vec<&str> = (sessions["sessions"].as_array().unwrap())
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["s-bob"]);
    let (status, _) = call(&app, &bob, Method::GET, "/v1/runs?user_id=alice", None).await;
    assert_eq!(status, 403);
    let (status, body) = call(
        &app,
        &bob,
        Method::POST,
        "/v1/runs",
        Some(json!({ "input": "hi", "orchestration": "simple", "user_id": "alice" })),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = call(&app, &bob, Method::POST, "/v1/runs", Some(run("s-alice"))).await;
    assert_eq!(status, 409, "another user's session: {body}");
    // The tenant's own key sees both and filters by user.
    let (_, all) = call(&app, &admin, Method::GET, "/v1/runs?user_id=alice", None).await;
    let ids: Vec<&str> = (all["runs"].as_array().unwrap())
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [alices.as_str()]);
    let (_, both) = call(&app, &admin, Method::GET, "/v1/sessions", None).await;
    assert_eq!(both["sessions"].as_array().unwrap().len(), 2);
    let (_, of_bob) = call(&app, &admin, Method::GET, "/v1/sessions?user_id=bob", None).await;
    assert_eq!(of_bob["sessions"][0]["id"], "s-bob");

    // Memory: their own namespace and their sessions'; the tenant's to read only.
    let put = |v: &str| Some(json!({ "value": v }));
    let (status, body) = call(
        &app,
        &alice,
        Method::PUT,
        "/v1/memory/user/alice/notes/tea",
        put("sencha"),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = call(
        &app,
        &alice,
        Method::PUT,
        "/v1/memory/session/s-alice/topic",
        put("tea"),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["user_id"], "alice", "a session's memory is its user's");
    let (status, _) = call(
        &app,
        &admin,
        Method::PUT,
        "/v1/memory/shared/kb/hours",
        put("9 to 5"),
    )
    .await;
    assert_eq!(status, 201);
    for (method, path, body) in [
        (Method::GET, "/v1/memory/user/alice/notes/tea", None),
        (
            Method::PUT,
            "/v1/memory/user/alice/notes/tea",
            put("stolen"),
        ),
        (Method::DELETE, "/v1/memory/user/alice/notes/tea", None),
        (Method::GET, "/v1/memory/session/s-alice/topic", None),
        (Method::GET, "/v1/memory?namespace=user/alice", None),
        (Method::GET, "/v1/memory?namespace=user", None),
        (
            Method::POST,
            "/v1/memory/search",
            Some(json!({ "namespace": "user/alice", "query": "tea" })),
        ),
    ] {
        let (status, answer) = call(&app, &bob, method.clone(), path, body).await;
        assert_eq!(status, 404, "{method} {path}: {answer}");
    }
    let (status, _) = call(
        &app,
        &bob,
        Method::PUT,
        "/v1/memory/shared/kb/hours",
        put("never"),
    )
    .await;
    assert_eq!(status, 403);
    let (status, hours) = call(&app, &bob, Method::GET, "/v1/memory/shared/kb/hours", None).await;
    assert_eq!((status, hours["value"].clone()), (200, json!("9 to 5")));
    let (_, tea) = call(
        &app,
        &alice,
        Method::GET,
        "/v1/memory/user/alice/notes/tea",
        None,
    )
    .await;
    assert_eq!(tea["value"], "sencha", "bob changed nothing");
    // Another tenant sees none of it, under any name.
    let (status, _) = call(
        &app,
        &other,
        Method::GET,
        "/v1/memory/user/alice/notes/tea",
        None,
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = call(
        &app,
        &other,
        Method::GET,
        &format!("/v1/runs/{alices}"),
        None,
    )
    .await;
    assert_eq!(status, 404);
    // What is the tenant's to manage is not a user's key's.
    for (method, path) in [
        (Method::PUT, "/v1/workflows/w"),
        (Method::GET, "/v1/schedules"),
        (Method::GET, "/v1/tasks"),
        (Method::POST, "/v1/apply"),
    ] {
        let (status, body) = call(&app, &bob, method.clone(), path, Some(json!({}))).await;
        assert_eq!(status, 403, "{method} {path}: {body}");
    }
    let (status, _) = call(&app, &bob, Method::GET, "/v1/tools", None).await;
    assert_eq!(status, 200);
}

fn put_step(id: &str, key: &str, value: &str) -> Value {
    json!({ "id": id, "kind": "tool", "input": { "tool": "memory.put",
        "arguments": { "key": key, "value": value, "namespace": "facts" } } })
}

#[tokio::test]
async fn a_run_recalls_from_another_session_what_its_user_stored_at_any_depth() {
    let app = spawn_app(|_| {}).await;
    let (status, body) = app
        .put_json(
            "/v1/workflows/remember",
            &json!({ "steps": [put_step("deep", "pet", "Alice has a cat called Miso")] }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let plan = json!({ "steps": [
        put_step("top", "tea", "Alice drinks sencha every morning"),
        { "id": "seq", "kind": "sequential", "input": { "steps": [put_step("s1", "city", "Alice lives in Lisbon")] } },
        { "id": "par", "kind": "parallel", "input": { "steps": [
            put_step("p1", "job", "Alice works as a glassblower"),
            put_step("p2", "sport", "Alice rows on Sundays") ] } },
        { "id": "each", "kind": "loop", "input": { "for_each": ["violin", "piano"], "max_iterations": 2,
            "steps": [ { "id": "l1", "kind": "tool", "input": { "tool": "memory.put",
                "arguments": { "key": "plays-{{ item }}", "value": "Alice plays the {{ item }}", "namespace": "facts" } } } ] } },
        { "id": "wf", "kind": "workflow", "input": { "workflow": "remember" } }
    ]});
    remembered_by_alice(&app, plan).await;
    let (_, listed) = app.get_json("/v1/memory?namespace=user/alice/facts").await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 7, "{listed}");

    let (events, items) = recalls(
        &app,
        "alice",
        "what instrument does she play, the violin?",
        3,
    )
    .await;
    assert_eq!(items[0]["key"], "plays-violin", "{items:?}");
    assert_eq!(items[0]["value"], "Alice plays the violin");
    // The read is a tool call like any: announced and answered in the run's events.
    assert!(
        events
            .iter()
            .any(|e| e.kind() == "tool_call" && e.json()["data"]["tool"] == "memory.search")
    );
    // Another user's run finds nothing of Alice's.
    let (_, items) = recalls(&app, "bob", "violin", 3).await;
    assert!(items.is_empty(), "{items:?}");
    // A run of no user has no user memory: the call fails with its own code.
    let events = app
        .stream_run(json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [put_step("p", "k", "v")] } }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "failed", "{fin}");
    assert_eq!(fin["error"]["code"], "memory_scope_unavailable", "{fin}");
}

/// The agent writes to memory in its first round and calls a worker tool in its second; orca
/// is killed while that call waits, between the write and the step's end. The resumed step
/// goes on from its checkpoint: the write is not made again, and the item has one revision.
/// (A write made again, by a round cut between the write and its checkpoint, is recognised in
/// the store: `store::memory`'s tests.)
#[tokio::test]
async fn a_kill_9_between_a_memory_write_and_its_steps_end_does_not_write_twice() {
    let llm = ScriptedLlm::start().await;
    let put = json!({ "key": "tea", "value": "Alice likes sencha" });
    llm.push_for("agent keeper", Reply::tool_call("memory.put", put));
    llm.push_for(
        "agent keeper",
        Reply::tool_call("text.shout", json!({ "text": "hello" })),
    );
    llm.push_for("agent keeper", Reply::text("noted"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("workspace")).unwrap();
    let server = Server::start_scripted(dir.path(), &llm).await;
    let shout = json!({ "description": "Upper-cases a text.", "queue": "shouts",
        "input_schema": { "type": "object", "required": ["text"], "additionalProperties": false,
                          "properties": { "text": { "type": "string" } } } });
    let resp = (server.client.put(server.url("/v1/tools/text.shout")))
        .json(&shout)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let plan = json!({ "agents": { "keeper": { "description": "Keeps notes.",
            "instructions": "You are agent keeper.", "tools": ["memory.put", "text.shout"] } },
        "steps": [ { "id": "note", "kind": "agent", "input": { "agent": "keeper", "prompt": "{{ input }}" } } ] });
    let body = json!({ "input": "remember my tea", "orchestration": "fixed", "plan": plan,
        "user_id": "alice", "session_id": "s1" });
    let resp = server
        .client
        .post(server.url("/v1/runs"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let id = resp.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The shout's task is queued: the write is behind the step, its end ahead.
    let tasks = server.url("/v1/tasks?status=queued");
    poll_json(&server.client, &tasks, |b| {
        b["tasks"].as_array().is_some_and(|t| t.len() == 1)
    })
    .await;
    let item = server.url("/v1/memory/user/alice/tea");
    let written = poll_json(&server.client, &item, |b| b["revision"] == 1).await;
    assert_eq!(written["written_by_run"], id.as_str());
    assert_eq!(
        written["session_id"],
        json!(null),
        "a user's item, not the session's"
    );
    server.kill();

    let server = Server::start_scripted(dir.path(), &llm).await;
    let worker = json!({ "worker_id": "w", "queue": "shouts", "max_tasks": 1, "wait_ms": 10_000 });
    let polled: Value = (server.client.post(server.url("/v1/workers/poll")))
        .json(&worker)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let task = polled["tasks"][0]["id"]
        .as_str()
        .expect("the shout's task")
        .to_owned();
    let done = (server
        .client
        .post(server.url(&format!("/v1/tasks/{task}/complete"))))
    .json(&json!({ "worker_id": "w", "output": "HELLO" }))
    .send()
    .await
    .unwrap();
    assert_eq!(done.status(), 200);
    let resp = (server
        .client
        .get(server.url(&format!("/v1/runs/{id}/events"))))
    .send()
    .await
    .unwrap();
    let events = to_final(crate::support::SseReader::new(resp)).await;
    assert_eq!(
        final_data(&events)["status"],
        "succeeded",
        "{:?}",
        final_data(&events)
    );
    let puts = (events.iter())
        .filter(|e| e.kind() == "tool_call" && e.json()["data"]["tool"] == "memory.put")
        .count();
    assert_eq!(puts, 1, "the write's result came from the checkpoint");
    let item = server.url("/v1/memory/user/alice/tea");
    let item: Value = server
        .client
        .get(&item)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(item["revision"], 1, "written once: {item}");
}

/// Runs `plan` as Alice's, in session `monday`, to its success.
async fn remembered_by_alice(app: &TestApp, plan: Value) {
    let body = json!({ "input": "remember", "orchestration": "fixed", "plan": plan,
        "session_id": "monday", "user_id": "alice" });
    let fin = final_data(&app.stream_run(body).await);
    assert_eq!(fin["status"], "succeeded", "{fin}");
}

/// Items of Alice's written by one run, in session `monday`.
async fn alices_facts(app: &TestApp) {
    let plan = json!({ "steps": [
        put_step("pet", "pet", "Alice has a cat called Miso"),
        put_step("tea", "tea", "Alice drinks sencha every morning"),
        put_step("city", "city", "Alice lives in Lisbon"),
    ]});
    remembered_by_alice(app, plan).await;
}

/// What a run of `user`'s in session `tuesday-USER` finds in its `facts` for `query` with
/// `memory.search`: its events, and the items.
async fn recalls(
    app: &TestApp,
    user: &str,
    query: &str,
    limit: u32,
) -> (Vec<crate::support::app::SseMessage>, Vec<Value>) {
    let body = json!({ "input": "recall", "orchestration": "fixed",
        "session_id": format!("tuesday-{user}"), "user_id": user,
        "plan": { "steps": [ { "id": "find", "kind": "tool", "input": { "tool": "memory.search",
            "arguments": { "query": query, "namespace": "facts", "limit": limit } } } ],
            "output": "{{ steps.find.output }}" } });
    let events = app.stream_run(body).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let items = fin["output"]["items"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    (events, items)
}

/// What Alice's run finds first for `query` (see [`recalls`]).
async fn alice_recalls(app: &TestApp, query: &str) -> Vec<Value> {
    recalls(app, "alice", query, 1).await.1
}

#[tokio::test]
async fn a_run_recalls_by_meaning_through_an_embeddings_server_as_strict_as_openais() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_app(|c| {
        crate::support::app::use_scripted_embeddings(c, &llm);
    })
    .await;
    alices_facts(&app).await;
    // No word of the query is in the item: only its meaning is.
    let found = alice_recalls(&app, "a feline companion").await;
    assert_eq!(found[0]["key"], "pet", "{found:?}");
    let found = alice_recalls(&app, "which instrument... no: what is her drink, matcha?").await;
    assert_eq!(found[0]["key"], "tea", "{found:?}");
    let embedded = llm.embedded();
    assert!(
        embedded.contains(&"pet Alice has a cat called Miso".to_owned()),
        "{embedded:?}"
    );
    assert!(
        embedded.contains(&"a feline companion".to_owned()),
        "{embedded:?}"
    );
    // Over HTTP: `text` finds nothing for it, `meaning` (and `auto`) finds the cat.
    let search = |mode: &str| json!({ "namespace": "user/alice", "query": "feline companion", "mode": mode });
    let (_, by_text) = app.post_json("/v1/memory/search", &search("text")).await;
    assert_eq!(by_text["items"], json!([]), "{by_text}");
    for mode in ["meaning", "auto"] {
        let (status, found) = app.post_json("/v1/memory/search", &search(mode)).await;
        assert_eq!(status, 200, "{found}");
        assert_eq!(found["mode"], "meaning");
        assert_eq!(found["items"][0]["key"], "pet", "{found}");
        let score = |i: usize| found["items"][i]["score"].as_f64().unwrap();
        assert!(score(0) > 0.2 && score(1) < 0.01, "{found}");
    }
}

#[tokio::test]
async fn ollama_embeds_too_and_a_failing_embedding_model_stores_nothing() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_app(|c| {
        crate::support::app::use_scripted_openai(c, &llm);
        let provider = orca::config::ProviderConfig {
            kind: orca::config::ProviderKind::Ollama,
            max_retries: 0,
            ..orca::config::ProviderConfig::openai(llm.ollama_base_url())
        };
        c.llm.providers.insert("local".into(), provider);
        let alias = orca::config::ModelAlias::new("local", "nomic-embed-text");
        c.llm.models.insert("embedder".into(), alias);
        c.memory.embedding_model = "embedder".into();
    })
    .await;
    alices_facts(&app).await;
    let found = alice_recalls(&app, "kitten").await;
    assert_eq!(found[0]["key"], "pet", "{found:?}");
    let embedded = llm.embedded();
    assert!(embedded.contains(&"kitten".to_owned()), "{embedded:?}");

    // An embedding model that cannot be reached: the put is 503 and stores nothing.
    let app = spawn_app(|c| {
        crate::support::app::use_scripted_openai(c, &llm);
        let down = orca::config::ProviderConfig {
            max_retries: 0,
            connect_timeout_ms: 500,
            ..orca::config::ProviderConfig::openai("http://127.0.0.1:9/v1")
        };
        c.llm.providers.insert("down".into(), down);
        let alias = orca::config::ModelAlias::new("down", "text-embedding-3-small");
        c.llm.models.insert("embedder".into(), alias);
        c.memory.embedding_model = "embedder".into();
    })
    .await;
    let (status, body) = app
        .put_json("/v1/memory/kb/hours", &json!({ "value": "9 to 5" }))
        .await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("embedding model"),
        "{body}"
    );
    let (status, _) = app.get_json("/v1/memory/kb/hours").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn the_offline_provider_embeds_without_a_key_and_an_unknown_embedding_model_stops_the_start()
{
    let app = spawn_app(|c| c.memory.embedding_model = "default".into()).await;
    alices_facts(&app).await;
    let found = alice_recalls(&app, "does she keep cats?").await;
    assert_eq!(found[0]["key"], "pet", "{found:?}");
    assert!(found[0]["score"].as_f64().unwrap() > 0.1, "{found:?}");
    let (_, found) = app
        .post_json(
            "/v1/memory/search",
            &json!({ "namespace": "user/alice", "query": "sencha" }),
        )
        .await;
    assert_eq!(found["mode"], "meaning", "{found}");
    assert_eq!(found["items"][0]["key"], "tea", "{found}");

    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::support::app::test_config(&dir);
    config.memory.embedding_model = "no-such-alias".into();
    let refused = orca::app::App::build(config)
        .await
        .err()
        .expect("the start is refused");
    assert!(
        refused.to_string().contains("memory.embedding_model"),
        "{refused}"
    );
}

/// An agent that recalls for its turn and remembers after it, in a team step nested in a
/// `sequential` one.
fn keeper(memory: Value) -> Value {
    json!({ "agents": { "keeper": { "description": "Keeps notes.",
            "instructions": "You are agent keeper.", "memory": memory } },
        "steps": [ { "id": "seq", "kind": "sequential", "input": { "steps": [
            { "id": "talk", "kind": "agent", "input": { "agent": "keeper", "prompt": "{{ input }}" } } ] } } ] })
}

#[tokio::test]
async fn an_agent_remembers_a_session_and_recalls_it_in_another() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_app(|c| crate::support::app::use_scripted_openai(c, &llm)).await;
    llm.push_for("agent keeper", Reply::text("Noted: sencha it is."));
    // The summarizer's reply: what is written to memory.
    llm.push_for(
        "Summarise the conversation",
        Reply::text("Alice prefers sencha tea, brewed cool."),
    );
    let run = |input: &str, session: &str, user: &str, memory: Value| {
        json!({ "input": input,
        "orchestration": "fixed", "plan": keeper(memory), "session_id": session, "user_id": user })
    };
    let events = app
        .stream_run(run(
            "I like sencha",
            "monday",
            "alice",
            json!({ "remember": true }),
        ))
        .await;
    assert_eq!(
        final_data(&events)["status"],
        "succeeded",
        "{:?}",
        final_data(&events)
    );
    let (status, item) = app.get_json("/v1/memory/user/alice/session-monday").await;
    assert_eq!(status, 200, "{item}");
    assert_eq!(item["value"], "Alice prefers sencha tea, brewed cool.");
    let written = (events.iter())
        .find(|e| e.kind() == "tool_call" && e.json()["data"]["tool"] == "memory.put")
        .expect("the write is a tool call");
    assert!(
        written.json()["path"]
            .as_str()
            .unwrap()
            .starts_with("seq/talk"),
        "{:?}",
        written.json()
    );

    // Tuesday, in another session: the agent's prompt carries what it recalled.
    llm.push_for("agent keeper", Reply::text("Sencha, brewed cool."));
    let events = app
        .stream_run(run(
            "Which tea should I brew?",
            "tuesday",
            "alice",
            json!({ "recall": 2 }),
        ))
        .await;
    assert_eq!(
        final_data(&events)["status"],
        "succeeded",
        "{:?}",
        final_data(&events)
    );
    let system = |r: &Value| {
        r["messages"][0]["content"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let asked = system(llm.requests().last().unwrap());
    assert!(asked.starts_with("You are agent keeper."), "{asked}");
    assert!(
        asked.contains("- session-monday: Alice prefers sencha tea, brewed cool."),
        "{asked}"
    );
    assert!(
        events
            .iter()
            .any(|e| e.kind() == "tool_call" && e.json()["data"]["tool"] == "memory.search")
    );
    // Bob's agent recalls nothing of Alice's.
    llm.push_for("agent keeper", Reply::text("No idea."));
    let events = app
        .stream_run(run(
            "Which tea should I brew?",
            "wednesday",
            "bob",
            json!({ "recall": 2 }),
        ))
        .await;
    assert_eq!(final_data(&events)["status"], "succeeded");
    let asked = system(llm.requests().last().unwrap());
    assert_eq!(asked, "You are agent keeper.");
    // A run of no user: the recall fails, is told, and the turn goes on.
    llm.push_for("agent keeper", Reply::text("Fine."));
    let body =
        json!({ "input": "hi", "orchestration": "fixed", "plan": keeper(json!({ "recall": 2 })) });
    let events = app.stream_run(body).await;
    assert_eq!(final_data(&events)["status"], "succeeded");
    let told = events
        .iter()
        .find(|e| e.kind() == "error")
        .expect("an error event");
    let told = told.json();
    assert_eq!(told["data"]["code"], "memory_scope_unavailable", "{told}");
}

/// Cancels run `id` and waits until it is `cancelled`.
async fn cancelled(app: &TestApp, client: &reqwest::Client, id: &str) {
    let url = app.url(&format!("/v1/runs/{id}/cancel"));
    let resp = client.post(url).send().await.expect("the server answers");
    assert_eq!(resp.status(), 202);
    let run = app.url(&format!("/v1/runs/{id}"));
    poll_json(client, &run, |r| r["status"] == "cancelled").await;
}

#[tokio::test]
async fn erasing_a_user_removes_everything_of_theirs_and_nothing_of_anyone_elses() {
    use reqwest::Method;
    let app = spawn_app(users).await;
    let (bob, admin) = (bearer_client(BOB), bearer_client(ADMIN));
    let remember = |session: &str, user: &str, scope: &str| {
        json!({ "input": "x", "orchestration": "fixed",
        "session_id": session, "user_id": user, "plan": { "steps": [ { "id": "w", "kind": "tool",
            "input": { "tool": "memory.put", "arguments": { "key": "k", "value": format!("of {user}"), "scope": scope } } } ] } })
    };
    for body in [
        remember("s-a1", "alice", "user"),
        remember("s-a2", "alice", "session"),
        remember("s-b", "bob", "user"),
        remember("s-b", "bob", "session"),
    ] {
        let (status, run) = call(&app, &admin, Method::POST, "/v1/runs", Some(body)).await;
        assert_eq!(status, 201, "{run}");
        let url = app.url(&format!("/v1/runs/{}", run["id"].as_str().unwrap()));
        poll_json(&admin, &url, |r| r["status"] == "succeeded").await;
    }
    for session in ["s-a1", "s-b"] {
        let path = format!("/v1/sessions/{session}");
        let (status, _) = call(
            &app,
            &admin,
            Method::PATCH,
            &path,
            Some(json!({ "variables": { "mood": "calm" } })),
        )
        .await;
        assert_eq!(status, 200);
    }
    let (status, _) = call(
        &app,
        &admin,
        Method::PUT,
        "/v1/memory/shared/kb/hours",
        Some(json!({ "value": "9 to 5" })),
    )
    .await;
    assert_eq!(status, 201);
    // A run of Alice's still waiting: nothing is erased until it ends.
    let waiting = json!({ "input": "x", "orchestration": "fixed", "session_id": "s-a3", "user_id": "alice",
        "plan": { "steps": [ { "id": "ask", "kind": "user_input", "input": { "prompt": "ok?" } } ] } });
    let (_, waiting) = call(&app, &admin, Method::POST, "/v1/runs", Some(waiting)).await;
    let waiting = waiting["id"].as_str().unwrap().to_owned();
    poll_json(&admin, &app.url(&format!("/v1/runs/{waiting}")), |r| {
        r["status"] == "waiting_input"
    })
    .await;

    let (status, export) = call(&app, &admin, Method::GET, "/v1/users/alice/export", None).await;
    assert_eq!(status, 200, "{export}");
    assert_eq!(export["runs"].as_array().unwrap().len(), 3);
    let sessions: Vec<&str> = (export["sessions"].as_array().unwrap())
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(sessions, ["s-a3", "s-a2", "s-a1"]);
    assert_eq!(
        export["sessions"][2]["variables"],
        json!({ "mood": "calm" })
    );
    assert_eq!(
        keys_of(&export["memory"]),
        ["session/s-a2/k", "user/alice/k"]
    );

    let (status, body) = call(&app, &admin, Method::DELETE, "/v1/users/alice", None).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains(&waiting),
        "{body}"
    );
    let (_, still) = call(&app, &admin, Method::GET, "/v1/users/alice/export", None).await;
    assert_eq!(
        still["runs"].as_array().unwrap().len(),
        3,
        "a refused erase erased nothing"
    );
    cancelled(&app, &admin, &waiting).await;
    let (status, _) = call(&app, &bob, Method::DELETE, "/v1/users/bob", None).await;
    assert_eq!(status, 403, "a user's own key does not erase");
    let (status, erased) = call(&app, &admin, Method::DELETE, "/v1/users/alice", None).await;
    assert_eq!(status, 200, "{erased}");
    assert_eq!(
        erased,
        json!({ "user_id": "alice", "runs": 3, "sessions": 3, "memory_items": 2 })
    );

    let (_, gone) = call(&app, &admin, Method::GET, "/v1/users/alice/export", None).await;
    assert_eq!(
        (
            gone["runs"].clone(),
            gone["sessions"].clone(),
            gone["memory"].clone()
        ),
        (json!([]), json!([]), json!([]))
    );
    for path in [
        "/v1/sessions/s-a1",
        "/v1/memory/user/alice/k",
        "/v1/memory/session/s-a2/k",
    ] {
        let (status, _) = call(&app, &admin, Method::GET, path, None).await;
        assert_eq!(status, 404, "{path}");
    }
    // Bob's, and the tenant's, are all there.
    let (_, bobs) = call(&app, &bob, Method::GET, "/v1/users/bob/export", None).await;
    assert_eq!(bobs["runs"].as_array().unwrap().len(), 2);
    assert_eq!(bobs["sessions"][0]["variables"], json!({ "mood": "calm" }));
    assert_eq!(keys_of(&bobs["memory"]), ["session/s-b/k", "user/bob/k"]);
    let (status, _) = call(&app, &bob, Method::GET, "/v1/users/alice/export", None).await;
    assert_eq!(status, 403);
    let (status, _) = call(
        &app,
        &admin,
        Method::GET,
        "/v1/memory/shared/kb/hours",
        None,
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_user_at_their_quota_is_refused_and_other_users_go_on() {
    use reqwest::Method;
    let app = spawn_app(|c| {
        users(c);
        c.quotas.user.running_runs = 1;
    })
    .await;
    let (alice, bob, admin) = (
        bearer_client(ALICE),
        bearer_client(BOB),
        bearer_client(ADMIN),
    );
    let waiting = json!({ "input": "x", "orchestration": "fixed",
        "plan": { "steps": [ { "id": "ask", "kind": "user_input", "input": { "prompt": "ok?" } } ] } });
    let (status, first) = call(
        &app,
        &alice,
        Method::POST,
        "/v1/runs",
        Some(waiting.clone()),
    )
    .await;
    assert_eq!(status, 201, "{first}");
    let resp = alice
        .post(app.url("/v1/runs"))
        .json(&waiting)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    assert!(resp.headers().contains_key("retry-after"));
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "quota_exceeded");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("the user's quota `user_running_runs` is 1"),
        "{body}"
    );
    // Bob, and a run of no user, are not held by Alice's quota.
    let (status, _) = call(&app, &bob, Method::POST, "/v1/runs", Some(waiting.clone())).await;
    assert_eq!(status, 201);
    let (status, _) = call(
        &app,
        &admin,
        Method::POST,
        "/v1/runs",
        Some(waiting.clone()),
    )
    .await;
    assert_eq!(status, 201);
    // Once her run ends, she may start another.
    let id = first["id"].as_str().unwrap();
    cancelled(&app, &admin, id).await;
    let (status, body) = call(&app, &alice, Method::POST, "/v1/runs", Some(waiting)).await;
    assert_eq!(status, 201, "{body}");
}
