//! An HTTP tool as declared (`[[tools.http]]` or `PUT /v1/tools/{name}`): plain data, kept in
//! a run's spec (`RunSpec::declared_tools`) and the configuration, and its checks
//! ([`HttpToolSpec::problems`]: name, method, caps, the URL template, headers), which the
//! configuration runs as it loads and the API on every declaration. Pure: calling the tool,
//! and what a tenant's headers may read, are `tools::http`'s.

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

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

/// The first path segment of `url` (written out, not yet parsed) that URL parsing would
/// treat as `.` or `..`, which would move the request to another path.
pub(crate) fn dot_segment(url: &str) -> Option<&str> {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[after_scheme..];
    let path_start = rest.find('/')?;
    let path = &rest[path_start..];
    let path = &path[..path.find(['?', '#']).unwrap_or(path.len())];
    path.split('/').find(|segment| {
        let plain = segment.to_ascii_lowercase().replace("%2e", ".");
        plain == "." || plain == ".."
    })
}

/// The `{name}` placeholders of a URL template, in order; an error for a malformed one.
pub(crate) fn placeholders(template: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or("a `{` without its `}`")?;
        let name = &after[..close];
        let ok = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(format!(
                "`{{{name}}}` is not a placeholder (letters, digits, `_`)"
            ));
        }
        out.push(name.to_owned());
        rest = &after[close + 1..];
    }
    Ok(out)
}

/// Whether `name` is a declared tool's name: dotted lowercase words, at most 64 characters.
pub(crate) fn tool_name_ok(name: &str) -> bool {
    name.len() <= 64
        && name.split('.').count() >= 2
        && name.split('.').all(|part| {
            part.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
}

impl HttpToolSpec {
    /// Every problem with the declaration, as (JSON Pointer, message).
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut bad = |p: &str, m: String| out.push((p.to_owned(), m));
        if !tool_name_ok(&self.name) {
            bad(
                "/name",
                "a dotted lowercase name such as `weather.current` (at most 64 characters)".into(),
            );
        }
        if self.description.chars().count() > 4000 {
            bad("/description", "at most 4000 characters".into());
        }
        if !METHODS.contains(&self.method.as_str()) {
            bad("/method", format!("one of {}", METHODS.join(", ")));
        }
        if !(1..=64 * 1024 * 1024).contains(&self.max_response_bytes) {
            bad("/max_response_bytes", "between 1 and 67108864".into());
        }
        if !(1..=300_000).contains(&self.timeout_ms) {
            bad("/timeout_ms", "between 1 and 300000 (5 minutes)".into());
        }
        self.url_problems(&mut bad);
        for (name, value) in &self.headers {
            let pointer = format!("/headers/{}", name.replace('~', "~0").replace('/', "~1"));
            if http::HeaderName::from_bytes(name.as_bytes()).is_err()
                || name.eq_ignore_ascii_case("host")
            {
                bad(
                    &pointer,
                    "not a header name orca sends (and never `Host`)".into(),
                );
            } else if value.contains("${") && !value.split("${").skip(1).all(|s| s.contains('}')) {
                bad(&pointer, "`${` without its `}`".into());
            } else if value.len() > 8192 {
                bad(&pointer, "at most 8192 bytes".into());
            }
        }
        if self.headers.len() > 32 {
            bad("/headers", "at most 32 headers".into());
        }
        out
    }

    fn url_problems(&self, bad: &mut impl FnMut(&str, String)) {
        if self.url.len() > 2048 {
            return bad("/url", "at most 2048 characters".into());
        }
        let names = match placeholders(&self.url) {
            Ok(n) => n,
            Err(e) => return bad("/url", e),
        };
        let authority_end = self.url.find("://").map(|i| i + 3).and_then(|start| {
            self.url[start..]
                .find(['/', '?', '#'])
                .map(|i| start + i)
                .or(Some(self.url.len()))
        });
        if authority_end.is_some_and(|end| self.url[..end].contains('{')) {
            return bad(
                "/url",
                "placeholders may not sit in the scheme, host or port".into(),
            );
        }
        let sample = names
            .iter()
            .fold(self.url.clone(), |u, n| u.replace(&format!("{{{n}}}"), "x"));
        if let Some(segment) = dot_segment(&self.url) {
            bad(
                "/url",
                format!("no `{segment}` path segments: write the path they lead to"),
            );
        }
        match url::Url::parse(&sample) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {
                if !u.username().is_empty() || u.password().is_some() {
                    bad("/url", "no credentials in the URL: use a header".into());
                }
            }
            _ => bad("/url", "an absolute http or https URL".into()),
        }
        let properties = self
            .input_schema
            .get("properties")
            .and_then(Value::as_object);
        for n in names {
            if !properties.is_some_and(|p| p.contains_key(&n)) {
                bad(
                    "/url",
                    format!("`{{{n}}}` is not a property of input_schema"),
                );
            }
        }
        if self.input_schema.get("type") != Some(&json!("object")) {
            bad(
                "/input_schema",
                "must be an object schema (`\"type\": \"object\"`)".into(),
            );
        } else if let Err(e) = jsonschema::draft202012::new(&self.input_schema) {
            bad("/input_schema", format!("not a valid JSON Schema: {e}"));
        }
    }
}
