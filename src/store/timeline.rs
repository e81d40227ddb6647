//! What a run's timeline is computed from: the run row, its step attempts and its events, read
//! together. The computation itself is `crate::timeline`'s; this module only reads.

use sqlx::AssertSqlSafe;

use super::{
    Result, Store, event_from_row, placeholders, step_attempt_from_row, stored_run_from_row,
};
use crate::domain::{Event, EventKind, Run, RunId, StepAttempt, Tenant};

/// A run with its history, as one consistent snapshot.
#[derive(Debug, Clone)]
pub struct RunHistory {
    pub run: Run,
    /// Every step attempt, without its input and output (left `None`).
    pub attempts: Vec<StepAttempt>,
    /// The run's events in seq order, except the kinds the caller skipped.
    pub events: Vec<Event>,
}

impl Store {
    /// A tenant's run with its step attempts and its events other than `skip` kinds; `None`
    /// for an unknown run or another tenant's.
    ///
    /// Read in one transaction, so the three agree with each other even while the run goes
    /// on (SQLite gives a read transaction one snapshot; Postgres is asked for one with
    /// `REPEATABLE READ`). Attempts come without their inputs
    /// and outputs, and skipped kinds are filtered in SQL, so a long run's model text and tool
    /// outputs are never read or parsed.
    pub async fn run_history(
        &self,
        tenant: &Tenant,
        id: RunId,
        skip: &[EventKind],
    ) -> Result<Option<RunHistory>> {
        let mut tx = self.pool().begin().await?;
        if self.backend == super::Backend::Postgres {
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                .execute(&mut *tx)
                .await?;
        }
        let row = sqlx::query("SELECT * FROM runs WHERE id = $1 AND tenant = $2")
            .bind(id.to_string())
            .bind(&tenant.0)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let run = stored_run_from_row(&row)?.run;
        let attempts = sqlx::query(
            "SELECT run_id, plan_version, path, step_id, attempt, name, kind, status,
                NULL AS input, NULL AS output, error, started_at, completed_at, duration_ms
             FROM step_attempts WHERE run_id = $1
             ORDER BY started_at, plan_version, path, step_id, attempt",
        )
        .bind(id.to_string())
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(step_attempt_from_row)
        .collect::<Result<Vec<_>>>()?;
        // Only placeholders are added to the statement; the kinds are bound.
        let mut sql = String::from("SELECT * FROM events WHERE run_id = $1");
        if !skip.is_empty() {
            sql.push_str(" AND kind NOT IN ");
            sql.push_str(&placeholders(2, skip.len(), 1));
        }
        sql.push_str(" ORDER BY seq");
        let mut q = sqlx::query(AssertSqlSafe(sql)).bind(id.to_string());
        for kind in skip {
            q = q.bind(kind.as_str());
        }
        let events = q
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| event_from_row(id, r))
            .collect::<Result<Vec<_>>>()?;
        tx.commit().await?;
        Ok(Some(RunHistory {
            run,
            attempts,
            events,
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::domain::run::{RunRequest, RunSpec};
    use crate::domain::{Orchestration, Payload, RunStatus, StepKind, StepStatus};
    use crate::store::{Inserted, Record};

    /// A simple run of input `"x"`, running.
    fn simple_run() -> (RunSpec, Run) {
        let spec = RunSpec::new(RunRequest {
            orchestration: Orchestration::Simple,
            ..RunRequest::new(json!("x"))
        });
        let run = Run {
            status: RunStatus::Running,
            orchestration: Orchestration::Simple,
            ..Run::queued(RunId::new(), &spec, None)
        };
        (spec, run)
    }

    /// A fresh store holding one run of `owner` with four events (two of them tokens) and one
    /// step attempt; the directory holds the database.
    async fn store_with_one_run(owner: &Tenant) -> (tempfile::TempDir, Store, RunId, StepAttempt) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("orca.db").display());
        let store = Store::connect(&url, 2).await.unwrap();
        let (spec, run) = simple_run();
        assert!(matches!(
            store
                .insert_run(owner, &run, &spec, None, Default::default(), &[])
                .await
                .unwrap(),
            Inserted::New
        ));
        let event = |seq: u64, payload: Payload| {
            Record::Event(Arc::new(Event {
                seq,
                run_id: run.id,
                kind: payload.kind(),
                ts: crate::domain::now(),
                step_id: Some("llm-1".into()),
                path: None,
                data: payload,
            }))
        };
        let attempt = StepAttempt {
            step_id: "llm-1".into(),
            path: None,
            name: "llm".into(),
            kind: StepKind::Llm,
            status: StepStatus::Completed,
            attempt: 1,
            plan_version: 0,
            input: Some(json!({ "round": 1 })),
            output: Some(json!({ "text": "hi" })),
            error: None,
            started_at: crate::domain::now(),
            completed_at: Some(crate::domain::now()),
            duration_ms: Some(3),
        };
        store
            .append(&[
                event(1, Payload::status(RunStatus::Running)),
                event(2, Payload::token("hi")),
                event(3, Payload::token(" there")),
                event(4, Payload::status(RunStatus::Succeeded)),
                Record::Attempt(run.id, std::sync::Arc::new(attempt.clone())),
            ])
            .await
            .unwrap();

        (dir, store, run.id, attempt)
    }

    #[tokio::test]
    async fn a_run_is_read_with_its_history_for_its_tenant_only() {
        let owner = Tenant("a".into());
        let (_dir, store, id, attempt) = store_with_one_run(&owner).await;
        let history = store
            .run_history(&owner, id, &[EventKind::Token])
            .await
            .unwrap()
            .expect("the owner reads it");
        assert_eq!(history.run.id, id);
        let seqs: Vec<u64> = history.events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 4], "tokens are skipped");
        let all = store.run_history(&owner, id, &[]).await.unwrap().unwrap();
        assert_eq!(all.events.len(), 4);
        assert_eq!(history.attempts.len(), 1);
        let read = &history.attempts[0];
        assert_eq!((read.input.as_ref(), read.output.as_ref()), (None, None));
        assert_eq!(read.duration_ms, Some(3));
        assert_eq!(read.step_id, attempt.step_id);

        let other = Tenant("b".into());
        assert!(store.run_history(&other, id, &[]).await.unwrap().is_none());
        let missing = RunId::new();
        assert!(
            store
                .run_history(&owner, missing, &[])
                .await
                .unwrap()
                .is_none()
        );
    }
}
