//! Per-tenant quotas (`[quotas]`): what a tenant's runs may take of the service, checked when
//! a run is created (`store::Store::insert_run` holds them in the insert itself).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What one tenant may use; 0 is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Quota {
    /// Runs in progress at once (queued, running, waiting for input, paused).
    pub running_runs: u64,
    /// Runs queued for a running slot at once on one server (replica), of the
    /// `engine.max_queued_runs` all tenants share; past it a new run is 429. Default 256.
    pub queued_runs: u64,
    /// Runs created in any 60 seconds.
    pub runs_per_minute: u64,
    /// Tokens (prompt and completion) of the runs created on one UTC day.
    pub tokens_per_day: u64,
    /// The highest `priority` the tenant's runs may ask (`null`: the request schema's 1000).
    /// A priority orders the tenant's own runs only; across tenants the queue is fair.
    pub max_priority: Option<i64>,
    /// The tenant's share of the running slots when tenants queue for them at once: a tenant
    /// of weight 2 is served twice as often as one of weight 1 (1-1000, default 1).
    pub weight: u32,
    /// Runs paused (or asked to pause, by a request or a breakpoint) at once. Each waits with
    /// its task in memory; past it a pause request is 429 and a breakpoint reached fails its
    /// run with `paused_runs_exceeded`. Limited by default, unlike the others.
    pub paused_runs: u64,
    /// Schedules the tenant may have (enabled or not); past it, `POST /v1/schedules` is 429
    /// `quota_exceeded`. Default 100.
    pub schedules: u64,
    /// Runs the tenant's schedules may start in any 60 seconds (by tick time); a tick past it
    /// starts nothing and is recorded with reason `rate`. Default 600.
    pub schedule_fires_per_minute: u64,
    /// Forks (`POST /v1/runs/{id}/fork`) the tenant may make in one UTC day; past it a fork is
    /// 429 `quota_exceeded`. Default 1,000.
    pub forks_per_day: u64,
    /// Bytes of history (plan versions, step attempts, the checkpoint) the tenant's forks may
    /// copy in one UTC day; a fork past it is 429, and a fork larger than all of it is 413.
    /// Default 1 GiB.
    pub fork_bytes_per_day: u64,
}

/// How many runs a tenant may have paused at once unless configured.
pub const DEFAULT_PAUSED_RUNS: u64 = 100;

/// How many runs a tenant may have queued on one server unless configured: a quarter of the
/// default `engine.max_queued_runs`, so three others still find room.
pub const DEFAULT_QUEUED_RUNS: u64 = 256;

/// How many bytes of history a tenant's forks may copy in a day unless configured.
pub const DEFAULT_FORK_BYTES_PER_DAY: u64 = 1 << 30;

impl Default for Quota {
    /// No limit on runs; a bound on what waits, fires or is copied without a run's own limits
    /// to hold it: queued and paused runs, schedules and forks.
    fn default() -> Quota {
        Quota {
            running_runs: 0,
            queued_runs: DEFAULT_QUEUED_RUNS,
            runs_per_minute: 0,
            tokens_per_day: 0,
            max_priority: None,
            weight: 1,
            paused_runs: DEFAULT_PAUSED_RUNS,
            schedules: 100,
            schedule_fires_per_minute: 600,
            forks_per_day: 1_000,
            fork_bytes_per_day: DEFAULT_FORK_BYTES_PER_DAY,
        }
    }
}

impl Quota {
    /// Whether any limit a new run's insert checks is set (`paused_runs` is checked when a
    /// run pauses, the schedules' own limits apart).
    pub fn limits_anything(&self) -> bool {
        self.running_runs > 0 || self.runs_per_minute > 0 || self.tokens_per_day > 0
    }

    /// Whether any limit a fork's insert checks beyond a run's is set.
    pub fn limits_forks(&self) -> bool {
        self.forks_per_day > 0 || self.fork_bytes_per_day > 0
    }
}

/// What each user of a tenant may use (`[quotas.user]`), beside the tenant's own quota; 0 is
/// no limit. Checked in a new run's insert, as the tenant's are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct UserQuota {
    /// Runs of one user in progress at once.
    pub running_runs: u64,
    /// Runs of one user created in any 60 seconds.
    pub runs_per_minute: u64,
}

impl UserQuota {
    pub fn limits_anything(&self) -> bool {
        self.running_runs > 0 || self.runs_per_minute > 0
    }
}

/// What a tenant uses now, against its quota.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = QuotaUsage)]
pub struct Usage {
    /// Runs in progress.
    pub running_runs: u64,
    /// Runs created in the last 60 seconds.
    pub runs_last_minute: u64,
    /// Tokens of the runs created today (UTC).
    pub tokens_today: u64,
    /// Forks made today (UTC).
    pub forks_today: u64,
    /// Bytes of history the forks made today (UTC) copied.
    pub fork_bytes_today: u64,
    /// When the oldest of the last minute's runs was created.
    #[serde(skip)]
    pub oldest_in_minute: Option<DateTime<Utc>>,
}

/// Which limit a new run would pass, and when to try again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exceeded {
    /// `running_runs`, `queued_runs`, `runs_per_minute`, `tokens_per_day`, `paused_runs`,
    /// `forks_per_day` or `fork_bytes_per_day`.
    pub quota: &'static str,
    pub limit: u64,
    pub used: u64,
    /// What the refused request would have added to `used` (1 but for fork bytes).
    pub asked: u64,
    /// Seconds until trying again may succeed.
    pub retry_after_secs: u64,
}

impl Exceeded {
    /// A pause past `paused_runs`: another run of the tenant must be resumed (or end) first.
    pub fn paused(limit: u64, used: u64) -> Exceeded {
        Exceeded {
            quota: "paused_runs",
            limit,
            used,
            asked: 1,
            retry_after_secs: 5,
        }
    }

    /// A run past `queued_runs`: one of the tenant's queued runs must start (or end) first.
    pub fn queued(limit: u64, used: u64) -> Exceeded {
        Exceeded {
            quota: "queued_runs",
            limit,
            used,
            asked: 1,
            retry_after_secs: 1,
        }
    }

    /// The first limit `usage` reaches, as of `now`; `None` when a run fits.
    pub fn of(quota: &Quota, usage: &Usage, now: DateTime<Utc>) -> Option<Exceeded> {
        let minute_frees = usage.oldest_in_minute.map_or(1, |oldest| {
            let frees = oldest + chrono::Duration::seconds(60);
            (frees - now).num_seconds().clamp(1, 60) as u64
        });
        let day_ends = seconds_to_tomorrow(now);
        hit("running_runs", quota.running_runs, usage.running_runs, 5)
            .or_else(|| {
                hit(
                    "runs_per_minute",
                    quota.runs_per_minute,
                    usage.runs_last_minute,
                    minute_frees,
                )
            })
            .or_else(|| {
                hit(
                    "tokens_per_day",
                    quota.tokens_per_day,
                    usage.tokens_today,
                    day_ends,
                )
            })
    }

    /// The first of a user's limits a new run of theirs would pass, with `usage` (the user's
    /// runs in progress and of the last minute) as of `now`.
    pub fn of_user(quota: &UserQuota, usage: &Usage, now: DateTime<Utc>) -> Option<Exceeded> {
        let minute_frees = usage.oldest_in_minute.map_or(1, |oldest| {
            let frees = oldest + chrono::Duration::seconds(60);
            (frees - now).num_seconds().clamp(1, 60) as u64
        });
        hit(
            "user_running_runs",
            quota.running_runs,
            usage.running_runs,
            5,
        )
        .or_else(|| {
            hit(
                "user_runs_per_minute",
                quota.runs_per_minute,
                usage.runs_last_minute,
                minute_frees,
            )
        })
    }

    /// The first fork limit a fork copying `bytes` would pass, as of `now`, with `usage`;
    /// `None` when it fits (a run's own limits are [`Exceeded::of`]'s).
    pub fn of_fork(
        quota: &Quota,
        usage: &Usage,
        bytes: u64,
        now: DateTime<Utc>,
    ) -> Option<Exceeded> {
        let day_ends = seconds_to_tomorrow(now);
        hit(
            "forks_per_day",
            quota.forks_per_day,
            usage.forks_today,
            day_ends,
        )
        .or_else(|| {
            let limit = quota.fork_bytes_per_day;
            let used = usage.fork_bytes_today;
            (limit > 0 && used.saturating_add(bytes) > limit).then_some(Exceeded {
                quota: "fork_bytes_per_day",
                limit,
                used,
                asked: bytes,
                retry_after_secs: day_ends,
            })
        })
    }

    /// The refusal in a sentence.
    pub fn describe(&self) -> String {
        let what = match self.quota {
            "running_runs" | "user_running_runs" => "runs in progress",
            "runs_per_minute" | "user_runs_per_minute" => "runs created in the last minute",
            "paused_runs" => "runs paused or pausing",
            "queued_runs" => "runs queued for a slot on this server",
            "forks_per_day" => "forks made today (UTC)",
            "fork_bytes_per_day" => "bytes of history copied by forks today (UTC)",
            _ => "tokens used today (UTC)",
        };
        let this = match self.quota {
            "fork_bytes_per_day" => format!(", and this fork would copy {} more", self.asked),
            _ => String::new(),
        };
        let whose = match self.quota.starts_with("user_") {
            true => "user's",
            false => "tenant's",
        };
        format!(
            "the {whose} quota `{}` is {}: it has {} {what}{this}; try again in {} s",
            self.quota, self.limit, self.used, self.retry_after_secs
        )
    }
}

/// `used` past a count `limit` (0: none), refused for `retry_after_secs`.
fn hit(quota: &'static str, limit: u64, used: u64, retry_after_secs: u64) -> Option<Exceeded> {
    (limit > 0 && used >= limit).then_some(Exceeded {
        quota,
        limit,
        used,
        asked: 1,
        retry_after_secs,
    })
}

/// Seconds until the next UTC day, when the per-day quotas start again (at least 1).
fn seconds_to_tomorrow(now: DateTime<Utc>) -> u64 {
    let tomorrow = (now.date_naive() + chrono::Days::new(1))
        .and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc());
    tomorrow.map_or(3600, |t| (t - now).num_seconds().max(1) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_limit_reached_says_when_to_try_again() {
        let now: DateTime<Utc> = "2026-11-27T23:59:00Z".parse().unwrap();
        let quota = Quota {
            running_runs: 2,
            runs_per_minute: 10,
            tokens_per_day: 100,
            paused_runs: 0,
            ..Quota::default()
        };
        let mut usage = Usage {
            running_runs: 1,
            runs_last_minute: 10,
            tokens_today: 100,
            forks_today: 0,
            fork_bytes_today: 0,
            oldest_in_minute: Some("2026-11-27T23:58:30Z".parse().unwrap()),
        };
        let hit = Exceeded::of(&quota, &usage, now).unwrap();
        assert_eq!((hit.quota, hit.retry_after_secs), ("runs_per_minute", 30));
        usage.runs_last_minute = 3;
        let hit = Exceeded::of(&quota, &usage, now).unwrap();
        assert_eq!((hit.quota, hit.retry_after_secs), ("tokens_per_day", 60));
        usage.tokens_today = 99;
        assert_eq!(Exceeded::of(&quota, &usage, now), None);
        assert_eq!(
            Exceeded::of(
                &Quota::default(),
                &Usage {
                    running_runs: 1_000,
                    ..usage
                },
                now
            ),
            None
        );
    }

    #[test]
    fn a_fork_is_held_to_the_days_count_and_bytes() {
        let now: DateTime<Utc> = "2026-11-27T23:00:00Z".parse().unwrap();
        let quota = Quota {
            forks_per_day: 3,
            fork_bytes_per_day: 1_000,
            ..Quota::default()
        };
        let mut usage = Usage {
            forks_today: 2,
            fork_bytes_today: 600,
            ..Usage::default()
        };
        assert_eq!(Exceeded::of_fork(&quota, &usage, 400, now), None);
        let hit = Exceeded::of_fork(&quota, &usage, 401, now).unwrap();
        assert_eq!(
            (hit.quota, hit.used, hit.asked, hit.retry_after_secs),
            ("fork_bytes_per_day", 600, 401, 3600)
        );
        assert!(
            hit.describe().contains("this fork would copy 401 more"),
            "{}",
            hit.describe()
        );
        usage.forks_today = 3;
        let hit = Exceeded::of_fork(&quota, &usage, 0, now).unwrap();
        assert_eq!(hit.quota, "forks_per_day");
        let unlimited = Quota {
            forks_per_day: 0,
            fork_bytes_per_day: 0,
            ..quota
        };
        assert_eq!(Exceeded::of_fork(&unlimited, &usage, u64::MAX, now), None);
    }
}
