//! Request bodies: read within the size and time limits, parsed as JSON, checked against the
//! JSON Schema of `schemas/`, then deserialised into typed requests. Every failure is a
//! problem+json with every located error at once, never a 500.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::header;
use jsonschema::Validator;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::{ApiError, FieldError};

/// A JSON body, parsed but not yet validated.
pub struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
            let ct = ct.to_str().unwrap_or("").to_ascii_lowercase();
            let essence = ct.split(';').next().unwrap_or("").trim();
            if !(essence == "application/json" || essence.ends_with("+json")) {
                return Err(ApiError::UnsupportedMediaType);
            }
        }
        let limit = req
            .extensions()
            .get::<BodyLimit>()
            .map_or(usize::MAX, |l| l.0);
        let deadline = req.extensions().get::<BodyTimeout>().map(|t| t.0);
        let read = Bytes::from_request(req, state);
        // The whole body within the deadline, not each piece: a client trickling a byte at a
        // time must not hold its connection (and a descriptor) open for ever.
        let read = match deadline {
            Some(d) => tokio::time::timeout(d, read)
                .await
                .map_err(|_| ApiError::RequestTimeout(d))?,
            None => read.await,
        };
        let bytes = read.map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge(limit)
            } else {
                ApiError::InvalidJson(rejection.body_text())
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

/// The configured body limit, put in request extensions so rejections can name it.
#[derive(Clone, Copy)]
pub struct BodyLimit(pub usize);

/// The longest a whole request body may take to arrive (`server.body_read_timeout_secs`),
/// put in request extensions next to [`BodyLimit`].
#[derive(Clone, Copy)]
pub struct BodyTimeout(pub std::time::Duration);

/// Compiles one of the schemas shipped in `schemas/`. They are part of the binary and checked
/// by tests, so failing here is a build defect.
pub fn compile_schema(text: &str) -> Validator {
    let schema: Value = serde_json::from_str(text).expect("shipped schema is JSON");
    jsonschema::validator_for(&schema).expect("shipped schema compiles")
}

/// All schema violations of `value`, each with a JSON Pointer to the offending member.
pub fn schema_errors(validator: &Validator, value: &Value) -> Vec<FieldError> {
    crate::schema::member_violations(validator, value, |_| None)
        .into_iter()
        .map(|v| FieldError::new(v.pointer, v.message))
        .collect()
}

/// Validates against the schema, then deserialises.
pub fn parse_with_schema<T: DeserializeOwned>(
    validator: &Validator,
    value: Value,
) -> Result<T, ApiError> {
    let errors = schema_errors(validator, &value);
    if !errors.is_empty() {
        return Err(ApiError::validation_many(errors));
    }
    serde_json::from_value(value).map_err(|e| ApiError::validation("", e.to_string()))
}

pub use crate::schema::escape_pointer;
