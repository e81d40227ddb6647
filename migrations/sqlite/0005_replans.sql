-- Reactive re-planning.
--
-- A plan version after the first records how it came to be: its trigger, the strategy the
-- re-planner used, what it said, and its difference from the version before (JSON, see
-- `domain::replan::PlanChange`). NULL for a run's first version.
ALTER TABLE plans ADD COLUMN change TEXT;

-- The user's requests for a new plan (`POST /v1/runs/{id}/replan`), stored before they are
-- acknowledged. `seq` numbers a run's requests from 1; a plan version names the request it
-- answered in its trigger, so the requests after the last one answered are still pending.
CREATE TABLE replan_requests (
    run_id     TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    message    TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
