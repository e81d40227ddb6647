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
