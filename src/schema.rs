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
/// names it, and `custom` may give a message of its own for the errors it knows.
pub fn member_violations(
    validator: &Validator,
    value: &Value,
    custom: impl Fn(&ValidationError<'_>) -> Option<String>,
) -> Vec<SchemaViolation> {
    let mut out = Vec::new();
    for err in validator.iter_errors(value) {
        let base = err.instance_path().as_str().to_owned();
        let at = |pointer: String, message: String| SchemaViolation { pointer, message };
        if let Some(message) = custom(&err) {
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
                for name in unexpected {
                    out.push(at(
                        format!("{base}/{}", escape_pointer(name)),
                        format!("`{name}` is not a known field"),
                    ));
                }
            }
            _ => out.push(at(base, message_of(&err))),
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn missing_and_unknown_members_are_pointed_at() {
        let schema = json!({"type": "object", "required": ["a/b"], "additionalProperties": false,
            "properties": {"a/b": {"type": "integer"}, "n": {"type": "integer"}}});
        let validator = jsonschema::validator_for(&schema).unwrap();
        let value = json!({"n": "x", "extra": 1});
        let found = member_violations(&validator, &value, |_| None);
        let pointers: Vec<&str> = found.iter().map(|v| v.pointer.as_str()).collect();
        assert!(pointers.contains(&"/a~1b"), "{found:?}");
        assert!(pointers.contains(&"/extra"), "{found:?}");
        assert!(pointers.contains(&"/n"), "{found:?}");
        let plain = violations(&validator, &value);
        assert!(plain.iter().any(|v| v.pointer.is_empty()), "{plain:?}");
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
