-- Issue 45: every change to a workflow, agent or declared HTTP tool stores a new immutable
-- version; labels point at one version of a definition. The registry tables keep the latest
-- definition and now say which version it is (0 for rows stored before versions: the server
-- stores them as version 1 when it starts).
ALTER TABLE workflows ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE http_tools ADD COLUMN version INTEGER NOT NULL DEFAULT 0;

CREATE TABLE definition_versions (
    tenant     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    name       TEXT NOT NULL,
    version    INTEGER NOT NULL,
    digest     TEXT NOT NULL,
    definition TEXT NOT NULL,
    author     TEXT,
    api_key    TEXT,
    message    TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (tenant, kind, name, version)
);

CREATE TABLE definition_labels (
    tenant     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    name       TEXT NOT NULL,
    label      TEXT NOT NULL,
    version    INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant, kind, name, label)
);
