//! Wake-ups for running reactive runs: `POST /v1/runs/{id}/replan` stores the user's request,
//! then wakes the run here, so a re-plan does not wait for the slowest step in flight.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::domain::RunId;

/// Reactive runs executing now, each with the [`Notify`] that wakes it. A std mutex: inserts,
/// removals and lookups only.
#[derive(Clone, Default)]
pub struct Wakes {
    runs: Arc<Mutex<HashMap<RunId, Arc<Notify>>>>,
}

impl Wakes {
    /// Registers `run`; the guard removes it again when the run's executor ends.
    pub fn register(&self, run: RunId) -> Registered {
        let notify = Arc::new(Notify::new());
        self.runs
            .lock()
            .expect("wakes lock")
            .insert(run, notify.clone());
        Registered {
            wakes: self.clone(),
            run,
            notify,
        }
    }

    /// Wakes `run` if it is executing here. A wake-up sent while the run is busy elsewhere is
    /// kept until it next waits.
    pub fn wake(&self, run: RunId) {
        if let Some(notify) = self.runs.lock().expect("wakes lock").get(&run) {
            notify.notify_one();
        }
    }
}

/// A run's registration; dropping it unregisters the run.
pub struct Registered {
    wakes: Wakes,
    run: RunId,
    pub notify: Arc<Notify>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut runs = self.wakes.runs.lock().expect("wakes lock");
        if runs
            .get(&self.run)
            .is_some_and(|n| Arc::ptr_eq(n, &self.notify))
        {
            runs.remove(&self.run);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_sent_while_the_run_is_busy_is_kept_until_it_waits() {
        let (wakes, run) = (Wakes::default(), RunId::new());
        let registered = wakes.register(run);
        wakes.wake(run);
        registered.notify.notified().await;
    }

    #[test]
    fn an_old_registration_dropped_late_leaves_the_new_one() {
        let (wakes, run) = (Wakes::default(), RunId::new());
        let old = wakes.register(run);
        let new = wakes.register(run);
        drop(old);
        assert!(wakes.runs.lock().unwrap().contains_key(&run));
        drop(new);
        assert!(wakes.runs.lock().unwrap().is_empty());
    }
}
