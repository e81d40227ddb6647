//! A worker tool as declared (`[[tools.worker]]` or `PUT /v1/tools/{name}` with a `queue`):
//! a tool whose calls a tenant's own workers serve, pulling them from a queue (issue 47).
//! Plain data and its checks, kept in a run's spec beside the declared HTTP tools
//! ([`DeclaredTool`]); queueing and waiting are the store's and the engine's.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::http_tool::HttpToolSpec;

/// One declared worker tool (`schemas/WorkerTool.schema.json` says the same for users).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// The queue its workers poll.
    pub queue: String,
    #[serde(default = "default_schema")]
    pub input_schema: Value,
    /// How long a task may wait for a worker before it fails `tool_timeout`.
    #[serde(default = "default_five_minutes")]
    pub schedule_to_start_ms: u64,
    /// How long one claim may run.
    #[serde(default = "default_five_minutes")]
    pub start_to_close_ms: u64,
    /// When set, a claim not heartbeated for this long lapses.
    #[serde(default)]
    pub heartbeat_ms: Option<u64>,
    #[serde(default)]
    pub retry: TaskRetry,
}

/// How often a task is offered, and the pause between offers (doubled each time, capped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskRetry {
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    #[serde(default = "default_backoff")]
    pub backoff_ms: u64,
    #[serde(default = "default_max_backoff")]
    pub max_backoff_ms: u64,
}

impl Default for TaskRetry {
    fn default() -> Self {
        TaskRetry {
            max_attempts: default_attempts(),
            backoff_ms: default_backoff(),
            max_backoff_ms: default_max_backoff(),
        }
    }
}

fn default_schema() -> Value {
    json!({"type": "object", "properties": {}})
}
fn default_five_minutes() -> u64 {
    300_000
}
fn default_attempts() -> u32 {
    3
}
fn default_backoff() -> u64 {
    1_000
}
fn default_max_backoff() -> u64 {
    60_000
}

/// The longest any of a task's timeouts may be: a day.
const MAX_MS: u64 = 86_400_000;

impl WorkerToolSpec {
    /// Every problem with the declaration, as (JSON Pointer, message).
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut bad = |p: &str, m: &str| out.push((p.to_owned(), m.to_owned()));
        if !super::http_tool::tool_name_ok(&self.name) {
            bad(
                "/name",
                "a dotted lowercase name such as `billing.charge` (at most 64 characters)",
            );
        }
        if self.description.chars().count() > 4000 {
            bad("/description", "at most 4000 characters");
        }
        let queue_ok = (1..=64).contains(&self.queue.len())
            && (self.queue.chars()).all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c));
        if !queue_ok {
            bad(
                "/queue",
                "1 to 64 of letters, digits, `_`, `.`, `:` and `-`",
            );
        }
        for (pointer, ms) in [
            ("/schedule_to_start_ms", Some(self.schedule_to_start_ms)),
            ("/start_to_close_ms", Some(self.start_to_close_ms)),
            ("/heartbeat_ms", self.heartbeat_ms),
            ("/retry/backoff_ms", Some(self.retry.backoff_ms.max(1))),
            (
                "/retry/max_backoff_ms",
                Some(self.retry.max_backoff_ms.max(1)),
            ),
        ] {
            if ms.is_some_and(|ms| !(1..=MAX_MS).contains(&ms)) {
                bad(pointer, "between 1 and 86400000 (a day)");
            }
        }
        if !(1..=100).contains(&self.retry.max_attempts) {
            bad("/retry/max_attempts", "between 1 and 100");
        }
        out
    }
}

/// A tool a tenant declared: an HTTP endpoint orca calls, or a queue the tenant's workers
/// serve. Stored and carried in a run's spec as the declaration itself (an HTTP tool's JSON
/// is what it always was; a worker tool's is the one with a `queue`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DeclaredTool {
    Worker(WorkerToolSpec),
    Http(HttpToolSpec),
}

impl DeclaredTool {
    pub fn name(&self) -> &str {
        match self {
            DeclaredTool::Worker(w) => &w.name,
            DeclaredTool::Http(h) => &h.name,
        }
    }

    /// Every problem with the declaration, as (JSON Pointer, message).
    pub fn problems(&self) -> Vec<(String, String)> {
        match self {
            DeclaredTool::Worker(w) => w.problems(),
            DeclaredTool::Http(h) => h.problems(),
        }
    }

    /// What kind of tool it is, as listings say: `worker` or `http`.
    pub fn kind(&self) -> &'static str {
        match self {
            DeclaredTool::Worker(_) => "worker",
            DeclaredTool::Http(_) => "http",
        }
    }
}

impl From<HttpToolSpec> for DeclaredTool {
    fn from(spec: HttpToolSpec) -> Self {
        DeclaredTool::Http(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_declaration_reads_back_as_its_kind() {
        let http: DeclaredTool =
            serde_json::from_value(json!({"name": "weather.now", "url": "https://e.com/{city}"}))
                .unwrap();
        assert_eq!(http.kind(), "http");
        let worker: DeclaredTool =
            serde_json::from_value(json!({"name": "billing.charge", "queue": "billing"})).unwrap();
        assert_eq!(worker.kind(), "worker");
        let DeclaredTool::Worker(w) = &worker else {
            unreachable!()
        };
        assert_eq!((w.retry.max_attempts, w.heartbeat_ms), (3, None));
        let back: DeclaredTool = serde_json::from_value(serde_json::to_value(&worker).unwrap())
            .expect("a worker tool round-trips");
        assert_eq!(back, worker);
    }

    #[test]
    fn problems_name_each_member() {
        let spec: WorkerToolSpec = serde_json::from_value(json!({
            "name": "Bad", "queue": "a b", "heartbeat_ms": 0,
            "retry": {"max_attempts": 0}
        }))
        .unwrap();
        let pointers: Vec<String> = spec.problems().into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            pointers,
            ["/name", "/queue", "/heartbeat_ms", "/retry/max_attempts"]
        );
    }
}
