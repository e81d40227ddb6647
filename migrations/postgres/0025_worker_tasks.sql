-- Issue 47: tool calls served by a tenant's own workers. A task is one call of a worker tool,
-- queued by the run that makes it and claimed by a worker under a lease. Times a replica
-- compares are the database's clock in epoch milliseconds (like leases). A call is found again
-- by (run_id, call_key, generation): a resumed run adopts its task instead of queueing another;
-- generation counts the tasks of that call that failed before (a retried step queues anew).
CREATE TABLE tasks (
    id                   TEXT COLLATE "C" PRIMARY KEY,
    tenant               TEXT COLLATE "C" NOT NULL,
    queue                TEXT COLLATE "C" NOT NULL,
    tool                 TEXT COLLATE "C" NOT NULL,
    run_id               TEXT COLLATE "C" NOT NULL,
    step_id              TEXT NOT NULL,
    path                 TEXT,
    call_id              TEXT NOT NULL,
    call_key             TEXT NOT NULL,
    generation           BIGINT NOT NULL,
    idempotency_key      TEXT NOT NULL,
    arguments            TEXT NOT NULL,
    status               TEXT NOT NULL,
    attempts             BIGINT NOT NULL DEFAULT 0,
    max_attempts         BIGINT NOT NULL,
    backoff_ms           BIGINT NOT NULL,
    max_backoff_ms       BIGINT NOT NULL,
    schedule_to_start_ms BIGINT NOT NULL,
    start_to_close_ms    BIGINT NOT NULL,
    heartbeat_ms         BIGINT,
    not_before_ms        BIGINT NOT NULL,
    start_deadline_ms    BIGINT NOT NULL,
    claim_deadline_ms    BIGINT,
    lease_until_ms       BIGINT,
    worker_id            TEXT,
    progress             TEXT,
    output               TEXT,
    error                TEXT,
    created_at_ms        BIGINT NOT NULL,
    claimed_at_ms        BIGINT,
    finished_at_ms       BIGINT,
    UNIQUE (run_id, call_key, generation)
);
CREATE INDEX tasks_ready ON tasks (tenant, queue, status, not_before_ms);
CREATE INDEX tasks_open ON tasks (status, lease_until_ms);
CREATE INDEX tasks_listed ON tasks (tenant, created_at_ms, id);

-- The workers that polled, per tenant: who, which queue and tools, when last.
CREATE TABLE task_workers (
    tenant       TEXT COLLATE "C" NOT NULL,
    worker_id    TEXT COLLATE "C" NOT NULL,
    queue        TEXT COLLATE "C" NOT NULL,
    tools        TEXT NOT NULL,
    last_poll_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant, worker_id, queue)
);
