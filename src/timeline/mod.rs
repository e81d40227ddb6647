//! The timeline of a run (`GET /v1/runs/{id}/timeline`): every step attempt as a span, the
//! waits around them (queue, human input, retry backoff), the critical path of what actually
//! ran, a latency breakdown, and the decisions the run made, with tokens and calls per attempt.
//!
//! Pure: [`build`] reads the run row, its stored step attempts and its events (as the store
//! returns them) and the time to treat as "now" for a run still going; it does no IO and
//! decides nothing about runs. Every figure is defined where its field is declared below; the
//! `docs/api.md` repeats the definitions for users.
//!
//! Where the numbers come from, and why:
//! - Timings come from the step attempts (started and completed as they happened, at every
//!   nesting level) and from `status` events (emitted live, never held). Other events are not
//!   trusted for timing: the plan scheduler holds a step's tool calls, retries and end in a
//!   buffer until the step commits, so their `ts` is the commit time.
//! - Tokens and calls come from `usage` (one per finished model call) and `tool_call` events,
//!   attributed to an attempt of the step the event names (see `Index::owner`).
//!
//! Cost: O(n log n) in attempts + events (sorts, binary searches, hash maps; no scan per item),
//! so a run of 10,000 events is a few milliseconds of work.

mod intervals;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::domain::Payload;
use crate::domain::event::StepData;
use crate::domain::{
    ErrorCode, Event, EventKind, Run, RunId, RunStatus, StepAttempt, StepKind, StepPath, StepStatus,
};

use intervals::{Interval, covered, critical_chain};

/// Event kinds the timeline never reads: model text, tool outputs and `final` are most of a
/// long run's log and add nothing the attempts and the other events do not say. The store
/// skips them when it reads a run for its timeline.
pub const UNUSED_EVENT_KINDS: [EventKind; 4] = [
    EventKind::Token,
    EventKind::JsonPartial,
    EventKind::ToolResult,
    EventKind::Final,
];

/// A run's timeline. Times are RFC 3339 UTC; durations are whole milliseconds, rounded down.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Timeline {
    #[schema(value_type = String, format = Uuid)]
    pub run_id: RunId,
    pub status: RunStatus,
    pub created_at: DateTime<Utc>,
    /// When the run first got a running slot (`null` while it is still queued).
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// The moment the timeline describes: `finished_at` for a finished run, otherwise when it
    /// was computed. Spans and waits still open are measured up to it.
    pub as_of: DateTime<Utc>,
    /// Wall-clock time of the run, from `created_at` to `as_of`.
    pub duration_ms: u64,
    /// Every step attempt, at every nesting level, in start order.
    pub spans: Vec<Span>,
    /// Time the run spent waiting rather than working, in start order.
    pub waits: Vec<Wait>,
    /// The links of what actually determined the end time, first to last (how they are found:
    /// `PathItem`).
    pub critical_path: Vec<PathItem>,
    pub breakdown: Breakdown,
    /// Choices the run made on the way, in event order (which ones: `Decision`).
    pub decisions: Vec<Decision>,
    pub totals: Totals,
}

/// One attempt of one step.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Span {
    /// `KEY#ATTEMPT`, where KEY is the step's path and id (`outer/each[1]/inner`, or the id
    /// alone at the top level). Unique within the run: attempts are numbered per step and
    /// place across retries, restarts and plan versions. Should a store ever hold one number
    /// twice, the later plan version's gets `@vN` appended.
    pub id: String,
    pub step_id: String,
    /// The enclosing steps, loop iterations as `id[i]`; `null` at the top level (as in
    /// `GET /v1/runs/{id}/steps`).
    #[schema(value_type = Option<String>)]
    pub path: Option<StepPath>,
    /// The `id` of the enclosing step's attempt this one ran inside (the latest attempt of the
    /// parent that started no later than this one); `null` at the top level.
    pub parent: Option<String>,
    pub name: String,
    pub kind: StepKind,
    pub attempt: u32,
    pub plan_version: u32,
    pub status: StepStatus,
    pub start: DateTime<Utc>,
    /// `null` while the attempt is still running.
    pub end: Option<DateTime<Utc>>,
    /// As the engine measured it (a monotonic clock, so it may differ from `end - start` by a
    /// millisecond); for an attempt still running, up to `as_of`.
    pub duration_ms: u64,
    /// The error code the attempt ended with, if it failed or was cancelled.
    pub error_code: Option<String>,
    /// Tokens of the model calls this attempt made (its `usage` events), not counting its
    /// children's.
    pub tokens: Tokens,
    /// Model calls this attempt finished (one `usage` event each; a call that failed before
    /// its end reports no usage and is counted only in the run object's `usage.llm_calls`).
    pub llm_calls: u64,
    /// Tool calls this attempt made (its `tool_call` events, failed calls included).
    pub tool_calls: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct Tokens {
    pub prompt: u64,
    pub completion: u64,
}

/// What a wait was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitKind {
    /// From a `queued` status event to the next status event: the run waited for a running
    /// slot (`engine.max_running_runs`).
    Queue,
    /// From a `waiting_input` status event to the next status event: the run waited for an
    /// answer to `input_required`, then (once answered) for a running slot again.
    HumanInput,
    /// From the end of an attempt announced `retrying` to the start of the step's next
    /// attempt: the retry policy's delay, plus any wait for a free slot. When no next attempt
    /// followed (the run ended first), the announced delay, cut at the run's end.
    Backoff,
    /// From a `paused` status event to the next status event: the run was paused (by the
    /// user, or at a breakpoint), then (once resumed) waited for a running slot again.
    Paused,
    /// From a worker tool's `tool_call` to the claim that ended its task (`tool_result`'s
    /// `task.claimed_at`): the task waited in its queue for a worker (earlier claims that
    /// lapsed or failed included); the rest of the call is the worker's work.
    Worker,
}

/// A stretch of time the run (or one of its steps) spent waiting.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Wait {
    pub kind: WaitKind,
    /// `human_input`: the step that asked; `backoff`: the step being retried; `worker`: the
    /// step that called the tool; `null` for `queue`.
    pub step_id: Option<String>,
    /// `backoff`: the span of the attempt that failed; `human_input`: the span of the
    /// attempt that asked (when it is known); `null` for `queue`.
    pub span: Option<String>,
    pub start: DateTime<Utc>,
    /// `null` while the wait goes on.
    pub end: Option<DateTime<Utc>>,
    /// Up to `as_of` while the wait goes on.
    pub duration_ms: u64,
}

/// What a link of the critical path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PathKind {
    /// A span with no child spans (work: a model call, a tool call, a timer, a human answer).
    Step,
    Queue,
    Backoff,
}

/// One link of the critical path.
///
/// The path is found backwards from the run's end (`as_of`): the span or wait that ended last,
/// then whatever ended last before that one started, and so on. Its links are spans without
/// children (the work itself; container steps such as `parallel` are made of their children),
/// `queue` waits and `backoff` waits; a wait for a human lies inside the `user_input` span
/// that asked. Links never overlap, and the time between them is orchestration on the path.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct PathItem {
    pub kind: PathKind,
    /// `step`: the span; `backoff`: the span of the attempt that failed.
    pub span: Option<String>,
    pub step_id: Option<String>,
    pub start: DateTime<Utc>,
    /// For a span or wait still open, `as_of`.
    pub end: DateTime<Utc>,
    pub duration_ms: u64,
}

/// Where the run's wall-clock time went.
///
/// Each category is the time covered by at least one of its intervals (their union), cut to
/// the run's window (`created_at` to `as_of`), so parallel work is counted once: ten tool
/// calls running side by side for 1 s make `tools_ms` 1000. Categories can overlap one another
/// when parallel branches do different things at once (a model call beside a tool call), so
/// their sum may exceed `total_ms`; `accounted_ms` is the union of all of them, and
/// `total_ms = accounted_ms + orchestrator_ms` exactly.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct Breakdown {
    /// `duration_ms` of the run.
    pub total_ms: u64,
    /// Attempts of `llm` steps (a simple run's `llm-N` rounds included): prompt sent to last
    /// token and usage received.
    pub model_ms: u64,
    /// Attempts of `tool` steps (a simple run's `tool-N-M` calls included).
    pub tools_ms: u64,
    /// Attempts of `wait` steps: pauses the plan asked for.
    pub timers_ms: u64,
    /// `human_input` waits.
    pub human_ms: u64,
    /// `backoff` waits.
    pub backoff_ms: u64,
    /// `queue` waits.
    pub queue_ms: u64,
    /// `paused` waits.
    pub paused_ms: u64,
    /// `worker` waits: worker tools' tasks waiting for a worker (part of `tools_ms` too).
    pub worker_queue_ms: u64,
    /// The union of every category above.
    pub accounted_ms: u64,
    /// `total_ms - accounted_ms`: time in none of the categories — the orchestrator's own
    /// work (storing, scheduling, templating, conditions, checkpoints) and the gaps between
    /// steps. A server stop shows here too, apart from the attempt it interrupted, which
    /// stays open until the restart closes it.
    pub orchestrator_ms: u64,
}

/// A choice the run made, built from its events. `kind` is one of:
/// `plan` (a `plan` event of version 1), `replan` (a `plan` event of a later version),
/// `loop_detected` (an `error` event with that code), `status` (a `status` event carrying a
/// `message`, e.g. a resume after a restart), `selection` (the first `status` event carrying
/// `selected`: how the run's orchestration was chosen; `detail` is that `selected` object). New
/// decision kinds may be added; clients should show unknown ones generically.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Decision {
    pub kind: String,
    /// The event's time.
    pub at: DateTime<Utc>,
    /// The event's seq, to find it in `GET /v1/runs/{id}/events`.
    pub seq: u64,
    pub step_id: Option<String>,
    /// The event's `data`; for plans without the plan document itself (see
    /// `GET /v1/runs/{id}/plans`), so `version`, `reason` and what else the planner said.
    #[schema(value_type = Object)]
    pub detail: Value,
}

/// Counts over the whole run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct Totals {
    /// Distinct steps (by path and id) that made at least one attempt.
    pub steps: u64,
    /// Spans.
    pub attempts: u64,
    /// Retries taken: `backoff` waits.
    pub retries: u64,
    /// Every `usage` event, attributed to a span or not.
    pub llm_calls: u64,
    /// Every `tool_call` event, attributed to a span or not.
    pub tool_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// The sum of the critical path's links (the rest of `duration_ms` is orchestration on
    /// the path).
    pub critical_path_ms: u64,
}

/// Builds the timeline of `run` from its step attempts and its events (any order; kinds in
/// [`UNUSED_EVENT_KINDS`] may be left out). `now` ends what is still open when the run has
/// not finished.
pub fn build(
    run: &Run,
    attempts: &[StepAttempt],
    events: &[Event],
    now: DateTime<Utc>,
) -> Timeline {
    let as_of = run.finished_at.unwrap_or(now).max(run.created_at);
    let window = Interval::new(micros(run.created_at), micros(as_of));
    let mut events: Vec<&Event> = events.iter().collect();
    events.sort_by_key(|e| e.seq);

    let att = Attempts::new(attempts);
    let index = Index::new(&att);
    let parents = index.parents(&att);
    let mut has_children = vec![false; att.len()];
    for p in parents.iter().flatten() {
        has_children[*p] = true;
    }
    let (counts, totals_counted) = attribute(&events, &att, &index);
    let scanned = scan(&events, run.status.is_terminal(), &att, &index, window);

    let breakdown = breakdown(&att, &scanned.waits, window);
    let critical_path = critical_path(&att, &has_children, &scanned.waits, window);
    let spans = (0..att.len())
        .map(|s| {
            let a = att.list[s];
            let c = counts[s];
            Span {
                id: att.ids[s].clone(),
                step_id: a.step_id.clone(),
                path: a.path.clone(),
                parent: parents[s].map(|p| att.ids[p].clone()),
                name: a.name.clone(),
                kind: a.kind,
                attempt: a.attempt,
                plan_version: a.plan_version,
                status: a.status,
                start: a.started_at,
                end: a.completed_at,
                duration_ms: a
                    .duration_ms
                    .unwrap_or_else(|| to_ms(att.end[s].unwrap_or(window.end) - att.start[s])),
                error_code: a.error.as_ref().map(|e| e.code.as_str().to_owned()),
                tokens: c.tokens,
                llm_calls: c.llm_calls,
                tool_calls: c.tool_calls,
            }
        })
        .collect();
    let waits: Vec<Wait> = scanned
        .waits
        .iter()
        .map(|w| Wait {
            kind: w.kind,
            step_id: w.step_id.clone(),
            span: w.span.map(|s| att.ids[s].clone()),
            start: time(w.interval.start),
            end: (!w.open).then(|| time(w.interval.end)),
            duration_ms: to_ms(w.interval.len()),
        })
        .collect();
    let totals = Totals {
        steps: index.by_key.len() as u64,
        attempts: att.len() as u64,
        retries: waits.iter().filter(|w| w.kind == WaitKind::Backoff).count() as u64,
        llm_calls: totals_counted.llm_calls,
        tool_calls: totals_counted.tool_calls,
        prompt_tokens: totals_counted.tokens.prompt,
        completion_tokens: totals_counted.tokens.completion,
        critical_path_ms: critical_path.iter().map(|p| p.duration_ms).sum(),
    };
    Timeline {
        run_id: run.id,
        status: run.status,
        created_at: run.created_at,
        started_at: run.started_at,
        finished_at: run.finished_at,
        as_of,
        duration_ms: breakdown.total_ms,
        spans,
        waits,
        critical_path,
        breakdown,
        decisions: scanned.decisions,
        totals,
    }
}

/// The interval of span `s`, an open one ending at the window's end, cut to the window.
fn span_interval(att: &Attempts<'_>, s: usize, window: Interval) -> Option<Interval> {
    Interval::new(att.start[s], att.end[s].unwrap_or(window.end)).clip(window)
}

/// Where the time went: each category's union, then the union of all (see [`Breakdown`]).
fn breakdown(att: &Attempts<'_>, waits: &[WaitRow], window: Interval) -> Breakdown {
    let mut model = Vec::new();
    let mut tools = Vec::new();
    let mut timers = Vec::new();
    for s in 0..att.len() {
        let Some(iv) = span_interval(att, s, window) else {
            continue;
        };
        match att.list[s].kind {
            StepKind::Llm => model.push(iv),
            StepKind::Tool => tools.push(iv),
            StepKind::Wait => timers.push(iv),
            // Containers are made of their children; a `user_input` attempt is the human
            // wait, measured from the status events; branches are orchestration. Kinds that
            // make their own model and tool calls (agents) are to be split by their calls.
            _ => {}
        }
    }
    let waits_of = |kind: WaitKind| -> Vec<Interval> {
        waits
            .iter()
            .filter(|w| w.kind == kind)
            .filter_map(|w| w.interval.clip(window))
            .collect()
    };
    let human = waits_of(WaitKind::HumanInput);
    let backoff = waits_of(WaitKind::Backoff);
    let queue = waits_of(WaitKind::Queue);
    let paused = waits_of(WaitKind::Paused);
    let worker = waits_of(WaitKind::Worker);
    let all: Vec<Interval> = [
        &model, &tools, &timers, &human, &backoff, &queue, &paused, &worker,
    ]
    .into_iter()
    .flatten()
    .copied()
    .collect();
    let total_ms = to_ms(window.len());
    let accounted_ms = to_ms(covered(all));
    Breakdown {
        total_ms,
        model_ms: to_ms(covered(model)),
        tools_ms: to_ms(covered(tools)),
        timers_ms: to_ms(covered(timers)),
        human_ms: to_ms(covered(human)),
        backoff_ms: to_ms(covered(backoff)),
        queue_ms: to_ms(covered(queue)),
        paused_ms: to_ms(covered(paused)),
        worker_queue_ms: to_ms(covered(worker)),
        accounted_ms,
        // Subtracted in milliseconds, so the parts add up exactly after rounding.
        orchestrator_ms: total_ms.saturating_sub(accounted_ms),
    }
}

/// A candidate link of the critical path.
enum Link {
    Span(usize),
    Wait(usize),
}

/// The critical path (see [`PathItem`]) over spans without children, queue waits and backoff
/// waits.
fn critical_path(
    att: &Attempts<'_>,
    has_children: &[bool],
    waits: &[WaitRow],
    window: Interval,
) -> Vec<PathItem> {
    let mut links: Vec<(Interval, Link)> = Vec::new();
    for s in (0..att.len()).filter(|&s| !has_children[s]) {
        if let Some(iv) = span_interval(att, s, window) {
            links.push((iv, Link::Span(s)));
        }
    }
    for (w, wait) in waits.iter().enumerate() {
        if !matches!(wait.kind, WaitKind::HumanInput | WaitKind::Paused)
            && let Some(iv) = wait.interval.clip(window)
        {
            links.push((iv, Link::Wait(w)));
        }
    }
    let intervals: Vec<Interval> = links.iter().map(|(iv, _)| *iv).collect();
    critical_chain(&intervals, window.end)
        .into_iter()
        .map(|i| {
            let (iv, link) = &links[i];
            let (kind, span, step_id) = match *link {
                Link::Span(s) => (PathKind::Step, Some(s), Some(att.list[s].step_id.clone())),
                Link::Wait(w) => {
                    let wait = &waits[w];
                    let kind = match wait.kind {
                        WaitKind::Queue => PathKind::Queue,
                        _ => PathKind::Backoff,
                    };
                    (kind, wait.span, wait.step_id.clone())
                }
            };
            PathItem {
                kind,
                span: span.map(|s| att.ids[s].clone()),
                step_id,
                start: time(iv.start),
                end: time(iv.end),
                duration_ms: to_ms(iv.len()),
            }
        })
        .collect()
}

fn micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

fn time(us: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(us).unwrap_or_default()
}

fn to_ms(us: i64) -> u64 {
    (us.max(0) / 1000) as u64
}

/// The attempts in start order, with what the rest of the computation needs of each.
struct Attempts<'a> {
    list: Vec<&'a StepAttempt>,
    keys: Vec<String>,
    ids: Vec<String>,
    start: Vec<i64>,
    end: Vec<Option<i64>>,
}

impl<'a> Attempts<'a> {
    fn new(attempts: &'a [StepAttempt]) -> Attempts<'a> {
        let mut list: Vec<&StepAttempt> = attempts.iter().collect();
        list.sort_by(|a, b| {
            (a.started_at, a.plan_version, &a.path, &a.step_id, a.attempt).cmp(&(
                b.started_at,
                b.plan_version,
                &b.path,
                &b.step_id,
                b.attempt,
            ))
        });
        let keys: Vec<String> = list.iter().map(|a| a.step().into()).collect();
        let mut seen = HashSet::with_capacity(list.len());
        let ids = list
            .iter()
            .zip(&keys)
            .map(|(a, key)| {
                let id = format!("{key}#{}", a.attempt);
                if seen.insert(id.clone()) {
                    id
                } else {
                    format!("{id}@v{}", a.plan_version)
                }
            })
            .collect();
        Attempts {
            start: list.iter().map(|a| micros(a.started_at)).collect(),
            end: list.iter().map(|a| a.completed_at.map(micros)).collect(),
            list,
            keys,
            ids,
        }
    }

    fn len(&self) -> usize {
        self.list.len()
    }
}

/// Lookups over the attempts.
struct Index<'a> {
    /// Attempts of each step key, in start order.
    by_key: HashMap<&'a str, Vec<usize>>,
    /// Attempts of each step id (any path), in start order.
    by_step: HashMap<&'a str, Vec<usize>>,
    /// The attempt with this key and number (the latest plan version's, should there be two).
    by_number: HashMap<(&'a str, u32), usize>,
}

impl<'a> Index<'a> {
    fn new(att: &'a Attempts<'a>) -> Index<'a> {
        let mut index = Index {
            by_key: HashMap::new(),
            by_step: HashMap::new(),
            by_number: HashMap::with_capacity(att.len()),
        };
        for s in 0..att.len() {
            let key = att.keys[s].as_str();
            index.by_key.entry(key).or_default().push(s);
            index
                .by_step
                .entry(att.list[s].step_id.as_str())
                .or_default()
                .push(s);
            index.by_number.insert((key, att.list[s].attempt), s);
        }
        index
    }

    /// The enclosing attempt of every attempt: of the parent step's attempts, the latest that
    /// started no later than the child.
    fn parents(&self, att: &Attempts<'_>) -> Vec<Option<usize>> {
        (0..att.len())
            .map(|s| {
                // A child of a loop iteration (`outer/each[2]/x`) sits inside `outer/each`.
                let path = att.list[s].path.as_ref()?.loop_step();
                let candidates = self.by_key.get(path.as_str())?;
                let n = candidates.partition_point(|&p| att.start[p] <= att.start[s]);
                candidates.get(n.checked_sub(1)?).copied()
            })
            .collect()
    }

    fn numbered(&self, seen: &StepData) -> Option<usize> {
        let key = StepPath::from_parts(seen.path.as_ref(), &seen.step_id);
        self.by_number.get(&(key.as_str(), seen.attempt)).copied()
    }

    /// The attempt an event of step `step_id` stamped at `at` belongs to.
    ///
    /// Events emitted live from inside an attempt (model usage, a simple run's tool calls) are
    /// stamped while it runs: they belong to the attempt of that step running at `at`. The
    /// plan scheduler holds the rest of a step's events (its tool calls, retries, end) until
    /// the step commits, so those are stamped after every attempt of the step ended; they are
    /// in order, though, each before the `step` event that closed its attempt, so they belong
    /// to `closing_next`, the attempt closed by the next `step` event of the same step. Events
    /// matching neither go to the latest attempt started before them.
    fn owner(
        &self,
        att: &Attempts<'_>,
        step_id: &str,
        at: i64,
        closing_next: Option<usize>,
    ) -> Option<usize> {
        let candidates = self.by_step.get(step_id)?;
        let n = candidates.partition_point(|&s| att.start[s] <= at);
        let latest = n.checked_sub(1).map(|i| candidates[i]);
        if let Some(s) = latest
            && att.end[s].is_none_or(|end| at <= end)
        {
            return Some(s);
        }
        closing_next
            .or(latest)
            .or_else(|| candidates.first().copied())
    }
}

/// Tokens and calls of one attempt, or of the whole run.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    tokens: Tokens,
    llm_calls: u64,
    tool_calls: u64,
}

/// Tokens and calls per attempt, and for the whole run. Walks the log backwards so that, at
/// each event, the attempt the next `step` event of its step closes is known.
fn attribute(events: &[&Event], att: &Attempts<'_>, index: &Index<'_>) -> (Vec<Counts>, Counts) {
    let mut counts = vec![Counts::default(); att.len()];
    let mut total = Counts::default();
    let mut closing_next: HashMap<&str, usize> = HashMap::new();
    for ev in events.iter().rev() {
        let step_id = ev.step_id.as_deref();
        let usage = match &ev.data {
            Payload::Step(seen) => {
                if seen.status != StepStatus::Running
                    && let Some(s) = index.numbered(seen)
                {
                    closing_next.insert(att.list[s].step_id.as_str(), s);
                }
                continue;
            }
            Payload::Usage(u) => Some(u),
            Payload::ToolCall(_) => None,
            _ => continue,
        };
        let owner = step_id
            .and_then(|id| index.owner(att, id, micros(ev.ts), closing_next.get(id).copied()));
        for c in std::iter::once(&mut total).chain(owner.map(|s| &mut counts[s])) {
            match &usage {
                Some(u) => {
                    c.llm_calls += 1;
                    c.tokens.prompt += u.prompt_tokens;
                    c.tokens.completion += u.completion_tokens;
                }
                None => c.tool_calls += 1,
            }
        }
    }
    (counts, total)
}

/// A wait as found in the log.
struct WaitRow {
    kind: WaitKind,
    step_id: Option<String>,
    span: Option<usize>,
    interval: Interval,
    /// Still going at `as_of`.
    open: bool,
}

struct Scanned {
    /// In start order.
    waits: Vec<WaitRow>,
    decisions: Vec<Decision>,
}

/// The run status in force, since when, and (for `waiting_input`) the step that asked and its
/// attempt.
struct Since {
    status: RunStatus,
    at: i64,
    asked: Option<(String, Option<usize>)>,
}

impl Since {
    /// The wait this status was, had it ended at `end`; `None` for statuses that are not one.
    fn wait(self, end: i64, open: bool) -> Option<WaitRow> {
        let kind = match self.status {
            RunStatus::Queued => WaitKind::Queue,
            RunStatus::WaitingInput => WaitKind::HumanInput,
            RunStatus::Paused => WaitKind::Paused,
            _ => return None,
        };
        let (step_id, span) = self.asked.unzip();
        Some(WaitRow {
            kind,
            step_id,
            span: span.flatten(),
            interval: Interval::new(self.at, end),
            open,
        })
    }
}

/// Waits and decisions, in one pass over the log.
fn scan(
    events: &[&Event],
    terminal: bool,
    att: &Attempts<'_>,
    index: &Index<'_>,
    window: Interval,
) -> Scanned {
    let mut waits = Vec::new();
    let mut decisions = Vec::new();
    let mut current: Option<Since> = None;
    // The last `input_required`: its step and when it asked.
    let mut asking: Option<(&str, i64)> = None;
    // Every start announces the selection again; the first announcement is the decision.
    let mut selection_seen = false;
    // When each tool call was made, by call id: where a worker tool's queue wait starts.
    let mut calls: std::collections::HashMap<&str, i64> = Default::default();
    for ev in events {
        let at = micros(ev.ts);
        match &ev.data {
            // A worker's progress is told as a `running` event; the run's status is unchanged.
            Payload::Status(data) if data.progress.is_some() => {}
            Payload::Status(data) => {
                waits.extend(current.take().and_then(|c| c.wait(at, false)));
                // A wait for a human answers the `input_required` just before it.
                let asked = match data.status {
                    RunStatus::WaitingInput => asking.take().map(|(step_id, asked_at)| {
                        (
                            step_id.to_owned(),
                            index.owner(att, step_id, asked_at, None),
                        )
                    }),
                    _ => None,
                };
                current = Some(Since {
                    status: data.status,
                    at,
                    asked,
                });
                if let Some(selected) = data.selected.as_ref().filter(|_| !selection_seen) {
                    selection_seen = true;
                    let detail = serde_json::to_value(selected).unwrap_or_default();
                    decisions.push(decision("selection", ev, detail));
                }
                if data.message.as_deref().is_some_and(|m| !m.is_empty()) {
                    decisions.push(decision("status", ev, ev.data.to_data()));
                }
            }
            Payload::ToolCall(call) => {
                calls.insert(call.call_id.as_str(), at);
            }
            Payload::ToolResult(done) => {
                let claimed = done.task.as_ref().and_then(|t| t.claimed_at);
                if let (Some(claimed), Some(&called)) = (claimed, calls.get(done.call_id.as_str()))
                {
                    waits.push(WaitRow {
                        kind: WaitKind::Worker,
                        step_id: ev.step_id.clone(),
                        span: None,
                        interval: Interval::new(called, micros(claimed).max(called)),
                        open: false,
                    });
                }
            }
            Payload::InputRequired(_) => {
                if let Some(step_id) = ev.step_id.as_deref() {
                    asking = Some((step_id, at));
                }
            }
            Payload::Step(seen) => {
                if seen.status == StepStatus::Retrying
                    && let Some(wait) = backoff(seen, terminal, att, index, window)
                {
                    waits.push(wait);
                }
            }
            Payload::Plan(plan) => {
                let kind = if plan.version > 1 { "replan" } else { "plan" };
                // The plan document itself is at `GET /v1/runs/{id}/plans`.
                let mut detail = ev.data.to_data();
                if let Value::Object(m) = &mut detail {
                    m.remove("plan");
                }
                decisions.push(decision(kind, ev, detail));
            }
            Payload::Error(data) if data.error.code == ErrorCode::LoopDetected => {
                let kind = ErrorCode::LoopDetected.as_str();
                decisions.push(decision(kind, ev, ev.data.to_data()));
            }
            _ => {}
        }
    }
    // The status in force at the end: still going unless the run has finished.
    waits.extend(current.and_then(|c| c.wait(window.end, !terminal)));
    waits.sort_by_key(|w| (w.interval.start, w.interval.end));
    Scanned { waits, decisions }
}

/// The backoff after the attempt a `retrying` event announced: until the step's next attempt
/// at the same place started, or, when none did, for the announced delay (cut at the end).
fn backoff(
    seen: &StepData,
    terminal: bool,
    att: &Attempts<'_>,
    index: &Index<'_>,
    window: Interval,
) -> Option<WaitRow> {
    let s = index.numbered(seen)?;
    let failed_at = att.end[s]?;
    let same_step = &index.by_key[att.keys[s].as_str()];
    let after = same_step.partition_point(|&o| att.start[o] < failed_at);
    let (end, open) = match same_step[after..].iter().find(|&&o| o != s) {
        Some(&next) => (att.start[next], false),
        None => {
            let delay_us = seen.retry_in_ms.unwrap_or(0).saturating_mul(1000);
            let planned = failed_at.saturating_add(i64::try_from(delay_us).unwrap_or(i64::MAX));
            (planned.min(window.end), !terminal && planned > window.end)
        }
    };
    Some(WaitRow {
        kind: WaitKind::Backoff,
        step_id: Some(att.list[s].step_id.clone()),
        span: Some(s),
        interval: Interval::new(failed_at, end),
        open,
    })
}

fn decision(kind: &str, ev: &Event, detail: Value) -> Decision {
    Decision {
        kind: kind.to_owned(),
        at: ev.ts,
        seq: ev.seq,
        step_id: ev.step_id.clone(),
        detail,
    }
}
