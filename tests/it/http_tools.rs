//! HTTP tools declared as data, called against a real HTTP server on loopback: from the config
//! and through the API, from plan steps and by the model, with secrets from the environment,
//! caps on size and time, and the destination guard facing redirects and other spellings of
//! addresses it must refuse. The address corpus itself is a unit test in
//! `src/tools/http/guard.rs`.

use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use orca::config::{ApiKey, Config, Secret};
use orca::tools::http::HttpToolSpec;
use serde_json::{Value, json};

use crate::support::app::{TestApp, final_data, spawn_app, spawn_app_in, use_scripted};
use crate::support::scripted_llm::{Reply, ScriptedLlm};

/// The secret header value the tools send: an environment variable cargo sets for tests.
const SECRET_VAR: &str = "CARGO_MANIFEST_DIR";

fn secret() -> String {
    std::env::var(SECRET_VAR).expect("cargo sets CARGO_MANIFEST_DIR")
}

/// A target server on loopback; its address, and one of a second server that must stay
/// unreachable.
async fn target() -> (String, String) {
    let expected = format!("Bearer {}", secret());
    let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other_addr = other.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        axum::serve(other, Router::new().route("/", get(|| async { "reached" }))).await
    });
    let to_other = format!("http://{other_addr}/");
    let to_other_name = format!(
        "http://localhost:{}/",
        other_addr.rsplit(':').next().unwrap()
    );
    let app = Router::new()
        .route(
            "/weather/{city}",
            get(
                move |Path(city): Path<String>, headers: HeaderMap| async move {
                    let auth = headers
                        .get(header::AUTHORIZATION)
                        .and_then(|v| v.to_str().ok())
                        == Some(expected.as_str());
                    axum::Json(json!({"city": city, "authorized": auth}))
                },
            ),
        )
        .route("/echo", post(|body: axum::Json<Value>| async move { body }))
        .route("/big", get(|| async { "x".repeat(200_000) }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(10)).await;
                "late"
            }),
        )
        .route(
            "/teapot",
            get(|| async { (StatusCode::IM_A_TEAPOT, "no coffee") }),
        )
        .route(
            "/to-metadata",
            get(|| async {
                (
                    StatusCode::FOUND,
                    [(header::LOCATION, "http://169.254.169.254/latest/meta-data/")],
                )
            }),
        )
        .route(
            "/to-other",
            get(move || async move {
                (StatusCode::FOUND, [(header::LOCATION, to_other)]).into_response()
            }),
        )
        .route(
            "/to-other-name",
            get(move || async move {
                (StatusCode::FOUND, [(header::LOCATION, to_other_name)]).into_response()
            }),
        )
        .route("/deep/{p}/x", get(|Path(p): Path<String>| async move { p }))
        .route("/x", get(|| async { "climbed out of the segment" }))
        .route(
            "/to-weather",
            get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/weather/Oslo")]) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, other_addr)
}

fn spec(name: &str, method: &str, url: String, schema: Value) -> HttpToolSpec {
    serde_json::from_value(json!({
        "name": name, "description": format!("test tool {name}"), "method": method, "url": url,
        "headers": {"Authorization": format!("Bearer ${{{SECRET_VAR}}}")},
        "input_schema": schema, "max_response_bytes": 100_000, "timeout_ms": 500,
    }))
    .unwrap()
}

fn no_args() -> Value {
    json!({"type": "object", "properties": {}})
}

/// The tools of these tests, all aimed at the target (`127.0.0.1:PORT` is allowed).
fn configure(c: &mut Config, addr: &str) {
    let city =
        json!({"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}});
    c.tools.http_allow = vec![addr.to_owned()];
    c.tools.http = vec![
        spec(
            "weather.get",
            "GET",
            format!("http://{addr}/weather/{{city}}"),
            city,
        ),
        spec(
            "echo.post",
            "POST",
            format!("http://{addr}/echo"),
            json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
        ),
        spec("big.get", "GET", format!("http://{addr}/big"), no_args()),
        spec("slow.get", "GET", format!("http://{addr}/slow"), no_args()),
        spec(
            "teapot.get",
            "GET",
            format!("http://{addr}/teapot"),
            no_args(),
        ),
        spec(
            "redirect.metadata",
            "GET",
            format!("http://{addr}/to-metadata"),
            no_args(),
        ),
        spec(
            "redirect.other",
            "GET",
            format!("http://{addr}/to-other"),
            no_args(),
        ),
        spec(
            "redirect.weather",
            "GET",
            format!("http://{addr}/to-weather"),
            no_args(),
        ),
        spec(
            "named.localhost",
            "GET",
            format!(
                "http://localhost:{}/weather/x",
                addr.rsplit(':').next().unwrap()
            ),
            no_args(),
        ),
        spec(
            "mapped.loopback",
            "GET",
            format!(
                "http://[::ffff:127.0.0.1]:{}/weather/x",
                addr.rsplit(':').next().unwrap()
            ),
            no_args(),
        ),
        spec(
            "decimal.loopback",
            "GET",
            format!(
                "http://2130706433:{}/weather/dec",
                addr.rsplit(':').next().unwrap()
            ),
            no_args(),
        ),
    ];
}

/// Runs one tool step; the final event's data.
async fn call(app: &TestApp, tool: &str, arguments: Value) -> Value {
    let plan = json!({"steps": [{"id": "call", "kind": "tool", "input": {"tool": tool, "arguments": arguments}}]});
    let events = app
        .stream_run(json!({"input": "x", "orchestration": "fixed", "plan": plan}))
        .await;
    let all: String = events.iter().map(|e| e.json().to_string()).collect();
    assert!(!all.contains(&secret()), "the secret reached the events");
    final_data(&events)
}

/// Posts a one-step plan without following it: the status and body.
async fn plan_status(app: &TestApp, tool: &str, arguments: Value) -> (u16, Value) {
    let plan = json!({"steps": [{"id": "call", "kind": "tool", "input": {"tool": tool, "arguments": arguments}}]});
    app.post_json(
        "/v1/runs",
        &json!({"input": "x", "orchestration": "fixed", "plan": plan}),
    )
    .await
}

#[tokio::test]
async fn configured_http_tools_are_called_with_secrets_from_the_environment() {
    let (addr, _) = target().await;
    let app = spawn_app(|c| configure(c, &addr)).await;
    let fin = call(&app, "weather.get", json!({"city": "São Paulo/Centro"})).await;
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(
        fin["output"],
        json!({"city": "São Paulo/Centro", "authorized": true}),
        "encoded into one path segment"
    );
    let fin = call(&app, "echo.post", json!({"n": 7})).await;
    assert_eq!(fin["output"], json!({"n": 7}));
    let fin = call(&app, "redirect.weather", json!({})).await;
    assert_eq!(
        fin["output"]["city"], "Oslo",
        "a redirect to an allowed place is followed"
    );
    let fin = call(&app, "decimal.loopback", json!({})).await;
    assert_eq!(
        fin["output"]["city"], "dec",
        "2130706433 is 127.0.0.1, which is allowed on this port"
    );

    let (_, tools) = app.get_json("/v1/tools").await;
    let listed = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "weather.get")
        .unwrap();
    assert_eq!(listed["input_schema"]["required"], json!(["city"]));
    assert!(!tools.to_string().contains(&secret()));
    let (status, problem) = plan_status(&app, "weather.get", json!({"town": "x"})).await;
    assert_eq!(
        status, 422,
        "arguments checked against the declared schema: {problem}"
    );
}

#[tokio::test]
async fn the_model_calls_an_http_tool() {
    let (addr, _) = target().await;
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::tool_call("weather.get", json!({"city": "Lima"})));
    llm.push(Reply::text("It is sunny in Lima."));
    let app = spawn_app(|c| {
        configure(c, &addr);
        use_scripted(c, &llm);
    })
    .await;
    let events = app
        .stream_run(json!({"input": "weather in Lima?", "orchestration": "simple"}))
        .await;
    let result = events
        .iter()
        .find(|e| e.kind() == "tool_result")
        .expect("a tool result")
        .json();
    assert_eq!(
        result["data"]["output"],
        json!({"city": "Lima", "authorized": true})
    );
    assert_eq!(final_data(&events)["output"], "It is sunny in Lima.");
}

#[tokio::test]
async fn redirects_names_and_spellings_that_lead_elsewhere_are_refused() {
    let (addr, _other) = target().await;
    let app = spawn_app(|c| configure(c, &addr)).await;
    for tool in [
        "redirect.metadata",
        "redirect.other",
        "named.localhost",
        "mapped.loopback",
    ] {
        let fin = call(&app, tool, json!({})).await;
        assert_eq!(fin["status"], "failed", "{tool}: {fin}");
        assert_eq!(
            fin["error"]["code"], "destination_not_allowed",
            "{tool}: {fin}"
        );
    }
}

#[tokio::test]
async fn response_size_time_and_status_are_capped_and_reported() {
    let (addr, _) = target().await;
    let app = spawn_app(|c| configure(c, &addr)).await;
    let cases = [
        ("big.get", "response_too_large"),
        ("slow.get", "tool_timeout"),
        ("teapot.get", "http_client_error"),
    ];
    for (tool, code) in cases {
        let fin = call(&app, tool, json!({})).await;
        assert_eq!(fin["error"]["code"], code, "{tool}: {fin}");
    }
    let fin = call(&app, "teapot.get", json!({})).await;
    assert!(
        fin["error"]["message"].as_str().unwrap().contains("418"),
        "{fin}"
    );
}

async fn put(app: &TestApp, name: &str, body: &Value) -> (u16, Value) {
    let response = app
        .client
        .put(app.url(&format!("/v1/tools/{name}")))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn tools_declared_through_the_api_are_checked_stored_and_survive_a_restart() {
    let (addr, _) = target().await;
    let declared = json!({
        "description": "The weather, declared through the API.", "url": format!("http://{addr}/weather/{{city}}"),
        "headers": {"Authorization": format!("Bearer ${{{SECRET_VAR}}}")},
        "input_schema": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}},
    });
    let closed = spawn_app(|c| c.tools.http_allow = vec![addr.clone()]).await;
    let (status, problem) = put(&closed, "weather.api", &declared).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (403, Some("forbidden")),
        "off by default"
    );

    let app = spawn_app(|c| {
        c.tools.http_api = true;
        c.tools.http_api_env = vec![SECRET_VAR.into()];
        c.tools.http_allow = vec![addr.clone()];
    })
    .await;
    let bad = [
        (
            json!({"url": "http://{host}/x", "input_schema": {"type": "object", "properties": {"host": {}}}}),
            "/url",
        ),
        (json!({"url": "http://example.com/{city}"}), "/url"),
        (json!({"url": "ftp://example.com/"}), "/url"),
        (
            json!({"url": "http://example.com/", "method": "TRACE"}),
            "/method",
        ),
        (
            json!({"url": "http://example.com/", "headers": {"Host": "x"}}),
            "/headers/Host",
        ),
        (json!({"url": "http://example.com/a/../b"}), "/url"),
        (json!({"url": "http://example.com/a/%2E/b"}), "/url"),
        (
            json!({"url": "http://example.com/", "timeout_ms": 0}),
            "/timeout_ms",
        ),
        (
            json!({"url": "http://example.com/", "name": "other.name"}),
            "/name",
        ),
        (
            json!({"url": "http://example.com/", "input_schema": {"type": "object", "minProperties": "x"}}),
            "/input_schema",
        ),
    ];
    for (body, pointer) in bad {
        let (status, problem) = put(&app, "weather.api", &body).await;
        assert_eq!(status, 422, "{body}: {problem}");
        assert!(
            problem["errors"].to_string().contains(pointer),
            "{body}: {problem}"
        );
    }
    let (status, _) = put(&app, "math.calculate", &declared).await;
    assert_eq!(status, 409, "a built-in cannot be replaced");

    let (status, detail) = put(&app, "weather.api", &declared).await;
    assert_eq!(status, 201, "{detail}");
    assert_eq!(detail["http"]["headers"]["Authorization"], "<hidden>");
    let fin = call(&app, "weather.api", json!({"city": "Quito"})).await;
    assert_eq!(fin["output"], json!({"city": "Quito", "authorized": true}));

    let dir = app.stop().await;
    let app = spawn_app_in(dir, |c| {
        c.tools.http_api = true;
        c.tools.http_api_env = vec![SECRET_VAR.into()];
        c.tools.http_allow = vec![addr.clone()];
    })
    .await;
    let (status, detail) = app.get_json("/v1/tools/weather.api").await;
    assert_eq!(status, 200, "still declared after a restart: {detail}");
    let fin = call(&app, "weather.api", json!({"city": "Cusco"})).await;
    assert_eq!(fin["output"]["city"], "Cusco");
    let gone = app
        .client
        .delete(app.url("/v1/tools/weather.api"))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 204);
    let (status, _) = app.get_json("/v1/tools/weather.api").await;
    assert_eq!(status, 404);
    let (status, _) = plan_status(&app, "weather.api", json!({"city": "Cusco"})).await;
    assert_eq!(status, 422, "a removed tool is unknown to new plans");
}

#[tokio::test]
async fn a_name_allowed_with_a_port_opens_that_port_only() {
    let (addr, other) = target().await;
    let port = addr.rsplit(':').next().unwrap().to_owned();
    let other_port = other.rsplit(':').next().unwrap().to_owned();
    let app = spawn_app(|c| {
        c.tools.http_allow = vec![format!("localhost:{port}")];
        c.tools.http = vec![
            spec(
                "named.allowed",
                "GET",
                format!("http://localhost:{port}/weather/named"),
                no_args(),
            ),
            spec(
                "named.other_port",
                "GET",
                format!("http://localhost:{other_port}/"),
                no_args(),
            ),
            spec(
                "named.redirect",
                "GET",
                format!("http://localhost:{port}/to-other-name"),
                no_args(),
            ),
            spec(
                "named.default_port",
                "GET",
                "http://localhost/".to_owned(),
                no_args(),
            ),
        ];
    })
    .await;
    let fin = call(&app, "named.allowed", json!({})).await;
    assert_eq!(fin["output"]["city"], "named", "the listed port: {fin}");
    for tool in ["named.other_port", "named.redirect", "named.default_port"] {
        let fin = call(&app, tool, json!({})).await;
        assert_eq!(
            fin["error"]["code"], "destination_not_allowed",
            "{tool}: {fin}"
        );
    }
}

#[tokio::test]
async fn an_argument_never_leaves_its_path_segment() {
    let (addr, _) = target().await;
    let schema =
        json!({"type": "object", "required": ["p"], "properties": {"p": {"type": "string"}}});
    let pair =
        json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}});
    let app = spawn_app(|c| {
        c.tools.http_allow = vec![addr.clone()];
        c.tools.http = vec![
            spec(
                "deep.get",
                "GET",
                format!("http://{addr}/deep/{{p}}/x"),
                schema,
            ),
            spec(
                "deep.pair",
                "GET",
                format!("http://{addr}/deep/{{a}}{{b}}/x"),
                pair,
            ),
        ];
    })
    .await;
    for p in ["..", ".", "%2e%2e", "...", "../x", "a.b"] {
        let fin = call(&app, "deep.get", json!({"p": p})).await;
        if matches!(p, ".." | ".") {
            assert_eq!(fin["status"], "failed", "{p}: {fin}");
            assert_eq!(fin["error"]["code"], "invalid_tool_arguments", "{p}: {fin}");
        } else {
            assert_eq!(fin["output"], p, "{p} stays one segment: {fin}");
        }
    }
    let fin = call(&app, "deep.pair", json!({"a": ".", "b": "."})).await;
    assert_eq!(
        fin["error"]["code"], "invalid_tool_arguments",
        "two values that make `..` together: {fin}"
    );
    let fin = call(&app, "deep.pair", json!({"a": "v", "b": "."})).await;
    assert_eq!(fin["output"], "v.");
}

const KEY_A: &str = "key-for-team-a-0123456789";
const KEY_B: &str = "key-for-team-b-0123456789";

/// Two tenants, `a` and `b`, each with its key; declared tools on, reading only SECRET_VAR.
fn two_tenants(c: &mut Config, addr: &str, env: &[&str]) {
    c.auth.api_keys = [("a", KEY_A), ("b", KEY_B)]
        .into_iter()
        .map(|(tenant, key)| ApiKey {
            user: None,
            key: Secret::new(key),
            tenant: tenant.into(),
        })
        .collect();
    c.tools.http_api = true;
    c.tools.http_api_env = env.iter().map(|v| v.to_string()).collect();
    c.tools.http_allow = vec![addr.to_owned()];
}

/// A request with a tenant's key: the status and the JSON body (null when there is none).
async fn as_tenant(
    app: &TestApp,
    key: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut request = app.client.request(method, app.url(path)).bearer_auth(key);
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A run of tenant `key` whose plan calls `tool`, nested in a `sequential` step, read to its
/// end: the run's final data.
async fn nested_call(app: &TestApp, key: &str, tool: &str, arguments: Value) -> Value {
    let plan = json!({"steps": [{"id": "outer", "kind": "sequential", "input": {"steps": [
        {"id": "call", "kind": "tool", "input": {"tool": tool, "arguments": arguments}}]}}]});
    let body = json!({"input": "x", "orchestration": "fixed", "plan": plan});
    let (status, run) = as_tenant(app, key, reqwest::Method::POST, "/v1/runs", Some(&body)).await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().unwrap();
    let events = app
        .client
        .get(app.url(&format!("/v1/runs/{id}/events")))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    let events = crate::support::app::SseReader::new(events)
        .read_to_final()
        .await;
    let all: String = events.iter().map(|e| e.data.clone()).collect();
    assert!(!all.contains(&secret()), "the secret reached the events");
    final_data(&events)
}

#[tokio::test]
async fn a_declared_tool_reads_only_listed_variables_and_belongs_to_its_tenant() {
    use reqwest::Method;
    let (addr, _) = target().await;
    let app = spawn_app(|c| two_tenants(c, &addr, &[SECRET_VAR])).await;
    let url = format!("http://{addr}/weather/{{city}}");
    let city =
        json!({"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}});

    // The server's secrets are not a key holder's to read.
    let probe = json!({"url": url, "input_schema": city, "headers": {
        "X-A": "${OPENAI_API_KEY}", "X-B": "prefix ${ORCA_AUTH__API_KEYS}", "X-C": "${DATABASE_URL}",
        "X-D": format!("${{{SECRET_VAR}}}")}});
    let (status, problem) =
        as_tenant(&app, KEY_B, Method::PUT, "/v1/tools/probe.x", Some(&probe)).await;
    assert_eq!(status, 422, "{problem}");
    let pointers: Vec<&str> = problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    assert_eq!(
        pointers,
        ["/headers/X-A", "/headers/X-B", "/headers/X-C"],
        "{problem}"
    );
    assert!(
        problem["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("tools.http_api_env")
    );

    // A listed variable is fine; the tool is b's alone.
    let weather = json!({"url": url, "input_schema": city,
        "headers": {"Authorization": format!("Bearer ${{{SECRET_VAR}}}")}});
    let (status, detail) = as_tenant(
        &app,
        KEY_B,
        Method::PUT,
        "/v1/tools/team.weather",
        Some(&weather),
    )
    .await;
    assert_eq!(status, 201, "{detail}");
    let fin = nested_call(&app, KEY_B, "team.weather", json!({"city": "Lima"})).await;
    assert_eq!(
        fin["output"],
        json!({"city": "Lima", "authorized": true}),
        "{fin}"
    );

    let (status, _) = as_tenant(&app, KEY_A, Method::GET, "/v1/tools/team.weather", None).await;
    assert_eq!(status, 404, "a's view has no b's tool");
    let (_, listed) = as_tenant(&app, KEY_A, Method::GET, "/v1/tools", None).await;
    assert!(!listed.to_string().contains("team.weather"), "{listed}");
    let (_, listed) = as_tenant(&app, KEY_B, Method::GET, "/v1/tools", None).await;
    assert!(listed.to_string().contains("team.weather"), "{listed}");
    let plan = json!({"steps": [{"id": "call", "kind": "tool",
        "input": {"tool": "team.weather", "arguments": {"city": "x"}}}]});
    let body = json!({"input": "x", "orchestration": "fixed", "plan": plan});
    let (status, problem) = as_tenant(&app, KEY_A, Method::POST, "/v1/runs", Some(&body)).await;
    assert_eq!(status, 422, "a cannot run b's tool: {problem}");
    let body = json!({"input": "x", "tools": ["team.weather"]});
    let (status, _) = as_tenant(&app, KEY_A, Method::POST, "/v1/runs", Some(&body)).await;
    assert_eq!(status, 422, "nor allow it for a simple run");
    let (status, _) = as_tenant(&app, KEY_A, Method::DELETE, "/v1/tools/team.weather", None).await;
    assert_eq!(status, 404, "nor delete it");

    // a's own tool of the same name is another tool.
    let mut own = weather.clone();
    own["url"] = json!(format!("http://{addr}/deep/{{city}}/x"));
    let (status, _) = as_tenant(
        &app,
        KEY_A,
        Method::PUT,
        "/v1/tools/team.weather",
        Some(&own),
    )
    .await;
    assert_eq!(status, 201);
    let fin = nested_call(&app, KEY_A, "team.weather", json!({"city": "Quito"})).await;
    assert_eq!(fin["output"], "Quito", "{fin}");
    let fin = nested_call(&app, KEY_B, "team.weather", json!({"city": "Lima"})).await;
    assert_eq!(fin["output"]["city"], "Lima", "b's is untouched: {fin}");

    // The operator takes the variable off the list: a tool declared while it was on no longer
    // reads it.
    let dir = app.stop().await;
    let app = spawn_app_in(dir, |c| two_tenants(c, &addr, &[])).await;
    let fin = nested_call(&app, KEY_B, "team.weather", json!({"city": "Lima"})).await;
    assert_eq!(fin["error"]["code"], "secret_not_allowed", "{fin}");
}
