//! The run's time limit as a pausable deadline: time spent waiting for a human
//! (`user_input`) does not count against `max_duration_ms`.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

pub struct RunClock {
    budget: Duration,
    /// `Running(deadline)` or `Paused(time left)`. A std mutex: read and swapped, never held
    /// across an await.
    state: Mutex<ClockState>,
    changed: Notify,
}

#[derive(Clone, Copy)]
enum ClockState {
    Running(Instant),
    Paused(Duration),
}

impl RunClock {
    pub fn start(budget: Duration) -> Self {
        RunClock {
            budget,
            state: Mutex::new(ClockState::Running(Instant::now() + budget)),
            changed: Notify::new(),
        }
    }

    pub fn budget(&self) -> Duration {
        self.budget
    }

    pub fn pause(&self) {
        let mut st = self.state.lock().expect("clock lock");
        if let ClockState::Running(deadline) = *st {
            *st = ClockState::Paused(deadline.saturating_duration_since(Instant::now()));
        }
        drop(st);
        self.changed.notify_waiters();
    }

    pub fn resume(&self) {
        let mut st = self.state.lock().expect("clock lock");
        if let ClockState::Paused(left) = *st {
            *st = ClockState::Running(Instant::now() + left);
        }
        drop(st);
        self.changed.notify_waiters();
    }

    /// Completes when the run has used up its budget (never while paused).
    pub async fn expired(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let state = *self.state.lock().expect("clock lock");
            match state {
                ClockState::Running(deadline) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(deadline) => return,
                        _ = changed => continue,
                    }
                }
                ClockState::Paused(_) => changed.await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_paused_clock_does_not_expire_and_resumes_with_what_was_left() {
        let clock = std::sync::Arc::new(RunClock::start(Duration::from_secs(10)));
        tokio::time::advance(Duration::from_secs(4)).await;
        clock.pause();
        let c = clock.clone();
        let waiter = tokio::spawn(async move {
            c.expired().await;
            Instant::now()
        });
        tokio::time::advance(Duration::from_secs(100)).await;
        assert!(!waiter.is_finished());
        let resumed_at = Instant::now();
        clock.resume();
        let expired_at = waiter.await.unwrap();
        let left = expired_at - resumed_at;
        assert!(
            left >= Duration::from_secs(6) && left < Duration::from_millis(6_100),
            "{left:?}"
        );
    }
}
