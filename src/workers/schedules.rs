//! The schedule firing loop every replica runs. A tick starts at most one run however many
//! replicas see it due: the run carries the idempotency key `schedule:<id>:<tick>` (the store
//! keeps one run per key and tenant), and the replica that moves the schedule's next tick on
//! does so with a compare-and-set. A run is started before its tick is moved on, so a crash
//! between the two starts nothing twice and loses no tick. A tick's run is started through the
//! [`Engine`](crate::engine::Engine): the schedule's body is admitted as `POST /v1/runs` admits
//! a body, linked to its tick ([`Admitted::for_tick`](crate::engine::intake::Admitted)), and
//! created; what stops it is an `engine::Error`, which decides whether the tick waits (held,
//! tried again with a growing wait) or starts nothing (recorded with why). When to fire, and
//! what a missed tick does, is `domain::schedule`'s rule; the schedules' HTTP handlers are
//! `api/schedules.rs`.

use std::time::Duration;

use chrono::{DateTime, Utc};

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::domain::Tenant;
use crate::domain::schedule::{Decision, MissedTicks, ScheduleFire, Timing, decide, tick_key};
use crate::engine::intake::Refused;
use crate::engine::{self, Created, Engine};
use crate::store::{FireOutcome, Fired, ScheduleRecord, Schedules};

/// How long the loop waits at most before it looks at the store again (for schedules other
/// replicas stored or changed).
const POLL: Duration = Duration::from_secs(1);

/// Due schedules fired per look at the store.
const BATCH: u32 = 64;

/// The first wait before a tick whose run could not start is tried again; it doubles with
/// each attempt, up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(1);

/// The longest wait between attempts at a tick's run (within the tick's minute of grace).
const RETRY_MAX: Duration = Duration::from_secs(30);

/// The shortest wait between two looks at the store that found nothing more to do.
const MIN_WAIT: Duration = Duration::from_millis(20);

/// What the firing loop works with: the engine that starts a tick's run, the schedules in the
/// store, the configuration (API keys, quotas) and the server's stop.
pub struct Firing {
    pub engine: Engine,
    pub schedules: Schedules,
    pub config: std::sync::Arc<Config>,
    pub shutdown: CancellationToken,
}

/// The wait before attempt `retries + 1` at a tick.
fn retry_delay(retries: u32) -> Duration {
    RETRY_FIRST
        .saturating_mul(1 << retries.min(16))
        .min(RETRY_MAX)
}

/// Fires due schedules until the server stops: looks at the store when the earliest tick is
/// due, when a schedule changes through this server, and at least every second (for changes
/// made through other replicas). While the store fails, it looks again after a wait that
/// doubles up to [`RETRY_MAX`], and says so once when it starts and once when it ends.
pub async fn fire_due(firing: Firing) {
    let mut failing: Option<Duration> = None;
    loop {
        let wait = match fire_once(&firing).await {
            Ok(more) => {
                if failing.take().is_some() {
                    tracing::info!("schedules are read and fired again");
                }
                if more {
                    Duration::ZERO
                } else {
                    until_next(&firing).await
                }
            }
            Err(e) => {
                let wait = match failing {
                    None => {
                        tracing::warn!(error = %e, "firing schedules failed; trying again with a growing wait");
                        RETRY_FIRST
                    }
                    Some(last) => (last * 2).min(RETRY_MAX),
                };
                failing = Some(wait);
                wait
            }
        };
        tokio::select! {
            () = firing.shutdown.cancelled() => return,
            () = firing.schedules.changed() => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// The tenants whose schedules fire: with API keys configured, those with a key (a revoked
/// tenant's schedules wait, quietly, until its key returns); `None` without keys.
fn live_tenants(firing: &Firing) -> Option<Vec<String>> {
    let keys = &firing.config.auth.api_keys;
    (!keys.is_empty()).then(|| {
        let mut tenants: Vec<String> = keys.iter().map(|k| k.tenant.clone()).collect();
        tenants.sort();
        tenants.dedup();
        tenants
    })
}

/// How long until the earliest tick (or retry), from [`MIN_WAIT`] to [`POLL`].
async fn until_next(firing: &Firing) -> Duration {
    let tenants = live_tenants(firing);
    match firing
        .schedules
        .next_schedule_tick(tenants.as_deref())
        .await
    {
        Ok(Some(next)) => (next - crate::domain::now())
            .to_std()
            .unwrap_or(Duration::ZERO)
            .clamp(MIN_WAIT, POLL),
        _ => POLL,
    }
}

/// Acts on the schedules due now; true when there may be more due. A store error ends the
/// pass at once (the loop waits before the next).
async fn fire_once(firing: &Firing) -> Result<bool, crate::store::Error> {
    let now = crate::domain::now();
    let tenants = live_tenants(firing);
    let due = firing
        .schedules
        .due_schedules(now, BATCH, tenants.as_deref())
        .await?;
    let full = due.len() == BATCH as usize;
    let mut rates = Rates::default();
    for s in due {
        if firing.shutdown.is_cancelled() {
            break;
        }
        fire(firing, &s, now, &mut rates).await?;
    }
    Ok(full)
}

/// Each tenant's runs started by schedules in the last minute, against its
/// `schedule_fires_per_minute`, counted once per pass.
#[derive(Default)]
struct Rates(std::collections::HashMap<String, (u64, u64)>);

impl Rates {
    /// Why the tenant may start no more runs from schedules now; `None` when it may (and the
    /// run is counted).
    async fn refuse(
        &mut self,
        firing: &Firing,
        tenant: &Tenant,
        now: DateTime<Utc>,
    ) -> Result<Option<String>, crate::store::Error> {
        let limit = firing.config.quotas.of(&tenant.0).schedule_fires_per_minute;
        if limit == 0 {
            return Ok(None);
        }
        let used = match self.0.get_mut(&tenant.0) {
            Some((_, used)) => used,
            None => {
                let since = now - chrono::Duration::seconds(60);
                let used = firing.schedules.tenant_fires_since(tenant, since).await?;
                &mut self.0.entry(tenant.0.clone()).or_insert((limit, used)).1
            }
        };
        if *used >= limit {
            return Ok(Some(format!(
                "rate: the tenant's quota `schedule_fires_per_minute` is {limit}: its schedules \
                 started {used} runs in the last minute"
            )));
        }
        *used += 1;
        Ok(None)
    }
}

/// Acts on one due schedule: records the ticks it missed, starts its tick's run (or skips a
/// missed tick, or refuses one past the tenant's rate), then moves its next tick on.
async fn fire(
    firing: &Firing,
    s: &ScheduleRecord,
    now: DateTime<Utc>,
    rates: &mut Rates,
) -> Result<(), crate::store::Error> {
    let Some(due) = s.next_fire_at else {
        return Ok(());
    };
    let timing = match timing_of(s) {
        Ok(timing) => timing,
        Err(why) => {
            // Looked at again in an hour (a fixed rule may read it again), not every pass.
            let why = format!("the stored timing no longer reads: {why}");
            if s.retry_reason.as_deref() != Some(why.as_str()) {
                tracing::error!(schedule = %s.id, %why, "a stored schedule no longer reads; it is left as it is");
            }
            let later = now + chrono::Duration::hours(1);
            firing
                .schedules
                .hold_schedule(&s.id, due, due, later, &why)
                .await?;
            return Ok(());
        }
    };
    let schedules = &firing.schedules;
    let record_missed = |missed: Option<MissedTicks>| async move {
        let Some(missed) = missed else {
            return Ok(());
        };
        let error = missed.describe(s.retry_reason.as_deref());
        let outcome = FireOutcome::None {
            reason: "missed",
            error: &error,
        };
        schedules.record_fire(&s.id, missed.first, outcome).await
    };
    match decide(&timing, due, now, s.missed) {
        Decision::Wait => Ok(()),
        Decision::Skip { next, missed } => {
            tracing::info!(schedule = %s.id, missed_since = %due, "missed ticks skipped");
            record_missed(missed).await?;
            schedules
                .advance_schedule(&s.id, due, next, Fired::Nothing)
                .await
                .map(drop)
        }
        Decision::Fire { tick, next, missed } => {
            record_missed(missed).await?;
            let tick = Tick { due, tick, next };
            match rates.refuse(firing, &s.tenant, now).await? {
                Some(why) => tick.refused(firing, s, "rate", &why).await,
                None => start_tick(firing, s, tick).await,
            }
        }
    }
}

/// A tick to act on: the schedule's stored next tick `due`, the tick fired `tick` (later
/// than `due` when ticks between were missed), and the tick after.
#[derive(Clone, Copy)]
struct Tick {
    due: DateTime<Utc>,
    tick: DateTime<Utc>,
    next: Option<DateTime<Utc>>,
}

impl Tick {
    /// The tick starts no run (`reason`, `why`): recorded, and the schedule goes on.
    async fn refused(
        self,
        firing: &Firing,
        s: &ScheduleRecord,
        reason: &str,
        why: &str,
    ) -> Result<(), crate::store::Error> {
        let outcome = FireOutcome::None { reason, error: why };
        let schedules = &firing.schedules;
        schedules.record_fire(&s.id, self.tick, outcome).await?;
        schedules
            .advance_schedule(&s.id, self.due, self.next, Fired::Nothing)
            .await
            .map(drop)
    }

    /// The tick started (or another replica had started) the run `run_id`.
    async fn started(
        self,
        firing: &Firing,
        s: &ScheduleRecord,
        run_id: &str,
    ) -> Result<(), crate::store::Error> {
        let schedules = &firing.schedules;
        schedules
            .record_fire(&s.id, self.tick, FireOutcome::Run(run_id))
            .await?;
        let fired = Fired::Run {
            tick: self.tick,
            run_id,
        };
        schedules
            .advance_schedule(&s.id, self.due, self.next, fired)
            .await?;
        if s.retry_reason.is_some() {
            tracing::info!(schedule = %s.id, "a schedule's runs start again");
        }
        Ok(())
    }

    /// The run cannot start yet (`why`): the tick stays due, tried again after a wait that
    /// doubles with each attempt. Logged when the reason changes, not at every attempt.
    async fn held(
        self,
        firing: &Firing,
        s: &ScheduleRecord,
        why: &str,
    ) -> Result<(), crate::store::Error> {
        let delay = retry_delay(s.retries);
        if s.retry_reason.as_deref() != Some(why) {
            tracing::warn!(schedule = %s.id, %why, "a schedule's run cannot start yet; it is tried again with a growing wait");
        }
        let retry_at = crate::domain::now()
            + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::seconds(1));
        firing
            .schedules
            .hold_schedule(&s.id, self.due, self.tick, retry_at, why)
            .await
            .map(drop)
    }
}

/// Starts the tick's run through the engine, under the key `schedule:<id>:<tick>`: the
/// stored body is admitted as `POST /v1/runs` admits a body, linked to its tick, and
/// created; what stops it decides whether the tick waits (held) or starts nothing (refused).
async fn start_tick(
    firing: &Firing,
    s: &ScheduleRecord,
    tick: Tick,
) -> Result<(), crate::store::Error> {
    let key = tick_key(&s.id, tick.tick);
    let link = ScheduleFire {
        id: s.id.clone(),
        fire_at: tick.tick,
    };
    let admitted = match firing.engine.admit_body(&s.tenant, s.run.clone()).await {
        Ok(admitted) => admitted.for_tick(link),
        Err(Refused::Invalid(problems)) => {
            // Every problem with its pointer, as the 422 of `POST /v1/runs` would list them.
            let why = problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            return tick_refused(firing, s, tick, &why).await;
        }
        Err(Refused::Store(e)) => return Err(e),
    };
    let created = firing
        .engine
        .create_run(
            &s.tenant,
            admitted,
            Some(&key),
            crate::engine::Follow::Later,
        )
        .await;
    match created {
        Ok(Created::New(run, _) | Created::Existing(run)) => {
            tick.started(firing, s, &run.id.to_string()).await
        }
        // Busy or the store is down: the tick stays due and is tried again after a wait.
        Err(busy @ (engine::Error::Overloaded | engine::Error::StoreDown)) => {
            tick.held(firing, s, &busy.to_string()).await
        }
        Err(engine::Error::Store(e)) => {
            tracing::error!(error = ?e, "storing a new run failed");
            let why = "the store cannot take the run now; try again";
            tick.held(firing, s, why).await
        }
        // Another replica started this tick with a body changed since: the tick has its run.
        Err(engine::Error::IdempotencyKeyReused) => {
            match firing.schedules.run_of_key(&s.tenant, &key).await? {
                Some(run_id) => tick.started(firing, s, &run_id).await,
                None => tick.held(firing, s, "the tick's run was not found").await,
            }
        }
        // Over one of the tenant's run quotas: this tick starts nothing.
        Err(engine::Error::QuotaExceeded(exceeded)) => {
            let why = format!("quota: {}", exceeded.describe());
            tick.refused(firing, s, "quota", &why).await
        }
        Err(
            refused @ (engine::Error::SessionBusy(_)
            | engine::Error::Conflict(_)
            | engine::Error::ForkTooLarge { .. }),
        ) => tick_refused(firing, s, tick, &refused.to_string()).await,
        Err(other) => {
            tracing::error!(error = ?other, schedule = %s.id, "starting a schedule's run failed");
            tick_refused(firing, s, tick, "internal error").await
        }
    }
}

/// The body no longer runs (a workflow or tool it names was removed), or its session refuses
/// it: the tick is recorded with why, and the schedule goes on.
async fn tick_refused(
    firing: &Firing,
    s: &ScheduleRecord,
    tick: Tick,
    why: &str,
) -> Result<(), crate::store::Error> {
    tracing::warn!(schedule = %s.id, %why, "a schedule's run was refused");
    tick.refused(firing, s, "refused", why).await
}

/// A stored schedule's timing, or its problems as one line.
fn timing_of(s: &ScheduleRecord) -> Result<Timing, String> {
    s.timing().map_err(|problems| {
        let messages: Vec<String> = problems.into_iter().map(|(_, m)| m).collect();
        messages.join("; ")
    })
}
