//! Response schemas per provider dialect: what each provider is sent for a structured answer,
//! and how its answer is brought back to the full schema's shape.
//!
//! orca keeps every schema as written for its own validation and repair loop; a provider gets a
//! [`Projection`] it accepts. OpenAI's strict mode takes only a subset of JSON Schema (every
//! object closed and with all its properties required, an object at the root, `anyOf` as the
//! only composition, a short list of keywords), so [`SchemaDialect::OpenAiStrict`]:
//!
//! - makes optional properties required and nullable (a `null` answer is dropped again);
//! - folds `allOf` of `if {kind: const} then {...}` conditionals into an `anyOf` of variants,
//!   turns other `oneOf` into `anyOf`, and drops constraints it cannot say (`not`, lengths,
//!   `uniqueItems`, `propertyNames`, …): they only loosen the projection, and orca's own
//!   validation still holds the answer to them;
//! - asks for free-form values (objects without properties, maps, arrays without items, `{}`)
//!   as JSON text in a string, decoded again on the way back;
//! - wraps a root that is not an object in `{"value": ...}`.
//!
//! The projection keeps private markers (`x-orca-*`) in its guide, the copy used to restore an
//! answer; the copy sent never has them. This module must stay pure: no I/O, no provider.

use serde_json::{Map, Value, json};

/// How a provider takes a response schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaDialect {
    /// The schema as written.
    AsWritten,
    /// As written, with a root that is not an object wrapped in `{"value": ...}` (a tool's
    /// input schema, as Anthropic's forced tool needs).
    ObjectRoot,
    /// OpenAI's Structured Outputs strict subset.
    OpenAiStrict,
}

/// The value is JSON text in a string.
const MARK_JSON: &str = "x-orca-json";
/// The property was optional: a `null` answer means absent.
const MARK_OPTIONAL: &str = "x-orca-optional";
/// The root was wrapped in `{"value": ...}`.
const MARK_WRAPPED: &str = "x-orca-wrapped";

/// Keywords OpenAI's strict mode accepts; every other keyword is dropped by the projection and
/// refused by a strict server.
pub const STRICT_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "$ref",
    "$defs",
    "description",
    "title",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
];

/// String formats OpenAI's strict mode accepts.
pub const STRICT_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// How deep `$ref`s are followed while restoring an answer (recursive schemas end there).
const MAX_DEPTH: usize = 64;

/// A schema as one provider gets it, and how to read its answers back.
#[derive(Debug, Clone, PartialEq)]
pub struct Projection {
    /// What the provider is sent.
    pub schema: Value,
    /// Whether a provider enforcing `schema` exactly still lets the model give every answer
    /// the full schema accepts (constraints dropped only loosen it; orca checks them itself).
    pub faithful: bool,
    /// What the projection changed, for logs (`/properties/id: dropped maxLength`).
    pub changes: Vec<String>,
    /// `schema` with the markers that say how to restore an answer; `None`: nothing to restore.
    guide: Option<Value>,
}

impl Projection {
    /// `schema` for a provider of `dialect`.
    pub fn new(schema: &Value, dialect: SchemaDialect) -> Projection {
        match dialect {
            SchemaDialect::AsWritten => Projection {
                schema: schema.clone(),
                faithful: true,
                changes: Vec::new(),
                guide: None,
            },
            SchemaDialect::ObjectRoot if accepts_only_objects(schema) => {
                Projection::new(schema, SchemaDialect::AsWritten)
            }
            SchemaDialect::ObjectRoot => {
                let mut inner = schema.clone();
                let defs = match &mut inner {
                    Value::Object(map) => map.remove("$defs"),
                    _ => None,
                };
                let mut guide = wrapped(inner);
                if let Some(defs) = defs {
                    guide["$defs"] = defs;
                }
                Projection {
                    schema: without_markers(&guide),
                    faithful: true,
                    changes: vec!["(root): wrapped in {\"value\": ...}".into()],
                    guide: Some(guide),
                }
            }
            SchemaDialect::OpenAiStrict => Strict::project(schema),
        }
    }

    /// An answer written against `schema`, brought back to the full schema's shape: optional
    /// properties answered `null` removed, JSON text decoded, the root unwrapped. Anything that
    /// does not fit is left as it is, for validation to report.
    pub fn restore(&self, mut value: Value) -> Value {
        let Some(guide) = &self.guide else {
            return value;
        };
        restore(guide, guide, &mut value, 0);
        if guide.get(MARK_WRAPPED).is_some()
            && let Value::Object(map) = &mut value
            && map.len() == 1
            && let Some(inner) = map.remove("value")
        {
            return inner;
        }
        value
    }

    /// [`restore`](Self::restore) of an answer's text; `None` when the text is not JSON or
    /// nothing changes.
    pub fn restore_text(&self, text: &str) -> Option<String> {
        self.guide.as_ref()?;
        let value: Value = serde_json::from_str(text.trim()).ok()?;
        let restored = self.restore(value.clone());
        (restored != value).then(|| restored.to_string())
    }
}

/// `{"type": "object", "properties": {"value": inner}, ...}` with the wrapped marker.
fn wrapped(inner: Value) -> Value {
    json!({
        "type": "object",
        "properties": { "value": inner },
        "required": ["value"],
        "additionalProperties": false,
        MARK_WRAPPED: true,
    })
}

/// Whether a schema's root accepts objects only (`"type": "object"`).
fn accepts_only_objects(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// `schema` without the restore markers.
fn without_markers(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !k.starts_with("x-orca-"))
                .map(|(k, v)| (k.clone(), without_markers(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_markers).collect()),
        other => other.clone(),
    }
}

/// The projection into OpenAI's strict subset.
struct Strict<'a> {
    root: &'a Value,
    changes: Vec<String>,
    faithful: bool,
}

impl<'a> Strict<'a> {
    fn project(schema: &'a Value) -> Projection {
        let mut strict = Strict {
            root: schema,
            changes: Vec::new(),
            faithful: true,
        };
        let mut defs = Map::new();
        for key in ["$defs", "definitions"] {
            for (name, def) in schema
                .get(key)
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                let at = format!("/{key}/{name}");
                defs.insert(name.clone(), strict.node(def, &at));
            }
        }
        let mut guide = strict.node(schema, "");
        let is_object = guide.get("type") == Some(&json!("object"))
            && guide.get(MARK_JSON).is_none()
            && guide.get("anyOf").is_none();
        if !is_object {
            strict.note("", "wrapped the root in {\"value\": ...}");
            if schema_refers_to_root(schema) {
                // `#` would now point at the wrapper.
                strict.narrowed("", "a wrapped root cannot refer to itself");
            }
            guide = wrapped(guide);
        }
        if !defs.is_empty() {
            keep_reachable(&guide, &mut defs);
            if !defs.is_empty() {
                guide["$defs"] = Value::Object(defs);
            }
        }
        Projection {
            schema: without_markers(&guide),
            faithful: strict.faithful,
            changes: strict.changes,
            guide: Some(guide),
        }
    }

    fn note(&mut self, at: &str, what: impl AsRef<str>) {
        let at = if at.is_empty() { "(root)" } else { at };
        self.changes.push(format!("{at}: {}", what.as_ref()));
    }

    /// A change that keeps some valid answers out of reach.
    fn narrowed(&mut self, at: &str, what: &str) {
        self.faithful = false;
        self.note(at, what);
    }

    /// One schema node in the strict subset.
    fn node(&mut self, node: &Value, at: &str) -> Value {
        let Some(map) = node.as_object() else {
            // `true`, `false`: anything (or nothing) at all.
            return self.json_text(node, at);
        };
        let described = |mut out: Value| {
            for key in ["title", "description"] {
                if let Some(text) = map.get(key)
                    && out.get(key).is_none()
                    && out.is_object()
                {
                    out[key] = text.clone();
                }
            }
            out
        };
        if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
            let extra: Vec<&String> = map
                .keys()
                .filter(|k| !matches!(k.as_str(), "$ref" | "description" | "title" | "$comment"))
                .collect();
            if !extra.is_empty() {
                self.note(at, format!("dropped {} beside $ref", join_keys(&extra)));
            }
            return match local_ref(reference) {
                Some(reference) => described(json!({ "$ref": reference })),
                None => {
                    self.narrowed(at, "a $ref outside the schema became JSON text");
                    self.json_text(node, at)
                }
            };
        }
        if let Some(folded) = self.fold_conditionals(map, at) {
            return described(folded);
        }
        if let Some(out) = self.composition(map, at) {
            return described(out);
        }
        let types = types_of(map);
        let out = match types.as_slice() {
            [] if map.contains_key("enum") || map.contains_key("const") => self.enumerated(map, at),
            [] => self.json_text(node, at),
            [single] => self.typed(map, single, at),
            several => {
                let nullable = several.iter().any(|t| t == "null");
                let mut branches: Vec<Value> = several
                    .iter()
                    .filter(|t| *t != "null")
                    .map(|t| self.typed(map, t, at))
                    .collect();
                if nullable {
                    branches.push(json!({"type": "null"}));
                }
                json!({ "anyOf": branches })
            }
        };
        self.dropped(map, at);
        described(out)
    }

    /// Notes the keywords of `map` the strict subset has no room for.
    fn dropped(&mut self, map: &Map<String, Value>, at: &str) {
        let gone: Vec<&String> = map
            .keys()
            .filter(|k| {
                !STRICT_KEYWORDS.contains(&k.as_str())
                    && !matches!(
                        k.as_str(),
                        "$schema"
                            | "$id"
                            | "$comment"
                            | "errorMessage"
                            | "definitions"
                            | "oneOf"
                            | "allOf"
                            | "examples"
                            | "default"
                    )
            })
            .collect();
        if !gone.is_empty() {
            self.note(at, format!("dropped {}", join_keys(&gone)));
        }
        if map
            .get("format")
            .and_then(Value::as_str)
            .is_some_and(|f| !STRICT_FORMATS.contains(&f))
        {
            self.note(at, "dropped an unsupported format");
        }
    }

    /// A free-form value, asked for as JSON text.
    fn json_text(&mut self, node: &Value, at: &str) -> Value {
        self.note(at, "asked for as JSON text");
        let mut description =
            String::from("JSON text: write this value as a JSON document inside this string.");
        if let Some(own) = node.get("description").and_then(Value::as_str) {
            description = format!("{own} ({description})");
        }
        json!({ "type": "string", "description": description, MARK_JSON: true })
    }

    /// `enum` or `const` without a type.
    fn enumerated(&mut self, map: &Map<String, Value>, _at: &str) -> Value {
        let values: Vec<Value> = match (map.get("enum"), map.get("const")) {
            (Some(Value::Array(values)), _) => values.clone(),
            (_, Some(value)) => vec![value.clone()],
            _ => Vec::new(),
        };
        json!({ "enum": values })
    }

    /// A node of one JSON type.
    fn typed(&mut self, map: &Map<String, Value>, kind: &str, at: &str) -> Value {
        let mut out = Map::new();
        out.insert("type".into(), json!(kind));
        let copy = |out: &mut Map<String, Value>, keys: &[&str]| {
            for key in keys {
                if let Some(v) = map.get(*key) {
                    out.insert((*key).to_owned(), v.clone());
                }
            }
        };
        match kind {
            "object" => return self.object(map, at),
            "array" => {
                copy(&mut out, &["minItems", "maxItems"]);
                let items = match map.get("items") {
                    Some(items) if !is_anything(items) => self.node(items, &format!("{at}/items")),
                    _ => match map.get("prefixItems").and_then(Value::as_array) {
                        Some(prefix) if !prefix.is_empty() => {
                            self.note(at, "prefixItems became items of any listed shape");
                            let branches: Vec<Value> = prefix
                                .iter()
                                .enumerate()
                                .map(|(i, p)| self.node(p, &format!("{at}/prefixItems/{i}")))
                                .collect();
                            json!({ "anyOf": branches })
                        }
                        _ => self.json_text(&Value::Bool(true), &format!("{at}/items")),
                    },
                };
                out.insert("items".into(), items);
            }
            "string" => {
                copy(&mut out, &["pattern"]);
                if let Some(format) = map.get("format").and_then(Value::as_str)
                    && STRICT_FORMATS.contains(&format)
                {
                    out.insert("format".into(), json!(format));
                }
            }
            "number" | "integer" => copy(
                &mut out,
                &[
                    "minimum",
                    "maximum",
                    "exclusiveMinimum",
                    "exclusiveMaximum",
                    "multipleOf",
                ],
            ),
            _ => {}
        }
        let values = match (map.get("enum"), map.get("const")) {
            (Some(Value::Array(values)), _) => Some(values.clone()),
            (_, Some(value)) => Some(vec![value.clone()]),
            _ => None,
        };
        if let Some(values) = values {
            let fitting: Vec<Value> = values.into_iter().filter(|v| of_type(v, kind)).collect();
            out.insert("enum".into(), Value::Array(fitting));
        }
        Value::Object(out)
    }

    /// An object: closed, every property required, optional ones nullable.
    fn object(&mut self, map: &Map<String, Value>, at: &str) -> Value {
        let properties = map.get("properties").and_then(Value::as_object);
        let Some(properties) = properties.filter(|p| !p.is_empty()) else {
            return self.json_text(&Value::Object(map.clone()), at);
        };
        let open = map
            .get("additionalProperties")
            .is_some_and(|a| a != &Value::Bool(false))
            || map.contains_key("patternProperties");
        if open {
            self.narrowed(at, "properties beyond the listed ones are not allowed");
        }
        let required: Vec<&str> = map
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let mut out_properties = Map::new();
        for (name, property) in properties {
            let here = format!("{at}/properties/{name}");
            let mut projected = self.node(property, &here);
            if !required.contains(&name.as_str()) && !allows_null(&projected) {
                projected = nullable(projected);
                projected[MARK_OPTIONAL] = json!(true);
            }
            out_properties.insert(name.clone(), projected);
        }
        let names: Vec<Value> = out_properties.keys().map(|k| json!(k)).collect();
        json!({
            "type": "object",
            "properties": out_properties,
            "required": names,
            "additionalProperties": false,
        })
    }

    /// `oneOf`/`anyOf`/`allOf` that are not conditionals: `None` when the node has none.
    fn composition(&mut self, map: &Map<String, Value>, at: &str) -> Option<Value> {
        if let Some(all) = map.get("allOf").and_then(Value::as_array) {
            // Merge what can be merged into one object; drop the rest.
            let mut merged = map.clone();
            merged.remove("allOf");
            for member in all {
                let member = self.resolve(member);
                match member.as_object() {
                    Some(m) if m.contains_key("properties") || m.contains_key("required") => {
                        merge_object(&mut merged, m);
                    }
                    _ => self.note(at, "dropped an allOf member"),
                }
            }
            if !merged.contains_key("type") && merged.contains_key("properties") {
                merged.insert("type".into(), json!("object"));
            }
            return Some(self.node(&Value::Object(merged), at));
        }
        let (key, members) = ["oneOf", "anyOf"]
            .into_iter()
            .find_map(|k| map.get(k).and_then(Value::as_array).map(|m| (k, m)))?;
        let mut base = map.clone();
        base.remove(key);
        let shapes = members.iter().any(|m| {
            let m = self.resolve(m);
            m.get("type").is_some()
                || m.get("properties").is_some()
                || m.get("$ref").is_some()
                || m.get("enum").is_some()
                || m.get("const").is_some()
        });
        if !shapes {
            // Members that only constrain (`{"required": [...]}`): drop them.
            self.note(at, format!("dropped {key}"));
            return Some(self.node(&Value::Object(base), at));
        }
        if key == "oneOf" {
            self.note(at, "oneOf became anyOf");
        }
        let base_has_shape = base.contains_key("type") || base.contains_key("properties");
        let branches: Vec<Value> = members
            .iter()
            .enumerate()
            .map(|(i, member)| {
                let here = format!("{at}/{key}/{i}");
                match member.as_object() {
                    Some(m) if base_has_shape && !m.contains_key("$ref") => {
                        let mut combined = base.clone();
                        merge_object(&mut combined, m);
                        if let Some(t) = m.get("type") {
                            combined.insert("type".into(), t.clone());
                        }
                        self.node(&Value::Object(combined), &here)
                    }
                    _ => self.node(member, &here),
                }
            })
            .collect();
        Some(json!({ "anyOf": branches }))
    }

    /// `allOf` of `if {D: const V} then {...}` (one discriminator `D` throughout) folded into
    /// an `anyOf` of variants, one per value of `D`.
    fn fold_conditionals(&mut self, map: &Map<String, Value>, at: &str) -> Option<Value> {
        let all = map.get("allOf")?.as_array()?;
        let mut cases: Vec<(String, Value, &Map<String, Value>)> = Vec::new();
        for member in all {
            let member = member.as_object()?;
            if member.keys().any(|k| !matches!(k.as_str(), "if" | "then")) {
                return None;
            }
            let condition = member.get("if")?.get("properties")?.as_object()?;
            let [(name, test)] = condition.iter().collect::<Vec<_>>()[..] else {
                return None;
            };
            let value = test.get("const")?;
            let then = member.get("then")?.as_object()?;
            cases.push((name.clone(), value.clone(), then));
        }
        let discriminator = cases.first()?.0.clone();
        if cases.iter().any(|(d, _, _)| *d != discriminator) {
            return None;
        }
        let mut base = map.clone();
        base.remove("allOf");
        let mut variants = Vec::new();
        for (_, value, then) in &cases {
            let mut variant = base.clone();
            merge_object(&mut variant, then);
            variant
                .entry("properties")
                .or_insert_with(|| json!({}))
                .as_object_mut()?
                .insert(discriminator.clone(), json!({ "const": value }));
            variants.push(self.node(&Value::Object(variant), &format!("{at}/{value}")));
        }
        // Values of the discriminator no conditional names keep the base shape.
        let listed: Vec<&Value> = cases.iter().map(|(_, v, _)| v).collect();
        let rest: Vec<Value> = base
            .get("properties")
            .and_then(|p| p.get(&discriminator))
            .and_then(|d| d.get("enum"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|v| !listed.contains(v))
            .cloned()
            .collect();
        if !rest.is_empty() {
            let mut variant = base.clone();
            variant["properties"][&discriminator] = json!({ "enum": rest });
            variants.push(self.node(&Value::Object(variant), at));
        }
        self.note(
            at,
            format!("conditionals on `{discriminator}` became anyOf"),
        );
        Some(json!({ "anyOf": variants }))
    }

    /// A local `$ref` resolved against the schema being projected (one level).
    fn resolve(&self, node: &'a Value) -> &'a Value {
        node.get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix('#'))
            .and_then(|pointer| self.root.pointer(pointer))
            .unwrap_or(node)
    }
}

fn join_keys(keys: &[&String]) -> String {
    keys.iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A `$ref` inside the schema, in the `$defs` form; `None` for anything else.
fn local_ref(reference: &str) -> Option<String> {
    if reference == "#" {
        return Some("#".into());
    }
    let name = reference
        .strip_prefix("#/$defs/")
        .or_else(|| reference.strip_prefix("#/definitions/"))?;
    (!name.contains('/')).then(|| format!("#/$defs/{name}"))
}

fn schema_refers_to_root(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => map
            .iter()
            .any(|(k, v)| (k == "$ref" && v == "#") || schema_refers_to_root(v)),
        Value::Array(items) => items.iter().any(schema_refers_to_root),
        _ => false,
    }
}

/// Keeps the definitions `guide` reaches, directly or through other definitions.
fn keep_reachable(guide: &Value, defs: &mut Map<String, Value>) {
    fn refs(node: &Value, out: &mut Vec<String>) {
        match node {
            Value::Object(map) => {
                if let Some(name) = map
                    .get("$ref")
                    .and_then(Value::as_str)
                    .and_then(|r| r.strip_prefix("#/$defs/"))
                {
                    out.push(name.to_owned());
                }
                map.values().for_each(|v| refs(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let mut reached: Vec<String> = Vec::new();
    let mut queue = Vec::new();
    refs(guide, &mut queue);
    while let Some(name) = queue.pop() {
        if reached.contains(&name) {
            continue;
        }
        if let Some(def) = defs.get(&name) {
            refs(def, &mut queue);
        }
        reached.push(name);
    }
    defs.retain(|name, _| reached.contains(name));
}

/// The JSON types a node names (`type` as a string or a list); empty when it names none but
/// its keywords imply one.
fn types_of(map: &Map<String, Value>) -> Vec<String> {
    match map.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ if map.contains_key("properties") => vec!["object".into()],
        _ if map.contains_key("items") || map.contains_key("prefixItems") => vec!["array".into()],
        _ => Vec::new(),
    }
}

/// `true`, `{}` or a node with only annotations: any value at all.
fn is_anything(node: &Value) -> bool {
    match node {
        Value::Bool(b) => *b,
        Value::Object(map) => map
            .keys()
            .all(|k| matches!(k.as_str(), "description" | "title" | "$comment")),
        _ => false,
    }
}

fn of_type(value: &Value, kind: &str) -> bool {
    match kind {
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        _ => false,
    }
}

/// `other`'s properties, required names and other keywords laid into `into`.
fn merge_object(into: &mut Map<String, Value>, other: &Map<String, Value>) {
    for (key, value) in other {
        match key.as_str() {
            "properties" => {
                let target = into.entry("properties").or_insert_with(|| json!({}));
                if let (Some(target), Some(source)) = (target.as_object_mut(), value.as_object()) {
                    for (name, schema) in source {
                        target.insert(name.clone(), schema.clone());
                    }
                }
            }
            "required" => {
                let target = into.entry("required").or_insert_with(|| json!([]));
                if let (Some(target), Some(source)) = (target.as_array_mut(), value.as_array()) {
                    for name in source {
                        if !target.contains(name) {
                            target.push(name.clone());
                        }
                    }
                }
            }
            "if" | "then" | "else" | "not" => {}
            _ => {
                into.entry(key.clone()).or_insert_with(|| value.clone());
            }
        }
    }
}

/// Whether a projected node already accepts `null`.
fn allows_null(node: &Value) -> bool {
    match node.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "null"),
        _ => node
            .get("anyOf")
            .and_then(Value::as_array)
            .is_some_and(|b| b.iter().any(allows_null)),
    }
}

/// `node` that also accepts `null`.
fn nullable(mut node: Value) -> Value {
    let simple = node.get("anyOf").is_none() && node.get("$ref").is_none();
    match node.get("type").cloned() {
        Some(Value::String(t)) if simple => {
            node["type"] = json!([t, "null"]);
            if let Some(values) = node.get_mut("enum").and_then(Value::as_array_mut) {
                values.push(Value::Null);
            }
            node
        }
        _ => {
            let mut wrapper = Map::new();
            // Markers and the description stay outside, where restoring looks.
            if let Some(map) = node.as_object_mut() {
                for key in [MARK_JSON, "description"] {
                    if let Some(v) = map.remove(key) {
                        wrapper.insert(key.into(), v);
                    }
                }
            }
            wrapper.insert("anyOf".into(), json!([node, {"type": "null"}]));
            Value::Object(wrapper)
        }
    }
}

/// Restores `value` in place, led by `node` of `guide`.
fn restore(guide: &Value, node: &Value, value: &mut Value, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let node = follow(guide, node);
    if node.get(MARK_JSON).is_some() {
        if let Value::String(text) = value
            && let Ok(decoded) = serde_json::from_str::<Value>(text)
        {
            *value = decoded;
        }
        return;
    }
    if let Some(branches) = node.get("anyOf").and_then(Value::as_array) {
        if let Some(branch) = branches.iter().find(|b| fits(guide, b, value, depth)) {
            restore(guide, branch, value, depth + 1);
        }
        return;
    }
    match value {
        Value::Object(map) => {
            let Some(properties) = node.get("properties").and_then(Value::as_object) else {
                return;
            };
            map.retain(|name, v| {
                !(v.is_null()
                    && properties
                        .get(name)
                        .is_some_and(|p| p.get(MARK_OPTIONAL).is_some()))
            });
            for (name, v) in map.iter_mut() {
                if let Some(property) = properties.get(name) {
                    restore(guide, property, v, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(schema) = node.get("items") {
                for item in items {
                    restore(guide, schema, item, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// `node`, its `$ref`s followed within `guide`.
fn follow<'g>(guide: &'g Value, mut node: &'g Value) -> &'g Value {
    for _ in 0..MAX_DEPTH {
        let Some(reference) = node.get("$ref").and_then(Value::as_str) else {
            break;
        };
        let target = match reference {
            "#" => Some(guide),
            r => r.strip_prefix('#').and_then(|p| guide.pointer(p)),
        };
        match target {
            Some(t) => node = t,
            None => break,
        }
    }
    node
}

/// Whether `value` looks like an answer to `node`: its type, its enum, and for objects the
/// enums of its properties (the discriminators of `anyOf` variants) and no unknown property.
fn fits(guide: &Value, node: &Value, value: &Value, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    let node = follow(guide, node);
    if node.get(MARK_JSON).is_some() {
        return value.is_string() || value.is_null() && allows_null(node);
    }
    if let Some(branches) = node.get("anyOf").and_then(Value::as_array) {
        return branches.iter().any(|b| fits(guide, b, value, depth + 1));
    }
    let typed = match node.get("type") {
        Some(Value::String(t)) => of_type(value, t),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .any(|t| of_type(value, t)),
        _ => true,
    };
    if !typed {
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
        for (name, v) in map {
            let Some(property) = properties.get(name) else {
                return false;
            };
            let property = follow(guide, property);
            if property.get("enum").is_some() && !fits(guide, property, v, depth + 1) {
                return false;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests;
