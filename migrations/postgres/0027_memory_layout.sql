-- Issue 48, measured: a put forgets its namespace's expired items through this index, not by
-- reading the namespace. (SQLite's migration also moves the embedding to the end of the row;
-- PostgreSQL keeps a large value out of line already.)
CREATE INDEX memory_items_expiring ON memory_items (tenant, namespace, expires_at_ms)
    WHERE expires_at_ms IS NOT NULL;
