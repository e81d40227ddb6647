//! The store: every SQL statement of orca lives here, for two backends behind one API: SQLite
//! (WAL, one file, one process) and PostgreSQL (any number of replicas). Statements are plain
//! runtime SQL, written once with `$N` placeholders; the few that differ ask [`Backend`].
//! Reads, and PostgreSQL's writes, go through sqlx's `Any` driver (which binds `$N` by number
//! on both). SQLite's writes of runs and their histories ([`statement`]) go through one
//! connection on its own thread ([`sqlite_writer`]), a whole transaction per hand-off, the
//! same text with `?N`, bound by position. Each backend has its own
//! migrations folder (`migrations/sqlite`, `migrations/postgres`), the same schema in intent:
//! JSON and times as text, integers as 64-bit.
//!
//! The store only persists and reads back domain types; it decides nothing about runs.
//! Invariant: a run's `final` event and its terminal row are written in one transaction
//! ([`Record::End`] in a batch, or [`Store::finish_run`]), so history never shows one without
//! the other.

use std::collections::HashSet;
use std::str::FromStr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use sqlx::{AnyPool, AssertSqlSafe, ConnectOptions, Connection, Executor, Row};

use crate::domain::run::RunSpec;
use crate::domain::{
    Completion, Counters, Event, EventKind, Orchestration, Payload, Run, RunError, RunId,
    RunStatus, Selection, StepAttempt, StepPath, Tenant, Usage,
};

mod cluster;
mod history;
pub mod memory;
mod pause;
mod quota;
mod reads;
mod registry;
mod retention;
mod schedules;
mod sessions;
mod sqlite_reader;
mod sqlite_writer;
mod statement;
pub mod tasks;
mod timeline;
pub mod users;
mod versions;
mod webhooks;
pub use cluster::{Claim, Listener, Notice, listen};
pub use history::*;
pub use pause::PauseWrite;
pub use quota::Guards;
pub use reads::{History, RunReads};
pub use registry::{Authored, Put, Registry, RegistryRecord, WorkflowRecord};
pub use retention::RUN_TABLES;
pub use schedules::{
    Capped, FireOutcome, FireRecord, Fired, ScheduleChanges, ScheduleRecord, Schedules,
};
pub use sessions::{
    Deleted, ListedSession, Refusal, SessionCursor, SessionLimits, SessionRun, SessionSummary,
    Sessions, Turn,
};
pub use timeline::RunHistory;
pub use versions::{Definitions, LabelRecord, Labelled, Owner, VersionRecord};
pub use webhooks::{
    AtCap, AttemptOutcome, Delivery, DeliveryAttempt, DueDelivery, Outcome, Webhooks,
};

use sqlite_reader::SqliteReader;
use sqlite_writer::SqliteWriter;
use statement::{Param, RowWrite, Statement};

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// The database behind a store (which one a URL names is the configuration's business:
/// `database.url` is checked with [`Backend::of_url`] as it is loaded).
pub use crate::config::Backend;
use crate::domain::quota::Exceeded;

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    /// The database's clock in Unix milliseconds, as an SQL expression. Leases are dated by
    /// it, so every replica reads them off the one clock they share, whatever their own say.
    pub(crate) fn now_ms_sql(self) -> &'static str {
        match self {
            Backend::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
            Backend::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
        }
    }
}

/// A database URL fit for logs and errors: its password replaced by `***`, whatever the URL
/// looks like. Nothing is parsed first, since the URLs worth redacting are often the ones that
/// do not parse (a `#` or `/` left unencoded in the password, a bad port, a broken IPv6 host):
/// everything between the first `:` after `://` and the last `@` goes, and so does the value
/// of any `password=` (or `sslpassword=`, `pass=` …) anywhere in the text.
pub fn redact_url(url: &str) -> String {
    let mut out = match url.split_once("://") {
        Some((scheme, rest)) => match (rest.rfind('@'), rest.find(':')) {
            (Some(at), Some(colon)) if colon < at => {
                format!("{scheme}://{}:***{}", &rest[..colon], &rest[at..])
            }
            _ => url.to_owned(),
        },
        None => url.to_owned(),
    };
    let mut from = 0;
    while let Some(found) = out[from..].to_ascii_lowercase().find("pass") {
        let start = from + found;
        let Some(eq) = out[start..].find('=').map(|i| start + i) else {
            break;
        };
        let key = &out[start..eq];
        if !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            from = start + 4;
            continue;
        }
        let end = out[eq + 1..]
            .find(['&', ' ', ';', '#'])
            .map_or(out.len(), |i| eq + 1 + i);
        out.replace_range(eq + 1..end, "***");
        from = eq + 4;
    }
    out
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("database error")]
    Db(#[from] sqlx::Error),
    #[error("database error")]
    Write(#[from] sqlite_writer::WriteError),
    #[error("database migration failed")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// Another replica took the run over (this one's lease lapsed): its history is no longer
    /// this replica's to write.
    #[error("this replica no longer holds the run's lease")]
    LeaseLost,
}

pub type Result<T> = std::result::Result<T, Error>;

/// Fixed-width RFC 3339 UTC text, so that stored times compare in time order as strings.
pub fn fmt_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn parse_time(s: &str) -> Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| Error::Corrupt(format!("time `{s}`: {e}")))
}

fn parse_opt_time(s: Option<String>) -> Result<Option<DateTime<Utc>>> {
    s.as_deref().map(parse_time).transpose()
}

fn parse_json(s: &str) -> Result<Value> {
    serde_json::from_str(s).map_err(|e| Error::Corrupt(format!("json: {e}")))
}

fn parse_opt_json<T: serde::de::DeserializeOwned>(s: Option<String>) -> Result<Option<T>> {
    s.map(|s| serde_json::from_str(&s).map_err(|e| Error::Corrupt(format!("json: {e}"))))
        .transpose()
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    // Serialising our own types to JSON text cannot fail: they hold no maps with non-string
    // keys and no failing Serialize impls.
    serde_json::to_string(v).expect("domain types serialise")
}

/// Filters of `GET /v1/runs`, already parsed.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub status: Option<RunStatus>,
    pub orchestration: Option<Orchestration>,
    pub created_after: Option<DateTime<Utc>>,
    pub created_before: Option<DateTime<Utc>>,
    /// `metadata.KEY=VALUE` pairs; a value matches a string equal to it, or a number or
    /// boolean whose JSON text equals it.
    pub metadata: Vec<(String, String)>,
    /// `q`: text the run's input contains, compared case-insensitively (ASCII letters on
    /// SQLite; as the database's locale folds them on PostgreSQL). A string input is searched
    /// as the string, an object input as its stored JSON text. `%` and `_` are plain
    /// characters here, not wildcards.
    pub text: Option<String>,
    /// Only the forks of this run.
    pub parent: Option<RunId>,
    /// Only the runs of this session.
    pub session_id: Option<String>,
    /// Only the runs of this user.
    pub user_id: Option<String>,
    /// Only the runs that ended with this completion (`partial`: succeeded, but only part of
    /// the task was done).
    pub completion: Option<Completion>,
    /// Keyset cursor: only runs with an id below this one.
    pub before_id: Option<RunId>,
    pub limit: u32,
}

/// A run row together with what the engine needs to resume it.
#[derive(Debug, Clone)]
pub struct StoredRun {
    pub run: Run,
    pub tenant: Tenant,
    pub spec: RunSpec,
    pub counters: Counters,
    /// A cancel was asked through a replica that did not run it (see `cluster.rs`).
    pub cancel_requested: bool,
    /// The run is to pause, or stay paused (`POST /v1/runs/{id}/pause`, or a breakpoint).
    pub pause_requested: bool,
    /// The breakpoint places a resume let it past (see `pause.rs`).
    pub breakpoints_released: Vec<crate::domain::StepPath>,
}

/// One thing to append to a run's history; see [`Store::append`].
#[derive(Debug, Clone)]
pub enum Record {
    Event(std::sync::Arc<Event>),
    /// Shared with the run's ledger, which keeps what it queued without a copy.
    Attempt(RunId, std::sync::Arc<StepAttempt>),
    Checkpoint {
        run: RunId,
        id: u64,
        plan_version: u32,
        state: Value,
    },
    Plan {
        run: RunId,
        version: u32,
        reason: String,
        /// Shared with the run's ledger and its `plan` event: one copy of the document.
        plan: std::sync::Arc<Value>,
        /// How a version after the first came to be.
        change: Option<Box<crate::domain::replan::PlanChange>>,
    },
    /// The run row's mutable fields (status changes mid-run, e.g. `waiting_input`).
    RunState(Box<Run>),
    /// The run's usage and limit counters as they stand now.
    Counters {
        run: RunId,
        usage: Usage,
        counters: Counters,
    },
    /// The run's end: its terminal row and its `final` event, one record so that no batch
    /// holds one without the other (history never shows one without the other).
    End {
        run: Box<Run>,
        event: std::sync::Arc<Event>,
    },
}

/// The end of a run's event log, from [`Store::run_tail`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunTail {
    pub status: RunStatus,
    /// The seq of the run's last stored event; 0 before its first.
    pub last_seq: u64,
}

impl RunTail {
    /// Whether a reader that has seen every event up to `after` has nothing left to wait for:
    /// the run is terminal (so its `final` event, always the last, is stored) and no event
    /// follows `after`.
    pub fn ended_by(&self, after: u64) -> bool {
        self.status.is_terminal() && self.last_seq <= after
    }
}

/// A seq as the database's signed 64-bit integer. Seqs are far below 2^63; a larger bound (a client's
/// `after` or `Last-Event-ID`) means "after everything" and must not wrap to a negative number,
/// which would replay the whole log.
fn seq_bound(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

/// An `Idempotency-Key` and the fingerprint ([`RunSpec::fingerprint`]) of the request that
/// came with it, as received.
#[derive(Debug, Clone, Copy)]
pub struct Idempotency<'a> {
    pub key: &'a str,
    pub fingerprint: &'a str,
}

/// The pool of connections to a SQLite file already in WAL mode: each connection sets what
/// is per connection.
async fn sqlite_pool(url: &str, max_connections: u32, busy_timeout: Duration) -> Result<AnyPool> {
    let ms = busy_timeout.as_millis();
    Ok(AnyPoolOptions::new()
        .max_connections(max_connections)
        .after_connect(move |conn, _| {
            Box::pin(async move {
                // WAL + NORMAL: a committed transaction survives a process crash; only an OS
                // crash can lose the last few, which the fsync cost per event would not be
                // worth.
                conn.execute("PRAGMA synchronous = NORMAL").await?;
                conn.execute("PRAGMA foreign_keys = ON").await?;
                conn.execute(AssertSqlSafe(format!("PRAGMA busy_timeout = {ms}")))
                    .await?;
                Ok(())
            })
        })
        .connect(url)
        .await?)
}

/// Outcome of [`Store::insert_run`].
pub enum Inserted {
    New,
    /// The run asked to be refused while its session has a run in progress, and it has.
    SessionBusy,
    /// Its session was deleted: no run is created in it again.
    SessionDeleted,
    /// Its session's runs are another user's (or no user's, for a run of a user).
    SessionOfAnotherUser,
    /// The tenant already used this idempotency key: here is that run.
    Existing(Box<StoredRun>),
    /// The tenant is at one of its quotas.
    QuotaExceeded(Exceeded),
    /// The fork would copy more history than its tenant's forks may in a whole day.
    ForkTooLarge {
        bytes: u64,
        limit: u64,
    },
}

#[derive(Clone)]
pub struct Store {
    /// Replaced whole by [`Store::renew_connections`] after a store outage (SQLite). A std
    /// lock: read (an `Arc` clone) once per statement, written once per outage.
    pool: Arc<RwLock<AnyPool>>,
    /// What the pool was opened with, to open it again.
    url: Arc<str>,
    max_connections: u32,
    busy_timeout: Duration,
    /// A write failed since the connections were last opened: the next success renews them.
    troubled: Arc<std::sync::atomic::AtomicBool>,
    backend: Backend,
    /// This process's id as a lease owner: the runs it creates or takes over are leased to
    /// it (see `cluster.rs`).
    replica: std::sync::Arc<str>,
    /// How long a lease lasts unless renewed.
    lease_ttl: Duration,
    /// Where this deployment's replicas send and hear notices (Postgres).
    channels: std::sync::Arc<cluster::Channels>,
    /// What this store has written of runs (see [`Writes`]).
    writes: Arc<WriteCounts>,
    /// SQLite's writer thread, through which runs and their histories are written (a file
    /// database; an in-memory one has no second connection to the same data).
    writer: Option<Arc<SqliteWriter>>,
    /// SQLite's reader thread, through which followers replay events (a file database).
    reader: Option<Arc<SqliteReader>>,
}

/// The statements and commits a store has run to write runs' rows and histories since it
/// opened: new runs, history batches ([`Store::append`]) and ends ([`Store::finish_run`]).
/// Reads, registries, leases and retention are not counted. The figures a run's write cost
/// is held to (`orca_store_statements_total`, `orca_store_commits_total`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Writes {
    pub statements: u64,
    pub commits: u64,
}

#[derive(Debug, Default)]
struct WriteCounts {
    statements: std::sync::atomic::AtomicU64,
    commits: std::sync::atomic::AtomicU64,
}

impl Store {
    /// Opens (creating if needed) the database and applies pending migrations.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Store> {
        let (busy, lease) = (Duration::from_secs(5), Duration::from_secs(15));
        Store::connect_with(url, max_connections, busy, lease).await
    }

    /// [`Self::connect`], with how long a statement waits for another writer's lock before
    /// it fails (SQLite's busy timeout, Postgres's `lock_timeout`), and the length of run
    /// leases. On PostgreSQL a session left idle inside a transaction for a lease's length
    /// is ended by the server (`idle_in_transaction_session_timeout`): a replica frozen
    /// mid-transaction (a stop-the-world pause, SIGSTOP) would otherwise hold its row locks,
    /// and the runs they lock could not be taken over (claims skip locked rows) until it woke.
    pub async fn connect_with(
        url: &str,
        max_connections: u32,
        busy_timeout: Duration,
        lease_ttl: Duration,
    ) -> Result<Store> {
        sqlx::any::install_default_drivers();
        let backend = Backend::of_url(url).ok_or_else(|| {
            Error::Db(sqlx::Error::Configuration(
                "the database URL must start with sqlite: or postgres://".into(),
            ))
        })?;
        let ms = busy_timeout.as_millis();
        let lease_ms = lease_ttl.as_millis();
        let pool = match backend {
            Backend::Sqlite => {
                // The file is created and put in WAL mode (a property of the file) once, with
                // the SQLite driver's own options; every pooled connection then sets what is
                // per connection.
                let first = SqliteConnectOptions::from_str(url)?
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .connect()
                    .await?;
                first.close().await?;
                sqlite_pool(url, max_connections, busy_timeout).await?
            }
            Backend::Postgres => {
                // One connection first, so an unreachable server or a refused login fails the
                // start at once with the server's own reason, not a pool's time-out later.
                let options = sqlx::postgres::PgConnectOptions::from_str(url)?;
                let mut first = tokio::time::timeout(Duration::from_secs(10), options.connect())
                    .await
                    .map_err(|_| sqlx::Error::PoolTimedOut)??;
                // Migrations take an advisory lock, so replicas starting together apply them
                // once. On this connection, without the pool's `lock_timeout`: a replica waits
                // for another's migration however short its lock wait is set.
                POSTGRES_MIGRATIONS.run(&mut first).await?;
                first.close().await?;
                AnyPoolOptions::new()
                    .max_connections(max_connections)
                    .after_connect(move |conn, _| {
                        Box::pin(async move {
                            conn.execute(AssertSqlSafe(format!("SET lock_timeout = {ms}")))
                                .await?;
                            conn.execute(AssertSqlSafe(format!(
                                "SET idle_in_transaction_session_timeout = {lease_ms}"
                            )))
                            .await?;
                            Ok(())
                        })
                    })
                    .connect(url)
                    .await?
            }
        };
        let (mut writer, mut reader) = (None, None);
        let schema = match backend {
            Backend::Sqlite => {
                SQLITE_MIGRATIONS.run(&pool).await?;
                let options = SqliteConnectOptions::from_str(url)?;
                let file = options.get_filename();
                if file != std::path::Path::new(":memory:") && !url.contains("mode=memory") {
                    writer = Some(Arc::new(SqliteWriter::start(file, busy_timeout)?));
                    reader = Some(Arc::new(SqliteReader::start(file, busy_timeout)?));
                }
                "main".to_owned()
            }
            Backend::Postgres => {
                sqlx::query_scalar("SELECT CAST(current_schema() AS TEXT)")
                    .fetch_one(&pool)
                    .await?
            }
        };
        let store = Store {
            pool: Arc::new(RwLock::new(pool)),
            url: url.into(),
            max_connections,
            busy_timeout,
            troubled: Default::default(),
            backend,
            replica: uuid::Uuid::now_v7().simple().to_string().into(),
            lease_ttl,
            channels: cluster::Channels::for_schema(&schema).into(),
            writes: Default::default(),
            writer,
            reader,
        };
        store.backfill_versions().await?;
        Ok(store)
    }

    /// The connection pool now.
    fn pool(&self) -> AnyPool {
        self.pool.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// What this store has written of runs since it opened.
    pub fn writes(&self) -> Writes {
        use std::sync::atomic::Ordering::Relaxed;
        Writes {
            statements: self.writes.statements.load(Relaxed),
            commits: self.writes.commits.load(Relaxed),
        }
    }

    /// Counts one committed transaction of `statements` statements.
    fn committed(&self, statements: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        self.writes.statements.fetch_add(statements as u64, Relaxed);
        self.writes.commits.fetch_add(1, Relaxed);
    }

    /// After an outage (a full disk, an I/O error), opens fresh connections for everything
    /// that follows and closes the old ones as they come back. On SQLite a connection that
    /// lived through an I/O error can be left inside a read snapshot of before the outage:
    /// it then reads old rows and every write through it fails "database is locked". On
    /// PostgreSQL the server ends failed sessions itself; nothing to do.
    pub async fn renew_connections(&self) -> Result<()> {
        if self.backend != Backend::Sqlite {
            return Ok(());
        }
        let fresh = sqlite_pool(&self.url, self.max_connections, self.busy_timeout).await?;
        let old = std::mem::replace(
            &mut *self.pool.write().unwrap_or_else(|p| p.into_inner()),
            fresh,
        );
        // Closing marks the old pool closed at once: connections still lent out are closed
        // when they come back. Waiting for them is not needed.
        let _ = tokio::time::timeout(Duration::from_secs(1), old.close()).await;
        Ok(())
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// This process's lease owner id.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// Whether other processes may share the database, so that leases are checked on every
    /// write of a run's history (Postgres). One SQLite file has one process.
    pub fn shared(&self) -> bool {
        self.backend == Backend::Postgres
    }

    /// Applies migrations only (for `orca migrate`).
    pub async fn migrate(url: &str) -> Result<()> {
        Store::connect(url, 1).await.map(|_| ())
    }

    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool()).await?;
        Ok(())
    }

    /// Writes one small row: whether the store takes writes now (`GET /readyz`).
    pub async fn probe_write(&self) -> Result<()> {
        let written = sqlx::query(
            "INSERT INTO readiness (id, checked_at) VALUES (1, $1)
             ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at",
        )
        .bind(fmt_time(Utc::now()))
        .execute(&self.pool())
        .await;
        self.after_write(written.map(|_| ()).map_err(Into::into))
            .await
    }

    /// Notes how a write went: after a failure, the first success opens fresh connections
    /// ([`Store::renew_connections`]) so none that lived through the failure is used again.
    async fn after_write<T>(&self, result: Result<T>) -> Result<T> {
        match result {
            Ok(v) => {
                if self
                    .troubled
                    .swap(false, std::sync::atomic::Ordering::SeqCst)
                    && let Err(e) = self.renew_connections().await
                {
                    tracing::warn!(error = ?e, "opening fresh connections to the store failed");
                    self.troubled
                        .store(true, std::sync::atomic::Ordering::SeqCst);
                }
                Ok(v)
            }
            Err(e) => {
                self.troubled
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                Err(e)
            }
        }
    }

    pub async fn close(&self) {
        self.pool().close().await;
    }

    // ---- runs ---------------------------------------------------------------------------

    /// Inserts a new run, or returns the tenant's earlier run with the same idempotency key.
    /// The run is inserted only if it fits `guards` (its session idle, its tenant's quota),
    /// checked by the insert itself; `history` is written with it (a fork's start).
    pub async fn insert_run(
        &self,
        tenant: &Tenant,
        run: &Run,
        spec: &RunSpec,
        idempotency: Option<Idempotency<'_>>,
        guards: Guards<'_>,
        history: &[Record],
    ) -> Result<Inserted> {
        // What a fork starts from (its plans, checkpoint and the attempts it keeps) is
        // written with its row, or not at all; its size counts against the tenant's quota.
        let copied = statement::batch(history);
        let fork_bytes = spec
            .fork
            .as_ref()
            .map(|_| copied.iter().map(Statement::bytes).sum::<u64>());
        let fork_limit = guards.quota.fork_bytes_per_day;
        if let Some(bytes) = fork_bytes.filter(|&b| fork_limit > 0 && b > fork_limit) {
            return Ok(Inserted::ForkTooLarge {
                bytes,
                limit: fork_limit,
            });
        }
        let now = self.backend.now_ms_sql();
        let values = format!(
            "$1, $2, $3, NULL, $4, $5, $6, $7, NULL, NULL, $8, $9, $10, $11, $12, $13,
                $14, {now} + $15, $16, $17"
        );
        let guard = guards.sql(self.backend, tenant, 18, run.created_at, fork_bytes);
        let rows = match guard.conditions.is_empty() {
            true => format!("VALUES ({values})"),
            false => format!("SELECT {values} WHERE {}", guard.conditions.join(" AND ")),
        };
        let sql = format!(
            "INSERT INTO runs (id, tenant, status, completion, orchestration, selection, spec,
                input, output, error, metadata, session_id, plan_version, idempotency_key,
                idempotency_hash, created_at, owner, lease_expires_at, parent_run_id, user_id)
             {rows} ON CONFLICT DO NOTHING"
        );
        let mut params: Vec<Param> = vec![
            run.id.to_string().into(),
            tenant.0.as_str().into(),
            run.status.as_str().into(),
            run.orchestration.as_str().into(),
            run.selected.as_ref().map(to_json).into(),
            to_json(spec).into(),
            to_json(&run.input).into(),
            to_json(&run.metadata).into(),
            run.session_id.as_deref().into(),
            run.plan_version.map(i64::from).into(),
            idempotency.map(|i| i.key).into(),
            // Written with the row, so a concurrent request with the same key that finds this
            // row also finds the fingerprint it must match.
            idempotency.map(|i| i.fingerprint).into(),
            fmt_time(run.created_at).into(),
            // Leased to this replica, which starts its task.
            (*self.replica).into(),
            self.lease_ttl_ms().into(),
            spec.fork.as_ref().map(|f| f.run_id.to_string()).into(),
            run.user_id.as_deref().into(),
        ];
        params.extend(guard.params);
        // PostgreSQL checks a guard without locking what is not there yet: two inserts for
        // one session, or one tenant's quota, wait for each other on a lock of its own.
        let mut statements = guard.locks;
        let inserted_at = statements.len();
        statements.push(Statement {
            text: statement::Text::One(sql),
            params,
        });
        if let Some(url) = &spec.request.webhook {
            statements.push(webhooks::enqueue(tenant, run.id, url, run.created_at));
        }
        if let Some(bytes) = fork_bytes {
            // The row's insert made its ledger row (a trigger); none if it was not inserted.
            statements.push(Statement {
                text: statement::Text::One(
                    "UPDATE usage_ledger SET fork = 1, fork_bytes = $2 WHERE run = $1".into(),
                ),
                params: vec![run.id.to_string().into(), (bytes as i64).into()],
            });
        }
        statements.extend(copied);
        let changed = self.write_all(statements).await?;
        self.committed(1);
        if changed.get(inserted_at) == Some(&1) {
            return Ok(Inserted::New);
        }
        if !history.is_empty() {
            // The row was not inserted, so what was written with it belongs to no run: the
            // id is new, and nothing else holds rows under it.
            self.delete_runs(&[run.id]).await?;
        }
        self.why_not_inserted(tenant, idempotency, guards, run.created_at, fork_bytes)
            .await
    }

    /// Why a new run's row was not inserted: its idempotency key made a run before, its
    /// session has one in progress, or its tenant is at a quota.
    async fn why_not_inserted(
        &self,
        tenant: &Tenant,
        idempotency: Option<Idempotency<'_>>,
        guards: Guards<'_>,
        now: DateTime<Utc>,
        fork_bytes: Option<u64>,
    ) -> Result<Inserted> {
        if let Some(key) = idempotency.map(|i| i.key) {
            let row = sqlx::query("SELECT * FROM runs WHERE tenant = $1 AND idempotency_key = $2")
                .bind(&tenant.0)
                .bind(key)
                .fetch_optional(&self.pool())
                .await?;
            if let Some(row) = row {
                return Ok(Inserted::Existing(Box::new(stored_run_from_row(&row)?)));
            }
        }
        if let Some(session) = guards.session.or(guards.session_idle)
            && self.session_deleted(tenant, session).await?
        {
            return Ok(Inserted::SessionDeleted);
        }
        if let Some(session) = guards.session
            && self
                .session_user(tenant, session)
                .await?
                .is_some_and(|u| u.as_deref() != guards.user)
        {
            return Ok(Inserted::SessionOfAnotherUser);
        }
        if let Some(session) = guards.session_idle
            && !self
                .session_unfinished(tenant, session, None)
                .await?
                .is_empty()
        {
            return Ok(Inserted::SessionBusy);
        }
        if let Some(user) = guards.user.filter(|_| guards.user_quota.limits_anything()) {
            let usage = self.user_usage(tenant, user, now).await?;
            let exceeded = Exceeded::of_user(&guards.user_quota, &usage, crate::domain::now());
            if let Some(exceeded) = exceeded {
                return Ok(Inserted::QuotaExceeded(exceeded));
            }
        }
        let q = &guards.quota;
        let fork = fork_bytes.filter(|_| q.limits_forks());
        if q.limits_anything() || fork.is_some() {
            let usage = self.tenant_usage(tenant, now).await?;
            let at = crate::domain::now();
            let exceeded = Exceeded::of(q, &usage, at)
                .or_else(|| fork.and_then(|bytes| Exceeded::of_fork(q, &usage, bytes, at)));
            // Freed since the insert looked: the caller may try again at once.
            return Ok(Inserted::QuotaExceeded(exceeded.unwrap_or(Exceeded {
                quota: "running_runs",
                limit: q.running_runs,
                used: usage.running_runs,
                asked: 1,
                retry_after_secs: 1,
            })));
        }
        if guards.session_idle.is_some() {
            // Its session's run ended since the insert looked.
            return Ok(Inserted::SessionBusy);
        }
        Err(Error::Corrupt(match idempotency {
            Some(_) => "an idempotency key conflict with no run".into(),
            None => "run id collision".into(),
        }))
    }

    /// The fingerprint ([`RunSpec::fingerprint`]) of the request that created a run under an
    /// idempotency key; None for a run created without a key. Runs stored before fingerprints
    /// were kept answer with their stored spec's.
    pub async fn idempotency_fingerprint(
        &self,
        tenant: &Tenant,
        id: RunId,
    ) -> Result<Option<String>> {
        let row = sqlx::query(
            "SELECT idempotency_key, idempotency_hash, spec FROM runs WHERE id = $1 AND tenant = $2",
        )
        .bind(id.to_string())
        .bind(&tenant.0)
        .fetch_optional(&self.pool())
        .await?;
        let Some(row) = row else { return Ok(None) };
        if row
            .try_get::<Option<String>, _>("idempotency_key")?
            .is_none()
        {
            return Ok(None);
        }
        if let Some(hash) = row.try_get::<Option<String>, _>("idempotency_hash")? {
            return Ok(Some(hash));
        }
        let spec: RunSpec = serde_json::from_str(&row.try_get::<String, _>("spec")?)
            .map_err(|e| Error::Corrupt(format!("spec: {e}")))?;
        Ok(Some(spec.fingerprint()))
    }

    pub async fn get_run(&self, tenant: &Tenant, id: RunId) -> Result<Option<StoredRun>> {
        let row = sqlx::query("SELECT * FROM runs WHERE id = $1 AND tenant = $2")
            .bind(id.to_string())
            .bind(&tenant.0)
            .fetch_optional(&self.pool())
            .await?;
        row.as_ref().map(stored_run_from_row).transpose()
    }

    /// Writes every mutable field of a run (status, output, usage, times...).
    pub async fn save_run(&self, run: &Run) -> Result<()> {
        self.write_all(vec![statement::save_row(&RowWrite::whole(run))])
            .await
            .map(drop)
    }

    pub async fn list_runs(&self, tenant: &Tenant, f: &RunFilter) -> Result<Vec<Run>> {
        // Only static fragments and numbered placeholders are concatenated; every value is a
        // bind parameter, bound in the order its number was given.
        let mut sql = String::from("SELECT * FROM runs WHERE tenant = $1");
        let mut n = 1;
        let mut param = || {
            n += 1;
            format!("${n}")
        };
        if f.status.is_some() {
            sql.push_str(&format!(" AND status = {}", param()));
        }
        if f.orchestration.is_some() {
            sql.push_str(&format!(" AND orchestration = {}", param()));
        }
        if f.created_after.is_some() {
            sql.push_str(&format!(" AND created_at > {}", param()));
        }
        if f.created_before.is_some() {
            sql.push_str(&format!(" AND created_at < {}", param()));
        }
        for _ in &f.metadata {
            let (key, value) = (param(), param());
            sql.push_str(&metadata_matches(self.backend, &key, &value));
        }
        if f.text.is_some() {
            sql.push_str(&input_contains(self.backend, &param()));
        }
        if f.parent.is_some() {
            sql.push_str(&format!(" AND parent_run_id = {}", param()));
        }
        if f.session_id.is_some() {
            sql.push_str(&format!(" AND session_id = {}", param()));
        }
        if f.user_id.is_some() {
            sql.push_str(&format!(" AND user_id = {}", param()));
        }
        if f.completion.is_some() {
            sql.push_str(&format!(" AND completion = {}", param()));
        }
        if f.before_id.is_some() {
            sql.push_str(&format!(" AND id < {}", param()));
        }
        sql.push_str(&format!(" ORDER BY id DESC LIMIT {}", param()));
        let mut q = sqlx::query(AssertSqlSafe(sql)).bind(&tenant.0);
        if let Some(s) = f.status {
            q = q.bind(s.as_str());
        }
        if let Some(o) = f.orchestration {
            q = q.bind(o.as_str());
        }
        if let Some(t) = f.created_after {
            q = q.bind(fmt_time(t));
        }
        if let Some(t) = f.created_before {
            q = q.bind(fmt_time(t));
        }
        for (key, value) in &f.metadata {
            let key = match self.backend {
                Backend::Sqlite => format!("$.\"{}\"", key.replace('"', "\\\"")),
                Backend::Postgres => key.clone(),
            };
            q = q.bind(key).bind(value.clone());
        }
        if let Some(text) = &f.text {
            q = q.bind(like_pattern(text));
        }
        if let Some(id) = f.parent {
            q = q.bind(id.to_string());
        }
        if let Some(session) = &f.session_id {
            q = q.bind(session.clone());
        }
        if let Some(user) = &f.user_id {
            q = q.bind(user.clone());
        }
        if let Some(c) = f.completion {
            q = q.bind(c.as_str());
        }
        if let Some(id) = f.before_id {
            q = q.bind(id.to_string());
        }
        q = q.bind(f.limit as i64);
        let rows = q.fetch_all(&self.pool()).await?;
        rows.iter()
            .map(|r| stored_run_from_row(r).map(|s| s.run))
            .collect()
    }

    pub async fn count_runs_by_status(&self) -> Result<Vec<(String, i64)>> {
        let rows = sqlx::query("SELECT status, COUNT(*) AS n FROM runs GROUP BY status")
            .fetch_all(&self.pool())
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("status")?, r.try_get("n")?)))
            .collect()
    }

    // ---- events -------------------------------------------------------------------------

    /// Appends events in one transaction.
    pub async fn append_events(&self, events: &[std::sync::Arc<Event>]) -> Result<()> {
        let events: Vec<&Event> = events.iter().map(|e| &**e).collect();
        self.write_all(vec![statement::insert_events(&events)])
            .await
            .map(drop)
    }

    /// Runs `statements` in one transaction, on SQLite's writer thread when there is one; the
    /// rows each changed. One statement alone needs no transaction around it (PostgreSQL).
    async fn write_all(&self, statements: Vec<Statement>) -> Result<Vec<u64>> {
        if let Some(writer) = &self.writer {
            let changed = writer.write(statements).await?;
            return Ok(changed.into_iter().map(|n| n as u64).collect());
        }
        if let [_] = &statements[..] {
            let st = statements.into_iter().next().expect("one statement");
            return Ok(vec![st.execute(&self.pool()).await?]);
        }
        let mut tx = self.pool().begin().await?;
        let mut changed = Vec::with_capacity(statements.len());
        for st in statements {
            changed.push(st.execute(&mut *tx).await?);
        }
        tx.commit().await?;
        Ok(changed)
    }

    /// Writes a batch of history records (events, step attempts, checkpoints, plans, run
    /// states) in one transaction, in order.
    ///
    /// On a shared database only the records of runs this replica still leases are written:
    /// the leases are read `FOR SHARE` first, so no takeover can slip in before the commit,
    /// and what a replica that lost a lease still had queued is dropped instead of colliding
    /// with the new owner's. Returns the runs whose records were dropped so.
    pub async fn append(&self, records: &[Record]) -> Result<HashSet<RunId>> {
        let written = self.append_once(records).await;
        self.after_write(written).await
    }

    async fn append_once(&self, records: &[Record]) -> Result<HashSet<RunId>> {
        if !self.shared() {
            let statements = statement::batch(records);
            let n = statements.len();
            self.write_all(statements).await?;
            self.committed(n);
            return Ok(HashSet::new());
        }
        let mut tx = self.pool().begin().await?;
        let runs: Vec<RunId> = records.iter().map(Record::run_id).collect();
        let held = cluster::held_for_write(&mut tx, &self.replica, &runs).await?;
        let lost: HashSet<RunId> = runs.into_iter().filter(|r| !held.contains(r)).collect();
        let fenced: Vec<Record>;
        let records = if lost.is_empty() {
            records
        } else {
            fenced = records
                .iter()
                .filter(|r| held.contains(&r.run_id()))
                .cloned()
                .collect();
            &fenced[..]
        };
        let statements = statement::batch(records);
        // The leases' read, and every statement this batch runs, for `writes`.
        let mut count = 1 + statements.len();
        for st in statements {
            st.execute(&mut *tx).await?;
        }
        let events: Vec<&Event> = records
            .iter()
            .filter_map(Record::event)
            .map(|e| &**e)
            .collect();
        count += cluster::announce_events(&mut tx, self, &events).await?;
        tx.commit().await?;
        self.committed(count);
        Ok(lost)
    }

    /// Writes the terminal run row and its `final` event atomically. On a shared database,
    /// only while this replica holds the run's lease ([`Error::LeaseLost`] otherwise); the
    /// lease ends with the run.
    pub async fn finish_run(&self, run: &Run, final_event: &Event) -> Result<()> {
        let statements = vec![
            statement::insert_events(&[final_event]),
            statement::save_row(&RowWrite::whole(run)),
        ];
        if !self.shared() {
            self.write_all(statements).await?;
            self.committed(2);
            return Ok(());
        }
        let mut tx = self.pool().begin().await?;
        self.fence(&mut tx, run.id).await?;
        for st in statements {
            st.execute(&mut *tx).await?;
        }
        // The fence's read, the two writes, and the notice.
        let count = 3 + cluster::announce_events(&mut tx, self, &[final_event]).await?;
        tx.commit().await?;
        self.committed(count);
        Ok(())
    }

    /// Events with `seq > after`, in order, at most `limit`.
    pub async fn events_after(&self, run: RunId, after: u64, limit: u32) -> Result<Vec<Event>> {
        if let Some(reader) = &self.reader {
            let id = run.to_string();
            let rows = reader
                .read(move |c| {
                    let mut page = c.prepare_cached(
                        "SELECT seq, kind, ts, step_id, data FROM events
                         WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                    )?;
                    let rows = page.query_map((id, seq_bound(after), limit), |r| {
                        Ok(StoredEvent {
                            seq: r.get(0)?,
                            kind: r.get(1)?,
                            ts: r.get(2)?,
                            step: r.get(3)?,
                            data: r.get(4)?,
                        })
                    })?;
                    rows.collect::<rusqlite::Result<Vec<_>>>()
                })
                .await?;
            return rows.into_iter().map(|r| r.into_event(run)).collect();
        }
        let rows = sqlx::query(
            "SELECT * FROM events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(run.to_string())
        .bind(seq_bound(after))
        .bind(limit as i64)
        .fetch_all(&self.pool())
        .await?;
        rows.iter().map(|r| event_from_row(run, r)).collect()
    }

    /// Where a run's event log ends: its status and last seq, read in one statement (so a
    /// terminal status always comes with its `final` event). `None` for an unknown run.
    pub async fn run_tail(&self, run: RunId) -> Result<Option<RunTail>> {
        let row = sqlx::query(
            "SELECT status, (SELECT MAX(seq) FROM events WHERE run_id = runs.id) AS last_seq
             FROM runs WHERE id = $1",
        )
        .bind(run.to_string())
        .fetch_optional(&self.pool())
        .await?;
        let Some(row) = row else { return Ok(None) };
        let status: String = row.try_get("status")?;
        Ok(Some(RunTail {
            status: RunStatus::parse(&status)
                .ok_or_else(|| Error::Corrupt(format!("status `{status}`")))?,
            last_seq: row.try_get::<Option<i64>, _>("last_seq")?.unwrap_or(0) as u64,
        }))
    }

    pub async fn last_seq(&self, run: RunId) -> Result<u64> {
        let n: Option<i64> = sqlx::query_scalar("SELECT MAX(seq) FROM events WHERE run_id = $1")
            .bind(run.to_string())
            .fetch_one(&self.pool())
            .await?;
        Ok(n.unwrap_or(0) as u64)
    }

    // ---- steps --------------------------------------------------------------------------

    pub async fn upsert_step_attempt(&self, run: RunId, a: &StepAttempt) -> Result<()> {
        self.write_all(vec![statement::upsert_attempts(&[(run, a)])])
            .await
            .map(drop)
    }

    pub async fn step_attempts(&self, run: RunId) -> Result<Vec<StepAttempt>> {
        let rows = sqlx::query(
            "SELECT * FROM step_attempts WHERE run_id = $1
             ORDER BY started_at, plan_version, step_id, attempt",
        )
        .bind(run.to_string())
        .fetch_all(&self.pool())
        .await?;
        rows.iter().map(step_attempt_from_row).collect()
    }
}

/// `rows` tuples of `width` placeholders, numbered on from `$first`: `($1, $2), ($3, $4)`.
fn placeholders(first: usize, width: usize, rows: usize) -> String {
    (0..rows)
        .map(|r| {
            let tuple: Vec<String> = (0..width)
                .map(|c| format!("${}", first + r * width + c))
                .collect();
            format!("({})", tuple.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `metadata.KEY=VALUE` filter of [`Store::list_runs`] for parameters `key` (SQLite: a
/// JSON path; Postgres: the key) and `value`: a string equal to the value, or a number or
/// boolean whose JSON text equals it.
fn metadata_matches(backend: Backend, key: &str, value: &str) -> String {
    match backend {
        Backend::Sqlite => format!(
            " AND CASE json_type(metadata, {key})
                 WHEN 'text' THEN json_extract(metadata, {key}) = {value}
                 WHEN 'integer' THEN CAST(json_extract(metadata, {key}) AS TEXT) = {value}
                 WHEN 'real' THEN CAST(json_extract(metadata, {key}) AS TEXT) = {value}
                 WHEN 'true' THEN {value} = 'true'
                 WHEN 'false' THEN {value} = 'false'
                 ELSE 0 END"
        ),
        Backend::Postgres => format!(
            " AND CASE jsonb_typeof(metadata::jsonb -> {key})
                 WHEN 'string' THEN metadata::jsonb ->> {key} = {value}
                 WHEN 'number' THEN metadata::jsonb ->> {key} = {value}
                 WHEN 'boolean' THEN metadata::jsonb ->> {key} = {value}
                 ELSE false END"
        ),
    }
}

/// The `q` filter of [`Store::list_runs`] for the pattern parameter `pattern` (see
/// [`like_pattern`]): a string input is compared as the string it holds (not its JSON text,
/// whose quotes and escapes would get in the way), any other input as its stored JSON text.
fn input_contains(backend: Backend, pattern: &str) -> String {
    match backend {
        Backend::Sqlite => format!(
            " AND (CASE json_type(input) WHEN 'text' THEN json_extract(input, '$') ELSE input END)
                 LIKE {pattern} ESCAPE '\\'"
        ),
        Backend::Postgres => format!(
            " AND (CASE WHEN input LIKE '\"%' THEN input::jsonb #>> '{{}}' ELSE input END)
                 ILIKE {pattern} ESCAPE '\\'"
        ),
    }
}

/// A LIKE pattern matching text that contains `text`, its own `%`, `_` and `\` escaped.
fn like_pattern(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('%');
    out
}

fn stored_run_from_row(r: &AnyRow) -> Result<StoredRun> {
    let id: String = r.try_get("id")?;
    let id = RunId::parse(&id).ok_or_else(|| Error::Corrupt(format!("run id `{id}`")))?;
    let status: String = r.try_get("status")?;
    let status =
        RunStatus::parse(&status).ok_or_else(|| Error::Corrupt(format!("status `{status}`")))?;
    let completion: Option<String> = r.try_get("completion")?;
    let completion = completion
        .map(|c| Completion::parse(&c).ok_or_else(|| Error::Corrupt(format!("completion `{c}`"))))
        .transpose()?;
    let orchestration: String = r.try_get("orchestration")?;
    let orchestration = Orchestration::parse(&orchestration)
        .ok_or_else(|| Error::Corrupt(format!("orchestration `{orchestration}`")))?;
    let metadata = match parse_json(&r.try_get::<String, _>("metadata")?)? {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let spec: RunSpec = serde_json::from_str(&r.try_get::<String, _>("spec")?)
        .map_err(|e| Error::Corrupt(format!("spec: {e}")))?;
    let run = Run {
        id,
        status,
        completion,
        completion_reason: r.try_get("completion_reason")?,
        step_counts: parse_opt_json(r.try_get("step_counts")?)?,
        orchestration,
        selected: parse_opt_json::<Selection>(r.try_get("selection")?)?,
        input: parse_json(&r.try_get::<String, _>("input")?)?,
        output: parse_opt_json(r.try_get("output")?)?,
        error: parse_opt_json::<RunError>(r.try_get("error")?)?,
        metadata,
        session_id: r.try_get("session_id")?,
        user_id: r.try_get("user_id")?,
        schedule: spec.schedule.clone(),
        parent: spec.fork.clone(),
        definitions: spec.definitions.clone(),
        plan_version: r
            .try_get::<Option<i64>, _>("plan_version")?
            .map(|v| v as u32),
        usage: Usage {
            prompt_tokens: r.try_get::<i64, _>("prompt_tokens")? as u64,
            completion_tokens: r.try_get::<i64, _>("completion_tokens")? as u64,
            llm_calls: r.try_get::<i64, _>("llm_calls")? as u64,
            tool_calls: r.try_get::<i64, _>("tool_calls")? as u64,
        },
        created_at: parse_time(&r.try_get::<String, _>("created_at")?)?,
        started_at: parse_opt_time(r.try_get("started_at")?)?,
        finished_at: parse_opt_time(r.try_get("finished_at")?)?,
    };
    let counters = Counters {
        steps: r.try_get::<i64, _>("steps_used")? as u64,
        retries: r.try_get::<i64, _>("retries_used")? as u64,
        time_used_ms: r.try_get::<i64, _>("time_used_ms")? as u64,
    };
    Ok(StoredRun {
        run,
        tenant: Tenant(r.try_get("tenant")?),
        spec,
        counters,
        cancel_requested: r.try_get::<i64, _>("cancel_requested")? != 0,
        pause_requested: r.try_get::<i64, _>("pause_requested")? != 0,
        breakpoints_released: pause::places(&r.try_get::<String, _>("breakpoints_released")?)?,
    })
}

fn event_from_row(run: RunId, r: &AnyRow) -> Result<Event> {
    StoredEvent {
        seq: r.try_get("seq")?,
        kind: r.try_get("kind")?,
        ts: r.try_get("ts")?,
        step: r.try_get("step_id")?,
        data: r.try_get("data")?,
    }
    .into_event(run)
}

/// An `events` row as stored, before it is decoded.
struct StoredEvent {
    seq: i64,
    kind: String,
    ts: String,
    /// The step's whole place: `path/id` for nested work.
    step: Option<String>,
    data: String,
}

impl StoredEvent {
    fn into_event(self, run: RunId) -> Result<Event> {
        let kind = EventKind::parse(&self.kind)
            .ok_or_else(|| Error::Corrupt(format!("kind `{}`", self.kind)))?;
        let data = Payload::decode(kind, parse_json(&self.data)?).map_err(Error::Corrupt)?;
        let step = self.step.map(|s| step_path(&s)).transpose()?;
        let event = Event {
            seq: self.seq as u64,
            run_id: run,
            kind,
            ts: parse_time(&self.ts)?,
            step_id: None,
            path: None,
            data,
        };
        Ok(event.at(step.as_ref()))
    }
}

/// A stored step place, read back.
fn step_path(s: &str) -> Result<StepPath> {
    s.parse()
        .map_err(|e: crate::domain::path::BadPath| Error::Corrupt(e.to_string()))
}

fn step_attempt_from_row(r: &AnyRow) -> Result<StepAttempt> {
    let kind: String = r.try_get("kind")?;
    let status: String = r.try_get("status")?;
    let path: String = r.try_get("path")?;
    Ok(StepAttempt {
        step_id: r.try_get("step_id")?,
        path: (!path.is_empty()).then(|| step_path(&path)).transpose()?,
        name: r.try_get("name")?,
        kind: crate::domain::StepKind::parse(&kind)
            .ok_or_else(|| Error::Corrupt(format!("step kind `{kind}`")))?,
        status: crate::domain::StepStatus::parse(&status)
            .ok_or_else(|| Error::Corrupt(format!("step status `{status}`")))?,
        attempt: r.try_get::<i64, _>("attempt")? as u32,
        plan_version: r.try_get::<i64, _>("plan_version")? as u32,
        input: parse_opt_json(r.try_get("input")?)?,
        output: parse_opt_json(r.try_get("output")?)?,
        error: parse_opt_json(r.try_get("error")?)?,
        started_at: parse_time(&r.try_get::<String, _>("started_at")?)?,
        completed_at: parse_opt_time(r.try_get("completed_at")?)?,
        duration_ms: r
            .try_get::<Option<i64>, _>("duration_ms")?
            .map(|d| d as u64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_urls_name_their_backend_and_lose_their_password_in_logs() {
        assert_eq!(Backend::of_url("sqlite://orca.db"), Some(Backend::Sqlite));
        assert_eq!(Backend::of_url("postgres://h/db"), Some(Backend::Postgres));
        assert_eq!(
            Backend::of_url("postgresql://h/db"),
            Some(Backend::Postgres)
        );
        assert_eq!(Backend::of_url("mysql://h/db"), None);
        assert_eq!(
            redact_url("postgres://orca:s3cret@db:5432/orca"),
            "postgres://orca:***@db:5432/orca"
        );
        assert_eq!(
            redact_url("postgres://orca@db/orca"),
            "postgres://orca@db/orca"
        );
        assert_eq!(redact_url("sqlite://orca.db"), "sqlite://orca.db");
    }

    #[test]
    fn urls_that_do_not_parse_lose_their_password_too() {
        let cases = [
            (
                "postgres://orca:Pw#SECRET@127.0.0.1:5432/orca",
                "postgres://orca:***@127.0.0.1:5432/orca",
            ),
            (
                "postgres://orca:Pw/SECRET@127.0.0.1/orca",
                "postgres://orca:***@127.0.0.1/orca",
            ),
            (
                "postgres://orca:SECRET@127.0.0.1:99999999/orca",
                "postgres://orca:***@127.0.0.1:99999999/orca",
            ),
            (
                "postgres://orca:SECRET@[::1/orca",
                "postgres://orca:***@[::1/orca",
            ),
            (
                "postgres://orca@127.0.0.1/orca?sslmode=require&password=SECRET&x=1",
                "postgres://orca@127.0.0.1/orca?sslmode=require&password=***&x=1",
            ),
            (
                "postgres://127.0.0.1/orca?PassWord=SECRET",
                "postgres://127.0.0.1/orca?PassWord=***",
            ),
            (
                "host=db user=orca password=SECRET dbname=orca",
                "host=db user=orca password=*** dbname=orca",
            ),
            ("postgres://a:b:c@d@host/db", "postgres://a:***@host/db"),
            ("sqlite://pass.db", "sqlite://pass.db"),
        ];
        for (url, want) in cases {
            let got = redact_url(url);
            assert_eq!(got, want, "{url}");
            assert!(!got.contains("SECRET"), "{url}");
        }
    }

    #[test]
    fn placeholders_are_numbered_on_across_rows() {
        assert_eq!(placeholders(1, 2, 2), "($1, $2), ($3, $4)");
        assert_eq!(placeholders(2, 3, 1), "($2, $3, $4)");
    }

    #[test]
    fn like_patterns_take_wildcards_literally() {
        let cases = [
            ("budget", "%budget%"),
            ("100%", "%100\\%%"),
            ("snake_case", "%snake\\_case%"),
            ("a\\b", "%a\\\\b%"),
            ("예산", "%예산%"),
        ];
        for (text, want) in cases {
            assert_eq!(like_pattern(text), want, "{text}");
        }
    }
}
