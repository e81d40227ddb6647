//! Pausing a run: `POST /v1/runs/{id}/pause` and `/resume`, and a plan's breakpoints
//! (`settings.breakpoints`: the ids of steps to pause before).
//!
//! A pause is wanted (the run's `pause_requested`, kept in its row so a restart or another
//! replica holds it too) or not. While it is wanted, every attempt about to start, at any
//! level (a plan's steps and their children, model rounds, tool calls, agent turns), waits at
//! [`RunContext::pause_gate`]; what is already running finishes. Once nothing runs but what
//! waits there (every open attempt encloses a waiting one: the steps that hold other steps),
//! the run is `paused`: it gives its running slot back and its clock stands still. When the
//! pause is lifted, it takes a slot again (waiting for one if it must), is `running` again,
//! and the waiting attempts start.
//!
//! A breakpoint is reached when a step it names is about to start its first attempt at a
//! place: the run asks for its own pause there, stored like the user's with the place it is
//! held at. A resume releases the places held in the write it is answered after
//! (`store/pause.rs`), so however soon a kill or a takeover follows, the step starts and the
//! run does not stop there again; the task also checkpoints the release. The same step at
//! another place (a loop's next item) stops again.
//!
//! What waiting costs is bounded per tenant: `quotas.paused_runs` runs may be asked to pause
//! at once. Past it a pause request is refused (429), and a breakpoint reached ends its run
//! with `paused_runs_exceeded` rather than letting the step act unreviewed.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::domain::{ErrorCode, RunError, RunStatus, StepPath};
use crate::store::PauseWrite;

use super::checkpoint::{self, Delta, PlanDelta};
use super::context::RunContext;

/// A run's pause, as its task knows it.
pub struct PauseState {
    /// Whether the run is to pause; shared with the engine's handle of the run, which sets it
    /// when the API (or another replica) says so.
    wanted: Arc<watch::Sender<bool>>,
    state: Mutex<State>,
    /// Held while the run goes into or out of `paused`.
    turning: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    /// The places of the attempts waiting at the gate (one entry per waiting attempt).
    waiting: Vec<StepPath>,
    /// The run is `paused` now.
    paused: bool,
    /// Why: a breakpoint's place, or `None` for the user's pause.
    at: Option<StepPath>,
    /// The step ids the plan pauses before.
    breakpoints: Vec<String>,
    /// Places whose breakpoint was resumed past.
    released: HashSet<StepPath>,
}

impl State {
    /// A breakpoint is on the step at `step`, and the run was not resumed past it there.
    fn stops_at(&self, step: &StepPath) -> bool {
        self.breakpoints.iter().any(|id| id == step.leaf()) && !self.released.contains(step)
    }
}

impl PauseState {
    /// A run's pause state, wanted as `wanted` says (the engine keeps it too), past the
    /// breakpoint places `released` (as its row records them).
    pub fn new(wanted: Arc<watch::Sender<bool>>, released: Vec<StepPath>) -> PauseState {
        let state = State {
            released: released.into_iter().collect(),
            ..State::default()
        };
        PauseState {
            wanted,
            state: Mutex::new(state),
            turning: tokio::sync::Mutex::new(()),
        }
    }

    fn wanted(&self) -> bool {
        *self.wanted.borrow()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("pause lock")
    }
}

/// Takes an attempt's place off the waiting list however its wait ends (its future may be
/// dropped: the run was cancelled or stopped).
struct Waiting<'a> {
    pause: &'a PauseState,
    at: StepPath,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut st = self.pause.lock();
        if let Some(i) = st.waiting.iter().position(|p| *p == self.at) {
            st.waiting.swap_remove(i);
        }
    }
}

impl RunContext {
    /// Arms a plan's breakpoints (step ids; a nested workflow's and a later plan version's
    /// add to the run's), with the places already resumed past (from its checkpoints).
    pub fn arm_breakpoints(&self, ids: &[String], released: &[StepPath]) {
        let mut st = self.pause.lock();
        for id in ids {
            if !st.breakpoints.contains(id) {
                st.breakpoints.push(id.clone());
            }
        }
        st.released.extend(released.iter().cloned());
    }

    /// Whether the step at `step` would wait if it started now: a pause is wanted, or a
    /// breakpoint is on it.
    pub fn pause_holds(&self, step: &StepPath) -> bool {
        self.pause.wanted() || self.pause.lock().stops_at(step)
    }

    /// Before a plan step's attempt at `step` starts: a breakpoint there pauses the run, and
    /// once it is resumed the place is released for good. An error when the tenant has its
    /// `paused_runs` quota of runs paused: the run ends (a limit), the step does not start.
    pub async fn breakpoint(&self, step: &StepPath) -> Result<(), RunError> {
        if !self.pause.lock().stops_at(step) {
            return Ok(());
        }
        let cap = self.services.quotas.of(&self.tenant.0).paused_runs;
        let held = self
            .services
            .store()
            .hold_breakpoint(&self.tenant, self.run_id, step, cap);
        match held.await {
            Ok(PauseWrite::OverCap { used }) => {
                return Err(self.breached_by(RunError::new(
                    ErrorCode::PausedRunsExceeded,
                    format!(
                        "the run reached the breakpoint before `{step}` while its tenant has \
                         {used} runs paused, its quota `paused_runs` of {cap}; it ends here"
                    ),
                )));
            }
            // Not this replica's any more (its lease gate stops the task), or ended: held here.
            Ok(PauseWrite::Done | PauseWrite::Ended) => {}
            Err(e) => {
                tracing::warn!(error = ?e, "storing a breakpoint's pause failed; it holds until a restart")
            }
        }
        self.pause.lock().at = Some(step.clone());
        self.pause.wanted.send_replace(true);
        self.pause_gate(step).await;
        self.pause.lock().released.insert(step.clone());
        let version = self
            .run()
            .plan_version
            .unwrap_or(crate::domain::plan::FIRST_VERSION);
        let released = PlanDelta {
            plan_version: version,
            released: vec![step.clone()],
            ..Default::default()
        };
        checkpoint::save(self, version, &Delta::Plan(released)).await;
        Ok(())
    }

    /// Before any attempt at `step` starts: while a pause is wanted, it waits here.
    pub async fn pause_gate(&self, step: &StepPath) {
        if !self.pause.wanted() {
            return;
        }
        let waiting = Waiting {
            pause: &self.pause,
            at: step.clone(),
        };
        self.pause.lock().waiting.push(step.clone());
        self.settle_pause().await;
        let mut lifted = self.pause.wanted.subscribe();
        // The sender lives as long as the run: an error cannot happen while it waits.
        let _ = lifted.wait_for(|wanted| !*wanted).await;
        drop(waiting);
        self.unpause().await;
    }

    /// Goes `paused` if a pause is wanted and nothing runs but what waits at the gate.
    /// Called when an attempt reaches the gate and when one ends.
    pub(super) async fn settle_pause(&self) {
        if !self.pause.wanted() {
            return;
        }
        let _turning = self.pause.turning.lock().await;
        let open = self.open_keys(|_| true);
        let (quiet, at) = {
            let st = self.pause.lock();
            let encloses_a_wait = |k: &StepPath| st.waiting.iter().any(|w| k.contains(w));
            let quiet = !st.paused
                && !st.waiting.is_empty()
                && open.iter().all(|k| encloses_a_wait(&k.step));
            (quiet, st.at.clone())
        };
        if !quiet || !self.pause.wanted() {
            return;
        }
        self.pause.lock().paused = true;
        self.slot.lend();
        self.clock.pause();
        let message = match at {
            Some(step) => format!("paused before step `{step}` (a breakpoint)"),
            None => "paused: running steps finished; none starts until the run is resumed".into(),
        };
        self.set_status(RunStatus::Paused, Some(&message)).await;
    }

    /// Leaves `paused` once the pause is lifted: a running slot again, the clock going.
    async fn unpause(&self) {
        let _turning = self.pause.turning.lock().await;
        if !self.pause.lock().paused || self.pause.wanted() {
            return;
        }
        self.slot.take_back().await;
        self.clock.resume();
        {
            let mut st = self.pause.lock();
            st.paused = false;
            st.at = None;
        }
        self.set_status(RunStatus::Running, Some("resumed")).await;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::StepKind;
    use crate::engine::runtime::attempts::NewAttempt;
    use crate::engine::runtime::sink::EventSink;

    /// Waits (yielding, no sleep) until the run's row says `status`.
    async fn until(ctx: &RunContext, status: RunStatus) {
        while ctx.run().status != status {
            tokio::task::yield_now().await;
        }
    }

    /// Drives `work` until the run is `paused` (it must not end first), runs `check` then,
    /// lifts the pause and drives `work` to its end.
    async fn held_then_resumed<T: std::fmt::Debug>(
        ctx: &RunContext,
        work: impl std::future::Future<Output = T>,
        check: impl FnOnce(),
    ) -> T {
        tokio::pin!(work);
        tokio::select! {
            biased;
            out = &mut work => panic!("it went on while a pause was wanted: {out:?}"),
            () = until(ctx, RunStatus::Paused) => {}
        }
        check();
        ctx.pause.wanted.send_replace(false);
        work.await
    }

    #[tokio::test]
    async fn the_gate_holds_an_attempt_while_a_pause_is_wanted_and_lets_it_go_on_resume() {
        let wanted = Arc::new(watch::Sender::new(false));
        let ctx = RunContext::for_test().pause(wanted.clone()).build().await;
        let step = StepPath::top("a");
        let new = NewAttempt {
            step: &step,
            name: "a",
            kind: StepKind::Tool,
            plan_version: 1,
            input: None,
        };
        wanted.send_replace(true);
        let mut sink = EventSink::Live;
        let opened = ctx.open_attempt(new, &mut sink);
        let key = held_then_resumed(&ctx, opened, || {
            assert!(ctx.open_keys(|_| true).is_empty(), "held before it opened");
            assert_eq!(ctx.pause.lock().waiting, std::slice::from_ref(&step));
        })
        .await;
        assert_eq!(key.unwrap().attempt, 1);
        assert_eq!(ctx.run().status, RunStatus::Running);
        assert!(ctx.pause.lock().waiting.is_empty());
    }

    #[tokio::test]
    async fn a_breakpoint_resumed_past_is_not_hit_again_there_but_is_at_another_place() {
        let wanted = Arc::new(watch::Sender::new(false));
        let ctx = RunContext::for_test()
            .pause(wanted.clone())
            .plan(json!({"steps": [{"id": "a", "kind": "tool",
                "input": {"tool": "math.calculate", "arguments": {"expression": "1"}}}]}))
            .build()
            .await;
        ctx.arm_breakpoints(&["a".to_owned()], &[]);
        let first = StepPath::top("each").iteration(0).step("a");
        assert!(ctx.pause_holds(&first));
        let hit = held_then_resumed(&ctx, ctx.breakpoint(&first), || {
            assert!(*wanted.borrow(), "the breakpoint asked for the pause")
        });
        hit.await.unwrap();
        assert!(!ctx.pause_holds(&first), "released there");
        tokio::select! {
            biased;
            passed = ctx.breakpoint(&first) => passed.unwrap(),
            () = until(&ctx, RunStatus::Paused) => panic!("it stopped there again"),
        }
        assert_eq!(ctx.run().status, RunStatus::Running);
        let next = StepPath::top("each").iteration(1).step("a");
        assert!(
            ctx.pause_holds(&next),
            "the same step at another place stops again"
        );
        ctx.services.hub.flush().await;
        let stored = ctx.services.store().list_checkpoints(ctx.run_id).await;
        let restored = checkpoint::fold(stored.unwrap()).unwrap();
        let checkpoint::Restored::Plan(progress) = restored else {
            panic!("{restored:?}")
        };
        assert_eq!(progress.released, [first]);
    }
}
