//! Definitions as versioned data (issue 45): the kinds of definition a tenant registers
//! (workflows, agents, declared HTTP tools), how a run names one (`name`, `name@3`,
//! `name@production`), the [`Pin`] a run records of each definition it uses, and the digest
//! that tells two versions apart. Plain data, no IO.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::ids::check_name;
use super::text_enum::text_enum;

text_enum! {
    /// What kind of registered definition.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ToSchema)]
    pub enum DefinitionKind {
        Workflow = "workflow",
        Agent = "agent",
        /// An HTTP tool declared through the API.
        Tool = "tool",
        /// A named LLM function declared through the API.
        Function = "function",
    }
}

text_enum! {
    /// Which versions of its definitions a fork runs.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ToSchema)]
    pub enum ForkDefinitions {
        /// The parent's, exactly (the default).
        #[default]
        Parent = "parent",
        /// The latest of the agents and nested workflows its plan names and of the tenant's
        /// declared tools; the run's own workflow stays the parent's (its checkpoint is of
        /// those steps).
        Current = "current",
    }
}

/// Which version of a definition a reference asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Version {
    /// The latest version: a bare `name` (or `name@latest`).
    Latest,
    /// `name@3`.
    Number(u32),
    /// `name@production`: the version the label points at when the reference is resolved.
    Label(String),
}

impl Version {
    /// A version as a path or a query gives it: a number, a label, or `latest`.
    pub fn parse(text: &str) -> Result<Version, String> {
        if text == LATEST {
            return Ok(Version::Latest);
        }
        if text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty() {
            return match text.parse::<u32>() {
                Ok(n) if n >= 1 => Ok(Version::Number(n)),
                _ => Err(format!(
                    "versions are numbered from 1 up to {}; `{text}` is not one",
                    u32::MAX
                )),
            };
        }
        check_label(text).map(|()| Version::Label(text.to_owned()))
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Version::Latest => f.write_str(LATEST),
            Version::Number(n) => write!(f, "{n}"),
            Version::Label(label) => f.write_str(label),
        }
    }
}

/// What a caller is told of a version `name` does not have: the versions and labels it has.
pub fn unknown_version(
    kind: DefinitionKind,
    name: &str,
    asked: &Version,
    versions: &[u32],
    labels: &[String],
) -> String {
    let noun = kind.as_str();
    let what = match asked {
        Version::Label(label) => format!("no label `{label}`"),
        other => format!("no version {other}"),
    };
    let versions: Vec<String> = versions.iter().map(u32::to_string).collect();
    let labels = match labels.is_empty() {
        true => "none".to_owned(),
        false => labels.join(", "),
    };
    format!(
        "{noun} `{name}` has {what}; its versions: {}; its labels: {labels} \
         (GET /v1/{noun}s/{name}/versions)",
        versions.join(", ")
    )
}

/// The word for the latest version; no label may take it.
pub const LATEST: &str = "latest";

/// A label's name: a definition name that starts with a letter (so it never reads as a
/// version number), and not `latest`.
pub fn check_label(label: &str) -> Result<(), String> {
    let starts_with_letter = label.starts_with(|c: char| c.is_ascii_lowercase());
    if label == LATEST {
        return Err("`latest` always means the latest version; no label may take it".into());
    }
    match check_name(label) {
        Ok(()) if starts_with_letter => Ok(()),
        _ => Err(format!(
            "labels are 1-64 characters of lowercase letters, digits, `_`, `.` or `-`, starting \
             with a letter; `{label}` is not"
        )),
    }
}

/// A reference to a definition: `name`, `name@3` or `name@label`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub name: String,
    pub version: Version,
}

impl Reference {
    pub fn parse(text: &str) -> Result<Reference, String> {
        let (name, version) = match text.split_once('@') {
            Some((name, version)) => (name, Version::parse(version)?),
            None => (text, Version::Latest),
        };
        check_name(name)?;
        Ok(Reference {
            name: name.to_owned(),
            version,
        })
    }
}

/// The exact version of one definition a run uses, recorded when the run is created: the run
/// executes (and resumes, on any replica) this version, whatever changes meanwhile.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
pub struct Pin {
    pub kind: DefinitionKind,
    pub name: String,
    pub version: u32,
    /// The SHA-256 of the version's definition ([`digest`]).
    pub digest: String,
    /// A shared definition (loaded from the server's directory), not the tenant's own.
    #[serde(default)]
    pub shared: bool,
}

/// What tells two definitions apart: a SHA-256 of the definition in canonical JSON (object
/// members sorted), so two spellings of one value have one digest.
pub fn digest(definition: &Value) -> String {
    use sha2::{Digest, Sha256};
    let mut text = String::new();
    write_canonical(definition, &mut text);
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// JSON text with every object's members in key order, whatever order the map keeps.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<_> = map.iter().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_reference_names_the_latest_a_number_or_a_label() {
        let parse = |t: &str| Reference::parse(t).map(|r| (r.name, r.version));
        assert_eq!(parse("triage"), Ok(("triage".into(), Version::Latest)));
        assert_eq!(parse("triage@3"), Ok(("triage".into(), Version::Number(3))));
        assert_eq!(
            parse("triage@production"),
            Ok(("triage".into(), Version::Label("production".into())))
        );
        assert_eq!(
            parse("triage@latest"),
            Ok(("triage".into(), Version::Latest))
        );
        for bad in [
            "triage@0",
            "triage@",
            "triage@Prod",
            "Triage@1",
            "t@1@2",
            "t@99999999999",
        ] {
            assert!(parse(bad).is_err(), "{bad} was taken");
        }
    }

    #[test]
    fn a_label_starts_with_a_letter_and_is_not_latest() {
        assert!(check_label("production").is_ok());
        assert!(check_label("v2-canary").is_ok());
        assert!(check_label("2nd").is_err());
        assert!(check_label("latest").is_err());
        assert!(check_label("").is_err());
    }

    #[test]
    fn the_digest_ignores_member_order_and_tells_values_apart() {
        let a = json!({"name": "x", "steps": [{"id": "a", "kind": "tool"}]});
        let b: Value =
            serde_json::from_str(r#"{"steps":[{"kind":"tool","id":"a"}],"name":"x"}"#).unwrap();
        assert_eq!(digest(&a), digest(&b));
        assert_ne!(digest(&a), digest(&json!({"name": "x", "steps": []})));
        assert!(digest(&a).starts_with("sha256:") && digest(&a).len() == 71);
    }
}
