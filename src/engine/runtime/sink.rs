//! [`EventSink`]: where the events of a piece of work go — out at once, or held until the
//! owner commits the work.
//!
//! The plan scheduler runs steps concurrently but announces their results in start order, so
//! a step's events (its tool calls, its children, its retries, its end) are held in a buffered
//! sink and released when the step commits. Work that runs alone (a simple run's model and
//! tool calls) writes to a live sink. Model text (`token`, `json_partial`), human-input
//! requests and a team's `handoff` and `speaker` events never wait in a sink: they go out
//! through [`RunContext::emit`] as they happen.
//!
//! Events go out in causal order all the same: every buffered sink is registered with the run
//! under the place of the step it holds for (its [`StepPath`]), and an event that goes out live for a
//! step first releases what the sinks of that step and of the steps enclosing it hold
//! ([`RunContext::release_held`]). So the tool result a model round read comes before
//! the tokens of its answer, and a child's `running` before its question, at every depth;
//! sinks of unrelated steps (siblings in a `parallel`, other top-level steps) keep theirs.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};

use crate::domain::{Payload, StepPath};

use super::context::RunContext;

/// Where events go: live, or held in order until released.
#[derive(Debug)]
pub enum EventSink {
    /// Stamped with the run's next seq and queued for persistence at once.
    Live,
    /// Held, in order, until [`EventSink::release`] or [`EventSink::absorb`], or until an
    /// event of this step or one inside it goes out live.
    Buffered(Arc<Held>),
}

/// The events a buffered sink holds for the step at `key`.
#[derive(Debug)]
pub struct Held {
    key: StepPath,
    events: Mutex<VecDeque<HeldEvent>>,
}

/// One event held in a buffered sink.
#[derive(Debug)]
pub struct HeldEvent {
    pub(super) step: Option<StepPath>,
    pub(super) payload: Payload,
}

impl Held {
    fn take(&self) -> VecDeque<HeldEvent> {
        std::mem::take(&mut *self.events.lock().expect("held events lock"))
    }

    fn pop_front(&self) -> Option<HeldEvent> {
        self.events.lock().expect("held events lock").pop_front()
    }
}

/// The run's buffered sinks, oldest first (an enclosing step's before those inside it).
#[derive(Debug, Default)]
pub struct HeldSinks(Mutex<Vec<Weak<Held>>>);

impl HeldSinks {
    fn register(&self, held: &Arc<Held>) {
        let mut sinks = self.0.lock().expect("held sinks lock");
        sinks.retain(|w| w.strong_count() > 0);
        sinks.push(Arc::downgrade(held));
    }

    /// The live sinks holding events for `key` or for a step enclosing it, outermost first.
    pub(super) fn enclosing(&self, key: &StepPath) -> Vec<Arc<Held>> {
        let sinks = self.0.lock().expect("held sinks lock");
        sinks
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|h| {
                h.key.encloses(key) && !h.events.lock().expect("held events lock").is_empty()
            })
            .collect()
    }
}

impl RunContext {
    /// Sends out, in order, what `sinks` hold (those of a step and of the steps enclosing it,
    /// [`HeldSinks::enclosing`]): everything that happened before an event of that step that
    /// goes out now.
    ///
    /// One event at a time, each taken off its sink and stamped in the same poll as it is
    /// queued: another step that releases the same sink meanwhile (a sibling in a `parallel`,
    /// releasing their common parent) takes the next one, so nothing it emits after can
    /// overtake an event still held.
    pub(super) async fn release_held(&self, sinks: Vec<Arc<Held>>) {
        for held in sinks {
            while let Some(h) = held.pop_front() {
                self.emit_now(h.step.as_ref(), h.payload).await;
            }
        }
    }
}

impl EventSink {
    /// A sink that holds the events of the step at `key` (its path and id).
    pub fn buffered(ctx: &RunContext, key: &StepPath) -> EventSink {
        let held = Arc::new(Held {
            key: key.clone(),
            events: Mutex::new(VecDeque::new()),
        });
        ctx.held.register(&held);
        EventSink::Buffered(held)
    }

    /// Emits `payload` now (live) or holds it (buffered).
    pub async fn emit(
        &mut self,
        ctx: &RunContext,
        step: Option<&StepPath>,
        payload: impl Into<Payload>,
    ) {
        match self {
            EventSink::Live => ctx.emit(step, payload).await,
            EventSink::Buffered(held) => {
                held.events
                    .lock()
                    .expect("held events lock")
                    .push_back(HeldEvent {
                        step: step.cloned(),
                        payload: payload.into(),
                    })
            }
        }
    }

    /// Takes over the events `other` holds, after the ones already here.
    pub async fn absorb(&mut self, ctx: &RunContext, other: EventSink) {
        let EventSink::Buffered(incoming) = other else {
            return;
        };
        let incoming = incoming.take();
        match self {
            EventSink::Live => {
                for h in incoming {
                    ctx.emit(h.step.as_ref(), h.payload).await;
                }
            }
            EventSink::Buffered(held) => held
                .events
                .lock()
                .expect("held events lock")
                .extend(incoming),
        }
    }

    /// Emits every held event, in order.
    pub async fn release(self, ctx: &RunContext) {
        EventSink::Live.absorb(ctx, self).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::event::TextData;

    fn text(t: &str) -> Payload {
        Payload::Token(TextData { text: t.into() })
    }

    /// The texts of the run's events stored so far, in seq order.
    async fn stored(ctx: &RunContext) -> Vec<String> {
        ctx.services.hub.flush().await;
        let events = ctx.services.store().events_after(ctx.run_id, 0, 100).await;
        events
            .unwrap()
            .into_iter()
            .map(|e| match e.data {
                Payload::Token(t) => t.text,
                other => format!("{:?}", other.kind()),
            })
            .collect()
    }

    #[tokio::test]
    async fn a_buffered_sink_holds_its_events_until_released_and_a_live_one_emits_at_once() {
        let ctx = RunContext::for_test().build().await;
        let a = StepPath::top("a");
        let mut held = EventSink::buffered(&ctx, &a);
        held.emit(&ctx, Some(&a), text("held 1")).await;
        held.emit(&ctx, Some(&a), text("held 2")).await;
        EventSink::Live.emit(&ctx, None, text("live")).await;
        assert_eq!(stored(&ctx).await, ["live"]);
        held.release(&ctx).await;
        assert_eq!(stored(&ctx).await, ["live", "held 1", "held 2"]);
    }

    #[tokio::test]
    async fn a_live_event_of_a_step_first_releases_what_its_enclosing_steps_hold_and_no_other() {
        let ctx = RunContext::for_test().build().await;
        let (a, b) = (StepPath::top("a"), StepPath::top("b"));
        let child = a.step("c");
        let mut outer = EventSink::buffered(&ctx, &a);
        let mut sibling = EventSink::buffered(&ctx, &b);
        outer.emit(&ctx, Some(&a), text("a running")).await;
        sibling.emit(&ctx, Some(&b), text("b running")).await;
        ctx.emit(Some(&child), text("c asks")).await;
        assert_eq!(stored(&ctx).await, ["a running", "c asks"]);
        let mut absorbed = EventSink::buffered(&ctx, &a);
        absorbed.absorb(&ctx, sibling).await;
        absorbed.release(&ctx).await;
        assert_eq!(stored(&ctx).await, ["a running", "c asks", "b running"]);
    }
}
