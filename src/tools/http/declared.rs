//! HTTP tools that tenants declare through the API (`PUT /v1/tools/{name}`). They belong to
//! the declaring tenant: stored under it, listed and callable by it alone. Their headers may
//! read only the environment variables of `tools.http_api_env`.
//!
//! Nothing here is kept per replica: the store holds the declarations, a tenant's view is
//! read from it on each request, and a run carries the declarations it may call in its spec
//! (copied when it is created), so it calls the same tools on whichever replica resumes it,
//! whatever the tenant declares or removes meanwhile. What is kept is only a cache of the
//! built tools (a client each, a compiled schema), keyed by tenant and name and dropped when
//! the declaration differs.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use super::guard::Destinations;
use super::{EnvAccess, HttpTool, destinations};
use crate::config::ToolsConfig;
use crate::domain::DeclaredTool;
use crate::tools::ToolRegistry;
use crate::tools::registry::Declared;
use crate::tools::worker::WorkerTool;

/// The most tools one tenant may declare: more than a model is offered in one request.
pub const MAX_PER_TENANT: usize = 128;

/// Builds (and caches) the tools tenants declared. Cheap to clone.
#[derive(Clone)]
pub struct DeclaredTools {
    inner: Arc<Inner>,
}

struct Inner {
    enabled: bool,
    policy: Arc<Destinations>,
    env: EnvAccess,
    /// A std mutex: lookups and inserts only, never across an await.
    built: Mutex<HashMap<(String, String), (DeclaredTool, Declared)>>,
}

impl DeclaredTools {
    /// From `[tools]`: whether the API may declare tools, the destination policy, and the
    /// variables declared tools may read.
    pub fn new(config: &ToolsConfig) -> anyhow::Result<DeclaredTools> {
        let env: BTreeSet<String> = config.http_api_env.iter().cloned().collect();
        Ok(DeclaredTools {
            inner: Arc::new(Inner {
                enabled: config.http_api,
                policy: destinations(config)?,
                env: EnvAccess::Only(Arc::new(env)),
                built: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Whether tenants may declare tools (`tools.http_api`). When off, declarations stored
    /// earlier are neither listed nor callable.
    pub fn enabled(&self) -> bool {
        self.inner.enabled
    }

    /// Every problem with a tenant's declaration: the spec's own, and headers that read
    /// variables outside `tools.http_api_env`.
    pub fn problems(&self, spec: &DeclaredTool) -> Vec<(String, String)> {
        let mut out = spec.problems();
        if let DeclaredTool::Http(http) = spec {
            out.extend(http.env_problems(&self.inner.env));
        }
        out
    }

    /// Builds one declared tool, to check that it can be built before it is stored.
    pub fn build(&self, spec: &DeclaredTool) -> anyhow::Result<Declared> {
        match spec {
            DeclaredTool::Http(http) => {
                let tool = HttpTool::new(
                    http.clone(),
                    self.inner.policy.clone(),
                    self.inner.env.clone(),
                )?;
                Declared::new(Arc::new(tool)).map_err(anyhow::Error::msg)
            }
            DeclaredTool::Worker(worker) => {
                WorkerTool::declared(worker.clone()).map_err(anyhow::Error::msg)
            }
        }
    }

    fn built(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(String, String), (DeclaredTool, Declared)>> {
        // A poisoned lock only means a panic elsewhere mid-insert; the map is still whole.
        self.inner.built.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `base` with the tenant's declared tools beside its own. A declaration that cannot be
    /// built (stored by an older version, say) is logged and left out.
    pub fn view(&self, base: &ToolRegistry, tenant: &str, specs: &[DeclaredTool]) -> ToolRegistry {
        if specs.is_empty() {
            return base.clone();
        }
        let tools: Vec<Declared> = specs
            .iter()
            .filter_map(|spec| self.cached(tenant, spec))
            .collect();
        base.with_declared(tools)
    }

    fn cached(&self, tenant: &str, spec: &DeclaredTool) -> Option<Declared> {
        let key = (tenant.to_owned(), spec.name().to_owned());
        if let Some((cached, tool)) = self.built().get(&key)
            && cached == spec
        {
            return Some(tool.clone());
        }
        match self.build(spec) {
            Ok(tool) => {
                self.built().insert(key, (spec.clone(), tool.clone()));
                Some(tool)
            }
            Err(e) => {
                tracing::warn!(tool = %spec.name(), tenant, error = %e, "a declared HTTP tool cannot be built; left out");
                None
            }
        }
    }
}
