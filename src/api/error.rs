//! API errors as RFC 9457 problem+json with stable `code`s. Infrastructure failures are logged
//! with their cause chain and answered with an opaque 500: no internals leave the process.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// One located problem: a JSON Pointer into the request body (or `/query/NAME`,
/// `/headers/NAME` for parameters) and a sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct FieldError {
    pub pointer: String,
    pub message: String,
}

impl FieldError {
    pub fn new(pointer: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            pointer: pointer.into(),
            message: message.into(),
        }
    }
}

/// The problem+json body.
#[derive(Debug, Serialize, ToSchema)]
pub struct Problem {
    pub r#type: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    pub code: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
    /// On a worker's refused report (409): `task_cancelled`, `lease_expired`, `not_yours`
    /// or `task_finished`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("the body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("{detail}")]
    Validation {
        detail: String,
        errors: Vec<FieldError>,
    },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// A worker's report on a task refused (409 `conflict`); `reason` says why
    /// (`task_cancelled`, `lease_expired`, `not_yours`, `task_finished`).
    #[error("{detail}")]
    TaskConflict {
        reason: &'static str,
        detail: String,
    },
    #[error("the body is larger than the limit of {0} bytes")]
    PayloadTooLarge(usize),
    /// A change past a stored limit (a session's variables): the sentence names the limit,
    /// its value and what the change would use.
    #[error("{0}")]
    TooLarge(String),
    #[error("the body did not arrive within {} s", .0.as_secs())]
    RequestTimeout(std::time::Duration),
    #[error("send the body as application/json (Content-Type: application/json)")]
    UnsupportedMediaType,
    #[error("this endpoint does not answer {0}; the Allow header lists the methods it does")]
    MethodNotAllowed(String),
    /// The `Idempotency-Key` was used before with a different body: replaying the first run
    /// would hand the caller a run it did not ask for.
    #[error("the Idempotency-Key was already used with a different request body")]
    IdempotencyKeyReused,
    #[error(
        "missing or invalid API key: send it as `Authorization: Bearer KEY` or `X-API-Key: KEY` \
         (the keys are [[auth.api_keys]] in the server's configuration)"
    )]
    Unauthorized,
    /// Authenticated, but the server's configuration does not let callers do this.
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Unavailable(String),
    /// Over a tenant's quota: 429 with `Retry-After` (seconds).
    #[error("{message}")]
    TooManyRequests {
        message: String,
        retry_after_secs: u64,
    },
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl ApiError {
    pub fn validation(pointer: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        ApiError::Validation {
            detail: message.clone(),
            errors: vec![FieldError::new(pointer, message)],
        }
    }

    pub fn validation_many(errors: Vec<FieldError>) -> Self {
        let detail = match errors.len() {
            1 => errors[0].message.clone(),
            n => format!("the request has {n} problems"),
        };
        ApiError::Validation { detail, errors }
    }

    /// A 422 with the problems a plan, workflow or answer check found.
    pub fn problems(problems: Vec<crate::plan::Problem>) -> Self {
        let errors = problems.into_iter();
        ApiError::validation_many(
            errors
                .map(|p| FieldError::new(p.pointer, p.message))
                .collect(),
        )
    }

    pub fn internal(e: impl Into<anyhow::Error>) -> Self {
        ApiError::Internal(e.into())
    }

    fn parts(&self) -> (StatusCode, &'static str, &'static str) {
        match self {
            ApiError::InvalidJson(_) => (StatusCode::BAD_REQUEST, "invalid_json", "Invalid JSON"),
            ApiError::Validation { .. } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "validation_failed",
                "Validation failed",
            ),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found", "Not found"),
            ApiError::Conflict(_) | ApiError::TaskConflict { .. } => {
                (StatusCode::CONFLICT, "conflict", "Conflict")
            }
            ApiError::PayloadTooLarge(_) | ApiError::TooLarge(_) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "Payload too large",
            ),
            ApiError::RequestTimeout(_) => (
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "Request timeout",
            ),
            ApiError::UnsupportedMediaType => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "Unsupported media type",
            ),
            ApiError::MethodNotAllowed(_) => (
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "Method not allowed",
            ),
            ApiError::IdempotencyKeyReused => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                "Idempotency key reused",
            ),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized", "Unauthorized"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden", "Forbidden"),
            ApiError::Unavailable(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                "Service unavailable",
            ),
            ApiError::TooManyRequests { .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "quota_exceeded",
                "Quota exceeded",
            ),
            ApiError::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "Internal error",
            ),
        }
    }
}

impl From<crate::store::Error> for ApiError {
    fn from(e: crate::store::Error) -> Self {
        ApiError::internal(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, title) = self.parts();
        if let ApiError::Internal(e) = &self {
            tracing::error!(error = ?e, "request failed");
        }
        let errors = match &self {
            ApiError::Validation { errors, .. } => errors.clone(),
            ApiError::IdempotencyKeyReused => vec![FieldError::new(
                "/headers/idempotency-key",
                "already used with a different body; send a new key for a new request",
            )],
            _ => Vec::new(),
        };
        let problem = Problem {
            r#type: format!("https://orca.dev/problems/{code}"),
            title: title.to_owned(),
            status: status.as_u16(),
            detail: self.to_string(),
            code: code.to_owned(),
            errors,
            reason: match &self {
                ApiError::TaskConflict { reason, .. } => Some((*reason).to_owned()),
                _ => None,
            },
        };
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut resp = (status, body).into_response();
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        match self {
            ApiError::Unauthorized => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"orca\""),
                );
            }
            ApiError::Unavailable(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ApiError::TooManyRequests {
                retry_after_secs, ..
            } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            }
            // The rest of the body may still be on its way: this connection cannot carry
            // another request.
            ApiError::RequestTimeout(_) => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        resp
    }
}
