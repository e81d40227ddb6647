-- Issue 48: users within a tenant, and memory that outlives a session.
--
-- A run may belong to a user of its tenant (`RunRequest.user_id`, or the user its API key is
-- bound to); a session belongs to the user of its runs. The column is NULL for the runs of no
-- user, and for every run stored before.
ALTER TABLE runs ADD COLUMN user_id TEXT COLLATE "C";
CREATE INDEX runs_user ON runs (tenant, user_id, id);

-- Memory items: JSON values under a key in a namespace (`user/alice/notes`), per tenant.
-- `text` is what search reads (the key and the value's strings), indexed for full text through `tsv`;
-- `embedding` the vector of that text (little-endian f32s) when an embedding model made one.
-- `written_by` names the run's write that put the value (its run, step, key and value), so the
-- same write replayed by a resumed run is recognised and not applied twice. `user_id` and
-- `session_id` say whose the item is, for a user's export and erasure.
CREATE TABLE memory_items (
    id              BIGSERIAL PRIMARY KEY,
    tenant          TEXT COLLATE "C" NOT NULL,
    namespace       TEXT COLLATE "C" NOT NULL,
    key             TEXT COLLATE "C" NOT NULL,
    value           TEXT NOT NULL,
    text            TEXT NOT NULL,
    size            BIGINT NOT NULL,
    revision        BIGINT NOT NULL,
    user_id         TEXT COLLATE "C",
    session_id      TEXT COLLATE "C",
    written_by      TEXT,
    embedding       BYTEA,
    embedding_model TEXT,
    expires_at_ms   BIGINT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    tsv             tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
    UNIQUE (tenant, namespace, key)
);
CREATE INDEX memory_items_user ON memory_items (tenant, user_id);
CREATE INDEX memory_items_expiry ON memory_items (expires_at_ms) WHERE expires_at_ms IS NOT NULL;
CREATE INDEX memory_items_tsv ON memory_items USING GIN (tsv);

-- Items and bytes per namespace, kept by triggers, so a put checks the namespace's and the
-- tenant's limits without counting their rows.
CREATE TABLE memory_usage (
    tenant    TEXT COLLATE "C" NOT NULL,
    namespace TEXT COLLATE "C" NOT NULL,
    items     BIGINT NOT NULL,
    bytes     BIGINT NOT NULL,
    PRIMARY KEY (tenant, namespace)
);

CREATE FUNCTION memory_usage_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        UPDATE memory_usage SET items = items - 1, bytes = bytes - OLD.size
            WHERE tenant = OLD.tenant AND namespace = OLD.namespace;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO memory_usage (tenant, namespace, items, bytes)
            VALUES (NEW.tenant, NEW.namespace, 1, NEW.size)
            ON CONFLICT (tenant, namespace) DO UPDATE
            SET items = memory_usage.items + 1, bytes = memory_usage.bytes + EXCLUDED.bytes;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER memory_items_usage AFTER INSERT OR DELETE OR UPDATE OF size ON memory_items
    FOR EACH ROW EXECUTE FUNCTION memory_usage_kept();
