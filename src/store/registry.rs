//! The named registries: workflows, agents, declared HTTP tools and named functions. Each is
//! a table of definitions by tenant and name, already validated by their caller. The ones loaded from a configured directory at
//! start are stored under the reserved tenant [`SHARED_TENANT`] and are visible to every
//! tenant, with a tenant's own definition of the same name taking precedence. Like the rest of
//! the store, this module only persists.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::AnyConnection;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Result, Store, fmt_time, parse_json, parse_time, to_json};
use crate::domain::Tenant;
use crate::domain::definition::{DefinitionKind, digest};

/// The tenant under which shared definitions are stored. Configured tenants are never empty
/// (`config` refuses an API key without one), so no caller can own or delete these rows.
pub(super) const SHARED_TENANT: &str = "";

/// Which registry: its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registry {
    Workflows,
    Agents,
    /// HTTP tools declared through the API, each under the tenant that declared it.
    HttpTools,
    /// Named LLM functions declared through the API, each under the tenant that declared it.
    Functions,
}

/// The tenant HTTP tools were stored under before they belonged to the declaring tenant
/// (they were shared by every tenant then); such rows are no longer served.
const UNOWNED_HTTP_TOOLS: &str = "*";

impl Registry {
    fn table(self) -> &'static str {
        match self {
            Registry::Workflows => "workflows",
            Registry::Agents => "agents",
            Registry::HttpTools => "http_tools",
            Registry::Functions => "functions",
        }
    }

    /// The kind of definition it holds, as versions and pins name it.
    pub fn kind(self) -> DefinitionKind {
        match self {
            Registry::Workflows => DefinitionKind::Workflow,
            Registry::Agents => DefinitionKind::Agent,
            Registry::HttpTools => DefinitionKind::Tool,
            Registry::Functions => DefinitionKind::Function,
        }
    }

    pub fn of_kind(kind: DefinitionKind) -> Registry {
        match kind {
            DefinitionKind::Workflow => Registry::Workflows,
            DefinitionKind::Agent => Registry::Agents,
            DefinitionKind::Tool => Registry::HttpTools,
            DefinitionKind::Function => Registry::Functions,
        }
    }

    pub(super) fn sql(self, template: &str) -> sqlx::AssertSqlSafe<String> {
        sqlx::AssertSqlSafe(template.replace("{table}", self.table()))
    }
}

/// A stored definition (already validated when it was stored).
#[derive(Debug, Clone, PartialEq)]
pub struct RegistryRecord {
    pub name: String,
    pub definition: Value,
    /// Loaded from the configured directory: readable by every tenant, not deletable.
    pub shared: bool,
    /// Which version of the definition this is (versions count from 1).
    pub version: u32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Who changed a definition, and why: what its new version records.
#[derive(Debug, Clone, Copy, Default)]
pub struct Authored<'a> {
    /// Who, as the caller says (a person, a CI job).
    pub author: Option<&'a str>,
    /// Which API key (its fingerprint, never the key).
    pub key: Option<&'a str>,
    pub message: Option<&'a str>,
}

/// What a put did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Put {
    /// The name was new.
    pub created: bool,
    /// A new version was stored (false when the definition equals the latest one).
    pub changed: bool,
    /// The latest version after the put.
    pub version: u32,
}

/// A stored workflow.
pub type WorkflowRecord = RegistryRecord;

impl Store {
    /// Creates or replaces the tenant's definition `name`, storing it as a new version unless
    /// it equals the latest one. A replacement keeps the original `created_at`.
    pub async fn put_entry(
        &self,
        registry: Registry,
        tenant: &Tenant,
        name: &str,
        definition: &Value,
        authored: Authored<'_>,
    ) -> Result<Put> {
        let mut tx = self.pool().begin().await?;
        let put = upsert(&mut tx, registry, &tenant.0, name, definition, authored).await?;
        tx.commit().await?;
        Ok(put)
    }

    /// Puts `entries` (registry, name, definition) and removes `removed` (registry, name) of
    /// the tenant's own definitions, and writes `schedules`' changes of its schedules, all in
    /// one transaction: all of it is stored, or none.
    pub async fn apply_entries(
        &self,
        tenant: &Tenant,
        entries: &[(Registry, String, Value)],
        removed: &[(Registry, String)],
        schedules: &super::schedules::ScheduleChanges,
        authored: Authored<'_>,
    ) -> Result<Vec<Put>> {
        let mut tx = self.pool().begin().await?;
        let mut puts = Vec::with_capacity(entries.len());
        for (registry, name, definition) in entries {
            puts.push(upsert(&mut tx, *registry, &tenant.0, name, definition, authored).await?);
        }
        for (registry, name) in removed {
            remove(&mut tx, *registry, &tenant.0, name).await?;
        }
        schedules.write(tenant, &mut tx).await?;
        tx.commit().await?;
        Ok(puts)
    }

    /// Makes the shared definitions exactly `entries` (name, definition), in one transaction:
    /// the directory is the source of truth, so a file removed since the last start stops
    /// being served, and a start that fails part-way changes nothing.
    pub async fn sync_shared(&self, registry: Registry, entries: &[(String, Value)]) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        let authored = Authored {
            author: Some("directory"),
            ..Authored::default()
        };
        for (name, definition) in entries {
            upsert(&mut tx, registry, SHARED_TENANT, name, definition, authored).await?;
        }
        let stored: Vec<String> =
            sqlx::query_scalar(registry.sql("SELECT name FROM {table} WHERE tenant = $1"))
                .bind(SHARED_TENANT)
                .fetch_all(&mut *tx)
                .await?;
        for name in stored {
            if !entries.iter().any(|(n, _)| *n == name) {
                remove(&mut tx, registry, SHARED_TENANT, &name).await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// The tenant's own definition `name`, else the shared one of that name.
    pub async fn get_entry(
        &self,
        registry: Registry,
        tenant: &Tenant,
        name: &str,
    ) -> Result<Option<RegistryRecord>> {
        // `tenant = ''` is false (0) for the tenant's own row, so it sorts first.
        let row = sqlx::query(registry.sql(
            "SELECT * FROM {table} WHERE name = $1 AND (tenant = $2 OR tenant = $3)
             ORDER BY tenant = $4 LIMIT 1",
        ))
        .bind(name)
        .bind(&tenant.0)
        .bind(SHARED_TENANT)
        .bind(SHARED_TENANT)
        .fetch_optional(&self.pool())
        .await?;
        row.as_ref().map(record_from_row).transpose()
    }

    /// The tenant's definitions and the shared ones it does not shadow, by name.
    pub async fn list_entries(
        &self,
        registry: Registry,
        tenant: &Tenant,
    ) -> Result<Vec<RegistryRecord>> {
        let rows = sqlx::query(registry.sql(
            "SELECT * FROM {table} WHERE tenant = $1
                OR (tenant = $2 AND name NOT IN (SELECT name FROM {table} WHERE tenant = $1))
             ORDER BY name",
        ))
        .bind(&tenant.0)
        .bind(SHARED_TENANT)
        .fetch_all(&self.pool())
        .await?;
        rows.iter().map(record_from_row).collect()
    }

    /// The names of HTTP tools stored before declared tools belonged to a tenant, which no
    /// tenant may call any more (the start-up log names them).
    pub async fn unowned_http_tools(&self) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT name FROM http_tools WHERE tenant = $1 ORDER BY name")
            .bind(UNOWNED_HTTP_TOOLS)
            .fetch_all(&self.pool())
            .await?;
        rows.iter()
            .map(|r| r.try_get::<String, _>("name").map_err(Into::into))
            .collect()
    }

    /// Deletes the tenant's own definition `name`; false if it has none (shared ones are never
    /// deleted through here).
    pub async fn delete_entry(
        &self,
        registry: Registry,
        tenant: &Tenant,
        name: &str,
    ) -> Result<bool> {
        if tenant.0 == SHARED_TENANT {
            return Ok(false);
        }
        let mut tx = self.pool().begin().await?;
        let removed = remove(&mut tx, registry, &tenant.0, name).await?;
        tx.commit().await?;
        Ok(removed)
    }

    // The workflow registry by its own names, as most callers use it.

    pub async fn put_workflow(
        &self,
        tenant: &Tenant,
        name: &str,
        definition: &Value,
    ) -> Result<Put> {
        let authored = Authored::default();
        self.put_entry(Registry::Workflows, tenant, name, definition, authored)
            .await
    }

    /// Stores a workflow every tenant can read.
    pub async fn put_shared_workflow(&self, name: &str, definition: &Value) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        let authored = Authored::default();
        upsert(
            &mut tx,
            Registry::Workflows,
            SHARED_TENANT,
            name,
            definition,
            authored,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn sync_shared_workflows(&self, workflows: &[(String, Value)]) -> Result<()> {
        self.sync_shared(Registry::Workflows, workflows).await
    }

    pub async fn get_workflow(
        &self,
        tenant: &Tenant,
        name: &str,
    ) -> Result<Option<WorkflowRecord>> {
        self.get_entry(Registry::Workflows, tenant, name).await
    }

    /// The names of the entries `tenant` can read (its own and the shared ones), sorted.
    pub async fn entry_names(&self, registry: Registry, tenant: &Tenant) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .list_entries(registry, tenant)
            .await?
            .into_iter()
            .map(|e| e.name)
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    pub async fn list_workflows(&self, tenant: &Tenant) -> Result<Vec<WorkflowRecord>> {
        self.list_entries(Registry::Workflows, tenant).await
    }

    pub async fn delete_workflow(&self, tenant: &Tenant, name: &str) -> Result<bool> {
        self.delete_entry(Registry::Workflows, tenant, name).await
    }
}

/// Insert-or-update that stores a new version when the definition changed. The head row is
/// written first: on PostgreSQL that locks it, so two puts of one name take their version
/// numbers one after the other (SQLite's writer lock does the same).
pub(super) async fn upsert(
    conn: &mut AnyConnection,
    registry: Registry,
    tenant: &str,
    name: &str,
    definition: &Value,
    authored: Authored<'_>,
) -> Result<Put> {
    let now = fmt_time(Utc::now());
    let digest = digest(definition);
    let text = to_json(definition);
    let created = sqlx::query(registry.sql(
        "INSERT INTO {table} (tenant, name, definition, created_at, updated_at, version)
         VALUES ($1, $2, $3, $4, $5, 0) ON CONFLICT (tenant, name) DO NOTHING",
    ))
    .bind(tenant)
    .bind(name)
    .bind(&text)
    .bind(&now)
    .bind(&now)
    .execute(&mut *conn)
    .await?
    .rows_affected()
        == 1;
    let current: i64 = sqlx::query_scalar(registry.sql(
        "UPDATE {table} SET version = version WHERE tenant = $1 AND name = $2 RETURNING version",
    ))
    .bind(tenant)
    .bind(name)
    .fetch_one(&mut *conn)
    .await?;
    let kind = registry.kind().as_str();
    let latest: Option<String> = sqlx::query_scalar(
        "SELECT digest FROM definition_versions
         WHERE tenant = $1 AND kind = $2 AND name = $3 AND version = $4",
    )
    .bind(tenant)
    .bind(kind)
    .bind(name)
    .bind(current)
    .fetch_optional(&mut *conn)
    .await?;
    if latest.as_deref() == Some(digest.as_str()) {
        return Ok(Put {
            created,
            changed: false,
            version: current as u32,
        });
    }
    let version: i64 = sqlx::query_scalar(
        "SELECT COALESCE(MAX(version), 0) + 1 FROM definition_versions
         WHERE tenant = $1 AND kind = $2 AND name = $3",
    )
    .bind(tenant)
    .bind(kind)
    .bind(name)
    .fetch_one(&mut *conn)
    .await?;
    sqlx::query(
        "INSERT INTO definition_versions
            (tenant, kind, name, version, digest, definition, author, api_key, message, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(tenant)
    .bind(kind)
    .bind(name)
    .bind(version)
    .bind(&digest)
    .bind(&text)
    .bind(authored.author)
    .bind(authored.key)
    .bind(authored.message)
    .bind(&now)
    .execute(&mut *conn)
    .await?;
    sqlx::query(registry.sql(
        "UPDATE {table} SET definition = $1, updated_at = $2, version = $3
         WHERE tenant = $4 AND name = $5",
    ))
    .bind(&text)
    .bind(&now)
    .bind(version)
    .bind(tenant)
    .bind(name)
    .execute(&mut *conn)
    .await?;
    Ok(Put {
        created,
        changed: true,
        version: version as u32,
    })
}

/// Removes a definition with its versions and labels: whether it was there.
pub(super) async fn remove(
    conn: &mut AnyConnection,
    registry: Registry,
    tenant: &str,
    name: &str,
) -> Result<bool> {
    let removed = sqlx::query(registry.sql("DELETE FROM {table} WHERE tenant = $1 AND name = $2"))
        .bind(tenant)
        .bind(name)
        .execute(&mut *conn)
        .await?
        .rows_affected()
        > 0;
    for table in ["definition_versions", "definition_labels"] {
        let sql = format!("DELETE FROM {table} WHERE tenant = $1 AND kind = $2 AND name = $3");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(registry.kind().as_str())
            .bind(name)
            .execute(&mut *conn)
            .await?;
    }
    Ok(removed)
}

fn record_from_row(r: &AnyRow) -> Result<RegistryRecord> {
    Ok(RegistryRecord {
        name: r.try_get("name")?,
        definition: parse_json(&r.try_get::<String, _>("definition")?)?,
        shared: r.try_get::<String, _>("tenant")? == SHARED_TENANT,
        version: r.try_get::<i64, _>("version")? as u32,
        created_at: parse_time(&r.try_get::<String, _>("created_at")?)?,
        updated_at: parse_time(&r.try_get::<String, _>("updated_at")?)?,
    })
}
