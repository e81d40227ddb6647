//! Every tool call of every executor goes through [`call_tool`]: the run's allow-list, the
//! configured timeout, cancellation with the run, the `tool_call`/`tool_result` events and the
//! usage count. Middleware that wraps tool calls has this one place to do it.

use std::time::Duration;

use serde_json::Value;

use crate::domain::event::{ErrorData, TaskNote, ToolCallData, ToolOutcome, ToolResultData};
use crate::domain::{ErrorCode, RunError, StepPath};

use super::memory_call::call_memory;
use super::worker_call::{WorkerCall, call_worker};
use crate::engine::runtime::context::RunContext;
use crate::engine::runtime::sink::EventSink;
use crate::tools::memory::MemoryOp;

/// The arguments of a call as they were given.
#[derive(Debug, Clone)]
pub enum ToolArguments {
    Json(Value),
    /// Text that does not parse as JSON (a model's mistake); the call fails without running.
    Unparsable {
        text: String,
        problem: String,
    },
}

impl ToolArguments {
    /// Parses arguments a model wrote as text.
    pub fn from_text(text: &str) -> ToolArguments {
        match serde_json::from_str(text) {
            Ok(v) => ToolArguments::Json(v),
            Err(e) => ToolArguments::Unparsable {
                text: text.to_owned(),
                problem: e.to_string(),
            },
        }
    }

    /// The arguments as events and step inputs show them: the JSON, or the raw text.
    pub fn shown(&self) -> Value {
        match self {
            ToolArguments::Json(v) => v.clone(),
            ToolArguments::Unparsable { text, .. } => Value::String(text.clone()),
        }
    }
}

/// One tool call.
pub struct ToolCall<'a> {
    /// The step the call belongs to; its events carry its id and path.
    pub step: &'a StepPath,
    /// Pairs the `tool_call` event with its `tool_result`.
    pub call_id: &'a str,
    pub tool: &'a str,
    pub arguments: ToolArguments,
}

/// Calls a tool for the run: announces the call, checks the run may use the tool, validates
/// the arguments against its schema (in the registry), runs it within the configured timeout
/// and announces the result. Events go to `sink`. A tool that reaches outside orca (and any
/// tool on a store replicas share) acts only once the attempt it belongs to is stored
/// ([`RunContext::stored_before`]), and then only through the lease gate, the last thing
/// before it.
pub async fn call_tool(
    ctx: &RunContext,
    call: ToolCall<'_>,
    sink: &mut EventSink,
) -> Result<Value, RunError> {
    let announced = ToolCallData {
        call_id: call.call_id.to_owned(),
        tool: call.tool.to_owned(),
        arguments: call.arguments.shown(),
    };
    sink.emit(ctx, Some(call.step), announced).await;
    ctx.count_tool_call();
    let shown_args = call.arguments.shown();
    let mut task = None;
    let result = match call.arguments {
        ToolArguments::Unparsable { problem, .. } => Err(RunError::new(
            ErrorCode::InvalidToolArguments,
            format!(
                "the arguments for `{}` are not valid JSON: {problem}",
                call.tool
            ),
        )),
        ToolArguments::Json(_) if !may_use(ctx, call.tool) => Err(RunError::new(
            ErrorCode::ToolNotFound,
            format!("no tool named `{}` is available to this run", call.tool),
        )),
        ToolArguments::Json(args) => {
            ctx.stored_before(ctx.services.tools.effects(call.tool))
                .await;
            ctx.lease_ready().await;
            let parent = ctx.trace_parent(Some(call.step));
            let span =
                (ctx.services.telemetry).start_tool(parent.as_ref(), call.tool, call.call_id);
            let memory = MemoryOp::of(call.tool).filter(|_| ctx.services.tools.is_fixed(call.tool));
            let (result, note) = match (ctx.services.tools.worker(call.tool), memory) {
                (Some(spec), _) => {
                    let call = (call.step, call.call_id, &spec);
                    Box::pin(queue_for_workers(ctx, call, args)).await
                }
                (None, Some(op)) => (call_memory(ctx, call.step, op, args).await, None),
                (None, None) => (invoke(ctx, call.tool, args).await, None),
            };
            task = note;
            crate::telemetry::end(span, result.as_ref().err());
            result
        }
    };
    let outcome = match &result {
        Ok(output) => ToolOutcome::Output(output.clone()),
        Err(e) => ToolOutcome::Error(e.clone()),
    };
    let done = ToolResultData {
        call_id: call.call_id.to_owned(),
        tool: call.tool.to_owned(),
        result: outcome,
        task,
    };
    sink.emit(ctx, Some(call.step), done).await;
    if let Some(looped) = ctx.note_tool_result(call.tool, &shown_args, &result) {
        let told = ErrorData {
            error: looped.clone(),
            step_id: Some(call.step.leaf().to_owned()),
        };
        sink.emit(ctx, Some(call.step), told).await;
        return Err(looped);
    }
    result
}

/// Whether the run may call `tool`: it exists, and the run's allow-list (if any) names it.
pub fn may_use(ctx: &RunContext, tool: &str) -> bool {
    let allowed = ctx
        .spec
        .request
        .tools
        .as_ref()
        .is_none_or(|list| list.iter().any(|t| t == tool));
    allowed && ctx.services.tools.contains(tool)
}

/// A worker tool's call: its arguments checked here (as the registry checks every other
/// tool's), then queued for the tenant's workers (`worker_call`), with no timeout but the
/// task's own.
async fn queue_for_workers(
    ctx: &RunContext,
    (step, call_id, spec): (&StepPath, &str, &crate::domain::WorkerToolSpec),
    arguments: Value,
) -> (Result<Value, RunError>, Option<TaskNote>) {
    if let Err(e) = ctx.services.tools.validate(&spec.name, &arguments) {
        return (Err(e.to_run_error()), None);
    }
    let call = WorkerCall {
        step,
        call_id,
        spec,
        arguments,
    };
    call_worker(ctx, call).await
}

async fn invoke(ctx: &RunContext, tool: &str, args: Value) -> Result<Value, RunError> {
    let timeout = Duration::from_millis(ctx.services.config.tool_timeout_ms);
    let cancel = ctx.cancel.child_token();
    match tokio::time::timeout(timeout, ctx.services.tools.invoke(tool, args, &cancel)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_run_error()),
        Err(_) => {
            cancel.cancel();
            Err(RunError::new(
                ErrorCode::ToolTimeout,
                format!("`{tool}` did not finish within {} ms", timeout.as_millis()),
            ))
        }
    }
}
