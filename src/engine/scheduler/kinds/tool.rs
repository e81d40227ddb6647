//! `tool`: resolves the arguments and calls the tool through the run's one tool-call path.

use serde_json::Value;

use crate::domain::RunError;
use crate::domain::attempt_io::ToolInput;
use crate::plan::{StepSpec, Template};

use super::StepIo;
use crate::engine::calls::tool_call::{ToolArguments, ToolCall, call_tool};
use crate::engine::scheduler::frame::{Frame, Locals};

pub(crate) async fn run(
    frame: &Frame<'_>,
    spec: &StepSpec,
    tool: &str,
    arguments: &Template,
    locals: Locals<'_>,
    io: &mut StepIo<'_>,
) -> Result<Value, RunError> {
    let args = frame.resolve(locals, arguments)?;
    let input = ToolInput {
        tool: tool.to_owned(),
        arguments: args.clone(),
    };
    io.input = Some(input.into());
    let call_id = format!("{}-call", spec.id);
    // The step's key: nested, its events carry the path of the steps around it.
    let key = locals.key(spec);
    let call = ToolCall {
        step: &key,
        call_id: &call_id,
        tool,
        arguments: ToolArguments::Json(args),
    };
    call_tool(frame.ctx, call, io.sink).await
}
