//! Leases and notices: how replicas sharing one database split the runs between them and tell
//! each other what changed.
//!
//! A run is leased by exactly one replica at a time (`runs.owner`, `runs.lease_expires_at`):
//! the one that created it, or the one that took it over once its lease lapsed (`FOR UPDATE
//! SKIP LOCKED`, so two replicas scanning at once never take the same run). Every write of a
//! run's history first reads its lease `FOR SHARE` ([`held_for_write`]): a replica that lost
//! a lease can no longer write, and a takeover waits for a write in flight to commit. Leases
//! are dated by the database's clock ([`Backend::now_ms_sql`]), never a replica's, so a
//! replica whose clock is off can neither take live runs nor strand its own.
//!
//! Notices are Postgres `NOTIFY`s, sent inside the transaction whose commit they announce:
//! `orca_events.<schema>` (a run has events up to a seq: wakes event streams on the other
//! replicas) and `orca_control.<schema>` (a cancel, an answer or a re-plan request for a run another replica
//! runs; leases handed back). They only wake: the tables stay the truth, and every waiter also
//! looks again on its own from time to time, so a notice lost while a listener reconnects
//! delays something, never loses it. On SQLite (one process) none of this is needed: leases
//! are written but never contended, and no notice is sent.

use std::collections::HashSet;

use sqlx::{AnyConnection, AssertSqlSafe, Row};

use super::{Backend, Error, Record, Result, Store, StoredRun, stored_run_from_row};
use crate::domain::{Event, RunId};

/// The statuses of a run that is not over, as stored.
pub(super) const UNFINISHED: &str = "('queued', 'running', 'waiting_input', 'paused')";
/// The channel of event notices, before its schema.
const EVENTS: &str = "orca_events";
/// The channel of control notices, before its schema.
const CONTROL: &str = "orca_control";
/// Longest channel name Postgres takes (its identifiers' limit).
const MAX_CHANNEL: usize = 63;
/// Longest notice payload we send (Postgres allows just under 8000 bytes).
const MAX_PAYLOAD: usize = 7000;

impl Record {
    /// The run a record belongs to.
    pub fn run_id(&self) -> RunId {
        match self {
            Record::Event(ev) => ev.run_id,
            Record::Attempt(run, _) => *run,
            Record::Checkpoint { run, .. }
            | Record::Plan { run, .. }
            | Record::Counters { run, .. } => *run,
            Record::RunState(run) | Record::End { run, .. } => run.id,
        }
    }

    /// The event a record carries: an event's, or a run end's `final`.
    pub fn event(&self) -> Option<&std::sync::Arc<Event>> {
        match self {
            Record::Event(ev) | Record::End { event: ev, .. } => Some(ev),
            _ => None,
        }
    }
}

/// The notice channels of one deployment, named after the schema its tables are in
/// (`orca_events.public`): deployments sharing a database in different schemas do not hear
/// each other.
#[derive(Debug)]
pub(super) struct Channels {
    events: String,
    control: String,
}

impl Channels {
    pub(super) fn for_schema(schema: &str) -> Channels {
        Channels {
            events: channel(EVENTS, schema),
            control: channel(CONTROL, schema),
        }
    }
}

/// `base.schema`, cut to the length Postgres takes. Two schemas alike up to there share a
/// channel, which costs each only notices about runs it does not know (ignored).
fn channel(base: &str, schema: &str) -> String {
    let mut name = format!("{base}.{schema}");
    if name.len() > MAX_CHANNEL {
        let mut end = MAX_CHANNEL;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
    }
    name
}

/// Which unfinished runs [`Store::claim_runs`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// All of them: one SQLite file has one process, so whatever an earlier process held is
    /// this one's now.
    Every,
    /// Those nobody holds: unowned (handed back), or their lease lapsed.
    Free,
    /// Those, and this replica's own (their tasks stopped while the store was down).
    FreeAndOwn,
}

/// What another replica told this one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// The run's events are stored up to `seq`.
    Events { run: RunId, seq: u64 },
    /// Someone asked for the run to be cancelled.
    Cancel(RunId),
    /// An answer to the run's pending input is stored.
    Input(RunId),
    /// A request for a new plan is stored.
    Replan(RunId),
    /// The run's pause was asked for or lifted (its `pause_requested` says which).
    Pause(RunId),
    /// A replica handed its runs back: unowned runs are waiting to be taken.
    Released,
    /// A worker tool's task changed (ended, or was claimed): whoever waits on it looks again.
    TaskChanged(String),
    /// A task may be ready for a worker: pollers look again.
    TaskQueued,
}

impl Notice {
    fn control_payload(&self) -> Option<String> {
        match self {
            Notice::Cancel(run) => Some(format!("cancel {run}")),
            Notice::Input(run) => Some(format!("input {run}")),
            Notice::Replan(run) => Some(format!("replan {run}")),
            Notice::Pause(run) => Some(format!("pause {run}")),
            Notice::Released => Some("released".into()),
            Notice::TaskChanged(id) => Some(format!("task {id}")),
            Notice::TaskQueued => Some("queued".into()),
            Notice::Events { .. } => None,
        }
    }

    fn parse_control(payload: &str) -> Option<Notice> {
        let (kind, rest) = payload.split_once(' ').unwrap_or((payload, ""));
        let run = RunId::parse(rest);
        match (kind, run) {
            ("task", _) if !rest.is_empty() => Some(Notice::TaskChanged(rest.to_owned())),
            ("queued", _) => Some(Notice::TaskQueued),
            ("cancel", Some(run)) => Some(Notice::Cancel(run)),
            ("input", Some(run)) => Some(Notice::Input(run)),
            ("replan", Some(run)) => Some(Notice::Replan(run)),
            ("pause", Some(run)) => Some(Notice::Pause(run)),
            ("released", _) => Some(Notice::Released),
            _ => None,
        }
    }
}

/// The payloads announcing `events`: `"<replica> <run>:<seq> <run>:<seq> ..."`, the highest
/// seq of each run, split to fit.
fn event_payloads(replica: &str, events: &[&Event]) -> Vec<String> {
    let mut last: Vec<(RunId, u64)> = Vec::new();
    for ev in events {
        match last.iter_mut().find(|(run, _)| *run == ev.run_id) {
            Some(entry) => entry.1 = entry.1.max(ev.seq),
            None => last.push((ev.run_id, ev.seq)),
        }
    }
    let mut payloads = Vec::new();
    let mut current = String::new();
    for (run, seq) in last {
        if current.is_empty() {
            current.push_str(replica);
        }
        current.push_str(&format!(" {run}:{seq}"));
        if current.len() > MAX_PAYLOAD {
            payloads.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        payloads.push(current);
    }
    payloads
}

/// The event notices of a payload, unless it is this replica's own.
fn parse_events(replica: &str, payload: &str) -> Vec<Notice> {
    let mut parts = payload.split(' ');
    if parts.next() == Some(replica) {
        return Vec::new();
    }
    parts
        .filter_map(|p| {
            let (run, seq) = p.split_once(':')?;
            Some(Notice::Events {
                run: RunId::parse(run)?,
                seq: seq.parse().ok()?,
            })
        })
        .collect()
}

/// Of `runs`, those `replica` leases, their rows locked `FOR SHARE` until the transaction
/// ends (Postgres only).
pub(super) async fn held_for_write(
    conn: &mut AnyConnection,
    replica: &str,
    runs: &[RunId],
) -> Result<HashSet<RunId>> {
    let mut ids: Vec<String> = runs.iter().map(RunId::to_string).collect();
    ids.sort();
    ids.dedup();
    if ids.is_empty() {
        return Ok(HashSet::new());
    }
    // Only numbered placeholders are added; the ids are bound. Sorted, so two writers lock
    // rows in the same order.
    let list: Vec<String> = (2..ids.len() + 2).map(|n| format!("${n}")).collect();
    let sql = format!(
        "SELECT id FROM runs WHERE owner = $1 AND id IN ({}) ORDER BY id FOR SHARE",
        list.join(", ")
    );
    let mut q = sqlx::query_scalar::<_, String>(AssertSqlSafe(sql)).bind(replica);
    for id in &ids {
        q = q.bind(id.clone());
    }
    let held = q.fetch_all(&mut *conn).await?;
    Ok(held.iter().filter_map(|id| RunId::parse(id)).collect())
}

/// Announces `events` to the other replicas when the transaction commits. Returns the number
/// of statements that took.
pub(super) async fn announce_events(
    conn: &mut AnyConnection,
    store: &Store,
    events: &[&Event],
) -> Result<usize> {
    let mut statements = 0;
    for payload in event_payloads(&store.replica, events) {
        statements += 1;
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(&store.channels.events)
            .bind(payload)
            .execute(&mut *conn)
            .await?;
    }
    Ok(statements)
}

impl Store {
    /// How long a lease lasts, in milliseconds: added to the database's clock
    /// ([`Backend::now_ms_sql`]) when a lease is taken or renewed.
    pub(super) fn lease_ttl_ms(&self) -> i64 {
        i64::try_from(self.lease_ttl.as_millis()).unwrap_or(i64::MAX / 2)
    }

    /// On a shared database, fails with [`Error::LeaseLost`] unless this replica leases `run`,
    /// whose row then stays locked `FOR SHARE` until `conn`'s transaction ends: a write of the
    /// run's in that transaction cannot race a takeover.
    pub(super) async fn fence(&self, conn: &mut AnyConnection, run: RunId) -> Result<()> {
        if self.shared()
            && held_for_write(conn, &self.replica, &[run])
                .await?
                .is_empty()
        {
            return Err(Error::LeaseLost);
        }
        Ok(())
    }

    /// Renews every lease this replica holds on an unfinished run. Returns those runs, each
    /// with whether a cancel was asked for it through another replica; a run this replica
    /// runs but that is missing here was taken over (or ended).
    pub async fn renew_leases(&self) -> Result<Vec<(RunId, bool)>> {
        let now = self.backend.now_ms_sql();
        let sql = format!(
            "UPDATE runs SET lease_expires_at = {now} + $2
             WHERE id IN ({})
             RETURNING id, cancel_requested",
            self.own_runs_in_id_order(&format!("status IN {UNFINISHED}"))
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(&*self.replica)
            .bind(self.lease_ttl_ms())
            .fetch_all(&self.pool())
            .await?;
        rows.iter()
            .map(|r| {
                let id: String = r.try_get("id")?;
                let id =
                    RunId::parse(&id).ok_or_else(|| Error::Corrupt(format!("run id `{id}`")))?;
                Ok((id, r.try_get::<i64, _>("cancel_requested")? != 0))
            })
            .collect()
    }

    /// A subquery: the runs this replica (`$1`) leases that match `filter`, their rows locked
    /// in id order on Postgres. Every statement that locks several runs' rows and may wait
    /// locks them in that order ([`held_for_write`] does too), so two of them wait for each
    /// other at worst, never deadlock; an `UPDATE` on its own locks rows in the order it
    /// happens to find them.
    fn own_runs_in_id_order(&self, filter: &str) -> String {
        let lock = match self.backend {
            Backend::Postgres => "FOR UPDATE",
            Backend::Sqlite => "",
        };
        format!("SELECT id FROM runs WHERE owner = $1 AND {filter} ORDER BY id {lock}")
    }

    /// Leases unfinished runs to this replica and returns them, oldest first (at most `limit`
    /// unless [`Claim::Every`]).
    pub async fn claim_runs(&self, claim: Claim, limit: u32) -> Result<Vec<StoredRun>> {
        let every = claim == Claim::Every;
        let own = if claim == Claim::FreeAndOwn {
            "OR owner = $1"
        } else {
            ""
        };
        let now = self.backend.now_ms_sql();
        let sql = if every {
            format!(
                "UPDATE runs SET owner = $1, lease_expires_at = {now} + $2
                 WHERE status IN {UNFINISHED}
                 RETURNING *"
            )
        } else {
            let skip_locked = match self.backend {
                Backend::Postgres => "FOR UPDATE SKIP LOCKED",
                Backend::Sqlite => "",
            };
            format!(
                "UPDATE runs SET owner = $1, lease_expires_at = {now} + $2
                 WHERE id IN (
                    SELECT id FROM runs
                    WHERE status IN {UNFINISHED}
                      AND (owner IS NULL OR lease_expires_at < {now} {own})
                    ORDER BY id LIMIT $3 {skip_locked})
                 RETURNING *"
            )
        };
        let mut q = sqlx::query(AssertSqlSafe(sql))
            .bind(&*self.replica)
            .bind(self.lease_ttl_ms());
        if !every {
            q = q.bind(i64::from(limit));
        }
        let rows = q.fetch_all(&self.pool()).await?;
        let mut runs = rows
            .iter()
            .map(stored_run_from_row)
            .collect::<Result<Vec<_>>>()?;
        runs.sort_by_key(|r| r.run.id.to_string());
        Ok(runs)
    }

    /// Leases one unfinished run to this replica if nobody else holds it; true when it is
    /// this replica's now.
    pub async fn claim_run(&self, id: RunId) -> Result<bool> {
        let now = self.backend.now_ms_sql();
        let sql = format!(
            "UPDATE runs SET owner = $1, lease_expires_at = {now} + $2
             WHERE id = $3 AND status IN {UNFINISHED}
               AND (owner IS NULL OR owner = $1 OR lease_expires_at < {now})"
        );
        let res = sqlx::query(AssertSqlSafe(sql))
            .bind(&*self.replica)
            .bind(self.lease_ttl_ms())
            .bind(id.to_string())
            .execute(&self.pool())
            .await?;
        Ok(res.rows_affected() == 1)
    }

    /// Hands every lease of this replica back (on its way out) and tells the others, who
    /// take the runs at once instead of after the lease would have lapsed.
    pub async fn release_leases(&self) -> Result<u64> {
        let sql = format!(
            "UPDATE runs SET owner = NULL, lease_expires_at = 0 WHERE id IN ({})",
            self.own_runs_in_id_order("TRUE")
        );
        let res = sqlx::query(AssertSqlSafe(sql))
            .bind(&*self.replica)
            .execute(&self.pool())
            .await?;
        if res.rows_affected() > 0 {
            self.notify(&Notice::Released).await?;
        }
        Ok(res.rows_affected())
    }

    /// Hands these runs back if this replica holds them (claimed, then not started).
    pub async fn release_runs(&self, ids: &[RunId]) -> Result<()> {
        for id in ids {
            sqlx::query(
                "UPDATE runs SET owner = NULL, lease_expires_at = 0 WHERE id = $1 AND owner = $2",
            )
            .bind(id.to_string())
            .bind(&*self.replica)
            .execute(&self.pool())
            .await?;
        }
        Ok(())
    }

    /// Records a cancel for whichever replica runs the run, now or after a takeover.
    pub async fn request_cancel(&self, id: RunId) -> Result<()> {
        sqlx::query("UPDATE runs SET cancel_requested = 1 WHERE id = $1")
            .bind(id.to_string())
            .execute(&self.pool())
            .await?;
        Ok(())
    }

    /// Whether the run is to pause, as recorded; `None` for a run that is not stored.
    pub async fn pause_requested(&self, id: RunId) -> Result<Option<bool>> {
        let value: Option<i64> =
            sqlx::query_scalar("SELECT pause_requested FROM runs WHERE id = $1")
                .bind(id.to_string())
                .fetch_optional(&self.pool())
                .await?;
        Ok(value.map(|v| v != 0))
    }

    /// Sends a control notice to the other replicas (nothing on SQLite).
    pub async fn notify(&self, notice: &Notice) -> Result<()> {
        let Some(payload) = notice.control_payload() else {
            return Ok(());
        };
        if self.shared() {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(&self.channels.control)
                .bind(payload)
                .execute(&self.pool())
                .await?;
        }
        Ok(())
    }
}

/// The notices other replicas send, on a connection of its own.
pub struct Listener {
    inner: sqlx::postgres::PgListener,
    replica: String,
    channels: std::sync::Arc<Channels>,
}

/// Listens to the other replicas' notices (Postgres only; None on SQLite).
pub async fn listen(url: &str, store: &Store) -> Result<Option<Listener>> {
    if !store.shared() {
        return Ok(None);
    }
    let mut inner = sqlx::postgres::PgListener::connect(url).await?;
    let channels = store.channels.clone();
    inner
        .listen_all([channels.events.as_str(), channels.control.as_str()])
        .await?;
    Ok(Some(Listener {
        inner,
        replica: store.replica.to_string(),
        channels,
    }))
}

impl Listener {
    /// The next notices. After a lost connection it reconnects; what was sent meanwhile is
    /// lost, which the callers' own periodic looks make up for.
    pub async fn next(&mut self) -> Result<Vec<Notice>> {
        let n = self.inner.recv().await?;
        let channel = n.channel();
        Ok(if channel == self.channels.events {
            parse_events(&self.replica, n.payload())
        } else if channel == self.channels.control {
            Notice::parse_control(n.payload()).into_iter().collect()
        } else {
            Vec::new()
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn event(run: RunId, seq: u64) -> Arc<Event> {
        Arc::new(Event {
            seq,
            run_id: run,
            kind: crate::domain::EventKind::Status,
            ts: chrono::Utc::now(),
            step_id: None,
            path: None,
            data: crate::domain::Payload::status(crate::domain::RunStatus::Running),
        })
    }

    #[test]
    fn event_payloads_carry_each_runs_last_seq_and_skip_our_own() {
        let (a, b) = (RunId::new(), RunId::new());
        let evs = [event(a, 1), event(b, 7), event(a, 3)];
        let refs: Vec<&Event> = evs.iter().map(|e| &**e).collect();
        let payloads = event_payloads("r1", &refs);
        assert_eq!(payloads, vec![format!("r1 {a}:3 {b}:7")]);
        assert_eq!(
            parse_events("r2", &payloads[0]),
            vec![
                Notice::Events { run: a, seq: 3 },
                Notice::Events { run: b, seq: 7 }
            ]
        );
        assert!(parse_events("r1", &payloads[0]).is_empty());
    }

    #[test]
    fn many_runs_split_into_payloads_postgres_accepts() {
        let evs: Vec<Arc<Event>> = (0..400).map(|_| event(RunId::new(), 1)).collect();
        let refs: Vec<&Event> = evs.iter().map(|e| &**e).collect();
        let payloads = event_payloads("r1", &refs);
        assert!(payloads.len() > 1);
        assert!(
            payloads
                .iter()
                .all(|p| p.len() < 8000 && p.starts_with("r1 "))
        );
        let runs: usize = payloads.iter().map(|p| parse_events("r2", p).len()).sum();
        assert_eq!(runs, 400);
    }

    #[test]
    fn channels_are_named_after_the_schema_and_fit_postgres() {
        let short = Channels::for_schema("public");
        assert_eq!(short.events, "orca_events.public");
        assert_eq!(short.control, "orca_control.public");
        let long = Channels::for_schema(&"é".repeat(40));
        assert!(long.events.len() <= MAX_CHANNEL && long.control.len() <= MAX_CHANNEL);
        assert!(long.control.starts_with("orca_control.é"));
        assert_ne!(long.events, long.control);
    }

    #[tokio::test]
    async fn leases_are_dated_by_the_databases_clock() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("orca.db").display());
        let store = Store::connect(&url, 1).await.unwrap();
        let db_now = || async {
            let sql = format!("SELECT {}", Backend::Sqlite.now_ms_sql());
            sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql))
                .fetch_one(&store.pool())
                .await
                .unwrap()
        };
        let real = chrono::Utc::now().timestamp_millis();
        let read = db_now().await;
        assert!((read - real).abs() < 5_000, "{read} vs {real}");
        let ttl = store.lease_ttl_ms();
        assert_eq!(ttl, 15_000);
        // A lease taken now lapses a lease from the database's now.
        let before = db_now().await;
        // A run of a replica that is gone, its lease lapsed a moment ago.
        sqlx::query(
            r#"INSERT INTO runs (id, tenant, status, orchestration, spec, input, metadata,
                created_at, owner, lease_expires_at)
             VALUES ($1, 't', 'running', 'fixed', '{"input": "x", "orchestration": "fixed"}',
                '"x"', '{}', '2026-01-01T00:00:00Z', 'gone', $2)"#,
        )
        .bind(RunId::new().to_string())
        .bind(before - 1)
        .execute(&store.pool())
        .await
        .unwrap();
        let claimed = store.claim_runs(Claim::Free, 10).await.unwrap();
        assert_eq!(
            claimed.len(),
            1,
            "a lease that lapsed by the database's clock"
        );
        let expires: i64 = sqlx::query_scalar("SELECT lease_expires_at FROM runs")
            .fetch_one(&store.pool())
            .await
            .unwrap();
        let after = db_now().await;
        assert!(
            (before + ttl..=after + ttl).contains(&expires),
            "{expires} not within {before}..{after} + {ttl}"
        );
        assert!(store.claim_runs(Claim::Free, 10).await.unwrap().is_empty());
    }

    #[test]
    fn control_notices_round_trip() {
        let run = RunId::new();
        for n in [
            Notice::Cancel(run),
            Notice::Input(run),
            Notice::Replan(run),
            Notice::Pause(run),
            Notice::Released,
            Notice::TaskChanged(uuid::Uuid::now_v7().to_string()),
            Notice::TaskQueued,
        ] {
            let payload = n.control_payload().unwrap();
            assert_eq!(Notice::parse_control(&payload), Some(n));
        }
        assert_eq!(Notice::parse_control("cancel not-a-run"), None);
        assert_eq!(Notice::parse_control("shrug"), None);
    }
}
