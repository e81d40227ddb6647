//! Identifier newtypes, parsed once at the edge.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Checks the name of a registered workflow or agent: 1-64 characters of lowercase letters, digits, `_`, `.` or `-`,
/// starting with a letter or digit (the `name` rule of `schemas/FixedWorkflow.schema.json`),
/// so that it fits in a URL path segment and a file name without escaping.
pub fn check_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok = name.len() <= 64
        && name.chars().next().is_some_and(allowed)
        && name
            .chars()
            .all(|c| allowed(c) || matches!(c, '_' | '.' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "names are 1-64 characters of lowercase letters, digits, `_`, `.` or `-`, starting \
             with a letter or digit; `{name}` is not"
        ))
    }
}

/// A run id: a UUIDv7, so ids sort by creation time (the list endpoint's keyset relies on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(uuid::Uuid);

impl RunId {
    pub fn new() -> Self {
        RunId(uuid::Uuid::now_v7())
    }

    pub fn parse(s: &str) -> Option<Self> {
        uuid::Uuid::parse_str(s).ok().map(RunId)
    }
}

impl Default for RunId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// A step id, unique within a plan: 1–64 characters of `[A-Za-z0-9_.-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct StepId(String);

impl StepId {
    pub fn new(s: impl Into<String>) -> Result<Self, String> {
        let s = s.into();
        if is_step_id(&s) {
            Ok(StepId(s))
        } else {
            Err(format!(
                "step id `{s}` must be 1-64 characters of letters, digits, `_`, `-` or `.`"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for StepId {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        StepId::new(s)
    }
}

impl From<StepId> for String {
    fn from(id: StepId) -> String {
        id.0
    }
}

impl fmt::Display for StepId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `name` as a tool name every model provider accepts (OpenAI and Anthropic refuse others):
/// each character but an ASCII letter, digit, `_` or `-` replaced by `_`, cut to 64
/// characters, `_` when nothing is left. Providers' requests and MCP servers' tools are
/// named with it.
pub fn tool_wire_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if out.is_empty() {
        out.push('_');
    }
    out
}

/// Whether `s` is a step id: 1–64 characters of `[A-Za-z0-9_.-]` (every level of a
/// [`super::StepPath`] is one: agent names and the engine's own part names are too).
pub fn is_step_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Who owns a run. Derived from the API key; `default` when no keys are configured.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tenant(pub String);

impl Tenant {
    pub fn default_tenant() -> Self {
        Tenant("default".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_are_written_in_the_alphabet_providers_accept() {
        assert_eq!(tool_wire_name("get-weather"), "get-weather");
        assert_eq!(tool_wire_name("text/upper case"), "text_upper_case");
        assert_eq!(tool_wire_name("clock.now"), "clock_now");
        assert_eq!(tool_wire_name("é"), "_");
        assert_eq!(tool_wire_name(""), "_");
        assert_eq!(tool_wire_name(&"a".repeat(100)).len(), 64);
        assert_eq!(tool_wire_name(&"ü".repeat(100)), "_".repeat(64));
    }

    #[test]
    fn step_ids_are_checked() {
        for ok in ["a", "s1", "fetch-data", "x.y_z"] {
            assert!(StepId::new(ok).is_ok(), "{ok}");
        }
        for bad in ["", "has space", "slash/", &"x".repeat(65)] {
            assert!(StepId::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn run_ids_round_trip_and_sort_by_time() {
        let a = RunId::new();
        let b = RunId::new();
        assert!(a < b);
        assert_eq!(RunId::parse(&a.to_string()), Some(a));
        assert_eq!(RunId::parse("nope"), None);
    }
}
