//! [`Frame`]: what a running top-level step (and every step nested in it) may read, and the
//! helpers that resolve templates and conditions against it.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::domain::path::ROOT;
use crate::domain::{ErrorCode, RetryPolicy, RunError, StepPath};
use crate::plan::{Condition, Scope, StepResults, StepSpec, StepState, StepView, Team, Template};

use super::progress::Children;
use crate::engine::runtime::context::RunContext;

/// Everything a step body may read; immutable while the step runs.
pub(crate) struct Frame<'a> {
    pub ctx: &'a RunContext,
    pub plan_version: u32,
    /// What `input` reads: the run input, or a nested workflow's input.
    pub input: Arc<Value>,
    /// The agents, nested workflows and middleware the plan's steps use.
    pub team: Arc<Team>,
    /// Results of the top-level steps this step depends on (directly or not), as they were
    /// when it started.
    pub snapshot: HashMap<String, StepState>,
    pub vars: Arc<Map<String, Value>>,
    /// The session's variables as they were when the run started (`session.NAME`).
    pub session: Arc<Map<String, Value>>,
    /// The plan's retry policy for steps that name none.
    pub default_retry: Option<RetryPolicy>,
    /// Plan-wide slots for leaf work (model and tool calls), `max_parallel_steps` of them,
    /// shared by top-level steps and the children of parallel steps alike.
    pub slots: Arc<Semaphore>,
    /// Children that finished, kept so a resumed step does not run them again.
    pub children: Arc<Children>,
}

/// Where a step sits and what it sees besides the frame: its place, its earlier siblings'
/// results, and the loop's current item and index.
#[derive(Clone, Copy)]
pub(crate) struct Locals<'l> {
    /// The enclosing steps, from the top-level one down (the root for a top-level step).
    pub path: &'l StepPath,
    pub results: Option<&'l HashMap<String, StepState>>,
    pub item: Option<&'l Value>,
    pub index: Option<u64>,
    /// The current step as `step` reads it (see [`current_step`]); set per attempt.
    pub step: Option<&'l Value>,
}

impl Default for Locals<'_> {
    /// A top-level step's: at the root, seeing only the frame.
    fn default() -> Self {
        Locals {
            path: &ROOT,
            results: None,
            item: None,
            index: None,
            step: None,
        }
    }
}

impl Locals<'_> {
    /// The place of step `spec` here: its id inside [`Locals::path`].
    pub fn key(&self, spec: &StepSpec) -> StepPath {
        self.path.step(spec.id.as_str())
    }
}

/// What `step` reads while an attempt of `spec` at `path` runs.
pub(crate) fn current_step(spec: &StepSpec, path: &StepPath, attempt: u32) -> Value {
    serde_json::json!({
        "id": spec.id.as_str(),
        "name": spec.display_name(),
        "kind": spec.step_kind().as_str(),
        "attempt": attempt,
        "path": path,
        "metadata": spec.metadata,
    })
}

/// Step results seen from a nested step: its siblings first, then the frame's snapshot.
struct Layered<'a> {
    local: Option<&'a HashMap<String, StepState>>,
    base: &'a HashMap<String, StepState>,
}

impl StepResults for Layered<'_> {
    fn get(&self, id: &str) -> Option<StepView<'_>> {
        self.local
            .and_then(|l| l.get(id))
            .or_else(|| self.base.get(id))
            .map(StepState::view)
    }

    fn each(&self, f: &mut dyn FnMut(&str, StepView<'_>)) {
        let local = self.local;
        let shadowed = |k: &str| local.is_some_and(|l| l.contains_key(k));
        for (id, s) in self.base.iter().filter(|(k, _)| !shadowed(k)) {
            f(id, s.view());
        }
        for (id, s) in local.into_iter().flatten() {
            f(id, s.view());
        }
    }
}

impl Frame<'_> {
    /// Runs `f` with the scope a step at `locals` sees. A scope borrows a `dyn StepResults`,
    /// so it lives only in this synchronous section, never across an await.
    fn with_scope<R>(&self, locals: Locals<'_>, f: impl FnOnce(&Scope<'_>) -> R) -> R {
        let layered = Layered {
            local: locals.results,
            base: &self.snapshot,
        };
        let mut scope = Scope::new(&self.input, &layered, &self.vars).with_session(&self.session);
        scope.item = locals.item;
        scope.index = locals.index;
        scope.step = locals.step;
        f(&scope)
    }

    /// A template's value at `locals`, within the configured size limit.
    pub fn resolve(&self, locals: Locals<'_>, template: &Template) -> Result<Value, RunError> {
        let limit = self.ctx.services.config.max_rendered_bytes;
        self.with_scope(locals, |scope| template.render(scope, limit))
            .map_err(crate::plan::render_error)
    }

    /// A template's value as text: strings as they are, anything else as JSON.
    pub fn resolve_text(
        &self,
        locals: Locals<'_>,
        template: &Template,
    ) -> Result<String, RunError> {
        Ok(match self.resolve(locals, template)? {
            Value::String(s) => s,
            other => other.to_string(),
        })
    }

    /// The output of step `id` as a step at `locals` reads it, if it has one.
    pub fn output_of(&self, locals: Locals<'_>, id: &str) -> Option<Value> {
        let layered = Layered {
            local: locals.results,
            base: &self.snapshot,
        };
        layered.get(id).and_then(|v| v.output.cloned())
    }

    /// A condition's value at `locals`.
    pub fn check(&self, locals: Locals<'_>, condition: &Condition) -> Result<bool, RunError> {
        self.with_scope(locals, |scope| condition.eval(scope))
            .map_err(|e| RunError::new(ErrorCode::BadCondition, e))
    }

    /// Holds a step's output to its `expect` condition: false is an `unexpected_result`.
    pub fn meets(
        &self,
        locals: Locals<'_>,
        expect: &Condition,
        output: &Value,
    ) -> Result<(), RunError> {
        let met = self
            .with_scope(locals, |scope| expect.eval_expect(scope, output))
            .map_err(|e| RunError::new(ErrorCode::BadCondition, e))?;
        if met {
            return Ok(());
        }
        let shown = crate::schema::truncate_to(output.to_string(), 200);
        Err(RunError::new(
            ErrorCode::UnexpectedResult,
            format!(
                "the step's output does not meet `{}`: {shown}",
                expect.source()
            ),
        ))
    }

    /// One of the plan's slots for leaf work, held until the returned permit drops.
    pub async fn slot(&self) -> Result<SemaphorePermit<'_>, RunError> {
        self.slots
            .acquire()
            .await
            .map_err(|_| RunError::new(ErrorCode::Cancelled, "the run is ending"))
    }
}
