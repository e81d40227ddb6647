-- Issue 43: `GET /v1/runs?completion=partial` (runs that succeeded with only part of the task
-- done) reads an index rather than every run of the tenant. Runs not yet ended have no
-- completion and are left out of it.
CREATE INDEX runs_tenant_completion ON runs (tenant, completion, id) WHERE completion IS NOT NULL;
