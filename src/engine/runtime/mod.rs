//! The engine's ground floor: what every executor and feature stands on, importing none of
//! them. A run's [`context::RunContext`] (its spec, limits, counters, services and the
//! emitter that stamps its events), the records of its work ([`attempts`], [`checkpoint`],
//! [`ledger`], [`sink`]), how it ends ([`outcome`], [`completion`]), and what paces it
//! ([`clock`], [`lease`], [`slots`], [`queue`], [`input`], [`pause`], [`wakes`]).
//!
//! Reading order: [`context`] → [`sink`] → [`attempts`] → [`checkpoint`] → [`outcome`].

pub mod attempts;
pub mod checkpoint;
pub mod clock;
pub mod completion;
pub mod context;
pub mod hooks;
pub mod input;
pub mod lease;
pub mod ledger;
pub mod middleware_state;
pub mod outcome;
pub mod pause;
pub mod queue;
pub mod session_cache;
pub mod sink;
pub mod slots;
#[cfg(test)]
pub mod test_run;
pub mod wakes;
