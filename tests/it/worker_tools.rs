//! Worker tools end to end (issue 47): runs whose steps call a tool a worker serves, at every
//! nesting level; the run waits without its running slot; progress and cancel travel between
//! run and worker; a worker that vanishes loses its task to another; a kill -9 of orca with
//! tasks out, and two PostgreSQL replicas sharing one queue, lose and double nothing. The
//! workers here speak the protocol over HTTP as any worker does (the SDKs' own workers are
//! tested in their suites).

use std::collections::HashMap;

use futures::StreamExt;
use serde_json::{Value, json};

use crate::support::app::{TestApp, final_data, spawn_app};
use crate::support::db::PgServer;
use crate::support::{PATIENCE, Server, to_final};

/// One worker, speaking the protocol to the server at `base`.
#[derive(Clone)]
struct Worker {
    base: String,
    client: reqwest::Client,
    id: String,
}

impl Worker {
    fn new(base: &str, id: &str) -> Worker {
        Worker {
            base: base.trim_end_matches('/').to_owned(),
            client: reqwest::Client::new(),
            id: id.to_owned(),
        }
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let resp = (self.client.post(format!("{}{path}", self.base)))
            .json(&body)
            .send()
            .await
            .expect("the server answers");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// Polls `queue` for up to `max` tasks, waiting up to `wait_ms`.
    async fn poll(&self, queue: &str, max: u32, wait_ms: u64) -> Vec<Value> {
        let body =
            json!({"worker_id": self.id, "queue": queue, "max_tasks": max, "wait_ms": wait_ms});
        let (status, got) = self.post("/v1/workers/poll", body).await;
        assert_eq!(status, 200, "{got}");
        got["tasks"].as_array().cloned().unwrap_or_default()
    }

    async fn complete(&self, task: &str, output: Value) -> (u16, Value) {
        let body = json!({"worker_id": self.id, "output": output});
        self.post(&format!("/v1/tasks/{task}/complete"), body).await
    }

    async fn heartbeat(&self, task: &str, progress: Value) -> (u16, Value) {
        let body = json!({"worker_id": self.id, "progress": progress});
        self.post(&format!("/v1/tasks/{task}/heartbeat"), body)
            .await
    }

    /// Serves `queue` until `done` tasks were completed by this worker: each output is the
    /// arguments' `text` upper-cased. Returns the idempotency keys of what it completed.
    async fn serve(&self, queue: &str, done: usize) -> Vec<String> {
        let mut keys = Vec::new();
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while keys.len() < done {
            assert!(tokio::time::Instant::now() < deadline, "tasks did not come");
            for task in self.poll(queue, 8, 2000).await {
                let text = task["arguments"]["text"].as_str().unwrap_or_default();
                let output = json!({"text": text.to_uppercase()});
                let (status, answer) = self.complete(task["id"].as_str().unwrap(), output).await;
                assert_eq!(status, 200, "{answer}");
                keys.push(task["idempotency_key"].as_str().unwrap().to_owned());
            }
        }
        keys
    }
}

/// `text.shout` on queue `shouts`, as a tenant declares it.
fn shout_tool(heartbeat_ms: Option<u64>) -> Value {
    json!({
        "description": "Upper-cases a text.",
        "queue": "shouts",
        "input_schema": {"type": "object", "required": ["text"],
                         "properties": {"text": {"type": "string"}}},
        "heartbeat_ms": heartbeat_ms,
        "retry": {"max_attempts": 3, "backoff_ms": 10}
    })
}

fn shout(id: &str, text: &str) -> Value {
    json!({"id": id, "kind": "tool",
           "input": {"tool": "text.shout", "arguments": {"text": text}}})
}

async fn declare(client: &reqwest::Client, base: &str, tool: Value) {
    let resp = (client.put(format!("{base}/v1/tools/text.shout")))
        .json(&tool)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201, "{:?}", resp.text().await);
}

fn fixed(plan: Value) -> Value {
    json!({"input": "shout", "orchestration": "fixed", "plan": plan})
}

#[tokio::test]
async fn a_worker_tool_serves_calls_at_every_nesting_level() {
    let app = spawn_app(|_| {}).await;
    declare(&app.client, &app.base, shout_tool(None)).await;
    let inner = json!({"steps": [shout("deep", "in a workflow")]});
    let (status, body) = app.put_json("/v1/workflows/inner", &inner).await;
    assert_eq!(status, 201, "{body}");
    let plan = json!({"steps": [
        shout("top", "top"),
        {"id": "seq", "kind": "sequential", "input": {"steps": [shout("s1", "in sequence")]}},
        {"id": "par", "kind": "parallel", "input": {"steps": [shout("p1", "left"), shout("p2", "right")]}},
        {"id": "each", "kind": "loop", "input": {"for_each": [1, 2], "max_iterations": 2,
                                                   "steps": [shout("l1", "looped")]}},
        {"id": "wf", "kind": "workflow", "input": {"workflow": "inner"}}
    ]});
    let run = app.create_run(fixed(plan)).await;
    let id = run["id"].as_str().unwrap().to_owned();
    let reader = app.events(&id).await;
    // 1 + 1 + 2 + 2 (the loop's two rounds) + 1 calls.
    let keys = Worker::new(&app.base, "w-1").serve("shouts", 7).await;
    let events = to_final(reader).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"]["top"], json!({"text": "TOP"}), "{fin}");
    let distinct: std::collections::HashSet<&String> = keys.iter().collect();
    assert_eq!(distinct.len(), 7, "one task per call: {keys:?}");
    let results: Vec<Value> = (events.iter())
        .filter(|e| e.kind() == "tool_result")
        .map(|e| e.json()["data"]["output"]["text"].clone())
        .collect();
    for text in [
        "TOP",
        "IN SEQUENCE",
        "LEFT",
        "RIGHT",
        "LOOPED",
        "IN A WORKFLOW",
    ] {
        assert!(results.contains(&json!(text)), "{text} in {results:?}");
    }
    let (_, tasks) = app.get_json(&format!("/v1/tasks?run_id={id}")).await;
    let tasks = tasks["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 7, "{tasks:?}");
    assert!(
        tasks
            .iter()
            .all(|t| t["status"] == "completed" && t["attempt"] == 1)
    );
    let paths: Vec<&Value> = tasks.iter().map(|t| &t["path"]).collect();
    assert!(
        paths.contains(&&json!("wf")),
        "the workflow's call names its place: {paths:?}"
    );
}

#[tokio::test]
async fn a_run_waiting_on_a_task_holds_no_running_slot() {
    let app = spawn_app(|c| c.engine.max_running_runs = 1).await;
    declare(&app.client, &app.base, shout_tool(None)).await;
    let mut ids = Vec::new();
    for text in ["one", "two", "three"] {
        let run = app
            .create_run(fixed(json!({"steps": [shout("s", text)]})))
            .await;
        ids.push(run["id"].as_str().unwrap().to_owned());
    }
    // With one running slot, the three runs' tasks are all out at once: each run gave the
    // slot back while it waits.
    let worker = Worker::new(&app.base, "w-1");
    let mut claimed = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while claimed.len() < 3 {
        assert!(tokio::time::Instant::now() < deadline, "{claimed:?}");
        claimed.extend(worker.poll("shouts", 3, 2000).await);
    }
    for task in &claimed {
        let (status, _) = worker
            .complete(task["id"].as_str().unwrap(), json!({"ok": true}))
            .await;
        assert_eq!(status, 200);
    }
    for id in &ids {
        let events = to_final(app.events(id).await).await;
        assert_eq!(final_data(&events)["status"], "succeeded");
    }
}

/// A run with one call of `text.shout`, its stream, and the task a worker claimed.
async fn one_claimed(app: &TestApp, worker: &Worker) -> (String, crate::support::SseReader, Value) {
    let run = app
        .create_run(fixed(json!({"steps": [shout("s", "hi")]})))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let reader = app.events(&id).await;
    let mut tasks = Vec::new();
    while tasks.is_empty() {
        tasks = worker.poll("shouts", 1, 5000).await;
    }
    (id, reader, tasks.remove(0))
}

#[tokio::test]
async fn progress_reaches_the_stream_and_a_cancel_reaches_the_worker() {
    let app = spawn_app(|_| {}).await;
    declare(&app.client, &app.base, shout_tool(Some(60_000))).await;
    let worker = Worker::new(&app.base, "w-1");
    let (id, mut reader, task) = one_claimed(&app, &worker).await;
    let task_id = task["id"].as_str().unwrap();
    let (status, beat) = worker.heartbeat(task_id, json!({"done": 1, "of": 2})).await;
    assert_eq!(status, 200, "{beat}");
    let (_, progress) = next_progress(&mut reader).await;
    assert_eq!(progress["status"], "running", "{progress}");
    assert_eq!(
        progress["progress"]["progress"],
        json!({"done": 1, "of": 2})
    );
    assert_eq!(progress["progress"]["task_id"], task["id"]);

    let cancel = app
        .client
        .post(app.url(&format!("/v1/runs/{id}/cancel")))
        .send()
        .await
        .unwrap();
    let status = cancel.status();
    assert_eq!(status, 202, "{:?}", cancel.text().await);
    let events = to_final(reader).await;
    assert_eq!(final_data(&events)["status"], "cancelled");
    // The task is cancelled as the call is cut off (and by the sweeper, whichever is first):
    // the worker's heartbeats are refused from then on.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let (status, refused) = loop {
        let (status, answer) = worker.heartbeat(task_id, json!("still going")).await;
        if status != 200 || tokio::time::Instant::now() > deadline {
            break (status, answer);
        }
    };
    assert_eq!(
        (status, &refused["reason"]),
        (409, &json!("task_cancelled")),
        "{refused}"
    );
    let (status, refused) = worker.complete(task_id, json!("late")).await;
    assert_eq!(
        (status, &refused["reason"]),
        (409, &json!("task_cancelled"))
    );
    let (_, stored) = app.get_json(&format!("/v1/tasks/{task_id}")).await;
    assert_eq!(stored["status"], "cancelled", "{stored}");
}

#[tokio::test]
async fn a_worker_that_stops_heartbeating_loses_its_task_to_another() {
    let app = spawn_app(|_| {}).await;
    declare(&app.client, &app.base, shout_tool(Some(300))).await;
    let gone = Worker::new(&app.base, "w-gone");
    let (id, reader, first) = one_claimed(&app, &gone).await;
    // `gone` never heartbeats: its claim lapses and the task is offered again.
    let other = Worker::new(&app.base, "w-other");
    let mut again = Vec::new();
    while again.is_empty() {
        again = other.poll("shouts", 1, 5000).await;
    }
    let second = &again[0];
    assert_eq!(second["id"], first["id"]);
    assert_eq!(second["attempt"], 2, "{second}");
    assert_eq!(second["idempotency_key"], first["idempotency_key"]);
    let (status, _) = other
        .complete(second["id"].as_str().unwrap(), json!({"text": "HI"}))
        .await;
    assert_eq!(status, 200);
    let (status, refused) = gone
        .complete(first["id"].as_str().unwrap(), json!("late"))
        .await;
    assert_eq!(status, 409, "{refused}");
    let events = to_final(reader).await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(
        fin["output"],
        json!({"text": "HI"}),
        "the first completion wins"
    );
    let (_, tasks) = app.get_json(&format!("/v1/tasks?run_id={id}")).await;
    assert_eq!(tasks["tasks"].as_array().unwrap().len(), 1, "{tasks}");
}

#[tokio::test]
async fn three_workers_share_300_tasks_and_complete_each_once() {
    let app = spawn_app(|_| {}).await;
    declare(&app.client, &app.base, shout_tool(None)).await;
    let ten: Vec<Value> = (0..10)
        .map(|i| shout(&format!("p{i}"), &format!("t{i}")))
        .collect();
    let plan = json!({"steps": [{"id": "par", "kind": "parallel", "input": {"steps": ten}}]});
    let mut ids = Vec::new();
    for _ in 0..30 {
        let run = app.create_run(fixed(plan.clone())).await;
        ids.push(run["id"].as_str().unwrap().to_owned());
    }
    let counted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers = (0..3).map(|n| {
        let worker = Worker::new(&app.base, &format!("w-{n}"));
        let counted = counted.clone();
        async move { serve_share(&worker, &counted, 300).await }
    });
    let keys: Vec<String> = futures::future::join_all(workers).await.concat();
    assert_eq!(keys.len(), 300, "each task completed once");
    let distinct: std::collections::HashSet<&String> = keys.iter().collect();
    assert_eq!(distinct.len(), 300);
    for id in &ids {
        let events = to_final(app.events(id).await).await;
        assert_eq!(final_data(&events)["status"], "succeeded");
    }
}

/// Serves `shouts` until `total` tasks were completed by all the workers sharing `counted`.
async fn serve_share(
    worker: &Worker,
    counted: &std::sync::atomic::AtomicUsize,
    total: usize,
) -> Vec<String> {
    use std::sync::atomic::Ordering;
    let mut keys = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while counted.load(Ordering::SeqCst) < total {
        assert!(tokio::time::Instant::now() < deadline, "tasks did not come");
        for task in worker.poll("shouts", 4, 200).await {
            let (status, answer) = worker
                .complete(task["id"].as_str().unwrap(), json!("ok"))
                .await;
            assert_eq!(status, 200, "{answer}");
            keys.push(task["idempotency_key"].as_str().unwrap().to_owned());
            counted.fetch_add(1, Ordering::SeqCst);
        }
    }
    keys
}

/// Starts `n` runs of one `text.shout` call each on `server`.
async fn start_runs(server: &Server, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let body = fixed(json!({"steps": [shout("s", &format!("run {i}"))]}));
        let resp = (server.client.post(server.url("/v1/runs")))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        let run: Value = resp.json().await.unwrap();
        ids.push(run["id"].as_str().unwrap().to_owned());
    }
    ids
}

/// The runs' end statuses, read once each has ended.
async fn ended(server: &Server, ids: &[String]) -> HashMap<String, usize> {
    let mut statuses = HashMap::new();
    for id in ids {
        let events = to_final(server_events(server, id).await).await;
        *statuses
            .entry(final_data(&events)["status"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    statuses
}

async fn server_events(server: &Server, id: &str) -> crate::support::SseReader {
    let resp = (server
        .client
        .get(server.url(&format!("/v1/runs/{id}/events"))))
    .header("accept", "text/event-stream")
    .send()
    .await
    .unwrap();
    crate::support::SseReader::new(resp)
}

#[tokio::test]
async fn a_kill_9_with_50_tasks_claimed_completes_each_once_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path()).await;
    declare(&server.client, &server.url(""), shout_tool(None)).await;
    let ids = start_runs(&server, 50).await;
    let worker = Worker::new(&server.url(""), "w-1");
    let mut claimed = Vec::new();
    while claimed.len() < 50 {
        claimed.extend(worker.poll("shouts", 32, 5000).await);
    }
    server.kill();
    let server = Server::start(dir.path()).await;
    let worker = Worker::new(&server.url(""), "w-1");
    for task in &claimed {
        let (status, answer) = worker
            .complete(task["id"].as_str().unwrap(), json!("done"))
            .await;
        assert_eq!(status, 200, "a claim made before the kill holds: {answer}");
    }
    assert_eq!(
        ended(&server, &ids).await,
        HashMap::from([("succeeded".into(), 50)])
    );
    let (status, all) = get(&server, "/v1/tasks?limit=200").await;
    assert_eq!(status, 200);
    let all = all["tasks"].as_array().unwrap();
    assert_eq!(all.len(), 50, "no run queued its call twice");
    assert!(
        all.iter()
            .all(|t| t["status"] == "completed" && t["attempt"] == 1)
    );
}

/// Reads `reader` until a `status` event carrying a worker's progress, within [`PATIENCE`].
async fn next_progress(reader: &mut crate::support::SseReader) -> (u64, Value) {
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            let event = reader.next_event().await.expect("the stream goes on");
            let data = event.json()["data"].clone();
            if event.kind() == "status" && data.get("progress").is_some() {
                return (event.id.as_deref().unwrap().parse().unwrap(), data);
            }
        }
    });
    found.await.expect("a progress event within PATIENCE")
}

#[tokio::test]
async fn a_run_resumed_after_a_kill_9_shows_its_workers_latest_progress_again() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path()).await;
    declare(&server.client, &server.url(""), shout_tool(None)).await;
    let id = start_runs(&server, 1).await.remove(0);
    let mut reader = server_events(&server, &id).await;
    let worker = Worker::new(&server.url(""), "w-1");
    let mut claimed = Vec::new();
    while claimed.is_empty() {
        claimed = worker.poll("shouts", 1, 5000).await;
    }
    let task_id = claimed[0]["id"].as_str().unwrap().to_owned();
    let (status, beat) = worker.heartbeat(&task_id, json!("half way")).await;
    assert_eq!(status, 200, "{beat}");
    let (seen, _) = next_progress(&mut reader).await;
    drop(reader);
    server.kill();

    // The resumed run finds the task it queued, already holding that progress, and says so
    // (a takeover of a run whose lease lapsed on a loaded replica is the same resume).
    let server = Server::start(dir.path()).await;
    let resp = (server
        .client
        .get(server.url(&format!("/v1/runs/{id}/events"))))
    .header("last-event-id", seen.to_string())
    .send()
    .await
    .unwrap();
    let mut reader = crate::support::SseReader::new(resp);
    let (_, again) = next_progress(&mut reader).await;
    assert_eq!(again["progress"]["task_id"], json!(task_id), "{again}");
    assert_eq!(again["progress"]["progress"], json!("half way"), "{again}");

    let worker = Worker::new(&server.url(""), "w-1");
    let (status, answer) = worker.complete(&task_id, json!("done")).await;
    assert_eq!(status, 200, "{answer}");
    let events = to_final(reader).await;
    assert_eq!(final_data(&events)["status"], "succeeded");
}

async fn get(server: &Server, path: &str) -> (u16, Value) {
    let resp = server.client.get(server.url(path)).send().await.unwrap();
    (
        resp.status().as_u16(),
        resp.json().await.unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn two_replicas_share_one_queue_and_lose_or_double_no_task() {
    let pg = PgServer::start();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let db = crate::support::db::database_url_on(&pg.url, dirs[0].path());
    let env = [("ORCA_LLM__PROVIDER", "offline")];
    let a = Server::start_on(dirs[0].path(), &db, &env).await;
    let b = Server::start_on(dirs[1].path(), &db, &env).await;
    declare(&a.client, &a.url(""), shout_tool(None)).await;
    let (mut ids, more) = (start_runs(&a, 40).await, start_runs(&b, 40).await);
    ids.extend(more);
    // Four workers, two polling each replica: every task is completed by exactly one.
    let counted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers = (0..4).map(|n| {
        let base = if n % 2 == 0 { a.url("") } else { b.url("") };
        let worker = Worker::new(&base, &format!("w-{n}"));
        let counted = counted.clone();
        async move { serve_share(&worker, &counted, 80).await }
    });
    let keys: Vec<String> = futures::stream::iter(workers)
        .buffer_unordered(4)
        .collect::<Vec<_>>()
        .await
        .concat();
    let distinct: std::collections::HashSet<&String> = keys.iter().collect();
    assert_eq!((keys.len(), distinct.len()), (80, 80), "each task once");
    let (runs_a, runs_b) = ids.split_at(40);
    assert_eq!(
        ended(&a, runs_b).await,
        HashMap::from([("succeeded".into(), 40)])
    );
    assert_eq!(
        ended(&b, runs_a).await,
        HashMap::from([("succeeded".into(), 40)])
    );
}

/// A client of `base` with `key`, as tenant's workers and callers use it.
fn keyed(key: &str) -> reqwest::Client {
    crate::support::app::bearer_client(key)
}

async fn send(request: reqwest::RequestBuilder) -> (u16, Value) {
    let resp = request.send().await.expect("the server answers");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Starts a run of one `text.shout` call for the caller of `client`.
async fn run_with(client: &reqwest::Client, base: &str, text: &str) -> String {
    let body = fixed(json!({"steps": [shout("s", text)]}));
    let (status, run) = send(client.post(format!("{base}/v1/runs")).json(&body)).await;
    assert_eq!(status, 201, "{run}");
    run["id"].as_str().unwrap().to_owned()
}

/// The caller's tasks listed by `GET /v1/tasks?{query}`, once there are `n` (a run queues
/// its call in its own time, after the POST that created it answered).
async fn listed(client: &reqwest::Client, base: &str, query: &str, n: usize) -> Vec<Value> {
    let url = format!("{base}/v1/tasks?{query}");
    let page = crate::support::app::poll_json(client, &url, |page| {
        page["tasks"].as_array().is_some_and(|t| t.len() >= n)
    })
    .await;
    page["tasks"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn tenants_see_only_their_own_tasks_workers_and_queues() {
    const OPERATOR: &str = "operator-key-0123456789";
    let app = spawn_app(|c| {
        crate::support::app::two_tenants(c, ["key-a-0123456789", "key-b-0123456789"]);
        c.auth.operator_keys = vec![orca::config::Secret::new(OPERATOR)];
    })
    .await;
    let (a, b) = (keyed("key-a-0123456789"), keyed("key-b-0123456789"));
    // The same tool name and queue in both tenants: two tools, two queues.
    declare(&a, &app.base, shout_tool(None)).await;
    declare(&b, &app.base, shout_tool(None)).await;
    let run_a = run_with(&a, &app.base, "from a").await;
    let run_b = run_with(&b, &app.base, "from b").await;
    let worker_a = Worker {
        client: a.clone(),
        ..Worker::new(&app.base, "w-a")
    };
    let mut got = Vec::new();
    while got.is_empty() {
        got = worker_a.poll("shouts", 8, 5000).await;
    }
    assert_eq!(got.len(), 1, "a's worker gets a's task only: {got:?}");
    assert_eq!(got[0]["run_id"], json!(run_a));
    let task_a = got[0]["id"].as_str().unwrap().to_owned();

    // b cannot see, heartbeat, complete or fail a's task: it does not exist for b.
    let url = |path: &str| format!("{}{path}", app.base);
    let (status, _) = send(b.get(url(&format!("/v1/tasks/{task_a}")))).await;
    assert_eq!(status, 404);
    for action in ["heartbeat", "complete", "fail"] {
        let body = match action {
            "complete" => json!({"worker_id": "w-a", "output": "stolen"}),
            "fail" => json!({"worker_id": "w-a", "error": {"code": "x", "message": "y"}}),
            _ => json!({"worker_id": "w-a"}),
        };
        let (status, answer) = send(
            b.post(url(&format!("/v1/tasks/{task_a}/{action}")))
                .json(&body),
        )
        .await;
        assert_eq!(status, 404, "{action}: {answer}");
    }
    let seen = listed(&b, &app.base, "", 1).await;
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["run_id"], json!(run_b));
    let (_, workers) = send(b.get(url("/v1/workers"))).await;
    assert_eq!(workers["workers"], json!([]), "b sees no worker of a's");

    // Queue depth: b's task is queued; a's scrape shows only a's series.
    let metrics_url = format!("{}/metrics", app.base);
    let scrape = |client: reqwest::Client| {
        let url = metrics_url.clone();
        async move { client.get(url).send().await.unwrap().text().await.unwrap() }
    };
    let operator = scrape(keyed(OPERATOR)).await;
    assert!(
        operator.contains(r#"orca_tasks_queued{tenant="b",queue="shouts"} 1"#),
        "{operator}"
    );
    let mine = scrape(a.clone()).await;
    assert!(!mine.contains(r#"tenant="b""#), "{mine}");
    assert!(
        !mine.contains(r#"orca_tasks_queued{tenant="a""#),
        "a's only task is claimed: {mine}"
    );

    // a's worker completes its task; the run ends and the outcome is counted.
    let (status, _) = worker_a.complete(&task_a, json!({"text": "FROM A"})).await;
    assert_eq!(status, 200);
    let reader = app.events_with_key(&run_a, "key-a-0123456789").await;
    assert_eq!(final_data(&to_final(reader).await)["status"], "succeeded");
    let mine = scrape(a.clone()).await;
    assert!(
        mine.contains(r#"orca_tasks_finished_total{outcome="completed"} 1"#),
        "{mine}"
    );
}

#[tokio::test]
async fn bad_worker_requests_are_422_with_pointers_and_task_pages_hold() {
    let app = spawn_app(|_| {}).await;
    declare(&app.client, &app.base, shout_tool(None)).await;
    let worker = Worker::new(&app.base, "w-1");
    let bad_poll = json!({"worker_id": "has space", "queue": "", "tools": ["a b"],
                          "max_tasks": 0, "wait_ms": 30001});
    let (status, problem) = worker.post("/v1/workers/poll", bad_poll).await;
    assert_eq!(status, 422, "{problem}");
    let pointers: Vec<&str> = problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    assert_eq!(
        pointers,
        ["/worker_id", "/queue", "/tools/0", "/max_tasks", "/wait_ms"]
    );
    let (status, problem) = worker
        .post(
            "/v1/workers/poll",
            json!({"queue": "shouts", "surprise": 1}),
        )
        .await;
    assert_eq!(status, 422, "{problem}");

    let ids: Vec<String> = {
        let mut ids = Vec::new();
        for i in 0..5 {
            ids.push(run_with(&app.client, &app.base, &format!("t{i}")).await);
        }
        ids
    };
    // Two claims (a poll never hands out more than it asked for).
    let mut claimed = Vec::new();
    while claimed.len() < 2 {
        let want = 2 - claimed.len();
        let got = worker.poll("shouts", want as u32, 5000).await;
        assert!(got.len() <= want, "asked for {want}, got {}", got.len());
        claimed.extend(got);
    }
    let (status, problem) = worker
        .post(
            &format!("/v1/tasks/{}/complete", claimed[0]["id"].as_str().unwrap()),
            json!({"output": 1}),
        )
        .await;
    assert_eq!(
        (status, problem["errors"][0]["pointer"].as_str()),
        (422, Some("/worker_id")),
        "{problem}"
    );
    let (status, problem) = worker
        .post(
            &format!("/v1/tasks/{}/fail", claimed[0]["id"].as_str().unwrap()),
            json!({"worker_id": "w-1", "error": {"code": "", "message": "m"}}),
        )
        .await;
    assert_eq!(status, 422, "{problem}");

    // Pages of two over five tasks: each task once, newest first, the filters kept.
    listed(&app.client, &app.base, "limit=200", 5).await;
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/tasks?limit=2&cursor={c}"),
            None => "/v1/tasks?limit=2".to_owned(),
        };
        let (_, page) = app.get_json(&path).await;
        let tasks = page["tasks"].as_array().unwrap();
        assert!(tasks.len() <= 2);
        seen.extend(tasks.iter().map(|t| {
            let at = t["created_at"].as_str().unwrap().to_owned();
            (at, t["run_id"].as_str().unwrap().to_owned())
        }));
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    // Newest first by the task's creation (the runs queue their calls in their own time).
    let at = |t: &str| chrono::DateTime::parse_from_rfc3339(t).expect("a time");
    assert!(
        seen.windows(2).all(|w| at(&w[0].0) >= at(&w[1].0)),
        "{seen:?}"
    );
    let mut runs: Vec<String> = seen.into_iter().map(|(_, run)| run).collect();
    runs.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(runs, expected, "every task once");
    let (_, queued) = app.get_json("/v1/tasks?status=queued&limit=200").await;
    let (_, all) = app.get_json("/v1/tasks?limit=200").await;
    let statuses: Vec<&Value> = all["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["status"])
        .collect();
    assert_eq!(queued["tasks"].as_array().unwrap().len(), 3, "{statuses:?}");
    let (_, one) = app.get_json(&format!("/v1/tasks?run_id={}", ids[4])).await;
    assert_eq!(one["tasks"].as_array().unwrap().len(), 1);
    let (_, none) = app.get_json("/v1/tasks?tool=other.tool").await;
    assert_eq!(none["tasks"], json!([]));
    for bad in ["limit=0", "limit=201", "cursor=nonsense", "status=bogus"] {
        let resp = app.client.get(app.url(&format!("/v1/tasks?{bad}"))).send();
        assert_eq!(resp.await.unwrap().status(), 422, "{bad}");
    }
}

#[tokio::test]
async fn a_tenants_polls_are_capped_and_a_dropped_poll_frees_its_place() {
    let app = spawn_app(|c| {
        crate::support::app::two_tenants(c, ["key-a-0123456789", "key-b-0123456789"]);
        c.tools.worker_max_polls_per_tenant = 2;
    })
    .await;
    let a = Worker {
        client: keyed("key-a-0123456789"),
        ..Worker::new(&app.base, "w-a1")
    };
    let held: Vec<_> = ["w-a1", "w-a2"]
        .into_iter()
        .map(|id| {
            let w = Worker {
                id: id.to_owned(),
                ..a.clone()
            };
            tokio::spawn(async move { w.poll("q", 1, 30_000).await })
        })
        .collect();
    // Both long polls are open once both workers are listed.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let (_, listed) = send(a.client.get(format!("{}/v1/workers", app.base))).await;
        if listed["workers"].as_array().is_some_and(|w| w.len() == 2) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{listed}");
    }
    let body = json!({"worker_id": "w-a3", "queue": "q", "wait_ms": 0});
    let (status, problem) = a.post("/v1/workers/poll", body.clone()).await;
    assert_eq!(status, 429, "{problem}");
    // Another tenant is not held back by a's polls.
    let b = Worker {
        client: keyed("key-b-0123456789"),
        ..Worker::new(&app.base, "w-b")
    };
    assert_eq!(b.post("/v1/workers/poll", body.clone()).await.0, 200);
    // A worker that goes away frees its place.
    for poll in held {
        poll.abort();
    }
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while a.post("/v1/workers/poll", body.clone()).await.0 != 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the places stay taken"
        );
    }
}

/// `text.shout` with `retry` and `schedule_to_start_ms` as given.
fn strict_tool(max_attempts: u32, schedule_to_start_ms: Option<u64>) -> Value {
    let mut tool = shout_tool(None);
    tool["retry"] = json!({"max_attempts": max_attempts, "backoff_ms": 10});
    if let Some(ms) = schedule_to_start_ms {
        tool["schedule_to_start_ms"] = json!(ms);
    }
    tool
}

#[tokio::test]
async fn failures_use_the_retry_policy_and_an_untaken_task_times_out() {
    let app = spawn_app(|_| {}).await;
    declare(&app.client, &app.base, strict_tool(2, None)).await;
    let worker = Worker::new(&app.base, "w-1");
    let fail = |task: &Value, retryable: bool| {
        let path = format!("/v1/tasks/{}/fail", task["id"].as_str().unwrap());
        let body = json!({"worker_id": "w-1", "retryable": retryable,
                          "error": {"code": "card_declined", "message": "no funds"}});
        let worker = worker.clone();
        async move { worker.post(&path, body).await }
    };
    // Retryable: offered again (attempt 2, same key), then out of attempts: failed.
    let (id, reader, first) = one_claimed(&app, &worker).await;
    assert_eq!(fail(&first, true).await.0, 200);
    let mut again = Vec::new();
    while again.is_empty() {
        again = worker.poll("shouts", 1, 5000).await;
    }
    assert_eq!(
        (&again[0]["id"], &again[0]["attempt"]),
        (&first["id"], &json!(2))
    );
    assert_eq!(again[0]["idempotency_key"], first["idempotency_key"]);
    assert_eq!(fail(&again[0], true).await.0, 200);
    let fin = final_data(&to_final(reader).await).clone();
    assert_eq!(fin["status"], "failed", "{fin}");
    let message = fin["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("after 2 attempt(s)") && message.contains("no funds"),
        "{fin}"
    );
    let (_, task) = app
        .get_json(&format!("/v1/tasks/{}", first["id"].as_str().unwrap()))
        .await;
    assert_eq!(
        (&task["status"], &task["attempt"]),
        (&json!("failed"), &json!(2))
    );
    let _ = id;

    // Not retryable: failed at the first attempt.
    let (_, reader, task) = one_claimed(&app, &worker).await;
    assert_eq!(fail(&task, false).await.0, 200);
    assert_eq!(final_data(&to_final(reader).await)["status"], "failed");
    let (_, task) = app
        .get_json(&format!("/v1/tasks/{}", task["id"].as_str().unwrap()))
        .await;
    assert_eq!(
        (&task["status"], &task["attempt"]),
        (&json!("failed"), &json!(1))
    );

    // No worker takes it within schedule_to_start_ms: tool_timeout.
    let put = app.client.put(app.url("/v1/tools/text.shout"));
    let (status, _) = send(put.json(&strict_tool(3, Some(200)))).await;
    assert_eq!(status, 200, "replaced");
    let id = run_with(&app.client, &app.base, "nobody").await;
    let fin = final_data(&to_final(app.events(&id).await).await).clone();
    assert_eq!(fin["status"], "failed", "{fin}");
    assert_eq!(fin["error"]["code"], "tool_timeout", "{fin}");
    let metrics = app.metrics().await;
    for (outcome, n) in [("failed", 2), ("timed_out", 1)] {
        let line = format!("orca_tasks_finished_total{{outcome=\"{outcome}\"}} {n}");
        assert!(metrics.contains(&line), "{line}: {metrics}");
    }
}

#[tokio::test]
async fn a_call_cut_off_by_its_step_timeout_cancels_its_task_while_the_run_goes_on() {
    let app = spawn_app(|_| {}).await;
    declare(&app.client, &app.base, shout_tool(None)).await;
    // Nested, as users write it: the timed-out step sits inside a sequential step, and its
    // retry makes a new call (a new task with its own idempotency key).
    let mut timed = shout("s", "slow");
    // Long enough for the retry to be claimed and completed on a loaded machine: 2 s was not
    // once, under the whole suite on two cores (the retry timed out too and the run failed).
    timed["timeout_ms"] = json!(4000);
    timed["retry_policy"] = json!({"max_attempts": 2, "initial_delay_ms": 1,
                                   "retryable_errors": ["step_timeout"]});
    let plan = json!({"steps": [{"id": "seq", "kind": "sequential", "input": {"steps": [timed]}}]});
    let run = app.create_run(fixed(plan)).await;
    let id = run["id"].as_str().unwrap().to_owned();
    let worker = Worker::new(&app.base, "w-1");
    let mut first = Vec::new();
    while first.is_empty() {
        first = worker.poll("shouts", 1, 5000).await;
    }
    let first = first.remove(0);
    // The step times out: the cut-off call cancels its task at once, while the run is
    // still running its retry (so no end-of-run sweep did it).
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let refused = loop {
        let (status, answer) = worker
            .heartbeat(first["id"].as_str().unwrap(), json!("working"))
            .await;
        if status != 200 {
            break answer;
        }
        assert!(tokio::time::Instant::now() < deadline, "still claimed");
    };
    assert_eq!(refused["reason"], "task_cancelled", "{refused}");
    let (_, now) = app.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(now["status"], "running", "{now}");
    let mut second = Vec::new();
    while second.is_empty() {
        second = worker.poll("shouts", 1, 5000).await;
    }
    assert_ne!(second[0]["id"], first["id"]);
    assert_ne!(second[0]["idempotency_key"], first["idempotency_key"]);
    let (status, _) = worker
        .complete(second[0]["id"].as_str().unwrap(), json!({"text": "SLOW"}))
        .await;
    assert_eq!(status, 200);
    let events = to_final(app.events(&id).await).await;
    assert_eq!(final_data(&events)["status"], "succeeded");
}
