//! `agent`: one turn of an agent (or of a hub with its spokes), `handoff`: control passed
//! between agents, `group_chat`: agents taking turns, and `workflow`: a nested workflow. These
//! resolve the step's input; the work itself lives in `scheduler::team`.

use serde_json::Value;

use crate::domain::attempt_io::{
    AgentInput, GroupChatInput, HandoffInput, OnNoHandoff, Prompted, WorkflowInput,
};
use crate::domain::{ErrorCode, RunError, StepPath};
use crate::llm::Message;
use crate::plan::StepSpec;
use crate::plan::Template;
use crate::plan::team::{AgentStep, GroupChatStep, HandoffStep, NoHandoff, WorkflowStep};

use super::StepIo;
use crate::domain::run::input_text;
use crate::engine::scheduler::frame::{Frame, Locals};
use crate::engine::scheduler::team::spokes::Spokes;
use crate::engine::scheduler::team::turn::{Plain, take_turn, text_of};
use crate::engine::scheduler::team::workflow::run_named;
use crate::engine::scheduler::team::{chat, handoff as handoffs};

pub(crate) async fn run(
    frame: &Frame<'_>,
    spec: &StepSpec,
    step: &AgentStep,
    locals: Locals<'_>,
    io: &mut StepIo<'_>,
) -> Result<Value, RunError> {
    let Some(agent) = frame.team.agent(&step.agent) else {
        return Err(RunError::new(
            ErrorCode::InvalidStep,
            format!("the plan has no agent `{}`", step.agent),
        ));
    };
    let prompt = match &step.prompt {
        Some(t) => frame.resolve_text(locals, t)?,
        None => input_text(&frame.input),
    };
    // A sequential team's history: the earlier agents' exchanges (how each was asked, what it
    // answered), oldest first.
    let mut messages = Vec::new();
    let inputs = if step.history.is_empty() {
        Default::default()
    } else {
        frame.ctx.completed_inputs().await
    };
    for id in &step.history {
        let Some(output) = frame.output_of(locals, id.as_str()) else {
            continue;
        };
        if let Some(asked) = asked_of(&inputs, locals, id.as_str()) {
            messages.push(Message::User { content: asked });
        }
        messages.push(Message::Assistant {
            content: text_of(&output),
            tool_calls: Vec::new(),
        });
    }
    messages.push(Message::User {
        content: prompt.clone(),
    });
    let mut input = AgentInput {
        agent: agent.name.clone(),
        prompt,
        history: step.history.clone(),
        spokes: step.spokes.clone(),
        audit: Vec::new(),
    };
    io.input = Some(input.clone().into());
    let key = locals.key(spec);
    let end = if step.spokes.is_empty() {
        take_turn(frame, agent, &key, messages, &mut Plain, io.sink).await?
    } else {
        let mut hub = Spokes {
            frame,
            spokes: &step.spokes,
            key: key.clone(),
            asked: 0,
        };
        take_turn(frame, agent, &key, messages, &mut hub, io.sink).await?
    };
    if !end.audit.is_empty() {
        input.audit = end.audit;
        io.input = Some(input.into());
    }
    Ok(end.value)
}

/// The prompt an earlier agent step `id` was given (`inputs`: the finished steps' inputs by
/// key): it sits beside this step (at `locals.path`) or at the top level.
fn asked_of(
    inputs: &std::collections::HashMap<StepPath, Value>,
    locals: Locals<'_>,
    id: &str,
) -> Option<String> {
    let input = inputs
        .get(&locals.path.step(id))
        .or_else(|| inputs.get(&StepPath::top(id)))?;
    Prompted::of(input)
}

pub(crate) async fn workflow(
    frame: &Frame<'_>,
    spec: &StepSpec,
    step: &WorkflowStep,
    locals: Locals<'_>,
    io: &mut StepIo<'_>,
) -> Result<Value, RunError> {
    let input = match &step.input {
        Some(t) => frame.resolve(locals, t)?,
        None => (*frame.input).clone(),
    };
    let shown = WorkflowInput {
        workflow: step.workflow.clone(),
        input: input.clone(),
    };
    io.input = Some(shown.into());
    let key = locals.key(spec);
    run_named(frame, &step.workflow, input, &key, io.sink).await
}

/// The text a team step starts from: its `prompt`, else the run input's text.
fn opening(
    frame: &Frame<'_>,
    locals: Locals<'_>,
    prompt: Option<&Template>,
) -> Result<String, RunError> {
    match prompt {
        Some(t) => frame.resolve_text(locals, t),
        None => Ok(input_text(&frame.input)),
    }
}

pub(crate) async fn handoff(
    frame: &Frame<'_>,
    spec: &StepSpec,
    step: &HandoffStep,
    locals: Locals<'_>,
    io: &mut StepIo<'_>,
) -> Result<Value, RunError> {
    let prompt = opening(frame, locals, step.prompt.as_ref())?;
    let input = HandoffInput {
        start: step.start.clone(),
        prompt: prompt.clone(),
        max_transitions: step.max_transitions,
        on_no_handoff: match step.on_no_handoff {
            NoHandoff::End => OnNoHandoff::End,
            NoHandoff::AskHuman => OnNoHandoff::AskHuman,
        },
    };
    io.input = Some(input.into());
    let key = locals.key(spec);
    handoffs::run(frame, &key, step, prompt, io.sink).await
}

pub(crate) async fn group_chat(
    frame: &Frame<'_>,
    spec: &StepSpec,
    step: &GroupChatStep,
    locals: Locals<'_>,
    io: &mut StepIo<'_>,
) -> Result<Value, RunError> {
    let prompt = opening(frame, locals, step.prompt.as_ref())?;
    let input = GroupChatInput {
        participants: step.participants.clone(),
        prompt: prompt.clone(),
        max_rounds: step.max_rounds,
    };
    io.input = Some(input.into());
    let key = locals.key(spec);
    chat::run(frame, &key, step, prompt, io.sink).await
}
