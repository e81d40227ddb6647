//! A run's pause as stored with its row: `pause_requested` (see `engine::pause`), the
//! breakpoint places it is held at (`breakpoints_held`) and those a resume let it past
//! (`breakpoints_released`), each place followed by a newline.
//!
//! A resume moves the held places to the released ones in the statement the API answers
//! `202` after: the run's own checkpoint of the release comes later (its task wakes, then
//! writes it), so without this a kill or a takeover in between would stop the run at the same
//! breakpoint again. A pause (asked for, or a breakpoint reached) is held to the tenant's
//! `paused_runs` quota in the statement that records it; on PostgreSQL a per-tenant
//! transaction lock orders those statements, so the cap holds across replicas.

use sqlx::{AssertSqlSafe, Row};

use super::cluster::UNFINISHED;
use super::{Backend, Error, Result, Store};
use crate::domain::{RunId, StepPath, Tenant};

/// What recording a pause did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseWrite {
    /// Recorded (or the run was already asked to pause).
    Done,
    /// Nothing written: the run has ended (or, for a breakpoint, is not this replica's).
    Ended,
    /// Nothing written: the tenant has `used` runs asked to pause, its cap.
    OverCap { used: u64 },
}

/// The places written in a `breakpoints_*` column.
pub(super) fn places(text: &str) -> Result<Vec<StepPath>> {
    text.split('\n')
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse()
                .map_err(|_| Error::Corrupt(format!("breakpoint place `{p}`")))
        })
        .collect()
}

impl Store {
    /// Asks the run to pause, for whichever replica runs it (now, or after a restart or a
    /// takeover), unless its tenant has `cap` runs asked to pause already (0: no cap; a run
    /// already asked is not counted twice).
    pub async fn request_pause(&self, tenant: &Tenant, id: RunId, cap: u64) -> Result<PauseWrite> {
        self.pause_guarded(tenant, id, cap, None).await
    }

    /// The run's task reached a breakpoint at `place`: the run is to pause there, under the
    /// same cap. Written only while this replica leases the run, so a replica that wakes
    /// after another took the run over cannot pause it.
    pub async fn hold_breakpoint(
        &self,
        tenant: &Tenant,
        id: RunId,
        place: &StepPath,
        cap: u64,
    ) -> Result<PauseWrite> {
        self.pause_guarded(tenant, id, cap, Some(place)).await
    }

    async fn pause_guarded(
        &self,
        tenant: &Tenant,
        id: RunId,
        cap: u64,
        place: Option<&StepPath>,
    ) -> Result<PauseWrite> {
        let mut tx = self.pool().begin().await?;
        if self.backend == Backend::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                .bind(format!("paused:{}", tenant.0))
                .execute(&mut *tx)
                .await?;
        }
        let (held, owner) = match place {
            Some(_) if self.shared() => (
                ", breakpoints_held = breakpoints_held || $4",
                " AND owner = $5",
            ),
            Some(_) => (", breakpoints_held = breakpoints_held || $4", ""),
            None => ("", ""),
        };
        let sql = format!(
            "UPDATE runs SET pause_requested = 1{held}
             WHERE id = $1 AND status IN {UNFINISHED}{owner}
               AND (pause_requested = 1 OR $2 = 0
                    OR (SELECT COUNT(*) FROM runs WHERE tenant = $3 AND pause_requested = 1
                          AND status IN {UNFINISHED}) < $2)"
        );
        let mut q = sqlx::query(AssertSqlSafe(sql))
            .bind(id.to_string())
            .bind(i64::try_from(cap).unwrap_or(i64::MAX))
            .bind(&tenant.0);
        if let Some(place) = place {
            q = q.bind(format!("{place}\n"));
            if self.shared() {
                q = q.bind(&*self.replica);
            }
        }
        let done = q.execute(&mut *tx).await?.rows_affected() == 1;
        let used = if done || cap == 0 {
            0
        } else {
            paused_runs(&mut tx, tenant).await?
        };
        tx.commit().await?;
        Ok(match done {
            true => PauseWrite::Done,
            false if cap > 0 && used >= cap => PauseWrite::OverCap { used },
            false => PauseWrite::Ended,
        })
    }

    /// Lifts the run's pause and lets it past the breakpoints it is held at, in one
    /// statement. False when the run has ended (nothing written).
    pub async fn lift_pause(&self, id: RunId) -> Result<bool> {
        let sql = format!(
            "UPDATE runs SET pause_requested = 0,
                 breakpoints_released = breakpoints_released || breakpoints_held,
                 breakpoints_held = ''
             WHERE id = $1 AND status IN {UNFINISHED}"
        );
        let done = sqlx::query(AssertSqlSafe(sql))
            .bind(id.to_string())
            .execute(&self.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// How many of the tenant's runs are asked to pause (paused, or pausing) now.
    pub async fn paused_runs(&self, tenant: &Tenant) -> Result<u64> {
        let mut conn = self.pool().acquire().await?;
        paused_runs(&mut conn, tenant).await
    }
}

async fn paused_runs(conn: &mut sqlx::AnyConnection, tenant: &Tenant) -> Result<u64> {
    let sql = format!(
        "SELECT COUNT(*) AS n FROM runs WHERE tenant = $1 AND pause_requested = 1
           AND status IN {UNFINISHED}"
    );
    let row = sqlx::query(AssertSqlSafe(sql))
        .bind(&tenant.0)
        .fetch_one(conn)
        .await?;
    Ok(row.try_get::<i64, _>("n")?.max(0) as u64)
}
