//! `POST /v1/runs/{id}/fork`: time travel. A new run that starts where the run stood at one of
//! its checkpoints (or before one of its steps finished), optionally with another input or
//! plan; see `engine::fork` for what it carries. Its `parent` links it to the run, and
//! `GET /v1/runs?parent_id=` lists a run's forks.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::domain::Tenant;
use crate::engine::fork::ForkRequest;
use crate::engine::{self, Created};

use super::AppState;
use super::error::ApiError;
use super::extract::{JsonBody, Path, deserialize_located};
use super::runs::{idempotency_key, parse_run_id};

/// The body of `POST /v1/runs/{id}/fork`; every field is optional (`{}` forks from the latest
/// checkpoint, as the run stands).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkBody {
    /// The checkpoint to start from (`GET /v1/runs/{id}/checkpoints`); 0 starts from the
    /// beginning. Default: the latest.
    #[serde(default)]
    pub checkpoint: Option<u64>,
    /// Start from the last checkpoint before this step (an id, or a nested step's path such as
    /// `outer/inner` or `each[2]/body`) had finished: it and what follows run again.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 1000)]
    pub before_step: Option<String>,
    /// Another input for the fork: the steps that run in it read this one.
    #[serde(default)]
    #[schema(schema_with = input_schema)]
    pub input: Option<Value>,
    /// Another plan (AgentPlan) in place of the one in force at the checkpoint: the completed
    /// steps that are the same in it, with everything they depend on, are kept; the rest run.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub plan: Option<Value>,
    /// Which versions of the registered definitions the fork runs: the parent's (`parent`,
    /// the default) or the latest (`current`: the agents and nested workflows its plan names,
    /// and the declared tools; the run's own workflow stays the parent's). The fork's
    /// `definitions` says which it got.
    #[serde(default)]
    pub definitions: crate::domain::definition::ForkDefinitions,
}

fn input_schema() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Object]))
        .min_length(Some(1))
        .max_length(Some(100_000))
        .description(Some("Another input: a string, or an object."))
        .build()
}

/// Fork a run: a new run that starts from one of its checkpoints.
///
/// The fork starts where the run stood at the checkpoint: the steps that had completed (at
/// every level) keep their outputs and do not run again; the rest runs, with the fork's input
/// and plan if the body gives others. It is linked to the run by `parent`; the run's forks are
/// listed by `GET /v1/runs?parent_id={id}`. Any run of the caller's can be forked, finished or
/// not.
#[utoipa::path(
    post, path = "/v1/runs/{id}/fork", tag = "runs",
    params(("id" = String, Path),
        ("Idempotency-Key" = Option<String>, Header, nullable = false, min_length = 1, max_length = 255, pattern = "^[!-~]+$",
        description = "Same key (per caller) returns the first fork")),
    request_body = ForkBody,
    responses(
        (status = 201, description = "The fork, created and started", body = crate::domain::Run),
        (status = 200, description = "The fork this Idempotency-Key already made", body = crate::domain::Run),
        (status = 400, description = "Malformed JSON", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The run's history cannot be forked, or its session refuses a second run", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than server.body_limit_bytes, or the fork would copy more history than the tenant's forks may in a day (`fork_bytes_per_day`)", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body was not sent as application/json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "A checkpoint or step the run does not have, or an invalid input or plan", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 429, description = "The tenant is at a quota (runs, `forks_per_day`, `fork_bytes_per_day`); `Retry-After` says when to try again", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "Too many queued runs, or the store refuses writes", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn fork_run(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let parent = parse_run_id(&id)?;
    let key = idempotency_key(&headers)?;
    let body: ForkBody = deserialize_located(body)?;
    if body
        .before_step
        .as_ref()
        .is_some_and(|s| s.is_empty() || s.len() > 1000)
    {
        return Err(ApiError::validation(
            "/before_step",
            "`before_step` is a step's id or path, 1 to 1,000 characters",
        ));
    }
    let request = ForkRequest {
        checkpoint: body.checkpoint,
        before_step: body.before_step,
        input: body.input,
        plan: body.plan,
        definitions: body.definitions,
    };
    let forked = state.engine.fork(&tenant, parent, request, key.as_deref());
    let (run, status) = match forked.await {
        Ok(Created::New(run, _)) => (run, StatusCode::CREATED),
        Ok(Created::Existing(run)) => (run, StatusCode::OK),
        Err(engine::Error::NotFound) => return Err(ApiError::NotFound(format!("no run `{id}`"))),
        Err(engine::Error::Invalid(problems)) => return Err(ApiError::problems(problems)),
        Err(e) => return Err(super::runs::creation_error(e)),
    };
    let location =
        HeaderValue::from_str(&format!("/v1/runs/{}", run.id)).map_err(ApiError::internal)?;
    Ok((status, [(header::LOCATION, location)], Json(run)).into_response())
}
