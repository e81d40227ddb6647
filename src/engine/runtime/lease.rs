//! The lease gate: a replica starts an action for a run (a step attempt, a tool call, a model
//! call) only while it surely still holds the run's lease.
//!
//! Writes are fenced in the database (`store/cluster.rs`), but actions are not: a replica
//! paused past its lease (a stop-the-world pause, SIGSTOP, a VM migration) wakes up believing
//! it still runs runs that another replica has taken over, and would call their tools again.
//! So every action first passes [`LeaseGate::ready`], which compares a local monotonic
//! deadline with the clock. The deadline is the moment the last successful renewal was *sent*
//! plus the lease's length: the database dated the renewal later than that, so the lease
//! surely lasts until then, whatever happened to this process meanwhile. An action starts
//! only with at least a third of a lease left (the renewal interval); otherwise the gate asks
//! the lease keeper to renew at once and waits for its answer. The keeper stops the tasks of
//! runs it no longer holds *before* it moves the deadline, so a gate that opens after a
//! renewal never opens for a run that was taken over: that run's task stops without acting.
//!
//! What remains possible: an action already in flight when the pause began (a tool call
//! waiting for its answer) completes on the paused replica, while the replica that took the
//! run over starts it again. Tools with side effects should take an idempotency key
//! (`docs/replicas.md`).
//!
//! On a single-process store (SQLite) leases are never contended and the gate is always open.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Shared by every run of one replica. Cheap to clone.
#[derive(Clone)]
pub struct LeaseGate {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    ttl: Duration,
    /// Until when every lease this replica holds surely lasts.
    until: watch::Sender<Instant>,
    /// Wakes the lease keeper for a renewal now.
    renew_now: Notify,
    /// Actions waiting at the gate now (`orca_lease_held_actions`).
    held: AtomicUsize,
}

/// One action counted in [`Inner::held`] while it waits.
struct Held<'a>(&'a AtomicUsize);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Default for LeaseGate {
    fn default() -> Self {
        LeaseGate::open()
    }
}

impl LeaseGate {
    /// Always open: one process owns the store.
    pub fn open() -> LeaseGate {
        LeaseGate { inner: None }
    }

    /// The gate `store` needs: [`Self::leased`] on a store replicas share, else [`Self::open`].
    pub fn for_store(store: &crate::store::Store) -> LeaseGate {
        if store.shared() {
            LeaseGate::leased(store.lease_ttl())
        } else {
            LeaseGate::open()
        }
    }

    /// For leases of `ttl` on a shared store. Every lease this replica will hold is taken
    /// from now on (created or claimed), so each lasts at least until now + `ttl`.
    pub fn leased(ttl: Duration) -> LeaseGate {
        let (until, _) = watch::channel(Instant::now() + ttl);
        LeaseGate {
            inner: Some(Arc::new(Inner {
                ttl,
                until,
                renew_now: Notify::new(),
                held: AtomicUsize::new(0),
            })),
        }
    }

    /// Waits until this replica surely holds its leases for a while yet. Once `stop` fires
    /// (the run is not this replica's any more, or the server stops) it never returns: the
    /// run task, which watches the same token, drops the action before it starts.
    pub async fn ready(&self, stop: &CancellationToken) {
        let Some(inner) = &self.inner else { return };
        let margin = inner.ttl / 3;
        let mut until = inner.until.subscribe();
        let mut held = None;
        loop {
            if stop.is_cancelled() {
                std::future::pending::<()>().await;
            }
            if Instant::now() + margin < *until.borrow_and_update() {
                return;
            }
            if held.is_none() {
                inner.held.fetch_add(1, Ordering::Relaxed);
                held = Some(Held(&inner.held));
            }
            inner.renew_now.notify_one();
            tokio::select! {
                _ = until.changed() => {}
                () = stop.cancelled() => {}
            }
        }
    }

    /// How many actions wait at the gate now.
    pub fn held(&self) -> usize {
        self.inner
            .as_ref()
            .map_or(0, |i| i.held.load(Ordering::Relaxed))
    }

    /// The lease keeper: a renewal sent at `sent` succeeded, and the tasks of the runs it
    /// did not renew are stopped.
    pub fn renewed(&self, sent: Instant) {
        if let Some(inner) = &self.inner {
            inner.until.send_if_modified(|until| {
                let later = sent + inner.ttl;
                let moved = later > *until;
                *until = (*until).max(later);
                moved
            });
        }
    }

    /// The lease keeper: resolves when a gate asks for a renewal now.
    pub async fn renewal_asked(&self) {
        match &self.inner {
            Some(inner) => inner.renew_now.notified().await,
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_gate_opens_only_with_a_third_of_a_lease_left() {
        let gate = LeaseGate::leased(Duration::from_secs(3));
        let stop = CancellationToken::new();
        gate.ready(&stop).await;
        tokio::time::advance(Duration::from_millis(2100)).await;
        // 0.9 s left: the gate waits for a renewal.
        let waiting = tokio::spawn({
            let (gate, stop) = (gate.clone(), stop.clone());
            async move { gate.ready(&stop).await }
        });
        tokio::time::timeout(Duration::from_millis(1), gate.renewal_asked())
            .await
            .expect("the keeper is asked to renew at once");
        assert!(!waiting.is_finished());
        assert_eq!(gate.held(), 1);
        gate.renewed(Instant::now());
        waiting.await.unwrap();
        assert_eq!(gate.held(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_run_never_passes_even_after_a_renewal() {
        let gate = LeaseGate::leased(Duration::from_secs(3));
        let stop = CancellationToken::new();
        tokio::time::advance(Duration::from_secs(10)).await;
        let waiting = tokio::spawn({
            let (gate, stop) = (gate.clone(), stop.clone());
            async move { gate.ready(&stop).await }
        });
        gate.renewal_asked().await;
        // The keeper found the run taken over: it stops the task, then moves the deadline.
        stop.cancel();
        gate.renewed(Instant::now());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished(), "the action never starts");
        waiting.abort();
        // An old renewal never moves the deadline back.
        gate.renewed(Instant::now() - Duration::from_secs(60));
        let fresh = CancellationToken::new();
        tokio::time::timeout(Duration::from_millis(1), gate.ready(&fresh))
            .await
            .expect("still open");
    }

    #[tokio::test]
    async fn an_unshared_store_never_waits() {
        LeaseGate::open().ready(&CancellationToken::new()).await;
    }
}
