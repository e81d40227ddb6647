//! What an agent's middleware remembers for the length of a run: the `response_cache`'s
//! answers and the `rate_limit`'s recent turns, kept in the run's [`super::context::RunContext`].
//! The middleware itself (the chain around a turn) lives with the turn, in
//! `scheduler::team::chain`. Nothing here survives a restart: a resumed run starts with an
//! empty cache and a fresh rate window, which only costs a model call or lets a turn through
//! early.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

/// The window `rate_limit` counts turns in.
const MINUTE: Duration = Duration::from_secs(60);

/// One run's middleware memory. Std mutexes: lookups and short updates, never across an await.
#[derive(Default)]
pub struct RunState {
    /// Answers (text, value) by agent and input messages (as JSON).
    cache: Mutex<HashMap<(String, String), (String, Value)>>,
    /// When each agent's recent turns started, oldest first.
    turns: Mutex<HashMap<String, VecDeque<Instant>>>,
}

impl RunState {
    pub fn cached(&self, agent: &str, input: &str) -> Option<(String, Value)> {
        let key = (agent.to_owned(), input.to_owned());
        self.cache.lock().expect("cache lock").get(&key).cloned()
    }

    pub fn remember(&self, agent: &str, input: &str, text: &str, value: &Value) {
        let key = (agent.to_owned(), input.to_owned());
        let answer = (text.to_owned(), value.clone());
        self.cache.lock().expect("cache lock").insert(key, answer);
    }

    /// Waits until `agent` may start a turn with at most `per_minute` turns in any minute,
    /// and counts it.
    pub async fn admit_turn(&self, agent: &str, per_minute: u32) {
        loop {
            let wait_until = {
                let mut turns = self.turns.lock().expect("turns lock");
                let recent = turns.entry(agent.to_owned()).or_default();
                let now = Instant::now();
                while recent
                    .front()
                    .is_some_and(|t| now.duration_since(*t) >= MINUTE)
                {
                    recent.pop_front();
                }
                if recent.len() < per_minute as usize {
                    recent.push_back(now);
                    return;
                }
                recent.front().copied().map(|t| t + MINUTE)
            };
            if let Some(at) = wait_until {
                tokio::time::sleep_until(at).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn rate_limit_waits_for_the_window() {
        let state = RunState::default();
        let start = Instant::now();
        for _ in 0..3 {
            state.admit_turn("a", 2).await;
        }
        assert_eq!(start.elapsed(), MINUTE);
        state.admit_turn("b", 2).await;
        assert_eq!(start.elapsed(), MINUTE, "agents are limited apart");
    }
}
