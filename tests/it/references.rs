//! `@` references inside plans (issue 45): a step names a registered agent or workflow at a
//! version (`billing@2`) or a label (`inner@production`), at any depth; the run uses (and pins,
//! and keeps through a moved label and a restart) that version; bad references are refused
//! with a pointer each and nothing stored.

use serde_json::{Value, json};

use crate::support::app::{TestApp, poll_json, spawn_app};
use crate::support::server::Server;

/// A workflow whose output is `n`: which version ran shows in the output.
fn counting(n: u32) -> Value {
    json!({
        "description": format!("counts {n}"),
        "steps": [{ "id": "count", "kind": "tool",
            "input": { "tool": "math.calculate", "arguments": { "expression": format!("{n} + 0") } } }],
        "output": "{{ steps.count.output.result }}"
    })
}

/// A workflow that runs `reference` (a workflow) as its one step, and outputs its output.
fn wrapping(reference: &str) -> Value {
    json!({
        "steps": [{ "id": "inner", "kind": "workflow", "input": { "workflow": reference } }],
        "output": "{{ steps.inner.output }}"
    })
}

fn agent_step(id: &str, agent: &str) -> Value {
    json!({ "id": id, "kind": "agent", "input": { "agent": agent, "prompt": "hi" } })
}

fn workflow_step(id: &str, workflow: &str) -> Value {
    json!({ "id": id, "kind": "workflow", "input": { "workflow": workflow } })
}

/// The versions of the run's definitions, as `kind name vN` lines.
fn pins(run: &Value) -> Vec<String> {
    (run["definitions"].as_array().into_iter().flatten())
        .map(|p| {
            format!(
                "{} {} v{}",
                p["kind"].as_str().unwrap(),
                p["name"].as_str().unwrap(),
                p["version"]
            )
        })
        .collect()
}

/// Puts `definitions` as successive versions of `path` (`/v1/agents/NAME`, ...).
async fn versions(app: &TestApp, path: &str, definitions: &[Value]) {
    for definition in definitions {
        let (status, put) = app.put_json(path, definition).await;
        assert!(status == 200 || status == 201, "{path}: {put}");
    }
}

async fn label(app: &TestApp, path: &str, label: &str, version: u32) {
    let url = format!("{path}/labels/{label}");
    let (status, moved) = app.put_json(&url, &json!({ "version": version })).await;
    assert_eq!(status, 200, "{moved}");
}

/// `helper` v1-3 (label `stable` on 2), `other` v1-2 (label `first` on 1), `count` and
/// `tally` v1-3 (outputs n and 10 + n), `wrap` v1 running `tally@2` and v2 running `tally@3`
/// (label `production` on 1).
async fn register(app: &TestApp) {
    let instructions = |n: u32| json!({ "instructions": format!("Help, version {n}.") });
    versions(app, "/v1/agents/helper", &[1, 2, 3].map(instructions)).await;
    versions(app, "/v1/agents/other", &[1, 2].map(instructions)).await;
    versions(app, "/v1/workflows/count", &[1, 2, 3].map(counting)).await;
    versions(app, "/v1/workflows/tally", &[11, 12, 13].map(counting)).await;
    let wraps = [wrapping("tally@2"), wrapping("tally@3")];
    versions(app, "/v1/workflows/wrap", &wraps).await;
    label(app, "/v1/agents/helper", "stable", 2).await;
    label(app, "/v1/agents/other", "first", 1).await;
    label(app, "/v1/workflows/wrap", "production", 1).await;
}

/// The registered definitions the run's attempts ran, as `step: kind name vN` lines.
async fn ran(app: &TestApp, id: &str) -> Vec<String> {
    let (_, steps) = app.get_json(&format!("/v1/runs/{id}/steps")).await;
    let mut ran: Vec<String> = (steps.as_array().unwrap().iter())
        .filter(|s| s["definition"].is_object())
        .map(|s| {
            let d = &s["definition"];
            format!(
                "{}: {} {} v{}",
                s["step_id"].as_str().unwrap(),
                d["kind"].as_str().unwrap(),
                d["name"].as_str().unwrap(),
                d["version"]
            )
        })
        .collect();
    ran.sort();
    ran.dedup();
    ran
}

/// The texts of the run's stored plan versions.
async fn stored_plans(app: &TestApp, id: &str) -> String {
    let (status, plans) = app.get_json(&format!("/v1/runs/{id}/plans")).await;
    assert_eq!(status, 200, "{plans}");
    plans.to_string()
}

#[tokio::test]
async fn steps_name_versions_and_labels_at_every_nesting_level() {
    let app = spawn_app(|_| {}).await;
    register(&app).await;
    // A label and a number naming one version are one version; `wrap@production` is v1,
    // whose own step names `tally@2`.
    let plan = json!({ "steps": [
        agent_step("top", "helper@stable"),
        { "id": "seq", "kind": "sequential", "input": { "steps": [workflow_step("s1", "count@1")] } },
        { "id": "par", "kind": "parallel", "input": { "steps": [agent_step("p1", "helper@2")] } },
        { "id": "lp", "kind": "loop", "input": { "for_each": [1], "max_iterations": 1,
            "steps": [workflow_step("l1", "wrap@production")] } },
        workflow_step("own", "mine"),
    ], "workflows": { "mine": { "name": "mine", "steps": [agent_step("m1", "other@first")] } },
       "output": { "count": "{{ steps.seq.output }}" } });
    let run = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
        .await;
    assert_eq!(
        pins(&run),
        [
            "workflow count v1",
            "workflow tally v2",
            "workflow wrap v1",
            "agent helper v2",
            "agent other v1"
        ],
        "{run}"
    );
    let id = run["id"].as_str().unwrap();
    let url = app.url(&format!("/v1/runs/{id}"));
    let done = poll_json(&app.client, &url, |r| r["finished_at"].is_string()).await;
    assert_eq!(
        (&done["status"], &done["output"]),
        (&json!("succeeded"), &json!({ "count": 1 })),
        "count v1 ran, not the latest v3: {done}"
    );
    assert_eq!(
        ran(&app, id).await,
        [
            "inner: workflow tally v2",
            "l1: workflow wrap v1",
            "m1: agent other v1",
            "p1: agent helper v2",
            "s1: workflow count v1",
            "top: agent helper v2",
        ]
    );
    let (_, steps) = app.get_json(&format!("/v1/runs/{id}/steps")).await;
    let tally = (steps.as_array().unwrap().iter())
        .find(|s| s["step_id"] == "count" && s["path"].as_str().unwrap_or("").ends_with("inner"))
        .unwrap_or_else(|| panic!("tally's step ran: {steps}"));
    assert_eq!(tally["output"]["result"], json!(12), "tally v2: {tally}");
    // The stored plan names bare names only: a resume reads exactly these versions.
    let plans = stored_plans(&app, id).await;
    assert!(!plans.contains('@'), "{plans}");
    assert!(plans.contains("Help, version 2."), "{plans}");
}

#[tokio::test]
async fn spokes_participants_and_a_handoff_start_take_versions_too() {
    let app = spawn_app(|_| {}).await;
    register(&app).await;
    let ask = json!({ "id": "ask", "kind": "user_input", "input": { "prompt": "go on?" } });
    let plan = json!({ "steps": [
        ask,
        { "id": "hub", "kind": "agent", "depends_on": ["ask"],
          "input": { "agent": "helper@1", "spokes": ["other@first"], "prompt": "hi" } },
        { "id": "chat", "kind": "group_chat", "depends_on": ["ask"],
          "input": { "participants": ["helper@1", "other@1"] } },
        { "id": "desk", "kind": "handoff", "depends_on": ["ask"], "input": { "start": "other@1" } },
    ] });
    let body = json!({ "input": "x", "orchestration": "fixed", "plan": plan });
    let run = app.create_run(body.clone()).await;
    assert_eq!(pins(&run), ["agent helper v1", "agent other v1"], "{run}");
    let plans = stored_plans(&app, run["id"].as_str().unwrap()).await;
    assert!(!plans.contains('@'), "{plans}");

    // Each list is read at its own pointer: a version there is looked up there.
    for pointer in [
        "/plan/steps/1/input/spokes/0",
        "/plan/steps/2/input/participants/1",
        "/plan/steps/3/input/start",
    ] {
        let mut body = body.clone();
        *body.pointer_mut(pointer).unwrap() = json!("other@7");
        let (status, refused) = app.post_json("/v1/runs", &body).await;
        assert_eq!(status, 422, "{refused}");
        let problem = problem_at(&refused, pointer);
        assert!(problem.contains("has no version 7"), "{problem}");
    }
    // A second version of a name is refused where it is named, saying which two.
    let mut body = body.clone();
    *body.pointer_mut("/plan/steps/3/input/start").unwrap() = json!("other@2");
    let (status, refused) = app.post_json("/v1/runs", &body).await;
    assert_eq!(status, 422, "{refused}");
    let problem = problem_at(&refused, "/plan/steps/3/input/start");
    assert!(
        problem.contains("`other@first` (version 1)") && problem.contains("`other@2` (version 2)"),
        "{problem}"
    );
}

/// The message of the problem at `pointer`; fails if there is none.
fn problem_at(refused: &Value, pointer: &str) -> String {
    let errors = refused["errors"].as_array().unwrap();
    let found = errors.iter().find(|e| e["pointer"] == pointer);
    let found = found.unwrap_or_else(|| panic!("no problem at {pointer}: {refused}"));
    found["message"].as_str().unwrap().to_owned()
}

async fn run_count(app: &TestApp) -> usize {
    let (status, runs) = app.get_json("/v1/runs?limit=200").await;
    assert_eq!(status, 200, "{runs}");
    runs["runs"].as_array().or(runs.as_array()).unwrap().len()
}

#[tokio::test]
async fn bad_references_are_refused_with_a_pointer_each_and_no_run() {
    let app = spawn_app(|_| {}).await;
    register(&app).await;
    let (status, _) = app
        .put_json("/v1/workflows/legacy", &wrapping("tally@old"))
        .await;
    assert_eq!(status, 422, "no label `old` yet");
    label(&app, "/v1/workflows/tally", "old", 1).await;
    let (status, put) = app
        .put_json("/v1/workflows/legacy", &wrapping("tally@old"))
        .await;
    assert_eq!(status, 201, "{put}");
    // `legacy` names a label that then goes.
    let gone = app
        .client
        .delete(app.url("/v1/workflows/tally/labels/old"))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 204);

    let nested = |child: Value| {
        json!({ "steps": [
            { "id": "par", "kind": "parallel", "input": { "steps": [
                { "id": "seq", "kind": "sequential", "input": { "steps": [child] } },
            ] } },
        ] })
    };
    let at_child = "/plan/steps/0/input/steps/0/input/steps/0/input";
    let cases: Vec<(Value, String, Vec<&str>)> = vec![
        (
            nested(workflow_step("c", "count@9")),
            format!("{at_child}/workflow"),
            vec!["workflow `count` has no version 9", "versions: 1, 2, 3"],
        ),
        (
            nested(agent_step("c", "helper@canary")),
            format!("{at_child}/agent"),
            vec!["agent `helper` has no label `canary`", "labels: stable"],
        ),
        (
            nested(agent_step("c", "helper@0")),
            format!("{at_child}/agent"),
            vec![
                "`helper@0` is not a reference to an agent",
                "numbered from 1",
            ],
        ),
        (
            nested(agent_step("c", "nobody@2")),
            format!("{at_child}/agent"),
            vec!["nobody"],
        ),
        (
            json!({ "steps": [agent_step("a", "helper@1"),
                { "id": "lp", "kind": "loop", "input": { "for_each": [1], "max_iterations": 1,
                  "steps": [agent_step("b", "helper@stable")] } }] }),
            "/plan/steps/1/input/steps/0/input/agent".into(),
            vec!["`helper@1` (version 1)", "`helper@stable` (version 2)"],
        ),
        (
            json!({ "steps": [agent_step("a", "helper"), agent_step("b", "helper@2")] }),
            "/plan/steps/1/input/agent".into(),
            vec![
                "`helper` (version 3)",
                "`helper@2` (version 2)",
                "one version of each agent",
            ],
        ),
        (
            json!({ "steps": [agent_step("a", "helper@2")],
                    "agents": { "helper": { "instructions": "Mine." } } }),
            "/plan/steps/0/input/agent".into(),
            vec!["the plan defines its own agent `helper`"],
        ),
        (
            // Inside a registered workflow: the pointer is into its copy in the plan.
            json!({ "steps": [workflow_step("w", "legacy")] }),
            "/plan/workflows/legacy/steps/0/input/workflow".into(),
            vec!["no label `old`", "(in workflow `legacy` version 1)"],
        ),
        (
            // `wrap@2` runs `tally@3`, the plan `tally@2`.
            json!({ "steps": [workflow_step("a", "tally@2"), workflow_step("b", "wrap@2")] }),
            "/plan/workflows/wrap/steps/0/input/workflow".into(),
            vec![
                "`tally@2` (version 2)",
                "`tally@3` (version 3)",
                "(in workflow `wrap` version 2)",
            ],
        ),
    ];
    for (plan, pointer, expected) in cases {
        let body = json!({ "input": "x", "orchestration": "fixed", "plan": plan });
        let (status, refused) = app.post_json("/v1/runs", &body).await;
        assert_eq!(status, 422, "{plan}: {refused}");
        assert_eq!(refused["code"], "validation_failed", "{refused}");
        let message = problem_at(&refused, &pointer);
        for part in expected {
            assert!(message.contains(part), "{part:?} not in {message:?}");
        }
        assert_eq!(
            refused["errors"].as_array().unwrap().len(),
            1,
            "one problem per bad reference: {refused}"
        );
    }
    // An inline workflow's steps, under `/workflow`.
    let workflow = json!({ "steps": [workflow_step("w", "count@9")] });
    let body = json!({ "input": "x", "orchestration": "fixed", "workflow": workflow });
    let (status, refused) = app.post_json("/v1/runs", &body).await;
    assert_eq!(status, 422, "{refused}");
    let message = problem_at(&refused, "/workflow/steps/0/input/workflow");
    assert!(message.contains("no version 9"), "{message}");
    assert_eq!(run_count(&app).await, 0, "no run was stored");
}

#[tokio::test]
async fn a_registered_workflow_keeps_its_references_as_written_and_runs_the_versions_named() {
    let app = spawn_app(|_| {}).await;
    register(&app).await;
    let desk = json!({ "steps": [agent_step("ag", "helper@1"), workflow_step("wf", "count@2")],
                       "output": "{{ steps.wf.output }}" });
    let (status, put) = app.put_json("/v1/workflows/desk", &desk).await;
    assert_eq!(status, 201, "{put}");
    let (_, stored) = app.get_json("/v1/workflows/desk").await;
    assert_eq!(
        stored["definition"]["steps"][0]["input"]["agent"], "helper@1",
        "stored as written: {stored}"
    );
    let run = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "workflow": "desk" }))
        .await;
    assert_eq!(
        pins(&run),
        ["workflow count v2", "workflow desk v1", "agent helper v1"],
        "{run}"
    );
    let id = run["id"].as_str().unwrap();
    let url = app.url(&format!("/v1/runs/{id}"));
    let done = poll_json(&app.client, &url, |r| r["finished_at"].is_string()).await;
    assert_eq!(done["output"], json!(2), "{done}");
    assert_eq!(
        ran(&app, id).await,
        ["ag: agent helper v1", "wf: workflow count v2"]
    );

    // A bad reference is refused at its pointer and nothing is stored.
    let bad = json!({ "steps": [agent_step("ag", "helper@9")] });
    let (status, refused) = app.put_json("/v1/workflows/bad", &bad).await;
    assert_eq!(status, 422, "{refused}");
    let message = problem_at(&refused, "/steps/0/input/agent");
    assert!(message.contains("no version 9"), "{message}");
    let (status, _) = app.get_json("/v1/workflows/bad").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn an_applied_bundle_names_stored_versions_not_its_own() {
    let app = spawn_app(|_| {}).await;
    register(&app).await;
    let file =
        |path: &str, content: &Value| json!({ "path": path, "content": content.to_string() });
    let helper_v4 = json!({ "instructions": "Help, version 4." });
    let uses = |agent: &str| json!({ "steps": [agent_step("ag", agent)] });
    // A version of a definition the bundle changes is the stored one: fine.
    let bundle = json!({ "dry_run": true, "files": [
        file("agents/helper.json", &helper_v4),
        file("workflows/pinned.json", &uses("helper@2")),
    ] });
    let (status, applied) = app.post_json("/v1/apply", &bundle).await;
    assert_eq!(status, 200, "{applied}");
    let cases = [
        // The bundle creates `fresh`: it has no version 1 yet.
        (
            json!([
                file("agents/fresh.json", &helper_v4),
                file("workflows/w.json", &uses("fresh@1"))
            ]),
            "/files/1/content/steps/0/input/agent",
            vec!["`fresh` is not stored yet"],
        ),
        // The bundle's `helper` and a stored version of it, in one workflow.
        (
            json!([
                file("agents/helper.json", &helper_v4),
                file(
                    "workflows/w.json",
                    &json!({ "steps": [agent_step("a", "helper"), agent_step("b", "helper@1")] })
                )
            ]),
            "/files/1/content/steps/1/input/agent",
            vec![
                "`helper` (the bundle's definition)",
                "`helper@1` (version 1)",
            ],
        ),
    ];
    for (files, pointer, expected) in cases {
        let (status, refused) = app.post_json("/v1/apply", &json!({ "files": files })).await;
        assert_eq!(status, 422, "{refused}");
        let message = problem_at(&refused, pointer);
        for part in expected {
            assert!(message.contains(part), "{part:?} not in {message:?}");
        }
    }
    let (_, versions) = app.get_json("/v1/agents/helper/versions").await;
    assert_eq!(versions["latest_version"], 3, "nothing applied: {versions}");
    let (status, _) = app.get_json("/v1/workflows/w").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_waiting_run_keeps_its_labelled_version_through_a_moved_label_and_a_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path()).await;
    let call = |server: &Server, method: reqwest::Method, path: &str, body: Option<Value>| {
        let request = server.client.request(method, server.url(path));
        let request = match body {
            Some(body) => request.json(&body),
            None => request,
        };
        async move {
            let resp = request.send().await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    use reqwest::Method as M;
    for n in [1, 2] {
        let (status, put) = call(&server, M::PUT, "/v1/workflows/count", Some(counting(n))).await;
        assert!(status < 300, "{put}");
    }
    let move_label = |server: &Server, version: u32| {
        let body = json!({ "version": version });
        call(
            server,
            M::PUT,
            "/v1/workflows/count/labels/production",
            Some(body),
        )
    };
    assert_eq!(move_label(&server, 1).await.0, 200);
    let plan = json!({ "steps": [
        { "id": "ask", "kind": "user_input", "input": { "prompt": "go on?" } },
        { "id": "wf", "kind": "workflow", "depends_on": ["ask"],
          "input": { "workflow": "count@production" } },
    ], "output": "{{ steps.wf.output }}" });
    let body = json!({ "input": "x", "orchestration": "fixed", "plan": plan });
    let (status, run) = call(&server, M::POST, "/v1/runs", Some(body.clone())).await;
    assert_eq!(status, 201, "{run}");
    assert_eq!(pins(&run), ["workflow count v1"]);
    let id = run["id"].as_str().unwrap().to_owned();
    drop(server.until_asked(&id, 1).await);

    assert_eq!(move_label(&server, 2).await.0, 200);
    server.kill();
    let server = Server::start(dir.path()).await;
    let (_, after) = call(&server, M::GET, &format!("/v1/runs/{id}"), None).await;
    assert_eq!(pins(&after), ["workflow count v1"], "{after}");
    let fin = server.answered_to_final(&id, 2, "ask", json!("yes")).await;
    assert_eq!(
        (&fin["status"], &fin["output"]),
        (&json!("succeeded"), &json!(1)),
        "ran v1, where the label stood when the run was created: {fin}"
    );
    let (_, later) = call(&server, M::POST, "/v1/runs", Some(body)).await;
    assert_eq!(
        pins(&later),
        ["workflow count v2"],
        "a new run follows the label"
    );
}

#[tokio::test]
async fn a_fork_on_current_definitions_refuses_a_reference_that_no_longer_resolves() {
    let app = spawn_app(|_| {}).await;
    register(&app).await;
    label(&app, "/v1/workflows/tally", "old", 1).await;
    let (status, put) = app
        .put_json("/v1/workflows/legacy", &wrapping("tally@old"))
        .await;
    assert_eq!(status, 201, "{put}");
    let plan = json!({ "steps": [
        { "id": "ask", "kind": "user_input", "input": { "prompt": "go on?" } },
        { "id": "w", "kind": "workflow", "depends_on": ["ask"], "input": { "workflow": "legacy" } },
    ] });
    let parent = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
        .await;
    assert_eq!(
        pins(&parent),
        ["workflow legacy v1", "workflow tally v1"],
        "{parent}"
    );
    let id = parent["id"].as_str().unwrap();
    let url = app.url(&format!("/v1/runs/{id}"));
    poll_json(&app.client, &url, |r| r["status"] == "waiting_input").await;
    let gone = app
        .client
        .delete(app.url("/v1/workflows/tally/labels/old"))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 204);

    let fork = format!("/v1/runs/{id}/fork");
    let (status, kept) = app.post_json(&fork, &json!({})).await;
    assert_eq!(status, 201, "the parent's versions need no label: {kept}");
    assert_eq!(pins(&kept), pins(&parent));
    let (status, refused) = app
        .post_json(&fork, &json!({ "definitions": "current" }))
        .await;
    assert_eq!(status, 422, "{refused}");
    let message = problem_at(&refused, "/plan/workflows/legacy/steps/0/input/workflow");
    assert!(message.contains("no label `old`"), "{message}");
}
