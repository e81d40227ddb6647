//! Step attempts: the one way every executor records that a step started and how it ended.
//!
//! [`RunContext::open_attempt`] numbers the attempt, stores it as running, tracks it, and
//! announces it; [`RunContext::close_attempt`] stores its end and announces that ([`HeldEnd`]
//! holds an end back until the result it produced is checkpointed). Each
//! announcement is a `step` event written to the caller's [`EventSink`], so the plan scheduler
//! can hold a step's events until it commits while a simple run streams them live.
//!
//! Attempts are numbered per step and place (its `path`: the enclosing steps, loop iterations
//! as `id[i]`), counting on across retries of a parent and across restarts, so every attempt
//! the run ever made keeps its own record. An attempt left open when its parent attempt ends
//! (a losing `fastest` child, a step cut off by its parent's timeout) is closed as cancelled
//! then; one still open when the run ends is closed by [`RunContext::close_open_attempts`];
//! one a stopped server left open is closed after the restart by
//! [`RunContext::restore_attempts`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::domain::event::StepData;
use crate::domain::{
    AttemptInput, ErrorCode, RunError, StepAttempt, StepKind, StepPath, StepStatus,
};
use crate::store::Record;

use super::checkpoint::{self, PlanProgress, Restored};
use super::context::{OpenAttempt, RunContext};
use super::sink::EventSink;

/// Which attempt of which step, where, in which plan version.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttemptKey {
    pub plan_version: u32,
    /// The step's place (its id last).
    pub step: StepPath,
    pub attempt: u32,
}

/// A step attempt as it starts; its number is the next one for its step and place.
pub struct NewAttempt<'a> {
    /// The step's place, its id last.
    pub step: &'a StepPath,
    pub name: &'a str,
    pub kind: StepKind,
    /// 0 for runs without a plan (simple runs).
    pub plan_version: u32,
    /// What the attempt works on, when known at the start (tool arguments, a model round).
    pub input: Option<AttemptInput>,
}

/// How an attempt ended.
#[derive(Debug, Clone)]
pub struct AttemptEnd {
    status: StepStatus,
    output: Option<Value>,
    error: Option<RunError>,
    /// Set when the step will be tried again after this wait; the attempt is stored as
    /// failed and announced as `retrying`.
    retry_in: Option<Duration>,
    /// Why an attempt was cancelled without running to its end, for its announcement.
    reason: Option<String>,
    /// What the attempt resolved its inputs to, when only known at the end.
    input: Option<AttemptInput>,
    /// When the attempt's work ended, if before it is closed (a top-level step is closed
    /// only once the scheduler commits it); its time is counted to here.
    ended: Option<Instant>,
}

impl AttemptEnd {
    pub fn completed(output: Value) -> AttemptEnd {
        AttemptEnd::closed(StepStatus::Completed, None).with_output(output)
    }

    pub fn failed(error: RunError) -> AttemptEnd {
        AttemptEnd::closed(StepStatus::Failed, Some(error))
    }

    /// How an attempt that gave `result` ended: completed with its output, or failed (cancelled
    /// when the run was).
    pub fn of(ctx: &RunContext, result: &Result<Value, RunError>) -> AttemptEnd {
        match result {
            Ok(output) => AttemptEnd::completed(output.clone()),
            Err(e) if ctx.cancel.is_cancelled() => {
                AttemptEnd::closed(StepStatus::Cancelled, Some(e.clone()))
            }
            Err(e) => AttemptEnd::failed(e.clone()),
        }
    }

    pub fn retrying(error: RunError, retry_in: Duration) -> AttemptEnd {
        AttemptEnd {
            retry_in: Some(retry_in),
            ..AttemptEnd::failed(error)
        }
    }

    /// Ended with `status` (e.g. cancelled around it).
    pub fn closed(status: StepStatus, error: Option<RunError>) -> AttemptEnd {
        AttemptEnd {
            status,
            output: None,
            error,
            retry_in: None,
            reason: None,
            input: None,
            ended: None,
        }
    }

    pub fn with_reason(mut self, reason: impl Into<String>) -> AttemptEnd {
        self.reason = Some(reason.into());
        self
    }

    fn with_output(mut self, output: Value) -> AttemptEnd {
        self.output = Some(output);
        self
    }

    pub fn with_input(mut self, input: Option<AttemptInput>) -> AttemptEnd {
        self.input = input;
        self
    }

    /// Marks the attempt's work as ended now, for an attempt closed later.
    fn ended_now(mut self) -> AttemptEnd {
        self.ended = Some(Instant::now());
        self
    }
}

/// An attempt whose work has ended, held open until what keeps it from running again (its
/// result, in a checkpoint) is queued; [`HeldEnd::close`] then stores and announces its end.
/// Records are written in the order they are queued, so the attempt is never stored as
/// finished while its result is not: a kill or a lost lease in between would run it again.
#[must_use = "a held attempt must be closed once its result is checkpointed"]
#[derive(Debug)]
pub struct HeldEnd {
    key: AttemptKey,
    end: AttemptEnd,
}

impl HeldEnd {
    /// Holds `end` for the attempt `key`, its time counted to now.
    pub fn new(key: AttemptKey, end: AttemptEnd) -> HeldEnd {
        HeldEnd {
            key,
            end: end.ended_now(),
        }
    }

    /// Stores the end and announces it into `sink`.
    pub async fn close(self, ctx: &RunContext, sink: &mut EventSink) {
        ctx.close_attempt(&self.key, self.end, sink).await;
    }

    /// Closes every one of `held`, in order (none when a replayed record left nothing open).
    pub async fn close_all(
        held: impl IntoIterator<Item = HeldEnd>,
        ctx: &RunContext,
        sink: &mut EventSink,
    ) {
        for end in held {
            end.close(ctx, sink).await;
        }
    }

    /// Goes on holding the end beside the value of a result that will be recorded; a failed
    /// result records nothing, so the end is closed now and the error handed back.
    pub async fn kept_with<T, E>(
        self,
        result: Result<T, E>,
        ctx: &RunContext,
        sink: &mut EventSink,
    ) -> Result<(T, HeldEnd), E> {
        match result {
            Ok(value) => Ok((value, self)),
            Err(e) => {
                self.close(ctx, sink).await;
                Err(e)
            }
        }
    }
}

impl RunContext {
    /// Starts a step attempt once no pause holds it ([`Self::pause_gate`]), as
    /// [`Self::open_now`] does.
    pub async fn open_attempt(
        &self,
        new: NewAttempt<'_>,
        sink: &mut EventSink,
    ) -> Result<AttemptKey, RunError> {
        self.pause_gate(new.step).await;
        self.open_now(new, sink).await
    }

    /// Starts a step attempt now (its caller passed the pause gate): counts it against
    /// `max_steps` (an error past the limit, and no attempt), numbers it, stores it as
    /// running, tracks it (so that a run ending around it still closes it), and writes its
    /// `running` event to `sink`.
    pub async fn open_now(
        &self,
        new: NewAttempt<'_>,
        sink: &mut EventSink,
    ) -> Result<AttemptKey, RunError> {
        self.lease_ready().await;
        self.take_step()?;
        let attempt = {
            let mut numbers = self.attempt_numbers.lock().expect("attempts lock");
            let n = numbers.entry(new.step.clone()).or_default();
            *n += 1;
            *n
        };
        let record = StepAttempt {
            step_id: new.step.leaf().to_owned(),
            path: new.step.parent_if_nested(),
            name: new.name.to_owned(),
            kind: new.kind,
            status: StepStatus::Running,
            attempt,
            plan_version: new.plan_version,
            input: new.input.map(AttemptInput::into_value),
            output: None,
            error: None,
            started_at: crate::domain::now(),
            completed_at: None,
            duration_ms: None,
        };
        let key = AttemptKey {
            plan_version: new.plan_version,
            step: new.step.clone(),
            attempt,
        };
        self.store_attempt(&record).await;
        self.save_counters().await;
        let parent_path = new.step.parent();
        let running = StepData::new(
            new.step.leaf(),
            new.name,
            new.kind,
            StepStatus::Running,
            attempt,
        )
        .at(&parent_path);
        let parent = self.trace_parent((!parent_path.is_root()).then_some(&parent_path));
        let trace = self
            .services
            .telemetry
            .start_attempt(parent.as_ref(), &record);
        let open = OpenAttempt {
            record,
            started: Instant::now(),
            trace,
        };
        self.open_attempts
            .lock()
            .expect("attempts lock")
            .insert(key.clone(), open);
        sink.emit(self, Some(new.step), running).await;
        Ok(key)
    }

    /// Ends an attempt opened with [`Self::open_attempt`]: closes what it left open below it
    /// (as cancelled), stores its end, counts its time, and writes its `step` event to `sink`.
    pub async fn close_attempt(&self, key: &AttemptKey, end: AttemptEnd, sink: &mut EventSink) {
        let below = AttemptEnd::closed(
            StepStatus::Cancelled,
            Some(RunError::new(
                ErrorCode::Cancelled,
                "its parent step ended first",
            )),
        );
        for open in self.open_keys(|k| key.step.contains(&k.step)) {
            self.end_attempt(&open, below.clone(), sink).await;
        }
        self.end_attempt(key, end, sink).await;
    }

    /// Stores the end of one open attempt and announces it.
    async fn end_attempt(&self, key: &AttemptKey, end: AttemptEnd, sink: &mut EventSink) {
        // The attempt leaves the open set only once its end is queued: if the run is
        // cancelled while this future is suspended, `close_open_attempts` still closes it.
        let open = self
            .open_attempts
            .lock()
            .expect("attempts lock")
            .get(key)
            .cloned();
        let Some(OpenAttempt {
            mut record,
            started,
            trace,
        }) = open
        else {
            tracing::warn!(
                step = %key.step,
                attempt = key.attempt,
                "closing an attempt that is not open"
            );
            return;
        };
        let (elapsed, since) = match end.ended {
            Some(ended) => (ended.saturating_duration_since(started), ended.elapsed()),
            None => (started.elapsed(), Duration::ZERO),
        };
        let event = end_record(&mut record, &end, elapsed, since);
        crate::telemetry::end_attempt(trace, record.status, record.error.as_ref());
        self.store_attempt(&record).await;
        self.save_counters().await;
        self.services
            .metrics
            .step_finished(record.kind.as_str(), elapsed.as_secs_f64());
        sink.emit(self, Some(&record.step()), event).await;
        self.open_attempts
            .lock()
            .expect("attempts lock")
            .remove(key);
        // The last thing running may have ended while a pause waits for it.
        self.settle_pause().await;
    }

    /// Closes every attempt still open with `status` and `error` (the run ended around
    /// them); their events go out live.
    pub async fn close_open_attempts(&self, status: StepStatus, error: &RunError) {
        let open = self.open_keys(|_| true);
        for key in open {
            let end = AttemptEnd::closed(status, Some(error.clone()));
            self.end_attempt(&key, end, &mut EventSink::Live).await;
        }
    }

    /// Closes, with `end`, the open attempt of the step at `step` and every attempt still
    /// open inside it (abandoned when their futures were dropped).
    pub async fn close_open_step(&self, step: &StepPath, end: AttemptEnd, sink: &mut EventSink) {
        let open = self.open_keys(|k| step.encloses(&k.step));
        for key in open {
            self.end_attempt(&key, end.clone(), sink).await;
        }
    }

    /// The open attempts whose key passes `keep`, deepest first (a child closes before its
    /// parent), in a stable order.
    pub(super) fn open_keys(&self, keep: impl Fn(&AttemptKey) -> bool) -> Vec<AttemptKey> {
        let mut keys: Vec<AttemptKey> = self
            .open_attempts
            .lock()
            .expect("attempts lock")
            .keys()
            .filter(|k| keep(k))
            .cloned()
            .collect();
        keys.sort_by(|a, b| {
            let parent_len = |k: &AttemptKey| k.step.parent().as_str().len();
            parent_len(b)
                .cmp(&parent_len(a))
                .then_with(|| (&a.step, a.attempt).cmp(&(&b.step, b.attempt)))
        });
        keys
    }

    /// After a restart: numbers new attempts after the stored ones, and closes the attempts the
    /// stopped server left open, so no finished run shows an attempt running forever. One whose
    /// step (or child) a checkpoint holds the result of had finished — the stop came between
    /// that checkpoint and its end ([`HeldEnd`]) — and is closed with that result: it does not
    /// run again. The others are closed as `cancelled` with code `interrupted`, and the
    /// executor starts their steps again as new attempts. Each gets its `step` event.
    pub async fn restore_attempts(&self) {
        let attempts = match self.services.store().step_attempts(self.run_id).await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = ?e, "reading attempts to resume a run failed");
                return;
            }
        };
        {
            let mut numbers = self.attempt_numbers.lock().expect("attempts lock");
            for a in &attempts {
                let n = numbers.entry(a.step()).or_default();
                *n = (*n).max(a.attempt);
            }
        }
        let open: Vec<StepAttempt> = attempts
            .into_iter()
            .filter(|a| !a.status.is_terminal())
            .collect();
        if open.is_empty() {
            return;
        }
        let kept = match checkpoint::restore(self).await {
            Ok(Restored::Plan(progress)) => progress,
            _ => PlanProgress::default(),
        };
        let interrupted = AttemptEnd::closed(
            StepStatus::Cancelled,
            Some(RunError::new(
                ErrorCode::Interrupted,
                "the server stopped during this attempt",
            )),
        );
        let mut given_back = 0;
        for mut record in open {
            let result = match record.path {
                None => kept.steps.get(&record.step_id),
                Some(_) => kept.children.get(&record.step()),
            };
            let end = match result {
                Some(r) if r.status == StepStatus::Completed => {
                    AttemptEnd::completed(r.output.clone().unwrap_or_default())
                }
                Some(r) if r.status == StepStatus::Failed => {
                    AttemptEnd::closed(StepStatus::Failed, r.error.clone())
                }
                _ => {
                    given_back += 1;
                    interrupted.clone()
                }
            };
            let ran = (crate::domain::now() - record.started_at)
                .to_std()
                .unwrap_or_default();
            let event = end_record(&mut record, &end, ran, Duration::ZERO);
            self.store_attempt(&record).await;
            self.emit(Some(&record.step()), event).await;
        }
        if given_back > 0 {
            // The step runs again as its next attempt: the stop, not the run, cost this one,
            // so it does not count against `max_steps` twice.
            self.give_back_steps(given_back);
            self.save_counters().await;
        }
    }

    /// The inputs of the run's finished steps, by step key (`path/id`; the last completed
    /// attempt of each): how a finished step was asked, for a later step that needs it. From
    /// the run's ledger, or for a resumed run read back from the store once what is queued is
    /// written.
    pub async fn completed_inputs(&self) -> HashMap<StepPath, Value> {
        let noted = {
            let ledger = self.ledger.lock().expect("ledger lock");
            ledger
                .history()
                .map(|(_, attempts)| attempts.into_iter().cloned().collect::<Vec<_>>())
        };
        let attempts = match noted {
            Some(attempts) => attempts,
            None => {
                self.services.hub.flush().await;
                match self.services.store().step_attempts(self.run_id).await {
                    Ok(attempts) => attempts,
                    Err(e) => {
                        tracing::warn!(error = ?e, "could not read the inputs of finished steps");
                        return HashMap::new();
                    }
                }
            }
        };
        let mut latest: HashMap<StepPath, (u32, u32, Value)> = HashMap::new();
        for a in attempts {
            let key = a.step();
            let (StepStatus::Completed, Some(input)) = (a.status, a.input) else {
                continue;
            };
            let at = (a.plan_version, a.attempt);
            if latest.get(&key).is_none_or(|(v, n, _)| (*v, *n) <= at) {
                latest.insert(key, (at.0, at.1, input));
            }
        }
        latest
            .into_iter()
            .map(|(k, (_, _, input))| (k, input))
            .collect()
    }

    async fn store_attempt(&self, record: &StepAttempt) {
        self.record(Record::Attempt(self.run_id, Arc::new(record.clone())))
            .await;
    }
}

/// Writes `end` into the stored record of an attempt that ran for `ran` and ended `since` ago,
/// and gives the `step` event that announces it.
fn end_record(
    record: &mut StepAttempt,
    end: &AttemptEnd,
    ran: Duration,
    since: Duration,
) -> StepData {
    let duration_ms = ran.as_millis() as u64;
    record.status = end.status;
    record.output = end.output.clone();
    record.error = end.error.clone();
    if let Some(input) = &end.input {
        record.input = Some(input.clone().into_value());
    }
    let since = chrono::Duration::from_std(since).unwrap_or_default();
    record.completed_at = Some(crate::domain::now() - since);
    record.duration_ms = Some(duration_ms);
    // A retried attempt is stored as failed; only its announcement says another follows.
    let announced = match end.retry_in {
        Some(_) => StepStatus::Retrying,
        None => end.status,
    };
    let mut event = StepData::new(
        &record.step_id,
        &record.name,
        record.kind,
        announced,
        record.attempt,
    )
    .at(&record.step().parent());
    event.reason = end.reason.clone();
    event.output = end.output.clone();
    event.error = end.error.clone();
    event.duration_ms = Some(duration_ms);
    event.retry_in_ms = end.retry_in.map(|d| d.as_millis() as u64);
    event
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::engine::runtime::context::RunSeed;

    fn new(step: &StepPath) -> NewAttempt<'_> {
        NewAttempt {
            step,
            name: "s",
            kind: StepKind::Tool,
            plan_version: 1,
            input: None,
        }
    }

    #[tokio::test]
    async fn attempts_are_numbered_per_step_place_and_land_in_the_ledger_closed() {
        let ctx = RunContext::for_test().build().await;
        let sink = &mut EventSink::Live;
        let (a, b) = (StepPath::top("a"), StepPath::top("b"));
        let child = a.step("c");
        let first = ctx.open_attempt(new(&a), sink).await.unwrap();
        let failed = RunError::new(ErrorCode::InternalError, "once");
        ctx.close_attempt(&first, AttemptEnd::failed(failed), sink)
            .await;
        let second = ctx.open_attempt(new(&a), sink).await.unwrap();
        let inner = ctx.open_attempt(new(&child), sink).await.unwrap();
        let other = ctx.open_attempt(new(&b), sink).await.unwrap();
        let numbers = [first.attempt, second.attempt, inner.attempt, other.attempt];
        assert_eq!(numbers, [1, 2, 1, 1]);
        // Its parent's end closes the child still open, as cancelled.
        ctx.close_attempt(&second, AttemptEnd::completed(json!(7)), sink)
            .await;
        assert_eq!(ctx.open_keys(|_| true), vec![other]);
        let ledger = ctx.ledger.lock().unwrap();
        let (_, attempts) = ledger.history().unwrap();
        let mut seen: Vec<(String, u32, StepStatus)> = attempts
            .iter()
            .map(|a| (a.step().to_string(), a.attempt, a.status))
            .collect();
        seen.sort_by(|x, y| (&x.0, x.1).cmp(&(&y.0, y.1)));
        use StepStatus::*;
        let want = [("a", 1, Failed), ("a", 2, Completed), ("a/c", 1, Cancelled)];
        let want: Vec<(String, u32, StepStatus)> = want
            .into_iter()
            .map(|(s, n, st)| (s.to_owned(), n, st))
            .chain([("b".to_owned(), 1, Running)])
            .collect();
        assert_eq!(seen, want);
        assert_eq!(ctx.counters().steps, 4);
    }

    #[tokio::test]
    async fn an_attempt_past_max_steps_is_not_opened() {
        let ctx = RunContext::for_test()
            .limits(json!({"max_steps": 1}))
            .build()
            .await;
        let (sink, a) = (&mut EventSink::Live, StepPath::top("a"));
        ctx.open_attempt(new(&a), sink).await.unwrap();
        let refused = ctx.open_attempt(new(&a), sink).await.unwrap_err();
        assert_eq!(refused.code, ErrorCode::StepLimitExceeded);
        assert_eq!(ctx.open_keys(|_| true).len(), 1);
        ctx.close_open_attempts(StepStatus::Cancelled, &refused)
            .await;
        assert!(ctx.open_keys(|_| true).is_empty());
        ctx.services.hub.flush().await;
        let stored = ctx.services.store().step_attempts(ctx.run_id).await;
        let stored = stored.unwrap();
        assert_eq!(stored.len(), 1, "{stored:?}");
        assert_eq!(stored[0].status, StepStatus::Cancelled);
        assert_eq!(stored[0].error.as_ref().unwrap().code, refused.code);
    }

    #[tokio::test]
    async fn a_resumed_run_numbers_after_the_stored_attempts_and_closes_the_interrupted_ones() {
        let before = RunContext::for_test().build().await;
        let (sink, a) = (&mut EventSink::Live, StepPath::top("a"));
        before.open_attempt(new(&a), sink).await.unwrap();
        before.services.hub.flush().await;
        // The same run in a new task, on the same store: its attempt 1 was cut off.
        let after = RunContext::new(
            RunSeed {
                run: before.run(),
                tenant: before.tenant.clone(),
                spec: before.spec.clone(),
                plan: None,
                limits: before.limits,
                counters: before.counters(),
                last_seq: 2,
                pause: Default::default(),
                released: Vec::new(),
            },
            Default::default(),
            Default::default(),
            before.services.clone(),
        );
        after.restore_attempts().await;
        assert_eq!(
            after.counters().steps,
            0,
            "the interrupted step is given back"
        );
        let again = after.open_attempt(new(&a), sink).await.unwrap();
        assert_eq!(again.attempt, 2);
        after.services.hub.flush().await;
        let stored = after.services.store().step_attempts(after.run_id).await;
        let first = stored
            .unwrap()
            .into_iter()
            .find(|s| s.attempt == 1)
            .unwrap();
        assert_eq!(first.status, StepStatus::Cancelled);
        assert_eq!(first.error.unwrap().code, ErrorCode::Interrupted);
    }
}
