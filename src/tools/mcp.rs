//! MCP tools: the tools of configured MCP servers (`[[tools.mcp]]`), each registered as
//! `<server>.<tool>` with the input schema the server lists, and called over the server's
//! connection (a child process on stdio, or streamable HTTP), through the `rmcp` client.
//!
//! Owns connecting at start (a server that fails stops the start unless it is `optional`),
//! listing tools (every page), mapping a call's result to the tool output and its failures to
//! stable codes, and closing the connections (and child processes) at shutdown. The registry
//! validates arguments against the listed schema before a call ever reaches the server.

use std::collections::{BTreeSet, HashMap};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use async_trait::async_trait;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RoleClient, RunningService, ServiceError, ServiceExt};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use super::{Tool, ToolError, ToolRegistry};
use crate::config::McpServerConfig;
use crate::domain::ErrorCode;
use crate::domain::ids::tool_wire_name;
use crate::schema::truncate;

type Client = RunningService<RoleClient, ()>;

/// The open connections to MCP servers; [`McpClients::close`] ends them (and stops the
/// child processes). Dropped without `close`, child processes are still killed.
#[derive(Default)]
pub struct McpClients {
    clients: Vec<(String, Client)>,
}

impl McpClients {
    /// Closes every connection: a child process gets its standard input closed, then
    /// `SIGTERM`, then `SIGKILL`, a few seconds apart at most.
    pub async fn close(self) {
        for (name, mut client) in self.clients {
            match client.close_with_timeout(Duration::from_secs(10)).await {
                Ok(Some(_)) => tracing::debug!(server = %name, "MCP server closed"),
                _ => tracing::warn!(server = %name, "MCP server did not close in time"),
            }
        }
    }
}

/// Connects every configured server and registers its tools. A server that fails to start,
/// to answer or to list tools orca can use stops the start with an error naming it, unless it
/// is `optional`: then it is logged and skipped. Mistakes in the entry itself always stop it.
pub async fn connect_all(
    configs: &[McpServerConfig],
    registry: &mut ToolRegistry,
) -> anyhow::Result<McpClients> {
    let mut clients = McpClients::default();
    let mut names = BTreeSet::new();
    for config in configs {
        let name = &config.name;
        check_entry(config).with_context(|| format!("invalid tools.mcp entry `{name}`"))?;
        if !names.insert(name.clone()) {
            bail!("tools.mcp: two servers are named `{name}`");
        }
        let connected = connect_one(config, registry)
            .await
            .with_context(|| format!("MCP server `{name}` (tools.mcp)"));
        match connected {
            Ok((client, tools)) => {
                let count = tools.len();
                for tool in tools {
                    registry.register(Arc::new(tool));
                }
                tracing::info!(server = %name, tools = count, "MCP server connected");
                clients.clients.push((name.clone(), client));
            }
            Err(e) if config.optional => {
                tracing::warn!(server = %name, error = %format!("{e:#}"), "optional MCP server skipped");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(clients)
}

fn check_entry(config: &McpServerConfig) -> anyhow::Result<()> {
    let name = &config.name;
    let mut chars = name.chars();
    let well_formed = chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !well_formed {
        bail!(
            "name `{name}` must be lowercase letters, digits and `_`, starting with a letter \
             (it prefixes the tool names)"
        );
    }
    match (config.command.is_empty(), config.url.is_empty()) {
        (true, true) => bail!("set `command` (stdio) or `url` (streamable HTTP)"),
        (false, false) => bail!("set `command` or `url`, not both"),
        (true, false) if !config.args.is_empty() || !config.env.is_empty() => {
            bail!("`args` and `env` are for `command` servers")
        }
        (false, true) if !config.headers.is_empty() => bail!("`headers` are for `url` servers"),
        _ => {}
    }
    if config.timeout_ms == 0 {
        bail!("timeout_ms must be at least 1");
    }
    Ok(())
}

/// Starts the connection and lists the tools, both within `timeout_ms`.
async fn connect_one(
    config: &McpServerConfig,
    registry: &ToolRegistry,
) -> anyhow::Result<(Client, Vec<McpTool>)> {
    let timeout = Duration::from_millis(config.timeout_ms);
    let client = tokio::time::timeout(timeout, start(config))
        .await
        .map_err(|_| {
            anyhow!(
                "did not answer within {} ms (timeout_ms)",
                config.timeout_ms
            )
        })??;
    let listed = tokio::time::timeout(timeout, client.peer().list_all_tools())
        .await
        .map_err(|_| anyhow!("did not list its tools within {} ms", config.timeout_ms))?
        .context("listing its tools")?;
    let tools = wrap_tools(config, client.peer(), listed, registry)?;
    Ok((client, tools))
}

async fn start(config: &McpServerConfig) -> anyhow::Result<Client> {
    if config.command.is_empty() {
        return start_http(config).await;
    }
    let mut command = tokio::process::Command::new(&config.command);
    for arg in &config.args {
        command.arg(expand_env(arg).context("in `args`")?);
    }
    for (key, value) in &config.env {
        command.env(
            key,
            expand_env(value).with_context(|| format!("in `env.{key}`"))?,
        );
    }
    // If orca stops without closing the connection, the child still goes.
    command.kill_on_drop(true);
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting `{}`", config.command))?;
    if let Some(stderr) = stderr {
        let server = config.name.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(server = %server, "MCP server: {}", truncate(line));
            }
        });
    }
    ().serve(transport)
        .await
        .map_err(|e| anyhow!("the MCP handshake failed: {e}"))
}

async fn start_http(config: &McpServerConfig) -> anyhow::Result<Client> {
    let url = expand_env(&config.url).context("in `url`")?;
    let mut headers = HashMap::new();
    for (key, value) in &config.headers {
        let name = reqwest::header::HeaderName::try_from(key.as_str())
            .with_context(|| format!("`headers.{key}` is not a header name"))?;
        let value = expand_env(value).with_context(|| format!("in `headers.{key}`"))?;
        let mut value = reqwest::header::HeaderValue::try_from(value)
            .map_err(|_| anyhow!("`headers.{key}` is not a valid header value"))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_millis(config.timeout_ms))
        .build()
        .context("building the HTTP client")?;
    let transport = StreamableHttpClientTransport::with_client(
        client,
        StreamableHttpClientTransportConfig::with_uri(url).custom_headers(headers),
    );
    ().serve(transport)
        .await
        .map_err(|e| anyhow!("the MCP handshake failed: {e}"))
}

/// Replaces each `${NAME}` with the environment variable `NAME`; an unset one is an error
/// that names the variable (never a value).
pub(crate) fn expand_env(text: &str) -> anyhow::Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| anyhow!("`${{` without a closing `}}`"))?;
        let var = &after[..end];
        let value = std::env::var(var)
            .map_err(|_| anyhow!("the environment variable `{var}` is not set"))?;
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The listed tools orca registers: allow-listed, renamed `<server>.<tool>`, each with a
/// schema the registry's compiler accepts and a name no other tool has.
fn wrap_tools(
    config: &McpServerConfig,
    peer: &Peer<RoleClient>,
    listed: Vec<rmcp::model::Tool>,
    registry: &ToolRegistry,
) -> anyhow::Result<Vec<McpTool>> {
    let offered: BTreeSet<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
    if let Some(missing) = config.tools.iter().find(|t| !offered.contains(t.as_str())) {
        let offered: Vec<&str> = offered.into_iter().collect();
        bail!(
            "`tools` names `{missing}`, which the server does not offer (it offers: {})",
            offered.join(", ")
        );
    }
    let mut tools: Vec<McpTool> = Vec::new();
    for tool in listed {
        if !config.tools.is_empty() && !config.tools.iter().any(|t| t == &*tool.name) {
            continue;
        }
        let name = format!("{}.{}", config.name, tool_wire_name(&tool.name));
        if registry.contains(&name) || tools.iter().any(|t| t.name == name) {
            bail!(
                "its tool `{}` would be `{name}`, a name already taken",
                tool.name
            );
        }
        let schema = Value::Object((*tool.input_schema).clone());
        if let Err(e) = jsonschema::draft202012::new(&schema) {
            bail!(
                "its tool `{}` has an input schema orca cannot use: {}",
                tool.name,
                truncate(e.to_string())
            );
        }
        tools.push(McpTool {
            name,
            remote: tool.name.to_string(),
            description: tool.description.as_deref().unwrap_or_default().to_owned(),
            schema,
            server: config.name.clone(),
            peer: peer.clone(),
            timeout: Duration::from_millis(config.timeout_ms),
        });
    }
    Ok(tools)
}

/// One tool of an MCP server.
struct McpTool {
    name: String,
    /// The tool's name on its server.
    remote: String,
    description: String,
    schema: Value,
    server: String,
    peer: Peer<RoleClient>,
    timeout: Duration,
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn input_schema(&self) -> Value {
        self.schema.clone()
    }

    /// Dropping the call (cancellation, timeout) sends the server `notifications/cancelled`.
    async fn call(&self, args: Value, cancel: &CancellationToken) -> Result<Value, ToolError> {
        let arguments = match args {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let params = CallToolRequestParams::new(self.remote.clone()).with_arguments(arguments);
        let result = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(ToolError::Cancelled),
            result = tokio::time::timeout(self.timeout, self.peer.call_tool(params)) => result,
        };
        match result {
            Err(_) => Err(ToolError::failed(
                ErrorCode::ToolTimeout,
                format!(
                    "MCP server `{}` did not answer `{}` within {} ms",
                    self.server,
                    self.remote,
                    self.timeout.as_millis()
                ),
            )),
            Ok(Err(e)) => Err(self.service_error(e)),
            Ok(Ok(result)) => self.output(result),
        }
    }
}

impl McpTool {
    fn service_error(&self, e: ServiceError) -> ToolError {
        match e {
            // The server answered with a JSON-RPC error: it refused this call.
            ServiceError::McpError(data) => ToolError::failed(
                ErrorCode::McpToolError,
                truncate(format!(
                    "MCP server `{}` refused `{}`: {}",
                    self.server, self.remote, data.message
                )),
            ),
            other => ToolError::failed(
                ErrorCode::McpUnavailable,
                truncate(format!(
                    "MCP server `{}` is unavailable: {other}",
                    self.server
                )),
            ),
        }
    }

    fn output(&self, result: CallToolResult) -> Result<Value, ToolError> {
        let content: Vec<Value> = result
            .content
            .iter()
            .map(|block| serde_json::to_value(block).map_or(Value::Null, |v| content_value(&v)))
            .collect();
        if result.is_error == Some(true) {
            let text = match content.as_slice() {
                [Value::String(s)] => s.clone(),
                [] => result
                    .structured_content
                    .map_or_else(|| "no detail".to_owned(), |v| v.to_string()),
                many => Value::Array(many.to_vec()).to_string(),
            };
            return Err(ToolError::failed(
                ErrorCode::McpToolError,
                truncate(format!("`{}` failed: {text}", self.name)),
            ));
        }
        if let Some(structured) = result.structured_content {
            return Ok(structured);
        }
        Ok(match content.len() {
            0 => Value::Null,
            1 => content.into_iter().next().unwrap_or_default(),
            _ => Value::Array(content),
        })
    }
}

/// One content block as tool output: text (parsed when it is JSON), or a short summary of an
/// image, audio clip or resource (their bytes are not passed on).
fn content_value(block: &Value) -> Value {
    let text = |key: &str| block.get(key).and_then(Value::as_str);
    match text("type") {
        Some("text") => {
            let t = text("text").unwrap_or_default();
            serde_json::from_str::<Value>(t).unwrap_or_else(|_| Value::String(t.to_owned()))
        }
        Some(kind @ ("image" | "audio")) => json!({
            "type": kind,
            "mime_type": text("mimeType"),
            "base64_chars": text("data").map_or(0, str::len),
        }),
        Some("resource") => {
            let resource = block.get("resource").cloned().unwrap_or_default();
            let mut summary = json!({"type": "resource", "uri": resource.get("uri")});
            if let Some(t) = resource.get("text") {
                summary["text"] = t.clone();
            }
            summary
        }
        Some("resource_link") => json!({
            "type": "resource_link",
            "uri": block.get("uri"),
            "name": block.get("name"),
        }),
        _ => json!({"type": text("type")}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_references_are_expanded_or_named() {
        // PATH is set for every test process.
        let path = std::env::var("PATH").unwrap();
        assert_eq!(expand_env("x${PATH}y").unwrap(), format!("x{path}y"));
        assert_eq!(expand_env("plain").unwrap(), "plain");
        let err = expand_env("Bearer ${ORCA_TEST_SURELY_UNSET_VAR}").unwrap_err();
        assert!(
            err.to_string().contains("ORCA_TEST_SURELY_UNSET_VAR"),
            "{err}"
        );
        assert!(expand_env("${OPEN").is_err());
    }

    #[test]
    fn content_blocks_become_values() {
        assert_eq!(
            content_value(&json!({"type": "text", "text": "hi"})),
            json!("hi")
        );
        assert_eq!(
            content_value(&json!({"type": "text", "text": "{\"a\": 1}"})),
            json!({"a": 1})
        );
        assert_eq!(
            content_value(&json!({"type": "image", "data": "AAAA", "mimeType": "image/png"})),
            json!({"type": "image", "mime_type": "image/png", "base64_chars": 4})
        );
        assert_eq!(
            content_value(
                &json!({"type": "resource", "resource": {"uri": "file:///a", "text": "x"}})
            ),
            json!({"type": "resource", "uri": "file:///a", "text": "x"})
        );
    }

    #[test]
    fn entries_are_checked_before_connecting() {
        let entry = |name: &str, command: &str, url: &str| McpServerConfig {
            name: name.into(),
            command: command.into(),
            url: url.into(),
            ..Default::default()
        };
        assert!(check_entry(&entry("files", "server", "")).is_ok());
        assert!(check_entry(&entry("web2", "", "http://127.0.0.1:1/mcp")).is_ok());
        for (bad, why) in [
            (entry("Files", "server", ""), "lowercase"),
            (entry("a.b", "server", ""), "lowercase"),
            (entry("files", "", ""), "set `command`"),
            (entry("files", "server", "http://x"), "not both"),
        ] {
            let err = check_entry(&bad).unwrap_err().to_string();
            assert!(err.contains(why), "{err}");
        }
    }
}
