//! A small MCP server for trying `[[tools.mcp]]` and for orca's MCP tests.
//!
//! ```text
//! cargo run --example mcp_server                                # stdio
//! cargo run --example mcp_server -- --http 127.0.0.1:8090 [--token SECRET]
//! ```
//!
//! Over HTTP it prints its endpoint (`http://ADDR/mcp`) on the first line of standard output,
//! and with `--token` it answers 401 to requests without `Authorization: Bearer SECRET`. It
//! stops when its standard input closes. `--bad-schema` adds a tool whose input schema is not
//! valid JSON Schema. With `MCP_SERVER_PID_FILE` set, it writes its process id there first.
//!
//! Tools (listed two per page, to exercise pagination): `add` (structured result), `echo`
//! (text, parsed by orca when it is JSON), `text/upper`, `fail` (`isError: true`) and `slow`
//! (answers only when cancelled).

use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};

#[derive(Clone, Default)]
struct Demo {
    bad_schema: bool,
}

const PAGE: usize = 2;

impl Demo {
    fn tools(&self) -> Vec<Value> {
        let text_arg = json!({
            "type": "object",
            "properties": {"text": {"type": "string", "description": "Any text."}},
            "required": ["text"],
            "additionalProperties": false
        });
        let mut tools = vec![
            json!({"name": "add", "description": "Adds two numbers; the sum comes back structured.",
                "inputSchema": {"type": "object", "properties": {
                    "a": {"type": "number"}, "b": {"type": "number"}},
                    "required": ["a", "b"], "additionalProperties": false}}),
            json!({"name": "echo", "description": "Answers the text it was given.",
                "inputSchema": text_arg}),
            json!({"name": "text/upper", "description": "Answers the text in capitals.",
                "inputSchema": text_arg}),
            json!({"name": "fail", "description": "Always fails (isError).",
                "inputSchema": {"type": "object"}}),
            json!({"name": "slow", "description": "Answers only once the call is cancelled.",
                "inputSchema": {"type": "object"}}),
        ];
        if self.bad_schema {
            tools.push(json!({"name": "broken", "inputSchema": {"type": "objekt"}}));
        }
        tools
    }

    async fn run(&self, name: &str, args: &Value, ctx: &RequestContext<RoleServer>) -> Value {
        let text = args["text"].as_str().unwrap_or_default();
        match name {
            "add" => {
                let sum = args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0);
                json!({"content": [{"type": "text", "text": format!("{sum}")}],
                    "structuredContent": {"sum": sum}})
            }
            "echo" => json!({"content": [{"type": "text", "text": text}]}),
            "text/upper" => json!({"content": [{"type": "text", "text": text.to_uppercase()}]}),
            "fail" => json!({"content": [{"type": "text", "text": "the tool failed on purpose"}],
                "isError": true}),
            "slow" => {
                eprintln!("slow: started");
                ctx.ct.cancelled().await;
                eprintln!("slow: cancelled");
                json!({"content": [{"type": "text", "text": "cancelled"}], "isError": true})
            }
            _ => json!({"content": [{"type": "text", "text": format!("no tool {name}")}],
                "isError": true}),
        }
    }
}

impl ServerHandler for Demo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let start: usize = request
            .and_then(|r| r.cursor)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let tools = self.tools();
        let end = (start + PAGE).min(tools.len());
        let mut page = json!({"tools": tools[start..end]});
        if end < tools.len() {
            page["nextCursor"] = json!(end.to_string());
        }
        serde_json::from_value(page).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        let result = self.run(&request.name, &args, &ctx).await;
        let result: CallToolResult = serde_json::from_value(result)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(CallToolResponse::Complete(result))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value_of = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
    };
    // For tests that check the process is stopped with orca.
    if let Ok(path) = std::env::var("MCP_SERVER_PID_FILE") {
        std::fs::write(path, std::process::id().to_string())?;
    }
    let demo = Demo {
        bad_schema: args.iter().any(|a| a == "--bad-schema"),
    };
    match value_of("--http") {
        None => {
            let service = demo.serve(rmcp::transport::stdio()).await?;
            service.waiting().await?;
        }
        Some(addr) => serve_http(demo, &addr, value_of("--token")).await?,
    }
    Ok(())
}

async fn serve_http(demo: Demo, addr: &str, token: Option<String>) -> anyhow::Result<()> {
    let service = StreamableHttpService::new(
        move || Ok(demo.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let wanted = token.map(|t| format!("Bearer {t}"));
    let check = move |request: Request, next: Next| {
        let wanted = wanted.clone();
        async move {
            let given = request.headers().get("authorization");
            match &wanted {
                Some(w) if given.and_then(|v| v.to_str().ok()) != Some(w.as_str()) => {
                    Response::builder()
                        .status(StatusCode::UNAUTHORIZED)
                        .body(axum::body::Body::empty())
                        .expect("a static response")
                }
                _ => next.run(request).await,
            }
        }
    };
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(check));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("http://{}/mcp", listener.local_addr()?);
    // Stop when whoever started the server goes away (its end of standard input closes).
    let stdin_closed = async {
        let mut sink = tokio::io::sink();
        let _ = tokio::io::copy(&mut tokio::io::stdin(), &mut sink).await;
    };
    axum::serve(listener, router)
        .with_graceful_shutdown(stdin_closed)
        .await?;
    Ok(())
}
