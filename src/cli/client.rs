//! The HTTP side of the CLI: one `Client` per invocation (base URL, API key), JSON requests,
//! problem+json errors, and run event streams read with `eventsource-stream` (the same SSE
//! framing code the OpenAI provider uses). It prints nothing: `progress` and `mod` do.

use std::fmt;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use futures::stream::BoxStream;
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::Value;

/// What a command can fail with, before a run's own outcome: all of them exit 2.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered 4xx/5xx; the body is kept to print it readably.
    #[error("{}", Problem(.status, .body))]
    Status { status: StatusCode, body: Value },
    #[error(
        "cannot reach {url}: is `orca serve` running there? (set --url or ORCA_URL) ({source})"
    )]
    Connect {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The server wants an API key, or another one (401).
    #[error("{}\n{}", Problem(&StatusCode::UNAUTHORIZED, .body), key_hint(*.key_sent))]
    Unauthorized { body: Value, key_sent: bool },
    #[error("{0}")]
    Usage(String),
}

/// How to give the key a 401 asks for (the key itself is never printed).
fn key_hint(key_sent: bool) -> &'static str {
    if key_sent {
        "the server refused the API key given: check --api-key or ORCA_API_KEY"
    } else {
        "the server wants an API key: give it with --api-key KEY or the ORCA_API_KEY environment variable"
    }
}

/// Renders a problem+json body (title, detail, each error's pointer and message); a body that
/// is not one is printed as the status line and the raw body.
struct Problem<'a>(&'a StatusCode, &'a Value);

impl fmt::Display for Problem<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (status, body) = (self.0, self.1);
        let title = body["title"]
            .as_str()
            .or(status.canonical_reason())
            .unwrap_or("error");
        write!(f, "{} {title}", status.as_u16())?;
        if let Some(code) = body["code"].as_str() {
            write!(f, " ({code})")?;
        }
        if let Some(detail) = body["detail"].as_str().filter(|d| !d.is_empty()) {
            write!(f, ": {detail}")?;
        } else if !body.is_object() && !body.is_null() {
            write!(f, ": {body}")?;
        }
        for e in body["errors"].as_array().into_iter().flatten() {
            let pointer = e["pointer"].as_str().unwrap_or("");
            let message = e["message"].as_str().unwrap_or("");
            let pointer = if pointer.is_empty() { "/" } else { pointer };
            write!(f, "\n  {pointer}: {message}")?;
        }
        Ok(())
    }
}

/// One run event as the server framed it: the SSE `id` (= `seq`) and the parsed `data`.
#[derive(Debug, Clone)]
pub struct Event {
    pub seq: u64,
    pub kind: String,
    /// The whole event object (`seq`, `run_id`, `kind`, `ts`, `step_id`, `data`).
    pub body: Value,
}

impl Event {
    pub fn data(&self) -> &Value {
        &self.body["data"]
    }
    pub fn run_id(&self) -> Option<&str> {
        self.body["run_id"].as_str()
    }
}

/// A run's event stream; ends at `final` or when the connection drops (`None`).
pub struct EventStream {
    inner: BoxStream<'static, Result<Event, String>>,
}

impl EventStream {
    fn new(resp: reqwest::Response) -> Self {
        let inner = resp
            .bytes_stream()
            .eventsource()
            .filter_map(|item| async move {
                match item {
                    Err(e) => Some(Err(e.to_string())),
                    // Keep-alive comments never reach here; an event without JSON data is not
                    // one of ours and is skipped.
                    Ok(ev) => {
                        let body: Value = serde_json::from_str(&ev.data).ok()?;
                        let seq = body["seq"]
                            .as_u64()
                            .or_else(|| ev.id.parse().ok())
                            .unwrap_or(0);
                        let kind = body["kind"].as_str().unwrap_or(&ev.event).to_owned();
                        Some(Ok(Event { seq, kind, body }))
                    }
                }
            })
            .boxed();
        EventStream { inner }
    }

    /// The next event; `Err` for a broken connection (the caller may resume), `None` at the end.
    pub async fn next(&mut self) -> Option<Result<Event, String>> {
        self.inner.next().await
    }
}

pub struct Client {
    base: String,
    api_key: Option<String>,
    http: reqwest::Client,
}

impl Client {
    pub fn new(base: &str, api_key: Option<String>) -> Result<Self, Error> {
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Error::Usage(format!(
                "--url/ORCA_URL must start with http:// or https://, not `{base}`"
            )));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| Error::Usage(format!("building the HTTP client: {e}")))?;
        Ok(Client {
            base,
            api_key: api_key.filter(|k| !k.is_empty()),
            http,
        })
    }

    /// The server reads `Authorization: Bearer KEY` (or `X-API-Key`); we send the former.
    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let req = self.http.request(method, format!("{}{path}", self.base));
        match &self.api_key {
            Some(key) => req.bearer_auth(key),
            None => req,
        }
    }

    async fn send(&self, req: RequestBuilder) -> Result<reqwest::Response, Error> {
        let resp = req.send().await.map_err(|source| Error::Connect {
            url: self.base.clone(),
            source,
        })?;
        let status = resp.status();
        if status.is_client_error() || status.is_server_error() {
            let text = resp.text().await.unwrap_or_default();
            let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
            if status == StatusCode::UNAUTHORIZED {
                let key_sent = self.api_key.is_some();
                return Err(Error::Unauthorized { body, key_sent });
            }
            return Err(Error::Status { status, body });
        }
        Ok(resp)
    }

    async fn json(&self, req: RequestBuilder) -> Result<Value, Error> {
        let resp = self.send(req).await?;
        let url = self.base.clone();
        let text = resp
            .text()
            .await
            .map_err(|source| Error::Connect { url, source })?;
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> Result<Value, Error> {
        self.json(self.request(Method::GET, path)).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, Error> {
        self.json(self.request(Method::POST, path).json(body)).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Result<Value, Error> {
        self.json(self.request(Method::PUT, path).json(body)).await
    }

    pub async fn patch(&self, path: &str, body: &Value) -> Result<Value, Error> {
        self.json(self.request(Method::PATCH, path).json(body))
            .await
    }

    pub async fn delete(&self, path: &str) -> Result<(), Error> {
        self.send(self.request(Method::DELETE, path))
            .await
            .map(drop)
    }

    /// A run's stored events after `after`, as one JSON array (no stream).
    pub async fn stored_events(&self, run_id: &str, after: u64) -> Result<Value, Error> {
        let path = format!("/v1/runs/{run_id}/events?after={after}");
        let req = self.request(Method::GET, &path);
        self.json(req.header("accept", "application/json")).await
    }

    /// `POST /v1/runs` with `Accept: text/event-stream`: the run's events from the first.
    pub async fn start_run(&self, body: &Value) -> Result<EventStream, Error> {
        let req = self
            .request(Method::POST, "/v1/runs")
            .header("accept", "text/event-stream")
            .json(body);
        Ok(EventStream::new(self.send(req).await?))
    }

    /// A run's events after `after` (`Last-Event-ID`), replayed then live until `final`.
    pub async fn events(&self, run_id: &str, after: u64) -> Result<EventStream, Error> {
        let mut req = self
            .request(Method::GET, &format!("/v1/runs/{run_id}/events"))
            .header("accept", "text/event-stream");
        if after > 0 {
            req = req.header("last-event-id", after.to_string());
        }
        Ok(EventStream::new(self.send(req).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn problems_print_title_detail_and_each_pointer() {
        let body = json!({"title": "Validation failed", "status": 422, "code": "validation_failed",
            "detail": "the request has 2 problems",
            "errors": [{"pointer": "/input", "message": "is required"},
                       {"pointer": "", "message": "bad"}]});
        let text = Problem(&StatusCode::UNPROCESSABLE_ENTITY, &body).to_string();
        assert_eq!(
            text,
            "422 Validation failed (validation_failed): the request has 2 problems\n  /input: is required\n  /: bad"
        );
        let plain = Problem(&StatusCode::BAD_GATEWAY, &json!("upstream down")).to_string();
        assert_eq!(plain, "502 Bad Gateway: \"upstream down\"");
    }
}
