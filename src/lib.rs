//! orca: an HTTP streaming orchestration service for LLM agents.
//!
//! Reading order (ARCHITECTURE.md has the floors): [`domain`] (the vocabulary), `schema`
//! (JSON Schema errors as users read them), [`plan`] and [`config`] (data and its checks),
//! [`store`] (all SQL), [`llm`] and [`tools`] (what steps call), `stream` (the per-run event
//! hub), `engine` (runs, executors), [`timeline`] (a run's spans, waits, critical path and
//! latency breakdown, computed from its history), `api` (the only module that knows HTTP),
//! `workers` (the loops beside it: schedules, webhooks, retention) and [`app`] (wiring it
//! together).
//!
//! Public are the modules the binary, the integration tests and the benchmarks use; the rest
//! is the crate's own, so the compiler sees every item nothing calls.

mod agents;
mod api;
pub mod app;
pub mod config;
pub mod domain;
mod engine;
mod functions;
pub mod llm;
mod metrics;
pub mod plan;
mod schema;
pub mod store;
mod stream;
mod suggest;
mod telemetry;
pub mod timeline;
pub mod tools;
mod workers;
mod workflows;

pub use api::openapi;
pub use config::selector::Selector;
pub use domain::run::RunRequest;
pub use engine::{Created, Follow};
pub use workers::retention::RetentionHandle;
