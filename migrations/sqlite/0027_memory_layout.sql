-- Issue 48, measured: memory items laid out for reading, and a put that does not scan its
-- namespace.
--
-- SQLite reads a row's columns in order, following a large value's overflow pages to reach
-- the columns after it. With the embedding (6 KB for 1,536 dimensions) in the middle, every
-- search and every put's checks read it; here the small columns come first and the
-- embedding last, so only a search by meaning reads it. The rows keep their ids, so the
-- full-text index (`memory_fts`, keyed by id) stays as it is.
CREATE TABLE memory_items_next (
    id              INTEGER PRIMARY KEY,
    tenant          TEXT NOT NULL,
    namespace       TEXT NOT NULL,
    key             TEXT NOT NULL,
    expires_at_ms   BIGINT,
    size            BIGINT NOT NULL,
    revision        BIGINT NOT NULL,
    user_id         TEXT,
    session_id      TEXT,
    written_by      TEXT,
    embedding_model TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    value           TEXT NOT NULL,
    text            TEXT NOT NULL,
    embedding       BLOB,
    UNIQUE (tenant, namespace, key)
);
INSERT INTO memory_items_next (id, tenant, namespace, key, expires_at_ms, size, revision,
    user_id, session_id, written_by, embedding_model, created_at, updated_at, value, text,
    embedding)
SELECT id, tenant, namespace, key, expires_at_ms, size, revision, user_id, session_id,
    written_by, embedding_model, created_at, updated_at, value, text, embedding
FROM memory_items;
DROP TABLE memory_items;
ALTER TABLE memory_items_next RENAME TO memory_items;

CREATE INDEX memory_items_user ON memory_items (tenant, user_id);
CREATE INDEX memory_items_expiry ON memory_items (expires_at_ms) WHERE expires_at_ms IS NOT NULL;
-- A put forgets its namespace's expired items through this, not by reading the namespace.
CREATE INDEX memory_items_expiring ON memory_items (tenant, namespace, expires_at_ms)
    WHERE expires_at_ms IS NOT NULL;

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
