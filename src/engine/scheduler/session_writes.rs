//! The plan's `session_variables`, rendered against what was committed and stored for the
//! run's session when the plan completes.

use serde_json::{Map, Value};

use crate::domain::RunError;
use crate::plan::Scope;

use super::{Committed, Scheduler};
use crate::engine::session;

impl Scheduler<'_> {
    /// The values of the plan's `session_variables` (none for a plan without them). Rendered
    /// synchronously: the scope borrows the committed results, the store write comes after.
    pub(super) fn session_values(&self) -> Result<Map<String, Value>, RunError> {
        let writes = self.plan.session_writes();
        if writes.is_empty() {
            return Ok(Map::new());
        }
        let committed = Committed {
            plan: &self.plan,
            phases: &self.phases,
        };
        let current = self.ctx.session_vars();
        let scope =
            Scope::new(&self.ctx.spec.request.input, &committed, &self.vars).with_session(&current);
        session::render_writes(writes, &scope, self.ctx.services.config.max_rendered_bytes)
    }
}
