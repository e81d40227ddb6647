//! Named LLM functions declared through the API (issue 45): versioned like workflows, copied
//! into a run when it is created so the run calls the version it started with (through a new
//! version and a kill -9), per tenant, applied and exported as `functions/` files, and
//! refused with a pointer when bad.

use serde_json::{Value, json};

use crate::support::app::{bearer_client, spawn_app, two_tenants, use_scripted};
use crate::support::scripted_llm::{Reply, ScriptedLlm};
use crate::support::server::Server;

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

fn classify(word: &str) -> Value {
    json!({ "description": "labels a review", "prompt": format!("{word}: label {{{{ input.text }}}}") })
}

/// A fixed plan that asks first, then calls `function` from inside a `sequential` step and
/// from inside a loop's body.
fn nested_call(function: &str) -> Value {
    let call = |id: &str| {
        json!({ "id": id, "kind": "llm",
                "input": { "function": function, "arguments": { "text": "great" } } })
    };
    json!({ "steps": [
        { "id": "ask", "kind": "user_input", "input": { "prompt": "go on?" } },
        { "id": "outer", "kind": "sequential", "depends_on": ["ask"],
          "input": { "steps": [call("inner")] } },
        { "id": "again", "kind": "loop", "depends_on": ["outer"],
          "input": { "for_each": [1], "max_iterations": 1, "steps": [call("body")] } }
    ] })
}

/// The `function NAME vN` lines of a run's pins.
fn function_pins(run: &Value) -> Vec<String> {
    (run["definitions"].as_array().into_iter().flatten())
        .filter(|p| p["kind"] == "function")
        .map(|p| format!("{} v{}", p["name"].as_str().unwrap(), p["version"]))
        .collect()
}

/// The user messages the model was sent, oldest first.
fn prompts(llm: &ScriptedLlm) -> Vec<String> {
    (llm.requests().iter())
        .flat_map(|r| r["messages"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect()
}

#[tokio::test]
async fn a_run_keeps_the_function_version_it_started_with_through_a_new_one_and_a_kill_9() {
    let llm = ScriptedLlm::start().await;
    llm.set_default_reply(Reply::text("positive"));
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_scripted(dir.path(), &llm).await;
    let call = |server: &Server, method: reqwest::Method, path: &str, body: Option<Value>| {
        let (client, url) = (server.client.clone(), server.url(path));
        async move { send(&client, method, url, body.as_ref()).await }
    };
    use reqwest::Method as M;
    let path = "/v1/functions/classify?message=first&author=ana";
    let (status, put) = call(&server, M::PUT, path, Some(classify("ONE"))).await;
    assert_eq!((status, &put["latest_version"]), (201, &json!(1)), "{put}");
    assert_eq!(
        (&put["declared"], &put["builtin"]),
        (&json!(true), &json!(false))
    );
    let (_, list) = call(&server, M::GET, "/v1/functions", None).await;
    let names: Vec<(&str, &Value)> = (list.as_array().unwrap().iter())
        .map(|f| (f["name"].as_str().unwrap(), &f["declared"]))
        .collect();
    assert!(names.contains(&("classify", &json!(true))), "{list}");
    assert!(names.contains(&("planner", &json!(false))), "{list}");

    let body = json!({ "input": "x", "orchestration": "fixed", "plan": nested_call("classify") });
    let (status, run) = call(&server, M::POST, "/v1/runs", Some(body.clone())).await;
    assert_eq!(status, 201, "{run}");
    assert_eq!(function_pins(&run), ["classify v1"]);
    let id = run["id"].as_str().unwrap().to_owned();
    drop(server.until_asked(&id, 1).await);

    let (status, put) = call(
        &server,
        M::PUT,
        "/v1/functions/classify",
        Some(classify("TWO")),
    )
    .await;
    assert_eq!((status, &put["latest_version"]), (200, &json!(2)), "{put}");
    // An identical put stores no version.
    let (_, same) = call(
        &server,
        M::PUT,
        "/v1/functions/classify",
        Some(classify("TWO")),
    )
    .await;
    assert_eq!(same["latest_version"], 2, "{same}");
    server.kill();

    let server = Server::start_scripted(dir.path(), &llm).await;
    let (status, refused) = call(
        &server,
        M::DELETE,
        "/v1/functions/classify/versions/1",
        None,
    )
    .await;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["detail"].as_str().unwrap().contains(&id),
        "names the run: {refused}"
    );
    let (status, _) = call(&server, M::DELETE, "/v1/functions/classify", None).await;
    assert_eq!(status, 409, "a run uses it");
    let fin = server.answered_to_final(&id, 2, "ask", json!("yes")).await;
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let sent = prompts(&llm);
    assert_eq!(
        sent.len(),
        2,
        "the sequential child and the loop body: {sent:?}"
    );
    assert!(
        sent.iter().all(|p| p.contains("ONE: label great")),
        "ran v1: {sent:?}"
    );

    // A new run takes version 2.
    let (_, run) = call(&server, M::POST, "/v1/runs", Some(body)).await;
    assert_eq!(function_pins(&run), ["classify v2"]);
    let id = run["id"].as_str().unwrap().to_owned();
    let fin = server.answered_to_final(&id, 1, "ask", json!("yes")).await;
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert!(
        prompts(&llm)[2].contains("TWO: label great"),
        "{:?}",
        prompts(&llm)
    );

    let (_, versions) = call(&server, M::GET, "/v1/functions/classify/versions", None).await;
    assert_eq!(versions["kind"], "function");
    assert_eq!(versions["versions"][1]["author"], "ana", "{versions}");
    let (_, diff) = call(&server, M::GET, "/v1/functions/classify/diff?from=1", None).await;
    assert_eq!(
        diff["changes"],
        json!([{ "op": "replace", "path": "/prompt", "value": "TWO: label {{ input.text }}" }])
    );
    let (status, _) = call(
        &server,
        M::PUT,
        "/v1/functions/classify/labels/stable",
        Some(json!({ "version": 1 })),
    )
    .await;
    assert_eq!(status, 200);
    let (_, stable) = call(
        &server,
        M::GET,
        "/v1/functions/classify/versions/stable",
        None,
    )
    .await;
    assert_eq!(
        stable["definition"]["prompt"],
        "ONE: label {{ input.text }}"
    );
}

#[tokio::test]
async fn functions_are_per_tenant_and_bad_ones_are_refused_with_a_pointer() {
    let llm = ScriptedLlm::start().await;
    llm.set_default_reply(Reply::text("fine"));
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        two_tenants(c, ["key-a-0123456789", "key-b-0123456789"]);
    })
    .await;
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
    assert_eq!(
        call(&a, M::PUT, "/v1/functions/secret", Some(classify("A")))
            .await
            .0,
        201
    );

    // Tenant b sees none of it, and its plans cannot call it.
    let (status, _) = call(&b, M::GET, "/v1/functions/secret", None).await;
    assert_eq!(status, 404);
    let (_, list) = call(&b, M::GET, "/v1/functions", None).await;
    assert!(!list.to_string().contains("secret"), "{list}");
    let plan = |f: &str| {
        json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
        { "id": "s", "kind": "sequential", "input": { "steps": [
            { "id": "c", "kind": "llm", "input": { "function": f, "arguments": { "text": "t" } } }
        ] } }
    ] } })
    };
    let (status, refused) = call(&b, M::POST, "/v1/runs", Some(plan("secret"))).await;
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["errors"][0]["pointer"]
            .as_str()
            .unwrap()
            .starts_with("/plan/steps/0"),
        "{refused}"
    );
    let (status, run) = call(&a, M::POST, "/v1/runs", Some(plan("secret"))).await;
    assert_eq!(status, 201, "{run}");
    assert_eq!(function_pins(&run), ["secret v1"]);
    // b cannot read, change or delete a's function through the versions either.
    let (status, _) = call(&b, M::GET, "/v1/functions/secret/versions", None).await;
    assert_eq!(status, 404);
    let (status, _) = call(&b, M::DELETE, "/v1/functions/secret", None).await;
    assert_eq!(status, 404);

    // Configured and built-in functions are not the API's to change.
    for name in ["planner", "summarizer"] {
        let (status, refused) = call(
            &a,
            M::PUT,
            &format!("/v1/functions/{name}"),
            Some(classify("X")),
        )
        .await;
        assert_eq!(
            (status, &refused["code"]),
            (409, &json!("conflict")),
            "{refused}"
        );
        let (status, _) = call(&a, M::DELETE, &format!("/v1/functions/{name}"), None).await;
        assert_eq!(status, 409);
    }
    let cases = [
        (json!({ "prompt": "label {{ input.text" }), "/prompt"),
        (json!({ "prompt": "x", "model": "huge" }), "/model"),
        (
            json!({ "prompt": "x", "output_schema": { "type": "nope" } }),
            "/output_schema",
        ),
        (json!({ "prompt": "x", "temperature": 2 }), "/temperature"),
        (json!({ "description": "no prompt" }), "/prompt"),
        (json!({ "name": "other", "prompt": "x" }), "/name"),
    ];
    for (body, pointer) in cases {
        let (status, refused) = call(&a, M::PUT, "/v1/functions/bad", Some(body.clone())).await;
        assert_eq!(status, 422, "{body}: {refused}");
        let pointers: Vec<&str> = (refused["errors"].as_array().unwrap().iter())
            .map(|e| e["pointer"].as_str().unwrap())
            .collect();
        assert!(pointers.contains(&pointer), "{body}: {refused}");
    }
    let (status, _) = call(&a, M::PUT, "/v1/functions/Bad%20Name", Some(classify("X"))).await;
    assert_eq!(status, 422);
    let (status, _) = call(&a, M::GET, "/v1/functions/bad", None).await;
    assert_eq!(status, 404, "nothing stored");

    // Once no run uses it, it goes with its versions.
    let fin = crate::support::app::poll_json(
        &a,
        &app.url(&format!("/v1/runs/{}", run["id"].as_str().unwrap())),
        |r| r["status"] == "succeeded",
    )
    .await;
    assert_eq!(fin["status"], "succeeded");
    assert_eq!(
        call(&a, M::DELETE, "/v1/functions/secret", None).await.0,
        204
    );
    let (status, _) = call(&a, M::GET, "/v1/functions/secret/versions", None).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn functions_apply_and_export_as_files_and_a_workflow_may_call_one_of_its_bundle() {
    let llm = ScriptedLlm::start().await;
    llm.set_default_reply(Reply::text("fine"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let call = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let (client, url) = (app.client.clone(), app.url(path));
        async move { send(&client, method, url, body.as_ref()).await }
    };
    use reqwest::Method as M;
    let workflow = json!({ "steps": [
        { "id": "p", "kind": "parallel", "input": { "steps": [
            { "id": "c", "kind": "llm", "input": { "function": "tag", "arguments": { "text": "t" } } }
        ] } }
    ] });
    let file = |path: &str, content: &Value| json!({ "path": path, "content": serde_json::to_string_pretty(content).unwrap() });
    let yaml = "prompt: 'tag {{ input.text }}'\ndescription: tags\n";
    // A schedule of the same bundle runs the workflow that calls the bundle's function: its
    // run body is checked with both in front of the registries.
    let schedule = json!({ "interval_ms": 3_600_000, "enabled": false,
        "run": { "input": "x", "orchestration": "fixed", "workflow": "tagging" } });
    let bundle = json!({ "files": [
        file("workflows/tagging.json", &workflow),
        { "path": "functions/tag.yaml", "content": yaml },
        file("schedules/tagger.json", &schedule)
    ] });
    let (status, applied) = call(M::POST, "/v1/apply", Some(bundle.clone())).await;
    assert_eq!(status, 200, "{applied}");
    let actions: Vec<String> = (applied["changes"].as_array().unwrap().iter())
        .map(|c| format!("{} {} {}", c["kind"], c["name"], c["action"]))
        .collect();
    assert_eq!(
        actions,
        [
            r#""workflow" "tagging" "created""#,
            r#""function" "tag" "created""#,
            r#""schedule" "tagger" "created""#
        ]
    );
    let run = json!({ "input": "x", "orchestration": "fixed", "workflow": "tagging" });
    let (status, started) = call(M::POST, "/v1/runs", Some(run)).await;
    assert_eq!(status, 201, "{started}");
    assert_eq!(function_pins(&started), ["tag v1"]);

    // A bad function file names itself and changes nothing.
    let bad = json!({ "files": [
        file("workflows/tagging.json", &json!({ "steps": [] })),
        file("functions/tag.json", &json!({ "prompt": "tag {{ input.text", "model": "huge" }))
    ] });
    let (status, refused) = call(M::POST, "/v1/apply", Some(bad)).await;
    assert_eq!(status, 422, "{refused}");
    let text = refused["errors"].to_string();
    assert!(
        text.contains("/files/1/content/prompt") && text.contains("/files/1/content/model"),
        "{text}"
    );
    assert!(text.contains("functions/tag.json: "), "{text}");
    let (_, tag) = call(M::GET, "/v1/functions/tag", None).await;
    assert_eq!(tag["latest_version"], 1, "nothing applied: {tag}");

    // Export writes functions/ back; applied again, nothing changes.
    let (_, exported) = call(M::GET, "/v1/export", None).await;
    let paths: Vec<&str> = (exported["files"].as_array().unwrap().iter())
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"functions/tag.json"), "{exported}");
    let (_, again) = call(
        M::POST,
        "/v1/apply",
        Some(json!({ "files": exported["files"] })),
    )
    .await;
    assert!(
        (again["changes"].as_array().unwrap().iter()).all(|c| c["action"] == "unchanged"),
        "{again}"
    );
    // A workflow naming a function no file declares and the tenant lacks is refused.
    let dangling = json!({ "files": [file("workflows/other.json", &json!({ "steps": [
        { "id": "c", "kind": "llm", "input": { "function": "missing", "arguments": {} } }
    ] }))] });
    let (status, refused) = call(M::POST, "/v1/apply", Some(dangling)).await;
    assert_eq!(status, 422, "{refused}");
}

#[tokio::test]
async fn a_step_names_a_function_at_a_version_or_label_and_keeps_it_when_the_label_moves() {
    let llm = ScriptedLlm::start().await;
    llm.set_default_reply(Reply::text("positive"));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let call = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let (client, url) = (app.client.clone(), app.url(path));
        async move { send(&client, method, url, body.as_ref()).await }
    };
    use reqwest::Method as M;
    for word in ["ONE", "TWO"] {
        let (status, _) = call(M::PUT, "/v1/functions/classify", Some(classify(word))).await;
        assert!(status < 300);
    }
    let stable = Some(json!({ "version": 1 }));
    assert_eq!(
        call(M::PUT, "/v1/functions/classify/labels/stable", stable)
            .await
            .0,
        200
    );

    // `classify@stable` in a sequential child, `classify@1` in a loop body: one version.
    let mut plan = nested_call("classify@stable");
    plan["steps"][2]["input"]["steps"][0]["input"]["function"] = json!("classify@1");
    let body = json!({ "input": "x", "orchestration": "fixed", "plan": plan });
    let (status, run) = call(M::POST, "/v1/runs", Some(body)).await;
    assert_eq!(status, 201, "{run}");
    assert_eq!(function_pins(&run), ["classify v1"]);
    let id = run["id"].as_str().unwrap().to_owned();
    let (_, got) = call(M::GET, &format!("/v1/runs/{id}"), None).await;
    let stored = &got["request"]["plan"]["steps"][1]["input"]["steps"][0]["input"]["function"];
    assert_eq!(
        stored, "classify",
        "the stored plan names the bare function: {got}"
    );
    // The label moves while the run waits: the run keeps version 1.
    let two = Some(json!({ "version": 2 }));
    assert_eq!(
        call(M::PUT, "/v1/functions/classify/labels/stable", two)
            .await
            .0,
        200
    );
    let events = app.url(&format!("/v1/runs/{id}/events"));
    crate::support::app::poll_json(&app.client, &app.url(&format!("/v1/runs/{id}")), |r| {
        r["status"] == "waiting_input"
    })
    .await;
    let answer = json!({ "step_id": "ask", "value": "yes" });
    let (status, answered) = call(M::POST, &format!("/v1/runs/{id}/input"), Some(answer)).await;
    assert!(status < 300, "{answered}");
    let fin =
        crate::support::app::poll_json(&app.client, &app.url(&format!("/v1/runs/{id}")), |r| {
            r["status"] == "succeeded" || r["status"] == "failed"
        })
        .await;
    assert_eq!(fin["status"], "succeeded", "{fin} ({events})");
    let sent = prompts(&llm);
    assert!(
        sent.len() == 2 && sent.iter().all(|p| p.contains("ONE: label")),
        "{sent:?}"
    );

    // A registered workflow may name one too (stored as written); its runs read that version.
    let workflow = json!({ "steps": [{ "id": "p", "kind": "parallel", "input": { "steps": [
        { "id": "c", "kind": "llm", "input": { "function": "classify@stable", "arguments": { "text": "t" } } }
    ] } }] });
    let (status, put) = call(M::PUT, "/v1/workflows/tagging", Some(workflow)).await;
    assert_eq!(status, 201, "{put}");
    let run = json!({ "input": "x", "orchestration": "fixed", "workflow": "tagging" });
    let (status, started) = call(M::POST, "/v1/runs", Some(run)).await;
    assert_eq!(status, 201, "{started}");
    assert_eq!(
        function_pins(&started),
        ["classify v2"],
        "stable points at 2 now"
    );

    // Bad references: each refused at its pointer, no run stored.
    let (_, before) = call(M::GET, "/v1/runs", None).await;
    let one_step = |f: &str| {
        json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
        { "id": "s", "kind": "sequential", "input": { "steps": [
            { "id": "c", "kind": "llm", "input": { "function": f, "arguments": { "text": "t" } } },
            { "id": "d", "kind": "llm", "input": { "function": "classify@1", "arguments": { "text": "t" } } }
        ] } }
    ] } })
    };
    let cases = [
        ("classify@9", "no version 9"),
        ("classify@gone", "no label `gone`"),
        ("classify@2", "a run uses one version of each function"),
        ("classify", "a run uses one version of each function"),
        ("planner@1", "no declared function `planner`"),
    ];
    for (reference, says) in cases {
        let (status, refused) = call(M::POST, "/v1/runs", Some(one_step(reference))).await;
        assert_eq!(status, 422, "{reference}: {refused}");
        let errors = refused["errors"].to_string();
        assert!(errors.contains(says), "{reference}: {errors}");
        assert!(
            errors.contains("/plan/steps/0/input/steps/"),
            "{reference}: {errors}"
        );
    }
    let (_, unknown) = call(M::POST, "/v1/runs", Some(one_step("classify@9"))).await;
    let message = unknown["errors"].to_string();
    assert!(
        message.contains("1, 2") && message.contains("stable"),
        "lists what there is: {message}"
    );
    let (_, after) = call(M::GET, "/v1/runs", None).await;
    assert_eq!(
        before["runs"].as_array().map(Vec::len),
        after["runs"].as_array().map(Vec::len)
    );
}
