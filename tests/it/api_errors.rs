//! Every error code of the contract, as problem+json, never a 500 for bad input.

use orca::config::ApiKey;
use serde_json::{Value, json};

use crate::support::*;

async fn problem(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/problem+json"
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["status"], status);
    for field in ["type", "title", "detail", "code"] {
        assert!(body[field].is_string(), "{field} in {body}");
    }
    (status, body)
}

#[tokio::test]
async fn malformed_json_is_400_invalid_json() {
    let app = spawn_app(|_| {}).await;
    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .header("content-type", "application/json")
        .body("{\"input\": ")
        .send()
        .await
        .unwrap();
    let (status, body) = problem(resp).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid_json")));
}

#[tokio::test]
async fn schema_violations_are_422_with_every_pointer() {
    let app = spawn_app(|_| {}).await;
    let cases = [
        (json!({}), vec!["/input"]),
        (json!({ "input": "" }), vec!["/input"]),
        (json!({ "input": 5 }), vec!["/input"]),
        (
            json!({ "input": "hi", "orchestration": "magic" }),
            vec!["/orchestration"],
        ),
        (
            json!({ "input": "hi", "limits": { "max_steps": 0, "bogus": 1 } }),
            vec!["/limits/max_steps", "/limits/bogus"],
        ),
        (json!({ "input": "hi", "colour": "blue" }), vec!["/colour"]),
        (
            json!({ "input": "hi", "model": "gpt-nine" }),
            vec!["/model"],
        ),
        (
            json!({ "input": "hi", "tools": ["clock.now", "nope"] }),
            vec!["/tools/1"],
        ),
        (json!({ "input": "hi", "workflow": "x" }), vec!["/workflow"]),
        (json!([1, 2]), vec![""]),
    ];
    for (body, pointers) in cases {
        let resp = app
            .client
            .post(app.url("/v1/runs"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let (status, problem) = problem(resp).await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(problem["code"], "validation_failed");
        let got: Vec<&str> = problem["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["pointer"].as_str().unwrap())
            .collect();
        for p in pointers {
            assert!(got.contains(&p), "{body}: wanted {p} in {got:?}");
        }
    }
}

#[tokio::test]
async fn unknown_ids_are_404_and_a_terminal_cancel_is_409() {
    let app = spawn_app(|_| {}).await;
    for path in [
        "/v1/runs/not-a-uuid",
        "/v1/runs/0190a0a0-0000-7000-8000-000000000000",
        "/v1/runs/0190a0a0-0000-7000-8000-000000000000/events",
        "/v1/runs/0190a0a0-0000-7000-8000-000000000000/steps",
        "/v1/nothing-here",
    ] {
        let resp = app.client.get(app.url(path)).send().await.unwrap();
        let (status, body) = problem(resp).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (404, Some("not_found")),
            "{path}"
        );
    }
    let events = app.stream_run(json!({ "input": "hello" })).await;
    let id = events[0].json()["run_id"].as_str().unwrap().to_owned();
    let resp = app
        .client
        .post(app.url(&format!("/v1/runs/{id}/cancel")))
        .send()
        .await
        .unwrap();
    let (status, body) = problem(resp).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("conflict")));
}

#[tokio::test]
async fn an_oversize_body_is_413_and_a_wrong_media_type_415() {
    let app = spawn_app(|c| c.server.body_limit_bytes = 4096).await;
    let big = json!({ "input": "x".repeat(10_000) });
    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .json(&big)
        .send()
        .await
        .unwrap();
    let (status, body) = problem(resp).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (413, Some("payload_too_large"))
    );

    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .header("content-type", "text/plain")
        .body("{\"input\":\"hi\"}")
        .send()
        .await
        .unwrap();
    let (status, body) = problem(resp).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (415, Some("unsupported_media_type"))
    );
}

#[tokio::test]
async fn bad_query_parameters_are_422() {
    let app = spawn_app(|_| {}).await;
    for (query, pointer) in [
        ("status=sleeping", "/query/status"),
        ("limit=500", "/query/limit"),
        ("limit=0", "/query/limit"),
        ("cursor=zzz", "/query/cursor"),
        ("created_after=yesterday", "/query/created_after"),
        ("colour=blue", "/query/colour"),
    ] {
        let resp = app
            .client
            .get(app.url(&format!("/v1/runs?{query}")))
            .send()
            .await
            .unwrap();
        let (status, body) = problem(resp).await;
        assert_eq!(status, 422, "{query}");
        assert_eq!(body["errors"][0]["pointer"], pointer, "{query}");
    }
}

#[tokio::test]
async fn api_keys_gate_access_and_tenants_are_isolated() {
    let key_a = "key-for-team-a-0123456789";
    let key_b = "key-for-team-b-0123456789";
    let app = spawn_app(|c| {
        c.auth.api_keys = vec![
            ApiKey {
                user: None,
                key: orca::config::Secret::new(key_a),
                tenant: "a".into(),
            },
            ApiKey {
                user: None,
                key: orca::config::Secret::new(key_b),
                tenant: "b".into(),
            },
        ];
    })
    .await;

    // No key, a wrong key: 401. Health stays open.
    for auth in [None, Some("Bearer wrong-key-000000000000")] {
        let mut req = app.client.get(app.url("/v1/runs"));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let (status, body) = problem(req.send().await.unwrap()).await;
        assert_eq!((status, body["code"].as_str()), (401, Some("unauthorized")));
    }
    assert_eq!(
        app.client
            .get(app.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .bearer_auth(key_a)
        .json(&json!({ "input": "hello" }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let run: Value = resp.json().await.unwrap();
    let id = run["id"].as_str().unwrap();

    // Tenant a sees it (also with X-API-Key); tenant b does not, by id or in its list.
    let resp = app
        .client
        .get(app.url(&format!("/v1/runs/{id}")))
        .header("x-api-key", key_a)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let resp = app
        .client
        .get(app.url(&format!("/v1/runs/{id}")))
        .bearer_auth(key_b)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let list: Value = app
        .client
        .get(app.url("/v1/runs"))
        .bearer_auth(key_b)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["runs"], json!([]));
    let resp = app
        .client
        .post(app.url(&format!("/v1/runs/{id}/cancel")))
        .bearer_auth(key_b)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
}

#[tokio::test]
async fn a_full_queue_is_503_with_retry_after() {
    let app = spawn_app(|c| c.engine.max_queued_runs = 0).await;
    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .json(&json!({ "input": "hello" }))
        .send()
        .await
        .unwrap();
    assert!(resp.headers().contains_key("retry-after"));
    let (status, body) = problem(resp).await;
    assert_eq!((status, body["code"].as_str()), (503, Some("overloaded")));
}

#[tokio::test]
async fn responses_carry_a_request_id() {
    let app = spawn_app(|_| {}).await;
    let resp = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert!(resp.headers().contains_key("x-request-id"));
    let resp = app
        .client
        .get(app.url("/healthz"))
        .header("x-request-id", "abc-123")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-request-id"], "abc-123");
}

#[tokio::test]
async fn json_bodies_need_a_json_content_type() {
    let app = spawn_app(|_| {}).await;
    let body = r#"{"input": "hello"}"#;
    // What a cross-site form or a no-cors fetch can send without a preflight, and no type.
    for content_type in [
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        for (method, path) in [
            (reqwest::Method::POST, "/v1/runs"),
            (
                reqwest::Method::POST,
                "/v1/runs/0190a0a0-0000-7000-8000-000000000000/input",
            ),
            (reqwest::Method::PUT, "/v1/workflows/hello"),
        ] {
            let mut req = app.client.request(method.clone(), app.url(path)).body(body);
            if let Some(ct) = content_type {
                req = req.header("content-type", ct);
            }
            let (status, problem) = problem(req.send().await.unwrap()).await;
            assert_eq!(
                (status, problem["code"].as_str()),
                (415, Some("unsupported_media_type")),
                "{method} {path} with {content_type:?}"
            );
        }
    }
    let (status, runs) = app.get_json("/v1/runs").await;
    assert_eq!(
        (status, &runs["runs"]),
        (200, &json!([])),
        "no run was created"
    );

    for content_type in [
        "application/json",
        "application/json; charset=utf-8",
        "application/vnd.orca.run+json",
    ] {
        let resp = app
            .client
            .post(app.url("/v1/runs"))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201, "{content_type}");
    }
}

#[tokio::test]
async fn extractor_rejections_are_problems_with_a_pointer() {
    let app = spawn_app(|_| {}).await;
    let run = app.create_run(json!({ "input": "hello" })).await;
    let id = run["id"].as_str().unwrap();
    for (path, pointer) in [
        (
            format!("/v1/runs/{id}/events?after=1&after=2"),
            "/query/after",
        ),
        (
            "/v1/runs?status=queued&status=running".to_owned(),
            "/query/status",
        ),
        ("/v1/runs/%FF%FE".to_owned(), "/path/id"),
        ("/v1/workflows/%C3%28".to_owned(), "/path/name"),
    ] {
        let resp = app.client.get(app.url(&path)).send().await.unwrap();
        let (status, body) = problem(resp).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (422, Some("validation_failed")),
            "{path}: {body}"
        );
        assert_eq!(body["errors"][0]["pointer"], pointer, "{path}: {body}");
    }
}

#[tokio::test]
async fn type_errors_point_at_the_field() {
    let app = spawn_app(|_| {}).await;
    // Integers by JSON Schema's measure, but not ones the typed request can hold.
    for (body, pointer) in [
        (
            json!({ "input": "hi", "limits": { "max_steps": 2.0 } }),
            "/limits/max_steps",
        ),
        (
            json!({ "input": "hi", "limits": { "max_tokens": 1e30 } }),
            "/limits/max_tokens",
        ),
    ] {
        let resp = app
            .client
            .post(app.url("/v1/runs"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let (status, problem) = problem(resp).await;
        assert_eq!(status, 422, "{body}: {problem}");
        assert_eq!(
            problem["errors"][0]["pointer"], pointer,
            "{body}: {problem}"
        );
    }
}

#[tokio::test]
async fn unsupported_methods_are_405_with_an_allow_header() {
    let app = spawn_app(|_| {}).await;
    for (method, path, allowed) in [
        ("DELETE", "/v1/runs", &["GET", "POST"][..]),
        (
            "PATCH",
            "/v1/workflows/hello",
            &["GET", "PUT", "DELETE"][..],
        ),
        (
            "GET",
            "/v1/runs/0190a0a0-0000-7000-8000-000000000000/cancel",
            &["POST"][..],
        ),
        ("TRACE", "/healthz", &["GET"][..]),
        ("OPTIONS", "/v1/tools", &["GET"][..]),
    ] {
        let resp = app
            .client
            .request(method.parse().unwrap(), app.url(path))
            .send()
            .await
            .unwrap();
        let allow: Vec<String> = resp
            .headers()
            .get("allow")
            .map(|v| {
                v.to_str()
                    .unwrap()
                    .split(',')
                    .map(|m| m.trim().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        let (status, body) = problem(resp).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (405, Some("method_not_allowed")),
            "{method} {path}"
        );
        for m in allowed {
            assert!(
                allow.iter().any(|a| a == m),
                "{method} {path}: Allow {allow:?}"
            );
        }
        assert!(
            !allow.iter().any(|a| a == method),
            "{method} {path}: Allow {allow:?}"
        );
    }
}

#[tokio::test]
async fn no_operating_system_error_text_reaches_a_response() {
    // A provider on a port nothing listens on: the connection is refused by the OS.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let app = spawn_app(|c| {
        c.llm.provider = orca::config::ProviderChoice::Openai;
        c.llm.openai.base_url = format!("http://127.0.0.1:{port}/v1");
        c.llm.openai.max_retries = 0;
        c.llm.openai.connect_timeout_ms = 1_000;
    })
    .await;
    let events = app.stream_run(json!({ "input": "hello" })).await;
    let id = events[0].json()["run_id"].as_str().unwrap().to_owned();
    let fin = final_data(&events);
    assert_eq!(fin["status"], "failed", "{fin}");
    let (_, run) = app.get_json(&format!("/v1/runs/{id}")).await;
    let message = run["error"]["message"].as_str().unwrap();
    assert!(message.contains("refused"), "the reason stays: {message}");
    for text in [
        run.to_string(),
        serde_json::to_string(&app.history(&id).await).unwrap(),
        app.get_json(&format!("/v1/runs/{id}/steps"))
            .await
            .1
            .to_string(),
    ] {
        assert!(!text.contains("os error"), "{text}");
    }
}

/// A mistake is answered with what would be right: every valid value with the nearest one, the
/// nearest known field, the workflows and agents that exist, how to send a key.
#[tokio::test]
async fn errors_teach_what_is_right() {
    let key = "k-0123456789abcdef";
    let app = spawn_app(|c| {
        c.auth.api_keys = vec![ApiKey {
            user: None,
            key: orca::config::Secret::new(key),
            tenant: "a".into(),
        }];
    })
    .await;
    let send = |req: reqwest::RequestBuilder| req.bearer_auth(key).send();
    let message = |body: &Value, pointer: &str| -> String {
        body["errors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["pointer"] == pointer)
            .unwrap_or_else(|| panic!("{pointer}: {body}"))["message"]
            .as_str()
            .unwrap()
            .to_owned()
    };

    let typo = json!({ "input": "x", "orchestration": "planer", "limit": { "max_steps": 3 } });
    let (status, body) = problem(
        send(app.client.post(app.url("/v1/runs")).json(&typo))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 422);
    let orchestration = message(&body, "/orchestration");
    for value in ["auto", "simple", "fixed", "planner", "reactive"] {
        assert!(
            orchestration.contains(&format!("`{value}`")),
            "{orchestration}"
        );
    }
    assert!(
        orchestration.ends_with("did you mean `planner`?"),
        "{orchestration}"
    );
    let limit = message(&body, "/limit");
    assert!(limit.contains("did you mean `limits`?"), "{limit}");

    let workflow = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/workflows/publish-report.json"
    ))
    .unwrap();
    let workflow: Value = serde_json::from_str(&workflow).unwrap();
    let put = send(
        app.client
            .put(app.url("/v1/workflows/publish-report"))
            .json(&workflow),
    );
    assert!(put.await.unwrap().status().is_success());
    let run = json!({ "input": {}, "workflow": "publsh-report" });
    let (_, body) = problem(
        send(app.client.post(app.url("/v1/runs")).json(&run))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        message(&body, "/workflow"),
        "no workflow `publsh-report`: did you mean `publish-report`? (known: `publish-report`)"
    );

    let agent = json!({ "description": "Bills.", "instructions": "You bill." });
    let put = send(app.client.put(app.url("/v1/agents/billing")).json(&agent));
    assert!(put.await.unwrap().status().is_success());
    let (status, body) = problem(
        send(app.client.get(app.url("/v1/agents/biling")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains("did you mean `billing`?"), "{detail}");

    let (status, body) = problem(app.client.get(app.url("/v1/runs")).send().await.unwrap()).await;
    assert_eq!(status, 401);
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("Authorization: Bearer") && detail.contains("X-API-Key"),
        "{detail}"
    );
}

/// A plan's mistakes are told with what was meant: the nearest step kind and declared agent,
/// and a plan (or workflow) sent as a bare list of steps is told to wrap them.
#[tokio::test]
async fn plan_errors_say_what_was_meant() {
    let app = spawn_app(|_| {}).await;
    let refused = |body: Value, path: &'static str, put: bool| {
        let app = &app;
        async move {
            let req = if put {
                app.client.put(app.url(path))
            } else {
                app.client.post(app.url(path))
            };
            let (status, body) = problem(req.json(&body).send().await.unwrap()).await;
            assert_eq!(status, 422, "{body}");
            body["errors"].as_array().unwrap().clone()
        }
    };
    let message = |errors: &[Value], pointer: &str| -> String {
        let found = errors.iter().find(|e| e["pointer"] == pointer);
        let found = found.unwrap_or_else(|| panic!("{pointer}: {errors:?}"));
        found["message"].as_str().unwrap().to_owned()
    };
    let calc = json!({"tool": "math.calculate", "arguments": {"expression": "1 + 1"}});

    let kind =
        json!({"input": "x", "plan": {"steps": [{"id": "a", "kind": "tol", "input": calc}]}});
    let errors = refused(kind, "/v1/runs", false).await;
    assert!(
        message(&errors, "/plan/steps/0/kind").ends_with("; `tol`: did you mean `tool`?"),
        "{errors:?}"
    );

    let agent = json!({"input": "x", "plan": {
        "agents": {"bilingual": {"instructions": "You translate."}},
        "steps": [{"id": "a", "kind": "agent", "input": {"agent": "biling", "prompt": "hi"}}]}});
    let errors = refused(agent, "/v1/runs", false).await;
    assert_eq!(
        message(&errors, "/plan/steps/0/input/agent"),
        "no agent named `biling`: did you mean `bilingual`? \
         (define it in the plan's `agents` or PUT /v1/agents/biling)"
    );

    // A registered agent is offered too, though the plan defines none.
    let put = app.client.put(app.url("/v1/agents/billing"));
    let put = put.json(&json!({"instructions": "You bill."})).send().await;
    assert!(put.unwrap().status().is_success());
    let agent = json!({"input": "x", "plan": {
        "steps": [{"id": "a", "kind": "agent", "input": {"agent": "biling", "prompt": "hi"}}]}});
    let errors = refused(agent, "/v1/runs", false).await;
    assert_eq!(
        message(&errors, "/plan/steps/0/input/agent"),
        "no agent named `biling`: did you mean `billing`? \
         (define it in the plan's `agents` or PUT /v1/agents/biling)"
    );

    let steps = json!([{"id": "a", "kind": "tool", "input": calc}]);
    let errors = refused(json!({"input": "x", "plan": steps}), "/v1/runs", false).await;
    assert_eq!(
        message(&errors, "/plan"),
        r#"a plan is an object with its steps under `steps`: wrap a list of steps as {"steps": [...]}"#
    );
    let errors = refused(steps, "/v1/workflows/sum", true).await;
    assert_eq!(
        message(&errors, ""),
        r#"a workflow is an object with its steps under `steps`: wrap a list of steps as {"name": "...", "steps": [...]}"#
    );
}
