//! A named LLM function as a tenant declares it (`PUT /v1/functions/{name}`): plain data, kept
//! in a run's spec (`RunSpec::declared_functions`) and stored as a versioned definition. Its
//! checks and compiling it into a callable function are `functions`'.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// A function a tenant declares through the API (`PUT /v1/functions/{name}`): the members of a
/// configured `[functions.NAME]`, with its name. Stored (and copied into a run) as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FunctionSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The system message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The user message: a `{{ }}` template over `input` (the call's arguments). Required
    /// (its absence is told at `/prompt` with the other problems).
    #[serde(default)]
    pub prompt: String,
    /// A configured model alias; the run's model when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// When present, the answer must be JSON valid against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<Value>,
}
