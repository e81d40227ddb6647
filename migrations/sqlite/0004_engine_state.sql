-- What a run needs to resume exactly where it stopped.
--
-- Step attempts are keyed by where they sit too: children of sequential, parallel and loop
-- steps have a `path` (the enclosing steps from the top-level one down, loop iterations as
-- `id[i]`), so the same child in two iterations keeps two histories. '' = a top-level step.
CREATE TABLE step_attempts_v2 (
    run_id       TEXT NOT NULL,
    plan_version INTEGER NOT NULL,
    path         TEXT NOT NULL DEFAULT '',
    step_id      TEXT NOT NULL,
    attempt      INTEGER NOT NULL,
    name         TEXT NOT NULL,
    kind         TEXT NOT NULL,
    status       TEXT NOT NULL,
    input        TEXT,
    output       TEXT,
    error        TEXT,
    started_at   TEXT NOT NULL,
    completed_at TEXT,
    duration_ms  INTEGER,
    PRIMARY KEY (run_id, plan_version, path, step_id, attempt)
);
INSERT INTO step_attempts_v2 (run_id, plan_version, path, step_id, attempt, name, kind, status,
    input, output, error, started_at, completed_at, duration_ms)
SELECT run_id, plan_version, '', step_id, attempt, name, kind, status,
    input, output, error, started_at, completed_at, duration_ms
FROM step_attempts;
DROP TABLE step_attempts;
ALTER TABLE step_attempts_v2 RENAME TO step_attempts;

-- The run's limit counters, kept as they change so a resumed run goes on counting.
ALTER TABLE runs ADD COLUMN steps_used INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN retries_used INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN time_used_ms INTEGER NOT NULL DEFAULT 0;

-- Answers to `user_input` steps, stored before the answer is acknowledged, so an answer
-- survives a crash between the 202 and the run taking it. `step_key` is the step's path and id.
CREATE TABLE input_answers (
    run_id      TEXT NOT NULL,
    step_key    TEXT NOT NULL,
    value       TEXT NOT NULL,
    answered_at TEXT NOT NULL,
    PRIMARY KEY (run_id, step_key)
);
