//! Tools the engine can call: the [`Tool`] trait, the [`ToolRegistry`] that validates arguments
//! against each tool's JSON Schema before any call, and the built-in tools (one file each).
//!
//! This module knows nothing of runs, HTTP or the store: it takes JSON arguments and a
//! cancellation token and gives back JSON or a [`ToolError`] with a stable code.

pub mod http;
pub mod registry;
pub mod worker;

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::domain::{ErrorCode, RunError};

pub use registry::{ToolInfo, ToolRegistry, ToolsConfig};

/// A callable tool. Arguments reach `call` only after they passed `input_schema`.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// Dotted name, e.g. `clock.now`.
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema (draft 2020-12) of the arguments object.
    fn input_schema(&self) -> Value;
    /// Runs the tool. Must return `Err(ToolError::Cancelled)` promptly once `cancel` fires.
    async fn call(&self, args: Value, cancel: &CancellationToken) -> Result<Value, ToolError>;
    /// What a call can change: anything outside orca, unless the tool says otherwise.
    fn effects(&self) -> Effects {
        Effects::Outside
    }
    /// Its declaration, when the tenant's workers serve it: the engine queues its calls.
    fn worker(&self) -> Option<&crate::domain::WorkerToolSpec> {
        None
    }
}

/// What calling a tool can change, which decides what the engine stores before the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effects {
    /// Nothing: it reads or computes (the built-in tools). Calling it again after a kill
    /// costs nothing, so its attempt may be written with the run's next batch.
    None,
    /// Anything (HTTP, MCP, declared and worker tools): its attempt is stored before the call,
    /// so no side effect is ever left without a stored attempt, even by a kill -9.
    Outside,
}

/// One problem with a tool's arguments, located by JSON Pointer into the arguments.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ArgumentError {
    pub pointer: String,
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("no tool named `{0}`")]
    NotFound(String),
    #[error("invalid arguments for `{tool}`: {}", .errors.iter().map(|e| format!("{} {}", e.pointer, e.message)).collect::<Vec<_>>().join("; "))]
    InvalidArguments {
        tool: String,
        errors: Vec<ArgumentError>,
    },
    /// The tool ran and failed; `code` is stable (e.g. `path_outside_workspace`).
    #[error("{message}")]
    Failed { code: ErrorCode, message: String },
    #[error("the tool call was cancelled")]
    Cancelled,
}

impl ToolError {
    /// A failure with the tool's own code: a variant of [`ErrorCode`] for built-in tools, or
    /// any stable snake_case word for tools written elsewhere.
    pub fn failed(code: impl Into<ErrorCode>, message: impl Into<String>) -> Self {
        ToolError::Failed {
            code: code.into(),
            message: message.into(),
        }
    }

    /// The stable error code carried in events and run errors.
    pub fn code(&self) -> ErrorCode {
        match self {
            ToolError::NotFound(_) => ErrorCode::ToolNotFound,
            ToolError::InvalidArguments { .. } => ErrorCode::InvalidToolArguments,
            ToolError::Failed { code, .. } => code.clone(),
            ToolError::Cancelled => ErrorCode::Cancelled,
        }
    }

    /// The error as a run or step error.
    pub fn to_run_error(&self) -> RunError {
        RunError::new(self.code(), self.to_string())
    }
}
pub mod clock;
pub mod fs;
pub mod math;
pub mod mcp;
pub mod memory;
