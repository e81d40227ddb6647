//! orca: an HTTP streaming orchestration service for LLM agents.
//!
//! Reading order: [`domain`] (the vocabulary), [`config`], [`store`] (all SQL), [`stream`]
//! (per-run event hub), [`schema`] (JSON Schema errors as users read them), [`llm`] and [`tools`] (what steps call), [`engine`] (runs, executors),
//! [`retention`] (deleting finished runs past their time), [`timeline`] (a run's spans, waits,
//! critical path and latency breakdown, computed from its history), [`api`] (the only module
//! that knows HTTP), and [`app`] (wiring it together).

pub mod agents;
pub mod api;
pub mod app;
pub mod config;
pub mod domain;
pub mod engine;
pub mod functions;
pub mod llm;
pub mod metrics;
pub mod plan;
pub mod retention;
pub mod schema;
pub mod store;
pub mod stream;
pub mod suggest;
pub mod telemetry;
pub mod timeline;
pub mod tools;
pub mod workflows;
