//! One call each, on the [`super::runtime`] floor: a streamed model call ([`model`]), a tool
//! call ([`tool_call`]), the model ⇄ tools rounds of a conversation ([`converse`]), and orca's
//! own model calls with a schema-held answer ([`function_call`]: planner, re-planner,
//! selector, summaries, speaker).

pub mod converse;
pub mod function_call;
pub mod memory_call;
pub mod model;
pub mod tool_call;
pub mod worker_call;
