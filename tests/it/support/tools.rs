//! Test-only tools with observable side effects: call counters, a concurrency gauge, a tool
//! that fails a set number of times, one that sleeps. Registered next to the built-ins through
//! `App::build_with`, so a re-executed step shows in the counts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use orca::tools::{Tool, ToolError};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Shared observations of the test tools (cheap to clone).
#[derive(Clone, Default)]
pub struct Probe {
    inner: Arc<ProbeInner>,
}

#[derive(Default)]
struct ProbeInner {
    /// Calls per `key` argument. A std mutex: counters only.
    calls: Mutex<HashMap<String, usize>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    times: Mutex<HashMap<String, Vec<Instant>>>,
}

impl Probe {
    pub fn calls(&self, key: &str) -> usize {
        self.inner
            .calls
            .lock()
            .unwrap()
            .get(key)
            .copied()
            .unwrap_or(0)
    }
    pub fn max_in_flight(&self) -> usize {
        self.inner.max_in_flight.load(Ordering::SeqCst)
    }
    pub fn times(&self, key: &str) -> Vec<Instant> {
        self.inner
            .times
            .lock()
            .unwrap()
            .get(key)
            .cloned()
            .unwrap_or_default()
    }
    fn hit(&self, key: &str) -> usize {
        self.inner
            .times
            .lock()
            .unwrap()
            .entry(key.to_owned())
            .or_default()
            .push(Instant::now());
        let mut calls = self.inner.calls.lock().unwrap();
        let n = calls.entry(key.to_owned()).or_default();
        *n += 1;
        *n
    }

    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![
            Arc::new(Count(self.clone())),
            Arc::new(Flaky(self.clone())),
            Arc::new(Sleep(self.clone())),
            Arc::new(Panic),
        ]
    }
}

fn key_of(args: &Value) -> String {
    args["key"].as_str().unwrap_or("default").to_owned()
}

fn schema(extra: Value) -> Value {
    let mut props = json!({ "key": { "type": "string" }, "value": {} });
    if let (Some(p), Some(e)) = (props.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    json!({ "type": "object", "properties": props, "additionalProperties": false })
}

/// `test.count {key, value?, delay_ms?}` → `{key, calls, value}`; tracks concurrency.
struct Count(Probe);

#[async_trait]
impl Tool for Count {
    fn name(&self) -> &str {
        "test.count"
    }
    fn description(&self) -> &str {
        "Counts calls per key and echoes value"
    }
    fn input_schema(&self) -> Value {
        schema(json!({ "delay_ms": { "type": "integer", "minimum": 0 } }))
    }
    async fn call(&self, args: Value, cancel: &CancellationToken) -> Result<Value, ToolError> {
        let p = &self.0.inner;
        let now = p.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        p.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let key = key_of(&args);
        let calls = self.0.hit(&key);
        let delay = args["delay_ms"].as_u64().unwrap_or(0);
        let result = if delay > 0 {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(delay)) => Ok(()),
                _ = cancel.cancelled() => Err(ToolError::Cancelled),
            }
        } else {
            // Yield once so concurrent calls really overlap in the gauge.
            tokio::task::yield_now().await;
            Ok(())
        };
        p.in_flight.fetch_sub(1, Ordering::SeqCst);
        result?;
        Ok(
            json!({ "key": key, "calls": calls, "value": args.get("value").cloned().unwrap_or(Value::Null) }),
        )
    }
}

/// `test.flaky {key, failures}`: fails with code `flaky` on the first `failures` calls per key.
struct Flaky(Probe);

#[async_trait]
impl Tool for Flaky {
    fn name(&self) -> &str {
        "test.flaky"
    }
    fn description(&self) -> &str {
        "Fails the first N calls per key"
    }
    fn input_schema(&self) -> Value {
        schema(json!({ "failures": { "type": "integer", "minimum": 0 } }))
    }
    async fn call(&self, args: Value, _cancel: &CancellationToken) -> Result<Value, ToolError> {
        let key = key_of(&args);
        let n = self.0.hit(&key);
        let failures = args["failures"].as_u64().unwrap_or(u64::MAX) as usize;
        if n <= failures {
            return Err(ToolError::failed(
                "flaky",
                format!("failure {n} of {failures}"),
            ));
        }
        Ok(json!({ "key": key, "calls": n }))
    }
}

/// `test.sleep {key, ms}`: sleeps (cancellable).
struct Sleep(Probe);

#[async_trait]
impl Tool for Sleep {
    fn name(&self) -> &str {
        "test.sleep"
    }
    fn description(&self) -> &str {
        "Sleeps ms milliseconds"
    }
    fn input_schema(&self) -> Value {
        schema(json!({ "ms": { "type": "integer", "minimum": 0 } }))
    }
    async fn call(&self, args: Value, cancel: &CancellationToken) -> Result<Value, ToolError> {
        self.0.hit(&key_of(&args));
        let ms = args["ms"].as_u64().unwrap_or(0);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(ms)) => Ok(json!({ "slept_ms": ms })),
            _ = cancel.cancelled() => Err(ToolError::Cancelled),
        }
    }
}

/// `test.panic {}`: a buggy tool.
struct Panic;

#[async_trait]
impl Tool for Panic {
    fn name(&self) -> &str {
        "test.panic"
    }
    fn description(&self) -> &str {
        "Panics"
    }
    fn input_schema(&self) -> Value {
        schema(json!({}))
    }
    async fn call(&self, _args: Value, _cancel: &CancellationToken) -> Result<Value, ToolError> {
        panic!("a buggy tool");
    }
}

/// A top-level sequential step `outer` holding a counted child (`first`), a parallel step of
/// two counted children (`both`: `left`, `right`), and a loop over two items (`each`) whose
/// body counts the item (`tally-1`, `tally-2`) and asks a human (`ask`).
pub fn nested_plan() -> Value {
    let counted = |id: &str, key: &str| json!({ "id": id, "kind": "tool", "input": { "tool": "test.count", "arguments": { "key": key } } });
    json!({ "steps": [{ "id": "outer", "kind": "sequential", "input": { "steps": [
        counted("first", "first"),
        { "id": "both", "kind": "parallel", "input": { "steps": [counted("left", "left"), counted("right", "right")] } },
        { "id": "each", "kind": "loop", "input": { "for_each": [1, 2], "max_iterations": 2, "steps": [
            counted("tally", "tally-{{ item }}"),
            { "id": "ask", "kind": "user_input", "input": { "prompt": "item {{ item }}?" } },
        ] } },
    ] } }] })
}
