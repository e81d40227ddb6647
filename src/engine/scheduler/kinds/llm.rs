//! `llm`: one model call, with the step's own prompt (and system prompt, model and output
//! schema), or a named function's, its `arguments` as the function's `input`.

use serde_json::{Map, Value};

use crate::domain::attempt_io::{FunctionInput, LlmInput};
use crate::domain::{ErrorCode, RunError};
use crate::plan::{JsonSchema, NoResults, Scope, StepSpec, Template};

use super::StepIo;
use crate::engine::calls::model::{Answer, Prompt, ask};
use crate::engine::scheduler::frame::{Frame, Locals};
use crate::plan::render_error;

/// What an `llm` step asks, as the plan wrote it.
pub(crate) struct Ask<'a> {
    pub prompt: &'a Template,
    pub system: Option<&'a Template>,
    /// A model alias; the run's model when `None`.
    pub model: Option<&'a str>,
    pub output_schema: Option<&'a JsonSchema>,
}

pub(crate) async fn run(
    frame: &Frame<'_>,
    spec: &StepSpec,
    ask_: Ask<'_>,
    locals: Locals<'_>,
    io: &mut StepIo<'_>,
) -> Result<Value, RunError> {
    let prompt = frame.resolve_text(locals, ask_.prompt)?;
    let system = match ask_.system {
        Some(s) => Some(frame.resolve_text(locals, s)?),
        None => None,
    };
    let input = LlmInput {
        prompt: prompt.clone(),
        system: system.clone(),
        model: ask_.model.map(str::to_owned),
    };
    io.input = Some(input.into());
    let prompt = Prompt {
        system,
        user: prompt,
        model: ask_.model,
        output_schema: ask_.output_schema,
    };
    let key = locals.key(spec);
    answered(ask(frame.ctx, &key, prompt).await?, io)
}

/// A step calling the named `function` with `arguments`.
pub(crate) async fn call(
    frame: &Frame<'_>,
    spec: &StepSpec,
    function: &str,
    arguments: &Template,
    locals: Locals<'_>,
    io: &mut StepIo<'_>,
) -> Result<Value, RunError> {
    let ctx = frame.ctx;
    let args = frame.resolve(locals, arguments)?;
    let input = FunctionInput {
        function: function.to_owned(),
        arguments: args.clone(),
    };
    io.input = Some(input.into());
    let Some(f) = ctx.services.functions.get(function) else {
        return Err(RunError::new(
            ErrorCode::InvalidStep,
            format!(
                "no LLM function `{function}`: not configured, nor declared by the tenant when the run was created"
            ),
        ));
    };
    // The function's prompt sees the arguments as `input`, and nothing of the run.
    let vars = Map::new();
    let scope = Scope::new(&args, &NoResults, &vars);
    let limit = ctx.services.config.max_rendered_bytes;
    let user = match f.prompt.render(&scope, limit).map_err(render_error)? {
        Value::String(s) => s,
        other => other.to_string(),
    };
    let prompt = Prompt {
        system: f.system.clone(),
        user,
        model: f.model.as_deref(),
        output_schema: f.output_schema.as_ref(),
    };
    let key = locals.key(spec);
    answered(ask(ctx, &key, prompt).await?, io)
}

/// The answer's value; the step's input shows the fallback alias that gave it, if one did.
fn answered(answer: Answer, io: &mut StepIo<'_>) -> Result<Value, RunError> {
    if let Some(by) = &answer.answered_by {
        io.input = io.input.take().map(|input| input.answered_by(by));
    }
    Ok(answer.value)
}
