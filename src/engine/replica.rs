//! What this replica does for every run beside driving it: resumes the unfinished runs no
//! task runs (after a start, a crash, or the store coming back), renews its leases and takes
//! over runs whose lease lapsed, passes notices (cancels, answers, re-plan requests) to the
//! runs it drives, and watches the store's health. `app.rs` spawns the long-running ones.

use std::collections::HashSet;
use std::time::Duration;

use crate::domain::RunId;
use crate::store::{self, Notice};

use super::{CLAIM_BATCH, Engine, Error};

impl Engine {
    /// Takes and resumes the unfinished runs no task runs: on SQLite every one (after a stop,
    /// a crash, or the store coming back); on Postgres those nobody else holds (their lease
    /// lapsed, or was handed back) and this replica's own. The number of runs it resumed.
    pub async fn resume_unfinished(&self) -> Result<usize, Error> {
        let claim = match self.inner.services.store().shared() {
            true => store::Claim::FreeAndOwn,
            false => store::Claim::Every,
        };
        self.claim_and_resume(claim).await
    }

    pub(super) async fn claim_and_resume(&self, claim: store::Claim) -> Result<usize, Error> {
        let store = self.inner.services.store();
        let runs = store.claim_runs(claim, CLAIM_BATCH).await?;
        let mut n = 0;
        let mut runs = runs.into_iter();
        while let Some(stored) = runs.next() {
            if self.is_live(stored.run.id) {
                continue;
            }
            let last = match store.last_seq(stored.run.id).await {
                Ok(last) => last,
                Err(e) => {
                    // Claimed but not started: handed back, so they are not left leased to a
                    // replica that does not run them.
                    let left: Vec<RunId> = std::iter::once(stored.run.id)
                        .chain(runs.map(|r| r.run.id))
                        .collect();
                    if let Err(e) = store.release_runs(&left).await {
                        tracing::warn!(error = ?e, "could not hand back runs; their leases lapse");
                    }
                    return Err(e.into());
                }
            };
            self.spawn(stored, last, None);
            n += 1;
        }
        Ok(n)
    }

    pub(super) fn is_live(&self, id: RunId) -> bool {
        self.inner.live.lock().expect("live lock").contains_key(&id)
    }

    /// On a shared database, every third of a lease (or at once when another replica hands
    /// runs back): renews this replica's leases, stops the runs another replica took over,
    /// honours cancels and answers given through other replicas (whose notices may have been
    /// lost), then takes over runs whose lease lapsed. Runs until the server stops; the caller
    /// tracks the task. Does nothing on SQLite.
    pub async fn keep_leases(self) {
        let store = self.inner.services.store().clone();
        if !store.shared() {
            return;
        }
        let every = store.lease_ttl() / 3;
        let gate = &self.inner.services.lease;
        loop {
            tokio::select! {
                _ = self.inner.shutdown.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
                _ = self.inner.claim_now.notified() => {}
                _ = gate.renewal_asked() => {}
            }
            if let Err(e) = self.tend_leases().await {
                tracing::warn!(error = ?e, "tending run leases failed; trying again");
            }
        }
    }

    pub(super) async fn tend_leases(&self) -> Result<(), Error> {
        let store = self.inner.services.store();
        // Only tasks that ran before the renewal can be judged by it: a run created (or
        // taken) meanwhile is leased here but may be missing from what the renewal saw.
        let before: Vec<RunId> = {
            let live = self.inner.live.lock().expect("live lock");
            live.keys().copied().collect()
        };
        // Taken before the renewal is sent: the database dates the lease later than this.
        let sent = tokio::time::Instant::now();
        let held = store.renew_leases().await?;
        let ids: HashSet<RunId> = held.iter().map(|(id, _)| *id).collect();
        let mut lost = Vec::new();
        let mut cancels = Vec::new();
        {
            let live = self.inner.live.lock().expect("live lock");
            for id in before.iter().filter(|id| !ids.contains(id)) {
                if let Some(handles) = live.get(id) {
                    lost.push((*id, handles.stop.clone()));
                }
            }
            for (id, cancel) in &held {
                if let Some(h) = live.get(id).filter(|_| *cancel) {
                    cancels.push(h.cancel.clone());
                }
            }
        }
        for (id, stop) in lost {
            // Ended meanwhile (its task is on its way out), or taken over by another replica
            // after this one's lease lapsed: either way it is not this replica's to run.
            if !stop.is_cancelled() {
                tracing::debug!(run_id = %id, "the run's lease is gone: its task stops");
                stop.cancel();
            }
        }
        for cancel in cancels {
            cancel.cancel();
        }
        // Only now, with the lost runs' tasks stopped, may their gates open again.
        self.inner.services.lease.renewed(sent);
        for (id, _) in &held {
            self.take_stored_answer(*id).await;
        }
        let resumed = self.claim_and_resume(store::Claim::Free).await?;
        if resumed > 0 {
            tracing::info!(
                runs = resumed,
                "took over runs whose lease lapsed or was handed back"
            );
        }
        Ok(())
    }

    /// Acts on what another replica told this one.
    pub async fn on_notice(&self, notice: Notice) {
        match notice {
            Notice::Events { run, seq } => self.inner.services.hub.stored_elsewhere(run, seq),
            Notice::Cancel(run) => {
                let live = self.inner.live.lock().expect("live lock");
                if let Some(h) = live.get(&run) {
                    h.cancel.cancel();
                }
            }
            Notice::Input(run) => self.take_stored_answer(run).await,
            Notice::Replan(run) => self.inner.services.replans.wake(run),
            Notice::Pause(run) => self.pause_as_stored(run).await,
            Notice::Released => self.inner.claim_now.notify_one(),
            Notice::TaskChanged(task) => self.inner.services.tasks.hub().changed(&task),
            Notice::TaskQueued => self.inner.services.tasks.hub().queued(),
        }
    }

    /// Hands a waiting run the answer another replica stored for it, if there is one.
    pub(super) async fn take_stored_answer(&self, run: RunId) {
        let inputs = &self.inner.services.inputs;
        let Some(key) = inputs.waiting_at(run) else {
            return;
        };
        match self.inner.services.store().answer_for(run, &key).await {
            Ok(Some(value)) => {
                if let Some(waiting) = inputs.take_stored(run, &key) {
                    waiting.deliver(value);
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = ?e, run_id = %run, "reading a stored answer failed"),
        }
    }

    /// Watches the store: each time it takes writes again after refusing them (the store
    /// itself opens fresh connections then, see `Store::renew_connections`), waits until
    /// everything queued meanwhile is written, then resumes the runs that stopped — tried
    /// again with backoff until it succeeds, and again whenever a run task that stopped for
    /// the store ends after that. Runs until the server stops; the caller tracks the task.
    pub async fn supervise_store(self) {
        let hub = self.inner.services.hub.clone();
        let shutdown = &self.inner.shutdown;
        let mut health = hub.health();
        loop {
            let outage = tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = health.down() => true,
                _ = self.inner.resume_now.notified() => !hub.is_healthy(),
            };
            if outage {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = health.up() => {}
                }
            }
            hub.flush().await;
            let mut delay = Duration::from_millis(100);
            loop {
                match self.resume_unfinished().await {
                    Ok(n) => {
                        tracing::info!(runs = n, "the store is back: stopped runs resume");
                        break;
                    }
                    Err(e) => tracing::warn!(
                        error = ?e,
                        "resuming runs after the store came back failed; trying again"
                    ),
                }
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}
