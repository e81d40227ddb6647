//! What a new run must fit to be stored, checked by the statement that inserts it: its
//! session not deleted, its session idle (a `reject` run), and its tenant's quota ([`Quota`]).
//! On PostgreSQL each check first takes a transaction lock of its own (per session, per
//! tenant), so concurrent inserts are checked one after another, and against a session's
//! delete, and a limit holds across replicas.
//!
//! `runs_per_minute` and `tokens_per_day` count the `usage_ledger`, not the runs: a row per
//! run created, kept in step with the run's token counts by the database (migration 0019) and
//! never touched by deleting runs, so deleting runs or sessions gives nothing back. A fork's
//! row also says it is one and how many bytes of history it copied (migration 0021), for
//! `forks_per_day` and `fork_bytes_per_day`.

use chrono::{DateTime, Utc};
use sqlx::Row;

use super::statement::{self, Param, Statement};
use super::{Backend, Result, Store, fmt_time, parse_time};
use crate::domain::Tenant;
use crate::domain::quota::{Quota, Usage};

/// The runs in progress, as stored.
pub(super) const IN_PROGRESS: &str = "('queued', 'running', 'waiting_input', 'paused')";

/// What a new run must fit.
#[derive(Debug, Clone, Copy, Default)]
pub struct Guards<'a> {
    /// Its session, when it has one: not deleted.
    pub session: Option<&'a str>,
    /// Its session (when it has one) has no run in progress.
    pub session_idle: Option<&'a str>,
    /// Its tenant's quota.
    pub quota: Quota,
    /// Its user (`None`: no user): a session's runs are all one user's, or no user's.
    pub user: Option<&'a str>,
    /// What its user may use (checked when it has a user).
    pub user_quota: crate::domain::quota::UserQuota,
}

/// The guards as SQL: conditions over parameters numbered from `first`, and the locks to take
/// before the insert (PostgreSQL).
pub(super) struct GuardSql {
    pub conditions: Vec<String>,
    pub params: Vec<Param>,
    pub locks: Vec<Statement>,
    backend: Backend,
    first: usize,
}

impl GuardSql {
    fn new(backend: Backend, first: usize) -> GuardSql {
        GuardSql {
            conditions: Vec::new(),
            params: Vec::new(),
            locks: Vec::new(),
            backend,
            first,
        }
    }

    /// Binds `p`; its placeholder.
    fn param(&mut self, p: Param) -> String {
        self.params.push(p);
        format!("${}", self.first + self.params.len() - 1)
    }

    /// Takes the advisory lock `key` before the insert (PostgreSQL; SQLite's writer is one).
    fn lock(&mut self, key: String) {
        if self.backend == Backend::Postgres {
            self.locks.push(Statement {
                text: statement::Text::One("SELECT pg_advisory_xact_lock(hashtext($1))".into()),
                params: vec![key.into()],
            });
        }
    }
}

impl Guards<'_> {
    /// The conditions that `user`'s runs stay within their quota, under a lock of the user's.
    fn user_limits(&self, out: &mut GuardSql, tenant: &Tenant, user: &str, now: DateTime<Utc>) {
        out.lock(format!("quota:{}/{user}", tenant.0));
        let (t, u) = (out.param(tenant.0.as_str().into()), out.param(user.into()));
        let q = self.user_quota;
        if q.running_runs > 0 {
            let n = out.param((q.running_runs as i64).into());
            out.conditions.push(format!(
                "(SELECT COUNT(*) FROM runs WHERE tenant = {t} AND user_id = {u}
                    AND status IN {IN_PROGRESS}) < {n}"
            ));
        }
        if q.runs_per_minute > 0 {
            let since = out.param(fmt_time(now - chrono::Duration::seconds(60)).into());
            let n = out.param((q.runs_per_minute as i64).into());
            out.conditions.push(format!(
                "(SELECT COUNT(*) FROM runs WHERE tenant = {t} AND user_id = {u}
                    AND created_at > {since}) < {n}"
            ));
        }
    }

    /// The condition that `session`'s runs are all of this run's user (or of no user, as it).
    fn session_of_its_user(&self, out: &mut GuardSql, tenant: &Tenant, session: &str) {
        let (t, s) = (
            out.param(tenant.0.as_str().into()),
            out.param(session.into()),
        );
        let other_user = match self.user {
            Some(user) => format!("(user_id IS NULL OR user_id <> {})", out.param(user.into())),
            None => "user_id IS NOT NULL".to_owned(),
        };
        out.conditions.push(format!(
            "NOT EXISTS (SELECT 1 FROM runs WHERE tenant = {t} AND session_id = {s}
                AND {other_user})"
        ));
    }

    /// `fork_bytes`: the bytes of history the new run copies when it is a fork.
    pub(super) fn sql(
        &self,
        backend: Backend,
        tenant: &Tenant,
        first: usize,
        now: DateTime<Utc>,
        fork_bytes: Option<u64>,
    ) -> GuardSql {
        let mut out = GuardSql::new(backend, first);
        if let Some(session) = self.session.or(self.session_idle) {
            // The lock a session's delete takes too (`Sessions::delete`).
            out.lock(session_lock(tenant, session));
            let (t, s) = (
                out.param(tenant.0.as_str().into()),
                out.param(session.into()),
            );
            out.conditions.push(format!(
                "NOT EXISTS (SELECT 1 FROM deleted_sessions WHERE tenant = {t} AND session_id = {s})"
            ));
        }
        if let Some(session) = self.session {
            self.session_of_its_user(&mut out, tenant, session);
        }
        if let Some(session) = self.session_idle {
            let (t, s) = (
                out.param(tenant.0.as_str().into()),
                out.param(session.into()),
            );
            out.conditions.push(format!(
                "NOT EXISTS (SELECT 1 FROM runs WHERE tenant = {t} AND session_id = {s}
                    AND status IN {IN_PROGRESS})"
            ));
        }
        if let Some(user) = self.user.filter(|_| self.user_quota.limits_anything()) {
            self.user_limits(&mut out, tenant, user, now);
        }
        let q = self.quota;
        let fork_bytes = fork_bytes.filter(|_| q.limits_forks());
        if !q.limits_anything() && fork_bytes.is_none() {
            return out;
        }
        out.lock(format!("quota:{}", tenant.0));
        let t = out.param(tenant.0.as_str().into());
        if q.running_runs > 0 {
            let n = out.param((q.running_runs as i64).into());
            out.conditions.push(format!(
                "(SELECT COUNT(*) FROM runs WHERE tenant = {t} AND status IN {IN_PROGRESS}) < {n}"
            ));
        }
        if q.runs_per_minute > 0 {
            let since = out.param(fmt_time(now - chrono::Duration::seconds(60)).into());
            let n = out.param((q.runs_per_minute as i64).into());
            out.conditions.push(format!(
                "(SELECT COUNT(*) FROM usage_ledger WHERE tenant = {t} AND created_at > {since})
                    < {n}"
            ));
        }
        if q.tokens_per_day > 0 {
            let day = out.param(fmt_time(start_of_day(now)).into());
            let n = out.param((q.tokens_per_day as i64).into());
            out.conditions.push(format!(
                "(SELECT COALESCE(SUM(tokens), 0) FROM usage_ledger
                    WHERE tenant = {t} AND created_at >= {day}) < {n}"
            ));
        }
        if let Some(bytes) = fork_bytes {
            let day = out.param(fmt_time(start_of_day(now)).into());
            let today = format!("FROM usage_ledger WHERE tenant = {t} AND created_at >= {day}");
            if q.forks_per_day > 0 {
                let n = out.param((q.forks_per_day as i64).into());
                out.conditions
                    .push(format!("(SELECT COUNT(*) {today} AND fork = 1) < {n}"));
            }
            if q.fork_bytes_per_day > 0 {
                let room = q.fork_bytes_per_day.saturating_sub(bytes);
                let n = out.param((room.min(i64::MAX as u64) as i64).into());
                out.conditions.push(format!(
                    "(SELECT COALESCE(SUM(fork_bytes), 0) {today}) <= {n}"
                ));
            }
        }
        out
    }
}

/// The PostgreSQL lock key of a session: a new run in it and its delete take it.
pub(super) fn session_lock(tenant: &Tenant, session: &str) -> String {
    format!("session:{}/{session}", tenant.0)
}

fn start_of_day(now: DateTime<Utc>) -> DateTime<Utc> {
    now.date_naive()
        .and_hms_opt(0, 0, 0)
        .map_or(now, |t| t.and_utc())
}

impl Store {
    /// What `tenant` uses now, against a quota.
    pub async fn tenant_usage(&self, tenant: &Tenant, now: DateTime<Utc>) -> Result<Usage> {
        let sql = format!(
            "SELECT
                (SELECT COUNT(*) FROM runs WHERE tenant = $1 AND status IN {IN_PROGRESS}) AS running,
                (SELECT COUNT(*) FROM usage_ledger WHERE tenant = $1 AND created_at > $2)
                    AS minute,
                (SELECT MIN(created_at) FROM usage_ledger WHERE tenant = $1 AND created_at > $2)
                    AS oldest,
                (SELECT CAST(COALESCE(SUM(tokens), 0) AS BIGINT)
                    FROM usage_ledger WHERE tenant = $1 AND created_at >= $3) AS tokens,
                (SELECT CAST(COALESCE(SUM(fork), 0) AS BIGINT)
                    FROM usage_ledger WHERE tenant = $1 AND created_at >= $3) AS forks,
                (SELECT CAST(COALESCE(SUM(fork_bytes), 0) AS BIGINT)
                    FROM usage_ledger WHERE tenant = $1 AND created_at >= $3) AS fork_bytes"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&tenant.0)
            .bind(fmt_time(now - chrono::Duration::seconds(60)))
            .bind(fmt_time(start_of_day(now)))
            .fetch_one(&self.pool())
            .await?;
        let oldest: Option<String> = row.try_get("oldest")?;
        Ok(Usage {
            running_runs: row.try_get::<i64, _>("running")? as u64,
            runs_last_minute: row.try_get::<i64, _>("minute")? as u64,
            tokens_today: row.try_get::<i64, _>("tokens")? as u64,
            forks_today: row.try_get::<i64, _>("forks")? as u64,
            fork_bytes_today: row.try_get::<i64, _>("fork_bytes")? as u64,
            oldest_in_minute: oldest.as_deref().map(parse_time).transpose()?,
        })
    }

    /// What `user` of `tenant` uses now, against a user quota: runs in progress and of the
    /// last minute.
    pub async fn user_usage(
        &self,
        tenant: &Tenant,
        user: &str,
        now: DateTime<Utc>,
    ) -> Result<Usage> {
        let sql = format!(
            "SELECT
                (SELECT COUNT(*) FROM runs WHERE tenant = $1 AND user_id = $2
                    AND status IN {IN_PROGRESS}) AS running,
                (SELECT COUNT(*) FROM runs WHERE tenant = $1 AND user_id = $2
                    AND created_at > $3) AS minute,
                (SELECT MIN(created_at) FROM runs WHERE tenant = $1 AND user_id = $2
                    AND created_at > $3) AS oldest"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&tenant.0)
            .bind(user)
            .bind(fmt_time(now - chrono::Duration::seconds(60)))
            .fetch_one(&self.pool())
            .await?;
        let oldest: Option<String> = row.try_get("oldest")?;
        Ok(Usage {
            running_runs: row.try_get::<i64, _>("running")? as u64,
            runs_last_minute: row.try_get::<i64, _>("minute")? as u64,
            oldest_in_minute: oldest.as_deref().map(parse_time).transpose()?,
            ..Usage::default()
        })
    }

    /// Runs in progress and tokens of the runs created today (from the ledger), by tenant
    /// (for the metrics).
    pub async fn usage_by_tenant(&self, now: DateTime<Utc>) -> Result<Vec<(String, u64, u64)>> {
        let sql = format!(
            "SELECT tenant, CAST(SUM(running) AS BIGINT) AS running,
                CAST(SUM(tokens) AS BIGINT) AS tokens
             FROM (SELECT tenant, 1 AS running, 0 AS tokens FROM runs
                    WHERE status IN {IN_PROGRESS}
                   UNION ALL
                   SELECT tenant, 0 AS running, tokens FROM usage_ledger
                    WHERE created_at >= $1) AS u
             GROUP BY tenant ORDER BY tenant"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(fmt_time(start_of_day(now)))
            .fetch_all(&self.pool())
            .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("tenant")?,
                    r.try_get::<i64, _>("running")? as u64,
                    r.try_get::<i64, _>("tokens")? as u64,
                ))
            })
            .collect()
    }

    /// Forgets the ledger's rows older than `before` (past every quota's window).
    pub async fn prune_usage_ledger(&self, before: DateTime<Utc>) -> Result<u64> {
        let done = sqlx::query("DELETE FROM usage_ledger WHERE created_at < $1")
            .bind(fmt_time(before))
            .execute(&self.pool())
            .await?;
        Ok(done.rows_affected())
    }
}
