-- orca's schema on PostgreSQL: the SQLite migrations 0001 to 0009 (migrations/sqlite) in one,
-- the same tables, columns and keys. Later migrations keep the same numbers in both folders.
--
-- As on SQLite: JSON is stored as TEXT, times as RFC 3339 UTC text with a fixed width (so
-- they compare in time order), ids as text, integers as 64-bit. Text that is compared or
-- sorted uses the "C" collation, i.e. byte order, as SQLite's BINARY does, whatever the
-- database's locale.

CREATE TABLE runs (
    id                TEXT COLLATE "C" PRIMARY KEY,  -- UUIDv7: sorts by creation time
    tenant            TEXT COLLATE "C" NOT NULL,
    status            TEXT COLLATE "C" NOT NULL,
    completion        TEXT,
    orchestration     TEXT COLLATE "C" NOT NULL,
    spec              TEXT NOT NULL,                 -- the request as accepted (RunSpec JSON)
    input             TEXT NOT NULL,
    output            TEXT,
    error             TEXT,
    metadata          TEXT NOT NULL,
    session_id        TEXT COLLATE "C",
    plan_version      BIGINT,
    prompt_tokens     BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0,
    llm_calls         BIGINT NOT NULL DEFAULT 0,
    tool_calls        BIGINT NOT NULL DEFAULT 0,
    idempotency_key   TEXT COLLATE "C",
    created_at        TEXT COLLATE "C" NOT NULL,
    started_at        TEXT COLLATE "C",
    finished_at       TEXT COLLATE "C",
    idempotency_hash  TEXT,
    steps_used        BIGINT NOT NULL DEFAULT 0,
    retries_used      BIGINT NOT NULL DEFAULT 0,
    time_used_ms      BIGINT NOT NULL DEFAULT 0,
    selection         TEXT
);
CREATE UNIQUE INDEX runs_idempotency ON runs (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_tenant_id ON runs (tenant, id);
CREATE INDEX runs_tenant_status ON runs (tenant, status, id);
CREATE INDEX runs_session ON runs (tenant, session_id, id);
CREATE INDEX runs_finished_at ON runs (finished_at, id) WHERE finished_at IS NOT NULL;

CREATE TABLE events (
    run_id  TEXT COLLATE "C" NOT NULL,
    seq     BIGINT NOT NULL,
    kind    TEXT COLLATE "C" NOT NULL,
    step_id TEXT,
    ts      TEXT NOT NULL,
    data    TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE step_attempts (
    run_id       TEXT COLLATE "C" NOT NULL,
    plan_version BIGINT NOT NULL,
    path         TEXT COLLATE "C" NOT NULL DEFAULT '',
    step_id      TEXT COLLATE "C" NOT NULL,
    attempt      BIGINT NOT NULL,
    name         TEXT NOT NULL,
    kind         TEXT NOT NULL,
    status       TEXT NOT NULL,
    input        TEXT,
    output       TEXT,
    error        TEXT,
    started_at   TEXT COLLATE "C" NOT NULL,
    completed_at TEXT,
    duration_ms  BIGINT,
    PRIMARY KEY (run_id, plan_version, path, step_id, attempt)
);

CREATE TABLE plans (
    run_id     TEXT COLLATE "C" NOT NULL,
    version    BIGINT NOT NULL,
    reason     TEXT NOT NULL,
    plan       TEXT NOT NULL,
    created_at TEXT NOT NULL,
    change     TEXT,
    PRIMARY KEY (run_id, version)
);

CREATE TABLE checkpoints (
    run_id       TEXT COLLATE "C" NOT NULL,
    id           BIGINT NOT NULL,
    plan_version BIGINT NOT NULL,
    state        TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (run_id, id)
);

CREATE TABLE input_answers (
    run_id      TEXT COLLATE "C" NOT NULL,
    step_key    TEXT COLLATE "C" NOT NULL,
    value       TEXT NOT NULL,
    answered_at TEXT NOT NULL,
    PRIMARY KEY (run_id, step_key)
);

CREATE TABLE replan_requests (
    run_id     TEXT COLLATE "C" NOT NULL,
    seq        BIGINT NOT NULL,
    message    TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE session_variables (
    tenant      TEXT COLLATE "C" NOT NULL,
    session_id  TEXT COLLATE "C" NOT NULL,
    name        TEXT COLLATE "C" NOT NULL,
    value       TEXT NOT NULL,
    written_by  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (tenant, session_id, name)
);

CREATE TABLE session_summaries (
    tenant       TEXT COLLATE "C" NOT NULL,
    session_id   TEXT COLLATE "C" NOT NULL,
    summary      TEXT NOT NULL,
    through_run  TEXT COLLATE "C" NOT NULL,
    turns        BIGINT NOT NULL,
    tokens       BIGINT NOT NULL,
    made_by      TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (tenant, session_id)
);

-- The registries: workflows, agents (shared ones under tenant ''), HTTP tools (tenant '*').
CREATE TABLE workflows (
    tenant     TEXT COLLATE "C" NOT NULL,
    name       TEXT COLLATE "C" NOT NULL,
    definition TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant, name)
);

CREATE TABLE agents (
    tenant     TEXT COLLATE "C" NOT NULL,
    name       TEXT COLLATE "C" NOT NULL,
    definition TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant, name)
);

CREATE TABLE http_tools (
    tenant     TEXT COLLATE "C" NOT NULL,
    name       TEXT COLLATE "C" NOT NULL,
    definition TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant, name)
);
