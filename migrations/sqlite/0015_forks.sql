-- Time travel (issue 30).
--
-- A run forked from another (`POST /v1/runs/{id}/fork`) names its parent, so a run's forks
-- are listed with `GET /v1/runs?parent_id=` (the family tree). The fork's spec holds the
-- whole origin (`fork`: parent, checkpoint, step); this column is what the list filters on.
ALTER TABLE runs ADD COLUMN parent_run_id TEXT;
CREATE INDEX runs_parent ON runs (tenant, parent_run_id) WHERE parent_run_id IS NOT NULL;

-- A user's re-plan request may name an earlier plan version to go back to
-- (`POST /v1/runs/{id}/replan` with `restore_version`): the run restores it without asking
-- the re-planner. NULL for a request answered by the re-planner.
ALTER TABLE replan_requests ADD COLUMN restore_version BIGINT;
