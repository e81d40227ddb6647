-- Completion webhooks (issue 30): one delivery per run that names a webhook, written with the
-- run's row, sent once the run has ended. `next_attempt_at` (Unix ms) is when it may be tried
-- next; a replica claims an attempt by moving it on with a compare-and-set, so one replica
-- sends each attempt. Every attempt is kept.
CREATE TABLE webhook_deliveries (
    run_id           TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    url              TEXT NOT NULL,
    state            TEXT NOT NULL,
    attempts         BIGINT NOT NULL DEFAULT 0,
    next_attempt_at  BIGINT NOT NULL DEFAULT 0,
    created_at       TEXT NOT NULL,
    finished_at      TEXT
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE state = 'pending';

CREATE TABLE webhook_attempts (
    run_id       TEXT NOT NULL,
    attempt      BIGINT NOT NULL,
    at           TEXT NOT NULL,
    status_code  BIGINT,
    error        TEXT,
    duration_ms  BIGINT NOT NULL,
    PRIMARY KEY (run_id, attempt)
);
