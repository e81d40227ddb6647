//! What a session keeps across its runs: its variables (`session.NAME`), its turns (the input
//! and output of each succeeded run) and the summary of its older turns. Reads and writes
//! only; when to summarise is the engine's decision.

use chrono::Utc;
use serde_json::{Map, Value};
use sqlx::Row;

use super::{Result, Store, fmt_time, parse_json};
use crate::domain::{RunId, Tenant};

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
        let rows = sqlx::query(
            "SELECT name, value FROM session_variables WHERE tenant = $1 AND session_id = $2",
        )
        .bind(&tenant.0)
        .bind(session_id)
        .fetch_all(&self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                let name: String = r.try_get("name")?;
                Ok((name, parse_json(&r.try_get::<String, _>("value")?)?))
            })
            .collect()
    }

    /// Sets `values` (each replacing the variable of its name), in one transaction, while
    /// this replica leases the run `written_by` ([`super::Error::LeaseLost`] otherwise).
    pub async fn set_session_variables(
        &self,
        tenant: &Tenant,
        session_id: &str,
        values: &Map<String, Value>,
        written_by: RunId,
    ) -> Result<()> {
        let now = fmt_time(Utc::now());
        let mut tx = self.pool().begin().await?;
        self.fence(&mut tx, written_by).await?;
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
        tx.commit().await?;
        Ok(())
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
    sqlx::query(
        "INSERT INTO session_variables
            (tenant, session_id, name, value, written_by, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (tenant, session_id, name) DO UPDATE SET
            value = excluded.value, written_by = excluded.written_by,
            updated_at = excluded.updated_at",
    )
    .bind(&tenant.0)
    .bind(session_id)
    .bind(name)
    .bind(value.to_string())
    .bind(written_by)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(())
}

/// One run of a session, as its page lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRun {
    pub id: RunId,
    pub status: String,
    pub created_at: chrono::DateTime<Utc>,
    pub finished_at: Option<chrono::DateTime<Utc>>,
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
            "SELECT id, status, created_at, finished_at FROM runs
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

    /// The ids of the session's runs that have not finished.
    pub async fn unfinished(&self, tenant: &Tenant, id: &str) -> Result<Vec<RunId>> {
        self.0.session_unfinished(tenant, id, None).await
    }

    /// Sets the variables of `set` and deletes those named in `unset`, in one transaction
    /// (written by the API, not by a run).
    pub async fn change_variables(
        &self,
        tenant: &Tenant,
        id: &str,
        set: &Map<String, Value>,
        unset: &[String],
    ) -> Result<()> {
        let mut tx = self.0.pool().begin().await?;
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
        tx.commit().await?;
        Ok(())
    }

    /// Deletes the session's variables and summary (its runs are deleted through the engine).
    pub async fn forget(&self, tenant: &Tenant, id: &str) -> Result<()> {
        let mut tx = self.0.pool().begin().await?;
        for table in ["session_variables", "session_summaries"] {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE tenant = $1 AND session_id = $2"
            )))
            .bind(&tenant.0)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
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
        let values = json!({ "topic": "cats", "n": 2 });
        store
            .set_session_variables(&a, "s", values.as_object().unwrap(), writer)
            .await
            .unwrap();
        let update = json!({ "n": 3 });
        store
            .set_session_variables(&a, "s", update.as_object().unwrap(), writer)
            .await
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
