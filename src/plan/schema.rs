//! The shipped JSON Schemas of plans and workflows (`schemas/*.schema.json`, embedded in the
//! binary), compiled once, and the translation of their errors into [`Problem`]s.
//!
//! Owns the messages users read for shape errors. It must not check meaning (ids, references,
//! tools): [`super::validate`] does that.

use std::sync::LazyLock;

use jsonschema::{Retrieve, Uri, ValidationError};
use serde_json::Value;

use crate::schema::ShippedSchema;

use super::Problem;

/// `schemas/AgentPlan.schema.json`.
pub const AGENT_PLAN_SCHEMA: &str = include_str!("../../schemas/AgentPlan.schema.json");
/// `schemas/FixedWorkflow.schema.json`.
pub const FIXED_WORKFLOW_SCHEMA: &str = include_str!("../../schemas/FixedWorkflow.schema.json");
/// `schemas/OrchestrationType.schema.json`: what the LLM selector must answer.
pub const ORCHESTRATION_TYPE_SCHEMA: &str =
    include_str!("../../schemas/OrchestrationType.schema.json");

const AGENT_PLAN_ID: &str = "https://orca.dev/schemas/AgentPlan.schema.json";
const FIXED_WORKFLOW_ID: &str = "https://orca.dev/schemas/FixedWorkflow.schema.json";

fn parse(text: &str) -> Value {
    // The schemas are part of the binary and the tests compile them: a failure is a build
    // defect, found by the first test, never by a user.
    serde_json::from_str(text).expect("shipped schema is JSON")
}

/// What the re-planner answers: the strategy it used, why, and the new plan (an AgentPlan,
/// its schema embedded so a provider can hold the model to it); `plan` may be left out for
/// `retry` and `restore`, which name no new plan.
pub fn replan_schema() -> Value {
    let mut plan = parse(AGENT_PLAN_SCHEMA);
    let mut defs = serde_json::Map::new();
    if let Value::Object(map) = &mut plan {
        if let Some(Value::Object(own)) = map.remove("$defs") {
            defs = own;
        }
        for key in ["$schema", "$id", "$comment"] {
            map.remove(key);
        }
    }
    defs.insert("agentPlan".into(), plan);
    serde_json::json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["strategy", "reason", "completes_task"],
        "properties": {
            "strategy": { "enum": ["retry", "alternative", "partial", "complete", "restore"] },
            "reason": { "type": "string" },
            "completes_task": {
                "type": "boolean",
                "description": "true when the new plan still does the whole task; false when it does only part of it or only says what could not be done"
            },
            "restore_version": { "type": "integer", "minimum": 1 },
            "plan": { "$ref": "#/$defs/agentPlan" }
        },
        "$defs": defs,
    })
}

/// Serves the workflow schema's `$ref`s to the plan schema from the binary, never the network.
struct ShippedRetriever;

impl Retrieve for ShippedRetriever {
    fn retrieve(
        &self,
        uri: &Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        if uri.as_str().trim_end_matches('#') == AGENT_PLAN_ID {
            Ok(AGENT_PLAN.document.clone())
        } else {
            Err(format!("`{uri}` is not a schema shipped with orca").into())
        }
    }
}

pub(crate) static AGENT_PLAN: LazyLock<ShippedSchema> = LazyLock::new(|| {
    let document = parse(AGENT_PLAN_SCHEMA);
    let validator = jsonschema::draft202012::new(&document).expect("AgentPlan schema compiles");
    ShippedSchema {
        document,
        validator,
    }
});

pub(crate) static FIXED_WORKFLOW: LazyLock<ShippedSchema> = LazyLock::new(|| {
    let document = parse(FIXED_WORKFLOW_SCHEMA);
    let validator = jsonschema::draft202012::options()
        .with_retriever(ShippedRetriever)
        .build(&document)
        .expect("FixedWorkflow schema compiles");
    ShippedSchema {
        document,
        validator,
    }
});

/// Every schema error of `value`, each with the pointer of the offending member.
pub(crate) fn problems(shipped: &ShippedSchema, value: &Value) -> Vec<Problem> {
    crate::schema::member_violations(shipped, value, custom_message)
        .into_iter()
        .map(|v| Problem::new(v.pointer, v.message))
        .collect()
}

/// The `errorMessage` the schema gives for the failed keyword, if any: the schemas carry an
/// object `{keyword: message}` next to keywords whose default message would not help (`oneOf`
/// says which alternatives failed, not that exactly one of two members is needed).
fn custom_message(err: &ValidationError<'_>) -> Option<String> {
    let location = err.absolute_keyword_location()?;
    let (base, fragment) = location.as_str().split_once('#')?;
    let document = match base {
        AGENT_PLAN_ID => &AGENT_PLAN.document,
        FIXED_WORKFLOW_ID => &FIXED_WORKFLOW.document,
        _ => return None,
    };
    let (parent, keyword) = fragment.rsplit_once('/')?;
    let node = document.pointer(parent)?;
    let message = node.get("errorMessage")?.get(keyword)?.as_str()?;
    Some(format!("{message}{}", nearest_allowed(err, node, keyword)))
}

/// For an `enum` the value missed by a little (`tol`): `; did you mean `tool`?`, else nothing.
/// The custom messages list the values already; what they cannot say is which one was meant.
fn nearest_allowed(err: &ValidationError<'_>, node: &Value, keyword: &str) -> String {
    let (Some(wrong), Some(allowed)) = (err.instance().as_str(), node["enum"].as_array()) else {
        return String::new();
    };
    if keyword != "enum" {
        return String::new();
    }
    let allowed = allowed.iter().filter_map(Value::as_str);
    crate::suggest::nearest(wrong, allowed).map_or_else(String::new, |near| {
        format!("; `{wrong}`: did you mean `{near}`?")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_schemas_compile_and_describe_every_property() {
        fn check_descriptions(v: &Value, path: &str) {
            if let Some(props) = v.get("properties").and_then(Value::as_object) {
                for (name, spec) in props {
                    assert!(
                        spec.get("description")
                            .and_then(Value::as_str)
                            .is_some_and(|d| !d.is_empty()),
                        "{path}/properties/{name} has no description"
                    );
                }
            }
            match v {
                Value::Object(map) => {
                    for (k, child) in map {
                        // `if`/`then` only re-type properties documented where they are declared.
                        if k != "if" && k != "then" {
                            check_descriptions(child, &format!("{path}/{k}"));
                        }
                    }
                }
                Value::Array(items) => {
                    for (i, child) in items.iter().enumerate() {
                        check_descriptions(child, &format!("{path}/{i}"));
                    }
                }
                _ => {}
            }
        }
        for text in [
            AGENT_PLAN_SCHEMA,
            FIXED_WORKFLOW_SCHEMA,
            ORCHESTRATION_TYPE_SCHEMA,
        ] {
            let doc = parse(text);
            assert!(jsonschema::draft202012::meta::is_valid(&doc));
            check_descriptions(&doc, "");
        }
        let _ = &AGENT_PLAN.validator;
        let _ = &FIXED_WORKFLOW.validator;
        let selector = jsonschema::validator_for(&parse(ORCHESTRATION_TYPE_SCHEMA)).unwrap();
        assert!(selector.is_valid(&serde_json::json!({"orchestrationType": "planner"})));
        assert!(!selector.is_valid(&serde_json::json!({"orchestrationType": "auto"})));
    }
}
