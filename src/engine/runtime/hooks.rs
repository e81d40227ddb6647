//! A feature's part in a run's life, at the run task's turning points. The run task
//! (`engine::run`) calls every registered [`RunHook`] at each point, in the order they were
//! added, instead of a branch per feature: a session's turn is waited for before the run asks
//! for a running slot, a fork's origin is said on its `running` status, and a run that names a
//! webhook wakes the deliverer once its end is stored.
//!
//! Hooks are registered where the feature is wired: the engine's own in `Engine::new`, the
//! webhook deliverer's (`workers::webhooks::WebhookDue`) in `app.rs`.

use std::sync::Arc;

use async_trait::async_trait;

use super::context::RunContext;

/// One feature's part in a run's life. Every method has a default that does nothing.
#[async_trait]
pub trait RunHook: Send + Sync {
    /// Before the run asks for a running slot: returns once the run may start. The run task
    /// races it with the run's cancel and the server's stop.
    async fn before_start(&self, _ctx: &RunContext) {}

    /// What the run's `running` status says about this start (not said on a resume).
    fn start_note(&self, _ctx: &RunContext) -> Option<String> {
        None
    }

    /// Once the run's end (its row and `final`) is stored.
    fn after_end(&self, _ctx: &RunContext) {}
}

/// The hooks of every run, in the order they were added. Cheap to clone.
#[derive(Clone, Default)]
pub struct Hooks(Arc<Vec<Arc<dyn RunHook>>>);

impl Hooks {
    /// These hooks and `hook` after them.
    pub fn with(&self, hook: impl RunHook + 'static) -> Hooks {
        let mut hooks = self.0.as_ref().clone();
        hooks.push(Arc::new(hook));
        Hooks(Arc::new(hooks))
    }

    /// Every hook's [`RunHook::before_start`], one after another.
    pub async fn before_start(&self, ctx: &RunContext) {
        for hook in self.0.iter() {
            hook.before_start(ctx).await;
        }
    }

    /// The first hook's note on this start.
    pub fn start_note(&self, ctx: &RunContext) -> Option<String> {
        self.0.iter().find_map(|hook| hook.start_note(ctx))
    }

    /// Every hook's [`RunHook::after_end`].
    pub fn after_end(&self, ctx: &RunContext) {
        for hook in self.0.iter() {
            hook.after_end(ctx);
        }
    }
}
