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
use orca::config::Config;
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
