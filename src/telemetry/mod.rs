//! OpenTelemetry traces, off unless an OTLP endpoint is configured (`telemetry.otlp_endpoint`,
//! or the standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`).
//!
//! One trace per run (a new one each time a run resumes after a restart): a `run` span; a span
//! per step attempt, under its parent step's attempt when nested; under an attempt, a span per
//! model call (`chat {model}`) and per tool call (`execute_tool {tool}`) with the GenAI
//! semantic-convention attributes. Spans carry names, ids, kinds, counts and error codes, never
//! prompts, outputs, arguments or keys.
//!
//! The engine calls the functions below at its seams; with telemetry off they do nothing.

mod otlp;

use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use crate::config::TelemetryConfig;
use crate::domain::{RunError, StepAttempt, StepStatus};

/// The app's tracer provider (flushed and shut down with the app), or nothing.
#[derive(Debug, Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
    tracer: Option<SdkTracer>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Telemetry {
    /// Starts the exporter when an endpoint is configured; must run inside the Tokio runtime.
    pub fn from_config(config: &TelemetryConfig) -> anyhow::Result<Telemetry> {
        let endpoint = Some(config.otlp_endpoint.clone())
            .filter(|e| !e.trim().is_empty())
            .or_else(|| env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
            .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"));
        let Some(endpoint) = endpoint else {
            return Ok(Telemetry::default());
        };
        let service = env("OTEL_SERVICE_NAME").unwrap_or_else(|| config.service_name.clone());
        let exporter =
            otlp::OtlpJsonExporter::new(&endpoint, &service, tokio::runtime::Handle::current())?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .build();
        let tracer = provider.tracer("orca");
        tracing::info!(endpoint = %endpoint, "exporting traces over OTLP");
        Ok(Telemetry {
            provider: Some(provider),
            tracer: Some(tracer),
        })
    }

    pub fn is_on(&self) -> bool {
        self.tracer.is_some()
    }

    /// Sends what is buffered and stops the exporter (on the way out; blocking, so off the
    /// runtime's worker threads).
    pub async fn shutdown(&self) {
        if let Some(provider) = self.provider.clone() {
            let done = tokio::task::spawn_blocking(move || {
                let _ = provider.force_flush();
                let _ = provider.shutdown();
            });
            let _ = done.await;
        }
    }

    fn start(
        &self,
        name: String,
        kind: SpanKind,
        parent: Option<&Context>,
        attrs: Vec<KeyValue>,
    ) -> Option<Context> {
        let tracer = self.tracer.as_ref()?;
        let builder = tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attrs);
        let span = match parent {
            Some(cx) => builder.start_with_context(tracer, cx),
            None => builder.start_with_context(tracer, &Context::new()),
        };
        Some(Context::new().with_span(span))
    }

    /// A run's span (a trace root).
    pub fn start_run(
        &self,
        run_id: &str,
        orchestration: &str,
        tenant: &str,
        resumed: bool,
    ) -> Option<Context> {
        // Off: nothing to build the span's name and attributes for.
        self.tracer.as_ref()?;
        self.start(
            "run".into(),
            SpanKind::Internal,
            None,
            vec![
                KeyValue::new("orca.run.id", run_id.to_owned()),
                KeyValue::new("orca.run.orchestration", orchestration.to_owned()),
                KeyValue::new("orca.tenant", tenant.to_owned()),
                KeyValue::new("orca.run.resumed", resumed),
            ],
        )
    }

    /// An attempt's span, under `parent` (the enclosing step's attempt, else the run).
    pub fn start_attempt(
        &self,
        parent: Option<&Context>,
        attempt: &StepAttempt,
    ) -> Option<Context> {
        // Off: nothing to build the span's name and attributes for.
        self.tracer.as_ref()?;
        let key = match &attempt.path {
            Some(p) => format!("{p}/{}", attempt.step_id),
            None => attempt.step_id.clone(),
        };
        self.start(
            format!("step {key}"),
            SpanKind::Internal,
            parent,
            vec![
                KeyValue::new("orca.step.id", attempt.step_id.clone()),
                KeyValue::new("orca.step.key", key),
                KeyValue::new("orca.step.kind", attempt.kind.as_str().to_owned()),
                KeyValue::new("orca.step.attempt", i64::from(attempt.attempt)),
                KeyValue::new("orca.plan.version", i64::from(attempt.plan_version)),
            ],
        )
    }

    /// A model call's span (`chat {model}`).
    pub fn start_chat(
        &self,
        parent: Option<&Context>,
        provider: &str,
        model: &str,
    ) -> Option<Context> {
        // Off: nothing to build the span's name and attributes for.
        self.tracer.as_ref()?;
        self.start(
            format!("chat {model}"),
            SpanKind::Client,
            parent,
            vec![
                KeyValue::new("gen_ai.operation.name", "chat"),
                KeyValue::new("gen_ai.provider.name", provider.to_owned()),
                KeyValue::new("gen_ai.system", provider.to_owned()),
                KeyValue::new("gen_ai.request.model", model.to_owned()),
            ],
        )
    }

    /// A tool call's span (`execute_tool {tool}`).
    pub fn start_tool(
        &self,
        parent: Option<&Context>,
        tool: &str,
        call_id: &str,
    ) -> Option<Context> {
        // Off: nothing to build the span's name and attributes for.
        self.tracer.as_ref()?;
        self.start(
            format!("execute_tool {tool}"),
            SpanKind::Internal,
            parent,
            vec![
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", tool.to_owned()),
                KeyValue::new("gen_ai.tool.call.id", call_id.to_owned()),
            ],
        )
    }
}

/// Adds attributes to a span (no-op without one).
pub fn annotate(cx: Option<&Context>, attrs: Vec<KeyValue>) {
    if let Some(cx) = cx {
        cx.span().set_attributes(attrs);
    }
}

/// Ends a span, with the error's code as `error.type` and an error status when there is one.
pub fn end(cx: Option<Context>, error: Option<&RunError>) {
    let Some(cx) = cx else { return };
    let span = cx.span();
    if let Some(e) = error {
        span.set_attribute(KeyValue::new("error.type", e.code.as_str().to_owned()));
        span.set_status(Status::error(e.code.as_str().to_owned()));
    }
    span.end();
}

/// Ends an attempt's span with its status.
pub fn end_attempt(cx: Option<Context>, status: StepStatus, error: Option<&RunError>) {
    annotate(
        cx.as_ref(),
        vec![KeyValue::new(
            "orca.step.status",
            status.as_str().to_owned(),
        )],
    );
    end(cx, error);
}
