-- Issue 45: named LLM functions declared through the API, each under the tenant that declared
-- it and versioned like workflows, agents and declared tools (definition_versions, kind
-- 'function'). The same shape as the other registries.
CREATE TABLE functions (
    tenant     TEXT COLLATE "C" NOT NULL,
    name       TEXT COLLATE "C" NOT NULL,
    definition TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    version    BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, name)
);
