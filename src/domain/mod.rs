//! The domain model: ids, runs, plans and steps, events. Plain data with serde, no IO.
//!
//! Everything here is what the rest of orca talks in; the API serialises these types as they
//! are, so renaming a field here is a contract change.

/// The current time at the precision the store keeps (microseconds), so a value a client saw
/// live equals the value it reads back from history.
pub fn now() -> chrono::DateTime<chrono::Utc> {
    use chrono::SubsecRound;
    chrono::Utc::now().trunc_subsecs(6)
}

pub mod attempt_io;
pub mod definition;
pub mod error;
pub mod event;
pub mod function;
pub mod history;
pub mod http_tool;
pub mod ids;
pub mod memory;
pub mod path;
pub mod plan;
pub mod quota;
pub mod replan;
pub mod run;
pub mod schedule;
pub(crate) mod text_enum;
pub mod worker_tool;

pub use attempt_io::AttemptInput;
pub use error::{ErrorCode, RunError};
pub use event::{Event, EventKind, Payload};
pub use history::StepAttempt;
pub use http_tool::HttpToolSpec;
pub use ids::{RunId, StepId, Tenant};
pub use path::{Segment, StepPath};
pub use plan::{BackoffStrategy, Plan, PlanSettings, RetryPolicy, Step, StepKind, StepStatus};
pub use run::{
    Completion, Counters, Limits, Orchestration, Run, RunStatus, SelectedBy, Selection,
    SessionConcurrency, StepCounts, Usage,
};
pub use worker_tool::{DeclaredTool, WorkerToolSpec};
