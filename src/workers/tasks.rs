//! The worker tools' sweeper: every replica moves on the tasks whose time ran out (a lapsed
//! claim back to its queue or failed, a task no worker took in time failed, tasks of ended
//! runs cancelled). It sweeps at the earliest open task's deadline, when a task changes here
//! (at most every [`SPACING`]), and on a database replicas share every [`IDLE`] regardless
//! (for what another replica claimed, then left): with no task open it costs nothing on
//! SQLite, where every change goes through this process. Each move is a compare-and-set
//! in `store::tasks`, so replicas sweeping at once move a task once. Errors are logged and the
//! next pass tries again.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::store::tasks::Tasks;

/// The least time between two sweeps.
const SPACING: Duration = Duration::from_millis(250);
/// The most time between two sweeps.
const IDLE: Duration = Duration::from_secs(15);

/// Sweeps until `stop` fires.
pub async fn sweep_tasks(tasks: Tasks, stop: CancellationToken) {
    loop {
        match tasks.sweep().await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(tasks = n, "moved tasks whose time ran out"),
            Err(e) => tracing::warn!(error = ?e, "sweeping worker tasks failed; trying again"),
        }
        let due = match tasks.next_deadline_in().await {
            Ok(Some(due)) => due.clamp(SPACING, IDLE),
            Ok(None) if tasks.shared() => IDLE,
            // Nothing open, and nothing opens but through this process: until a change.
            Ok(None) => Duration::MAX / 4,
            Err(_) => SPACING,
        };
        let activity = tasks.hub().activity();
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(due) => {}
            () = activity.notified() => {}
        }
        // Changes come in bursts: one sweep for each burst.
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(SPACING) => {}
        }
    }
}
