-- HTTP tools declared through the API (issue 12): one row per tool, shared by every tenant
-- (the tenant column holds '*'); the same shape as the workflow and agent registries.
CREATE TABLE http_tools (
    tenant     TEXT NOT NULL,
    name       TEXT NOT NULL,
    definition TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant, name)
);
