//! `GET /v1/runs/{id}/webhook`: a run's completion webhook delivery and every attempt (what
//! `workers::webhooks` sent and what came back). A run body's `webhook` is checked where the
//! rest of the body is, in `engine::intake`.

use axum::extract::State;
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::Tenant;
use crate::store::Delivery;

use super::AppState;
use super::error::ApiError;
use super::extract::Path;
use super::runs::own_run;

/// A run's completion webhook.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookDelivery {
    /// `null` when the run names no webhook.
    pub url: Option<String>,
    /// `pending` (the run has not ended, or an attempt is due), `delivered` (a 2xx answer),
    /// `failed` (attempts used up, or the destination refused), or `none` (the run names no
    /// webhook).
    pub state: String,
    pub created_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub attempts: Vec<WebhookAttempt>,
}

/// One attempt to deliver it.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookAttempt {
    pub attempt: u32,
    /// When it was recorded, just before it was sent.
    pub at: DateTime<Utc>,
    /// `sending` (no answer yet), `delivered` (a 2xx answer), `failed` (another answer, a
    /// timeout or a connection failure), `refused` (the destination policy refused the
    /// address; nothing was sent) or `interrupted` (the replica sending it stopped before it
    /// recorded an answer: the receiver may have got it).
    pub outcome: String,
    /// The receiver's HTTP status; `null` when none came (see `error`).
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: u64,
}

impl From<Delivery> for WebhookDelivery {
    fn from(d: Delivery) -> Self {
        WebhookDelivery {
            url: Some(d.url),
            state: d.state,
            created_at: Some(d.created_at),
            finished_at: d.finished_at,
            attempts: d
                .attempts
                .into_iter()
                .map(|a| WebhookAttempt {
                    attempt: a.attempt,
                    at: a.at,
                    outcome: a.outcome.as_str().into(),
                    status_code: a.status_code,
                    error: a.error,
                    duration_ms: a.duration_ms,
                })
                .collect(),
        }
    }
}

/// A run's completion webhook: where it goes, whether it was delivered, every attempt.
#[utoipa::path(
    get, path = "/v1/runs/{id}/webhook", tag = "runs",
    params(("id" = String, Path, description = "Run id")),
    responses(
        (status = 200, description = "The delivery; `state: none` when the run names no webhook", body = WebhookDelivery),
        (status = 404, description = "No such run", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn run_webhook(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Json<WebhookDelivery>, ApiError> {
    let run = own_run(&state, &tenant, &id).await?;
    match state.webhooks.delivery(&tenant, run).await? {
        Some(d) => Ok(Json(d.into())),
        None => Ok(Json(WebhookDelivery {
            url: None,
            state: "none".into(),
            created_at: None,
            finished_at: None,
            attempts: Vec::new(),
        })),
    }
}
