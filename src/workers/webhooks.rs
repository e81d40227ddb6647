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
//! Each replica sends many attempts at once, each in a task of its own, so that a receiver
//! that hangs delays only itself: at most `webhooks.max_in_flight_per_tenant` attempts of one
//! tenant and `webhooks.max_in_flight_per_destination` to one `host:port` are in flight on a
//! replica, and the store hands out due deliveries tenant by tenant in turn, leaving out the
//! tenants and destinations at their caps, so one tenant's backlog never fills a batch.
//!
//! An attempt is recorded before it is sent (the claim writes it as `sending`) and settled
//! after; one cut off by its replica's end is shown `interrupted`, so a delivery's history
//! lists every request its receiver may have got.
//!
//! The signature: `Orca-Signature: t=<Unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">` keyed
//! with `webhooks.secret`. Deliveries connect only where HTTP tools may (`tools.http_allow`,
//! `tools.http_allow_private`), judged at every attempt by the policy then in force; a refused
//! destination fails the delivery at once.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::WebhooksConfig;
use crate::domain::{Run, RunId};
use crate::store::{AtCap, AttemptOutcome, DeliveryAttempt, DueDelivery, Outcome, Store, Webhooks};
use crate::tools::http::guard::Destinations;

/// How often each replica looks for deliveries due when nothing tells it sooner: a run that
/// ends here wakes it at once, and a retry is waited for exactly; this catches the rest (runs
/// ended on a replica that stopped before it sent).
const POLL: Duration = Duration::from_secs(5);

/// Deliveries read per look at the store.
const BATCH: u32 = 16;

/// The most attempts one replica sends at once, whatever the tenants: past it, due deliveries
/// wait for a slot (the per-tenant and per-destination caps are `webhooks.max_in_flight_*`).
const MAX_IN_FLIGHT: usize = 256;

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

/// Sends due deliveries until the server stops, many at once: each attempt is a task of its
/// own (owned by [`InFlight`]'s `JoinSet`), within caps per tenant and per destination, so a
/// receiver that hangs holds its own slot, not the queue.
pub struct Deliverer {
    sender: Arc<Sender>,
    deliveries: Webhooks,
    caps: Caps,
    /// Told when a run with a webhook ends on this server.
    due: Arc<tokio::sync::Notify>,
    stop: CancellationToken,
}

/// What one replica may have in flight at once.
#[derive(Debug, Clone, Copy)]
struct Caps {
    tenant: usize,
    destination: usize,
}

/// One attempt's work, shared by the tasks that send at once.
struct Sender {
    store: Store,
    deliveries: Webhooks,
    client: reqwest::Client,
    /// Where deliveries may connect, as configured now: checked at every attempt, whatever
    /// the URL's source (the run's own, its tenant's default, a schedule's run body, a fork's
    /// parent) and whatever the policy was when the run was created.
    policy: Arc<Destinations>,
    config: WebhooksConfig,
}

/// The attempts this replica is sending: their tasks, and the counts the caps are checked
/// against. A task that ends, however it ends, gives its slots back by its id.
#[derive(Default)]
struct InFlight {
    tasks: JoinSet<()>,
    flights: HashMap<tokio::task::Id, DueDelivery>,
    runs: HashSet<RunId>,
    tenants: HashMap<String, usize>,
    destinations: HashMap<String, usize>,
}

impl InFlight {
    fn admits(&self, d: &DueDelivery, caps: Caps) -> bool {
        self.flights.len() < MAX_IN_FLIGHT
            && !self.runs.contains(&d.run_id)
            && self.tenants.get(&d.tenant.0).copied().unwrap_or(0) < caps.tenant
            && self.destinations.get(&d.destination).copied().unwrap_or(0) < caps.destination
    }

    fn start(&mut self, d: DueDelivery, sender: Arc<Sender>) {
        let task = {
            let d = d.clone();
            self.tasks.spawn(async move {
                if let Err(e) = sender.attempt(&d).await {
                    tracing::warn!(run_id = %d.run_id, error = %e, "a webhook attempt could not be recorded");
                }
            })
        };
        *self.tenants.entry(d.tenant.0.clone()).or_default() += 1;
        *self.destinations.entry(d.destination.clone()).or_default() += 1;
        self.runs.insert(d.run_id);
        self.flights.insert(task.id(), d);
    }

    fn finished(&mut self, task: tokio::task::Id) {
        let Some(d) = self.flights.remove(&task) else {
            return;
        };
        self.runs.remove(&d.run_id);
        for (counts, key) in [
            (&mut self.tenants, &d.tenant.0),
            (&mut self.destinations, &d.destination),
        ] {
            if let Some(n) = counts.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(key);
                }
            }
        }
    }

    /// The tenants and destinations at their caps, for the store to leave out.
    fn at_cap(&self, caps: Caps) -> AtCap {
        let full = |counts: &HashMap<String, usize>, cap: usize| {
            counts
                .iter()
                .filter(|(_, n)| **n >= cap)
                .map(|(k, _)| k.clone())
                .collect()
        };
        AtCap {
            tenants: full(&self.tenants, caps.tenant),
            destinations: full(&self.destinations, caps.destination),
        }
    }

    /// Waits for a task to end (never, when none runs); its id.
    async fn next_finished(&mut self) -> tokio::task::Id {
        match self.tasks.join_next_with_id().await {
            Some(Ok((id, ()))) => id,
            Some(Err(e)) => {
                if e.is_panic() {
                    tracing::error!(error = %e, "a webhook attempt panicked");
                }
                e.id()
            }
            None => std::future::pending().await,
        }
    }
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
        let caps = Caps {
            tenant: config.max_in_flight_per_tenant as usize,
            destination: config.max_in_flight_per_destination as usize,
        };
        let deliveries = Webhooks::new(store.clone());
        Ok(Deliverer {
            sender: Arc::new(Sender {
                store,
                deliveries: deliveries.clone(),
                client,
                policy,
                config,
            }),
            deliveries,
            caps,
            due,
            stop,
        })
    }

    /// Starts due attempts while the caps leave room, and waits for the next reason to look
    /// again: a run ended, an attempt finished, a retry fell due. Stopping drops the tasks
    /// in flight: their attempts stay recorded as `sending`, and the next claim after the
    /// restart shows them `interrupted`.
    pub async fn run(self) {
        let mut flights = InFlight::default();
        loop {
            let more = self.start_due(&mut flights).await;
            let wait = if more {
                Duration::ZERO
            } else {
                self.until_next_retry().await
            };
            tokio::select! {
                () = self.stop.cancelled() => return,
                id = flights.next_finished() => flights.finished(id),
                () = self.due.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Starts the due attempts the caps admit, from one batch the store picks tenant by
    /// tenant, leaving out the tenants and destinations already at their caps. True when the
    /// batch was full and started something: more may be due at once.
    async fn start_due(&self, flights: &mut InFlight) -> bool {
        if flights.flights.len() >= MAX_IN_FLIGHT {
            return false;
        }
        let due = match self.deliveries.due(BATCH, &flights.at_cap(self.caps)).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "reading due webhooks failed; trying again");
                return false;
            }
        };
        let full = due.len() == BATCH as usize;
        let mut started = false;
        for d in due {
            if flights.admits(&d, self.caps) {
                flights.start(d, self.sender.clone());
                started = true;
            }
        }
        full && started
    }

    /// How long until the next retry is due, at most [`POLL`].
    async fn until_next_retry(&self) -> Duration {
        match self.deliveries.next_retry_in_ms().await {
            Ok(Some(ms)) => Duration::from_millis(ms.max(0) as u64).min(POLL),
            _ => POLL,
        }
    }
}

impl Sender {
    /// Claims `d`'s next attempt (recording it before anything is sent), sends it and records
    /// what came of it. A delivery whose last attempt was cut off is given up instead.
    async fn attempt(&self, d: &DueDelivery) -> Result<(), crate::store::Error> {
        if d.attempts >= self.config.max_attempts {
            self.deliveries.abandon(d, crate::domain::now()).await?;
            return Ok(());
        }
        // Held a little past the attempt's own timeout, so no replica sends it meanwhile.
        let hold = self.config.timeout_ms as i64 + 5_000;
        let at = crate::domain::now();
        if !self.deliveries.claim(d, hold, at).await? {
            return Ok(());
        }
        let attempt = d.attempts + 1;
        let Some(stored) = self.store.get_run(&d.tenant, d.run_id).await? else {
            return Ok(());
        };
        let started = Instant::now();
        let sent = self.send(d, attempt, &stored.run).await;
        let duration_ms = started.elapsed().as_millis() as u64;
        let (status_code, error, result, outcome) = match sent {
            Ok(status) if (200..300).contains(&status) => (
                Some(status),
                None,
                AttemptOutcome::Delivered,
                Outcome::Delivered,
            ),
            Ok(status) => (
                Some(status),
                Some(format!("answered {status}")),
                AttemptOutcome::Failed,
                self.again(attempt),
            ),
            Err(Failure::Refused(why)) => {
                (None, Some(why), AttemptOutcome::Refused, Outcome::Failed)
            }
            Err(Failure::Other(why)) => {
                (None, Some(why), AttemptOutcome::Failed, self.again(attempt))
            }
        };
        let record = DeliveryAttempt {
            attempt,
            at,
            outcome: result,
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

/// A run that names a completion webhook wakes the deliverer once its end is stored (it then
/// looks at once instead of at its next poll).
pub struct WebhookDue(Arc<tokio::sync::Notify>);

impl WebhookDue {
    /// Wakes `due`, the deliverer's.
    pub fn new(due: Arc<tokio::sync::Notify>) -> WebhookDue {
        WebhookDue(due)
    }
}

impl crate::engine::runtime::hooks::RunHook for WebhookDue {
    fn after_end(&self, ctx: &crate::engine::RunContext) {
        if ctx.spec.request.webhook.is_some() {
            self.0.notify_one();
        }
    }
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
