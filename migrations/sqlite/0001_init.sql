-- orca's schema. Portable SQL: SQLite now, Postgres later. JSON is stored as TEXT, times as
-- RFC 3339 UTC text with a fixed width (so they compare in time order), ids as text.

CREATE TABLE runs (
    id                TEXT PRIMARY KEY,          -- UUIDv7: sorts by creation time
    tenant            TEXT NOT NULL,
    status            TEXT NOT NULL,
    completion        TEXT,
    orchestration     TEXT NOT NULL,
    spec              TEXT NOT NULL,             -- the request as accepted (RunSpec JSON)
    input             TEXT NOT NULL,
    output            TEXT,
    error             TEXT,
    metadata          TEXT NOT NULL,
    session_id        TEXT,
    plan_version      INTEGER,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    llm_calls         INTEGER NOT NULL DEFAULT 0,
    tool_calls        INTEGER NOT NULL DEFAULT 0,
    idempotency_key   TEXT,
    created_at        TEXT NOT NULL,
    started_at        TEXT,
    finished_at       TEXT
);
CREATE UNIQUE INDEX runs_idempotency ON runs (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_tenant_id ON runs (tenant, id);
CREATE INDEX runs_tenant_status ON runs (tenant, status, id);
CREATE INDEX runs_session ON runs (tenant, session_id, id);

CREATE TABLE events (
    run_id  TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    step_id TEXT,
    ts      TEXT NOT NULL,
    data    TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE step_attempts (
    run_id       TEXT NOT NULL,
    plan_version INTEGER NOT NULL,
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
    PRIMARY KEY (run_id, plan_version, step_id, attempt)
);

CREATE TABLE plans (
    run_id     TEXT NOT NULL,
    version    INTEGER NOT NULL,
    reason     TEXT NOT NULL,
    plan       TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, version)
);

CREATE TABLE checkpoints (
    run_id       TEXT NOT NULL,
    id           INTEGER NOT NULL,
    plan_version INTEGER NOT NULL,
    state        TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (run_id, id)
);

CREATE TABLE workflows (
    tenant     TEXT NOT NULL,
    name       TEXT NOT NULL,
    definition TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant, name)
);
