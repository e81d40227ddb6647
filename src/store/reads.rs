//! Narrow read handles over the store, for readers that must not write: [`RunReads`] (runs as
//! rows: one, a filtered page, the counts by status) and [`History`] (what a run recorded:
//! events, step attempts, plans, checkpoints). The API holds these instead of the [`Store`];
//! runs are written by the engine and the event hub only.
//!
//! Each method is one of the store's own statements (written once for both backends); the
//! handles add no SQL and decide nothing.

use super::timeline::RunHistory;
use super::{Checkpoint, PlanRecord, Result, RunFilter, RunTail, Store, StoredRun};
use crate::domain::{Event, EventKind, Run, RunId, StepAttempt, Tenant};

/// Runs as rows, read only. A cheap-clone handle.
#[derive(Clone)]
pub struct RunReads {
    store: Store,
}

impl RunReads {
    pub fn new(store: Store) -> RunReads {
        RunReads { store }
    }

    /// A tenant's run with the request that made it; `None` for an unknown run or another
    /// tenant's.
    pub async fn get(&self, tenant: &Tenant, id: RunId) -> Result<Option<StoredRun>> {
        self.store.get_run(tenant, id).await
    }

    /// A tenant's runs matching the filter, newest first ([`Store::list_runs`]).
    pub async fn list(&self, tenant: &Tenant, filter: &RunFilter) -> Result<Vec<Run>> {
        self.store.list_runs(tenant, filter).await
    }

    /// How many runs there are of each status, every tenant's (for the metrics).
    pub async fn count_by_status(&self) -> Result<Vec<(String, i64)>> {
        self.store.count_runs_by_status().await
    }

    /// What a tenant uses now, against its quota ([`Store::tenant_usage`]).
    pub async fn usage(&self, tenant: &Tenant) -> Result<crate::domain::quota::Usage> {
        self.store.tenant_usage(tenant, crate::domain::now()).await
    }

    /// Runs in progress and tokens today, by tenant (for the metrics).
    pub async fn usage_by_tenant(&self) -> Result<Vec<(String, u64, u64)>> {
        self.store.usage_by_tenant(crate::domain::now()).await
    }
}

/// What runs recorded, read only. Takes run ids the caller has already checked are the
/// tenant's (except [`History::timeline`], which checks itself). A cheap-clone handle.
#[derive(Clone)]
pub struct History {
    store: Store,
}

impl History {
    pub fn new(store: Store) -> History {
        History { store }
    }

    /// At most `limit` of a run's events with a seq above `after`, in seq order.
    pub async fn events_after(&self, run: RunId, after: u64, limit: u32) -> Result<Vec<Event>> {
        self.store.events_after(run, after, limit).await
    }

    /// Where a run's event log ends and whether the run has finished; `None` for no run.
    pub async fn tail(&self, run: RunId) -> Result<Option<RunTail>> {
        self.store.run_tail(run).await
    }

    /// Every step attempt of a run, in start order.
    pub async fn step_attempts(&self, run: RunId) -> Result<Vec<StepAttempt>> {
        self.store.step_attempts(run).await
    }

    /// Every plan version of a run, oldest first.
    pub async fn plans(&self, run: RunId) -> Result<Vec<PlanRecord>> {
        self.store.list_plans(run).await
    }

    /// At most `limit` of a run's checkpoints with an id above `after`, oldest first.
    pub async fn checkpoints_after(
        &self,
        run: RunId,
        after: u64,
        limit: u32,
    ) -> Result<Vec<Checkpoint>> {
        self.store.checkpoints_after(run, after, limit).await
    }

    /// A tenant's run with its attempts and its events but the `skip` kinds, read as one
    /// snapshot ([`Store::run_history`]); `None` for an unknown run or another tenant's.
    pub async fn timeline(
        &self,
        tenant: &Tenant,
        run: RunId,
        skip: &[EventKind],
    ) -> Result<Option<RunHistory>> {
        self.store.run_history(tenant, run, skip).await
    }
}
