//! A call of a worker tool (issue 47): queued as a task for the tenant's workers, then waited
//! for without a running slot, as a wait for a person is. The task is found again by the
//! call (`store::tasks::Tasks::open`), so a run resumed after a restart or a takeover waits on
//! the task it queued before instead of queueing another, and takes a result that came
//! meanwhile. A worker's progress reaches the run's clients as a `status` event; the run's
//! cancel cancels the task (the worker's next heartbeat is told).

use std::time::Duration;

use serde_json::{Value, json};

use crate::domain::event::{StatusData, TaskNote};
use crate::domain::{ErrorCode, RunError, RunStatus, StepPath, WorkerToolSpec};
use crate::engine::runtime::context::RunContext;
use crate::store::tasks::{NewTask, Task, TaskPolicy, TaskStatus};

/// How often a waiting run reads its task even when no bell rang (a notice lost between
/// replicas costs at most this).
const RECHECK: Duration = Duration::from_secs(2);

/// One call of a worker tool, its arguments already checked against its schema.
pub struct WorkerCall<'a> {
    pub step: &'a StepPath,
    pub call_id: &'a str,
    pub spec: &'a WorkerToolSpec,
    pub arguments: Value,
}

/// Queues the call's task (or finds it) and waits for its end: the worker's output, or its
/// failure as the step's error; with the task's note for the call's `tool_result`.
pub async fn call_worker(
    ctx: &RunContext,
    call: WorkerCall<'_>,
) -> (Result<Value, RunError>, Option<TaskNote>) {
    let mut note = None;
    let result = queue_and_wait(ctx, call, &mut note).await;
    (result, note)
}

async fn queue_and_wait(
    ctx: &RunContext,
    call: WorkerCall<'_>,
    note: &mut Option<TaskNote>,
) -> Result<Value, RunError> {
    let new = NewTask {
        tenant: ctx.tenant.clone(),
        queue: call.spec.queue.clone(),
        tool: call.spec.name.clone(),
        run_id: ctx.run_id,
        step_id: call.step.leaf().to_owned(),
        path: call.step.parent_if_nested().map(|p| p.as_str().to_owned()),
        call_id: call.call_id.to_owned(),
        arguments: call.arguments.clone(),
        policy: policy_of(call.spec),
    };
    let tasks = &ctx.services.tasks;
    let task = tasks.open(&new).await.map_err(unavailable)?;
    let mut orphan = Orphan {
        ctx,
        task: Some(task.id.clone()),
    };
    let bell = tasks.hub().bell(&task.id);
    let ended = ctx
        .without_slot(wait_for_end(ctx, &call, task, &bell))
        .await;
    tasks.hub().forget(&new_id(&ended));
    orphan.task = None;
    match ended {
        Waited::Ended(task) => {
            ctx.services.metrics.task_finished(outcome_label(&task));
            *note = Some(TaskNote {
                task_id: task.id.clone(),
                attempts: task.attempt,
                claimed_at: task.claimed_at,
            });
            outcome(&task)
        }
        Waited::Cancelled(id) => {
            ctx.services.metrics.task_finished("cancelled");
            if let Err(e) = tasks.cancel(&id).await {
                tracing::warn!(error = ?e, task = %id, "cancelling a run's task failed");
            }
            Err(RunError::new(
                ErrorCode::Cancelled,
                "the run was cancelled while its task was out",
            ))
        }
        Waited::Failed(e) => Err(e),
    }
}

/// Cancels the task when the call is cut off (its step timed out, a sibling failed, the run
/// was cancelled) before it saw the task end, so the worker's next heartbeat is told at once.
/// Not when the server is stopping: the run resumes and waits on the same task.
struct Orphan<'a> {
    ctx: &'a RunContext,
    task: Option<String>,
}

impl Drop for Orphan<'_> {
    fn drop(&mut self) {
        let Some(id) = self.task.take() else {
            return;
        };
        if self.ctx.stop.is_cancelled() && !self.ctx.cancel.is_cancelled() {
            return;
        }
        let tasks = self.ctx.services.tasks.clone();
        tokio::spawn(async move {
            if let Err(e) = tasks.cancel(&id).await {
                tracing::warn!(error = ?e, task = %id, "cancelling a cut-off call's task failed");
            }
        });
    }
}

enum Waited {
    Ended(Box<Task>),
    Cancelled(String),
    Failed(RunError),
}

fn new_id(waited: &Waited) -> String {
    match waited {
        Waited::Ended(t) => t.id.clone(),
        Waited::Cancelled(id) => id.clone(),
        Waited::Failed(_) => String::new(),
    }
}

/// Reads the task each time its bell rings (and every [`RECHECK`]) until it ends, passing on
/// each new progress; stops at the run's cancel. A progress the task already holds when the
/// wait begins goes out too: a run resumed after a restart or a takeover (its lease lapsed
/// on a loaded replica) shows where the worker stands, instead of staying silent until the
/// worker's next report.
async fn wait_for_end(
    ctx: &RunContext,
    call: &WorkerCall<'_>,
    mut task: Task,
    bell: &tokio::sync::Notify,
) -> Waited {
    let mut shown: Option<Value> = None;
    loop {
        let rang = bell.notified();
        tokio::pin!(rang);
        rang.as_mut().enable();
        if task.status.is_terminal() {
            return Waited::Ended(Box::new(task));
        }
        if task.progress.is_some() && task.progress != shown {
            shown = task.progress.clone();
            // Live, as a question to a person goes: it first releases what the step's
            // sinks hold (the call itself), so the order stays causal.
            ctx.emit(Some(call.step), progress_event(call, &task)).await;
        }
        tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => return Waited::Cancelled(task.id),
            () = &mut rang => {}
            () = tokio::time::sleep(RECHECK) => {}
        }
        task = match ctx.services.tasks.get(&task.id).await {
            Ok(Some(t)) => t,
            Ok(None) => return Waited::Failed(gone(&task.id)),
            Err(e) => {
                tracing::warn!(error = ?e, task = %task.id, "reading a task failed; trying again");
                continue;
            }
        };
    }
}

fn progress_event(call: &WorkerCall<'_>, task: &Task) -> StatusData {
    let shown = match &task.progress {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    StatusData {
        status: RunStatus::Running,
        message: Some(format!("{}: {}", call.spec.name, preview(&shown))),
        selected: None,
        progress: Some(json!({
            "call_id": call.call_id,
            "tool": call.spec.name,
            "task_id": task.id,
            "progress": task.progress,
        })),
    }
}

/// At most 200 characters of a progress, for the event's message.
fn preview(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

fn outcome(task: &Task) -> Result<Value, RunError> {
    match task.status {
        TaskStatus::Completed => Ok(task.output.clone().unwrap_or(Value::Null)),
        TaskStatus::Cancelled => Err(RunError::new(
            ErrorCode::Cancelled,
            format!("task {} was cancelled", task.id),
        )),
        _ => {
            let (code, message) = match &task.error {
                Some(e) => (e.code.clone(), e.message.clone()),
                None => ("tool_error".into(), "the task failed".into()),
            };
            Err(RunError::new(
                ErrorCode::parse(&code),
                format!(
                    "`{}` failed after {} attempt(s): {message}",
                    task.tool, task.attempt
                ),
            ))
        }
    }
}

/// How `orca_tasks_finished_total` names a task's end.
fn outcome_label(task: &Task) -> &'static str {
    match task.status {
        TaskStatus::Completed => "completed",
        TaskStatus::Cancelled => "cancelled",
        _ if task
            .error
            .as_ref()
            .is_some_and(|e| ErrorCode::parse(&e.code) == ErrorCode::ToolTimeout) =>
        {
            "timed_out"
        }
        _ => "failed",
    }
}

fn policy_of(spec: &WorkerToolSpec) -> TaskPolicy {
    TaskPolicy {
        schedule_to_start_ms: spec.schedule_to_start_ms,
        start_to_close_ms: spec.start_to_close_ms,
        heartbeat_ms: spec.heartbeat_ms,
        max_attempts: spec.retry.max_attempts,
        backoff_ms: spec.retry.backoff_ms,
        max_backoff_ms: spec.retry.max_backoff_ms,
    }
}

fn unavailable(e: crate::store::Error) -> RunError {
    RunError::new(
        ErrorCode::StoreUnavailable,
        format!("could not queue the task: {e}"),
    )
}

fn gone(id: &str) -> RunError {
    RunError::new(
        ErrorCode::StoreUnavailable,
        format!("task {id} is no longer stored"),
    )
}
