//! Configuration: defaults < TOML file (`ORCA_CONFIG`, else `config/default.toml` when present)
//! < environment < command-line flags. Loaded and validated once at start; an invalid value stops
//! the start with a message naming the key.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use crate::domain::replan::{Strategy, TriggerKind};

pub mod selector;
use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

/// A string that must never reach logs, events or responses.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "\"***\"" })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub database: DatabaseConfig,
    pub auth: AuthConfig,
    pub engine: EngineConfig,
    pub llm: LlmConfig,
    pub tools: ToolsConfig,
    pub workflows: WorkflowsConfig,
    /// The agents directory loaded into the agent registry at start.
    pub agents: AgentsConfig,
    pub retention: RetentionConfig,
    /// Sessions: how much earlier conversation a run is given, and when it is summarised.
    pub context: ContextConfig,
    /// How `orchestration: "auto"` is resolved: rules, then the model, then a default.
    pub selector: SelectorConfig,
    /// Named LLM functions, `[functions.NAME]`; the built-in ones (planner, replanner,
    /// selector, summarizer) can be reconfigured under their names.
    pub functions: std::collections::BTreeMap<String, FunctionConfig>,
    /// OpenTelemetry traces; off unless an endpoint is set.
    pub telemetry: TelemetryConfig,
    /// Completion webhooks: the key that signs them, tenants' default URLs, retries.
    pub webhooks: WebhooksConfig,
    /// What each tenant's runs may take: runs in progress, runs per minute, tokens per day.
    pub quotas: QuotasConfig,
    /// Memory beyond one session: size limits per item, namespace and tenant.
    pub memory: MemoryConfig,
}

/// `[memory]`: the limits of memory items (`/v1/memory`, the `memory.*` tools). Past one, a
/// put is refused with 413 `payload_too_large` (a tool call fails with
/// `memory_limit_exceeded`) and nothing is stored. 0 is no limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// Bytes of one item's value, as JSON text.
    pub max_item_bytes: u64,
    /// Items in one namespace (its own, not those below it).
    pub max_namespace_items: u64,
    /// Bytes of all of one tenant's items together.
    pub max_tenant_bytes: u64,
    /// Items a search returns at most (`limit` is capped to it).
    pub max_search_results: u32,
    /// The model alias (`llm.models`) that embeds items and queries, for search by meaning;
    /// empty: search by text only.
    pub embedding_model: String,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            max_item_bytes: 64 * 1024,
            max_namespace_items: 100_000,
            max_tenant_bytes: 1024 * 1024 * 1024,
            max_search_results: 100,
            embedding_model: String::new(),
        }
    }
}

/// `[quotas]`: per-tenant limits, checked when a run is created (429 `quota_exceeded` with
/// `Retry-After` past one). `default` applies to every tenant that `tenants.NAME` does not
/// name; within a quota, 0 is no limit. Nothing is limited by default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotasConfig {
    pub default: crate::domain::quota::Quota,
    pub tenants: std::collections::BTreeMap<String, crate::domain::quota::Quota>,
    /// What each user of any tenant may use, beside the tenant's quota (`[quotas.user]`).
    pub user: crate::domain::quota::UserQuota,
}

impl QuotasConfig {
    /// The quota of `tenant`.
    pub fn of(&self, tenant: &str) -> crate::domain::quota::Quota {
        self.tenants.get(tenant).copied().unwrap_or(self.default)
    }
}

/// `[webhooks]`: what a run's completion webhook is signed with and how it is retried (see
/// `workers::webhooks`). Deliveries connect where HTTP tools may (`tools.http_allow`,
/// `tools.http_allow_private`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhooksConfig {
    /// The HMAC-SHA256 key every delivery is signed with (`ORCA_WEBHOOKS__SECRET`); runs can
    /// name a webhook only when it is set (at least 16 characters).
    pub secret: Secret,
    /// The URL a tenant's runs report to when they name none: tenant = URL.
    pub tenants: std::collections::BTreeMap<String, String>,
    /// Attempts per delivery before it is given up (1-50).
    pub max_attempts: u32,
    /// The wait before the second attempt; it doubles after each one, up to 5 minutes.
    pub backoff_ms: u64,
    /// How long one attempt may take, connecting included.
    pub timeout_ms: u64,
    /// Attempts of one tenant a replica sends at once (1-256); the tenant's other due
    /// deliveries wait for one of them to end, and other tenants' go out meanwhile.
    pub max_in_flight_per_tenant: u32,
    /// Attempts to one destination (`host:port`) a replica sends at once, all tenants
    /// together (1-256).
    pub max_in_flight_per_destination: u32,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        WebhooksConfig {
            secret: Secret::default(),
            tenants: Default::default(),
            max_attempts: 8,
            backoff_ms: 1_000,
            timeout_ms: 10_000,
            max_in_flight_per_tenant: 8,
            max_in_flight_per_destination: 4,
        }
    }
}

/// `[telemetry]`: OTLP traces (see `crate::telemetry`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP collector, e.g. `http://127.0.0.1:4318` (spans go to `/v1/traces` there,
    /// JSON-encoded). Empty: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, then
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, else no traces.
    pub otlp_endpoint: String,
    /// `service.name` of the spans; `OTEL_SERVICE_NAME` wins when set.
    pub service_name: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: String::new(),
            service_name: "orca".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// `host:port`; loopback unless told otherwise.
    pub bind: String,
    pub body_limit_bytes: usize,
    /// Seconds between `: keep-alive` comments on an idle event stream.
    pub keep_alive_secs: u64,
    /// Seconds to let in-flight responses finish after a stop signal; connections still open
    /// then are closed. Below `docker stop`'s 10 s, so the process exits before it is killed.
    pub shutdown_grace_secs: u64,
    /// Seconds a client may take to send a request's headers, counted from the connection's
    /// opening or the end of its previous response: a slow or silent client (or an idle
    /// keep-alive connection) is disconnected after it.
    pub header_read_timeout_secs: u64,
    /// Seconds a client may take to send a whole request body; slower bodies get 408.
    pub body_read_timeout_secs: u64,
    /// Connections served at once. Past it a few more are answered 503 and closed, and the
    /// rest wait in the kernel's accept queue. Lowered at start to fit the open-file limit.
    pub max_connections: usize,
    /// Serve an address other than loopback with no API keys configured. Off by default:
    /// without keys every caller may start runs and read every run, which is only safe where
    /// nobody else can connect.
    pub allow_unauthenticated_public_bind: bool,
    /// Serve the run console at `/` (its files are public; its API calls need a key when keys
    /// are configured).
    pub console: bool,
    pub cors: CorsConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: "127.0.0.1:8080".into(),
            body_limit_bytes: 1024 * 1024,
            keep_alive_secs: 15,
            shutdown_grace_secs: 8,
            header_read_timeout_secs: 10,
            body_read_timeout_secs: 30,
            max_connections: 1024,
            allow_unauthenticated_public_bind: false,
            console: true,
            cors: CorsConfig::default(),
        }
    }
}

/// Which web pages (origins) may call the API from a browser. None by default: browsers then
/// keep other sites' scripts from reading any answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CorsConfig {
    /// Exact origins such as `https://app.example.com` (scheme, host, optional port; no path),
    /// or `["*"]` for any origin.
    pub allowed_origins: Vec<String>,
    /// How long browsers may cache a preflight answer.
    pub max_age_secs: u64,
}

impl Default for CorsConfig {
    fn default() -> Self {
        CorsConfig {
            allowed_origins: Vec::new(),
            max_age_secs: 600,
        }
    }
}

/// Whether `origin` is what browsers send in `Origin`: `scheme://host[:port]`, nothing more.
fn is_origin(origin: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    matches!(scheme, "http" | "https")
        && !rest.is_empty()
        && !rest.contains(['/', '?', '#', '@', ' '])
        && origin.is_ascii()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    pub url: String,
    pub max_connections: u32,
    /// How long a write waits for another process's lock on the database before it fails
    /// (and is tried again; see `docs/operating.md`, "When the store fails").
    pub busy_timeout_ms: u64,
    /// PostgreSQL with several replicas: how long a replica's lease on a run lasts unless
    /// renewed (every third of it). A replica that dies has its runs taken over this long
    /// after its last renewal; one that stops hands them back at once.
    pub lease_ttl_ms: u64,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            url: "sqlite://orca.db".into(),
            max_connections: 8,
            busy_timeout_ms: 5_000,
            lease_ttl_ms: 15_000,
        }
    }
}

/// The database `database.url` names, told by its scheme; the store speaks to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `sqlite:` — one file, one orca process.
    Sqlite,
    /// `postgres://` or `postgresql://` — one database shared by any number of replicas.
    Postgres,
}

impl Backend {
    /// The backend a database URL names; None for any other scheme.
    pub fn of_url(url: &str) -> Option<Backend> {
        if url.starts_with("sqlite:") {
            Some(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(Backend::Postgres)
        } else {
            None
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// When empty, no credentials are needed and every caller is the tenant `default`.
    pub api_keys: Vec<ApiKey>,
    /// Operators' keys: they read `/metrics` with every tenant's series, and nothing else (a
    /// tenant's key reads its own tenant's series only).
    pub operator_keys: Vec<Secret>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    pub key: Secret,
    pub tenant: String,
    /// The user of the tenant this key is bound to: its runs are that user's, and it sees
    /// only that user's runs, sessions and memory (plus the tenant's shared memory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Runs executing at once; the rest wait as `queued`.
    pub max_running_runs: usize,
    /// Runs waiting for a slot; past this, new runs are refused with 503.
    pub max_queued_runs: usize,
    /// What a new run of a session does when the session has a run in progress, unless the
    /// request says (`concurrency`): `parallel`, `reject`, `enqueue` or `interrupt`.
    pub session_concurrency: crate::domain::SessionConcurrency,
    pub max_run_duration_ms: u64,
    pub max_steps: u64,
    pub max_retries: u64,
    pub max_replans: u64,
    /// Total tokens per run; 0 = no limit.
    pub max_tokens: u64,
    /// Model ↔ tool round trips of one LLM step before it gives up.
    pub max_tool_rounds: u32,
    pub tool_timeout_ms: u64,
    /// Live events buffered per subscriber before it is moved to replay from the store.
    pub event_buffer: usize,
    /// Largest value one `{{ }}` template may render to (a step's input, a plan's output), as
    /// JSON bytes: a small plan repeating a large value must not become a huge allocation.
    pub max_rendered_bytes: usize,
    /// Times the planner is sent the problems of an invalid plan and asked again.
    pub max_plan_repairs: u32,
    /// What a `planner` run does when no valid plan came.
    pub planning_fallback: PlanningFallback,
    /// The strategies a reactive run's re-planner may use, per trigger.
    pub replan_policy: ReplanPolicy,
    /// A reactive run re-plans once when its token (or step) use reaches this share of its
    /// limit.
    pub limit_near_ratio: f64,
    /// The same tool call (tool and canonical arguments) giving the same result this many
    /// times in what a model chose ends the run with `loop_detected`.
    pub loop_repeats: u32,
}

/// The strategies allowed per re-plan trigger (`engine.replan_policy.TRIGGER`). An empty list
/// means that trigger does not re-plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplanPolicy {
    pub step_failed: Vec<Strategy>,
    pub unexpected_result: Vec<Strategy>,
    pub step_timeout: Vec<Strategy>,
    pub user: Vec<Strategy>,
    pub limit_near: Vec<Strategy>,
}

impl Default for ReplanPolicy {
    fn default() -> Self {
        use Strategy::*;
        ReplanPolicy {
            step_failed: vec![Retry, Alternative, Partial, Complete, Restore],
            unexpected_result: vec![Alternative, Partial, Complete, Restore],
            step_timeout: vec![Retry, Alternative, Partial, Complete],
            user: vec![Partial, Complete, Alternative, Restore],
            limit_near: vec![Partial, Complete],
        }
    }
}

impl ReplanPolicy {
    pub fn allowed(&self, trigger: TriggerKind) -> &[Strategy] {
        match trigger {
            TriggerKind::StepFailed => &self.step_failed,
            TriggerKind::UnexpectedResult => &self.unexpected_result,
            TriggerKind::StepTimeout => &self.step_timeout,
            TriggerKind::User => &self.user,
            TriggerKind::LimitNear => &self.limit_near,
        }
    }
}

/// What a `planner` run does when planning gave no valid plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanningFallback {
    /// Answer the task as a `simple` run (after an `error` event with code `planning_failed`).
    Simple,
    /// End the run failed, with code `planning_failed` listing the problems.
    Fail,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_running_runs: 64,
            max_queued_runs: 1024,
            session_concurrency: Default::default(),
            max_run_duration_ms: 600_000,
            max_steps: 200,
            max_retries: 20,
            max_replans: 3,
            max_tokens: 0,
            max_tool_rounds: 8,
            tool_timeout_ms: 30_000,
            event_buffer: 1024,
            max_rendered_bytes: 8 * 1024 * 1024,
            max_plan_repairs: 2,
            planning_fallback: PlanningFallback::Simple,
            replan_policy: ReplanPolicy::default(),
            limit_near_ratio: 0.8,
            loop_repeats: 3,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderChoice {
    /// OpenAI-compatible when `OPENAI_BASE_URL` or `OPENAI_API_KEY` is set, offline otherwise.
    Auto,
    Openai,
    Offline,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    pub provider: ProviderChoice,
    /// The alias used when a run names no model.
    pub default_model: String,
    /// The provider named `openai`: the endpoint `OPENAI_BASE_URL`/`OPENAI_API_KEY` set.
    pub openai: OpenAiConfig,
    /// More providers by name (`[llm.providers.NAME]`), each its own endpoint and key.
    /// `openai` (above) and `offline` are always there and cannot be redefined.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Model aliases callers may name, each mapped to a provider and its model name.
    pub models: BTreeMap<String, ModelAlias>,
    /// Pause between the offline provider's streamed pieces, so demos look like a real model
    /// streaming; 0 for benchmarks.
    pub offline_token_delay_ms: u64,
    /// How tokens are counted where a budget is checked before a call: `estimate` (no memory)
    /// or `o200k_base` (exact for GPT-4o-class models, ~40 MB once used).
    pub tokenizer: Tokenizer,
}

/// How tokens are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tokenizer {
    /// A cheap estimate, no memory.
    #[default]
    Estimate,
    /// OpenAI's `o200k_base` encoding (~40 MB, built on first use).
    O200kBase,
}

impl Default for LlmConfig {
    fn default() -> Self {
        let mut models = BTreeMap::new();
        models.insert(
            "default".to_owned(),
            ModelAlias::new("openai", "gpt-4o-mini"),
        );
        models.insert("offline".to_owned(), ModelAlias::new("offline", "offline"));
        LlmConfig {
            provider: ProviderChoice::Auto,
            default_model: "default".into(),
            openai: OpenAiConfig::default(),
            providers: BTreeMap::new(),
            models,
            offline_token_delay_ms: 5,
            tokenizer: Tokenizer::Estimate,
        }
    }
}

/// One alias of `[llm.models.ALIAS]`: where it goes and how every call through it is made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelAlias {
    /// `openai`, `offline` or a name of `[llm.providers]`.
    pub provider: String,
    /// The provider's own model name.
    pub model: String,
    /// Sampling temperature sent with every call (0 to 2); the server's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Most tokens one answer may have; the server's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Deadline of one whole call (retries and streaming included); none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// What the model can do, where it differs from its provider kind's defaults.
    #[serde(default, skip_serializing_if = "ModelCapabilities::is_empty")]
    pub capabilities: ModelCapabilities,
    /// Another alias tried when this one fails unavailable (429, 5xx, timeout, unreachable)
    /// after its own retries, before any text streamed. Never on a rejection (4xx) or a
    /// cancellation. Chains are allowed; cycles are refused at start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

impl ModelAlias {
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        ModelAlias {
            provider: provider.into(),
            model: model.into(),
            temperature: None,
            max_tokens: None,
            timeout_ms: None,
            fallback: None,
            capabilities: ModelCapabilities::default(),
        }
    }
}

/// `[llm.models.ALIAS.capabilities]`: what one model can do. Each unset field takes the
/// provider's setting, else the default of the provider's kind (see
/// [`crate::llm::Capabilities::for_kind`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelCapabilities {
    /// How structured answers are asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<StructuredOutput>,
    /// Whether the model may ask for several tool calls in one answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// The model's context window in tokens: prompts estimated above it fail before the call
    /// (`llm_rejected`), and Ollama is asked for a window this large (`num_ctx`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u32>,
    /// Whether the server reports token usage at the end of a stream when asked
    /// (`stream_options.include_usage`); servers that refuse the option need `false`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_usage: Option<bool>,
}

impl ModelCapabilities {
    pub fn is_empty(&self) -> bool {
        *self == ModelCapabilities::default()
    }
}

/// What kind of provider a `[llm.providers.NAME]` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// An OpenAI-compatible endpoint (`/chat/completions`).
    Openai,
    /// Anthropic's Messages API (`/v1/messages`).
    Anthropic,
    /// Ollama's own API (`/api/chat`), for `num_ctx` and the full schema as `format`.
    Ollama,
    /// The built-in offline provider.
    Offline,
}

impl ProviderKind {
    /// The structured-output mode a provider of this kind is asked in unless configured:
    /// `strict` for OpenAI-compatible endpoints, `json_schema` for the others.
    pub fn default_structured_output(self) -> StructuredOutput {
        match self {
            ProviderKind::Openai => StructuredOutput::Strict,
            _ => StructuredOutput::JsonSchema,
        }
    }
}

/// A named provider, `[llm.providers.NAME]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub kind: ProviderKind,
    /// Where the provider answers: for kind `openai` the base of `/chat/completions`
    /// (`https://api.openai.com/v1`, `http://127.0.0.1:8000/v1`); for `anthropic` the root
    /// (`https://api.anthropic.com`); for `ollama` the root (`http://127.0.0.1:11434`).
    #[serde(default)]
    pub base_url: String,
    /// The NAME of the environment variable holding the key: keys never sit in config files.
    /// Empty: no key is sent (local servers).
    #[serde(default)]
    pub api_key_env: String,
    /// The key itself, read from `api_key_env` when the configuration is loaded; never
    /// serialised.
    #[serde(skip)]
    pub api_key: Secret,
    #[serde(default = "defaults::connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Longest silence allowed between two chunks of a streamed answer.
    #[serde(default = "defaults::read_timeout_ms")]
    pub read_timeout_ms: u64,
    /// Retries of a request that failed with 429, 5xx or a connect error before any byte.
    #[serde(default = "defaults::max_retries")]
    pub max_retries: u32,
    #[serde(default = "defaults::retry_initial_delay_ms")]
    pub retry_initial_delay_ms: u64,
    #[serde(default = "defaults::retry_max_delay_ms")]
    pub retry_max_delay_ms: u64,
    /// How this provider's models are asked for structured answers; the kind's default
    /// (`strict` for `openai`, `json_schema` otherwise) when absent. A model's
    /// `capabilities.structured_output` wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<StructuredOutput>,
}

mod defaults {
    pub fn connect_timeout_ms() -> u64 {
        5_000
    }
    pub fn read_timeout_ms() -> u64 {
        60_000
    }
    pub fn max_retries() -> u32 {
        3
    }
    pub fn retry_initial_delay_ms() -> u64 {
        500
    }
    pub fn retry_max_delay_ms() -> u64 {
        8_000
    }
}

impl ProviderConfig {
    /// An OpenAI-compatible provider at `base_url` with the default timeouts and retries.
    pub fn openai(base_url: impl Into<String>) -> Self {
        ProviderConfig {
            kind: ProviderKind::Openai,
            base_url: base_url.into(),
            api_key_env: String::new(),
            api_key: Secret::default(),
            connect_timeout_ms: defaults::connect_timeout_ms(),
            read_timeout_ms: defaults::read_timeout_ms(),
            max_retries: defaults::max_retries(),
            retry_initial_delay_ms: defaults::retry_initial_delay_ms(),
            retry_max_delay_ms: defaults::retry_max_delay_ms(),
            structured_output: None,
        }
    }

    /// The same settings in the shape the OpenAI-compatible client takes.
    pub fn as_openai(&self) -> OpenAiConfig {
        OpenAiConfig {
            base_url: self.base_url.clone(),
            api_key: self.api_key.clone(),
            connect_timeout_ms: self.connect_timeout_ms,
            read_timeout_ms: self.read_timeout_ms,
            max_retries: self.max_retries,
            retry_initial_delay_ms: self.retry_initial_delay_ms,
            retry_max_delay_ms: self.retry_max_delay_ms,
            structured_output: self
                .structured_output
                .unwrap_or(self.kind.default_structured_output()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiConfig {
    /// e.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`; empty = not configured.
    pub base_url: String,
    pub api_key: Secret,
    pub connect_timeout_ms: u64,
    /// Longest silence allowed between two chunks of a streamed answer.
    pub read_timeout_ms: u64,
    /// Retries of a request that failed with 429, 5xx or a connect error before any byte.
    pub max_retries: u32,
    pub retry_initial_delay_ms: u64,
    pub retry_max_delay_ms: u64,
    /// How structured output (plans, the selector's answer, `output_schema`) is asked for.
    pub structured_output: StructuredOutput,
}

/// How a model is asked for JSON that follows a schema, strongest first. orca checks every
/// answer against the full schema itself (and asks for a repair where the caller allows),
/// whichever is used; a provider that refuses a mode with a 400 is asked again once in the
/// next weaker one, and that choice is remembered per provider and model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutput {
    /// OpenAI's Structured Outputs: the schema projected to the strict subset
    /// (`crate::llm::schema`), `strict: true` when the projection is faithful. For kinds
    /// other than `openai`, the same as `json_schema`.
    #[default]
    Strict,
    /// The schema as written, as a hint the server may enforce: `response_format` json_schema
    /// with `strict: false` (vLLM, llama.cpp, LiteLLM, Ollama's compatible API), a forced tool
    /// (Anthropic), `format` (Ollama).
    JsonSchema,
    /// `response_format: {"type": "json_object"}`, the schema in the system prompt (servers
    /// with JSON mode but no schemas).
    JsonObject,
    /// No `response_format`; the schema in the system prompt (servers with neither).
    Prompt,
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        OpenAiConfig {
            base_url: String::new(),
            api_key: Secret::default(),
            connect_timeout_ms: 5_000,
            read_timeout_ms: 60_000,
            max_retries: 3,
            retry_initial_delay_ms: 500,
            retry_max_delay_ms: 8_000,
            structured_output: StructuredOutput::Strict,
        }
    }
}

impl OpenAiConfig {
    pub fn is_configured(&self) -> bool {
        !self.base_url.is_empty() || !self.api_key.is_empty()
    }

    /// The base URL to call: the configured one, or OpenAI's when only a key is set.
    pub fn effective_base_url(&self) -> &str {
        if self.base_url.is_empty() {
            "https://api.openai.com/v1"
        } else {
            self.base_url.trim_end_matches('/')
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// The only directory file tools may touch.
    pub workspace_dir: PathBuf,
    pub fs_read_max_bytes: u64,
    /// MCP servers whose tools join the registry at start, `[[tools.mcp]]`.
    pub mcp: Vec<McpServerConfig>,
    /// HTTP tools declared as data, `[[tools.http]]` (see `schemas/HttpTool.schema.json`).
    pub http: Vec<crate::domain::HttpToolSpec>,
    /// Tools the tenants' workers serve, `[[tools.worker]]` (`schemas/WorkerTool.schema.json`):
    /// every tenant may call them, and each tenant's workers serve its own calls.
    pub worker: Vec<crate::domain::WorkerToolSpec>,
    /// The most worker long polls (`POST /v1/workers/poll`) one tenant may hold open on one
    /// server; past it a poll is 429 with `Retry-After`, so one tenant's workers cannot take
    /// every connection.
    pub worker_max_polls_per_tenant: usize,
    /// Destinations HTTP tools may reach although they are not public addresses: `host`,
    /// `host:port`, `10.0.0.0/8`. Everything else private, loopback, link-local (cloud
    /// metadata) or reserved is refused.
    pub http_allow: Vec<String>,
    /// Let HTTP tools reach any address (for a trusted network only).
    pub http_allow_private: bool,
    /// Let API callers declare HTTP tools (`PUT /v1/tools/{name}`). Off by default. A
    /// declared tool belongs to the declaring tenant: no other tenant lists or calls it.
    pub http_api: bool,
    /// The environment variables the headers of API-declared tools may read as `${NAME}`;
    /// none by default. Config-declared tools (`[[tools.http]]`) may read any.
    pub http_api_env: Vec<String>,
}

/// One entry of `tools.http_allow`, parsed: a host name (any port, or one), an IP literal
/// with a port, or a network in CIDR notation. Only the entry's syntax is the configuration's;
/// where HTTP tools may connect is `tools::http::guard`'s business.
#[derive(Debug, Clone, PartialEq)]
pub enum HttpAllowed {
    Host(String, Option<u16>),
    Net(IpAddr, u8),
}

impl HttpAllowed {
    /// Parses one entry: `host`, `host:port`, `[v6]:port`, `10.0.0.0/8`, `fd00::/8`.
    pub fn parse(text: &str) -> Result<HttpAllowed, String> {
        let t = text.trim().to_ascii_lowercase();
        if let Some((net, bits)) = t.split_once('/') {
            let net: IpAddr = net
                .parse()
                .map_err(|_| format!("`{text}`: not a network"))?;
            let max = if net.is_ipv4() { 32 } else { 128 };
            let bits: u8 = bits
                .parse()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(|| format!("`{text}`: bad prefix length"))?;
            return Ok(HttpAllowed::Net(net, bits));
        }
        if let Ok(ip) = t.parse::<IpAddr>() {
            return Ok(HttpAllowed::Host(ip.to_string(), None));
        }
        if let Ok(sock) = t.parse::<SocketAddr>() {
            return Ok(HttpAllowed::Host(sock.ip().to_string(), Some(sock.port())));
        }
        let (host, port) = match t.rsplit_once(':') {
            Some((h, p)) => (
                h,
                Some(
                    p.parse::<u16>()
                        .map_err(|_| format!("`{text}`: bad port"))?,
                ),
            ),
            None => (t.as_str(), None),
        };
        let valid = !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
        if !valid {
            return Err(format!("`{text}`: not a host, host:port or network"));
        }
        Ok(HttpAllowed::Host(
            host.trim_end_matches('.').to_owned(),
            port,
        ))
    }
}

/// One MCP server, `[[tools.mcp]]`: a child process spoken to over stdio (`command`) or a
/// streamable-HTTP endpoint (`url`). Its tools are registered as `<name>.<tool>`.
/// `${VAR}` in `args`, `env` values, `url` and `headers` values is replaced by the environment
/// variable when the server is connected, so secrets stay out of the file (and out of logs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerConfig {
    /// The prefix of its tools: lowercase letters, digits and `_`, starting with a letter.
    pub name: String,
    /// The program to start (stdio transport); exclusive with `url`.
    pub command: String,
    pub args: Vec<String>,
    /// Extra environment of the child process (it also inherits orca's).
    pub env: std::collections::BTreeMap<String, String>,
    /// The streamable-HTTP endpoint, e.g. `http://127.0.0.1:8000/mcp`; exclusive with `command`.
    pub url: String,
    /// Headers sent with every HTTP request, e.g. `Authorization = "Bearer ${TOKEN}"`.
    pub headers: std::collections::BTreeMap<String, String>,
    /// Longest wait for the server to start and list its tools, and for one tool call.
    pub timeout_ms: u64,
    /// Only these tools (the server's names); empty = every tool the server lists.
    pub tools: Vec<String>,
    /// A server that fails to start or list its tools is logged and skipped instead of
    /// stopping orca's start.
    pub optional: bool,
}

impl Default for McpServerConfig {
    fn default() -> Self {
        McpServerConfig {
            name: String::new(),
            command: String::new(),
            args: Vec::new(),
            env: Default::default(),
            url: String::new(),
            headers: Default::default(),
            timeout_ms: 30_000,
            tools: Vec::new(),
            optional: false,
        }
    }
}

/// A problem with one key's value, found by [`Config::validate`] (where the value came from
/// is added by `load`).
fn invalid(key: impl Into<Cow<'static, str>>, message: &str) -> Error {
    Error::Invalid {
        key: key.into(),
        message: message.to_owned(),
        set_by: None,
    }
}

/// `NAME`: a letter or `_`, then letters, digits and `_`.
fn is_env_name(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            workspace_dir: PathBuf::from("./workspace"),
            fs_read_max_bytes: 1024 * 1024,
            mcp: Vec::new(),
            http: Vec::new(),
            worker: Vec::new(),
            worker_max_polls_per_tenant: 64,
            http_allow: Vec::new(),
            http_allow_private: false,
            http_api: false,
            http_api_env: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct AgentsConfig {
    /// Directory of agent files (`*.json`, `schemas/Agent.schema.json`) loaded into the
    /// registry at start, validated together; empty = none.
    pub dir: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct WorkflowsConfig {
    /// Directory of workflow files loaded into the registry at start; empty = none.
    pub dir: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// Finished runs are deleted with everything they own this many days after they
    /// finished; 0 keeps them forever.
    pub finished_run_days: u32,
    /// Seconds between sweeps; the first runs at start.
    pub sweep_interval_secs: u64,
    /// Runs deleted per transaction: small, so the write lock is never held long enough to
    /// stall running runs' event writes.
    pub batch_runs: u32,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            finished_run_days: 30,
            sweep_interval_secs: 3600,
            batch_runs: 100,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContextConfig {
    /// Tokens (counted with the o200k_base tokenizer) a session's earlier turns, with their
    /// summary, may take in a run's prompt. Past it the older turns are summarised by the
    /// `summarizer` function and the summary is stored and reused. 0 = no budget.
    pub session_token_budget: u32,
    /// The most earlier turns (after the stored summary) a run loads.
    pub session_max_turns: u32,
    /// Which earlier turns a run's prompt holds: the newest (`recent`, with the older ones
    /// summarised) or the most relevant to its input (`relevant`, found by the memory
    /// store's search), within `session_token_budget`.
    pub session_history: SessionHistory,
    /// Bytes (as JSON text) one session variable's value may take. 0 = no limit.
    pub session_max_variable_bytes: u64,
    /// Variables one session may hold. 0 = no limit.
    pub session_max_variables: u64,
    /// Bytes (as JSON text) all of one session's variables may take. 0 = no limit.
    pub session_max_total_bytes: u64,
}

/// Which of a session's earlier turns a run's prompt holds (`[context] session_history`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionHistory {
    /// The newest turns within the budget, the older ones folded into a stored summary.
    Recent,
    /// The newest turn, then the turns most relevant to the run's input (by meaning with an
    /// embedding model, else by text), then the newer of the rest, while they fit the
    /// budget; shown in their order. Nothing is summarised.
    Relevant,
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            session_token_budget: 4000,
            session_max_turns: 50,
            session_history: SessionHistory::Recent,
            session_max_variable_bytes: 256 * 1024,
            session_max_variables: 256,
            session_max_total_bytes: 4 * 1024 * 1024,
        }
    }
}

/// The auto selector (`[selector]`): what runs a request that asks for `orchestration: "auto"`
/// (the default). A `plan` or `workflow` in the request runs as `fixed`; otherwise the first of
/// `rules` that matches the input decides; otherwise, with `use_llm`, the `selector` function
/// asks the model; otherwise, or when the model fails or answers out of bounds, `default`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SelectorConfig {
    /// `simple`, `planner` or `reactive`: the orchestration when no rule decides and the model
    /// is not asked (`use_llm = false`), fails, or answers something that cannot run.
    pub default: String,
    /// Ask the model (the `selector` function, structured output) when no rule decides.
    pub use_llm: bool,
    /// Checked in order; the first that matches the run's input text decides.
    pub rules: Vec<SelectorRuleConfig>,
}

impl Default for SelectorConfig {
    fn default() -> Self {
        SelectorConfig {
            default: "simple".into(),
            use_llm: true,
            rules: Vec::new(),
        }
    }
}

/// One `[[selector.rules]]` entry: a matcher (`pattern` or `keywords`) and a target
/// (`orchestration` or `workflow`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectorRuleConfig {
    /// Shown in the run's `selected.rule`.
    pub name: String,
    /// A regular expression (Rust `regex` syntax) searched in the input text; `(?i)` for
    /// case-insensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Matches when any of them occurs in the input text, case-insensitively, at the start of
    /// a word.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keywords: Vec<String>,
    /// `simple`, `planner` or `reactive`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orchestration: Option<String>,
    /// A registered workflow (the caller's own or a shared one) to run as `fixed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
}

/// One function as configured: `[functions.NAME]`. For a built-in, every member is optional and
/// replaces the built-in's; a new function needs a `prompt`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FunctionConfig {
    pub description: Option<String>,
    /// The system message.
    pub system: Option<String>,
    /// The user message: a template over `input` (the call's arguments).
    pub prompt: Option<String>,
    /// A configured model alias; the run's model when absent.
    pub model: Option<String>,
    /// When present, the answer must be JSON valid against it.
    pub output_schema: Option<serde_json::Value>,
}

/// Values given on the command line; each overrides everything else.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub config_file: Option<PathBuf>,
    pub bind: Option<String>,
    pub database_url: Option<String>,
    /// `--allow-unauthenticated-public-bind`: sets `server.allow_unauthenticated_public_bind`.
    pub allow_unauthenticated_public_bind: bool,
}

/// Every message names what the user wrote: the environment variable or flag that set the
/// value, or the key and the TOML file it is in; never a place in orca's source.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A value that does not fit its key (wrong type, unknown key), as `origin: message`.
    #[error("configuration: {}", .0.join("; "))]
    Load(Vec<String>),
    /// A value that fits its type but not the rules of [`Config::validate`]. `set_by` names
    /// the variable, flag or file when loading knew it.
    #[error("configuration: {}: {message}", match set_by {
        Some(origin) if origin.starts_with(&**key) => origin.clone(),
        Some(origin) => format!("{origin} ({key})"),
        None => format!("`{key}`"),
    })]
    Invalid {
        key: Cow<'static, str>,
        message: String,
        set_by: Option<String>,
    },
    #[error("configuration: file {0} does not exist")]
    MissingFile(PathBuf),
}

/// Where the values of a load came from, to name them in errors: the variables and flags that
/// set a key (in merge order, so the last one is the value in force), and the figment for what
/// files set.
struct Origins<'a> {
    set: Vec<(String, String)>,
    figment: &'a Figment,
}

impl Origins<'_> {
    /// The variable or flag that set `key` (or a table holding it, or a key inside it), else
    /// `key in FILE` for a value read from a file, else the key itself.
    fn of(&self, key: &str) -> String {
        let related = |set: &str| {
            set == key || key.starts_with(&format!("{set}.")) || set.starts_with(&format!("{key}."))
        };
        if let Some((_, name)) = self.set.iter().rev().find(|(k, _)| related(k)) {
            return name.clone();
        }
        let file = self
            .figment
            .find_metadata(key)
            .and_then(|m| m.source.as_ref())
            .and_then(|s| s.file_path());
        match file {
            Some(path) => format!("{key} in {}", path.display()),
            None => key.to_owned(),
        }
    }

    fn describe(&self, e: &figment::Error) -> String {
        use figment::error::Kind;
        let key = e.path.join(".");
        let message = match &e.kind {
            Kind::InvalidType(actual, expected) => {
                format!("expected {}, found {actual}", plain_type(expected))
            }
            Kind::InvalidValue(actual, expected) => {
                format!("expected {}, found {actual}", plain_type(expected))
            }
            Kind::UnknownField(field, known) => format!(
                "unknown key `{field}`{}; known keys: {}",
                did_you_mean(field, known),
                known.join(", ")
            ),
            Kind::UnknownVariant(value, known) => format!(
                "unknown value `{value}`{}; expected one of {}",
                did_you_mean(value, known),
                known.join(", ")
            ),
            other => other.to_string(),
        };
        if !key.is_empty() {
            return format!("{}: {message}", self.of(&key));
        }
        // Not about one key: a file that is not TOML (the parser's message says the line and
        // column; the file is said here, since several may be read).
        let file = e.metadata.as_ref().and_then(|m| m.source.as_ref());
        match file.and_then(|s| s.file_path()) {
            Some(path) => format!("{}: {}", path.display(), without_snippet(&message)),
            None => message,
        }
    }
}

/// The TOML parser's message on one line: what it found and expected, without the quoted
/// source lines and caret under them (`3 | port =`, `  |    ^`); the line number is in its
/// first line.
fn without_snippet(message: &str) -> String {
    let quoted = |line: &&str| {
        let t = line.trim_start();
        t.starts_with('|')
            || t.split_once(" |")
                .is_some_and(|(n, _)| n.parse::<u32>().is_ok())
    };
    let lines: Vec<&str> = message
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| !quoted(l))
        .collect();
    match lines.split_first() {
        Some((first, rest)) if !rest.is_empty() => format!("{first}: {}", rest.join("; ")),
        _ => lines.concat(),
    }
}

/// ` (did you mean `NAME`?)` for the known name nearest to `wrong`, else nothing.
fn did_you_mean(wrong: &str, known: &[&str]) -> String {
    crate::suggest::nearest(wrong, known.iter().copied())
        .map_or_else(String::new, |near| format!(" (did you mean `{near}`?)"))
}

/// Serde's names of Rust types as a user reads them (`usize` is "a non-negative integer").
fn plain_type(expected: &str) -> String {
    match expected {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a non-negative integer".into(),
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "an integer".into(),
        "f32" | "f64" => "a number".into(),
        "a sequence" => "an array".into(),
        "a map" => "a table".into(),
        other if other.starts_with("struct ") => "a table".into(),
        other => other.to_owned(),
    }
}

impl Config {
    /// Loads the layered configuration from the process environment.
    pub fn load(overrides: &Overrides) -> Result<Config, Error> {
        let vars: Vec<(String, String)> = std::env::vars().collect();
        Self::load_from(overrides, &vars)
    }

    /// Loads the layered configuration with an explicit environment (tests pass their own).
    pub fn load_from(overrides: &Overrides, env: &[(String, String)]) -> Result<Config, Error> {
        let var = |name: &str| {
            env.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty())
        };
        let mut fig = Figment::from(Serialized::defaults(Config::default()));

        let file = overrides
            .config_file
            .clone()
            .or_else(|| var("ORCA_CONFIG").map(PathBuf::from));
        match file {
            Some(path) if !path.exists() => return Err(Error::MissingFile(path)),
            Some(path) => fig = fig.merge(Toml::file_exact(path)),
            None => {
                let default = Path::new("config/default.toml");
                if default.exists() {
                    fig = fig.merge(Toml::file_exact(default));
                }
            }
        }

        // Which variable or flag set which key, to name it in errors.
        let mut set: Vec<(String, String)> = Vec::new();
        // Nested keys: ORCA_ENGINE__MAX_RUNNING_RUNS=8 sets engine.max_running_runs. Values
        // are parsed like figment's Env provider does (numbers, booleans, arrays, strings).
        for (name, value) in env {
            if let Some(rest) = name.strip_prefix("ORCA_")
                && rest.contains("__")
            {
                let key = rest.to_ascii_lowercase().replace("__", ".");
                let value: figment::value::Value = value.parse().expect("parsing is infallible");
                fig = fig.merge(Serialized::default(&key, value));
                set.push((key, name.clone()));
            }
        }
        for (name, key) in [
            ("DATABASE_URL", "database.url"),
            ("ORCA_BIND", "server.bind"),
            ("OPENAI_BASE_URL", "llm.openai.base_url"),
            ("OPENAI_API_KEY", "llm.openai.api_key"),
        ] {
            if let Some(v) = var(name) {
                fig = fig.merge(Serialized::default(key, v));
                set.push((key.to_owned(), name.to_owned()));
            }
        }
        if let Some(v) = &overrides.bind {
            fig = fig.merge(Serialized::default("server.bind", v));
            set.push(("server.bind".into(), "--bind".into()));
        }
        if let Some(v) = &overrides.database_url {
            fig = fig.merge(Serialized::default("database.url", v));
            set.push(("database.url".into(), "--database-url".into()));
        }
        if overrides.allow_unauthenticated_public_bind {
            let key = "server.allow_unauthenticated_public_bind";
            fig = fig.merge(Serialized::default(key, true));
            set.push((key.into(), "--allow-unauthenticated-public-bind".into()));
        }

        let origins = Origins { set, figment: &fig };
        let mut config: Config = fig
            .extract()
            .map_err(|e| Error::Load(e.into_iter().map(|e| origins.describe(&e)).collect()))?;
        // Provider keys come from the variables the providers name, and only from there.
        for provider in config.llm.providers.values_mut() {
            if !provider.api_key_env.is_empty()
                && let Some(key) = var(&provider.api_key_env)
            {
                provider.api_key = Secret::new(key);
            }
        }
        config.validate().map_err(|e| match e {
            Error::Invalid { key, message, .. } => Error::Invalid {
                set_by: Some(origins.of(&key)).filter(|o| *o != key),
                key,
                message,
            },
            other => other,
        })?;
        Ok(config)
    }

    /// Checks what serde cannot: ranges, addresses, references between keys. Section by
    /// section, in a fixed order: the first problem found is the one reported.
    pub fn validate(&self) -> Result<(), Error> {
        self.validate_tools()?;
        self.validate_server()?;
        self.validate_database()?;
        self.validate_run_limits()?;
        self.validate_auth()?;
        self.validate_quotas()?;
        self.validate_memory()?;
        self.validate_webhooks()?;
        self.validate_llm()?;
        self.validate_selector()
    }

    /// `[tools]`: the HTTP allow list, the variables declared tools may read, `[[tools.http]]`.
    fn validate_tools(&self) -> Result<(), Error> {
        for allowed in &self.tools.http_allow {
            HttpAllowed::parse(allowed).map_err(|m| invalid("tools.http_allow", &m))?;
        }
        if let Some(bad) = self.tools.http_api_env.iter().find(|n| !is_env_name(n)) {
            return Err(invalid(
                "tools.http_api_env",
                &format!("`{bad}` is not an environment variable name (letters, digits, `_`)"),
            ));
        }
        if self.tools.worker_max_polls_per_tenant == 0 {
            return Err(invalid(
                "tools.worker_max_polls_per_tenant",
                "must be at least 1",
            ));
        }
        let http = (self.tools.http.iter()).map(|s| ("http", s.problems()));
        let worker = (self.tools.worker.iter()).map(|s| ("worker", s.problems()));
        let mut counts = std::collections::HashMap::new();
        for (kind, problems) in http.chain(worker) {
            let i = counts.entry(kind).or_insert(0usize);
            if let Some((pointer, message)) = problems.into_iter().next() {
                return Err(Error::Invalid {
                    key: format!("tools.{kind}[{i}]{}", pointer.replace('/', ".")).into(),
                    message,
                    set_by: None,
                });
            }
            *i += 1;
        }
        Ok(())
    }

    /// `[server]`: the address (never public without API keys unless opted in), CORS origins,
    /// and the limits on bodies, connections and their times.
    fn validate_server(&self) -> Result<(), Error> {
        let Ok(addr) = self.server.bind.parse::<SocketAddr>() else {
            return Err(Error::Invalid {
                key: "server.bind".into(),
                message: format!("`{}` is not a host:port address", self.server.bind),
                set_by: None,
            });
        };
        if !addr.ip().to_canonical().is_loopback()
            && self.auth.api_keys.is_empty()
            && !self.server.allow_unauthenticated_public_bind
        {
            return Err(Error::Invalid {
                key: "server.bind".into(),
                message: format!(
                    "`{}` is not a loopback address and no API keys are configured, so anyone \
                     who can reach it could start runs and read every run; configure \
                     auth.api_keys, bind 127.0.0.1, or opt in with \
                     server.allow_unauthenticated_public_bind = true \
                     (ORCA_SERVER__ALLOW_UNAUTHENTICATED_PUBLIC_BIND=true, \
                     --allow-unauthenticated-public-bind)",
                    self.server.bind
                ),
                set_by: None,
            });
        }
        let origins = &self.server.cors.allowed_origins;
        let any = origins.iter().any(|o| o == "*");
        if any && origins.len() > 1 {
            return Err(invalid(
                "server.cors.allowed_origins",
                "`*` allows every origin and cannot be combined with others",
            ));
        }
        if let Some(bad) = origins.iter().find(|o| !any && !is_origin(o)) {
            return Err(Error::Invalid {
                key: "server.cors.allowed_origins".into(),
                message: format!(
                    "`{bad}` is not an origin; write scheme://host[:port], e.g. \
                     https://app.example.com, with no path or trailing slash"
                ),
                set_by: None,
            });
        }
        if self.server.body_limit_bytes < 1024 {
            return Err(invalid("server.body_limit_bytes", "must be at least 1024"));
        }
        if self.server.keep_alive_secs == 0 {
            return Err(invalid("server.keep_alive_secs", "must be at least 1"));
        }
        if self.server.header_read_timeout_secs == 0 {
            return Err(invalid(
                "server.header_read_timeout_secs",
                "must be at least 1",
            ));
        }
        if self.server.body_read_timeout_secs == 0 {
            return Err(invalid(
                "server.body_read_timeout_secs",
                "must be at least 1",
            ));
        }
        if self.server.max_connections == 0 {
            return Err(invalid("server.max_connections", "must be at least 1"));
        }
        Ok(())
    }

    /// `[database]`: a URL orca speaks, its pool and lease time.
    fn validate_database(&self) -> Result<(), Error> {
        if Backend::of_url(&self.database.url).is_none() {
            return Err(invalid(
                "database.url",
                "must be a sqlite: or postgres:// URL (e.g. sqlite://orca.db)",
            ));
        }
        if self.database.max_connections == 0 {
            return Err(invalid("database.max_connections", "must be at least 1"));
        }
        if self.database.lease_ttl_ms < 300 {
            return Err(invalid("database.lease_ttl_ms", "must be at least 300"));
        }
        Ok(())
    }

    /// `[engine]`, `[retention]` and `[context]`: the numbers that bound runs, sweeps and
    /// sessions.
    fn validate_run_limits(&self) -> Result<(), Error> {
        if self.engine.max_running_runs == 0 {
            return Err(invalid("engine.max_running_runs", "must be at least 1"));
        }
        if self.engine.max_run_duration_ms == 0 {
            return Err(invalid("engine.max_run_duration_ms", "must be at least 1"));
        }
        if self.engine.max_tool_rounds == 0 {
            return Err(invalid("engine.max_tool_rounds", "must be at least 1"));
        }
        let ratio = self.engine.limit_near_ratio;
        if !(ratio > 0.0 && ratio <= 1.0) {
            return Err(invalid(
                "engine.limit_near_ratio",
                "must be above 0 and at most 1",
            ));
        }
        if self.engine.loop_repeats < 2 {
            return Err(invalid("engine.loop_repeats", "must be at least 2"));
        }
        if self.engine.event_buffer < 16 {
            return Err(invalid("engine.event_buffer", "must be at least 16"));
        }
        if self.retention.sweep_interval_secs == 0 {
            return Err(invalid(
                "retention.sweep_interval_secs",
                "must be at least 1",
            ));
        }
        if !(1..=1000).contains(&self.retention.batch_runs) {
            return Err(invalid("retention.batch_runs", "must be from 1 to 1000"));
        }
        if !(1..=1000).contains(&self.context.session_max_turns) {
            return Err(invalid(
                "context.session_max_turns",
                "must be from 1 to 1000",
            ));
        }
        Ok(())
    }

    /// `[memory]`: a search returns 1-1000 items.
    fn validate_memory(&self) -> Result<(), Error> {
        if !(1..=1000).contains(&self.memory.max_search_results) {
            return Err(invalid(
                "memory.max_search_results",
                "must be from 1 to 1000",
            ));
        }
        Ok(())
    }

    /// `[auth]`: every API key long enough and with a tenant.
    fn validate_auth(&self) -> Result<(), Error> {
        for k in &self.auth.api_keys {
            if k.key.expose().len() < 16 {
                return Err(invalid(
                    "auth.api_keys",
                    "every key must be at least 16 characters",
                ));
            }
            if k.tenant.is_empty() {
                return Err(invalid("auth.api_keys", "every key needs a tenant"));
            }
            if let Some(user) = &k.user
                && let Err(problem) = crate::domain::memory::check_user_id(user)
            {
                return Err(invalid("auth.api_keys", &format!("`user`: {problem}")));
            }
        }
        for k in &self.auth.operator_keys {
            if k.expose().len() < 16 {
                return Err(invalid(
                    "auth.operator_keys",
                    "every key must be at least 16 characters",
                ));
            }
            let taken = (self.auth.api_keys.iter()).any(|t| t.key.expose() == k.expose());
            if taken {
                return Err(invalid(
                    "auth.operator_keys",
                    "an operator key must not also be a tenant's key",
                ));
            }
        }
        Ok(())
    }

    /// `[quotas]`: each tenant's weight and priority cap within their ranges.
    fn validate_quotas(&self) -> Result<(), Error> {
        let named = std::iter::once(("default".to_owned(), &self.quotas.default))
            .chain((self.quotas.tenants.iter()).map(|(name, q)| (format!("tenants.{name}"), q)));
        for (name, q) in named {
            if !(1..=1000).contains(&q.weight) {
                return Err(invalid(format!("quotas.{name}.weight"), "must be 1-1000"));
            }
            if q.max_priority.is_some_and(|p| !(-1000..=1000).contains(&p)) {
                return Err(invalid(
                    format!("quotas.{name}.max_priority"),
                    "must be -1000 to 1000 (the range a run's priority has)",
                ));
            }
        }
        Ok(())
    }

    /// `[webhooks]`: a key long enough to sign with, tenants' URLs, bounded retries.
    fn validate_webhooks(&self) -> Result<(), Error> {
        let w = &self.webhooks;
        if !w.secret.is_empty() && w.secret.expose().len() < 16 {
            return Err(invalid("webhooks.secret", "must be at least 16 characters"));
        }
        if !w.tenants.is_empty() && w.secret.is_empty() {
            return Err(invalid(
                "webhooks.tenants",
                "set webhooks.secret too: every delivery is signed",
            ));
        }
        for (tenant, url) in &w.tenants {
            let ok = url::Url::parse(url).is_ok_and(|u| matches!(u.scheme(), "http" | "https"));
            if !ok {
                return Err(invalid(
                    "webhooks.tenants",
                    &format!("the URL of tenant `{tenant}` is not an http(s) URL"),
                ));
            }
        }
        if !(1..=50).contains(&w.max_attempts) {
            return Err(invalid("webhooks.max_attempts", "must be 1-50"));
        }
        if w.backoff_ms == 0 || w.timeout_ms == 0 {
            return Err(invalid(
                "webhooks",
                "backoff_ms and timeout_ms must be above 0",
            ));
        }
        if !(1..=256).contains(&w.max_in_flight_per_tenant) {
            return Err(invalid(
                "webhooks.max_in_flight_per_tenant",
                "must be 1-256",
            ));
        }
        if !(1..=256).contains(&w.max_in_flight_per_destination) {
            return Err(invalid(
                "webhooks.max_in_flight_per_destination",
                "must be 1-256",
            ));
        }
        Ok(())
    }

    /// `[llm]`: the default model among the aliases, the providers, the aliases' targets, and
    /// the built-in `openai` provider when chosen.
    fn validate_llm(&self) -> Result<(), Error> {
        if !self.llm.models.contains_key(&self.llm.default_model) {
            return Err(Error::Invalid {
                key: "llm.default_model".into(),
                message: format!(
                    "`{}` is not one of llm.models ({})",
                    self.llm.default_model,
                    self.llm
                        .models
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                set_by: None,
            });
        }
        self.validate_providers()?;
        self.validate_aliases()?;
        if self.llm.provider == ProviderChoice::Openai && !self.llm.openai.is_configured() {
            return Err(invalid(
                "llm.openai.base_url",
                "is required when llm.provider = \"openai\" (or set OPENAI_API_KEY)",
            ));
        }
        if self.llm.openai.read_timeout_ms == 0 || self.llm.openai.connect_timeout_ms == 0 {
            return Err(invalid(
                "llm.openai.read_timeout_ms",
                "timeouts must be at least 1 ms",
            ));
        }
        Ok(())
    }

    /// `[selector]`: the default orchestration, then every rule compiled.
    fn validate_selector(&self) -> Result<(), Error> {
        selector::default_of(&self.selector)
            .and_then(|_| selector::compile(&self.selector))
            .map(|_| ())
            .map_err(|e| Error::Invalid {
                key: e.key.into(),
                message: e.message,
                set_by: None,
            })
    }

    /// `[llm.providers.NAME]`: names, URLs, timeouts, and keys present where named.
    fn validate_providers(&self) -> Result<(), Error> {
        for (name, p) in &self.llm.providers {
            let key = |field: &str| Cow::Owned(format!("llm.providers.{name}.{field}"));
            let bad = |field: &str, message: String| Error::Invalid {
                key: key(field),
                message,
                set_by: None,
            };
            if matches!(name.as_str(), "openai" | "offline") {
                return Err(Error::Invalid {
                    key: Cow::Owned(format!("llm.providers.{name}")),
                    message: format!(
                        "`{name}` is built in (configure it under [llm.openai]); pick another name"
                    ),
                    set_by: None,
                });
            }
            if p.kind == ProviderKind::Offline {
                continue;
            }
            let url_ok = reqwest::Url::parse(&p.base_url)
                .is_ok_and(|u| matches!(u.scheme(), "http" | "https"));
            if !url_ok {
                return Err(bad(
                    "base_url",
                    format!("`{}` is not an http:// or https:// URL", p.base_url),
                ));
            }
            if !p.api_key_env.is_empty() && p.api_key.is_empty() {
                return Err(bad(
                    "api_key_env",
                    format!(
                        "the environment variable `{}` is not set (or empty)",
                        p.api_key_env
                    ),
                ));
            }
            if p.connect_timeout_ms == 0 || p.read_timeout_ms == 0 {
                return Err(bad(
                    "read_timeout_ms",
                    "timeouts must be at least 1 ms".into(),
                ));
            }
        }
        Ok(())
    }

    /// `[llm.models.ALIAS]`: known providers, sane settings, fallbacks that exist and end.
    fn validate_aliases(&self) -> Result<(), Error> {
        let models = &self.llm.models;
        for (alias, m) in models {
            let bad = |field: &str, message: String| Error::Invalid {
                key: Cow::Owned(format!("llm.models.{alias}.{field}")),
                message,
                set_by: None,
            };
            let known = matches!(m.provider.as_str(), "openai" | "offline")
                || self.llm.providers.contains_key(&m.provider);
            if !known {
                let mut names = vec!["openai".to_owned(), "offline".to_owned()];
                names.extend(self.llm.providers.keys().cloned());
                return Err(bad(
                    "provider",
                    format!(
                        "unknown provider `{}`; configured: {}",
                        m.provider,
                        names.join(", ")
                    ),
                ));
            }
            if let Some(t) = m.temperature
                && !(0.0..=2.0).contains(&t)
            {
                return Err(bad("temperature", "must be from 0 to 2".into()));
            }
            if m.max_tokens == Some(0) {
                return Err(bad("max_tokens", "must be at least 1".into()));
            }
            if m.timeout_ms == Some(0) {
                return Err(bad("timeout_ms", "must be at least 1".into()));
            }
            // Follow the chain: every link must exist, and it must not come back.
            let mut seen = vec![alias.as_str()];
            let mut next = m.fallback.as_deref();
            while let Some(fallback) = next {
                let Some(target) = models.get(fallback) else {
                    return Err(bad(
                        "fallback",
                        format!("`{fallback}` is not one of llm.models"),
                    ));
                };
                if seen.contains(&fallback) {
                    seen.push(fallback);
                    return Err(bad(
                        "fallback",
                        format!("the fallbacks form a cycle: {}", seen.join(" → ")),
                    ));
                }
                seen.push(fallback);
                next = target.fallback.as_deref();
            }
        }
        Ok(())
    }

    /// Whether the server answers every caller, with no key, on an address other machines may
    /// reach: a public bind with no API keys, opted into (as the container image does). The
    /// start says so in a warning.
    pub fn serves_others_without_keys(&self) -> bool {
        let public = self
            .server
            .bind
            .parse::<SocketAddr>()
            .is_ok_and(|a| !a.ip().to_canonical().is_loopback());
        public && self.auth.api_keys.is_empty()
    }

    /// Whether endpoints are called at all: `llm.provider = "offline"` sends every alias to
    /// the offline provider, named providers too.
    pub fn uses_any_endpoint(&self) -> bool {
        self.llm.provider != ProviderChoice::Offline
    }

    /// Whether runs go to an OpenAI-compatible endpoint (else the offline provider answers).
    pub fn uses_openai(&self) -> bool {
        match self.llm.provider {
            ProviderChoice::Auto => self.llm.openai.is_configured(),
            ProviderChoice::Openai => true,
            ProviderChoice::Offline => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(env: &[(&str, &str)], overrides: Overrides) -> Result<Config, Error> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::load_from(&overrides, &env)
    }

    fn toml_file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn defaults_bind_loopback_and_use_offline() {
        let c = load(&[], Overrides::default()).unwrap();
        assert_eq!(c.server.bind, "127.0.0.1:8080");
        assert_eq!(c.database.url, "sqlite://orca.db");
        assert!(!c.uses_openai());
    }

    #[test]
    fn layers_override_in_order() {
        let f = toml_file("[server]\nbind = \"127.0.0.1:9000\"\n[engine]\nmax_running_runs = 3\n");
        let path = f.path().to_str().unwrap();
        // file beats default
        let c = load(&[("ORCA_CONFIG", path)], Overrides::default()).unwrap();
        assert_eq!(c.server.bind, "127.0.0.1:9000");
        assert_eq!(c.engine.max_running_runs, 3);
        // environment beats file
        let c = load(
            &[
                ("ORCA_CONFIG", path),
                ("ORCA_BIND", "127.0.0.1:9001"),
                ("ORCA_ENGINE__MAX_RUNNING_RUNS", "4"),
            ],
            Overrides::default(),
        )
        .unwrap();
        assert_eq!(c.server.bind, "127.0.0.1:9001");
        assert_eq!(c.engine.max_running_runs, 4);
        // flags beat environment
        let c = load(
            &[("ORCA_CONFIG", path), ("ORCA_BIND", "127.0.0.1:9001")],
            Overrides {
                bind: Some("127.0.0.1:9002".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(c.server.bind, "127.0.0.1:9002");
    }

    #[test]
    fn openai_env_switches_provider_and_key_stays_secret() {
        let c = load(
            &[
                ("OPENAI_BASE_URL", "http://127.0.0.1:1/v1"),
                ("OPENAI_API_KEY", "sk-very-secret"),
            ],
            Overrides::default(),
        )
        .unwrap();
        assert!(c.uses_openai());
        assert_eq!(c.llm.openai.api_key.expose(), "sk-very-secret");
        assert!(!format!("{c:?}").contains("sk-very-secret"));
    }

    /// Loads each TOML text as the configuration file and checks that the error names `key`.
    fn assert_each_names_its_key(cases: &[(&str, &str)]) {
        for (text, key) in cases {
            let f = toml_file(text);
            let err = load(
                &[("ORCA_CONFIG", f.path().to_str().unwrap())],
                Overrides::default(),
            )
            .expect_err(text)
            .to_string();
            assert!(err.contains(key), "{text:?} gave {err:?}");
        }
    }

    /// Server, engine, storage, tools and auth values, and unknown keys.
    #[test]
    fn invalid_values_name_their_key() {
        assert_each_names_its_key(&[
            ("[server]\nbind = \"nowhere\"\n", "server.bind"),
            ("[quotas.default]\nweight = 0\n", "quotas.default.weight"),
            (
                "[quotas.tenants.x]\nmax_priority = 5000\n",
                "quotas.tenants.x.max_priority",
            ),
            (
                "[auth]\noperator_keys = [\"short\"]\n",
                "auth.operator_keys",
            ),
            (
                "[engine]\nmax_running_runs = 0\n",
                "engine.max_running_runs",
            ),
            (
                "[engine]\nmax_running_runs = \"many\"\n",
                "max_running_runs",
            ),
            ("[engine]\nmax_runing_runs = 2\n", "max_runing_runs"),
            ("[llm]\ndefault_model = \"gpt-9\"\n", "llm.default_model"),
            (
                "[server]\nheader_read_timeout_secs = 0\n",
                "server.header_read_timeout_secs",
            ),
            (
                "[server]\nbody_read_timeout_secs = 0\n",
                "server.body_read_timeout_secs",
            ),
            ("[server]\nmax_connections = 0\n", "server.max_connections"),
            (
                "[retention]\nsweep_interval_secs = 0\n",
                "retention.sweep_interval_secs",
            ),
            ("[retention]\nbatch_runs = 0\n", "retention.batch_runs"),
            (
                "[engine]\nlimit_near_ratio = 1.5\n",
                "engine.limit_near_ratio",
            ),
            ("[engine]\nloop_repeats = 1\n", "engine.loop_repeats"),
            (
                "[engine.replan_policy]\nstep_failed = [\"pray\"]\n",
                "step_failed",
            ),
            (
                "[context]\nsession_max_turns = 0\n",
                "context.session_max_turns",
            ),
            ("[database]\nurl = \"mysql://x\"\n", "database.url"),
            ("[database]\nlease_ttl_ms = 100\n", "database.lease_ttl_ms"),
            (
                "[tools]\nhttp_api_env = [\"API-KEY\"]\n",
                "tools.http_api_env",
            ),
            ("[tools]\nhttp_api_env = [\"\"]\n", "tools.http_api_env"),
            (
                "[[auth.api_keys]]\nkey = \"short\"\ntenant = \"a\"\n",
                "auth.api_keys",
            ),
        ]);
    }

    /// `[selector]`: the default and each rule's matcher and target.
    #[test]
    fn invalid_selector_values_name_their_key() {
        assert_each_names_its_key(&[
            ("[selector]\ndefault = \"fixed\"\n", "selector.default"),
            ("[selector]\ndefault = \"magic\"\n", "selector.default"),
            (
                "[[selector.rules]]\nname = \"r\"\npattern = \"(\"\norchestration = \"simple\"\n",
                "selector.rules[0].pattern",
            ),
            (
                "[[selector.rules]]\nname = \"r\"\nkeywords = [\"x\"]\norchestration = \"wizard\"\n",
                "selector.rules[0].orchestration",
            ),
            (
                "[[selector.rules]]\nname = \"r\"\nkeywords = [\"x\"]\nworkflow = \"Bad Name\"\n",
                "selector.rules[0].workflow",
            ),
            (
                "[[selector.rules]]\nname = \"r\"\norchestration = \"simple\"\n",
                "selector.rules[0]",
            ),
            (
                "[[selector.rules]]\nname = \"r\"\nkeywords = [\"x\"]\nflavour = \"x\"\n",
                "flavour",
            ),
        ]);
    }

    /// `[llm.models]` and `[llm.providers]`.
    #[test]
    fn invalid_models_and_providers_name_their_key() {
        assert_each_names_its_key(&[
            (
                "[llm.models.x]\nprovider = \"anthropic\"\nmodel = \"m\"\n",
                "llm.models.x.provider",
            ),
            (
                "[llm.models.a]\nprovider = \"offline\"\nmodel = \"m\"\nfallback = \"b\"\n\
                 [llm.models.b]\nprovider = \"offline\"\nmodel = \"m\"\nfallback = \"a\"\n",
                "llm.models.a.fallback",
            ),
            (
                "[llm.models.a]\nprovider = \"offline\"\nmodel = \"m\"\nfallback = \"a\"\n",
                "llm.models.a.fallback",
            ),
            (
                "[llm.models.a]\nprovider = \"offline\"\nmodel = \"m\"\nfallback = \"zz\"\n",
                "llm.models.a.fallback",
            ),
            (
                "[llm.models.a]\nprovider = \"offline\"\nmodel = \"m\"\ntemperature = 3.0\n",
                "llm.models.a.temperature",
            ),
            (
                "[llm.providers.p]\nkind = \"openai\"\nbase_url = \"not a url\"\n",
                "llm.providers.p.base_url",
            ),
            (
                "[llm.providers.p]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n\
                 api_key_env = \"ORCA_UNIT_TEST_UNSET_KEY\"\n",
                "llm.providers.p.api_key_env",
            ),
            (
                "[llm.providers.openai]\nkind = \"offline\"\n",
                "llm.providers.openai",
            ),
            (
                "[llm.providers.p]\nkind = \"openai\"\nbase_url = \"http://h/v1\"\napi_key = \"k\"\n",
                "api_key",
            ),
        ]);
    }

    #[test]
    fn provider_keys_come_from_the_variables_they_name() {
        let f = toml_file(
            "[llm.providers.p]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n\
             api_key_env = \"ORCA_UNIT_KEY_P\"\n\
             [llm.models.a]\nprovider = \"p\"\nmodel = \"m\"\nfallback = \"b\"\n\
             [llm.models.b]\nprovider = \"offline\"\nmodel = \"m\"\n",
        );
        let c = load(
            &[
                ("ORCA_CONFIG", f.path().to_str().unwrap()),
                ("ORCA_UNIT_KEY_P", "sk-from-the-env"),
            ],
            Overrides::default(),
        )
        .unwrap();
        assert_eq!(c.llm.providers["p"].api_key.expose(), "sk-from-the-env");
        assert!(!format!("{c:?}").contains("sk-from-the-env"));
        let json = serde_json::to_string(&c).unwrap();
        assert!(!json.contains("sk-from-the-env"));
        assert_eq!(c.llm.models["a"].fallback.as_deref(), Some("b"));
    }

    #[test]
    fn a_public_bind_needs_api_keys_or_an_explicit_opt_in() {
        for bind in ["0.0.0.0:8080", "[::]:8080", "192.0.2.1:8080"] {
            let err = load(&[("ORCA_BIND", bind)], Overrides::default())
                .expect_err(bind)
                .to_string();
            assert!(
                err.contains("server.allow_unauthenticated_public_bind"),
                "{err}"
            );
            load(
                &[
                    ("ORCA_BIND", bind),
                    ("ORCA_SERVER__ALLOW_UNAUTHENTICATED_PUBLIC_BIND", "true"),
                ],
                Overrides::default(),
            )
            .expect("the variable opts in");
            load(
                &[("ORCA_BIND", bind)],
                Overrides {
                    allow_unauthenticated_public_bind: true,
                    ..Default::default()
                },
            )
            .expect("the flag opts in");
            let f =
                toml_file("[[auth.api_keys]]\nkey = \"a-key-of-sixteen-chars\"\ntenant = \"a\"\n");
            load(
                &[
                    ("ORCA_BIND", bind),
                    ("ORCA_CONFIG", f.path().to_str().unwrap()),
                ],
                Overrides::default(),
            )
            .expect("API keys make it safe");
        }
        for bind in [
            "127.0.0.1:8080",
            "127.0.0.2:0",
            "[::1]:8080",
            "[::ffff:127.0.0.1]:80",
        ] {
            load(&[("ORCA_BIND", bind)], Overrides::default()).expect(bind);
        }
    }

    #[test]
    fn cors_origins_are_checked() {
        let c = load(
            &[(
                "ORCA_SERVER__CORS__ALLOWED_ORIGINS",
                "[\"https://app.example.com\", \"http://127.0.0.1:3000\"]",
            )],
            Overrides::default(),
        )
        .unwrap();
        assert_eq!(
            c.server.cors.allowed_origins,
            ["https://app.example.com", "http://127.0.0.1:3000"]
        );
        for origins in [
            "[\"https://app.example.com/\"]",
            "[\"app.example.com\"]",
            "[\"*\", \"https://a.example\"]",
        ] {
            let err = load(
                &[("ORCA_SERVER__CORS__ALLOWED_ORIGINS", origins)],
                Overrides::default(),
            )
            .expect_err(origins)
            .to_string();
            assert!(err.contains("allowed_origins"), "{origins}: {err}");
        }
    }

    /// compose.yaml configures its replicas through the environment alone: API keys as an
    /// inline array of tables, a public bind, a PostgreSQL URL and a pool size.
    #[test]
    fn the_compose_files_environment_loads() {
        let c = load(
            &[
                ("ORCA_BIND", "0.0.0.0:8080"),
                ("DATABASE_URL", "postgres://orca:pw@postgres:5432/orca"),
                (
                    "ORCA_AUTH__API_KEYS",
                    r#"[{ key = "0123456789abcdef0123456789abcdef", tenant = "default" }]"#,
                ),
                ("ORCA_DATABASE__MAX_CONNECTIONS", "16"),
            ],
            Overrides::default(),
        )
        .unwrap();
        assert_eq!(c.auth.api_keys.len(), 1);
        assert_eq!(c.auth.api_keys[0].tenant, "default");
        assert_eq!(c.database.max_connections, 16);
        assert!(c.database.url.starts_with("postgres://"));
    }

    #[test]
    fn a_typo_is_told_the_nearest_key_and_a_broken_file_its_name() {
        let f = toml_file("[engine]\nmax_runing_runs = 2\n");
        let err = load(
            &[("ORCA_CONFIG", f.path().to_str().unwrap())],
            Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        let at = format!("engine.max_runing_runs in {}", f.path().display());
        assert!(
            err.starts_with(&format!(
                "configuration: {at}: unknown key `max_runing_runs` (did you mean \
                 `max_running_runs`?); known keys: max_running_runs, max_queued_runs,"
            )),
            "{err}"
        );
        let err = load(
            &[("ORCA_ENGINE__PLANNING_FALLBACK", "simpel")],
            Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("unknown value `simpel` (did you mean `simple`?); expected one of"),
            "{err}"
        );

        let f = toml_file("[server]\nbind = \"127.0.0.1:1\"\nport = \n");
        let err = load(
            &[("ORCA_CONFIG", f.path().to_str().unwrap())],
            Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        let named = format!(
            "configuration: {}: TOML parse error at line 3, column 8: invalid string; expected",
            f.path().display()
        );
        assert!(err.starts_with(&named), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }

    /// The shipped file holds the built-in defaults, every key of them: a key missing from it
    /// is a default nobody can read about (serialised defaults that are absent, `null`, need
    /// no line).
    #[test]
    fn the_shipped_default_toml_lists_exactly_the_defaults() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config/default.toml");
        let c = load(&[("ORCA_CONFIG", path)], Overrides::default()).unwrap();
        assert_eq!(c, Config::default());

        let file: serde_json::Value = Figment::from(Toml::file_exact(path)).extract().unwrap();
        let defaults = serde_json::to_value(Config::default()).unwrap();
        let mut missing = Vec::new();
        keys_missing(&defaults, &file, "", &mut missing);
        assert!(
            missing.is_empty(),
            "config/default.toml lacks {}",
            missing.join(", ")
        );
    }

    /// The keys of the tables of `defaults` (dotted, after `at`) that `file` lacks.
    fn keys_missing(
        defaults: &serde_json::Value,
        file: &serde_json::Value,
        at: &str,
        out: &mut Vec<String>,
    ) {
        let Some(table) = defaults.as_object() else {
            return;
        };
        for (key, value) in table {
            let path = format!("{at}{key}");
            match file.get(key) {
                None if !value.is_null() => out.push(path),
                None => {}
                Some(given) => keys_missing(value, given, &format!("{path}."), out),
            }
        }
    }

    /// A file that sets a few keys keeps every other default: `--config` layers over the
    /// built-in values, it does not replace them.
    #[test]
    fn a_partial_file_keeps_the_other_defaults() {
        let f = toml_file(
            "[engine]\nmax_steps = 7\n[quotas.default]\nrunning_runs = 2\n\
             [llm.models]\nsmart = { provider = \"offline\", model = \"m\" }\n",
        );
        let c = load(
            &[],
            Overrides {
                config_file: Some(f.path().to_owned()),
                ..Default::default()
            },
        )
        .unwrap();
        let mut want = Config::default();
        want.engine.max_steps = 7;
        want.quotas.default.running_runs = 2;
        want.llm
            .models
            .insert("smart".into(), ModelAlias::new("offline", "m"));
        assert_eq!(c, want);
    }

    #[test]
    fn missing_config_file_is_an_error() {
        let err = load(
            &[("ORCA_CONFIG", "/nonexistent/orca.toml")],
            Overrides::default(),
        )
        .unwrap_err();
        assert!(matches!(err, Error::MissingFile(_)));
    }
}
