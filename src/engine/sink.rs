//! [`EventSink`]: where the events of a piece of work go — out at once, or held until the
//! owner commits the work.
//!
//! The plan scheduler runs steps concurrently but announces their results in start order, so
//! a step's events (its tool calls, its children, its retries, its end) are held in a buffered
//! sink and released when the step commits. Work that runs alone (a simple run's model and
//! tool calls) writes to a live sink. Model text (`token`, `json_partial`), human-input
//! requests and a team's `handoff` and `speaker` events never wait in a sink: they go out
//! through [`RunContext::emit`] as they happen.

use crate::domain::Payload;

use super::context::RunContext;

/// Where events go: live, or held in order until released.
#[derive(Debug)]
pub enum EventSink {
    /// Stamped with the run's next seq and queued for persistence at once.
    Live,
    /// Held, in order, until [`EventSink::release`] or [`EventSink::absorb`].
    Buffered(Vec<Held>),
}

/// One event held in a buffered sink.
#[derive(Debug)]
pub struct Held {
    step_id: Option<String>,
    payload: Payload,
}

impl EventSink {
    pub fn buffered() -> EventSink {
        EventSink::Buffered(Vec::new())
    }

    /// Emits `payload` now (live) or holds it (buffered).
    pub async fn emit(
        &mut self,
        ctx: &RunContext,
        step_id: Option<&str>,
        payload: impl Into<Payload>,
    ) {
        match self {
            EventSink::Live => ctx.emit(step_id, payload).await,
            EventSink::Buffered(held) => held.push(Held {
                step_id: step_id.map(str::to_owned),
                payload: payload.into(),
            }),
        }
    }

    /// Takes over the events `other` holds, after the ones already here.
    pub async fn absorb(&mut self, ctx: &RunContext, other: EventSink) {
        let EventSink::Buffered(incoming) = other else {
            return;
        };
        match self {
            EventSink::Live => {
                for h in incoming {
                    ctx.emit(h.step_id.as_deref(), h.payload).await;
                }
            }
            EventSink::Buffered(held) => held.extend(incoming),
        }
    }

    /// Emits every held event, in order.
    pub async fn release(self, ctx: &RunContext) {
        EventSink::Live.absorb(ctx, self).await;
    }
}
