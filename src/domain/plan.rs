//! Plans and steps: the unit of work of every orchestration type, with retry policies and
//! plan-wide settings. The DAG engine (scheduler) reads these; it never mutates a [`Plan`]
//! in place: step progress lives in the run's step attempts and checkpoints.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::error::{ErrorCode, RunError};
use super::ids::StepId;
use super::run::Orchestration;
use super::text_enum::text_enum;

/// The number of a run's first plan version.
pub const FIRST_VERSION: u32 = 1;
/// The plan version of work done outside any plan (a simple run, planning, selection).
pub const NO_PLAN: u32 = 0;

text_enum! {
    /// What a step does.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ToSchema)]
    pub enum StepKind {
        Llm = "llm",
        Tool = "tool",
        Branch = "branch",
        Parallel = "parallel",
        Sequential = "sequential",
        Loop = "loop",
        Wait = "wait",
        UserInput = "user_input",
        Agent = "agent",
        Handoff = "handoff",
        GroupChat = "group_chat",
        Workflow = "workflow",
    }
}

text_enum! {
    /// The lifecycle of one step.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ToSchema)]
    pub enum StepStatus {
        Pending = "pending",
        Ready = "ready",
        Running = "running",
        Completed = "completed",
        Failed = "failed",
        Skipped = "skipped",
        Cancelled = "cancelled",
        Retrying = "retrying",
    }
}

impl StepStatus {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            StepStatus::Completed
                | StepStatus::Failed
                | StepStatus::Skipped
                | StepStatus::Cancelled
        )
    }
}

/// How the wait between attempts grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum BackoffStrategy {
    Fixed,
    Linear,
    #[default]
    Exponential,
}

/// When and how often a failed step is tried again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 = never retry).
    pub max_attempts: u32,
    pub strategy: BackoffStrategy,
    pub initial_delay_ms: u64,
    pub max_delay_ms: u64,
    /// Spread each wait uniformly over [wait/2, wait] so that failing steps do not retry in step.
    pub jitter: bool,
    /// Error codes worth retrying; empty means every retryable error (as its source says).
    pub retryable_errors: Vec<String>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            strategy: BackoffStrategy::Exponential,
            initial_delay_ms: 1_000,
            max_delay_ms: 60_000,
            jitter: false,
            retryable_errors: Vec::new(),
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// The wait before attempt `next_attempt` (2 = the first retry), before jitter, capped at
    /// `max_delay_ms`.
    pub fn base_delay(&self, next_attempt: u32) -> Duration {
        let n = next_attempt.saturating_sub(1).max(1) as u64; // retries so far, >= 1
        let ms = match self.strategy {
            BackoffStrategy::Fixed => self.initial_delay_ms,
            BackoffStrategy::Linear => self.initial_delay_ms.saturating_mul(n),
            BackoffStrategy::Exponential => {
                let factor = 1u64.checked_shl((n - 1).min(63) as u32).unwrap_or(u64::MAX);
                self.initial_delay_ms.saturating_mul(factor)
            }
        };
        Duration::from_millis(ms.min(self.max_delay_ms))
    }

    /// The wait before attempt `next_attempt`, with jitter applied when enabled.
    pub fn delay(&self, next_attempt: u32) -> Duration {
        let base = self.base_delay(next_attempt);
        if self.jitter && !base.is_zero() {
            let half = base / 2;
            half + base.mul_f64(rand::random::<f64>() * 0.5)
        } else {
            base
        }
    }

    /// Whether an error with this code may be retried: the codes the policy lists, or, when
    /// it lists none, every code that is retryable by nature.
    pub fn allows(&self, code: &ErrorCode) -> bool {
        if self.retryable_errors.is_empty() {
            code.retryable()
        } else {
            self.retryable_errors.iter().any(|c| code == c.as_str())
        }
    }
}

/// Plan-wide settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PlanSettings {
    pub max_execution_time_ms: Option<u64>,
    pub max_parallel_steps: u32,
    pub stop_on_first_failure: bool,
    pub default_retry_policy: Option<RetryPolicy>,
    /// The top-level step whose completion ends the run with its answer.
    #[schema(value_type = Option<String>)]
    pub answer_step: Option<StepId>,
    /// Steps (by id, at any level) the run pauses before, as if `POST .../pause` came just
    /// before each start; `POST .../resume` goes on.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub breakpoints: Vec<String>,
}

impl Default for PlanSettings {
    fn default() -> Self {
        PlanSettings {
            max_execution_time_ms: None,
            max_parallel_steps: 5,
            stop_on_first_failure: true,
            default_retry_policy: None,
            answer_step: None,
            breakpoints: Vec::new(),
        }
    }
}

/// One step of a plan. Kind-specific configuration lives in `input`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Step {
    #[schema(value_type = String)]
    pub id: StepId,
    pub kind: StepKind,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    #[schema(value_type = Object)]
    pub input: Value,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub output: Option<Value>,
    #[serde(default)]
    pub error: Option<RunError>,
    #[serde(default = "pending")]
    pub status: StepStatus,
    #[serde(default)]
    pub retry_policy: Option<RetryPolicy>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Among top-level steps ready at once, higher ones start first.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i64,
    /// A CEL condition over the step's `output` (and what its conditions may read): false
    /// fails the attempt with `unexpected_result`.
    #[serde(default)]
    pub expect: Option<String>,
    #[serde(default)]
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
    #[serde(default)]
    #[schema(value_type = Vec<String>)]
    pub depends_on: Vec<StepId>,
    #[serde(default)]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub completed_at: Option<DateTime<Utc>>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

fn pending() -> StepStatus {
    StepStatus::Pending
}

impl Step {
    pub fn new(id: StepId, kind: StepKind, input: Value) -> Self {
        Step {
            id,
            kind,
            name: None,
            description: None,
            input,
            output: None,
            error: None,
            status: StepStatus::Pending,
            retry_policy: None,
            timeout_ms: None,
            priority: 0,
            expect: None,
            metadata: Map::new(),
            depends_on: Vec::new(),
            started_at: None,
            completed_at: None,
        }
    }

    /// The display name: `name` if given, else the id.
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or(self.id.as_str())
    }
}

/// A versioned set of steps. Re-planning makes a new version; old versions stay in history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Plan {
    pub id: String,
    #[serde(default = "first_version")]
    pub version: u32,
    pub orchestration: Orchestration,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    pub steps: Vec<Step>,
    /// Run variables visible to every step.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub context: Map<String, Value>,
    #[serde(default)]
    pub settings: PlanSettings,
    /// What the run outputs when the plan completes: a value with `{{ ... }}` references.
    /// Absent: the outputs of the plan's last steps (those nothing depends on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub output: Option<Value>,
    /// Session variables the plan writes when it completes: name → a value with `{{ ... }}`
    /// references, stored for the run's session (`session.NAME` in later runs).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    #[schema(value_type = Object)]
    pub session_variables: Map<String, Value>,
    /// Agents the plan's steps use: name → definition (`schemas/Agent.schema.json`).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    #[schema(value_type = Object)]
    pub agents: Map<String, Value>,
    /// Workflows the plan nests: name → definition (`schemas/FixedWorkflow.schema.json`).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    #[schema(value_type = Object)]
    pub workflows: Map<String, Value>,
    /// Middleware around every agent turn and tool call, outermost first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Object>)]
    pub middleware: Vec<Value>,
}

fn first_version() -> u32 {
    1
}

impl Plan {
    /// Whether every dependency names a step of this plan.
    pub fn dependencies_resolve(&self) -> bool {
        self.steps
            .iter()
            .flat_map(|s| &s.depends_on)
            .all(|d| self.steps.iter().any(|s| &s.id == d))
    }

    /// Pending steps whose dependencies have all completed.
    pub fn executable_steps<'a>(
        &'a self,
        completed: &'a std::collections::HashSet<StepId>,
    ) -> impl Iterator<Item = &'a Step> + 'a {
        self.steps.iter().filter(move |s| {
            s.status == StepStatus::Pending && s.depends_on.iter().all(|d| completed.contains(d))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(strategy: BackoffStrategy) -> RetryPolicy {
        RetryPolicy {
            max_attempts: 10,
            strategy,
            initial_delay_ms: 100,
            max_delay_ms: 1_000,
            jitter: false,
            retryable_errors: vec![],
        }
    }

    #[test]
    fn backoff_grows_as_its_strategy_says_and_is_capped() {
        let table = [
            (BackoffStrategy::Fixed, [100, 100, 100, 100, 100]),
            (BackoffStrategy::Linear, [100, 200, 300, 400, 500]),
            (BackoffStrategy::Exponential, [100, 200, 400, 800, 1000]),
        ];
        for (strategy, want) in table {
            let p = policy(strategy);
            let got: Vec<u64> = (2..=6)
                .map(|a| p.base_delay(a).as_millis() as u64)
                .collect();
            assert_eq!(got, want, "{strategy:?}");
        }
    }

    #[test]
    fn jitter_stays_within_half_to_full_wait() {
        let p = RetryPolicy {
            jitter: true,
            ..policy(BackoffStrategy::Fixed)
        };
        for _ in 0..200 {
            let d = p.delay(2).as_millis();
            assert!((50..=100).contains(&d), "{d}");
        }
    }

    #[test]
    fn retryable_codes_narrow_the_default() {
        let mut p = policy(BackoffStrategy::Fixed);
        assert!(p.allows(&ErrorCode::LlmTimeout));
        assert!(!p.allows(&ErrorCode::InvalidToolArguments));
        p.retryable_errors = vec!["flaky".into()];
        assert!(p.allows(&ErrorCode::from("flaky")));
        assert!(!p.allows(&ErrorCode::LlmTimeout));
    }

    #[test]
    fn executable_steps_follow_dependencies() {
        let id = |s: &str| StepId::new(s).unwrap();
        let mut s2 = Step::new(id("s2"), StepKind::Tool, Value::Null);
        s2.depends_on = vec![id("s1")];
        let plan = Plan {
            id: "p".into(),
            version: 1,
            orchestration: Orchestration::Fixed,
            name: None,
            description: None,
            steps: vec![
                Step::new(id("s1"), StepKind::Llm, Value::Null),
                s2,
                Step::new(id("s3"), StepKind::Llm, Value::Null),
            ],
            context: Map::new(),
            settings: PlanSettings::default(),
            output: None,
            session_variables: Map::new(),
            agents: Map::new(),
            workflows: Map::new(),
            middleware: Vec::new(),
        };
        assert!(plan.dependencies_resolve());
        let done = Default::default();
        let ready: Vec<_> = plan
            .executable_steps(&done)
            .map(|s| s.id.as_str())
            .collect();
        assert_eq!(ready, ["s1", "s3"]);
    }
}
