//! The fixed-workflow registry: [`Workflows`], the handle the API and the engine read and write
//! it through (the SQL is the store's, `store/registry.rs`), and its bootstrap, loading the
//! configured directory (`workflows.dir`) at start.
//!
//! Every `*.json` file of the directory (not its subdirectories) holds one workflow definition
//! in the project's workflow format (`schemas/FixedWorkflow.schema.json`). Other files are
//! ignored, so a README or an editor's backup can sit next to them; TOML or YAML are not read.
//! A definition without a `name` takes the file's stem (`triage.json` → `triage`), which then
//! must be a valid workflow name.
//!
//! Each file is validated exactly like a `PUT /v1/workflows/{name}` body. One invalid file
//! stops the start, with every problem of every file in the error, rather than serving a
//! registry that silently lacks a workflow. Loaded workflows are stored as *shared*: every
//! tenant can read them, none can replace or delete them through the API (a tenant's own
//! workflow of the same name shadows the shared one for that tenant only).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use crate::domain::Tenant;
use crate::plan::{Catalog, validate_workflow};
use crate::store::{self, Store, WorkflowRecord};

/// The workflow registry as a tenant sees it: its own workflows beside the shared ones (a
/// tenant's own one shadows a shared one of the same name). Definitions are validated by the
/// caller before they are put. A cheap-clone handle.
#[derive(Clone)]
pub struct Workflows {
    store: Store,
}

impl Workflows {
    pub fn new(store: Store) -> Workflows {
        Workflows { store }
    }

    /// The tenant's workflows and the shared ones, by name.
    pub async fn list(&self, tenant: &Tenant) -> store::Result<Vec<WorkflowRecord>> {
        self.store.list_workflows(tenant).await
    }

    /// The tenant's own workflow of that name, else the shared one.
    pub async fn get(&self, tenant: &Tenant, name: &str) -> store::Result<Option<WorkflowRecord>> {
        self.store.get_workflow(tenant, name).await
    }

    /// Creates or replaces the tenant's own workflow, as a new version when it changed.
    pub async fn put(
        &self,
        tenant: &Tenant,
        name: &str,
        definition: &Value,
        authored: store::Authored<'_>,
    ) -> store::Result<store::Put> {
        (self.store)
            .put_entry(
                store::Registry::Workflows,
                tenant,
                name,
                definition,
                authored,
            )
            .await
    }

    /// Deletes the tenant's own workflow: whether there was one. Shared ones stay.
    pub async fn delete(&self, tenant: &Tenant, name: &str) -> store::Result<bool> {
        self.store.delete_workflow(tenant, name).await
    }

    /// What a caller is told of a workflow the tenant cannot read: the nearest name and the
    /// known ones ([`crate::suggest::unknown_name`]).
    pub async fn unknown(&self, tenant: &Tenant, name: &str) -> store::Result<String> {
        let names = self
            .store
            .entry_names(store::Registry::Workflows, tenant)
            .await?;
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let list = "GET /v1/workflows lists them";
        Ok(crate::suggest::unknown_name("workflow", list, name, &names))
    }
}

/// Loads and validates every workflow file of `dir`, then makes them the shared workflows
/// (replacing those of an earlier start). Returns how many were loaded.
///
/// An empty `dir` means no directory is configured: nothing is loaded and shared workflows
/// left by an earlier start are removed. A missing or unreadable directory is an error.
pub async fn load_dir(dir: &Path, store: &Store, catalog: Catalog<'_>) -> anyhow::Result<usize> {
    if dir.as_os_str().is_empty() {
        store
            .sync_shared_workflows(&[])
            .await
            .context("clearing shared workflows")?;
        return Ok(0);
    }
    let files = json_files(dir, "workflows.dir").await?;
    let mut loaded: Vec<(String, Value, PathBuf)> = Vec::new();
    let mut report = String::new();
    for path in files {
        match load_file(&path, catalog).await {
            Ok((name, definition)) => {
                if let Some((_, _, first)) = loaded.iter().find(|(n, _, _)| *n == name) {
                    let _ = writeln!(
                        report,
                        "{}: workflow `{name}` is already defined by {}",
                        path.display(),
                        first.display()
                    );
                } else {
                    loaded.push((name, definition, path));
                }
            }
            Err(problems) => {
                let _ = writeln!(report, "{} is not a valid workflow:", path.display());
                for line in problems {
                    let _ = writeln!(report, "  {line}");
                }
            }
        }
    }
    if !report.is_empty() {
        anyhow::bail!(
            "invalid workflow files in {} (workflows.dir):\n{}",
            dir.display(),
            report.trim_end()
        );
    }
    let workflows: Vec<(String, Value)> = loaded.into_iter().map(|(n, d, _)| (n, d)).collect();
    store
        .sync_shared_workflows(&workflows)
        .await
        .context("storing the workflows of workflows.dir")?;
    Ok(workflows.len())
}

/// The `*.json` files directly in `dir` (the directory of config key `key`), sorted so that
/// loading (and its errors) is deterministic.
pub async fn json_files(dir: &Path, key: &str) -> anyhow::Result<Vec<PathBuf>> {
    let context = || format!("reading the directory {} ({key})", dir.display());
    let mut entries = tokio::fs::read_dir(dir).await.with_context(context)?;
    let mut files = Vec::new();
    while let Some(entry) = entries.next_entry().await.with_context(context)? {
        let path = entry.path();
        let is_json = path.extension().is_some_and(|e| e == "json");
        if is_json && entry.file_type().await.with_context(context)?.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// One file → (name, definition with its name filled in), or every problem as
/// `pointer: message` lines.
async fn load_file(path: &Path, catalog: Catalog<'_>) -> Result<(String, Value), Vec<String>> {
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|e| vec![format!("cannot be read: {e}")])?;
    let mut definition: Value =
        serde_json::from_str(&text).map_err(|e| vec![format!("not valid JSON: {e}")])?;
    if let Value::Object(map) = &mut definition
        && !map.contains_key("name")
    {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        map.insert("name".into(), Value::String(stem));
    }
    // The name is checked with the rest (schema `name` pattern), so it is not checked here.
    match validate_workflow(&definition, catalog) {
        Ok(workflow) => Ok((workflow.name, definition)),
        Err(problems) => Err(problems
            .into_iter()
            .map(|p| {
                let pointer = if p.pointer.is_empty() {
                    "(root)"
                } else {
                    &p.pointer
                };
                format!("{pointer}: {}", p.message)
            })
            .collect()),
    }
}
