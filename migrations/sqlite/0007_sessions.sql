-- Sessions: what runs sharing a `session_id` keep besides their own rows.
--
-- Neither table is keyed by `run_id`: a session outlives its runs, and retention deleting an
-- old run leaves the session's variables and summary in place.

-- `session.NAME`: variables a plan writes (`session_variables`) for later runs of its session.
CREATE TABLE session_variables (
    tenant      TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    name        TEXT NOT NULL,
    value       TEXT NOT NULL,          -- JSON
    -- The run that wrote it last.
    written_by  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (tenant, session_id, name)
);

-- The summary of a session's older turns, made when its history passed the token budget.
-- It covers every succeeded run of the session with an id up to `through_run` (ids are UUIDv7,
-- so in creation order); later runs reuse it and summarise only turns after that.
CREATE TABLE session_summaries (
    tenant       TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    summary      TEXT NOT NULL,
    through_run  TEXT NOT NULL,
    -- How many turns (runs) it covers in all, and its length in tokens.
    turns        INTEGER NOT NULL,
    tokens       INTEGER NOT NULL,
    -- The run whose summariser call made it.
    made_by      TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (tenant, session_id)
);
