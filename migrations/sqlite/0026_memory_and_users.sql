-- Issue 48: users within a tenant, and memory that outlives a session.
--
-- A run may belong to a user of its tenant (`RunRequest.user_id`, or the user its API key is
-- bound to); a session belongs to the user of its runs. The column is NULL for the runs of no
-- user, and for every run stored before.
ALTER TABLE runs ADD COLUMN user_id TEXT;
CREATE INDEX runs_user ON runs (tenant, user_id, id);

-- Memory items: JSON values under a key in a namespace (`user/alice/notes`), per tenant.
-- `text` is what search reads (the key and the value's strings), indexed for full text by `memory_fts`;
-- `embedding` the vector of that text (little-endian f32s) when an embedding model made one.
-- `written_by` names the run's write that put the value (its run, step, key and value), so the
-- same write replayed by a resumed run is recognised and not applied twice. `user_id` and
-- `session_id` say whose the item is, for a user's export and erasure.
CREATE TABLE memory_items (
    id              INTEGER PRIMARY KEY,
    tenant          TEXT NOT NULL,
    namespace       TEXT NOT NULL,
    key             TEXT NOT NULL,
    value           TEXT NOT NULL,
    text            TEXT NOT NULL,
    size            BIGINT NOT NULL,
    revision        BIGINT NOT NULL,
    user_id         TEXT,
    session_id      TEXT,
    written_by      TEXT,
    embedding       BLOB,
    embedding_model TEXT,
    expires_at_ms   BIGINT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    UNIQUE (tenant, namespace, key)
);
CREATE INDEX memory_items_user ON memory_items (tenant, user_id);
CREATE INDEX memory_items_expiry ON memory_items (expires_at_ms) WHERE expires_at_ms IS NOT NULL;

-- Items and bytes per namespace, kept by triggers, so a put checks the namespace's and the
-- tenant's limits without counting their rows.
CREATE TABLE memory_usage (
    tenant    TEXT NOT NULL,
    namespace TEXT NOT NULL,
    items     BIGINT NOT NULL,
    bytes     BIGINT NOT NULL,
    PRIMARY KEY (tenant, namespace)
);

CREATE VIRTUAL TABLE memory_fts USING fts5(
    text, content = 'memory_items', content_rowid = 'id', tokenize = 'porter unicode61'
);

CREATE TRIGGER memory_items_inserted AFTER INSERT ON memory_items BEGIN
    INSERT INTO memory_fts (rowid, text) VALUES (new.id, new.text);
    INSERT INTO memory_usage (tenant, namespace, items, bytes)
        VALUES (new.tenant, new.namespace, 1, new.size)
        ON CONFLICT (tenant, namespace) DO UPDATE
        SET items = items + 1, bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER memory_items_deleted AFTER DELETE ON memory_items BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, text) VALUES ('delete', old.id, old.text);
    UPDATE memory_usage SET items = items - 1, bytes = bytes - old.size
        WHERE tenant = old.tenant AND namespace = old.namespace;
END;

CREATE TRIGGER memory_items_updated AFTER UPDATE OF text, size ON memory_items BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO memory_fts (rowid, text) VALUES (new.id, new.text);
    UPDATE memory_usage SET bytes = bytes - old.size + new.size
        WHERE tenant = new.tenant AND namespace = new.namespace;
END;
