//! Slow, silent and half-sent requests: header and body timeouts, the connection limit, and a
//! stop that no stalled client can hold up (the real binary under SIGTERM).

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::support::*;

fn addr(app: &TestApp) -> String {
    app.base.trim_start_matches("http://").to_owned()
}

/// Reads until the peer closes the connection (EOF or reset), within PATIENCE; returns what
/// arrived before.
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut buf))
            .await
            .expect("the server closes the connection in time");
        match n {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&all).into_owned(),
            Ok(n) => all.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads until `needle` has arrived, within PATIENCE.
async fn read_until(stream: &mut TcpStream, needle: &str) -> String {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&all).contains(needle) {
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut buf))
            .await
            .expect("the server answers in time")
            .expect("read");
        assert!(
            n > 0,
            "closed before {needle:?}: {}",
            String::from_utf8_lossy(&all)
        );
        all.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&all).into_owned()
}

#[tokio::test]
async fn a_client_slow_to_send_its_headers_is_disconnected_while_healthz_answers() {
    let app = spawn_app(|c| c.server.header_read_timeout_secs = 1).await;
    let mut slow = TcpStream::connect(addr(&app)).await.unwrap();
    let started = Instant::now();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: orca\r\n")
        .await
        .unwrap();
    // A slowloris: one more header line every 100 ms, never the blank line that ends them.
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut buf = [0u8; 1024];
    let mut healthy = 0;
    let closed_after = tokio::time::timeout(PATIENCE, async {
        loop {
            tokio::select! {
                r = slow.read(&mut buf) => {
                    assert!(matches!(r, Ok(0) | Err(_)), "no response to half a request: {r:?}");
                    return started.elapsed();
                }
                _ = tick.tick() => {
                    if slow.write_all(b"X-Slow: still here\r\n").await.is_err() {
                        return started.elapsed();
                    }
                    // Meanwhile everyone else is served.
                    let (status, body) = app.get_json("/healthz").await;
                    assert_eq!((status, body["status"].as_str()), (200, Some("ok")));
                    healthy += 1;
                }
            }
        }
    })
    .await
    .expect("the slow connection is closed after the header timeout");
    assert!(
        closed_after >= Duration::from_millis(900),
        "closed by the header timeout, not before: {closed_after:?}"
    );
    assert!(
        healthy >= 1,
        "healthz answered while the slow client trickled"
    );
}

#[tokio::test]
async fn a_body_slower_than_the_body_timeout_gets_408_and_the_connection_closes() {
    let app = spawn_app(|c| c.server.body_read_timeout_secs = 1).await;
    let mut stream = TcpStream::connect(addr(&app)).await.unwrap();
    stream
        .write_all(
            b"POST /v1/runs HTTP/1.1\r\nHost: orca\r\nContent-Type: application/json\r\n\
              Content-Length: 100\r\n\r\n{\"input\": \"",
        )
        .await
        .unwrap();
    let answer = read_until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["code"], "request_timeout");
    assert_eq!(body["status"], 408);
}

#[tokio::test]
async fn connections_past_the_limit_get_503_until_idle_ones_time_out() {
    let app = spawn_app(|c| {
        c.server.max_connections = 2;
        c.server.header_read_timeout_secs = 1;
    })
    .await;
    // Two keep-alive connections take both places: each is served once, then sits idle.
    let mut idle = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(addr(&app)).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: orca\r\n\r\n")
            .await
            .unwrap();
        let answer = read_until(&mut s, "\"ok\"").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        idle.push(s);
    }
    // A third is told to come back later, at once, instead of costing a descriptor for long.
    let client = reqwest::Client::new();
    let resp = tokio::time::timeout(PATIENCE, client.get(app.url("/healthz")).send())
        .await
        .expect("answered at once")
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    let problem: Value = resp.json().await.unwrap();
    assert_eq!(problem["code"], "overloaded");
    // Idle connections are closed by the header timeout, which frees their places.
    for mut s in idle {
        assert_eq!(read_until_closed(&mut s).await, "");
    }
    let resp = client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
}

/// The real binary, with JSON logs on a pipe; its address is read from the log line that
/// announces it (it binds port 0).
struct Server {
    child: tokio::process::Child,
    addr: String,
    /// Keeps draining the log pipe so the server never blocks on a full pipe; gives its
    /// last lines once the server has exited (to say why it exited as it did).
    logs: tokio::task::JoinHandle<Vec<String>>,
}

/// Starts the binary; `fd_limit` caps its open files (soft and hard, so it cannot raise it).
async fn start_server(
    dir: &tempfile::TempDir,
    env: &[(&str, &str)],
    fd_limit: Option<libc::rlim_t>,
) -> Server {
    let db = crate::support::db::database_url(dir.path());
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_orca"));
    if let Some(n) = fd_limit {
        let lim = libc::rlimit {
            rlim_cur: n,
            rlim_max: n,
        };
        // SAFETY: setrlimit is async-signal-safe; it runs in the child before exec.
        unsafe {
            command.pre_exec(move || {
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    }
    let mut child = command
        .args(["--log-format", "json", "serve", "--bind", "127.0.0.1:0"])
        .args(["--database-url", &db])
        .env("ORCA_LLM__PROVIDER", "offline")
        .env("RUST_LOG", "info")
        .envs(env.iter().copied())
        .current_dir(dir.path())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start orca");
    // Logs go to stderr.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = tokio::time::timeout(PATIENCE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let Ok(log) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if log["fields"]["message"] == "orca is listening" {
                return log["fields"]["address"].as_str().unwrap().to_owned();
            }
        }
        panic!("orca exited before listening");
    })
    .await
    .expect("orca starts listening in time");
    let logs = tokio::spawn(async move {
        let mut last = std::collections::VecDeque::new();
        while let Ok(Some(line)) = lines.next_line().await {
            if last.len() == 20 {
                last.pop_front();
            }
            last.push_back(line);
        }
        Vec::from(last)
    });
    Server { child, addr, logs }
}

#[tokio::test]
async fn sigterm_closes_half_sent_requests_at_once_instead_of_waiting_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    // A grace period far longer than the test may take, and long header and body timeouts:
    // only the stop itself may end these requests.
    const GRACE_SECS: u64 = 60;
    let mut server = start_server(
        &dir,
        &[
            ("ORCA_SERVER__SHUTDOWN_GRACE_SECS", "60"),
            ("ORCA_SERVER__HEADER_READ_TIMEOUT_SECS", "600"),
            ("ORCA_SERVER__BODY_READ_TIMEOUT_SECS", "600"),
        ],
        None,
    )
    .await;
    // Half a request line and headers.
    let mut headers_half = TcpStream::connect(&server.addr).await.unwrap();
    headers_half
        .write_all(b"POST /v1/runs HTTP/1.1\r\nHost: orca\r\nContent-Ty")
        .await
        .unwrap();
    // Whole headers and part of the body; `Expect: 100-continue` tells us when the handler
    // is reading the body, so the signal surely finds this request in progress.
    let mut body_half = TcpStream::connect(&server.addr).await.unwrap();
    body_half
        .write_all(
            b"POST /v1/runs HTTP/1.1\r\nHost: orca\r\nContent-Type: application/json\r\n\
              Content-Length: 100\r\nExpect: 100-continue\r\n\r\n",
        )
        .await
        .unwrap();
    read_until(&mut body_half, "100 Continue\r\n\r\n").await;
    body_half.write_all(b"{\"input\": \"").await.unwrap();
    // An idle keep-alive connection that has had its answer.
    let mut idle = TcpStream::connect(&server.addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: orca\r\n\r\n")
        .await
        .unwrap();
    read_until(&mut idle, "\r\n\r\n").await;

    let pid = server.child.id().expect("running") as libc::pid_t;
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let signalled = Instant::now();
    let status = tokio::time::timeout(Duration::from_secs(GRACE_SECS), server.child.wait())
        .await
        .expect("orca exits without waiting the grace period for requests with no answer in hand")
        .unwrap();
    let took = signalled.elapsed();
    let logs = server.logs.await.unwrap();
    assert!(
        status.success(),
        "{status:?}; its last log lines:\n{}",
        logs.join("\n")
    );
    // Far below the grace period: nothing was waited for.
    assert!(
        took < Duration::from_secs(GRACE_SECS / 4),
        "exited {took:?} after SIGTERM"
    );
    // The client still sending headers and the idle one are closed; the one sending its body
    // is told to send it again.
    assert_eq!(read_until_closed(&mut headers_half).await, "");
    let answer = read_until_closed(&mut body_half).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("send the request again"), "{answer}");
    assert_eq!(read_until_closed(&mut idle).await, "");
}

#[tokio::test]
async fn half_open_connections_cannot_exhaust_descriptors_and_healthz_answers() {
    // The 1,100 half-sent requests against a 1,024-descriptor process, scaled down:
    // 300 against 256. Without limits the server accepts until it runs out of descriptors,
    // holds them for ever, and answers nobody again.
    let dir = tempfile::tempdir().unwrap();
    let mut server = start_server(
        &dir,
        &[("ORCA_SERVER__HEADER_READ_TIMEOUT_SECS", "1")],
        Some(256),
    )
    .await;
    let mut half_open = Vec::new();
    for _ in 0..300 {
        let mut s = TcpStream::connect(&server.addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: orca\r\n")
            .await
            .unwrap();
        half_open.push(s);
    }
    // No pooled connections: the server closes an idle keep-alive connection after the same
    // header timeout, and reusing one it just closed would fail the request, not the server.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let resp = tokio::time::timeout(
        PATIENCE,
        client.get(format!("http://{}/healthz", server.addr)).send(),
    )
    .await
    .expect("healthz answers while half-open connections come and go")
    .unwrap();
    // Served, or told to retry: either way the process is alive and answering.
    assert!(
        [200, 503].contains(&resp.status().as_u16()),
        "{}",
        resp.status()
    );
    // Every half-open connection is closed by the header timeout.
    for s in &mut half_open {
        read_until_closed(s).await;
    }
    let resp = client
        .get(format!("http://{}/healthz", server.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    server.child.start_kill().unwrap();
    server.child.wait().await.unwrap();
}
