//! Pause, resume and breakpoints over HTTP: a pause lets the running step finish and starts
//! none, at the top level and inside sequential and loop steps; a paused run holds no running
//! slot; breakpoints stop before the steps they name, at every place, and hold across a
//! restart; replicas pass the word on; every bad request.

use serde_json::{Value, json};

use crate::support::server::{skip_to, to_final};
use crate::support::tools::Probe;
use crate::support::*;

fn counted(id: &str, deps: &[&str]) -> Value {
    after(
        json!({ "id": id, "kind": "tool",
            "input": { "tool": "test.count", "arguments": { "key": id } } }),
        deps,
    )
}

fn ask(id: &str, deps: &[&str]) -> Value {
    after(
        json!({ "id": id, "kind": "user_input", "input": { "prompt": "Go on?" } }),
        deps,
    )
}

fn after(mut step: Value, deps: &[&str]) -> Value {
    if !deps.is_empty() {
        step["depends_on"] = json!(deps);
    }
    step
}

/// Reads events until a `status` event of `status`; its data.
async fn until_status(reader: &mut SseReader, status: &str) -> Value {
    loop {
        let event = reader
            .next_event()
            .await
            .expect("the stream goes on")
            .json();
        if event["kind"] == "status" && event["data"]["status"] == status {
            return event["data"].clone();
        }
        assert_ne!(
            event["kind"], "final",
            "the run ended before it was {status}: {event}"
        );
    }
}

/// Reads events until the run pauses, and checks it paused before step `step`.
async fn paused_before(reader: &mut SseReader, step: &str) {
    let paused = until_status(reader, "paused").await;
    let said = paused["message"].as_str().unwrap_or_default();
    assert!(said.contains(&format!("before step `{step}`")), "{paused}");
}

async fn post(app: &TestApp, id: &str, what: &str) -> (u16, Value) {
    app.post_json(&format!("/v1/runs/{id}/{what}"), &json!({}))
        .await
}

#[tokio::test]
async fn a_paused_run_lets_its_running_step_finish_starts_none_and_holds_no_slot() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |c| c.engine.max_running_runs = 1).await;
    // At the top level, and inside a sequential step.
    for (i, plan) in [
        json!({ "steps": [ask("ask", &[]), counted("next", &["ask"])] }),
        json!({ "steps": [{ "id": "outer", "kind": "sequential", "input": { "steps": [
            ask("ask", &[]), counted("next", &[]) ] } }] }),
    ]
    .into_iter()
    .enumerate()
    {
        let ran = i;
        let run = app
            .create_run(json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
            .await;
        let id = run["id"].as_str().unwrap().to_owned();
        let mut reader = app.events(&id).await;
        skip_to(&mut reader, "input_required", 1).await;
        let (status, body) = post(&app, &id, "pause").await;
        assert_eq!(status, 202, "{body}");
        assert_eq!(
            post(&app, &id, "pause").await.0,
            202,
            "pausing twice changes nothing"
        );
        // The waiting step is the running one: answered, it finishes; `next` does not start.
        assert_eq!(app.answer(&id, "ask", json!("yes")).await.status(), 202);
        let paused = until_status(&mut reader, "paused").await;
        assert!(
            paused["message"].as_str().unwrap().contains("none starts"),
            "{paused}"
        );
        let (_, stored) = app.get_json(&format!("/v1/runs/{id}")).await;
        assert_eq!(stored["status"], "paused");
        assert_eq!(probe.calls("next"), ran, "`next` started while paused");
        let asks = app.attempts(&id, "ask").await;
        assert_eq!(asks[0]["status"], "completed", "{asks:?}");

        // With the only slot given back, another run goes through meanwhile.
        let other = app.stream_run(json!({ "input": "x", "orchestration": "fixed",
            "plan": { "steps": [counted("other", &[])] } }));
        let other = tokio::time::timeout(PATIENCE, other)
            .await
            .expect("another run is not starved by a paused one");
        assert_eq!(final_data(&other)["status"], "succeeded");

        assert_eq!(post(&app, &id, "resume").await.0, 202);
        let running = until_status(&mut reader, "running").await;
        assert_eq!(running["message"], "resumed");
        let fin = final_data(&to_final(reader).await);
        assert_eq!(fin["status"], "succeeded", "{fin}");
        // Once ended: neither pause nor resume.
        assert_eq!(post(&app, &id, "pause").await.0, 409);
        assert_eq!(post(&app, &id, "resume").await.0, 409);
    }
    assert_eq!(probe.calls("next"), 2);

    // Resuming a run that is not paused is a conflict; unknown runs are 404.
    let run = app
        .create_run(json!({ "input": "x", "orchestration": "fixed",
        "plan": { "steps": [ask("ask", &[])] } }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let (status, problem) = post(&app, &id, "resume").await;
    assert_eq!(
        (status, problem["code"].clone()),
        (409, json!("conflict")),
        "{problem}"
    );
    assert!(
        problem["detail"].as_str().unwrap().contains("not paused"),
        "{problem}"
    );
    assert_eq!(
        post(&app, "0191e7a4-0000-7000-8000-000000000000", "pause")
            .await
            .0,
        404
    );
    assert_eq!(post(&app, "nope", "resume").await.0, 404);
    assert_eq!(post(&app, &id, "cancel").await.0, 202);
}

#[tokio::test]
async fn breakpoints_pause_before_their_steps_at_every_place_and_hold_across_a_restart() {
    let probe = Probe::default();
    let dir = tempfile::tempdir().unwrap();
    let app = spawn_probed_app(Some(dir), &probe, |_| {}).await;
    let plan = json!({
        "settings": { "breakpoints": ["b", "tally", "ask"] },
        "steps": [
            counted("a", &[]),
            counted("b", &["a"]),
            { "id": "each", "kind": "loop", "depends_on": ["b"], "input": { "for_each": [1, 2],
              "max_iterations": 2, "steps": [{ "id": "tally", "kind": "tool",
                "input": { "tool": "test.count", "arguments": { "key": "tally-{{ item }}" } } }] } },
            ask("ask", &["each"]),
        ],
    });
    let run = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut reader = app.events(&id).await;
    paused_before(&mut reader, "b").await;
    assert_eq!((probe.calls("a"), probe.calls("b")), (1, 0));
    drop(reader);

    // Stopped and started again, it is still paused before `b`.
    let seen = app.stored_events(&id).await.len();
    let dir = app.stop().await;
    let app = spawn_probed_app(Some(dir), &probe, |_| {}).await;
    let url = app.url(&format!("/v1/runs/{id}/events?after={seen}"));
    let mut reader = SseReader::new(app.client.get(url).send().await.unwrap());
    paused_before(&mut reader, "b").await;
    assert_eq!(probe.calls("b"), 0);
    // Resumed: `b` runs, then the loop's body stops at each item.
    assert_eq!(post(&app, &id, "resume").await.0, 202);
    for item in ["each[0]/tally", "each[1]/tally"] {
        paused_before(&mut reader, item).await;
        assert_eq!(post(&app, &id, "resume").await.0, 202);
    }
    paused_before(&mut reader, "ask").await;
    assert_eq!(
        (
            probe.calls("b"),
            probe.calls("tally-1"),
            probe.calls("tally-2")
        ),
        (1, 1, 1)
    );
    assert_eq!(post(&app, &id, "resume").await.0, 202);
    skip_to(&mut reader, "input_required", 1).await;
    drop(reader);

    // Resumed past `ask`'s breakpoint, a restart does not stop there again: it asks.
    let dir = app.stop().await;
    let app = spawn_probed_app(Some(dir), &probe, |_| {}).await;
    let mut reader = app.events(&id).await;
    skip_to(&mut reader, "input_required", 2).await;
    assert_eq!(app.answer(&id, "ask", json!("ok")).await.status(), 202);
    let fin = final_data(&to_final(reader).await);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let statuses = app
        .stored_events(&id)
        .await
        .into_iter()
        .filter(|e| e["kind"] == "status" && e["data"]["status"] == "paused")
        .count();
    assert_eq!(statuses, 5, "b, b again after the restart, two items, ask");

    // A breakpoint that names no step is refused with the plan.
    let body = json!({ "input": "x", "orchestration": "fixed", "plan": {
        "settings": { "breakpoints": ["tallyy"] }, "steps": [counted("tally", &[])] } });
    let (status, problem) = app.post_json("/v1/runs", &body).await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(
        problem["errors"][0]["pointer"],
        "/plan/settings/breakpoints/0"
    );
    assert!(
        problem["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("tally"),
        "{problem}"
    );
}

#[tokio::test]
async fn a_run_paused_and_resumed_through_another_replica() {
    let replicas = TwoReplicas::start(&[("ORCA_LLM__PROVIDER", "offline")]).await;
    let (a, b) = (&replicas.a, &replicas.b);
    let calc = json!({ "id": "calc", "kind": "tool", "depends_on": ["ask"],
        "input": { "tool": "math.calculate", "arguments": { "expression": "6 * 7" } } });
    let id = a
        .start_plan(json!({ "steps": [ask("ask", &[]), calc] }))
        .await;
    let mut reader = a.until_asked(&id, 1).await;
    let on = |s: &Server, what: &str| {
        s.client
            .post(s.url(&format!("/v1/runs/{id}/{what}")))
            .send()
    };
    assert_eq!(on(b, "pause").await.unwrap().status(), 202);
    assert_eq!(b.answer(&id, "ask", json!("go")).await, 202);
    until_status(&mut reader, "paused").await;
    let stepped = a
        .stored_events(&id)
        .await
        .into_iter()
        .any(|e| e["step_id"] == "calc");
    assert!(!stepped, "`calc` started while paused");
    assert_eq!(on(b, "resume").await.unwrap().status(), 202);
    let fin = final_data(&to_final(reader).await);
    assert_eq!(
        (fin["status"].clone(), fin["output"]["result"].clone()),
        (json!("succeeded"), json!(42)),
        "{fin}"
    );
}

#[tokio::test]
async fn a_paused_runs_time_limit_stands_still() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |c| c.engine.max_running_runs = 1).await;
    let body = json!({ "input": "x", "orchestration": "fixed", "limits": { "max_duration_ms": 1000 },
        "plan": { "steps": [ask("ask", &[]), counted("next", &["ask"])] } });
    let run = app.create_run(body).await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut reader = app.events(&id).await;
    skip_to(&mut reader, "input_required", 1).await;
    assert_eq!(post(&app, &id, "pause").await.0, 202);
    assert_eq!(app.answer(&id, "ask", json!("yes")).await.status(), 202);
    until_status(&mut reader, "paused").await;
    // While it is paused, another run takes longer than its whole time limit.
    let longer = json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
        { "id": "w", "kind": "wait", "input": { "duration_ms": 1500 } }] } });
    let other = tokio::time::timeout(PATIENCE, app.stream_run(longer))
        .await
        .expect("the other run ends");
    assert_eq!(final_data(&other)["status"], "succeeded");
    assert_eq!(post(&app, &id, "resume").await.0, 202);
    let fin = final_data(&to_final(reader).await);
    assert_eq!(
        fin["status"], "succeeded",
        "the pause counted against the limit: {fin}"
    );
    assert_eq!(probe.calls("next"), 1);
}

/// A loopback receiver standing for a step's side effect: `/hit/{word}` counts each call.
async fn receiver() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let app = axum::Router::new().route(
        "/hit/{word}",
        axum::routing::get(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { axum::Json(json!({ "hit": true })) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, hits)
}

/// The environment of a server whose runs may call the receiver at `target` (declared tools).
fn effect_env(target: &str) -> Vec<(&'static str, String)> {
    vec![
        ("ORCA_LLM__PROVIDER", "offline".into()),
        ("ORCA_TOOLS__HTTP_API", "true".into()),
        ("ORCA_TOOLS__HTTP_ALLOW", format!("[\"{target}\"]")),
    ]
}

/// Declares `side.effect` (a call to the receiver) through `server`.
async fn declare_effect(server: &Server, target: &str) {
    let declared = json!({ "url": format!("http://{target}/hit/{{word}}"), "input_schema": {
        "type": "object", "required": ["word"], "properties": { "word": { "type": "string" } } } });
    let put = server.client.put(server.url("/v1/tools/side.effect"));
    assert_eq!(put.json(&declared).send().await.unwrap().status(), 201);
}

/// A plan with a breakpoint before `effect`, which calls the receiver once.
fn effect_plan() -> Value {
    json!({ "settings": { "breakpoints": ["effect"] }, "steps": [
        { "id": "first", "kind": "tool",
          "input": { "tool": "math.calculate", "arguments": { "expression": "1 + 1" } } },
        { "id": "effect", "kind": "tool", "depends_on": ["first"],
          "input": { "tool": "side.effect", "arguments": { "word": "once" } } } ] })
}

async fn post_on(server: &Server, id: &str, what: &str) -> u16 {
    let url = server.url(&format!("/v1/runs/{id}/{what}"));
    server
        .client
        .post(url)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// How often the run paused, and the attempts of `effect` stored (read through `server`).
async fn pauses_and_effect_attempts(server: &Server, id: &str) -> (usize, Vec<String>) {
    let paused = server
        .stored_events(id)
        .await
        .into_iter()
        .filter(|e| e["kind"] == "status" && e["data"]["status"] == "paused")
        .count();
    let attempts = server
        .steps(id)
        .await
        .into_iter()
        .filter(|s| s["step_id"] == "effect")
        .map(|s| s["status"].as_str().unwrap_or_default().to_owned())
        .collect();
    (paused, attempts)
}

/// Every side effect has a stored attempt, and one attempt completed. An attempt may be
/// stored and never act: its replica was killed or frozen between storing it (store before
/// act) and calling the receiver; the run's next owner closes it unfinished.
fn every_effect_was_recorded(round: usize, acted: usize, attempts: &[String]) {
    assert!(acted >= 1, "round {round}: the step never acted");
    assert!(
        acted <= attempts.len() && attempts.len() <= acted + 1,
        "round {round}: {acted} side effects and stored attempts {attempts:?}"
    );
    let completed = attempts.iter().filter(|s| *s == "completed").count();
    assert_eq!(completed, 1, "round {round}: attempts {attempts:?}");
}

/// A resume answered 202 holds through a kill -9 right after it: the restarted server does
/// not pause the run at that breakpoint again, every side effect of the step has a stored
/// attempt, and one attempt completed (an attempt the kill cut off may or may not have
/// acted). Before, the release was stored only by the run's later checkpoint, and the
/// restarted run stopped at the same breakpoint again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_answered_202_holds_through_a_kill_9_and_the_step_acts_as_recorded() {
    use std::sync::atomic::Ordering::SeqCst;
    let (target, hits) = receiver().await;
    let env = effect_env(&target);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let before = hits.load(SeqCst);
        let server = Server::start_with(dir.path(), &env).await;
        declare_effect(&server, &target).await;
        let id = server.start_plan(effect_plan()).await;
        let resp = server
            .client
            .get(server.url(&format!("/v1/runs/{id}/events")));
        let mut reader = SseReader::new(resp.send().await.unwrap());
        paused_before(&mut reader, "effect").await;
        drop(reader);
        assert_eq!(post_on(&server, &id, "resume").await, 202);
        server.kill();

        let server = Server::start_with(dir.path(), &env).await;
        let resp = server
            .client
            .get(server.url(&format!("/v1/runs/{id}/events")));
        let fin = final_data(&to_final(SseReader::new(resp.send().await.unwrap())).await);
        assert_eq!(fin["status"], "succeeded", "round {round}: {fin}");
        let (paused, attempts) = pauses_and_effect_attempts(&server, &id).await;
        assert_eq!(paused, 1, "round {round}: paused at the breakpoint again");
        every_effect_was_recorded(round, hits.load(SeqCst) - before, &attempts);
    }
}

/// The owner of a run paused at a breakpoint is frozen (SIGSTOP) right after a resume sent
/// through the other replica answered 202. The other takes the run over: it does not pause
/// at the breakpoint again, and every side effect of the step has a stored attempt; once the
/// frozen replica wakes it does not act for the run (its lease gate), so the count stays.
/// Before, the takeover paused again, and a step the owner had started before the freeze
/// acted with no stored attempt, so it acted twice with one recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_holds_when_the_owner_freezes_and_side_effects_match_stored_attempts() {
    use std::sync::atomic::Ordering::SeqCst;
    let (target, hits) = receiver().await;
    let env = effect_env(&target);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let replicas = TwoReplicas::start(&env).await;
    let (a, b) = (&replicas.a, &replicas.b);
    declare_effect(a, &target).await;
    for round in 0..3 {
        let before = hits.load(SeqCst);
        let id = a.start_plan(effect_plan()).await;
        let resp = b.client.get(b.url(&format!("/v1/runs/{id}/events")));
        let mut reader = SseReader::new(resp.send().await.unwrap());
        paused_before(&mut reader, "effect").await;
        assert_eq!(post_on(b, &id, "resume").await, 202);
        a.pause();
        let fin = final_data(&to_final(reader).await);
        assert_eq!(fin["status"], "succeeded", "round {round}: {fin}");
        a.resume();
        let deadline = std::time::Instant::now() + PATIENCE;
        while a.gauge("orca_run_tasks").await > 0.0 {
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: A's task never stopped"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let (paused, attempts) = pauses_and_effect_attempts(b, &id).await;
        assert_eq!(paused, 1, "round {round}: paused at the breakpoint again");
        every_effect_was_recorded(round, hits.load(SeqCst) - before, &attempts);
    }
}

/// `quotas.paused_runs` bounds what waiting costs a tenant: past it a pause request is 429
/// `quota_exceeded` naming the limit (with `Retry-After`), and a run reaching a breakpoint
/// fails with `paused_runs_exceeded` without running the step. Pausing the paused run again,
/// and another tenant's pause, are not refused.
#[tokio::test]
async fn paused_runs_past_the_tenants_quota_are_refused_and_a_breakpoint_fails_its_run() {
    let probe = Probe::default();
    let app = spawn_probed_app(None, &probe, |c| c.quotas.default.paused_runs = 1).await;
    let asking = || {
        json!({ "input": "x", "orchestration": "fixed",
        "plan": { "steps": [ask("ask", &[])] } })
    };
    let first = app.create_run(asking()).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = app.create_run(asking()).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(post(&app, &first, "pause").await.0, 202);
    assert_eq!(post(&app, &first, "pause").await.0, 202, "already paused");
    let refused = app
        .client
        .post(app.url(&format!("/v1/runs/{second}/pause")))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "5");
    let problem: Value = refused.json().await.unwrap();
    assert_eq!(problem["code"], "quota_exceeded", "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("`paused_runs` is 1"), "{problem}");

    let body = json!({ "input": "x", "orchestration": "fixed", "plan": {
        "settings": { "breakpoints": ["b"] }, "steps": [counted("a", &[]), counted("b", &["a"])] } });
    let fin = final_data(&app.stream_run(body).await);
    assert_eq!(fin["status"], "failed", "{fin}");
    assert_eq!(fin["error"]["code"], "paused_runs_exceeded", "{fin}");
    assert_eq!((probe.calls("a"), probe.calls("b")), (1, 0));

    // Resumed, the first makes room: the second may pause.
    assert_eq!(post(&app, &first, "resume").await.0, 202);
    assert_eq!(post(&app, &second, "pause").await.0, 202);
    for id in [&first, &second] {
        assert_eq!(post(&app, id, "cancel").await.0, 202);
    }
}
