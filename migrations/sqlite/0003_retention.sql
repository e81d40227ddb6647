-- Retention: the sweeper finds finished runs by when they finished. Unfinished runs have no
-- finished_at and stay out of the index.
CREATE INDEX runs_finished_at ON runs (finished_at, id) WHERE finished_at IS NOT NULL;
