-- What forking costs a tenant (issue 42): the ledger counts each fork and the bytes of history
-- it copied (its plans, attempts and checkpoint), written with the fork's row, so
-- `forks_per_day` and `fork_bytes_per_day` hold whatever is deleted later.
ALTER TABLE usage_ledger ADD COLUMN fork INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_ledger ADD COLUMN fork_bytes BIGINT NOT NULL DEFAULT 0;
UPDATE usage_ledger SET fork = 1
    WHERE run IN (SELECT id FROM runs WHERE parent_run_id IS NOT NULL);
