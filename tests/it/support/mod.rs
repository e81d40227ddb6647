//! Test support: `spawn_app` and the SSE reader ([`app`]), and the scripted OpenAI-compatible
//! server ([`scripted_llm`]).
#![allow(dead_code)]

pub mod app;
pub mod scripted_llm;
pub mod tools;

pub use app::*;
