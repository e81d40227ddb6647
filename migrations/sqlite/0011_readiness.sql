-- One row that `GET /readyz` rewrites (issue 24): a store that cannot take a write (a full
-- disk, a read-only file system) is not ready, whether or not any run is writing just then.
CREATE TABLE readiness (
    id         BIGINT PRIMARY KEY,
    checked_at TEXT NOT NULL
);
