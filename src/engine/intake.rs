//! Intake: a run request becomes what the engine stores. [`admit_body`] takes a body as
//! `POST /v1/runs` and a schedule's tick send it, checked against its schema, to [`admit`];
//! before anything is stored [`admit`] resolves everything the request names:
//!
//! - the completion webhook: the tenant's default, or one the server signs and may reach;
//! - the model alias and the tools (each one the tenant may call), and the size of the
//!   instructions;
//! - orchestration × `workflow` (a registered name, or inline) × `plan`: which combinations
//!   may run, the plan or workflow validated with the registered agents and workflows it
//!   names copied in (`agents::resolve_references`), and the input checked against a
//!   workflow's `input_schema`. The plan is resolved now, so the run executes (and resumes)
//!   exactly what was validated;
//! - for `auto`, what is decided without the model (steps 1-3 of [`super::selector`], and 5
//!   when the model is not to be asked): the request's own orchestration, plan or workflow,
//!   or the first matching `[[selector.rules]]` entry whose workflow takes the input. The
//!   rules themselves are matched by [`Selector::matching`](crate::config::selector::Selector).
//!
//! Every problem is reported at once, each with a JSON Pointer into the request; the API
//! answers them as its 422 `validation_failed`. Intake reads the store (the tenant's declared
//! tools, its registries) but writes nothing, and asks no model: the selector's model call
//! waits until the run has a running slot ([`super::selector::settle`]).

use serde_json::Value;

use crate::domain::definition::{DefinitionKind, Pin, Reference, unknown_version};
use crate::domain::run::{RunRequest, RunSpec};
use crate::domain::schedule::ScheduleFire;
use crate::domain::{Orchestration, SelectedBy, Selection, Tenant};
use crate::functions::FunctionSpec;
use crate::plan::{Problem, ValidPlan};
use crate::store;
use crate::workflows::Workflows;

use super::runtime::context::{Bodies, Services};
use super::selector::{REQUEST_PLAN, REQUEST_WORKFLOW, Target};
use crate::domain::run::input_text;

/// The longest `instructions`, in bytes.
pub const MAX_INSTRUCTIONS_BYTES: usize = 32 * 1024;

/// A request that can run: what [`Engine::create_run`](super::Engine::create_run) stores.
pub struct Admitted {
    /// The spec to store: the request, with the plan it resolved to and the declared tools it
    /// may call.
    pub(super) spec: RunSpec,
    /// The plan validated from `spec.request.plan`, kept so the run does not parse it again.
    pub(super) plan: Option<ValidPlan>,
    /// What `auto` decided at once; `None` leaves it to the model when the run starts.
    pub(super) selected: Option<Selection>,
    /// [`RunSpec::fingerprint`] of the request as it came, taken before a rule's workflow plan
    /// joins the spec: what an idempotency key is held to. `None` when the spec stays as it
    /// came (it is taken from the spec then, if a key asks).
    pub(super) fingerprint: Option<String>,
}

impl Admitted {
    /// The spec the run is stored with.
    pub fn spec(&self) -> &RunSpec {
        &self.spec
    }

    /// What `auto` decided at once, if it did.
    pub fn selected(&self) -> Option<&Selection> {
        self.selected.as_ref()
    }

    /// The run a schedule's tick starts: linked to the tick, which is part of the request its
    /// idempotency key (`schedule:<id>:<tick>`) is held to.
    pub fn for_tick(mut self, tick: ScheduleFire) -> Admitted {
        self.spec.schedule = Some(tick);
        if self.fingerprint.is_some() {
            // Taken when the spec had no plan, before a rule's workflow plan could join it.
            let mut came = self.spec.clone();
            came.request.plan = None;
            self.fingerprint = Some(came.fingerprint());
        }
        self
    }
}

/// Why a request was not admitted.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The request cannot run as sent: every problem, in the order of the request.
    #[error("the request has {} problem(s)", .0.len())]
    Invalid(Vec<Problem>),
    /// The store could not be read to decide.
    #[error(transparent)]
    Store(#[from] store::Error),
}

/// Checks a run body against its schema, then [`admit`]s it: the run to store, or every
/// problem at once (the schema's alone when the body breaks it).
pub async fn admit_body(
    services: &Services,
    tenant: &Tenant,
    body: Value,
) -> Result<Admitted, Refused> {
    let rules = &services.bodies;
    let request: RunRequest =
        crate::schema::parse_checked(&rules.schema, body).map_err(|violations| {
            Refused::Invalid(
                violations
                    .into_iter()
                    .map(|v| Problem::new(v.pointer, v.message))
                    .collect(),
            )
        })?;
    admit(services, tenant, request).await
}

/// The webhook a run's end is delivered to: the one given (if the server signs webhooks and
/// may reach it), else the tenant's default (`webhooks.tenants`), else none.
fn webhook_of(
    rules: &Bodies,
    tenant: &Tenant,
    given: Option<String>,
) -> Result<Option<String>, Problem> {
    let Some(url) = given else {
        return Ok(rules.webhooks.tenants.get(&tenant.0).cloned());
    };
    if rules.webhooks.secret.is_empty() {
        return Err(Problem::new(
            "/webhook",
            "this server signs no webhooks: its operator has not set webhooks.secret",
        ));
    }
    let parsed = reqwest::Url::parse(&url)
        .map_err(|e| Problem::new("/webhook/url", format!("not a URL: {e}")))?;
    rules
        .destinations
        .check_url(&parsed)
        .map_err(|refused| Problem::new("/webhook/url", format!("refused: {refused}")))?;
    Ok(Some(url))
}

/// Checks and resolves a run request for `tenant` (see the module doc): the run to store, or
/// every problem at once.
pub async fn admit(
    services: &Services,
    tenant: &Tenant,
    mut request: RunRequest,
) -> Result<Admitted, Refused> {
    let webhook = webhook_of(&services.bodies, tenant, request.webhook.take());
    request.webhook = webhook.as_ref().ok().cloned().flatten();
    let mut problems: Vec<Problem> = webhook.err().into_iter().collect();
    // The tenant's tools as the store has them now; the run keeps the declarations it may
    // call, so it calls the same tools wherever and whenever it runs.
    let (declared, tool_pins): (Vec<_>, Vec<_>) = services
        .declared_tools_pinned(tenant)
        .await?
        .into_iter()
        .unzip();
    let (functions, function_pins): (Vec<_>, Vec<_>) =
        (services.declared_functions(tenant).await?)
            .into_iter()
            .unzip();
    let tenants = services.for_tenant(tenant, &declared, &functions);
    problems.extend(named(&tenants, &request));
    let max_priority = services.quotas.of(&tenant.0).max_priority;
    if let Some(max) = max_priority.filter(|max| request.priority > *max) {
        problems.push(Problem::new(
            "/priority",
            format!(
                "must be at most {max} for this tenant (its quota's max_priority); a priority orders the tenant's own runs, tenants share the queue fairly"
            ),
        ));
    }
    let mut pins = Vec::new();
    let (plan, more) = plan_of(&tenants, tenant, &mut request, &mut pins).await?;
    problems.extend(more);
    if !problems.is_empty() {
        return Err(Refused::Invalid(problems));
    }
    let (plan_doc, mut plan) = plan.unzip();
    let may_call = |name: &str| {
        (request.tools.as_ref()).is_none_or(|allowed| allowed.iter().any(|t| t == name))
    };
    pins.extend(tool_pins.into_iter().filter(|p| may_call(&p.name)));
    let declared_tools = declared
        .into_iter()
        .filter(|t| may_call(t.name()))
        .collect();
    let chosen = chosen_functions(services, tenant, &pins).await?;
    pins.retain(|p| p.kind != DefinitionKind::Function);
    let latest = functions.into_iter().zip(function_pins).collect();
    let functions = kept_functions(&request, plan_doc.as_ref(), latest, chosen);
    let (functions, function_pins): (Vec<_>, Vec<_>) = functions.into_iter().unzip();
    pins.extend(function_pins);
    request.plan = plan_doc;
    let mut spec = RunSpec {
        declared_tools,
        declared_functions: functions,
        ..RunSpec::new(request)
    };
    // Only an `auto` run without a plan can have a rule's workflow join its spec: its
    // fingerprint is taken now. Any other spec stays as it is, and its fingerprint is taken
    // only if an idempotency key asks for it.
    let fingerprint = (spec.request.orchestration == Orchestration::Auto
        && spec.request.plan.is_none())
    .then(|| spec.fingerprint());
    // As the run will see them: only the declared tools it may call.
    let runs = services.for_tenant(tenant, &spec.declared_tools, &spec.declared_functions);
    let selected = select(&runs, tenant, &mut spec, &mut plan, &mut pins).await?;
    pins.sort();
    pins.dedup();
    spec.definitions = pins;
    Ok(Admitted {
        spec,
        plan,
        selected,
        fingerprint,
    })
}

/// What the request names that must exist on this server (its model alias, its tools), and
/// the size of its instructions.
fn named(services: &Services, request: &RunRequest) -> Vec<Problem> {
    let mut problems = Vec::new();
    let models = &services.llm;
    if let Some(model) = &request.model
        && !models.has_alias(model)
    {
        problems.push(Problem::new(
            "/model",
            format!(
                "unknown model alias `{model}`; configured: {}",
                models.aliases().join(", ")
            ),
        ));
    }
    if request.review_plans
        && matches!(
            request.orchestration,
            Orchestration::Simple | Orchestration::Fixed
        )
    {
        problems.push(Problem::new(
            "/review_plans",
            format!(
                "reviews are of plans a model writes: `planner` and `reactive` runs (and `auto` runs that become one), not `{}`",
                request.orchestration.as_str()
            ),
        ));
    }
    if request.concurrency.is_some() && request.session_id.is_none() {
        problems.push(Problem::new(
            "/concurrency",
            "applies to runs of a session: give a session_id too",
        ));
    }
    if let Some(text) = &request.instructions
        && text.len() > MAX_INSTRUCTIONS_BYTES
    {
        problems.push(Problem::new(
            "/instructions",
            format!("must be at most {MAX_INSTRUCTIONS_BYTES} bytes (UTF-8)"),
        ));
    }
    for (i, t) in request.tools.iter().flatten().enumerate() {
        if !services.tools.contains(t) {
            problems.push(Problem::new(
                format!("/tools/{i}"),
                format!("no tool named `{t}`"),
            ));
        }
    }
    problems
}

/// The declared LLM functions a run keeps (copied into its spec and pinned): those its plan
/// calls when it runs a fixed plan, else all of them (a planner may write a step calling any);
/// each at the version its plan names (`chosen`), else the latest.
fn kept_functions(
    request: &RunRequest,
    plan: Option<&Value>,
    latest: Vec<(FunctionSpec, Pin)>,
    chosen: Vec<(FunctionSpec, Pin)>,
) -> Vec<(FunctionSpec, Pin)> {
    let mut all = chosen;
    let later: Vec<_> = (latest.into_iter())
        .filter(|(f, _)| !all.iter().any(|(c, _)| c.name == f.name))
        .collect();
    all.extend(later);
    match plan.filter(|_| request.orchestration == Orchestration::Fixed) {
        Some(doc) => {
            let mut called = std::collections::BTreeSet::new();
            crate::plan::functions_called(doc, &mut called);
            all.into_iter()
                .filter(|(f, _)| called.contains(&f.name))
                .collect()
        }
        None => all,
    }
}

/// The declared functions the plan's steps name at a version (their pins, recorded while the
/// plan was resolved), read at that version.
async fn chosen_functions(
    services: &Services,
    tenant: &Tenant,
    pins: &[Pin],
) -> store::Result<Vec<(FunctionSpec, Pin)>> {
    let registry = crate::store::Registry::Functions;
    let mut chosen = Vec::new();
    for pin in pins.iter().filter(|p| p.kind == DefinitionKind::Function) {
        let version = crate::domain::definition::Version::Number(pin.version);
        let store = services.store();
        let Some(found) = store
            .get_entry_at(registry, tenant, &pin.name, &version)
            .await?
        else {
            continue;
        };
        let spec = serde_json::from_value(found.definition)
            .map_err(|e| store::Error::Corrupt(format!("function `{}`: {e}", pin.name)))?;
        chosen.push((spec, pin.clone()));
    }
    Ok(chosen)
}

/// A plan document and the plan validated from it.
type Resolved = (Value, ValidPlan);

/// The plan the request runs, if it gives one: its `plan`, or its `workflow` as a plan; with
/// every problem of the orchestration × workflow × plan combination and of what it names.
/// An inline `plan` is taken out of the request (it becomes the run's document), not copied.
async fn plan_of(
    services: &Services,
    tenant: &Tenant,
    request: &mut RunRequest,
    pins: &mut Vec<Pin>,
) -> store::Result<(Option<Resolved>, Vec<Problem>)> {
    use Orchestration::{Auto, Fixed, Planner, Reactive, Simple};
    let refused = |pointer: &str, message: &str| (None, vec![Problem::new(pointer, message)]);
    Ok(
        match (request.orchestration, &request.workflow, &request.plan) {
            (_, Some(_), Some(_)) => refused("/plan", "send either `workflow` or `plan`, not both"),
            (Auto | Fixed | Reactive, None, Some(_)) => {
                let mut doc = request.plan.take().unwrap_or_default();
                let store = services.store();
                let overlay = services.bodies.overlay.clone().unwrap_or_default();
                let resolution =
                    crate::agents::resolve_over(store, tenant, &mut doc, &overlay).await?;
                pins.extend(resolution.pins.iter().cloned());
                match crate::plan::validate_plan(&doc, services.catalog()) {
                    Ok(valid) if resolution.problems.is_empty() => (Some((doc, valid)), Vec::new()),
                    Ok(_) => (None, prefixed("/plan", resolution.problems)),
                    Err(_) => {
                        let problems = resolution.with(told(services, tenant, &doc).await?);
                        (None, prefixed("/plan", problems))
                    }
                }
            }
            (Auto | Fixed | Reactive, Some(workflow), None) => {
                request_workflow(services, tenant, workflow, &request.input, pins).await?
            }
            (Fixed, None, None) => refused(
                "/workflow",
                "orchestration `fixed` needs a `workflow` (a registered name or an inline workflow) or a `plan`",
            ),
            (Auto | Simple | Planner | Reactive, None, None) => (None, Vec::new()),
            (Simple | Planner, _, _) => refused(
                if request.workflow.is_some() {
                    "/workflow"
                } else {
                    "/plan"
                },
                "`workflow` and `plan` are for orchestrations `fixed`, `reactive` (its first version) and `auto`",
            ),
        },
    )
}

/// The problems of an invalid plan `doc` as the caller is told them: validated again beside the
/// names of the agents the tenant has registered, so an agent missed by a letter is told the
/// nearest registered one too (asked only of a refused plan: a valid one costs no query).
async fn told(services: &Services, tenant: &Tenant, doc: &Value) -> store::Result<Vec<Problem>> {
    let registered = services
        .store()
        .entry_names(crate::store::Registry::Agents, tenant)
        .await?;
    let catalog = crate::plan::Catalog {
        registered_agents: &registered,
        ..services.catalog()
    };
    Ok(crate::plan::validate_plan(doc, catalog)
        .err()
        .unwrap_or_default())
}

/// The request's `workflow` (a registered name at a version, or inline) as a plan, with the
/// problems of the workflow (under `/workflow`) and of the input it refuses (under `/input`).
async fn request_workflow(
    services: &Services,
    tenant: &Tenant,
    workflow: &Value,
    input: &Value,
    pins: &mut Vec<Pin>,
) -> store::Result<(Option<Resolved>, Vec<Problem>)> {
    let definition = match workflow {
        Value::String(text) => match registered_workflow(services, tenant, text).await? {
            Ok(found) => {
                pins.push(crate::agents::pin(DefinitionKind::Workflow, &found));
                found.definition
            }
            Err(message) => return Ok((None, vec![Problem::new("/workflow", message)])),
        },
        inline => inline.clone(),
    };
    Ok(
        match workflow_plan(services, tenant, definition, input, pins).await? {
            Ok((resolved, refused)) => (Some(resolved), prefixed("/input", refused)),
            Err(problems) => (None, prefixed("/workflow", problems)),
        },
    )
}

/// The registered workflow a reference names (`name`, `name@3`, `name@label`), or what the
/// caller is told: the nearest name, or the versions and labels the workflow has.
async fn registered_workflow(
    services: &Services,
    tenant: &Tenant,
    text: &str,
) -> store::Result<Result<crate::store::RegistryRecord, String>> {
    let reference = match Reference::parse(text) {
        Ok(r) => r,
        Err(message) => return Ok(Err(message)),
    };
    let (name, version) = (&reference.name, &reference.version);
    if let Some(overlay) = &services.bodies.overlay
        && let Some(found) = over_workflow(overlay, name, version)
    {
        return Ok(found);
    }
    let store = services.store();
    let registry = crate::store::Registry::Workflows;
    if let Some(found) = store.get_entry_at(registry, tenant, name, version).await? {
        return Ok(Ok(found));
    }
    let definitions = crate::store::Definitions::new(store.clone());
    let Some(owner) = definitions.owner(registry, tenant, name).await? else {
        let registry = Workflows::new(store.clone());
        return Ok(Err(registry.unknown(tenant, name).await?));
    };
    let (numbers, labels) = definitions.known(registry, &owner, name).await?;
    let kind = DefinitionKind::Workflow;
    Ok(Err(unknown_version(kind, name, version, &numbers, &labels)))
}

/// A bundle's workflow `name` (unstored: version 0), or why none, when the bundle being applied
/// defines or removes it; `None` leaves it to the store. A version of a bundle's workflow is
/// a stored one.
fn over_workflow(
    overlay: &crate::agents::Overlay,
    name: &str,
    version: &crate::domain::definition::Version,
) -> Option<Result<crate::store::RegistryRecord, String>> {
    use crate::domain::definition::Version;
    if overlay.removes(DefinitionKind::Workflow, name) {
        return Some(Err(format!(
            "no workflow `{name}`: the apply removes it (prune)"
        )));
    }
    let definition = overlay
        .workflows
        .get(name)
        .filter(|_| *version == Version::Latest)?;
    let now = crate::domain::now();
    Some(Ok(crate::store::RegistryRecord {
        name: name.to_owned(),
        definition: definition.clone(),
        shared: false,
        version: 0,
        created_at: now,
        updated_at: now,
    }))
}

/// A workflow definition as a plan: with the registered agents and workflows it names copied
/// in, validated, and the input checked against its `input_schema`. The plan and the input's
/// problems (pointers into the input), or the workflow's problems.
async fn workflow_plan(
    services: &Services,
    tenant: &Tenant,
    mut definition: Value,
    input: &Value,
    pins: &mut Vec<Pin>,
) -> store::Result<Result<(Resolved, Vec<Problem>), Vec<Problem>>> {
    let store = services.store();
    let overlay = services.bodies.overlay.clone().unwrap_or_default();
    let resolution = crate::agents::resolve_over(store, tenant, &mut definition, &overlay).await?;
    pins.extend(resolution.pins.iter().cloned());
    let workflow = match crate::plan::validate_workflow(&definition, services.catalog()) {
        Ok(w) if resolution.problems.is_empty() => w,
        Ok(_) => return Ok(Err(resolution.problems)),
        Err(problems) => return Ok(Err(resolution.with(problems))),
    };
    let refused = (workflow.check_input(input).into_iter())
        .map(|v| Problem::new(v.pointer, v.message))
        .collect();
    let doc = crate::plan::workflow_plan_doc(definition);
    Ok(Ok(((doc, workflow.plan), refused)))
}

fn prefixed(prefix: &str, problems: Vec<Problem>) -> Vec<Problem> {
    problems
        .into_iter()
        .map(|p| Problem::new(format!("{prefix}{}", p.pointer), p.message))
        .collect()
}

/// What `auto` decides as the run is created: the request's orchestration, its plan or
/// workflow, a matching rule, or (the model not to be asked) the default. `None` leaves the
/// choice to the model, asked by [`super::selector::settle`] when the run starts. A rule
/// naming a workflow puts the workflow's plan into `spec.request.plan` and `plan`, as a request naming
/// it would.
async fn select(
    services: &Services,
    tenant: &Tenant,
    spec: &mut RunSpec,
    plan: &mut Option<ValidPlan>,
    pins: &mut Vec<Pin>,
) -> store::Result<Option<Selection>> {
    if spec.request.orchestration != Orchestration::Auto {
        return Ok(Some(Selection {
            orchestration: spec.request.orchestration,
            by: SelectedBy::Request,
            rule: None,
            reason: format!(
                "the request asked for `{}`",
                spec.request.orchestration.as_str()
            ),
        }));
    }
    if spec.request.plan.is_some() {
        let (rule, reason) = match &spec.request.workflow {
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
    let text = input_text(&spec.request.input);
    for (rule, hit) in selector.matching(&text) {
        let name = match &rule.target {
            Target::Orchestration(o) => {
                let reason = format!("the input matched {hit}");
                return Ok(Some(by_rule(*o, &rule.name, reason)));
            }
            Target::Workflow(name) => name,
        };
        match rule_workflow(services, tenant, name, &spec.request.input, pins).await? {
            Ok((doc, valid)) => {
                spec.request.plan = Some(doc);
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
    if selector.asks_model() {
        return Ok(None);
    }
    Ok(Some(Selection {
        orchestration: selector.default_orchestration(),
        by: SelectedBy::Default,
        rule: None,
        reason: "no rule matched and selector.use_llm is off".to_owned(),
    }))
}

fn by_rule(orchestration: Orchestration, rule: &str, reason: String) -> Selection {
    Selection {
        orchestration,
        by: SelectedBy::Rule,
        rule: Some(rule.to_owned()),
        reason,
    }
}

/// A rule's workflow as the caller sees it (their own, else a shared one), validated, with
/// the input checked against its `input_schema`: its plan document and plan, or why not.
async fn rule_workflow(
    services: &Services,
    tenant: &Tenant,
    name: &str,
    input: &Value,
    pins: &mut Vec<Pin>,
) -> store::Result<Result<Resolved, String>> {
    let registry = Workflows::new(services.store().clone());
    let Some(record) = registry.get(tenant, name).await? else {
        return Ok(Err(format!("no workflow `{name}` is registered")));
    };
    // Pinned only if the rule is taken: a rule passed over leaves nothing behind.
    let mut used = vec![crate::agents::pin(DefinitionKind::Workflow, &record)];
    let planned = workflow_plan(services, tenant, record.definition, input, &mut used).await?;
    if matches!(&planned, Ok((_, refused)) if refused.is_empty()) {
        pins.extend(used);
    }
    Ok(match planned {
        Err(problems) => {
            let problems = crate::plan::list_problems(&problems);
            Err(format!("workflow `{name}` is invalid: {problems}"))
        }
        Ok((_, refused)) if !refused.is_empty() => {
            let v = &refused[0];
            Err(format!(
                "workflow `{name}` refuses the input: {} {}",
                v.pointer, v.message
            ))
        }
        Ok((resolved, _)) => Ok(resolved),
    })
}
