//! The versions of registered definitions and their labels (issue 45). Every put that changes
//! a definition stores an immutable version ([`super::registry`]'s upsert); here they are read,
//! resolved from a [`Version`] (a number, a label, the latest), labelled and deleted. A
//! definition's versions belong to whoever owns it: the tenant's own definition of a name, else
//! the shared one, exactly as [`Store::get_entry`] picks. Like the rest of the store, this
//! module only persists; what may be deleted is the caller's to decide.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::registry::{Registry, RegistryRecord, SHARED_TENANT};
use super::{Result, Store, fmt_time, parse_json, parse_time};
use crate::domain::definition::{Pin, Version, digest};
use crate::domain::run::RunSpec;
use crate::domain::{RunId, Tenant};

/// One stored version of a definition.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionRecord {
    pub version: u32,
    pub digest: String,
    pub author: Option<String>,
    /// The fingerprint of the API key that stored it.
    pub key: Option<String>,
    pub message: Option<String>,
    pub created_at: DateTime<Utc>,
    /// The definition; `Null` in listings, which leave it out.
    pub definition: Value,
}

/// A label and the version it points at.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelRecord {
    pub label: String,
    pub version: u32,
    pub updated_at: DateTime<Utc>,
}

/// Whose definition a name is for a tenant: its own, else the shared one.
#[derive(Debug, Clone)]
pub struct Owner {
    tenant: String,
    /// The latest version.
    pub latest: u32,
}

impl Owner {
    pub fn shared(&self) -> bool {
        self.tenant == SHARED_TENANT
    }
}

/// What [`Store::set_label`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Labelled {
    /// Moved (or created, `previous` `None`).
    Moved {
        label: LabelRecord,
        previous: Option<u32>,
    },
    /// The definition has no such version: the versions it has.
    NoVersion(Vec<u32>),
}

impl Store {
    /// The definition `name` as `tenant` reads it at `version`, as a registry entry; `None`
    /// when there is no such definition or version.
    pub async fn get_entry_at(
        &self,
        registry: Registry,
        tenant: &Tenant,
        name: &str,
        version: &Version,
    ) -> Result<Option<RegistryRecord>> {
        if *version == Version::Latest {
            return self.get_entry(registry, tenant, name).await;
        }
        let definitions = Definitions::new(self.clone());
        let Some(owner) = definitions.owner(registry, tenant, name).await? else {
            return Ok(None);
        };
        let Some(found) = definitions
            .version_at(registry, &owner, name, version)
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(RegistryRecord {
            name: name.to_owned(),
            definition: found.definition,
            shared: owner.shared(),
            version: found.version,
            created_at: found.created_at,
            updated_at: found.created_at,
        }))
    }

    /// Stores as version 1 every definition stored before versions were kept (a head row at
    /// version 0): once, at start, idempotent if replicas start together.
    pub async fn backfill_versions(&self) -> Result<()> {
        for registry in [
            Registry::Workflows,
            Registry::Agents,
            Registry::HttpTools,
            Registry::Functions,
        ] {
            let rows =
                sqlx::query(registry.sql(
                    "SELECT tenant, name, definition, created_at FROM {table} WHERE version = 0",
                ))
                .fetch_all(&self.pool())
                .await?;
            for row in rows {
                let tenant: String = row.try_get("tenant")?;
                let name: String = row.try_get("name")?;
                let text: String = row.try_get("definition")?;
                let created_at: String = row.try_get("created_at")?;
                let definition = parse_json(&text)?;
                let mut tx = self.pool().begin().await?;
                sqlx::query(
                    "INSERT INTO definition_versions
                        (tenant, kind, name, version, digest, definition, created_at)
                     VALUES ($1, $2, $3, 1, $4, $5, $6) ON CONFLICT DO NOTHING",
                )
                .bind(&tenant)
                .bind(registry.kind().as_str())
                .bind(&name)
                .bind(digest(&definition))
                .bind(&text)
                .bind(&created_at)
                .execute(&mut *tx)
                .await?;
                sqlx::query(registry.sql(
                    "UPDATE {table} SET version = 1 WHERE tenant = $1 AND name = $2 AND version = 0",
                ))
                .bind(&tenant)
                .bind(&name)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
            }
        }
        Ok(())
    }
}

/// The versions and labels of the registries: a cheap-clone handle over the store.
#[derive(Clone)]
pub struct Definitions {
    store: Store,
}

impl Definitions {
    pub fn new(store: Store) -> Definitions {
        Definitions { store }
    }

    fn pool(&self) -> sqlx::AnyPool {
        self.store.pool()
    }

    /// The tenant's own definitions (not the shared ones), by name.
    pub async fn own_entries(
        &self,
        registry: Registry,
        tenant: &Tenant,
    ) -> Result<Vec<RegistryRecord>> {
        let list = self.store.list_entries(registry, tenant).await?;
        Ok(list.into_iter().filter(|e| !e.shared).collect())
    }

    /// The tenant's own definition `name` (not a shared one).
    pub async fn own_entry(
        &self,
        registry: Registry,
        tenant: &Tenant,
        name: &str,
    ) -> Result<Option<RegistryRecord>> {
        let found = self.store.get_entry(registry, tenant, name).await?;
        Ok(found.filter(|e| !e.shared))
    }

    /// [`Store::put_entry`]: creates or replaces the tenant's own definition, as a new version
    /// when it changed.
    pub async fn put(
        &self,
        registry: Registry,
        tenant: &Tenant,
        name: &str,
        definition: &Value,
        authored: super::Authored<'_>,
    ) -> Result<super::Put> {
        (self.store)
            .put_entry(registry, tenant, name, definition, authored)
            .await
    }

    /// [`Store::delete_entry`]: deletes the tenant's own definition with its versions and
    /// labels; whether there was one.
    pub async fn delete(&self, registry: Registry, tenant: &Tenant, name: &str) -> Result<bool> {
        self.store.delete_entry(registry, tenant, name).await
    }

    /// [`Store::apply_entries`]: puts and removals of the tenant's own definitions, and the
    /// changes of its schedules, in one transaction.
    pub async fn apply(
        &self,
        tenant: &Tenant,
        entries: &[(Registry, String, Value)],
        removed: &[(Registry, String)],
        schedules: &super::ScheduleChanges,
        authored: super::Authored<'_>,
    ) -> Result<Vec<super::Put>> {
        (self.store)
            .apply_entries(tenant, entries, removed, schedules, authored)
            .await
    }

    /// The names of the definitions `tenant` can read, sorted.
    pub async fn names(&self, registry: Registry, tenant: &Tenant) -> Result<Vec<String>> {
        self.store.entry_names(registry, tenant).await
    }

    /// Whose definition `name` is for `tenant`, with its latest version; `None` if it has none.
    pub async fn owner(
        &self,
        registry: Registry,
        tenant: &Tenant,
        name: &str,
    ) -> Result<Option<Owner>> {
        let row = sqlx::query(registry.sql(
            "SELECT tenant, version FROM {table} WHERE name = $1 AND (tenant = $2 OR tenant = $3)
             ORDER BY tenant = $4 LIMIT 1",
        ))
        .bind(name)
        .bind(&tenant.0)
        .bind(SHARED_TENANT)
        .bind(SHARED_TENANT)
        .fetch_optional(&self.pool())
        .await?;
        row.map(|r| {
            Ok(Owner {
                tenant: r.try_get("tenant")?,
                latest: r.try_get::<i64, _>("version")? as u32,
            })
        })
        .transpose()
    }

    /// The versions of `owner`'s definition `name`, newest first, without their definitions.
    pub async fn versions(
        &self,
        registry: Registry,
        owner: &Owner,
        name: &str,
    ) -> Result<Vec<VersionRecord>> {
        let rows = sqlx::query(
            "SELECT version, digest, author, api_key, message, created_at
             FROM definition_versions WHERE tenant = $1 AND kind = $2 AND name = $3
             ORDER BY version DESC",
        )
        .bind(&owner.tenant)
        .bind(registry.kind().as_str())
        .bind(name)
        .fetch_all(&self.pool())
        .await?;
        rows.iter().map(|r| version_from_row(r, false)).collect()
    }

    /// One version of `owner`'s definition `name`, with its definition: a number, the one a
    /// label points at (read in one statement, so a label moved meanwhile gives the old or
    /// the new version, never a mix), or the latest.
    pub async fn version_at(
        &self,
        registry: Registry,
        owner: &Owner,
        name: &str,
        version: &Version,
    ) -> Result<Option<VersionRecord>> {
        let kind = registry.kind().as_str();
        let row = match version {
            Version::Label(label) => {
                sqlx::query(
                    "SELECT v.* FROM definition_labels l JOIN definition_versions v
                       ON v.tenant = l.tenant AND v.kind = l.kind AND v.name = l.name
                      AND v.version = l.version
                     WHERE l.tenant = $1 AND l.kind = $2 AND l.name = $3 AND l.label = $4",
                )
                .bind(&owner.tenant)
                .bind(kind)
                .bind(name)
                .bind(label)
                .fetch_optional(&self.pool())
                .await?
            }
            Version::Number(_) | Version::Latest => {
                let n = match version {
                    Version::Number(n) => i64::from(*n),
                    _ => i64::from(owner.latest),
                };
                sqlx::query(
                    "SELECT * FROM definition_versions
                     WHERE tenant = $1 AND kind = $2 AND name = $3 AND version = $4",
                )
                .bind(&owner.tenant)
                .bind(kind)
                .bind(name)
                .bind(n)
                .fetch_optional(&self.pool())
                .await?
            }
        };
        row.as_ref().map(|r| version_from_row(r, true)).transpose()
    }

    /// The version numbers (oldest first) and the label names of `owner`'s definition
    /// `name`: what a caller asking for one it does not have is told.
    pub async fn known(
        &self,
        registry: Registry,
        owner: &Owner,
        name: &str,
    ) -> Result<(Vec<u32>, Vec<String>)> {
        let versions = self.versions(registry, owner, name).await?;
        let labels = self.labels(registry, owner, name).await?;
        Ok((
            versions.iter().rev().map(|v| v.version).collect(),
            labels.into_iter().map(|l| l.label).collect(),
        ))
    }

    /// The labels of `owner`'s definition `name`, by label.
    pub async fn labels(
        &self,
        registry: Registry,
        owner: &Owner,
        name: &str,
    ) -> Result<Vec<LabelRecord>> {
        let rows = sqlx::query(
            "SELECT label, version, updated_at FROM definition_labels
             WHERE tenant = $1 AND kind = $2 AND name = $3 ORDER BY label",
        )
        .bind(&owner.tenant)
        .bind(registry.kind().as_str())
        .bind(name)
        .fetch_all(&self.pool())
        .await?;
        rows.iter().map(label_from_row).collect()
    }

    /// Points the label at a version of the tenant's own definition `name`, in one
    /// transaction with the check that the version exists. Its first statement writes (the
    /// label's row, to itself): on SQLite that takes the write lock before anything is read,
    /// so a run's history written meanwhile cannot void the transaction (a read transaction
    /// of WAL mode that then writes fails with `SQLITE_BUSY_SNAPSHOT` if another wrote
    /// since); on PostgreSQL it locks the label's row.
    pub async fn set_label(
        &self,
        registry: Registry,
        tenant: &Tenant,
        name: &str,
        label: &str,
        version: u32,
    ) -> Result<Labelled> {
        let kind = registry.kind().as_str();
        let mut tx = self.pool().begin().await?;
        let previous: Option<i64> = sqlx::query_scalar(
            "UPDATE definition_labels SET version = version
             WHERE tenant = $1 AND kind = $2 AND name = $3 AND label = $4 RETURNING version",
        )
        .bind(&tenant.0)
        .bind(kind)
        .bind(name)
        .bind(label)
        .fetch_optional(&mut *tx)
        .await?;
        let known: Vec<i64> = sqlx::query_scalar(
            "SELECT version FROM definition_versions
             WHERE tenant = $1 AND kind = $2 AND name = $3 ORDER BY version",
        )
        .bind(&tenant.0)
        .bind(kind)
        .bind(name)
        .fetch_all(&mut *tx)
        .await?;
        if !known.contains(&i64::from(version)) {
            return Ok(Labelled::NoVersion(
                known.into_iter().map(|v| v as u32).collect(),
            ));
        }
        let now = Utc::now();
        sqlx::query(
            "INSERT INTO definition_labels (tenant, kind, name, label, version, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (tenant, kind, name, label)
             DO UPDATE SET version = excluded.version, updated_at = excluded.updated_at",
        )
        .bind(&tenant.0)
        .bind(kind)
        .bind(name)
        .bind(label)
        .bind(i64::from(version))
        .bind(fmt_time(now))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Labelled::Moved {
            label: LabelRecord {
                label: label.to_owned(),
                version,
                updated_at: now,
            },
            previous: previous.map(|v| v as u32),
        })
    }

    /// Removes a label of the tenant's own definition: whether it was there.
    pub async fn delete_label(
        &self,
        registry: Registry,
        tenant: &Tenant,
        name: &str,
        label: &str,
    ) -> Result<bool> {
        let res = sqlx::query(
            "DELETE FROM definition_labels
             WHERE tenant = $1 AND kind = $2 AND name = $3 AND label = $4",
        )
        .bind(&tenant.0)
        .bind(registry.kind().as_str())
        .bind(name)
        .bind(label)
        .execute(&self.pool())
        .await?;
        Ok(res.rows_affected() > 0)
    }

    /// Deletes one version of the tenant's own definition `name` unless it is the latest or a
    /// label points at it (checked by the delete itself): whether it was deleted.
    pub async fn delete_version(
        &self,
        registry: Registry,
        tenant: &Tenant,
        name: &str,
        version: u32,
    ) -> Result<bool> {
        let kind = registry.kind().as_str();
        let sql = registry.sql(
            "DELETE FROM definition_versions
             WHERE tenant = $1 AND kind = $2 AND name = $3 AND version = $4
               AND version <> (SELECT version FROM {table} WHERE tenant = $1 AND name = $3)
               AND NOT EXISTS (SELECT 1 FROM definition_labels l WHERE l.tenant = $1
                   AND l.kind = $2 AND l.name = $3 AND l.version = $4)",
        );
        let res = sqlx::query(sql)
            .bind(&tenant.0)
            .bind(kind)
            .bind(name)
            .bind(i64::from(version))
            .execute(&self.pool())
            .await?;
        Ok(res.rows_affected() > 0)
    }

    /// The tenant's runs not yet ended that use a version of its own definition `name`
    /// (`version` `None`: any version), oldest first. Reads the specs of the tenant's
    /// unfinished runs: a rare question (a delete), over runs a queue bounds.
    pub async fn runs_using(
        &self,
        registry: Registry,
        tenant: &Tenant,
        name: &str,
        version: Option<u32>,
    ) -> Result<Vec<RunId>> {
        let rows = sqlx::query(
            "SELECT id, spec FROM runs WHERE tenant = $1
               AND status IN ('queued', 'running', 'waiting_input', 'paused') ORDER BY id",
        )
        .bind(&tenant.0)
        .fetch_all(&self.pool())
        .await?;
        let uses = |pin: &Pin| {
            pin.kind == registry.kind()
                && pin.name == name
                && !pin.shared
                && version.is_none_or(|v| pin.version == v)
        };
        let mut runs = Vec::new();
        for row in rows {
            let spec: String = row.try_get("spec")?;
            let Ok(spec) = serde_json::from_str::<RunSpec>(&spec) else {
                continue;
            };
            if spec.definitions.iter().any(uses) {
                let id: String = row.try_get("id")?;
                runs.extend(RunId::parse(&id));
            }
        }
        Ok(runs)
    }
}

fn version_from_row(r: &AnyRow, with_definition: bool) -> Result<VersionRecord> {
    Ok(VersionRecord {
        version: r.try_get::<i64, _>("version")? as u32,
        digest: r.try_get("digest")?,
        author: r.try_get("author")?,
        key: r.try_get("api_key")?,
        message: r.try_get("message")?,
        created_at: parse_time(&r.try_get::<String, _>("created_at")?)?,
        definition: match with_definition {
            true => parse_json(&r.try_get::<String, _>("definition")?)?,
            false => Value::Null,
        },
    })
}

fn label_from_row(r: &AnyRow) -> Result<LabelRecord> {
    Ok(LabelRecord {
        label: r.try_get("label")?,
        version: r.try_get::<i64, _>("version")? as u32,
        updated_at: parse_time(&r.try_get::<String, _>("updated_at")?)?,
    })
}
