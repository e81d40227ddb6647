//! Context (design 003) over HTTP: the variable scopes (`vars`, `session`, `step`, `local`)
//! in templates and CEL conditions at every level, their validation, session variables kept
//! per tenant and session, and a long session's history summarised once, stored, and reused
//! (across a restart too).

use orca::config::{ApiKey, Secret};
use serde_json::{Value, json};

use crate::support::scripted_llm::{Reply, ScriptedLlm};
use crate::support::*;

/// A plan run in `session` (as the default tenant), read to its end.
async fn run_in(app: &TestApp, session: &str, input: Value, plan: Value) -> Value {
    let events = app
        .stream_run(
            json!({ "input": input, "orchestration": "fixed", "plan": plan,
            "session_id": session }),
        )
        .await;
    final_data(&events)
}

/// Writes `topic` (from the input) and `n` into the session when it completes.
fn writer_plan() -> Value {
    json!({
        "variables": { "n": 7 },
        "steps": [{ "id": "noop", "kind": "wait", "input": { "duration_ms": 1 } }],
        "session_variables": { "topic": "{{ input.topic }}", "n": "{{ vars.n }}" },
        "output": "stored"
    })
}

/// Reads the session's variables back as the run's output.
fn reader_plan() -> Value {
    json!({
        "steps": [{ "id": "noop", "kind": "wait", "input": { "duration_ms": 1 } }],
        "output": { "topic": "{{ session.topic }}", "n": "{{ session.n }}" }
    })
}

/// A branch whose condition must hold, as a child step.
fn check(id: &str, condition: &str) -> Value {
    json!({ "id": id, "kind": "branch", "input": { "condition": condition, "then": [] } })
}

fn prompt_step(id: &str, prompt: &str) -> Value {
    json!({ "id": id, "kind": "llm", "metadata": { "team": format!("team-{id}") },
        "input": { "prompt": prompt } })
}

/// Every scope in templates and conditions: top level, and inside sequential, parallel and
/// both kinds of loop.
fn scopes_plan() -> Value {
    let text = "{{ vars.greeting }}|{{ session.topic }}|{{ step.id }}#{{ step.attempt }}|{{ step.metadata.team }}|{{ step.kind }}";
    let cel = |id: &str| {
        format!(
            "vars.greeting == 'hi' && session.topic == 'cats' && session.unset == null \
             && step.id == '{id}' && step.attempt == 1 && step.kind == 'branch'"
        )
    };
    json!({
        "variables": { "greeting": "hi" },
        "steps": [
            prompt_step("top", text),
            check("top-check", &cel("top-check")),
            { "id": "seq", "kind": "sequential", "input": { "steps": [
                prompt_step("seq-a", text), check("seq-b", &cel("seq-b")) ] } },
            { "id": "par", "kind": "parallel", "input": { "steps": [
                prompt_step("par-a", text), check("par-b", &cel("par-b")) ] } },
            { "id": "each", "kind": "loop", "input": {
                "for_each": ["x", "y"], "max_iterations": 5, "steps": [
                    prompt_step("each-a", &format!("{text}|{{{{ local.item }}}}/{{{{ local.index }}}}/{{{{ item }}}}/{{{{ index }}}}")),
                    check("each-b", &format!("{} && local.item == ['x', 'y'][local.index] && item == local.item && index == local.index", cel("each-b"))) ] } },
            { "id": "again", "kind": "loop", "input": {
                "while": "local.index < 2 && session.topic == 'cats' && step.id == 'again' && vars.greeting == 'hi'",
                "max_iterations": 5, "steps": [
                    prompt_step("again-a", &format!("{text}|{{{{ local.index }}}}")),
                    check("again-b", &format!("{} && local.index == index", cel("again-b"))) ] } }
        ],
        "output": { "topic": "{{ session.topic }}", "top": "{{ steps.top-check.output.result }}" }
    })
}

#[tokio::test]
async fn every_scope_is_readable_in_templates_and_conditions_at_every_level() {
    let app = spawn_app(|_| {}).await;
    let fin = run_in(&app, "s1", json!({ "topic": "cats" }), writer_plan()).await;
    assert_eq!(fin["status"], "succeeded", "{fin}");

    let fin = run_in(&app, "s1", json!("go"), scopes_plan()).await;
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], json!({ "topic": "cats", "top": true }));
    let run_id = app.get_json("/v1/runs?limit=1").await.1["runs"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let prompt = |id: &str| format!("hi|cats|{id}#1|team-{id}|llm");
    for id in ["top", "seq-a", "par-a"] {
        let attempts = app.attempts(&run_id, id).await;
        assert_eq!(attempts.len(), 1, "{id}: {attempts:?}");
        assert_eq!(attempts[0]["input"]["prompt"], prompt(id), "{id}");
    }
    let each: Vec<Value> = app
        .attempts(&run_id, "each-a")
        .await
        .iter()
        .map(|a| a["input"]["prompt"].clone())
        .collect();
    assert_eq!(
        each,
        [
            json!(format!("{}|x/0/x/0", prompt("each-a"))),
            json!(format!("{}|y/1/y/1", prompt("each-a")))
        ]
    );
    let again: Vec<Value> = app
        .attempts(&run_id, "again-a")
        .await
        .iter()
        .map(|a| a["input"]["prompt"].clone())
        .collect();
    assert_eq!(
        again,
        [
            json!(format!("{}|0", prompt("again-a"))),
            json!(format!("{}|1", prompt("again-a")))
        ]
    );
    // Every condition held: each branch took `then`.
    for (id, times) in [
        ("top-check", 1),
        ("seq-b", 1),
        ("par-b", 1),
        ("each-b", 2),
        ("again-b", 2),
    ] {
        let attempts = app.attempts(&run_id, id).await;
        assert_eq!(attempts.len(), times, "{id}: {attempts:?}");
        for a in attempts {
            assert_eq!(a["status"], "completed", "{id}: {a}");
            assert_eq!(a["output"]["result"], true, "{id}: {a}");
        }
    }
}

#[tokio::test]
async fn unknown_or_misplaced_scopes_are_refused_with_a_pointer() {
    let app = spawn_app(|_| {}).await;
    let step = |input: Value| json!({ "steps": [{ "id": "s", "kind": "llm", "input": input }] });
    let cases = [
        (
            step(json!({ "prompt": "{{ sesion.topic }}" })),
            "/plan/steps/0/input/prompt",
            "unknown scope `sesion`",
        ),
        (
            step(json!({ "prompt": "{{ local.foo }}" })),
            "/plan/steps/0/input/prompt",
            "`local.item` and `local.index`",
        ),
        (
            step(json!({ "prompt": "{{ local.item }}" })),
            "/plan/steps/0/input/prompt",
            "only defined inside the body of a `for_each` loop",
        ),
        (
            step(json!({ "prompt": "{{ step.owner }}" })),
            "/plan/steps/0/input/prompt",
            "`step` is the current step",
        ),
        (
            json!({ "steps": [check("b", "loc.item == 1")] }),
            "/plan/steps/0/input/condition",
            "unknown scope `loc`",
        ),
        (
            json!({ "steps": [check("b", "local.index > 0")] }),
            "/plan/steps/0/input/condition",
            "only defined inside a loop",
        ),
        (
            json!({ "steps": [check("b", "true")], "output": "{{ step.id }}" }),
            "/plan/output",
            "only defined inside a step",
        ),
        (
            json!({ "steps": [check("b", "true")],
                "session_variables": { "x": "{{ steps.ghost.output }}" } }),
            "/plan/session_variables/x",
            "no step has the id `ghost`",
        ),
    ];
    for (plan, pointer, want) in cases {
        let resp = app
            .client
            .post(app.url("/v1/runs"))
            .json(&json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 422, "{plan}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "validation_failed");
        let errors = body["errors"].as_array().unwrap();
        assert!(
            errors
                .iter()
                .any(|e| e["pointer"] == pointer && e["message"].as_str().unwrap().contains(want)),
            "want {pointer}: {want}; got {errors:?}"
        );
    }
}

/// A run of `plan` as the tenant of `key`, read to its end.
async fn run_as(app: &TestApp, key: &str, session: &str, input: Value, plan: Value) -> Value {
    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .bearer_auth(key)
        .header("accept", "text/event-stream")
        .json(
            &json!({ "input": input, "orchestration": "fixed", "plan": plan,
            "session_id": session }),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    final_data(&SseReader::new(resp).read_to_final().await)
}

#[tokio::test]
async fn session_variables_persist_within_a_session_and_tenant_only() {
    let (a, b) = ("key-of-tenant-a-0123456789", "key-of-tenant-b-0123456789");
    let app = spawn_app(|c| {
        c.auth.api_keys = vec![
            ApiKey {
                user: None,
                key: Secret::new(a),
                tenant: "a".into(),
            },
            ApiKey {
                user: None,
                key: Secret::new(b),
                tenant: "b".into(),
            },
        ];
    })
    .await;
    let fin = run_as(&app, a, "s1", json!({ "topic": "cats" }), writer_plan()).await;
    assert_eq!(fin["output"], "stored", "{fin}");

    let read = |key, session| run_as(&app, key, session, json!("read"), reader_plan());
    let fin = read(a, "s1").await;
    assert_eq!(fin["output"], json!({ "topic": "cats", "n": 7 }), "{fin}");
    // Another session of the same tenant, and the same session id of another tenant: unset.
    for (key, session) in [(a, "s2"), (b, "s1")] {
        let fin = read(key, session).await;
        assert_eq!(fin["status"], "succeeded", "{fin}");
        assert_eq!(
            fin["output"],
            json!({ "topic": null, "n": null }),
            "{key} {session}"
        );
    }
    // A later write replaces the value; the other variable stays.
    let fin = run_as(&app, a, "s1", json!({ "topic": "dogs" }), writer_plan()).await;
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let fin = read(a, "s1").await;
    assert_eq!(fin["output"], json!({ "topic": "dogs", "n": 7 }), "{fin}");
}

/// About 25 tokens: a turn (input and answer, with framing) is about 50.
fn words(tag: &str) -> String {
    format!("{tag}{}", " apple".repeat(20))
}

/// The texts of a recorded chat request's messages, by role.
fn messages(request: &Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn is_summary_request(request: &Value) -> bool {
    messages(request).first().is_some_and(|(role, text)| {
        role == "system" && text.starts_with("Summarise the conversation")
    })
}

async fn simple_run(app: &TestApp, session: &str, input: &str) -> Value {
    let events = app
        .stream_run(json!({ "input": input, "orchestration": "simple", "session_id": session }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    fin
}

#[tokio::test]
async fn a_long_session_is_summarised_once_and_the_summary_is_reused_across_a_restart() {
    let llm = ScriptedLlm::start().await;
    let budget = |c: &mut orca::config::Config| c.context.session_token_budget = 120;
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        budget(c);
    })
    .await;
    // Three turns of about 50 tokens each: the third run's history (two turns) still fits.
    for n in 1..=3 {
        llm.push(Reply::text(words(&format!("answer{n}"))));
        simple_run(&app, "long", &words(&format!("question{n}"))).await;
    }
    assert_eq!(llm.request_count(), 3);
    assert!(!llm.requests().iter().any(is_summary_request));

    // The fourth run's history (three turns) is over budget: the two oldest are summarised.
    llm.push(Reply::text("SUMMARY-ONE: apples were discussed.").usage(100, 10));
    llm.push(Reply::text("answer4 apple").usage(50, 5));
    let fin = simple_run(&app, "long", &words("question4")).await;
    let requests = llm.requests();
    assert_eq!(requests.len(), 5);
    assert!(is_summary_request(&requests[3]), "{}", requests[3]);
    let folded = &messages(&requests[3])[1].1;
    assert!(
        folded.contains("question1") && folded.contains("answer2"),
        "{folded}"
    );
    assert!(!folded.contains("question3"), "{folded}");
    let asked = messages(&requests[4]);
    assert!(asked[0].1.contains("SUMMARY-ONE"), "{asked:?}");
    let text: String = asked.iter().map(|(_, t)| t.as_str()).collect();
    assert!(
        text.contains("question3") && !text.contains("question1"),
        "{asked:?}"
    );
    // The summariser's call counts toward the run's usage, and is an attempt of its own.
    assert_eq!(fin["usage"]["llm_calls"], 2, "{fin}");
    assert_eq!(fin["usage"]["prompt_tokens"], 150, "{fin}");
    assert_eq!(fin["usage"]["completion_tokens"], 15, "{fin}");
    let runs = app.get_json("/v1/runs?limit=1").await.1;
    let run_id = runs["runs"][0]["id"].as_str().unwrap().to_owned();
    let attempts = app.attempts(&run_id, "summarizer").await;
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0]["status"], "completed");

    // After a restart the stored summary is reused: no new summary for the same turns.
    let dir = app.stop().await;
    let app = spawn_app_in(dir, |c| {
        use_scripted(c, &llm);
        budget(c);
    })
    .await;
    llm.push(Reply::text(words("answer5")));
    simple_run(&app, "long", &words("question5")).await;
    let requests = llm.requests();
    assert_eq!(
        requests.len(),
        6,
        "no summariser call: the summary covers the old turns"
    );
    let asked = messages(&requests[5]);
    assert!(asked[0].1.contains("SUMMARY-ONE"), "{asked:?}");
    let text: String = asked.iter().map(|(_, t)| t.as_str()).collect();
    assert!(
        text.contains("question4") && !text.contains("question2"),
        "{asked:?}"
    );

    // The next run is over budget again: only the turns after the summary are folded into it.
    llm.push(Reply::text("SUMMARY-TWO"));
    llm.push(Reply::text("answer6"));
    simple_run(&app, "long", &words("question6")).await;
    let requests = llm.requests();
    assert_eq!(requests.len(), 8);
    assert!(is_summary_request(&requests[6]), "{}", requests[6]);
    let folded = &messages(&requests[6])[1].1;
    assert!(
        folded.starts_with("Summary so far: SUMMARY-ONE"),
        "{folded}"
    );
    assert!(
        folded.contains("question3") && folded.contains("answer4"),
        "{folded}"
    );
    assert!(
        !folded.contains("question1") && !folded.contains("question5"),
        "{folded}"
    );
    assert!(messages(&requests[7])[0].1.contains("SUMMARY-TWO"));
}

#[tokio::test]
async fn the_offline_provider_summarises_a_session_without_a_network() {
    let app = spawn_app(|c| c.context.session_token_budget = 30).await;
    simple_run(&app, "offline", &words("first")).await;
    simple_run(&app, "offline", &words("second")).await;
    let runs = app.get_json("/v1/runs?limit=1").await.1;
    let run_id = runs["runs"][0]["id"].as_str().unwrap().to_owned();
    let attempts = app.attempts(&run_id, "summarizer").await;
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0]["status"], "completed");
    let summary = attempts[0]["output"].as_str().unwrap();
    assert!(summary.starts_with("Summary: User: first"), "{summary}");
}

#[tokio::test]
async fn step_attempt_counts_retries_and_a_workflow_writes_session_variables() {
    let probe = crate::support::tools::Probe::default();
    let app = spawn_probed_app(None, &probe, |_| {}).await;
    // A retried child reads its own attempt number: 1, 2, then 3 succeeds.
    let plan = json!({ "steps": [{ "id": "outer", "kind": "sequential", "input": { "steps": [{
        "id": "flaky", "kind": "tool",
        "retry_policy": { "max_attempts": 3, "initial_delay_ms": 1, "retryable_errors": ["flaky"] },
        "input": { "tool": "test.flaky", "arguments": {
            "key": "retried", "failures": 2, "value": "{{ step.path }}/{{ step.id }}#{{ step.attempt }}" } } }] } }],
        "session_variables": { "tries": "{{ steps.outer.output.calls }}" } });
    let fin = run_in(&app, "w1", json!("go"), plan).await;
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let runs = app.get_json("/v1/runs?limit=1").await.1;
    let run_id = runs["runs"][0]["id"].as_str().unwrap().to_owned();
    let values: Vec<Value> = app
        .attempts(&run_id, "flaky")
        .await
        .iter()
        .map(|a| a["input"]["arguments"]["value"].clone())
        .collect();
    assert_eq!(
        values,
        [
            json!("outer/flaky#1"),
            json!("outer/flaky#2"),
            json!("outer/flaky#3")
        ]
    );

    // A registered workflow writes session variables like a plan.
    let workflow = json!({ "name": "remember", "steps": [{ "id": "noop", "kind": "wait",
        "input": { "duration_ms": 1 } }], "session_variables": { "topic": "{{ input.topic }}" } });
    let resp = app
        .client
        .put(app.url("/v1/workflows/remember"))
        .json(&workflow)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
    let events = app
        .stream_run(
            json!({ "input": { "topic": "owls" }, "orchestration": "fixed",
            "workflow": "remember", "session_id": "w1" }),
        )
        .await;
    assert_eq!(final_data(&events)["status"], "succeeded");
    let read = json!({
        "steps": [{ "id": "noop", "kind": "wait", "input": { "duration_ms": 1 } }],
        "output": { "topic": "{{ session.topic }}", "tries": "{{ session.tries }}" }
    });
    let fin = run_in(&app, "w1", json!("read"), read).await;
    assert_eq!(
        fin["output"],
        json!({ "topic": "owls", "tries": 3 }),
        "{fin}"
    );
}
