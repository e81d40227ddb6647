//! Schedules and their fires. A schedule row is what its API shows; the firing loop reads
//! the due ones of every tenant and claims a tick with [`Store::advance_schedule`], a
//! compare-and-set on `next_fire_at`, so replicas that see the same tick move it on once.
//! Like the rest of the store, this module only persists: when to fire is
//! `domain::schedule`'s rule.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use super::{Error, Result, Store, fmt_time, parse_json, parse_opt_time, parse_time, to_json};
use crate::domain::Tenant;
use crate::domain::schedule::{Missed, Problems, Timing};

/// A stored schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleRecord {
    pub id: String,
    pub tenant: Tenant,
    pub name: Option<String>,
    /// A cron expression; `None` for an interval schedule.
    pub cron: Option<String>,
    /// The IANA zone a cron expression is read in (`UTC` for interval schedules).
    pub timezone: String,
    pub interval_ms: Option<u64>,
    /// What interval ticks count from: when the timing was last set or the schedule enabled.
    pub anchor_at: DateTime<Utc>,
    /// The run body each tick starts, as `POST /v1/runs` takes it (checked when stored).
    pub run: Value,
    pub enabled: bool,
    pub missed: Missed,
    /// The next tick; `None` once a timing has no tick left.
    pub next_fire_at: Option<DateTime<Utc>>,
    pub last_fire_at: Option<DateTime<Utc>>,
    pub last_run_id: Option<String>,
    /// Ticks that started a run.
    pub fire_count: u64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// While the current tick's run cannot start yet: when it is tried again.
    pub retry_at: Option<DateTime<Utc>>,
    /// The attempts made for the current tick that could not start its run.
    pub retries: u32,
    /// Why the current tick's run could not start yet.
    pub retry_reason: Option<String>,
}

impl ScheduleRecord {
    /// The schedule's timing: its cron expression read in its time zone, or its interval
    /// counted from its anchor; or each `(member, message)` problem (a stored schedule was
    /// checked, so a problem means a changed rule).
    pub fn timing(&self) -> std::result::Result<Timing, Problems> {
        match (&self.cron, self.interval_ms) {
            (Some(cron), _) => Timing::cron(cron, &self.timezone),
            (None, Some(ms)) => Timing::every(ms, self.anchor_at),
            (None, None) => Err(vec![("cron", "the schedule has no timing".into())]),
        }
    }
}

/// One tick a schedule acted on: the run it started, or why none started.
#[derive(Debug, Clone, PartialEq)]
pub struct FireRecord {
    pub fire_at: DateTime<Utc>,
    pub run_id: Option<String>,
    /// Why no run started: `missed`, `rate`, `quota` or `refused`.
    pub reason: Option<String>,
    pub error: Option<String>,
    pub fired_at: DateTime<Utc>,
}

/// Whether [`Schedules::insert_schedule`] stored the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capped {
    Stored,
    /// The tenant already has `count` schedules, its cap.
    Full {
        count: u64,
    },
}

/// What a tick came to, for [`Schedules::record_fire`].
pub enum FireOutcome<'a> {
    /// It started the run `run_id`.
    Run(&'a str),
    /// It started none: `reason` is `missed`, `rate`, `quota` or `refused`, `error` says why.
    None { reason: &'a str, error: &'a str },
}

/// What a claimed tick came to, for [`Store::advance_schedule`].
pub enum Fired<'a> {
    /// The run `run_id` was started for `tick`.
    Run {
        tick: DateTime<Utc>,
        run_id: &'a str,
    },
    /// Nothing was started (a skipped, missed or refused tick).
    Nothing,
}

/// The schedules' handle: these tables only, and a wake-up for the firing loop when one is
/// stored or changed through this process.
#[derive(Clone)]
pub struct Schedules {
    store: Store,
    changed: std::sync::Arc<tokio::sync::Notify>,
}

impl Schedules {
    pub fn new(store: Store) -> Self {
        Schedules {
            store,
            changed: Default::default(),
        }
    }

    fn pool(&self) -> sqlx::AnyPool {
        self.store.pool()
    }

    /// Resolves when a schedule was stored, changed or deleted through this handle since the
    /// last wake-up (one stored permit: a change made before the wait is not lost).
    pub async fn changed(&self) {
        self.changed.notified().await
    }

    /// Wakes the firing loop: schedules were stored, changed or deleted (also by an apply,
    /// which writes them in its own transaction).
    pub fn touched(&self) {
        self.changed.notify_one();
    }

    /// Stores a new schedule unless its tenant already has `cap` of them (0: no cap). The
    /// count is checked by the insert itself, and on PostgreSQL a per-tenant transaction lock
    /// orders concurrent inserts, so the cap holds across replicas.
    pub async fn insert_schedule(&self, s: &ScheduleRecord, cap: u64) -> Result<Capped> {
        let mut tx = self.pool().begin().await?;
        if self.store.shared() {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                .bind(format!("schedules:{}", s.tenant.0))
                .execute(&mut *tx)
                .await?;
        }
        let res = insert_row(&mut tx, s, cap).await?;
        if res == 0 {
            let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM schedules WHERE tenant = $1")
                .bind(&s.tenant.0)
                .fetch_one(&mut *tx)
                .await?;
            return Ok(Capped::Full {
                count: count as u64,
            });
        }
        tx.commit().await?;
        self.touched();
        Ok(Capped::Stored)
    }

    /// Replaces what an update may change (name, timing, run, enabled, missed, next tick),
    /// and tries a tick that was waiting to start at once; false if the tenant has no such schedule.
    pub async fn update_schedule(&self, s: &ScheduleRecord) -> Result<bool> {
        let mut conn = self.pool().acquire().await?;
        let updated = update_row(&mut conn, s, true).await?;
        self.touched();
        Ok(updated)
    }

    pub async fn get_schedule(&self, tenant: &Tenant, id: &str) -> Result<Option<ScheduleRecord>> {
        let row = sqlx::query("SELECT * FROM schedules WHERE id = $1 AND tenant = $2")
            .bind(id)
            .bind(&tenant.0)
            .fetch_optional(&self.pool())
            .await?;
        row.as_ref().map(schedule_from_row).transpose()
    }

    /// The tenant's schedules, oldest first.
    pub async fn list_schedules(&self, tenant: &Tenant) -> Result<Vec<ScheduleRecord>> {
        let rows = sqlx::query("SELECT * FROM schedules WHERE tenant = $1 ORDER BY created_at, id")
            .bind(&tenant.0)
            .fetch_all(&self.pool())
            .await?;
        rows.iter().map(schedule_from_row).collect()
    }

    /// Deletes the tenant's schedule and its record of fires (the runs it started stay);
    /// false if there is no such schedule.
    pub async fn delete_schedule(&self, tenant: &Tenant, id: &str) -> Result<bool> {
        let mut tx = self.pool().begin().await?;
        if !delete_row(&mut tx, tenant, id).await? {
            return Ok(false);
        }
        tx.commit().await?;
        self.touched();
        Ok(true)
    }

    /// Up to `limit` enabled schedules whose next tick is at or before `now` and that are not
    /// waiting to retry, of any tenant in `tenants` (`None`: every tenant). Fair across
    /// tenants: each tenant's most overdue first, then each one's second, and so on, so one
    /// tenant's many due schedules cannot fill the batch while another's wait.
    pub async fn due_schedules(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        tenants: Option<&[String]>,
    ) -> Result<Vec<ScheduleRecord>> {
        let sql = format!(
            "SELECT * FROM (
                SELECT s.*, ROW_NUMBER() OVER (PARTITION BY tenant ORDER BY next_fire_at, id)
                    AS turn
                FROM schedules s
                WHERE enabled = 1 AND next_fire_at <= $1
                    AND (retry_at IS NULL OR retry_at <= $1){}
             ) due ORDER BY turn, next_fire_at, id LIMIT $2",
            tenant_filter(tenants, 3)
        );
        // Only placeholders are formatted in: the tenants are bound.
        let mut query = sqlx::query(AssertSqlSafe(sql))
            .bind(fmt_time(now))
            .bind(i64::from(limit));
        for t in tenants.into_iter().flatten() {
            query = query.bind(t);
        }
        let rows = query.fetch_all(&self.pool()).await?;
        rows.iter().map(schedule_from_row).collect()
    }

    /// When the earliest enabled schedule of `tenants` (`None`: all) is next due: its next
    /// tick, or its retry when that is later.
    pub async fn next_schedule_tick(
        &self,
        tenants: Option<&[String]>,
    ) -> Result<Option<DateTime<Utc>>> {
        let sql = format!(
            "SELECT MIN(CASE WHEN retry_at > next_fire_at THEN retry_at ELSE next_fire_at END)
             FROM schedules WHERE enabled = 1 AND next_fire_at IS NOT NULL{}",
            tenant_filter(tenants, 1)
        );
        let mut query = sqlx::query_scalar(AssertSqlSafe(sql));
        for t in tenants.into_iter().flatten() {
            query = query.bind(t);
        }
        let next: Option<String> = query.fetch_one(&self.pool()).await?;
        parse_opt_time(next)
    }

    /// Runs the schedules of `tenant` started for ticks at or after `since`.
    pub async fn tenant_fires_since(&self, tenant: &Tenant, since: DateTime<Utc>) -> Result<u64> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM schedule_fires f JOIN schedules s ON s.id = f.schedule_id
             WHERE s.tenant = $1 AND f.fire_at >= $2 AND f.run_id IS NOT NULL",
        )
        .bind(&tenant.0)
        .bind(fmt_time(since))
        .fetch_one(&self.pool())
        .await?;
        Ok(n as u64)
    }

    /// The run the tenant made under idempotency key `key`, if any.
    pub async fn run_of_key(&self, tenant: &Tenant, key: &str) -> Result<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT id FROM runs WHERE tenant = $1 AND idempotency_key = $2")
                .bind(&tenant.0)
                .bind(key)
                .fetch_optional(&self.pool())
                .await?,
        )
    }

    /// Holds schedule `id`'s tick `from`: its run could not start (`reason`); the schedule's
    /// next tick becomes `tick` (a later due tick, when earlier ones were missed meanwhile),
    /// tried again at `retry_at`, its attempts counted. False when `from` is no longer its
    /// next tick.
    pub async fn hold_schedule(
        &self,
        id: &str,
        from: DateTime<Utc>,
        tick: DateTime<Utc>,
        retry_at: DateTime<Utc>,
        reason: &str,
    ) -> Result<bool> {
        let res = sqlx::query(
            "UPDATE schedules SET next_fire_at = $1, retry_at = $2, retries = retries + 1,
                retry_reason = $3
             WHERE id = $4 AND enabled = 1 AND next_fire_at = $5",
        )
        .bind(fmt_time(tick))
        .bind(fmt_time(retry_at))
        .bind(reason)
        .bind(id)
        .bind(fmt_time(from))
        .execute(&self.pool())
        .await?;
        Ok(res.rows_affected() > 0)
    }

    /// Records what tick `fire_at` of schedule `id` came to; a tick already recorded (by
    /// another replica, or before a restart) keeps its first record.
    pub async fn record_fire(
        &self,
        id: &str,
        fire_at: DateTime<Utc>,
        outcome: FireOutcome<'_>,
    ) -> Result<()> {
        let (run_id, reason, error) = match outcome {
            FireOutcome::Run(run_id) => (Some(run_id), None, None),
            FireOutcome::None { reason, error } => (None, Some(reason), Some(error)),
        };
        sqlx::query(
            "INSERT INTO schedule_fires (schedule_id, fire_at, run_id, reason, error, fired_at)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(id)
        .bind(fmt_time(fire_at))
        .bind(run_id)
        .bind(reason)
        .bind(error)
        .bind(fmt_time(crate::domain::now()))
        .execute(&self.pool())
        .await?;
        Ok(())
    }

    /// Moves schedule `id` from the tick `from` on to `next`, noting what `from`'s turn
    /// started; false when `from` is no longer its next tick (another replica moved it, or
    /// the schedule was changed, disabled or deleted meanwhile).
    pub async fn advance_schedule(
        &self,
        id: &str,
        from: DateTime<Utc>,
        next: Option<DateTime<Utc>>,
        fired: Fired<'_>,
    ) -> Result<bool> {
        let (tick, run_id) = match fired {
            Fired::Run { tick, run_id } => (Some(fmt_time(tick)), Some(run_id)),
            Fired::Nothing => (None, None),
        };
        let res = sqlx::query(
            "UPDATE schedules SET next_fire_at = $1,
                last_fire_at = COALESCE($2, last_fire_at),
                last_run_id = COALESCE($3, last_run_id),
                fire_count = fire_count + $4,
                retry_at = NULL, retries = 0, retry_reason = NULL
             WHERE id = $5 AND enabled = 1 AND next_fire_at = $6",
        )
        .bind(next.map(fmt_time))
        .bind(tick)
        .bind(run_id)
        .bind(i64::from(run_id.is_some()))
        .bind(id)
        .bind(fmt_time(from))
        .execute(&self.pool())
        .await?;
        Ok(res.rows_affected() > 0)
    }

    /// The schedule's latest `limit` fires, newest first.
    pub async fn schedule_fires(&self, id: &str, limit: u32) -> Result<Vec<FireRecord>> {
        let rows = sqlx::query(
            "SELECT * FROM schedule_fires WHERE schedule_id = $1 ORDER BY fire_at DESC LIMIT $2",
        )
        .bind(id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(FireRecord {
                    fire_at: parse_time(&r.try_get::<String, _>("fire_at")?)?,
                    run_id: r.try_get("run_id")?,
                    reason: r.try_get("reason")?,
                    error: r.try_get("error")?,
                    fired_at: parse_time(&r.try_get::<String, _>("fired_at")?)?,
                })
            })
            .collect()
    }
}

/// What an apply does to a tenant's schedules, written in the apply's transaction
/// ([`Store::apply_entries`]).
#[derive(Debug, Default)]
pub struct ScheduleChanges {
    /// New schedules (no cap: the apply checked it).
    pub created: Vec<ScheduleRecord>,
    /// Changed schedules, each with whether its timing starts again (from its `anchor_at`,
    /// at its `next_fire_at`); one that does not keeps its stored next tick.
    pub changed: Vec<(ScheduleRecord, bool)>,
    /// The ids of the schedules removed.
    pub deleted: Vec<String>,
}

impl ScheduleChanges {
    pub fn is_empty(&self) -> bool {
        self.created.is_empty() && self.changed.is_empty() && self.deleted.is_empty()
    }

    /// Writes the changes of `tenant`'s schedules in the transaction `conn` is in.
    pub(super) async fn write(
        &self,
        tenant: &Tenant,
        conn: &mut sqlx::AnyConnection,
    ) -> Result<()> {
        for id in &self.deleted {
            delete_row(conn, tenant, id).await?;
        }
        for (s, retimed) in &self.changed {
            update_row(conn, s, *retimed).await?;
        }
        for s in &self.created {
            insert_row(conn, s, 0).await?;
        }
        Ok(())
    }
}

/// Inserts schedule `s` unless its tenant has `cap` (0: no cap): the rows inserted.
async fn insert_row(conn: &mut sqlx::AnyConnection, s: &ScheduleRecord, cap: u64) -> Result<u64> {
    let res = sqlx::query(
        "INSERT INTO schedules (id, tenant, name, cron, timezone, interval_ms, anchor_at,
            run, enabled, missed, next_fire_at, last_fire_at, last_run_id, fire_count,
            created_at, updated_at)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16
         WHERE $17 = 0 OR (SELECT COUNT(*) FROM schedules WHERE tenant = $2) < $17",
    )
    .bind(&s.id)
    .bind(&s.tenant.0)
    .bind(s.name.as_deref())
    .bind(s.cron.as_deref())
    .bind(&s.timezone)
    .bind(s.interval_ms.map(|v| v as i64))
    .bind(fmt_time(s.anchor_at))
    .bind(to_json(&s.run))
    .bind(i64::from(s.enabled))
    .bind(s.missed.as_str())
    .bind(s.next_fire_at.map(fmt_time))
    .bind(s.last_fire_at.map(fmt_time))
    .bind(s.last_run_id.as_deref())
    .bind(s.fire_count as i64)
    .bind(fmt_time(s.created_at))
    .bind(fmt_time(s.updated_at))
    .bind(cap as i64)
    .execute(conn)
    .await?;
    Ok(res.rows_affected())
}

/// Replaces what an update may change (name, timing, run, enabled, missed) and tries a tick
/// waiting to start at once; `retimed` also sets the anchor and the next tick (otherwise the
/// stored ones stay, so a tick fired meanwhile is not brought back). False if the tenant has
/// no such schedule.
async fn update_row(
    conn: &mut sqlx::AnyConnection,
    s: &ScheduleRecord,
    retimed: bool,
) -> Result<bool> {
    let sql = if retimed {
        "UPDATE schedules SET name = $1, cron = $2, timezone = $3, interval_ms = $4, run = $5,
            enabled = $6, missed = $7, updated_at = $8, retry_at = NULL, retries = 0,
            retry_reason = NULL, anchor_at = $11, next_fire_at = $12
         WHERE id = $9 AND tenant = $10"
    } else {
        "UPDATE schedules SET name = $1, cron = $2, timezone = $3, interval_ms = $4, run = $5,
            enabled = $6, missed = $7, updated_at = $8, retry_at = NULL, retries = 0,
            retry_reason = NULL
         WHERE id = $9 AND tenant = $10"
    };
    let mut query = sqlx::query(sql)
        .bind(s.name.as_deref())
        .bind(s.cron.as_deref())
        .bind(&s.timezone)
        .bind(s.interval_ms.map(|v| v as i64))
        .bind(to_json(&s.run))
        .bind(i64::from(s.enabled))
        .bind(s.missed.as_str())
        .bind(fmt_time(s.updated_at))
        .bind(&s.id)
        .bind(&s.tenant.0);
    if retimed {
        query = query
            .bind(fmt_time(s.anchor_at))
            .bind(s.next_fire_at.map(fmt_time));
    }
    let res = query.execute(conn).await?;
    Ok(res.rows_affected() > 0)
}

/// Deletes the tenant's schedule and its record of fires: whether there was one.
async fn delete_row(conn: &mut sqlx::AnyConnection, tenant: &Tenant, id: &str) -> Result<bool> {
    let res = sqlx::query("DELETE FROM schedules WHERE id = $1 AND tenant = $2")
        .bind(id)
        .bind(&tenant.0)
        .execute(&mut *conn)
        .await?;
    if res.rows_affected() == 0 {
        return Ok(false);
    }
    sqlx::query("DELETE FROM schedule_fires WHERE schedule_id = $1")
        .bind(id)
        .execute(&mut *conn)
        .await?;
    Ok(true)
}

fn schedule_from_row(r: &AnyRow) -> Result<ScheduleRecord> {
    let missed: String = r.try_get("missed")?;
    Ok(ScheduleRecord {
        id: r.try_get("id")?,
        tenant: Tenant(r.try_get("tenant")?),
        name: r.try_get("name")?,
        cron: r.try_get("cron")?,
        timezone: r.try_get("timezone")?,
        interval_ms: r
            .try_get::<Option<i64>, _>("interval_ms")?
            .map(|v| v as u64),
        anchor_at: parse_time(&r.try_get::<String, _>("anchor_at")?)?,
        run: parse_json(&r.try_get::<String, _>("run")?)?,
        enabled: r.try_get::<i64, _>("enabled")? != 0,
        missed: Missed::parse(&missed)
            .ok_or_else(|| Error::Corrupt(format!("schedule policy `{missed}`")))?,
        next_fire_at: parse_opt_time(r.try_get("next_fire_at")?)?,
        last_fire_at: parse_opt_time(r.try_get("last_fire_at")?)?,
        last_run_id: r.try_get("last_run_id")?,
        fire_count: r.try_get::<i64, _>("fire_count")? as u64,
        created_at: parse_time(&r.try_get::<String, _>("created_at")?)?,
        updated_at: parse_time(&r.try_get::<String, _>("updated_at")?)?,
        retry_at: parse_opt_time(r.try_get("retry_at")?)?,
        retries: r.try_get::<i64, _>("retries")? as u32,
        retry_reason: r.try_get("retry_reason")?,
    })
}

/// ` AND tenant IN ($first, ...)` for `tenants` (nothing for `None`: every tenant; an empty
/// list matches none).
fn tenant_filter(tenants: Option<&[String]>, first: usize) -> String {
    match tenants {
        None => String::new(),
        Some([]) => " AND 1 = 0".into(),
        Some(list) => {
            let params: Vec<String> = (first..first + list.len())
                .map(|i| format!("${i}"))
                .collect();
            format!(" AND tenant IN ({})", params.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(tenant: &str, due: DateTime<Utc>) -> ScheduleRecord {
        ScheduleRecord {
            id: uuid::Uuid::now_v7().to_string(),
            tenant: Tenant(tenant.into()),
            name: None,
            cron: None,
            timezone: "UTC".into(),
            interval_ms: Some(1_000),
            anchor_at: due,
            run: serde_json::json!({ "input": "x" }),
            enabled: true,
            missed: Missed::Skip,
            next_fire_at: Some(due),
            last_fire_at: None,
            last_run_id: None,
            fire_count: 0,
            created_at: due,
            updated_at: due,
            retry_at: None,
            retries: 0,
            retry_reason: None,
        }
    }

    #[tokio::test]
    async fn a_due_batch_takes_every_tenant_in_turn_and_a_tenants_cap_holds() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("orca.db").display());
        let schedules = Schedules::new(Store::connect(&url, 2).await.unwrap());
        let now = crate::domain::now();
        // Tenant a's 100 schedules are all more overdue than b's one.
        for i in 0..100 {
            let due = now - chrono::Duration::seconds(30) + chrono::Duration::milliseconds(i);
            let stored = schedules.insert_schedule(&schedule("a", due), 100).await;
            assert_eq!(stored.unwrap(), Capped::Stored);
        }
        let b = schedule("b", now - chrono::Duration::seconds(1));
        assert_eq!(
            schedules.insert_schedule(&b, 100).await.unwrap(),
            Capped::Stored
        );
        let batch = schedules.due_schedules(now, 64, None).await.unwrap();
        assert_eq!(batch.len(), 64);
        let turn_of_b = batch.iter().position(|s| s.tenant.0 == "b");
        assert_eq!(
            turn_of_b,
            Some(1),
            "b's schedule comes second, after a's first"
        );
        // A tenant without a key is not looked at.
        let only_a = ["a".to_owned()];
        let batch = schedules
            .due_schedules(now, 64, Some(&only_a))
            .await
            .unwrap();
        assert!(batch.iter().all(|s| s.tenant.0 == "a"));
        // The 101st schedule of a is refused; b still has room.
        assert_eq!(
            schedules
                .insert_schedule(&schedule("a", now), 100)
                .await
                .unwrap(),
            Capped::Full { count: 100 }
        );
        assert_eq!(
            schedules
                .insert_schedule(&schedule("b", now), 100)
                .await
                .unwrap(),
            Capped::Stored
        );
        // A schedule waiting to retry is left out until its retry is due.
        let later = now + chrono::Duration::seconds(5);
        assert!(
            schedules
                .hold_schedule(
                    &b.id,
                    b.next_fire_at.unwrap(),
                    b.next_fire_at.unwrap(),
                    later,
                    "busy"
                )
                .await
                .unwrap()
        );
        let batch = schedules.due_schedules(now, 200, None).await.unwrap();
        assert!(batch.iter().all(|s| s.id != b.id));
        let next = schedules
            .next_schedule_tick(Some(&["b".to_owned()]))
            .await
            .unwrap();
        assert_eq!(next, Some(now), "b's other schedule is due now");
    }
}
