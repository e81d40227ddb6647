//! Memory that outlives a session (issue 48): JSON values under a key in a namespace, per
//! tenant. A namespace is a path of segments (`user/alice/notes`); two roots mean something to
//! runs and to keys bound to a user: `user/USER_ID/…` is that user's, `session/SESSION/…` that
//! session's (and so its user's). Everything else (`shared/…`, `kb/…`) is the tenant's.
//!
//! Names are checked here, once, for the API and the memory tools alike.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// Characters a namespace segment, a key and a user id may hold.
fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '@' | '~')
}

/// The most segments a namespace may have.
pub const MAX_SEGMENTS: usize = 8;
/// The longest segment, user id or key, in characters.
pub const MAX_NAME: usize = 128;
/// The longest key, in characters.
pub const MAX_KEY: usize = 256;

/// Why a name was refused, as a sentence.
fn check_name(what: &str, name: &str, max: usize) -> Result<(), String> {
    if name.is_empty() || name.len() > max {
        return Err(format!("{what} is 1-{max} characters"));
    }
    if let Some(c) = name.chars().find(|c| !name_char(*c)) {
        return Err(format!(
            "{what} holds `{c}`; letters, digits and `_ - . : @ ~` only"
        ));
    }
    Ok(())
}

/// Checks a user id (`RunRequest.user_id`, a key's `user`, `/v1/users/{id}`).
pub fn check_user_id(id: &str) -> Result<(), String> {
    check_name("a user id", id, MAX_NAME)
}

/// Checks a key.
pub fn check_key(key: &str) -> Result<(), String> {
    check_name("a key", key, MAX_KEY)
}

/// A checked namespace: 1-8 segments joined by `/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(String);

/// Whose a namespace is, by its root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner<'a> {
    /// `user/ID/…`
    User(&'a str),
    /// `session/SEGMENT/…` (the session's segment: see [`session_segment`]).
    Session(&'a str),
    /// `user` or `session` alone: every user's, or every session's, memory below it.
    Everyone,
    /// Anything else: the tenant's.
    Tenant,
}

impl Namespace {
    /// Checks `text` (segments joined by `/`).
    pub fn parse(text: &str) -> Result<Namespace, String> {
        let segments: Vec<&str> = text.split('/').collect();
        if segments.len() > MAX_SEGMENTS {
            return Err(format!(
                "a namespace has at most {MAX_SEGMENTS} segments; this one has {}",
                segments.len()
            ));
        }
        for s in &segments {
            check_name("a namespace segment", s, MAX_NAME)?;
        }
        Ok(Namespace(text.to_owned()))
    }

    /// `user/ID` followed by `sub` (a namespace's segments, or nothing).
    pub fn of_user(user: &str, sub: Option<&str>) -> Result<Namespace, String> {
        check_user_id(user)?;
        Namespace::parse(&join(&format!("user/{user}"), sub))
    }

    /// `session/SEGMENT` followed by `sub`.
    pub fn of_session(session: &str, sub: Option<&str>) -> Result<Namespace, String> {
        Namespace::parse(&join(&format!("session/{}", session_segment(session)), sub))
    }

    /// `shared` followed by `sub`.
    pub fn shared(sub: Option<&str>) -> Result<Namespace, String> {
        Namespace::parse(&join("shared", sub))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whose it is.
    pub fn owner(&self) -> Owner<'_> {
        let mut parts = self.0.split('/');
        match (parts.next(), parts.next()) {
            (Some("user"), Some(id)) => Owner::User(id),
            (Some("session"), Some(id)) => Owner::Session(id),
            (Some("user" | "session"), None) => Owner::Everyone,
            _ => Owner::Tenant,
        }
    }

    /// Whether `other` is this namespace or one below it.
    pub fn contains(&self, other: &Namespace) -> bool {
        other.0 == self.0
            || (other.0.len() > self.0.len()
                && other.0.starts_with(&self.0)
                && other.0.as_bytes()[self.0.len()] == b'/')
    }
}

fn join(root: &str, sub: Option<&str>) -> String {
    match sub.map(|s| s.trim_matches('/')).filter(|s| !s.is_empty()) {
        Some(sub) => format!("{root}/{sub}"),
        None => root.to_owned(),
    }
}

/// The namespace segment that names a session: its id when it is a valid segment, otherwise
/// `~` and the SHA-256 of the id in hex (a session id may hold any character).
pub fn session_segment(session: &str) -> String {
    if check_name("", session, MAX_NAME).is_ok() && !session.starts_with('~') {
        return session.to_owned();
    }
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(session.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("~{hex}")
}

/// The text search reads in a value: its strings (and numbers, as written), keys included, in
/// document order, separated by spaces.
pub fn searchable_text(value: &Value) -> String {
    fn push(out: &mut String, s: &str) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(s);
    }
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => push(out, s),
            Value::Number(n) => push(out, &n.to_string()),
            Value::Bool(_) | Value::Null => {}
            Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            Value::Object(map) => {
                for (k, v) in map {
                    push(out, k);
                    walk(v, out);
                }
            }
        }
    }
    let mut out = String::new();
    walk(value, &mut out);
    out
}

/// The words of a search query, lower-cased, at most 32: what both backends' full-text
/// search is given (any word may match; items matching more, and rarer, words rank first).
pub fn query_words(query: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for w in query.split(|c: char| !c.is_alphanumeric()) {
        let w = w.to_lowercase();
        if !w.is_empty() && !words.contains(&w) {
            words.push(w);
        }
        if words.len() == 32 {
            break;
        }
    }
    words
}

/// How a search ranks items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// By meaning when an embedding model is configured, else by text.
    #[default]
    Auto,
    /// Full-text search (SQLite FTS5, PostgreSQL `tsvector`).
    Text,
    /// Cosine similarity of embeddings, ranked exactly over the namespace's items.
    Meaning,
}

/// A stored item, as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MemoryItem {
    pub namespace: String,
    pub key: String,
    /// Any JSON value.
    pub value: Value,
    /// Counts the writes the item has had (1 for its first).
    pub revision: u64,
    /// The user it belongs to, when it is a user's (its namespace, or its session's user).
    pub user_id: Option<String>,
    /// The session whose memory it is, for `session/…` items written by a run.
    pub session_id: Option<String>,
    /// Bytes of its value as JSON text.
    pub size: u64,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
    /// When it is forgotten, if it was put with a TTL.
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The run whose step wrote it last, if a run did.
    pub written_by_run: Option<String>,
    /// Its rank in a search (higher is closer); absent outside searches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_checked_segment_by_segment() {
        assert!(Namespace::parse("user/alice/notes").is_ok());
        assert!(Namespace::parse("kb").is_ok());
        for bad in ["", "a//b", "a/", "/a", "a b", "a/é/b"] {
            assert!(Namespace::parse(bad).is_err(), "{bad} was accepted");
        }
        let deep = ["a"; MAX_SEGMENTS + 1].join("/");
        assert!(
            Namespace::parse(&deep)
                .unwrap_err()
                .contains("at most 8 segments")
        );
        let long = "x".repeat(MAX_NAME + 1);
        assert!(Namespace::parse(&long).is_err());
    }

    #[test]
    fn owners_come_from_the_root() {
        let ns = Namespace::parse("user/alice/notes").unwrap();
        assert_eq!(ns.owner(), Owner::User("alice"));
        let ns = Namespace::of_session("chat 1", None).unwrap();
        assert!(matches!(ns.owner(), Owner::Session(s) if s.starts_with('~') && s.len() == 65));
        assert_eq!(Namespace::shared(Some("kb")).unwrap().as_str(), "shared/kb");
        assert_eq!(Namespace::parse("kb/x").unwrap().owner(), Owner::Tenant);
        assert_eq!(Namespace::parse("user").unwrap().owner(), Owner::Everyone);
    }

    #[test]
    fn containment_is_by_whole_segments() {
        let a = Namespace::parse("user/al").unwrap();
        assert!(a.contains(&Namespace::parse("user/al/x").unwrap()));
        assert!(a.contains(&a));
        assert!(!a.contains(&Namespace::parse("user/alice").unwrap()));
    }

    #[test]
    fn searchable_text_and_words() {
        let v = serde_json::json!({"note": "Likes tea", "n": 3, "tags": ["green", true]});
        assert_eq!(searchable_text(&v), "n 3 note Likes tea tags green");
        assert_eq!(
            query_words("What tea? TEA, green!"),
            ["what", "tea", "green"]
        );
    }
}
