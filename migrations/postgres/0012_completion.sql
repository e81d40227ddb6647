-- Issue 26: why a run ended with its completion, and what its plan's steps came to
-- (`{"completed", "failed", "skipped"}` as JSON; NULL for runs that ran no plan).
ALTER TABLE runs ADD COLUMN completion_reason TEXT;
ALTER TABLE runs ADD COLUMN step_counts TEXT;
