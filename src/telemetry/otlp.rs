//! An OTLP/HTTP exporter with the JSON encoding, on orca's own reqwest client: the SDK's batch
//! processor hands it finished spans, it posts them to `<endpoint>/v1/traces`. Written here
//! rather than taken from `opentelemetry-otlp`, whose HTTP transport brings prost, generated
//! protocol types and a second reqwest: this is one small function over the same JSON.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::{KeyValue, Value as OtelValue};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use serde_json::{Value, json};

#[derive(Debug)]
pub struct OtlpJsonExporter {
    url: String,
    service: String,
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl OtlpJsonExporter {
    /// `endpoint` is the collector's base (`http://127.0.0.1:4318`) or its full traces URL.
    pub fn new(
        endpoint: &str,
        service: &str,
        runtime: tokio::runtime::Handle,
    ) -> anyhow::Result<Self> {
        let endpoint = endpoint.trim_end_matches('/');
        let url = if endpoint.ends_with("/v1/traces") {
            endpoint.to_owned()
        } else {
            format!("{endpoint}/v1/traces")
        };
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?;
        Ok(OtlpJsonExporter {
            url,
            service: service.to_owned(),
            client,
            runtime,
        })
    }
}

fn nanos(t: SystemTime) -> String {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
        .to_string()
}

fn value(v: &OtelValue) -> Value {
    match v {
        OtelValue::Bool(b) => json!({ "boolValue": b }),
        OtelValue::I64(i) => json!({ "intValue": i.to_string() }),
        OtelValue::F64(f) => json!({ "doubleValue": f }),
        OtelValue::String(s) => json!({ "stringValue": s.as_str() }),
        OtelValue::Array(a) => json!({ "stringValue": a.to_string() }),
        _ => json!({ "stringValue": v.to_string() }),
    }
}

fn attributes(kvs: &[KeyValue]) -> Vec<Value> {
    kvs.iter()
        .map(|kv| json!({ "key": kv.key.as_str(), "value": value(&kv.value) }))
        .collect()
}

fn kind(k: &SpanKind) -> u8 {
    match k {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

fn span(s: &SpanData) -> Value {
    let status = match &s.status {
        Status::Unset => json!({}),
        Status::Ok => json!({ "code": 1 }),
        Status::Error { description } => json!({ "code": 2, "message": description.as_ref() }),
    };
    let mut out = json!({
        "traceId": s.span_context.trace_id().to_string(),
        "spanId": s.span_context.span_id().to_string(),
        "name": s.name.as_ref(),
        "kind": kind(&s.span_kind),
        "startTimeUnixNano": nanos(s.start_time),
        "endTimeUnixNano": nanos(s.end_time),
        "attributes": attributes(&s.attributes),
        "status": status,
    });
    if s.parent_span_id != opentelemetry::trace::SpanId::INVALID {
        out["parentSpanId"] = json!(s.parent_span_id.to_string());
    }
    out
}

/// The `ExportTraceServiceRequest` body for a batch.
pub fn body(service: &str, batch: &[SpanData]) -> Value {
    json!({ "resourceSpans": [{
        "resource": { "attributes": [{ "key": "service.name", "value": { "stringValue": service } }] },
        "scopeSpans": [{ "scope": { "name": "orca", "version": env!("CARGO_PKG_VERSION") },
                         "spans": batch.iter().map(span).collect::<Vec<_>>() }],
    }]})
}

impl SpanExporter for OtlpJsonExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let request = self
            .client
            .post(&self.url)
            .json(&body(&self.service, &batch));
        // The batch processor polls this on its own thread: the request runs on orca's runtime.
        let sent = self
            .runtime
            .spawn(async move { request.send().await.and_then(|r| r.error_for_status()) });
        match sent.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(OTelSdkError::InternalFailure(format!(
                "OTLP export failed: {e}"
            ))),
            Err(e) => Err(OTelSdkError::InternalFailure(format!(
                "OTLP export task: {e}"
            ))),
        }
    }
}
