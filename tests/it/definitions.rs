//! Definitions as code (issue 45): versions, labels and diffs of workflows, agents and tools;
//! runs that keep the versions they started with (through a new version and a kill -9, on
//! two PostgreSQL replicas while a label moves); `POST /v1/apply` and `GET /v1/export`.

use serde_json::{Value, json};

use crate::support::app::{bearer_client, spawn_app, two_tenants};
use crate::support::server::{Server, TwoReplicas};

/// A workflow that asks first (when `ask`), then computes `n + 0`: its output tells which
/// version ran.
fn counting(n: u32, ask: bool) -> Value {
    let mut steps = vec![json!({
        "id": "count", "kind": "tool",
        "input": { "tool": "math.calculate", "arguments": { "expression": format!("{n} + 0") } }
    })];
    if ask {
        steps.insert(
            0,
            json!({ "id": "ask", "kind": "user_input", "input": { "prompt": "go on?" } }),
        );
        steps[1]["depends_on"] = json!(["ask"]);
    }
    json!({ "description": format!("counts {n}"), "steps": steps, "output": "{{ steps.count.output.result }}" })
}

fn file(path: &str, content: &Value) -> Value {
    json!({ "path": path, "content": serde_json::to_string_pretty(content).unwrap() })
}

async fn send(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut req = client.request(method, url);
    if let Some(body) = body {
        req = req.json(body);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn post(server: &Server, path: &str, body: &Value) -> (u16, Value) {
    send(
        &server.client,
        reqwest::Method::POST,
        server.url(path),
        Some(body),
    )
    .await
}

async fn get(server: &Server, path: &str) -> (u16, Value) {
    send(&server.client, reqwest::Method::GET, server.url(path), None).await
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

#[tokio::test]
async fn a_run_waiting_on_v1_keeps_it_through_an_applied_v2_and_a_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path()).await;
    let bundle = |n: u32| json!({ "files": [file("workflows/count.json", &counting(n, true))], "message": format!("v{n}") });
    let (status, applied) = post(&server, "/v1/apply", &bundle(1)).await;
    assert_eq!(status, 200, "{applied}");
    assert_eq!(applied["changes"][0]["action"], "created");
    assert_eq!(applied["changes"][0]["version"], 1);

    let (status, run) = post(
        &server,
        "/v1/runs",
        &json!({ "input": "x", "orchestration": "fixed", "workflow": "count" }),
    )
    .await;
    assert_eq!(status, 201, "{run}");
    assert_eq!(pins(&run), ["workflow count v1"]);
    let id = run["id"].as_str().unwrap().to_owned();
    drop(server.until_asked(&id, 1).await);

    let (status, applied) = post(&server, "/v1/apply", &bundle(2)).await;
    assert_eq!(status, 200, "{applied}");
    let change = &applied["changes"][0];
    assert_eq!(
        (
            &change["action"],
            &change["version"],
            &change["previous_version"]
        ),
        (&json!("changed"), &json!(2), &json!(1))
    );
    assert!(
        change["changes"]
            .to_string()
            .contains("/steps/1/input/arguments/expression"),
        "{change}"
    );
    server.kill();

    let server = Server::start(dir.path()).await;
    let (_, run) = get(&server, &format!("/v1/runs/{id}")).await;
    assert_eq!(pins(&run), ["workflow count v1"], "{run}");
    // The version it uses cannot be deleted while it waits; nor can the workflow.
    let (status, refused) = send(
        &server.client,
        reqwest::Method::DELETE,
        server.url("/v1/workflows/count/versions/1"),
        None,
    )
    .await;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["detail"].as_str().unwrap().contains(&id),
        "names the run: {refused}"
    );
    let (status, refused) = send(
        &server.client,
        reqwest::Method::DELETE,
        server.url("/v1/workflows/count"),
        None,
    )
    .await;
    assert_eq!(status, 409, "{refused}");

    let fin = server.answered_to_final(&id, 2, "ask", json!("yes")).await;
    assert_eq!(
        (&fin["status"], &fin["output"]),
        (&json!("succeeded"), &json!(1)),
        "ran v1: {fin}"
    );
    let (_, run) = get(&server, &format!("/v1/runs/{id}")).await;
    assert_eq!(pins(&run), ["workflow count v1"]);

    // New runs take the latest, or the version they name.
    let (_, latest) = post(
        &server,
        "/v1/runs",
        &json!({ "input": "x", "orchestration": "fixed", "workflow": "count" }),
    )
    .await;
    assert_eq!(pins(&latest), ["workflow count v2"]);
    let (_, named) = post(
        &server,
        "/v1/runs",
        &json!({ "input": "x", "orchestration": "fixed", "workflow": "count@1" }),
    )
    .await;
    assert_eq!(pins(&named), ["workflow count v1"]);
    let (status, refused) = post(
        &server,
        "/v1/runs",
        &json!({ "input": "x", "orchestration": "fixed", "workflow": "count@7" }),
    )
    .await;
    assert_eq!(status, 422, "{refused}");
    let message = refused["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("no version 7") && message.contains("1, 2"),
        "{message}"
    );

    let (_, versions) = get(&server, "/v1/workflows/count/versions").await;
    let numbers: Vec<&Value> = versions["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["version"])
        .collect();
    assert_eq!(numbers, [&json!(2), &json!(1)], "newest first: {versions}");
    assert_eq!(versions["versions"][0]["message"], "v2");

    // Once no run uses version 1 it can go; the latest never does.
    let delete = |path: &str| {
        send(
            &server.client,
            reqwest::Method::DELETE,
            server.url(path),
            None,
        )
    };
    let (status, refused) = delete("/v1/workflows/count/versions/1").await;
    assert_eq!(status, 409, "the run naming count@1 waits: {refused}");
    for run in [&named, &latest] {
        let cancel = format!("/v1/runs/{}/cancel", run["id"].as_str().unwrap());
        let (status, cancelled) = post(&server, &cancel, &json!({})).await;
        assert!(status < 300, "{cancelled}");
        let url = server.url(&format!("/v1/runs/{}", run["id"].as_str().unwrap()));
        crate::support::app::poll_json(&server.client, &url, |r| r["status"] == "cancelled").await;
    }
    assert_eq!(delete("/v1/workflows/count/versions/1").await.0, 204);
    let (status, refused) = delete("/v1/workflows/count/versions/2").await;
    assert_eq!(status, 409, "the latest stays: {refused}");
}

#[tokio::test]
async fn an_apply_with_one_bad_file_changes_nothing_and_names_every_problem() {
    let app = spawn_app(|_| {}).await;
    let agent = json!({ "instructions": "Answer billing questions.", "tools": ["math.calculate"] });
    let uses_agent = json!({ "steps": [ { "id": "a", "kind": "agent", "input": { "agent": "billing", "prompt": "hi" } } ] });
    let bad_tool = json!({ "steps": [ { "id": "a", "kind": "tool", "input": { "tool": "no.such.tool", "arguments": {} } } ] });
    let calls = |other: &str| json!({ "steps": [ { "id": "w", "kind": "workflow", "input": { "workflow": other } } ] });
    let files = json!([
        file("agents/billing.json", &agent),
        { "path": "workflows/desk.yaml", "content": "steps:\n  - id: a\n    kind: agent\n    input:\n      agent: billing\n      prompt: hi\n" },
        file("workflows/broken.json", &bad_tool),
        file("workflows/twice.json", &uses_agent),
        file("workflows/again.json", &json!({ "name": "twice", "steps": uses_agent["steps"] })),
        file("workflows/ping.json", &calls("pong")),
        file("workflows/pong.json", &calls("ping")),
        { "path": "runs/x.json", "content": "{}" },
        { "path": "../etc/passwd.json", "content": "{}" },
        { "path": "agents/notjson.json", "content": "{ nope" },
    ]);
    let (status, problem) = app.post_json("/v1/apply", &json!({ "files": files })).await;
    assert_eq!(status, 422, "{problem}");
    let errors = problem["errors"].as_array().unwrap();
    let at = |i: usize| -> Vec<String> {
        (errors.iter())
            .filter(|e| {
                e["pointer"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("/files/{i}/"))
            })
            .map(|e| e["message"].as_str().unwrap().to_owned())
            .collect()
    };
    for (i, path) in [
        (2, "workflows/broken.json"),
        (4, "workflows/again.json"),
        (7, "runs/x.json"),
        (8, "../etc/passwd.json"),
        (9, "agents/notjson.json"),
    ] {
        let found = at(i);
        assert!(
            !found.is_empty() && found.iter().all(|m| m.starts_with(&format!("{path}: "))),
            "{i}: {found:?} in {problem}"
        );
    }
    assert!(
        at(4)[0].contains("defined twice") && at(4)[0].contains("workflows/twice.json"),
        "{:?}",
        at(4)
    );
    assert!(
        !at(5).is_empty() || !at(6).is_empty(),
        "a cycle of workflows is refused: {problem}"
    );
    assert!(
        at(0).is_empty() && at(1).is_empty() && at(3).is_empty(),
        "the good files have no problem: {problem}"
    );
    for list in ["/v1/workflows", "/v1/agents"] {
        let (_, listed) = app.get_json(list).await;
        assert_eq!(listed, json!([]), "nothing was applied: {list}");
    }

    // The good files alone apply, the YAML one naming the agent of the same bundle.
    let good = json!([files[0], files[1], files[3]]);
    let (status, applied) = app
        .post_json("/v1/apply", &json!({ "files": good, "dry_run": true }))
        .await;
    assert_eq!(
        (status, &applied["applied"]),
        (200, &json!(false)),
        "{applied}"
    );
    let (_, listed) = app.get_json("/v1/workflows").await;
    assert_eq!(listed, json!([]), "a dry run stores nothing");
    let (status, applied) = app.post_json("/v1/apply", &json!({ "files": good })).await;
    assert_eq!(status, 200, "{applied}");
    let actions: Vec<(String, String)> = (applied["changes"].as_array().unwrap().iter())
        .map(|c| {
            (
                format!(
                    "{} {}",
                    c["kind"].as_str().unwrap(),
                    c["name"].as_str().unwrap()
                ),
                c["action"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let created = |s: &str| (s.to_owned(), "created".to_owned());
    assert_eq!(
        actions,
        [
            created("workflow desk"),
            created("workflow twice"),
            created("agent billing")
        ]
    );
}

#[tokio::test]
async fn export_then_apply_is_a_no_op_and_prune_removes_what_no_file_names() {
    const SECRET_VAR: &str = "ORCA_TEST_DEFINITIONS_TOKEN";
    let app = spawn_app(|c| {
        c.tools.http_api = true;
        c.tools.http_api_env = vec![SECRET_VAR.into()];
    })
    .await;
    let tool = json!({ "url": "https://example.com/rates/{currency}",
        "headers": { "Authorization": format!("Bearer ${{{SECRET_VAR}}}"), "X-Literal": "s3cr3t-literal" },
        "input_schema": { "type": "object", "required": ["currency"], "properties": { "currency": { "type": "string" } } } });
    let workflow = json!({ "steps": [ { "id": "rate", "kind": "tool", "input": { "tool": "fx.rates", "arguments": { "currency": "EUR" } } } ] });
    let agent = json!({ "instructions": "Be brief." });
    let files = json!([
        file("tools/fx.rates.json", &tool),
        file("workflows/rate.json", &workflow),
        file("agents/brief.json", &agent)
    ]);
    let (status, applied) = app
        .post_json("/v1/apply", &json!({ "files": files, "author": "ci" }))
        .await;
    assert_eq!(
        status, 200,
        "a workflow names a tool of the same bundle: {applied}"
    );

    let (status, exported) = app.get_json("/v1/export").await;
    assert_eq!(status, 200);
    let text = exported.to_string();
    assert!(
        !text.contains("s3cr3t-literal"),
        "a literal header value never leaves: {text}"
    );
    assert!(
        text.contains(&format!("${{{SECRET_VAR}}}")),
        "a variable reference is kept: {text}"
    );
    let paths: Vec<&str> = exported["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "workflows/rate.json",
            "agents/brief.json",
            "tools/fx.rates.json"
        ]
    );

    let (status, again) = app
        .post_json("/v1/apply", &json!({ "files": exported["files"] }))
        .await;
    assert_eq!(status, 200, "{again}");
    assert!(
        again["changes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["action"] == "unchanged" && c["version"] == 1),
        "a round trip changes nothing: {again}"
    );
    let (_, versions) = app.get_json("/v1/tools/fx.rates/versions").await;
    assert_eq!(versions["latest_version"], 1, "{versions}");
    assert_eq!(versions["versions"][0]["author"], "ci");
    let (_, v1) = app.get_json("/v1/tools/fx.rates/versions/1").await;
    assert_eq!(v1["definition"]["headers"]["X-Literal"], "<hidden>", "{v1}");

    // Prune, dry run first: the workflow and its tool stay, the agent no file names goes.
    let files = &exported["files"];
    let kept = json!([files[0], files[2]]);
    let body = json!({ "files": kept, "prune": true, "dry_run": true });
    let (status, plan) = app.post_json("/v1/apply", &body).await;
    assert_eq!(status, 200, "{plan}");
    let deleted: Vec<&str> = (plan["changes"].as_array().unwrap().iter())
        .filter(|c| c["action"] == "deleted")
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(deleted, ["brief"], "{plan}");
    let (_, agents) = app.get_json("/v1/agents").await;
    assert_eq!(
        agents.as_array().unwrap().len(),
        1,
        "a dry run removes nothing"
    );
    // Pruning the tool the kept workflow calls is refused, with the workflow's problem.
    let only = json!([files[0]]);
    let (status, refused) = app
        .post_json("/v1/apply", &json!({ "files": only, "prune": true }))
        .await;
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["errors"].to_string().contains("fx.rates"),
        "{refused}"
    );
    // Keeping only the agent removes the workflow and the tool, in one apply.
    let (status, pruned) = app
        .post_json("/v1/apply", &json!({ "files": [files[1]], "prune": true }))
        .await;
    assert_eq!(status, 200, "{pruned}");
    let (_, workflows) = app.get_json("/v1/workflows").await;
    assert_eq!(workflows, json!([]));
    let (status, _) = app.get_json("/v1/tools/fx.rates").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn moving_a_label_back_rolls_back_new_runs_only() {
    let app = spawn_app(|c| two_tenants(c, ["key-a-0123456789", "key-b-0123456789"])).await;
    let (a, b) = (
        bearer_client("key-a-0123456789"),
        bearer_client("key-b-0123456789"),
    );
    let call =
        |client: &reqwest::Client, method: reqwest::Method, path: &str, body: Option<Value>| {
            let (client, url) = (client.clone(), app.url(path));
            async move { send(&client, method, url, body.as_ref()).await }
        };
    use reqwest::Method as M;
    for n in [1, 2] {
        let (status, put) = call(
            &a,
            M::PUT,
            "/v1/workflows/count?message=ship&author=ana",
            Some(counting(n, true)),
        )
        .await;
        assert_eq!(
            (status, &put["latest_version"]),
            (if n == 1 { 201 } else { 200 }, &json!(n)),
            "{put}"
        );
    }
    let (status, label) = call(
        &a,
        M::PUT,
        "/v1/workflows/count/labels/production",
        Some(json!({ "version": 2 })),
    )
    .await;
    assert_eq!(
        (status, &label["version"], &label["previous"]),
        (200, &json!(2), &Value::Null),
        "{label}"
    );
    let start = |reference: &str| {
        call(
            &a,
            M::POST,
            "/v1/runs",
            Some(json!({ "input": "x", "orchestration": "fixed", "workflow": reference })),
        )
    };
    let (_, on_two) = start("count@production").await;
    assert_eq!(pins(&on_two), ["workflow count v2"]);

    let (status, label) = call(
        &a,
        M::PUT,
        "/v1/workflows/count/labels/production",
        Some(json!({ "version": 1 })),
    )
    .await;
    assert_eq!((status, &label["previous"]), (200, &json!(2)), "{label}");
    let (_, on_one) = start("count@production").await;
    assert_eq!(pins(&on_one), ["workflow count v1"], "new runs roll back");
    let (_, still) = call(
        &a,
        M::GET,
        &format!("/v1/runs/{}", on_two["id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!(
        pins(&still),
        ["workflow count v2"],
        "a run started before keeps its version"
    );

    let (_, versions) = call(&a, M::GET, "/v1/workflows/count/versions", None).await;
    assert_eq!(versions["labels"], json!({ "production": 1 }));
    assert_eq!(versions["versions"][1]["labels"], json!(["production"]));
    assert_eq!(
        (
            &versions["versions"][0]["author"],
            &versions["versions"][0]["message"]
        ),
        (&json!("ana"), &json!("ship"))
    );
    assert!(
        versions["versions"][0]["key"]
            .as_str()
            .unwrap()
            .starts_with("key:"),
        "{versions}"
    );
    assert!(
        !versions.to_string().contains("key-a-0123456789"),
        "the key itself is never shown"
    );
    let (_, by_label) = call(&a, M::GET, "/v1/workflows/count/versions/production", None).await;
    assert_eq!(by_label["version"], 1);
    let (status, diff) = call(
        &a,
        M::GET,
        "/v1/workflows/count/diff?from=production&to=2",
        None,
    )
    .await;
    assert_eq!(status, 200, "{diff}");
    assert_eq!((&diff["from"], &diff["to"]), (&json!(1), &json!(2)));
    let ops = diff["changes"].as_array().unwrap();
    assert!(
        ops.iter().any(|op| op["op"] == "replace"
            && op["path"] == "/steps/1/input/arguments/expression"
            && op["value"] == "2 + 0"),
        "{diff}"
    );

    // Bad input: each a clear answer, nothing changed.
    let bad = [
        (
            M::PUT,
            "/v1/workflows/count/labels/production",
            Some(json!({ "version": 9 })),
            404,
            "1, 2",
        ),
        (
            M::PUT,
            "/v1/workflows/count/labels/latest",
            Some(json!({ "version": 1 })),
            422,
            "latest",
        ),
        (
            M::PUT,
            "/v1/workflows/count/labels/2nd",
            Some(json!({ "version": 1 })),
            422,
            "starting",
        ),
        (
            M::GET,
            "/v1/workflows/count/versions/staging",
            None,
            404,
            "production",
        ),
        (M::GET, "/v1/workflows/cuont/versions", None, 404, "count"),
        (
            M::GET,
            "/v1/runs/x/versions",
            None,
            404,
            "keeps no versions",
        ),
        (
            M::DELETE,
            "/v1/workflows/count/versions/1",
            None,
            409,
            "not yet ended",
        ),
    ];
    for (method, path, body, status, says) in bad {
        let (got, problem) = call(&a, method.clone(), path, body).await;
        assert_eq!(got, status, "{method} {path}: {problem}");
        assert!(
            problem["detail"].to_string().contains(says)
                || problem["errors"].to_string().contains(says),
            "{path}: {problem}"
        );
    }
    let (status, refused) = start("count@staging").await;
    assert_eq!(status, 422);
    assert!(
        refused["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("production"),
        "{refused}"
    );

    // Another tenant sees none of it, and its own `count` starts at version 1.
    let (status, _) = call(&b, M::GET, "/v1/workflows/count/versions", None).await;
    assert_eq!(status, 404);
    let (status, _) = call(
        &b,
        M::PUT,
        "/v1/workflows/count/labels/production",
        Some(json!({ "version": 1 })),
    )
    .await;
    assert_eq!(status, 404);
    let (_, own) = call(&b, M::PUT, "/v1/workflows/count", Some(counting(5, false))).await;
    assert_eq!(own["latest_version"], 1);
}

#[tokio::test]
async fn a_run_started_on_one_replica_while_another_moves_the_label_gets_exactly_one_version() {
    let replicas = TwoReplicas::start(&[("ORCA_LLM__PROVIDER", "offline")]).await;
    label_race(&replicas.a, &replicas.b).await;
}

/// On one SQLite server: a label moved while runs are written keeps every run on one
/// version, and no move fails for the writes in between.
#[tokio::test]
async fn runs_started_while_the_label_moves_get_exactly_one_version_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path()).await;
    label_race(&server, &server).await;
}

/// Starts 60 runs of `count@production` on `a` while `b` moves the label back and forth:
/// each run reports one version and ran it.
async fn label_race(a: &Server, b: &Server) {
    for n in [1, 2] {
        let (status, _) = send(
            &a.client,
            reqwest::Method::PUT,
            a.url("/v1/workflows/count"),
            Some(&counting(n, false)),
        )
        .await;
        assert!(status == 200 || status == 201);
    }
    let label = |n: u32| async move {
        let body = json!({ "version": n });
        let url = b.url("/v1/workflows/count/labels/production");
        send(&b.client, reqwest::Method::PUT, url, Some(&body)).await
    };
    assert_eq!(label(1).await.0, 200);
    let body = json!({ "input": "x", "orchestration": "fixed", "workflow": "count@production" });
    let starts = (0..60).map(|_| {
        let body = body.clone();
        async move { post(a, "/v1/runs", &body).await }
    });
    let moves = async {
        for n in (0..30).map(|i| 1 + i % 2) {
            assert_eq!(label(n).await.0, 200);
            tokio::task::yield_now().await;
        }
    };
    let (runs, ()) = tokio::join!(futures::future::join_all(starts), moves);
    let mut seen = std::collections::BTreeSet::new();
    for (status, run) in runs {
        assert_eq!(status, 201, "{run}");
        let id = run["id"].as_str().unwrap();
        let fin =
            crate::support::app::poll_json(&a.client, &a.url(&format!("/v1/runs/{id}")), |r| {
                r["finished_at"].is_string()
            })
            .await;
        let pinned = pins(&fin);
        assert_eq!(pinned.len(), 1, "{fin}");
        let version = fin["definitions"][0]["version"].clone();
        assert_eq!(
            fin["output"], version,
            "the run ran the version it reports: {fin}"
        );
        seen.insert(version.to_string());
    }
    assert!(!seen.is_empty());
}

#[tokio::test]
async fn a_run_pins_the_definitions_its_steps_name_at_every_nesting_level() {
    let app = spawn_app(|_| {}).await;
    let agent = |prompt: &str| json!({ "id": "ag", "kind": "agent", "input": { "agent": "helper", "prompt": prompt } });
    // `inner` names the agent inside a loop; `outer` names `inner` inside a sequential
    // inside a parallel; `deep` is named only by `inner`'s own nested workflow step.
    let deep = json!({ "steps": [ { "id": "t", "kind": "tool", "input": { "tool": "math.calculate", "arguments": { "expression": "1" } } } ] });
    let inner = json!({ "steps": [
        { "id": "lp", "kind": "loop", "input": { "for_each": [1], "max_iterations": 1, "steps": [agent("hi")] } },
        { "id": "wf", "kind": "workflow", "input": { "workflow": "deep" } },
    ] });
    let outer = json!({ "steps": [ { "id": "par", "kind": "parallel", "input": { "steps": [
        { "id": "seq", "kind": "sequential", "input": { "steps": [
            { "id": "wf", "kind": "workflow", "input": { "workflow": "inner" } },
        ] } },
    ] } } ] });
    let files = json!([
        file("agents/helper.json", &json!({ "instructions": "Help." })),
        file("workflows/deep.json", &deep),
        file("workflows/inner.json", &inner),
        file("workflows/outer.json", &outer),
    ]);
    let (status, applied) = app.post_json("/v1/apply", &json!({ "files": files })).await;
    assert_eq!(status, 200, "{applied}");
    // A second version of the agent: the run pins the one it resolved.
    let (status, _) = app
        .put_json(
            "/v1/agents/helper",
            &json!({ "instructions": "Help more." }),
        )
        .await;
    assert_eq!(status, 200);
    let body = json!({ "input": "x", "orchestration": "fixed", "workflow": "outer" });
    let run = app.create_run(body).await;
    assert_eq!(
        pins(&run),
        [
            "workflow deep v1",
            "workflow inner v1",
            "workflow outer v1",
            "agent helper v2"
        ],
        "{run}"
    );
    let id = run["id"].as_str().unwrap();
    let (_, stored) = app.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(stored["definitions"], run["definitions"]);
    // Each step that ran a registered definition says which version, at every level.
    let url = app.url(&format!("/v1/runs/{id}"));
    crate::support::app::poll_json(&app.client, &url, |r| r["finished_at"].is_string()).await;
    let (_, steps) = app.get_json(&format!("/v1/runs/{id}/steps")).await;
    let ran: std::collections::BTreeSet<String> = (steps.as_array().unwrap().iter())
        .filter(|s| s["definition"].is_object())
        .map(|s| {
            let d = &s["definition"];
            format!(
                "{} {} v{} at {}",
                d["kind"].as_str().unwrap(),
                d["name"].as_str().unwrap(),
                d["version"],
                s["step_id"].as_str().unwrap()
            )
        })
        .collect();
    let expected = [
        "agent helper v2 at ag",
        "workflow deep v1 at wf",
        "workflow inner v1 at wf",
    ];
    assert_eq!(ran.into_iter().collect::<Vec<_>>(), expected, "{steps}");
}

#[tokio::test]
async fn a_fork_keeps_its_parents_versions_or_takes_the_current_ones() {
    let app = spawn_app(|_| {}).await;
    let desk = json!({ "steps": [
        { "id": "ask", "kind": "user_input", "input": { "prompt": "which?" } },
        { "id": "ag", "kind": "agent", "depends_on": ["ask"], "input": { "agent": "helper", "prompt": "hi" } },
    ] });
    let files = json!([
        file("agents/helper.json", &json!({ "instructions": "Help." })),
        file("workflows/desk.json", &desk),
    ]);
    let (status, applied) = app.post_json("/v1/apply", &json!({ "files": files })).await;
    assert_eq!(status, 200, "{applied}");
    let body = json!({ "input": "x", "orchestration": "fixed", "workflow": "desk" });
    let parent = app.create_run(body).await;
    let id = parent["id"].as_str().unwrap();
    let url = app.url(&format!("/v1/runs/{id}"));
    crate::support::app::poll_json(&app.client, &url, |r| r["status"] == "waiting_input").await;
    let (status, _) = app
        .put_json(
            "/v1/agents/helper",
            &json!({ "instructions": "Help more." }),
        )
        .await;
    assert_eq!(status, 200);

    let fork = format!("/v1/runs/{id}/fork");
    let (status, kept) = app.post_json(&fork, &json!({})).await;
    assert_eq!(status, 201, "{kept}");
    assert_eq!(
        pins(&kept),
        ["workflow desk v1", "agent helper v1"],
        "the parent's, by default"
    );
    let (status, current) = app
        .post_json(&fork, &json!({ "definitions": "current" }))
        .await;
    assert_eq!(status, 201, "{current}");
    assert_eq!(
        pins(&current),
        ["workflow desk v1", "agent helper v2"],
        "{current}"
    );
    let (status, refused) = app
        .post_json(&fork, &json!({ "definitions": "newest" }))
        .await;
    assert_eq!(status, 422, "{refused}");
}

/// The CLI over a real server: apply a folder (a bad file refused with its name, nothing
/// applied), the versions, a diff, a label moved back, export and apply again.
#[tokio::test]
async fn the_cli_applies_a_folder_and_shows_versions_diffs_and_labels() {
    let app = spawn_app(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap().to_owned();
    std::fs::create_dir_all(dir.path().join("workflows")).unwrap();
    std::fs::create_dir_all(dir.path().join("agents")).unwrap();
    let write = |path: &str, text: &str| std::fs::write(dir.path().join(path), text).unwrap();
    write(
        "workflows/count.yaml",
        "steps:\n  - id: count\n    kind: tool\n    input:\n      tool: math.calculate\n      arguments: {expression: \"1 + 0\"}\n",
    );
    write(
        "agents/bad.json",
        r#"{"instructions": "x", "tools": ["no.such.tool"]}"#,
    );
    write("notes.txt", "not a definition");
    let out = app.orca(&["apply", &root], "").await;
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("agents/bad.json") && text.contains("no.such.tool"),
        "{text}"
    );
    let (_, listed) = app.get_json("/v1/workflows").await;
    assert_eq!(listed, json!([]), "nothing applied");

    std::fs::remove_file(dir.path().join("agents/bad.json")).unwrap();
    let out = app.orca(&["apply", &root, "-m", "first"], "").await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success() && text.contains("created") && text.contains("count"),
        "{text}"
    );
    write(
        "workflows/count.yaml",
        "steps:\n  - id: count\n    kind: tool\n    input:\n      tool: math.calculate\n      arguments: {expression: \"2 + 0\"}\n",
    );
    let out = app.orca(&["apply", &root, "--dry-run"], "").await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("changed")
            && text.contains("/steps/0/input/arguments/expression")
            && text.contains("dry run"),
        "{text}"
    );
    let (_, versions) = app.get_json("/v1/workflows/count/versions").await;
    assert_eq!(versions["latest_version"], 1, "a dry run stores nothing");
    assert!(
        app.orca(&["apply", &root, "-m", "second"], "")
            .await
            .status
            .success()
    );

    let out = app.orca(&["workflows", "versions", "count"], "").await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("second") && text.contains("first"), "{text}");
    let out = app
        .orca(&["workflows", "diff", "count", "1", "2"], "")
        .await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("replace /steps/0/input/arguments/expression"),
        "{text}"
    );
    for n in ["2", "1"] {
        let out = app
            .orca(&["workflows", "label", "count", "production", n], "")
            .await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (_, versions) = app.get_json("/v1/workflows/count/versions").await;
    assert_eq!(versions["labels"], json!({ "production": 1 }), "moved back");
    let out = app
        .orca(&["workflows", "label", "count", "production", "9"], "")
        .await;
    assert_eq!(out.status.code(), Some(2));

    let exported = tempfile::tempdir().unwrap();
    let target = exported.path().to_str().unwrap();
    assert!(app.orca(&["export", target], "").await.status.success());
    let out = app.orca(&["apply", target, "--json"], "").await;
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        answer["changes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["action"] == "unchanged"),
        "{answer}"
    );
}
