//! The OpenAPI document: what `utoipa` derives from the handlers (`#[utoipa::path]`) and the
//! types (`ToSchema`), with the request body of `POST /v1/runs` described by the JSON Schema
//! the server validates it with (`schemas/RunRequest.schema.json`, embedded under
//! `components/schemas`). `GET /openapi.json` serves this document and `orca openapi` prints
//! it (the repository's `openapi.yaml`).

use serde_json::{Value, json};
use utoipa::PartialSchema;

use super::registry::RegistryName;
use super::workflows::WORKFLOW_NOTE;

/// The shipped JSON Schemas embedded whole, by the component name they get in the document
/// (in place of what the derive says of the type of that name). The plan and workflow schemas
/// are not: they describe a graph whose rules (known step ids, no cycles, references, CEL,
/// tool arguments) no JSON Schema can state, and they are large enough to slow a fuzzer's
/// generation to a crawl. The document names them instead.
const SCHEMAS: [(&str, &str); 1] = [(
    "RunRequest",
    include_str!("../../schemas/RunRequest.schema.json"),
)];

/// What a plan is, for the document.
const PLAN_NOTE: &str = "An AgentPlan (schemas/AgentPlan.schema.json in the repository), \
    validated in full: any problem is a 422 listing every one with a JSON Pointer. Steps of \
    kind `agent` (a turn, or a hub with `spokes`), `handoff`, `group_chat` and `workflow` run \
    teams; the plan's `agents` (name -> Agent), `workflows` (name -> FixedWorkflow) and \
    run-wide `middleware` define them, and registered agents and workflows the steps name are \
    copied in when the run is created.";

/// The document as JSON.
pub fn document() -> Value {
    let mut doc = serde_json::to_value(<super::ApiDoc as utoipa::OpenApi>::openapi())
        .expect("the derived OpenAPI document serialises");
    for (name, text) in SCHEMAS {
        embed(&mut doc, name, text);
    }
    name_plan_and_workflow(&mut doc);
    doc
}

/// The document as YAML (the repository's `openapi.yaml`).
pub fn yaml() -> String {
    yaml_serde::to_string(&document()).expect("a JSON value serialises as YAML")
}

/// Puts a shipped schema under `components/schemas/NAME`, its `$defs` beside it as
/// `NAME_DEF`, with every `$ref` rewritten to point inside the document. Keywords only orca's
/// validator reads (`errorMessage`) and the standalone-file ones (`$schema`, `$id`) go.
fn embed(doc: &mut Value, name: &str, text: &str) {
    let mut schema: Value = serde_json::from_str(text).expect("shipped schema is JSON");
    let defs = schema
        .as_object_mut()
        .and_then(|o| o.remove("$defs"))
        .and_then(|d| match d {
            Value::Object(m) => Some(m),
            _ => None,
        })
        .unwrap_or_default();
    let components = &mut doc["components"]["schemas"];
    for (def, mut value) in defs {
        clean(&mut value, name);
        components[format!("{name}_{def}")] = value;
    }
    clean(&mut schema, name);
    if let Some(o) = schema.as_object_mut() {
        o.remove("$schema");
        o.remove("$id");
    }
    components[name] = schema;
}

/// Rewrites references of a schema of component `owner` and drops orca-only keywords.
fn clean(value: &mut Value, owner: &str) {
    match value {
        Value::Object(map) => {
            map.remove("errorMessage");
            if let Some(Value::String(r)) = map.get_mut("$ref") {
                *r = rewrite_ref(r, owner);
            }
            for v in map.values_mut() {
                clean(v, owner);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| clean(v, owner)),
        _ => {}
    }
}

/// `#/$defs/step` of AgentPlan → `#/components/schemas/AgentPlan_step`;
/// `AgentPlan.schema.json#/properties/id` → `#/components/schemas/AgentPlan/properties/id`.
fn rewrite_ref(r: &str, owner: &str) -> String {
    let (file, pointer) = r.split_once('#').unwrap_or((r, ""));
    let target = match file.strip_suffix(".schema.json") {
        Some(other) if !other.is_empty() => other,
        _ => owner,
    };
    match pointer
        .strip_prefix("/$defs/")
        .map(|rest| rest.split_once('/').unwrap_or((rest, "")))
    {
        Some((def, rest)) => {
            let sep = if rest.is_empty() { "" } else { "/" };
            format!("#/components/schemas/{target}_{def}{sep}{rest}")
        }
        None => format!("#/components/schemas/{target}{pointer}"),
    }
}

/// The embedded `RunRequest` says what `plan` and `workflow` are. The shipped schema leaves
/// them loose (`object`, `string | object`): the engine checks them and locates every problem,
/// and no derive reaches into an embedded schema.
fn name_plan_and_workflow(doc: &mut Value) {
    let name = serde_json::to_value(RegistryName::schema()).expect("a schema serialises");
    let properties = &mut doc["components"]["schemas"]["RunRequest"]["properties"];
    properties["plan"] = json!({ "type": "object", "description": PLAN_NOTE });
    properties["workflow"] = json!({
        "description": "A registered workflow's name, or an inline workflow (`fixed` or `auto`).",
        "anyOf": [name, { "type": "object", "description": WORKFLOW_NOTE }]
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_point_inside_the_document() {
        fn refs(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(r)) = m.get("$ref") {
                        out.push(r.clone());
                    }
                    m.values().for_each(|v| refs(v, out));
                }
                Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
                _ => {}
            }
        }
        let doc = document();
        let mut all = Vec::new();
        refs(&doc, &mut all);
        assert!(!all.is_empty());
        for r in all {
            let pointer = r.strip_prefix('#').expect("local reference");
            assert!(doc.pointer(pointer).is_some(), "dangling {r}");
        }
    }

    #[test]
    fn refs_are_rewritten() {
        assert_eq!(
            rewrite_ref("#/$defs/step", "AgentPlan"),
            "#/components/schemas/AgentPlan_step"
        );
        assert_eq!(
            rewrite_ref("AgentPlan.schema.json#/properties/id", "FixedWorkflow"),
            "#/components/schemas/AgentPlan/properties/id"
        );
        assert_eq!(
            rewrite_ref("AgentPlan.schema.json#/$defs/settings", "FixedWorkflow"),
            "#/components/schemas/AgentPlan_settings"
        );
    }
}
