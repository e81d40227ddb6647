//! Several orca replicas (the real binary) on loopback sharing one PostgreSQL database:
//! runs spread over them, a replica killed -9 mid-run, streams, answers and cancels through a
//! replica that does not run the run, idempotency keys sent to two replicas at once, and a
//! replica handing its runs back as it stops, a replica whose clock is an hour off, and
//! notices kept within their schema. These always run on Postgres: the suite's
//! `ORCA_TEST_POSTGRES`, or a throwaway cluster of their own (`support::db::PgServer`).

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use crate::support::db::{PgServer, TEST_LEASE_TTL_MS, database_url_on, faketime_library};
use crate::support::{PATIENCE, Server, SseMessage, SseReader, skip_to};

/// `n` replicas on one fresh database of `pg`, each with its own working directory.
async fn replicas(
    pg: &PgServer,
    n: usize,
    env: &[(&str, &str)],
) -> (Vec<Server>, Vec<tempfile::TempDir>) {
    let first = tempfile::tempdir().unwrap();
    let db = database_url_on(&pg.url, first.path());
    let mut dirs = vec![first];
    for _ in 1..n {
        dirs.push(tempfile::tempdir().unwrap());
    }
    let mut env: Vec<(&str, &str)> = env.to_vec();
    env.push(("ORCA_LLM__PROVIDER", "offline"));
    let mut servers = Vec::new();
    for dir in &dirs {
        servers.push(Server::start_on(dir.path(), &db, &env).await);
    }
    (servers, dirs)
}

async fn post_run(server: &Server, body: &Value) -> String {
    let resp = server
        .client
        .post(server.url("/v1/runs"))
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201, "POST /v1/runs");
    let run: Value = resp.json().await.unwrap();
    run["id"].as_str().unwrap().to_owned()
}

async fn stream(server: &Server, id: &str) -> SseReader {
    let resp = server
        .client
        .get(server.url(&format!("/v1/runs/{id}/events")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    SseReader::new(resp)
}

async fn get(server: &Server, path: &str) -> Value {
    let resp = server
        .client
        .get(server.url(path))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "GET {path}");
    resp.json().await.unwrap()
}

/// Checks what a stream showed from its first event on: consecutive seqs, with no gap and
/// none twice, ending with the one `final`. Returns the final event's data.
fn complete(id: &str, events: &[SseMessage]) -> Value {
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| e.id.as_deref().unwrap().parse().unwrap())
        .collect();
    let first = seqs[0];
    let expected: Vec<u64> = (first..first + seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "run {id}: the stream's seqs");
    let finals = events.iter().filter(|e| e.kind() == "final").count();
    assert_eq!(finals, 1, "run {id}: one final");
    assert_eq!(events.last().unwrap().kind(), "final", "run {id}");
    let last: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
    last["data"].clone()
}

/// A run of three steps, the middle one a wait, so that a kill finds many runs mid-way.
fn three_steps() -> Value {
    json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
        { "id": "a", "kind": "tool", "input": { "tool": "math.calculate",
          "arguments": { "expression": "20 + 1" } } },
        { "id": "w", "kind": "wait", "depends_on": ["a"], "input": { "duration_ms": 600 } },
        { "id": "b", "kind": "tool", "depends_on": ["w"], "input": { "tool": "math.calculate",
          "arguments": { "expression": "{{ steps.a.output.result }} * 2" } } }
    ] } })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_finish_300_runs_when_one_is_killed_mid_run() {
    let pg = PgServer::start();
    let (mut servers, _dirs) = replicas(&pg, 3, &[]).await;
    let body = three_steps();

    // 100 runs through each replica, all at once.
    let posts = (0..300).map(|i| {
        let server = &servers[i % 3];
        let body = &body;
        async move { (i % 3, post_run(server, body).await) }
    });
    let runs: Vec<(usize, String)> = futures::stream::iter(posts)
        .buffer_unordered(48)
        .collect()
        .await;
    let on_b: Vec<&String> = runs
        .iter()
        .filter(|(r, _)| *r == 1)
        .map(|(_, id)| id)
        .collect();
    assert_eq!(on_b.len(), 100);

    // Streams on A for ten of B's runs, opened before B dies: they go on through the takeover.
    let mut watched = Vec::new();
    for id in on_b.iter().take(10) {
        watched.push((id.to_string(), stream(&servers[0], id).await));
    }
    // B dies mid-run: its first run has started and not finished.
    skip_to(&mut watched[0].1, "step", 1).await;
    let b = servers.remove(1);
    b.kill();
    let (a, c) = (&servers[0], &servers[1]);

    // Every run ends, followed on a replica other than the one it was sent to.
    let follow = runs.iter().map(|(sent_to, id)| {
        let follower = if *sent_to == 0 { c } else { a };
        async move {
            let read = stream(follower, id).await.read_to_final();
            match tokio::time::timeout(PATIENCE * 2, read).await {
                Ok(events) => (id.clone(), events),
                Err(_) => {
                    let run = get(follower, &format!("/v1/runs/{id}")).await;
                    let events = get(follower, &format!("/v1/runs/{id}/events")).await;
                    panic!("run {id} never ended: {run}\n{events}")
                }
            }
        }
    });
    let ended: Vec<(String, Vec<SseMessage>)> = futures::stream::iter(follow)
        .buffer_unordered(64)
        .collect()
        .await;
    assert_eq!(ended.len(), 300);
    for (id, events) in &ended {
        assert_eq!(
            events[0].id.as_deref(),
            Some("1"),
            "run {id}: from the start"
        );
        let last = complete(id, events);
        assert_eq!(last["status"], "succeeded", "run {id}: {last}");
        assert_eq!(last["output"]["result"], 42, "run {id}: {last}");
    }
    for (id, reader) in watched {
        let events = tokio::time::timeout(PATIENCE, reader.read_to_final())
            .await
            .expect("a stream on A for a run on B ends");
        // Its first events came live from B, the rest from whoever took the run over.
        complete(&id, &events);
    }

    // The stored history agrees: every seq once, and no step that had succeeded ran again.
    let mut taken_over = 0;
    for (_, id) in &runs {
        let events = get(a, &format!("/v1/runs/{id}/events")).await;
        let seqs: Vec<u64> = events
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as u64).collect::<Vec<_>>(),
            "run {id}"
        );
        let steps = get(c, &format!("/v1/runs/{id}/steps")).await;
        let mut by_step: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
        for s in steps.as_array().unwrap() {
            by_step
                .entry(s["step_id"].as_str().unwrap().to_owned())
                .or_default()
                .push((
                    s["attempt"].as_u64().unwrap(),
                    s["status"].as_str().unwrap().to_owned(),
                ));
        }
        assert_eq!(by_step.len(), 3, "run {id}: {steps}");
        for (step, mut attempts) in by_step {
            attempts.sort();
            let succeeded = attempts.iter().filter(|(_, s)| s == "completed").count();
            assert_eq!(succeeded, 1, "run {id} step {step}: {attempts:?}");
            assert_eq!(
                attempts.last().unwrap().1,
                "completed",
                "run {id} step {step}: nothing runs after it completed: {attempts:?}"
            );
            if attempts.len() > 1 {
                taken_over += 1;
            }
        }
    }
    // The kill did cut runs off mid-step (else this test would prove nothing).
    assert!(taken_over > 0, "no step was cut off by the kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_one_replica_is_answered_cancelled_and_replanned_through_another() {
    let pg = PgServer::start();
    let (servers, _dirs) = replicas(&pg, 2, &[]).await;
    let (a, b) = (&servers[0], &servers[1]);
    let ask = json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
        { "id": "ask", "kind": "user_input", "input": { "prompt": "how many?",
          "schema": { "type": "integer" } } },
        { "id": "twice", "kind": "tool", "depends_on": ["ask"], "input": {
          "tool": "math.calculate", "arguments": { "expression": "{{ steps.ask.output }} * 2" } } }
    ] } });

    // Runs on A; watched and answered through B.
    let id = post_run(a, &ask).await;
    let mut reader = stream(b, &id).await;
    skip_to(&mut reader, "input_required", 1).await;
    // B checks the answer against the step's schema, as A would.
    assert_eq!(b.answer(&id, "ask", json!("many")).await, 422);
    assert_eq!(b.answer(&id, "nope", json!(1)).await, 409);
    assert_eq!(b.answer(&id, "ask", json!(21)).await, 202);
    // The same step answered again, through either replica, is refused.
    assert_eq!(b.answer(&id, "ask", json!(5)).await, 409);
    let events = tokio::time::timeout(PATIENCE, reader.read_to_final())
        .await
        .expect("the answered run ends");
    let last = complete(&id, &events);
    assert_eq!(last["status"], "succeeded", "{last}");
    assert_eq!(last["output"]["result"], 42, "{last}");

    // Runs on A; cancelled through B.
    let id = post_run(a, &ask).await;
    let mut reader = stream(b, &id).await;
    skip_to(&mut reader, "input_required", 1).await;
    let resp = b
        .client
        .post(b.url(&format!("/v1/runs/{id}/cancel")))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    let events = tokio::time::timeout(PATIENCE, reader.read_to_final())
        .await
        .expect("the cancelled run ends");
    let last = complete(&id, &events);
    assert_eq!(last["status"], "cancelled", "{last}");

    // A reactive run on A, asked for a new plan through B.
    let reactive = json!({ "input": "x", "orchestration": "reactive", "plan": { "steps": [
        { "id": "fact", "kind": "tool", "input": { "tool": "math.calculate",
          "arguments": { "expression": "6 * 7" } } },
        { "id": "ask", "kind": "user_input", "depends_on": ["fact"], "input": { "prompt": "go on?" } }
    ] } });
    let id = post_run(a, &reactive).await;
    let mut reader = stream(b, &id).await;
    skip_to(&mut reader, "input_required", 1).await;
    let resp = b
        .client
        .post(b.url(&format!("/v1/runs/{id}/replan")))
        .json(&json!({ "message": "just tell me the fact" }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let events = tokio::time::timeout(PATIENCE, reader.read_to_final())
        .await
        .expect("the re-planned run ends");
    let last = complete(&id, &events);
    assert_eq!(last["status"], "succeeded", "{last}");
    let output = last["output"].as_str().unwrap_or_default();
    assert!(
        output.starts_with("Revised as you asked. just tell me the fact"),
        "{last}"
    );
    assert!(output.contains("42"), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_idempotency_key_sent_to_two_replicas_at_once_makes_one_run() {
    let pg = PgServer::start();
    let (servers, _dirs) = replicas(&pg, 2, &[]).await;
    let body = json!({ "input": "hello" });
    for round in 0..20 {
        let key = format!("key-{round}");
        let send = |s: &Server| {
            s.client
                .post(s.url("/v1/runs"))
                .header("idempotency-key", key.clone())
                .json(&body)
                .send()
        };
        let (r1, r2) = tokio::join!(send(&servers[0]), send(&servers[1]));
        let (r1, r2) = (r1.unwrap(), r2.unwrap());
        let mut statuses = [r1.status().as_u16(), r2.status().as_u16()];
        statuses.sort();
        assert_eq!(
            statuses,
            [200, 201],
            "round {round}: one creates, one finds it"
        );
        let (v1, v2): (Value, Value) = (r1.json().await.unwrap(), r2.json().await.unwrap());
        assert_eq!(v1["id"], v2["id"], "round {round}");
    }
    let listed = get(&servers[1], "/v1/runs?limit=100").await;
    let ids: HashSet<&str> = listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 20, "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_stops_hands_its_runs_back_at_once() {
    let pg = PgServer::start();
    // Leases far longer than the test: only a hand-back can move the run in time.
    let ttl = (TEST_LEASE_TTL_MS * 100).to_string();
    let (mut servers, _dirs) = replicas(&pg, 2, &[("ORCA_DATABASE__LEASE_TTL_MS", &ttl)]).await;
    let id = post_run(&servers[0], &three_steps_long()).await;
    let mut reader = stream(&servers[1], &id).await;
    skip_to(&mut reader, "step", 2).await;
    let a = servers.remove(0);
    let status = a.terminate();
    assert!(status.success(), "{status:?}");
    let events = tokio::time::timeout(PATIENCE, reader.read_to_final())
        .await
        .expect("the other replica takes the run over at once and ends it");
    let last = complete(&id, &events);
    assert_eq!(last["status"], "succeeded", "{last}");
    let resumed = events
        .iter()
        .any(|e| e.kind() == "status" && e.data.contains("resumed"));
    assert!(resumed, "the run was resumed by the other replica");
}

/// [`three_steps`] with a wait long enough to stop a replica during it.
fn three_steps_long() -> Value {
    let mut body = three_steps();
    body["plan"]["steps"][1]["input"]["duration_ms"] = json!(1500);
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_runs_are_taken_over_once_their_lease_lapses() {
    let pg = PgServer::start();
    let (mut servers, _dirs) = replicas(&pg, 2, &[]).await;
    let id = post_run(&servers[0], &three_steps_long()).await;
    let mut reader = stream(&servers[1], &id).await;
    skip_to(&mut reader, "step", 2).await;
    let killed_at = std::time::Instant::now();
    servers.remove(0).kill();
    let events = tokio::time::timeout(PATIENCE, reader.read_to_final())
        .await
        .expect("the run ends on the other replica");
    complete(&id, &events);
    // Not before the dead replica's lease could have lapsed.
    assert!(
        killed_at.elapsed() >= Duration::from_millis(TEST_LEASE_TTL_MS / 2),
        "taken over after {:?}",
        killed_at.elapsed()
    );
}

/// Children of `loop`, `sequential` and `parallel` steps that completed on a replica killed
/// -9 are not run again by the replica that takes the run over; the child that was waiting
/// is asked again and answered there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_children_completed_before_a_kill_are_not_run_again_after_a_takeover() {
    let pg = PgServer::start();
    let (mut servers, _dirs) = replicas(&pg, 2, &[]).await;
    let calc = |id: &str, expression: &str| {
        json!({ "id": id, "kind": "tool", "input": { "tool": "math.calculate",
                "arguments": { "expression": expression } } })
    };
    let plan = json!({ "steps": [
        { "id": "each", "kind": "loop", "input": {
            "for_each": [1, 2, 3], "max_iterations": 5,
            "steps": [{ "id": "body", "kind": "sequential", "input": { "steps": [
                calc("double", "{{ item }} * 2"),
                calc("square", "{{ item }} * {{ item }}"),
            ] } }] } },
        { "id": "fan", "kind": "parallel", "depends_on": ["each"], "input": { "steps": [
            calc("sum", "1 + 2 + 3"),
            { "id": "ask", "kind": "user_input", "input": { "prompt": "go on?" } },
        ] } },
    ] });
    let id = servers[0].start_plan(plan).await;
    drop(servers[0].until_asked(&id, 1).await);
    let completed = |steps: &[Value]| -> BTreeMap<(String, String, u64), Value> {
        steps
            .iter()
            .filter(|s| s["status"] == "completed")
            .map(|s| {
                let key = (
                    s["path"].as_str().unwrap_or_default().to_owned(),
                    s["step_id"].as_str().unwrap().to_owned(),
                    s["attempt"].as_u64().unwrap(),
                );
                (key, s["completed_at"].clone())
            })
            .collect()
    };
    let tools = |done: &BTreeMap<(String, String, u64), Value>, step: &str| {
        done.keys().filter(|(_, s, _)| s == step).count()
    };
    // The parallel step's tool may still be storing its attempt when its sibling asks (on a
    // shared store a tool acts only once its attempt is stored): wait until it is done.
    let deadline = std::time::Instant::now() + PATIENCE;
    let before = loop {
        let steps = servers[0].steps(&id).await;
        if tools(&completed(&steps), "sum") == 1 {
            break steps;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "sum never completed: {steps:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let done_before = completed(&before);
    // The loop (3 iterations of 2 tools) and the parallel step's tool were done.
    assert_eq!(tools(&done_before, "double"), 3, "{before:?}");
    assert_eq!(tools(&done_before, "square"), 3, "{before:?}");
    assert_eq!(tools(&done_before, "sum"), 1, "{before:?}");

    servers.remove(0).kill();
    let b = &servers[0];
    assert_eq!(b.answer(&id, "ask", json!("yes")).await, 202);
    let events = match tokio::time::timeout(PATIENCE, stream(b, &id).await.read_to_final()).await {
        Ok(events) => events,
        Err(_) => panic!(
            "not ended: {}\n{}\n{:?}",
            get(b, &format!("/v1/runs/{id}")).await,
            get(b, &format!("/v1/runs/{id}/events")).await,
            b.steps(&id).await
        ),
    };
    let last = complete(&id, &events);
    assert_eq!(last["status"], "succeeded", "{last}");
    // The parallel step's output: its children's, in order.
    assert_eq!(last["output"][0]["result"], 6, "{last}");
    assert_eq!(last["output"][1], "yes", "{last}");

    let after = b.steps(&id).await;
    let done_after = completed(&after);
    for (key, at) in &done_before {
        assert_eq!(
            done_after.get(key),
            Some(at),
            "{key:?} ran again: {after:?}"
        );
    }
    for step in ["double", "square", "sum", "ask"] {
        let runs = after
            .iter()
            .filter(|s| s["step_id"] == step && s["status"] == "completed")
            .count();
        let want = if step == "double" || step == "square" {
            3
        } else {
            1
        };
        assert_eq!(runs, want, "{step} completed {runs} times: {after:?}");
    }
}

/// A question asked inside a loop's `sequential` body, on a replica that stays up, answered
/// through another one: the answer reaches the step that asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_question_is_answered_through_another_replica() {
    let pg = PgServer::start();
    let (servers, _dirs) = replicas(&pg, 2, &[]).await;
    let (a, b) = (&servers[0], &servers[1]);
    let plan = json!({ "steps": [{ "id": "each", "kind": "loop", "input": {
        "for_each": ["only"], "max_iterations": 1,
        "steps": [{ "id": "body", "kind": "sequential", "input": { "steps": [
            { "id": "ask", "kind": "user_input", "input": { "prompt": "how many?",
              "schema": { "type": "integer" } } },
            { "id": "twice", "kind": "tool", "input": { "tool": "math.calculate",
              "arguments": { "expression": "{{ steps.ask.output }} * 2" } } },
        ] } }] } }] });
    let id = a.start_plan(plan).await;
    let reader = a.until_asked(&id, 1).await;
    assert_eq!(
        b.answer(&id, "ask", json!("many")).await,
        422,
        "checked on B"
    );
    assert_eq!(b.answer(&id, "ask", json!(21)).await, 202);
    let events = tokio::time::timeout(PATIENCE, reader.read_to_final())
        .await
        .expect("A gets B's answer and ends the run");
    let last = complete(&id, &events);
    assert_eq!(last["status"], "succeeded", "{last}");
    assert_eq!(last["output"][0]["result"], 42, "{last}");
}

/// A run waiting for a human answer, then doubling it.
fn ask_and_double() -> Value {
    json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
        { "id": "ask", "kind": "user_input", "input": { "prompt": "how many?",
          "schema": { "type": "integer" } } },
        { "id": "twice", "kind": "tool", "depends_on": ["ask"], "input": {
          "tool": "math.calculate", "arguments": { "expression": "{{ steps.ask.output }} * 2" } } }
    ] } })
}

/// Leases are dated by the database's clock: a replica whose own clock is an hour ahead
/// neither takes the runs of a replica on time (to it their leases look an hour old) nor,
/// once killed, leaves its own runs stranded for an hour (their leases would look an hour
/// long to the others).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_hold_whatever_the_replicas_clocks_say() {
    let pg = PgServer::start();
    let faketime = faketime_library();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let db = database_url_on(&pg.url, dir_a.path());
    let offline = ("ORCA_LLM__PROVIDER", "offline");
    let ahead = [
        offline,
        ("LD_PRELOAD", faketime.as_str()),
        ("FAKETIME", "+1h"),
        // Timers and time-outs keep the real pace; only the wall clock is off.
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    let a = Server::start_on(dir_a.path(), &db, &ahead).await;
    let b = Server::start_on(dir_b.path(), &db, &[offline]).await;

    // A waits for an answer; its clock is indeed an hour ahead.
    let on_a = post_run(&a, &ask_and_double()).await;
    let created = get(&b, &format!("/v1/runs/{on_a}")).await["created_at"].clone();
    let created = chrono::DateTime::parse_from_rfc3339(created.as_str().unwrap()).unwrap();
    let ahead_by = created.signed_duration_since(chrono::Utc::now());
    assert!(
        ahead_by > chrono::Duration::minutes(55),
        "replica A's clock should be an hour ahead, it is {ahead_by} off"
    );
    let mut on_a_events = stream(&b, &on_a).await;
    skip_to(&mut on_a_events, "input_required", 1).await;

    // B's run lasts longer than a lease, through several of A's looks for lapsed leases.
    let on_b = post_run(&b, &three_steps_long()).await;
    let events = tokio::time::timeout(PATIENCE, stream(&a, &on_b).await.read_to_final())
        .await
        .expect("B's run ends");
    let last = complete(&on_b, &events);
    assert_eq!(last["status"], "succeeded", "{last}");
    let taken = events
        .iter()
        .any(|e| e.kind() == "status" && e.data.contains("resumed"));
    assert!(!taken, "A took over B's run while B held it: {events:?}");

    // A dies: B takes its run over within a lease, not an hour, and the answer goes through.
    a.kill();
    assert_eq!(b.answer(&on_a, "ask", json!(21)).await, 202);
    let events = tokio::time::timeout(PATIENCE, on_a_events.read_to_final())
        .await
        .expect("B takes A's run over and ends it");
    let last = complete(&on_a, &events);
    assert_eq!(last["status"], "succeeded", "{last}");
    assert_eq!(last["output"]["result"], 42, "{last}");
}

/// Deployments sharing one database in different schemas do not hear each other's notices;
/// replicas of one schema do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notices_stay_within_their_schema() {
    use orca::domain::RunId;
    use orca::store::{Notice, Store, listen};

    let pg = PgServer::start();
    let (dir_1, dir_2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (url_1, url_2) = (
        database_url_on(&pg.url, dir_1.path()),
        database_url_on(&pg.url, dir_2.path()),
    );
    let sender_1 = Store::connect(&url_1, 1).await.unwrap();
    let hearer_1 = Store::connect(&url_1, 1).await.unwrap();
    let sender_2 = Store::connect(&url_2, 1).await.unwrap();
    let hearer_2 = Store::connect(&url_2, 1).await.unwrap();
    let mut ears_1 = listen(&url_1, &hearer_1).await.unwrap().unwrap();
    let mut ears_2 = listen(&url_2, &hearer_2).await.unwrap().unwrap();

    let (run_1, run_2) = (RunId::new(), RunId::new());
    sender_1.notify(&Notice::Cancel(run_1)).await.unwrap();
    // Sent after the first committed: a listener on both channels would hear that one first.
    sender_2.notify(&Notice::Cancel(run_2)).await.unwrap();
    let heard_1 = tokio::time::timeout(PATIENCE, ears_1.next()).await.unwrap();
    let heard_2 = tokio::time::timeout(PATIENCE, ears_2.next()).await.unwrap();
    assert_eq!(heard_1.unwrap(), vec![Notice::Cancel(run_1)]);
    assert_eq!(heard_2.unwrap(), vec![Notice::Cancel(run_2)]);
}

/// Stores a running run of tenant `t` behind the server's back, leased to `owner` for the
/// next minute by the database's clock.
async fn insert_leased_run(pool: &sqlx::AnyPool, run: orca::domain::RunId, owner: &str) {
    sqlx::query(
        r#"INSERT INTO runs (id, tenant, status, orchestration, spec, input, metadata,
            created_at, owner, lease_expires_at)
         VALUES ($1, 't', 'running', 'fixed', '{"input": "x", "orchestration": "fixed"}',
            '"x"', '{}', '2026-01-01T00:00:00Z', $2,
            CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT) + 60000)"#,
    )
    .bind(run.to_string())
    .bind(owner)
    .execute(pool)
    .await
    .unwrap();
}

/// Session variables and summaries are written under the run's lease, like its history: a
/// replica that does not lease the run (another took it over) cannot write them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_replica_that_leases_a_run_writes_its_session() {
    use orca::domain::{RunId, Tenant};
    use orca::store::{Error, SessionSummary, Store};

    let pg = PgServer::start();
    let dir = tempfile::tempdir().unwrap();
    let url = database_url_on(&pg.url, dir.path());
    let store = Store::connect(&url, 1).await.unwrap();
    let pool = crate::support::db::pool_on(&url).await;
    // A run that another replica leases for the next minute.
    let run = RunId::new();
    insert_leased_run(&pool, run, "another replica").await;
    let tenant = Tenant("t".into());
    let values = json!({ "topic": "cats" });
    let values = values.as_object().unwrap();
    let summary = SessionSummary {
        text: "they talked about cats".into(),
        through: run,
        turns: 1,
        tokens: 5,
    };

    let limits = orca::store::SessionLimits::default();
    let refused = store
        .set_session_variables(&tenant, "s", values, run, limits)
        .await;
    assert!(matches!(refused, Err(Error::LeaseLost)), "{refused:?}");
    let refused = store
        .save_session_summary(&tenant, "s", &summary, run)
        .await;
    assert!(matches!(refused, Err(Error::LeaseLost)), "{refused:?}");
    assert!(
        store
            .session_variables(&tenant, "s")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.session_summary(&tenant, "s").await.unwrap().is_none());

    // Once the other replica's lease lapses and this one takes the run, it may.
    sqlx::query("UPDATE runs SET lease_expires_at = 0")
        .execute(&pool)
        .await
        .unwrap();
    assert!(store.claim_run(run).await.unwrap());
    store
        .set_session_variables(&tenant, "s", values, run, limits)
        .await
        .unwrap()
        .unwrap();
    store
        .save_session_summary(&tenant, "s", &summary, run)
        .await
        .unwrap();
    let stored = store.session_variables(&tenant, "s").await.unwrap();
    assert_eq!(stored.get("topic"), Some(&json!("cats")));
    let stored = store.session_summary(&tenant, "s").await.unwrap().unwrap();
    assert_eq!(stored.text, summary.text);
}

/// The lease renewal (every lease of a replica, one statement) and the history writer (the
/// leases of a batch's runs `FOR SHARE`) lock the same rows: both lock them in id order, so
/// they wait for each other briefly and never deadlock, whatever order the rows lie in on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewing_leases_never_deadlocks_with_history_writes() {
    use std::sync::Arc;

    use orca::domain::{Event, EventKind, Payload, RunId, RunStatus};
    use orca::store::{Record, Store};

    let pg = PgServer::start();
    let dir = tempfile::tempdir().unwrap();
    let url = database_url_on(&pg.url, dir.path());
    let store = Store::connect(&url, 4).await.unwrap();
    let pool = crate::support::db::pool_on(&url).await;
    // Runs stored in the reverse of their ids' order, so a scan meets them backwards.
    let runs: Vec<RunId> = (0..120).map(|_| RunId::new()).collect();
    for run in runs.iter().rev() {
        insert_leased_run(&pool, *run, store.replica()).await;
    }

    let batches = 150u64;
    let writer = {
        let store = store.clone();
        let runs = runs.clone();
        tokio::spawn(async move {
            for seq in 1..=batches {
                let records: Vec<Record> = runs
                    .iter()
                    .map(|run| {
                        Record::Event(Arc::new(Event {
                            seq,
                            run_id: *run,
                            kind: EventKind::Status,
                            ts: chrono::Utc::now(),
                            step_id: None,
                            path: None,
                            data: Payload::status(RunStatus::Running),
                        }))
                    })
                    .collect();
                let lost = store.append(&records).await.expect("a batch is written");
                assert!(lost.is_empty(), "no lease was lost: {lost:?}");
            }
        })
    };
    let mut renewals = 0;
    while !writer.is_finished() {
        let held = store.renew_leases().await.expect("leases are renewed");
        assert_eq!(held.len(), runs.len());
        renewals += 1;
    }
    writer.await.unwrap();
    assert!(renewals > 1, "the renewals ran beside the writes");
    for run in &runs {
        assert_eq!(store.last_seq(*run).await.unwrap(), batches);
    }
}

/// A loopback server for declared tools: `/echo/{word}` answers the word and counts calls.
async fn echo_target() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let app = axum::Router::new().route(
        "/echo/{word}",
        axum::routing::get(
            move |axum::extract::Path(word): axum::extract::Path<String>| {
                counted.fetch_add(1, Ordering::SeqCst);
                async move { axum::Json(json!({ "echo": word })) }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, calls)
}

/// A tool declared on one replica is every replica's: listed, run and removed through
/// another, and called by the replica that takes a run over after the first one stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_declared_on_one_replica_is_known_to_every_replica() {
    let pg = PgServer::start();
    let (target, calls) = echo_target().await;
    let allow = format!("[\"{target}\"]");
    let (mut servers, _dirs) = replicas(
        &pg,
        2,
        &[
            ("ORCA_TOOLS__HTTP_API", "true"),
            ("ORCA_TOOLS__HTTP_ALLOW", &allow),
        ],
    )
    .await;
    let declared = json!({ "url": format!("http://{target}/echo/{{word}}"), "input_schema": {
        "type": "object", "required": ["word"], "properties": { "word": { "type": "string" } } } });
    let put = servers[0]
        .client
        .put(servers[0].url("/v1/tools/shared.echo"))
        .json(&declared)
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201);
    let listed = get(&servers[1], "/v1/tools/shared.echo").await;
    assert_eq!(listed["name"], "shared.echo");

    let echo = |word: &str| {
        json!({ "id": "echo", "kind": "tool", "depends_on": ["w"],
                "input": { "tool": "shared.echo", "arguments": { "word": word } } })
    };
    let plan = |word: &str, wait_ms: u64| {
        json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
            { "id": "w", "kind": "wait", "input": { "duration_ms": wait_ms } }, echo(word) ] } })
    };
    let id = post_run(&servers[1], &plan("on-b", 1)).await;
    let last = complete(&id, &stream(&servers[1], &id).await.read_to_final().await);
    assert_eq!(last["output"], json!({ "echo": "on-b" }), "{last}");

    // A run sent to A, handed back at A's stop while it waits, ends on B with the tool.
    let id = post_run(&servers[0], &plan("handed-back", 1500)).await;
    let mut reader = stream(&servers[1], &id).await;
    skip_to(&mut reader, "step", 1).await;
    let status = servers.remove(0).terminate();
    assert!(status.success(), "{status:?}");
    let events = tokio::time::timeout(PATIENCE, reader.read_to_final())
        .await
        .expect("B takes the run over and ends it");
    let last = complete(&id, &events);
    assert_eq!(last["status"], "succeeded", "{last}");
    assert_eq!(last["output"], json!({ "echo": "handed-back" }), "{last}");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);

    let b = &servers[0];
    let gone = b.client.delete(b.url("/v1/tools/shared.echo")).send().await;
    assert_eq!(gone.unwrap().status(), 204);
    let after = b.client.get(b.url("/v1/tools/shared.echo")).send().await;
    assert_eq!(after.unwrap().status(), 404);
}

/// A replica paused past its lease (SIGSTOP) while a run waits wakes up after another
/// replica took the run over and finished it. Its lease keeper cannot
/// renew yet (the test holds the `runs` table locked), so nothing tells it the run is gone
/// but its own clock: it must not start the next step or call the tool. It holds the action
/// at the lease gate, and once the renewal goes through it stops the run's task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_paused_past_its_lease_does_not_act_for_a_run_taken_over() {
    use std::sync::atomic::Ordering::SeqCst;
    let pg = PgServer::start();
    let (target, calls) = echo_target().await;
    let allow = format!("[\"{target}\"]");
    let (servers, dirs) = replicas(
        &pg,
        2,
        &[
            ("ORCA_TOOLS__HTTP_API", "true"),
            ("ORCA_TOOLS__HTTP_ALLOW", &allow),
        ],
    )
    .await;
    let (a, b) = (&servers[0], &servers[1]);
    let declared = json!({ "url": format!("http://{target}/echo/{{word}}"), "input_schema": {
        "type": "object", "required": ["word"], "properties": { "word": { "type": "string" } } } });
    let put = a.client.put(a.url("/v1/tools/side.effect")).json(&declared);
    assert_eq!(put.send().await.unwrap().status(), 201);
    let body = json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
        { "id": "w", "kind": "wait", "input": { "duration_ms": 1500 } },
        { "id": "seq", "kind": "sequential", "depends_on": ["w"], "input": { "steps": [
            { "id": "effect", "kind": "tool", "input": { "tool": "side.effect",
              "arguments": { "word": "once" } } } ] } } ] } });
    let id = post_run(a, &body).await;
    let mut reader = stream(b, &id).await;
    // `w` running: A is inside the wait. Freeze it a third of the way in, as a
    // stop-the-world pause would, with its writes of the step's start long done. (A pause
    // that catches A inside a transaction is another story: PostgreSQL ends that session
    // after a lease's length, A's next write fails, and A stops all its runs until its store
    // is back; see `store::Store::connect_with`.)
    skip_to(&mut reader, "step", 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.pause();
    let events = tokio::time::timeout(PATIENCE, reader.read_to_final())
        .await
        .expect("B takes the run over and ends it");
    let last = complete(&id, &events);
    assert_eq!(last["output"], json!({ "echo": "once" }), "{last}");
    assert_eq!(calls.load(SeqCst), 1);

    // A wakes with the wait long over, and cannot renew while the table is locked: without
    // the gate it would start `seq` and call the tool inside it at once.
    let db = crate::support::db::pool_on(&database_url_on(&pg.url, dirs[0].path())).await;
    let mut lock = db.begin().await.unwrap();
    sqlx::query("LOCK TABLE runs IN EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    a.resume();
    let deadline = std::time::Instant::now() + PATIENCE;
    while a.gauge("orca_lease_held_actions").await < 1.0 {
        assert_eq!(
            calls.load(SeqCst),
            1,
            "the woken replica called the tool again"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "A never held its action"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    lock.rollback().await.unwrap();
    // The renewal goes through, finds the run gone, and A's task stops without acting.
    while a.gauge("orca_run_tasks").await > 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "A's task never stopped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        calls.load(SeqCst),
        1,
        "the woken replica called the tool again"
    );
    let steps = get(b, &format!("/v1/runs/{id}/steps")).await;
    let effects: Vec<&Value> = steps
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["step_id"] == "effect")
        .collect();
    assert_eq!(effects.len(), 1, "{steps}");
    assert_eq!(effects[0]["status"], "completed");
}

/// Replicas starting together with a short lock wait (`busy_timeout_ms`, PostgreSQL's
/// `lock_timeout`) all start: migrations wait for each other's advisory lock however short the
/// lock wait the runs get. (Before, a replica whose migration met another's lock failed to
/// start after 20 ms.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_with_a_short_lock_wait_start_together() {
    use std::time::Duration;

    use orca::store::Store;

    let pg = PgServer::start();
    let dirs: Vec<tempfile::TempDir> = (0..6).map(|_| tempfile::tempdir().unwrap()).collect();
    let urls: Vec<String> = dirs
        .iter()
        .map(|d| database_url_on(&pg.url, d.path()))
        .collect();
    let starts = urls
        .iter()
        .map(|url| Store::connect_with(url, 1, Duration::from_millis(1), Duration::from_secs(15)));
    for (i, started) in futures::future::join_all(starts)
        .await
        .into_iter()
        .enumerate()
    {
        let store = started.unwrap_or_else(|e| panic!("replica {i} did not start: {e}"));
        store.ping().await.unwrap();
    }
}
