//! `wait`: a duration, or until a moment. Cancelling the run drops the wait.

use std::time::Duration;

use serde_json::Value;

use crate::domain::attempt_io::{Envelope, WaitOutput};
use crate::plan::WaitSpec;

pub(crate) async fn run(wait: WaitSpec) -> Value {
    let duration = match wait {
        WaitSpec::Duration { ms } => Duration::from_millis(ms),
        WaitSpec::Until(t) => (t - chrono::Utc::now()).to_std().unwrap_or_default(),
    };
    tokio::time::sleep(duration).await;
    let waited_ms = duration.as_millis() as u64;
    WaitOutput { waited_ms }.to_json()
}
