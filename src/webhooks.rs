//! Completion webhooks: when a run that names a webhook (its own `webhook.url`, or its
//! tenant's `webhooks.tenants` default) has ended, orca POSTs its summary there, signed, and
//! retries with exponential backoff until a 2xx answer or `webhooks.max_attempts`.
//!
//! The delivery is queued in the transaction that stores the run, so an acknowledged run never
//! loses it; every replica runs a [`Deliverer`], and one claims each attempt in the store (a
//! compare-and-set dated by the database's clock), so an attempt is sent by one replica. A
//! receiver may still see a delivery twice (an answer lost on the way back is retried): the
//! `Orca-Delivery` header names the run, to deduplicate on.
//!
//! The signature: `Orca-Signature: t=<Unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">` keyed
//! with `webhooks.secret`. Deliveries connect only where HTTP tools may (`tools.http_allow`,
//! `tools.http_allow_private`); a refused destination fails the delivery at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio_util::sync::CancellationToken;

use crate::config::WebhooksConfig;
use crate::domain::Run;
use crate::store::{DeliveryAttempt, DueDelivery, Outcome, Store, Webhooks};
use crate::tools::http::guard::Destinations;

/// How often each replica looks for deliveries due when nothing tells it sooner: a run that
/// ends here wakes it at once, and a retry is waited for exactly; this catches the rest (runs
/// ended on a replica that stopped before it sent).
const POLL: Duration = Duration::from_secs(5);

/// Deliveries attempted per look.
const BATCH: u32 = 16;

/// The longest wait between two attempts.
const MAX_BACKOFF_MS: u64 = 300_000;

/// The signature of `body` sent at `t` (Unix seconds): what `Orca-Signature` carries after
/// `v1=`.
pub fn signature(secret: &str, t: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The wait before attempt `next` (2, 3, …): `backoff_ms`, doubling, at most five minutes.
fn backoff(config: &WebhooksConfig, next: u32) -> u64 {
    let doublings = next.saturating_sub(2).min(20);
    config
        .backoff_ms
        .saturating_mul(1 << doublings)
        .min(MAX_BACKOFF_MS)
}

/// Checks the tenants' default URLs (`webhooks.tenants`) against the destination policy as
/// the configuration loads, as a run's own URL is checked when the run is created: an address
/// the policy refuses is a configuration error naming the key. A name is judged by what it
/// resolves to at each attempt.
pub fn check_tenant_urls(
    config: &WebhooksConfig,
    policy: &Destinations,
) -> Result<(), crate::config::Error> {
    for (tenant, url) in &config.tenants {
        let refused = match reqwest::Url::parse(url) {
            Ok(parsed) => policy.check_url(&parsed).err().map(|r| r.0),
            Err(e) => Some(format!("not a URL: {e}")),
        };
        if let Some(why) = refused {
            return Err(crate::config::Error::Invalid {
                key: format!("webhooks.tenants.{tenant}").into(),
                message: format!("the destination is refused: {why}"),
                set_by: None,
            });
        }
    }
    Ok(())
}

/// Sends due deliveries until the server stops.
pub struct Deliverer {
    store: Store,
    deliveries: Webhooks,
    client: reqwest::Client,
    /// Where deliveries may connect, as configured now: checked at every attempt, whatever
    /// the URL's source (the run's own, its tenant's default, a schedule's run body, a fork's
    /// parent) and whatever the policy was when the run was created.
    policy: Arc<Destinations>,
    config: WebhooksConfig,
    /// Told when a run with a webhook ends on this server.
    due: Arc<tokio::sync::Notify>,
    stop: CancellationToken,
}

impl Deliverer {
    pub fn new(
        store: Store,
        config: WebhooksConfig,
        policy: Arc<Destinations>,
        due: Arc<tokio::sync::Notify>,
        stop: CancellationToken,
    ) -> anyhow::Result<Deliverer> {
        let timeout = Duration::from_millis(config.timeout_ms);
        let client = crate::tools::http::guarded_client(&policy, timeout)?;
        Ok(Deliverer {
            deliveries: Webhooks::new(store.clone()),
            store,
            client,
            policy,
            config,
            due,
            stop,
        })
    }

    pub async fn run(self) {
        loop {
            let more = match self.deliveries.due(BATCH).await {
                Ok(due) => {
                    let full = due.len() == BATCH as usize;
                    for d in due {
                        if self.stop.is_cancelled() {
                            return;
                        }
                        if let Err(e) = self.attempt(&d).await {
                            tracing::warn!(run_id = %d.run_id, error = %e, "a webhook attempt could not be recorded");
                        }
                    }
                    full
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reading due webhooks failed; trying again");
                    false
                }
            };
            let wait = if more {
                Duration::ZERO
            } else {
                self.until_next_retry().await
            };
            tokio::select! {
                () = self.stop.cancelled() => return,
                () = self.due.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// How long until the next retry is due, at most [`POLL`].
    async fn until_next_retry(&self) -> Duration {
        match self.deliveries.next_retry_in_ms().await {
            Ok(Some(ms)) => Duration::from_millis(ms.max(0) as u64).min(POLL),
            _ => POLL,
        }
    }

    /// Claims, sends and records one attempt of `d`.
    async fn attempt(&self, d: &DueDelivery) -> Result<(), crate::store::Error> {
        // Held a little past the attempt's own timeout, so no replica sends it meanwhile.
        let hold = self.config.timeout_ms as i64 + 5_000;
        if !self.deliveries.claim(d, hold).await? {
            return Ok(());
        }
        let attempt = d.attempts + 1;
        let Some(stored) = self.store.get_run(&d.tenant, d.run_id).await? else {
            return Ok(());
        };
        let at = crate::domain::now();
        let started = Instant::now();
        let sent = self.send(d, attempt, &stored.run).await;
        let duration_ms = started.elapsed().as_millis() as u64;
        let (status_code, error, outcome) = match sent {
            Ok(status) if (200..300).contains(&status) => (Some(status), None, Outcome::Delivered),
            Ok(status) => (
                Some(status),
                Some(format!("answered {status}")),
                self.again(attempt),
            ),
            Err(Failure::Refused(why)) => (None, Some(why), Outcome::Failed),
            Err(Failure::Other(why)) => (None, Some(why), self.again(attempt)),
        };
        let record = DeliveryAttempt {
            attempt,
            at,
            status_code,
            error,
            duration_ms,
        };
        self.deliveries.settle(d.run_id, &record, outcome).await
    }

    fn again(&self, attempt: u32) -> Outcome {
        if attempt >= self.config.max_attempts {
            Outcome::Failed
        } else {
            Outcome::Retry {
                in_ms: backoff(&self.config, attempt + 1) as i64,
            }
        }
    }

    async fn send(&self, d: &DueDelivery, attempt: u32, run: &Run) -> Result<u16, Failure> {
        let body = serde_json::to_vec(&serde_json::json!({ "type": "run.finished", "run": run }))
            .expect("a run serialises");
        let t = chrono::Utc::now().timestamp();
        let signed = signature(self.config.secret.expose(), t, &body);
        let url = reqwest::Url::parse(&d.url)
            .map_err(|e| Failure::Refused(format!("destination refused: not a URL: {e}")))?;
        // The client's resolver judges names as it connects; an address written in the URL
        // never reaches it, so the URL itself is judged here, at every attempt.
        self.policy
            .check_url(&url)
            .map_err(|why| Failure::Refused(format!("destination refused: {why}")))?;
        let request = self
            .client
            .post(url)
            .timeout(Duration::from_millis(self.config.timeout_ms))
            .header("content-type", "application/json")
            .header(
                "user-agent",
                concat!("orca-webhooks/", env!("CARGO_PKG_VERSION")),
            )
            .header("orca-signature", format!("t={t},v1={signed}"))
            .header("orca-delivery", d.run_id.to_string())
            .header("orca-attempt", attempt.to_string())
            .body(body);
        match request.send().await {
            Ok(resp) => Ok(resp.status().as_u16()),
            Err(e) => Err(match crate::tools::http::refusal(&e) {
                Some(why) => Failure::Refused(format!("destination refused: {why}")),
                // Without the URL: a receiver's address may carry a token.
                None if e.is_timeout() => Failure::Other("no answer in time".into()),
                None if e.is_connect() => Failure::Other("could not connect".into()),
                None => Failure::Other("the request failed".into()),
            }),
        }
    }
}

enum Failure {
    /// The destination policy refuses the address: no attempt will do better.
    Refused(String),
    Other(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_of_timestamp_dot_body() {
        // Python's `hmac.new(key, b'1700000000.{"a":1}', hashlib.sha256).hexdigest()`.
        assert_eq!(
            signature("whsec-test-key-0123456789", 1_700_000_000, br#"{"a":1}"#),
            "7d86d62bab7c6ee320bfcc000fdc0ac5c2a3c6bb62de22e888ee904f0e6d0d5e"
        );
    }

    #[test]
    fn backoff_doubles_from_the_configured_wait_up_to_five_minutes() {
        let config = WebhooksConfig {
            backoff_ms: 1_000,
            ..Default::default()
        };
        let waits: Vec<u64> = (2..=12).map(|n| backoff(&config, n)).collect();
        assert_eq!(
            waits,
            [
                1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 300_000,
                300_000
            ]
        );
    }
}
