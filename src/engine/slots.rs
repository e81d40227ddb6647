//! The running slots (`engine.max_running_runs`), handed out by priority: a run with a higher
//! `priority` leaves the queue first, runs of one priority in the order they asked. A run
//! that gives its slot back (waiting for a human, paused) queues again at its priority when
//! it takes one again.
//!
//! Only the first in line takes a free slot; a slot given back wakes the line, so a run that
//! came later with a higher priority is served before the earlier ones.

use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, TryAcquireError};

/// Places in line: higher priority first, then arrival.
type Place = (Reverse<i64>, u64);

pub struct Slots {
    semaphore: Arc<Semaphore>,
    /// Who waits, in the order they are served. A std mutex: inserts, removals, a peek.
    line: Mutex<BTreeSet<Place>>,
    /// Told whenever the first in line may have changed.
    moved: Notify,
    arrivals: AtomicU64,
}

/// Leaves the line however the wait ends (served, or its future dropped).
struct InLine<'a> {
    slots: &'a Slots,
    place: Place,
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        self.slots
            .line
            .lock()
            .expect("line lock")
            .remove(&self.place);
        self.slots.moved.notify_waiters();
    }
}

impl Slots {
    pub fn new(slots: usize) -> Slots {
        Slots {
            semaphore: Arc::new(Semaphore::new(slots)),
            line: Mutex::new(BTreeSet::new()),
            moved: Notify::new(),
            arrivals: AtomicU64::new(0),
        }
    }

    /// A slot, once every waiter of a higher priority (and of the same one, who came first)
    /// has one. `None` only when the slots are closed.
    pub async fn acquire(self: &Arc<Self>, priority: i64) -> Option<Slot> {
        let place = (
            Reverse(priority),
            self.arrivals.fetch_add(1, Ordering::Relaxed),
        );
        self.line.lock().expect("line lock").insert(place);
        let _in_line = InLine { slots: self, place };
        loop {
            let moved = self.moved.notified();
            tokio::pin!(moved);
            // Registered before looking, so a change right after the look still wakes it.
            moved.as_mut().enable();
            if self.line.lock().expect("line lock").first() == Some(&place) {
                match Arc::clone(&self.semaphore).try_acquire_owned() {
                    Ok(permit) => {
                        return Some(Slot {
                            permit: Some(permit),
                            slots: Arc::clone(self),
                        });
                    }
                    Err(TryAcquireError::Closed) => return None,
                    Err(TryAcquireError::NoPermits) => {}
                }
            }
            moved.await;
        }
    }
}

/// A running slot; given back (and the line woken) when dropped.
pub struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    slots: Arc<Slots>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Released first, so the first in line finds it when woken.
        drop(self.permit.take());
        self.slots.moved.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_highest_priority_then_the_earliest() {
        let slots = Arc::new(Slots::new(1));
        let held = slots.acquire(0).await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for (name, priority) in [("low", 0), ("high", 5), ("mid", 1), ("high2", 5)] {
            let (mine, tx) = (slots.clone(), tx.clone());
            tasks.push(tokio::spawn(async move {
                let permit = mine.acquire(priority).await.unwrap();
                tx.send(name).unwrap();
                drop(permit);
            }));
            // Each is in line before the next arrives.
            while slots.line.lock().unwrap().len() < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(held);
        let mut served = Vec::new();
        for _ in 0..4 {
            served.push(rx.recv().await.unwrap());
        }
        assert_eq!(served, ["high", "high2", "mid", "low"]);
    }
}
