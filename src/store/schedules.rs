//! Schedules and their fires. A schedule row is what its API shows; the firing loop reads
//! the due ones of every tenant and claims a tick with [`Store::advance_schedule`], a
//! compare-and-set on `next_fire_at`, so replicas that see the same tick move it on once.
//! Like the rest of the store, this module only persists: when to fire is
//! `domain::schedule`'s rule.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Error, Result, Store, fmt_time, parse_json, parse_opt_time, parse_time, to_json};
use crate::domain::Tenant;
use crate::domain::schedule::Missed;

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
}

/// One tick a schedule acted on: the run it started, or why none started.
#[derive(Debug, Clone, PartialEq)]
pub struct FireRecord {
    pub fire_at: DateTime<Utc>,
    pub run_id: Option<String>,
    pub error: Option<String>,
    pub fired_at: DateTime<Utc>,
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

    fn touched(&self) {
        self.changed.notify_one();
    }

    pub async fn insert_schedule(&self, s: &ScheduleRecord) -> Result<()> {
        sqlx::query(
            "INSERT INTO schedules (id, tenant, name, cron, timezone, interval_ms, anchor_at,
                run, enabled, missed, next_fire_at, last_fire_at, last_run_id, fire_count,
                created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
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
        .execute(&self.pool())
        .await?;
        self.touched();
        Ok(())
    }

    /// Replaces what an update may change (name, timing, run, enabled, missed, next tick);
    /// false if the tenant has no such schedule.
    pub async fn update_schedule(&self, s: &ScheduleRecord) -> Result<bool> {
        let res = sqlx::query(
            "UPDATE schedules SET name = $1, cron = $2, timezone = $3, interval_ms = $4,
                anchor_at = $5, run = $6, enabled = $7, missed = $8, next_fire_at = $9,
                updated_at = $10
             WHERE id = $11 AND tenant = $12",
        )
        .bind(s.name.as_deref())
        .bind(s.cron.as_deref())
        .bind(&s.timezone)
        .bind(s.interval_ms.map(|v| v as i64))
        .bind(fmt_time(s.anchor_at))
        .bind(to_json(&s.run))
        .bind(i64::from(s.enabled))
        .bind(s.missed.as_str())
        .bind(s.next_fire_at.map(fmt_time))
        .bind(fmt_time(s.updated_at))
        .bind(&s.id)
        .bind(&s.tenant.0)
        .execute(&self.pool())
        .await?;
        self.touched();
        Ok(res.rows_affected() > 0)
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
        let res = sqlx::query("DELETE FROM schedules WHERE id = $1 AND tenant = $2")
            .bind(id)
            .bind(&tenant.0)
            .execute(&mut *tx)
            .await?;
        if res.rows_affected() == 0 {
            return Ok(false);
        }
        sqlx::query("DELETE FROM schedule_fires WHERE schedule_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        self.touched();
        Ok(true)
    }

    /// Up to `limit` enabled schedules of any tenant whose next tick is at or before `now`,
    /// the most overdue first.
    pub async fn due_schedules(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<ScheduleRecord>> {
        let rows = sqlx::query(
            "SELECT * FROM schedules WHERE enabled = 1 AND next_fire_at <= $1
             ORDER BY next_fire_at LIMIT $2",
        )
        .bind(fmt_time(now))
        .bind(i64::from(limit))
        .fetch_all(&self.pool())
        .await?;
        rows.iter().map(schedule_from_row).collect()
    }

    /// The earliest next tick of any enabled schedule.
    pub async fn next_schedule_tick(&self) -> Result<Option<DateTime<Utc>>> {
        let next: Option<String> =
            sqlx::query_scalar("SELECT MIN(next_fire_at) FROM schedules WHERE enabled = 1")
                .fetch_one(&self.pool())
                .await?;
        parse_opt_time(next)
    }

    /// Records what tick `fire_at` of schedule `id` came to; a tick already recorded (by
    /// another replica, or before a restart) keeps its first record.
    pub async fn record_fire(
        &self,
        id: &str,
        fire_at: DateTime<Utc>,
        run_id: Option<&str>,
        error: Option<&str>,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO schedule_fires (schedule_id, fire_at, run_id, error, fired_at)
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        )
        .bind(id)
        .bind(fmt_time(fire_at))
        .bind(run_id)
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
                fire_count = fire_count + $4
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
                    error: r.try_get("error")?,
                    fired_at: parse_time(&r.try_get::<String, _>("fired_at")?)?,
                })
            })
            .collect()
    }
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
    })
}
