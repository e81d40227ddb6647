-- Schedules among many tenants (issue 42). A tick whose run cannot start yet (the engine is
-- full, the store refuses writes) stays due but is not looked at again before `retry_at`; the
-- wait doubles with `retries` (the attempts for the schedule's current tick), and
-- `retry_reason` is why, so a replica logs a change of state once rather than every look.
-- A fire's `reason` says why a tick started no run: `missed`, `rate`, `quota`, `refused`.
ALTER TABLE schedules ADD COLUMN retry_at TEXT;
ALTER TABLE schedules ADD COLUMN retries BIGINT NOT NULL DEFAULT 0;
ALTER TABLE schedules ADD COLUMN retry_reason TEXT;
ALTER TABLE schedule_fires ADD COLUMN reason TEXT;
