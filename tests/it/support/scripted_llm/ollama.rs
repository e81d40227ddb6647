//! The Ollama native dialect of the scripted server: `POST /api/chat` answered with
//! newline-delimited JSON, or refused the way Ollama refuses (`{"error": "..."}`).
//!
//! Requests it takes are recorded in OpenAI's shape (`openai_view`): Ollama's tool calls have
//! no ids, so the view numbers them `call_N` in the order they appear in the conversation and
//! gives each tool result the id of the call at its position.

use super::*;

pub(super) async fn chat(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(e) => return refused(format!("invalid character in the body: {e}")),
    };
    if let Err(message) = validate(&body) {
        eprintln!("scripted Ollama refused a request: {message}");
        return refused(message);
    }
    let model = body["model"].as_str().unwrap_or("scripted").to_owned();
    let request = RecordedRequest {
        body: openai_view(&body),
        wire: body.clone(),
        dialect: Dialect::Ollama,
        authorization: header_text(&headers, header::AUTHORIZATION.as_str()),
        api_key: header_text(&headers, "x-api-key"),
    };
    let (reply, lines) = {
        let (reply, mut script) = shared.take_reply(request, &system_text(&body));
        let lines = ndjson_lines(&reply, &model, &mut script);
        (reply, lines)
    };
    shared.requests_changed.notify_waiters();

    if !reply.delay_before_headers.is_zero() {
        tokio::time::sleep(reply.delay_before_headers).await;
    }
    if let Kind::Status(status) = reply.kind {
        let status = StatusCode::from_u16(status).expect("a valid status code");
        let message = error_message(&reply, status);
        return status_response(status, &reply, json!({"error": message}));
    }
    // `stall_after` and `hold_after` count OpenAI's frames, whose first only opens the
    // answer: Ollama's lines all carry content.
    let reply = reply.in_frames(|n| n.saturating_sub(1));
    let mut response = streamed_response(shared, &reply, lines);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        "application/x-ndjson".parse().expect("a valid header"),
    );
    response
}

fn refused(message: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({"error": message})),
    )
        .into_response()
}

fn system_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "system")
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// What Ollama refuses.
fn validate(body: &Value) -> Result<(), String> {
    if body["model"].as_str().is_none_or(str::is_empty) {
        return Err("model is required".into());
    }
    match body.get("format") {
        None | Some(Value::Object(_)) => {}
        Some(Value::String(s)) if s == "json" => {}
        Some(other) => return Err(format!("invalid format: {other}")),
    }
    if !matches!(body.get("options"), None | Some(Value::Object(_))) {
        return Err("options must be an object".into());
    }
    let messages = body["messages"]
        .as_array()
        .ok_or("messages must be a list")?;
    // Tool calls of the last assistant message not answered yet.
    let mut open_calls = 0usize;
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"]
            .as_str()
            .ok_or(format!("messages[{i}]: role is required"))?;
        if !message["content"].is_string() {
            return Err(format!("messages[{i}]: content is required"));
        }
        match role {
            "system" | "user" => open_calls = 0,
            "assistant" => {
                open_calls = validate_calls(i, &message["tool_calls"])?;
            }
            "tool" if open_calls > 0 => open_calls -= 1,
            "tool" => {
                return Err(format!(
                    "messages[{i}]: a tool message must follow an assistant message with tool calls"
                ));
            }
            other => return Err(format!("messages[{i}]: unknown role `{other}`")),
        }
    }
    Ok(())
}

/// The number of tool calls of an assistant message, each with a name and object arguments.
fn validate_calls(i: usize, calls: &Value) -> Result<usize, String> {
    let calls = match calls {
        Value::Null => return Ok(0),
        Value::Array(calls) => calls,
        _ => return Err(format!("messages[{i}].tool_calls must be a list")),
    };
    for call in calls {
        let function = &call["function"];
        if !function["name"].is_string() || !function["arguments"].is_object() {
            return Err(format!(
                "messages[{i}]: a tool call needs a function name and object arguments"
            ));
        }
    }
    Ok(calls.len())
}

/// The request in OpenAI's shape, for assertions shared by every dialect.
fn openai_view(body: &Value) -> Value {
    let mut next_id = 0;
    let mut ids: VecDeque<String> = VecDeque::new();
    let messages: Vec<Value> = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| match m["role"].as_str() {
            Some("assistant") if m["tool_calls"].is_array() => {
                let calls: Vec<Value> = m["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| {
                        next_id += 1;
                        let id = format!("call_{next_id}");
                        ids.push_back(id.clone());
                        json!({"id": id, "type": "function", "function": {
                            "name": c["function"]["name"],
                            "arguments": c["function"]["arguments"].to_string()}})
                    })
                    .collect();
                let content = m["content"].as_str().filter(|c| !c.is_empty());
                json!({"role": "assistant", "content": content, "tool_calls": calls})
            }
            Some("tool") => json!({"role": "tool", "content": m["content"],
                "tool_call_id": ids.pop_front()}),
            _ => json!({"role": m["role"], "content": m["content"]}),
        })
        .collect();
    let mut view = json!({"model": body["model"], "messages": messages, "stream": body["stream"]});
    if let Some(tools) = body.get("tools") {
        view["tools"] = tools.clone();
    }
    match body.get("format") {
        Some(Value::String(_)) => view["response_format"] = json!({"type": "json_object"}),
        Some(schema) => {
            view["response_format"] =
                json!({"type": "json_schema", "json_schema": {"name": "format", "schema": schema}})
        }
        None => {}
    }
    let options = &body["options"];
    if let Some(t) = options.get("temperature") {
        view["temperature"] = t.clone();
    }
    if let Some(n) = options.get("num_predict") {
        view["max_tokens"] = n.clone();
    }
    view
}

/// The lines of a streamed reply (none for a status reply).
fn ndjson_lines(reply: &Reply, model: &str, script: &mut Script) -> Vec<String> {
    script.next_completion_id += 1;
    let line = |message: Value| {
        let line = json!({"model": model, "created_at": "2026-01-01T00:00:00Z",
            "message": message, "done": false});
        format!("{line}\n")
    };
    let text = |t: &str| line(json!({"role": "assistant", "content": t}));
    let mut lines = Vec::new();
    let mut pieces_sent = 0u64;
    let done_reason = match &reply.kind {
        Kind::Status(_) => return Vec::new(),
        Kind::Raw(raw) => return raw.iter().map(|p| format!("{p}\n")).collect(),
        Kind::Malformed => return vec![text("Hel"), "{\"message\": {\"content\n".into()],
        Kind::Truncated => return vec![text("Hello "), text("wor")],
        Kind::StreamError { text: t, .. } => {
            lines.extend(words(t).iter().map(|w| text(w)));
            lines.push(format!(
                "{}\n",
                json!({"error": "scripted mid-stream error"})
            ));
            return lines;
        }
        Kind::Text(t) => {
            for w in words(t) {
                lines.push(text(&w));
                pieces_sent += 1;
            }
            "stop"
        }
        Kind::Json(value) => {
            for p in pieces(&value.to_string(), 6) {
                lines.push(text(&p));
                pieces_sent += 1;
            }
            "stop"
        }
        Kind::ToolCalls { text: t, calls } => {
            for w in t.iter().flat_map(|t| words(t)) {
                lines.push(text(&w));
                pieces_sent += 1;
            }
            let calls: Vec<Value> = calls
                .iter()
                .map(|(name, arguments)| {
                    let arguments: Value =
                        serde_json::from_str(arguments).unwrap_or(Value::String(arguments.clone()));
                    json!({"function": {"name": name, "arguments": arguments}})
                })
                .collect();
            lines.push(line(
                json!({"role": "assistant", "content": "", "tool_calls": calls}),
            ));
            pieces_sent += 1;
            "stop"
        }
    };
    let (prompt, completion) = reply.usage.unwrap_or((10, pieces_sent));
    let done = json!({"model": model, "created_at": "2026-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": ""}, "done": true,
        "done_reason": done_reason, "prompt_eval_count": prompt, "eval_count": completion});
    lines.push(format!("{done}\n"));
    lines
}
