//! A user's data, whole (issue 48): what `GET /v1/users/{id}/export` reads and what
//! `DELETE /v1/users/{id}` erases in one transaction — the user's runs with everything they
//! own ([`super::RUN_TABLES`]), the sessions of those runs (variables, summaries and their
//! `session/ID/…` memory; each session stays deleted, as a session deleted alone does), and
//! the user's memory items (its
//! `user/ID/…` namespace and every item stored as the user's). Nothing of another user or of
//! the tenant itself is touched.

use sqlx::AssertSqlSafe;

use super::quota::IN_PROGRESS;
use super::{Backend, Result, Store, fmt_time};
use crate::domain::memory::MemoryItem;
use crate::domain::{RunId, Tenant};

/// What erasing a user did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Erased {
    Done {
        runs: u64,
        sessions: u64,
        items: u64,
    },
    /// Nothing: these runs of the user have not finished (cancel them first).
    Unfinished(Vec<RunId>),
}

/// The user's runs, as a subquery over `$1` (tenant) and `$2` (user).
const RUNS_OF_USER: &str = "SELECT id FROM runs WHERE tenant = $1 AND user_id = $2";
/// The sessions of the user's runs.
const SESSIONS_OF_USER: &str =
    "SELECT session_id FROM runs WHERE tenant = $1 AND user_id = $2 AND session_id IS NOT NULL";
/// The user's memory items, for a table aliased `m`: stored as theirs, or in `user/ID` and
/// below (`$3` is `user/ID/`, `$4` its length).
fn items_of_user() -> String {
    let namespace = super::memory::within("'user/' || $2", "$4", "$3");
    format!("m.tenant = $1 AND (m.user_id = $2 OR {namespace})")
}

/// Users as the API reads and erases them.
#[derive(Clone)]
pub struct Users(Store);

impl Users {
    pub fn new(store: Store) -> Users {
        Users(store)
    }

    /// Erases everything of `user` (see the module's doc), or nothing when a run of theirs
    /// has not finished.
    pub async fn erase(&self, tenant: &Tenant, user: &str) -> Result<Erased> {
        let store = &self.0;
        let mut tx = match store.backend {
            Backend::Sqlite => store.pool().begin_with("BEGIN IMMEDIATE").await?,
            Backend::Postgres => store.pool().begin().await?,
        };
        let unfinished: Vec<String> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT id FROM runs WHERE tenant = $1 AND user_id = $2 AND status IN {IN_PROGRESS}
             ORDER BY id {}",
            match store.backend {
                Backend::Sqlite => "",
                Backend::Postgres => "FOR UPDATE",
            }
        )))
        .bind(&tenant.0)
        .bind(user)
        .fetch_all(&mut *tx)
        .await?;
        if !unfinished.is_empty() {
            tx.rollback().await?;
            let ids = unfinished
                .iter()
                .filter_map(|id| RunId::parse(id))
                .collect();
            return Ok(Erased::Unfinished(ids));
        }
        let sessions: Vec<String> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT DISTINCT session_id FROM ({SESSIONS_OF_USER}) s"
        )))
        .bind(&tenant.0)
        .bind(user)
        .fetch_all(&mut *tx)
        .await?;
        let now = fmt_time(chrono::Utc::now());
        for session in &sessions {
            sqlx::query(
                "INSERT INTO deleted_sessions (tenant, session_id, deleted_at) VALUES ($1, $2, $3)
                 ON CONFLICT (tenant, session_id) DO NOTHING",
            )
            .bind(&tenant.0)
            .bind(session)
            .bind(&now)
            .execute(&mut *tx)
            .await?;
        }
        for table in ["session_variables", "session_summaries"] {
            sqlx::query(AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE tenant = $1 AND session_id IN ({SESSIONS_OF_USER})"
            )))
            .bind(&tenant.0)
            .bind(user)
            .execute(&mut *tx)
            .await?;
        }
        for table in super::RUN_TABLES {
            sqlx::query(AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE run_id IN ({RUNS_OF_USER})"
            )))
            .bind(&tenant.0)
            .bind(user)
            .execute(&mut *tx)
            .await?;
        }
        let runs = sqlx::query("DELETE FROM runs WHERE tenant = $1 AND user_id = $2")
            .bind(&tenant.0)
            .bind(user)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let mut items = 0;
        for session in &sessions {
            items += super::memory::forget_session(&mut tx, tenant, session).await?;
        }
        let below = format!("user/{user}/");
        items += sqlx::query(AssertSqlSafe(format!(
            "DELETE FROM memory_items WHERE id IN (SELECT m.id FROM memory_items m WHERE {})",
            items_of_user()
        )))
        .bind(&tenant.0)
        .bind(user)
        .bind(&below)
        .bind(below.len() as i64)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(Erased::Done {
            runs,
            sessions: sessions.len() as u64,
            items,
        })
    }

    /// Every memory item of `user`, by namespace then key.
    pub async fn items(&self, tenant: &Tenant, user: &str) -> Result<Vec<MemoryItem>> {
        let below = format!("user/{user}/");
        let sql = format!(
            "SELECT {} FROM memory_items m WHERE {} ORDER BY m.namespace, m.key",
            super::memory::COLUMNS,
            items_of_user()
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(&tenant.0)
            .bind(user)
            .bind(&below)
            .bind(below.len() as i64)
            .fetch_all(&self.0.pool())
            .await?;
        rows.iter()
            .map(|r| super::memory::item_of(r, None))
            .collect()
    }
}
