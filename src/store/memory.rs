//! Memory items (issue 48): JSON values under a key in a namespace, per tenant, found again by
//! key, by namespace prefix or by search. Full-text search is the database's own (SQLite FTS5
//! over `memory_fts`, PostgreSQL's `tsvector` column `tsv`, both with English stemming); a
//! search by meaning ranks the stored embeddings exactly, by cosine similarity, over every
//! item of the namespace (a linear scan; see `docs/memory.md` for where it stops being fast).
//!
//! A put is one transaction that writes first and checks the limits after (items in its
//! namespace, bytes of its tenant, kept per namespace by triggers in `memory_usage`), and
//! rolls back past one. A run's write carries what identifies it (`written_by`: the run, its
//! step, the key and the value): the same write again, by a resumed run, finds itself stored
//! and changes nothing, so no write is applied twice.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use super::{Backend, Result, Store, fmt_time, parse_json, parse_time, to_json};
use crate::config::MemoryConfig;
use crate::domain::memory::{MemoryItem, Namespace, SearchMode, query_words, searchable_text};
use crate::domain::{RunId, Tenant};
use crate::llm::embed::Embedder;

/// A run's write: the run, and a digest of its step, key and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOp {
    pub run: RunId,
    pub step: String,
}

impl WriteOp {
    /// What the row keeps: `RUN#DIGEST`, the digest over the step, namespace, key and value.
    fn stamp(&self, namespace: &Namespace, key: &str, value: &Value) -> String {
        let what = serde_json::json!([self.step, namespace.as_str(), key, value]);
        let digest = crate::domain::definition::digest(&what);
        format!("{}#{}", self.run, &digest["sha256:".len()..])
    }
}

/// One item to put.
#[derive(Debug, Clone)]
pub struct NewItem<'a> {
    pub namespace: &'a Namespace,
    pub key: &'a str,
    pub value: &'a Value,
    /// Forgotten this many seconds from now.
    pub ttl_secs: Option<u64>,
    pub user_id: Option<&'a str>,
    pub session_id: Option<&'a str>,
    /// The run's write that puts it, when a run does.
    pub written_by: Option<&'a WriteOp>,
    /// Its embedding and the model that made it.
    pub embedding: Option<(&'a [f32], &'a str)>,
}

/// What a put did.
#[derive(Debug, Clone, PartialEq)]
pub enum Put {
    /// Stored: `true` when the key was new.
    Stored(MemoryItem, bool),
    /// The same write of the same run was stored before: nothing changed.
    Replayed(MemoryItem),
    /// Past a limit (the sentence names it, its value and what the put would use); nothing
    /// changed.
    TooLarge(String),
}

/// A page of items.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    pub items: Vec<MemoryItem>,
    /// The last item's namespace and key, when more may follow.
    pub next: Option<(String, String)>,
}

/// The memory store's handle, with the configured limits and embedding model.
#[derive(Clone)]
pub struct Memory {
    store: Store,
    limits: std::sync::Arc<MemoryConfig>,
    embedder: Option<Embedder>,
    /// Searches and writes are counted here, by tenant.
    metrics: crate::metrics::Metrics,
}

/// What a search found.
#[derive(Debug)]
pub enum Searched {
    /// The items, best first, and how they were ranked.
    Found(Vec<MemoryItem>, SearchMode),
    /// A search by meaning, with no embedding model configured.
    NoEmbedder,
    /// The embedding model failed to embed the query.
    Embedding(crate::llm::Error),
}

pub(super) const COLUMNS: &str =
    "namespace, key, value, revision, user_id, session_id, size, created_at,
    updated_at, expires_at_ms, written_by";

fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

/// Rows not yet expired, for a table aliased `m`.
const LIVE: &str = "(m.expires_at_ms IS NULL OR m.expires_at_ms > $NOW)";

impl Memory {
    pub fn new(
        store: Store,
        limits: std::sync::Arc<MemoryConfig>,
        embedder: Option<Embedder>,
        metrics: crate::metrics::Metrics,
    ) -> Memory {
        Memory {
            store,
            limits,
            embedder,
            metrics,
        }
    }

    /// The embedding of what search reads of an item (its key and value) and the model's
    /// name, when an embedding model is configured.
    pub async fn embedding_of(
        &self,
        key: &str,
        value: &Value,
    ) -> std::result::Result<Option<(Vec<f32>, String)>, crate::llm::Error> {
        let Some(embedder) = &self.embedder else {
            return Ok(None);
        };
        let text = format!("{key} {}", searchable_text(value));
        Ok(Some((embedder.embed(&text).await?, embedder.model_id())))
    }

    /// The items of `namespace` (and below) closest to `query`, best first, ranked as `mode`
    /// asks: `auto` is by meaning when an embedding model is configured, else by text.
    pub async fn search(
        &self,
        tenant: &Tenant,
        namespace: &Namespace,
        query: &str,
        limit: u32,
        mode: SearchMode,
    ) -> Result<Searched> {
        let embedder = match (mode, &self.embedder) {
            (SearchMode::Text, _) | (SearchMode::Auto, None) => {
                let items = self.search_text(tenant, namespace, query, limit).await?;
                self.metrics.memory_searched(&tenant.0, "text");
                return Ok(Searched::Found(items, SearchMode::Text));
            }
            (SearchMode::Meaning, None) => return Ok(Searched::NoEmbedder),
            (_, Some(embedder)) => embedder,
        };
        let vector = match embedder.embed(query).await {
            Ok(v) => v,
            Err(e) => return Ok(Searched::Embedding(e)),
        };
        let model = embedder.model_id();
        let items = (self.search_vector(tenant, namespace, (&vector, &model), limit)).await?;
        self.metrics.memory_searched(&tenant.0, "meaning");
        Ok(Searched::Found(items, SearchMode::Meaning))
    }

    pub fn limits(&self) -> &MemoryConfig {
        &self.limits
    }

    fn backend(&self) -> Backend {
        self.store.backend
    }

    /// Puts an item, within the limits, unless it is a run's write stored before.
    pub async fn put(&self, tenant: &Tenant, item: NewItem<'_>) -> Result<Put> {
        let put = self.put_once(tenant, item).await?;
        let outcome = match &put {
            Put::Stored(..) => "stored",
            Put::Replayed(_) => "replayed",
            Put::TooLarge(_) => "refused",
        };
        self.metrics.memory_written(&tenant.0, outcome);
        Ok(put)
    }

    async fn put_once(&self, tenant: &Tenant, item: NewItem<'_>) -> Result<Put> {
        let value_text = to_json(item.value);
        let size = value_text.len() as u64;
        let max = self.limits.max_item_bytes;
        if max > 0 && size > max {
            return Ok(Put::TooLarge(format!(
                "the value is {size} bytes as JSON; memory.max_item_bytes is {max}"
            )));
        }
        let stamp = (item.written_by).map(|w| w.stamp(item.namespace, item.key, item.value));
        let now = now_ms();
        // SQLite: the write lock from the start, so a put waits for another (busy timeout)
        // instead of failing as a reader that wants to write.
        let mut tx = match self.backend() {
            Backend::Sqlite => self.store.pool().begin_with("BEGIN IMMEDIATE").await?,
            Backend::Postgres => self.store.pool().begin().await?,
        };
        if let Some(op) = item.written_by {
            self.store.fence(&mut tx, op.run).await?;
        }
        if self.backend() == Backend::Postgres {
            // A tenant's puts one at a time, so its limits hold exactly.
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                .bind(format!("memory:{}", tenant.0))
                .execute(&mut *tx)
                .await?;
        }
        // Writes first (SQLite then holds the write lock), expired items of the namespace
        // forgotten before they count.
        sqlx::query(
            "DELETE FROM memory_items WHERE tenant = $1 AND namespace = $2
                AND expires_at_ms IS NOT NULL AND expires_at_ms <= $3",
        )
        .bind(&tenant.0)
        .bind(item.namespace.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let existing = self
            .read_one(&mut tx, tenant, item.namespace, item.key, now)
            .await?;
        if let (Some(stamp), Some((found, Some(written)))) = (&stamp, &existing)
            && stamp == written
        {
            let found = found.clone();
            tx.commit().await?;
            return Ok(Put::Replayed(found));
        }
        let time = fmt_time(Utc::now());
        let expires = item
            .ttl_secs
            .map(|s| now.saturating_add((s as i64).saturating_mul(1000)));
        let (embedding, model) = match item.embedding {
            Some((v, m)) => (Some(vector_bytes(v)), Some(m.to_owned())),
            None => (None, None),
        };
        sqlx::query(
            "INSERT INTO memory_items (tenant, namespace, key, value, text, size, revision,
                user_id, session_id, written_by, embedding, embedding_model, expires_at_ms,
                created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8, $9, $10, $11, $12, $13, $13)
             ON CONFLICT (tenant, namespace, key) DO UPDATE SET
                value = excluded.value, text = excluded.text, size = excluded.size,
                revision = memory_items.revision + 1, user_id = excluded.user_id,
                session_id = excluded.session_id, written_by = excluded.written_by,
                embedding = excluded.embedding, embedding_model = excluded.embedding_model,
                expires_at_ms = excluded.expires_at_ms, updated_at = excluded.updated_at",
        )
        .bind(&tenant.0)
        .bind(item.namespace.as_str())
        .bind(item.key)
        .bind(&value_text)
        .bind(format!("{} {}", item.key, searchable_text(item.value)))
        .bind(size as i64)
        .bind(item.user_id)
        .bind(item.session_id)
        .bind(stamp.as_deref())
        .bind(embedding)
        .bind(model)
        .bind(expires)
        .bind(&time)
        .execute(&mut *tx)
        .await?;
        if let Some(refused) = self.over_limits(&mut tx, tenant, item.namespace).await? {
            tx.rollback().await?;
            return Ok(Put::TooLarge(refused));
        }
        let (stored, _) = self
            .read_one(&mut tx, tenant, item.namespace, item.key, now)
            .await?
            .ok_or_else(|| super::Error::Corrupt("a memory item vanished in its put".into()))?;
        tx.commit().await?;
        Ok(Put::Stored(stored, existing.is_none()))
    }

    /// The limit a put just went past, if it did.
    async fn over_limits(
        &self,
        tx: &mut sqlx::AnyConnection,
        tenant: &Tenant,
        namespace: &Namespace,
    ) -> Result<Option<String>> {
        let max_items = self.limits.max_namespace_items;
        if max_items > 0 {
            let items: i64 =
                sqlx::query("SELECT items FROM memory_usage WHERE tenant = $1 AND namespace = $2")
                    .bind(&tenant.0)
                    .bind(namespace.as_str())
                    .fetch_optional(&mut *tx)
                    .await?
                    .map_or(Ok(0), |r| r.try_get("items"))?;
            if items as u64 > max_items {
                return Ok(Some(format!(
                    "the namespace `{}` holds {max_items} items, memory.max_namespace_items; \
                     delete some first",
                    namespace.as_str()
                )));
            }
        }
        let max_bytes = self.limits.max_tenant_bytes;
        if max_bytes > 0 {
            let bytes: i64 = sqlx::query(
                "SELECT CAST(COALESCE(SUM(bytes), 0) AS BIGINT) AS bytes FROM memory_usage
                 WHERE tenant = $1",
            )
            .bind(&tenant.0)
            .fetch_one(&mut *tx)
            .await?
            .try_get("bytes")?;
            if bytes as u64 > max_bytes {
                return Ok(Some(format!(
                    "the tenant's memory would take {bytes} bytes; memory.max_tenant_bytes is \
                     {max_bytes}"
                )));
            }
        }
        Ok(None)
    }

    async fn read_one(
        &self,
        conn: &mut sqlx::AnyConnection,
        tenant: &Tenant,
        namespace: &Namespace,
        key: &str,
        now: i64,
    ) -> Result<Option<(MemoryItem, Option<String>)>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM memory_items m
             WHERE m.tenant = $1 AND m.namespace = $2 AND m.key = $3 AND {}",
            LIVE.replace("$NOW", "$4")
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(&tenant.0)
            .bind(namespace.as_str())
            .bind(key)
            .bind(now)
            .fetch_optional(&mut *conn)
            .await?;
        row.map(|r| Ok((item_of(&r, None)?, r.try_get("written_by")?)))
            .transpose()
    }

    /// One item, unless it is missing or expired.
    pub async fn get(
        &self,
        tenant: &Tenant,
        namespace: &Namespace,
        key: &str,
    ) -> Result<Option<MemoryItem>> {
        let mut conn = self.store.pool().acquire().await?;
        let found = self
            .read_one(&mut conn, tenant, namespace, key, now_ms())
            .await?;
        Ok(found.map(|(item, _)| item))
    }

    /// Deletes one item; whether there was one.
    pub async fn delete(&self, tenant: &Tenant, namespace: &Namespace, key: &str) -> Result<bool> {
        let done = sqlx::query(
            "DELETE FROM memory_items WHERE tenant = $1 AND namespace = $2 AND key = $3",
        )
        .bind(&tenant.0)
        .bind(namespace.as_str())
        .bind(key)
        .execute(&self.store.pool())
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// The keys of `namespace` (itself, not below) from `from` on, in order.
    pub async fn keys_from(
        &self,
        tenant: &Tenant,
        namespace: &Namespace,
        from: &str,
    ) -> Result<Vec<String>> {
        let keys = sqlx::query_scalar(
            "SELECT key FROM memory_items
             WHERE tenant = $1 AND namespace = $2 AND key >= $3 ORDER BY key",
        )
        .bind(&tenant.0)
        .bind(namespace.as_str())
        .bind(from)
        .fetch_all(&self.store.pool())
        .await?;
        Ok(keys)
    }

    /// Deletes the items of `namespace` (itself, not below) whose key sorts before `key`;
    /// how many there were.
    pub async fn forget_before(
        &self,
        tenant: &Tenant,
        namespace: &Namespace,
        key: &str,
    ) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM memory_items WHERE tenant = $1 AND namespace = $2 AND key < $3",
        )
        .bind(&tenant.0)
        .bind(namespace.as_str())
        .bind(key)
        .execute(&self.store.pool())
        .await?;
        Ok(done.rows_affected())
    }

    /// Deletes up to `batch` items whose time to live has passed, in every tenant; how many.
    /// (A put forgets its own namespace's; this sweep, from `workers::retention`, forgets
    /// the rest, so they stop counting toward `max_tenant_bytes`.)
    pub async fn sweep_expired(&self, batch: u32) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM memory_items WHERE id IN (SELECT id FROM memory_items
                WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= $1 LIMIT $2)",
        )
        .bind(now_ms())
        .bind(i64::from(batch))
        .execute(&self.store.pool())
        .await?;
        Ok(done.rows_affected())
    }

    /// By tenant: the items and bytes its memory holds (expired items not yet swept
    /// included), for `/metrics`.
    pub async fn usage_by_tenant(&self) -> Result<Vec<(String, u64, u64)>> {
        let rows = sqlx::query(
            "SELECT tenant, CAST(SUM(items) AS BIGINT) AS items, CAST(SUM(bytes) AS BIGINT) AS bytes
             FROM memory_usage GROUP BY tenant HAVING SUM(items) > 0 ORDER BY tenant",
        )
        .fetch_all(&self.store.pool())
        .await?;
        rows.iter()
            .map(|r| {
                let n = |c: &str| r.try_get::<i64, _>(c).map(|v| v.max(0) as u64);
                Ok((r.try_get("tenant")?, n("items")?, n("bytes")?))
            })
            .collect()
    }

    /// The items of `namespace` and the namespaces below it whose key starts with
    /// `key_prefix`, by namespace then key, after the cursor `after`.
    pub async fn list(
        &self,
        tenant: &Tenant,
        namespace: &Namespace,
        key_prefix: &str,
        after: Option<(&str, &str)>,
        limit: u32,
    ) -> Result<Page> {
        let mut sql = format!(
            "SELECT {COLUMNS} FROM memory_items m WHERE m.tenant = $1 AND {} AND {}
                AND substr(m.key, 1, CAST($5 AS INTEGER)) = $6",
            within("$2", "$3", "$4"),
            LIVE.replace("$NOW", "$7")
        );
        // Without a cursor both are empty, which every item comes after.
        sql.push_str(" AND (m.namespace > $8 OR (m.namespace = $8 AND m.key > $9))");
        sql.push_str(" ORDER BY m.namespace, m.key LIMIT $10");
        let (ns, below) = (namespace.as_str(), format!("{}/", namespace.as_str()));
        let q = sqlx::query(AssertSqlSafe(sql))
            .bind(&tenant.0)
            .bind(ns)
            .bind(below.len() as i64)
            .bind(&below)
            .bind(key_prefix.len() as i64)
            .bind(key_prefix)
            .bind(now_ms());
        let (a_ns, a_key) = after.unwrap_or(("", ""));
        let rows = q
            .bind(a_ns)
            .bind(a_key)
            .bind(i64::from(limit) + 1)
            .fetch_all(&self.store.pool())
            .await?;
        let mut items = rows
            .iter()
            .map(|r| item_of(r, None))
            .collect::<Result<Vec<_>>>()?;
        let more = items.len() > limit as usize;
        items.truncate(limit as usize);
        let next = match (more, items.last()) {
            (true, Some(last)) => Some((last.namespace.clone(), last.key.clone())),
            _ => None,
        };
        Ok(Page { items, next })
    }

    /// The items of `namespace` (and below) that share words with `query`, best first: items
    /// matching more, and rarer, words rank higher (BM25 on SQLite, `ts_rank_cd` on
    /// PostgreSQL). Words are stemmed (English), so `prefers` finds `prefer`.
    pub async fn search_text(
        &self,
        tenant: &Tenant,
        namespace: &Namespace,
        query: &str,
        limit: u32,
    ) -> Result<Vec<MemoryItem>> {
        let words = query_words(query);
        if words.is_empty() {
            return Ok(Vec::new());
        }
        let (matches, sql) = text_search(self.backend(), &words);
        let below = format!("{}/", namespace.as_str());
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(matches)
            .bind(&tenant.0)
            .bind(namespace.as_str())
            .bind(below.len() as i64)
            .bind(&below)
            .bind(now_ms())
            .bind(i64::from(limit))
            .fetch_all(&self.store.pool())
            .await?;
        rows.iter()
            .map(|r| item_of(r, Some(r.try_get::<f64, _>("score")?)))
            .collect()
    }

    /// The items of `namespace` (and below) with an embedding of `model`, ranked by cosine
    /// similarity to `vector`, best first: every such item is compared (an exact ranking).
    pub async fn search_vector(
        &self,
        tenant: &Tenant,
        namespace: &Namespace,
        (vector, model): (&[f32], &str),
        limit: u32,
    ) -> Result<Vec<MemoryItem>> {
        let sql = format!(
            "SELECT m.id, m.embedding FROM memory_items m
             WHERE m.tenant = $1 AND {} AND {} AND m.embedding_model = $6",
            within("$2", "$3", "$4"),
            LIVE.replace("$NOW", "$5")
        );
        let below = format!("{}/", namespace.as_str());
        let mut rows = sqlx::query(AssertSqlSafe(sql))
            .bind(&tenant.0)
            .bind(namespace.as_str())
            .bind(below.len() as i64)
            .bind(&below)
            .bind(now_ms())
            .bind(model)
            .fetch(&self.store.pool());
        // Row by row, keeping the best `limit`: a search holds one stored vector at a time,
        // not the namespace's (600 MB for 100,000 items of 1,536 dimensions).
        let query_norm = norm(vector);
        let mut best = Best::new(limit as usize);
        while let Some(r) = futures::TryStreamExt::try_next(&mut rows).await? {
            let bytes: &[u8] = r.try_get("embedding")?;
            best.offer(cosine(vector, query_norm, bytes), r.try_get("id")?);
        }
        drop(rows);
        let ranked = best.ranked();
        if ranked.is_empty() {
            return Ok(Vec::new());
        }
        // The chosen items in one read, then put in their rank's order.
        let placeholders: Vec<String> = (1..=ranked.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT m.id, {COLUMNS} FROM memory_items m WHERE m.id IN ({})",
            placeholders.join(", ")
        );
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for (_, id) in &ranked {
            query = query.bind(*id);
        }
        let rows = query.fetch_all(&self.store.pool()).await?;
        let mut items = Vec::with_capacity(ranked.len());
        for (score, id) in ranked {
            let row = rows
                .iter()
                .find(|r| r.try_get::<i64, _>("id").ok() == Some(id));
            if let Some(row) = row {
                items.push(item_of(row, Some(score))?);
            }
        }
        Ok(items)
    }
}

/// A text search's match expression for `words` and its statement: `$1` the expression, `$2`
/// the tenant, `$3`-`$5` the namespace (see [`within`]), `$6` now, `$7` the limit.
fn text_search(backend: Backend, words: &[String]) -> (String, String) {
    let (matches, from, score) = match backend {
        Backend::Sqlite => (
            (words.iter().map(|w| format!("\"{w}\"")))
                .collect::<Vec<_>>()
                .join(" OR "),
            // CROSS JOIN: the full-text match first, then each match's row. Left to itself
            // SQLite (3.50) walks the tenant's rows and seeks the index for each: 500 ms
            // instead of 2.6 at 10,000 items.
            "memory_fts CROSS JOIN memory_items m ON m.id = memory_fts.rowid",
            "memory_fts MATCH $1",
        ),
        Backend::Postgres => (
            words.join(" | "),
            "memory_items m, to_tsquery('english', $1) q",
            "m.tsv @@ q",
        ),
    };
    let rank = match backend {
        Backend::Sqlite => "-bm25(memory_fts)",
        Backend::Postgres => "CAST(ts_rank_cd(m.tsv, q) AS DOUBLE PRECISION)",
    };
    let sql = format!(
        "SELECT {COLUMNS}, {rank} AS score FROM {from}
         WHERE {score} AND m.tenant = $2 AND {} AND {}
         ORDER BY score DESC, m.updated_at DESC LIMIT $7",
        within("$3", "$4", "$5"),
        LIVE.replace("$NOW", "$6")
    );
    (matches, sql)
}

/// Deletes the memory of `session` (`session/ID` and below), in the caller's transaction.
pub(super) async fn forget_session(
    conn: &mut sqlx::AnyConnection,
    tenant: &Tenant,
    session: &str,
) -> Result<u64> {
    let namespace = format!(
        "session/{}",
        crate::domain::memory::session_segment(session)
    );
    let below = format!("{namespace}/");
    let done = sqlx::query(AssertSqlSafe(format!(
        "DELETE FROM memory_items WHERE id IN (SELECT m.id FROM memory_items m
            WHERE m.tenant = $1 AND {})",
        within("$2", "$3", "$4")
    )))
    .bind(&tenant.0)
    .bind(&namespace)
    .bind(below.len() as i64)
    .bind(&below)
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// `m.namespace` is `ns` or below it (`below` is `ns/`, of `len` characters).
pub(super) fn within(ns: &str, len: &str, below: &str) -> String {
    format!("(m.namespace = {ns} OR substr(m.namespace, 1, CAST({len} AS INTEGER)) = {below})")
}

pub(super) fn item_of(r: &AnyRow, score: Option<f64>) -> Result<MemoryItem> {
    let expires: Option<i64> = r.try_get("expires_at_ms")?;
    let written_by: Option<String> = r.try_get("written_by")?;
    Ok(MemoryItem {
        namespace: r.try_get("namespace")?,
        key: r.try_get("key")?,
        value: parse_json(&r.try_get::<String, _>("value")?)?,
        revision: r.try_get::<i64, _>("revision")? as u64,
        user_id: r.try_get("user_id")?,
        session_id: r.try_get("session_id")?,
        size: r.try_get::<i64, _>("size")? as u64,
        created_at: parse_time(&r.try_get::<String, _>("created_at")?)?,
        updated_at: parse_time(&r.try_get::<String, _>("updated_at")?)?,
        expires_at: expires.and_then(DateTime::<Utc>::from_timestamp_millis),
        written_by_run: written_by.and_then(|w| w.split('#').next().map(str::to_owned)),
        score,
    })
}

/// A vector as stored: little-endian f32s.
pub fn vector_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn norm(v: &[f32]) -> f64 {
    v.iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt()
}

/// The cosine similarity of `query` (of norm `query_norm`) and a stored vector; 0 when either
/// is zero or their lengths differ. Eight lanes of f32 sums, which the compiler turns into
/// vector instructions, then the lanes summed in f64.
fn cosine(query: &[f32], query_norm: f64, stored: &[u8]) -> f64 {
    const LANES: usize = 8;
    if stored.len() != query.len() * 4 || query_norm == 0.0 {
        return 0.0;
    }
    let float = |b: &[u8]| f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let (mut dot, mut sq) = ([0f32; LANES], [0f32; LANES]);
    let (q_lanes, s_lanes) = (query.chunks_exact(LANES), stored.chunks_exact(LANES * 4));
    let (q_rest, s_rest) = (q_lanes.remainder(), s_lanes.remainder());
    for (q, s) in q_lanes.zip(s_lanes) {
        for i in 0..LANES {
            let x = float(&s[i * 4..i * 4 + 4]);
            dot[i] += q[i] * x;
            sq[i] += x * x;
        }
    }
    let mut dot: f64 = dot.iter().map(|d| f64::from(*d)).sum();
    let mut sq: f64 = sq.iter().map(|d| f64::from(*d)).sum();
    for (q, s) in q_rest.iter().zip(s_rest.chunks_exact(4)) {
        let x = f64::from(float(s));
        dot += f64::from(*q) * x;
        sq += x * x;
    }
    if sq == 0.0 {
        return 0.0;
    }
    dot / (query_norm * sq.sqrt())
}

/// The best `limit` of the (score, id) pairs offered: highest score first, then lowest id.
struct Best {
    limit: usize,
    kept: Vec<(f64, i64)>,
}

impl Best {
    fn new(limit: usize) -> Best {
        Best {
            limit,
            kept: Vec::with_capacity(limit + 1),
        }
    }

    fn offer(&mut self, score: f64, id: i64) {
        let before = |a: &(f64, i64), b: &(f64, i64)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        let at = self
            .kept
            .partition_point(|k| before(k, &(score, id)).is_lt());
        if at < self.limit {
            self.kept.insert(at, (score, id));
            self.kept.truncate(self.limit);
        }
    }

    fn ranked(self) -> Vec<(f64, i64)> {
        self.kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn memory() -> Memory {
        let name = uuid::Uuid::now_v7().simple();
        let url = format!("sqlite:file:orca-memory-{name}?mode=memory&cache=shared");
        let store = Store::connect(&url, 4).await.expect("a store");
        let limits = std::sync::Arc::new(MemoryConfig::default());
        Memory::new(store, limits, None, crate::metrics::Metrics::new())
    }

    #[tokio::test]
    async fn a_text_search_reads_the_full_text_index_first() {
        let memory = memory().await;
        let words = vec!["tea".to_owned(), "cat".to_owned()];
        let (matches, sql) = text_search(Backend::Sqlite, &words);
        let plan = sqlx::query(AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
            .bind(matches)
            .bind("t")
            .bind("ns")
            .bind(3i64)
            .bind("ns/")
            .bind(0i64)
            .bind(10i64)
            .fetch_all(&memory.store.pool())
            .await
            .unwrap();
        let steps: Vec<String> = (plan.iter())
            .map(|r| r.try_get::<String, _>("detail").unwrap())
            .collect();
        // The matches, then each one's row by its id: never the tenant's rows one by one.
        assert!(steps[0].starts_with("SCAN memory_fts"), "{steps:?}");
        assert!(
            steps[1].contains("m USING INTEGER PRIMARY KEY"),
            "{steps:?}"
        );
    }

    #[tokio::test]
    async fn a_runs_write_made_again_is_found_stored_and_not_applied_twice() {
        let memory = memory().await;
        let tenant = Tenant("t".into());
        let ns = Namespace::of_user("alice", None).unwrap();
        let op = WriteOp {
            run: RunId::new(),
            step: "note/tool-1-1".into(),
        };
        let value = serde_json::json!("likes sencha");
        let item = |value, op| NewItem {
            namespace: &ns,
            key: "tea",
            value,
            ttl_secs: None,
            user_id: Some("alice"),
            session_id: None,
            written_by: op,
            embedding: None,
        };
        let first = memory.put(&tenant, item(&value, Some(&op))).await.unwrap();
        assert!(
            matches!(&first, Put::Stored(i, true) if i.revision == 1),
            "{first:?}"
        );
        let again = memory.put(&tenant, item(&value, Some(&op))).await.unwrap();
        assert!(
            matches!(&again, Put::Replayed(i) if i.revision == 1),
            "{again:?}"
        );
        // Another value from the same step, or the same value from another run, is a write.
        let other = serde_json::json!("likes matcha");
        let changed = memory.put(&tenant, item(&other, Some(&op))).await.unwrap();
        assert!(
            matches!(&changed, Put::Stored(i, false) if i.revision == 2),
            "{changed:?}"
        );
        let another = WriteOp {
            run: RunId::new(),
            ..op.clone()
        };
        let by_other = memory
            .put(&tenant, item(&other, Some(&another)))
            .await
            .unwrap();
        assert!(
            matches!(&by_other, Put::Stored(i, false) if i.revision == 3),
            "{by_other:?}"
        );
        let by_api = memory.put(&tenant, item(&other, None)).await.unwrap();
        assert!(
            matches!(&by_api, Put::Stored(i, false) if i.revision == 4),
            "{by_api:?}"
        );
    }

    #[test]
    fn the_best_few_are_kept_in_rank_order() {
        let mut best = Best::new(3);
        for (score, id) in [(0.1, 1), (0.9, 2), (0.5, 3), (0.9, 0), (0.2, 4), (0.7, 5)] {
            best.offer(score, id);
        }
        assert_eq!(best.ranked(), vec![(0.9, 0), (0.9, 2), (0.7, 5)]);
        let mut none = Best::new(0);
        none.offer(1.0, 1);
        assert!(none.ranked().is_empty());
    }

    #[test]
    fn cosine_of_stored_vectors() {
        let a = [1.0f32, 0.0, 0.0];
        let same = vector_bytes(&[2.0, 0.0, 0.0]);
        let orthogonal = vector_bytes(&[0.0, 3.0, 0.0]);
        assert!((cosine(&a, norm(&a), &same) - 1.0).abs() < 1e-9);
        assert!(cosine(&a, norm(&a), &orthogonal).abs() < 1e-9);
        assert_eq!(cosine(&a, norm(&a), &vector_bytes(&[1.0])), 0.0);
        // Past the eight lanes, with a remainder: as computed plainly.
        let q: Vec<f32> = (0..19).map(|i| (i as f32 * 0.37).sin()).collect();
        let s: Vec<f32> = (0..19).map(|i| (i as f32 * 0.11).cos()).collect();
        let plain =
            q.iter().zip(&s).map(|(a, b)| f64::from(a * b)).sum::<f64>() / (norm(&q) * norm(&s));
        assert!((cosine(&q, norm(&q), &vector_bytes(&s)) - plain).abs() < 1e-5);
    }
}
