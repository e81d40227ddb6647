//! Executors: one per orchestration type, each turning a run into an [`Outcome`]. The run
//! task (`engine::run`) owns everything around them: admission, status, limits, cancellation
//! and the final event, and picks the executor once `auto` is settled (`engine::selector`).
//! The stored run names the type that actually runs it.

use async_trait::async_trait;
use serde_json::Value;

use crate::domain::RunError;

use super::context::RunContext;

/// How an executor ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    Success(Value),
    /// Some of the work succeeded: an output and what went wrong.
    Partial(Value, RunError),
    Failed(RunError),
}

/// Runs one orchestration type. Implementations keep no per-run state: everything a run has
/// is in its [`RunContext`], so a resumed run needs nothing but its stored history.
#[async_trait]
pub trait Executor: Send + Sync {
    async fn execute(&self, ctx: &RunContext) -> Outcome;
}
