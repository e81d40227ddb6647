//! What a client does to a run once it exists: cancel it, pause or resume it, answer its
//! question, ask it for a new plan. Each is stored first (so it survives a crash), then told
//! to the run's task here, or through a notice to the replica that drives it.

use serde_json::Value;

use crate::domain::quota::Exceeded;
use crate::domain::{Payload, Run, RunId, RunStatus, Tenant};
use crate::store::{self, Notice, PauseWrite, StoredRun};

use super::runtime::input;
use super::{Engine, Error, Pause, SubmitError};

impl Engine {
    /// Asks a run to stop. Returns the run as it is now.
    pub async fn cancel(&self, tenant: &Tenant, id: RunId) -> Result<Run, Error> {
        let store = self.inner.services.store();
        let mut stored = store.get_run(tenant, id).await?.ok_or(Error::NotFound)?;
        if stored.run.status.is_terminal() {
            return Err(Error::AlreadyTerminal(stored.run.status.as_str()));
        }
        let token = {
            let live = self.inner.live.lock().expect("live lock");
            live.get(&id).map(|h| h.cancel.clone())
        };
        if let Some(token) = token {
            token.cancel();
            return Ok(stored.run);
        }
        if store.shared() {
            // Recorded first, so whichever replica runs it next ends it.
            store.request_cancel(id).await?;
            if !store.claim_run(id).await? {
                store.notify(&Notice::Cancel(id)).await?;
                return Ok(stored.run);
            }
        }
        // No task holds it (on SQLite it cannot happen after resume_unfinished; on Postgres
        // nobody held it and now this replica does): start one that ends it at once.
        let last = store.last_seq(id).await?;
        let run = stored.run.clone();
        stored.cancel_requested = true;
        self.spawn(stored, last, None);
        Ok(run)
    }

    /// Pauses ([`Pause::Wanted`]) or resumes ([`Pause::Lifted`]) one of the tenant's runs (see [`pause`]): recorded with the
    /// run, so whichever replica runs it (now, or after a restart) holds it so, then told to
    /// the run. A resume lets the run past the breakpoints it is held at in the same write, so
    /// a kill or a takeover right after it does not stop the run there again. Pausing a
    /// paused run changes nothing; pausing past the tenant's `paused_runs` quota is
    /// [`Error::QuotaExceeded`]; resuming one that is not paused is a [`Error::Conflict`], as
    /// is either for a run that has ended.
    pub async fn set_paused(&self, tenant: &Tenant, id: RunId, pause: Pause) -> Result<Run, Error> {
        let services = &self.inner.services;
        let store = services.store();
        let stored = store.get_run(tenant, id).await?.ok_or(Error::NotFound)?;
        if stored.run.status.is_terminal() {
            return Err(Error::AlreadyTerminal(stored.run.status.as_str()));
        }
        if pause == Pause::Lifted
            && !stored.pause_requested
            && stored.run.status != RunStatus::Paused
        {
            return Err(Error::Conflict("the run is not paused".into()));
        }
        let written = if pause == Pause::Wanted {
            let cap = services.quotas.of(&tenant.0).paused_runs;
            store.request_pause(tenant, id, cap).await?
        } else if store.lift_pause(id).await? {
            PauseWrite::Done
        } else {
            PauseWrite::Ended
        };
        match written {
            PauseWrite::Done => {}
            PauseWrite::Ended => return Err(Error::AlreadyTerminal("finished")),
            PauseWrite::OverCap { used } => {
                let cap = services.quotas.of(&tenant.0).paused_runs;
                services.metrics.quota_refused(&tenant.0, "paused_runs");
                return Err(Error::QuotaExceeded(Exceeded::paused(cap, used)));
            }
        }
        if !self.tell_pause(id, pause) && store.shared() {
            store.notify(&Notice::Pause(id)).await?;
        }
        Ok(stored.run)
    }

    /// Tells the run's task here whether to pause; false when no task here runs it.
    pub(super) fn tell_pause(&self, id: RunId, pause: Pause) -> bool {
        let live = self.inner.live.lock().expect("live lock");
        let Some(handles) = live.get(&id) else {
            return false;
        };
        handles.pause.send_replace(pause == Pause::Wanted);
        true
    }

    /// Another replica changed the run's pause: its task here takes the stored word.
    pub(super) async fn pause_as_stored(&self, id: RunId) {
        if !self.is_live(id) {
            return;
        }
        match self.inner.services.store().pause_requested(id).await {
            Ok(Some(wanted)) => {
                let pause = if wanted { Pause::Wanted } else { Pause::Lifted };
                self.tell_pause(id, pause);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = ?e, run_id = %id, "reading a run's pause failed"),
        }
    }

    /// Answers a run's pending `user_input` step.
    pub async fn submit_input(
        &self,
        tenant: &Tenant,
        id: RunId,
        step_id: &str,
        value: Value,
    ) -> Result<(), SubmitError> {
        let stored = self
            .inner
            .services
            .store()
            .get_run(tenant, id)
            .await
            .map_err(|e| SubmitError::Engine(e.into()))?
            .ok_or(SubmitError::Engine(Error::NotFound))?;
        if stored.run.status.is_terminal() {
            return Err(SubmitError::Engine(Error::AlreadyTerminal(
                stored.run.status.as_str(),
            )));
        }
        let inputs = &self.inner.services.inputs;
        if self.inner.services.store().shared() && !self.is_live(id) {
            return self.answer_elsewhere(&stored, step_id, value).await;
        }
        // Stored before it is delivered: once this returns, the answer survives a crash.
        let waiting = inputs
            .take(id, step_id, &value)
            .map_err(SubmitError::Input)?;
        let stored = self
            .inner
            .services
            .store()
            .save_answer(id, &waiting.step, &value)
            .await;
        match stored {
            Ok(()) => {
                waiting.deliver(value);
                Ok(())
            }
            Err(e) => {
                inputs.put_back(id, waiting);
                Err(SubmitError::Engine(e.into()))
            }
        }
    }

    /// Answers a run that another replica runs (or will, once it takes it over): the answer
    /// is checked against the run's last `input_required` event, stored unless the step has
    /// one already, and announced to the replica that runs it.
    pub(super) async fn answer_elsewhere(
        &self,
        stored: &StoredRun,
        step_id: &str,
        value: Value,
    ) -> Result<(), SubmitError> {
        let store = self.inner.services.store();
        let id = stored.run.id;
        let not_waiting =
            |on: Option<String>| SubmitError::Input(input::InputError::NotWaiting(on));
        if stored.run.status != RunStatus::WaitingInput {
            return Err(not_waiting(None));
        }
        let request = store
            .last_input_request(id)
            .await
            .map_err(|e| SubmitError::Engine(e.into()))?
            .ok_or_else(|| not_waiting(None))?;
        let waits_on = request.step_id.clone().unwrap_or_default();
        if waits_on != step_id {
            return Err(not_waiting(Some(waits_on)));
        }
        let Payload::InputRequired(data) = &request.data else {
            let corrupt = store::Error::Corrupt("an input_required event without its data".into());
            return Err(SubmitError::Engine(corrupt.into()));
        };
        if let Some(schema) = &data.schema {
            let schema = crate::plan::JsonSchema::compile(schema)
                .map_err(|e| SubmitError::Engine(store::Error::Corrupt(e).into()))?;
            input::check_answer(&schema, &value).map_err(SubmitError::Input)?;
        }
        let Some(key) = request.step() else {
            return Err(not_waiting(None));
        };
        let first = store
            .save_first_answer(id, &key, &value)
            .await
            .map_err(|e| SubmitError::Engine(e.into()))?;
        if !first {
            return Err(not_waiting(None));
        }
        store
            .notify(&Notice::Input(id))
            .await
            .map_err(|e| SubmitError::Engine(e.into()))?;
        Ok(())
    }

    /// Asks a running reactive run for a new plan: the request is stored (once this returns
    /// it survives a crash), then the run is woken; it re-plans with `message` as the user's
    /// word, also while it waits for input. With `restore_version` the run goes back to that
    /// earlier version itself, without asking the re-planner.
    pub async fn request_replan(
        &self,
        tenant: &Tenant,
        id: RunId,
        message: &str,
        restore_version: Option<u32>,
    ) -> Result<u64, Error> {
        let stored = self
            .inner
            .services
            .store()
            .get_run(tenant, id)
            .await?
            .ok_or(Error::NotFound)?;
        if stored.run.status.is_terminal() {
            return Err(Error::AlreadyTerminal(stored.run.status.as_str()));
        }
        if stored.run.orchestration != crate::domain::Orchestration::Reactive {
            return Err(Error::Conflict(format!(
                "only reactive runs re-plan; this run is `{}`",
                stored.run.orchestration.as_str()
            )));
        }
        if let Some(wanted) = restore_version {
            let current = stored.run.plan_version.unwrap_or(0);
            if wanted == 0 || wanted >= current {
                return Err(Error::Invalid(vec![crate::plan::Problem::new(
                    "/restore_version",
                    match current {
                        0 | 1 => format!(
                            "the run has no plan version before its current one to go back to (it is at version {current})"
                        ),
                        _ => format!(
                            "`restore_version` must be an earlier plan version, 1 to {}",
                            current - 1
                        ),
                    },
                )]));
            }
        }
        let seq = self
            .inner
            .services
            .store()
            .save_replan_request(id, message, restore_version)
            .await?;
        self.inner.services.replans.wake(id);
        if !self.is_live(id) {
            self.inner
                .services
                .store()
                .notify(&Notice::Replan(id))
                .await?;
        }
        Ok(seq)
    }
}
