//! The run's time limit as a pausable deadline: time spent waiting for a human
//! (`user_input`) does not count against `max_duration_ms`. A resumed run starts with the time
//! it had used before the stop ([`RunClock::used`] is kept with the run), and a plan can only
//! lower the limit ([`RunClock::tighten`]).

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

pub struct RunClock {
    /// The limit in force. A std mutex: read and replaced, never held across an await.
    budget: Mutex<Duration>,
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
    /// A running clock with `budget` in all, of which `used` is already spent.
    pub fn start(budget: Duration, used: Duration) -> Self {
        let left = budget.saturating_sub(used);
        RunClock {
            budget: Mutex::new(budget),
            state: Mutex::new(ClockState::Running(Instant::now() + left)),
            changed: Notify::new(),
        }
    }

    pub fn budget(&self) -> Duration {
        *self.budget.lock().expect("clock lock")
    }

    /// The time left (nothing, once expired).
    fn left(&self) -> Duration {
        match *self.state.lock().expect("clock lock") {
            ClockState::Running(deadline) => deadline.saturating_duration_since(Instant::now()),
            ClockState::Paused(left) => left,
        }
    }

    /// The time counted against the budget so far.
    pub fn used(&self) -> Duration {
        self.budget().saturating_sub(self.left())
    }

    /// Lowers the limit to `limit` (counted from the run's start, like the budget) when it is
    /// lower; never raises it.
    pub fn tighten(&self, limit: Duration) {
        let mut budget = self.budget.lock().expect("clock lock");
        if limit >= *budget {
            return;
        }
        let cut = *budget - limit;
        *budget = limit;
        drop(budget);
        let mut st = self.state.lock().expect("clock lock");
        *st = match *st {
            ClockState::Running(deadline) => {
                ClockState::Running(deadline.checked_sub(cut).unwrap_or_else(Instant::now))
            }
            ClockState::Paused(left) => ClockState::Paused(left.saturating_sub(cut)),
        };
        drop(st);
        self.changed.notify_waiters();
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
        let clock = std::sync::Arc::new(RunClock::start(Duration::from_secs(10), Duration::ZERO));
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

    #[tokio::test(start_paused = true)]
    async fn a_resumed_clock_counts_what_was_used_and_a_plan_only_lowers_the_limit() {
        let clock = RunClock::start(Duration::from_secs(10), Duration::from_secs(4));
        assert_eq!(clock.used(), Duration::from_secs(4));
        clock.tighten(Duration::from_secs(30));
        assert_eq!(clock.budget(), Duration::from_secs(10));
        clock.tighten(Duration::from_secs(5));
        assert_eq!(clock.budget(), Duration::from_secs(5));
        let started = Instant::now();
        clock.expired().await;
        assert_eq!(Instant::now() - started, Duration::from_secs(1));
    }
}
