//! Test support: `spawn_app` and the SSE reader ([`app`]), the test's database ([`db`]: SQLite,
//! or Postgres under `ORCA_TEST_POSTGRES`), the real binary as a process ([`server`]), the scripted OpenAI-compatible server ([`scripted_llm`]) and the JavaScript
//! clients run with Node.js ([`node`]).
#![allow(dead_code)]

pub mod app;
pub mod conformance;
pub mod db;
pub mod node;
pub mod scripted_llm;
pub mod server;
pub mod tools;

pub use app::*;
pub use server::{Server, TwoReplicas, skip_to, to_final};
