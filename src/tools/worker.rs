//! Worker tools in the registry: their name, description and argument schema, so that runs
//! list, offer and validate them like any tool. Their calls never run here: the engine queues
//! each as a task for the tenant's workers and waits for its end (`engine::calls::worker_call`).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::registry::Declared;
use super::{Tool, ToolError};
use crate::domain::{ErrorCode, WorkerToolSpec};

/// A declared worker tool.
pub struct WorkerTool {
    spec: WorkerToolSpec,
}

impl WorkerTool {
    pub fn new(spec: WorkerToolSpec) -> WorkerTool {
        WorkerTool { spec }
    }

    /// The tool ready for a registry view; an error when its schema does not compile.
    pub fn declared(spec: WorkerToolSpec) -> Result<Declared, String> {
        Declared::new(Arc::new(WorkerTool { spec }))
    }

    /// Whether its argument schema compiles (a configured tool's is checked at start).
    pub fn check_schema(&self) -> Result<(), String> {
        jsonschema::draft202012::new(&self.spec.input_schema)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

#[async_trait]
impl Tool for WorkerTool {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn description(&self) -> &str {
        &self.spec.description
    }

    fn input_schema(&self) -> Value {
        self.spec.input_schema.clone()
    }

    async fn call(&self, _args: Value, _cancel: &CancellationToken) -> Result<Value, ToolError> {
        // The engine routes every call of a worker tool to its queue (`ToolRegistry::worker`);
        // reaching this is a call made outside a run.
        Err(ToolError::failed(
            ErrorCode::ToolNotFound,
            format!(
                "`{}` is served by workers; only a run can call it",
                self.spec.name
            ),
        ))
    }

    fn worker(&self) -> Option<&WorkerToolSpec> {
        Some(&self.spec)
    }
}
