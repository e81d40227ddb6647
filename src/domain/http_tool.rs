//! An HTTP tool as declared (`[[tools.http]]` or `PUT /v1/tools/{name}`): plain data, kept in
//! a run's spec (`RunSpec::declared_tools`) and the config. Its checks and the callable tool
//! built from it are `tools::http`'s.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One declared HTTP tool (`schemas/HttpTool.schema.json` says the same for users).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_method")]
    pub method: String,
    /// `https://api.example.com/v1/weather/{city}?units={units}`: placeholders name arguments
    /// and are percent-encoded; none may sit in the scheme, host or port.
    pub url: String,
    /// Header values may hold `${ENV_NAME}`, read when the tool is called.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default = "default_schema")]
    pub input_schema: Value,
    #[serde(default = "default_max_bytes")]
    pub max_response_bytes: u64,
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
}

fn default_method() -> String {
    "GET".into()
}
fn default_schema() -> Value {
    json!({"type": "object", "properties": {}})
}
fn default_max_bytes() -> u64 {
    1024 * 1024
}
fn default_timeout() -> u64 {
    10_000
}
