//! The domain model: ids, runs, plans and steps, events. Plain data with serde, no IO.
//!
//! Everything here is what the rest of orca talks in; the API serialises these types as they
//! are, so renaming a field here is a contract change.

pub mod event;
pub mod history;
pub mod ids;
pub mod plan;
pub mod run;

pub use event::{Event, EventKind};
pub use history::StepAttempt;
pub use ids::{RunId, StepId, Tenant};
pub use plan::{
    BackoffStrategy, Plan, PlanSettings, RetryPolicy, Step, StepKind, StepStatus,
};
pub use run::{
    Completion, Limits, Orchestration, Run, RunError, RunStatus, Usage,
};
