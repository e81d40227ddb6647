//! Prometheus metrics, one registry per app (so tests in one process do not share counters).
//! Gauges that the store or the hub already know (runs by status, open streams) are read at
//! scrape time instead of being kept in step by hand.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuotaLabel {
    pub tenant: String,
    pub quota: String,
}

/// A tenant's memory search by how it ranked (`text`, `meaning`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MemoryLabel {
    pub tenant: String,
    pub mode: String,
}

/// A tenant's memory write by outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MemoryWriteLabel {
    pub tenant: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabel {
    pub r#type: String,
}

/// Who reads the metrics: an operator sees every tenant's series, a tenant its own only.
#[derive(Debug, Clone, Copy)]
pub enum Audience<'a> {
    Operator,
    Tenant(&'a str),
}

/// One tenant's worker-tool queue as `/metrics` shows it (`store::tasks` reads them).
#[derive(Debug, Clone, PartialEq)]
pub struct QueueDepth {
    pub tenant: String,
    pub queue: String,
    /// Queued tasks (ready, or waiting out a retry's backoff).
    pub depth: u64,
    pub oldest_seconds: f64,
}

/// What [`Metrics::render`] reads at scrape time, beside the registry's own metrics.
#[derive(Debug, Clone, Copy)]
pub struct Scrape<'a> {
    /// Runs in the store by status.
    pub runs_by_status: &'a [(String, i64)],
    pub open_streams: usize,
    pub run_tasks: usize,
    pub lease_held: usize,
    /// What the store has written of runs since it opened.
    pub store_statements: u64,
    pub store_commits: u64,
    /// By tenant: runs in progress, tokens of the runs created today (UTC).
    pub tenants: &'a [(String, u64, u64)],
    /// Worker tools' queues by tenant: depth and the age of the oldest task.
    pub task_queues: &'a [QueueDepth],
    /// By tenant: memory items and their bytes.
    pub memory: &'a [(String, u64, u64)],
}

#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    runs_finished: Family<StatusLabel, Counter>,
    step_seconds: Family<KindLabel, Histogram>,
    llm_seconds: Histogram,
    tokens: Family<TokenLabel, Counter>,
    quota_refusals: Family<QuotaLabel, Counter>,
    session_variable_bytes: Counter,
    tasks_finished: Family<OutcomeLabel, Counter>,
    memory_searches: Family<MemoryLabel, Counter>,
    memory_writes: Family<MemoryWriteLabel, Counter>,
}

fn latency_histogram() -> Histogram {
    // 1 ms .. ~65 s
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("orca");
        let runs_finished = Family::<StatusLabel, Counter>::default();
        registry.register(
            "runs_finished",
            "Runs that reached a terminal status since start",
            runs_finished.clone(),
        );
        let step_seconds =
            Family::<KindLabel, Histogram>::new_with_constructor(latency_histogram as fn() -> _);
        registry.register(
            "step_duration_seconds",
            "Duration of step attempts by kind",
            step_seconds.clone(),
        );
        let llm_seconds = latency_histogram();
        registry.register(
            "llm_request_duration_seconds",
            "Duration of LLM calls, request to last chunk",
            llm_seconds.clone(),
        );
        let tokens = Family::<TokenLabel, Counter>::default();
        registry.register("llm_tokens", "LLM tokens used", tokens.clone());
        let quota_refusals = Family::<QuotaLabel, Counter>::default();
        registry.register(
            "quota_refusals",
            "New runs refused because their tenant was at a quota, by tenant and quota",
            quota_refusals.clone(),
        );
        let session_variable_bytes = Counter::default();
        registry.register(
            "session_variable_bytes_read",
            "Bytes of session variables runs read from the store (only the names their plans read)",
            session_variable_bytes.clone(),
        );
        let tasks_finished = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "tasks_finished",
            "Worker-tool tasks whose end a run took, by outcome (completed, failed, timed_out, cancelled)",
            tasks_finished.clone(),
        );
        let memory_searches = Family::<MemoryLabel, Counter>::default();
        registry.register(
            "memory_searches",
            "Memory searches (API, memory.search, agents' recall, history by relevance), by tenant and how they ranked (text, meaning)",
            memory_searches.clone(),
        );
        let memory_writes = Family::<MemoryWriteLabel, Counter>::default();
        registry.register(
            "memory_writes",
            "Memory puts by tenant and outcome (stored, replayed: a resumed run's write found stored, refused: past a limit)",
            memory_writes.clone(),
        );
        Metrics {
            inner: Arc::new(Inner {
                memory_searches,
                memory_writes,
                tasks_finished,
                session_variable_bytes,
                registry,
                runs_finished,
                step_seconds,
                llm_seconds,
                tokens,
                quota_refusals,
            }),
        }
    }

    pub fn quota_refused(&self, tenant: &str, quota: &str) {
        self.inner
            .quota_refusals
            .get_or_create(&QuotaLabel {
                tenant: tenant.to_owned(),
                quota: quota.to_owned(),
            })
            .inc();
    }

    /// A memory search of `tenant`'s, ranked by `mode` (`text`, `meaning`).
    pub fn memory_searched(&self, tenant: &str, mode: &str) {
        let label = MemoryLabel {
            tenant: tenant.to_owned(),
            mode: mode.to_owned(),
        };
        self.inner.memory_searches.get_or_create(&label).inc();
    }

    /// A memory put of `tenant`'s: `stored`, `replayed` or `refused`.
    pub fn memory_written(&self, tenant: &str, outcome: &str) {
        let label = MemoryWriteLabel {
            tenant: tenant.to_owned(),
            outcome: outcome.to_owned(),
        };
        self.inner.memory_writes.get_or_create(&label).inc();
    }

    /// A run read `bytes` of its session's variables.
    pub fn session_variables_read(&self, bytes: u64) {
        self.inner.session_variable_bytes.inc_by(bytes);
    }

    /// A worker tool's task ended as its run saw it: `completed`, `failed`, `timed_out`
    /// (`tool_timeout`: not taken, or out of attempts after lapsed claims) or `cancelled`.
    pub fn task_finished(&self, outcome: &str) {
        self.inner
            .tasks_finished
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    pub fn run_finished(&self, status: &str) {
        self.inner
            .runs_finished
            .get_or_create(&StatusLabel {
                status: status.to_owned(),
            })
            .inc();
    }

    pub fn step_finished(&self, kind: &str, seconds: f64) {
        self.inner
            .step_seconds
            .get_or_create(&KindLabel {
                kind: kind.to_owned(),
            })
            .observe(seconds);
    }

    pub fn llm_call(&self, seconds: f64, prompt_tokens: u64, completion_tokens: u64) {
        self.inner.llm_seconds.observe(seconds);
        for (t, n) in [("prompt", prompt_tokens), ("completion", completion_tokens)] {
            self.inner
                .tokens
                .get_or_create(&TokenLabel {
                    r#type: t.to_owned(),
                })
                .inc_by(n);
        }
    }

    /// The text exposition, with what is read at scrape time appended, as `audience` may see
    /// it: a series labelled with another tenant than the reader's is left out, whichever
    /// family it belongs to.
    pub fn render(&self, now: &Scrape<'_>, audience: Audience<'_>) -> String {
        let all = self.render_all(now);
        match audience {
            Audience::Operator => all,
            Audience::Tenant(tenant) => only_tenant(&all, tenant),
        }
    }

    fn render_all(&self, now: &Scrape<'_>) -> String {
        let Scrape {
            runs_by_status,
            open_streams,
            run_tasks,
            lease_held,
            store_statements,
            store_commits,
            tenants,
            task_queues,
            memory,
        } = *now;
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode_registry(&mut out, &self.inner.registry);
        out.push_str("# HELP orca_runs Runs in the store by status.\n# TYPE orca_runs gauge\n");
        for status in crate::domain::RunStatus::ALL {
            let n = runs_by_status
                .iter()
                .find(|(s, _)| s == status.as_str())
                .map_or(0, |(_, n)| *n);
            out.push_str(&format!(
                "orca_runs{{status=\"{}\"}} {n}\n",
                status.as_str()
            ));
        }
        let scalars: [(&str, &str, &str, u64); 5] = [
            (
                "orca_open_streams",
                "gauge",
                "Open event streams.",
                open_streams as u64,
            ),
            (
                "orca_run_tasks",
                "gauge",
                "Runs this replica is running now (waiting for a slot included).",
                run_tasks as u64,
            ),
            (
                "orca_lease_held_actions",
                "gauge",
                "Steps, tool and model calls waiting for this replica to renew its leases.",
                lease_held as u64,
            ),
            (
                "orca_store_statements_total",
                "counter",
                "Statements this replica ran to write runs (new runs, history batches, ends).",
                store_statements,
            ),
            (
                "orca_store_commits_total",
                "counter",
                "Transactions this replica committed to write runs.",
                store_commits,
            ),
        ];
        for (name, kind, help, value) in scalars {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
            ));
        }
        render_tenant_gauges(&mut out, tenants, memory);
        render_task_queues(&mut out, task_queues);
        let _ = prometheus_client::encoding::text::encode_eof(&mut out);
        out
    }
}

/// The gauges read at scrape time by tenant: runs in progress, tokens today, memory.
fn render_tenant_gauges(
    out: &mut String,
    tenants: &[(String, u64, u64)],
    memory: &[(String, u64, u64)],
) {
    type Read = fn(&(String, u64, u64)) -> u64;
    let per_tenant: [(&str, &str, Read); 2] = [
        (
            "orca_tenant_runs_in_progress",
            "Runs in progress (queued, running, waiting, paused), by tenant.",
            |t| t.1,
        ),
        (
            "orca_tenant_tokens_today",
            "Tokens of the runs created today (UTC), by tenant.",
            |t| t.2,
        ),
    ];
    let memory_gauges: [(&str, &str, Read); 2] = [
        (
            "orca_tenant_memory_items",
            "Memory items, by tenant (expired ones until they are swept).",
            |t| t.1,
        ),
        (
            "orca_tenant_memory_bytes",
            "Bytes (values as JSON) of memory items, by tenant.",
            |t| t.2,
        ),
    ];
    let gauges =
        (per_tenant.iter().map(|g| (g, tenants))).chain(memory_gauges.iter().map(|g| (g, memory)));
    for ((name, help, value), rows) in gauges {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
        for t in rows {
            let tenant = escape_label(&t.0);
            out.push_str(&format!("{name}{{tenant=\"{tenant}\"}} {}\n", value(t)));
        }
    }
}

/// `orca_tasks_queued` and `orca_task_queue_oldest_seconds`, labelled with tenant and queue
/// (a tenant's scrape keeps its own queues only: queue names are the tenant's).
fn render_task_queues(out: &mut String, queues: &[QueueDepth]) {
    type Read = fn(&QueueDepth) -> String;
    let series: [(&str, &str, Read); 2] = [
        (
            "orca_tasks_queued",
            "Worker-tool tasks queued (ready, or waiting out a retry's backoff), by tenant and queue.",
            |q| q.depth.to_string(),
        ),
        (
            "orca_task_queue_oldest_seconds",
            "Age of the oldest queued task, by tenant and queue.",
            |q| format!("{:.3}", q.oldest_seconds),
        ),
    ];
    for (name, help, value) in series {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
        for q in queues {
            out.push_str(&format!(
                "{name}{{tenant=\"{}\",queue=\"{}\"}} {}\n",
                escape_label(&q.tenant),
                escape_label(&q.queue),
                value(q)
            ));
        }
    }
}

/// A label value as the text format writes it.
fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The exposition without the samples labelled with a tenant other than `tenant`.
fn only_tenant(text: &str, tenant: &str) -> String {
    let mine = format!("tenant=\"{}\"", escape_label(tenant));
    let keep =
        |line: &&str| line.starts_with('#') || !line.contains("tenant=\"") || labelled(line, &mine);
    let mut out: String = text.lines().filter(keep).collect::<Vec<_>>().join("\n");
    out.push('\n');
    out
}

/// Whether a sample line carries exactly the label `pair` (`tenant="…"`, escaped): it starts
/// the label set or follows a comma, and its value ends where `pair` does.
fn labelled(line: &str, pair: &str) -> bool {
    let Some(labels) = line.split_once('{').map(|(_, rest)| rest) else {
        return false;
    };
    labels.match_indices(pair).any(|(at, _)| {
        (at == 0 || labels[..at].ends_with(',')) && {
            let after = &labels[at + pair.len()..];
            after.starts_with(',') || after.starts_with('}')
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_reads_its_own_series_and_every_unlabelled_one() {
        let metrics = Metrics::new();
        metrics.quota_refused("a", "running_runs");
        metrics.quota_refused("ab", "running_runs");
        metrics.quota_refused("b\"x", "tokens_per_day");
        let tenants = [("a".to_owned(), 1, 2), ("ab".to_owned(), 3, 4)];
        let queue = |tenant: &str, depth| QueueDepth {
            tenant: tenant.to_owned(),
            queue: "billing".to_owned(),
            depth,
            oldest_seconds: 1.5,
        };
        let task_queues = [queue("a", 7), queue("ab", 9)];
        let scrape = Scrape {
            task_queues: &task_queues,
            runs_by_status: &[],
            open_streams: 0,
            run_tasks: 0,
            lease_held: 0,
            store_statements: 0,
            store_commits: 0,
            tenants: &tenants,
            memory: &[("a".to_owned(), 3, 120), ("ab".to_owned(), 5, 900)],
        };
        let all = metrics.render(&scrape, Audience::Operator);
        for series in [r#"tenant="ab""#, r#"tenant="b\"x""#, r#"tenant="a""#] {
            assert!(all.contains(series), "{all}");
        }
        let mine = metrics.render(&scrape, Audience::Tenant("a"));
        assert!(
            mine.contains(r#"orca_tenant_runs_in_progress{tenant="a"} 1"#),
            "{mine}"
        );
        assert!(
            mine.contains(r#"orca_quota_refusals_total{tenant="a",quota="running_runs"} 1"#),
            "{mine}"
        );
        assert!(
            mine.contains(r#"orca_tenant_memory_bytes{tenant="a"} 120"#)
                && !mine.contains(r#"orca_tenant_memory_bytes{tenant="ab"}"#),
            "{mine}"
        );
        assert!(
            mine.contains(r#"orca_tasks_queued{tenant="a",queue="billing"} 7"#)
                && mine.contains(
                    r#"orca_task_queue_oldest_seconds{tenant="a",queue="billing"} 1.500"#
                ),
            "{mine}"
        );
        assert!(
            !mine.contains(r#"tenant="ab""#) && !mine.contains("b\\\"x"),
            "{mine}"
        );
        assert!(
            mine.contains("orca_open_streams 0") && mine.ends_with("# EOF\n"),
            "{mine}"
        );
    }
}
