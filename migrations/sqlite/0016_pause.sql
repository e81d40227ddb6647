-- Pause and resume (issue 30): a run asked to pause (`POST /v1/runs/{id}/pause`, or a
-- breakpoint it reached) starts no step until it is resumed. Kept with the run so that the
-- replica running it, or the one that resumes it after a restart, holds it paused.
ALTER TABLE runs ADD COLUMN pause_requested BIGINT NOT NULL DEFAULT 0;
