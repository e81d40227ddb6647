//! Step kinds: one attempt of a step's body, one file per kind, behind [`run`].
//!
//! A body resolves its templates, does its work, and returns its output or a [`RunError`]
//! whose code says whether a retry may help. Its events go to the attempt's sink; what it
//! resolved its inputs to goes to [`StepIo::input`], stored with the attempt.

mod agent;
mod branch;
mod llm;
mod loops;
mod parallel;
pub(crate) mod sequential;
mod tool;
mod wait;

use serde_json::Value;

use crate::domain::attempt_io::UserInputInput;
use crate::domain::{AttemptInput, RunError};
use crate::plan::{KindSpec, StepSpec};

use super::frame::{Frame, Locals};
use crate::engine::runtime::sink::EventSink;

pub(crate) use branch::arm_not_taken;

/// What an attempt's body writes besides its result.
pub(crate) struct StepIo<'s> {
    pub sink: &'s mut EventSink,
    /// What the attempt resolved its templates to (tool arguments, prompts).
    pub input: Option<AttemptInput>,
}

/// One attempt of `spec`'s body. Boxed: a step holds steps (and agents, workflows) inside it,
/// so each level's body lives on the heap and a deep plan's poll chain stays small on the stack
/// (a debug build's 2 MiB thread stack overflowed at five levels of nesting with the bodies
/// inline).
pub(crate) fn run<'f>(
    frame: &'f Frame<'f>,
    spec: &'f StepSpec,
    locals: Locals<'f>,
    io: &'f mut StepIo<'_>,
) -> futures::future::BoxFuture<'f, Result<Value, RunError>> {
    Box::pin(body(frame, spec, locals, io))
}

async fn body(
    frame: &Frame<'_>,
    spec: &StepSpec,
    locals: Locals<'_>,
    io: &mut StepIo<'_>,
) -> Result<Value, RunError> {
    match &spec.kind {
        KindSpec::Tool { tool, arguments } => {
            tool::run(frame, spec, tool, arguments, locals, io).await
        }
        KindSpec::Llm {
            prompt,
            system,
            model,
            output_schema,
        } => {
            let ask = llm::Ask {
                prompt,
                system: system.as_ref(),
                model: model.as_deref(),
                output_schema: output_schema.as_ref(),
            };
            llm::run(frame, spec, ask, locals, io).await
        }
        KindSpec::Function {
            function,
            arguments,
        } => llm::call(frame, spec, function, arguments, locals, io).await,
        KindSpec::Branch { condition, .. } => branch::run(frame, condition, locals),
        KindSpec::Wait(wait) => Ok(wait::run(*wait).await),
        KindSpec::UserInput { prompt, schema } => {
            let prompt = frame.resolve_text(locals, prompt)?;
            io.input = Some(
                UserInputInput {
                    prompt: prompt.clone(),
                }
                .into(),
            );
            frame
                .ctx
                .wait_for_input(&locals.key(spec), &prompt, schema.as_ref())
                .await
        }
        KindSpec::Sequential { steps } => {
            let inside = locals.key(spec);
            sequential::run(frame, steps, &inside, locals, io.sink).await
        }
        KindSpec::Loop {
            over,
            max_iterations,
            steps,
        } => {
            let inside = locals.key(spec);
            let body = loops::Body {
                over,
                max_iterations: *max_iterations,
                steps,
            };
            loops::run(frame, body, &inside, locals, io.sink).await
        }
        KindSpec::Agent(step) => agent::run(frame, spec, step, locals, io).await,
        KindSpec::Workflow(step) => agent::workflow(frame, spec, step, locals, io).await,
        KindSpec::Handoff(step) => agent::handoff(frame, spec, step, locals, io).await,
        KindSpec::GroupChat(step) => agent::group_chat(frame, spec, step, locals, io).await,
        KindSpec::Parallel { steps, aggregation } => {
            let inside = locals.key(spec);
            parallel::run(frame, steps, *aggregation, &inside, locals, io.sink).await
        }
    }
}
