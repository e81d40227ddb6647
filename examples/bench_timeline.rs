//! Benchmark: `GET /v1/runs/{id}/timeline` for a run of 10,000 events, end to end over HTTP,
//! and the two halves of it in-process (the store's read, the timeline's computation).
//!
//! The run is written straight into the store, shaped like a large plan run: fan-outs of 8
//! children under a `parallel` step, each child a tool call, a streamed model call (tokens and
//! usage) or a flaky tool call retried once, a few waits for a human, and step events held
//! until their step commits, as the scheduler writes them.
//!
//! Usage: `cargo run --release --example bench_timeline -- [--events 10000] [--requests 200] [--rounds 5]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use orca::app::App;
use orca::config::{Config, ProviderChoice};
use orca::domain::event::{
    FinalData, InputRequiredData, PlanData, StepData, ToolCallData, ToolOutcome, ToolResultData,
    UsageData,
};
use orca::domain::run::{RunRequest, RunSpec};
use orca::domain::{
    Completion, ErrorCode, Event, Orchestration, Payload, Run, RunError, RunId, RunStatus,
    StepAttempt, StepKind, StepStatus, Tenant,
};
use orca::store::{Record, Store};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Builds one run's history on a simulated clock, in the order the engine writes it.
struct Writer {
    run: RunId,
    clock: DateTime<Utc>,
    events: Vec<(DateTime<Utc>, Option<String>, Payload)>,
    attempts: Vec<StepAttempt>,
}

impl Writer {
    fn tick(&mut self, micros: i64) -> DateTime<Utc> {
        self.clock += chrono::Duration::microseconds(micros);
        self.clock
    }

    fn emit(&mut self, at: DateTime<Utc>, step: Option<&str>, payload: impl Into<Payload>) {
        self.events
            .push((at, step.map(str::to_owned), payload.into()));
    }

    fn attempt(
        &mut self,
        path: &str,
        id: &str,
        kind: StepKind,
        number: u32,
        (start, end): (DateTime<Utc>, DateTime<Utc>),
        error: Option<RunError>,
    ) {
        self.attempts.push(StepAttempt {
            step_id: id.to_owned(),
            path: (!path.is_empty()).then(|| path.parse().expect("a step path")),
            name: id.to_owned(),
            kind,
            status: if error.is_some() {
                StepStatus::Failed
            } else {
                StepStatus::Completed
            },
            attempt: number,
            plan_version: 1,
            input: Some(
                json!({ "tool": "math.calculate", "arguments": { "expression": "1 + 1" } }),
            ),
            output: Some(json!({ "result": 2 })),
            error,
            started_at: start,
            completed_at: Some(end),
            duration_ms: Some((end - start).num_milliseconds() as u64),
        });
    }

    fn step(id: &str, path: &str, kind: StepKind, status: StepStatus, attempt: u32) -> StepData {
        StepData::new(id, id, kind, status, attempt).at(&path.parse().expect("a step path"))
    }

    /// One `parallel` step of `width` children, committed when its slowest child ends.
    fn fan_out(&mut self, group: usize, width: usize) {
        let parent = format!("g{group}");
        let start = self.tick(200);
        self.emit(
            start,
            Some(&parent),
            Writer::step(&parent, "", StepKind::Parallel, StepStatus::Running, 1),
        );
        // Model text goes out live; everything else waits for the commit.
        let mut held: Vec<(Option<String>, Payload)> = Vec::new();
        let mut latest = start;
        for k in 0..width {
            let id = format!("g{group}c{k}");
            let begin = start + chrono::Duration::microseconds(50 * k as i64 + 50);
            let kind = match k % 4 {
                1 | 3 => StepKind::Llm,
                _ => StepKind::Tool,
            };
            held.push((
                Some(id.clone()),
                Writer::step(&id, &parent, kind, StepStatus::Running, 1).into(),
            ));
            let end = if kind == StepKind::Llm {
                let mut t = begin;
                for w in 0..6 {
                    t += chrono::Duration::milliseconds(3);
                    self.emit(t, Some(&id), Payload::token(format!("word{w} ")));
                }
                t += chrono::Duration::milliseconds(1);
                let usage = UsageData {
                    prompt_tokens: 120,
                    completion_tokens: 6,
                };
                self.emit(t, Some(&id), usage);
                t
            } else if k == 2 {
                // A flaky call: fails once, backs off 20 ms, succeeds.
                let failed = begin + chrono::Duration::milliseconds(4);
                let error = RunError::new(ErrorCode::Other("flaky".into()), "failure 1 of 1");
                self.attempt(&parent, &id, kind, 1, (begin, failed), Some(error.clone()));
                held.extend(tool_call(&id, &format!("{id}-1")));
                let mut retrying = Writer::step(&id, &parent, kind, StepStatus::Retrying, 1);
                retrying.error = Some(error);
                retrying.retry_in_ms = Some(20);
                held.push((Some(id.clone()), retrying.into()));
                let again = failed + chrono::Duration::milliseconds(20);
                held.push((
                    Some(id.clone()),
                    Writer::step(&id, &parent, kind, StepStatus::Running, 2).into(),
                ));
                held.extend(tool_call(&id, &format!("{id}-2")));
                let end = again + chrono::Duration::milliseconds(4);
                self.attempt(&parent, &id, kind, 2, (again, end), None);
                held.push((
                    Some(id.clone()),
                    Writer::step(&id, &parent, kind, StepStatus::Completed, 2).into(),
                ));
                latest = latest.max(end);
                continue;
            } else {
                held.extend(tool_call(&id, &format!("{id}-1")));
                begin + chrono::Duration::milliseconds(2 + k as i64)
            };
            self.attempt(&parent, &id, kind, 1, (begin, end), None);
            held.push((
                Some(id.clone()),
                Writer::step(&id, &parent, kind, StepStatus::Completed, 1).into(),
            ));
            latest = latest.max(end);
        }
        let commit = latest + chrono::Duration::microseconds(300);
        self.attempt("", &parent, StepKind::Parallel, 1, (start, commit), None);
        for (step, payload) in held {
            self.emit(commit, step.as_deref(), payload);
        }
        self.emit(
            commit,
            Some(&parent),
            Writer::step(&parent, "", StepKind::Parallel, StepStatus::Completed, 1),
        );
        self.clock = commit;
    }

    /// A `user_input` step answered after `wait_ms`.
    fn human(&mut self, n: usize, wait_ms: i64) {
        let id = format!("ask{n}");
        let start = self.tick(200);
        self.emit(
            start,
            Some(&id),
            Writer::step(&id, "", StepKind::UserInput, StepStatus::Running, 1),
        );
        let asked = self.tick(100);
        let ask = InputRequiredData {
            step_id: id.clone(),
            prompt: "go on?".into(),
            schema: None,
            kind: None,
            plan_version: None,
            plan: None,
        };
        self.emit(asked, Some(&id), ask);
        self.emit(asked, None, Payload::status(RunStatus::WaitingInput));
        let answered = self.tick(wait_ms * 1000);
        self.emit(answered, None, Payload::status(RunStatus::Running));
        let end = self.tick(100);
        self.attempt("", &id, StepKind::UserInput, 1, (start, end), None);
        self.emit(
            end,
            Some(&id),
            Writer::step(&id, "", StepKind::UserInput, StepStatus::Completed, 1),
        );
    }
}

/// A tool call and its result, as held events of step `id`.
fn tool_call(id: &str, call: &str) -> [(Option<String>, Payload); 2] {
    let call_data = ToolCallData {
        call_id: call.to_owned(),
        tool: "math.calculate".into(),
        arguments: json!({ "expression": "1 + 1" }),
    };
    let result = ToolResultData {
        call_id: call.to_owned(),
        tool: "math.calculate".into(),
        result: ToolOutcome::Output(json!({ "expression": "1 + 1", "result": 2 })),
        task: None,
    };
    [
        (Some(id.to_owned()), call_data.into()),
        (Some(id.to_owned()), result.into()),
    ]
}

/// Writes a finished run of exactly `events` events into `store`; returns its id.
async fn write_run(store: &Store, tenant: &Tenant, events: usize) -> RunId {
    let created = orca::domain::now() - chrono::Duration::hours(1);
    let spec = RunSpec::new(RunRequest {
        orchestration: Orchestration::Fixed,
        plan: Some(json!({ "steps": [] })),
        ..RunRequest::new(json!("bench"))
    });
    let mut run = Run {
        orchestration: Orchestration::Fixed,
        plan_version: Some(1),
        created_at: created,
        ..Run::queued(RunId::new(), &spec, None)
    };
    store
        .insert_run(tenant, &run, &spec, None, Default::default(), &[])
        .await
        .expect("insert run");

    let mut w = Writer {
        run: run.id,
        clock: created,
        events: Vec::new(),
        attempts: Vec::new(),
    };
    let t = w.tick(500);
    w.emit(t, None, Payload::status(RunStatus::Queued));
    let t = w.tick(2_000);
    w.emit(t, None, Payload::status(RunStatus::Running));
    let plan = PlanData {
        version: 1,
        reason: "initial".into(),
        plan: json!({ "steps": [{ "id": "g0", "kind": "parallel" }] }).into(),
        critical_path: vec!["g0".into()],
        critical_path_ms: 0,
        change: None,
    };
    let t = w.tick(100);
    w.emit(t, None, plan);
    // Leave room for the terminal status and `final`.
    let mut group = 0;
    while w.events.len() + 2 < events {
        if group % 40 == 39 {
            w.human(group, 1_500);
        }
        let before = (w.events.len(), w.attempts.len(), w.clock);
        w.fan_out(group, 8);
        if w.events.len() + 2 > events {
            // The last fan-out would overshoot: pad with model text instead.
            w.events.truncate(before.0);
            w.attempts.truncate(before.1);
            w.clock = before.2;
            while w.events.len() + 2 < events {
                let t = w.tick(10);
                w.emit(t, Some("g0c1"), Payload::token("pad "));
            }
        }
        group += 1;
    }
    let end = w.tick(500);
    w.emit(end, None, Payload::status(RunStatus::Succeeded));

    let mut records: Vec<Record> = Vec::new();
    for (i, (ts, step, payload)) in w.events.iter().enumerate() {
        records.push(Record::Event(Arc::new(Event {
            seq: i as u64 + 1,
            run_id: w.run,
            kind: payload.kind(),
            ts: *ts,
            step_id: step.clone(),
            path: None,
            data: payload.clone(),
        })));
    }
    records.extend(
        w.attempts
            .iter()
            .map(|a| Record::Attempt(w.run, std::sync::Arc::new(a.clone()))),
    );
    for chunk in records.chunks(1_000) {
        store.append(chunk).await.expect("append");
    }
    run.status = RunStatus::Succeeded;
    run.completion = Some(Completion::Success);
    run.started_at = Some(created + chrono::Duration::microseconds(2_500));
    run.finished_at = Some(end);
    let fin = Payload::Final(FinalData {
        status: run.status,
        completion: Completion::Success,
        completion_reason: None,
        step_counts: None,
        output: None,
        usage: run.usage,
        error: None,
    });
    let last = Event {
        seq: w.events.len() as u64 + 1,
        run_id: run.id,
        kind: fin.kind(),
        ts: end,
        step_id: None,
        path: None,
        data: fin,
    };
    store.finish_run(&run, &last).await.expect("finish");
    assert_eq!(store.last_seq(run.id).await.unwrap() as usize, events);
    run.id
}

fn stats(mut xs: Vec<Duration>) -> String {
    xs.sort();
    let at = |q: f64| xs[((xs.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e3;
    format!(
        "median {:.2} ms, p90 {:.2} ms, min {:.2} ms, max {:.2} ms",
        at(0.5),
        at(0.9),
        at(0.0),
        at(1.0)
    )
}

#[tokio::main]
async fn main() {
    let (mut events, mut requests, mut rounds) = (10_000usize, 200usize, 5usize);
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        match (pair[0].as_str(), pair.get(1)) {
            ("--events", Some(v)) => events = v.parse().expect("--events N"),
            ("--requests", Some(v)) => requests = v.parse().expect("--requests N"),
            ("--rounds", Some(v)) => rounds = v.parse().expect("--rounds N"),
            (other, _) => panic!("unknown argument {other}"),
        }
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    let store = Store::connect(&url, 2).await.expect("store");
    let tenant = Tenant::default_tenant();
    let id = write_run(&store, &tenant, events).await;

    let mut config = Config::default();
    config.server.bind = "127.0.0.1:0".into();
    config.database.url = url;
    config.llm.provider = ProviderChoice::Offline;
    let app = App::build(config).await.expect("app");
    let base = format!("http://{}", app.local_addr());
    let stop = CancellationToken::new();
    let s = stop.clone();
    let server = tokio::spawn(app.run_until_stopped(async move { s.cancelled().await }));
    let client = reqwest::Client::new();
    let path = format!("{base}/v1/runs/{id}/timeline");

    let first: serde_json::Value = client
        .get(&path)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let bytes = serde_json::to_vec(&first).unwrap().len();
    println!(
        "run: {events} events, {} spans, {} waits, {} links on the critical path; answer {:.0} KiB",
        first["spans"].as_array().unwrap().len(),
        first["waits"].as_array().unwrap().len(),
        first["critical_path"].as_array().unwrap().len(),
        bytes as f64 / 1024.0
    );

    let skip = orca::timeline::UNUSED_EVENT_KINDS;
    for round in 1..=rounds {
        let mut http = Vec::with_capacity(requests);
        for _ in 0..requests {
            let t0 = Instant::now();
            let resp = client.get(&path).send().await.expect("GET");
            assert_eq!(resp.status(), 200);
            resp.bytes().await.expect("body");
            http.push(t0.elapsed());
        }
        let mut read = Vec::with_capacity(requests);
        let mut compute = Vec::with_capacity(requests);
        for _ in 0..requests {
            let t0 = Instant::now();
            let h = store
                .run_history(&tenant, id, &skip)
                .await
                .expect("read")
                .expect("the run");
            read.push(t0.elapsed());
            let t0 = Instant::now();
            let t = orca::timeline::build(&h.run, &h.attempts, &h.events, orca::domain::now());
            compute.push(t0.elapsed());
            std::hint::black_box(t);
        }
        println!("round {round}: HTTP end to end: {}", stats(http));
        println!("round {round}:   store read:    {}", stats(read));
        println!("round {round}:   computation:   {}", stats(compute));
    }
    stop.cancel();
    let _ = server.await;
}
