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
    Event, EventKind, RunError, RunId, StepAttempt, StepKind, StepStatus, Tenant, Usage,
};
use crate::llm::LlmRouter;
use crate::metrics::Metrics;
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
    pub config: Arc<crate::config::EngineConfig>,
}

/// Where a run context starts from: a new run, or a stored one being resumed.
pub struct RunSeed {
    pub run_id: RunId,
    pub tenant: Tenant,
    pub spec: RunSpec,
    pub limits: EffectiveLimits,
    /// The last seq already in the run's event log (0 for a new run).
    pub last_seq: u64,
    /// Usage counted before a restart.
    pub usage: Usage,
}

pub struct RunContext {
    pub run_id: RunId,
    pub tenant: Tenant,
    pub spec: RunSpec,
    pub limits: EffectiveLimits,
    pub cancel: CancellationToken,
    pub services: Services,
    seq: AtomicU64,
    steps_started: AtomicU64,
    /// Usage so far. A std mutex: updated in short sections, never across an await.
    usage: Mutex<Usage>,
    /// Attempts started and not yet finished, closed as cancelled/failed if the run ends first.
    open_attempts: Mutex<HashMap<(String, u32), (StepAttempt, Instant)>>,
}

impl RunContext {
    pub fn new(seed: RunSeed, cancel: CancellationToken, services: Services) -> Self {
        RunContext {
            run_id: seed.run_id,
            tenant: seed.tenant,
            spec: seed.spec,
            limits: seed.limits,
            cancel,
            services,
            seq: AtomicU64::new(seed.last_seq),
            steps_started: AtomicU64::new(0),
            usage: Mutex::new(seed.usage),
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
        rec.output = output.clone();
        rec.error = error.clone();
        rec.completed_at = Some(crate::domain::now());
        rec.duration_ms = Some(elapsed.as_millis() as u64);
        self.store_attempt(&rec).await;
        self.services
            .metrics
            .step_finished(rec.kind.as_str(), elapsed.as_secs_f64());
        let mut data = serde_json::json!({
            "step_id": step_id, "name": rec.name, "kind": rec.kind, "status": status,
            "attempt": attempt, "duration_ms": rec.duration_ms,
        });
        if let Some(o) = output {
            data["output"] = o;
        }
        if let Some(e) = error {
            data["error"] = serde_json::to_value(e).unwrap_or(Value::Null);
        }
        self.emit(EventKind::Step, Some(step_id), data).await;
        self.open_attempts
            .lock()
            .expect("attempts lock")
            .remove(&key);
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

    async fn store_attempt(&self, rec: &StepAttempt) {
        if let Err(e) = self
            .services
            .hub
            .store()
            .upsert_step_attempt(self.run_id, rec)
            .await
        {
            tracing::error!(error = ?e, step_id = rec.step_id, "storing a step attempt failed");
        }
    }
}
