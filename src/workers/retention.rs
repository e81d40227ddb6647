//! Retention: finished runs are deleted, with everything they own, `retention.finished_run_days`
//! after they finished (0 keeps them forever), and memory items past their time to live are
//! deleted (so they stop counting toward `memory.max_tenant_bytes`). One [`Sweeper`] task,
//! owned by the app, sweeps at start and then every `retention.sweep_interval_secs`; it stops
//! on the app's shutdown token.
//!
//! A sweep deletes `retention.batch_runs` runs per transaction and pauses between batches, so
//! the write lock is never held long enough to stall running runs' event writes. Unfinished
//! runs are never touched. This module decides which runs are old enough; the store only
//! deletes what it is given ([`Store::delete_runs`]).

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::{mpsc, oneshot};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::config::RetentionConfig;
use crate::store::memory::Memory;
use crate::store::{self, Store};

/// Pause between two batches of one sweep: longer than SQLite's busy handler waits between
/// retries (at most 100 ms), so a run's writer waiting for the lock gets it in between.
const BATCH_PAUSE: Duration = Duration::from_millis(150);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("deleting runs past retention failed")]
    Store(#[from] store::Error),
    #[error("the retention sweeper has stopped")]
    Stopped,
}

type Reply = oneshot::Sender<Result<u64, Error>>;

/// Asks the sweeper for a sweep now (operators' tools and tests); cheap to clone.
#[derive(Clone)]
pub struct RetentionHandle {
    commands: mpsc::Sender<Reply>,
}

impl RetentionHandle {
    /// Sweeps now (after any sweep in progress) and returns how many runs were deleted.
    /// With retention off (`finished_run_days = 0`) no run is deleted (expired memory items
    /// still are).
    pub async fn sweep_now(&self) -> Result<u64, Error> {
        let (tx, rx) = oneshot::channel();
        self.commands.send(tx).await.map_err(|_| Error::Stopped)?;
        rx.await.map_err(|_| Error::Stopped)?
    }
}

/// The sweeper task's state: `Sweeper::new(..)`, then spawn [`Sweeper::run`].
pub struct Sweeper {
    store: Store,
    memory: Memory,
    config: RetentionConfig,
    commands: mpsc::Receiver<Reply>,
    stop: CancellationToken,
}

impl Sweeper {
    pub fn new(
        (store, memory): (Store, Memory),
        config: RetentionConfig,
        stop: CancellationToken,
    ) -> (Sweeper, RetentionHandle) {
        let (tx, rx) = mpsc::channel(8);
        let sweeper = Sweeper {
            store,
            memory,
            config,
            commands: rx,
            stop,
        };
        (sweeper, RetentionHandle { commands: tx })
    }

    /// Sweeps at start and on every interval until `stop` fires; answers `sweep_now` between.
    pub async fn run(mut self) {
        // The start's sweep goes first: requests already waiting are answered after it.
        if !self.sweep_logged().await {
            return;
        }
        let period = Duration::from_secs(self.config.sweep_interval_secs);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        // After a long sweep, wait a whole period again rather than sweeping back to back.
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tick.tick() => {
                    if !self.sweep_logged().await {
                        return;
                    }
                }
                Some(reply) = self.commands.recv() => {
                    let _ = reply.send(self.sweep(Utc::now()).await);
                }
            }
        }
    }

    /// A scheduled sweep. A failure is logged and retried on the next tick (the runs stay
    /// until then). Returns false once the app is stopping.
    async fn sweep_logged(&self) -> bool {
        if let Err(e) = self.sweep(Utc::now()).await {
            tracing::error!(error = ?e, "retention sweep failed");
        }
        !self.stop.is_cancelled()
    }

    /// Deletes expired memory items, then every finished run that finished before
    /// `now - finished_run_days`, batch by batch; stops early (between batches) when the app
    /// stops.
    async fn sweep(&self, now: DateTime<Utc>) -> Result<u64, Error> {
        // The quota ledger outlives the runs it counts, for no longer than its windows (a
        // minute, a UTC day): two days back is past both.
        self.store
            .prune_usage_ledger(now - chrono::Duration::days(2))
            .await?;
        self.sweep_memory().await?;
        let days = self.config.finished_run_days;
        let Some(cutoff) = cutoff(now, days) else {
            return Ok(0);
        };
        let batch = self.config.batch_runs;
        let mut deleted = 0;
        loop {
            let ids = self.store.runs_finished_before(cutoff, batch).await?;
            if ids.is_empty() {
                break;
            }
            deleted += self.store.delete_runs(&ids).await?;
            if ids.len() < batch as usize || !self.paused().await {
                break;
            }
        }
        if deleted > 0 {
            tracing::info!(runs = deleted, days, "deleted finished runs past retention");
        }
        Ok(deleted)
    }

    /// The pause between two batches ([`BATCH_PAUSE`]); false, at once, when the app stops.
    async fn paused(&self) -> bool {
        tokio::select! {
            _ = self.stop.cancelled() => false,
            _ = tokio::time::sleep(BATCH_PAUSE) => true,
        }
    }

    /// Deletes the memory items past their time to live, `batch_runs` at a time.
    async fn sweep_memory(&self) -> Result<u64, Error> {
        let batch = self.config.batch_runs;
        let mut swept = 0;
        loop {
            let n = self.memory.sweep_expired(batch).await?;
            swept += n;
            if n < u64::from(batch) || !self.paused().await {
                break;
            }
        }
        if swept > 0 {
            tracing::info!(items = swept, "deleted expired memory items");
        }
        Ok(swept)
    }
}

/// Runs that finished before this are deleted; `None` when none are (retention off, or a
/// period reaching before the calendar's range).
fn cutoff(now: DateTime<Utc>, days: u32) -> Option<DateTime<Utc>> {
    if days == 0 {
        return None;
    }
    now.checked_sub_signed(TimeDelta::try_days(i64::from(days))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cutoff_is_the_retention_period_before_now() {
        let now = DateTime::parse_from_rfc3339("2026-03-31T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let at = |s: &str| Some(DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc));
        let cases: &[(u32, Option<DateTime<Utc>>)] = &[
            (0, None),
            (1, at("2026-03-30T12:00:00Z")),
            (30, at("2026-03-01T12:00:00Z")),
            // Further back than chrono reaches: nothing is old enough.
            (u32::MAX, None),
        ];
        for (days, expected) in cases {
            assert_eq!(cutoff(now, *days), *expected, "{days} days");
        }
    }
}
