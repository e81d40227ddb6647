//! The OpenAPI document: what `utoipa` derives from the handlers and types, completed with what
//! it cannot say, so that the document and the server agree. The request bodies are described
//! by the JSON Schemas the server validates them with (`schemas/`, embedded under
//! `components/schemas`), values that may be any JSON are left untyped, and bounds the handlers
//! enforce by hand are written down. `GET /openapi.json` serves this document and
//! `orca openapi` prints it (the repository's `openapi.yaml`).

use serde_json::{Value, json};

/// The shipped JSON Schemas embedded whole, by the component name they get in the document.
/// The plan and workflow schemas are not: they describe a graph whose rules (known step ids,
/// no cycles, references, CEL, tool arguments) no JSON Schema can state, and they are large
/// enough to slow a fuzzer's generation to a crawl. The document names them instead.
const SCHEMAS: [(&str, &str); 1] = [(
    "RunRequest",
    include_str!("../../schemas/RunRequest.schema.json"),
)];

/// What a plan or workflow body is, for the document.
const PLAN_NOTE: &str = "An AgentPlan (schemas/AgentPlan.schema.json in the repository), \
    validated in full: any problem is a 422 listing every one with a JSON Pointer. Steps of \
    kind `agent` (a turn, or a hub with `spokes`), `handoff`, `group_chat` and `workflow` run \
    teams; the plan's `agents` (name -> Agent), `workflows` (name -> FixedWorkflow) and \
    run-wide `middleware` define them, and registered agents and workflows the steps name are \
    copied in when the run is created.";
const WORKFLOW_NOTE: &str = "A FixedWorkflow (schemas/FixedWorkflow.schema.json in the \
    repository); `name`, when given, must be the path's name. Validated in full: any problem \
    is a 422 listing every one with a JSON Pointer.";

const AGENT_NOTE: &str = "An Agent (schemas/Agent.schema.json in the repository: handoffs \
    are agent names or {to, context: inherit|summarize|isolate|last_n, last_n}, middleware are \
    built-in names (retry, audit_log, guardrail, rate_limit, response_cache, tool_approval) or \
    {name, config}; `kind: workflow` makes a registered workflow act as the agent); \
    `name`, when given, must be the path's name. Validated in full: any problem is a 422 \
    listing every one with a JSON Pointer.";

/// A workflow name, as the registry and the path parameter accept it.
fn workflow_name() -> Value {
    json!({
        "type": "string",
        "pattern": "^[a-z0-9][a-z0-9_.-]{0,63}$",
        "description": "1-64 of lowercase letters, digits, `_`, `.`, `-`, starting with a letter or digit"
    })
}

/// The document as JSON.
pub fn document() -> Value {
    let mut doc = serde_json::to_value(<super::ApiDoc as utoipa::OpenApi>::openapi())
        .expect("the derived OpenAPI document serialises");
    for (name, text) in SCHEMAS {
        embed(&mut doc, name, text);
    }
    complete(&mut doc);
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

fn problem_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {
            "application/problem+json": {
                "schema": { "$ref": "#/components/schemas/Problem" }
            }
        }
    })
}

/// Adds a response to an operation unless it documents that status already.
fn add_response(doc: &mut Value, path: &str, method: &str, status: &str, response: Value) {
    let responses = &mut doc["paths"][path][method]["responses"];
    if responses.get(status).is_none() {
        responses[status] = response;
    }
}

/// Replaces (or creates) the member at a JSON Pointer into the document.
fn set(doc: &mut Value, pointer: &str, value: Value) {
    let (parent, key) = pointer.rsplit_once('/').expect("a pointer with a member");
    let parent = doc
        .pointer_mut(parent)
        .unwrap_or_else(|| panic!("the OpenAPI document has {parent}"));
    parent[unescape(key)] = value;
}

fn unescape(key: &str) -> String {
    key.replace("~1", "/").replace("~0", "~")
}

/// Sets a parameter's schema, found by name, in an operation.
fn param_schema(doc: &mut Value, path: &str, method: &str, name: &str, schema: Value) {
    let params = doc["paths"][path][method]["parameters"]
        .as_array_mut()
        .unwrap_or_else(|| panic!("{method} {path} has parameters"));
    let param = params
        .iter_mut()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{method} {path} has parameter {name}"));
    param["schema"] = schema;
}

/// What the derived document gets wrong or leaves out.
fn complete(doc: &mut Value) {
    complete_schemas(doc);
    complete_parameters(doc);
    complete_responses(doc);
}

/// Component schemas and request bodies: what the derived ones cannot say.
fn complete_schemas(doc: &mut Value) {
    let any = || json!({});
    let schemas = "/components/schemas";
    // Values that are any JSON: run input (a string or an object), outputs, answers.
    set(
        doc,
        &format!("{schemas}/Run/properties/input"),
        json!({ "type": ["string", "object"], "description": "The run's input as given." }),
    );
    set(
        doc,
        &format!("{schemas}/Run/properties/output"),
        json!({ "description": "Any JSON value: the run's output; null until it ends." }),
    );
    for member in ["input", "output"] {
        set(
            doc,
            &format!("{schemas}/StepAttempt/properties/{member}"),
            any(),
        );
    }
    // A run's request is a run request, in the schema the server checked it with.
    set(
        doc,
        &format!("{schemas}/RunDetail/allOf/1/properties/request"),
        json!({
            "$ref": "#/components/schemas/RunRequest",
            "description": "The body of `POST /v1/runs` that started the run, as accepted: what was given, with the orchestration as requested and a workflow by its name; posting it again starts the same run anew."
        }),
    );

    // Request bodies: the schemas the server validates with.
    set(
        doc,
        "/paths/~1v1~1runs/post/requestBody/content/application~1json/schema",
        json!({ "$ref": "#/components/schemas/RunRequest" }),
    );
    set(
        doc,
        &format!("{schemas}/RunRequest/properties/plan"),
        json!({ "type": "object", "description": PLAN_NOTE }),
    );
    set(
        doc,
        &format!("{schemas}/RunRequest/properties/workflow"),
        json!({
            "description": "A registered workflow's name, or an inline workflow (`fixed` or `auto`).",
            "anyOf": [workflow_name(), { "type": "object", "description": WORKFLOW_NOTE }]
        }),
    );
    set(
        doc,
        "/paths/~1v1~1workflows~1{name}/put/requestBody/content/application~1json/schema",
        json!({
            "type": "object",
            "description": WORKFLOW_NOTE,
            "required": ["steps"],
            "properties": {
                "name": workflow_name(),
                "steps": { "type": "array", "minItems": 1, "maxItems": 500, "items": { "type": "object" } }
            }
        }),
    );
    set(
        doc,
        "/paths/~1v1~1agents~1{name}/put/requestBody/content/application~1json/schema",
        json!({
            "type": "object",
            "description": AGENT_NOTE,
            "required": ["instructions"],
            "properties": {
                "name": workflow_name(),
                "description": { "type": "string", "maxLength": 4000 },
                "instructions": { "type": "string", "minLength": 1, "maxLength": 32768 },
                "model": { "type": "string", "minLength": 1 },
                "tools": { "type": "array", "items": { "type": "string" }, "maxItems": 128 },
                "output_schema": { "type": "object" },
                "handoffs": { "type": "array", "maxItems": 64 },
                "middleware": { "type": "array", "maxItems": 32 },
                "metadata": { "type": "object" }
            }
        }),
    );
    set(
        doc,
        &format!("{schemas}/InputAnswer/properties/step_id"),
        json!({ "type": "string", "minLength": 1, "description": "The step_id of the input_required event." }),
    );
    set(
        doc,
        &format!("{schemas}/InputAnswer/properties/value"),
        json!({ "description": "Any JSON value; the step's schema, when it has one, decides." }),
    );

    // The derived body type, replaced by RunRequest above.
    if let Some(components) = doc["components"]["schemas"].as_object_mut() {
        components.remove("CreateRun");
    }
}

/// Parameters: the bounds the handlers check.
fn complete_parameters(doc: &mut Value) {
    let name = workflow_name();
    for method in ["get", "put", "delete"] {
        param_schema(doc, "/v1/workflows/{name}", method, "name", name.clone());
        param_schema(doc, "/v1/agents/{name}", method, "name", name.clone());
    }
    param_schema(
        doc,
        "/v1/runs",
        "post",
        "Idempotency-Key",
        json!({ "type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$" }),
    );
    for name in ["after", "Last-Event-ID"] {
        param_schema(
            doc,
            "/v1/runs/{id}/events",
            "get",
            name,
            json!({ "type": "integer", "minimum": 0, "maximum": u64::MAX }),
        );
    }
    // A checkpoint id past every stored one is an empty page, never an error.
    param_schema(
        doc,
        "/v1/runs/{id}/checkpoints",
        "get",
        "after",
        json!({ "type": "integer", "minimum": 0, "maximum": u64::MAX }),
    );
    // The handler refuses a NUL (PostgreSQL text cannot hold one) as it refuses a long `q`.
    param_schema(
        doc,
        "/v1/runs",
        "get",
        "q",
        json!({ "type": "string", "maxLength": 200, "pattern": "^[^\\u0000]*$" }),
    );
    param_schema(
        doc,
        "/v1/runs",
        "get",
        "cursor",
        json!({ "type": "string", "format": "uuid", "description": "`next_cursor` of the previous page" }),
    );
}

/// Responses every operation can give, event streams, and the document's description.
fn complete_responses(doc: &mut Value) {
    // Every operation can answer 405 for other methods; bodies add 400, 413, 415.
    let body_ops = [
        ("/v1/runs", "post"),
        ("/v1/runs/{id}/input", "post"),
        ("/v1/runs/{id}/replan", "post"),
        ("/v1/workflows/{name}", "put"),
        ("/v1/agui", "post"),
        ("/v1/tools/{name}", "put"),
    ];
    for (path, method) in body_ops {
        add_response(doc, path, method, "400", problem_response("Malformed JSON"));
        add_response(
            doc,
            path,
            method,
            "413",
            problem_response("The body is larger than server.body_limit_bytes"),
        );
        add_response(
            doc,
            path,
            method,
            "415",
            problem_response("The body was not sent as application/json"),
        );
        add_response(
            doc,
            path,
            method,
            "422",
            problem_response("Invalid request"),
        );
    }
    add_response(
        doc,
        "/v1/runs",
        "post",
        "422",
        problem_response("Invalid request, or an Idempotency-Key reused with another body"),
    );
    for (path, method) in [("/v1/runs", "get"), ("/v1/runs/{id}/events", "get")] {
        add_response(
            doc,
            path,
            method,
            "422",
            problem_response("A parameter is invalid or given twice"),
        );
    }

    // Event streams: SSE unless JSON is asked for.
    let events_ok = &mut doc["paths"]["/v1/runs/{id}/events"]["get"]["responses"]["200"];
    let json_schema = events_ok["content"]["application/json"]["schema"].clone();
    events_ok["content"] = json!({
        "text/event-stream": { "schema": { "type": "string", "description": "Server-Sent Events" } },
        "application/json": { "schema": json_schema }
    });
    let created = &mut doc["paths"]["/v1/runs"]["post"]["responses"]["200"];
    let run = created["content"]["application/json"]["schema"].clone();
    created["content"] = json!({
        "application/json": { "schema": run },
        "text/event-stream": { "schema": { "type": "string", "description": "Server-Sent Events" } }
    });

    let info = doc["info"].as_object_mut().expect("info");
    info.insert(
        "description".into(),
        Value::String(
            "HTTP streaming orchestration service for LLM agents. Every 4xx/5xx is \
             application/problem+json with a stable `code`; a method a path does not have is 405 \
             `method_not_allowed` with an `Allow` header."
                .into(),
        ),
    );
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
