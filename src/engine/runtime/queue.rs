//! The run queue's bounds on this replica: `engine.max_queued_runs` in all, and each tenant's
//! `[quotas] queued_runs`, so one tenant's burst cannot fill the queue for every other. A run
//! counts from the start of its task until it takes a running slot (or ends before).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::domain::Tenant;

#[derive(Default)]
pub struct Queue {
    total: AtomicUsize,
    /// Queued runs by tenant (no entry: none). A std mutex: a lookup or an update, never held
    /// across an await.
    by_tenant: Mutex<HashMap<Tenant, usize>>,
}

impl Queue {
    /// Runs queued in all.
    pub fn len(&self) -> usize {
        self.total.load(Ordering::SeqCst)
    }

    /// Runs of `tenant` queued.
    pub fn of(&self, tenant: &Tenant) -> usize {
        let by_tenant = self.by_tenant.lock().expect("queue lock");
        by_tenant.get(tenant).copied().unwrap_or(0)
    }

    /// A run of `tenant` joins the queue.
    pub fn enter(&self, tenant: &Tenant) {
        let mut by_tenant = self.by_tenant.lock().expect("queue lock");
        *by_tenant.entry(tenant.clone()).or_default() += 1;
        self.total.fetch_add(1, Ordering::SeqCst);
    }

    /// A run of `tenant` leaves the queue: it took a slot, or ended.
    pub fn leave(&self, tenant: &Tenant) {
        let mut by_tenant = self.by_tenant.lock().expect("queue lock");
        if let Some(n) = by_tenant.get_mut(tenant) {
            *n -= 1;
            if *n == 0 {
                by_tenant.remove(tenant);
            }
        }
        self.total.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tenant_is_counted_apart_and_forgotten_when_it_has_none() {
        let queue = Queue::default();
        let (a, b) = (Tenant("a".into()), Tenant("b".into()));
        queue.enter(&a);
        queue.enter(&a);
        queue.enter(&b);
        assert_eq!((queue.len(), queue.of(&a), queue.of(&b)), (3, 2, 1));
        queue.leave(&a);
        queue.leave(&b);
        assert_eq!((queue.len(), queue.of(&a), queue.of(&b)), (1, 1, 0));
        queue.leave(&a);
        assert!(queue.by_tenant.lock().unwrap().is_empty());
    }
}
