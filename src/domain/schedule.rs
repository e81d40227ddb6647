//! Schedules: when a stored run body is started again. A schedule fires on the ticks of a
//! cron expression in a time zone, or every `interval_ms` from its anchor. This module only
//! computes ticks and decides what a due schedule does; storing and firing are elsewhere.
//!
//! The rule for late ticks: a tick fires when it is at most [`MISFIRE_GRACE`] old. An older
//! one was missed (the servers were down or stopped); [`Missed::Skip`] fires nothing for it,
//! [`Missed::CatchUpOne`] fires the latest missed tick once. Either way at most one run
//! starts per evaluation, and the next tick is the one after the tick acted on: ticks late
//! but within the grace fire in order, one per evaluation. The ticks missed are counted
//! ([`MissedTicks`]) so that none passes unrecorded.

use std::str::FromStr;

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::text_enum::text_enum;

mod cron_words;

/// Problems of a timing, each with the member it is about (`cron`, `timezone`,
/// `interval_ms`), for a 422 that lists them all.
pub type Problems = Vec<(&'static str, String)>;

/// How late a tick may fire and still be on time.
pub const MISFIRE_GRACE: Duration = Duration::seconds(60);

/// The shortest interval (and so the most frequent schedule).
pub const MIN_INTERVAL_MS: u64 = 1_000;

/// The longest interval: a year.
pub const MAX_INTERVAL_MS: u64 = 366 * 24 * 3_600 * 1_000;

text_enum! {
    /// What a schedule does about a tick it missed.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ToSchema)]
    pub enum Missed {
        /// Fire nothing for missed ticks: wait for the next one.
        #[default]
        Skip = "skip",
        /// Fire the latest missed tick once, then wait for the next one.
        CatchUpOne = "catch_up_one",
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
    /// seconds first, in an IANA time zone. The error is every problem at once, each with the
    /// member it is about (`cron`, `timezone`), for a 422.
    pub fn cron(expression: &str, zone: &str) -> Result<Timing, Problems> {
        let mut problems = Problems::new();
        let zone = Tz::from_str(zone).map_err(|_| {
            (
                "timezone",
                format!("`{zone}` is not an IANA time zone (e.g. `UTC`, `Europe/Paris`)"),
            )
        });
        let parser = CronParser::builder().seconds(Seconds::Optional).build();
        // The library's own words name none of the fields: they are explained in ours.
        let cron = parser.parse(expression).map_err(|_| {
            cron_words::explain(expression)
                .into_iter()
                .map(|message| ("cron", message))
                .collect::<Problems>()
        });
        let (cron, zone) = match (cron, zone) {
            (Ok(cron), Ok(zone)) => (cron, zone),
            (cron, zone) => {
                problems.extend(cron.err().into_iter().flatten());
                problems.extend(zone.err());
                return Err(problems);
            }
        };
        let timing = Timing::Cron {
            cron: Box::new(cron),
            zone,
        };
        // An expression that parses may still never match (`0 0 30 2 *`).
        if timing.next_after(Utc::now()).is_none() {
            return Err(vec![(
                "cron",
                format!(
                    "`{expression}` never fires (no matching time in the coming years: is the \
                     day in the month?), {}",
                    cron_words::EXAMPLE
                ),
            )]);
        }
        Ok(timing)
    }

    /// An interval timing from `anchor`; the error says what is wrong, for a 422.
    pub fn every(interval_ms: u64, anchor: DateTime<Utc>) -> Result<Timing, Problems> {
        if !(MIN_INTERVAL_MS..=MAX_INTERVAL_MS).contains(&interval_ms) {
            return Err(vec![(
                "interval_ms",
                format!("must be from {MIN_INTERVAL_MS} (a second) to {MAX_INTERVAL_MS} (a year)"),
            )]);
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

/// Ticks that passed without a run: from `first` to `last`, `count` of them (counted up to
/// [`MISSED_COUNTED`]; `count` is that many when there were more).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissedTicks {
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
    pub count: u64,
}

/// How many missed ticks of a cron expression are counted one by one.
pub const MISSED_COUNTED: u64 = 10_000;

impl MissedTicks {
    /// The ticks of `timing` from `first` to `last`, both included; `None` when `last` is
    /// before `first`.
    fn between(timing: &Timing, first: DateTime<Utc>, last: DateTime<Utc>) -> Option<Self> {
        if last < first {
            return None;
        }
        let count = match timing {
            Timing::Every { every, .. } => {
                ((last - first).num_milliseconds() / every.num_milliseconds().max(1)) as u64 + 1
            }
            Timing::Cron { .. } => {
                let (mut n, mut at) = (1, first);
                while n < MISSED_COUNTED {
                    match timing.next_after(at) {
                        Some(next) if next <= last => (n, at) = (n + 1, next),
                        _ => break,
                    }
                }
                n
            }
        };
        Some(MissedTicks { first, last, count })
    }

    /// The ticks in a sentence, for a fire's `error`.
    pub fn describe(&self, why: Option<&str>) -> String {
        let ticks = match self.count {
            1 => "1 tick".to_owned(),
            MISSED_COUNTED.. => format!("{MISSED_COUNTED} or more ticks"),
            n => format!("{n} ticks"),
        };
        let why = why.map_or_else(
            || "no server was running, or the scheduler was behind".to_owned(),
            |why| format!("the run could not start: {why}"),
        );
        format!(
            "missed: {ticks} from {} to {} passed more than {} s before a run could start \
             ({why})",
            self.first
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            self.last.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            MISFIRE_GRACE.num_seconds()
        )
    }
}

/// What a schedule whose next tick is `due` does at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Not due yet.
    Wait,
    /// Start a run for `tick`; the tick after is `next` (`None`: the schedule is spent).
    /// `missed` are the ticks before `tick` that passed without a run.
    Fire {
        tick: DateTime<Utc>,
        next: Option<DateTime<Utc>>,
        missed: Option<MissedTicks>,
    },
    /// The ticks since `due` were missed and the policy skips them; the tick after is `next`.
    Skip {
        next: Option<DateTime<Utc>>,
        missed: Option<MissedTicks>,
    },
}

/// Decides what a schedule does at `now` (see the module doc for the rule). Every tick that
/// is at most [`MISFIRE_GRACE`] late fires, in order; older ones are missed.
pub fn decide(timing: &Timing, due: DateTime<Utc>, now: DateTime<Utc>, policy: Missed) -> Decision {
    if due > now {
        return Decision::Wait;
    }
    let on_time_from = now - MISFIRE_GRACE;
    if due >= on_time_from {
        return Decision::Fire {
            tick: due,
            next: timing.next_after(due),
            missed: None,
        };
    }
    let just_before = |t: DateTime<Utc>| t - Duration::microseconds(1);
    let missed_before = |t: DateTime<Utc>| {
        let last = timing
            .latest_at_or_before(just_before(t), due)
            .unwrap_or(due);
        MissedTicks::between(timing, due, last)
    };
    let on_time = timing
        .next_after(just_before(on_time_from))
        .filter(|t| *t <= now);
    let latest = timing.latest_at_or_before(now, due).unwrap_or(due);
    match (on_time, policy) {
        (Some(_), _) | (None, Missed::CatchUpOne) => {
            let tick = on_time.unwrap_or(latest);
            Decision::Fire {
                tick,
                next: timing.next_after(tick),
                missed: missed_before(tick),
            }
        }
        (None, Missed::Skip) => Decision::Skip {
            next: timing.next_after(now),
            missed: MissedTicks::between(timing, due, latest),
        },
    }
}

/// The idempotency key of the run tick `tick` of schedule `id` starts: one run per tick
/// however many replicas see it due. It holds spaces, which no client's `Idempotency-Key`
/// may (1-255 visible ASCII characters, checked in `api::runs`), so no request can make a
/// run under it and keep the tick from firing.
pub fn tick_key(id: &str, tick: DateTime<Utc>) -> String {
    format!(
        "schedule {id} {}",
        tick.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
    )
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
        for (cron, zone, fields) in [
            ("0 9 * * *", "Mars/Olympus", &["timezone"][..]),
            ("61 * * * *", "UTC", &["cron"]),
            ("every day", "UTC", &["cron"]),
            ("", "UTC", &["cron"]),
            ("0 0 31 2 *", "UTC", &["cron"]),
            // Every problem at once: both bad fields, and the zone.
            ("61 25 * * *", "Mars/Olympus", &["cron", "cron", "timezone"]),
        ] {
            let problems = Timing::cron(cron, zone).unwrap_err();
            let found: Vec<&str> = problems.iter().map(|(f, _)| *f).collect();
            assert_eq!(found, fields, "{cron} {zone}: {problems:?}");
        }
        assert_eq!(
            Timing::every(999, Utc::now()).unwrap_err()[0].0,
            "interval_ms"
        );
        assert_eq!(
            Timing::every(MAX_INTERVAL_MS + 1, Utc::now()).unwrap_err()[0].0,
            "interval_ms"
        );
    }

    #[test]
    fn cron_errors_name_the_field_its_range_what_was_given_and_an_example() {
        for (cron, want) in [
            (
                "61 * * * *",
                &["minute field is `61`", "0-59", "out of range"][..],
            ),
            ("* 24 * * *", &["hour field is `24`", "0-23"]),
            ("* * 0 * *", &["day-of-month field is `0`", "1-31"]),
            ("* * 32 * *", &["day-of-month field is `32`", "1-31"]),
            ("* * * 13 *", &["month field is `13`", "1-12 or JAN-DEC"]),
            (
                "* * * FOO *",
                &["month field is `FOO`", "not a month value"],
            ),
            ("* * * * 8", &["day-of-week field is `8`", "0-7", "Sunday"]),
            (
                "* * * * MON-XYZ",
                &["day-of-week field is `MON-XYZ`", "`XYZ`"],
            ),
            ("60 * * * * *", &["seconds field is `60`", "0-59"]),
            ("*/0 * * * *", &["minute field is `*/0`", "step `/0`"]),
            ("1,2,99 * * * *", &["minute field is `1,2,99`", "`99`"]),
            (
                "30-10 * * * *",
                &["minute field is `30-10`", "runs backwards"],
            ),
            ("every day", &["2 fields", "five (minute hour day-of-month"]),
            ("* * * * * * * *", &["8 fields"]),
            ("", &["0 fields"]),
            ("0 0 31 2 *", &["never fires"]),
        ] {
            let problems = Timing::cron(cron, "UTC").unwrap_err();
            let message = &problems[0].1;
            for fragment in want.iter().chain(&["`0 9 * * 1-5`"]) {
                assert!(
                    message.contains(fragment),
                    "{cron}: {fragment} in {message}"
                );
            }
            assert!(!message.contains("Component error"), "{cron}: {message}");
        }
        // Two bad fields: a sentence for each.
        let problems = Timing::cron("61 24 * * *", "UTC").unwrap_err();
        assert!(problems[0].1.contains("minute"), "{problems:?}");
        assert!(problems[1].1.contains("hour"), "{problems:?}");
        // What the library takes, the explanation never refuses.
        for good in [
            "0 9 * * 1-5",
            "*/10 * * * * *",
            "0 0 L * *",
            "0 0 * * 5#2",
            "0 0 * * SUN-SAT",
        ] {
            assert!(Timing::cron(good, "UTC").is_ok(), "{good}");
        }
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
            missed: None,
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
                next: Some(at("2026-01-01T04:00:00Z")),
                missed: Some(MissedTicks {
                    first: due,
                    last: at("2026-01-01T03:00:00Z"),
                    count: 3
                })
            }
        );
        assert_eq!(
            decide(&hourly, due, now, Missed::CatchUpOne),
            Decision::Fire {
                tick: at("2026-01-01T03:00:00Z"),
                next: Some(at("2026-01-01T04:00:00Z")),
                missed: Some(MissedTicks {
                    first: due,
                    last: at("2026-01-01T02:00:00Z"),
                    count: 2
                })
            }
        );
        // Back just after a tick: that tick is on time, the earlier ones are gone.
        assert_eq!(
            decide(&hourly, due, at("2026-01-01T03:00:05Z"), Missed::Skip),
            Decision::Fire {
                tick: at("2026-01-01T03:00:00Z"),
                next: Some(at("2026-01-01T04:00:00Z")),
                missed: Some(MissedTicks {
                    first: due,
                    last: at("2026-01-01T02:00:00Z"),
                    count: 2
                })
            }
        );
    }

    #[test]
    fn every_tick_at_most_a_minute_late_fires_in_order_and_older_ones_are_counted_missed() {
        let anchor = at("2026-01-01T00:00:00Z");
        let every_second = Timing::every(1_000, anchor).unwrap();
        // The loop was 5 s behind: the due tick fires, and the next one is the tick after it.
        let due = at("2026-01-01T00:00:10Z");
        assert_eq!(
            decide(&every_second, due, at("2026-01-01T00:00:15Z"), Missed::Skip),
            Decision::Fire {
                tick: due,
                next: Some(at("2026-01-01T00:00:11Z")),
                missed: None
            }
        );
        // 90 s behind: the 30 ticks more than a minute late are missed, the rest fire.
        let now = at("2026-01-01T00:01:40Z");
        let Decision::Fire { tick, missed, .. } = decide(&every_second, due, now, Missed::Skip)
        else {
            panic!("fires")
        };
        assert_eq!(tick, at("2026-01-01T00:00:40Z"));
        let missed = missed.unwrap();
        assert_eq!((missed.first, missed.count), (due, 30));
        assert!(
            missed
                .describe(None)
                .starts_with("missed: 30 ticks from 2026-01-01T00:00:10Z")
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
                next: Some(at("2026-01-05T02:30:00Z")),
                missed: Some(MissedTicks {
                    first: due,
                    last: at("2026-01-03T02:30:00Z"),
                    count: 3
                })
            }
        );
    }
}
