//! The plan scheduler: runs a validated plan's DAG of steps and reports each step's result as
//! it is committed.
//!
//! Scheduling: every step whose dependencies are done starts at once, in plan order, up to
//! `max_parallel_steps`. Steps run concurrently inside the run's task (they are IO-bound:
//! models, tools, timers). Results are *committed* in start order: a step's events, its
//! checkpoint, the end of its last attempt and its result (for later steps to see) come out
//! only after every step started before it was committed. Start decisions depend only on
//! committed results, so for a deterministic plan the run's event sequence is deterministic,
//! however the steps' timings interleave. Only model text (`token`/`json_partial`) and
//! human-input requests go out live.
//!
//! Every top-level step is in exactly one [`Phase`]. [`Scheduler::next`] drives the plan until
//! the next step commits and reports it, so a caller (a re-planner) can act after any step;
//! [`Scheduler::finish`] turns what was committed into the run's [`Outcome`].
//!
//! Failures: a failed step stops the run (`stop_on_first_failure`, the default) or only skips
//! its dependents. A stopping failure does not wait its turn in the commit order: the steps
//! already finished are committed and the ones in flight are abandoned (closed as cancelled).
//! Branches skip the steps of the arm not taken; a step whose dependencies were all skipped is
//! skipped too. A checkpoint follows every committed step, and every child that finishes
//! inside a step still running ([`progress`]); on resume, steps and children the checkpoints
//! hold as done are not run again.

mod frame;
mod kinds;
mod progress;
mod retries;
mod session_writes;
mod team;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::{Map, Value};
use tokio::sync::{Notify, Semaphore};

use crate::domain::event::{ErrorData, StepData};
use crate::domain::path::ROOT;
use crate::domain::{ErrorCode, RunError, StepId, StepPath, StepStatus};
use crate::plan::{KindSpec, Scope, SessionReads, StepResults, StepState, StepView, ValidPlan};

use super::runtime::attempts::{AttemptEnd, HeldEnd};
use super::runtime::checkpoint::{self, Delta, PlanDelta, PlanProgress, StepResult};
use super::runtime::completion::{self, Facts};
use super::runtime::context::RunContext;
use super::runtime::outcome::Outcome;
use super::runtime::sink::EventSink;
use super::session::store_variables;
use frame::{Frame, Locals};
use progress::Children;
use retries::settle;

/// One committed step, as [`Scheduler::next`] reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub step_id: StepId,
    /// `completed`, `failed` or `skipped`.
    pub status: StepStatus,
    pub output: Option<Value>,
    pub error: Option<RunError>,
}

/// What [`Scheduler::next_or_woken`] came back with.
#[derive(Debug)]
pub enum Next {
    Report(Report),
    /// The wake-up came first; the scheduler stands as it was and may go on.
    Woken,
    /// Nothing more can run.
    Done,
}

/// Where one top-level step is.
enum Phase {
    /// Not started. `not_taken`: a branch decided against it; it is skipped when its turn comes.
    Waiting {
        not_taken: bool,
    },
    /// Started; its task is in flight.
    Running,
    /// Its task ended; it waits for the steps started before it to commit.
    Finished(Box<Finished>),
    /// Its result is announced, checkpointed and visible to later steps.
    Committed(Result<Value, RunError>),
    Skipped,
}

/// What a step's task hands back: its result, the events it held, and its last attempt, to
/// close once the result is checkpointed (`None` when the step could not go on at all; its
/// attempt is then closed with the run).
struct Finished {
    result: Result<Value, RunError>,
    events: EventSink,
    last: Option<HeldEnd>,
}

pub struct Scheduler<'a> {
    ctx: &'a RunContext,
    plan: Arc<ValidPlan>,
    version: u32,
    vars: Arc<Map<String, Value>>,
    /// What steps read as `input`: the run input.
    input: Arc<Value>,
    slots: Arc<Semaphore>,
    children: Arc<Children>,
    phases: Vec<Phase>,
    /// Steps started and not yet committed, in start order.
    in_flight: VecDeque<usize>,
    tasks: FuturesUnordered<BoxFuture<'a, (usize, Finished)>>,
    /// Committed steps not yet reported.
    reports: VecDeque<Report>,
    /// The failure that stops the run (`stop_on_first_failure`).
    stop: Option<RunError>,
    /// The plan's answer step completed: nothing more starts, what is left is skipped.
    answered: bool,
    done: bool,
    /// The session variables the plan (and its nested workflows) names.
    session_reads: SessionReads,
}

impl<'a> Scheduler<'a> {
    /// A scheduler for `plan` (as version `version`), from where its checkpoints left it.
    pub fn new(
        ctx: &'a RunContext,
        plan: Arc<ValidPlan>,
        version: u32,
        progress: PlanProgress,
    ) -> Self {
        let vars = if progress.variables.is_empty() {
            plan.plan().context.clone()
        } else {
            progress.variables
        };
        let slots = Arc::new(Semaphore::new(max_parallel(&plan)));
        ctx.arm_breakpoints(&plan.plan().settings.breakpoints, &progress.released);
        let mut scheduler = Scheduler {
            ctx,
            session_reads: plan.session_reads(),
            phases: restored_phases(&plan, progress.steps),
            plan,
            version,
            vars: Arc::new(vars),
            input: Arc::new(ctx.spec.request.input.clone()),
            slots,
            children: Arc::new(Children::new(version, progress.children)),
            in_flight: VecDeque::new(),
            tasks: FuturesUnordered::new(),
            reports: VecDeque::new(),
            stop: None,
            answered: false,
            done: false,
        };
        // Branch decisions made before a restart still apply; a failure that stopped the run
        // before it still stops it.
        for i in 0..scheduler.phases.len() {
            if let Phase::Committed(Ok(output)) = &scheduler.phases[i] {
                let output = output.clone();
                scheduler.mark_not_taken(i, &output);
            }
        }
        scheduler.answered = scheduler
            .answer_position()
            .is_some_and(|i| matches!(scheduler.phases[i], Phase::Committed(Ok(_))));
        if scheduler.stops_on_failure() {
            scheduler.stop = scheduler.phases.iter().find_map(|p| match p {
                Phase::Committed(Err(e)) => Some(e.clone()),
                _ => None,
            });
        }
        scheduler
    }

    /// Drives the plan until the next step commits, and reports it; `None` once nothing more
    /// can run.
    pub async fn next(&mut self) -> Option<Report> {
        match self.advance(None).await {
            Next::Report(report) => Some(report),
            Next::Woken | Next::Done => None,
        }
    }

    /// [`Self::next`], or [`Next::Woken`] as soon as `wake` is notified while steps run (a
    /// re-plan the user asked for does not wait for the slowest step).
    pub async fn next_or_woken(&mut self, wake: &Notify) -> Next {
        self.advance(Some(wake)).await
    }

    async fn advance(&mut self, wake: Option<&Notify>) -> Next {
        loop {
            if let Some(report) = self.reports.pop_front() {
                return Next::Report(report);
            }
            if self.done {
                return Next::Done;
            }
            if self.answered {
                self.wrap_up_answered().await;
                self.done = true;
                continue;
            }
            if let Some(limit) = self.ctx.breached() {
                // Past a run limit nothing more starts, whatever the failure policy.
                self.stop.get_or_insert(limit);
            }
            // The session variables this plan names, read before its first step renders.
            self.ctx.read_session(&self.session_reads).await;
            self.start_ready().await;
            if !self.reports.is_empty() {
                continue;
            }
            if self.in_flight.is_empty() || self.stop.is_some() {
                self.done = true;
                continue;
            }
            let finished = match wake {
                None => self.tasks.next().await,
                Some(wake) => tokio::select! {
                    finished = self.tasks.next() => finished,
                    () = wake.notified() => return Next::Woken,
                },
            };
            match finished {
                Some((i, finished)) => self.on_finished(i, finished).await,
                None => self.done = true,
            }
        }
    }

    /// Runs the plan to its end.
    pub async fn run(mut self) -> Outcome {
        while self.next().await.is_some() {}
        self.finish().await
    }

    /// The run's outcome from what was committed. Steps still in flight are abandoned and
    /// their attempts closed as cancelled.
    pub async fn finish(mut self) -> Outcome {
        self.tasks = FuturesUnordered::new();
        self.ctx.read_session(&self.session_reads).await;
        if let Some(err) = self.stop.take() {
            self.ctx
                .close_open_attempts(
                    StepStatus::Cancelled,
                    &RunError::new(
                        ErrorCode::Cancelled,
                        "the run stopped before this step ended",
                    ),
                )
                .await;
            return completion::judge(Facts {
                stopped: Some(err),
                answered: false,
                output: Ok(Value::Null),
                failed: Vec::new(),
                completed: self.completed_outputs(),
            });
        }
        let failed: Vec<(&StepId, &RunError)> = self
            .plan
            .specs()
            .iter()
            .zip(&self.phases)
            .filter_map(|(spec, phase)| match phase {
                Phase::Committed(Err(e)) => Some((&spec.id, e)),
                _ => None,
            })
            .collect();
        let ctx = self.ctx;
        let output = match self
            .output()
            .and_then(|out| Ok((out, self.session_values()?)))
        {
            Ok((out, values)) => store_variables(ctx, &values).await.map(|()| out),
            Err(e) => Err(e),
        };
        completion::judge(Facts {
            stopped: None,
            answered: self.answered,
            output,
            failed,
            completed: None,
        })
    }

    /// The outputs of the committed steps that completed, by id; `None` when none did.
    fn completed_outputs(&self) -> Option<Value> {
        let done: Map<String, Value> = self
            .plan
            .specs()
            .iter()
            .zip(&self.phases)
            .filter_map(|(spec, phase)| match phase {
                Phase::Committed(Ok(output)) => Some((spec.id.to_string(), output.clone())),
                _ => None,
            })
            .collect();
        (!done.is_empty()).then_some(Value::Object(done))
    }

    /// Where the plan's answer step is, if it names one.
    fn answer_position(&self) -> Option<usize> {
        let id = self.plan.plan().settings.answer_step.as_ref()?;
        self.plan.position(id.as_str())
    }

    fn stops_on_failure(&self) -> bool {
        self.plan.plan().settings.stop_on_first_failure
    }

    /// Starts (or skips) every step that can go, in plan order, until none can.
    async fn start_ready(&mut self) {
        if self.stop.is_some() {
            return;
        }
        let plan = self.plan.clone();
        // Higher priorities first; the plan's order among equals.
        let mut order: Vec<usize> = plan.order().to_vec();
        order.sort_by_key(|&i| std::cmp::Reverse(plan.specs()[i].priority));
        let mut progressed = true;
        while progressed {
            progressed = false;
            for &i in &order {
                let waiting = matches!(self.phases[i], Phase::Waiting { .. });
                if !waiting || self.in_flight.len() >= max_parallel(&plan) || !self.deps_done(i) {
                    continue;
                }
                progressed = true;
                match self.skip_reason(i) {
                    Some(reason) => self.skip(i, reason).await,
                    None if !self.may_start(i).await => return,
                    None => self.start(i).await,
                }
                if self.stop.is_some() {
                    return;
                }
            }
        }
    }

    /// Whether step `i` may start now. While a pause is wanted, or a breakpoint is on it, no
    /// step starts: the steps in flight finish first (false until they have), then the run
    /// waits here, paused, until it is resumed.
    async fn may_start(&mut self, i: usize) -> bool {
        let step = StepPath::top(self.plan.specs()[i].id.as_str());
        if !self.ctx.pause_holds(&step) {
            return true;
        }
        if !self.in_flight.is_empty() {
            return false;
        }
        if let Err(limit) = self.ctx.breakpoint(&step).await {
            // Past the tenant's paused runs: the run stops here, as at any run limit.
            self.stop.get_or_insert(limit);
            return false;
        }
        self.ctx.pause_gate(&step).await;
        true
    }

    fn deps_done(&self, i: usize) -> bool {
        self.plan
            .dependencies(i)
            .iter()
            .all(|&d| matches!(self.phases[d], Phase::Committed(_) | Phase::Skipped))
    }

    fn skip_reason(&self, i: usize) -> Option<&'static str> {
        let deps = self.plan.dependencies(i);
        if matches!(self.phases[i], Phase::Waiting { not_taken: true }) {
            Some("its branch was not taken")
        } else if deps
            .iter()
            .any(|&d| matches!(self.phases[d], Phase::Committed(Err(_))))
        {
            Some("a dependency failed")
        } else if !deps.is_empty()
            && deps
                .iter()
                .all(|&d| matches!(self.phases[d], Phase::Skipped))
        {
            Some("all its dependencies were skipped")
        } else {
            None
        }
    }

    async fn skip(&mut self, i: usize, reason: &str) {
        self.phases[i] = Phase::Skipped;
        let spec = &self.plan.specs()[i];
        let event = StepData::new(
            spec.id.as_str(),
            spec.display_name(),
            spec.step_kind(),
            StepStatus::Skipped,
            0,
        )
        .with_reason(reason);
        self.ctx
            .emit(Some(&StepPath::top(spec.id.as_str())), event)
            .await;
        let skipped = StepResult {
            status: StepStatus::Skipped,
            output: None,
            error: None,
        };
        self.checkpoint(i, skipped).await;
        self.reports.push_back(Report {
            step_id: self.plan.specs()[i].id.clone(),
            status: StepStatus::Skipped,
            output: None,
            error: None,
        });
    }

    /// Opens the step's first attempt (announced live: starts are decided in plan order) and
    /// sets its task going.
    async fn start(&mut self, i: usize) {
        let plan = self.plan.clone();
        let spec = &plan.specs()[i];
        let opened = retries::open(self.ctx, self.version, spec, &ROOT, &mut EventSink::Live).await;
        let key = match opened {
            Ok(key) => key,
            Err(limit) => {
                // A run limit: the run stops here, whatever its failure policy.
                self.stop.get_or_insert(limit);
                return;
            }
        };
        let frame = Frame {
            ctx: self.ctx,
            plan_version: self.version,
            input: self.input.clone(),
            team: plan.team().clone(),
            snapshot: self.ancestors_results(i),
            vars: self.vars.clone(),
            session: self.ctx.session_vars(),
            default_retry: plan.plan().settings.default_retry_policy.clone(),
            slots: self.slots.clone(),
            children: self.children.clone(),
        };
        self.phases[i] = Phase::Running;
        self.in_flight.push_back(i);
        self.tasks.push(Box::pin(async move {
            let spec = &plan.specs()[i];
            let mut events = EventSink::buffered(frame.ctx, &StepPath::top(spec.id.as_str()));
            let settled = settle(&frame, spec, Locals::default(), Some(key), &mut events).await;
            let (result, last) = match settled {
                Ok(s) => (s.result, Some(s.last)),
                Err(e) => (Err(e), None),
            };
            (
                i,
                Finished {
                    result,
                    events,
                    last,
                },
            )
        }));
    }

    /// A step's task ended: commits every step that may now commit. A failure that stops the
    /// run is not held back behind slower steps started before it: every step already
    /// finished is committed (still in start order) and the rest are abandoned.
    async fn on_finished(&mut self, i: usize, finished: Finished) {
        // A stopping failure, or the answer, is not held back behind slower steps started
        // before it: every finished step commits now, in start order.
        let is_answer = self.answer_position() == Some(i);
        let flush = match &finished.result {
            Err(_) => self.stops_on_failure(),
            Ok(_) => is_answer,
        };
        self.phases[i] = Phase::Finished(Box::new(finished));
        loop {
            let next = if flush {
                self.in_flight
                    .iter()
                    .position(|&j| matches!(self.phases[j], Phase::Finished(_)))
            } else {
                self.in_flight
                    .front()
                    .filter(|&&j| matches!(self.phases[j], Phase::Finished(_)))
                    .map(|_| 0)
            };
            let Some(j) = next.and_then(|pos| self.in_flight.remove(pos)) else {
                break;
            };
            self.commit(j).await;
        }
    }

    /// Announces a finished step (its held events, then, once its result is checkpointed,
    /// the end of its last attempt), makes it visible to later steps and reports it.
    async fn commit(&mut self, i: usize) {
        let Phase::Finished(finished) = std::mem::replace(&mut self.phases[i], Phase::Running)
        else {
            unreachable!("only finished steps are committed");
        };
        finished.events.release(self.ctx).await;
        self.checkpoint(i, StepResult::of(&finished.result)).await;
        // Only now: a completed attempt stored before its checkpoint would run again after a
        // kill or a takeover landing between the two.
        HeldEnd::close_all(finished.last, self.ctx, &mut EventSink::Live).await;
        let step_id = self.plan.specs()[i].id.clone();
        let report = match finished.result {
            Ok(output) => {
                self.mark_not_taken(i, &output);
                self.answered |= self.plan.plan().settings.answer_step.as_ref() == Some(&step_id);
                self.phases[i] = Phase::Committed(Ok(output.clone()));
                Report {
                    step_id,
                    status: StepStatus::Completed,
                    output: Some(output),
                    error: None,
                }
            }
            Err(error) => {
                self.phases[i] = Phase::Committed(Err(error.clone()));
                self.on_failure(&step_id, &error).await;
                Report {
                    step_id,
                    status: StepStatus::Failed,
                    output: None,
                    error: Some(error),
                }
            }
        };
        self.reports.push_back(report);
    }

    /// The answer step completed: steps already finished are committed, those still running
    /// are cancelled, and those that never started are skipped.
    async fn wrap_up_answered(&mut self) {
        let reason = "the answer step completed";
        self.cut_off(reason).await;
        for i in 0..self.phases.len() {
            if matches!(self.phases[i], Phase::Waiting { .. }) {
                self.skip(i, reason).await;
            }
        }
    }

    /// Stops the plan here for a new version (see [`crate::engine::reactive`]): steps already
    /// finished are committed, those still running are cancelled with `reason`. What the plan
    /// holds now is handed back: the results of its committed steps and its variables.
    pub async fn abandon(mut self, reason: &str) -> PlanProgress {
        self.cut_off(reason).await;
        let steps = self
            .plan
            .specs()
            .iter()
            .zip(&self.phases)
            .filter_map(|(spec, phase)| match phase {
                Phase::Committed(result) => Some((spec.id.to_string(), StepResult::of(result))),
                _ => None,
            })
            .collect();
        PlanProgress {
            plan_version: self.version,
            steps,
            children: Default::default(),
            variables: self.vars.as_ref().clone(),
            released: Vec::new(),
        }
    }

    /// Commits the steps that finished and cancels (with `reason`) those still running.
    async fn cut_off(&mut self, reason: &str) {
        while let Some(i) = self.in_flight.pop_front() {
            if matches!(self.phases[i], Phase::Finished(_)) {
                self.commit(i).await;
                continue;
            }
            let id = self.plan.specs()[i].id.clone();
            let end = AttemptEnd::closed(
                StepStatus::Cancelled,
                Some(RunError::new(ErrorCode::Cancelled, reason)),
            )
            .with_reason(reason);
            self.ctx
                .close_open_step(&StepPath::top(id.as_str()), end, &mut EventSink::Live)
                .await;
            self.phases[i] = Phase::Skipped;
            let cut_off = StepResult {
                status: StepStatus::Skipped,
                output: None,
                error: None,
            };
            self.checkpoint(i, cut_off).await;
            self.reports.push_back(Report {
                step_id: id,
                status: StepStatus::Cancelled,
                output: None,
                error: None,
            });
        }
        self.tasks = FuturesUnordered::new();
        // A step cut off while it waited for a person leaves the run waiting no more.
        self.ctx.stop_waiting_for_input().await;
    }

    /// The first failure under stop-on-first-failure stops the run; any other is announced
    /// as an `error` event and only its dependents are skipped.
    async fn on_failure(&mut self, step_id: &StepId, error: &RunError) {
        if self.stops_on_failure() && self.stop.is_none() {
            self.stop = Some(RunError::new(
                error.code.clone(),
                format!("step `{step_id}` failed: {}", error.message),
            ));
            return;
        }
        let told = ErrorData {
            error: error.clone(),
            step_id: Some(step_id.to_string()),
        };
        self.ctx
            .emit(Some(&StepPath::top(step_id.as_str())), told)
            .await;
    }

    /// After branch `i` committed with `output`: the steps of the arm it did not take.
    fn mark_not_taken(&mut self, i: usize, output: &Value) {
        let KindSpec::Branch {
            then, otherwise, ..
        } = &self.plan.specs()[i].kind
        else {
            return;
        };
        for id in kinds::arm_not_taken(output, then, otherwise) {
            if let Some(pos) = self.plan.position(id.as_str())
                && let Phase::Waiting { not_taken } = &mut self.phases[pos]
            {
                *not_taken = true;
            }
        }
    }

    /// Checkpoints the result step `i` committed with, in place of what its children left.
    async fn checkpoint(&mut self, i: usize, result: StepResult) {
        let id = self.plan.specs()[i].id.to_string();
        let mut delta = PlanDelta {
            plan_version: self.version,
            ..Default::default()
        };
        let key = StepPath::top(&id);
        if self.children.take_inside(&key) {
            delta.cleared.push(key);
        }
        delta.steps.insert(id, result);
        checkpoint::save(self.ctx, self.version, &Delta::Plan(delta)).await;
    }

    /// The results a step may reference: those of its transitive dependencies.
    fn ancestors_results(&self, i: usize) -> HashMap<String, StepState> {
        let mut out = HashMap::new();
        let mut stack: Vec<usize> = self.plan.dependencies(i).to_vec();
        let mut seen = HashSet::new();
        while let Some(d) = stack.pop() {
            if !seen.insert(d) {
                continue;
            }
            if let Some(state) = self.state_of(d) {
                out.insert(self.plan.specs()[d].id.to_string(), state);
            }
            stack.extend(self.plan.dependencies(d).iter().copied());
        }
        out
    }

    /// The committed result of step `i`, as templates see it.
    fn state_of(&self, i: usize) -> Option<StepState> {
        match &self.phases[i] {
            Phase::Committed(Ok(output)) => Some(StepState::completed(output.clone())),
            Phase::Committed(Err(_)) => Some(StepState::without_output(StepStatus::Failed)),
            Phase::Skipped => Some(StepState::skipped()),
            _ => None,
        }
    }

    /// The run's output: the plan's `output` template, else the answer step's output, else the
    /// outputs of the steps nothing depends on (one: its output; several: an object by id).
    fn output(&self) -> Result<Value, RunError> {
        if self.plan.output().is_none()
            && let Some(i) = self.answer_position()
            && let Phase::Committed(Ok(output)) = &self.phases[i]
        {
            return Ok(output.clone());
        }
        let committed = Committed {
            plan: &self.plan,
            phases: &self.phases,
        };
        if let Some(template) = self.plan.output() {
            let session = self.ctx.session_vars();
            let scope = Scope::new(&self.ctx.spec.request.input, &committed, &self.vars)
                .with_session(&session);
            let limit = self.ctx.services.config.max_rendered_bytes;
            return template.render(&scope, limit).map_err(|e| {
                let e = crate::plan::render_error(e);
                RunError::new(e.code, format!("output: {}", e.message))
            });
        }
        let mut outputs: Vec<(&str, Value)> = self
            .plan
            .leaves()
            .into_iter()
            .filter_map(|i| match &self.phases[i] {
                Phase::Committed(Ok(o)) => Some((self.plan.specs()[i].id.as_str(), o.clone())),
                _ => None,
            })
            .collect();
        Ok(match outputs.len() {
            0 => Value::Null,
            1 => outputs.pop().map(|(_, o)| o).unwrap_or(Value::Null),
            _ => Value::Object(
                outputs
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect(),
            ),
        })
    }
}

/// How many steps may be in flight at once (and how many leaf calls, children included).
fn max_parallel(plan: &ValidPlan) -> usize {
    plan.plan().settings.max_parallel_steps.max(1) as usize
}

/// The committed results of a scheduler, as the plan's output template sees them.
struct Committed<'s> {
    plan: &'s ValidPlan,
    phases: &'s [Phase],
}

impl StepResults for Committed<'_> {
    fn get(&self, id: &str) -> Option<StepView<'_>> {
        let i = self.plan.position(id)?;
        view(&self.phases[i])
    }

    fn each(&self, f: &mut dyn FnMut(&str, StepView<'_>)) {
        for (spec, phase) in self.plan.specs().iter().zip(self.phases) {
            if let Some(v) = view(phase) {
                f(spec.id.as_str(), v);
            }
        }
    }
}

fn view(phase: &Phase) -> Option<StepView<'_>> {
    let (status, output) = match phase {
        Phase::Committed(Ok(output)) => (StepStatus::Completed, Some(output)),
        Phase::Committed(Err(_)) => (StepStatus::Failed, None),
        Phase::Skipped => (StepStatus::Skipped, None),
        _ => return None,
    };
    Some(StepView { status, output })
}

/// Each step's phase as a checkpoint left it: finished steps are committed, the rest wait.
fn restored_phases(
    plan: &ValidPlan,
    mut steps: std::collections::BTreeMap<String, StepResult>,
) -> Vec<Phase> {
    plan.specs()
        .iter()
        .map(|spec| match steps.remove(spec.id.as_str()) {
            Some(StepResult {
                status: StepStatus::Completed,
                output,
                ..
            }) => Phase::Committed(Ok(output.unwrap_or(Value::Null))),
            Some(StepResult {
                status: StepStatus::Failed,
                error,
                ..
            }) => Phase::Committed(Err(error.unwrap_or_else(|| {
                RunError::new(ErrorCode::InternalError, "the step failed before a restart")
            }))),
            Some(StepResult {
                status: StepStatus::Skipped,
                ..
            }) => Phase::Skipped,
            _ => Phase::Waiting { not_taken: false },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn calc(id: &str, deps: &[&str], expression: &str) -> serde_json::Value {
        json!({"id": id, "kind": "tool", "depends_on": deps,
               "input": {"tool": "math.calculate", "arguments": {"expression": expression}}})
    }

    async fn reports(ctx: &RunContext, plan: serde_json::Value) -> (Vec<Report>, Outcome) {
        let plan = crate::plan::validate_plan(&plan, &ctx.services.tools).unwrap();
        let mut scheduler = Scheduler::new(ctx, Arc::new(plan), 1, PlanProgress::default());
        let mut seen = Vec::new();
        while let Some(report) = scheduler.next().await {
            seen.push(report);
        }
        (seen, scheduler.finish().await)
    }

    fn summary(reports: &[Report]) -> Vec<(String, StepStatus)> {
        reports
            .iter()
            .map(|r| (r.step_id.to_string(), r.status))
            .collect()
    }

    #[tokio::test]
    async fn every_committed_step_is_reported_in_commit_order() {
        let ctx = RunContext::for_test().build().await;
        let plan = json!({"steps": [
            calc("a", &[], "1 + 1"),
            {"id": "check", "kind": "branch", "depends_on": ["a"], "input": {
                "condition": "steps.a.output.result > 5", "then": ["big"], "else": ["small"]}},
            calc("big", &["check"], "2 * 2"),
            calc("small", &["check"], "3 * 3"),
        ]});
        let (seen, outcome) = reports(&ctx, plan).await;
        use StepStatus::*;
        let want = [
            ("a", Completed),
            ("check", Completed),
            ("big", Skipped),
            ("small", Completed),
        ];
        let want: Vec<(String, StepStatus)> =
            want.iter().map(|(id, s)| (id.to_string(), *s)).collect();
        assert_eq!(summary(&seen), want);
        assert_eq!(seen[0].output.as_ref().unwrap()["result"], 2);
        match outcome {
            Outcome::Success(out) => assert_eq!(out["result"], 9),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_failure_that_does_not_stop_the_run_is_reported_and_skips_its_dependents() {
        let ctx = RunContext::for_test().build().await;
        let plan = json!({"settings": {"stop_on_first_failure": false}, "steps": [
            calc("bad", &[], "1 / 0"),
            calc("after", &["bad"], "1"),
            calc("other", &[], "2"),
        ]});
        let (seen, outcome) = reports(&ctx, plan).await;
        let statuses = summary(&seen);
        assert!(
            statuses.contains(&("bad".into(), StepStatus::Failed)),
            "{statuses:?}"
        );
        assert!(
            statuses.contains(&("after".into(), StepStatus::Skipped)),
            "{statuses:?}"
        );
        assert!(
            statuses.contains(&("other".into(), StepStatus::Completed)),
            "{statuses:?}"
        );
        let failed = seen
            .iter()
            .find(|r| r.status == StepStatus::Failed)
            .unwrap();
        assert_eq!(failed.error.as_ref().unwrap().code, "math_error");
        match outcome {
            Outcome::Partial(out, err) => {
                assert_eq!(out["result"], 2);
                assert!(err.message.contains("`bad`"), "{err:?}");
            }
            other => panic!("{other:?}"),
        }
    }
}
