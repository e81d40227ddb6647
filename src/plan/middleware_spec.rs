//! The built-in middleware's configurations: each name with its small, closed set of keys,
//! checked (every problem with a pointer into the item: unknown keys, wrong types, bad
//! regexes) and typed as a [`Builtin`]. What the middleware *does* is the engine's
//! (`engine::middleware`); this module stays pure.
//!
//! | name | config |
//! |---|---|
//! | `retry` | `max_attempts` (1–10, default 3), `initial_delay_ms` (default 200, doubled per retry) |
//! | `audit_log` | none |
//! | `guardrail` | `patterns` (regexes, required), `action` `redact` (default) or `block`, `replacement` (default `[redacted]`), `window` (characters held back while streaming, default 64), `refusal` (the answer when input is blocked) |
//! | `rate_limit` | `per_minute` (required, ≥ 1) |
//! | `response_cache` | none |
//! | `tool_approval` | `tools` (names, required) |

use serde_json::{Map, Value};

use super::Problem;
use super::team::MiddlewareSpec;

/// The middleware orca ships, by name.
pub const NAMES: [&str; 6] = [
    "retry",
    "audit_log",
    "guardrail",
    "rate_limit",
    "response_cache",
    "tool_approval",
];

/// One built-in middleware with its configuration.
#[derive(Debug, Clone)]
pub enum Builtin {
    /// Retries a model call that failed retryably.
    Retry {
        max_attempts: u32,
        initial_delay_ms: u64,
    },
    /// Records every turn (tracing target `orca::audit`, and the turn's attempt input).
    AuditLog,
    Guardrail(Guardrail),
    /// At most `per_minute` turns of the agent per minute in a run; more wait.
    RateLimit {
        per_minute: u32,
    },
    /// The same agent asked the same messages again in a run answers from memory.
    ResponseCache,
    /// Calls of these tools wait for a human's `approve` or `deny`.
    ToolApproval {
        tools: Vec<String>,
    },
}

/// `guardrail`: patterns no input or answer may carry.
#[derive(Debug, Clone)]
pub struct Guardrail {
    pub patterns: Vec<regex::Regex>,
    pub action: GuardAction,
    pub replacement: String,
    /// Characters of streamed text held back, so a match split across chunks is still seen
    /// whole; the longest match the patterns can make should fit in it.
    pub window: usize,
    /// What a turn whose input is blocked answers (without calling the model).
    pub refusal: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardAction {
    /// Matches are replaced.
    Redact,
    /// Input that matches is refused; an answer that matches fails the turn
    /// (`guardrail_blocked`).
    Block,
}

pub const DEFAULT_REPLACEMENT: &str = "[redacted]";
pub const DEFAULT_WINDOW: usize = 64;
pub const DEFAULT_REFUSAL: &str = "I can't help with that: the request was blocked by a guardrail.";

impl Builtin {
    /// The typed middleware of a spec, or every problem with its config, each pointer relative
    /// to the config (`/patterns/0`); `Err(vec![])` never happens.
    pub fn parse(spec: &MiddlewareSpec) -> Result<Builtin, Vec<Problem>> {
        let mut c = Config {
            map: &spec.config,
            problems: Vec::new(),
        };
        let builtin = match spec.name.as_str() {
            "retry" => {
                c.only(&["max_attempts", "initial_delay_ms"]);
                Builtin::Retry {
                    max_attempts: c.int("max_attempts", 1, 10).unwrap_or(3) as u32,
                    initial_delay_ms: c.int("initial_delay_ms", 0, 60_000).unwrap_or(200),
                }
            }
            "audit_log" | "response_cache" => {
                c.only(&[]);
                match spec.name.as_str() {
                    "audit_log" => Builtin::AuditLog,
                    _ => Builtin::ResponseCache,
                }
            }
            "guardrail" => Builtin::Guardrail(guardrail(&mut c)),
            "rate_limit" => {
                c.only(&["per_minute"]);
                let per_minute = c.int("per_minute", 1, 100_000);
                let per_minute = c.required(per_minute, "per_minute");
                Builtin::RateLimit {
                    per_minute: per_minute.unwrap_or(1) as u32,
                }
            }
            "tool_approval" => {
                c.only(&["tools"]);
                let tools = c.strings("tools");
                let tools = c.required(tools, "tools");
                Builtin::ToolApproval {
                    tools: tools.unwrap_or_default(),
                }
            }
            other => {
                return Err(vec![Problem::new(
                    "",
                    format!("unknown middleware `{other}`"),
                )]);
            }
        };
        if c.problems.is_empty() {
            Ok(builtin)
        } else {
            Err(c.problems)
        }
    }
}

fn guardrail(c: &mut Config<'_>) -> Guardrail {
    c.only(&["patterns", "action", "replacement", "window", "refusal"]);
    let mut patterns = Vec::new();
    let raw = c.strings("patterns");
    let raw = c.required(raw, "patterns");
    for (i, p) in raw.into_iter().flatten().enumerate() {
        match regex::Regex::new(&p) {
            Ok(re) => patterns.push(re),
            Err(e) => c.problem(format!("/patterns/{i}"), format!("not a valid regex: {e}")),
        }
    }
    let action = match c.text("action").as_deref() {
        None | Some("redact") => GuardAction::Redact,
        Some("block") => GuardAction::Block,
        Some(other) => {
            c.problem(
                "/action",
                format!("`{other}` is neither `redact` nor `block`"),
            );
            GuardAction::Redact
        }
    };
    Guardrail {
        patterns,
        action,
        replacement: c
            .text("replacement")
            .unwrap_or_else(|| DEFAULT_REPLACEMENT.into()),
        window: c
            .int("window", 1, 4096)
            .map_or(DEFAULT_WINDOW, |w| w as usize),
        refusal: c.text("refusal").unwrap_or_else(|| DEFAULT_REFUSAL.into()),
    }
}

/// Reads one config object, collecting problems.
struct Config<'a> {
    map: &'a Map<String, Value>,
    problems: Vec<Problem>,
}

impl Config<'_> {
    fn problem(&mut self, pointer: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem::new(pointer, message));
    }

    /// Reports keys not in `known`.
    fn only(&mut self, known: &[&str]) {
        let unknown: Vec<String> = self
            .map
            .keys()
            .filter(|k| !known.contains(&k.as_str()))
            .cloned()
            .collect();
        for key in unknown {
            let message = match known {
                [] => "this middleware takes no configuration".to_owned(),
                _ => format!("unknown key; it takes {}", known.join(", ")),
            };
            self.problem(format!("/{}", crate::schema::escape_pointer(&key)), message);
        }
    }

    /// Reports a missing required key.
    fn required<T>(&mut self, value: Option<T>, key: &str) -> Option<T> {
        if value.is_none() && !self.map.contains_key(key) {
            self.problem("", format!("`{key}` is required"));
        }
        value
    }

    fn int(&mut self, key: &str, min: u64, max: u64) -> Option<u64> {
        let raw = self.map.get(key)?;
        match raw.as_u64().filter(|n| (min..=max).contains(n)) {
            Some(n) => Some(n),
            None => {
                self.problem(
                    format!("/{key}"),
                    format!("must be an integer from {min} to {max}"),
                );
                None
            }
        }
    }

    fn text(&mut self, key: &str) -> Option<String> {
        let raw = self.map.get(key)?;
        match raw.as_str() {
            Some(s) => Some(s.to_owned()),
            None => {
                self.problem(format!("/{key}"), "must be a string");
                None
            }
        }
    }

    /// A non-empty list of non-empty strings.
    fn strings(&mut self, key: &str) -> Option<Vec<String>> {
        let raw = self.map.get(key)?;
        let list: Option<Vec<String>> = raw.as_array().and_then(|items| {
            items
                .iter()
                .map(|v| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned))
                .collect()
        });
        match list.filter(|l| !l.is_empty()) {
            Some(l) => Some(l),
            None => {
                self.problem(
                    format!("/{key}"),
                    "must be a non-empty list of non-empty strings",
                );
                None
            }
        }
    }
}

/// The problems of middleware item `item` (a name or `{name, config}`) at `at`, with pointers
/// under `at` (`at/config/...` for the config; `at` itself for a missing required key of an
/// item written as a bare name). Unknown names are the caller's to report.
pub fn config_problems(spec: &MiddlewareSpec, item: &Value, at: &str) -> Vec<Problem> {
    if !NAMES.contains(&spec.name.as_str()) {
        return Vec::new();
    }
    let base = match item {
        Value::Object(_) => format!("{at}/config"),
        _ => at.to_owned(),
    };
    match Builtin::parse(spec) {
        Ok(_) => Vec::new(),
        Err(problems) => problems
            .into_iter()
            .map(|p| Problem::new(format!("{base}{}", p.pointer), p.message))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(name: &str, config: Value) -> Vec<String> {
        let spec = MiddlewareSpec {
            name: name.into(),
            config: config.as_object().cloned().unwrap_or_default(),
        };
        match Builtin::parse(&spec) {
            Ok(_) => Vec::new(),
            Err(problems) => problems.into_iter().map(|p| p.pointer).collect(),
        }
    }

    #[test]
    fn configs_are_checked_with_pointers() {
        let cases: &[(&str, Value, &[&str])] = &[
            ("retry", json!({}), &[]),
            (
                "retry",
                json!({ "max_attempts": 0, "delay": 1 }),
                &["/delay", "/max_attempts"],
            ),
            ("audit_log", json!({ "verbose": true }), &["/verbose"]),
            (
                "guardrail",
                json!({ "patterns": ["sk-\\w+"], "action": "redact" }),
                &[],
            ),
            ("guardrail", json!({}), &[""]),
            (
                "guardrail",
                json!({ "patterns": ["ok", "(unclosed"] }),
                &["/patterns/1"],
            ),
            (
                "guardrail",
                json!({ "patterns": ["x"], "action": "shout" }),
                &["/action"],
            ),
            ("rate_limit", json!({ "per_minute": 5 }), &[]),
            ("rate_limit", json!({}), &[""]),
            ("response_cache", json!({}), &[]),
            ("tool_approval", json!({ "tools": ["fs.read"] }), &[]),
            ("tool_approval", json!({ "tools": [] }), &["/tools"]),
        ];
        for (name, config, want) in cases {
            assert_eq!(check(name, config.clone()), *want, "{name} {config}");
        }
    }
}
