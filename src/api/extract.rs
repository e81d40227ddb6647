//! Everything handlers take from a request, so that every rejection is a problem+json with a
//! pointer, never axum's plain-text one. Bodies are read within the size and time limits, must
//! be sent as JSON (`Content-Type: application/json` or a `+json` type), are parsed, then
//! deserialised into typed requests (a run's body is checked against
//! `schemas/RunRequest.schema.json` first, by the engine's intake). Path and query
//! parameters go through [`Path`] and [`Query`], whose failures point at `/path/NAME` and
//! `/query/NAME`.

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::schema::pointer_of;

use super::error::{ApiError, FieldError};

/// A JSON body, parsed but not yet validated.
pub struct JsonBody(pub Value);

/// Whether a `Content-Type` value announces JSON: `application/json` or an `application/*+json`
/// type, with any parameters (`; charset=utf-8`).
///
/// A missing type is refused too: browsers send cross-site form posts (`text/plain`,
/// `application/x-www-form-urlencoded`, `multipart/form-data`) without a preflight, and
/// accepting a body whatever it claims to be would let any web page create runs.
fn is_json_media_type(value: &str) -> bool {
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match essence.split_once('/') {
        Some(("application", sub)) => sub == "json" || sub.ends_with("+json"),
        _ => false,
    }
}

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(is_json_media_type);
        if !json {
            return Err(ApiError::UnsupportedMediaType);
        }
        let limit = req
            .extensions()
            .get::<BodyLimit>()
            .map_or(usize::MAX, |l| l.0);
        let deadline = req.extensions().get::<BodyTimeout>().map(|t| t.0);
        let stop = req
            .extensions()
            .get::<ServerStop>()
            .map_or_else(CancellationToken::new, |s| s.0.clone());
        let read = Bytes::from_request(req, state);
        // The whole body within the deadline, not each piece: a client trickling a byte at a
        // time must not hold its connection (and a descriptor) open for ever.
        let read = async {
            match deadline {
                Some(d) => tokio::time::timeout(d, read)
                    .await
                    .map_err(|_| ApiError::RequestTimeout(d)),
                None => Ok(read.await),
            }
        };
        // Nor past a server stop: the request has done nothing yet, and a client told 503 can
        // send it again to a server that is running.
        let read = tokio::select! {
            r = read => r?,
            () = stop.cancelled() => {
                return Err(ApiError::Unavailable(
                    "the server is stopping; send the request again".into(),
                ))
            }
        };
        let bytes = read.map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge(limit)
            } else {
                // The rejection's text is hyper's (connection errors and the like): nothing a
                // caller can act on, and not ours to pass on.
                tracing::debug!(error = %rejection.body_text(), "reading a request body failed");
                ApiError::InvalidJson("the body could not be read".into())
            }
        })?;
        if bytes.is_empty() {
            return Err(ApiError::InvalidJson("the body is empty".into()));
        }
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::InvalidJson(e.to_string()))
    }
}

/// The server's stop token, put in request extensions next to [`BodyTimeout`]: a body still
/// arriving when the server stops is not waited for (the request is answered 503 at once).
#[derive(Clone)]
pub struct ServerStop(pub CancellationToken);

/// The configured body limit, put in request extensions so rejections can name it.
#[derive(Clone, Copy)]
pub struct BodyLimit(pub usize);

/// The longest a whole request body may take to arrive (`server.body_read_timeout_secs`),
/// put in request extensions next to [`BodyLimit`].
#[derive(Clone, Copy)]
pub struct BodyTimeout(pub std::time::Duration);

/// Deserialises `value`, locating a failure by JSON Pointer.
pub fn deserialize_located<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    crate::schema::deserialize_located(value)
        .map_err(|v| ApiError::validation(&v.pointer, v.message))
}

/// The field a serde message is about, for errors raised above the field itself
/// (``duplicate field `after` ``, ``unknown field `x` ``, ``missing field `y` ``).
fn field_named_in(message: &str) -> Option<&str> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(&message[start..start + len])
}

/// Query parameters deserialised into `T`; a failure is a 422 pointing at `/query/NAME`.
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or("");
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(de)
            .map(Query)
            .map_err(|e| {
                let path = pointer_of(e.path());
                let message = e.into_inner().to_string();
                let pointer = match (path.is_empty(), field_named_in(&message)) {
                    (false, _) => format!("/query{path}"),
                    (true, Some(field)) => format!("/query/{}", escape_pointer(field)),
                    (true, None) => "/query".to_owned(),
                };
                let message = match message.strip_prefix("duplicate field ") {
                    Some(field) => format!("{field} is given more than once"),
                    None => message,
                };
                ApiError::validation(&pointer, message)
            })
    }
}

/// Path parameters deserialised into `T`; a failure is a 422 pointing at `/path/NAME`.
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        use axum::extract::path::ErrorKind;
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(Path(v)),
            Err(PathRejection::FailedToDeserializePathParams(e)) => {
                let pointer = match e.kind() {
                    ErrorKind::InvalidUtf8InPathParam { key }
                    | ErrorKind::ParseErrorAtKey { key, .. }
                    | ErrorKind::DeserializeError { key, .. } => {
                        format!("/path/{}", escape_pointer(key))
                    }
                    _ => "/path".to_owned(),
                };
                let message = match e.kind() {
                    ErrorKind::InvalidUtf8InPathParam { .. } => {
                        "the path segment is not valid UTF-8".to_owned()
                    }
                    _ => e.body_text(),
                };
                Err(ApiError::validation(&pointer, message))
            }
            // Only a handler mounted on a route without parameters gets here: a defect.
            Err(other) => Err(ApiError::internal(anyhow::anyhow!(other.body_text()))),
        }
    }
}

pub use crate::schema::escape_pointer;

/// The problem of a query parameter a list endpoint does not know: its name, the nearest known
/// one, and all the known ones (`known`; a family of names as `metadata.KEY`), e.g.
/// "unknown parameter `sesion_id`: did you mean `session_id`? (known: `status`, ... or
/// `cursor`)".
/// A list's `limit` (1 to 200), or why not.
pub fn page_limit(v: &str) -> Result<u32, String> {
    match v.parse::<u32>() {
        Ok(n) if (1..=200).contains(&n) => Ok(n),
        _ => Err("limit must be an integer from 1 to 200".into()),
    }
}

/// A query parameter given a second time is ambiguous (the last one? both?): refused.
pub fn given_once<'a>(
    seen: &mut std::collections::HashSet<&'a str>,
    name: &'a str,
) -> Result<(), FieldError> {
    match seen.insert(name) {
        true => Ok(()),
        false => Err(FieldError::new(
            format!("/query/{}", escape_pointer(name)),
            format!("`{name}` is given more than once"),
        )),
    }
}

pub fn unknown_parameter(name: &str, known: &[&str]) -> FieldError {
    let near = crate::suggest::did_you_mean(name, known.iter().copied());
    FieldError::new(
        format!("/query/{}", escape_pointer(name)),
        format!(
            "unknown parameter `{name}`{near} (known: {})",
            crate::suggest::listed(known, known.len(), "")
        ),
    )
}

/// `text`'s bytes in hex: a page cursor holding any text, safe in a query string.
pub fn hex_of(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The text [`hex_of`] made, or any even run of hex digits read as text (bytes that are no
/// text become U+FFFD: a cursor is only a place in an order); `None` for anything else.
pub fn text_of_hex(hex: &str) -> Option<String> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_media_types() {
        for (value, json) in [
            ("application/json", true),
            ("application/json; charset=utf-8", true),
            ("Application/JSON;charset=UTF-8", true),
            ("application/merge-patch+json", true),
            ("application/problem+json; charset=utf-8", true),
            ("text/plain", false),
            ("text/plain;charset=UTF-8", false),
            ("application/x-www-form-urlencoded", false),
            ("multipart/form-data; boundary=x", false),
            ("text/json", false),
            ("text/x+json", false),
            ("application/jsonx", false),
            ("", false),
        ] {
            assert_eq!(is_json_media_type(value), json, "{value:?}");
        }
    }

    #[test]
    fn type_errors_point_at_their_member() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Inner {
            max_steps: Option<u64>,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Outer {
            limits: Inner,
            tools: Vec<String>,
        }
        let cases = [
            (
                serde_json::json!({"limits": {"max_steps": 1.5}, "tools": []}),
                "/limits/max_steps",
            ),
            (
                serde_json::json!({"limits": {}, "tools": ["a", 2]}),
                "/tools/1",
            ),
        ];
        for (value, pointer) in cases {
            let err = deserialize_located::<Outer>(value).unwrap_err();
            let ApiError::Validation { errors, .. } = err else {
                panic!("not a validation error: {err:?}");
            };
            assert_eq!(errors[0].pointer, pointer);
        }
    }
}
