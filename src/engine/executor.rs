//! Executors: one per orchestration type, each turning a run into an [`Outcome`]. The run
//! task ([`super::run`]) owns everything around them: admission, status, limits, cancellation
//! and the final event.
//!
//! `auto` is resolved before an executor is picked, in one place: [`super::selector`]. The
//! stored run names the type that actually runs it.

use async_trait::async_trait;
use serde_json::Value;

use crate::domain::{ErrorCode, Orchestration, RunError};

use super::context::RunContext;
use super::{fixed, planner, reactive, simple};

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

/// The executor of a resolved orchestration type.
pub fn for_orchestration(orchestration: Orchestration) -> Result<&'static dyn Executor, RunError> {
    match orchestration {
        Orchestration::Simple => Ok(&simple::Simple),
        Orchestration::Fixed => Ok(&fixed::Fixed),
        Orchestration::Planner => Ok(&planner::Planner),
        Orchestration::Reactive => Ok(&reactive::Reactive),
        Orchestration::Auto => Err(RunError::new(
            ErrorCode::NotSupported,
            format!(
                "orchestration `{}` is not available yet",
                orchestration.as_str()
            ),
        )),
    }
}
