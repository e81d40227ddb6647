//! A read connection to a SQLite file on its own thread, for the read a live stream needs at
//! speed: a follower that fell behind the live channel replays the run's events from the
//! store ([`super::Store::events_after`]). Through sqlx every row crossed to a worker thread
//! and through its `Any` row conversion; here a page of rows costs one hand-off and one
//! answer, with the statement prepared once.
//!
//! Other reads stay on the sqlx pool. The file is in WAL mode, so this connection sees every
//! commit and never waits for the writer. After a failed read its connection is closed and
//! the next read opens a fresh one.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::sqlite_writer::{WriteError, open, serve_each};

/// A read, given the connection (or why none could be opened); whether it succeeded, so the
/// thread knows to keep the connection.
type Job = Box<dyn FnOnce(rusqlite::Result<&Connection>) -> bool + Send>;

/// The handle reads go through; the thread ends when the last handle is dropped.
#[derive(Debug)]
pub(crate) struct SqliteReader {
    jobs: mpsc::Sender<Job>,
}

impl SqliteReader {
    /// Opens the reader's connection to `path` and starts its thread.
    pub fn start(path: &Path, busy_timeout: Duration) -> Result<SqliteReader, WriteError> {
        let first = open(path, busy_timeout)?;
        let (jobs, queue) = mpsc::channel::<Job>();
        let path = path.to_owned();
        std::thread::Builder::new()
            .name("orca-sqlite-reader".into())
            .spawn(move || {
                serve_each(Some(first), &path, busy_timeout, queue, |job: Job, conn| {
                    job(conn)
                })
            })
            .map_err(|_| WriteError::Gone)?;
        Ok(SqliteReader { jobs })
    }

    /// Runs `read` on the reader's connection; its answer.
    pub async fn read<R: Send + 'static>(
        &self,
        read: impl FnOnce(&Connection) -> rusqlite::Result<R> + Send + 'static,
    ) -> Result<R, WriteError> {
        let (done, answer) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let result = conn.and_then(read);
            let succeeded = result.is_ok();
            let _ = done.send(result.map_err(WriteError::from));
            succeeded
        });
        self.jobs.send(job).map_err(|_| WriteError::Gone)?;
        answer.await.map_err(|_| WriteError::Gone)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failed_read_is_an_error_and_the_next_read_answers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch(
                "PRAGMA journal_mode = WAL; CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (7);",
            )
            .unwrap();
        let reader = SqliteReader::start(&path, Duration::from_secs(1)).unwrap();
        let failed = reader
            .read(|c| c.query_row("SELECT a FROM missing", [], |r| r.get::<_, i64>(0)))
            .await;
        assert!(matches!(failed, Err(WriteError::Sqlite(_))), "{failed:?}");
        let a = reader
            .read(|c| c.query_row("SELECT a FROM t", [], |r| r.get::<_, i64>(0)))
            .await
            .unwrap();
        assert_eq!(a, 7);
    }
}
