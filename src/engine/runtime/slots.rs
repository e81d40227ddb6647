//! The running slots (`engine.max_running_runs`), shared fairly between tenants and handed
//! out by priority within each.
//!
//! Each tenant waits in a line of its own: a run with a higher `priority` leaves it first,
//! runs of one priority in the order they asked. Between tenants the slots go round by
//! weight (`[quotas] weight`, stride scheduling): every tenant carries a *pass*, the
//! tenant with the lowest pass among those waiting is served next, and serving a tenant
//! moves its pass on by `STRIDE / weight`. A tenant of weight 2 is so served twice as often as
//! one of weight 1, and a priority, however high, only orders its own tenant's runs. A tenant
//! that starts waiting after a pause gets at least the pass of the last tenant served, so it
//! cannot bank turns while it had nothing queued.
//!
//! Only the first in line takes a free slot; a slot given back wakes the lines, so a run that
//! came later with a higher priority, or of a tenant due its turn, is served before the
//! earlier ones. A run that gives its slot back (waiting for a human, paused) queues again
//! when it takes one again.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::Mutex;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, TryAcquireError};

use crate::config::QuotasConfig;
use crate::domain::Tenant;

/// A place in a tenant's line: higher priority first, then arrival.
type Place = (Reverse<i64>, u64);

/// What a weight of 1 moves a tenant's pass on by, per slot served.
const STRIDE: u64 = 1 << 20;

pub struct Slots {
    semaphore: Arc<Semaphore>,
    /// Who waits. A std mutex: inserts, removals and a scan of the waiting tenants, never held
    /// across an await.
    lines: Mutex<Lines>,
    /// Told whenever the first in line may have changed.
    moved: Notify,
    /// The tenants' weights.
    quotas: Arc<QuotasConfig>,
}

#[derive(Default)]
struct Lines {
    tenants: HashMap<Tenant, Line>,
    /// The pass of the tenant served last: where a tenant that starts waiting starts.
    clock: u64,
    arrivals: u64,
}

#[derive(Default)]
struct Line {
    waiting: BTreeSet<Place>,
    pass: u64,
}

impl Lines {
    /// The waiter served next: the first of the tenant with the lowest pass, ties going to
    /// the tenant whose first waiter came first.
    fn first(&self) -> Option<(&Tenant, Place)> {
        self.tenants
            .iter()
            .filter_map(|(tenant, line)| Some((tenant, line.pass, *line.waiting.first()?)))
            .min_by_key(|(_, pass, place)| (*pass, place.1))
            .map(|(tenant, _, place)| (tenant, place))
    }

    fn enter(&mut self, tenant: &Tenant, priority: i64) -> Place {
        let place = (Reverse(priority), self.arrivals);
        self.arrivals += 1;
        let clock = self.clock;
        let line = self.tenants.entry(tenant.clone()).or_default();
        if line.waiting.is_empty() {
            line.pass = line.pass.max(clock);
        }
        line.waiting.insert(place);
        place
    }

    /// `tenant` took a slot: its pass moves on by its stride.
    fn served(&mut self, tenant: &Tenant, weight: u32) {
        if let Some(line) = self.tenants.get_mut(tenant) {
            self.clock = self.clock.max(line.pass);
            line.pass += STRIDE / u64::from(weight.max(1));
        }
    }

    /// Takes `place` out of `tenant`'s line, forgetting the line once it is empty and owes
    /// nothing (its pass is not ahead of the clock), so the map holds waiting tenants only.
    fn leave(&mut self, tenant: &Tenant, place: &Place) {
        let clock = self.clock;
        if let Some(line) = self.tenants.get_mut(tenant) {
            line.waiting.remove(place);
            if line.waiting.is_empty() && line.pass <= clock {
                self.tenants.remove(tenant);
            }
        }
    }
}

/// Leaves the line however the wait ends (served, or its future dropped).
struct InLine<'a> {
    slots: &'a Slots,
    tenant: &'a Tenant,
    place: Place,
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        self.slots.lines().leave(self.tenant, &self.place);
        self.slots.moved.notify_waiters();
    }
}

impl Slots {
    pub fn new(slots: usize, quotas: Arc<QuotasConfig>) -> Slots {
        Slots {
            semaphore: Arc::new(Semaphore::new(slots)),
            lines: Mutex::new(Lines::default()),
            moved: Notify::new(),
            quotas,
        }
    }

    fn lines(&self) -> std::sync::MutexGuard<'_, Lines> {
        self.lines.lock().expect("lines lock")
    }

    /// A slot, once it is `tenant`'s turn and every waiter of the tenant with a higher
    /// priority (and of the same one, who came first) has one. `None` only when the slots
    /// are closed.
    pub async fn acquire(self: &Arc<Self>, tenant: &Tenant, priority: i64) -> Option<Slot> {
        let place = self.lines().enter(tenant, priority);
        let _in_line = InLine {
            slots: self,
            tenant,
            place,
        };
        loop {
            let moved = self.moved.notified();
            tokio::pin!(moved);
            // Registered before looking, so a change right after the look still wakes it.
            moved.as_mut().enable();
            {
                let mut lines = self.lines();
                if lines.first() == Some((tenant, place)) {
                    match Arc::clone(&self.semaphore).try_acquire_owned() {
                        Ok(permit) => {
                            lines.served(tenant, self.quotas.of(&tenant.0).weight);
                            return Some(Slot {
                                permit: Some(permit),
                                slots: Arc::clone(self),
                            });
                        }
                        Err(TryAcquireError::Closed) => return None,
                        Err(TryAcquireError::NoPermits) => {}
                    }
                }
            }
            moved.await;
        }
    }
}

/// A running slot; given back (and the lines woken) when dropped.
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
    use crate::domain::quota::Quota;

    /// Queues each `(tenant, priority, name)` behind one held slot, in order, frees the
    /// slot, and says in which order they were served.
    async fn served(
        quotas: QuotasConfig,
        waiters: &[(&str, i64, &'static str)],
    ) -> Vec<&'static str> {
        let slots = Arc::new(Slots::new(1, Arc::new(quotas)));
        let held = slots.acquire(&Tenant("held".into()), 0).await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for &(tenant, priority, name) in waiters {
            let (mine, tx) = (slots.clone(), tx.clone());
            let tenant = Tenant(tenant.into());
            tasks.push(tokio::spawn(async move {
                let permit = mine.acquire(&tenant, priority).await.unwrap();
                tx.send(name).unwrap();
                drop(permit);
            }));
            // Each is in line before the next arrives.
            let queued = |s: &Slots| {
                s.lines()
                    .tenants
                    .values()
                    .map(|l| l.waiting.len())
                    .sum::<usize>()
            };
            while queued(&slots) < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(held);
        let mut order = Vec::new();
        for _ in waiters {
            order.push(rx.recv().await.unwrap());
        }
        order
    }

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_highest_priority_then_the_earliest() {
        let order = served(
            QuotasConfig::default(),
            &[
                ("a", 0, "low"),
                ("a", 5, "high"),
                ("a", 1, "mid"),
                ("a", 5, "high2"),
            ],
        )
        .await;
        assert_eq!(order, ["high", "high2", "mid", "low"]);
    }

    #[tokio::test]
    async fn tenants_take_turns_whatever_priority_the_first_one_asks() {
        let order = served(
            QuotasConfig::default(),
            &[
                ("a", 1000, "a1"),
                ("a", 1000, "a2"),
                ("a", 1000, "a3"),
                ("b", 0, "b1"),
                ("b", 0, "b2"),
            ],
        )
        .await;
        assert_eq!(order, ["a1", "b1", "a2", "b2", "a3"]);
    }

    #[tokio::test]
    async fn a_heavier_tenant_is_served_as_often_as_its_weight_says() {
        let mut quotas = QuotasConfig::default();
        quotas.tenants.insert(
            "a".into(),
            Quota {
                weight: 2,
                ..Quota::default()
            },
        );
        let mut waiters = Vec::new();
        let names = ["a1", "a2", "a3", "a4", "b1", "b2"];
        for (i, name) in names.iter().enumerate() {
            waiters.push((if i < 4 { "a" } else { "b" }, 0, *name));
        }
        let order = served(quotas, &waiters).await;
        assert_eq!(order, ["a1", "b1", "a2", "a3", "b2", "a4"]);
    }
}
