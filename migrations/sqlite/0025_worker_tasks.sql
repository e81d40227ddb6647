-- Issue 47: tool calls served by a tenant's own workers. A task is one call of a worker tool,
-- queued by the run that makes it and claimed by a worker under a lease. Times a replica
-- compares are the database's clock in epoch milliseconds (like leases). A call is found again
-- by (run_id, call_key, generation): a resumed run adopts its task instead of queueing another;
-- generation counts the tasks of that call that failed before (a retried step queues anew).
CREATE TABLE tasks (
    id                   TEXT PRIMARY KEY,
    tenant               TEXT NOT NULL,
    queue                TEXT NOT NULL,
    tool                 TEXT NOT NULL,
    run_id               TEXT NOT NULL,
    step_id              TEXT NOT NULL,
    path                 TEXT,
    call_id              TEXT NOT NULL,
    call_key             TEXT NOT NULL,
    generation           INTEGER NOT NULL,
    idempotency_key      TEXT NOT NULL,
    arguments            TEXT NOT NULL,
    status               TEXT NOT NULL,
    attempts             INTEGER NOT NULL DEFAULT 0,
    max_attempts         INTEGER NOT NULL,
    backoff_ms           INTEGER NOT NULL,
    max_backoff_ms       INTEGER NOT NULL,
    schedule_to_start_ms INTEGER NOT NULL,
    start_to_close_ms    INTEGER NOT NULL,
    heartbeat_ms         INTEGER,
    not_before_ms        INTEGER NOT NULL,
    start_deadline_ms    INTEGER NOT NULL,
    claim_deadline_ms    INTEGER,
    lease_until_ms       INTEGER,
    worker_id            TEXT,
    progress             TEXT,
    output               TEXT,
    error                TEXT,
    created_at_ms        INTEGER NOT NULL,
    claimed_at_ms        INTEGER,
    finished_at_ms       INTEGER,
    UNIQUE (run_id, call_key, generation)
);
CREATE INDEX tasks_ready ON tasks (tenant, queue, status, not_before_ms);
CREATE INDEX tasks_open ON tasks (status, lease_until_ms);
CREATE INDEX tasks_listed ON tasks (tenant, created_at_ms, id);

-- The workers that polled, per tenant: who, which queue and tools, when last.
CREATE TABLE task_workers (
    tenant       TEXT NOT NULL,
    worker_id    TEXT NOT NULL,
    queue        TEXT NOT NULL,
    tools        TEXT NOT NULL,
    last_poll_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant, worker_id, queue)
);
