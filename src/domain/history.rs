//! What a run leaves behind besides events: step attempts (and later plans and checkpoints).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::error::RunError;
use super::path::StepPath;
use super::plan::{StepKind, StepStatus};

/// One attempt of one step, as `GET /v1/runs/{id}/steps` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StepAttempt {
    pub step_id: String,
    /// Where the step sits: `null` for a top-level step; for a child of a sequential,
    /// parallel or loop step, the enclosing steps from the top-level one down, each loop
    /// iteration as `id[i]` (e.g. `each[2]/inner`).
    #[schema(value_type = Option<String>)]
    pub path: Option<StepPath>,
    pub name: String,
    pub kind: StepKind,
    pub status: StepStatus,
    pub attempt: u32,
    pub plan_version: u32,
    pub input: Option<Value>,
    pub output: Option<Value>,
    pub error: Option<RunError>,
    pub started_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    pub duration_ms: Option<u64>,
}

impl StepAttempt {
    /// The attempt's step as one place (its `path` and `step_id`).
    pub fn step(&self) -> StepPath {
        StepPath::from_parts(self.path.as_ref(), &self.step_id)
    }
}
