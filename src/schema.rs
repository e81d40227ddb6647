//! JSON Schema errors as users read them, shared by every module that checks a value against a
//! schema (request bodies, plans, tool arguments, model answers, human answers): each problem
//! located by a JSON Pointer into the value, with a message short enough to read.
//!
//! It knows nothing of what the value is; callers prefix pointers (`/value`, `/input`) and wrap
//! the violations in their own error types.

use jsonschema::error::ValidationErrorKind;
use jsonschema::{ValidationError, Validator};
use serde_json::Value;

/// Longest message kept. Schema messages quote the offending value, which may be large.
pub const MAX_MESSAGE_CHARS: usize = 300;

/// One of orca's own schemas (`schemas/`): its document, which messages read to name what it
/// allows, and its validator.
pub struct ShippedSchema {
    pub document: Value,
    pub validator: Validator,
}

impl ShippedSchema {
    /// Compiles a schema shipped in `schemas/`. They are part of the binary and checked by
    /// tests, so failing here is a build defect.
    pub fn compile(text: &str) -> ShippedSchema {
        let document: Value = serde_json::from_str(text).expect("shipped schema is JSON");
        let validator = jsonschema::validator_for(&document).expect("shipped schema compiles");
        ShippedSchema {
            document,
            validator,
        }
    }
}

/// "a string", "an object"…: a JSON value's type as error messages name it.
pub fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// One way a value breaks a schema, located by JSON Pointer into the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaViolation {
    pub pointer: String,
    pub message: String,
}

/// Every way `value` breaks `validator`, each at the pointer of the value that breaks it (for a
/// missing member: the object that lacks it).
pub fn violations(validator: &Validator, value: &Value) -> Vec<SchemaViolation> {
    validator
        .iter_errors(value)
        .map(|err| SchemaViolation {
            pointer: err.instance_path().as_str().to_owned(),
            message: message_of(&err),
        })
        .collect()
}

/// Like [`violations`], for orca's own schemas (request bodies, plans), whose readers fix a
/// document by hand: a missing or unknown member is pointed at itself, with a message that
/// names it (and, for an unknown one, the nearest known name and the names there are, read
/// from the schema's document), a value outside an enum lists them all with the nearest, and
/// `custom`, else the schema's own `errorMessage` beside the keyword, may give a message of its
/// own for the errors it knows.
pub fn member_violations(
    schema: &ShippedSchema,
    value: &Value,
    custom: impl Fn(&ValidationError<'_>) -> Option<String>,
) -> Vec<SchemaViolation> {
    let document = &schema.document;
    let mut out = Vec::new();
    for err in schema.validator.iter_errors(value) {
        let base = err.instance_path().as_str().to_owned();
        let at = |pointer: String, message: String| SchemaViolation { pointer, message };
        if let Some(message) = custom(&err).or_else(|| own_message(document, &err)) {
            out.push(at(base, message));
            continue;
        }
        match err.kind() {
            ValidationErrorKind::Required { property } => {
                let name = property.as_str().unwrap_or_default();
                out.push(at(
                    format!("{base}/{}", escape_pointer(name)),
                    format!("`{name}` is required"),
                ));
            }
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                let known = known_members(document, err.schema_path().as_str());
                let known: Vec<&str> = known.iter().map(String::as_str).collect();
                for name in unexpected {
                    let mut message = format!("`{name}` is not a known field");
                    if !known.is_empty() {
                        message.push_str(&crate::suggest::did_you_mean(name, known.clone()));
                        message.push_str(&format!(
                            " (known: {})",
                            crate::suggest::listed(&known, 30, "see the schema")
                        ));
                    }
                    out.push(at(format!("{base}/{}", escape_pointer(name)), message));
                }
            }
            ValidationErrorKind::Enum { options } => {
                let names: Vec<String> = options
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|o| o.as_str().map_or_else(|| o.to_string(), str::to_owned))
                    .collect();
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                let shown = truncate_to(err.instance().to_string(), 60);
                let wrong = err.instance().as_str().unwrap_or_default();
                let message = format!(
                    "{shown} is not one of {}{}",
                    crate::suggest::listed(&names, 40, "see the schema"),
                    crate::suggest::did_you_mean(wrong, names.clone())
                );
                out.push(at(base, message));
            }
            _ => out.push(at(base, message_of(&err))),
        }
    }
    out
}

/// The `errorMessage` (`{keyword: message}`) the schema's document gives beside the keyword
/// that failed, where the keyword's path holds no `$ref` (a schema of several documents reads
/// its own through `custom`).
fn own_message(document: &Value, err: &ValidationError<'_>) -> Option<String> {
    let (parent, keyword) = err.schema_path().as_str().rsplit_once('/')?;
    let messages = document.pointer(parent)?.get("errorMessage")?;
    messages.get(keyword)?.as_str().map(str::to_owned)
}

/// The property names the object schema at the parent of `keyword` (the location of an
/// `additionalProperties` keyword in `document`) declares, following local `$ref`s on the way;
/// none when the location cannot be read.
fn known_members(document: &Value, keyword: &str) -> Vec<String> {
    let Some((parent, _)) = keyword.rsplit_once('/') else {
        return Vec::new();
    };
    let mut node = document;
    for segment in parent.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if segment == "$ref" {
            let target = node["$ref"].as_str().and_then(|r| r.strip_prefix('#'));
            match target.and_then(|pointer| document.pointer(pointer)) {
                Some(found) => node = found,
                None => return Vec::new(),
            }
            continue;
        }
        node = match node {
            Value::Object(map) => match map.get(&segment) {
                Some(next) => next,
                None => return Vec::new(),
            },
            Value::Array(items) => match segment.parse::<usize>().ok().and_then(|i| items.get(i)) {
                Some(next) => next,
                None => return Vec::new(),
            },
            _ => return Vec::new(),
        };
    }
    node["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// The error's message, quoting the offending value when it is short. A long value (a
/// 5000-character string) would push out the part that says what is wrong, so it is then
/// replaced by "the value", and the message cut to [`MAX_MESSAGE_CHARS`].
pub fn message_of(err: &ValidationError<'_>) -> String {
    let full = err.to_string();
    if full.chars().count() <= MAX_MESSAGE_CHARS {
        return full;
    }
    truncate(err.masked_with("the value").to_string())
}

/// `message` cut to [`MAX_MESSAGE_CHARS`] characters, with `…` when something was cut.
pub fn truncate(message: String) -> String {
    truncate_to(message, MAX_MESSAGE_CHARS)
}

/// `message` cut to `max_chars` characters, with `…` when something was cut.
pub fn truncate_to(mut message: String, max_chars: usize) -> String {
    if let Some((cut, _)) = message.char_indices().nth(max_chars) {
        message.truncate(cut);
        message.push('…');
    }
    message
}

/// A JSON object member name as a JSON Pointer segment (RFC 6901).
pub fn escape_pointer(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// Checks `value` against `schema`, then deserialises it: every violation at once, or the one
/// member the typed value cannot hold though the schema lets it through (an integer too large
/// for its field, say), located by JSON Pointer.
pub fn parse_checked<T: serde::de::DeserializeOwned>(
    schema: &ShippedSchema,
    value: Value,
) -> Result<T, Vec<SchemaViolation>> {
    let problems = member_violations(schema, &value, |_| None);
    if !problems.is_empty() {
        return Err(problems);
    }
    deserialize_located(value).map_err(|v| vec![v])
}

/// Deserialises `value`, locating a failure by JSON Pointer.
pub fn deserialize_located<T: serde::de::DeserializeOwned>(
    value: Value,
) -> Result<T, SchemaViolation> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let mut pointer = pointer_of(e.path());
        let message = e.into_inner().to_string();
        // serde names a missing member from the object that lacks it: point at the member.
        if let Some(rest) = message.strip_prefix("missing field `")
            && let Some(field) = rest.strip_suffix('`')
        {
            pointer.push('/');
            pointer.push_str(&escape_pointer(field));
        }
        SchemaViolation { pointer, message }
    })
}

/// A serde path (`limits.max_steps`, `tools[1]`) as a JSON Pointer (`/limits/max_steps`).
pub fn pointer_of(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut pointer = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => pointer.push_str(&format!("/{index}")),
            Segment::Map { key } => {
                pointer.push('/');
                pointer.push_str(&escape_pointer(key));
            }
            Segment::Enum { .. } | Segment::Unknown => {}
        }
    }
    pointer
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_missing_member_is_pointed_at_where_serde_names_its_parent() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Inner {
            code: String,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Outer {
            worker_id: String,
            error: Option<Inner>,
        }
        let top = deserialize_located::<Outer>(json!({})).unwrap_err();
        assert_eq!(top.pointer, "/worker_id");
        let nested =
            deserialize_located::<Outer>(json!({"worker_id": "w", "error": {}})).unwrap_err();
        assert_eq!(nested.pointer, "/error/code");
    }

    #[test]
    fn missing_and_unknown_members_are_pointed_at() {
        let schema = json!({"type": "object", "required": ["a/b"], "additionalProperties": false,
            "properties": {"a/b": {"type": "integer"}, "n": {"type": "integer"}}});
        let validator = jsonschema::validator_for(&schema).unwrap();
        let value = json!({"n": "x", "extra": 1});
        let shipped = ShippedSchema::compile(&schema.to_string());
        let found = member_violations(&shipped, &value, |_| None);
        let pointers: Vec<&str> = found.iter().map(|v| v.pointer.as_str()).collect();
        assert!(pointers.contains(&"/a~1b"), "{found:?}");
        assert!(pointers.contains(&"/extra"), "{found:?}");
        assert!(pointers.contains(&"/n"), "{found:?}");
        let plain = violations(&validator, &value);
        assert!(plain.iter().any(|v| v.pointer.is_empty()), "{plain:?}");
    }

    #[test]
    fn unknown_members_and_enum_values_name_what_there_is() {
        let schema = json!({"$defs": {"limits": {"type": "object", "additionalProperties": false,
                "properties": {"max_steps": {"type": "integer"}, "max_tokens": {"type": "integer"}}}},
            "type": "object", "additionalProperties": false,
            "properties": {"limits": {"$ref": "#/$defs/limits"},
                "orchestration": {"enum": ["auto", "simple", "planner"]}}});
        let shipped = ShippedSchema::compile(&schema.to_string());
        let value = json!({"limit": 1, "orchestration": "planer", "limits": {"max_step": 2}});
        let found = member_violations(&shipped, &value, |_| None);
        let message = |pointer: &str| {
            found
                .iter()
                .find(|v| v.pointer == pointer)
                .map(|v| v.message.clone())
                .unwrap_or_else(|| panic!("{pointer}: {found:?}"))
        };
        assert_eq!(
            message("/limit"),
            "`limit` is not a known field: did you mean `limits`? (known: `limits` or `orchestration`)"
        );
        assert_eq!(
            message("/limits/max_step"),
            "`max_step` is not a known field: did you mean `max_steps`? (known: `max_steps` or `max_tokens`)"
        );
        assert_eq!(
            message("/orchestration"),
            "\"planer\" is not one of `auto`, `simple` or `planner`: did you mean `planner`?"
        );
    }

    #[test]
    fn long_values_are_masked_and_messages_cut() {
        let validator = jsonschema::validator_for(&json!({"type": "integer"})).unwrap();
        let found = violations(&validator, &json!("x".repeat(5_000)));
        assert!(found[0].message.chars().count() <= MAX_MESSAGE_CHARS + 1);
        assert!(found[0].message.contains("the value"), "{:?}", found[0]);
        assert_eq!(
            truncate("é".repeat(400)).chars().count(),
            MAX_MESSAGE_CHARS + 1
        );
    }
}
