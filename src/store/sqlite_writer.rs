//! SQLite's writer: one connection on its own thread that takes a whole transaction's
//! statements per hand-off. Through sqlx each statement (and the `BEGIN` and `COMMIT`) was a
//! round trip to a worker thread, each a wake-up; here a batch costs one hand-off and one
//! answer. Statements are prepared once per connection ([`Connection::prepare_cached`]) and
//! bound by position.
//!
//! Reads stay on the sqlx pool: the file is in WAL mode, so they see every commit and never
//! wait for the writer. SQLite has one writer at a time anyway; the pool's few writes (leases,
//! registries, retention) wait for this connection's lock like any other writer.
//!
//! A connection that lived through a failed transaction (a full disk, an I/O error) is closed
//! and the next transaction opens a fresh one, as the pool's connections are renewed.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::statement::{Param, Statement};

/// The handle the store writes through; the thread ends when the last handle is dropped.
#[derive(Debug)]
pub(crate) struct SqliteWriter {
    jobs: mpsc::Sender<Job>,
}

struct Job {
    statements: Vec<Statement>,
    /// The rows each statement changed, or why the transaction was rolled back.
    done: oneshot::Sender<rusqlite::Result<Vec<usize>>>,
}

/// What a write through the writer can fail with.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error("the SQLite writer thread is gone")]
    Gone,
}

impl SqliteWriter {
    /// Opens the writer's connection to `path` (the file exists and is in WAL mode already)
    /// and starts its thread.
    pub fn start(path: &Path, busy_timeout: Duration) -> Result<SqliteWriter, WriteError> {
        let first = open(path, busy_timeout)?;
        let (jobs, queue) = mpsc::channel();
        let path = path.to_owned();
        std::thread::Builder::new()
            .name("orca-sqlite-writer".into())
            .spawn(move || serve(Some(first), &path, busy_timeout, queue))
            .map_err(|_| WriteError::Gone)?;
        Ok(SqliteWriter { jobs })
    }

    /// Runs `statements` in one transaction; the rows each changed.
    pub async fn write(&self, statements: Vec<Statement>) -> Result<Vec<usize>, WriteError> {
        let (done, answer) = oneshot::channel();
        self.jobs
            .send(Job { statements, done })
            .map_err(|_| WriteError::Gone)?;
        Ok(answer.await.map_err(|_| WriteError::Gone)??)
    }
}

pub(super) fn open(path: &Path, busy_timeout: Duration) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(busy_timeout)?;
    // As the pool's connections: a committed transaction survives a process crash (WAL), and
    // references hold.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Each table's one-row insert, the plan insert, the four forms of a run row's update and
    // the run insert, with room to spare.
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

fn serve(
    conn: Option<Connection>,
    path: &Path,
    busy_timeout: Duration,
    queue: mpsc::Receiver<Job>,
) {
    serve_each(conn, path, busy_timeout, queue, |job, conn| {
        let written = conn.and_then(|c| transaction(c, &job.statements));
        let kept = written.is_ok();
        // The store may have stopped waiting (its task was cancelled): nothing to tell then.
        let _ = job.done.send(written);
        kept
    })
}

/// A connection thread's loop, the writer's and the reader's: each job runs on the kept
/// connection, or on a fresh one when there is none; `run` says whether to keep it (a
/// connection that lived through a failure is closed), or gets the error of opening one.
pub(super) fn serve_each<J>(
    mut conn: Option<Connection>,
    path: &Path,
    busy_timeout: Duration,
    queue: mpsc::Receiver<J>,
    mut run: impl FnMut(J, rusqlite::Result<&Connection>) -> bool,
) {
    while let Ok(job) = queue.recv() {
        match conn.take().map_or_else(|| open(path, busy_timeout), Ok) {
            Ok(c) => {
                if run(job, Ok(&c)) {
                    conn = Some(c);
                }
            }
            Err(e) => {
                run(job, Err(e));
            }
        }
    }
}

/// Runs `statements` in one immediate transaction, rolled back if any fails. `BEGIN` and
/// `COMMIT` are prepared once too.
fn transaction(conn: &Connection, statements: &[Statement]) -> rusqlite::Result<Vec<usize>> {
    conn.prepare_cached("BEGIN IMMEDIATE")?.raw_execute()?;
    let done = run_all(conn, statements).and_then(|changed| {
        conn.prepare_cached("COMMIT")?
            .raw_execute()
            .map(|_| changed)
    });
    if done.is_err() && !conn.is_autocommit() {
        // The connection is closed after a failure anyway; this keeps the file clean at once.
        let _ = conn.execute_batch("ROLLBACK");
    }
    done
}

/// Runs each statement (a multi-row one once per row); the rows each changed.
fn run_all(conn: &Connection, statements: &[Statement]) -> rusqlite::Result<Vec<usize>> {
    let mut changed = Vec::with_capacity(statements.len());
    for st in statements {
        let (sql, width) = st.sqlite_sql();
        let mut prepared = conn.prepare_cached(&sql)?;
        let mut rows = 0;
        for row in st.params.chunks(width.max(1)) {
            for (i, p) in row.iter().enumerate() {
                match p {
                    Param::Int(v) => prepared.raw_bind_parameter(i + 1, v)?,
                    Param::Text(v) => prepared.raw_bind_parameter(i + 1, v.as_deref())?,
                }
            }
            rows += prepared.raw_execute()?;
        }
        if st.params.is_empty() {
            rows += prepared.raw_execute()?;
        }
        changed.push(rows);
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::statement::Text;

    fn insert(value: i64) -> Statement {
        Statement {
            text: Text::Rows {
                head: "INSERT INTO t (a, b) VALUES",
                width: 2,
                tail: "",
            },
            params: vec![
                value.into(),
                Param::Text(None),
                (value + 1).into(),
                "x".into(),
            ],
        }
    }

    fn count(path: &Path) -> i64 {
        let conn = Connection::open(path).unwrap();
        conn.query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
            .unwrap()
    }

    #[tokio::test]
    async fn a_failed_transaction_writes_nothing_and_the_next_one_goes_through() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (a INTEGER, b TEXT);")
            .unwrap();
        let writer = SqliteWriter::start(&path, Duration::from_secs(1)).unwrap();
        let broken = Statement {
            text: Text::One("INSERT INTO missing (a) VALUES ($1)".into()),
            params: vec![1i64.into()],
        };
        let failed = writer.write(vec![insert(1), broken]).await;
        assert!(matches!(failed, Err(WriteError::Sqlite(_))), "{failed:?}");
        assert_eq!(count(&path), 0, "the first statement was rolled back");
        // Two rows of one multi-row insert, each bound by position; then a one-row statement.
        let update = Statement {
            text: Text::One("UPDATE t SET b = $2 WHERE a = $1".into()),
            params: vec![3i64.into(), "y".into()],
        };
        let changed = writer.write(vec![insert(2), update]).await.unwrap();
        assert_eq!(changed, [2, 1]);
        let conn = Connection::open(&path).unwrap();
        let rows: Vec<(i64, Option<String>)> = conn
            .prepare("SELECT a, b FROM t ORDER BY a")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(rows, [(2, None), (3, Some("y".into()))]);
    }
}
