//! The `orca` client commands, as a user runs them: the real binary against the real server
//! (offline provider), its standard output, standard error and exit code.

use std::path::Path;
use std::process::{Output, Stdio};

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::support::app::{PATIENCE, TestApp, spawn_app};

const ARITHMETIC: &str = "10 + 20 계산해줘";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exited, not killed")
}

fn write_json(dir: &Path, name: &str, value: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, value.to_string()).unwrap();
    path.to_string_lossy().into_owned()
}

fn two_sums() -> Value {
    json!({ "steps": [
        { "id": "first", "kind": "tool", "input": { "tool": "math.calculate", "arguments": { "expression": "6 * 7" } } },
        { "id": "second", "kind": "tool", "depends_on": ["first"], "input": { "tool": "math.calculate",
          "arguments": { "expression": "{{ steps.first.output.result }} + 1" } } },
    ]})
}

fn approval() -> Value {
    json!({ "steps": [
        { "id": "approve", "kind": "user_input", "input": {
            "prompt": "Publish the report?",
            "schema": { "type": "object", "required": ["approved"], "properties": { "approved": { "type": "boolean" } } } } },
        { "id": "after", "kind": "tool", "depends_on": ["approve"], "input": { "tool": "math.calculate",
          "arguments": { "expression": "40 + 2" } } },
    ]})
}

#[tokio::test]
async fn run_prints_the_answer_without_escapes_off_a_terminal_and_exits_0() {
    let app = spawn_app(|_| {}).await;
    let out = app.orca(&["run", ARITHMETIC], "").await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(code(&out), 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("The result is 30."), "{stdout}");
    assert!(stdout.contains("succeeded"), "{stdout}");
    assert!(
        !stdout.contains('\x1b'),
        "no ANSI escapes in a pipe: {stdout:?}"
    );
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
    assert!(!stdout.contains('⠋'), "no spinner in a pipe: {stdout}");
}

#[tokio::test]
async fn a_failing_run_exits_1_and_says_why() {
    let app = spawn_app(|_| {}).await;
    let plan = json!({ "steps": [
        { "id": "read", "kind": "tool", "input": { "tool": "fs.read", "arguments": { "path": "no-such-file.txt" } } },
    ]});
    let file = write_json(app.dir.path(), "fail.json", &plan);
    let out = app.orca(&["run", "x", "--plan", &file], "").await;
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), 1, "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("failed"), "{stdout}");
}

#[tokio::test]
async fn json_prints_one_event_per_line_ending_with_final() {
    let app = spawn_app(|_| {}).await;
    let out = app.orca(&["run", ARITHMETIC, "--json"], "").await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    let last = events.last().expect("events");
    assert_eq!(last["kind"], "final");
    assert_eq!(last["data"]["output"], "The result is 30.");
    assert!(events.iter().any(|e| e["kind"] == "token"));
}

#[tokio::test]
async fn bad_requests_print_the_problem_and_exit_2() {
    let app = spawn_app(|_| {}).await;
    let out = app
        .orca(&["run", "x", "--workflow", "no-such-workflow"], "")
        .await;
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), 2, "{}\n{stderr}", text(&out.stdout));
    assert!(stderr.starts_with("error: 4"), "{stderr}");

    let bad = write_json(
        app.dir.path(),
        "bad.json",
        &json!({ "steps": [ { "id": "a", "kind": "tool", "input": { "tool": "math.calculate", "arguments": { "expression": 5 } } } ] }),
    );
    let out = app
        .orca(&["workflows", "put", &bad, "--name", "bad"], "")
        .await;
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), 2, "{stderr}");
    assert!(stderr.contains("422"), "{stderr}");
    assert!(stderr.contains("validation_failed"), "{stderr}");
    assert!(
        stderr.contains("\n  /steps/0"),
        "each error's pointer: {stderr}"
    );

    let out = app
        .orca(&["runs", "show", "nope", "--url", "http://127.0.0.1:9"], "")
        .await;
    assert_eq!(code(&out), 2, "a connection error exits 2");
    assert!(
        text(&out.stderr).contains("cannot reach"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn runs_list_show_watch_and_cancel_round_trip() {
    let app = spawn_app(|_| {}).await;
    let done = app.create_run(json!({ "input": ARITHMETIC })).await;
    let id = done["id"].as_str().unwrap().to_owned();

    // watch replays a run from its first event to final.
    let out = app.orca(&["runs", "watch", &id], "").await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("The result is 30."));

    let out = app.orca(&["runs", "show", &id, "--json"], "").await;
    assert_eq!(code(&out), 0);
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run["id"], id);
    assert_eq!(run["status"], "succeeded");
    let out = app.orca(&["runs", "show", &id], "").await;
    assert!(text(&out.stdout).contains("The result is 30."));

    // A run waiting for input stays live until cancelled.
    let waiting = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "plan": approval() }))
        .await;
    let wid = waiting["id"].as_str().unwrap().to_owned();
    let out = app.orca(&["runs", "cancel", &wid], "").await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let out = app.orca(&["runs", "watch", &wid], "").await;
    assert_eq!(code(&out), 1, "a cancelled run exits 1");
    assert!(text(&out.stdout).contains("cancelled"));
    let out = app.orca(&["runs", "cancel", &wid], "").await;
    assert_eq!(code(&out), 2, "cancelling twice is a 409");
    assert!(text(&out.stderr).contains("409"));

    let out = app
        .orca(&["runs", "list", "--status", "cancelled", "--json"], "")
        .await;
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = list["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [wid.as_str()]);
    let out = app.orca(&["runs", "list", "--limit", "5"], "").await;
    let table = text(&out.stdout);
    assert!(table.contains(&id) && table.contains(&wid), "{table}");
}

#[tokio::test]
async fn workflows_put_and_list_round_trip_and_run_by_name() {
    let app = spawn_app(|_| {}).await;
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/workflows/publish-report.json"
    );
    let out = app.orca(&["workflows", "put", file], "").await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("publish-report"));
    let sums = write_json(app.dir.path(), "sums.json", &two_sums());
    let out = app
        .orca(&["workflows", "put", &sums, "--name", "sums", "--json"], "")
        .await;
    let put: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(put["name"], "sums");

    let out = app.orca(&["workflows", "list", "--json"], "").await;
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["publish-report", "sums"]);
    let out = app.orca(&["workflows", "list"], "").await;
    assert!(text(&out.stdout).contains("Gather figures in parallel"));

    let out = app
        .orca(&["run", "x", "--workflow", "sums", "--json"], "")
        .await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let last: Value = serde_json::from_str(text(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(last["data"]["output"]["result"], 43);
}

#[tokio::test]
async fn human_input_is_asked_inline_and_asked_again_after_a_422() {
    let app = spawn_app(|_| {}).await;
    let plan = write_json(app.dir.path(), "approval.json", &approval());
    let out = app
        .orca(
            &["run", "x", "--plan", &plan],
            "{\"approved\": \"maybe\"}\n{\"approved\": true}\n",
        )
        .await;
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), 0, "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("Publish the report?"), "{stdout}");
    assert!(
        stdout.contains("\"approved\""),
        "the schema is shown: {stdout}"
    );
    assert!(
        stdout.contains("422"),
        "the refused answer is explained: {stdout}"
    );
    assert!(stdout.contains("try again"), "{stdout}");
    let history = app
        .history(&run_id_of(&app).await)
        .await
        .into_iter()
        .filter(|e| e["kind"] == "step" && e["step_id"] == "approve")
        .filter(|e| e["data"]["status"] == "completed")
        .collect::<Vec<_>>();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["data"]["output"], json!({ "approved": true }));
}

async fn run_id_of(app: &TestApp) -> String {
    let (_, list) = app.get_json("/v1/runs?limit=1").await;
    list["runs"][0]["id"].as_str().unwrap().to_owned()
}

/// `orca ARGS` under a pseudo-terminal (util-linux `script`); the combined output and code.
async fn orca_in_pty(app: &TestApp, args: &str) -> (i32, String) {
    orca_in_pty_with(app, args, &[]).await
}

async fn orca_in_pty_with(app: &TestApp, args: &str, env: &[(&str, &str)]) -> (i32, String) {
    let command = format!("{} {args}", env!("CARGO_BIN_EXE_orca"));
    let out = tokio::process::Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .env_remove("NO_COLOR")
        .envs(env.iter().copied())
        .env("ORCA_URL", &app.base)
        .env_remove("ORCA_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(PATIENCE, out)
        .await
        .expect("script finishes in time")
        .expect("util-linux `script` is installed");
    (code(&out), text(&out.stdout))
}

#[tokio::test]
async fn on_a_terminal_the_run_shows_a_live_progress_view() {
    let app = spawn_app(|_| {}).await;
    let plan = write_json(app.dir.path(), "sums.json", &two_sums());
    let (status, screen) = orca_in_pty(&app, &format!("run x --plan {plan}")).await;
    assert_eq!(status, 0, "{screen}");
    assert!(screen.contains("steps done"), "a status line: {screen:?}");
    assert!(
        screen.contains("[1/2]") && screen.contains("[2/2]"),
        "{screen:?}"
    );
    assert!(
        screen.chars().any(|c| ('⠋'..='⠿').contains(&c)),
        "a spinner: {screen:?}"
    );
    assert!(
        screen.contains("\x1b[2K"),
        "the status line is redrawn: {screen:?}"
    );
    assert!(screen.contains("\"result\": 43"), "the answer: {screen:?}");

    let (status, screen) = orca_in_pty(&app, &format!("run '{ARITHMETIC}'")).await;
    assert_eq!(status, 0, "{screen}");
    assert!(screen.contains("The result is 30."), "{screen:?}");
    assert!(
        screen.contains("\x1b[0m"),
        "colours on a terminal: {screen:?}"
    );

    let no_color = [("NO_COLOR", "1")];
    let (status, screen) = orca_in_pty_with(&app, &format!("run '{ARITHMETIC}'"), &no_color).await;
    assert_eq!(status, 0, "{screen}");
    assert!(screen.contains("The result is 30."), "{screen:?}");
    assert!(
        !screen.contains("\x1b[0m"),
        "NO_COLOR: no colours: {screen:?}"
    );
    assert!(
        screen.contains("\x1b[2K"),
        "still a live status line: {screen:?}"
    );
}

/// Serves one SSE response on `socket`: the request's head is returned, then `events` are
/// written and the connection is closed (a dropped stream when the last is not `final`).
async fn serve_events(socket: &mut tokio::net::TcpStream, events: &[(u64, &str)]) -> String {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = socket.read(&mut buf).await.unwrap();
        assert!(n > 0, "the client sent a whole request");
        head.extend_from_slice(&buf[..n]);
    }
    let mut body = String::from(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
    );
    for (seq, kind) in events {
        let data = json!({ "seq": seq, "run_id": "r1", "kind": kind, "ts": "2026-01-01T00:00:00Z",
            "step_id": null, "data": if *kind == "final" { json!({ "status": "succeeded", "output": "done" }) } else { json!({ "status": "running" }) } });
        body.push_str(&format!("id: {seq}\nevent: {kind}\ndata: {data}\n\n"));
    }
    socket.write_all(body.as_bytes()).await.unwrap();
    socket.shutdown().await.unwrap();
    String::from_utf8_lossy(&head).to_lowercase()
}

/// Runs `orca ARGS --json --url U` against a server that drops the first stream after two
/// events and serves `final` on the next request; the seqs printed and both request heads.
async fn through_a_dropped_stream(args: &[&str]) -> (Vec<u64>, String, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (mut first, _) = listener.accept().await.unwrap();
        let head1 = serve_events(&mut first, &[(1, "status"), (2, "status")]).await;
        let (mut second, _) = listener.accept().await.unwrap();
        let head2 = serve_events(&mut second, &[(3, "final")]).await;
        (head1, head2)
    });
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_orca"))
        .args(args)
        .args(["--json", "--url", &url])
        .env_remove("ORCA_API_KEY")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(PATIENCE, out).await.unwrap().unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let seqs = text(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    let (head1, head2) = server.await.unwrap();
    (seqs, head1, head2)
}

#[tokio::test]
async fn watch_resumes_a_dropped_stream_after_the_last_event_seen() {
    let (seqs, head1, head2) = through_a_dropped_stream(&["runs", "watch", "r1"]).await;
    assert_eq!(seqs, [1, 2, 3], "every event once");
    assert!(head1.starts_with("get /v1/runs/r1/events"), "{head1}");
    assert!(!head1.contains("last-event-id"), "{head1}");
    assert!(head2.contains("last-event-id: 2\r\n"), "{head2}");
}

#[tokio::test]
async fn run_resumes_its_own_dropped_stream_from_the_run_it_created() {
    let (seqs, head1, head2) = through_a_dropped_stream(&["run", "hello"]).await;
    assert_eq!(seqs, [1, 2, 3], "every event once");
    assert!(
        head1.starts_with("post /v1/runs "),
        "the run is created once: {head1}"
    );
    assert!(
        head2.starts_with("get /v1/runs/r1/events"),
        "then followed: {head2}"
    );
    assert!(head2.contains("last-event-id: 2\r\n"), "{head2}");
}

#[tokio::test]
async fn the_api_key_comes_from_orca_api_key_or_the_flag() {
    use orca::config::{ApiKey, Secret};
    const KEY: &str = "orca-cli-test-key-0123456789";
    let app = spawn_app(|c| {
        c.auth.api_keys = vec![ApiKey {
            user: None,
            key: Secret::new(KEY),
            tenant: "cli".into(),
        }];
    })
    .await;
    // A 401 says how to give a key, in every command.
    for args in [&["runs", "list"][..], &["run", ARITHMETIC], &["usage"]] {
        let out = app.orca(args, "").await;
        let stderr = text(&out.stderr);
        assert_eq!(code(&out), 2, "{args:?}: {stderr}");
        assert!(stderr.contains("401"), "{stderr}");
        assert!(
            stderr.contains("give it with --api-key KEY or the ORCA_API_KEY environment variable"),
            "{args:?}: {stderr}"
        );
    }
    let out = app.orca(&["usage", "--api-key", "wrong"], "").await;
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), 2, "{stderr}");
    assert!(
        stderr.contains("refused the API key given: check --api-key or ORCA_API_KEY"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("wrong"),
        "the key is never printed: {stderr}"
    );

    let out = app.orca(&["run", ARITHMETIC, "--api-key", KEY], "").await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let out = app
        .orca_command(&["runs", "list", "--json"])
        .env("ORCA_API_KEY", KEY)
        .output();
    let out = tokio::time::timeout(PATIENCE, out).await.unwrap().unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["runs"].as_array().unwrap().len(), 1);
    assert!(!text(&out.stderr).contains(KEY), "the key is never printed");
}

#[tokio::test]
async fn ctrl_c_while_asked_for_input_leaves_the_run_waiting_and_exits_130() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let app = spawn_app(|_| {}).await;
    let plan = write_json(app.dir.path(), "approval.json", &approval());
    let mut child = app
        .orca_command(&["run", "x", "--plan", &plan])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Standard input stays open: the client is blocked reading the answer.
    let _stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let asked = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("input required for step approve") {
                return;
            }
        }
        panic!("no input request");
    };
    tokio::time::timeout(PATIENCE, asked).await.unwrap();
    let pid = child.id().unwrap() as i32;
    // SAFETY: a plain kill(2) of the child we spawned and still own.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let out = tokio::time::timeout(PATIENCE, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), 130, "{stderr}");
    let id = run_id_of(&app).await;
    assert!(
        stderr.contains(&format!("orca runs watch {id}")),
        "{stderr}"
    );
    let (_, run) = app.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(run["status"], "waiting_input", "the run goes on");
}

/// `orca … | head -1`: the reader goes away and the command ends quietly (141, as SIGPIPE
/// ends other tools), never with a panic.
#[tokio::test]
async fn a_closed_pipe_ends_the_command_quietly() {
    let app = spawn_app(|_| {}).await;
    app.create_run(json!({ "input": ARITHMETIC })).await;
    for args in [&["runs", "list"][..], &["run", ARITHMETIC, "--json"][..]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let child = app
            .orca_command(args)
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = tokio::time::timeout(PATIENCE, child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn runs_list_has_a_header_pages_with_a_cursor_and_filters_by_metadata() {
    let app = spawn_app(|_| {}).await;
    let args = [
        "run",
        ARITHMETIC,
        "--metadata",
        "team=blue",
        "--metadata",
        "tier=1",
        "--session",
        "chat-1",
        "--json",
    ];
    let out = app.orca(&args, "").await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    for _ in 0..2 {
        app.create_run(json!({ "input": "hello" })).await;
    }
    let out = app
        .orca(&["runs", "list", "--metadata", "team=blue", "--json"], "")
        .await;
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = list["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{list}");
    assert_eq!(runs[0]["metadata"], json!({ "team": "blue", "tier": "1" }));
    assert_eq!(runs[0]["session_id"], "chat-1");

    let out = app.orca(&["runs", "list", "--limit", "2"], "").await;
    let page = text(&out.stdout);
    let lines: Vec<&str> = page.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("STATUS"),
        "{page}"
    );
    assert_eq!(lines.len(), 4, "a header, two runs, the way on: {page}");
    let cursor = lines[3]
        .strip_prefix("more: orca runs list --limit 2 --cursor ")
        .unwrap_or_else(|| panic!("{page}"));
    let out = app
        .orca(&["runs", "list", "--limit", "2", "--cursor", cursor], "")
        .await;
    let rest = text(&out.stdout);
    assert_eq!(rest.lines().count(), 2, "a header and the last run: {rest}");
    assert!(
        rest.contains(ARITHMETIC),
        "the oldest run comes last: {rest}"
    );
    let out = app.orca(&["runs", "list", "--metadata", "nokey"], "").await;
    assert_eq!(code(&out), 2);
    assert!(text(&out.stderr).contains("`nokey` is not KEY=VALUE"));
}

#[tokio::test]
async fn agents_put_list_show_and_delete_round_trip() {
    let app = spawn_app(|_| {}).await;
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/agents/billing.json");
    let out = app.orca(&["agents", "put", file], "").await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert_eq!(said.trim(), "agent billing registered (latest version v1)");
    let out = app.orca(&["agents", "list"], "").await;
    let table = text(&out.stdout);
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        table.contains("billing") && table.contains("invoices"),
        "{table}"
    );
    let out = app.orca(&["agents", "show", "billing", "--json"], "").await;
    let agent: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(agent["name"], "billing");
    let out = app.orca(&["agents", "delete", "billing"], "").await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let out = app.orca(&["agents", "show", "billing"], "").await;
    assert_eq!(code(&out), 2);
    assert!(text(&out.stderr).contains("404"), "{}", text(&out.stderr));
}

#[tokio::test]
async fn a_yes_no_question_takes_yes() {
    let app = spawn_app(|_| {}).await;
    let plan = write_json(app.dir.path(), "approval.json", &approval());
    let out = app.orca(&["run", "x", "--plan", &plan], "yes\n").await;
    assert_eq!(
        code(&out),
        0,
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let answered = app
        .history(&run_id_of(&app).await)
        .await
        .into_iter()
        .find(|e| e["step_id"] == "approve" && e["data"]["status"] == "completed")
        .unwrap();
    assert_eq!(answered["data"]["output"], json!({ "approved": true }));
}

#[tokio::test]
async fn with_no_server_it_asks_whether_orca_serve_is_running() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_orca"))
        .args(["runs", "list", "--url", &format!("http://127.0.0.1:{port}")])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("is `orca serve` running there?"),
        "{stderr}"
    );
}

#[tokio::test]
async fn schedules_create_list_show_disable_and_delete_round_trip() {
    let app = spawn_app(|_| {}).await;
    let body = json!({ "input": "x", "orchestration": "fixed", "plan": two_sums() });
    let request = write_json(app.dir.path(), "sums.json", &body);
    let args = [
        "schedules",
        "create",
        "--request",
        &request,
        "--every-ms",
        "1000",
    ];
    let out = app
        .orca(&[&args[..], &["--name", "sums", "--json"]].concat(), "")
        .await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["interval_ms"], 1000);
    assert_eq!(created["run"], body);

    let out = app.orca(&["schedules", "list"], "").await;
    let table = text(&out.stdout);
    assert!(table.starts_with("ID"), "{table}");
    assert!(
        table.contains(&id) && table.contains("sums (every 1000 ms)"),
        "{table}"
    );

    // Once a tick has started its run, `show` lists it.
    let path = app.url(&format!("/v1/schedules/{id}"));
    let fired =
        crate::support::poll_json(&app.client, &path, |s| s["last_run_id"].is_string()).await;
    let run_id = fired["last_run_id"].as_str().unwrap().to_owned();
    let out = app.orca(&["schedules", "show", &id], "").await;
    let shown = text(&out.stdout);
    assert!(
        shown.contains("every 1000 ms") && shown.contains(&run_id),
        "{shown}"
    );
    // "fired 1 time", "fired 2 times".
    let fired = shown.split("fired ").nth(1).and_then(|s| s.lines().next());
    let (n, noun) = fired.and_then(|f| f.split_once(' ')).expect(&shown);
    let n: u64 = n.parse().expect(&shown);
    assert_eq!(noun, if n == 1 { "time" } else { "times" }, "{shown}");

    let out = app.orca(&["schedules", "disable", &id, "--json"], "").await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let disabled: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            disabled["enabled"].clone(),
            disabled["next_fire_at"].clone()
        ),
        (json!(false), Value::Null)
    );

    // Bad input: the server's 422 (exit 2), and flags that cannot go together.
    let out = app
        .orca(&["schedules", "create", "x", "--cron", "61 * * * *"], "")
        .await;
    assert_eq!(code(&out), 2);
    assert!(text(&out.stderr).contains("/cron"), "{}", text(&out.stderr));
    let out = app
        .orca(
            &[
                "schedules",
                "create",
                "x",
                "--cron",
                "* * * * *",
                "--every-ms",
                "5000",
            ],
            "",
        )
        .await;
    assert_eq!(code(&out), 2);

    let out = app.orca(&["schedules", "delete", &id], "").await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let out = app.orca(&["schedules", "show", &id], "").await;
    assert_eq!(code(&out), 2);
    assert!(text(&out.stderr).contains("404"), "{}", text(&out.stderr));
}

#[tokio::test]
async fn runs_fork_replan_and_list_by_parent_from_the_command_line() {
    let app = spawn_app(|_| {}).await;
    let run = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "plan": two_sums() }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let out = app.orca(&["runs", "watch", &id], "").await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));

    let out = app
        .orca(&["runs", "fork", &id, "--checkpoint", "1", "--json"], "")
        .await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let fork: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(fork["parent"], json!({ "run_id": id, "checkpoint": 1 }));
    let fork_id = fork["id"].as_str().unwrap().to_owned();
    let out = app
        .orca(
            &["runs", "fork", &id, "--before-step", "second", "--watch"],
            "",
        )
        .await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("43"), "{}", text(&out.stdout));

    let out = app
        .orca(&["runs", "list", "--parent", &id, "--json"], "")
        .await;
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["runs"].as_array().unwrap().len(), 2, "{list}");
    let out = app.orca(&["runs", "show", &fork_id], "").await;
    let shown = text(&out.stdout);
    assert!(
        shown.contains(&format!("forked from   {id} (checkpoint 1)")),
        "{shown}"
    );

    // Refusals print the problem and exit 2.
    let out = app
        .orca(&["runs", "fork", &id, "--checkpoint", "9"], "")
        .await;
    assert_eq!(code(&out), 2);
    assert!(
        text(&out.stderr).contains("no checkpoint 9"),
        "{}",
        text(&out.stderr)
    );
    let out = app
        .orca(&["runs", "replan", &id, "--restore-version", "1"], "")
        .await;
    assert_eq!(code(&out), 2);
    assert!(text(&out.stderr).contains("409"), "{}", text(&out.stderr));
    let out = app.orca(&["runs", "replan", &id], "").await;
    assert_eq!(code(&out), 2, "a message or a version is needed");
}

#[tokio::test]
async fn runs_pause_and_resume_from_the_command_line() {
    let app = spawn_app(|_| {}).await;
    let waiting = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "plan": approval() }))
        .await;
    let id = waiting["id"].as_str().unwrap().to_owned();
    let out = app.orca(&["runs", "pause", &id], "").await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("pauses once"),
        "{}",
        text(&out.stdout)
    );
    let out = app.orca(&["runs", "resume", &id], "").await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let out = app.orca(&["runs", "resume", &id], "").await;
    assert_eq!(code(&out), 2, "resuming a run that is not paused is a 409");
    assert!(
        text(&out.stderr).contains("not paused"),
        "{}",
        text(&out.stderr)
    );
    let out = app
        .orca(&["runs", "list", "--status", "paused", "--json"], "")
        .await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert_eq!(
        app.orca(&["runs", "cancel", &id], "").await.status.code(),
        Some(0)
    );
}

#[tokio::test]
async fn a_plan_to_review_is_shown_and_approved_inline() {
    let app = spawn_app(|_| {}).await;
    let out = app
        .orca(
            &[
                "run",
                ARITHMETIC,
                "--orchestration",
                "planner",
                "--review-plans",
            ],
            "{\"decision\": \"maybe\"}\n{\"decision\": \"approve\"}\n",
        )
        .await;
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), 0, "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("Review plan version 1"), "{stdout}");
    assert!(
        stdout.contains("plan version 1:"),
        "the plan is shown: {stdout}"
    );
    assert!(
        stdout.contains("422"),
        "the refused answer is explained: {stdout}"
    );
    assert!(stdout.contains("30"), "{stdout}");
}

#[tokio::test]
async fn usage_shows_the_tenants_use_against_its_quota_and_run_takes_a_priority() {
    let app = spawn_app(|c| {
        c.quotas.default = orca::domain::quota::Quota {
            runs_per_minute: 5,
            ..Default::default()
        }
    })
    .await;
    let out = app.orca(&["run", ARITHMETIC, "--priority", "-3"], "").await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let (_, list) = app.get_json("/v1/runs").await;
    let (_, run) = app
        .get_json(&format!(
            "/v1/runs/{}",
            list["runs"][0]["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(run["request"]["priority"], -3);
    let out = app.orca(&["usage"], "").await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("last minute   1 of 5"), "{shown}");
    assert!(shown.contains("in progress   0 no limit"), "{shown}");
}

/// `orca --help` names every client command in its words about them, and `runs` names each of
/// its subcommands.
#[tokio::test]
async fn help_names_every_client_command() {
    let help = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_orca"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        text(&out.stdout)
    };
    // The commands `Commands:` lists, and the line each has there.
    let commands = |help: &str| -> Vec<(String, String)> {
        let listed = help.split("Commands:\n").nth(1).expect("a command list");
        listed
            .lines()
            .take_while(|l| !l.trim().is_empty())
            .filter_map(|l| l.trim().split_once(' '))
            .map(|(name, about)| (name.to_owned(), about.trim().to_owned()))
            .filter(|(name, _)| name != "help")
            .collect()
    };
    let top = help(&["--help"]);
    let about = top.split("Usage:").next().unwrap();
    let listed = commands(&top);
    let clients: Vec<&str> = listed
        .iter()
        .map(|(name, _)| name.as_str())
        .filter(|name| !["serve", "migrate", "openapi"].contains(name))
        .collect();
    assert!(clients.len() >= 7, "{top}");
    for name in &clients {
        assert!(
            about.contains(&format!("`{name}`")),
            "`orca --help` says which commands are clients; not {name}: {about}"
        );
    }
    let runs_line = &listed.iter().find(|(name, _)| name == "runs").unwrap().1;
    for (name, _) in commands(&help(&["runs", "--help"])) {
        let line = runs_line.to_lowercase();
        assert!(line.contains(&name), "{name} in {runs_line:?}");
    }
}

#[tokio::test]
async fn the_next_page_command_keeps_the_filters_and_runs_as_printed() {
    let app = spawn_app(|_| {}).await;
    let fixed = |metadata: Value| json!({ "input": "x", "orchestration": "fixed", "plan": two_sums(), "metadata": metadata });
    // Newest first: four fixed runs of team "blue sky" between other runs, the oldest fixed
    // run of no team.
    let mut expected = Vec::new();
    app.create_run(fixed(json!({}))).await;
    for i in 0..4 {
        if i < 2 {
            app.create_run(json!({ "input": "hello" })).await;
        }
        let run = app.create_run(fixed(json!({ "team": "blue sky" }))).await;
        expected.insert(0, run["id"].as_str().unwrap().to_owned());
    }
    const KEY: &str = "never-printed-key";
    let args = [
        "runs",
        "list",
        "--orchestration",
        "fixed",
        "--metadata",
        "team=blue sky",
        "--limit",
        "3",
        "--api-key",
        KEY,
    ];
    let out = app.orca(&args, "").await;
    let page = text(&out.stdout);
    assert_eq!(code(&out), 0, "{page}\n{}", text(&out.stderr));
    let more = page.lines().last().unwrap();
    let command = more
        .strip_prefix("more: orca runs list --orchestration fixed --metadata 'team=blue sky' --limit 3 --cursor ")
        .unwrap_or_else(|| panic!("the filters and the limit are kept: {page}"));
    assert!(!page.contains(KEY), "{page}");
    assert!(!command.contains(' '), "{more}");

    // The printed command, run by a shell as a user pastes it, prints the rest of the list.
    let bin = app.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_orca"), bin.join("orca")).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let again = tokio::process::Command::new("sh")
        .args(["-c", &more["more: ".len()..]])
        .env("PATH", path)
        .env("ORCA_URL", &app.base)
        .env_remove("ORCA_API_KEY")
        .kill_on_drop(true)
        .output();
    let again = tokio::time::timeout(PATIENCE, again)
        .await
        .unwrap()
        .unwrap();
    let rest = text(&again.stdout);
    assert_eq!(code(&again), 0, "{rest}\n{}", text(&again.stderr));
    let shown: Vec<&str> = [page.as_str(), rest.as_str()]
        .iter()
        .flat_map(|p| p.lines())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.len() == 36)
        .collect();
    assert_eq!(shown, expected, "{page}{rest}");
    assert!(!rest.contains("more:"), "the last page: {rest}");
}

#[tokio::test]
async fn workflows_list_has_a_header_row() {
    let app = spawn_app(|_| {}).await;
    let out = app.orca(&["workflows", "list"], "").await;
    assert_eq!(text(&out.stdout), "no workflows\n");
    let sums = write_json(app.dir.path(), "sums.json", &two_sums());
    let out = app
        .orca(&["workflows", "put", &sums, "--name", "sums"], "")
        .await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let out = app.orca(&["workflows", "list"], "").await;
    let table = text(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["NAME", "VERSION", "DESCRIPTION"], "{table}");
    assert!(lines[1].starts_with("sums "), "{table}");
}

#[tokio::test]
async fn counts_read_in_the_singular_and_the_plural() {
    let app = spawn_app(|_| {}).await;
    let one = json!({ "steps": [
        { "id": "only", "kind": "tool", "input": { "tool": "math.calculate", "arguments": { "expression": "6 * 7" } } },
    ]});
    let plan = write_json(app.dir.path(), "one.json", &one);
    let out = app.orca(&["run", "x", "--plan", &plan], "").await;
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), 0, "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("plan v1: 1 step (initial)"), "{stdout}");
    let out = app
        .orca(&["runs", "show", &run_id_of(&app).await], "")
        .await;
    let shown = text(&out.stdout);
    assert!(
        shown.contains("0 prompt tokens + 0 completion tokens, 0 LLM calls, 1 tool call\n"),
        "{shown}"
    );
    let plan = write_json(app.dir.path(), "two.json", &two_sums());
    let out = app.orca(&["run", "x", "--plan", &plan], "").await;
    let stdout = text(&out.stdout);
    assert!(stdout.contains("plan v1: 2 steps (initial)"), "{stdout}");
    let (_, run) = app
        .get_json(&format!("/v1/runs/{}", run_id_of(&app).await))
        .await;
    assert_eq!(run["usage"]["tool_calls"], 2, "{run}");
    let out = app
        .orca(&["runs", "show", run["id"].as_str().unwrap()], "")
        .await;
    assert!(
        text(&out.stdout).contains(", 2 tool calls\n"),
        "{}",
        text(&out.stdout)
    );
}

/// A fork's progress counts the steps it kept from its parent as done from the start.
#[tokio::test]
async fn a_forks_progress_starts_from_the_steps_it_kept() {
    let app = spawn_app(|_| {}).await;
    let mut plan = two_sums();
    plan["steps"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "id": "third", "kind": "tool",
        "depends_on": ["second"], "input": { "tool": "math.calculate",
        "arguments": { "expression": "{{ steps.second.output.result }} * 2" } } }));
    let run = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let out = app.orca(&["runs", "watch", &id], "").await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let out = app
        .orca(
            &["runs", "fork", &id, "--before-step", "third", "--watch"],
            "",
        )
        .await;
    let shown = text(&out.stdout);
    assert_eq!(code(&out), 0, "{shown}\n{}", text(&out.stderr));
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines[0], "plan v1: 3 steps (fork)", "{shown}");
    assert_eq!(
        lines[1], "✓ kept 2 steps from the parent run: first, second [2/3]",
        "{shown}"
    );
    assert!(
        lines[3].starts_with("✓ step third (tool) completed") && lines[3].ends_with(" [3/3]"),
        "{shown}"
    );
    assert!(shown.contains("\"result\": 86"), "{shown}");
}

/// A plan review is answered with words: `reject REASON`, `edit FILE`, `approve`.
#[tokio::test]
async fn a_plan_review_takes_approve_reject_reason_and_edit_file() {
    use crate::support::scripted_llm::{Reply, ScriptedLlm};
    let llm = ScriptedLlm::start().await;
    let app = spawn_app(|c| crate::support::app::use_scripted(c, &llm)).await;
    let calc = |id: &str, expression: &str| {
        json!({ "id": id, "kind": "tool",
            "input": { "tool": "math.calculate", "arguments": { "expression": expression } } })
    };
    llm.push(Reply::json(json!({ "steps": [calc("one", "1 + 1")] })));
    llm.push(Reply::json(
        json!({ "steps": [calc("one", "1 + 1"), calc("two", "2 * 10")] }),
    ));
    let edit = json!({ "steps": [calc("one", "1 + 1"), calc("two", "2 * 100")],
        "output": "{{ steps.two.output.result }}" });
    let edit = write_json(app.dir.path(), "edit.json", &edit);
    let review = ["run", "add", "--orchestration", "planner", "--review-plans"];
    let answers = format!("reject\nreject multiply by ten as well\nedit {edit}\n");
    let out = app.orca(&review, &answers).await;
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), 0, "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("answer approve, reject REASON, edit FILE"),
        "{stdout}"
    );
    assert!(
        stdout.contains("say why after `reject` (the planner reads it): reject REASON\ntry again"),
        "{stdout}"
    );
    let told = llm.requests()[1].to_string();
    assert!(told.contains("multiply by ten as well"), "{told}");
    let (_, run) = app
        .get_json(&format!("/v1/runs/{}", run_id_of(&app).await))
        .await;
    assert_eq!(run["output"], 200, "the edit ran: {run}");

    llm.push(Reply::json(json!({ "steps": [calc("one", "40 + 2")],
        "output": "{{ steps.one.output.result }}" })));
    let out = app.orca(&review, "approve\n").await;
    assert_eq!(
        code(&out),
        0,
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let (_, run) = app
        .get_json(&format!("/v1/runs/{}", run_id_of(&app).await))
        .await;
    assert_eq!(run["output"], 42, "{run}");
}

#[tokio::test]
async fn watching_a_run_again_asks_no_question_that_was_answered_and_shows_counts_as_words() {
    let app = spawn_app(|_| {}).await;
    let run = app
        .create_run(json!({ "input": "x", "orchestration": "fixed", "plan": approval() }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let mut events = app.events(&id).await;
    while let Some(e) = events.next_event().await {
        if e.kind() == "input_required" {
            break;
        }
    }
    let answer = app
        .answer(&id, "approve", json!({ "approved": true }))
        .await;
    assert_eq!(answer.status(), 202);
    assert_eq!(
        crate::support::final_data(&events.read_to_final().await)["status"],
        "succeeded"
    );

    // The replay meets the old question: it is not asked again (standard input is closed, so
    // asking would leave the run "waiting for an answer from elsewhere").
    let out = app.orca(&["runs", "watch", &id], "").await;
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), 0, "{stdout}\n{}", text(&out.stderr));
    assert!(!stdout.contains("input required"), "{stdout}");
    assert!(stdout.contains("succeeded"), "{stdout}");

    let out = app.orca(&["runs", "show", &id], "").await;
    let stdout = text(&out.stdout);
    let steps = stdout
        .lines()
        .find(|l| l.starts_with("steps "))
        .unwrap_or_default();
    assert!(steps.ends_with("2 completed"), "{stdout}");
}

/// A plan run of `session` that succeeds whole, or (`partial`) with one step failed under
/// continue-on-failure; its id.
async fn session_run(app: &TestApp, session: &str, partial: bool) -> String {
    let second = if partial { "1 / 0" } else { "3 + 3" };
    let events = app
        .stream_run(json!({ "input": "go", "orchestration": "fixed", "session_id": session,
            "plan": { "settings": { "stop_on_first_failure": false }, "steps": [
                { "id": "first", "kind": "tool", "input": { "tool": "math.calculate", "arguments": { "expression": "2 + 2" } } },
                { "id": "second", "kind": "tool", "input": { "tool": "math.calculate", "arguments": { "expression": second } } } ],
              "output": "{{ steps.first.output.result }}" } }))
        .await;
    let fin = crate::support::app::final_data(&events);
    let want = if partial { "partial" } else { "success" };
    assert_eq!(fin["completion"], want, "{fin}");
    events[0].json()["run_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn runs_list_says_partial_and_filters_by_completion_and_session_and_sessions_list_finds_them()
{
    let app = spawn_app(|_| {}).await;
    let whole = session_run(&app, "trip", false).await;
    let partial = session_run(&app, "trip", true).await;
    let other = session_run(&app, "work", false).await;

    let out = app.orca(&["runs", "list"], "").await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    let line = |id: &str| {
        shown
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("no {id}: {shown}"))
            .to_owned()
    };
    assert!(line(&partial).contains("succeeded (partial)"), "{shown}");
    assert!(!line(&whole).contains("partial"), "{shown}");

    let listed = |args: &'static [&'static str]| {
        let app = &app;
        async move {
            let out = app.orca(args, "").await;
            assert_eq!(code(&out), 0, "{args:?}: {}", text(&out.stderr));
            let shown = text(&out.stdout);
            let ids: Vec<String> = shown
                .lines()
                .skip(1)
                .filter_map(|l| l.split_whitespace().next())
                .map(str::to_owned)
                .collect();
            (shown, ids)
        }
    };
    let (_, ids) = listed(&["runs", "list", "--completion", "partial"]).await;
    assert_eq!(ids, [partial.as_str()]);
    let (_, ids) = listed(&["runs", "list", "--session", "trip"]).await;
    assert_eq!(ids, [partial.as_str(), whole.as_str()]);
    let (_, ids) = listed(&[
        "runs",
        "list",
        "--session",
        "work",
        "--completion",
        "success",
    ])
    .await;
    assert_eq!(ids, [other.as_str()]);

    // Sessions: the one with the newest run first, its runs, variables and last run.
    let (shown, ids) = listed(&["sessions", "list"]).await;
    assert!(shown.starts_with("SESSION"), "a header row: {shown}");
    assert_eq!(ids, ["work", "trip"], "{shown}");
    let trip = shown.lines().find(|l| l.starts_with("trip")).unwrap();
    let cells: Vec<&str> = trip.split_whitespace().collect();
    assert_eq!(cells[1..3], ["2", "0"], "runs and variables: {trip}");
    assert!(
        trip.contains("succeeded (partial)") && trip.ends_with(&partial),
        "{trip}"
    );

    // A page at a time: the hint is the command for the next page.
    let out = app.orca(&["sessions", "list", "--limit", "1"], "").await;
    let shown = text(&out.stdout);
    let hint = shown
        .lines()
        .find_map(|l| l.strip_prefix("more: orca "))
        .unwrap_or_else(|| panic!("no hint: {shown}"));
    assert!(
        hint.starts_with("sessions list --limit 1 --cursor "),
        "{hint}"
    );
    let args: Vec<&str> = hint.split(' ').collect();
    let out = app.orca(&args, "").await;
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let next = text(&out.stdout);
    assert!(next.lines().nth(1).unwrap().starts_with("trip"), "{next}");
    assert!(!next.contains("more:"), "the last page: {next}");
}
