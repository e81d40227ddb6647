//! What a session keeps across its runs: its variables (`session.NAME`), its turns (the input
//! and output of each succeeded run) and the summary of its older turns. Reads and writes
//! only; when to summarise is the engine's decision.
//!
//! Variables are bounded ([`SessionLimits`]): a write that would pass a limit is refused
//! whole, inside its transaction. A session's delete is one transaction too, under the lock a
//! new run of the session takes (PostgreSQL; SQLite has one writer), and leaves a
//! `deleted_sessions` row that refuses new runs of it: a run created in a session being deleted
//! cannot survive it.

use chrono::Utc;
use serde_json::{Map, Value};
use sqlx::Row;

use super::quota::{IN_PROGRESS, session_lock};
use super::retention::RUN_TABLES;
use super::{Backend, Result, Store, fmt_time, parse_json};
use crate::domain::{RunId, Tenant};

/// What one session's variables may take (`[context] session_max_*`); 0 is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionLimits {
    /// Bytes of one variable's value (its JSON text).
    pub max_variable_bytes: u64,
    /// Variables in the session.
    pub max_variables: u64,
    /// Bytes of all its variables' values.
    pub max_total_bytes: u64,
}

/// Why a change to a session was refused; nothing of it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// It would pass a limit: the limit's key (`session_max_variable_bytes`, ...), its value,
    /// and what the session would use (the variable, for a value's size).
    Limit {
        key: &'static str,
        limit: u64,
        used: u64,
        variable: Option<String>,
    },
    /// The session was deleted.
    Deleted,
}

impl Refusal {
    /// The refusal in a sentence.
    pub fn describe(&self) -> String {
        match self {
            Refusal::Limit {
                key,
                limit,
                used,
                variable: Some(name),
            } => format!(
                "the session variable `{name}` is {used} bytes (as JSON); the limit \
                 `context.{key}` is {limit}"
            ),
            Refusal::Limit {
                key: key @ "session_max_variables",
                limit,
                used,
                ..
            } => format!(
                "the session would hold {used} variables; the limit `context.{key}` is {limit}"
            ),
            Refusal::Limit {
                key, limit, used, ..
            } => format!(
                "the session's variables would take {used} bytes (as JSON); the limit \
                 `context.{key}` is {limit}"
            ),
            Refusal::Deleted => "the session was deleted; its id is not used again".into(),
        }
    }
}

/// What deleting a session did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deleted {
    /// The session and all its runs are gone.
    Whole,
    /// Nothing was deleted: these runs of it have not finished.
    Unfinished(Vec<RunId>),
}

impl SessionLimits {
    /// The limits `[context]` sets.
    pub fn of(config: &crate::config::ContextConfig) -> Self {
        SessionLimits {
            max_variable_bytes: config.session_max_variable_bytes,
            max_variables: config.session_max_variables,
            max_total_bytes: config.session_max_total_bytes,
        }
    }

    /// The first value of `values` past `max_variable_bytes`.
    fn value_too_large(&self, values: &Map<String, Value>) -> Option<Refusal> {
        values.iter().find_map(|(name, value)| {
            let size = value.to_string().len() as u64;
            (self.max_variable_bytes > 0 && size > self.max_variable_bytes).then(|| {
                Refusal::Limit {
                    key: "session_max_variable_bytes",
                    limit: self.max_variable_bytes,
                    used: size,
                    variable: Some(name.clone()),
                }
            })
        })
    }

    /// The limit a session of `count` variables taking `bytes` passes.
    fn passed(&self, count: u64, bytes: u64) -> Option<Refusal> {
        let over = |key, limit: u64, used: u64| {
            (limit > 0 && used > limit).then_some(Refusal::Limit {
                key,
                limit,
                used,
                variable: None,
            })
        };
        over("session_max_variables", self.max_variables, count)
            .or_else(|| over("session_max_total_bytes", self.max_total_bytes, bytes))
    }
}

/// One earlier exchange of a session: a succeeded run's input and output.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub run_id: RunId,
    pub input: Value,
    pub output: Value,
}

/// The stored summary of a session's older turns.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSummary {
    pub text: String,
    /// The last run (turn) it covers; it covers every earlier one too.
    pub through: RunId,
    /// Turns covered in all.
    pub turns: u32,
    /// Its length in tokens.
    pub tokens: u32,
}

impl Store {
    /// The session's variables (none for a session no plan wrote to).
    pub async fn session_variables(
        &self,
        tenant: &Tenant,
        session_id: &str,
    ) -> Result<Map<String, Value>> {
        Ok(self
            .session_variables_named(tenant, session_id, None)
            .await?
            .0)
    }

    /// The session's variables of `names` (every one for `None`), and the bytes read.
    pub async fn session_variables_named(
        &self,
        tenant: &Tenant,
        session_id: &str,
        names: Option<&[String]>,
    ) -> Result<(Map<String, Value>, u64)> {
        let mut sql =
            "SELECT name, value FROM session_variables WHERE tenant = $1 AND session_id = $2"
                .to_owned();
        if let Some(names) = names {
            // Only numbered placeholders are spliced in; the names are bound.
            let list: Vec<String> = (0..names.len()).map(|i| format!("${}", i + 3)).collect();
            sql.push_str(&format!(" AND name IN ({})", list.join(", ")));
        }
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&tenant.0)
            .bind(session_id);
        for name in names.unwrap_or_default() {
            query = query.bind(name);
        }
        let rows = query.fetch_all(&self.pool()).await?;
        let mut bytes = 0;
        let values = rows
            .iter()
            .map(|r| {
                let name: String = r.try_get("name")?;
                let text: String = r.try_get("value")?;
                bytes += text.len() as u64;
                Ok((name, parse_json(&text)?))
            })
            .collect::<Result<_>>()?;
        Ok((values, bytes))
    }

    /// Takes the session's lock (PostgreSQL) for the rest of `tx`: a new run of the session
    /// and its delete take it too.
    async fn lock_session(
        &self,
        tx: &mut sqlx::AnyConnection,
        tenant: &Tenant,
        session_id: &str,
    ) -> Result<()> {
        if self.backend() == Backend::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                .bind(session_lock(tenant, session_id))
                .execute(tx)
                .await?;
        }
        Ok(())
    }

    /// Sets `values` (each replacing the variable of its name), in one transaction, while
    /// this replica leases the run `written_by` ([`super::Error::LeaseLost`] otherwise), and
    /// within `limits` (nothing written otherwise).
    pub async fn set_session_variables(
        &self,
        tenant: &Tenant,
        session_id: &str,
        values: &Map<String, Value>,
        written_by: RunId,
        limits: SessionLimits,
    ) -> Result<std::result::Result<(), Refusal>> {
        if let Some(refused) = limits.value_too_large(values) {
            return Ok(Err(refused));
        }
        let now = fmt_time(Utc::now());
        let mut tx = self.pool().begin().await?;
        self.fence(&mut tx, written_by).await?;
        self.lock_session(&mut tx, tenant, session_id).await?;
        let written_by = written_by.to_string();
        for (name, value) in values {
            upsert_variable(
                &mut tx,
                tenant,
                session_id,
                (name, value),
                &written_by,
                &now,
            )
            .await?;
        }
        if let Some(refused) = over_limits(&mut tx, tenant, session_id, limits).await? {
            tx.rollback().await?;
            return Ok(Err(refused));
        }
        tx.commit().await?;
        Ok(Ok(()))
    }

    /// The newest `limit` turns of the session before run `before` and after run `after`
    /// (when given), oldest first.
    pub async fn session_turns(
        &self,
        tenant: &Tenant,
        session_id: &str,
        before: RunId,
        after: Option<RunId>,
        limit: u32,
    ) -> Result<Vec<Turn>> {
        let rows = sqlx::query(
            "SELECT id, input, output FROM runs
             WHERE tenant = $1 AND session_id = $2 AND id < $3 AND id > $4
               AND status = 'succeeded' AND output IS NOT NULL
             ORDER BY id DESC LIMIT $5",
        )
        .bind(&tenant.0)
        .bind(session_id)
        .bind(before.to_string())
        .bind(after.map(|a| a.to_string()).unwrap_or_default())
        .bind(i64::from(limit))
        .fetch_all(&self.pool())
        .await?;
        let mut turns = rows
            .iter()
            .map(|r| {
                let id: String = r.try_get("id")?;
                Ok(Turn {
                    run_id: RunId::parse(&id)
                        .ok_or_else(|| super::Error::Corrupt(format!("run id `{id}`")))?,
                    input: parse_json(&r.try_get::<String, _>("input")?)?,
                    output: parse_json(&r.try_get::<String, _>("output")?)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        turns.reverse();
        Ok(turns)
    }

    /// The session's summary, if one was made.
    pub async fn session_summary(
        &self,
        tenant: &Tenant,
        session_id: &str,
    ) -> Result<Option<SessionSummary>> {
        let row = sqlx::query(
            "SELECT summary, through_run, turns, tokens FROM session_summaries
             WHERE tenant = $1 AND session_id = $2",
        )
        .bind(&tenant.0)
        .bind(session_id)
        .fetch_optional(&self.pool())
        .await?;
        let Some(r) = row else {
            return Ok(None);
        };
        let through: String = r.try_get("through_run")?;
        Ok(Some(SessionSummary {
            text: r.try_get("summary")?,
            through: RunId::parse(&through)
                .ok_or_else(|| super::Error::Corrupt(format!("summary run id `{through}`")))?,
            turns: u32::try_from(r.try_get::<i64, _>("turns")?).unwrap_or(0),
            tokens: u32::try_from(r.try_get::<i64, _>("tokens")?).unwrap_or(0),
        }))
    }

    /// Stores `summary` for the session unless a summary that covers more is already there
    /// (two runs of a session summarising at once: the one that covers more wins), while this
    /// replica leases the run `made_by` ([`super::Error::LeaseLost`] otherwise).
    pub async fn save_session_summary(
        &self,
        tenant: &Tenant,
        session_id: &str,
        summary: &SessionSummary,
        made_by: RunId,
    ) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        self.fence(&mut tx, made_by).await?;
        sqlx::query(
            "INSERT INTO session_summaries
                (tenant, session_id, summary, through_run, turns, tokens, made_by, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (tenant, session_id) DO UPDATE SET
                summary = excluded.summary, through_run = excluded.through_run,
                turns = excluded.turns, tokens = excluded.tokens, made_by = excluded.made_by,
                updated_at = excluded.updated_at
             WHERE excluded.through_run > session_summaries.through_run",
        )
        .bind(&tenant.0)
        .bind(session_id)
        .bind(&summary.text)
        .bind(summary.through.to_string())
        .bind(i64::from(summary.turns))
        .bind(i64::from(summary.tokens))
        .bind(made_by.to_string())
        .bind(fmt_time(Utc::now()))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }
}

impl Store {
    /// The session's runs in progress (created before `before`, when given), oldest first.
    /// The user of a session's runs: `None` when it has no run, `Some(None)` when they are
    /// of no user.
    pub async fn session_user(
        &self,
        tenant: &Tenant,
        session_id: &str,
    ) -> Result<Option<Option<String>>> {
        let row =
            sqlx::query("SELECT user_id FROM runs WHERE tenant = $1 AND session_id = $2 LIMIT 1")
                .bind(&tenant.0)
                .bind(session_id)
                .fetch_optional(&self.pool())
                .await?;
        row.map(|r| r.try_get::<Option<String>, _>("user_id"))
            .transpose()
            .map_err(Into::into)
    }

    pub async fn session_unfinished(
        &self,
        tenant: &Tenant,
        session_id: &str,
        before: Option<RunId>,
    ) -> Result<Vec<RunId>> {
        let rows: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM runs WHERE tenant = $1 AND session_id = $2 AND id < $3
               AND status IN ('queued', 'running', 'waiting_input', 'paused') ORDER BY id",
        )
        .bind(&tenant.0)
        .bind(session_id)
        .bind(before.map_or_else(|| "~".to_owned(), |b| b.to_string()))
        .fetch_all(&self.pool())
        .await?;
        rows.iter()
            .map(|r| RunId::parse(r).ok_or_else(|| super::Error::Corrupt(format!("run id `{r}`"))))
            .collect()
    }
}

/// The limit the session's variables pass, as `conn` sees them.
async fn over_limits(
    conn: &mut sqlx::AnyConnection,
    tenant: &Tenant,
    session_id: &str,
    limits: SessionLimits,
) -> Result<Option<Refusal>> {
    let row = sqlx::query(
        "SELECT COUNT(*) AS n, CAST(COALESCE(SUM(size), 0) AS BIGINT) AS bytes
         FROM session_variables WHERE tenant = $1 AND session_id = $2",
    )
    .bind(&tenant.0)
    .bind(session_id)
    .fetch_one(conn)
    .await?;
    let (count, bytes): (i64, i64) = (row.try_get("n")?, row.try_get("bytes")?);
    Ok(limits.passed(count as u64, bytes as u64))
}

/// Sets one session variable (replacing its value), noting who wrote it: a run's id, or
/// `api`.
async fn upsert_variable(
    conn: &mut sqlx::AnyConnection,
    tenant: &Tenant,
    session_id: &str,
    (name, value): (&String, &Value),
    written_by: &str,
    now: &str,
) -> Result<()> {
    let text = value.to_string();
    sqlx::query(
        "INSERT INTO session_variables
            (tenant, session_id, name, value, written_by, updated_at, size)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (tenant, session_id, name) DO UPDATE SET
            value = excluded.value, written_by = excluded.written_by,
            updated_at = excluded.updated_at, size = excluded.size",
    )
    .bind(&tenant.0)
    .bind(session_id)
    .bind(name)
    .bind(&text)
    .bind(written_by)
    .bind(now)
    .bind(text.len() as i64)
    .execute(conn)
    .await?;
    Ok(())
}

/// One run of a session, as its page lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRun {
    pub id: RunId,
    pub status: String,
    /// How it ended (`success`, `partial`, ...); `None` until it has.
    pub completion: Option<String>,
    pub created_at: chrono::DateTime<Utc>,
    pub finished_at: Option<chrono::DateTime<Utc>>,
}

/// One session as `GET /v1/sessions` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedSession {
    pub id: String,
    /// Its runs in all (runs deleted one by one, or by retention, are not counted).
    pub run_count: u64,
    pub variable_count: u64,
    /// When its first run (of those kept) was created.
    pub first_run_at: Option<chrono::DateTime<Utc>>,
    /// Its newest run, if it has one.
    pub last_run: Option<SessionRun>,
}

/// Where a page of [`Sessions::list`] starts: after the session with this newest run (`None`:
/// it has none) and id. Sessions are listed by their newest run, newest first, then sessions
/// with no run; ties (none but those) by id, descending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionCursor {
    pub last_run: Option<RunId>,
    pub id: String,
}

/// A tenant's sessions, one row each: every id a run, a variable or a summary has, less the
/// deleted ones, with what its newest and oldest runs say. `$1` is the tenant; `$2` and `$3`
/// the cursor's newest run (`''` for none) and id, when a cursor is given.
const LISTED_SESSIONS: &str = "
    SELECT s.session_id AS session_id, s.last_run AS last_run, s.run_count AS run_count,
           s.variable_count AS variable_count, f.created_at AS first_at,
           l.status AS status, l.completion AS completion, l.created_at AS last_at,
           l.finished_at AS last_finished
    FROM (
        SELECT session_id, MAX(last_run) AS last_run, MIN(first_run) AS first_run,
               CAST(SUM(n) AS BIGINT) AS run_count, CAST(SUM(v) AS BIGINT) AS variable_count
        FROM (
            SELECT session_id, MAX(id) AS last_run, MIN(id) AS first_run, COUNT(*) AS n,
                   0 AS v
            FROM runs WHERE tenant = $1 AND session_id IS NOT NULL GROUP BY session_id
            UNION ALL
            SELECT session_id, '', NULL, 0, COUNT(*)
            FROM session_variables WHERE tenant = $1 GROUP BY session_id
            UNION ALL
            SELECT session_id, '', NULL, 0, 0 FROM session_summaries WHERE tenant = $1
        ) parts
        WHERE session_id NOT IN (SELECT session_id FROM deleted_sessions WHERE tenant = $1)
        GROUP BY session_id
    ) s
    LEFT JOIN runs l ON l.tenant = $1 AND l.id = s.last_run
    LEFT JOIN runs f ON f.tenant = $1 AND f.id = s.first_run";

/// Reads one row of [`LISTED_SESSIONS`].
fn listed_session(r: &sqlx::any::AnyRow) -> Result<ListedSession> {
    let last_run: String = r.try_get("last_run")?;
    let last_run = match RunId::parse(&last_run) {
        None if last_run.is_empty() => None,
        None => return Err(super::Error::Corrupt(format!("run id `{last_run}`"))),
        Some(id) => Some(SessionRun {
            id,
            status: r.try_get("status")?,
            completion: r.try_get("completion")?,
            created_at: super::parse_time(&r.try_get::<String, _>("last_at")?)?,
            finished_at: super::parse_opt_time(r.try_get("last_finished")?)?,
        }),
    };
    Ok(ListedSession {
        id: r.try_get("session_id")?,
        run_count: r.try_get::<i64, _>("run_count")?.max(0) as u64,
        variable_count: r.try_get::<i64, _>("variable_count")?.max(0) as u64,
        first_run_at: super::parse_opt_time(r.try_get("first_at")?)?,
        last_run,
    })
}

/// Sessions as the API reads and changes them: their variables, summary and runs. The engine
/// reads and writes the same rows through [`Store`].
#[derive(Clone)]
pub struct Sessions(Store);

impl Sessions {
    pub fn new(store: Store) -> Self {
        Sessions(store)
    }

    pub async fn variables(&self, tenant: &Tenant, id: &str) -> Result<Map<String, Value>> {
        self.0.session_variables(tenant, id).await
    }

    pub async fn summary(&self, tenant: &Tenant, id: &str) -> Result<Option<SessionSummary>> {
        self.0.session_summary(tenant, id).await
    }

    /// The session's succeeded runs' turns, the newest `limit`, oldest first.
    pub async fn turns(&self, tenant: &Tenant, id: &str, limit: u32) -> Result<Vec<Turn>> {
        // Every run id sorts before this one (UUIDv7 ids are made in time order).
        let after_all = RunId::parse("ffffffff-ffff-7fff-bfff-ffffffffffff").expect("an id");
        self.0
            .session_turns(tenant, id, after_all, None, limit)
            .await
    }

    /// The session's newest `limit` runs, newest first, and how many it has in all.
    pub async fn runs(
        &self,
        tenant: &Tenant,
        id: &str,
        limit: u32,
    ) -> Result<(Vec<SessionRun>, u64)> {
        let rows = sqlx::query(
            "SELECT id, status, completion, created_at, finished_at FROM runs
             WHERE tenant = $1 AND session_id = $2 ORDER BY id DESC LIMIT $3",
        )
        .bind(&tenant.0)
        .bind(id)
        .bind(i64::from(limit))
        .fetch_all(&self.0.pool())
        .await?;
        let runs = rows
            .iter()
            .map(|r| {
                let run: String = r.try_get("id")?;
                Ok(SessionRun {
                    id: RunId::parse(&run)
                        .ok_or_else(|| super::Error::Corrupt(format!("run id `{run}`")))?,
                    status: r.try_get("status")?,
                    completion: r.try_get("completion")?,
                    created_at: super::parse_time(&r.try_get::<String, _>("created_at")?)?,
                    finished_at: super::parse_opt_time(r.try_get("finished_at")?)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let total: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE tenant = $1 AND session_id = $2")
                .bind(&tenant.0)
                .bind(id)
                .fetch_one(&self.0.pool())
                .await?;
        Ok((runs, total as u64))
    }

    /// The tenant's sessions, newest run first (see [`SessionCursor`]), at most `limit`,
    /// after `cursor`. A deleted session is not listed.
    pub async fn list(
        &self,
        tenant: &Tenant,
        cursor: Option<&SessionCursor>,
        user: Option<&str>,
        limit: u32,
    ) -> Result<Vec<ListedSession>> {
        let mut conditions = Vec::new();
        let mut n = 1;
        let mut param = || {
            n += 1;
            format!("${n}")
        };
        if cursor.is_some() {
            let (last, id) = (param(), param());
            conditions.push(format!(
                "(s.last_run < {last} OR (s.last_run = {last} AND s.session_id < {id}))"
            ));
        }
        if user.is_some() {
            conditions.push(format!(
                "s.session_id IN (SELECT session_id FROM runs WHERE tenant = $1 AND user_id = {})",
                param()
            ));
        }
        let filter = match conditions.is_empty() {
            true => String::new(),
            false => format!(" WHERE {}", conditions.join(" AND ")),
        };
        let sql = format!(
            "{LISTED_SESSIONS}{filter} ORDER BY s.last_run DESC, s.session_id DESC LIMIT {}",
            param()
        );
        // The statement is made of constants only; every value is bound.
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(&tenant.0);
        if let Some(c) = cursor {
            let last = c.last_run.map_or_else(String::new, |id| id.to_string());
            q = q.bind(last).bind(c.id.clone());
        }
        if let Some(user) = user {
            q = q.bind(user.to_owned());
        }
        let rows = q.bind(i64::from(limit)).fetch_all(&self.0.pool()).await?;
        rows.iter().map(listed_session).collect()
    }

    /// The user of the session's runs: `None` when it has no run, `Some(None)` when they are
    /// of no user.
    pub async fn user(&self, tenant: &Tenant, id: &str) -> Result<Option<Option<String>>> {
        self.0.session_user(tenant, id).await
    }

    /// The ids of the session's runs that have not finished.
    pub async fn unfinished(&self, tenant: &Tenant, id: &str) -> Result<Vec<RunId>> {
        self.0.session_unfinished(tenant, id, None).await
    }

    /// Sets the variables of `set` and deletes those named in `unset`, in one transaction
    /// (written by the API, not by a run), within `limits`: nothing is written when the
    /// change would pass one, or the session was deleted.
    pub async fn change_variables(
        &self,
        tenant: &Tenant,
        id: &str,
        (set, unset): (&Map<String, Value>, &[String]),
        limits: SessionLimits,
    ) -> Result<std::result::Result<(), Refusal>> {
        if let Some(refused) = limits.value_too_large(set) {
            return Ok(Err(refused));
        }
        let mut tx = self.0.pool().begin().await?;
        self.0.lock_session(&mut tx, tenant, id).await?;
        let now = fmt_time(Utc::now());
        for variable in set {
            upsert_variable(&mut tx, tenant, id, variable, "api", &now).await?;
        }
        for name in unset {
            sqlx::query(
                "DELETE FROM session_variables WHERE tenant = $1 AND session_id = $2 AND name = $3",
            )
            .bind(&tenant.0)
            .bind(id)
            .bind(name)
            .execute(&mut *tx)
            .await?;
        }
        let refused = match self.0.session_deleted_in(&mut tx, tenant, id).await? {
            true => Some(Refusal::Deleted),
            false => over_limits(&mut tx, tenant, id, limits).await?,
        };
        if let Some(refused) = refused {
            tx.rollback().await?;
            return Ok(Err(refused));
        }
        tx.commit().await?;
        Ok(Ok(()))
    }

    /// Deletes the session whole, in one transaction: its runs with everything they own, its
    /// variables, summary and memory (`session/ID/…`); or nothing, when a run of it has not finished. It stays deleted:
    /// a new run naming it is refused, and a run being created in it as it is deleted either
    /// commits first (and the delete finds it unfinished) or is refused.
    pub async fn delete(&self, tenant: &Tenant, id: &str) -> Result<Deleted> {
        let mut tx = self.0.pool().begin().await?;
        self.0.lock_session(&mut tx, tenant, id).await?;
        // A write first: on SQLite it takes the database's write lock, so what is read next
        // stays true until the commit.
        sqlx::query(
            "INSERT INTO deleted_sessions (tenant, session_id, deleted_at) VALUES ($1, $2, $3)
             ON CONFLICT (tenant, session_id) DO NOTHING",
        )
        .bind(&tenant.0)
        .bind(id)
        .bind(fmt_time(Utc::now()))
        .execute(&mut *tx)
        .await?;
        let unfinished: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT id FROM runs WHERE tenant = $1 AND session_id = $2
               AND status IN {IN_PROGRESS} ORDER BY id"
        )))
        .bind(&tenant.0)
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
        if !unfinished.is_empty() {
            tx.rollback().await?;
            return unfinished
                .iter()
                .map(|r| {
                    RunId::parse(r).ok_or_else(|| super::Error::Corrupt(format!("run id `{r}`")))
                })
                .collect::<Result<_>>()
                .map(Deleted::Unfinished);
        }
        let of_session = "SELECT id FROM runs WHERE tenant = $1 AND session_id = $2";
        for table in RUN_TABLES {
            // Table names come from the store's own list; the values are bound.
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE run_id IN ({of_session})"
            )))
            .bind(&tenant.0)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        }
        for table in ["runs", "session_variables", "session_summaries"] {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE tenant = $1 AND session_id = $2"
            )))
            .bind(&tenant.0)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        }
        // Its memory (`session/ID/…`: what its runs put there, and its turns as history by
        // relevance keeps them).
        super::memory::forget_session(&mut tx, tenant, id).await?;
        tx.commit().await?;
        Ok(Deleted::Whole)
    }
}

impl Store {
    /// Whether the session was deleted (no run is created in it again).
    pub async fn session_deleted(&self, tenant: &Tenant, id: &str) -> Result<bool> {
        let mut conn = self.pool().acquire().await?;
        self.session_deleted_in(&mut conn, tenant, id).await
    }

    async fn session_deleted_in(
        &self,
        conn: &mut sqlx::AnyConnection,
        tenant: &Tenant,
        id: &str,
    ) -> Result<bool> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM deleted_sessions WHERE tenant = $1 AND session_id = $2",
        )
        .bind(&tenant.0)
        .bind(id)
        .fetch_optional(conn)
        .await?;
        Ok(found.is_some())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn variables_and_summaries_are_kept_per_tenant_and_session() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("orca.db").display());
        let store = Store::connect(&url, 2).await.unwrap();
        let (a, b) = (Tenant("a".into()), Tenant("b".into()));
        let writer = RunId::new();
        let no_limits = SessionLimits::default();
        let values = json!({ "topic": "cats", "n": 2 });
        store
            .set_session_variables(&a, "s", values.as_object().unwrap(), writer, no_limits)
            .await
            .unwrap()
            .unwrap();
        let update = json!({ "n": 3 });
        store
            .set_session_variables(&a, "s", update.as_object().unwrap(), writer, no_limits)
            .await
            .unwrap()
            .unwrap();
        let read = store.session_variables(&a, "s").await.unwrap();
        assert_eq!(Value::Object(read), json!({ "topic": "cats", "n": 3 }));
        assert!(store.session_variables(&b, "s").await.unwrap().is_empty());
        assert!(store.session_variables(&a, "t").await.unwrap().is_empty());

        let (first, second) = (RunId::new(), RunId::new());
        let summary = |text: &str, through| SessionSummary {
            text: text.into(),
            through,
            turns: 2,
            tokens: 5,
        };
        store
            .save_session_summary(&a, "s", &summary("newer", second), writer)
            .await
            .unwrap();
        // A summary that covers less (made concurrently, stored later) does not replace it.
        store
            .save_session_summary(&a, "s", &summary("older", first), writer)
            .await
            .unwrap();
        let kept = store.session_summary(&a, "s").await.unwrap().unwrap();
        assert_eq!((kept.text.as_str(), kept.through), ("newer", second));
        assert_eq!(store.session_summary(&b, "s").await.unwrap(), None);
    }
}
