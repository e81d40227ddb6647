//! `/v1/schedules`: run bodies started on a cron expression's ticks (in a time zone) or at an
//! interval. Each body is checked as `POST /v1/runs` checks it; the loop that fires the ticks
//! is `workers::schedules`. When to fire, and what a missed tick does, is `domain::schedule`'s
//! rule.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use std::sync::Arc;

use crate::agents::Overlay;
use crate::domain::Tenant;
use crate::domain::schedule::Missed;
use crate::engine::intake::Refused;
use crate::store::{Capped, FireRecord, ScheduleRecord};

use super::AppState;
use super::error::{ApiError, FieldError};
use super::extract::{JsonBody, Path, deserialize_located};
use super::runs::admit_body;

/// How many coming ticks a schedule shows.
const UPCOMING: usize = 5;

/// The longest schedule name, in characters.
pub(super) const MAX_NAME_CHARS: usize = 200;

/// The fires a schedule's `/fires` shows, newest first.
const FIRES_SHOWN: u32 = 100;

/// The `/v1/schedules` routes.
pub fn routes() -> axum::Router<AppState> {
    use axum::routing::{get, post};
    axum::Router::new()
        .route("/schedules", post(create_schedule).get(list_schedules))
        .route(
            "/schedules/{id}",
            get(get_schedule)
                .patch(update_schedule)
                .delete(delete_schedule),
        )
        .route("/schedules/{id}/fires", get(schedule_fires))
}

/// A schedule as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Schedule {
    pub id: String,
    pub name: Option<String>,
    /// A cron expression (five fields, or six with seconds first); `null` for an interval.
    pub cron: Option<String>,
    /// The IANA time zone the cron expression is read in (`UTC` for intervals).
    pub timezone: String,
    /// The interval between ticks, in milliseconds; `null` for a cron schedule.
    pub interval_ms: Option<u64>,
    /// The run body each tick starts, as `POST /v1/runs` takes it.
    #[schema(value_type = Object)]
    pub run: Value,
    pub enabled: bool,
    pub missed: Missed,
    /// The next tick; `null` while disabled or when no tick is left.
    pub next_fire_at: Option<DateTime<Utc>>,
    /// The next ticks (up to five) while enabled.
    pub next_fire_times: Vec<DateTime<Utc>>,
    pub last_fire_at: Option<DateTime<Utc>>,
    /// The run the last fired tick started.
    pub last_run_id: Option<String>,
    /// Ticks that started a run.
    pub fire_count: u64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// While the next tick's run cannot start yet (the server is full, its store refuses
    /// writes): when it is tried again (the wait doubles with each attempt, up to 30 s).
    pub retry_at: Option<DateTime<Utc>>,
    /// The attempts made at the next tick whose run could not start; 0 otherwise.
    pub retries: u32,
    /// Why the next tick's run could not start yet.
    pub retry_reason: Option<String>,
}

/// `GET /v1/schedules` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleList {
    pub schedules: Vec<Schedule>,
}

/// One tick a schedule acted on.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleFireRecord {
    pub fire_at: DateTime<Utc>,
    /// The run the tick started; `null` when it started none (`reason` and `error` say why).
    pub run_id: Option<String>,
    /// Why the tick started no run: `missed` (it, and the ticks up to the time `error`
    /// names, passed more than 60 s before a run could start), `rate` (the tenant's
    /// `schedule_fires_per_minute`), `quota` (one of the tenant's run quotas), `refused`
    /// (the body no longer runs).
    pub reason: Option<String>,
    pub error: Option<String>,
    pub fired_at: DateTime<Utc>,
}

/// `GET /v1/schedules/{id}/fires` answer: the latest 100, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleFires {
    pub fires: Vec<ScheduleFireRecord>,
}

/// The body of `POST /v1/schedules`: exactly one of `cron` and `interval_ms`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSchedule {
    #[schema(max_length = 200)]
    pub name: Option<String>,
    /// Five fields (minute hour day-of-month month day-of-week) or six with seconds first.
    #[schema(min_length = 1)]
    pub cron: Option<String>,
    /// An IANA time zone for `cron` (default `UTC`).
    pub timezone: Option<String>,
    /// 1,000 (a second) to 31,622,400,000 (a year).
    #[schema(minimum = 1000, maximum = 31_622_400_000u64)]
    pub interval_ms: Option<u64>,
    /// The run body each tick starts, checked as `POST /v1/runs` checks it.
    #[schema(value_type = Object)]
    pub run: Value,
    /// Default true.
    pub enabled: Option<bool>,
    /// Default `skip`.
    pub missed: Option<Missed>,
}

/// The body of `PATCH /v1/schedules/{id}`: the members to change. `cron` switches the
/// schedule to a cron timing and `interval_ms` to an interval (not both); a changed timing,
/// or enabling, counts ticks from now.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateSchedule {
    #[schema(max_length = 200)]
    pub name: Option<String>,
    #[schema(min_length = 1)]
    pub cron: Option<String>,
    pub timezone: Option<String>,
    #[schema(minimum = 1000, maximum = 31_622_400_000u64)]
    pub interval_ms: Option<u64>,
    #[schema(value_type = Option<Object>)]
    pub run: Option<Value>,
    pub enabled: Option<bool>,
    pub missed: Option<Missed>,
}

impl From<ScheduleRecord> for Schedule {
    fn from(s: ScheduleRecord) -> Self {
        let next_fire_times = match (s.enabled, s.next_fire_at, s.timing()) {
            (true, Some(next), Ok(timing)) => {
                let mut ticks = vec![next];
                ticks.extend(timing.upcoming(next, UPCOMING - 1));
                ticks
            }
            _ => Vec::new(),
        };
        Schedule {
            id: s.id,
            name: s.name,
            cron: s.cron,
            timezone: s.timezone,
            interval_ms: s.interval_ms,
            run: s.run,
            enabled: s.enabled,
            missed: s.missed,
            next_fire_at: s.next_fire_at.filter(|_| s.enabled),
            next_fire_times,
            last_fire_at: s.last_fire_at,
            last_run_id: s.last_run_id,
            fire_count: s.fire_count,
            created_at: s.created_at,
            updated_at: s.updated_at,
            retry_at: s.retry_at,
            retries: s.retries,
            retry_reason: s.retry_reason,
        }
    }
}

/// Checks a schedule as it would be stored: its name, timing and run body (as `POST
/// /v1/runs` would, as the tenant), every problem at once; sets its next tick from `now`.
async fn check(
    state: &AppState,
    tenant: &Tenant,
    s: &mut ScheduleRecord,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    check_over(state, tenant, s, now, None).await
}

/// [`check`], the run body checked with `overlay` (a bundle being applied) in front of the
/// registries when one is given.
pub(super) async fn check_over(
    state: &AppState,
    tenant: &Tenant,
    s: &mut ScheduleRecord,
    now: DateTime<Utc>,
    overlay: Option<Arc<Overlay>>,
) -> Result<(), ApiError> {
    let mut problems = Vec::new();
    if s.name
        .as_ref()
        .is_some_and(|n| n.chars().count() > MAX_NAME_CHARS)
    {
        problems.push(FieldError::new(
            "/name",
            format!("at most {MAX_NAME_CHARS} characters"),
        ));
    }
    let timing = match (&s.cron, s.interval_ms) {
        (Some(_), Some(_)) => Err(vec![(
            "interval_ms",
            "give either `cron` or `interval_ms`, not both".to_owned(),
        )]),
        (None, None) => Err(vec![(
            "cron",
            "give `cron` (with `timezone`) or `interval_ms`".to_owned(),
        )]),
        (None, Some(_)) if s.timezone != "UTC" => Err(vec![(
            "timezone",
            "`timezone` applies to `cron` only; intervals are counted in UTC".to_owned(),
        )]),
        _ => s.timing(),
    };
    match timing {
        Ok(timing) => s.next_fire_at = timing.next_after(now),
        Err(wrong) => problems.extend(
            wrong
                .into_iter()
                .map(|(field, message)| FieldError::new(format!("/{field}"), message)),
        ),
    }
    let admitted = match overlay {
        None => admit_body(state, tenant, s.run.clone()).await.map(drop),
        Some(overlay) => (state.engine)
            .admit_body_over(tenant, s.run.clone(), overlay)
            .await
            .map(drop)
            .map_err(|refused| match refused {
                Refused::Invalid(problems) => ApiError::problems(problems),
                Refused::Store(e) => e.into(),
            }),
    };
    if let Err(e) = admitted {
        match e {
            ApiError::Validation { errors, .. } => problems.extend(
                errors
                    .into_iter()
                    .map(|f| FieldError::new(format!("/run{}", f.pointer), f.message)),
            ),
            other => return Err(other),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ApiError::validation_many(problems))
    }
}

/// Create a schedule.
///
/// Exactly one of `cron` (with an optional IANA `timezone`) and `interval_ms`. The `run` body
/// is checked as `POST /v1/runs` checks it, as the caller; any problem is a 422 listing every
/// one (`/run/...` pointers for the body's). Each tick starts the body as a run of the caller
/// with `schedule: {id, fire_at}`. A tick more than 60 s late (the servers were down) was
/// missed: `missed: "skip"` fires nothing for it, `"catch_up_one"` fires the latest one once.
#[utoipa::path(
    post, path = "/v1/schedules", tag = "schedules",
    request_body = CreateSchedule,
    responses(
        (status = 201, description = "Created; `Location` names it", body = Schedule),
        (status = 400, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body was not sent as application/json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 429, description = "The tenant has as many schedules as its quota `schedules` allows", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn create_schedule(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let body: CreateSchedule = deserialize_located(body)?;
    let now = crate::domain::now();
    let mut s = ScheduleRecord {
        id: uuid::Uuid::now_v7().to_string(),
        tenant: tenant.clone(),
        name: body.name,
        cron: body.cron,
        timezone: body.timezone.unwrap_or_else(|| "UTC".into()),
        interval_ms: body.interval_ms,
        anchor_at: now,
        run: body.run,
        enabled: body.enabled.unwrap_or(true),
        missed: body.missed.unwrap_or_default(),
        next_fire_at: None,
        last_fire_at: None,
        last_run_id: None,
        fire_count: 0,
        created_at: now,
        updated_at: now,
        retry_at: None,
        retries: 0,
        retry_reason: None,
    };
    check(&state, &tenant, &mut s, now).await?;
    let cap = state.config.quotas.of(&tenant.0).schedules;
    if let Capped::Full { count } = state.schedules.insert_schedule(&s, cap).await? {
        return Err(ApiError::TooManyRequests {
            message: format!(
                "the tenant's quota `schedules` is {cap}: it has {count} schedules; delete one \
                 to create another"
            ),
            retry_after_secs: 60,
        });
    }
    let location =
        HeaderValue::from_str(&format!("/v1/schedules/{}", s.id)).map_err(ApiError::internal)?;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(Schedule::from(s)),
    )
        .into_response())
}

/// List the caller's schedules, oldest first.
#[utoipa::path(
    get, path = "/v1/schedules", tag = "schedules",
    responses((status = 200, body = ScheduleList))
)]
pub async fn list_schedules(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
) -> Result<Json<ScheduleList>, ApiError> {
    let schedules = state.schedules.list_schedules(&tenant).await?;
    Ok(Json(ScheduleList {
        schedules: schedules.into_iter().map(Schedule::from).collect(),
    }))
}

async fn found(state: &AppState, tenant: &Tenant, id: &str) -> Result<ScheduleRecord, ApiError> {
    state
        .schedules
        .get_schedule(tenant, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no schedule `{id}`")))
}

/// Get a schedule with its next ticks.
#[utoipa::path(
    get, path = "/v1/schedules/{id}", tag = "schedules",
    params(("id" = String, Path)),
    responses(
        (status = 200, body = Schedule),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_schedule(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Json<Schedule>, ApiError> {
    Ok(Json(found(&state, &tenant, &id).await?.into()))
}

/// Change a schedule: enable or disable it, or change its name, timing, run body or policy.
///
/// A changed timing, or enabling a disabled schedule, counts ticks from now: ticks that passed
/// while it was disabled are not caught up. Checked as on create (422 listing every problem).
#[utoipa::path(
    patch, path = "/v1/schedules/{id}", tag = "schedules",
    params(("id" = String, Path)),
    request_body = UpdateSchedule,
    responses(
        (status = 200, body = Schedule),
        (status = 400, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body was not sent as application/json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn update_schedule(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<Schedule>, ApiError> {
    let patch: UpdateSchedule = deserialize_located(body)?;
    let mut s = found(&state, &tenant, &id).await?;
    let now = crate::domain::now();
    let (was_enabled, next_before) = (s.enabled, s.next_fire_at);
    let retimed = patch.cron.is_some() || patch.interval_ms.is_some() || patch.timezone.is_some();
    if patch.cron.is_some() && patch.interval_ms.is_some() {
        return Err(ApiError::validation(
            "/interval_ms",
            "give either `cron` or `interval_ms`, not both",
        ));
    }
    if let Some(cron) = patch.cron {
        s.cron = Some(cron);
        s.interval_ms = None;
    }
    if let Some(ms) = patch.interval_ms {
        s.interval_ms = Some(ms);
        s.cron = None;
        s.timezone = "UTC".into();
    }
    if let Some(zone) = patch.timezone {
        s.timezone = zone;
    }
    s.name = patch.name.or(s.name);
    s.run = patch.run.unwrap_or(s.run);
    s.enabled = patch.enabled.unwrap_or(s.enabled);
    s.missed = patch.missed.unwrap_or(s.missed);
    // A new timing, or an enabled schedule that was off, counts its ticks from now.
    let restart = retimed || (s.enabled && !was_enabled);
    if restart {
        s.anchor_at = now;
    }
    check(&state, &tenant, &mut s, now).await?;
    // An untouched timing keeps its next tick (a due one still fires).
    if !restart {
        s.next_fire_at = next_before;
    }
    s.updated_at = now;
    if !state.schedules.update_schedule(&s).await? {
        return Err(ApiError::NotFound(format!("no schedule `{id}`")));
    }
    Ok(Json(s.into()))
}

/// Delete a schedule. The runs it started stay.
#[utoipa::path(
    delete, path = "/v1/schedules/{id}", tag = "schedules",
    params(("id" = String, Path)),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn delete_schedule(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if state.schedules.delete_schedule(&tenant, &id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no schedule `{id}`")))
    }
}

/// The ticks a schedule acted on, newest first (the latest 100): the run each started, or
/// why it could not start one.
#[utoipa::path(
    get, path = "/v1/schedules/{id}/fires", tag = "schedules",
    params(("id" = String, Path)),
    responses(
        (status = 200, body = ScheduleFires),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
pub async fn schedule_fires(
    State(state): State<AppState>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Json<ScheduleFires>, ApiError> {
    let s = found(&state, &tenant, &id).await?;
    let fires = state.schedules.schedule_fires(&s.id, FIRES_SHOWN).await?;
    Ok(Json(ScheduleFires {
        fires: fires.into_iter().map(fire_record).collect(),
    }))
}

fn fire_record(f: FireRecord) -> ScheduleFireRecord {
    ScheduleFireRecord {
        fire_at: f.fire_at,
        run_id: f.run_id,
        reason: f.reason,
        error: f.error,
        fired_at: f.fired_at,
    }
}
