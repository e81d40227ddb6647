//! A run's plan versions, checkpoints, re-plan requests and answers to human input.
//!
//! Plans and checkpoints are append-only per run: the engine writes them, the API reads them
//! back. Like the rest of the store, this module only persists.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::Row;
use sqlx::any::AnyRow;
use utoipa::ToSchema;

use super::{Result, Store, fmt_time, parse_json, parse_opt_json, parse_time, to_json};
use crate::domain::replan::{PlanChange, PlanDiff, Strategy, Trigger};
use crate::domain::{RunId, StepPath};

/// One version of a run's plan and why it was made.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct PlanRecord {
    pub version: u32,
    /// `initial`, or what triggered the replan (the trigger's kind).
    pub reason: String,
    #[schema(value_type = Object)]
    pub plan: std::sync::Arc<Value>,
    /// What made this version (`null` for the first).
    pub trigger: Option<Trigger>,
    /// The re-planner's strategy (`null` for the first version).
    pub strategy: Option<Strategy>,
    /// What the re-planner said of its choice.
    pub explanation: Option<String>,
    /// The difference from the version before (`null` for the first).
    pub diff: Option<PlanDiff>,
    /// For `restore`: the version gone back to.
    pub restored_version: Option<u32>,
    /// The re-planner's word on whether this version still does the whole task (`null` for
    /// the first).
    pub completes_task: Option<bool>,
    pub created_at: DateTime<Utc>,
}

impl PlanRecord {
    /// How the version came to be, as it was stored (`None` for a first version).
    pub fn change(&self) -> Option<PlanChange> {
        match (&self.trigger, self.strategy, &self.diff) {
            (Some(trigger), Some(strategy), Some(diff)) => Some(PlanChange {
                trigger: trigger.clone(),
                strategy,
                explanation: self.explanation.clone().unwrap_or_default(),
                diff: diff.clone(),
                restored_version: self.restored_version,
                completes_task: self.completes_task.unwrap_or(true),
            }),
            _ => None,
        }
    }

    /// A version as stored: `change` says how a version after the first came to be.
    pub fn new(
        version: u32,
        reason: String,
        plan: std::sync::Arc<Value>,
        change: Option<PlanChange>,
        created_at: DateTime<Utc>,
    ) -> PlanRecord {
        let completes_task = change.as_ref().map(|c| c.completes_task);
        let (trigger, strategy, explanation, diff, restored_version) = match change {
            Some(c) => (
                Some(c.trigger),
                Some(c.strategy),
                Some(c.explanation),
                Some(c.diff),
                c.restored_version,
            ),
            None => (None, None, None, None, None),
        };
        PlanRecord {
            version,
            reason,
            plan,
            trigger,
            strategy,
            explanation,
            diff,
            restored_version,
            completes_task,
            created_at,
        }
    }
}

/// A snapshot of a run's progress, from which it resumes after a stop or a crash.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Checkpoint {
    /// 1 for a run's first checkpoint, rising by one.
    pub id: u64,
    pub plan_version: u32,
    #[schema(value_type = Object)]
    pub state: Value,
    pub created_at: DateTime<Utc>,
}

/// A user's request for a new plan version (`POST /v1/runs/{id}/replan`).
#[derive(Debug, Clone, PartialEq)]
pub struct ReplanRequest {
    /// 1 for a run's first request, rising by one.
    pub seq: u64,
    pub message: String,
    /// The earlier version the user asked to go back to; `None` asks the re-planner.
    pub restore_version: Option<u32>,
}

impl Store {
    // ---- plans --------------------------------------------------------------------------

    pub async fn insert_plan(
        &self,
        run: RunId,
        version: u32,
        reason: &str,
        plan: &Value,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO plans (run_id, version, reason, plan, created_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(run.to_string())
        .bind(version as i64)
        .bind(reason)
        .bind(to_json(plan))
        .bind(fmt_time(Utc::now()))
        .execute(&self.pool())
        .await?;
        Ok(())
    }

    /// Every plan version of a run, oldest first.
    pub async fn list_plans(&self, run: RunId) -> Result<Vec<PlanRecord>> {
        let rows = sqlx::query("SELECT * FROM plans WHERE run_id = $1 ORDER BY version")
            .bind(run.to_string())
            .fetch_all(&self.pool())
            .await?;
        rows.iter()
            .map(|r| {
                Ok(PlanRecord::new(
                    r.try_get::<i64, _>("version")? as u32,
                    r.try_get("reason")?,
                    std::sync::Arc::new(parse_json(&r.try_get::<String, _>("plan")?)?),
                    parse_opt_json(r.try_get("change")?)?,
                    parse_time(&r.try_get::<String, _>("created_at")?)?,
                ))
            })
            .collect()
    }

    // ---- the user's requests for a new plan -----------------------------------------------

    /// Stores a request for a new plan, in its own transaction (the API acknowledges it only
    /// once this returned); its number among the run's requests, from 1.
    pub async fn save_replan_request(
        &self,
        run: RunId,
        message: &str,
        restore_version: Option<u32>,
    ) -> Result<u64> {
        let pool = self.pool();
        next_numbered(|| {
            sqlx::query_scalar(
                "INSERT INTO replan_requests (run_id, seq, message, created_at, restore_version)
                 SELECT $1, COALESCE(MAX(seq), 0) + 1, $2, $3, $4 FROM replan_requests
                 WHERE run_id = $1
                 RETURNING seq",
            )
            .bind(run.to_string())
            .bind(message)
            .bind(fmt_time(Utc::now()))
            .bind(restore_version.map(i64::from))
            .fetch_one(&pool)
        })
        .await
    }

    /// The run's requests for a new plan numbered after `after`, oldest first.
    pub async fn replan_requests_after(
        &self,
        run: RunId,
        after: u64,
    ) -> Result<Vec<ReplanRequest>> {
        let rows = sqlx::query(
            "SELECT seq, message, restore_version FROM replan_requests
             WHERE run_id = $1 AND seq > $2 ORDER BY seq",
        )
        .bind(run.to_string())
        .bind(after as i64)
        .fetch_all(&self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(ReplanRequest {
                    seq: r.try_get::<i64, _>("seq")? as u64,
                    message: r.try_get("message")?,
                    restore_version: r
                        .try_get::<Option<i64>, _>("restore_version")?
                        .and_then(|v| u32::try_from(v).ok()),
                })
            })
            .collect()
    }

    // ---- answers to user_input steps ------------------------------------------------------

    /// Stores the answer to the `user_input` step at `step`, in its own
    /// transaction: the API acknowledges an answer only once this returned.
    pub async fn save_answer(&self, run: RunId, step: &StepPath, value: &Value) -> Result<()> {
        sqlx::query(
            "INSERT INTO input_answers (run_id, step_key, value, answered_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (run_id, step_key) DO UPDATE SET
                value = excluded.value, answered_at = excluded.answered_at",
        )
        .bind(run.to_string())
        .bind(step.as_str())
        .bind(to_json(value))
        .bind(fmt_time(Utc::now()))
        .execute(&self.pool())
        .await?;
        Ok(())
    }

    /// Stores the answer to the step at `step` unless it has one already; true when this
    /// one was stored. Answers given through a replica that does not run the run: of two
    /// given at once through two replicas, exactly one is taken.
    pub async fn save_first_answer(
        &self,
        run: RunId,
        step: &StepPath,
        value: &Value,
    ) -> Result<bool> {
        let res = sqlx::query(
            "INSERT INTO input_answers (run_id, step_key, value, answered_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (run_id, step_key) DO NOTHING",
        )
        .bind(run.to_string())
        .bind(step.as_str())
        .bind(to_json(value))
        .bind(fmt_time(Utc::now()))
        .execute(&self.pool())
        .await?;
        Ok(res.rows_affected() == 1)
    }

    /// The run's last `input_required` event: what it waits for while it is `waiting_input`.
    pub async fn last_input_request(&self, run: RunId) -> Result<Option<crate::domain::Event>> {
        let row = sqlx::query(
            "SELECT * FROM events WHERE run_id = $1 AND kind = 'input_required'
             ORDER BY seq DESC LIMIT 1",
        )
        .bind(run.to_string())
        .fetch_optional(&self.pool())
        .await?;
        row.map(|r| super::event_from_row(run, &r)).transpose()
    }

    /// The stored answer to the `user_input` step at `step`, if it has one.
    pub async fn answer_for(&self, run: RunId, step: &StepPath) -> Result<Option<Value>> {
        let text: Option<String> = sqlx::query_scalar(
            "SELECT value FROM input_answers WHERE run_id = $1 AND step_key = $2",
        )
        .bind(run.to_string())
        .bind(step.as_str())
        .fetch_optional(&self.pool())
        .await?;
        text.map(|t| parse_json(&t)).transpose()
    }

    // ---- checkpoints --------------------------------------------------------------------

    /// Stores a checkpoint and returns its id (the run's next, from 1).
    pub async fn insert_checkpoint(
        &self,
        run: RunId,
        plan_version: u32,
        state: &Value,
    ) -> Result<u64> {
        let pool = self.pool();
        next_numbered(|| {
            sqlx::query_scalar(
                "INSERT INTO checkpoints (run_id, id, plan_version, state, created_at)
                 SELECT $1, COALESCE(MAX(id), 0) + 1, $2, $3, $4 FROM checkpoints
                 WHERE run_id = $1
                 RETURNING id",
            )
            .bind(run.to_string())
            .bind(plan_version as i64)
            .bind(to_json(state))
            .bind(fmt_time(Utc::now()))
            .fetch_one(&pool)
        })
        .await
    }

    /// A run's checkpoints, oldest first.
    pub async fn list_checkpoints(&self, run: RunId) -> Result<Vec<Checkpoint>> {
        let rows = sqlx::query("SELECT * FROM checkpoints WHERE run_id = $1 ORDER BY id")
            .bind(run.to_string())
            .fetch_all(&self.pool())
            .await?;
        rows.iter().map(checkpoint_from_row).collect()
    }

    /// At most `limit` of a run's checkpoints with an id above `after`, oldest first.
    pub async fn checkpoints_after(
        &self,
        run: RunId,
        after: u64,
        limit: u32,
    ) -> Result<Vec<Checkpoint>> {
        // Ids above i64::MAX cannot exist; clamping keeps a huge `after` from wrapping.
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let rows = sqlx::query(
            "SELECT * FROM checkpoints WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT $3",
        )
        .bind(run.to_string())
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool())
        .await?;
        rows.iter().map(checkpoint_from_row).collect()
    }

    /// The checkpoint a resumed run starts from.
    pub async fn latest_checkpoint(&self, run: RunId) -> Result<Option<Checkpoint>> {
        let row =
            sqlx::query("SELECT * FROM checkpoints WHERE run_id = $1 ORDER BY id DESC LIMIT 1")
                .bind(run.to_string())
                .fetch_optional(&self.pool())
                .await?;
        row.as_ref().map(checkpoint_from_row).transpose()
    }
}

fn checkpoint_from_row(r: &AnyRow) -> Result<Checkpoint> {
    Ok(Checkpoint {
        id: r.try_get::<i64, _>("id")? as u64,
        plan_version: r.try_get::<i64, _>("plan_version")? as u32,
        state: parse_json(&r.try_get::<String, _>("state")?)?,
        created_at: parse_time(&r.try_get::<String, _>("created_at")?)?,
    })
}

/// Runs `insert`, one statement that numbers a run's new row as the run's highest number + 1
/// and returns it. SQLite runs it under the write lock, so two writers never read the same
/// highest number. PostgreSQL (read committed) lets two read it at once: the second to commit
/// hits the primary key, and takes the next number on its next try.
async fn next_numbered<F, Fut>(mut insert: F) -> Result<u64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<i64, sqlx::Error>>,
{
    let mut tries = 0;
    loop {
        tries += 1;
        match insert().await {
            Ok(n) => return Ok(n as u64),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() && tries < 64 => {}
            Err(e) => return Err(e.into()),
        }
    }
}
