-- Schedules (issue 30): a run body started on the ticks of a cron expression or an interval.
-- `next_fire_at` is the next tick (RFC 3339 UTC with microseconds, so text order is time
-- order); a replica claims a tick by moving it on with a compare-and-set, and the run it starts
-- carries the idempotency key `schedule:<id>:<tick>`, so a tick starts at most one run however
-- many replicas see it due. `fires` keeps each tick's run (or why it could not start).
CREATE TABLE schedules (
    id            TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL,
    name          TEXT,
    cron          TEXT,
    timezone      TEXT NOT NULL,
    interval_ms   BIGINT,
    anchor_at     TEXT NOT NULL,
    run           TEXT NOT NULL,
    enabled       BIGINT NOT NULL,
    missed        TEXT NOT NULL,
    next_fire_at  TEXT,
    last_fire_at  TEXT,
    last_run_id   TEXT,
    fire_count    BIGINT NOT NULL DEFAULT 0,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL
);
CREATE INDEX schedules_tenant ON schedules (tenant, created_at);
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE enabled = 1;

CREATE TABLE schedule_fires (
    schedule_id  TEXT NOT NULL,
    fire_at      TEXT NOT NULL,
    run_id       TEXT,
    error        TEXT,
    fired_at     TEXT NOT NULL,
    PRIMARY KEY (schedule_id, fire_at)
);
