//! The SQL that writes runs and their histories, written once for both backends. A builder
//! here returns a [`Statement`]: its text with parameters numbered `$1`, `$2`… and its values
//! in order. PostgreSQL (and SQLite when no writer thread serves it) runs it through sqlx;
//! SQLite's writer thread ([`super::sqlite_writer`]) runs the same text with `?N` marks,
//! prepared once per connection and bound by position.
//!
//! A multi-row insert is one statement of many rows: sqlx gets one `VALUES` list of every
//! row's tuple; the writer thread runs its one-row prepared form once per row (no text to
//! parse per batch, no parameter looked up by name).

use std::collections::HashMap;

use serde_json::Value;
use sqlx::AssertSqlSafe;

use super::{Record, Result, fmt_time, to_json};
use crate::domain::{Counters, Event, Run, RunId, StepAttempt, StepPath, Usage};

/// One bound value. Nulls keep their type (PostgreSQL wants to know it).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Param {
    Int(Option<i64>),
    Text(Option<String>),
}

impl From<i64> for Param {
    fn from(v: i64) -> Param {
        Param::Int(Some(v))
    }
}

impl From<Option<i64>> for Param {
    fn from(v: Option<i64>) -> Param {
        Param::Int(v)
    }
}

impl From<String> for Param {
    fn from(v: String) -> Param {
        Param::Text(Some(v))
    }
}

impl From<&str> for Param {
    fn from(v: &str) -> Param {
        Param::Text(Some(v.to_owned()))
    }
}

impl From<Option<String>> for Param {
    fn from(v: Option<String>) -> Param {
        Param::Text(v)
    }
}

impl From<Option<&str>> for Param {
    fn from(v: Option<&str>) -> Param {
        Param::Text(v.map(str::to_owned))
    }
}

/// A statement's text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Text {
    /// `head (tuple), (tuple)… tail`: one tuple of `width` parameters per row.
    Rows {
        head: &'static str,
        width: usize,
        tail: &'static str,
    },
    /// Any other statement, its parameters numbered `$1`, `$2`….
    One(String),
}

/// One statement to run, with its values; see the module docs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Statement {
    pub text: Text,
    pub params: Vec<Param>,
}

impl Statement {
    /// About how many bytes its values write: each text's length, 8 per number.
    pub fn bytes(&self) -> u64 {
        let size = |p: &Param| match p {
            Param::Int(_) => 8,
            Param::Text(t) => t.as_ref().map_or(0, |t| t.len() as u64),
        };
        self.params.iter().map(size).sum()
    }

    /// The text with every row's tuple, `$N` numbered, for sqlx.
    pub fn sql(&self) -> String {
        match &self.text {
            Text::Rows { head, width, tail } => {
                let rows = self.params.len() / width;
                format!("{head} {} {tail}", tuples('$', *width, rows))
            }
            Text::One(sql) => sql.clone(),
        }
    }

    /// The text the SQLite writer prepares (`?N` numbered; a multi-row insert's one-row form),
    /// and how many parameters it takes per execution.
    pub fn sqlite_sql(&self) -> (String, usize) {
        match &self.text {
            Text::Rows { head, width, tail } => {
                (format!("{head} {} {tail}", tuples('?', *width, 1)), *width)
            }
            Text::One(sql) => (question_marks(sql), self.params.len()),
        }
    }

    /// Runs it on a sqlx connection, pool or transaction; the rows it changed.
    pub async fn execute<'e, E>(self, exec: E) -> Result<u64>
    where
        E: sqlx::Executor<'e, Database = sqlx::Any>,
    {
        let mut q = sqlx::query(AssertSqlSafe(self.sql()));
        for p in self.params {
            q = match p {
                Param::Int(v) => q.bind(v),
                Param::Text(v) => q.bind(v),
            };
        }
        Ok(q.execute(exec).await?.rows_affected())
    }
}

/// `rows` tuples of `width` parameters numbered from 1 with `mark`: `($1, $2), ($3, $4)`.
pub(crate) fn tuples(mark: char, width: usize, rows: usize) -> String {
    let mut out = String::with_capacity(rows * width * 5);
    for r in 0..rows {
        if r > 0 {
            out.push_str(", ");
        }
        out.push('(');
        for c in 0..width {
            if c > 0 {
                out.push_str(", ");
            }
            out.push(mark);
            out.push_str(&(r * width + c + 1).to_string());
        }
        out.push(')');
    }
    out
}

/// `$N` parameters as SQLite's `?N` (bound by position, not looked up by name). Only a `$`
/// followed by a digit is a parameter in orca's write statements.
fn question_marks(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('?');
        } else {
            out.push(c);
        }
    }
    out
}

/// Rows per multi-row event insert (6 parameters each, well under both backends' limits).
const EVENTS_PER_INSERT: usize = 256;
/// Rows per multi-row insert of attempts and checkpoints (14 and 5 parameters each).
const ROWS_PER_INSERT: usize = 64;

/// The primary key of a step attempt row: run, plan version, path, step id, attempt.
type AttemptRow<'a> = (RunId, u32, &'a str, &'a str, u32);

fn attempt_row(run: RunId, a: &StepAttempt) -> AttemptRow<'_> {
    let path = a.path.as_ref().map_or("", StepPath::as_str);
    (run, a.plan_version, path, a.step_id.as_str(), a.attempt)
}

/// A batch of history records as statements, at most one per table (more only past the
/// rows-per-insert bounds) and one per run row: events many rows per insert; of several
/// writes of one step attempt (running, then finished) only the last; of several states or
/// counters of one run only the last of each (each holds absolute values).
pub(crate) fn batch(records: &[Record]) -> Vec<Statement> {
    let mut out = Vec::new();
    let events: Vec<&Event> = records
        .iter()
        .filter_map(Record::event)
        .map(|e| &**e)
        .collect();
    out.extend(events.chunks(EVENTS_PER_INSERT).map(insert_events));
    let mut last_attempt: HashMap<AttemptRow<'_>, usize> = HashMap::new();
    for (i, r) in records.iter().enumerate() {
        if let Record::Attempt(run, a) = r {
            last_attempt.insert(attempt_row(*run, a), i);
        }
    }
    let mut attempts: Vec<(RunId, &StepAttempt)> = Vec::new();
    let mut checkpoints: Vec<(RunId, u64, u32, &Value)> = Vec::new();
    for (i, r) in records.iter().enumerate() {
        match r {
            Record::Attempt(run, a) if last_attempt.get(&attempt_row(*run, a)) == Some(&i) => {
                attempts.push((*run, a));
            }
            Record::Checkpoint {
                run,
                id,
                plan_version,
                state,
            } => checkpoints.push((*run, *id, *plan_version, state)),
            _ => {}
        }
    }
    out.extend(attempts.chunks(ROWS_PER_INSERT).map(upsert_attempts));
    out.extend(checkpoints.chunks(ROWS_PER_INSERT).map(insert_checkpoints));
    out.extend(records.iter().filter_map(insert_plan));
    out.extend(rows_of(records).iter().map(save_row));
    out
}

pub(crate) fn insert_events(events: &[&Event]) -> Statement {
    let mut params = Vec::with_capacity(events.len() * 6);
    for ev in events {
        params.extend([
            ev.run_id.to_string().into(),
            (ev.seq as i64).into(),
            ev.kind.as_str().into(),
            ev.step().map(String::from).into(),
            fmt_time(ev.ts).into(),
            to_json(&ev.data).into(),
        ]);
    }
    Statement {
        text: Text::Rows {
            head: "INSERT INTO events (run_id, seq, kind, step_id, ts, data) VALUES",
            width: 6,
            tail: "",
        },
        params,
    }
}

pub(crate) fn upsert_attempts(rows: &[(RunId, &StepAttempt)]) -> Statement {
    let mut params = Vec::with_capacity(rows.len() * 14);
    for (run, a) in rows {
        params.extend([
            run.to_string().into(),
            (a.plan_version as i64).into(),
            a.path.as_ref().map_or("", StepPath::as_str).into(),
            a.step_id.as_str().into(),
            (a.attempt as i64).into(),
            a.name.clone().into(),
            a.kind.as_str().into(),
            a.status.as_str().into(),
            a.input.as_ref().map(to_json).into(),
            a.output.as_ref().map(to_json).into(),
            a.error.as_ref().map(to_json).into(),
            fmt_time(a.started_at).into(),
            a.completed_at.map(fmt_time).into(),
            a.duration_ms.map(|d| d as i64).into(),
        ]);
    }
    Statement {
        text: Text::Rows {
            head: "INSERT INTO step_attempts (run_id, plan_version, path, step_id, attempt, name,
                kind, status, input, output, error, started_at, completed_at, duration_ms)
             VALUES",
            width: 14,
            tail: "ON CONFLICT (run_id, plan_version, path, step_id, attempt) DO UPDATE SET
                status = excluded.status, output = excluded.output, error = excluded.error,
                input = COALESCE(excluded.input, step_attempts.input),
                completed_at = excluded.completed_at, duration_ms = excluded.duration_ms",
        },
        params,
    }
}

fn insert_checkpoints(rows: &[(RunId, u64, u32, &Value)]) -> Statement {
    let now = fmt_time(crate::domain::now());
    let mut params = Vec::with_capacity(rows.len() * 5);
    for (run, id, version, state) in rows {
        params.extend([
            run.to_string().into(),
            (*id as i64).into(),
            (*version as i64).into(),
            to_json(*state).into(),
            now.clone().into(),
        ]);
    }
    Statement {
        text: Text::Rows {
            head: "INSERT INTO checkpoints (run_id, id, plan_version, state, created_at) VALUES",
            width: 5,
            tail: "",
        },
        params,
    }
}

/// Stores a [`Record::Plan`] (a version already stored is left as it is); None for any other
/// record.
fn insert_plan(record: &Record) -> Option<Statement> {
    let Record::Plan {
        run,
        version,
        reason,
        plan,
        change,
    } = record
    else {
        return None;
    };
    Some(Statement {
        text: Text::One(
            "INSERT INTO plans (run_id, version, reason, plan, change, created_at)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING"
                .into(),
        ),
        params: vec![
            run.to_string().into(),
            (*version as i64).into(),
            reason.as_str().into(),
            to_json(plan).into(),
            change.as_ref().map(to_json).into(),
            fmt_time(crate::domain::now()).into(),
        ],
    })
}

/// What one batch writes of a run's row: its latest state, its latest counters, or both in
/// one statement (the usage columns both carry then come from whichever was queued later).
pub(crate) struct RowWrite<'a> {
    pub run: RunId,
    pub state: Option<&'a Run>,
    pub counters: Option<&'a Counters>,
    pub usage: &'a Usage,
}

impl<'a> RowWrite<'a> {
    /// Every mutable field of `run`.
    pub fn whole(run: &'a Run) -> RowWrite<'a> {
        RowWrite {
            run: run.id,
            state: Some(run),
            counters: None,
            usage: &run.usage,
        }
    }
}

/// What a batch writes of each run's row, in the order the runs first appear.
fn rows_of(records: &[Record]) -> Vec<RowWrite<'_>> {
    let mut rows: Vec<RowWrite<'_>> = Vec::new();
    let mut at: HashMap<RunId, usize> = HashMap::new();
    for rec in records {
        let (run, usage) = match rec {
            Record::RunState(run) | Record::End { run, .. } => (run.id, &run.usage),
            Record::Counters { run, usage, .. } => (*run, usage),
            _ => continue,
        };
        let i = *at.entry(run).or_insert_with(|| {
            rows.push(RowWrite {
                run,
                state: None,
                counters: None,
                usage,
            });
            rows.len() - 1
        });
        let row = &mut rows[i];
        row.usage = usage;
        match rec {
            Record::RunState(state) | Record::End { run: state, .. } => row.state = Some(state),
            Record::Counters { counters, .. } => row.counters = Some(counters),
            _ => {}
        }
    }
    rows
}

/// The `UPDATE` of a run's row. Its text has one of four forms (state and counters each there
/// or not), so a prepared statement serves every run.
pub(crate) fn save_row(row: &RowWrite<'_>) -> Statement {
    const STATE: [&str; 11] = [
        "status",
        "completion",
        "orchestration",
        "selection",
        "output",
        "error",
        "plan_version",
        "started_at",
        "finished_at",
        "completion_reason",
        "step_counts",
    ];
    const USAGE: [&str; 4] = [
        "prompt_tokens",
        "completion_tokens",
        "llm_calls",
        "tool_calls",
    ];
    const COUNTERS: [&str; 3] = ["steps_used", "retries_used", "time_used_ms"];
    let mut columns: Vec<&str> = Vec::with_capacity(18);
    let mut params: Vec<Param> = Vec::with_capacity(19);
    if let Some(run) = row.state {
        columns.extend(STATE);
        params.extend([
            run.status.as_str().into(),
            run.completion.map(|c| c.as_str()).into(),
            run.orchestration.as_str().into(),
            run.selected.as_ref().map(to_json).into(),
            run.output.as_ref().map(to_json).into(),
            run.error.as_ref().map(to_json).into(),
            run.plan_version.map(|v| v as i64).into(),
            run.started_at.map(fmt_time).into(),
            run.finished_at.map(fmt_time).into(),
            run.completion_reason.clone().into(),
            run.step_counts.as_ref().map(to_json).into(),
        ]);
    }
    columns.extend(USAGE);
    let usage = row.usage;
    params.extend([
        (usage.prompt_tokens as i64).into(),
        (usage.completion_tokens as i64).into(),
        (usage.llm_calls as i64).into(),
        (usage.tool_calls as i64).into(),
    ]);
    if let Some(counters) = row.counters {
        columns.extend(COUNTERS);
        params.extend([
            (counters.steps as i64).into(),
            (counters.retries as i64).into(),
            (counters.time_used_ms as i64).into(),
        ]);
    }
    params.push(row.run.to_string().into());
    let set: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{c} = ${}", i + 1))
        .collect();
    let sql = format!(
        "UPDATE runs SET {} WHERE id = ${}",
        set.join(", "),
        columns.len() + 1
    );
    Statement {
        text: Text::One(sql),
        params,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuples_are_numbered_on_across_rows() {
        assert_eq!(tuples('$', 2, 2), "($1, $2), ($3, $4)");
        assert_eq!(tuples('?', 3, 1), "(?1, ?2, ?3)");
    }

    #[test]
    fn sqlite_text_numbers_the_same_parameters_by_position() {
        let st = Statement {
            text: Text::One("UPDATE t SET a = $1, b = '$x' WHERE id = $12".into()),
            params: vec![],
        };
        assert_eq!(
            st.sqlite_sql().0,
            "UPDATE t SET a = ?1, b = '$x' WHERE id = ?12"
        );
        let rows = Statement {
            text: Text::Rows {
                head: "INSERT INTO t (a, b) VALUES",
                width: 2,
                tail: "ON CONFLICT DO NOTHING",
            },
            params: vec![1i64.into(), "x".into(), 2i64.into(), "y".into()],
        };
        assert_eq!(
            rows.sql(),
            "INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4) ON CONFLICT DO NOTHING"
        );
        assert_eq!(
            rows.sqlite_sql(),
            (
                "INSERT INTO t (a, b) VALUES (?1, ?2) ON CONFLICT DO NOTHING".into(),
                2
            )
        );
    }
}
