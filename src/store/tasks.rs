//! Worker tools' tasks: one row per call of a tool a tenant's own workers serve, queued by the
//! run that makes the call and claimed by a worker under a lease (issue 47). Every change of a
//! task is one statement that checks the state it changes from (a compare-and-set), so two
//! workers, two replicas or a worker and the sweeper never both move a task on: a completion
//! is accepted once, and a refused one changes nothing.
//!
//! Times a replica compares are the database's clock in epoch milliseconds
//! ([`Backend::now_ms_sql`]). A task's states: `queued` → `claimed` → `completed` | `failed`
//! | `cancelled`; a lapsed claim or a retryable failure goes back to `queued` (after a
//! backoff) while attempts remain.
//!
//! [`TaskHub`] wakes what waits on a task in this process: a run waiting for its task's end,
//! pollers waiting for work. On PostgreSQL the same changes are announced to the other
//! replicas (`Notice::TaskChanged`, `Notice::TaskQueued`), whose relay calls the hub. Like the
//! rest of the store this module only persists; deciding when a task is due is the sweeper's
//! (`workers::tasks`), waiting for one is the engine's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};
use tokio::sync::Notify;

use super::cluster::Notice;
use super::{Backend, Error, Result, Store, parse_json, parse_opt_json, to_json};
use crate::domain::text_enum::text_enum;
use crate::domain::{RunId, Tenant};

text_enum! {
    /// Where a task stands.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, utoipa::ToSchema)]
    pub enum TaskStatus {
        Queued = "queued",
        Claimed = "claimed",
        Completed = "completed",
        Failed = "failed",
        Cancelled = "cancelled",
    }
}

impl TaskStatus {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }
}

/// How long a task may wait and run, and how often it is tried: a worker tool's declaration
/// (`domain::worker_tool`) copied into each of its tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskPolicy {
    pub schedule_to_start_ms: u64,
    pub start_to_close_ms: u64,
    pub heartbeat_ms: Option<u64>,
    pub max_attempts: u32,
    pub backoff_ms: u64,
    pub max_backoff_ms: u64,
}

impl TaskPolicy {
    /// The pause before the attempt after `attempts` tries: the backoff doubled per attempt
    /// after the first, capped.
    pub fn backoff_after(&self, attempts: u32) -> u64 {
        let doublings = attempts.saturating_sub(1).min(30);
        self.backoff_ms
            .saturating_mul(1u64 << doublings)
            .min(self.max_backoff_ms)
    }
}

/// A call to queue: what the run knows of it.
#[derive(Debug, Clone)]
pub struct NewTask {
    pub tenant: Tenant,
    pub queue: String,
    pub tool: String,
    pub run_id: RunId,
    pub step_id: String,
    /// The step's parents, `/`-separated; `None` at the top.
    pub path: Option<String>,
    pub call_id: String,
    pub arguments: Value,
    pub policy: TaskPolicy,
}

impl NewTask {
    /// What identifies the call within its run: its step, call id and arguments. A resumed
    /// run that makes the same call again finds its task by it.
    fn call_key(&self) -> String {
        let step = match &self.path {
            Some(p) => format!("{p}/{}", self.step_id),
            None => self.step_id.clone(),
        };
        let digest = crate::domain::definition::digest(&self.arguments);
        format!("{step}#{}#{digest}", self.call_id)
    }
}

/// A task's error: the worker's code and message, or orca's (`tool_timeout`, `lease_expired`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaskError {
    pub code: String,
    pub message: String,
}

/// A stored task, as the API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub id: String,
    pub tenant: Tenant,
    pub queue: String,
    pub tool: String,
    pub arguments: Value,
    /// Stable across the re-offers of one task: what a tool keys its own side effects by.
    pub idempotency_key: String,
    pub status: TaskStatus,
    /// Claims so far (the current one included).
    pub attempt: u32,
    pub max_attempts: u32,
    pub run_id: RunId,
    pub step_id: String,
    pub path: Option<String>,
    pub call_id: String,
    pub worker_id: Option<String>,
    pub heartbeat_ms: Option<u64>,
    pub start_to_close_ms: u64,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub progress: Option<Value>,
    pub output: Option<Value>,
    pub error: Option<TaskError>,
    pub created_at: DateTime<Utc>,
    pub claimed_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// The policy it was queued with.
    pub policy: TaskPolicy,
}

/// Why a worker's heartbeat, completion or failure was refused (409); nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The run was cancelled, or the task: stop working.
    Cancelled,
    /// This claim lapsed: the task went back to the queue, or ended meanwhile.
    LeaseExpired,
    /// Another worker holds the task.
    NotYours,
    /// The task already completed or failed (a second completion).
    Finished,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Cancelled => "task_cancelled",
            Refusal::LeaseExpired => "lease_expired",
            Refusal::NotYours => "not_yours",
            Refusal::Finished => "task_finished",
        }
    }
}

/// What a worker's call came to.
#[derive(Debug)]
pub enum Reported<T> {
    Done(T),
    Refused(Refusal),
    /// No such task for this tenant.
    Unknown,
}

/// What a worker asks for when it polls.
#[derive(Debug, Clone)]
pub struct Poll<'a> {
    pub tenant: &'a Tenant,
    pub worker_id: &'a str,
    pub queue: &'a str,
    /// Empty: any tool of the queue.
    pub tools: &'a [String],
    pub max_tasks: u32,
}

/// How a worker's failure is to be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Try again while attempts remain.
    Allowed,
    /// Fail the task now.
    Never,
}

/// Wakes what waits on tasks in this process. Cheap to clone.
#[derive(Clone, Default)]
pub struct TaskHub {
    inner: Arc<HubInner>,
}

#[derive(Default)]
struct HubInner {
    /// A std mutex: map lookups only, never across an await.
    tasks: Mutex<HashMap<String, Arc<Notify>>>,
    queued: Notify,
    /// Rung on every change here: the sweeper looks at the deadlines again.
    activity: Notify,
    /// Long polls open, per tenant.
    pollers: Mutex<HashMap<String, usize>>,
}

/// One open long poll, counted against its tenant until dropped.
pub struct PollGuard {
    hub: TaskHub,
    tenant: String,
}

impl Drop for PollGuard {
    fn drop(&mut self) {
        let mut pollers = (self.hub.inner.pollers.lock()).unwrap_or_else(|p| p.into_inner());
        if let Some(n) = pollers.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 {
                pollers.remove(&self.tenant);
            }
        }
    }
}

impl TaskHub {
    /// The task's bell, made on first ask; ring it with [`Self::changed`].
    pub fn bell(&self, id: &str) -> Arc<Notify> {
        let mut tasks = self.inner.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.entry(id.to_owned()).or_default().clone()
    }

    /// Forgets a task's bell once nothing waits on it.
    pub fn forget(&self, id: &str) {
        let mut tasks = self.inner.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.remove(id);
    }

    /// Rings the task's bell, if anything here waits on it.
    pub fn changed(&self, id: &str) {
        let tasks = self.inner.tasks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(bell) = tasks.get(id) {
            bell.notify_waiters();
        }
        self.inner.activity.notify_one();
    }

    /// Wakes every poller: a task may be ready.
    pub fn queued(&self) {
        self.inner.queued.notify_waiters();
        self.inner.activity.notify_one();
    }

    /// What the sweeper waits on besides its deadlines: a task changed here.
    pub fn activity(&self) -> &Notify {
        &self.inner.activity
    }

    /// What pollers wait on.
    pub fn queued_bell(&self) -> &Notify {
        &self.inner.queued
    }

    /// Counts a long poll of `tenant`, unless it already holds `cap` here.
    pub fn enter_poll(&self, tenant: &str, cap: usize) -> Option<PollGuard> {
        let mut pollers = (self.inner.pollers.lock()).unwrap_or_else(|p| p.into_inner());
        let n = pollers.entry(tenant.to_owned()).or_default();
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(PollGuard {
            hub: self.clone(),
            tenant: tenant.to_owned(),
        })
    }
}

/// The tasks' handle: these tables, and the hub that wakes waiters here.
#[derive(Clone)]
pub struct Tasks {
    store: Store,
    hub: TaskHub,
}

/// The columns a task is read from.
pub(super) const COLUMNS: &str =
    "id, tenant, queue, tool, run_id, step_id, path, call_id, generation,
    idempotency_key, arguments, status, attempts, max_attempts, backoff_ms, max_backoff_ms,
    schedule_to_start_ms, start_to_close_ms, heartbeat_ms, lease_until_ms, worker_id, progress,
    output, error, created_at_ms, claimed_at_ms, finished_at_ms";

impl Tasks {
    pub fn new(store: Store) -> Tasks {
        Tasks {
            store,
            hub: TaskHub::default(),
        }
    }

    pub fn hub(&self) -> &TaskHub {
        &self.hub
    }

    /// Whether other replicas share these tasks (PostgreSQL): what they change is not always
    /// announced here.
    pub fn shared(&self) -> bool {
        self.store.shared()
    }

    pub(super) fn pool(&self) -> sqlx::AnyPool {
        self.store.pool()
    }

    pub(super) fn now(&self) -> &'static str {
        self.store.backend.now_ms_sql()
    }

    /// The smaller of two SQL numbers.
    fn least(&self) -> &'static str {
        match self.store.backend {
            Backend::Sqlite => "MIN",
            Backend::Postgres => "LEAST",
        }
    }

    /// Announces a changed task here and to the other replicas.
    async fn announce(&self, id: &str) {
        self.hub.changed(id);
        if let Err(e) = self.store.notify(&Notice::TaskChanged(id.to_owned())).await {
            tracing::warn!(error = ?e, task = id, "announcing a task's change failed");
        }
    }

    /// Announces that a task may be ready, here and to the other replicas.
    async fn announce_queued(&self) {
        self.hub.queued();
        if let Err(e) = self.store.notify(&Notice::TaskQueued).await {
            tracing::warn!(error = ?e, "announcing a queued task failed");
        }
    }

    /// The call's task: the one queued earlier for the same call (a resumed run finds the
    /// task it was waiting on, running or ended), or a new one when there is none or the last
    /// one failed or was cancelled (a retried step calls again).
    pub async fn open(&self, new: &NewTask) -> Result<Task> {
        let key = new.call_key();
        let latest = self.latest_of_call(new.run_id, &key).await?;
        let generation = match &latest {
            Some((task, _))
                if !matches!(task.status, TaskStatus::Failed | TaskStatus::Cancelled) =>
            {
                return Ok(latest.expect("matched").0);
            }
            Some((_, generation)) => generation + 1,
            None => 0,
        };
        self.insert(new, &key, generation).await?;
        self.announce_queued().await;
        let (task, _) = (self.latest_of_call(new.run_id, &key).await?)
            .ok_or_else(|| Error::Corrupt("a task just queued is not there".into()))?;
        Ok(task)
    }

    async fn latest_of_call(&self, run: RunId, key: &str) -> Result<Option<(Task, i64)>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM tasks WHERE run_id = $1 AND call_key = $2
             ORDER BY generation DESC LIMIT 1"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(run.to_string())
            .bind(key)
            .fetch_optional(&self.pool())
            .await?;
        row.map(|r| Ok((task_from_row(&r)?, r.try_get::<i64, _>("generation")?)))
            .transpose()
    }

    async fn insert(&self, new: &NewTask, key: &str, generation: i64) -> Result<()> {
        let p = &new.policy;
        let step = key.split('#').next().unwrap_or_default();
        let idempotency_key = format!("{}/{step}/{}/{generation}", new.run_id, new.call_id);
        let now = self.now();
        let sql = format!(
            "INSERT INTO tasks (id, tenant, queue, tool, run_id, step_id, path, call_id, call_key,
                generation, idempotency_key, arguments, status, attempts, max_attempts,
                backoff_ms, max_backoff_ms, schedule_to_start_ms, start_to_close_ms,
                heartbeat_ms, not_before_ms, start_deadline_ms, created_at_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'queued', 0, $13, $14,
                $15, $16, $17, $18, {now}, {now} + $16, {now})
             ON CONFLICT (run_id, call_key, generation) DO NOTHING"
        );
        sqlx::query(AssertSqlSafe(sql))
            .bind(uuid::Uuid::now_v7().to_string())
            .bind(new.tenant.0.as_str())
            .bind(&new.queue)
            .bind(&new.tool)
            .bind(new.run_id.to_string())
            .bind(&new.step_id)
            .bind(new.path.as_deref())
            .bind(&new.call_id)
            .bind(key)
            .bind(generation)
            .bind(idempotency_key)
            .bind(to_json(&new.arguments))
            .bind(i64::from(p.max_attempts))
            .bind(ms(p.backoff_ms))
            .bind(ms(p.max_backoff_ms))
            .bind(ms(p.schedule_to_start_ms))
            .bind(ms(p.start_to_close_ms))
            .bind(p.heartbeat_ms.map(ms))
            .execute(&self.pool())
            .await?;
        Ok(())
    }

    /// The task, whoever's it is (the engine's read).
    pub async fn get(&self, id: &str) -> Result<Option<Task>> {
        let sql = format!("SELECT {COLUMNS} FROM tasks WHERE id = $1");
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&self.pool())
            .await?;
        row.as_ref().map(task_from_row).transpose()
    }

    /// The tenant's task.
    pub async fn get_for(&self, tenant: &Tenant, id: &str) -> Result<Option<Task>> {
        Ok(self.get(id).await?.filter(|t| &t.tenant == tenant))
    }

    /// Cancels the task unless it has ended. Whether it was cancelled now.
    pub async fn cancel(&self, id: &str) -> Result<bool> {
        let now = self.now();
        let sql = format!(
            "UPDATE tasks SET status = 'cancelled', finished_at_ms = {now}, lease_until_ms = NULL
             WHERE id = $1 AND status IN ('queued', 'claimed')"
        );
        let res = sqlx::query(AssertSqlSafe(sql))
            .bind(id)
            .execute(&self.pool())
            .await?;
        let cancelled = res.rows_affected() > 0;
        if cancelled {
            self.announce(id).await;
        }
        Ok(cancelled)
    }

    /// Claims up to `max_tasks` ready tasks of the queue for the worker, oldest first, each
    /// under a lease; and records that the worker polled.
    pub async fn claim(&self, poll: &Poll<'_>) -> Result<Vec<Task>> {
        self.saw_worker(poll).await?;
        let now = self.now();
        let least = self.least();
        let tools = match poll.tools.len() {
            0 => String::new(),
            n => {
                let list: Vec<String> = (5..5 + n).map(|i| format!("${i}")).collect();
                format!(" AND tool IN ({})", list.join(", "))
            }
        };
        // PostgreSQL: the ids are picked once, as an array (an InitPlan). Under `IN (SELECT …
        // LIMIT n FOR UPDATE SKIP LOCKED)` the planner may rescan the subquery, and each rescan
        // skips the rows the last one locked and returns others: a poll for 1 task claimed 3.
        let (open, close) = match self.store.backend {
            Backend::Sqlite => ("IN (", ")"),
            Backend::Postgres => ("= ANY(ARRAY(", " FOR UPDATE SKIP LOCKED))"),
        };
        let sql = format!(
            "UPDATE tasks SET status = 'claimed', worker_id = $1, attempts = attempts + 1,
                claimed_at_ms = {now}, claim_deadline_ms = {now} + start_to_close_ms,
                lease_until_ms = {now} + {least}(COALESCE(heartbeat_ms, start_to_close_ms),
                    start_to_close_ms)
             WHERE id {open}SELECT id FROM tasks WHERE tenant = $2 AND queue = $3
                AND status = 'queued' AND not_before_ms <= {now}{tools}
                ORDER BY not_before_ms, created_at_ms LIMIT $4{close}
                AND status = 'queued'
             RETURNING {COLUMNS}"
        );
        let mut q = sqlx::query(AssertSqlSafe(sql))
            .bind(poll.worker_id)
            .bind(poll.tenant.0.as_str())
            .bind(poll.queue)
            .bind(i64::from(poll.max_tasks));
        for tool in poll.tools {
            q = q.bind(tool.as_str());
        }
        let rows = q.fetch_all(&self.pool()).await?;
        let mut tasks = rows.iter().map(task_from_row).collect::<Result<Vec<_>>>()?;
        tasks.sort_by_key(|t| t.created_at);
        for t in &tasks {
            self.hub.changed(&t.id);
        }
        Ok(tasks)
    }

    async fn saw_worker(&self, poll: &Poll<'_>) -> Result<()> {
        let now = self.now();
        let sql = format!(
            "INSERT INTO task_workers (tenant, worker_id, queue, tools, last_poll_ms)
             VALUES ($1, $2, $3, $4, {now})
             ON CONFLICT (tenant, worker_id, queue)
             DO UPDATE SET tools = excluded.tools, last_poll_ms = excluded.last_poll_ms"
        );
        sqlx::query(AssertSqlSafe(sql))
            .bind(poll.tenant.0.as_str())
            .bind(poll.worker_id)
            .bind(poll.queue)
            .bind(to_json(&poll.tools))
            .execute(&self.pool())
            .await?;
        Ok(())
    }

    /// Extends the worker's claim on the task by its heartbeat and records its progress.
    pub async fn heartbeat(
        &self,
        tenant: &Tenant,
        id: &str,
        worker: &str,
        progress: Option<&Value>,
    ) -> Result<Reported<Task>> {
        let now = self.now();
        let least = self.least();
        let sql = format!(
            "UPDATE tasks SET lease_until_ms = {least}({now} + COALESCE(heartbeat_ms,
                    start_to_close_ms), claim_deadline_ms),
                progress = COALESCE($4, progress)
             WHERE id = $1 AND tenant = $2 AND worker_id = $3 AND status = 'claimed'
                AND lease_until_ms >= {now}
             RETURNING {COLUMNS}"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id)
            .bind(tenant.0.as_str())
            .bind(worker)
            .bind(progress.map(to_json))
            .fetch_optional(&self.pool())
            .await?;
        match row {
            Some(r) => {
                if progress.is_some() {
                    // The run's clients hear of it: the run waiting on the task looks again.
                    self.announce(id).await;
                }
                Ok(Reported::Done(task_from_row(&r)?))
            }
            None => self.refusal(tenant, id, worker).await,
        }
    }

    /// Completes the worker's claim with `output`: accepted once, while the claim holds.
    pub async fn complete(
        &self,
        tenant: &Tenant,
        id: &str,
        worker: &str,
        output: &Value,
    ) -> Result<Reported<Task>> {
        let now = self.now();
        let sql = format!(
            "UPDATE tasks SET status = 'completed', output = $4, finished_at_ms = {now},
                lease_until_ms = NULL
             WHERE id = $1 AND tenant = $2 AND worker_id = $3 AND status = 'claimed'
                AND lease_until_ms >= {now}
             RETURNING {COLUMNS}"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id)
            .bind(tenant.0.as_str())
            .bind(worker)
            .bind(to_json(output))
            .fetch_optional(&self.pool())
            .await?;
        match row {
            Some(r) => {
                self.announce(id).await;
                Ok(Reported::Done(task_from_row(&r)?))
            }
            None => self.refusal(tenant, id, worker).await,
        }
    }

    /// Fails the worker's claim: back to the queue after a backoff while attempts remain and
    /// the worker allows it, else failed for good.
    pub async fn fail(
        &self,
        tenant: &Tenant,
        id: &str,
        worker: &str,
        error: &TaskError,
        retry: Retry,
    ) -> Result<Reported<Task>> {
        let Some(task) = self.get_for(tenant, id).await? else {
            return Ok(Reported::Unknown);
        };
        let again = retry == Retry::Allowed && task.attempt < task.max_attempts;
        let now = self.now();
        let next = match again {
            true => format!(
                "status = 'queued', worker_id = NULL, lease_until_ms = NULL,
                 not_before_ms = {now} + $6, start_deadline_ms = {now} + $6 + schedule_to_start_ms"
            ),
            false => format!("status = 'failed', finished_at_ms = {now}, lease_until_ms = NULL"),
        };
        let sql = format!(
            "UPDATE tasks SET error = $4, {next}
             WHERE id = $1 AND tenant = $2 AND worker_id = $3 AND status = 'claimed'
                AND lease_until_ms >= {now} AND attempts = $5
             RETURNING {COLUMNS}"
        );
        let mut q = sqlx::query(AssertSqlSafe(sql))
            .bind(id)
            .bind(tenant.0.as_str())
            .bind(worker)
            .bind(to_json(error))
            .bind(i64::from(task.attempt));
        if again {
            q = q.bind(ms(task.policy.backoff_after(task.attempt)));
        }
        let row = q.fetch_optional(&self.pool()).await?;
        match row {
            Some(r) => {
                match again {
                    true => self.announce_queued().await,
                    false => self.announce(id).await,
                }
                Ok(Reported::Done(task_from_row(&r)?))
            }
            None => self.refusal(tenant, id, worker).await,
        }
    }

    /// Why a worker's call on the task changed nothing.
    async fn refusal<T>(&self, tenant: &Tenant, id: &str, worker: &str) -> Result<Reported<T>> {
        let Some(task) = self.get_for(tenant, id).await? else {
            return Ok(Reported::Unknown);
        };
        let mine = task.worker_id.as_deref() == Some(worker);
        let why = match task.status {
            TaskStatus::Cancelled => Refusal::Cancelled,
            TaskStatus::Completed | TaskStatus::Failed if mine => Refusal::Finished,
            TaskStatus::Claimed if !mine => Refusal::NotYours,
            _ => Refusal::LeaseExpired,
        };
        Ok(Reported::Refused(why))
    }

    /// Moves on every task whose time ran out, and cancels those of ended runs: a lapsed
    /// claim goes back to the queue (or fails once out of attempts), a task queued past its
    /// schedule-to-start fails. Returns how many it moved.
    pub async fn sweep(&self) -> Result<u64> {
        let mut moved = self.lapse_claims().await?;
        let now = self.now();
        let late = format!(
            "UPDATE tasks SET status = 'failed', finished_at_ms = {now}, error = $1
             WHERE status = 'queued' AND start_deadline_ms < {now} RETURNING id"
        );
        let error = TaskError {
            code: "tool_timeout".into(),
            message: "no worker took the task within its schedule-to-start timeout".into(),
        };
        let ids: Vec<String> = sqlx::query_scalar(AssertSqlSafe(late))
            .bind(to_json(&error))
            .fetch_all(&self.pool())
            .await?;
        let orphans = format!(
            "UPDATE tasks SET status = 'cancelled', finished_at_ms = {now}, lease_until_ms = NULL
             WHERE status IN ('queued', 'claimed') AND run_id IN
                (SELECT id FROM runs WHERE status IN {TERMINAL}) RETURNING id"
        );
        let cancelled: Vec<String> = sqlx::query_scalar(AssertSqlSafe(orphans))
            .fetch_all(&self.pool())
            .await?;
        for id in ids.iter().chain(&cancelled) {
            self.announce(id).await;
        }
        moved += (ids.len() + cancelled.len()) as u64;
        Ok(moved)
    }

    /// How long until the earliest deadline of an open task (a claim's lease, a queued task's
    /// schedule-to-start); `None` when no task is open.
    pub async fn next_deadline_in(&self) -> Result<Option<std::time::Duration>> {
        let now = self.now();
        let sql = format!(
            "SELECT MIN(CASE WHEN status = 'claimed' THEN lease_until_ms
                ELSE start_deadline_ms END) - {now} AS due
             FROM tasks WHERE status IN ('queued', 'claimed')"
        );
        let due: Option<i64> = sqlx::query_scalar(AssertSqlSafe(sql))
            .fetch_one(&self.pool())
            .await?;
        Ok(due.map(|ms| std::time::Duration::from_millis(unsigned(ms))))
    }

    async fn lapse_claims(&self) -> Result<u64> {
        let now = self.now();
        let sql = format!(
            "SELECT {COLUMNS} FROM tasks WHERE status = 'claimed' AND lease_until_ms < {now}
             LIMIT 200"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .fetch_all(&self.pool())
            .await?;
        let mut moved = 0;
        for row in &rows {
            let task = task_from_row(row)?;
            if self.lapse(&task).await? {
                moved += 1;
            }
        }
        Ok(moved)
    }

    /// Ends one lapsed claim, unless someone moved the task meanwhile.
    async fn lapse(&self, task: &Task) -> Result<bool> {
        let again = task.attempt < task.max_attempts;
        let now = self.now();
        let (next, error) = match again {
            true => (
                format!(
                    "status = 'queued', worker_id = NULL, lease_until_ms = NULL,
                     not_before_ms = {now} + $4,
                     start_deadline_ms = {now} + $4 + schedule_to_start_ms"
                ),
                TaskError {
                    code: "lease_expired".into(),
                    message: "the worker neither heartbeated nor finished in time".into(),
                },
            ),
            false => (
                format!("status = 'failed', finished_at_ms = {now}, lease_until_ms = NULL"),
                TaskError {
                    code: "tool_timeout".into(),
                    message: format!(
                        "the task's last claim lapsed and its {} attempts are used",
                        task.max_attempts
                    ),
                },
            ),
        };
        let sql = format!(
            "UPDATE tasks SET error = $3, {next}
             WHERE id = $1 AND status = 'claimed' AND attempts = $2 AND lease_until_ms < {now}"
        );
        let mut q = sqlx::query(AssertSqlSafe(sql))
            .bind(&task.id)
            .bind(i64::from(task.attempt))
            .bind(to_json(&error));
        if again {
            q = q.bind(ms(task.policy.backoff_after(task.attempt)));
        }
        let res = q.execute(&self.pool()).await?;
        let moved = res.rows_affected() > 0;
        if moved {
            match again {
                true => self.announce_queued().await,
                false => self.announce(&task.id).await,
            }
        }
        Ok(moved)
    }
}

/// Which of a tenant's tasks to list, newest first.
#[derive(Debug, Default)]
pub struct TaskFilter<'a> {
    pub status: Option<TaskStatus>,
    pub queue: Option<&'a str>,
    pub tool: Option<&'a str>,
    pub run_id: Option<&'a str>,
    pub limit: u32,
    /// After this task of the previous page (its `created_at` in ms, and id).
    pub after: Option<(i64, &'a str)>,
}

/// A worker that polled, as `GET /v1/workers` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SeenWorker {
    pub worker_id: String,
    pub queues: Vec<String>,
    pub tools: Vec<String>,
    pub last_poll_at: DateTime<Utc>,
    /// Tasks it holds now.
    pub in_flight: u64,
}

impl Tasks {
    /// A page of the tenant's tasks, newest first.
    pub async fn list(&self, tenant: &Tenant, filter: &TaskFilter<'_>) -> Result<Vec<Task>> {
        let mut conditions = String::new();
        let mut values: Vec<String> = vec![tenant.0.clone()];
        let mut add = |sql: &str, value: String| {
            values.push(value);
            conditions.push_str(&sql.replace('?', &format!("${}", values.len())));
        };
        if let Some(status) = filter.status {
            add(" AND status = ?", status.as_str().to_owned());
        }
        for (column, value) in [
            ("queue", filter.queue),
            ("tool", filter.tool),
            ("run_id", filter.run_id),
        ] {
            if let Some(v) = value {
                add(&format!(" AND {column} = ?"), v.to_owned());
            }
        }
        let mut q_after = None;
        if let Some((ms, id)) = filter.after {
            values.push(id.to_owned());
            let n = values.len();
            conditions.push_str(&format!(
                " AND (created_at_ms < ${} OR (created_at_ms = ${} AND id < ${n}))",
                n + 1,
                n + 1
            ));
            q_after = Some(ms);
        }
        let limit = values.len() + 1 + usize::from(q_after.is_some());
        let sql = format!(
            "SELECT {COLUMNS} FROM tasks WHERE tenant = $1{conditions}
             ORDER BY created_at_ms DESC, id DESC LIMIT ${limit}"
        );
        let mut q = sqlx::query(AssertSqlSafe(sql));
        for v in values {
            q = q.bind(v);
        }
        if let Some(ms) = q_after {
            q = q.bind(ms);
        }
        let rows = q
            .bind(i64::from(filter.limit))
            .fetch_all(&self.pool())
            .await?;
        rows.iter().map(task_from_row).collect()
    }

    /// The tenant's workers that polled within the last `within_ms`, most recent first, with
    /// the tasks each holds now.
    pub async fn workers(&self, tenant: &Tenant, within_ms: i64) -> Result<Vec<SeenWorker>> {
        let now = self.now();
        let sql = format!(
            "SELECT w.worker_id, w.queue, w.tools, w.last_poll_ms,
                (SELECT COUNT(*) FROM tasks t WHERE t.tenant = w.tenant
                    AND t.worker_id = w.worker_id AND t.queue = w.queue
                    AND t.status = 'claimed') AS in_flight
             FROM task_workers w WHERE w.tenant = $1 AND w.last_poll_ms >= {now} - $2
             ORDER BY w.last_poll_ms DESC, w.worker_id"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(tenant.0.as_str())
            .bind(within_ms)
            .fetch_all(&self.pool())
            .await?;
        let mut seen: Vec<SeenWorker> = Vec::new();
        for r in &rows {
            let id: String = r.try_get("worker_id")?;
            let tools: Vec<String> =
                serde_json::from_str(&r.try_get::<String, _>("tools")?).unwrap_or_default();
            let at = time_of(r.try_get("last_poll_ms")?)?;
            let in_flight = unsigned(r.try_get("in_flight")?);
            let queue: String = r.try_get("queue")?;
            match seen.iter_mut().find(|w| w.worker_id == id) {
                Some(w) => {
                    w.queues.push(queue);
                    for tool in tools {
                        if !w.tools.contains(&tool) {
                            w.tools.push(tool);
                        }
                    }
                    w.in_flight += in_flight;
                }
                None => seen.push(SeenWorker {
                    worker_id: id,
                    queues: vec![queue],
                    tools,
                    last_poll_at: at,
                    in_flight,
                }),
            }
        }
        Ok(seen)
    }

    /// Each tenant's queues: the tasks ready or backing off there and the age of the oldest,
    /// in seconds (the 200 deepest), for `/metrics`. Reads the queued tasks only (an index).
    pub async fn queue_depths(&self) -> Result<Vec<crate::metrics::QueueDepth>> {
        let now = self.now();
        let sql = format!(
            "SELECT tenant, queue, COUNT(*) AS depth, {now} - MIN(created_at_ms) AS oldest
             FROM tasks WHERE status = 'queued' GROUP BY tenant, queue
             ORDER BY depth DESC LIMIT 200"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .fetch_all(&self.pool())
            .await?;
        rows.iter()
            .map(|r| {
                let oldest: i64 = r.try_get("oldest")?;
                Ok(crate::metrics::QueueDepth {
                    tenant: r.try_get("tenant")?,
                    queue: r.try_get("queue")?,
                    depth: unsigned(r.try_get("depth")?),
                    oldest_seconds: oldest.max(0) as f64 / 1000.0,
                })
            })
            .collect()
    }
}

/// The SQL list of terminal run statuses, as stored.
const TERMINAL: &str = "('succeeded', 'failed', 'cancelled', 'timed_out')";

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX / 4)
}

fn unsigned(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn time_of(ms: i64) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms).ok_or_else(|| Error::Corrupt(format!("time {ms} ms")))
}

fn opt_time(ms: Option<i64>) -> Result<Option<DateTime<Utc>>> {
    ms.map(time_of).transpose()
}

pub(super) fn task_from_row(r: &AnyRow) -> Result<Task> {
    let run: String = r.try_get("run_id")?;
    let status: String = r.try_get("status")?;
    let tenant: String = r.try_get("tenant")?;
    let policy = TaskPolicy {
        schedule_to_start_ms: unsigned(r.try_get("schedule_to_start_ms")?),
        start_to_close_ms: unsigned(r.try_get("start_to_close_ms")?),
        heartbeat_ms: r.try_get::<Option<i64>, _>("heartbeat_ms")?.map(unsigned),
        max_attempts: u32::try_from(r.try_get::<i64, _>("max_attempts")?).unwrap_or(1),
        backoff_ms: unsigned(r.try_get("backoff_ms")?),
        max_backoff_ms: unsigned(r.try_get("max_backoff_ms")?),
    };
    Ok(Task {
        id: r.try_get("id")?,
        tenant: Tenant(tenant),
        queue: r.try_get("queue")?,
        tool: r.try_get("tool")?,
        arguments: parse_json(&r.try_get::<String, _>("arguments")?)?,
        idempotency_key: r.try_get("idempotency_key")?,
        status: TaskStatus::parse(&status)
            .ok_or_else(|| Error::Corrupt(format!("task status `{status}`")))?,
        attempt: u32::try_from(r.try_get::<i64, _>("attempts")?).unwrap_or(0),
        max_attempts: policy.max_attempts,
        run_id: RunId::parse(&run).ok_or_else(|| Error::Corrupt(format!("run id `{run}`")))?,
        step_id: r.try_get("step_id")?,
        path: r.try_get("path")?,
        call_id: r.try_get("call_id")?,
        worker_id: r.try_get("worker_id")?,
        heartbeat_ms: policy.heartbeat_ms,
        start_to_close_ms: policy.start_to_close_ms,
        lease_expires_at: opt_time(r.try_get("lease_until_ms")?)?,
        progress: parse_opt_json(r.try_get("progress")?)?,
        output: parse_opt_json(r.try_get("output")?)?,
        error: parse_opt_json(r.try_get("error")?)?,
        created_at: time_of(r.try_get("created_at_ms")?)?,
        claimed_at: opt_time(r.try_get("claimed_at_ms")?)?,
        finished_at: opt_time(r.try_get("finished_at_ms")?)?,
        policy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    async fn tasks() -> Tasks {
        let name = uuid::Uuid::now_v7().simple();
        let url = format!("sqlite:file:orca-tasks-{name}?mode=memory&cache=shared");
        Tasks::new(Store::connect(&url, 2).await.unwrap())
    }

    fn call(run: RunId, arguments: Value) -> NewTask {
        NewTask {
            tenant: Tenant("t1".into()),
            queue: "q".into(),
            tool: "w.tool".into(),
            run_id: run,
            step_id: "s".into(),
            path: Some("outer".into()),
            call_id: "c".into(),
            arguments,
            policy: TaskPolicy {
                schedule_to_start_ms: 60_000,
                start_to_close_ms: 60_000,
                heartbeat_ms: None,
                max_attempts: 2,
                backoff_ms: 0,
                max_backoff_ms: 0,
            },
        }
    }

    fn poll<'a>(tenant: &'a Tenant, worker: &'a str) -> Poll<'a> {
        Poll {
            tenant,
            worker_id: worker,
            queue: "q",
            tools: &[],
            max_tasks: 10,
        }
    }

    fn refused<T: std::fmt::Debug>(r: Reported<T>) -> Refusal {
        match r {
            Reported::Refused(why) => why,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_call_finds_its_task_again_until_it_fails() {
        let tasks = tasks().await;
        let run = RunId::new();
        let first = tasks.open(&call(run, json!({"a": 1}))).await.unwrap();
        let again = tasks.open(&call(run, json!({"a": 1}))).await.unwrap();
        assert_eq!(
            again.id, first.id,
            "a resumed run waits on the task it queued"
        );
        assert!(first.idempotency_key.ends_with("/outer/s/c/0"), "{first:?}");
        let other = tasks.open(&call(run, json!({"a": 2}))).await.unwrap();
        assert_ne!(other.id, first.id, "other arguments are another call");
        let t1 = Tenant("t1".into());
        let claimed = tasks.claim(&poll(&t1, "w")).await.unwrap();
        assert_eq!(claimed.len(), 2);
        let boom = TaskError {
            code: "boom".into(),
            message: "no".into(),
        };
        let failed = tasks.fail(&t1, &first.id, "w", &boom, Retry::Never).await;
        assert!(matches!(failed.unwrap(), Reported::Done(t) if t.status == TaskStatus::Failed));
        let retried = tasks.open(&call(run, json!({"a": 1}))).await.unwrap();
        assert_ne!(retried.id, first.id, "a retried step queues anew");
        assert!(retried.idempotency_key.ends_with("/c/1"), "{retried:?}");
    }

    #[tokio::test]
    async fn a_completion_is_accepted_once_and_only_from_its_worker() {
        let tasks = tasks().await;
        let task = tasks.open(&call(RunId::new(), json!({}))).await.unwrap();
        let (t1, t2) = (Tenant("t1".into()), Tenant("t2".into()));
        assert!(tasks.claim(&poll(&t2, "x")).await.unwrap().is_empty());
        let claimed = tasks.claim(&poll(&t1, "w")).await.unwrap();
        assert_eq!((claimed.len(), claimed[0].attempt), (1, 1));
        assert!(tasks.claim(&poll(&t1, "v")).await.unwrap().is_empty());
        let theirs = tasks.complete(&t1, &task.id, "v", &json!(1)).await.unwrap();
        assert_eq!(refused(theirs), Refusal::NotYours);
        let other_tenant = tasks.complete(&t2, &task.id, "w", &json!(1)).await.unwrap();
        assert!(matches!(other_tenant, Reported::Unknown));
        let done = tasks.complete(&t1, &task.id, "w", &json!({"ok": 1})).await;
        assert!(matches!(done.unwrap(), Reported::Done(t) if t.output == Some(json!({"ok": 1}))));
        let twice = tasks.complete(&t1, &task.id, "w", &json!(2)).await.unwrap();
        assert_eq!(refused(twice), Refusal::Finished);
        let stored = tasks.get(&task.id).await.unwrap().unwrap();
        assert_eq!(
            stored.output,
            Some(json!({"ok": 1})),
            "a refusal changes nothing"
        );
    }

    #[tokio::test]
    async fn a_lapsed_claim_is_offered_again_then_fails_out_of_attempts() {
        let tasks = tasks().await;
        let task = tasks.open(&call(RunId::new(), json!({}))).await.unwrap();
        let t1 = Tenant("t1".into());
        let lapse = async || {
            sqlx::query("UPDATE tasks SET lease_until_ms = 0")
                .execute(&tasks.pool())
                .await
                .unwrap();
            tasks.sweep().await.unwrap()
        };
        tasks.claim(&poll(&t1, "w")).await.unwrap();
        assert_eq!(lapse().await, 1);
        let late = tasks.complete(&t1, &task.id, "w", &json!(1)).await.unwrap();
        assert_eq!(refused(late), Refusal::LeaseExpired);
        let again = tasks.claim(&poll(&t1, "v")).await.unwrap();
        assert_eq!((again.len(), again[0].attempt), (1, 2));
        assert_eq!(again[0].idempotency_key, task.idempotency_key);
        assert_eq!(lapse().await, 1);
        let ended = tasks.get(&task.id).await.unwrap().unwrap();
        assert_eq!(ended.status, TaskStatus::Failed);
        assert_eq!(ended.error.unwrap().code, "tool_timeout");
    }

    #[tokio::test]
    async fn a_cancelled_task_refuses_its_worker() {
        let tasks = tasks().await;
        let task = tasks.open(&call(RunId::new(), json!({}))).await.unwrap();
        let t1 = Tenant("t1".into());
        tasks.claim(&poll(&t1, "w")).await.unwrap();
        let beat = tasks
            .heartbeat(&t1, &task.id, "w", Some(&json!("half")))
            .await;
        assert!(matches!(beat.unwrap(), Reported::Done(t) if t.progress == Some(json!("half"))));
        assert!(tasks.cancel(&task.id).await.unwrap());
        assert!(!tasks.cancel(&task.id).await.unwrap(), "once");
        let beat = tasks.heartbeat(&t1, &task.id, "w", None).await.unwrap();
        assert_eq!(refused(beat), Refusal::Cancelled);
        let retry = TaskError {
            code: "x".into(),
            message: "x".into(),
        };
        let fail = tasks.fail(&t1, &task.id, "w", &retry, Retry::Allowed).await;
        assert_eq!(refused(fail.unwrap()), Refusal::Cancelled);
    }
}
