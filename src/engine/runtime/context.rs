//! [`RunContext`]: what one run's executor may touch — its spec, plan and limits, its
//! cancellation token, the services (LLM router, tools), the emitter that stamps events with
//! the run's next `seq`, and the run's counters (usage, steps, retries).
//!
//! Step attempts are recorded through the methods in [`super::attempts`]; events go out
//! through [`RunContext::emit`] or an [`super::sink::EventSink`].

use crate::domain::definition::{DefinitionKind, Pin};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::domain::DeclaredTool;
use crate::domain::event::{InputRequiredData, StatusData};
use crate::domain::run::RunSpec;
use crate::domain::{
    Counters, ErrorCode, Event, Payload, Run, RunError, RunId, RunStatus, Selection, StepAttempt,
    StepPath, Tenant, Usage,
};
use crate::functions::{FunctionRegistry, FunctionSpec};
use crate::llm::LlmRouter;
use crate::metrics::Metrics;
use crate::plan::{Catalog, JsonSchema, ValidPlan};
use crate::store::{Record, Store};
use crate::stream::EventHub;
use crate::tools::ToolRegistry;
use crate::tools::http::declared::DeclaredTools;

use super::attempts::AttemptKey;
use super::clock::RunClock;
use super::input::InputBox;

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

impl EffectiveLimits {
    /// The limits `spec` asks for, else `config`'s defaults.
    pub fn of(spec: &RunSpec, config: &crate::config::EngineConfig) -> EffectiveLimits {
        let l = spec.request.limits;
        EffectiveLimits {
            max_steps: l.max_steps.unwrap_or(config.max_steps),
            max_duration_ms: l.max_duration_ms.unwrap_or(config.max_run_duration_ms),
            max_replans: l.max_replans.unwrap_or(config.max_replans),
            max_retries: l.max_retries.unwrap_or(config.max_retries),
            max_tokens: l.max_tokens.unwrap_or(config.max_tokens),
        }
    }
}

/// Shared, immutable services every run uses.
#[derive(Clone)]
pub struct Services {
    pub llm: LlmRouter,
    pub tools: ToolRegistry,
    pub functions: FunctionRegistry,
    pub hub: EventHub,
    /// The store, for the reads and the few writes that do not go through the hub's writer.
    pub store: Store,
    pub metrics: Metrics,
    pub inputs: InputBox,
    /// Reactive runs executing now, to wake when the user asks for a new plan.
    pub replans: super::wakes::Wakes,
    pub config: Arc<crate::config::EngineConfig>,
    /// `[context]`: the session history's token budget.
    pub context: Arc<crate::config::ContextConfig>,
    /// `[selector]`, compiled: how `auto` is resolved.
    pub selector: Arc<crate::config::selector::Selector>,
    /// Traces (no-op unless an OTLP endpoint is configured).
    pub telemetry: Arc<crate::telemetry::Telemetry>,
    /// The HTTP tools tenants declare through the API: built on demand for a tenant's view.
    pub declared: DeclaredTools,
    /// Whether this replica surely still holds its leases: passed before every action.
    pub lease: super::lease::LeaseGate,
    /// Features' parts in every run's life (`runtime::hooks`).
    pub hooks: super::hooks::Hooks,
    /// What each tenant's runs may take (`[quotas]`).
    pub quotas: Arc<crate::config::QuotasConfig>,
    /// What a posted run body must be (`schemas/RunRequest.schema.json`), and where its
    /// completion webhook may go (`[webhooks]`, `tools.http_allow*`): `intake`.
    pub bodies: Arc<Bodies>,
    /// Worker tools' tasks (`store::tasks`), with the hub that wakes a run waiting on one.
    pub tasks: crate::store::tasks::Tasks,
    /// Memory items (`store::memory`), with `[memory]`'s limits: the `memory.*` tools'.
    pub memory: crate::store::memory::Memory,
}

/// What admitting a run body needs beyond what a run stands on.
#[derive(Clone)]
pub struct Bodies {
    /// `schemas/RunRequest.schema.json`, compiled.
    pub schema: Arc<crate::schema::ShippedSchema>,
    /// `[webhooks]`: whether this server signs webhooks, and each tenant's default receiver.
    pub webhooks: crate::config::WebhooksConfig,
    /// Where a webhook may be delivered (`tools.http_allow*`).
    pub destinations: Arc<crate::tools::http::guard::Destinations>,
    /// A bundle being applied, in front of the registries while a schedule's run body is
    /// checked (`POST /v1/apply`); `None` for the engine's own services.
    pub overlay: Option<Arc<crate::agents::Overlay>>,
}

impl Bodies {
    /// The rules of this server's configuration.
    pub fn new(
        webhooks: crate::config::WebhooksConfig,
        destinations: Arc<crate::tools::http::guard::Destinations>,
    ) -> Bodies {
        Bodies {
            schema: Arc::new(crate::schema::ShippedSchema::compile(include_str!(
                "../../../schemas/RunRequest.schema.json"
            ))),
            webhooks,
            destinations,
            overlay: None,
        }
    }
}

impl RunContext {
    /// The trace span work on `step` belongs under: the step's open attempt (its latest),
    /// else the run.
    pub fn trace_parent(&self, step: Option<&StepPath>) -> Option<opentelemetry::Context> {
        if !self.services.telemetry.is_on() {
            return None;
        }
        let from_attempt = step.and_then(|step| {
            let open = self.open_attempts.lock().expect("attempts lock");
            open.iter()
                .filter(|(k, _)| k.step == *step)
                .max_by_key(|(_, a)| a.started)
                .and_then(|(_, a)| a.trace.clone())
        });
        from_attempt.or_else(|| self.trace.lock().expect("trace lock").clone())
    }
}

impl Services {
    /// The names plans may use: the tools and the LLM functions.
    pub fn catalog(&self) -> Catalog<'_> {
        Catalog {
            tools: &self.tools,
            functions: Some(&self.functions),
            models: Some(&self.llm),
            registered_agents: &[],
        }
    }

    /// These services as one tenant's run sees them: `declared` (the tenant's own HTTP tools)
    /// beside the tools orca started with, and `functions` (its own LLM functions) beside the
    /// configured ones.
    pub fn for_tenant(
        &self,
        tenant: &Tenant,
        declared: &[DeclaredTool],
        functions: &[FunctionSpec],
    ) -> Services {
        let mut services = self.clone();
        services.tools = self.declared.view(&self.tools, &tenant.0, declared);
        let llm = &self.llm;
        services.functions = (self.functions).with_declared(functions, |a| llm.has_alias(a));
        services
    }

    /// The LLM functions `tenant` has declared now, read from the store, each with the
    /// version it is at.
    pub async fn declared_functions(
        &self,
        tenant: &Tenant,
    ) -> Result<Vec<(FunctionSpec, Pin)>, crate::store::Error> {
        if let Some(functions) = self
            .bodies
            .overlay
            .as_ref()
            .and_then(|o| o.functions.as_ref())
        {
            return Ok(functions
                .iter()
                .map(|f| (f.clone(), unstored_function(f)))
                .collect());
        }
        let registry = crate::store::Registry::Functions;
        let records = self.store().list_entries(registry, tenant).await?;
        Ok(records
            .into_iter()
            .filter_map(|r| {
                let pin = crate::agents::pin(DefinitionKind::Function, &r);
                match serde_json::from_value::<FunctionSpec>(r.definition) {
                    Ok(spec) => Some((spec, pin)),
                    Err(e) => {
                        tracing::warn!(function = %r.name, error = %e, "skipping a stored function");
                        None
                    }
                }
            })
            .collect())
    }

    /// The tools `tenant` has declared now, read from the store (so every replica sees the
    /// same): its worker tools, and its HTTP tools unless `tools.http_api` is off.
    pub async fn declared_tools(
        &self,
        tenant: &Tenant,
    ) -> Result<Vec<DeclaredTool>, crate::store::Error> {
        let records = self.declared_records(tenant).await?;
        let http = self.declared.enabled();
        Ok((records.into_iter().filter_map(declared_spec))
            .filter(|t| http || matches!(t, DeclaredTool::Worker(_)))
            .collect())
    }

    /// [`Self::declared_tools`], each with the version it is at (its digest computed only
    /// here, for the runs that record it).
    pub async fn declared_tools_pinned(
        &self,
        tenant: &Tenant,
    ) -> Result<Vec<(DeclaredTool, Pin)>, crate::store::Error> {
        if let Some(tools) = self.bodies.overlay.as_ref().and_then(|o| o.tools.as_ref()) {
            return Ok(tools.iter().map(|t| (t.clone(), unstored(t))).collect());
        }
        let records = self.declared_records(tenant).await?;
        Ok(records
            .into_iter()
            .filter_map(|r| {
                let pin = crate::agents::pin(DefinitionKind::Tool, &r);
                declared_spec(r).map(|spec| (spec, pin))
            })
            .filter(|(t, _)| self.declared.enabled() || matches!(t, DeclaredTool::Worker(_)))
            .collect())
    }

    async fn declared_records(
        &self,
        tenant: &Tenant,
    ) -> Result<Vec<crate::store::RegistryRecord>, crate::store::Error> {
        let registry = crate::store::Registry::HttpTools;
        self.store().list_entries(registry, tenant).await
    }

    /// The store, for the few reads an executor makes (checkpoints, attempts, session history).
    pub fn store(&self) -> &Store {
        &self.store
    }
}

/// The pin of a bundle's tool, not stored yet (version 0): only checked, never run.
fn unstored(tool: &DeclaredTool) -> Pin {
    Pin {
        kind: DefinitionKind::Tool,
        name: tool.name().to_owned(),
        version: 0,
        digest: crate::domain::definition::digest(&serde_json::to_value(tool).unwrap_or_default()),
        shared: false,
    }
}

/// The pin of a bundle's function, not stored yet (version 0): only checked, never run.
fn unstored_function(function: &FunctionSpec) -> Pin {
    Pin {
        kind: DefinitionKind::Function,
        name: function.name.clone(),
        version: 0,
        digest: crate::domain::definition::digest(
            &serde_json::to_value(function).unwrap_or_default(),
        ),
        shared: false,
    }
}

/// A stored declared tool's declaration; one that no longer reads as one is skipped, with a
/// warning.
fn declared_spec(record: crate::store::RegistryRecord) -> Option<DeclaredTool> {
    match serde_json::from_value::<DeclaredTool>(record.definition) {
        Ok(spec) => Some(spec),
        Err(e) => {
            tracing::warn!(tool = %record.name, error = %e, "skipping a stored declared tool");
            None
        }
    }
}

/// Where a run context starts from: a new run, or a stored one being resumed.
pub struct RunSeed {
    pub run: Run,
    pub tenant: Tenant,
    pub spec: RunSpec,
    /// The plan validated when the run was created. `None` for runs without a plan and after
    /// a restart, when the executor validates the stored plan document again.
    pub plan: Option<Arc<ValidPlan>>,
    pub limits: EffectiveLimits,
    /// What the run had used of its limits before (zero for a new run).
    pub counters: Counters,
    /// The last seq already in the run's event log (0 for a new run).
    pub last_seq: u64,
    /// Whether the run is to pause: as stored with it, and set by the engine when the API
    /// (or another replica) says so.
    pub pause: Arc<tokio::sync::watch::Sender<bool>>,
    /// The breakpoint places a resume let the run past, as stored with its row.
    pub released: Vec<crate::domain::StepPath>,
}

pub struct RunContext {
    pub run_id: RunId,
    pub tenant: Tenant,
    pub spec: RunSpec,
    pub plan: Option<Arc<ValidPlan>>,
    pub limits: EffectiveLimits,
    pub cancel: CancellationToken,
    /// Fires when the run must be left as it is: the server stops, or another replica took
    /// it over. The run task watches it; the lease gate never opens once it fired.
    pub stop: CancellationToken,
    pub services: Services,
    /// The run's time limit, paused while it waits for a human.
    pub clock: RunClock,
    /// The run was started before (its log already holds events): executors continue from
    /// their last checkpoint instead of starting over.
    pub resumed: bool,
    /// The run row as the task knows it. A std mutex: short updates, never across an await.
    run: Mutex<Run>,
    seq: AtomicU64,
    /// Held while an event is stamped and queued, so the run's events are queued in seq
    /// order ([`EventHub::append_stamped`]).
    pub(in crate::engine) emit_order: Mutex<()>,
    /// The id of the run's last checkpoint (see [`super::checkpoint`]).
    pub(super) checkpoints: AtomicU64,
    steps_started: AtomicU64,
    retries_used: AtomicU64,
    /// The first run limit the run went past: it ends the run, whichever step hit it.
    /// A std mutex: set once, read in short sections.
    breach: Mutex<Option<RunError>>,
    /// The run's running slot while it has one; given back while it waits for a human or is
    /// paused.
    pub(super) slot: RunningSlot,
    /// Whether the run is to pause, and where it stands (see [`super::pause`]).
    pub(super) pause: super::pause::PauseState,
    /// Usage so far. A std mutex: updated in short sections, never across an await.
    usage: Mutex<Usage>,
    /// Attempts started and not yet ended, closed as cancelled/failed if the run ends first.
    /// A std mutex: inserts, removals and copies only.
    pub(super) open_attempts: Mutex<HashMap<AttemptKey, OpenAttempt>>,
    /// The session's variables the run's plans read, each read once (see [`super::session`]).
    /// A std mutex: lookups and merges only, the store read happens outside it.
    pub(super) session: Mutex<super::session_cache::SessionCache>,
    /// The last attempt number given, by step key (`path/id`). A std mutex: lookups only.
    pub(super) attempt_numbers: Mutex<HashMap<StepPath, u32>>,
    /// The buffered sinks of the run's steps (see [`super::sink`]).
    pub(super) held: super::sink::HeldSinks,
    /// How often each (tool, canonical arguments, result) came back, for loop detection.
    /// A std mutex: short updates only.
    tool_repeats: Mutex<HashMap<u64, u32>>,
    /// What agents' middleware remembers during the run (response cache, rate windows).
    pub middleware: super::middleware_state::RunState,
    /// The run's trace span while it executes (see [`crate::telemetry`]).
    pub(in crate::engine) trace: Mutex<Option<opentelemetry::Context>>,
    /// The plans and attempts the run queued, for its own reads (see [`super::ledger`]).
    /// A std mutex: folds and copies only.
    pub(super) ledger: Mutex<super::ledger::Ledger>,
}

/// An attempt under way: its record as stored at the start, and when it started.
#[derive(Clone)]
pub(super) struct OpenAttempt {
    pub record: StepAttempt,
    pub started: std::time::Instant,
    /// The attempt's trace span, if traces are on.
    pub trace: Option<opentelemetry::Context>,
}

/// A run's place among the `max_running_runs`: held while it runs, given back while it waits
/// for a human, taken again (waiting for one to free) when the answer comes.
#[derive(Default)]
pub(super) struct RunningSlot {
    /// The slots, the one held, and the run's tenant and priority among them. A std mutex:
    /// swapped in short sections, never held across an await.
    held: Mutex<Option<HeldSlot>>,
}

type HeldSlot = (
    Arc<super::slots::Slots>,
    Option<super::slots::Slot>,
    Tenant,
    i64,
);

impl RunningSlot {
    /// Gives the slot back (a no-op for a context that holds none).
    pub(super) fn lend(&self) {
        if let Some((_, permit, _, _)) = self.held.lock().expect("slot lock").as_mut() {
            permit.take();
        }
    }

    /// Takes a slot again after [`Self::lend`].
    pub(super) async fn take_back(&self) {
        let (slots, tenant, priority) = match self.held.lock().expect("slot lock").as_ref() {
            Some((slots, None, tenant, priority)) => (slots.clone(), tenant.clone(), *priority),
            _ => return,
        };
        // Closed only when the engine is gone; the run is ending then anyway.
        let Some(permit) = slots.acquire(&tenant, priority).await else {
            return;
        };
        if let Some((_, held, _, _)) = self.held.lock().expect("slot lock").as_mut() {
            *held = Some(permit);
        }
    }
}

impl RunContext {
    /// Whether the run starts from stored checkpoints: it was resumed, or it is a fork (which
    /// starts from its parent's).
    pub fn restores(&self) -> bool {
        self.resumed || self.spec.fork.is_some()
    }

    /// The run holds `permit`, one of `slots`, until it ends (or lends it while it waits, and
    /// takes one again at the run's priority).
    pub fn hold_slot(&self, slots: Arc<super::slots::Slots>, permit: super::slots::Slot) {
        let held = (
            slots,
            Some(permit),
            self.tenant.clone(),
            self.spec.request.priority,
        );
        *self.slot.held.lock().expect("slot lock") = Some(held);
    }

    pub fn new(
        seed: RunSeed,
        cancel: CancellationToken,
        stop: CancellationToken,
        services: Services,
    ) -> Self {
        // The run's ledger holds its whole history unless it has a past: it was resumed, or
        // it is a fork, whose history starts with what it carried from its parent.
        let ledger = if seed.last_seq == 0 && seed.spec.fork.is_none() {
            super::ledger::Ledger::whole()
        } else {
            super::ledger::Ledger::partial()
        };
        RunContext {
            run_id: seed.run.id,
            tenant: seed.tenant,
            spec: seed.spec,
            plan: seed.plan,
            clock: RunClock::start(
                std::time::Duration::from_millis(seed.limits.max_duration_ms),
                std::time::Duration::from_millis(seed.counters.time_used_ms),
            ),
            resumed: seed.last_seq > 0,
            ledger: Mutex::new(ledger),
            limits: seed.limits,
            cancel,
            stop,
            services,
            seq: AtomicU64::new(seed.last_seq),
            emit_order: Mutex::new(()),
            checkpoints: AtomicU64::new(0),
            steps_started: AtomicU64::new(seed.counters.steps),
            retries_used: AtomicU64::new(seed.counters.retries),
            breach: Mutex::new(None),
            slot: RunningSlot::default(),
            pause: super::pause::PauseState::new(seed.pause, seed.released),
            usage: Mutex::new(seed.run.usage),
            run: Mutex::new(seed.run),
            open_attempts: Mutex::new(HashMap::new()),
            attempt_numbers: Mutex::new(HashMap::new()),
            held: Default::default(),
            tool_repeats: Mutex::new(HashMap::new()),
            middleware: Default::default(),
            session: Mutex::default(),
            trace: Mutex::new(None),
        }
    }

    /// Waits until this replica may act for the run: it surely still holds the run's lease
    /// ([`super::lease`]). Every step attempt, tool call and model call passes here first;
    /// for a run this replica lost, it never returns.
    pub async fn lease_ready(&self) {
        self.services.lease.ready(&self.stop).await;
    }

    /// Builds the next event of this run (taking the next seq) without queueing it, about
    /// the step at `step` (the event carries its id and, when nested, its `path`).
    pub fn next_event(&self, step: Option<&StepPath>, payload: Payload) -> Event {
        Event {
            seq: self.seq.fetch_add(1, Ordering::SeqCst) + 1,
            run_id: self.run_id,
            kind: payload.kind(),
            ts: crate::domain::now(),
            step_id: None,
            path: None,
            data: payload,
        }
        .at(step)
    }

    /// Stamps and queues an event (persisted, then broadcast).
    /// An event of a step first releases what is held for it and the steps enclosing it (see
    /// [`super::sink`]), so events go out in causal order.
    pub async fn emit(&self, step: Option<&StepPath>, payload: impl Into<Payload>) {
        if let Some(key) = step {
            let held = self.held.enclosing(key);
            if !held.is_empty() {
                // Boxed: every future that emits would otherwise carry this one's size.
                Box::pin(self.release_held(held)).await;
            }
        }
        self.emit_now(step, payload.into()).await;
    }

    /// Stamps and queues one event, releasing nothing.
    pub(super) async fn emit_now(&self, step: Option<&StepPath>, payload: Payload) {
        let hub = &self.services.hub;
        hub.append_stamped(&self.emit_order, || self.next_event(step, payload))
            .await;
    }

    /// Queues a history record other than an event, in order with the run's events.
    pub async fn record(&self, record: Record) {
        self.ledger.lock().expect("ledger lock").note(&record);
        self.services.hub.record(record).await;
    }

    /// Waits, before a call with `effects`, until every record queued so far (the call's
    /// attempt among them) is stored, wherever a stop could otherwise leave a side effect that
    /// no attempt records: before any call that reaches outside orca (a kill -9 right after it
    /// acted would lose an attempt still queued), and before every call on a store replicas
    /// share (a replica frozen past its lease, whose run another takes over, acts when it
    /// wakes). A lone replica's built-in tools write their attempts with the run's next batch:
    /// one killed mid-call simply runs again, as a new attempt, after the restart.
    pub async fn stored_before(&self, effects: crate::tools::Effects) {
        if effects == crate::tools::Effects::Outside || self.services.store().shared() {
            self.services.hub.flush().await;
        }
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

    /// Stores the run row as the task knows it.
    pub async fn save_run(&self) {
        self.record(Record::RunState(Box::new(self.run()))).await;
    }

    /// Moves the run to `status`: stores the row and emits a `status` event.
    pub async fn set_status(&self, status: RunStatus, message: Option<&str>) {
        self.set_status_selected(status, message, None).await;
    }

    /// [`Self::set_status`], announcing the run's orchestration choice with it.
    pub async fn set_status_selected(
        &self,
        status: RunStatus,
        message: Option<&str>,
        selected: Option<Selection>,
    ) {
        self.update_run(|r| r.status = status);
        self.save_run().await;
        let data = StatusData {
            status,
            message: message.map(str::to_owned),
            selected,
            progress: None,
        };
        self.emit(None, data).await;
    }

    /// Waits for a human answer to the step at `step`: emits `input_required`, moves the run
    /// to `waiting_input` (its clock paused), and back to `running` once answered. An answer
    /// stored before a restart is taken as it is, without asking again.
    pub async fn wait_for_input(
        &self,
        step: &StepPath,
        prompt: &str,
        schema: Option<&JsonSchema>,
    ) -> Result<Value, RunError> {
        let asked = InputRequiredData {
            step_id: step.leaf().to_owned(),
            prompt: prompt.to_owned(),
            schema: schema.map(|s| s.schema.clone()),
            kind: None,
            plan_version: None,
            plan: None,
        };
        self.wait_asking(step, asked, schema).await
    }

    /// [`Self::wait_for_input`] for a review of plan version `version`, the document `plan`
    /// (an `input_required` of kind `plan_review` that carries it).
    pub async fn wait_for_review(
        &self,
        step: &StepPath,
        prompt: &str,
        schema: &JsonSchema,
        version: u32,
        plan: &Value,
    ) -> Result<Value, RunError> {
        let asked = InputRequiredData {
            step_id: step.leaf().to_owned(),
            prompt: prompt.to_owned(),
            schema: Some(schema.schema.clone()),
            kind: Some("plan_review".to_owned()),
            plan_version: Some(version),
            plan: Some(plan.clone()),
        };
        self.wait_asking(step, asked, Some(schema)).await
    }

    async fn wait_asking(
        &self,
        step: &StepPath,
        asked: InputRequiredData,
        schema: Option<&JsonSchema>,
    ) -> Result<Value, RunError> {
        if self.resumed {
            let stored = self.services.store().answer_for(self.run_id, step).await;
            match stored {
                Ok(Some(answer)) => return Ok(answer),
                Ok(None) => {}
                Err(e) => {
                    return Err(RunError::new(
                        ErrorCode::StoreUnavailable,
                        format!("could not read the stored answer: {e}"),
                    ));
                }
            }
        }
        let rx = self.services.inputs.wait(self.run_id, step, schema);
        // Waiting for a person is not running: the slot goes back meanwhile, so waiting runs
        // never starve the others.
        self.slot.lend();
        // Under its key, so the event carries the step's `path` as its `step` events do: a
        // replica that takes the answer (`Engine::answer_elsewhere`) stores it under the key
        // the event names, which must be the key this wait is for.
        self.emit(Some(step), asked).await;
        self.set_status(RunStatus::WaitingInput, None).await;
        self.clock.pause();
        let answer = rx.await;
        self.clock.resume();
        self.services.inputs.forget(self.run_id);
        let value =
            answer.map_err(|_| RunError::new(ErrorCode::Cancelled, "the wait for input ended"))?;
        self.slot.take_back().await;
        self.set_status(RunStatus::Running, None).await;
        Ok(value)
    }

    /// Awaits `wait` without the run's running slot (lent meanwhile, as a wait for a person
    /// lends it; taken back, at the run's priority, after): for a wait on work done outside
    /// orca, such as a worker tool's task. The run's status stays `running`.
    pub async fn without_slot<T>(&self, wait: impl std::future::Future<Output = T>) -> T {
        self.slot.lend();
        let out = wait.await;
        self.slot.take_back().await;
        out
    }

    /// Ends a wait for input whose step was cut off (its future dropped before the answer
    /// came): the run is `running` again, its clock going and its slot taken back. A no-op
    /// when the run is not waiting.
    pub async fn stop_waiting_for_input(&self) {
        if self.run.lock().expect("run lock").status != RunStatus::WaitingInput {
            return;
        }
        self.services.inputs.forget(self.run_id);
        self.clock.resume();
        self.slot.take_back().await;
        self.set_status(RunStatus::Running, None).await;
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
            return Err(self.breached_by(RunError::new(
                ErrorCode::TokenLimitExceeded,
                format!(
                    "the run used {total} tokens, over its limit of {}",
                    self.limits.max_tokens
                ),
            )));
        }
        Ok(())
    }

    /// Records that the run went past a limit (the first one stays) and gives the error back.
    pub(super) fn breached_by(&self, error: RunError) -> RunError {
        self.breach
            .lock()
            .expect("breach lock")
            .get_or_insert(error)
            .clone()
    }

    /// The limit the run went past, if any: executors stop at once when there is one.
    pub fn breached(&self) -> Option<RunError> {
        self.breach.lock().expect("breach lock").clone()
    }

    /// What the run has used of its limits.
    pub fn counters(&self) -> Counters {
        Counters {
            steps: self.steps_started.load(Ordering::SeqCst),
            retries: self.retries_used.load(Ordering::SeqCst),
            time_used_ms: self.clock.used().as_millis() as u64,
        }
    }

    /// Queues the run's usage and counters for the store, so a resumed run counts on.
    pub async fn save_counters(&self) {
        self.record(Record::Counters {
            run: self.run_id,
            usage: self.usage(),
            counters: self.counters(),
        })
        .await;
    }

    /// Takes one retry from the run's budget (`max_retries`); false when it is spent.
    pub fn take_retry(&self) -> bool {
        self.retries_used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.limits.max_retries).then_some(n + 1)
            })
            .is_ok()
    }

    /// Takes back `n` counted step attempts (attempts a stop interrupted, which run again).
    pub(super) fn give_back_steps(&self, n: u64) {
        let _ = self
            .steps_started
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |m| {
                Some(m.saturating_sub(n))
            });
    }

    /// Counts one step attempt against `max_steps`; an error once the limit is passed.
    pub(super) fn take_step(&self) -> Result<(), RunError> {
        let taken = self
            .steps_started
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.limits.max_steps).then_some(n + 1)
            })
            .is_ok();
        if taken {
            return Ok(());
        }
        Err(self.breached_by(RunError::new(
            ErrorCode::StepLimitExceeded,
            format!(
                "the run reached its limit of {} steps",
                self.limits.max_steps
            ),
        )))
    }

    /// Loop detection over what a model chose (every orchestration but `fixed`, whose tool
    /// calls a workflow author wrote): the same tool, with the same arguments (canonical JSON:
    /// key order does not matter), giving the same result `engine.loop_repeats` times ends the
    /// run with `loop_detected`, which this returns (and records as the run's breach).
    pub fn note_tool_result(
        &self,
        tool: &str,
        arguments: &Value,
        result: &Result<Value, RunError>,
    ) -> Option<RunError> {
        use std::hash::{Hash, Hasher};
        let orchestration = self.run.lock().expect("run lock").orchestration;
        if orchestration == crate::domain::Orchestration::Fixed {
            return None;
        }
        let shown = match result {
            Ok(output) => output.to_string(),
            Err(e) => format!("error {}: {}", e.code, e.message),
        };
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (tool, arguments.to_string(), &shown).hash(&mut hasher);
        let times = {
            let mut repeats = self.tool_repeats.lock().expect("repeats lock");
            let n = repeats.entry(hasher.finish()).or_insert(0);
            *n += 1;
            *n
        };
        if times < self.services.config.loop_repeats {
            return None;
        }
        let args = crate::schema::truncate_to(arguments.to_string(), 200);
        Some(self.breached_by(RunError::new(
            ErrorCode::LoopDetected,
            format!("`{tool}` was called {times} times with the same arguments {args} and gave the same result"),
        )))
    }

    pub fn count_llm_call(&self) {
        self.usage.lock().expect("usage lock").llm_calls += 1;
    }

    pub fn count_tool_call(&self) {
        self.usage.lock().expect("usage lock").tool_calls += 1;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::Orchestration;
    use crate::domain::event::TextData;

    fn token(text: String) -> Payload {
        Payload::Token(TextData { text })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn events_emitted_by_many_tasks_at_once_go_out_with_seq_1_to_n_in_order() {
        let ctx = Arc::new(RunContext::for_test().build().await);
        let mut live = ctx.services.hub.subscribe(ctx.run_id);
        let (tasks, each) = (8, 40);
        let mut spawned = tokio::task::JoinSet::new();
        for t in 0..tasks {
            let ctx = Arc::clone(&ctx);
            spawned.spawn(async move {
                for i in 0..each {
                    ctx.emit(None, token(format!("{t}.{i}"))).await;
                }
            });
        }
        spawned.join_all().await;
        ctx.services.hub.flush().await;
        let n = (tasks * each) as u64;
        let mut seen = Vec::new();
        while let Ok(event) = live.try_recv() {
            seen.push(event.seq);
        }
        assert_eq!(seen, (1..=n).collect::<Vec<_>>(), "broadcast order");
        let stored = ctx.services.store().events_after(ctx.run_id, 0, 1000);
        let stored: Vec<u64> = stored.await.unwrap().iter().map(|e| e.seq).collect();
        assert_eq!(stored, (1..=n).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_step_past_max_steps_is_refused_as_the_runs_breach_and_given_back_steps_count_again()
    {
        let ctx = RunContext::for_test()
            .limits(json!({"max_steps": 2}))
            .build()
            .await;
        ctx.take_step().unwrap();
        ctx.take_step().unwrap();
        let refused = ctx.take_step().unwrap_err();
        assert_eq!(refused.code, ErrorCode::StepLimitExceeded);
        assert_eq!(ctx.breached().unwrap().code, refused.code);
        assert_eq!(ctx.counters().steps, 2, "a refused step is not counted");
        ctx.give_back_steps(1);
        assert_eq!(ctx.counters().steps, 1);
        ctx.take_step().unwrap();
        assert!(ctx.take_step().is_err());
    }

    #[tokio::test]
    async fn tokens_past_max_tokens_breach_and_the_first_breach_stays() {
        let ctx = RunContext::for_test()
            .limits(json!({"max_tokens": 100, "max_steps": 0}))
            .build()
            .await;
        ctx.add_llm_usage(40, 60).unwrap();
        assert!(ctx.breached().is_none(), "exactly the limit is within it");
        let over = ctx.add_llm_usage(1, 0).unwrap_err();
        assert_eq!(over.code, ErrorCode::TokenLimitExceeded);
        assert_eq!(ctx.usage().prompt_tokens, 41, "the call is counted");
        let _ = ctx.take_step().unwrap_err();
        assert_eq!(
            ctx.breached().unwrap(),
            over,
            "the first limit passed ends the run"
        );
    }

    #[tokio::test]
    async fn retries_come_from_one_budget_per_run() {
        let ctx = RunContext::for_test()
            .limits(json!({"max_retries": 2}))
            .build()
            .await;
        assert!(ctx.take_retry() && ctx.take_retry());
        assert!(!ctx.take_retry());
        assert_eq!(ctx.counters().retries, 2);
    }

    #[tokio::test]
    async fn the_same_call_giving_the_same_result_loop_repeats_times_is_a_loop_unless_fixed() {
        let ctx = RunContext::for_test()
            .config(|c| c.engine.loop_repeats = 3)
            .build()
            .await;
        let result = Ok(json!({"result": 2}));
        for _ in 0..5 {
            let args = json!({"a": 1, "b": 2});
            assert!(ctx.note_tool_result("t", &args, &result).is_none(), "fixed");
        }
        ctx.update_run(|r| r.orchestration = Orchestration::Simple);
        let (ab, ba) = (json!({"a": 1, "b": 2}), json!({"b": 2, "a": 1}));
        assert!(ctx.note_tool_result("t", &ab, &result).is_none());
        assert!(ctx.note_tool_result("t", &ab, &Ok(json!(3))).is_none());
        assert!(ctx.note_tool_result("t", &ba, &result).is_none());
        let looped = ctx.note_tool_result("t", &ab, &result).unwrap();
        assert_eq!(looped.code, ErrorCode::LoopDetected);
        assert_eq!(ctx.breached().unwrap().code, looped.code);
    }

    #[tokio::test]
    async fn an_answer_given_to_the_input_box_reaches_the_waiting_step() {
        let ctx = RunContext::for_test().build().await;
        let step = StepPath::top("ask");
        let answered = async {
            while ctx.services.inputs.waiting_on(ctx.run_id).is_none() {
                tokio::task::yield_now().await;
            }
            assert_eq!(ctx.run().status, RunStatus::WaitingInput);
            let waiting = ctx.services.inputs.take(ctx.run_id, "ask", &json!("yes"));
            waiting.unwrap().deliver(json!("yes"));
        };
        let (answer, ()) = tokio::join!(ctx.wait_for_input(&step, "ok?", None), answered);
        assert_eq!(answer.unwrap(), json!("yes"));
        assert_eq!(ctx.run().status, RunStatus::Running);
        assert!(ctx.services.inputs.waiting_on(ctx.run_id).is_none());
    }
}
