//! What plan validation asks of the server a plan will run on: which tools exist (and whether
//! literal arguments fit them), which LLM functions, which model aliases.
//!
//! Plans sit below the modules that own those names (`tools`, `functions`, `llm`), so they
//! ask through these traits and never see a registry: `ToolRegistry` implements
//! [`KnownTools`], `FunctionRegistry` [`KnownFunctions`] and `LlmRouter` [`KnownModels`],
//! each next to its own type, and callers hand validation a [`Catalog`] of references.

use serde_json::Value;

use crate::schema::SchemaViolation;

/// The tools a plan's `tool` steps and an agent's `tools` may name.
pub trait KnownTools {
    fn has_tool(&self, name: &str) -> bool;

    /// Every tool's name, sorted, for "known tools: …".
    fn tool_names(&self) -> Vec<String>;

    /// How literal `arguments` break tool `name`'s input schema, located by JSON Pointer into
    /// the arguments; none when they fit (or when no tool has that name).
    fn argument_problems(&self, name: &str, arguments: &Value) -> Vec<SchemaViolation>;
}

/// The named LLM functions an `llm` step may call.
pub trait KnownFunctions {
    fn has_function(&self, name: &str) -> bool;

    /// Every function's name, for "known functions: …".
    fn function_names(&self) -> Vec<String>;
}

/// The model aliases an agent may name.
pub trait KnownModels {
    fn has_model(&self, alias: &str) -> bool;
}

/// The names a plan may use: this server's tools and, when given, its LLM functions (without
/// them, a step calling a function is a problem) and model aliases (without them, any alias).
#[derive(Clone, Copy)]
pub struct Catalog<'a> {
    pub tools: &'a dyn KnownTools,
    pub functions: Option<&'a dyn KnownFunctions>,
    /// The model aliases agents may name; any alias when `None`.
    pub models: Option<&'a dyn KnownModels>,
    /// The agents registered outside the plan (the tenant's own and shared ones), only to
    /// offer the nearest for an agent the plan does not know: the ones a plan names are copied
    /// into it before it is validated (`crate::agents::resolve_references`).
    pub registered_agents: &'a [String],
}

impl Catalog<'_> {
    /// Whether an agent may name model `alias`.
    pub fn has_model(&self, alias: &str) -> bool {
        self.models.is_none_or(|m| m.has_model(alias))
    }
}

/// Tools alone: no functions, any model alias.
impl<'a, T: KnownTools> From<&'a T> for Catalog<'a> {
    fn from(tools: &'a T) -> Self {
        Catalog {
            tools,
            functions: None,
            models: None,
            registered_agents: &[],
        }
    }
}

/// Stand-ins for the built-in tools (`clock.now`, `fs.read`, `math.calculate`: their names
/// and input schemas), for tests in `plan`, which may not reach up to `tools`.
#[cfg(test)]
pub(crate) mod fake {
    use serde_json::{Value, json};

    use super::KnownTools;
    use crate::plan::JsonSchema;
    use crate::schema::{SchemaViolation, json_type_name};

    pub(crate) struct BuiltinTools(Vec<(&'static str, JsonSchema)>);

    impl BuiltinTools {
        pub(crate) fn new() -> BuiltinTools {
            let string = json!({"type": "string", "minLength": 1});
            let schemas = [
                ("clock.now", json!({"timezone": string}), json!([])),
                (
                    "fs.read",
                    json!({"path": string, "max_bytes": {"type": "integer", "minimum": 1}}),
                    json!(["path"]),
                ),
                (
                    "math.calculate",
                    json!({"expression": string}),
                    json!(["expression"]),
                ),
            ];
            BuiltinTools(
                schemas
                    .into_iter()
                    .map(|(name, properties, required)| {
                        let schema = json!({"type": "object", "properties": properties,
                            "required": required, "additionalProperties": false});
                        (name, JsonSchema::compile(&schema).expect("a valid schema"))
                    })
                    .collect(),
            )
        }
    }

    impl KnownTools for BuiltinTools {
        fn has_tool(&self, name: &str) -> bool {
            self.0.iter().any(|(n, _)| *n == name)
        }

        fn tool_names(&self) -> Vec<String> {
            self.0.iter().map(|(n, _)| n.to_string()).collect()
        }

        fn argument_problems(&self, name: &str, arguments: &Value) -> Vec<SchemaViolation> {
            let Some((_, schema)) = self.0.iter().find(|(n, _)| *n == name) else {
                return Vec::new();
            };
            if !arguments.is_object() {
                return vec![SchemaViolation {
                    pointer: String::new(),
                    message: format!(
                        "arguments must be a JSON object, got {}",
                        json_type_name(arguments)
                    ),
                }];
            }
            schema.check(arguments)
        }
    }
}
