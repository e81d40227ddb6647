//! The HTTP surface — the only module that knows HTTP. One router per resource; every error is
//! problem+json ([`error`]); bodies are schema-checked at the edge ([`extract`]).

pub mod agents;
pub mod agui;
pub mod apply;
mod apply_schedules;
pub mod console;
pub mod error;
pub mod extract;
pub mod forks;
pub mod functions;
pub mod history;
pub mod memory;
pub mod openapi;
pub mod pause;
mod registry;
pub mod runs;
pub mod schedules;
pub mod server;
pub mod sessions;
pub mod sse;
pub mod system;
pub mod tools;
pub mod usage;
pub mod users;
pub mod versions;
pub mod webhooks;
pub mod workers;
pub mod workflows;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderName, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;

use crate::agents::Agents;
use crate::config::Config;
use crate::domain::Tenant;
use crate::engine::Engine;
use crate::store::{History, RunReads, Store};
use crate::stream::EventHub;
use crate::workflows::Workflows;

use error::ApiError;
use extract::{BodyLimit, BodyTimeout, ServerStop};

/// What handlers share: handles, not locks, and never the whole store. Runs are admitted,
/// started, answered, cancelled and deleted through the engine; runs and their history are
/// read through read-only handles; the workflow and agent registries through their own
/// modules' handles; event streams come from the hub.
///
/// One allocation shared by every request: axum clones the state for each extractor and
/// middleware, and a clone of the handles themselves (a dozen reference counts) showed as 2 %
/// of the server's CPU under load.
#[derive(Clone)]
pub struct AppState(Arc<Handles>);

impl std::ops::Deref for AppState {
    type Target = Handles;

    fn deref(&self) -> &Handles {
        &self.0
    }
}

/// The handles behind [`AppState`].
pub struct Handles {
    pub engine: Engine,
    /// Runs as rows: one, a filtered page, the counts by status.
    pub runs: RunReads,
    /// What runs recorded: events, step attempts, plans, checkpoints, timelines.
    pub history: History,
    pub workflows: Workflows,
    pub agents: Agents,
    /// The versions and labels of workflows, agents and declared tools.
    pub definitions: crate::store::Definitions,
    /// Schedules and their fires.
    pub schedules: crate::store::Schedules,
    /// Sessions: their variables, summaries and runs.
    pub sessions: crate::store::Sessions,
    /// Runs' completion webhook deliveries.
    pub webhooks: crate::store::Webhooks,
    /// Users' data, exported and erased whole.
    pub users: crate::store::users::Users,
    pub events: EventHub,
    pub config: Arc<Config>,
    /// Fired on server stop: open event streams end so the server can drain.
    pub shutdown: CancellationToken,
}

impl AppState {
    /// The state over `store`, of which handlers get only the narrow handles.
    pub fn new(
        engine: Engine,
        store: &Store,
        events: EventHub,
        config: Arc<Config>,
        shutdown: CancellationToken,
    ) -> Self {
        AppState(Arc::new(Handles {
            engine,
            runs: RunReads::new(store.clone()),
            history: History::new(store.clone()),
            workflows: Workflows::new(store.clone()),
            agents: Agents::new(store.clone()),
            definitions: crate::store::Definitions::new(store.clone()),
            schedules: crate::store::Schedules::new(store.clone()),
            webhooks: crate::store::Webhooks::new(store.clone()),
            sessions: crate::store::Sessions::new(store.clone()),
            users: crate::store::users::Users::new(store.clone()),
            events,
            config,
            shutdown,
        }))
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "orca",
        description = "HTTP streaming orchestration service for LLM agents. Every 4xx/5xx is \
            application/problem+json with a stable `code`; a method a path does not have is 405 \
            `method_not_allowed` with an `Allow` header.",
        license(name = "Apache-2.0")
    ),
    paths(
        runs::create_run, runs::list_runs, runs::get_run, runs::delete_run, runs::run_events,
        runs::run_steps,
        runs::cancel_run, runs::submit_input, runs::request_replan, forks::fork_run, pause::pause_run, pause::resume_run, history::run_plans, history::run_checkpoints,
        history::run_timeline,
        schedules::create_schedule, schedules::list_schedules, schedules::get_schedule,
        schedules::update_schedule, schedules::delete_schedule, schedules::schedule_fires,
        webhooks::run_webhook,
        sessions::list_sessions, sessions::get_session, sessions::update_session, sessions::session_history, sessions::delete_session,
        workflows::list_workflows, workflows::get_workflow, workflows::put_workflow,
        workflows::delete_workflow, agents::list_agents, agents::get_agent, agents::put_agent,
        agents::delete_agent, system::list_tools, tools::get_tool, tools::put_tool, tools::delete_tool, functions::list_functions, functions::get_function, functions::put_function, functions::delete_function, system::list_models, system::healthz,
        system::readyz, usage::tenant_usage,
        system::metrics, agui::run_agent,
        versions::list_versions, versions::get_version, versions::delete_version, versions::diff,
        versions::put_label, versions::delete_label, apply::apply, apply::export,
        workers::poll_tasks, workers::heartbeat_task, workers::complete_task, workers::fail_task, workers::get_task,
        workers::list_tasks, workers::list_workers,
        memory::put_item, memory::get_item, memory::delete_item, memory::list_items, memory::search,
        users::export_user, users::erase_user,
    ),
    components(schemas(
        crate::domain::Run, crate::domain::Event, crate::domain::EventKind,
        crate::domain::event::StatusData, crate::domain::event::PlanData, crate::domain::event::StepData, crate::domain::event::TextData, crate::domain::event::ToolCallData, crate::domain::event::ToolResultData, crate::domain::event::InputRequiredData, crate::domain::event::HandoffData, crate::domain::event::SpeakerData, crate::domain::event::UsageData, crate::domain::event::ErrorData, crate::domain::event::FinalData,
        crate::domain::StepAttempt, crate::domain::RunError, error::Problem, error::FieldError,
        crate::tools::ToolInfo, crate::functions::FunctionInfo, crate::functions::FunctionSpec, functions::FunctionDetail, crate::llm::router::ModelInfo, crate::store::PlanRecord, crate::store::Checkpoint,
        workflows::WorkflowSummary, workflows::WorkflowDetail, agui::RunAgentInput, tools::ToolDetail, agui::ResumeEntry, agui::ResumeStatus, agents::AgentSummary, agents::AgentDetail, crate::timeline::Timeline,
        schedules::Schedule, schedules::ScheduleList, schedules::ScheduleFires, schedules::ScheduleFireRecord,
        webhooks::WebhookDelivery, webhooks::WebhookAttempt,
        sessions::Session, sessions::SessionList, sessions::SessionListItem, sessions::SummaryView, sessions::SessionRunView, sessions::SessionHistory, sessions::TurnView, sessions::UpdateSession,
        versions::VersionList, versions::VersionSummary, versions::VersionDetail, versions::VersionDiff, versions::LabelBody, versions::LabelDetail, versions::Collection, apply::ApplyRequest, apply::ApplyResult, apply::BundleFile, apply::Bundle, apply::Change, apply::ChangeKind, apply::Action, crate::domain::definition::Pin, crate::domain::definition::DefinitionKind, crate::domain::definition::ForkDefinitions, runs::StepView,
        schedules::CreateSchedule, schedules::UpdateSchedule, crate::domain::schedule::Missed, crate::domain::schedule::ScheduleFire, crate::domain::run::ForkOrigin, usage::TenantUsage, crate::domain::quota::Quota, crate::domain::quota::Usage,
        workers::TaskView, workers::PollBody, workers::Polled, workers::HeartbeatBody, workers::Lease, workers::CompleteBody, workers::FailBody, workers::TaskList, workers::WorkerView, workers::WorkerList, crate::store::tasks::TaskStatus, crate::store::tasks::TaskError, crate::domain::event::TaskNote,
        memory::PutItem, memory::SearchBody, memory::SearchResult, memory::MemoryList, crate::domain::memory::MemoryItem, crate::domain::memory::SearchMode,
        users::UserExport, users::SessionExport, users::UserErased,
    )),
    modifiers(&SecurityAddon),
    tags(
        (name = "runs", description = "Create, watch, query and cancel runs"),
        (name = "tools", description = "Tools runs can use"),
        (name = "models", description = "Model aliases runs can name"),
        (name = "workflows", description = "The fixed-workflow registry"),
        (name = "schedules", description = "Runs started on a cron expression or an interval"),
        (name = "sessions", description = "What the runs sharing a session_id share: variables, history"),
        (name = "agents", description = "The agent registry"),
        (name = "definitions", description = "Versions, labels and diffs of workflows, agents, declared tools and declared functions; applying and exporting them as files"),
        (name = "users", description = "A tenant's users: their data exported and erased whole"),
        (name = "memory", description = "Memory beyond one session: items by namespace and key, searched by text or meaning"),
        (name = "workers", description = "Tool workers: your own code polls a queue for a run's tool calls, heartbeats and completes them"),
        (name = "system", description = "Health, readiness, metrics"),
    )
)]
pub struct ApiDoc;

struct SecurityAddon;

impl utoipa::Modify for SecurityAddon {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The OpenAPI document (the same document as the repository's `openapi.yaml`).
pub fn openapi() -> serde_json::Value {
    openapi::document()
}

/// The CORS layer for the configured origins, or None when no origin is allowed (the default):
/// then no CORS header is sent and browsers keep other sites' pages from reading answers.
fn cors_layer(config: &crate::config::CorsConfig) -> Option<CorsLayer> {
    use axum::http::{HeaderValue, Method};
    if config.allowed_origins.is_empty() {
        return None;
    }
    let origins = if config.allowed_origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        // Checked by config validation: every entry is an ASCII origin.
        AllowOrigin::list(
            config
                .allowed_origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o).ok()),
        )
    };
    Some(
        CorsLayer::new()
            .allow_origin(origins)
            .allow_methods([
                Method::GET,
                Method::POST,
                Method::PUT,
                Method::PATCH,
                Method::DELETE,
            ])
            .allow_headers([
                header::ACCEPT,
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                HeaderName::from_static("x-api-key"),
                HeaderName::from_static("idempotency-key"),
                HeaderName::from_static("last-event-id"),
                HeaderName::from_static("x-request-id"),
            ])
            .expose_headers([
                header::LOCATION,
                header::RETRY_AFTER,
                header::ALLOW,
                HeaderName::from_static("x-request-id"),
            ])
            .max_age(std::time::Duration::from_secs(config.max_age_secs)),
    )
}

pub fn router(state: AppState) -> Router {
    let (body_limit, stop) = (state.config.server.body_limit_bytes, state.shutdown.clone());
    let body_timeout = std::time::Duration::from_secs(state.config.server.body_read_timeout_secs);
    let cors = cors_layer(&state.config.server.cors);
    let v1 = Router::new()
        .route("/runs", post(runs::create_run).get(runs::list_runs))
        .route("/usage", get(usage::tenant_usage))
        .merge(workers::routes())
        .route("/runs/{id}", get(runs::get_run).delete(runs::delete_run))
        .route("/runs/{id}/events", get(runs::run_events))
        .route("/runs/{id}/steps", get(runs::run_steps))
        .route("/runs/{id}/cancel", post(runs::cancel_run))
        .route("/runs/{id}/input", post(runs::submit_input))
        .route("/runs/{id}/replan", post(runs::request_replan))
        .route("/runs/{id}/fork", post(forks::fork_run))
        .route("/runs/{id}/pause", post(pause::pause_run))
        .route("/runs/{id}/resume", post(pause::resume_run))
        .merge(history::routes())
        .merge(schedules::routes())
        .merge(sessions::routes())
        .merge(memory::routes())
        .merge(users::routes())
        .route("/runs/{id}/webhook", get(webhooks::run_webhook))
        .route("/workflows", get(workflows::list_workflows))
        .route(
            "/workflows/{name}",
            get(workflows::get_workflow)
                .put(workflows::put_workflow)
                .delete(workflows::delete_workflow),
        )
        .route("/agents", get(agents::list_agents))
        .route(
            "/agents/{name}",
            get(agents::get_agent)
                .put(agents::put_agent)
                .delete(agents::delete_agent),
        )
        .route("/tools", get(system::list_tools))
        .route(
            "/tools/{name}",
            get(tools::get_tool)
                .put(tools::put_tool)
                .delete(tools::delete_tool),
        )
        .merge(versions::routes())
        .merge(apply::routes())
        .merge(functions::routes())
        .route("/models", get(system::list_models))
        .route("/agui", post(agui::run_agent));
    let protected = Router::new()
        .nest("/v1", v1)
        .route("/metrics", get(system::metrics))
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate));
    let request_id = HeaderName::from_static("x-request-id");
    Router::new()
        .route("/healthz", get(system::healthz))
        .route("/readyz", get(system::readyz))
        .route("/openapi.json", get(system::openapi_json))
        .merge(if state.config.server.console {
            console::routes()
        } else {
            Router::new()
        })
        .merge(protected)
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        // axum adds the `Allow` header (the route's methods) to this answer.
        .method_not_allowed_fallback(|method: axum::http::Method| async move {
            ApiError::MethodNotAllowed(method.to_string())
        })
        .with_state(state)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn(move |mut req: Request, next: Next| {
            let stop = ServerStop(stop.clone());
            async move {
                req.extensions_mut().insert(BodyLimit(body_limit));
                req.extensions_mut().insert(BodyTimeout(body_timeout));
                req.extensions_mut().insert(stop);
                next.run(req).await
            }
        }))
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(
            TraceLayer::new_for_http().make_span_with(|req: &Request| {
                let id = req
                    .headers()
                    .get("x-request-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                tracing::info_span!("http", method = %req.method(), path = %req.uri().path(), request_id = %id)
            }),
        )
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .layer(SetSensitiveRequestHeadersLayer::new([
            header::AUTHORIZATION,
            HeaderName::from_static("x-api-key"),
        ]))
        // Outermost: a preflight carries no credentials and is answered before auth, and
        // every answer, errors included, carries the CORS headers.
        .layer(tower::util::option_layer(cors))
}

/// Resolves the caller's tenant. Without configured keys everyone is the `default` tenant;
/// with keys, `Authorization: Bearer KEY` or `X-API-Key: KEY` is required.
async fn authenticate(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let auth = &state.config.auth;
    let keys = &auth.api_keys;
    if keys.is_empty() && auth.operator_keys.is_empty() {
        req.extensions_mut().insert(Tenant::default_tenant());
        req.extensions_mut().insert(Reader::Operator);
        req.extensions_mut().insert(users::BoundUser::default());
        return Ok(next.run(req).await);
    }
    let headers = req.headers();
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::trim);
    let matches = |key: &crate::config::Secret| {
        presented.is_some_and(|p| constant_time_eq(key.expose().as_bytes(), p.as_bytes()))
    };
    if auth.operator_keys.iter().any(matches) {
        if req.uri().path() != "/metrics" {
            return Err(ApiError::Forbidden(
                "an operator key reads /metrics only; use a tenant's API key for /v1".into(),
            ));
        }
        req.extensions_mut().insert(Reader::Operator);
        return Ok(next.run(req).await);
    }
    let (tenant, user) = if keys.is_empty() {
        (Tenant::default_tenant(), None)
    } else {
        let key = keys.iter().find(|k| matches(&k.key));
        let key = key.ok_or(ApiError::Unauthorized)?;
        let id = versions::KeyId::of(key.key.expose());
        req.extensions_mut().insert(id);
        (Tenant(key.tenant.clone()), key.user.clone())
    };
    if let Some(me) = &user {
        users::confine(&state, &tenant, me, req.method(), req.uri().path()).await?;
    }
    req.extensions_mut().insert(users::BoundUser(user));
    req.extensions_mut().insert(Reader::Tenant(tenant.clone()));
    req.extensions_mut().insert(tenant);
    Ok(next.run(req).await)
}

/// Who reads `/metrics`: an operator's key (or a server without keys) sees every tenant's
/// series, a tenant's key its own.
#[derive(Debug, Clone)]
pub(crate) enum Reader {
    Operator,
    Tenant(Tenant),
}

/// Compares without an early exit, so response timing does not leak how much of a key matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
