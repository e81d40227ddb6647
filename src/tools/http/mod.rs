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
/// The declaration is data and lives in `domain` (a run's spec carries it); its checks, and
/// building a callable tool from it, are here.
pub use crate::domain::HttpToolSpec;
use guard::{Destinations, GuardedResolver, Refused};

/// The most redirects one call follows.
const MAX_REDIRECTS: usize = 5;

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

/// The first path segment of `url` (written out, not yet parsed) that URL parsing would
/// treat as `.` or `..`, which would move the request to another path.
fn dot_segment(url: &str) -> Option<&str> {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[after_scheme..];
    let path_start = rest.find('/')?;
    let path = &rest[path_start..];
    let path = &path[..path.find(['?', '#']).unwrap_or(path.len())];
    path.split('/').find(|segment| {
        let plain = segment.to_ascii_lowercase().replace("%2e", ".");
        plain == "." || plain == ".."
    })
}

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

/// The `{name}` placeholders of a URL template, in order; an error for a malformed one.
fn placeholders(template: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or("a `{` without its `}`")?;
        let name = &after[..close];
        let ok = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(format!(
                "`{{{name}}}` is not a placeholder (letters, digits, `_`)"
            ));
        }
        out.push(name.to_owned());
        rest = &after[close + 1..];
    }
    Ok(out)
}

impl HttpToolSpec {
    /// Every problem with the declaration, as (JSON Pointer, message).
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut bad = |p: &str, m: String| out.push((p.to_owned(), m));
        let name_ok = self.name.len() <= 64
            && self.name.split('.').count() >= 2
            && self.name.split('.').all(|part| {
                part.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            });
        if !name_ok {
            bad(
                "/name",
                "a dotted lowercase name such as `weather.current` (at most 64 characters)".into(),
            );
        }
        if self.description.chars().count() > 4000 {
            bad("/description", "at most 4000 characters".into());
        }
        if !METHODS.contains(&self.method.as_str()) {
            bad("/method", format!("one of {}", METHODS.join(", ")));
        }
        if !(1..=64 * 1024 * 1024).contains(&self.max_response_bytes) {
            bad("/max_response_bytes", "between 1 and 67108864".into());
        }
        if !(1..=300_000).contains(&self.timeout_ms) {
            bad("/timeout_ms", "between 1 and 300000 (5 minutes)".into());
        }
        self.url_problems(&mut bad);
        for (name, value) in &self.headers {
            let pointer = format!("/headers/{}", name.replace('~', "~0").replace('/', "~1"));
            if HeaderName::from_bytes(name.as_bytes()).is_err() || name.eq_ignore_ascii_case("host")
            {
                bad(
                    &pointer,
                    "not a header name orca sends (and never `Host`)".into(),
                );
            } else if value.contains("${") && !value.split("${").skip(1).all(|s| s.contains('}')) {
                bad(&pointer, "`${` without its `}`".into());
            } else if value.len() > 8192 {
                bad(&pointer, "at most 8192 bytes".into());
            }
        }
        if self.headers.len() > 32 {
            bad("/headers", "at most 32 headers".into());
        }
        out
    }

    fn url_problems(&self, bad: &mut impl FnMut(&str, String)) {
        if self.url.len() > 2048 {
            return bad("/url", "at most 2048 characters".into());
        }
        let names = match placeholders(&self.url) {
            Ok(n) => n,
            Err(e) => return bad("/url", e),
        };
        let authority_end = self.url.find("://").map(|i| i + 3).and_then(|start| {
            self.url[start..]
                .find(['/', '?', '#'])
                .map(|i| start + i)
                .or(Some(self.url.len()))
        });
        if authority_end.is_some_and(|end| self.url[..end].contains('{')) {
            return bad(
                "/url",
                "placeholders may not sit in the scheme, host or port".into(),
            );
        }
        let sample = names
            .iter()
            .fold(self.url.clone(), |u, n| u.replace(&format!("{{{n}}}"), "x"));
        if let Some(segment) = dot_segment(&self.url) {
            bad(
                "/url",
                format!("no `{segment}` path segments: write the path they lead to"),
            );
        }
        match Url::parse(&sample) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {
                if !u.username().is_empty() || u.password().is_some() {
                    bad("/url", "no credentials in the URL: use a header".into());
                }
            }
            _ => bad("/url", "an absolute http or https URL".into()),
        }
        let properties = self
            .input_schema
            .get("properties")
            .and_then(Value::as_object);
        for n in names {
            if !properties.is_some_and(|p| p.contains_key(&n)) {
                bad(
                    "/url",
                    format!("`{{{n}}}` is not a property of input_schema"),
                );
            }
        }
        if self.input_schema.get("type") != Some(&json!("object")) {
            bad(
                "/input_schema",
                "must be an object schema (`\"type\": \"object\"`)".into(),
            );
        } else if let Err(e) = jsonschema::draft202012::new(&self.input_schema) {
            bad("/input_schema", format!("not a valid JSON Schema: {e}"));
        }
    }

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
        let redirects = policy.clone();
        let client = reqwest::Client::builder()
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
            .connect_timeout(Duration::from_millis(spec.timeout_ms.min(10_000)))
            .build()?;
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
            ToolError::failed(
                ErrorCode::Other("invalid_url".into()),
                format!("the URL is not valid: {e}"),
            )
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

/// The operator's destination policy, from the config (checked by `Config::validate`).
pub fn destinations(config: &crate::config::ToolsConfig) -> anyhow::Result<Arc<Destinations>> {
    Destinations::new(config.http_allow_private, &config.http_allow)
        .map(Arc::new)
        .map_err(|m| anyhow::anyhow!("tools.http_allow: {m}"))
}

/// Registers the `[[tools.http]]` tools; a name already taken stops the start.
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
    Ok(())
}
