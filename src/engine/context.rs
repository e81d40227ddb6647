//! [`RunContext`]: what one run's executor may touch — its spec and limits, its cancellation
//! token, the services (LLM router, tools), and the emitters that stamp events with the run's
//! next `seq` and record step attempts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::domain::run::RunSpec;
use crate::domain::{
    Event, EventKind, Run, RunError, RunId, RunStatus, StepAttempt, StepKind, StepStatus, Tenant,
    Usage,
};
use crate::llm::LlmRouter;
use crate::metrics::Metrics;

use super::clock::RunClock;
use super::input::InputBox;
use crate::store::Record;
use crate::stream::EventHub;
use crate::tools::ToolRegistry;

/// The limits in force for one run: the request's, else the configured defaults.
#[derive(Debug, Clone, Copy)]
pub struct EffectiveLimits {
    pub max_steps: u64,
    pub max_duration_ms: u64,
    pub max_replans: u64,
    pub max_retries: u64,
    /// 0 = unlimited.
    pub max_tokens: u64,
}

/// Shared, immutable services every run uses.
#[derive(Clone)]
pub struct Services {
    pub llm: LlmRouter,
    pub tools: ToolRegistry,
    pub hub: EventHub,
    pub metrics: Metrics,
    pub inputs: InputBox,
    pub config: Arc<crate::config::EngineConfig>,
}

/// Where a run context starts from: a new run, or a stored one being resumed.
pub struct RunSeed {
    pub run: Run,
    pub tenant: Tenant,
    pub spec: RunSpec,
    pub limits: EffectiveLimits,
    /// The last seq already in the run's event log (0 for a new run).
    pub last_seq: u64,
}

pub struct RunContext {
    pub run_id: RunId,
    pub tenant: Tenant,
    pub spec: RunSpec,
    pub limits: EffectiveLimits,
    pub cancel: CancellationToken,
    pub services: Services,
    /// The run's time limit, paused while it waits for a human.
    pub clock: RunClock,
    /// The run was started before (its log already holds events): executors continue from
    /// their last checkpoint instead of starting over.
    pub resumed: bool,
    /// The run row as the task knows it. A std mutex: short updates, never across an await.
    run: Mutex<Run>,
    seq: AtomicU64,
    steps_started: AtomicU64,
    retries_used: AtomicU64,
    /// Usage so far. A std mutex: updated in short sections, never across an await.
    usage: Mutex<Usage>,
    /// Attempts started and not yet finished, closed as cancelled/failed if the run ends first.
    open_attempts: Mutex<HashMap<(String, u32), (StepAttempt, Instant)>>,
}

impl RunContext {
    pub fn new(seed: RunSeed, cancel: CancellationToken, services: Services) -> Self {
        RunContext {
            run_id: seed.run.id,
            tenant: seed.tenant,
            spec: seed.spec,
            clock: RunClock::start(std::time::Duration::from_millis(
                seed.limits.max_duration_ms,
            )),
            resumed: seed.last_seq > 0,
            limits: seed.limits,
            cancel,
            services,
            seq: AtomicU64::new(seed.last_seq),
            steps_started: AtomicU64::new(0),
            retries_used: AtomicU64::new(0),
            usage: Mutex::new(seed.run.usage),
            run: Mutex::new(seed.run),
            open_attempts: Mutex::new(HashMap::new()),
        }
    }

    /// Builds the next event of this run (taking the next seq) without queueing it.
    pub fn next_event(&self, kind: EventKind, step_id: Option<&str>, data: Value) -> Event {
        Event {
            seq: self.seq.fetch_add(1, Ordering::SeqCst) + 1,
            run_id: self.run_id,
            kind,
            ts: crate::domain::now(),
            step_id: step_id.map(str::to_owned),
            data,
        }
    }

    /// Stamps and queues an event (persisted, then broadcast).
    pub async fn emit(&self, kind: EventKind, step_id: Option<&str>, data: Value) {
        let ev = self.next_event(kind, step_id, data);
        self.services.hub.append(Arc::new(ev)).await;
    }

    /// A copy of the run row as the task knows it (usage included).
    pub fn run(&self) -> Run {
        let mut run = self.run.lock().expect("run lock").clone();
        run.usage = self.usage();
        run
    }

    /// Changes the run row under the lock (no await inside `f`).
    pub fn update_run(&self, f: impl FnOnce(&mut Run)) {
        f(&mut self.run.lock().expect("run lock"));
    }

    /// Moves the run to `status`: stores the row and emits a `status` event.
    pub async fn set_status(&self, status: RunStatus, extra: Option<(&str, Value)>) {
        self.update_run(|r| r.status = status);
        let run = self.run();
        self.services
            .hub
            .record(Record::RunState(Box::new(run)))
            .await;
        let mut data = serde_json::json!({ "status": status });
        if let Some((k, v)) = extra {
            data[k] = v;
        }
        self.emit(EventKind::Status, None, data).await;
    }

    /// Waits for a human answer to step `step_id`: emits `input_required`, moves the run to
    /// `waiting_input` (its clock paused), and back to `running` once answered.
    pub async fn wait_for_input(
        &self,
        step_id: &str,
        prompt: &str,
        schema: Option<&Value>,
    ) -> Result<Value, RunError> {
        let rx = self
            .services
            .inputs
            .wait(self.run_id, step_id, schema)
            .map_err(|m| RunError::new("invalid_step", m))?;
        let mut data = serde_json::json!({ "step_id": step_id, "prompt": prompt });
        if let Some(s) = schema {
            data["schema"] = s.clone();
        }
        self.emit(EventKind::InputRequired, Some(step_id), data)
            .await;
        self.set_status(RunStatus::WaitingInput, None).await;
        self.clock.pause();
        let answer = rx.await;
        self.clock.resume();
        self.services.inputs.forget(self.run_id);
        let value = answer.map_err(|_| RunError::new("cancelled", "the wait for input ended"))?;
        self.set_status(RunStatus::Running, None).await;
        Ok(value)
    }

    pub fn usage(&self) -> Usage {
        *self.usage.lock().expect("usage lock")
    }

    /// Counts one LLM call's tokens; fails the run past `max_tokens`.
    pub fn add_llm_usage(&self, prompt: u64, completion: u64) -> Result<(), RunError> {
        let total = {
            let mut u = self.usage.lock().expect("usage lock");
            u.prompt_tokens += prompt;
            u.completion_tokens += completion;
            u.prompt_tokens + u.completion_tokens
        };
        if self.limits.max_tokens > 0 && total > self.limits.max_tokens {
            return Err(RunError::new(
                "token_limit_exceeded",
                format!(
                    "the run used {total} tokens, over its limit of {}",
                    self.limits.max_tokens
                ),
            ));
        }
        Ok(())
    }

    /// Takes one retry from the run's budget (`max_retries`); false when it is spent.
    pub fn take_retry(&self) -> bool {
        self.retries_used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.limits.max_retries).then_some(n + 1)
            })
            .is_ok()
    }

    pub fn count_llm_call(&self) {
        self.usage.lock().expect("usage lock").llm_calls += 1;
    }

    pub fn count_tool_call(&self) {
        self.usage.lock().expect("usage lock").tool_calls += 1;
    }

    /// Starts a step attempt: checks `max_steps`, stores the attempt as running and emits the
    /// `step` event.
    pub async fn step_started(
        &self,
        step_id: &str,
        name: &str,
        kind: StepKind,
        attempt: u32,
        plan_version: u32,
        input: Option<Value>,
    ) -> Result<(), RunError> {
        let n = self.steps_started.fetch_add(1, Ordering::SeqCst) + 1;
        if n > self.limits.max_steps {
            return Err(RunError::new(
                "step_limit_exceeded",
                format!(
                    "the run reached its limit of {} steps",
                    self.limits.max_steps
                ),
            ));
        }
        let rec = StepAttempt {
            step_id: step_id.to_owned(),
            name: name.to_owned(),
            kind,
            status: StepStatus::Running,
            attempt,
            plan_version,
            input,
            output: None,
            error: None,
            started_at: crate::domain::now(),
            completed_at: None,
            duration_ms: None,
        };
        self.store_attempt(&rec).await;
        self.open_attempts
            .lock()
            .expect("attempts lock")
            .insert((step_id.to_owned(), attempt), (rec, Instant::now()));
        self.emit(
            EventKind::Step,
            Some(step_id),
            serde_json::json!({
                "step_id": step_id, "name": name, "kind": kind, "status": StepStatus::Running,
                "attempt": attempt,
            }),
        )
        .await;
        Ok(())
    }

    /// Finishes a step attempt started with [`Self::step_started`].
    pub async fn step_finished(
        &self,
        step_id: &str,
        attempt: u32,
        status: StepStatus,
        output: Option<Value>,
        error: Option<RunError>,
    ) {
        // The attempt leaves the open set only once its end is stored: if the run is cancelled
        // while this future is suspended, `close_open_attempts` still finds and closes it.
        let key = (step_id.to_owned(), attempt);
        let open = self
            .open_attempts
            .lock()
            .expect("attempts lock")
            .get(&key)
            .cloned();
        let Some((mut rec, started)) = open else {
            tracing::warn!(step_id, attempt, "finishing a step that was not started");
            return;
        };
        let elapsed = started.elapsed();
        rec.status = status;
        rec.output = output;
        rec.error = error;
        rec.completed_at = Some(crate::domain::now());
        rec.duration_ms = Some(elapsed.as_millis() as u64);
        self.store_attempt(&rec).await;
        self.services
            .metrics
            .step_finished(rec.kind.as_str(), elapsed.as_secs_f64());
        self.emit(EventKind::Step, Some(step_id), ended_step_event(&rec))
            .await;
        self.open_attempts
            .lock()
            .expect("attempts lock")
            .remove(&key);
    }

    /// Registers an attempt the caller stores itself (the plan engine), so that a run ending
    /// around it still closes it.
    pub fn track_attempt(&self, rec: StepAttempt) {
        let key = (rec.step_id.clone(), rec.attempt);
        self.open_attempts
            .lock()
            .expect("attempts lock")
            .insert(key, (rec, Instant::now()));
    }

    /// The attempt registered with [`Self::track_attempt`] has ended.
    pub fn untrack_attempt(&self, step_id: &str, attempt: u32) {
        self.open_attempts
            .lock()
            .expect("attempts lock")
            .remove(&(step_id.to_owned(), attempt));
    }

    /// Closes every attempt still open with `status` (the run ended around them).
    pub async fn close_open_attempts(&self, status: StepStatus, error: &RunError) {
        let open: Vec<(String, u32)> = self
            .open_attempts
            .lock()
            .expect("attempts lock")
            .keys()
            .cloned()
            .collect();
        for (step_id, attempt) in open {
            self.step_finished(&step_id, attempt, status, None, Some(error.clone()))
                .await;
        }
    }

    /// The highest attempt number stored for each step of this run, so that a resumed run
    /// numbers its new attempts after the ones it already has.
    pub async fn highest_attempts(&self) -> HashMap<String, u32> {
        let mut out: HashMap<String, u32> = HashMap::new();
        if let Ok(attempts) = self.services.hub.store().step_attempts(self.run_id).await {
            for a in attempts {
                let e = out.entry(a.step_id).or_default();
                *e = (*e).max(a.attempt);
            }
        }
        out
    }

    /// After a restart: closes, as `cancelled` with code `interrupted`, the attempts the stopped
    /// server left open, so no finished run shows an attempt running forever. Each gets its
    /// `step` event; the executor then starts the step again as a new attempt.
    pub async fn close_interrupted_attempts(&self) {
        let attempts = match self.services.hub.store().step_attempts(self.run_id).await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = ?e, "reading attempts to close after a restart failed");
                return;
            }
        };
        let error = RunError::new("interrupted", "the server stopped during this attempt");
        for mut rec in attempts.into_iter().filter(|a| !a.status.is_terminal()) {
            let now = crate::domain::now();
            rec.status = StepStatus::Cancelled;
            rec.error = Some(error.clone());
            rec.duration_ms = Some((now - rec.started_at).num_milliseconds().max(0) as u64);
            rec.completed_at = Some(now);
            self.store_attempt(&rec).await;
            self.emit(EventKind::Step, Some(&rec.step_id), ended_step_event(&rec))
                .await;
        }
    }

    async fn store_attempt(&self, rec: &StepAttempt) {
        self.services
            .hub
            .record(Record::Attempt(self.run_id, Box::new(rec.clone())))
            .await;
    }
}

/// The `step` event of an attempt that ended, as its stored record says.
fn ended_step_event(rec: &StepAttempt) -> Value {
    let mut data = serde_json::json!({
        "step_id": rec.step_id, "name": rec.name, "kind": rec.kind, "status": rec.status,
        "attempt": rec.attempt, "duration_ms": rec.duration_ms,
    });
    if let Some(o) = &rec.output {
        data["output"] = o.clone();
    }
    if let Some(e) = &rec.error {
        data["error"] = serde_json::to_value(e).unwrap_or(Value::Null);
    }
    data
}
