//! Completion webhook deliveries: one per run that names a webhook, written with the run's row
//! (so an acknowledged run never loses its webhook), then claimed attempt by attempt once the
//! run has ended. Times a replica compares are the database's clock, as leases' are. Like the
//! rest of the store, this module only persists: sending and signing are `workers::webhooks`'.
//!
//! An attempt is written before it is sent: the claim that takes it records it as `sending`
//! in the same transaction, and `settle` writes what came of it. One that a crash cut off
//! (its replica died holding it) is marked `interrupted` by the claim of the next, so the
//! history lists every request a receiver may have got.

use chrono::{DateTime, Utc};
use sqlx::Row;

use super::statement::{Statement, Text};
use super::{Result, Store, fmt_time, parse_opt_time, parse_time};
use crate::domain::text_enum::text_enum;
use crate::domain::{RunId, Tenant};

/// The statement that queues a new run's delivery, in the transaction that inserts the run:
/// it inserts only when the run's row is there (an idempotent repeat inserts neither).
pub(super) fn enqueue(tenant: &Tenant, run: RunId, url: &str, at: DateTime<Utc>) -> Statement {
    Statement {
        text: Text::One(
            "INSERT INTO webhook_deliveries (run_id, tenant, url, state, attempts,
                next_attempt_at, created_at, destination)
             SELECT $1, $2, $3, 'pending', 0, 0, $4, $7 WHERE EXISTS
                (SELECT 1 FROM runs WHERE id = $5 AND tenant = $6)"
                .into(),
        ),
        params: vec![
            run.to_string().into(),
            tenant.0.as_str().into(),
            url.into(),
            fmt_time(at).into(),
            run.to_string().into(),
            tenant.0.as_str().into(),
            destination_of(url).into(),
        ],
    }
}

/// Where a URL connects, as the per-destination cap counts it: `host:port` (the scheme's port
/// when none is written); the URL itself when it does not parse.
pub fn destination_of(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => format!(
            "{}:{}",
            u.host_str().unwrap_or_default(),
            u.port_or_known_default().unwrap_or(0)
        ),
        Err(_) => url.to_owned(),
    }
}

/// A delivery whose run has ended and whose next attempt is due.
#[derive(Debug, Clone)]
pub struct DueDelivery {
    pub run_id: RunId,
    pub tenant: Tenant,
    pub url: String,
    /// Its URL's `host:port` ([`destination_of`]).
    pub destination: String,
    /// Attempts made so far.
    pub attempts: u32,
    /// Its `next_attempt_at`, which a claim compares and sets.
    pub due_at: i64,
}

/// A run's delivery as the API shows it.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub url: String,
    /// `pending`, `delivered` or `failed`.
    pub state: String,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub attempts: Vec<DeliveryAttempt>,
}

/// One attempt: the answer's status, or why there was none.
#[derive(Debug, Clone)]
pub struct DeliveryAttempt {
    pub attempt: u32,
    pub at: DateTime<Utc>,
    pub outcome: AttemptOutcome,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: u64,
}

text_enum! {
    /// What came of one attempt.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum AttemptOutcome {
        /// Recorded and being sent: no answer yet.
        Sending = "sending",
        /// A 2xx answer.
        Delivered = "delivered",
        /// Another answer, a timeout or a connection failure.
        Failed = "failed",
        /// The destination policy refused the address: nothing was sent.
        Refused = "refused",
        /// The replica sending it stopped before it recorded an answer: the receiver may or may
        /// not have got it.
        Interrupted = "interrupted",
    }
}

impl AttemptOutcome {
    /// A stored outcome; another word means the row is corrupt.
    fn stored(s: &str) -> Result<AttemptOutcome> {
        AttemptOutcome::parse(s)
            .ok_or_else(|| super::Error::Corrupt(format!("attempt outcome `{s}`")))
    }
}

/// What an attempt cut off by its replica's end says.
const INTERRUPTED: &str =
    "the replica sending it stopped before an answer was recorded; the receiver may have got it";

/// Tenants and destinations whose caps are reached on this replica: `Webhooks::due` leaves
/// their deliveries out, so they cannot fill a batch.
#[derive(Debug, Default)]
pub struct AtCap {
    pub tenants: Vec<String>,
    pub destinations: Vec<String>,
}

/// The deliveries' handle.
#[derive(Clone)]
pub struct Webhooks(Store);

impl Webhooks {
    pub fn new(store: Store) -> Self {
        Webhooks(store)
    }

    /// Up to `limit` deliveries due now whose runs have ended, tenant by tenant in turn (each
    /// tenant's longest waiting first, then every tenant's second, …), so that one tenant's
    /// backlog cannot fill a batch; the tenants and destinations of `at_cap` are left out.
    pub async fn due(&self, limit: u32, at_cap: &AtCap) -> Result<Vec<DueDelivery>> {
        let mut n = 1;
        let mut list = |values: &[String]| {
            let marks: Vec<String> = values
                .iter()
                .map(|_| {
                    n += 1;
                    format!("${n}")
                })
                .collect();
            marks.join(", ")
        };
        let mut filter = String::new();
        if !at_cap.tenants.is_empty() {
            filter += &format!(" AND d.tenant NOT IN ({})", list(&at_cap.tenants));
        }
        if !at_cap.destinations.is_empty() {
            filter += &format!(
                " AND (d.destination IS NULL OR d.destination NOT IN ({}))",
                list(&at_cap.destinations)
            );
        }
        let sql = format!(
            "SELECT run_id, tenant, url, destination, attempts, next_attempt_at FROM (
                SELECT d.run_id, d.tenant, d.url, d.destination, d.attempts, d.next_attempt_at,
                    ROW_NUMBER() OVER (PARTITION BY d.tenant
                                       ORDER BY d.next_attempt_at, d.run_id) AS turn
                FROM webhook_deliveries d JOIN runs r ON r.id = d.run_id
                WHERE d.state = 'pending' AND d.next_attempt_at <= {}
                  AND r.status IN ('succeeded', 'failed', 'cancelled', 'timed_out'){filter}
             ) due ORDER BY turn, next_attempt_at, run_id LIMIT $1",
            self.0.backend.now_ms_sql()
        );
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(i64::from(limit));
        for value in at_cap.tenants.iter().chain(&at_cap.destinations) {
            query = query.bind(value.clone());
        }
        let rows = query.fetch_all(&self.0.pool()).await?;
        rows.iter()
            .map(|r| {
                let id: String = r.try_get("run_id")?;
                let url: String = r.try_get("url")?;
                let destination: Option<String> = r.try_get("destination")?;
                Ok(DueDelivery {
                    run_id: RunId::parse(&id)
                        .ok_or_else(|| super::Error::Corrupt(format!("run id `{id}`")))?,
                    tenant: Tenant(r.try_get("tenant")?),
                    destination: destination.unwrap_or_else(|| destination_of(&url)),
                    url,
                    attempts: r.try_get::<i64, _>("attempts")? as u32,
                    due_at: r.try_get("next_attempt_at")?,
                })
            })
            .collect()
    }

    /// Milliseconds until the earliest retry of a delivery that has had an attempt (by the
    /// database's clock; negative when one is overdue).
    pub async fn next_retry_in_ms(&self) -> Result<Option<i64>> {
        let sql = format!(
            "SELECT MIN(next_attempt_at) - {} FROM webhook_deliveries
             WHERE state = 'pending' AND attempts > 0",
            self.0.backend.now_ms_sql()
        );
        let next: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(&self.0.pool())
            .await?;
        Ok(next)
    }

    /// Claims the next attempt of `d` for `hold_ms` (no other replica sends it meanwhile) and
    /// records it as `sending` at `at`, before anything is sent; an earlier attempt still
    /// `sending` was cut off by its replica's end and is marked `interrupted`. False if
    /// another replica claimed it first.
    pub async fn claim(&self, d: &DueDelivery, hold_ms: i64, at: DateTime<Utc>) -> Result<bool> {
        let mut tx = self.0.pool().begin().await?;
        let sql = format!(
            "UPDATE webhook_deliveries SET attempts = attempts + 1, next_attempt_at = {} + $1
             WHERE run_id = $2 AND state = 'pending' AND next_attempt_at = $3",
            self.0.backend.now_ms_sql()
        );
        let res = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(hold_ms)
            .bind(d.run_id.to_string())
            .bind(d.due_at)
            .execute(&mut *tx)
            .await?;
        if res.rows_affected() != 1 {
            return Ok(false);
        }
        mark_interrupted(&mut tx, d.run_id).await?;
        sqlx::query(
            "INSERT INTO webhook_attempts (run_id, attempt, at, status_code, error, duration_ms,
                outcome)
             VALUES ($1, $2, $3, NULL, NULL, 0, 'sending') ON CONFLICT DO NOTHING",
        )
        .bind(d.run_id.to_string())
        .bind(i64::from(d.attempts + 1))
        .bind(fmt_time(at))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Gives `d` up without another attempt: its last one was cut off by its replica's end
    /// (marked `interrupted`). False if another replica took it first.
    pub async fn abandon(&self, d: &DueDelivery, at: DateTime<Utc>) -> Result<bool> {
        let mut tx = self.0.pool().begin().await?;
        let res = sqlx::query(
            "UPDATE webhook_deliveries SET state = 'failed', finished_at = $1
             WHERE run_id = $2 AND state = 'pending' AND next_attempt_at = $3",
        )
        .bind(fmt_time(at))
        .bind(d.run_id.to_string())
        .bind(d.due_at)
        .execute(&mut *tx)
        .await?;
        if res.rows_affected() != 1 {
            return Ok(false);
        }
        mark_interrupted(&mut tx, d.run_id).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Records what came of attempt `a` of the run's delivery and what follows: delivered,
    /// failed for good, or another attempt `retry_in_ms` from now. The delivery moves on only
    /// if no later attempt was claimed meanwhile (this one outlasted its hold).
    pub async fn settle(&self, run: RunId, a: &DeliveryAttempt, outcome: Outcome) -> Result<()> {
        let mut tx = self.0.pool().begin().await?;
        sqlx::query(
            "UPDATE webhook_attempts SET outcome = $1, status_code = $2, error = $3,
                duration_ms = $4
             WHERE run_id = $5 AND attempt = $6",
        )
        .bind(a.outcome.as_str())
        .bind(a.status_code.map(i64::from))
        .bind(a.error.as_deref())
        .bind(a.duration_ms as i64)
        .bind(run.to_string())
        .bind(i64::from(a.attempt))
        .execute(&mut *tx)
        .await?;
        let (state, retry_in_ms, finished) = match outcome {
            Outcome::Delivered => ("delivered", 0, Some(fmt_time(a.at))),
            Outcome::Failed => ("failed", 0, Some(fmt_time(a.at))),
            Outcome::Retry { in_ms } => ("pending", in_ms, None),
        };
        let sql = format!(
            "UPDATE webhook_deliveries SET state = $1, next_attempt_at = {} + $2,
                finished_at = $3
             WHERE run_id = $4 AND attempts = $5",
            self.0.backend.now_ms_sql()
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(state)
            .bind(retry_in_ms)
            .bind(finished)
            .bind(run.to_string())
            .bind(i64::from(a.attempt))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The tenant's run's delivery with every attempt, oldest first.
    pub async fn delivery(&self, tenant: &Tenant, run: RunId) -> Result<Option<Delivery>> {
        let Some(row) =
            sqlx::query("SELECT * FROM webhook_deliveries WHERE run_id = $1 AND tenant = $2")
                .bind(run.to_string())
                .bind(&tenant.0)
                .fetch_optional(&self.0.pool())
                .await?
        else {
            return Ok(None);
        };
        let attempts =
            sqlx::query("SELECT * FROM webhook_attempts WHERE run_id = $1 ORDER BY attempt")
                .bind(run.to_string())
                .fetch_all(&self.0.pool())
                .await?;
        let attempts = attempts
            .iter()
            .map(|r| {
                Ok(DeliveryAttempt {
                    attempt: r.try_get::<i64, _>("attempt")? as u32,
                    at: parse_time(&r.try_get::<String, _>("at")?)?,
                    outcome: AttemptOutcome::stored(&r.try_get::<String, _>("outcome")?)?,
                    status_code: r
                        .try_get::<Option<i64>, _>("status_code")?
                        .map(|c| c as u16),
                    error: r.try_get("error")?,
                    duration_ms: r.try_get::<i64, _>("duration_ms")? as u64,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Some(Delivery {
            url: row.try_get("url")?,
            state: row.try_get("state")?,
            created_at: parse_time(&row.try_get::<String, _>("created_at")?)?,
            finished_at: parse_opt_time(row.try_get("finished_at")?)?,
            attempts,
        }))
    }
}

/// Marks the run's attempts still `sending` as `interrupted`: in the transaction of a claim
/// (or give-up) that took the delivery on after their hold ran out.
async fn mark_interrupted(tx: &mut sqlx::Transaction<'_, sqlx::Any>, run: RunId) -> Result<()> {
    sqlx::query(
        "UPDATE webhook_attempts SET outcome = 'interrupted', error = $1
         WHERE run_id = $2 AND outcome = 'sending'",
    )
    .bind(INTERRUPTED)
    .bind(run.to_string())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// What an attempt leads to.
pub enum Outcome {
    Delivered,
    /// Given up: the last attempt, or a destination that is refused.
    Failed,
    Retry {
        in_ms: i64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_attempt_is_claimed_once_however_many_replicas_saw_it_due() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("orca.db").display());
        let store = Store::connect(&url, 2).await.unwrap();
        let hooks = Webhooks::new(store.clone());
        let (tenant, run) = (Tenant("a".into()), RunId::new());
        let seen = DueDelivery {
            run_id: run,
            tenant: tenant.clone(),
            url: "https://example.com/hook".into(),
            destination: destination_of("https://example.com/hook"),
            attempts: 0,
            due_at: 0,
        };
        sqlx::query(
            "INSERT INTO webhook_deliveries (run_id, tenant, url, state, created_at)
             VALUES ($1, 'a', 'https://example.com/hook', 'pending', $2)",
        )
        .bind(run.to_string())
        .bind(fmt_time(crate::domain::now()))
        .execute(&store.pool())
        .await
        .unwrap();
        // Two replicas read the same due row; only the first claim takes it, and records the
        // attempt before it is sent.
        let now = crate::domain::now();
        assert!(hooks.claim(&seen, 10_000, now).await.unwrap());
        assert!(!hooks.claim(&seen, 10_000, now).await.unwrap());
        let d = hooks.delivery(&tenant, run).await.unwrap().unwrap();
        let outcomes: Vec<_> = d.attempts.iter().map(|a| a.outcome).collect();
        assert_eq!(outcomes, [AttemptOutcome::Sending]);
        let attempt = DeliveryAttempt {
            attempt: 1,
            at: crate::domain::now(),
            outcome: AttemptOutcome::Failed,
            status_code: Some(503),
            error: Some("answered 503".into()),
            duration_ms: 3,
        };
        hooks
            .settle(run, &attempt, Outcome::Retry { in_ms: 0 })
            .await
            .unwrap();
        let d = hooks.delivery(&tenant, run).await.unwrap().unwrap();
        assert_eq!((d.state.as_str(), d.attempts.len()), ("pending", 1));
        assert!(
            hooks
                .delivery(&Tenant("b".into()), run)
                .await
                .unwrap()
                .is_none()
        );
    }
}
