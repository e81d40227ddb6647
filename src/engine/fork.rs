//! Time travel (`POST /v1/runs/{id}/fork`): a new run that starts where another stood at one
//! of its checkpoints, optionally with another input or plan, linked to its parent.
//!
//! A fork is a run of its own: its id, events, limits and usage start fresh. Its history
//! begins with what the parent had done by then, written with its row in one transaction:
//!
//! - the parent's plan versions up to the one in force at the checkpoint (that one replaced
//!   by the request's `plan` if it gave one, with reason `fork`);
//! - one checkpoint: the parent's checkpoints up to the chosen one, folded. The fork's
//!   executor restores from it as a resumed run does, so the steps that completed (at every
//!   level) are not run again and keep their outputs; failed steps run again;
//! - the attempts of those steps and of the planning that made the versions, so the fork's
//!   `GET .../steps` and `step_counts` tell its whole story.
//!
//! A changed plan keeps a completed step only if the step is the same in it and every step it
//! depends on is kept; the others run. The steps that run read the fork's input.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use crate::domain::definition::ForkDefinitions;
use crate::domain::replan::steps_by_id;
use crate::domain::run::{ForkOrigin, RunSpec};
use crate::domain::{ErrorCode, RunError, RunId, StepAttempt, StepPath, StepStatus, Tenant};
use crate::plan::{self, Problem, ValidPlan};
use crate::store::{Checkpoint, PlanRecord, Record, StoredRun};

use super::error::Error;
use super::runtime::checkpoint::{
    self, Conversation, ConversationDelta, Delta, PlanDelta, PlanProgress, Restored,
};
use super::runtime::context::{RunContext, Services};
use super::runtime::hooks::RunHook;
use crate::domain::plan::FIRST_VERSION;
use crate::domain::plan::NO_PLAN;
use crate::domain::replan::REPLANNING_STEP;

/// What `POST /v1/runs/{id}/fork` asks for.
#[derive(Debug, Clone, Default)]
pub struct ForkRequest {
    /// The parent's checkpoint to start from (0: from the start); the latest when neither
    /// this nor `before_step` is given.
    pub checkpoint: Option<u64>,
    /// Start from the last checkpoint before this step (an id, or a nested step's path) had
    /// finished, so it and what follows run again.
    pub before_step: Option<String>,
    pub input: Option<Value>,
    pub plan: Option<Value>,
    pub definitions: ForkDefinitions,
}

/// A fork ready to be stored and started.
pub(super) struct Fork {
    pub parent: StoredRun,
    pub spec: RunSpec,
    /// The plan version in force where the fork starts (`None`: no plan yet, or a
    /// conversation).
    pub plan_version: Option<u32>,
    /// The changed plan, validated (`None`: the executor validates the stored one again).
    pub plan: Option<Arc<ValidPlan>>,
    /// What the fork's history starts with.
    pub history: Vec<Record>,
}

/// Where the parent stood at the chosen checkpoint.
enum Point {
    Plan {
        version: u32,
        progress: PlanProgress,
    },
    Conversation(Conversation),
    /// Nothing done yet and no plan made: the fork starts from the beginning.
    Start,
}

/// Reads the parent (`tenant`'s run `parent`) and makes the fork `id` of it that `request`
/// asks for, or says what is wrong with the request.
pub(super) async fn prepare(
    services: &Services,
    tenant: &Tenant,
    parent: RunId,
    mut request: ForkRequest,
    id: RunId,
) -> Result<Fork, Error> {
    let store = services.store();
    let parent = store
        .get_run(tenant, parent)
        .await?
        .ok_or(Error::NotFound)?;
    let checkpoints = store.list_checkpoints(parent.run.id).await?;
    let mut plans = store.list_plans(parent.run.id).await?;
    let at = fork_point(&parent, &checkpoints, &plans, &request)?;
    let restored =
        checkpoint::fold(checkpoints.into_iter().filter(|c| c.id <= at)).map_err(unreadable)?;
    let point = match restored {
        Restored::Plan(progress) => Point::Plan {
            version: progress.plan_version,
            progress,
        },
        Restored::Conversation(talk) => Point::Conversation(talk),
        Restored::Nothing if !plans.is_empty() => Point::Plan {
            version: FIRST_VERSION,
            progress: PlanProgress {
                plan_version: FIRST_VERSION,
                ..Default::default()
            },
        },
        Restored::Nothing => Point::Start,
    };
    let mut spec = parent.spec.clone();
    spec.schedule = None;
    spec.fork = Some(ForkOrigin {
        run_id: parent.run.id,
        checkpoint: at,
        before_step: request.before_step.clone(),
    });
    if let Some(input) = request.input {
        check_input(&input, &point, at)?;
        spec.request.input = input;
    }
    if request.definitions == ForkDefinitions::Current {
        let version = match &point {
            Point::Plan { version, .. } => Some(*version),
            _ => None,
        };
        let doc = version.and_then(|v| plans.iter().find(|p| p.version == v));
        let doc = request
            .plan
            .take()
            .or_else(|| doc.map(|p| (*p.plan).clone()));
        request.plan = current_definitions(services, tenant, &mut spec, doc).await?;
    }
    let mut fork = Fork {
        parent,
        spec,
        plan_version: None,
        plan: None,
        history: Vec::new(),
    };
    match point {
        Point::Plan { version, progress } => {
            plans.retain(|p| p.version <= version);
            let attempts = store.step_attempts(fork.parent.run.id).await?;
            let from = PlanPoint { version, progress };
            from.write(services, &mut fork, plans, attempts, request.plan, id)?;
        }
        Point::Conversation(talk) => {
            refuse_plan(&request.plan, &fork.parent, at)?;
            let delta = ConversationDelta {
                reset: true,
                round: talk.round,
                messages: talk.messages,
                answer: talk.answer,
            };
            fork.history
                .push(first_checkpoint(id, NO_PLAN, Delta::Conversation(delta)));
        }
        Point::Start => refuse_plan(&request.plan, &fork.parent, at)?,
    }
    Ok(fork)
}

/// Takes the latest of the fork's registered definitions (`definitions: "current"`): the
/// tenant's declared tools now, and in the plan document `doc` the latest of the agents and
/// nested workflows it names in place of the copies the parent was created with. The run's
/// own workflow pin stays: its steps are the plan the checkpoint is of. Returns the plan the
/// fork runs in place of the parent's when it differs (`None`: the same).
async fn current_definitions(
    services: &Services,
    tenant: &Tenant,
    spec: &mut RunSpec,
    doc: Option<Value>,
) -> Result<Option<Value>, Error> {
    use crate::domain::definition::DefinitionKind;
    let copied = |kind: DefinitionKind, name: &str| {
        (spec.definitions.iter()).any(|p| p.kind == kind && p.name == name)
    };
    let own = match &spec.request.workflow {
        Some(Value::String(text)) => crate::domain::definition::Reference::parse(text).ok(),
        _ => None,
    };
    let mut pins: Vec<_> = (spec.definitions.iter())
        .filter(|p| {
            p.kind == DefinitionKind::Workflow && own.as_ref().is_some_and(|r| r.name == p.name)
        })
        .cloned()
        .collect();
    let allowed = spec.request.tools.clone();
    let may_call = |name: &str| allowed.as_ref().is_none_or(|a| a.iter().any(|t| t == name));
    let declared = services.declared_tools_pinned(tenant).await?;
    let (tools, tool_pins): (Vec<_>, Vec<_>) = declared
        .into_iter()
        .filter(|(t, _)| may_call(t.name()))
        .unzip();
    spec.declared_tools = tools;
    pins.extend(tool_pins);
    let (functions, function_pins) = services
        .declared_functions(tenant)
        .await?
        .into_iter()
        .unzip();
    spec.declared_functions = functions;
    pins.extend::<Vec<_>>(function_pins);
    let changed = match doc {
        Some(mut doc) => {
            let before = doc.clone();
            if let Some(members) = doc.as_object_mut() {
                for (key, kind) in [
                    ("agents", DefinitionKind::Agent),
                    ("workflows", DefinitionKind::Workflow),
                ] {
                    if let Some(map) = members.get_mut(key).and_then(Value::as_object_mut) {
                        map.retain(|name, _| !copied(kind, name));
                    }
                }
            }
            let store = services.store();
            let resolution = crate::agents::resolve_references(store, tenant, &mut doc).await?;
            if !resolution.problems.is_empty() {
                let at = |p: Problem| Problem::new(format!("/plan{}", p.pointer), p.message);
                return Err(Error::Invalid(
                    resolution.problems.into_iter().map(at).collect(),
                ));
            }
            pins.extend(resolution.pins);
            (doc != before).then_some(doc)
        }
        None => None,
    };
    pins.sort();
    pins.dedup();
    spec.definitions = pins;
    Ok(changed)
}

/// The checkpoint the request names, resolved and checked against the parent's.
fn fork_point(
    parent: &StoredRun,
    checkpoints: &[Checkpoint],
    plans: &[PlanRecord],
    request: &ForkRequest,
) -> Result<u64, Error> {
    let last = checkpoints.last().map_or(0, |c| c.id);
    let id = parent.run.id;
    match (request.checkpoint, &request.before_step) {
        (Some(_), Some(_)) => invalid(
            "/before_step",
            "give `checkpoint` or `before_step`, not both".into(),
        ),
        (Some(n), None) if n == 0 || checkpoints.iter().any(|c| c.id == n) => Ok(n),
        (Some(n), None) => invalid(
            "/checkpoint",
            match last {
                0 => format!("run `{id}` has no checkpoints; 0 forks it from the start"),
                _ => format!(
                    "run `{id}` has no checkpoint {n}: its checkpoints are 1 to {last} (0 forks it from the start)"
                ),
            },
        ),
        (None, Some(step)) => {
            let place = step.parse::<StepPath>().ok().filter(|p| !p.is_root());
            let Some(place) = place else {
                return invalid(
                    "/before_step",
                    format!("`{step}` is not a step's id or path"),
                );
            };
            match checkpoint::first_finishing(checkpoints, &place).map_err(unreadable)? {
                Some(finished) => Ok(finished - 1),
                None => no_such_step(id, step, &place, plans),
            }
        }
        (None, None) => Ok(last),
    }
}

/// Refuses a `before_step` whose top-level step is in none of the run's plan versions,
/// naming the ids that are (a typo is the likely cause, not a step still to come).
fn no_such_step(
    id: RunId,
    step: &str,
    place: &StepPath,
    plans: &[PlanRecord],
) -> Result<u64, Error> {
    let known: BTreeSet<&str> = plans
        .iter()
        .flat_map(|p| steps_by_id(&p.plan).into_keys())
        .collect();
    if known.iter().any(|k| StepPath::top(k).encloses(place)) {
        return invalid(
            "/before_step",
            format!(
                "step `{step}` had not finished in run `{id}`'s checkpoints; fork from a `checkpoint` instead"
            ),
        );
    }
    let detail = match known.is_empty() {
        true => format!(
            "no step `{step}` exists in run `{id}`: it ran no plan; fork it from a `checkpoint`"
        ),
        false => {
            let ids: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
            format!(
                "no step `{step}` exists in run `{id}`; its steps are {}",
                ids.join(", ")
            )
        }
    };
    invalid("/before_step", detail)
}

/// A fork of a plan run: the versions, progress and attempts it starts with.
struct PlanPoint {
    version: u32,
    progress: PlanProgress,
}

impl PlanPoint {
    fn write(
        mut self,
        services: &Services,
        fork: &mut Fork,
        mut plans: Vec<PlanRecord>,
        attempts: Vec<StepAttempt>,
        changed: Option<Value>,
        id: RunId,
    ) -> Result<(), Error> {
        let Some(current) = plans.last_mut().filter(|p| p.version == self.version) else {
            return Err(Error::Conflict(format!(
                "run `{}`'s plan version {} is not stored; it cannot be forked there",
                fork.parent.run.id, self.version
            )));
        };
        let before = Arc::clone(&current.plan);
        let after = match changed {
            Some(doc) => {
                let tenant = &fork.parent.tenant;
                let catalog_of = services.for_tenant(
                    tenant,
                    &fork.spec.declared_tools,
                    &fork.spec.declared_functions,
                );
                let valid = plan::validate_plan(&doc, catalog_of.catalog()).map_err(|p| {
                    Error::Invalid(
                        p.into_iter()
                            .map(|p| Problem::new(format!("/plan{}", p.pointer), p.message))
                            .collect(),
                    )
                })?;
                if fork.spec.request.plan.is_some() {
                    fork.spec.request.plan = Some(doc.clone());
                }
                fork.plan = Some(Arc::new(valid));
                *current = PlanRecord::new(
                    self.version,
                    "fork".into(),
                    Arc::new(doc),
                    None,
                    crate::domain::now(),
                );
                Arc::clone(&current.plan)
            }
            None => Arc::clone(&before),
        };
        self.progress = kept(&self.progress, &before, &after);
        fork.plan_version = Some(self.version);
        let history = &mut fork.history;
        for p in plans {
            history.push(Record::Plan {
                run: id,
                version: p.version,
                change: p.change().map(Box::new),
                reason: p.reason,
                plan: p.plan,
            });
        }
        let carried = attempts.into_iter().filter(|a| self.carries(a));
        history.extend(carried.map(|a| Record::Attempt(id, Arc::new(a))));
        let PlanProgress {
            steps,
            children,
            variables,
            ..
        } = self.progress;
        let delta = PlanDelta {
            plan_version: self.version,
            reset: true,
            cleared: Vec::new(),
            steps,
            children,
            variables: Some(variables),
            // A fork stops at the breakpoints its parent was resumed past.
            released: Vec::new(),
        };
        history.push(first_checkpoint(id, self.version, Delta::Plan(delta)));
        Ok(())
    }

    /// Whether the fork keeps the parent's attempt `a`: the planning that made its versions,
    /// and the attempts of the steps (and their children) it keeps.
    fn carries(&self, a: &StepAttempt) -> bool {
        let step = a.step();
        if a.plan_version == NO_PLAN {
            return true;
        }
        if a.path.is_none() && a.step_id == REPLANNING_STEP {
            return a.plan_version < self.version;
        }
        a.plan_version <= self.version
            && (self
                .progress
                .steps
                .keys()
                .any(|id| StepPath::top(id).encloses(&step))
                || self.progress.children.keys().any(|c| c.encloses(&step)))
    }
}

/// What of `progress` (under plan document `before`) the fork keeps under `after`: the
/// completed steps that are the same in both and whose dependencies are all kept, and the
/// completed children of running steps that are the same. Failed steps run again.
fn kept(progress: &PlanProgress, before: &Value, after: &Value) -> PlanProgress {
    let (old, new) = (steps_by_id(before), steps_by_id(after));
    let same = |id: &str| old.get(id).is_some_and(|s| new.get(id) == Some(s));
    let mut kept: BTreeSet<&str> = (progress.steps.iter())
        .filter(|(id, r)| r.status == StepStatus::Completed && same(id))
        .map(|(id, _)| id.as_str())
        .collect();
    let ready = |id: &str, kept: &BTreeSet<&str>| depends_on(new[id]).all(|d| kept.contains(d));
    while let Some(&lost) = kept.iter().find(|id| !ready(id, &kept)) {
        kept.remove(lost);
    }
    let steps = (progress.steps.iter())
        .filter(|(id, _)| kept.contains(id.as_str()))
        .map(|(id, r)| (id.clone(), r.clone()))
        .collect();
    let children = (progress.children.iter())
        .filter(|(place, r)| {
            r.status == StepStatus::Completed
                && new.iter().any(|(id, _)| {
                    StepPath::top(id).contains(place) && same(id) && ready(id, &kept)
                })
        })
        .map(|(place, r)| (place.clone(), r.clone()))
        .collect();
    PlanProgress {
        plan_version: progress.plan_version,
        steps,
        children,
        variables: progress.variables.clone(),
        released: Vec::new(),
    }
}

fn depends_on(step: &Value) -> impl Iterator<Item = &str> {
    step.get("depends_on")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// The fork's first checkpoint: where it starts, as one delta that replaces all before it.
fn first_checkpoint(run: RunId, plan_version: u32, delta: Delta) -> Record {
    Record::Checkpoint {
        run,
        id: 1,
        plan_version,
        state: delta.to_json(),
    }
}

/// A new input as a run request takes it; a conversation forked after it began keeps the
/// messages it had, its input among them.
fn check_input(input: &Value, point: &Point, at: u64) -> Result<(), Error> {
    let fits = match input {
        Value::String(s) => (1..=100_000).contains(&s.chars().count()),
        Value::Object(_) => true,
        _ => false,
    };
    if !fits {
        return invalid(
            "/input",
            "`input` is a string of 1 to 100,000 characters, or an object".into(),
        );
    }
    if let Point::Conversation(_) = point {
        return invalid(
            "/input",
            format!(
                "a conversation forked at checkpoint {at} keeps its messages, its input among them; fork it from checkpoint 0 to give another input"
            ),
        );
    }
    Ok(())
}

/// A `plan` for a fork that has none to replace.
fn refuse_plan(plan: &Option<Value>, parent: &StoredRun, at: u64) -> Result<(), Error> {
    match plan {
        Some(_) => invalid(
            "/plan",
            format!(
                "run `{}` ({}) had no plan at checkpoint {at} to change",
                parent.run.id,
                parent.run.orchestration.as_str()
            ),
        ),
        None => Ok(()),
    }
}

fn invalid<T>(pointer: &str, message: String) -> Result<T, Error> {
    Err(Error::Invalid(vec![Problem::new(pointer, message)]))
}

fn unreadable(e: RunError) -> Error {
    debug_assert_eq!(e.code, ErrorCode::InternalError);
    Error::Conflict(format!(
        "the parent's checkpoints cannot be forked: {}",
        e.message
    ))
}

/// A fork says where it comes from on its `running` status.
pub struct ForkNote;

impl RunHook for ForkNote {
    fn start_note(&self, ctx: &RunContext) -> Option<String> {
        let fork = ctx.spec.fork.as_ref()?;
        Some(format!(
            "forked from run {} at its checkpoint {}",
            fork.run_id, fork.checkpoint
        ))
    }
}
