//! `clock.now`: the current date and time in an IANA time zone.
//!
//! Owns time-zone lookup and the shape of the answer. It must not read the system time zone
//! or any environment: the answer depends only on the injected clock and the arguments, so
//! tests can pin it exactly.

use async_trait::async_trait;
use chrono::{DateTime, SecondsFormat, Utc};
use chrono_tz::Tz;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::registry::parse_args;
use super::{Effects, Tool, ToolError};
use crate::domain::ErrorCode;

/// The tool's registered name.
pub const NAME: &str = "clock.now";

/// The `clock.now` tool.
#[derive(Debug, Clone, Copy)]
pub struct ClockNow {
    /// Where "now" comes from: the system clock in production, a fixed instant in tests.
    now: fn() -> DateTime<Utc>,
}

impl Default for ClockNow {
    fn default() -> Self {
        Self::new()
    }
}

impl ClockNow {
    /// Reads the system clock.
    pub fn new() -> Self {
        ClockNow { now: Utc::now }
    }

    /// Reads `now` instead of the system clock (for tests).
    #[cfg(test)]
    pub fn with_clock(now: fn() -> DateTime<Utc>) -> Self {
        ClockNow { now }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    #[serde(default)]
    timezone: Option<String>,
}

#[async_trait]
impl Tool for ClockNow {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Returns the current date and time. Use it whenever the answer depends on today's date, \
         the time of day or the weekday; do not guess them. Returns the time zone, an RFC 3339 \
         timestamp with its UTC offset, the date (YYYY-MM-DD), the time (HH:MM:SS, 24-hour), \
         the weekday in English and Unix seconds."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "timezone": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 64,
                    "default": "UTC",
                    "description": "IANA time zone name such as \"Europe/Paris\", \
                                    \"America/New_York\" or \"Asia/Tokyo\". Defaults to \"UTC\". \
                                    Abbreviations like \"PST\" are not time zones.",
                }
            },
            "additionalProperties": false,
        })
    }

    fn effects(&self) -> Effects {
        Effects::None
    }

    async fn call(&self, args: Value, _cancel: &CancellationToken) -> Result<Value, ToolError> {
        // Reading the clock cannot block, so there is nothing to cancel; the registry checks the
        // token around the call.
        let args: Args = parse_args(NAME, args)?;
        let tz = parse_timezone(args.timezone.as_deref().unwrap_or("UTC"))?;
        let now = (self.now)().with_timezone(&tz);
        Ok(json!({
            "timezone": tz.name(),
            "iso": now.to_rfc3339_opts(SecondsFormat::Secs, false),
            "date": now.format("%Y-%m-%d").to_string(),
            "time": now.format("%H:%M:%S").to_string(),
            "weekday": now.format("%A").to_string(),
            "unix": now.timestamp(),
        }))
    }
}

/// Looks up an IANA name. Exact spelling first; then, because models often get the case wrong
/// ("europe/paris", "utc"), a case-insensitive match against the whole database. The answer
/// always carries the canonical spelling.
fn parse_timezone(name: &str) -> Result<Tz, ToolError> {
    if let Ok(tz) = name.parse::<Tz>() {
        return Ok(tz);
    }
    chrono_tz::TZ_VARIANTS
        .iter()
        .find(|tz| tz.name().eq_ignore_ascii_case(name))
        .copied()
        .ok_or_else(|| {
            ToolError::failed(
                ErrorCode::InvalidTimezone,
                format!(
                    "`{name}` is not an IANA time zone; use a name like \"UTC\", \
                     \"Europe/Paris\" or \"America/New_York\""
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    /// Sunday 2026-03-01 12:34:56 UTC.
    fn fixed() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 12, 34, 56).unwrap()
    }

    async fn now(args: Value) -> Result<Value, ToolError> {
        ClockNow::with_clock(fixed)
            .call(args, &CancellationToken::new())
            .await
    }

    #[tokio::test]
    async fn defaults_to_utc() {
        let out = now(json!({})).await.unwrap();
        assert_eq!(
            out,
            json!({
                "timezone": "UTC",
                "iso": "2026-03-01T12:34:56+00:00",
                "date": "2026-03-01",
                "time": "12:34:56",
                "weekday": "Sunday",
                "unix": 1_772_368_496,
            })
        );
    }

    #[tokio::test]
    async fn converts_to_the_named_zone() {
        let cases = [
            // (zone, iso, date, time, weekday)
            (
                "Asia/Tokyo",
                "2026-03-01T21:34:56+09:00",
                "2026-03-01",
                "21:34:56",
                "Sunday",
            ),
            (
                "America/Los_Angeles",
                "2026-03-01T04:34:56-08:00",
                "2026-03-01",
                "04:34:56",
                "Sunday",
            ),
            (
                "Pacific/Kiritimati",
                "2026-03-02T02:34:56+14:00",
                "2026-03-02",
                "02:34:56",
                "Monday",
            ),
            (
                "Asia/Kolkata",
                "2026-03-01T18:04:56+05:30",
                "2026-03-01",
                "18:04:56",
                "Sunday",
            ),
        ];
        for (zone, iso, date, time, weekday) in cases {
            let out = now(json!({ "timezone": zone })).await.unwrap();
            assert_eq!(out["timezone"], zone);
            assert_eq!(out["iso"], iso, "{zone}");
            assert_eq!(out["date"], date, "{zone}");
            assert_eq!(out["time"], time, "{zone}");
            assert_eq!(out["weekday"], weekday, "{zone}");
            // The instant is the same wherever it is observed.
            assert_eq!(out["unix"], 1_772_368_496_i64, "{zone}");
        }
    }

    #[tokio::test]
    async fn summer_time_changes_the_offset() {
        fn july() -> DateTime<Utc> {
            Utc.with_ymd_and_hms(2026, 7, 1, 12, 0, 0).unwrap()
        }
        let out = ClockNow::with_clock(july)
            .call(
                json!({"timezone": "Europe/Paris"}),
                &CancellationToken::new(),
            )
            .await
            .unwrap();
        assert_eq!(out["iso"], "2026-07-01T14:00:00+02:00");
        assert_eq!(out["weekday"], "Wednesday");
    }

    #[tokio::test]
    async fn wrong_case_finds_the_canonical_name() {
        let out = now(json!({"timezone": "europe/paris"})).await.unwrap();
        assert_eq!(out["timezone"], "Europe/Paris");
        let out = now(json!({"timezone": "utc"})).await.unwrap();
        assert_eq!(out["timezone"], "UTC");
    }

    #[tokio::test]
    async fn unknown_zone_is_invalid_timezone() {
        for zone in ["Mars/Olympus_Mons", "PST8", "", "Europe/Paris "] {
            let err = now(json!({ "timezone": zone })).await.unwrap_err();
            assert_eq!(err.code(), "invalid_timezone", "{zone:?}");
            assert!(err.to_string().contains("not an IANA time zone"), "{err}");
        }
    }

    #[tokio::test]
    async fn system_clock_is_close_to_now() {
        let before = Utc::now().timestamp();
        let out = ClockNow::new()
            .call(json!({}), &CancellationToken::new())
            .await
            .unwrap();
        let unix = out["unix"].as_i64().unwrap();
        assert!(unix >= before && unix <= Utc::now().timestamp());
    }
}
