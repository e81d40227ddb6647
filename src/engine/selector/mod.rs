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
//! Steps 1-3 (and 5 without the model) are decided when the run is created ([`at_creation`]),
//! so the 201 answer already shows them. Step 4 is a model call, made by the run task once the
//! run has a running slot ([`settle`]): recorded as the step `selector`, streamed as
//! `json_partial`, its tokens counted against the run's limits like any model call.
//!
//! Whatever decided, the choice is stored with the run (`Run::selected`) before the
//! executor starts, so a run resumed after a restart runs what was chosen and never asks
//! again; and it is announced on the `running` status event (`selected`).

use serde_json::{Value, json};

use crate::config::SelectorConfig;
use crate::domain::event::StatusData;
use crate::domain::run::RunSpec;
use crate::domain::{
    ErrorCode, Orchestration, RunError, RunStatus, SelectedBy, Selection, StepPath, Tenant,
};
use crate::functions::{self, LlmFunction};
use crate::plan::ValidPlan;

use super::context::{RunContext, Services};
use super::function_call::{self, FunctionCall};
use super::model::structured;
use super::simple::input_text;
use super::sink::EventSink;

pub use crate::config::selector::{
    ConfigProblem, Hit, REQUEST_PLAN, REQUEST_WORKFLOW, Rule, Target,
};

/// The step the model's selection is recorded as.
pub const SELECTOR_STEP: &str = "selector";
/// The name of the structured output the model is asked for (the offline model knows it).
pub const RESPONSE_NAME: &str = "orchestration_type";
/// `[selector]`, checked and compiled: the rules in order, the default, whether to ask the
/// model. Built once at start; cheap to share.
#[derive(Debug, Clone)]
pub struct Selector {
    rules: Vec<Rule>,
    default: Orchestration,
    use_llm: bool,
}

impl Selector {
    /// Compiles `[selector]`; the first problem names its key (bad regular expressions,
    /// unknown orchestrations, rules without a matcher or a target).
    pub fn from_config(config: &SelectorConfig) -> Result<Selector, ConfigProblem> {
        Ok(Selector {
            default: crate::config::selector::default_of(config)?,
            rules: crate::config::selector::compile(config)?,
            use_llm: config.use_llm,
        })
    }

    /// The configured orchestration for when nothing else decides.
    pub fn default_orchestration(&self) -> Orchestration {
        self.default
    }

    /// Every rule matching `text`, in order, with what matched.
    pub fn matching<'a>(&'a self, text: &'a str) -> impl Iterator<Item = (&'a Rule, Hit)> + 'a {
        let lowered = text.to_lowercase();
        self.rules
            .iter()
            .filter_map(move |r| r.hit(text, &lowered).map(|h| (r, h)))
    }
}

impl Default for Selector {
    /// The shipped `[selector]`: no rules, ask the model, else `simple`.
    fn default() -> Self {
        Selector::from_config(&SelectorConfig::default()).expect("the default [selector] is valid")
    }
}

fn by_rule(orchestration: Orchestration, rule: &str, reason: String) -> Selection {
    Selection {
        orchestration,
        by: SelectedBy::Rule,
        rule: Some(rule.to_owned()),
        reason,
    }
}

/// Decides what it can as the run is created: the request's orchestration, its plan or
/// workflow, a matching rule, or (the model not to be asked) the default. `None` leaves the
/// choice to the model, asked by [`settle`] when the run starts. A rule naming a workflow puts
/// the workflow's plan into `spec.plan` and `plan`, as a request naming it would.
pub async fn at_creation(
    services: &Services,
    tenant: &Tenant,
    spec: &mut RunSpec,
    plan: &mut Option<ValidPlan>,
) -> Result<Option<Selection>, crate::store::Error> {
    if spec.orchestration != Orchestration::Auto {
        return Ok(Some(Selection {
            orchestration: spec.orchestration,
            by: SelectedBy::Request,
            rule: None,
            reason: format!("the request asked for `{}`", spec.orchestration.as_str()),
        }));
    }
    if spec.plan.is_some() {
        let (rule, reason) = match &spec.workflow {
            Some(Value::String(name)) => (
                REQUEST_WORKFLOW,
                format!("the request names workflow `{name}`"),
            ),
            Some(_) => (
                REQUEST_WORKFLOW,
                "the request carries a workflow".to_owned(),
            ),
            None => (REQUEST_PLAN, "the request carries a plan".to_owned()),
        };
        return Ok(Some(by_rule(Orchestration::Fixed, rule, reason)));
    }
    let selector = &services.selector;
    let text = input_text(&spec.input);
    for (rule, hit) in selector.matching(&text) {
        let name = match &rule.target {
            Target::Orchestration(o) => {
                let reason = format!("the input matched {hit}");
                return Ok(Some(by_rule(*o, &rule.name, reason)));
            }
            Target::Workflow(name) => name,
        };
        match rule_workflow(services, tenant, name, &spec.input).await? {
            Ok((doc, valid)) => {
                spec.plan = Some(doc);
                *plan = Some(valid);
                let reason = format!("the input matched {hit}; runs workflow `{name}`");
                return Ok(Some(by_rule(Orchestration::Fixed, &rule.name, reason)));
            }
            Err(why) => tracing::warn!(
                rule = %rule.name,
                workflow = %name,
                "a selector rule matched, but {why}; the next rule decides"
            ),
        }
    }
    if selector.use_llm {
        return Ok(None);
    }
    Ok(Some(Selection {
        orchestration: selector.default,
        by: SelectedBy::Default,
        rule: None,
        reason: "no rule matched and selector.use_llm is off".to_owned(),
    }))
}

/// A rule's workflow as the caller sees it (their own, else a shared one), validated, with
/// the input checked against its `input_schema`: its plan document and plan, or why not.
async fn rule_workflow(
    services: &Services,
    tenant: &Tenant,
    name: &str,
    input: &Value,
) -> Result<Result<(Value, ValidPlan), String>, crate::store::Error> {
    let Some(record) = services.store().get_workflow(tenant, name).await? else {
        return Ok(Err(format!("no workflow `{name}` is registered")));
    };
    let mut definition = record.definition;
    crate::agents::resolve_references(services.store(), tenant, &mut definition).await?;
    let workflow = match crate::plan::validate_workflow(&definition, services.catalog()) {
        Ok(w) => w,
        Err(problems) => {
            let problems = super::fixed::list(&problems);
            return Ok(Err(format!("workflow `{name}` is invalid: {problems}")));
        }
    };
    let refused = workflow.check_input(input);
    if let Some(v) = refused.first() {
        return Ok(Err(format!(
            "workflow `{name}` refuses the input: {} {}",
            v.pointer, v.message
        )));
    }
    Ok(Ok((
        crate::plan::workflow_plan_doc(definition),
        workflow.plan,
    )))
}

/// The run's orchestration, asking the model first when [`at_creation`] left the choice to
/// it. A choice made here is stored with the run and announced (`status` `running` with
/// `selected`) before the executor starts. An error only for what ends the run anyway: a limit
/// passed, a cancel.
pub async fn settle(ctx: &RunContext) -> Result<Orchestration, RunError> {
    if let Some(selected) = ctx.run().selected {
        return Ok(selected.orchestration);
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
    };
    ctx.emit(None, announced).await;
    Ok(orchestration)
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
    let task = json!({ "task": input_text(&ctx.spec.input) });
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
