//! The OpenAI chat-completions dialect of the scripted server: `POST /v1/chat/completions`
//! answered with `chat.completion.chunk` frames, or refused the way OpenAI refuses.
//!
//! The refusals follow OpenAI's documented rules, written here independently of orca's own
//! projection so a shared mistake cannot hide: a strict `json_schema` outside the Structured
//! Outputs subset, tool and schema names outside `^[a-zA-Z0-9_-]{1,64}$`, function parameters
//! that are not an object schema, tool messages that answer no preceding tool call (and tool
//! calls left unanswered), JSON mode without the word "json" in the messages,
//! `parallel_tool_calls` without tools, `stream_options` without streaming.

use super::*;

/// Keywords OpenAI's strict mode accepts (its Structured Outputs guide, "Supported schemas").
const STRICT_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "$ref",
    "$defs",
    "definitions",
    "description",
    "title",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
];
const STRICT_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];
/// The guide's limits: object properties in all, levels of nesting, enum values in all.
const MAX_PROPERTIES: usize = 5000;
const MAX_NESTING: usize = 10;
const MAX_ENUM_VALUES: usize = 1000;

/// Why OpenAI would refuse `body` with a 400: the message and the blamed `param`.
fn refusal(body: &Value) -> Option<(String, String)> {
    let refuse = |param: &str, message: String| Some((message, param.to_owned()));
    if body.get("stream") != Some(&json!(true)) && body.get("stream_options").is_some() {
        return refuse(
            "stream_options",
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.".into(),
        );
    }
    let tools = body.get("tools").and_then(Value::as_array);
    if body.get("parallel_tool_calls").is_some() && tools.is_none_or(|t| t.is_empty()) {
        return refuse(
            "parallel_tool_calls",
            "Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only allowed \
             when 'tools' are specified."
                .into(),
        );
    }
    for (i, tool) in tools.into_iter().flatten().enumerate() {
        let name = tool
            .pointer("/function/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !valid_name(name) {
            return refuse(
                &format!("tools[{i}].function.name"),
                format!(
                    "Invalid 'tools[{i}].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."
                ),
            );
        }
        let parameters = tool.pointer("/function/parameters");
        if parameters.is_some_and(|p| p.get("type") != Some(&json!("object"))) {
            return refuse(
                &format!("tools[{i}].function.parameters"),
                format!(
                    "Invalid schema for function '{name}': schema must be a JSON Schema of 'type: \"object\"'."
                ),
            );
        }
    }
    if let Some(problem) = message_order(body) {
        return Some(problem);
    }
    let format = body.get("response_format")?;
    match format.get("type").and_then(Value::as_str) {
        Some("json_object") => {
            let text = body["messages"].to_string().to_lowercase();
            (!text.contains("json")).then(|| {
                (
                    "'messages' must contain the word 'json' in some form, to use \
                     'response_format' of type 'json_object'."
                        .to_owned(),
                    "messages".to_owned(),
                )
            })
        }
        Some("json_schema") => {
            let spec = &format["json_schema"];
            let name = spec.get("name").and_then(Value::as_str).unwrap_or("");
            if !valid_name(name) {
                return refuse(
                    "response_format.json_schema.name",
                    "Invalid 'response_format.json_schema.name': string does not match pattern."
                        .into(),
                );
            }
            if spec.get("strict") != Some(&json!(true)) {
                return None;
            }
            let problem = strict_schema_problem(spec.get("schema").unwrap_or(&Value::Null))?;
            refuse(
                "response_format",
                format!("Invalid schema for response_format '{name}': {problem}"),
            )
        }
        _ => refuse(
            "response_format.type",
            "Invalid value for 'response_format.type'.".into(),
        ),
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Tool messages must answer a tool call of the assistant message before them, and every tool
/// call must be answered before the next message of another role.
fn message_order(body: &Value) -> Option<(String, String)> {
    let messages = body.get("messages").and_then(Value::as_array)?;
    let mut open: Vec<String> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        if role == "tool" {
            let id = message
                .get("tool_call_id")
                .and_then(Value::as_str)
                .unwrap_or("");
            let Some(at) = open.iter().position(|o| o == id) else {
                return Some((
                    "Invalid parameter: messages with role 'tool' must be a response to a \
                     preceeding message with 'tool_calls'."
                        .into(),
                    format!("messages.[{i}].role"),
                ));
            };
            open.remove(at);
            continue;
        }
        if !open.is_empty() {
            return Some((
                format!(
                    "An assistant message with 'tool_calls' must be followed by tool messages \
                     responding to each 'tool_call_id'. The following tool_call_ids did not have \
                     response messages: {}",
                    open.join(", ")
                ),
                "messages".into(),
            ));
        }
        if !["system", "developer", "user", "assistant"].contains(&role) {
            return Some((
                format!("Invalid value: '{role}'."),
                format!("messages[{i}].role"),
            ));
        }
        let calls = message.get("tool_calls").and_then(Value::as_array);
        if message.get("content").is_none_or(Value::is_null) && calls.is_none_or(|c| c.is_empty()) {
            return Some((
                "Invalid value for 'content': expected a string, got null.".to_owned(),
                format!("messages.[{i}].content"),
            ));
        }
        open = calls
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("id").and_then(Value::as_str).map(str::to_owned))
            .collect();
    }
    None
}

/// The first thing that puts `schema` outside the strict subset, as OpenAI words it.
fn strict_schema_problem(schema: &Value) -> Option<String> {
    if schema.get("type") != Some(&json!("object")) || schema.get("anyOf").is_some() {
        return Some("schema must be a JSON Schema of 'type: \"object\"', got something else (the root may not be 'anyOf').".into());
    }
    let mut walk = Walk {
        root: schema,
        properties: 0,
        enum_values: 0,
    };
    let problem = walk.node(schema, &mut Vec::new(), 1);
    problem.or_else(|| {
        for (key, defs) in ["$defs", "definitions"]
            .iter()
            .filter_map(|k| schema.get(*k).map(|d| (*k, d)))
        {
            for (name, def) in defs.as_object().into_iter().flatten() {
                let mut context = vec![key.to_owned(), name.clone()];
                if let Some(p) = walk.node(def, &mut context, 1) {
                    return Some(p);
                }
            }
        }
        if walk.properties > MAX_PROPERTIES {
            return Some(format!(
                "too many object properties ({} > {MAX_PROPERTIES})",
                walk.properties
            ));
        }
        (walk.enum_values > MAX_ENUM_VALUES).then(|| {
            format!(
                "too many enum values ({} > {MAX_ENUM_VALUES})",
                walk.enum_values
            )
        })
    })
}

struct Walk<'a> {
    root: &'a Value,
    properties: usize,
    enum_values: usize,
}

impl Walk<'_> {
    fn node(&mut self, node: &Value, context: &mut Vec<String>, depth: usize) -> Option<String> {
        let at = || {
            format!(
                "In context=({}), ",
                context
                    .iter()
                    .map(|c| format!("'{c}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let Some(map) = node.as_object() else {
            return Some(format!("{}schema must be an object.", at()));
        };
        if depth > MAX_NESTING {
            return Some(format!(
                "{}more than {MAX_NESTING} levels of nesting.",
                at()
            ));
        }
        if let Some(key) = map.keys().find(|k| !STRICT_KEYWORDS.contains(&k.as_str())) {
            return Some(format!("{}'{key}' is not permitted.", at()));
        }
        if let Some(format) = map.get("format").and_then(Value::as_str)
            && !STRICT_FORMATS.contains(&format)
        {
            return Some(format!("{}'format' '{format}' is not permitted.", at()));
        }
        if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
            let found = reference
                .strip_prefix('#')
                .and_then(|p| self.root.pointer(p));
            if found.is_none() {
                return Some(format!(
                    "{}reference '{reference}' can't be resolved.",
                    at()
                ));
            }
        }
        if let Some(values) = map.get("enum").and_then(Value::as_array) {
            self.enum_values += values.len();
        }
        let is_object = match map.get("type") {
            Some(Value::String(t)) => t == "object",
            Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
            _ => false,
        };
        let is_array = match map.get("type") {
            Some(Value::String(t)) => t == "array",
            Some(Value::Array(ts)) => ts.iter().any(|t| t == "array"),
            _ => false,
        };
        if is_object && map.get("additionalProperties") != Some(&json!(false)) {
            return Some(format!(
                "{}'additionalProperties' is required to be supplied and to be false.",
                at()
            ));
        }
        if is_array && map.get("items").is_none() {
            return Some(format!("{}array schema missing items.", at()));
        }
        let required: Vec<&str> = map
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if let Some(properties) = map.get("properties").and_then(Value::as_object) {
            self.properties += properties.len();
            if let Some(missing) = properties.keys().find(|k| !required.contains(&k.as_str())) {
                return Some(format!(
                    "{}'required' is required to be supplied and to be an array including every key in properties. Missing '{missing}'.",
                    at()
                ));
            }
            for (name, property) in properties {
                context.extend(["properties".to_owned(), name.clone()]);
                let problem = self.node(property, context, depth + 1);
                context.truncate(context.len() - 2);
                if problem.is_some() {
                    return problem;
                }
            }
        }
        if let Some(items) = map.get("items") {
            context.push("items".into());
            let problem = self.node(items, context, depth + 1);
            context.pop();
            if problem.is_some() {
                return problem;
            }
        }
        for (i, branch) in map
            .get("anyOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            context.extend(["anyOf".to_owned(), i.to_string()]);
            let problem = self.node(branch, context, depth);
            context.truncate(context.len() - 2);
            if problem.is_some() {
                return problem;
            }
        }
        None
    }
}

pub(super) async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    let include_usage = body
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("scripted")
        .to_owned();
    if let Some((message, param)) = refusal(&body) {
        shared.lock().refusals.push(message.clone());
        shared.requests_changed.notify_waiters();
        let error = json!({"error": {"message": message, "type": "invalid_request_error",
                                     "param": param, "code": null}});
        return (StatusCode::BAD_REQUEST, axum::Json(error)).into_response();
    }
    let system = system_text(&body);
    let schema = body.pointer("/response_format").cloned();
    let request = RecordedRequest {
        wire: body.clone(),
        body,
        dialect: Dialect::OpenAi,
        authorization: header_text(&headers, header::AUTHORIZATION.as_str()),
        api_key: header_text(&headers, "x-api-key"),
    };
    let (reply, frames) = {
        let (reply, mut script) = shared.take_reply(request, &system);
        let reply = as_a_strict_model_writes(reply, schema.as_ref());
        let frames = sse_frames(&reply, &model, include_usage, &mut script);
        (reply, frames)
    };
    shared.requests_changed.notify_waiters();

    if !reply.delay_before_headers.is_zero() {
        tokio::time::sleep(reply.delay_before_headers).await;
    }
    if let Kind::Status(status) = reply.kind {
        return openai_status(status, &reply);
    }
    streamed_response(shared, &reply, frames)
}

fn openai_status(status: u16, reply: &Reply) -> Response {
    let status = StatusCode::from_u16(status).expect("a valid status code");
    let kind = if status.is_server_error() {
        "server_error"
    } else {
        "invalid_request_error"
    };
    let message = error_message(reply, status);
    let body = json!({"error": {"message": message, "type": kind,
                                "param": reply.error_param, "code": null}});
    status_response(status, reply, body)
}

/// The SSE frames of a streamed reply (none for a status reply).
fn sse_frames(reply: &Reply, model: &str, include_usage: bool, script: &mut Script) -> Vec<String> {
    let id = format!("chatcmpl-scripted-{}", script.next_completion_id);
    script.next_completion_id += 1;
    let chunk = |delta: Value, finish_reason: Option<&str>| {
        json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
        })
        .to_string()
    };
    let content = |text: &str| chunk(json!({"content": text}), None);

    let mut payloads = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    let mut content_chunks = 0u64;
    let finish_reason = match &reply.kind {
        Kind::Status(_) => return Vec::new(),
        Kind::Raw(raw) => return raw.iter().map(|p| frame(p)).collect(),
        Kind::Malformed => {
            payloads.push(content("Hel"));
            payloads.push("{\"choices\": [{\"delta\": {\"content\": \"lo\"".to_owned());
            payloads.push("[DONE]".to_owned());
            return payloads.iter().map(|p| frame(p)).collect();
        }
        Kind::StreamError { text, error_type } => {
            payloads.push(content(text));
            let error =
                json!({"error": {"message": "scripted mid-stream error", "type": error_type}});
            payloads.push(error.to_string());
            return payloads.iter().map(|p| frame(p)).collect();
        }
        Kind::Truncated => {
            payloads.push(content("Hello "));
            payloads.push(content("wor"));
            return payloads.iter().map(|p| frame(p)).collect();
        }
        Kind::Text(text) => {
            for piece in words(text) {
                payloads.push(content(&piece));
                content_chunks += 1;
            }
            "stop"
        }
        Kind::Json(value) => {
            for piece in pieces(&value.to_string(), 6) {
                payloads.push(content(&piece));
                content_chunks += 1;
            }
            "stop"
        }
        Kind::ToolCalls { text, calls } => {
            for piece in text.iter().flat_map(|t| words(t)) {
                payloads.push(content(&piece));
                content_chunks += 1;
            }
            for (index, (name, arguments)) in calls.iter().enumerate() {
                let call_id = format!("call_scripted_{}", script.next_call_id);
                script.next_call_id += 1;
                payloads.push(chunk(
                    json!({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                        "function": {"name": name, "arguments": ""}}]}),
                    None,
                ));
                for piece in pieces(arguments, 5) {
                    payloads.push(chunk(
                        json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                        None,
                    ));
                    content_chunks += 1;
                }
            }
            "tool_calls"
        }
    };
    payloads.push(chunk(json!({}), Some(finish_reason)));
    if include_usage {
        let (prompt, completion) = reply.usage.unwrap_or((10, content_chunks));
        payloads.push(
            json!({
                "id": id,
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": model,
                "choices": [],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion},
            })
            .to_string(),
        );
    }
    payloads.push("[DONE]".to_owned());
    payloads.iter().map(|p| frame(p)).collect()
}

fn frame(payload: &str) -> String {
    format!("data: {payload}\n\n")
}

/// The text of a request's system messages.
fn system_text(body: &Value) -> String {
    body.get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "system")
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A scripted JSON answer as a model held to a strict schema writes it: every property
/// present (`null` for the ones the script leaves out), a value the schema wants as a string
/// written as JSON text, the root wrapped when the schema wraps it. Answers the strict schema
/// still refuses go out as scripted (the script tests what a lenient server would pass).
fn as_a_strict_model_writes(mut reply: Reply, response_format: Option<&Value>) -> Reply {
    let spec = response_format.and_then(|f| f.get("json_schema"));
    let Some(schema) = spec
        .filter(|s| s["strict"] == json!(true))
        .map(|s| &s["schema"])
    else {
        return reply;
    };
    let Kind::Json(value) = &reply.kind else {
        return reply;
    };
    let Ok(validator) = jsonschema::validator_for(schema) else {
        return reply;
    };
    let wraps = schema["required"] == json!(["value"])
        && schema["properties"]
            .as_object()
            .is_some_and(|p| p.len() == 1);
    let wrapped = json!({ "value": value });
    let value = match value {
        Value::Object(map) if wraps && map.len() == 1 && map.contains_key("value") => value,
        _ if wraps => &wrapped,
        _ => value,
    };
    let written = strict_value(schema, schema, value);
    if validator.is_valid(&written) {
        reply.kind = Kind::Json(written);
    }
    reply
}

/// `value` written against `node` of `root` (see [`as_a_strict_model_writes`]).
fn strict_value(root: &Value, node: &Value, value: &Value) -> Value {
    let node = match node.get("$ref").and_then(Value::as_str) {
        Some(r) => r
            .strip_prefix('#')
            .and_then(|p| root.pointer(p))
            .unwrap_or(node),
        None => node,
    };
    if let Some(branches) = node.get("anyOf").and_then(Value::as_array) {
        let defs = root.get("$defs").cloned().unwrap_or(json!({}));
        for branch in branches {
            let written = strict_value(root, branch, value);
            let mut alone = branch.clone();
            alone["$defs"] = defs.clone();
            if jsonschema::is_valid(&alone, &written) {
                return written;
            }
        }
        return value.clone();
    }
    let types: Vec<&str> = match node.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    match value {
        Value::Object(map) if types.contains(&"object") => {
            let mut out = serde_json::Map::new();
            for (name, property) in node["properties"].as_object().into_iter().flatten() {
                let v = map
                    .get(name)
                    .map_or(Value::Null, |v| strict_value(root, property, v));
                out.insert(name.clone(), v);
            }
            Value::Object(out)
        }
        Value::Array(items) if types.contains(&"array") => Value::Array(
            items
                .iter()
                .map(|i| strict_value(root, &node["items"], i))
                .collect(),
        ),
        Value::String(_) | Value::Null => value.clone(),
        _ if types == ["string"] || types == ["string", "null"] => Value::String(value.to_string()),
        _ => value.clone(),
    }
}
