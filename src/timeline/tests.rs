//! The timeline of hand-built runs: each case is a run's attempts and events on a millisecond
//! clock from its creation, and what its timeline must say.

use chrono::{DateTime, Duration, TimeZone, Utc};
use serde_json::json;

use super::*;
use crate::domain::event::{
    ErrorData, InputRequiredData, PlanData, StatusData, StepData, ToolCallData, UsageData,
};
use crate::domain::run::{RunRequest, RunSpec};
use crate::domain::{ErrorCode, Orchestration, Payload, RunError, StepPath};

/// A run under construction; times are milliseconds after its creation.
struct Fixture {
    run: Run,
    attempts: Vec<StepAttempt>,
    events: Vec<Event>,
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, 9, 0, 0).unwrap()
}

fn at(ms: i64) -> DateTime<Utc> {
    t0() + Duration::milliseconds(ms)
}

/// `path/step_id` split into its path (None at the top level) and id.
fn split(key: &str) -> (Option<StepPath>, String) {
    let step: StepPath = key.parse().expect("a step path");
    (step.parent_if_nested(), step.leaf().to_owned())
}

impl Fixture {
    /// A run created at 0 that is queued at 1 and running at 5.
    fn new() -> Fixture {
        let spec = RunSpec::new(RunRequest::new(json!("x")));
        let run = Run {
            status: RunStatus::Running,
            orchestration: Orchestration::Fixed,
            plan_version: Some(1),
            created_at: t0(),
            started_at: Some(at(5)),
            ..Run::queued(RunId::new(), &spec, None)
        };
        Fixture {
            run,
            attempts: Vec::new(),
            events: Vec::new(),
        }
        .status(1, RunStatus::Queued)
        .status(5, RunStatus::Running)
    }

    fn event(mut self, ms: i64, step_id: Option<&str>, payload: impl Into<Payload>) -> Fixture {
        let payload = payload.into();
        self.events.push(Event {
            seq: self.events.len() as u64 + 1,
            run_id: self.run.id,
            kind: payload.kind(),
            ts: at(ms),
            step_id: step_id.map(str::to_owned),
            path: None,
            data: payload,
        });
        self
    }

    fn status(self, ms: i64, status: RunStatus) -> Fixture {
        self.event(ms, None, Payload::status(status))
    }

    /// A stored attempt of the step at `key`; `end` None while it runs.
    fn attempt(
        mut self,
        key: &str,
        kind: StepKind,
        attempt: u32,
        (start, end): (i64, Option<i64>),
        status: StepStatus,
    ) -> Fixture {
        let (path, step_id) = split(key);
        let error = matches!(status, StepStatus::Failed | StepStatus::Cancelled)
            .then(|| RunError::new(ErrorCode::Other("flaky".into()), "failed"));
        self.attempts.push(StepAttempt {
            step_id: step_id.clone(),
            path,
            name: step_id,
            kind,
            status,
            attempt,
            plan_version: 1,
            input: None,
            output: None,
            error,
            started_at: at(start),
            completed_at: end.map(at),
            duration_ms: end.map(|e| (e - start) as u64),
        });
        self
    }

    /// A `step` event for attempt `attempt` of the step at `key`.
    fn step(
        self,
        ms: i64,
        key: &str,
        kind: StepKind,
        status: StepStatus,
        attempt: u32,
        retry_in_ms: Option<u64>,
    ) -> Fixture {
        let (path, step_id) = split(key);
        let mut data = StepData::new(&step_id, &step_id, kind, status, attempt);
        data.path = path;
        data.retry_in_ms = retry_in_ms;
        self.event(ms, Some(&step_id), data)
    }

    /// A step that ran once from `start` to `end` and completed, with its events emitted
    /// live (`running` at the start, `completed` at the end).
    fn ran(self, key: &str, kind: StepKind, start: i64, end: i64) -> Fixture {
        self.attempt(key, kind, 1, (start, Some(end)), StepStatus::Completed)
            .step(start, key, kind, StepStatus::Running, 1, None)
            .step(end, key, kind, StepStatus::Completed, 1, None)
    }

    fn tool_call(self, ms: i64, step_id: &str) -> Fixture {
        let call = ToolCallData {
            call_id: format!("call-{ms}"),
            tool: "test.count".into(),
            arguments: json!({}),
        };
        self.event(ms, Some(step_id), call)
    }

    fn usage(self, ms: i64, step_id: &str, prompt: u64, completion: u64) -> Fixture {
        let usage = UsageData {
            prompt_tokens: prompt,
            completion_tokens: completion,
        };
        self.event(ms, Some(step_id), usage)
    }

    fn plan(self, ms: i64, version: u32, reason: &str) -> Fixture {
        let plan = PlanData {
            version,
            reason: reason.into(),
            plan: json!({ "steps": [] }).into(),
            critical_path: vec!["a".into()],
            critical_path_ms: 0,
            change: None,
        };
        self.event(ms, None, plan)
    }

    /// The run ends `succeeded` at `ms`.
    fn finish(mut self, ms: i64) -> Fixture {
        self.run.status = RunStatus::Succeeded;
        self.run.finished_at = Some(at(ms));
        self.status(ms, RunStatus::Succeeded)
    }

    /// The timeline as of 1 s after creation (only used while the run has not finished).
    fn timeline(&self) -> Timeline {
        build(&self.run, &self.attempts, &self.events, at(1000))
    }
}

/// The critical path as short labels: span ids, `queue`, `backoff(SPAN)`.
fn path_labels(t: &Timeline) -> Vec<String> {
    t.critical_path
        .iter()
        .map(|p| match p.kind {
            PathKind::Step => p.span.clone().unwrap(),
            PathKind::Queue => "queue".into(),
            PathKind::Backoff => format!("backoff({})", p.span.clone().unwrap()),
        })
        .collect()
}

/// Waits as (kind, step, start ms, end ms).
fn wait_rows(t: &Timeline) -> Vec<(WaitKind, Option<String>, i64, Option<i64>)> {
    let ms = |d: DateTime<Utc>| (d - t0()).num_milliseconds();
    t.waits
        .iter()
        .map(|w| (w.kind, w.step_id.clone(), ms(w.start), w.end.map(ms)))
        .collect()
}

fn span<'t>(t: &'t Timeline, id: &str) -> &'t Span {
    t.spans
        .iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("no span {id}"))
}

struct Case {
    name: &'static str,
    run: Fixture,
    breakdown: Breakdown,
    critical_path: &'static [&'static str],
    waits: &'static [(WaitKind, Option<&'static str>, i64, i64)],
}

fn breakdown(
    total: u64,
    [model, tools, timers, human, backoff, queue]: [u64; 6],
    accounted: u64,
) -> Breakdown {
    Breakdown {
        total_ms: total,
        model_ms: model,
        tools_ms: tools,
        timers_ms: timers,
        human_ms: human,
        backoff_ms: backoff,
        queue_ms: queue,
        paused_ms: 0,
        worker_queue_ms: 0,
        accounted_ms: accounted,
        orchestrator_ms: total - accounted,
    }
}

use StepKind::{Llm, Parallel, Tool, UserInput};
use WaitKind::{Backoff, HumanInput, Queue};

/// The typical runs, each a fixture with what its timeline must say.
fn cases() -> Vec<Case> {
    vec![chain(), fan_out(), retries(), human_wait(), simple_run()]
}

/// A chain: one after the other.
fn chain() -> Case {
    Case {
        name: "a chain: one after the other",
        run: Fixture::new()
            .plan(6, 1, "initial")
            .ran("a", Tool, 10, 30)
            .ran("b", Tool, 35, 60)
            .ran("c", Llm, 65, 100)
            .finish(105),
        // queue 1-5; tools 20 + 25; model 35.
        breakdown: breakdown(105, [35, 45, 0, 0, 0, 4], 84),
        critical_path: &["queue", "a#1", "b#1", "c#1"],
        waits: &[(Queue, None, 1, 5)],
    }
}

/// A fan-out: parallel children counted once, the slower one on the path.
fn fan_out() -> Case {
    Case {
        name: "a fan-out: parallel children counted once, the slower one on the path",
        run: Fixture::new()
            .ran("a", Tool, 10, 20)
            .ran("p", Parallel, 20, 80)
            .ran("p/x", Tool, 22, 50)
            .ran("p/y", Tool, 22, 78)
            .ran("p/w", Tool, 30, 40)
            .ran("z", Llm, 85, 95)
            .finish(100),
        // tools: 10-20 and 22-78 (x, y and w overlap) = 10 + 56.
        breakdown: breakdown(100, [10, 66, 0, 0, 0, 4], 80),
        critical_path: &["queue", "a#1", "p/y#1", "z#1"],
        waits: &[(Queue, None, 1, 5)],
    }
}

/// Retries: backoff between attempts, tool calls held until the commit.
fn retries() -> Case {
    Case {
        name: "retries: backoff between attempts, tool calls held until the commit",
        run: Fixture::new()
            .attempt("flaky", Tool, 1, (10, Some(20)), StepStatus::Failed)
            .attempt("flaky", Tool, 2, (50, Some(60)), StepStatus::Failed)
            .attempt("flaky", Tool, 3, (120, Some(130)), StepStatus::Completed)
            .step(10, "flaky", Tool, StepStatus::Running, 1, None)
            // Everything else is released at the commit, in order.
            .tool_call(131, "flaky")
            .step(131, "flaky", Tool, StepStatus::Retrying, 1, Some(30))
            .step(131, "flaky", Tool, StepStatus::Running, 2, None)
            .tool_call(131, "flaky")
            .step(131, "flaky", Tool, StepStatus::Retrying, 2, Some(60))
            .step(131, "flaky", Tool, StepStatus::Running, 3, None)
            .tool_call(131, "flaky")
            .step(131, "flaky", Tool, StepStatus::Completed, 3, None)
            .finish(135),
        breakdown: breakdown(135, [0, 30, 0, 0, 90, 4], 124),
        critical_path: &[
            "queue",
            "flaky#1",
            "backoff(flaky#1)",
            "flaky#2",
            "backoff(flaky#2)",
            "flaky#3",
        ],
        waits: &[
            (Queue, None, 1, 5),
            (Backoff, Some("flaky"), 20, 50),
            (Backoff, Some("flaky"), 60, 120),
        ],
    }
}

/// A human wait: from `waiting_input` to `running`.
fn human_wait() -> Case {
    Case {
        name: "a human wait: from waiting_input to running",
        run: Fixture::new()
            .ran("prepare", Tool, 10, 20)
            .attempt(
                "approve",
                UserInput,
                1,
                (22, Some(522)),
                StepStatus::Completed,
            )
            .step(22, "approve", UserInput, StepStatus::Running, 1, None)
            .event(
                23,
                Some("approve"),
                InputRequiredData {
                    step_id: "approve".into(),
                    prompt: "ok?".into(),
                    schema: None,
                    kind: None,
                    plan_version: None,
                    plan: None,
                },
            )
            .status(24, RunStatus::WaitingInput)
            .status(520, RunStatus::Running)
            .step(522, "approve", UserInput, StepStatus::Completed, 1, None)
            .ran("publish", Tool, 525, 535)
            .finish(540),
        breakdown: breakdown(540, [0, 20, 0, 496, 0, 4], 520),
        critical_path: &["queue", "prepare#1", "approve#1", "publish#1"],
        waits: &[(Queue, None, 1, 5), (HumanInput, Some("approve"), 24, 520)],
    }
}

/// A simple run: model rounds and a tool call, all live.
fn simple_run() -> Case {
    Case {
        name: "a simple run: model rounds and a tool call, all live",
        run: Fixture::new()
            .ran("llm-1", Llm, 6, 50)
            .usage(49, "llm-1", 11, 3)
            .ran("tool-1-1", Tool, 52, 80)
            .tool_call(53, "tool-1-1")
            .ran("llm-2", Llm, 82, 120)
            .usage(119, "llm-2", 20, 2)
            .finish(125),
        breakdown: breakdown(125, [82, 28, 0, 0, 0, 4], 114),
        critical_path: &["queue", "llm-1#1", "tool-1-1#1", "llm-2#1"],
        waits: &[(Queue, None, 1, 5)],
    }
}

#[test]
fn timelines_of_typical_runs() {
    for case in cases() {
        let t = case.run.timeline();
        let name = case.name;
        assert_eq!(t.breakdown, case.breakdown, "{name}: breakdown");
        assert_eq!(t.duration_ms, case.breakdown.total_ms, "{name}: duration");
        assert_eq!(path_labels(&t), case.critical_path, "{name}: critical path");
        let want: Vec<_> = case
            .waits
            .iter()
            .map(|&(k, s, a, b)| (k, s.map(str::to_owned), a, Some(b)))
            .collect();
        assert_eq!(wait_rows(&t), want, "{name}: waits");
        assert_eq!(
            t.totals.critical_path_ms,
            t.critical_path.iter().map(|p| p.duration_ms).sum::<u64>(),
            "{name}"
        );
        assert_eq!(
            t.spans.len(),
            case.run.attempts.len(),
            "{name}: one span per attempt"
        );
        assert!(
            t.spans.windows(2).all(|w| w[0].start <= w[1].start),
            "{name}: spans in start order"
        );
    }
}

#[test]
fn spans_know_their_parents_and_carry_their_own_counts() {
    let fan_out = &fan_out();
    let t = fan_out.run.timeline();
    assert_eq!(span(&t, "p/x#1").parent.as_deref(), Some("p#1"));
    assert_eq!(span(&t, "p/y#1").path, Some(StepPath::top("p")));
    assert_eq!(span(&t, "p#1").parent, None);
    assert_eq!(span(&t, "a#1").kind, Tool);

    let simple = &simple_run();
    let t = simple.run.timeline();
    let llm1 = span(&t, "llm-1#1");
    assert_eq!(
        llm1.tokens,
        Tokens {
            prompt: 11,
            completion: 3
        }
    );
    assert_eq!((llm1.llm_calls, llm1.tool_calls), (1, 0));
    assert_eq!(
        span(&t, "llm-2#1").tokens,
        Tokens {
            prompt: 20,
            completion: 2
        }
    );
    assert_eq!(span(&t, "tool-1-1#1").tool_calls, 1);
    assert_eq!(span(&t, "tool-1-1#1").duration_ms, 28);
    assert_eq!(
        t.totals,
        Totals {
            steps: 3,
            attempts: 3,
            retries: 0,
            llm_calls: 2,
            tool_calls: 1,
            prompt_tokens: 31,
            completion_tokens: 5,
            critical_path_ms: 4 + 44 + 28 + 38,
        }
    );

    // Held tool calls go to the attempt their step event closed, not to the last one.
    let retries = &retries();
    let t = retries.run.timeline();
    for id in ["flaky#1", "flaky#2", "flaky#3"] {
        assert_eq!(span(&t, id).tool_calls, 1, "{id}");
    }
    assert_eq!(span(&t, "flaky#1").error_code.as_deref(), Some("flaky"));
    assert_eq!(span(&t, "flaky#3").error_code, None);
    assert_eq!(t.totals.retries, 2);
    assert_eq!(t.totals.steps, 1);
    assert_eq!(t.waits[1].span.as_deref(), Some("flaky#1"));

    let human = &human_wait();
    let t = human.run.timeline();
    assert_eq!(t.waits[1].span.as_deref(), Some("approve#1"));
}

#[test]
fn loop_iterations_keep_their_own_parents_and_counts() {
    use StepKind::{Loop, Sequential};
    use StepStatus::{Completed, Running};
    // A loop inside `outer` runs `inner` twice; the children's events are held until `outer`
    // commits, so only their order tells the iterations apart.
    let (each_0, each_1) = ("outer/each[0]/inner", "outer/each[1]/inner");
    let run = Fixture::new()
        .attempt("outer", Sequential, 1, (10, Some(60)), Completed)
        .attempt("outer/each", Loop, 1, (11, Some(59)), Completed)
        .attempt(each_0, Tool, 1, (12, Some(30)), Completed)
        .attempt(each_1, Tool, 1, (31, Some(58)), Completed)
        .step(10, "outer", Sequential, Running, 1, None)
        .step(61, "outer/each", Loop, Running, 1, None)
        .step(61, each_0, Tool, Running, 1, None)
        .tool_call(61, "inner")
        .step(61, each_0, Tool, Completed, 1, None)
        .step(61, each_1, Tool, Running, 1, None)
        .tool_call(61, "inner")
        .tool_call(61, "inner")
        .step(61, each_1, Tool, Completed, 1, None)
        .step(61, "outer/each", Loop, Completed, 1, None)
        .step(61, "outer", Sequential, Completed, 1, None)
        .finish(62);
    let t = run.timeline();
    let first = span(&t, "outer/each[0]/inner#1");
    let second = span(&t, "outer/each[1]/inner#1");
    assert_eq!(first.parent.as_deref(), Some("outer/each#1"));
    assert_eq!(second.parent.as_deref(), Some("outer/each#1"));
    assert_eq!(span(&t, "outer/each#1").parent.as_deref(), Some("outer#1"));
    assert_eq!((first.tool_calls, second.tool_calls), (1, 2));
    // Containers are not links of the critical path; their children are.
    assert_eq!(
        path_labels(&t),
        ["queue", "outer/each[0]/inner#1", "outer/each[1]/inner#1"]
    );
    assert_eq!(t.breakdown.tools_ms, 18 + 27);
}

#[test]
fn a_run_still_going_is_measured_up_to_now() {
    let run = Fixture::new()
        .ran("a", Tool, 10, 20)
        .attempt("b", Llm, 1, (25, None), StepStatus::Running)
        .step(25, "b", Llm, StepStatus::Running, 1, None)
        .usage(400, "b", 5, 5);
    let t = run.timeline(); // as of 1000 ms
    assert_eq!(t.as_of, at(1000));
    assert_eq!(t.duration_ms, 1000);
    let b = span(&t, "b#1");
    assert_eq!((b.end, b.duration_ms, b.llm_calls), (None, 975, 1));
    assert_eq!(t.breakdown.model_ms, 975);
    assert_eq!(path_labels(&t), ["queue", "a#1", "b#1"]);
    assert_eq!(t.critical_path[2].end, at(1000));

    // A run still queued: its queue wait is open.
    let queued = Fixture {
        run: Run {
            status: RunStatus::Queued,
            started_at: None,
            ..Fixture::new().run
        },
        attempts: Vec::new(),
        events: Vec::new(),
    }
    .status(1, RunStatus::Queued);
    let t = queued.timeline();
    assert_eq!(wait_rows(&t), [(Queue, None, 1, None)]);
    assert_eq!(t.waits[0].duration_ms, 999);
    assert_eq!(t.breakdown.queue_ms, 999);

    // A retry whose next attempt has not started yet: the backoff goes on.
    let backing_off = Fixture::new()
        .attempt("f", Tool, 1, (10, Some(20)), StepStatus::Failed)
        .step(10, "f", Tool, StepStatus::Running, 1, None)
        .step(20, "f", Tool, StepStatus::Retrying, 1, Some(5000));
    let t = backing_off.timeline();
    assert_eq!(wait_rows(&t)[1], (Backoff, Some("f".into()), 20, None));
    assert_eq!(t.breakdown.backoff_ms, 980);
}

#[test]
fn a_retry_cut_short_by_the_end_of_the_run() {
    let run = Fixture::new()
        .attempt("f", Tool, 1, (10, Some(20)), StepStatus::Failed)
        .step(10, "f", Tool, StepStatus::Running, 1, None)
        .step(20, "f", Tool, StepStatus::Retrying, 1, Some(5000))
        .finish(70);
    let t = run.timeline();
    assert_eq!(wait_rows(&t)[1], (Backoff, Some("f".into()), 20, Some(70)));
}

#[test]
fn decisions_come_from_plans_loop_detection_and_status_messages() {
    let run = Fixture::new()
        .plan(6, 1, "initial")
        .event(
            50,
            Some("a"),
            ErrorData {
                error: RunError::new(ErrorCode::LoopDetected, "again"),
                step_id: Some("a".into()),
            },
        )
        .event(
            51,
            Some("a"),
            ErrorData {
                error: RunError::new(ErrorCode::ToolTimeout, "slow"),
                step_id: Some("a".into()),
            },
        )
        .plan(60, 2, "step_failed")
        .event(
            70,
            None,
            StatusData {
                status: RunStatus::Running,
                message: Some("resumed after a restart".into()),
                selected: None,
                progress: None,
            },
        )
        .finish(80);
    let t = run.timeline();
    let kinds: Vec<&str> = t.decisions.iter().map(|d| d.kind.as_str()).collect();
    assert_eq!(kinds, ["plan", "loop_detected", "replan", "status"]);
    let plan = &t.decisions[0];
    assert_eq!(plan.detail["version"], 1);
    assert_eq!(plan.detail["reason"], "initial");
    assert_eq!(plan.detail["critical_path"], json!(["a"]));
    assert!(
        plan.detail.get("plan").is_none(),
        "the plan document is left out"
    );
    assert_eq!((plan.at, plan.seq), (at(6), 3));
    assert_eq!(t.decisions[1].step_id.as_deref(), Some("a"));
    assert_eq!(t.decisions[1].detail["code"], "loop_detected");
    assert_eq!(t.decisions[2].detail["reason"], "step_failed");
    assert_eq!(
        t.decisions[3].detail,
        json!({ "status": "running", "message": "resumed after a restart" })
    );
}

#[test]
fn the_first_announced_selection_is_a_decision() {
    let selected = crate::domain::Selection {
        orchestration: Orchestration::Planner,
        by: crate::domain::SelectedBy::Llm,
        rule: None,
        reason: "the model chose `planner`".into(),
    };
    let announce = |message: Option<&str>| StatusData {
        status: RunStatus::Running,
        message: message.map(str::to_owned),
        selected: Some(selected.clone()),
        progress: None,
    };
    let run = Fixture::new()
        .event(6, None, announce(None))
        // A restart announces it again, with its message: only the message is new.
        .event(40, None, announce(Some("resumed after a restart")))
        .finish(80);
    let t = run.timeline();
    let kinds: Vec<&str> = t.decisions.iter().map(|d| d.kind.as_str()).collect();
    assert_eq!(kinds, ["selection", "status"]);
    assert_eq!(
        t.decisions[0].detail,
        json!({ "orchestration": "planner", "by": "llm", "rule": null,
                "reason": "the model chose `planner`" })
    );
    assert_eq!(t.decisions[0].at, at(6));
    assert_eq!(t.decisions[1].detail["message"], "resumed after a restart");
}

#[test]
fn ids_stay_unique_when_a_number_repeats_across_plan_versions() {
    let mut run = Fixture::new()
        .ran("a", Tool, 10, 20)
        .ran("a", Tool, 30, 40)
        .finish(50);
    run.attempts[1].plan_version = 2;
    let t = run.timeline();
    let ids: Vec<&str> = t.spans.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["a#1", "a#1@v2"]);
}

#[test]
fn events_out_of_order_are_tolerated() {
    // (Data that does not fit its kind cannot reach the timeline: `Event` decodes it by kind,
    // and the store reports such a row as corrupt.)
    let mut run = simple_run().run;
    run.events.reverse();
    let t = run.timeline();
    assert_eq!(t.totals.llm_calls, 2);
    assert_eq!(
        path_labels(&t),
        ["queue", "llm-1#1", "tool-1-1#1", "llm-2#1"]
    );
}

#[test]
fn a_large_run_adds_up() {
    // 2,000 attempts in fan-outs of 10, with usage and tool calls: the figures stay
    // consistent (the time it takes is measured by `examples/bench_timeline.rs`).
    let mut run = Fixture::new();
    let mut clock = 10;
    for group in 0..200 {
        for k in 0..10 {
            let id = format!("g{group}-s{k}");
            let kind = if k % 2 == 0 { Tool } else { Llm };
            run = run.ran(&id, kind, clock, clock + 5 + k);
            run = if kind == Tool {
                run.tool_call(clock + 1, &id)
            } else {
                run.usage(clock + 2, &id, 10, 1)
            };
        }
        clock += 20;
    }
    let run = run.finish(clock);
    let t = run.timeline();
    assert_eq!(t.totals.attempts, 2000);
    assert_eq!(t.totals.tool_calls, 1000);
    assert_eq!(t.totals.llm_calls, 1000);
    assert_eq!(t.spans.iter().map(|s| s.tool_calls).sum::<u64>(), 1000);
    assert_eq!(t.spans.iter().map(|s| s.tokens.prompt).sum::<u64>(), 10_000);
    // Each group's longest child (14 ms) is on the path, one per group.
    assert_eq!(t.critical_path.len(), 1 + 200);
    assert_eq!(
        t.breakdown.accounted_ms + t.breakdown.orchestrator_ms,
        t.breakdown.total_ms
    );
    assert_eq!(t.breakdown.accounted_ms, 4 + 200 * 14);
}

#[test]
fn a_worker_tools_call_splits_into_queue_wait_and_work_and_progress_changes_no_status() {
    use crate::domain::event::{TaskNote, ToolOutcome, ToolResultData};
    let done = ToolResultData {
        call_id: "call-10".into(),
        tool: "test.count".into(),
        result: ToolOutcome::Output(json!(1)),
        task: Some(TaskNote {
            task_id: "t".into(),
            attempts: 1,
            claimed_at: Some(at(400)),
        }),
    };
    let progress = crate::domain::event::StatusData {
        status: RunStatus::Running,
        message: Some("test.count: half".into()),
        selected: None,
        progress: Some(json!({"progress": "half"})),
    };
    let run = Fixture::new()
        .status(0, RunStatus::Running)
        .ran("work", Tool, 10, 1000)
        .tool_call(10, "work")
        .event(500, Some("work"), progress)
        .event(990, Some("work"), done)
        .finish(1000);
    let t = run.timeline();
    let worker: Vec<&Wait> = t
        .waits
        .iter()
        .filter(|w| w.kind == WaitKind::Worker)
        .collect();
    assert_eq!(worker.len(), 1, "{:?}", t.waits);
    assert_eq!(
        (worker[0].duration_ms, worker[0].step_id.as_deref()),
        (390, Some("work"))
    );
    assert_eq!(t.breakdown.worker_queue_ms, 390);
    assert_eq!(
        t.breakdown.tools_ms, 990,
        "the queue wait is inside the call"
    );
    assert!(
        !t.decisions.iter().any(|d| d.kind == "status"),
        "progress is no decision: {:?}",
        t.decisions
    );
}
