//! Test support: `spawn_app` and the SSE reader ([`app`]), the real binary as a process
//! ([`server`]), and the scripted OpenAI-compatible server ([`scripted_llm`]).
#![allow(dead_code)]

pub mod app;
pub mod scripted_llm;
pub mod server;
pub mod tools;

pub use app::*;
pub use server::{Server, skip_to, to_final};
