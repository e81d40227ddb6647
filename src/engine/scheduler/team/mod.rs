//! Teams of agents inside a plan: an agent's turn ([`turn`]), a hub with its spokes
//! ([`spokes`]) and workflows nested in a step ([`workflow`]). Each runs inside one step of
//! the plan, its work (model rounds, tool calls, inner steps) recorded as attempts at paths
//! below that step, its events carrying those paths.

pub(crate) mod middleware;
pub(crate) mod spokes;
pub(crate) mod turn;
pub(crate) mod workflow;

/// A tool name a model may call for `prefix` + agent `name` (tool names allow letters,
/// digits, `_` and `-`; agent names may also hold `.`).
pub(crate) fn tool_name(prefix: &str, name: &str) -> String {
    format!("{prefix}{}", name.replace('.', "_"))
}
