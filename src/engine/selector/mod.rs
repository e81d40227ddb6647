//! The auto selector: what runs a request that asks for `orchestration: "auto"` (the default).
//! `auto` is resolved here and nowhere else, in this order:
//!
//! 1. an orchestration other than `auto` in the request: that one (`by: "request"`);
//! 2. a `plan` or `workflow` in the request: `fixed` with it (`by: "rule"`, rule
//!    `request_plan` or `request_workflow`);
//! 3. the first `[[selector.rules]]` entry matching the input text (a regular expression or
//!    keywords): its orchestration, or its registered workflow run as `fixed` (`by: "rule"`);
//!    a rule whose workflow is missing or refuses the input is passed over;
//! 4. with `selector.use_llm`, the `selector` function asked for the OrchestrationType schema
//!    (`{"orchestrationType": ...}`) as structured output (`by: "llm"`);
//! 5. `selector.default` (`by: "default"`): the model not asked, failed, or answered something
//!    that cannot run.
//!
//! Steps 1-3 (and 5 without the model) are decided when the run is created
//! (`intake::admit`), so the 201 answer already shows them. Step 4 is a model call, made by the run task once the
//! run has a running slot ([`settle`]): recorded as the step `selector`, streamed as
//! `json_partial`, its tokens counted against the run's limits like any model call.
//!
//! Whatever decided, the choice is stored with the run (`Run::selected`) before the
//! executor starts, so a run resumed after a restart runs what was chosen and never asks
//! again; and it is announced on the `running` status event (`selected`).

use serde_json::{Value, json};

use crate::domain::event::StatusData;
use crate::domain::{
    ErrorCode, Orchestration, RunError, RunStatus, SelectedBy, Selection, StepPath,
};
use crate::functions::{self, LlmFunction};

use super::calls::function_call::{self, FunctionCall};
use super::calls::model::structured;
use super::runtime::context::RunContext;
use super::runtime::sink::EventSink;
use crate::domain::run::{Settled, input_text};

pub use crate::config::selector::{REQUEST_PLAN, REQUEST_WORKFLOW, Target};

/// The step the model's selection is recorded as.
pub const SELECTOR_STEP: &str = "selector";
/// The name of the structured output the model is asked for (the offline model knows it).
pub const RESPONSE_NAME: &str = "orchestration_type";
/// The run's orchestration, asking the model first when `intake` left the choice to
/// it. A choice made here is stored with the run and announced (`status` `running` with
/// `selected`) before the executor starts. An error only for what ends the run anyway: a limit
/// passed, a cancel.
pub async fn settle(ctx: &RunContext) -> Result<Settled, RunError> {
    if let Some(selected) = ctx.run().selected {
        return runs_as(selected.orchestration);
    }
    let selection = match ask_model(ctx).await {
        Ok(answer) => judge(ctx, &answer),
        Err(e) => {
            if let Some(breach) = ctx.breached() {
                return Err(breach);
            }
            if ctx.cancel.is_cancelled() {
                return Err(e);
            }
            fall_back(
                ctx,
                format!("the model could not choose ({}: {})", e.code, e.message),
            )
        }
    };
    let orchestration = selection.orchestration;
    ctx.update_run(|r| {
        r.orchestration = orchestration;
        r.selected = Some(selection.clone());
    });
    ctx.save_run().await;
    let announced = StatusData {
        status: RunStatus::Running,
        message: None,
        selected: Some(selection),
        progress: None,
    };
    ctx.emit(None, announced).await;
    runs_as(orchestration)
}

/// What a selection runs as: a selection never names `auto` (intake and [`judge`] choose
/// among the others), so one that does is a defect, failing the run with its code.
fn runs_as(orchestration: Orchestration) -> Result<Settled, RunError> {
    orchestration.settled().ok_or_else(|| {
        RunError::new(
            ErrorCode::InternalError,
            "the run's orchestration was settled as `auto`",
        )
    })
}

/// The model's (schema-valid) answer as a selection: its orchestration when it can run this
/// request, else the default.
fn judge(ctx: &RunContext, answer: &Value) -> Selection {
    let chosen = answer
        .get("orchestrationType")
        .and_then(Value::as_str)
        .and_then(Orchestration::parse);
    match chosen {
        Some(o @ (Orchestration::Simple | Orchestration::Planner | Orchestration::Reactive)) => {
            Selection {
                orchestration: o,
                by: SelectedBy::Llm,
                rule: None,
                reason: format!("the model chose `{}`", o.as_str()),
            }
        }
        Some(Orchestration::Fixed) => fall_back(
            ctx,
            "the model chose `fixed`, but the request has no workflow or plan".to_owned(),
        ),
        _ => fall_back(
            ctx,
            format!("the model answered {answer}, not an orchestration"),
        ),
    }
}

fn fall_back(ctx: &RunContext, why: String) -> Selection {
    let default = ctx.services.selector.default_orchestration();
    Selection {
        orchestration: default,
        by: SelectedBy::Default,
        rule: None,
        reason: format!("{why}; selector.default is `{}`", default.as_str()),
    }
}

/// One call of the `selector` function, recorded as an attempt of the step `selector`: the
/// model's answer, checked against the function's output schema.
async fn ask_model(ctx: &RunContext) -> Result<Value, RunError> {
    let function = function_call::configured(ctx, functions::SELECTOR)?;
    // The selector's prompt over `{"task": <the input text>}`.
    let task = json!({ "task": input_text(&ctx.spec.request.input) });
    let messages = function_call::opening(ctx, &function, &task)?;
    let step = StepPath::top(SELECTOR_STEP);
    let mut sink = EventSink::Live;
    let call = FunctionCall::of(&function, &step, SELECTOR_STEP, RESPONSE_NAME);
    let mut open = function_call::open(ctx, call, &mut sink).await?;
    let answer = match open.ask(ctx, messages).await {
        Ok(reply) => answer_of(&reply.text, &function),
        Err(e) => Err(e),
    };
    open.close(ctx, &answer, &mut sink).await;
    answer
}

/// The selector's answer as JSON, held to the function's output schema when it has one.
fn answer_of(text: &str, function: &LlmFunction) -> Result<Value, RunError> {
    match &function.output_schema {
        Some(schema) => structured(text, schema),
        None => serde_json::from_str(text.trim()).map_err(|e| {
            RunError::new(
                ErrorCode::InvalidLlmOutput,
                format!("the model's answer is not JSON: {e}"),
            )
        }),
    }
}
