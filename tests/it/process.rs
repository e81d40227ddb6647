//! The `orca` binary as a user runs it: what it prints when the configuration is wrong, and
//! that its logs are plain text when standard error is not a terminal.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::support::PATIENCE;

fn orca(dir: &tempfile::TempDir) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orca"));
    cmd.current_dir(dir.path())
        .env_remove("ORCA_CONFIG")
        .env_remove("ORCA_BIND")
        .env_remove("DATABASE_URL")
        .env("ORCA_LLM__PROVIDER", "offline")
        // A backtrace would point into orca's source; the message must not need one.
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

fn db(dir: &tempfile::TempDir) -> String {
    crate::support::db::database_url(dir.path())
}

#[tokio::test]
async fn configuration_errors_name_what_the_user_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("orca.toml");
    std::fs::write(&toml, "[engine]\nmax_runing_runs = 2\n").unwrap();
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "[server]\nconsole = true\nbind = \n").unwrap();
    // (environment, arguments, what stderr must name)
    type Case<'a> = (Vec<(&'a str, &'a str)>, Vec<&'a str>, Vec<&'a str>);
    let cases: Vec<Case> = vec![
        (
            vec![("ORCA_ENGINE__MAX_RUNNING_RUNS", "abc")],
            vec![],
            vec!["ORCA_ENGINE__MAX_RUNNING_RUNS", "\"abc\""],
        ),
        (
            vec![("ORCA_ENGINE__MAX_RUNNING_RUNS", "0")],
            vec![],
            vec!["ORCA_ENGINE__MAX_RUNNING_RUNS", "at least 1"],
        ),
        (
            vec![],
            vec!["--config", toml.to_str().unwrap()],
            vec![
                "engine.max_runing_runs",
                "orca.toml",
                "did you mean `max_running_runs`?",
            ],
        ),
        (
            vec![],
            vec!["--config", broken.to_str().unwrap()],
            vec!["broken.toml: TOML parse error at line 3"],
        ),
        (
            vec![],
            vec!["--bind", "0.0.0.0:0"],
            vec!["--bind", "server.allow_unauthenticated_public_bind"],
        ),
    ];
    for (env, args, wanted) in cases {
        let mut cmd = orca(&dir);
        cmd.args(["serve", "--database-url", &db(&dir)]).args(&args);
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let out = tokio::time::timeout(PATIENCE, cmd.output())
            .await
            .expect("orca exits")
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{env:?} {args:?}: {stderr}");
        for w in wanted {
            assert!(stderr.contains(w), "{env:?} {args:?}: wanted {w}: {stderr}");
        }
        for unwanted in [".rs:", "src/", "backtrace", "figment", "\x1b["] {
            assert!(
                !stderr.contains(unwanted),
                "{env:?} {args:?}: {unwanted:?} in {stderr}"
            );
        }
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    }
}

#[tokio::test]
async fn a_busy_port_names_its_address_and_suggests_another() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let mut cmd = orca(&dir);
    cmd.args(["serve", "--database-url", &db(&dir), "--bind", &address]);
    let out = tokio::time::timeout(PATIENCE, cmd.output())
        .await
        .expect("orca exits")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let wanted = format!(
        "error: binding {address} (server.bind): the address is in use by another process \
         (another orca?); stop it, or serve elsewhere with --bind 127.0.0.1:PORT (or ORCA_BIND)"
    );
    assert!(stderr.contains(&wanted), "{stderr}");
}

#[tokio::test]
async fn a_database_orca_cannot_open_is_a_clear_error_without_its_password() {
    let dir = tempfile::tempdir().unwrap();
    // A closed loopback port: nothing listens on port 1.
    let cases = [
        ("mysql://x", vec!["database.url", "sqlite: or postgres://"]),
        (
            "postgres://orca:hunter2-secret@127.0.0.1:1/orca",
            vec![
                "database.url",
                "Connection refused",
                "postgres://orca:***@127.0.0.1:1",
            ],
        ),
    ];
    // URLs that do not parse: the password must go all the same.
    let unparsable = [
        "postgres://orca:Pw#hunter2@127.0.0.1:1/orca",
        "postgres://orca:Pw/hunter2@127.0.0.1:1/orca",
        "postgres://orca:hunter2@127.0.0.1:99999999/orca",
        "postgres://orca:hunter2@[::1/orca",
        "postgres://orca@127.0.0.1:1/orca?password=hunter2",
    ];
    let cases = cases.into_iter().chain(
        unparsable
            .into_iter()
            .map(|url| (url, vec!["database.url", "***"])),
    );
    for (url, wanted) in cases {
        let mut cmd = orca(&dir);
        cmd.args(["serve", "--database-url", url]);
        let out = tokio::time::timeout(PATIENCE, cmd.output())
            .await
            .expect("orca exits at once")
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{url}: {stderr}");
        for w in wanted {
            assert!(stderr.contains(w), "{url}: wanted {w}: {stderr}");
        }
        for unwanted in ["hunter2", "panicked", ".rs:", "backtrace"] {
            assert!(
                !stderr.contains(unwanted),
                "{url}: {unwanted:?} in {stderr}"
            );
        }
    }
}

#[tokio::test]
async fn logs_are_plain_text_on_a_non_terminal_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = orca(&dir)
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--database-url",
            &db(&dir),
        ])
        .env("RUST_LOG", "info")
        .spawn()
        .unwrap();
    let (listening, text) = logged_until_listening(&mut child).await;
    assert!(listening, "the start is logged on stderr: {text}");
    assert!(!text.contains('\x1b'), "ANSI escapes in {text:?}");
}

/// The container image's default (a public bind, opted in, no keys: see the Dockerfile)
/// serves, and its first lines say who can reach it and how to set keys.
#[tokio::test]
async fn the_images_default_serves_and_warns_that_it_has_no_keys() {
    let dockerfile = include_str!("../../Dockerfile");
    for line in [
        "ORCA_BIND=0.0.0.0:8080",
        "ORCA_SERVER__ALLOW_UNAUTHENTICATED_PUBLIC_BIND=true",
        "CMD [\"serve\"]",
    ] {
        assert!(dockerfile.contains(line), "the Dockerfile lacks {line}");
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = orca(&dir)
        .args(["serve", "--database-url", &db(&dir)])
        // Port 0 of every interface: the image's address, on a port of its own.
        .env("ORCA_BIND", "0.0.0.0:0")
        .env("ORCA_SERVER__ALLOW_UNAUTHENTICATED_PUBLIC_BIND", "true")
        .spawn()
        .unwrap();
    let (listening, text) = logged_until_listening(&mut child).await;
    assert!(listening, "orca serves: {text}");
    let warning = "serving 0.0.0.0:0 with no API keys: anyone who can reach this port may \
         start runs and read every run. Publish it on the host's loopback only (docker run -p \
         127.0.0.1:8080:8080), or set keys: ORCA_AUTH__API_KEYS='[{ key = \"a long random \
         key\", tenant = \"default\" }]' (see docs/operating.md)";
    assert!(text.contains(warning), "{text}");
}

/// Resident memory after a first model call (design 001: under 50 MB), and what the exact
/// tokenizer would add: the default counts tokens without loading a vocabulary.
///
/// What is held is the server's own memory (`RssAnon`: heap, stacks, arenas), under 35 MB:
/// 50 MB less the ~15 MB of a release binary's pages it touches. The pages of the executable
/// itself are not counted: this suite runs a debug build, whose touched code and relocated
/// data alone are ~40 MB and grow with every feature, while the server's memory does not.
#[tokio::test]
async fn memory_after_the_first_model_call_stays_under_50_mb() {
    const MB: u64 = 1024 * 1024;
    let mut rss = Vec::new();
    for tokenizer in ["estimate", "o200k_base"] {
        let dir = tempfile::tempdir().unwrap();
        let env = [
            ("ORCA_LLM__PROVIDER", "offline"),
            ("ORCA_LLM__OFFLINE_TOKEN_DELAY_MS", "0"),
            ("ORCA_LLM__TOKENIZER", tokenizer),
        ];
        let server = crate::support::server::Server::start_with(dir.path(), &env).await;
        let text = server
            .client
            .post(server.url("/v1/runs"))
            .header("accept", "text/event-stream")
            .json(&serde_json::json!({ "input": "Say hello to the orcas." }))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(text.contains("\"succeeded\""), "{text}");
        eprintln!("{tokenizer}: VmRSS {} MB", server.rss_bytes() / MB);
        rss.push(server.anonymous_rss_bytes());
    }
    let (estimate, bpe) = (rss[0], rss[1]);
    eprintln!(
        "the server's own memory after the first call: {} MB (estimate), {} MB (o200k_base)",
        estimate / MB,
        bpe / MB
    );
    assert!(estimate < 35 * MB, "RssAnon {} MB", estimate / MB);
    // The measurement can tell: the BPE, when configured, is loaded by the same call.
    assert!(
        bpe > estimate + 20 * MB,
        "{} vs {} MB",
        bpe / MB,
        estimate / MB
    );
}

/// What a started `orca serve` writes to stderr until it says it is listening (or exits),
/// then kills it: whether it got there, and the lines.
async fn logged_until_listening(child: &mut tokio::process::Child) -> (bool, String) {
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let listening = tokio::time::timeout(PATIENCE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let done = line.contains("orca is listening");
            seen.push(line);
            if done {
                return true;
            }
        }
        false
    })
    .await
    .expect("orca logs in time");
    child.kill().await.unwrap();
    (listening, seen.join("\n"))
}
