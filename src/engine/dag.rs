//! The plan engine: runs a validated plan's DAG of steps.
//!
//! Scheduling: every step whose dependencies are done starts at once, in plan order, up to
//! `max_parallel_steps`. Steps run concurrently inside the run's task (they are IO-bound:
//! models, tools, timers). Results are *committed* in start order: a step's completion is
//! announced, checkpointed and made visible to later steps only after every step started before
//! it was committed. Start decisions depend only on committed results, so for a deterministic
//! plan the run's event sequence is deterministic, however the steps' timings interleave.
//! (Model text — `token`/`json_partial` — streams live, so it interleaves between parallel
//! LLM steps.)
//!
//! Failures: a failed step stops the run (`stop_on_first_failure`, the default) or only skips
//! its dependents. A stopping failure does not wait its turn in the commit order: the steps
//! already finished are committed and the ones in flight are abandoned (closed as cancelled).
//! Branches skip the steps of the arm not taken; a step whose dependencies were all skipped is
//! skipped too. A checkpoint follows every completed step; on resume, steps the
//! checkpoint holds as done are not run again.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::{Map, Value, json};

use crate::domain::{EventKind, RunError, StepAttempt, StepStatus};
use crate::plan::ValidPlan;
use crate::plan::spec::{Aggregation, KindSpec, LoopOver, StepSpec, WaitSpec};
use crate::plan::template::{Scope, StepResults, StepState, StepView};
use crate::store::Record;

use super::Outcome;
use super::context::RunContext;
use super::steps::{self, LlmAsk, StepError, StepEvents};

/// What a checkpoint restores.
#[derive(Debug, Default, Clone)]
pub struct Restored {
    /// Results of steps that finished before the stop (completed, failed or skipped).
    pub results: HashMap<String, StepState>,
    pub errors: HashMap<String, RunError>,
    /// Highest attempt number stored per step, so numbering continues.
    pub attempts: HashMap<String, u32>,
    pub vars: Map<String, Value>,
    pub last_checkpoint: u64,
}

/// Step results seen through a child scope: the step's own locals first, then the snapshot.
struct Layered<'a> {
    local: &'a HashMap<String, StepState>,
    base: &'a HashMap<String, StepState>,
}

impl StepResults for Layered<'_> {
    fn get(&self, id: &str) -> Option<StepView<'_>> {
        self.local
            .get(id)
            .or_else(|| self.base.get(id))
            .map(StepState::view)
    }
    fn each(&self, f: &mut dyn FnMut(&str, StepView<'_>)) {
        for (id, s) in self
            .base
            .iter()
            .filter(|(k, _)| !self.local.contains_key(*k))
        {
            f(id, s.view());
        }
        for (id, s) in self.local {
            f(id, s.view());
        }
    }
}

/// What a child step sees besides the snapshot: its siblings' results, and the loop's
/// current item and index.
type Locals<'a> = (
    &'a HashMap<String, StepState>,
    Option<&'a Value>,
    Option<u64>,
);

/// What one top-level step task hands back to the scheduler.
struct Finished {
    idx: usize,
    result: Result<Value, StepError>,
    attempt: u32,
    duration: Duration,
    events: StepEvents,
}

/// Everything a step body may read; immutable while the step runs.
struct Frame<'a> {
    ctx: &'a RunContext,
    plan_version: u32,
    /// Results of the steps finished before this step started.
    snapshot: HashMap<String, StepState>,
    vars: &'a Map<String, Value>,
    default_retry: Option<&'a crate::domain::RetryPolicy>,
    /// Plan-wide slots for leaf work (model and tool calls), `max_parallel_steps` of them,
    /// shared by top-level steps and the children of parallel steps alike.
    slots: &'a tokio::sync::Semaphore,
}

pub async fn execute(
    ctx: &RunContext,
    plan: Arc<ValidPlan>,
    plan_version: u32,
    restored: Restored,
) -> Outcome {
    let n = plan.len();
    let settings = &plan.plan().settings;
    let max_parallel = settings.max_parallel_steps.max(1) as usize;
    let stop_on_failure = settings.stop_on_first_failure;
    let vars = if restored.vars.is_empty() {
        plan.plan().context.clone()
    } else {
        restored.vars.clone()
    };
    let index: HashMap<&str, usize> = plan
        .specs()
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();

    let mut results = restored.results.clone();
    let mut errors = restored.errors.clone();
    let mut started: Vec<bool> = (0..n)
        .map(|i| results.contains_key(plan.specs()[i].id.as_str()))
        .collect();
    let mut not_taken: HashSet<usize> = HashSet::new();
    // Branch decisions already made before a restart still apply.
    for spec in plan.specs() {
        if let KindSpec::Branch {
            then, otherwise, ..
        } = &spec.kind
            && let Some(out) = results.get(spec.id.as_str()).and_then(|s| s.output.clone())
        {
            let arm = if out["result"] == Value::Bool(true) {
                otherwise
            } else {
                then
            };
            not_taken.extend(arm.iter().filter_map(|id| index.get(id.as_str()).copied()));
        }
    }
    let mut checkpoint_id = restored.last_checkpoint;
    let mut first_failure: Option<RunError> =
        errors.values().next().cloned().filter(|_| stop_on_failure);
    let mut running: VecDeque<usize> = VecDeque::new();
    let mut done: HashMap<usize, Finished> = HashMap::new();
    let slots = tokio::sync::Semaphore::new(max_parallel);
    let mut tasks = FuturesUnordered::new();
    let default_retry = settings.default_retry_policy.as_ref();

    loop {
        // Start (or skip) every step that can go, in plan order.
        if first_failure.is_none() {
            let mut progressed = true;
            while progressed {
                progressed = false;
                for &i in plan.order() {
                    if started[i] || running.len() >= max_parallel {
                        continue;
                    }
                    let deps = plan.dependencies(i);
                    let deps_done = deps
                        .iter()
                        .all(|&d| results.contains_key(plan.specs()[d].id.as_str()));
                    if !deps_done {
                        continue;
                    }
                    let id = plan.specs()[i].id.as_str();
                    let status_of = |d: usize| results[plan.specs()[d].id.as_str()].status;
                    let skip_reason = if not_taken.contains(&i) {
                        Some("its branch was not taken")
                    } else if deps.iter().any(|&d| status_of(d) == StepStatus::Failed) {
                        Some("a dependency failed")
                    } else if !deps.is_empty()
                        && deps.iter().all(|&d| status_of(d) == StepStatus::Skipped)
                    {
                        Some("all its dependencies were skipped")
                    } else {
                        None
                    };
                    started[i] = true;
                    progressed = true;
                    if let Some(reason) = skip_reason {
                        results.insert(
                            id.to_owned(),
                            StepState {
                                status: StepStatus::Skipped,
                                output: None,
                            },
                        );
                        emit_step(
                            ctx,
                            &plan.specs()[i],
                            StepStatus::Skipped,
                            0,
                            None,
                            None,
                            None,
                            Some(reason),
                        )
                        .await;
                        continue;
                    }
                    let attempt = restored.attempts.get(id).copied().unwrap_or(0) + 1;
                    // Tracked from the moment it is announced, so that a run ending before
                    // the step's task first runs still closes it.
                    ctx.track_attempt(attempt_record(&plan.specs()[i], attempt, plan_version));
                    emit_step(
                        ctx,
                        &plan.specs()[i],
                        StepStatus::Running,
                        attempt,
                        None,
                        None,
                        None,
                        None,
                    )
                    .await;
                    let frame = Frame {
                        ctx,
                        plan_version,
                        snapshot: ancestors_results(&plan, i, &results),
                        vars: &vars,
                        default_retry,
                        slots: &slots,
                    };
                    let spec = &plan.specs()[i];
                    running.push_back(i);
                    tasks.push(async move {
                        let t0 = Instant::now();
                        let mut events = StepEvents::default();
                        let (result, attempt) =
                            run_with_retries(&frame, spec, None, attempt, true, &mut events).await;
                        Finished {
                            idx: i,
                            result,
                            attempt,
                            duration: t0.elapsed(),
                            events,
                        }
                    });
                }
            }
        }
        if running.is_empty() {
            break;
        }
        let Some(fin) = tasks.next().await else { break };
        let failed = fin.result.is_err();
        done.insert(fin.idx, fin);
        // Commit in start order. A failure that will stop the run is not held back behind
        // slower steps started before it: the run stops now, every step already finished is
        // committed (still in start order), and the ones still in flight are abandoned.
        let flush = failed && stop_on_failure;
        loop {
            let next = if flush {
                running.iter().position(|i| done.contains_key(i))
            } else {
                running.front().filter(|i| done.contains_key(i)).map(|_| 0)
            };
            let Some(front) = next.and_then(|pos| running.remove(pos)) else {
                break;
            };
            let fin = done.remove(&front).expect("finished steps are in `done`");
            let spec = &plan.specs()[front];
            for (step_id, kind, data) in fin.events.events {
                ctx.emit(kind, Some(&step_id), data).await;
            }
            let duration_ms = fin.duration.as_millis() as u64;
            match fin.result {
                Ok(output) => {
                    if let KindSpec::Branch {
                        then, otherwise, ..
                    } = &spec.kind
                    {
                        let arm = if output["result"] == Value::Bool(true) {
                            otherwise
                        } else {
                            then
                        };
                        not_taken
                            .extend(arm.iter().filter_map(|id| index.get(id.as_str()).copied()));
                    }
                    emit_step(
                        ctx,
                        spec,
                        StepStatus::Completed,
                        fin.attempt,
                        Some(&output),
                        None,
                        Some(duration_ms),
                        None,
                    )
                    .await;
                    results.insert(spec.id.to_string(), StepState::completed(output));
                    checkpoint_id += 1;
                    let state = checkpoint_state(plan_version, &results, &errors, &vars);
                    ctx.services
                        .hub
                        .record(Record::Checkpoint {
                            run: ctx.run_id,
                            id: checkpoint_id,
                            plan_version,
                            state,
                        })
                        .await;
                }
                Err(err) => {
                    let run_err = err.to_run_error();
                    emit_step(
                        ctx,
                        spec,
                        StepStatus::Failed,
                        fin.attempt,
                        None,
                        Some(&run_err),
                        Some(duration_ms),
                        None,
                    )
                    .await;
                    results.insert(
                        spec.id.to_string(),
                        StepState {
                            status: StepStatus::Failed,
                            output: None,
                        },
                    );
                    errors.insert(spec.id.to_string(), run_err.clone());
                    if stop_on_failure && first_failure.is_none() {
                        first_failure = Some(RunError::new(
                            run_err.code.clone(),
                            format!("step `{}` failed: {}", spec.id, run_err.message),
                        ));
                    } else {
                        ctx.emit(
                            EventKind::Error,
                            Some(spec.id.as_str()),
                            json!({ "code": run_err.code, "message": run_err.message, "step_id": spec.id }),
                        )
                        .await;
                    }
                }
            }
        }
        if first_failure.is_some() {
            // Stop on first failure: the steps still in flight are abandoned, not awaited.
            break;
        }
    }
    drop(tasks);

    if let Some(err) = first_failure {
        ctx.close_open_attempts(
            StepStatus::Cancelled,
            &RunError::new("cancelled", "the run stopped after a step failed"),
        )
        .await;
        return Outcome::Failed(err);
    }
    let output = plan_output(&plan, ctx, &results, &vars);
    match output {
        Err(e) => Outcome::Failed(e),
        Ok(output) if errors.is_empty() => Outcome::Success(output),
        Ok(output) => {
            let (id, e) = errors.iter().next().expect("non-empty");
            Outcome::Partial(
                output,
                RunError::new(
                    e.code.clone(),
                    format!(
                        "{} step(s) failed; first: `{id}`: {}",
                        errors.len(),
                        e.message
                    ),
                ),
            )
        }
    }
}

/// The results a step may reference: those of its transitive dependencies.
fn ancestors_results(
    plan: &ValidPlan,
    i: usize,
    results: &HashMap<String, StepState>,
) -> HashMap<String, StepState> {
    let mut out = HashMap::new();
    let mut stack: Vec<usize> = plan.dependencies(i).to_vec();
    let mut seen = HashSet::new();
    while let Some(d) = stack.pop() {
        if !seen.insert(d) {
            continue;
        }
        let id = plan.specs()[d].id.as_str();
        if let Some(s) = results.get(id) {
            out.insert(id.to_owned(), s.clone());
        }
        stack.extend(plan.dependencies(d).iter().copied());
    }
    out
}

fn checkpoint_state(
    plan_version: u32,
    results: &HashMap<String, StepState>,
    errors: &HashMap<String, RunError>,
    vars: &Map<String, Value>,
) -> Value {
    let mut steps = Map::new();
    for (id, s) in results {
        let mut v = json!({ "status": s.status });
        if let Some(o) = &s.output {
            v["output"] = o.clone();
        }
        if let Some(e) = errors.get(id) {
            v["error"] = serde_json::to_value(e).unwrap_or(Value::Null);
        }
        steps.insert(id.clone(), v);
    }
    json!({ "plan_version": plan_version, "steps": steps, "variables": vars })
}

/// Rebuilds [`Restored`] from a checkpoint's state.
pub fn restore(state: &Value, attempts: HashMap<String, u32>, last_checkpoint: u64) -> Restored {
    let mut r = Restored {
        attempts,
        last_checkpoint,
        ..Restored::default()
    };
    if let Some(steps) = state["steps"].as_object() {
        for (id, s) in steps {
            let status = s["status"]
                .as_str()
                .and_then(StepStatus::parse)
                .unwrap_or(StepStatus::Pending);
            if !matches!(
                status,
                StepStatus::Completed | StepStatus::Skipped | StepStatus::Failed
            ) {
                continue;
            }
            r.results.insert(
                id.clone(),
                StepState {
                    status,
                    output: s.get("output").cloned(),
                },
            );
            if let Ok(e) = serde_json::from_value::<RunError>(s["error"].clone()) {
                r.errors.insert(id.clone(), e);
            }
        }
    }
    if let Some(vars) = state["variables"].as_object() {
        r.vars = vars.clone();
    }
    r
}

/// The run's output: the plan's `output` template, or the outputs of the steps nothing
/// depends on (one: its output; several: an object by id).
fn plan_output(
    plan: &ValidPlan,
    ctx: &RunContext,
    results: &HashMap<String, StepState>,
    vars: &Map<String, Value>,
) -> Result<Value, RunError> {
    if let Some(template) = plan.output() {
        let scope = Scope::new(&ctx.spec.input, results, vars);
        return template
            .resolve(&scope)
            .map_err(|e| RunError::new("bad_reference", format!("output: {e}")));
    }
    let sinks: Vec<&StepSpec> = plan
        .specs()
        .iter()
        .enumerate()
        .filter(|(i, _)| plan.dependents(*i).is_empty())
        .map(|(_, s)| s)
        .collect();
    let outputs: Vec<(&str, Value)> = sinks
        .iter()
        .filter_map(|s| {
            results
                .get(s.id.as_str())
                .and_then(|r| r.output.clone())
                .map(|o| (s.id.as_str(), o))
        })
        .collect();
    Ok(match outputs.len() {
        0 => Value::Null,
        1 => outputs
            .into_iter()
            .next()
            .map(|(_, o)| o)
            .unwrap_or(Value::Null),
        _ => Value::Object(
            outputs
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
        ),
    })
}

#[allow(clippy::too_many_arguments)]
async fn emit_step(
    ctx: &RunContext,
    spec: &StepSpec,
    status: StepStatus,
    attempt: u32,
    output: Option<&Value>,
    error: Option<&RunError>,
    duration_ms: Option<u64>,
    reason: Option<&str>,
) {
    ctx.emit(
        EventKind::Step,
        Some(spec.id.as_str()),
        step_event_data(spec, status, attempt, output, error, duration_ms, reason),
    )
    .await;
}

fn step_event_data(
    spec: &StepSpec,
    status: StepStatus,
    attempt: u32,
    output: Option<&Value>,
    error: Option<&RunError>,
    duration_ms: Option<u64>,
    reason: Option<&str>,
) -> Value {
    let mut data = json!({
        "step_id": spec.id, "name": spec.display_name(), "kind": spec.step_kind(),
        "status": status, "attempt": attempt,
    });
    if let Some(o) = output {
        data["output"] = o.clone();
    }
    if let Some(e) = error {
        data["error"] = serde_json::to_value(e).unwrap_or(Value::Null);
    }
    if let Some(d) = duration_ms {
        data["duration_ms"] = json!(d);
    }
    if let Some(r) = reason {
        data["reason"] = json!(r);
    }
    data
}

/// Runs one step with its retry policy and timeout. Each attempt is stored; top-level steps
/// announce retries live, children put everything in `events`.
fn run_with_retries<'f>(
    frame: &'f Frame<'f>,
    spec: &'f StepSpec,
    locals: Option<Locals<'f>>,
    first_attempt: u32,
    top_level: bool,
    events: &'f mut StepEvents,
) -> futures::future::BoxFuture<'f, (Result<Value, StepError>, u32)> {
    Box::pin(async move {
        let ctx = frame.ctx;
        let policy = spec
            .retry_policy
            .clone()
            .or_else(|| frame.default_retry.cloned())
            .unwrap_or_else(crate::domain::RetryPolicy::none);
        let mut attempt = first_attempt;
        let mut tries = 0u32;
        loop {
            tries += 1;
            if !top_level {
                events.push(
                    spec.id.as_str(),
                    EventKind::Step,
                    step_event_data(spec, StepStatus::Running, attempt, None, None, None, None),
                );
            }
            let record = attempt_record(spec, attempt, frame.plan_version);
            ctx.services
                .hub
                .record(Record::Attempt(ctx.run_id, Box::new(record.clone())))
                .await;
            ctx.track_attempt(record.clone());
            let t0 = Instant::now();
            let mut attempt_events = StepEvents::default();
            let mut input = None;
            let body = run_body(frame, spec, locals, &mut attempt_events, &mut input);
            let result = match spec.timeout_ms {
                Some(ms) => match tokio::time::timeout(Duration::from_millis(ms), body).await {
                    Ok(r) => r,
                    Err(_) => Err(StepError::new(
                        "step_timeout",
                        format!("the step did not finish within {ms} ms"),
                        true,
                    )),
                },
                None => body.await,
            };
            let elapsed = t0.elapsed();
            events.append(attempt_events);
            let mut done = record;
            done.input = input;
            done.completed_at = Some(crate::domain::now());
            done.duration_ms = Some(elapsed.as_millis() as u64);
            match &result {
                Ok(o) => {
                    done.status = StepStatus::Completed;
                    done.output = Some(o.clone());
                }
                Err(e) => {
                    done.status = StepStatus::Failed;
                    done.error = Some(e.to_run_error());
                }
            }
            ctx.services
                .hub
                .record(Record::Attempt(ctx.run_id, Box::new(done)))
                .await;
            ctx.untrack_attempt(spec.id.as_str(), attempt);
            ctx.services
                .metrics
                .step_finished(spec.step_kind().as_str(), elapsed.as_secs_f64());

            let err = match result {
                Ok(v) => {
                    if !top_level {
                        events.push(
                            spec.id.as_str(),
                            EventKind::Step,
                            step_event_data(
                                spec,
                                StepStatus::Completed,
                                attempt,
                                Some(&v),
                                None,
                                Some(elapsed.as_millis() as u64),
                                None,
                            ),
                        );
                    }
                    return (Ok(v), attempt);
                }
                Err(e) => e,
            };
            let may_retry = tries < policy.max_attempts
                && policy.allows(&err.code, err.retryable)
                && ctx.take_retry();
            if !may_retry {
                if !top_level {
                    events.push(
                        spec.id.as_str(),
                        EventKind::Step,
                        step_event_data(
                            spec,
                            StepStatus::Failed,
                            attempt,
                            None,
                            Some(&err.to_run_error()),
                            Some(elapsed.as_millis() as u64),
                            None,
                        ),
                    );
                }
                return (Err(err), attempt);
            }
            let delay = policy.delay(tries + 1);
            let mut data = step_event_data(
                spec,
                StepStatus::Retrying,
                attempt,
                None,
                Some(&err.to_run_error()),
                Some(elapsed.as_millis() as u64),
                None,
            );
            data["retry_in_ms"] = json!(delay.as_millis() as u64);
            if top_level {
                ctx.emit(EventKind::Step, Some(spec.id.as_str()), data)
                    .await;
            } else {
                events.push(spec.id.as_str(), EventKind::Step, data);
            }
            tokio::time::sleep(delay).await;
            attempt += 1;
            if top_level {
                emit_step(
                    ctx,
                    spec,
                    StepStatus::Running,
                    attempt,
                    None,
                    None,
                    None,
                    None,
                )
                .await;
            }
        }
    })
}

/// A step attempt as it starts.
fn attempt_record(spec: &StepSpec, attempt: u32, plan_version: u32) -> StepAttempt {
    StepAttempt {
        step_id: spec.id.to_string(),
        name: spec.display_name().to_owned(),
        kind: spec.step_kind(),
        status: StepStatus::Running,
        attempt,
        plan_version,
        input: None,
        output: None,
        error: None,
        started_at: crate::domain::now(),
        completed_at: None,
        duration_ms: None,
    }
}

/// One attempt of a step's body. `input` receives what the attempt resolved its templates to
/// (tool arguments, prompts), stored with the attempt so its history shows what really ran.
async fn run_body(
    frame: &Frame<'_>,
    spec: &StepSpec,
    locals: Option<Locals<'_>>,
    events: &mut StepEvents,
    input: &mut Option<Value>,
) -> Result<Value, StepError> {
    let ctx = frame.ctx;
    let empty = HashMap::new();
    let (local, item, index) = locals.unwrap_or((&empty, None, None));
    // A Scope borrows a `dyn StepResults` (not Sync), so it lives only in synchronous
    // sections: `resolve` builds one, uses it, and drops it before the next await.
    let resolve = |t: &crate::plan::template::Template| {
        let layered = Layered {
            local,
            base: &frame.snapshot,
        };
        let mut scope = Scope::new(&ctx.spec.input, &layered, frame.vars);
        scope.item = item;
        scope.index = index;
        t.resolve(&scope)
    };
    let bad_ref =
        |e: crate::plan::template::RefError| StepError::fatal("bad_reference", e.to_string());
    match &spec.kind {
        KindSpec::Tool { tool, arguments } => {
            let args = resolve(arguments).map_err(bad_ref)?;
            *input = Some(json!({ "tool": tool, "arguments": args }));
            let _slot = frame
                .slots
                .acquire()
                .await
                .map_err(|_| StepError::fatal("cancelled", "the run is ending"))?;
            // Tool-level timeout: the step's own when set (the attempt is bounded by it anyway).
            steps::run_tool(ctx, spec.id.as_str(), tool, args, None, events).await
        }
        KindSpec::Llm {
            prompt,
            system,
            model,
            output_schema,
        } => {
            let prompt = text_of(resolve(prompt).map_err(bad_ref)?);
            let system = match system {
                Some(s) => Some(text_of(resolve(s).map_err(bad_ref)?)),
                None => None,
            };
            *input = Some(json!({ "prompt": prompt, "system": system, "model": model }));
            let _slot = frame
                .slots
                .acquire()
                .await
                .map_err(|_| StepError::fatal("cancelled", "the run is ending"))?;
            steps::run_llm(
                ctx,
                spec.id.as_str(),
                LlmAsk {
                    prompt,
                    system,
                    model: model.as_deref(),
                    output_schema: output_schema.as_ref().map(|s| &s.schema),
                },
            )
            .await
        }
        KindSpec::Branch { condition, .. } => {
            let taken = {
                let layered = Layered {
                    local,
                    base: &frame.snapshot,
                };
                let mut scope = Scope::new(&ctx.spec.input, &layered, frame.vars);
                scope.item = item;
                scope.index = index;
                condition.eval(&scope)
            }
            .map_err(|e| StepError::fatal("bad_condition", e))?;
            Ok(json!({ "result": taken, "taken": if taken { "then" } else { "else" } }))
        }
        KindSpec::Wait(WaitSpec::Duration { ms }) => {
            Ok(steps::run_wait(Duration::from_millis(*ms)).await)
        }
        KindSpec::Wait(WaitSpec::Until(t)) => {
            let left = (*t - chrono::Utc::now()).to_std().unwrap_or_default();
            Ok(steps::run_wait(left).await)
        }
        KindSpec::UserInput { prompt, schema } => {
            let prompt = text_of(resolve(prompt).map_err(bad_ref)?);
            *input = Some(json!({ "prompt": prompt }));
            ctx.wait_for_input(
                spec.id.as_str(),
                &prompt,
                schema.as_ref().map(|s| &s.schema),
            )
            .await
            .map_err(StepError::from)
        }
        KindSpec::Sequential { steps } => {
            let mut local = local.clone();
            let mut last = Value::Null;
            let mut skipped: HashSet<&str> = HashSet::new();
            for child in steps {
                if skipped.contains(child.id.as_str()) {
                    local.insert(
                        child.id.to_string(),
                        StepState {
                            status: StepStatus::Skipped,
                            output: None,
                        },
                    );
                    events.push(
                        child.id.as_str(),
                        EventKind::Step,
                        step_event_data(
                            child,
                            StepStatus::Skipped,
                            0,
                            None,
                            None,
                            None,
                            Some("its branch was not taken"),
                        ),
                    );
                    continue;
                }
                let (r, _) = {
                    let locals = Some((&local, item, index));
                    run_with_retries(frame, child, locals, 1, false, events).await
                };
                let out = r?;
                if let KindSpec::Branch {
                    then, otherwise, ..
                } = &child.kind
                {
                    let arm = if out["result"] == Value::Bool(true) {
                        otherwise
                    } else {
                        then
                    };
                    skipped.extend(arm.iter().map(|s| s.as_str()));
                }
                local.insert(child.id.to_string(), StepState::completed(out.clone()));
                last = out;
            }
            Ok(last)
        }
        KindSpec::Loop {
            over,
            max_iterations,
            steps,
        } => {
            let items: Option<Vec<Value>> = match over {
                LoopOver::ForEach(t) => match resolve(t).map_err(bad_ref)? {
                    Value::Array(a) => Some(a),
                    other => {
                        return Err(StepError::fatal(
                            "bad_reference",
                            format!("for_each must give an array, got {other}"),
                        ));
                    }
                },
                LoopOver::While(_) => None,
            };
            let mut outputs = Vec::new();
            let mut local = local.clone();
            let mut i: u64 = 0;
            loop {
                let item_value = match &items {
                    Some(list) => match list.get(i as usize) {
                        Some(v) => Some(v.clone()),
                        None => break,
                    },
                    None => {
                        let LoopOver::While(cond) = over else {
                            unreachable!("items are None only for while loops")
                        };
                        let go = {
                            let layered = Layered {
                                local: &local,
                                base: &frame.snapshot,
                            };
                            let scope =
                                Scope::new(&ctx.spec.input, &layered, frame.vars).in_loop(None, i);
                            cond.eval(&scope)
                        };
                        if !go.map_err(|e| StepError::fatal("bad_condition", e))? {
                            break;
                        }
                        None
                    }
                };
                if i >= *max_iterations as u64 {
                    if items.is_some() {
                        return Err(StepError::fatal(
                            "loop_limit_exceeded",
                            format!(
                                "the list has more than max_iterations ({max_iterations}) items"
                            ),
                        ));
                    }
                    return Err(StepError::fatal(
                        "loop_limit_exceeded",
                        format!("the loop was still going after max_iterations ({max_iterations})"),
                    ));
                }
                let mut last = Value::Null;
                for child in steps {
                    let (r, _) = {
                        let locals = Some((&local, item_value.as_ref(), Some(i)));
                        run_with_retries(frame, child, locals, 1, false, events).await
                    };
                    let out = r?;
                    local.insert(child.id.to_string(), StepState::completed(out.clone()));
                    last = out;
                }
                outputs.push(last);
                i += 1;
            }
            Ok(Value::Array(outputs))
        }
        KindSpec::Parallel { steps, aggregation } => {
            run_parallel(frame, steps, *aggregation, (local, item, index), events).await
        }
    }
}

async fn run_parallel(
    frame: &Frame<'_>,
    children: &[StepSpec],
    aggregation: Aggregation,
    locals: (&HashMap<String, StepState>, Option<&Value>, Option<u64>),
    events: &mut StepEvents,
) -> Result<Value, StepError> {
    let mut futs = FuturesUnordered::new();
    for (k, child) in children.iter().enumerate() {
        futs.push(async move {
            let mut ev = StepEvents::default();
            let (r, _) = run_with_retries(frame, child, Some(locals), 1, false, &mut ev).await;
            (k, r, ev)
        });
    }
    let mut results: Vec<Option<(Result<Value, StepError>, StepEvents)>> =
        (0..children.len()).map(|_| None).collect();
    let mut fastest: Option<Value> = None;
    while let Some((k, r, ev)) = futs.next().await {
        let ok = r.is_ok();
        if aggregation == Aggregation::Fastest && ok && fastest.is_none() {
            fastest = r.as_ref().ok().cloned();
            results[k] = Some((r, ev));
            break; // the rest are dropped: cancelled
        }
        results[k] = Some((r, ev));
        if aggregation == Aggregation::FirstSuccess {
            // Done once the earliest child that can still win has an answer.
            let decided = results
                .iter()
                .take_while(|s| s.as_ref().is_some_and(|(r, _)| r.is_err()))
                .count();
            if results
                .get(decided)
                .is_some_and(|s| s.as_ref().is_some_and(|(r, _)| r.is_ok()))
            {
                break;
            }
        }
    }
    drop(futs);
    // Child events in declaration order, so the sequence does not depend on timing.
    let mut outputs = Vec::new();
    let mut failures = Vec::new();
    for (k, slot) in results.into_iter().enumerate() {
        match slot {
            Some((r, ev)) => {
                events.append(ev);
                match r {
                    Ok(v) => outputs.push((k, v)),
                    Err(e) => failures.push((k, e)),
                }
            }
            None => events.push(
                children[k].id.as_str(),
                EventKind::Step,
                step_event_data(
                    &children[k],
                    StepStatus::Cancelled,
                    1,
                    None,
                    None,
                    None,
                    Some("another child finished first"),
                ),
            ),
        }
    }
    let all_failed = || {
        let (k, e) = &failures[0];
        StepError::new(
            e.code.clone(),
            format!(
                "all {} children failed; `{}`: {}",
                children.len(),
                children[*k].id,
                e.message
            ),
            false,
        )
    };
    match aggregation {
        Aggregation::All => {
            if let Some((k, e)) = failures.into_iter().next() {
                return Err(StepError::new(
                    e.code,
                    format!("child `{}` failed: {}", children[k].id, e.message),
                    false,
                ));
            }
            Ok(Value::Array(outputs.into_iter().map(|(_, v)| v).collect()))
        }
        Aggregation::Merge => {
            if outputs.is_empty() {
                return Err(all_failed());
            }
            Ok(Value::Object(
                outputs
                    .into_iter()
                    .map(|(k, v)| (children[k].id.to_string(), v))
                    .collect(),
            ))
        }
        Aggregation::FirstSuccess => outputs
            .into_iter()
            .next()
            .map(|(_, v)| v)
            .ok_or_else(all_failed),
        Aggregation::Fastest => fastest.ok_or_else(all_failed),
    }
}

fn text_of(v: Value) -> String {
    match v {
        Value::String(s) => s,
        other => other.to_string(),
    }
}
