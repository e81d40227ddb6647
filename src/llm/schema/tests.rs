use serde_json::{Value, json};

use super::*;

/// Problems that put `schema` outside OpenAI's strict subset, as its Structured Outputs guide
/// states it: an object root (not `anyOf`), closed objects listing every property in
/// `required`, `anyOf` as the only composition, the listed keywords and formats only, local
/// `$ref`s that resolve.
fn strict_problems(schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if schema.get("type") != Some(&json!("object")) || schema.get("anyOf").is_some() {
        problems.push("(root): must be an object, not anyOf".to_owned());
    }
    check(schema, schema, "", &mut problems);
    problems
}

fn check(root: &Value, node: &Value, at: &str, problems: &mut Vec<String>) {
    let Some(map) = node.as_object() else {
        problems.push(format!("{at}: a schema must be an object"));
        return;
    };
    for key in map.keys() {
        if !STRICT_KEYWORDS.contains(&key.as_str()) {
            problems.push(format!("{at}: `{key}` is not permitted"));
        }
    }
    if let Some(format) = map.get("format").and_then(Value::as_str)
        && !STRICT_FORMATS.contains(&format)
    {
        problems.push(format!("{at}: format `{format}` is not permitted"));
    }
    if let Some(r) = map.get("$ref").and_then(Value::as_str) {
        let target = r.strip_prefix('#').and_then(|p| root.pointer(p));
        if target.is_none() {
            problems.push(format!("{at}: $ref `{r}` does not resolve"));
        }
    }
    let is_object = match map.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
        _ => false,
    };
    if is_object {
        if map.get("additionalProperties") != Some(&json!(false)) {
            problems.push(format!("{at}: additionalProperties must be false"));
        }
        let properties = map.get("properties").and_then(Value::as_object);
        let required: Vec<&Value> = map
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .collect();
        for name in properties.into_iter().flat_map(|p| p.keys()) {
            if !required.contains(&&json!(name)) {
                problems.push(format!("{at}: `{name}` is not in required"));
            }
        }
    }
    if map.get("type") == Some(&json!("array")) && map.get("items").is_none() {
        problems.push(format!("{at}: an array needs items"));
    }
    for (name, p) in map
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        check(root, p, &format!("{at}/properties/{name}"), problems);
    }
    for (name, d) in map
        .get("$defs")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        check(root, d, &format!("{at}/$defs/{name}"), problems);
    }
    if let Some(items) = map.get("items") {
        check(root, items, &format!("{at}/items"), problems);
    }
    for (i, b) in map
        .get("anyOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        check(root, b, &format!("{at}/anyOf/{i}"), problems);
    }
}

/// `value` (valid against the full schema) as a strict model would write it against the
/// projection led by `guide`: absent optional properties as `null`, free-form values as JSON
/// text, the root wrapped. The inverse of [`Projection::restore`], for tests.
fn lift(guide: &Value, node: &Value, value: &Value) -> Value {
    let node = follow(guide, node);
    if node.get(MARK_JSON).is_some() {
        return Value::String(value.to_string());
    }
    if let Some(branches) = node.get("anyOf").and_then(Value::as_array) {
        let branch = branches
            .iter()
            .find(|b| fits_full(guide, b, value))
            .unwrap_or_else(|| panic!("no branch of {node} fits {value}"));
        return lift(guide, branch, value);
    }
    match (value, node.get("properties").and_then(Value::as_object)) {
        (Value::Object(map), Some(properties)) => {
            let mut out = Map::new();
            for (name, p) in properties {
                let v = match map.get(name) {
                    Some(v) => lift(guide, p, v),
                    None => Value::Null,
                };
                out.insert(name.clone(), v);
            }
            Value::Object(out)
        }
        (Value::Array(items), _) => {
            let schema = node.get("items").expect("items");
            Value::Array(items.iter().map(|i| lift(guide, schema, i)).collect())
        }
        _ => value.clone(),
    }
}

/// Like `fits`, but for a value in the full schema's shape (JSON text not yet written).
fn fits_full(guide: &Value, node: &Value, value: &Value) -> bool {
    let node = follow(guide, node);
    if node.get(MARK_JSON).is_some() {
        return !value.is_null();
    }
    if value.is_null() {
        return allows_null(node);
    }
    if let Some(branches) = node.get("anyOf").and_then(Value::as_array) {
        return branches.iter().any(|b| fits_full(guide, b, value));
    }
    let lifted_shape = match node.get("type") {
        Some(Value::String(t)) => of_type(value, t),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .any(|t| of_type(value, t)),
        _ => true,
    };
    if !lifted_shape {
        return false;
    }
    if let Some(values) = node.get("enum").and_then(Value::as_array)
        && !values.contains(value)
    {
        return false;
    }
    if let (Value::Object(map), Some(properties)) =
        (value, node.get("properties").and_then(Value::as_object))
    {
        return map.iter().all(|(name, v)| {
            properties.get(name).is_some_and(|p| {
                let p = follow(guide, p);
                p.get("enum").is_none() || fits_full(guide, p, v)
            })
        });
    }
    true
}

/// Projects `schema`, checks the projection is in the strict subset, then sends `value` through
/// a strict model's hands and back: the lifted answer must be valid against what was sent, and
/// restoring it must give `value` again.
fn round_trip(schema: &Value, value: &Value) -> Projection {
    let projection = Projection::new(schema, SchemaDialect::OpenAiStrict);
    let problems = strict_problems(&projection.schema);
    assert!(
        problems.is_empty(),
        "{problems:#?}\n{:#}",
        projection.schema
    );
    let guide = projection.guide.clone().expect("a guide");
    let lifted = if guide.get(MARK_WRAPPED).is_some() {
        lift(&guide, &guide, &json!({ "value": value }))
    } else {
        lift(&guide, &guide, value)
    };
    let sent = jsonschema::validator_for(&projection.schema).expect("the projection compiles");
    let errors: Vec<String> = sent.iter_errors(&lifted).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:#?}\n{lifted:#}");
    assert_eq!(
        &projection.restore(lifted.clone()),
        value,
        "from {lifted:#}"
    );
    let text = projection.restore_text(&lifted.to_string());
    let back: Value = text.map_or(lifted, |t| serde_json::from_str(&t).unwrap());
    assert_eq!(&back, value);
    projection
}

fn agent_plan() -> Value {
    serde_json::from_str(crate::plan::schema::AGENT_PLAN_SCHEMA).unwrap()
}

#[test]
fn the_agent_plan_projects_into_the_strict_subset_and_back() {
    let plan = json!({
        "id": "p",
        "variables": {"n": 3},
        "settings": {"max_parallel_steps": 2},
        "steps": [
            {"id": "fetch", "kind": "tool",
             "input": {"tool": "http.get", "arguments": {"url": "https://example.com", "n": 2}}},
            {"id": "think", "kind": "llm", "depends_on": ["fetch"],
             "input": {"prompt": "Summarise {{ steps.fetch.output }}",
                       "output_schema": {"type": "object"}}},
            {"id": "each", "kind": "loop", "depends_on": ["think"],
             "input": {"for_each": [1, 2], "max_iterations": 5, "steps": [
                 {"id": "inner", "kind": "wait", "input": {"duration_ms": 1}}]}},
            {"id": "team", "kind": "parallel", "input": {"steps": [
                {"id": "a", "kind": "llm", "input": {"function": "summarize", "arguments": {"x": 1}}},
                {"id": "b", "kind": "user_input", "input": {"prompt": "ok?"}}]}},
        ],
        "output": {"answer": "{{ steps.think.output }}"}
    });
    assert!(jsonschema::is_valid(&agent_plan(), &plan));
    let projection = round_trip(&agent_plan(), &plan);
    assert!(projection.faithful, "{:#?}", projection.changes);
    // The step union became variants discriminated by `kind`.
    let step = &projection.schema["$defs"]["step"];
    assert_eq!(step["anyOf"].as_array().unwrap().len(), 12, "{step:#}");
}

#[test]
fn the_replan_schema_projects_into_the_strict_subset_and_back() {
    let answer = json!({
        "strategy": "alternative",
        "reason": "the tool failed",
        "completes_task": true,
        "plan": {"steps": [{"id": "s", "kind": "llm", "input": {"prompt": "again"}}]}
    });
    let projection = round_trip(&crate::plan::schema::replan_schema(), &answer);
    assert!(projection.faithful, "{:#?}", projection.changes);
    let restored = json!({"strategy": "restore", "reason": "r", "completes_task": false, "restore_version": 1,
        "plan": {"steps": [{"id": "s", "kind": "wait", "input": {"duration_ms": 5}}]}});
    round_trip(&crate::plan::schema::replan_schema(), &restored);
}

#[test]
fn the_selector_and_speaker_schemas_are_strict_already() {
    let selector: Value =
        serde_json::from_str(crate::plan::schema::ORCHESTRATION_TYPE_SCHEMA).unwrap();
    let projection = round_trip(&selector, &json!({"orchestrationType": "planner"}));
    assert!(projection.faithful);
    let speaker = json!({
        "type": "object", "additionalProperties": false, "required": ["speaker"],
        "properties": { "speaker": { "type": "string", "enum": ["a", "b"] } }
    });
    let projection = round_trip(&speaker, &json!({"speaker": "b"}));
    assert_eq!(projection.schema, speaker);
    assert!(projection.changes.is_empty(), "{:?}", projection.changes);
}

#[test]
fn user_schemas_with_optional_fields_any_root_and_free_form_values() {
    let cases = [
        // An agent's output schema with an optional property.
        (
            json!({"type": "object", "required": ["title"],
                   "properties": {"title": {"type": "string", "minLength": 1},
                                  "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                                  "score": {"type": "number", "minimum": 0}}}),
            json!({"title": "t", "score": 0.5}),
        ),
        // A bare object.
        (
            json!({"type": "object"}),
            json!({"anything": [1, {"x": null}]}),
        ),
        // A root that is not an object.
        (
            json!({"type": "array", "items": {"type": "integer"}}),
            json!([1, 2, 3]),
        ),
        (json!({"type": "string", "maxLength": 5}), json!("short")),
        (json!({"enum": ["a", "b"]}), json!("b")),
        // Anything at all, and a map.
        (json!({}), json!({"deep": {"deeper": true}})),
        (
            json!({"type": "object", "properties": {"labels": {"type": "object",
                "additionalProperties": {"type": "string"}}}}),
            json!({"labels": {"a": "b"}}),
        ),
        // oneOf of shapes, a nullable union, a constraint-only oneOf.
        (
            json!({"type": "object", "required": ["v"], "properties": {"v": {"oneOf": [
                {"type": "string"}, {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}]}}}),
            json!({"v": {"n": 2}}),
        ),
        (
            json!({"type": "object", "required": ["v"], "properties": {"v": {"type": ["integer", "null"]}}}),
            json!({"v": null}),
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}),
            json!({"b": 1}),
        ),
        // Recursion through $defs, and the old `definitions`.
        (
            json!({"type": "object", "required": ["tree"], "properties": {"tree": {"$ref": "#/definitions/node"}},
                   "definitions": {"node": {"type": "object", "required": ["name"], "properties": {
                       "name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/definitions/node"}}}}}}),
            json!({"tree": {"name": "a", "children": [{"name": "b"}]}}),
        ),
        // allOf merged into one object.
        (
            json!({"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                             {"properties": {"b": {"type": "boolean"}}}]}),
            json!({"a": "x", "b": true}),
        ),
    ];
    for (schema, value) in cases {
        assert!(jsonschema::is_valid(&schema, &value), "{schema} / {value}");
        round_trip(&schema, &value);
    }
}

#[test]
fn changes_are_reported_and_narrowing_is_not_faithful() {
    let open = json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}},
                      "additionalProperties": true});
    let projection = Projection::new(&open, SchemaDialect::OpenAiStrict);
    assert!(!projection.faithful);
    let changes = projection.changes.join("\n");
    assert!(
        changes.contains("/properties/a: dropped `maxLength`"),
        "{changes}"
    );
    assert!(changes.contains("not allowed"), "{changes}");
    let external = json!({"type": "object", "properties": {"a": {"$ref": "https://x/y.json"}}});
    assert!(!Projection::new(&external, SchemaDialect::OpenAiStrict).faithful);
}

#[test]
fn restoring_leaves_what_does_not_fit_alone() {
    let schema = json!({"type": "object", "properties": {"a": {"type": "object"}, "b": {"type": "integer"}}});
    let projection = Projection::new(&schema, SchemaDialect::OpenAiStrict);
    // JSON text that is not JSON stays text (validation will say so); unknown keys stay.
    let answer = json!({"a": "not json {", "b": null, "c": 1});
    assert_eq!(
        projection.restore(answer),
        json!({"a": "not json {", "c": 1})
    );
    assert_eq!(projection.restore_text("not json"), None);
    assert_eq!(
        projection
            .restore_text("{\"a\": \"{}\", \"b\": 2}")
            .as_deref(),
        Some("{\"a\":{},\"b\":2}")
    );
}

#[test]
fn other_dialects() {
    let schema = json!({"type": "array", "items": {"$ref": "#/$defs/n"}, "$defs": {"n": {"type": "integer"}}});
    let as_written = Projection::new(&schema, SchemaDialect::AsWritten);
    assert_eq!(as_written.schema, schema);
    assert_eq!(
        as_written.restore(json!({"value": [1]})),
        json!({"value": [1]})
    );
    let object = Projection::new(&schema, SchemaDialect::ObjectRoot);
    assert_eq!(object.schema["type"], "object");
    assert_eq!(
        object.schema["properties"]["value"]["items"]["$ref"],
        "#/$defs/n"
    );
    assert_eq!(object.schema["$defs"]["n"]["type"], "integer");
    assert_eq!(object.restore(json!({"value": [1, 2]})), json!([1, 2]));
    let already = json!({"type": "object", "properties": {}});
    assert_eq!(
        Projection::new(&already, SchemaDialect::ObjectRoot).schema,
        already
    );
}
