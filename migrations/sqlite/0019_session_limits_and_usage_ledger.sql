-- Many tenants on one server (issue 42): sessions are bounded, deleting one is final, and
-- quotas count what runs used whatever is deleted later.

-- Each session variable's size (bytes of its JSON text), so a session's total is one SUM and
-- a write over `context.session_max_total_bytes` is refused inside its transaction.
ALTER TABLE session_variables ADD COLUMN size BIGINT NOT NULL DEFAULT 0;
UPDATE session_variables SET size = LENGTH(CAST(value AS BLOB));

-- A deleted session: no run is created in it again, and its variables are not set again,
-- so a run racing the delete cannot survive it.
CREATE TABLE deleted_sessions (
    tenant      TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    deleted_at  TEXT NOT NULL,
    PRIMARY KEY (tenant, session_id)
);

-- The quota ledger: one row per run created, with the tokens it used. Deleting runs (by the
-- API, a session delete or the retention sweeper) never touches it, so `runs_per_minute` and
-- `tokens_per_day` count what was spent; rows older than two days are pruned by the
-- retention sweeper. The column is `run`, not `run_id`: this table is not the run's and is
-- not in `store::RUN_TABLES`.
CREATE TABLE usage_ledger (
    run         TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    tokens      BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX usage_ledger_tenant ON usage_ledger (tenant, created_at);
INSERT INTO usage_ledger (run, tenant, created_at, tokens)
    SELECT id, tenant, created_at, prompt_tokens + completion_tokens FROM runs;

-- Kept in step by the database, with the run's own writes: every statement that inserts a run
-- or changes its token counts (the insert, the history writer's row update, the end) does so
-- in the transaction that writes the row.
CREATE TRIGGER usage_ledger_insert AFTER INSERT ON runs
BEGIN
    INSERT INTO usage_ledger (run, tenant, created_at, tokens)
    VALUES (NEW.id, NEW.tenant, NEW.created_at, NEW.prompt_tokens + NEW.completion_tokens)
    ON CONFLICT (run) DO NOTHING;
END;
CREATE TRIGGER usage_ledger_tokens AFTER UPDATE OF prompt_tokens, completion_tokens ON runs
WHEN NEW.prompt_tokens + NEW.completion_tokens <> OLD.prompt_tokens + OLD.completion_tokens
BEGIN
    UPDATE usage_ledger SET tokens = NEW.prompt_tokens + NEW.completion_tokens
    WHERE run = NEW.id;
END;
