-- Work distribution across replicas (issue 13). A run is leased by the replica whose task runs
-- it: `owner` is that replica's id (NULL: nobody's), `lease_expires_at` when the lease lapses
-- unless renewed (Unix milliseconds). A replica renews its leases by heartbeat; another one
-- takes over a run whose lease has lapsed. `cancel_requested` is a cancel asked through a
-- replica that does not run the run: whoever runs it next honours it.
ALTER TABLE runs ADD COLUMN owner TEXT;
ALTER TABLE runs ADD COLUMN lease_expires_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN cancel_requested BIGINT NOT NULL DEFAULT 0;
CREATE INDEX runs_unfinished ON runs (lease_expires_at, id)
    WHERE status IN ('queued', 'running', 'waiting_input');
CREATE INDEX runs_owner ON runs (owner) WHERE owner IS NOT NULL;
