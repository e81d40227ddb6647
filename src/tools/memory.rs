//! The memory tools in the registry: `memory.put`, `memory.get` and `memory.search`, listed,
//! offered and validated like any tool. Their calls never run here: they act in the run's own
//! memory (its tenant, user and session), which only the engine knows
//! (`engine::calls::memory_call`).

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{Effects, Tool, ToolError};
use crate::domain::ErrorCode;

/// What a memory tool does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryOp {
    Put,
    Get,
    Search,
}

impl MemoryOp {
    pub const ALL: [MemoryOp; 3] = [MemoryOp::Put, MemoryOp::Get, MemoryOp::Search];

    pub fn name(self) -> &'static str {
        match self {
            MemoryOp::Put => "memory.put",
            MemoryOp::Get => "memory.get",
            MemoryOp::Search => "memory.search",
        }
    }

    /// The operation a tool name is, if it is a memory tool's.
    pub fn of(name: &str) -> Option<MemoryOp> {
        MemoryOp::ALL.into_iter().find(|op| op.name() == name)
    }
}

/// A memory tool's entry in the registry.
pub struct MemoryTool(pub MemoryOp);

fn scope_schema() -> Value {
    json!({
        "type": "string",
        "enum": ["user", "session", "shared"],
        "description": "Whose memory: the run's user's (`user`, the default), its session's \
            (`session`), or the tenant's shared memory (`shared`)."
    })
}

fn namespace_schema() -> Value {
    json!({
        "type": "string",
        "description": "A sub-namespace within the scope, segments joined by `/` (e.g. \
            `notes` or `prefs/food`); none: the scope's own."
    })
}

#[async_trait]
impl Tool for MemoryTool {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn description(&self) -> &str {
        match self.0 {
            MemoryOp::Put => {
                "Remember a fact for later runs: stores `value` under `key` in the user's \
                 (or session's, or shared) memory, replacing what the key held."
            }
            MemoryOp::Get => "Recall what is stored under `key` in memory.",
            MemoryOp::Search => {
                "Search memory for what is relevant to `query`; returns the closest items, \
                 best first."
            }
        }
    }

    fn input_schema(&self) -> Value {
        let key = json!({ "type": "string", "minLength": 1, "maxLength": 256,
            "description": "Letters, digits and `_ - . : @ ~`." });
        match self.0 {
            MemoryOp::Put => json!({
                "type": "object",
                "additionalProperties": false,
                "required": ["key", "value"],
                "properties": {
                    "key": key,
                    "value": { "type": "string", "minLength": 1,
                        "description": "What to remember, as text." },
                    "scope": scope_schema(),
                    "namespace": namespace_schema(),
                    "ttl_seconds": { "type": "integer", "minimum": 1,
                        "description": "Forget it after this many seconds." }
                }
            }),
            MemoryOp::Get => json!({
                "type": "object",
                "additionalProperties": false,
                "required": ["key"],
                "properties": {
                    "key": key,
                    "scope": scope_schema(),
                    "namespace": namespace_schema()
                }
            }),
            MemoryOp::Search => json!({
                "type": "object",
                "additionalProperties": false,
                "required": ["query"],
                "properties": {
                    "query": { "type": "string", "minLength": 1, "maxLength": 2000,
                        "description": "What to look for, in words." },
                    "scope": scope_schema(),
                    "namespace": namespace_schema(),
                    "limit": { "type": "integer", "minimum": 1, "maximum": 20,
                        "description": "Items at most (default 5)." }
                }
            }),
        }
    }

    async fn call(&self, _args: Value, _cancel: &CancellationToken) -> Result<Value, ToolError> {
        // The engine routes every call of a memory tool to the run's memory
        // (`MemoryOp::of`); reaching this is a call made outside a run.
        Err(ToolError::failed(
            ErrorCode::ToolNotFound,
            format!(
                "`{}` acts in a run's memory; only a run can call it",
                self.0.name()
            ),
        ))
    }

    fn effects(&self) -> Effects {
        match self.0 {
            // Stored before it writes, so a kill -9 after the write finds its attempt.
            MemoryOp::Put => Effects::Outside,
            MemoryOp::Get | MemoryOp::Search => Effects::None,
        }
    }
}
