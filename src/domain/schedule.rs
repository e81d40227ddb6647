//! Schedules: when a stored run body is started again. A schedule fires on the ticks of a
//! cron expression in a time zone, or every `interval_ms` from its anchor. This module only
//! computes ticks and decides what a due schedule does; storing and firing are elsewhere.
//!
//! The rule for late ticks: a tick fires when it is at most [`MISFIRE_GRACE`] old. An older
//! one was missed (the servers were down or stopped); [`Missed::Skip`] fires nothing for it,
//! [`Missed::CatchUpOne`] fires the latest missed tick once. Either way at most one run
//! starts per evaluation, and the next tick is the first one after now.

use std::str::FromStr;

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// How late a tick may fire and still be on time.
pub const MISFIRE_GRACE: Duration = Duration::seconds(60);

/// The shortest interval (and so the most frequent schedule).
pub const MIN_INTERVAL_MS: u64 = 1_000;

/// The longest interval: a year.
pub const MAX_INTERVAL_MS: u64 = 366 * 24 * 3_600 * 1_000;

/// What a schedule does about a tick it missed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// Fire nothing for missed ticks: wait for the next one.
    #[default]
    Skip,
    /// Fire the latest missed tick once, then wait for the next one.
    CatchUpOne,
}

impl Missed {
    pub fn as_str(self) -> &'static str {
        match self {
            Missed::Skip => "skip",
            Missed::CatchUpOne => "catch_up_one",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "skip" => Some(Missed::Skip),
            "catch_up_one" => Some(Missed::CatchUpOne),
            _ => None,
        }
    }
}

/// When a schedule's ticks are.
#[derive(Debug, Clone)]
pub enum Timing {
    /// The ticks of a cron expression, read as wall-clock time in `zone`.
    Cron { cron: Box<Cron>, zone: Tz },
    /// `anchor + k × every`, k ≥ 1.
    Every {
        every: Duration,
        anchor: DateTime<Utc>,
    },
}

impl Timing {
    /// A cron timing: five fields (minute hour day-of-month month day-of-week) or six with
    /// seconds first, in an IANA time zone. The error says what is wrong, for a 422.
    pub fn cron(expression: &str, zone: &str) -> Result<Timing, (&'static str, String)> {
        let zone = Tz::from_str(zone).map_err(|_| {
            (
                "timezone",
                format!("`{zone}` is not an IANA time zone (e.g. `UTC`, `Europe/Paris`)"),
            )
        })?;
        let parser = CronParser::builder().seconds(Seconds::Optional).build();
        let cron = parser.parse(expression).map_err(|e| {
            (
                "cron",
                format!("`{expression}` is not a cron expression: {e}"),
            )
        })?;
        let timing = Timing::Cron {
            cron: Box::new(cron),
            zone,
        };
        // An expression that parses may still never match (`0 0 30 2 *`).
        if timing.next_after(Utc::now()).is_none() {
            return Err((
                "cron",
                format!("`{expression}` never fires (no matching time in the coming years)"),
            ));
        }
        Ok(timing)
    }

    /// An interval timing from `anchor`; the error says what is wrong, for a 422.
    pub fn every(
        interval_ms: u64,
        anchor: DateTime<Utc>,
    ) -> Result<Timing, (&'static str, String)> {
        if !(MIN_INTERVAL_MS..=MAX_INTERVAL_MS).contains(&interval_ms) {
            return Err((
                "interval_ms",
                format!("must be from {MIN_INTERVAL_MS} (a second) to {MAX_INTERVAL_MS} (a year)"),
            ));
        }
        Ok(Timing::Every {
            every: Duration::milliseconds(interval_ms as i64),
            anchor,
        })
    }

    /// The first tick strictly after `t`; `None` if there is none.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Timing::Cron { cron, zone } => cron
                .find_next_occurrence(&t.with_timezone(zone), false)
                .ok()
                .map(|next| next.with_timezone(&Utc)),
            Timing::Every { every, anchor } => {
                if t < *anchor {
                    return Some(*anchor + *every);
                }
                let periods = (t - *anchor).num_milliseconds() / every.num_milliseconds();
                Some(*anchor + *every * (periods as i32 + 1))
            }
        }
    }

    /// The latest tick at or before `t`, if it is at or after `since`.
    fn latest_at_or_before(&self, t: DateTime<Utc>, since: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let latest = match self {
            Timing::Cron { cron, zone } => cron
                .find_previous_occurrence(&t.with_timezone(zone), true)
                .ok()
                .map(|prev| prev.with_timezone(&Utc)),
            Timing::Every { every, anchor } => {
                let periods = (t - *anchor).num_milliseconds() / every.num_milliseconds();
                (periods >= 1).then(|| *anchor + *every * periods as i32)
            }
        }?;
        (latest >= since).then_some(latest)
    }

    /// The next `n` ticks after `t`.
    pub fn upcoming(&self, t: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        let mut ticks = Vec::with_capacity(n);
        let mut at = t;
        while ticks.len() < n {
            let Some(next) = self.next_after(at) else {
                break;
            };
            ticks.push(next);
            at = next;
        }
        ticks
    }
}

/// What a schedule whose next tick is `due` does at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Not due yet.
    Wait,
    /// Start a run for `tick`; the tick after is `next` (`None`: the schedule is spent).
    Fire {
        tick: DateTime<Utc>,
        next: Option<DateTime<Utc>>,
    },
    /// The ticks since `due` were missed and the policy skips them; the tick after is `next`.
    Skip { next: Option<DateTime<Utc>> },
}

/// Decides what a schedule does at `now` (see the module doc for the rule).
pub fn decide(timing: &Timing, due: DateTime<Utc>, now: DateTime<Utc>, missed: Missed) -> Decision {
    if due > now {
        return Decision::Wait;
    }
    let tick = timing.latest_at_or_before(now, due).unwrap_or(due);
    let next = timing.next_after(now);
    if now - tick <= MISFIRE_GRACE || missed == Missed::CatchUpOne {
        Decision::Fire { tick, next }
    } else {
        Decision::Skip { next }
    }
}

/// What links a run to the schedule that started it (`Run.schedule`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ScheduleFire {
    /// The schedule's id.
    pub id: String,
    /// The tick the run was started for.
    pub fire_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn cron_ticks_follow_the_time_zone_across_daylight_saving() {
        let t = Timing::cron("0 9 * * *", "Europe/Paris").unwrap();
        // 9:00 in Paris is 8:00 UTC in winter and 7:00 UTC in summer (clocks moved on 29 March).
        let ticks = t.upcoming(at("2026-03-27T12:00:00Z"), 3);
        assert_eq!(
            ticks,
            vec![
                at("2026-03-28T08:00:00Z"),
                at("2026-03-29T07:00:00Z"),
                at("2026-03-30T07:00:00Z")
            ]
        );
    }

    #[test]
    fn six_fields_put_seconds_first() {
        let t = Timing::cron("*/10 * * * * *", "UTC").unwrap();
        assert_eq!(
            t.next_after(at("2026-01-01T00:00:05Z")),
            Some(at("2026-01-01T00:00:10Z"))
        );
    }

    #[test]
    fn bad_timings_say_which_field_is_wrong() {
        for (cron, zone, field) in [
            ("0 9 * * *", "Mars/Olympus", "timezone"),
            ("61 * * * *", "UTC", "cron"),
            ("every day", "UTC", "cron"),
            ("", "UTC", "cron"),
            ("0 0 31 2 *", "UTC", "cron"),
        ] {
            let (f, message) = Timing::cron(cron, zone).unwrap_err();
            assert_eq!(f, field, "{cron} {zone}: {message}");
        }
        assert_eq!(Timing::every(999, Utc::now()).unwrap_err().0, "interval_ms");
        assert_eq!(
            Timing::every(MAX_INTERVAL_MS + 1, Utc::now())
                .unwrap_err()
                .0,
            "interval_ms"
        );
    }

    #[test]
    fn interval_ticks_count_from_the_anchor() {
        let anchor = at("2026-01-01T00:00:00Z");
        let t = Timing::every(60_000, anchor).unwrap();
        assert_eq!(t.next_after(anchor), Some(at("2026-01-01T00:01:00Z")));
        assert_eq!(
            t.next_after(at("2026-01-01T00:01:00Z")),
            Some(at("2026-01-01T00:02:00Z"))
        );
        assert_eq!(
            t.next_after(at("2026-01-01T00:05:30Z")),
            Some(at("2026-01-01T00:06:00Z"))
        );
    }

    #[test]
    fn a_tick_within_the_grace_fires_and_an_older_one_follows_the_policy() {
        let anchor = at("2026-01-01T00:00:00Z");
        let hourly = Timing::every(3_600_000, anchor).unwrap();
        let due = at("2026-01-01T01:00:00Z");
        assert_eq!(
            decide(&hourly, due, at("2026-01-01T00:59:59Z"), Missed::Skip),
            Decision::Wait
        );
        // On time (10 s late): fires, whatever the policy.
        let on_time = Decision::Fire {
            tick: due,
            next: Some(at("2026-01-01T02:00:00Z")),
        };
        for missed in [Missed::Skip, Missed::CatchUpOne] {
            assert_eq!(
                decide(&hourly, due, at("2026-01-01T01:00:10Z"), missed),
                on_time
            );
        }
        // Down from 00:30 to 03:30: the ticks of 01:00, 02:00 and 03:00 were missed.
        let now = at("2026-01-01T03:30:00Z");
        assert_eq!(
            decide(&hourly, due, now, Missed::Skip),
            Decision::Skip {
                next: Some(at("2026-01-01T04:00:00Z"))
            }
        );
        assert_eq!(
            decide(&hourly, due, now, Missed::CatchUpOne),
            Decision::Fire {
                tick: at("2026-01-01T03:00:00Z"),
                next: Some(at("2026-01-01T04:00:00Z"))
            }
        );
        // Back just after a tick: that tick is on time, the earlier ones are gone.
        assert_eq!(
            decide(&hourly, due, at("2026-01-01T03:00:05Z"), Missed::Skip),
            Decision::Fire {
                tick: at("2026-01-01T03:00:00Z"),
                next: Some(at("2026-01-01T04:00:00Z"))
            }
        );
    }

    #[test]
    fn missed_cron_ticks_catch_up_once() {
        let daily = Timing::cron("30 2 * * *", "UTC").unwrap();
        let due = at("2026-01-01T02:30:00Z");
        assert_eq!(
            decide(&daily, due, at("2026-01-04T12:00:00Z"), Missed::CatchUpOne),
            Decision::Fire {
                tick: at("2026-01-04T02:30:00Z"),
                next: Some(at("2026-01-05T02:30:00Z"))
            }
        );
    }
}
