//! Deleting runs with everything they own. Which runs to delete (finished, old enough, the
//! caller's) is decided by the callers: `workers::retention` and `DELETE /v1/runs/{id}`.
//!
//! Every table that holds rows of a run is listed once, in [`RUN_TABLES`]; a test checks the
//! list against the migrated schema, so a new table keyed by `run_id` cannot be forgotten.

use chrono::{DateTime, Utc};
use sqlx::AssertSqlSafe;

use super::{Result, Store, fmt_time};
use crate::domain::RunId;

/// Every table with a `run_id` column, i.e. everything a run owns besides its `runs` row.
pub const RUN_TABLES: &[&str] = &[
    "events",
    "step_attempts",
    "plans",
    "checkpoints",
    "input_answers",
    "replan_requests",
    // A schedule's record of the run a tick started goes with the run.
    "schedule_fires",
    "webhook_deliveries",
    "webhook_attempts",
    // A worker tool's tasks go with the run that queued them.
    "tasks",
];

/// The SQL list of terminal statuses, as stored.
const TERMINAL: &str = "('succeeded', 'failed', 'cancelled', 'timed_out')";

impl Store {
    /// Up to `limit` finished runs (of any tenant) that finished before `cutoff`, the oldest
    /// first.
    pub async fn runs_finished_before(
        &self,
        cutoff: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<RunId>> {
        // Only a static fragment is spliced in; every value is a bind parameter.
        let sql = format!(
            "SELECT id FROM runs
             WHERE finished_at IS NOT NULL AND finished_at < $1 AND status IN {TERMINAL}
             ORDER BY finished_at, id LIMIT $2"
        );
        let ids: Vec<String> = sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(fmt_time(cutoff))
            .bind(limit as i64)
            .fetch_all(&self.pool())
            .await?;
        ids.iter()
            .map(|id| {
                RunId::parse(id).ok_or_else(|| super::Error::Corrupt(format!("run id `{id}`")))
            })
            .collect()
    }

    /// Deletes the runs and every row they own ([`RUN_TABLES`]) in one transaction. Returns
    /// how many runs were deleted (ids already gone are skipped). Keep `ids` short: the
    /// transaction holds the database's write lock until it commits.
    pub async fn delete_runs(&self, ids: &[RunId]) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let mut tx = self.pool().begin().await?;
        // One transaction: a reader sees the run with all its history or none of it.
        for table in RUN_TABLES {
            delete_where_in(table, "run_id", ids)
                .execute(&mut *tx)
                .await?;
        }
        let deleted = delete_where_in("runs", "id", ids).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(deleted.rows_affected())
    }
}

/// `DELETE FROM table WHERE column IN (ids...)`. Table and column names come from this
/// module's constants, never from input; the ids are bound.
fn delete_where_in<'q>(
    table: &str,
    column: &str,
    ids: &[RunId],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments> {
    let list = (1..=ids.len())
        .map(|n| format!("${n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut q = sqlx::query(AssertSqlSafe(format!(
        "DELETE FROM {table} WHERE {column} IN ({list})"
    )));
    for id in ids {
        q = q.bind(id.to_string());
    }
    q
}
