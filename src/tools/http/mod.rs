//! HTTP tools declared as data: a method, a URL template filled from the arguments, headers
//! whose secrets come from the environment at call time, an input schema, and caps on time and
//! response size. Declared in the config (`[[tools.http]]`) or through `PUT /v1/tools/{name}`.
//!
//! Where a tool may connect is [`guard`]'s business: every request goes through a client whose
//! only resolver refuses non-public addresses, whose redirects are checked hop by hop, and
//! which ignores proxy settings (a proxy would resolve names where the guard cannot see).

pub mod declared;
pub mod guard;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::{Tool, ToolError};
use crate::domain::ErrorCode;
/// The declaration and its checks live in `domain` (a run's spec and the configuration carry
/// it); what a tenant's declaration may read, and the callable tool built from it, are here.
pub use crate::domain::HttpToolSpec;
use crate::domain::http_tool::{dot_segment, placeholders};
use guard::{Destinations, GuardedResolver, Refused};

/// The most redirects one call follows.
const MAX_REDIRECTS: usize = 5;

/// The environment variables a header value names as `${NAME}`.
fn env_names(template: &str) -> impl Iterator<Item = &str> {
    template
        .split("${")
        .skip(1)
        .filter_map(|rest| rest.split_once('}').map(|(name, _)| name))
}

/// Which environment variables a tool's headers may read.
#[derive(Debug, Clone, PartialEq)]
pub enum EnvAccess {
    /// Any: the operator declared the tool in the config.
    Any,
    /// Only these (`tools.http_api_env`): a tenant declared the tool through the API, and the
    /// server's environment (provider keys, other tenants' API keys, the database URL) is not
    /// its to read.
    Only(Arc<BTreeSet<String>>),
}

impl EnvAccess {
    fn allows(&self, name: &str) -> bool {
        match self {
            EnvAccess::Any => true,
            EnvAccess::Only(names) => names.contains(name),
        }
    }
}

impl HttpToolSpec {
    /// The headers that name a variable `access` does not allow, as (JSON Pointer, message).
    pub fn env_problems(&self, access: &EnvAccess) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (header, value) in &self.headers {
            for name in env_names(value).filter(|n| !access.allows(n)) {
                out.push((
                    format!("/headers/{}", header.replace('~', "~0").replace('/', "~1")),
                    format!("`${{{name}}}` is not in tools.http_api_env: a tool declared through the API may read only the variables the operator lists there"),
                ));
            }
        }
        out
    }

    /// The declaration as shown to API clients: header values hidden.
    pub fn redacted(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Some(h) = v.get_mut("headers").and_then(Value::as_object_mut) {
            for value in h.values_mut() {
                *value = json!("<hidden>");
            }
        }
        v
    }
}

/// A declared HTTP tool, ready to call.
pub struct HttpTool {
    spec: HttpToolSpec,
    client: reqwest::Client,
    policy: Arc<Destinations>,
    env: EnvAccess,
}

impl HttpTool {
    /// Builds the tool's client; the declaration must have no [`HttpToolSpec::problems`].
    /// `env` is checked again at every call, so a variable the operator has since taken off
    /// `tools.http_api_env` is not read by a tool declared while it was on.
    pub fn new(
        spec: HttpToolSpec,
        policy: Arc<Destinations>,
        env: EnvAccess,
    ) -> anyhow::Result<HttpTool> {
        let connect = Duration::from_millis(spec.timeout_ms.min(10_000));
        let client = guarded_client(&policy, connect)?;
        Ok(HttpTool {
            spec,
            client,
            policy,
            env,
        })
    }

    fn url(&self, args: &Value) -> Result<Url, ToolError> {
        let mut url = self.spec.url.clone();
        for name in placeholders(&self.spec.url).unwrap_or_default() {
            let value = match &args[&name] {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            let encoded: String = form_urlencoded::byte_serialize(value.as_bytes()).collect();
            url = url.replace(&format!("{{{name}}}"), &encoded.replace('+', "%20"));
        }
        if let Some(segment) = dot_segment(&url) {
            // `..` (or `%2e%2e`) would climb out of the value's segment once the URL is
            // parsed, and no encoding keeps a dot segment literal: refuse it.
            return Err(ToolError::failed(
                ErrorCode::InvalidToolArguments,
                format!(
                    "an argument makes the URL path segment `{segment}`; `.` and `..` may not stand alone in a path segment"
                ),
            ));
        }
        let url = Url::parse(&url).map_err(|e| {
            ToolError::failed(ErrorCode::InvalidUrl, format!("the URL is not valid: {e}"))
        })?;
        self.policy.check_url(&url).map_err(refused)?;
        Ok(url)
    }

    fn headers(&self) -> Result<HeaderMap, ToolError> {
        let mut out = HeaderMap::new();
        for (name, template) in &self.spec.headers {
            if let Some(var) = env_names(template).find(|v| !self.env.allows(v)) {
                return Err(ToolError::failed(
                    ErrorCode::SecretNotAllowed,
                    format!(
                        "header `{name}` names `${{{var}}}`, which is not in tools.http_api_env"
                    ),
                ));
            }
            let value = super::mcp::expand_env(template).map_err(|e| {
                ToolError::failed(ErrorCode::SecretMissing, format!("header `{name}`: {e}"))
            })?;
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                ToolError::failed(
                    ErrorCode::SecretMissing,
                    format!("header `{name}` is not a valid header value"),
                )
            })?;
            value.set_sensitive(true);
            if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
                out.insert(name, value);
            }
        }
        Ok(out)
    }

    async fn send(&self, args: Value) -> Result<Value, ToolError> {
        let url = self.url(&args)?;
        let method = Method::from_bytes(self.spec.method.as_bytes()).unwrap_or(Method::GET);
        let mut request = self
            .client
            .request(method.clone(), url)
            .headers(self.headers()?);
        if matches!(method, Method::POST | Method::PUT | Method::PATCH) {
            let used = placeholders(&self.spec.url).unwrap_or_default();
            let body: Map<String, Value> = args
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, _)| !used.contains(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            request = request.json(&body);
        }
        let response = request.send().await.map_err(|e| transport(&e))?;
        let status = response.status();
        let json = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("json"));
        let body = self.read_capped(response).await?;
        let text = String::from_utf8_lossy(&body);
        if !status.is_success() {
            let snippet: String = text.chars().take(300).collect();
            let code = if status.is_server_error() || status.as_u16() == 429 {
                ErrorCode::HttpServerError
            } else {
                ErrorCode::HttpClientError
            };
            return Err(ToolError::failed(code, format!("HTTP {status}: {snippet}")));
        }
        Ok(
            match json
                .then(|| serde_json::from_slice::<Value>(&body).ok())
                .flatten()
            {
                Some(v) => v,
                None => Value::String(text.into_owned()),
            },
        )
    }

    async fn read_capped(&self, response: reqwest::Response) -> Result<Vec<u8>, ToolError> {
        let max = self.spec.max_response_bytes as usize;
        let too_large = || {
            ToolError::failed(
                ErrorCode::ResponseTooLarge,
                format!("the response is larger than max_response_bytes ({max})"),
            )
        };
        if response.content_length().is_some_and(|n| n as usize > max) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| transport(&e))?;
            if body.len() + chunk.len() > max {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

fn refused(r: Refused) -> ToolError {
    ToolError::failed(ErrorCode::DestinationNotAllowed, r.0)
}

/// A request that failed before an answer: refused by the guard, timed out, or unreachable.
fn transport(e: &reqwest::Error) -> ToolError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(r) = err.downcast_ref::<Refused>() {
            return refused(Refused(r.0.clone()));
        }
        source = err.source();
    }
    if e.is_timeout() {
        return ToolError::failed(ErrorCode::ToolTimeout, "the HTTP request timed out");
    }
    let host = e
        .url()
        .and_then(|u| u.host_str())
        .unwrap_or("the server")
        .to_owned();
    ToolError::failed(
        ErrorCode::HttpUnavailable,
        format!("could not reach {host}"),
    )
}

#[async_trait]
impl Tool for HttpTool {
    fn name(&self) -> &str {
        &self.spec.name
    }
    fn description(&self) -> &str {
        &self.spec.description
    }
    fn input_schema(&self) -> Value {
        self.spec.input_schema.clone()
    }
    async fn call(&self, args: Value, cancel: &CancellationToken) -> Result<Value, ToolError> {
        let timeout = Duration::from_millis(self.spec.timeout_ms);
        tokio::select! {
            () = cancel.cancelled() => Err(ToolError::Cancelled),
            r = tokio::time::timeout(timeout, self.send(args)) => r.unwrap_or_else(|_| Err(
                ToolError::failed(ErrorCode::ToolTimeout, format!("no answer within timeout_ms ({} ms)", timeout.as_millis())))),
        }
    }
}

/// A client that connects only where `policy` allows, checked on the addresses a name
/// resolves to and at every redirect (at most [`MAX_REDIRECTS`]); no proxy. HTTP tools and
/// completion webhooks both send through one.
pub fn guarded_client(
    policy: &Arc<Destinations>,
    connect_timeout: Duration,
) -> reqwest::Result<reqwest::Client> {
    let redirects = policy.clone();
    reqwest::Client::builder()
        .dns_resolver(GuardedResolver::new(policy.clone()))
        .no_proxy()
        .redirect(reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                return attempt.error(Refused(format!("more than {MAX_REDIRECTS} redirects")));
            }
            match redirects.check_url(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(refused) => attempt.error(refused),
            }
        }))
        .connect_timeout(connect_timeout)
        .build()
}

/// Whether `e` (anywhere in its chain) is the destination policy's refusal, and its reason.
pub fn refusal(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(r) = c.downcast_ref::<Refused>() {
            return Some(r.0.clone());
        }
        cause = c.source();
    }
    None
}

/// The operator's destination policy, from the config (checked by `Config::validate`).
pub fn destinations(config: &crate::config::ToolsConfig) -> anyhow::Result<Arc<Destinations>> {
    Destinations::new(config.http_allow_private, &config.http_allow)
        .map(Arc::new)
        .map_err(|m| anyhow::anyhow!("tools.http_allow: {m}"))
}

/// Registers the `[[tools.http]]` and `[[tools.worker]]` tools; a name already taken, or a
/// schema that does not compile, stops the start.
pub fn register_configured(
    config: &crate::config::ToolsConfig,
    registry: &mut super::ToolRegistry,
) -> anyhow::Result<()> {
    let policy = destinations(config)?;
    for spec in &config.http {
        if registry.contains(&spec.name) {
            anyhow::bail!("tools.http: `{}` is already a tool", spec.name);
        }
        registry.register(Arc::new(HttpTool::new(
            spec.clone(),
            policy.clone(),
            EnvAccess::Any,
        )?));
    }
    for spec in &config.worker {
        if registry.contains(&spec.name) {
            anyhow::bail!("tools.worker: `{}` is already a tool", spec.name);
        }
        let tool = super::worker::WorkerTool::new(spec.clone());
        tool.check_schema()
            .map_err(|e| anyhow::anyhow!("tools.worker: `{}`: {e}", spec.name))?;
        registry.register(Arc::new(tool));
    }
    Ok(())
}
