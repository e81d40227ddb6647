-- The agent registry (issue 11): agent definitions by tenant and name, like workflows.
-- Shared agents (loaded from the agents directory at start) have tenant ''.
CREATE TABLE agents (
    tenant     TEXT NOT NULL,
    name       TEXT NOT NULL,
    definition TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant, name)
);
