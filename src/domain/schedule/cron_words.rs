//! A refused cron expression explained in the user's terms: which field is wrong (seconds,
//! minute, hour, day-of-month, month, day-of-week), its allowed range, what was given, and a
//! valid example. The cron library stays the judge of what parses; this module only runs on
//! an expression it refused, so it never refuses one the library takes.

/// A valid expression to copy, named in every message.
pub const EXAMPLE: &str =
    "e.g. `0 9 * * 1-5` (09:00 on weekdays) or `*/30 * * * * *` (every 30 seconds, seconds first)";

/// One field of a cron expression and what it takes.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    /// Names taken for numbers (months, days of the week), in order from `min`.
    names: &'static [&'static str],
    /// Whether `?` and the `L`/`W`/`#` forms are taken (the day fields).
    day: bool,
}

const SECONDS: Field = Field::numbers("seconds", 0, 59);
const MINUTE: Field = Field::numbers("minute", 0, 59);
const HOUR: Field = Field::numbers("hour", 0, 23);
const DAY_OF_MONTH: Field = Field {
    day: true,
    ..Field::numbers("day-of-month", 1, 31)
};
const MONTH: Field = Field {
    names: &[
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ],
    ..Field::numbers("month", 1, 12)
};
const DAY_OF_WEEK: Field = Field {
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    day: true,
    ..Field::numbers("day-of-week", 0, 7)
};

impl Field {
    const fn numbers(name: &'static str, min: u32, max: u32) -> Field {
        Field {
            name,
            min,
            max,
            names: &[],
            day: false,
        }
    }

    /// What the field takes, as a phrase.
    fn takes(&self) -> String {
        let mut s = format!("{}-{}", self.min, self.max);
        if let (Some(first), Some(last)) = (self.names.first(), self.names.last()) {
            s.push_str(&format!(" or {first}-{last}"));
        }
        if self.name == "day-of-week" {
            s.push_str(" (0 and 7 are Sunday)");
        }
        s
    }

    /// Why `text` is not a value of this field; `None` when it reads.
    fn problem(&self, text: &str) -> Option<String> {
        text.split(',').find_map(|item| self.item_problem(item))
    }

    fn item_problem(&self, item: &str) -> Option<String> {
        let (base, step) = match item.split_once('/') {
            Some((base, step)) => (base, Some(step)),
            None => (item, None),
        };
        if let Some(step) = step {
            match step.parse::<u32>() {
                Ok(n) if n >= 1 && n <= self.max.max(1) => {}
                _ => {
                    return Some(format!(
                        "the step `/{step}` must be a number from 1 to {}",
                        self.max.max(1)
                    ));
                }
            }
        }
        if base == "*" || (self.day && base == "?") || base.is_empty() && step.is_some() {
            return None;
        }
        if self.day && is_day_form(base) {
            return None;
        }
        match base.split_once('-') {
            Some((from, to)) => {
                let (from_n, to_n) = (self.value(from), self.value(to));
                let bad = [(from, from_n), (to, to_n)]
                    .into_iter()
                    .find_map(|(t, v)| v.is_err().then(|| self.out_of_range(t)));
                match (bad, from_n, to_n) {
                    (Some(bad), _, _) => Some(bad),
                    (None, Ok(a), Ok(b)) if a > b && !(self.name == "day-of-week" && b == 0) => {
                        Some(format!("the range `{base}` runs backwards"))
                    }
                    _ => None,
                }
            }
            None => self.value(base).err().map(|()| self.out_of_range(base)),
        }
    }

    /// A number or a name of this field, in its range.
    fn value(&self, text: &str) -> Result<u32, ()> {
        if let Ok(n) = text.parse::<u32>() {
            return (self.min..=self.max).contains(&n).then_some(n).ok_or(());
        }
        self.names
            .iter()
            .position(|name| name.eq_ignore_ascii_case(text))
            .map(|i| self.min + i as u32)
            .ok_or(())
    }

    fn out_of_range(&self, text: &str) -> String {
        if text.parse::<u64>().is_ok() {
            format!("`{text}` is out of range")
        } else {
            format!("`{text}` is not a {} value", self.name)
        }
    }
}

/// `L`, `LW`, `15W`, `5L`, `5#2`: the day fields' special forms (their numbers are left to
/// the library).
fn is_day_form(text: &str) -> bool {
    let upper = text.to_ascii_uppercase();
    upper == "L"
        || upper == "LW"
        || upper.contains('#')
        || (upper.ends_with('W') || upper.ends_with('L')) && upper.len() > 1
}

/// Every problem of a cron expression the library refused, one sentence each, in the user's
/// terms (at least one: an expression whose fields all read gets a general sentence).
pub fn explain(expression: &str) -> Vec<String> {
    let parts: Vec<&str> = expression.split_whitespace().collect();
    let fields: &[Field] = match parts.len() {
        5 => &[MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK],
        6 => &[SECONDS, MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK],
        n => {
            return vec![format!(
                "`{expression}` has {n} field{}; a cron expression has five (minute hour \
                 day-of-month month day-of-week) or six with seconds first, {EXAMPLE}",
                if n == 1 { "" } else { "s" }
            )];
        }
    };
    let problems: Vec<String> = parts
        .iter()
        .zip(fields)
        .filter_map(|(text, field)| {
            field.problem(text).map(|why| {
                format!(
                    "the {} field is `{text}`: {why}; it takes {}, `*`, lists (`1,15`), ranges \
                     (`1-5`) and steps (`*/10`), {EXAMPLE}",
                    field.name,
                    field.takes()
                )
            })
        })
        .collect();
    if problems.is_empty() {
        vec![format!(
            "`{expression}` is not a cron expression: five fields (minute hour day-of-month \
             month day-of-week) or six with seconds first, {EXAMPLE}"
        )]
    } else {
        problems
    }
}
