//! The router from model aliases (what callers name in a run) to a provider and that
//! provider's own model name.
//!
//! It owns the alias table and the provider instances, built once from the configuration and
//! cheap to clone. It must not call models itself or know anything about runs: the engine asks
//! it for a provider and streams.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use utoipa::ToSchema;

use crate::config::{Config, ProviderKind};

use super::providers::anthropic::AnthropicProvider;
use super::providers::offline::{self, OfflineProvider};
use super::providers::ollama::OllamaProvider;
use super::providers::openai::OpenAiProvider;
use super::{Capabilities, Error, LlmProvider};

/// Where one alias goes and how calls through it are made.
#[derive(Clone)]
pub struct Target {
    /// The alias this target is configured under.
    pub alias: String,
    pub provider: Arc<dyn LlmProvider>,
    /// The name sent to the provider, e.g. `gpt-4o-mini`.
    pub model: String,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
    /// Deadline of one whole call through this alias.
    pub timeout: Option<Duration>,
    /// What the model can do: how structured answers are asked for, and more.
    pub capabilities: Capabilities,
}

/// What one alias resolves to: its own target, then its fallbacks in order (never empty).
#[derive(Clone)]
pub struct ModelRoute {
    targets: Vec<Target>,
}

impl ModelRoute {
    /// The alias asked for.
    pub fn alias(&self) -> &str {
        &self.targets[0].alias
    }

    /// The alias's own target first, then each fallback.
    pub fn targets(&self) -> &[Target] {
        &self.targets
    }
}

/// What `GET /v1/models` lists for one alias: where calls through it go now. Names only: a
/// provider's address and key are never part of it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ModelInfo {
    /// The alias a run names as `model`.
    pub name: String,
    /// The provider that answers: `openai`, `offline` or a name of `[llm.providers]`. An
    /// alias of an unconfigured `openai` (or any alias, with `llm.provider = "offline"`)
    /// says `offline`, since that is who answers.
    pub provider: String,
    /// The model name sent to that provider.
    pub model: String,
    /// Whether runs that name no model use this alias (`llm.default_model`).
    pub default: bool,
}

#[derive(Clone)]
struct Route {
    target: Target,
    fallback: Option<String>,
}

/// Model aliases mapped to a provider and its model name. Cheap to clone: clones share one
/// immutable table.
#[derive(Clone)]
pub struct LlmRouter {
    /// Immutable after construction, so clones share it without a lock.
    routes: Arc<BTreeMap<String, Route>>,
    default_alias: String,
}

/// One built provider and the capabilities its models have unless they say otherwise.
struct Built {
    provider: Arc<dyn LlmProvider>,
    capabilities: Capabilities,
}

/// The providers by name: `openai` (when configured), `offline`, and `[llm.providers]`.
fn build_providers(config: &Config) -> Result<BTreeMap<String, Built>, String> {
    let offline: Arc<dyn LlmProvider> = Arc::new(OfflineProvider::with_token_delay(
        Duration::from_millis(config.llm.offline_token_delay_ms),
    ));
    let offline_built = || Built {
        provider: offline.clone(),
        capabilities: Capabilities::for_kind(ProviderKind::Offline),
    };
    let mut providers = BTreeMap::new();
    providers.insert("offline".to_owned(), offline_built());
    if config.uses_openai() {
        let mut capabilities = Capabilities::for_kind(ProviderKind::Openai);
        capabilities.structured_output = config.llm.openai.structured_output;
        let provider = Arc::new(OpenAiProvider::new(&config.llm.openai)?);
        providers.insert(
            "openai".to_owned(),
            Built {
                provider,
                capabilities,
            },
        );
    }
    for (name, p) in &config.llm.providers {
        // `llm.provider = "offline"` sends everything to the offline provider.
        if p.kind == ProviderKind::Offline || !config.uses_any_endpoint() {
            providers.insert(name.clone(), offline_built());
            continue;
        }
        let mut capabilities = Capabilities::for_kind(p.kind);
        if let Some(mode) = p.structured_output {
            capabilities.structured_output = mode;
        }
        let provider: Arc<dyn LlmProvider> = match p.kind {
            ProviderKind::Openai => Arc::new(OpenAiProvider::named(name, &p.as_openai())?),
            ProviderKind::Anthropic => Arc::new(AnthropicProvider::named(name, &p.as_openai())?),
            ProviderKind::Ollama => Arc::new(OllamaProvider::named(name, &p.as_openai())?),
            ProviderKind::Offline => unreachable!("handled above"),
        };
        providers.insert(
            name.clone(),
            Built {
                provider,
                capabilities,
            },
        );
    }
    Ok(providers)
}

impl LlmRouter {
    /// Builds the providers and the alias table from the configuration.
    ///
    /// Without an OpenAI-compatible endpoint configured, aliases of the `openai` provider
    /// answer with the offline provider: a default install then completes runs instead of
    /// failing on a missing key.
    pub fn from_config(config: &Config) -> Result<LlmRouter, String> {
        let providers = build_providers(config)?;
        let offline = &providers["offline"];
        let mut routes = BTreeMap::new();
        for (alias, target) in &config.llm.models {
            let (built, model) = match providers.get(&target.provider) {
                Some(p) if target.provider != "offline" => (p, target.model.clone()),
                // Unconfigured `openai`, or `offline` itself.
                None if target.provider == "openai" => (offline, offline::MODEL.into()),
                Some(_) => (offline, offline::MODEL.into()),
                None => {
                    return Err(format!(
                        "llm.models.{alias}.provider: unknown provider `{}`",
                        target.provider
                    ));
                }
            };
            let ollama = config
                .llm
                .providers
                .get(&target.provider)
                .is_some_and(|p| p.kind == ProviderKind::Ollama);
            if ollama && target.capabilities.context_window.is_none() && config.uses_any_endpoint()
            {
                tracing::warn!(
                    alias = %alias,
                    "llm.models.{alias}: an Ollama model without capabilities.context_window \
                     answers within Ollama's default window (a few thousand tokens) and cuts \
                     longer prompts silently; set it to the window the model supports"
                );
            }
            let target_ = Target {
                alias: alias.clone(),
                provider: built.provider.clone(),
                model,
                temperature: target.temperature,
                max_tokens: target.max_tokens,
                timeout: target.timeout_ms.map(Duration::from_millis),
                capabilities: built.capabilities.with(&target.capabilities),
            };
            let route = Route {
                target: target_,
                fallback: target.fallback.clone(),
            };
            routes.insert(alias.clone(), route);
        }
        if !routes.contains_key(&config.llm.default_model) {
            return Err(format!(
                "llm.default_model: `{}` is not one of llm.models",
                config.llm.default_model
            ));
        }
        Ok(LlmRouter {
            routes: Arc::new(routes),
            default_alias: config.llm.default_model.clone(),
        })
    }

    /// A router where every alias in `aliases` (and the default) goes to `provider`.
    ///
    /// The only alias is `default_alias`, and the model name sent is the alias itself; tests
    /// use this to put a scripted provider behind a run.
    pub fn single(provider: Arc<dyn LlmProvider>, default_alias: &str) -> LlmRouter {
        let mut routes = BTreeMap::new();
        routes.insert(
            default_alias.to_owned(),
            Route {
                target: Target {
                    alias: default_alias.to_owned(),
                    provider,
                    model: default_alias.to_owned(),
                    temperature: None,
                    max_tokens: None,
                    timeout: None,
                    capabilities: Capabilities::default(),
                },
                fallback: None,
            },
        );
        LlmRouter {
            routes: Arc::new(routes),
            default_alias: default_alias.to_owned(),
        }
    }

    /// The provider and the provider's model name for an alias (`None` = the default alias).
    pub fn resolve(&self, alias: Option<&str>) -> Result<(Arc<dyn LlmProvider>, String), Error> {
        let route = self.route(alias)?;
        let first = &route.targets()[0];
        Ok((first.provider.clone(), first.model.clone()))
    }

    /// An alias (`None` = the default) with its fallbacks, in the order they are tried.
    pub fn route(&self, alias: Option<&str>) -> Result<ModelRoute, Error> {
        let alias = alias.unwrap_or(&self.default_alias);
        let mut route = self
            .routes
            .get(alias)
            .ok_or_else(|| Error::UnknownModel(alias.to_owned()))?;
        let mut targets = vec![route.target.clone()];
        // Cycles are refused at start; the bound only keeps a bad table from looping here.
        while let Some(next) = route.fallback.as_deref().and_then(|f| self.routes.get(f)) {
            if targets.iter().any(|t| t.alias == next.target.alias) {
                break;
            }
            targets.push(next.target.clone());
            route = next;
        }
        Ok(ModelRoute { targets })
    }

    pub fn has_alias(&self, alias: &str) -> bool {
        self.routes.contains_key(alias)
    }

    /// Configured aliases, sorted.
    pub fn aliases(&self) -> Vec<String> {
        self.routes.keys().cloned().collect()
    }

    /// Every alias with the provider and model it goes to, sorted by alias.
    pub fn models(&self) -> Vec<ModelInfo> {
        self.routes
            .iter()
            .map(|(alias, route)| ModelInfo {
                name: alias.clone(),
                provider: route.target.provider.name().to_owned(),
                model: route.target.model.clone(),
                default: *alias == self.default_alias,
            })
            .collect()
    }

    /// The alias used when a run names no model.
    pub fn default_alias(&self) -> &str {
        &self.default_alias
    }
}

/// What plan and agent validation asks of the models: whether an alias is configured.
impl crate::plan::KnownModels for LlmRouter {
    fn has_model(&self, alias: &str) -> bool {
        self.has_alias(alias)
    }
}

impl fmt::Debug for LlmRouter {
    /// `alias → provider/model`, the part worth seeing in a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for (alias, route) in self.routes.iter() {
            map.entry(
                alias,
                &format_args!("{}/{}", route.target.provider.name(), route.target.model),
            );
        }
        map.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ModelAlias, ProviderChoice, Secret};

    fn config(provider: ProviderChoice, base_url: &str) -> Config {
        let mut config = Config::default();
        config.llm.provider = provider;
        config.llm.openai.base_url = base_url.into();
        config
            .llm
            .models
            .insert("smart".into(), ModelAlias::new("openai", "gpt-4o"));
        config
    }

    fn route(router: &LlmRouter, alias: Option<&str>) -> (String, String) {
        let (provider, model) = router.resolve(alias).unwrap();
        (provider.name().to_owned(), model)
    }

    #[test]
    fn aliases_resolve_to_providers_and_models() {
        let pair = |p: &str, m: &str| (p.to_owned(), m.to_owned());
        let cases = [
            // Nothing configured: every alias answers offline.
            (
                config(ProviderChoice::Auto, ""),
                [
                    (None, pair("offline", "offline")),
                    (Some("smart"), pair("offline", "offline")),
                    (Some("offline"), pair("offline", "offline")),
                ],
            ),
            (
                config(ProviderChoice::Auto, "http://127.0.0.1:9/v1"),
                [
                    (None, pair("openai", "gpt-4o-mini")),
                    (Some("smart"), pair("openai", "gpt-4o")),
                    (Some("offline"), pair("offline", "offline")),
                ],
            ),
            // Forced offline wins over a configured endpoint.
            (
                config(ProviderChoice::Offline, "http://127.0.0.1:9/v1"),
                [
                    (None, pair("offline", "offline")),
                    (Some("smart"), pair("offline", "offline")),
                    (Some("offline"), pair("offline", "offline")),
                ],
            ),
        ];
        for (config, expectations) in cases {
            let router = LlmRouter::from_config(&config).unwrap();
            assert_eq!(router.aliases(), ["default", "offline", "smart"]);
            for (alias, want) in expectations {
                assert_eq!(route(&router, alias), want, "{alias:?} in {router:?}");
            }
        }
    }

    #[test]
    fn models_list_where_each_alias_goes_now() {
        let info = |name: &str, provider: &str, model: &str, default: bool| ModelInfo {
            name: name.into(),
            provider: provider.into(),
            model: model.into(),
            default,
        };
        let configured =
            LlmRouter::from_config(&config(ProviderChoice::Auto, "http://127.0.0.1:9/v1"));
        assert_eq!(
            configured.unwrap().models(),
            [
                info("default", "openai", "gpt-4o-mini", true),
                info("offline", "offline", "offline", false),
                info("smart", "openai", "gpt-4o", false),
            ]
        );
        // No endpoint: the offline provider answers every alias, and the list says so.
        let offline = LlmRouter::from_config(&config(ProviderChoice::Auto, "")).unwrap();
        assert!(offline.models().iter().all(|m| m.provider == "offline"));
    }

    #[test]
    fn only_a_key_means_openai_itself() {
        let mut config = Config::default();
        config.llm.openai.api_key = Secret::new("sk-test");
        let router = LlmRouter::from_config(&config).unwrap();
        assert_eq!(
            route(&router, None),
            ("openai".into(), "gpt-4o-mini".into())
        );
    }

    #[test]
    fn unknown_aliases_and_bad_config_are_errors() {
        let router = LlmRouter::from_config(&Config::default()).unwrap();
        assert!(!router.has_alias("gpt-9"));
        assert!(router.has_alias("offline"));
        let err = router.resolve(Some("gpt-9")).err().unwrap();
        assert!(matches!(&err, Error::UnknownModel(a) if a == "gpt-9"));
        assert_eq!(err.code(), "unknown_model");

        let mut bad = Config::default();
        bad.llm.default_model = "missing".into();
        assert!(
            LlmRouter::from_config(&bad)
                .unwrap_err()
                .contains("missing")
        );

        let mut bad = Config::default();
        bad.llm
            .models
            .insert("x".into(), ModelAlias::new("anthropic", "m"));
        assert!(
            LlmRouter::from_config(&bad)
                .unwrap_err()
                .contains("anthropic")
        );

        let bad = config(ProviderChoice::Openai, "not a url");
        assert!(LlmRouter::from_config(&bad).is_err());
    }

    #[test]
    fn single_routes_its_one_alias() {
        let router = LlmRouter::single(Arc::new(OfflineProvider::new()), "scripted");
        assert_eq!(router.aliases(), ["scripted"]);
        assert_eq!(router.default_alias(), "scripted");
        assert_eq!(route(&router, None), ("offline".into(), "scripted".into()));
        assert_eq!(
            route(&router, Some("scripted")),
            ("offline".into(), "scripted".into())
        );
        assert!(router.resolve(Some("default")).is_err());
    }
}
