//! MCP tools: the tools of `[[tools.mcp]]` servers, here `examples/mcp_server.rs` started over
//! stdio by orca itself, or over streamable HTTP by the test, listed, validated and called like
//! built-ins; what happens when a server cannot be used at start.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;

use orca::app::App;
use orca::config::{Config, McpServerConfig};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::support::scripted_llm::{Reply, ScriptedLlm};
use crate::support::*;

/// The example MCP server, built (or found up to date) once per test process: `cargo test`
/// builds examples, `cargo test --test it` does not.
fn server_binary() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let target = PathBuf::from(env!("CARGO_BIN_EXE_orca"))
                .parent()
                .expect("the binary's directory")
                .to_owned();
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let status = std::process::Command::new(cargo)
                .args(["build", "--quiet", "--example", "mcp_server"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .expect("running cargo build --example mcp_server");
            assert!(status.success(), "cargo build --example mcp_server failed");
            let path = target.join("examples").join("mcp_server");
            assert!(path.exists(), "{} was not built", path.display());
            path
        })
        .clone()
}

fn stdio_server(name: &str, args: &[&str]) -> McpServerConfig {
    McpServerConfig {
        name: name.into(),
        command: server_binary().display().to_string(),
        args: args.iter().map(|a| a.to_string()).collect(),
        timeout_ms: 10_000,
        ..Default::default()
    }
}

/// The example server over streamable HTTP on a loopback port; it stops when dropped.
struct HttpServer {
    url: String,
    /// What the server writes on standard error (`slow: started` when a `slow` call arrives,
    /// `slow: cancelled` when it was cancelled).
    stderr: tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
    _child: Child,
}

async fn http_server(token: &str) -> HttpServer {
    let mut child = Command::new(server_binary())
        .args(["--http", "127.0.0.1:0", "--token", token])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the MCP server");
    let stdout = child.stdout.take().unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut lines = BufReader::new(stdout).lines();
    let url = tokio::time::timeout(PATIENCE, lines.next_line())
        .await
        .expect("the server prints its endpoint")
        .unwrap()
        .expect("an endpoint line");
    HttpServer {
        url,
        stderr,
        _child: child,
    }
}

fn http_entry(name: &str, server: &HttpServer, token: &str) -> McpServerConfig {
    McpServerConfig {
        name: name.into(),
        url: server.url.clone(),
        headers: [("Authorization".to_owned(), format!("Bearer {token}"))].into(),
        timeout_ms: 10_000,
        ..Default::default()
    }
}

async fn fixed(app: &TestApp, steps: Value) -> Vec<SseMessage> {
    app.stream_run(json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": steps } }))
        .await
}

fn tool_step(id: &str, tool: &str, arguments: Value) -> Value {
    json!({ "id": id, "kind": "tool", "input": { "tool": tool, "arguments": arguments } })
}

fn run_id(events: &[SseMessage]) -> String {
    events[0].json()["run_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn stdio_tools_are_listed_with_their_schemas_and_called_by_plan_steps() {
    let app = spawn_app(|c| c.tools.mcp = vec![stdio_server("demo", &[])]).await;
    let (status, tools) = app.get_json("/v1/tools").await;
    assert_eq!(status, 200);
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .filter(|n| n.starts_with("demo."))
        .collect();
    // Five tools over three pages; `text/upper` renamed to the registry's alphabet.
    assert_eq!(
        names,
        [
            "demo.add",
            "demo.echo",
            "demo.fail",
            "demo.slow",
            "demo.text_upper"
        ]
    );
    let add = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "demo.add")
        .unwrap();
    assert_eq!(
        add["description"],
        "Adds two numbers; the sum comes back structured."
    );
    assert_eq!(add["input_schema"]["required"], json!(["a", "b"]));
    assert_eq!(add["input_schema"]["additionalProperties"], false);

    let events = fixed(
        &app,
        json!([
            tool_step("add", "demo.add", json!({ "a": 2, "b": 3.5 })),
            tool_step("echo", "demo.echo", json!({ "text": "{\"k\": [1, 2]}" })),
            tool_step("plain", "demo.echo", json!({ "text": "not json" })),
            tool_step("upper", "demo.text_upper", json!({ "text": "abc" })),
        ]),
    )
    .await;
    assert_eq!(
        final_data(&events)["status"],
        "succeeded",
        "{:?}",
        kinds(&events)
    );
    let id = run_id(&events);
    // Structured content wins over the text; JSON text is parsed; other text stays text.
    assert_eq!(
        app.attempts(&id, "add").await[0]["output"],
        json!({ "sum": 5.5 })
    );
    assert_eq!(
        app.attempts(&id, "echo").await[0]["output"],
        json!({ "k": [1, 2] })
    );
    assert_eq!(app.attempts(&id, "plain").await[0]["output"], "not json");
    assert_eq!(app.attempts(&id, "upper").await[0]["output"], "ABC");
}

#[tokio::test]
async fn arguments_are_checked_against_the_mcp_schema_and_is_error_fails_the_step() {
    let app = spawn_app(|c| c.tools.mcp = vec![stdio_server("demo", &[])]).await;
    let (status, body) = app
        .post_json(
            "/v1/runs",
            &json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
                tool_step("add", "demo.add", json!({ "a": "two" })),
            ]}}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    let text = body["errors"].to_string();
    assert!(text.contains("/plan/steps/0/input/arguments/a"), "{text}");
    let missing_b = body["errors"].as_array().unwrap().iter().any(|e| {
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("\"b\"") && m.contains("required"))
    });
    assert!(missing_b, "{text}");

    let events = fixed(&app, json!([tool_step("fail", "demo.fail", json!({}))])).await;
    assert_eq!(final_data(&events)["status"], "failed");
    let attempt = &app.attempts(&run_id(&events), "fail").await[0];
    assert_eq!(attempt["error"]["code"], "mcp_tool_error");
    let message = attempt["error"]["message"].as_str().unwrap();
    assert!(message.contains("the tool failed on purpose"), "{message}");
}

#[tokio::test]
async fn a_model_calls_an_mcp_tool() {
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::tool_call("demo.add", json!({ "a": 40, "b": 2 })));
    llm.push(Reply::text("It is 42"));
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        c.tools.mcp = vec![stdio_server("demo", &[])];
    })
    .await;
    let events = app.stream_run(json!({ "input": "add 40 and 2" })).await;
    let result = events
        .iter()
        .find(|e| e.kind() == "tool_result")
        .expect("a tool result")
        .json();
    assert_eq!(result["data"]["output"], json!({ "sum": 42.0 }));
    assert_eq!(final_data(&events)["output"], "It is 42");
    // The model was offered the tool with the server's schema.
    let offered = llm.requests()[0]["tools"].to_string();
    assert!(offered.contains("Adds two numbers"), "{offered}");
    let told = llm.requests()[1]["messages"].to_string();
    assert!(told.contains("sum"), "{told}");
}

#[tokio::test]
async fn cancelling_a_run_ends_a_slow_mcp_call_promptly() {
    let app = spawn_app(|c| c.tools.mcp = vec![stdio_server("demo", &[])]).await;
    let run = app
        .create_run(
            json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
                tool_step("slow", "demo.slow", json!({})),
            ]}}),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut events = app.events(&id).await;
    loop {
        let e = events
            .next_event()
            .await
            .expect("events until the step runs");
        let data = e.json()["data"].clone();
        if e.kind() == "step" && data["step_id"] == "slow" && data["status"] == "running" {
            break;
        }
    }
    let (status, _) = app
        .post_json(&format!("/v1/runs/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(status, 202);
    let rest = tokio::time::timeout(PATIENCE, events.read_to_final())
        .await
        .expect("the run ends promptly");
    assert_eq!(final_data(&rest)["status"], "cancelled");
    let attempt = &app.attempts(&id, "slow").await[0];
    assert_eq!(attempt["error"]["code"], "cancelled", "{attempt}");
}

#[tokio::test]
async fn a_cancelled_call_is_cancelled_on_the_server_too() {
    let mut server = http_server("s3cret").await;
    let app = spawn_app(|c| c.tools.mcp = vec![http_entry("web", &server, "s3cret")]).await;
    let run = app
        .create_run(
            json!({ "input": "x", "orchestration": "fixed", "plan": { "steps": [
                tool_step("slow", "web.slow", json!({})),
            ]}}),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut events = app.events(&id).await;
    loop {
        let e = events
            .next_event()
            .await
            .expect("events until the step runs");
        let data = e.json()["data"].clone();
        if e.kind() == "step" && data["step_id"] == "slow" && data["status"] == "running" {
            break;
        }
    }
    // The call has reached the server: a cancel before it would never be sent at all.
    let started = tokio::time::timeout(PATIENCE, server.stderr.next_line())
        .await
        .expect("the call reaches the server")
        .unwrap();
    assert_eq!(started.as_deref(), Some("slow: started"));
    let (status, _) = app
        .post_json(&format!("/v1/runs/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(status, 202);
    // The server's `slow` only returns once `notifications/cancelled` reached it.
    let line = tokio::time::timeout(PATIENCE, server.stderr.next_line())
        .await
        .expect("the server hears of the cancellation")
        .unwrap();
    assert_eq!(line.as_deref(), Some("slow: cancelled"));
    let rest = tokio::time::timeout(PATIENCE, events.read_to_final())
        .await
        .expect("the run ends");
    assert_eq!(final_data(&rest)["status"], "cancelled");
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn stopping_orca_stops_the_server_process() {
    let pid_dir = tempfile::tempdir().unwrap();
    let pid_file = pid_dir.path().join("pid");
    let app = spawn_app(|c| {
        let mut entry = stdio_server("demo", &[]);
        entry.env = [(
            "MCP_SERVER_PID_FILE".to_owned(),
            pid_file.display().to_string(),
        )]
        .into();
        c.tools.mcp = vec![entry];
    })
    .await;
    // Written before the server answered the handshake, so before the app was built.
    let pid = std::fs::read_to_string(&pid_file).expect("the server wrote its pid");
    let proc_dir = PathBuf::from(format!("/proc/{}", pid.trim()));
    assert!(proc_dir.exists(), "the server runs");
    app.stop().await;
    assert!(
        !proc_dir.exists(),
        "the server process is gone after the stop"
    );
}

#[tokio::test]
async fn http_servers_get_their_headers_and_the_allow_list_applies() {
    let server = http_server("s3cret").await;
    let app = spawn_app(|c| {
        let mut entry = http_entry("web", &server, "s3cret");
        entry.tools = vec!["add".into(), "fail".into()];
        c.tools.mcp = vec![entry];
    })
    .await;
    let (_, tools) = app.get_json("/v1/tools").await;
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .filter(|n| n.starts_with("web."))
        .collect();
    assert_eq!(names, ["web.add", "web.fail"]);
    let events = fixed(
        &app,
        json!([tool_step("add", "web.add", json!({ "a": 1, "b": 2 }))]),
    )
    .await;
    assert_eq!(final_data(&events)["status"], "succeeded");
    assert_eq!(
        app.attempts(&run_id(&events), "add").await[0]["output"],
        json!({ "sum": 3.0 })
    );
}

async fn start_error(configure: impl FnOnce(&mut Config)) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(&dir);
    configure(&mut config);
    match App::build(config).await {
        Ok(_) => panic!("the app started"),
        Err(e) => format!("{e:#}"),
    }
}

#[tokio::test]
async fn a_server_that_cannot_be_used_stops_the_start_naming_it() {
    let missing = McpServerConfig {
        name: "ghost".into(),
        command: "/nonexistent/mcp-server".into(),
        ..Default::default()
    };
    let server = http_server("s3cret").await;
    let cases: Vec<(McpServerConfig, Vec<&str>)> = vec![
        (
            missing.clone(),
            vec!["MCP server `ghost`", "/nonexistent/mcp-server"],
        ),
        (
            stdio_server("bad", &["--bad-schema"]),
            vec!["MCP server `bad`", "`broken`", "input schema"],
        ),
        (
            McpServerConfig {
                tools: vec!["nope".into()],
                ..stdio_server("demo", &[])
            },
            vec!["`nope`", "does not offer", "add"],
        ),
        (
            http_entry("web", &server, "wrong-token"),
            vec!["MCP server `web`", "handshake"],
        ),
        (
            McpServerConfig {
                name: "Bad.Name".into(),
                ..stdio_server("x", &[])
            },
            vec!["`Bad.Name`", "lowercase"],
        ),
    ];
    for (entry, wanted) in cases {
        let error = start_error(|c| c.tools.mcp = vec![entry.clone()]).await;
        for w in wanted {
            assert!(error.contains(w), "{}: wanted {w:?} in {error}", entry.name);
        }
        assert!(!error.contains("wrong-token"), "{error}");
    }
    // Optional: skipped, and the rest starts.
    let app = spawn_app(|c| {
        c.tools.mcp = vec![
            McpServerConfig {
                optional: true,
                ..missing
            },
            stdio_server("demo", &[]),
        ]
    })
    .await;
    let (_, tools) = app.get_json("/v1/tools").await;
    let text = tools.to_string();
    assert!(!text.contains("ghost."), "{text}");
    assert!(text.contains("demo.add"), "{text}");
}

#[tokio::test]
async fn orca_serve_exits_with_one_line_naming_a_server_it_cannot_start() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("orca.toml");
    std::fs::write(
        &toml,
        "[[tools.mcp]]\nname = \"ghost\"\ncommand = \"/nonexistent/mcp-server\"\n",
    )
    .unwrap();
    let database = crate::support::db::database_url(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_orca"))
        .current_dir(dir.path())
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--database-url",
            &database,
        ])
        .arg("--config")
        .arg(&toml)
        .env_remove("ORCA_CONFIG")
        .env("ORCA_LLM__PROVIDER", "offline")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(PATIENCE, out)
        .await
        .expect("orca exits")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let last = stderr.trim().lines().last().unwrap_or_default();
    for wanted in ["error:", "MCP server `ghost`", "/nonexistent/mcp-server"] {
        assert!(last.contains(wanted), "wanted {wanted:?} in {stderr}");
    }
}
