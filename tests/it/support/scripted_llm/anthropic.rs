//! The Anthropic Messages dialect of the scripted server: `POST /v1/messages` answered with
//! Anthropic's streamed events, or refused the way Anthropic refuses.
//!
//! It is at least as strict as the real API about what it takes (`validate`): a request
//! Anthropic would refuse is refused here with the same 400 `invalid_request_error`, never
//! answered. Requests it takes are recorded in OpenAI's shape (`openai_view`) so tests assert
//! one shape for both dialects. A structured answer is a forced tool: the tool `tool_choice`
//! names, or with `{"type": "any"}` the last tool offered.

use std::collections::HashSet;

use super::*;

pub(super) async fn messages(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let refused = match serde_json::from_slice::<Value>(&body) {
        Err(e) => Err(format!("the body is not valid JSON: {e}")),
        Ok(body) => validate(&headers, &body).map(|()| body),
    };
    let body = match refused {
        Ok(body) => body,
        Err(message) => {
            shared.lock().refusals.push(message.clone());
            shared.requests_changed.notify_waiters();
            return invalid(message);
        }
    };
    let model = body["model"].as_str().unwrap_or("scripted").to_owned();
    let answer_tool = answer_tool(&body);
    let request = RecordedRequest {
        body: openai_view(&body),
        wire: body.clone(),
        dialect: Dialect::Anthropic,
        authorization: header_text(&headers, header::AUTHORIZATION.as_str()),
        api_key: header_text(&headers, "x-api-key"),
    };
    let (reply, frames) = {
        let (reply, mut script) = shared.take_reply(request, &system_text(&body));
        let frames = event_frames(&reply, &model, answer_tool.as_deref(), &mut script);
        (reply, frames)
    };
    shared.requests_changed.notify_waiters();

    if !reply.delay_before_headers.is_zero() {
        tokio::time::sleep(reply.delay_before_headers).await;
    }
    if let Kind::Status(status) = reply.kind {
        return anthropic_status(status, &reply);
    }
    let reply = reply.in_frames(|n| match n {
        0 => 0,
        n => n + EXTRA_OPENING_FRAMES,
    });
    streamed_response(shared, &reply, frames)
}

/// `stall_after` and `hold_after` count OpenAI's frames (one opening, then one per piece of
/// content).
/// Anthropic opens with three (`message_start`, `ping`, the first block's start), so the same
/// content ends two frames further.
const EXTRA_OPENING_FRAMES: usize = 2;

fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

fn invalid(message: String) -> Response {
    let body = error_body("invalid_request_error", &message);
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

fn anthropic_status(status: u16, reply: &Reply) -> Response {
    let status = StatusCode::from_u16(status).expect("a valid status code");
    let kind = match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    };
    let message = error_message(reply, status);
    status_response(status, reply, error_body(kind, &message))
}

/// The text of the top-level `system` (a string or text blocks).
fn system_text(body: &Value) -> String {
    match &body["system"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The tool a structured answer is forced through, if the request forces one.
fn answer_tool(body: &Value) -> Option<String> {
    let choice = body.get("tool_choice")?;
    match choice["type"].as_str()? {
        "tool" => choice["name"].as_str().map(str::to_owned),
        "any" => body["tools"].as_array()?.last()?["name"]
            .as_str()
            .map(str::to_owned),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// What Anthropic refuses.

fn validate(headers: &HeaderMap, body: &Value) -> Result<(), String> {
    if !headers.contains_key("anthropic-version") {
        return Err("anthropic-version: header is required".into());
    }
    if !body.is_object() {
        return Err("the body must be a JSON object".into());
    }
    if !body["model"].is_string() {
        return Err("model: Field required".into());
    }
    if body["max_tokens"].as_u64().is_none_or(|n| n < 1) {
        return Err("max_tokens: Field required (an integer of at least 1)".into());
    }
    if body["stream"] != true {
        return Err("stream: this server only streams; send `stream: true`".into());
    }
    if let Some(t) = body.get("temperature")
        && !t.as_f64().is_some_and(|t| (0.0..=1.0).contains(&t))
    {
        return Err("temperature: Input should be between 0 and 1".into());
    }
    if !matches!(
        body.get("system"),
        None | Some(Value::String(_) | Value::Array(_))
    ) {
        return Err("system: Input should be a string or a list of text blocks".into());
    }
    let tools = validate_tools(body)?;
    validate_tool_choice(body, &tools)?;
    validate_messages(body)
}

fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The offered tools' names, each checked.
fn validate_tools(body: &Value) -> Result<Vec<String>, String> {
    let Some(tools) = body.get("tools") else {
        return Ok(Vec::new());
    };
    let tools = tools.as_array().ok_or("tools: Input should be a list")?;
    let mut names = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        let name = tool["name"].as_str().unwrap_or_default();
        if !valid_tool_name(name) {
            return Err(format!(
                "tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            ));
        }
        if tool["input_schema"]["type"] != "object" {
            return Err(format!(
                "tools.{i}.input_schema.type: Input should be 'object'"
            ));
        }
        if !matches!(tool.get("description"), None | Some(Value::String(_))) {
            return Err(format!("tools.{i}.description: Input should be a string"));
        }
        if names.iter().any(|n| n == name) {
            return Err("tools: Tool names must be unique.".into());
        }
        names.push(name.to_owned());
    }
    Ok(names)
}

fn validate_tool_choice(body: &Value, tools: &[String]) -> Result<(), String> {
    let Some(choice) = body.get("tool_choice") else {
        return Ok(());
    };
    let kind = choice["type"].as_str().unwrap_or_default();
    if !matches!(kind, "auto" | "any" | "tool" | "none") {
        return Err("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'".into());
    }
    if matches!(kind, "any" | "tool") && tools.is_empty() {
        return Err(format!("tool_choice: `{kind}` needs tools to be offered"));
    }
    if kind == "tool" {
        let name = choice["name"].as_str().unwrap_or_default();
        if !tools.iter().any(|t| t == name) {
            return Err(format!(
                "tool_choice.name: tool `{name}` is not one of the tools offered"
            ));
        }
    }
    if !matches!(
        choice.get("disable_parallel_tool_use"),
        None | Some(Value::Bool(_))
    ) {
        return Err("tool_choice.disable_parallel_tool_use: Input should be a boolean".into());
    }
    Ok(())
}

fn validate_messages(body: &Value) -> Result<(), String> {
    let messages = body["messages"]
        .as_array()
        .filter(|m| !m.is_empty())
        .ok_or("messages: at least one message is required")?;
    // The role and `tool_use` ids of the message before.
    let mut before: Option<(&str, Vec<String>)> = None;
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or_default();
        match role {
            "user" | "assistant" => {}
            "system" => {
                return Err(format!(
                    "messages.{i}.role: Input should be 'user' or 'assistant'; use the \
                     top-level `system` parameter for a system prompt"
                ));
            }
            _ => {
                return Err(format!(
                    "messages.{i}.role: Input should be 'user' or 'assistant'"
                ));
            }
        }
        if i == 0 && role != "user" {
            return Err("messages: the first message must use the \"user\" role".into());
        }
        if before.as_ref().is_some_and(|(r, _)| *r == role) {
            return Err(format!(
                "messages.{i}: roles must alternate between \"user\" and \"assistant\""
            ));
        }
        let last = i + 1 == messages.len();
        let blocks = blocks_of(message, i, last && role == "assistant")?;
        let asked = match &before {
            Some(("assistant", ids)) => ids.clone(),
            _ => Vec::new(),
        };
        let (ids, answered) = validate_blocks(i, role, &blocks, &asked)?;
        if let Some(missing) = asked.iter().find(|id| !answered.contains(*id)) {
            return Err(unanswered(i, missing));
        }
        before = Some((role, ids));
    }
    match before {
        Some(("assistant", ids)) if !ids.is_empty() => Err(unanswered(messages.len(), &ids[0])),
        _ => Ok(()),
    }
}

fn unanswered(i: usize, id: &str) -> String {
    format!(
        "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately \
         after: {id}. Each `tool_use` block must have a corresponding `tool_result` block in \
         the next message."
    )
}

/// A message's content as blocks (a string is one text block).
fn blocks_of(message: &Value, i: usize, may_be_empty: bool) -> Result<Vec<Value>, String> {
    let empty = || {
        format!(
            "messages.{i}: all messages must have non-empty content except for the optional \
             final assistant message"
        )
    };
    match &message["content"] {
        Value::String(text) if text.is_empty() && !may_be_empty => Err(empty()),
        Value::String(text) => Ok(vec![json!({"type": "text", "text": text})]),
        Value::Array(blocks) if blocks.is_empty() && !may_be_empty => Err(empty()),
        Value::Array(blocks) => Ok(blocks.clone()),
        _ => Err(format!("messages.{i}.content: Field required")),
    }
}

/// Checks one message's blocks; its `tool_use` ids and the ids its `tool_result`s answer.
fn validate_blocks(
    i: usize,
    role: &str,
    blocks: &[Value],
    asked: &[String],
) -> Result<(Vec<String>, HashSet<String>), String> {
    let mut ids = Vec::new();
    let mut answered = HashSet::new();
    let mut after_results = false;
    for (j, block) in blocks.iter().enumerate() {
        let at = format!("messages.{i}.content.{j}");
        match block["type"].as_str().unwrap_or_default() {
            "text" => {
                let text = block["text"]
                    .as_str()
                    .ok_or(format!("{at}.text: Field required"))?;
                if text.trim().is_empty() {
                    return Err(format!("{at}: text content blocks must be non-empty"));
                }
                after_results = true;
            }
            "tool_use" => {
                let id = block["id"].as_str().unwrap_or_default();
                if role != "assistant" || id.is_empty() || !block["input"].is_object() {
                    return Err(format!(
                        "{at}: `tool_use` blocks need an id and an object input, in an \
                         assistant message"
                    ));
                }
                if !valid_tool_name(block["name"].as_str().unwrap_or_default()) {
                    return Err(format!("{at}.name: String should match pattern"));
                }
                ids.push(id.to_owned());
                after_results = true;
            }
            "tool_result" => {
                let id = block["tool_use_id"].as_str().unwrap_or_default();
                if role != "user" {
                    return Err(format!(
                        "{at}: `tool_result` blocks belong in user messages"
                    ));
                }
                if after_results {
                    return Err(format!(
                        "{at}: `tool_result` blocks must come before any other content"
                    ));
                }
                if !asked.iter().any(|a| a == id) || !answered.insert(id.to_owned()) {
                    return Err(format!(
                        "{at}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. \
                         Each `tool_result` block must have a corresponding `tool_use` block \
                         in the previous message."
                    ));
                }
                if !matches!(
                    block.get("content"),
                    None | Some(Value::String(_) | Value::Array(_))
                ) {
                    return Err(format!("{at}.content: Input should be a string or a list"));
                }
            }
            other => return Err(format!("{at}.type: unsupported block type `{other}`")),
        }
    }
    Ok((ids, answered))
}

// ---------------------------------------------------------------------------------------------
// The request in OpenAI's shape, for assertions shared by both dialects.

fn openai_view(body: &Value) -> Value {
    let answer = answer_tool(body);
    let mut messages = Vec::new();
    let system = system_text(body);
    if !system.is_empty() {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        view_message(message, &mut messages);
    }
    let mut view = json!({
        "model": body["model"],
        "messages": messages,
        "stream": body["stream"],
        "max_tokens": body["max_tokens"],
    });
    let tools = body["tools"].as_array().cloned().unwrap_or_default();
    let (answers, offered): (Vec<Value>, Vec<Value>) = tools
        .into_iter()
        .partition(|t| answer.is_some() && t["name"].as_str() == answer.as_deref());
    if !offered.is_empty() {
        let offered: Vec<Value> = offered
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {"name": t["name"],
                    "description": t["description"], "parameters": t["input_schema"]}})
            })
            .collect();
        view["tools"] = json!(offered);
    }
    if let Some(tool) = answers.first() {
        view["response_format"] = json!({"type": "json_schema",
            "json_schema": {"name": tool["name"], "schema": tool["input_schema"]}});
    }
    if let Some(t) = body.get("temperature") {
        view["temperature"] = t.clone();
    }
    if body["tool_choice"]["disable_parallel_tool_use"] == true {
        view["parallel_tool_calls"] = json!(false);
    }
    view
}

fn view_message(message: &Value, out: &mut Vec<Value>) {
    let role = message["role"].as_str().unwrap_or_default();
    let blocks = match &message["content"] {
        Value::String(text) => vec![json!({"type": "text", "text": text})],
        Value::Array(blocks) => blocks.clone(),
        _ => Vec::new(),
    };
    if role == "user" {
        for block in &blocks {
            match block["type"].as_str() {
                Some("tool_result") => out.push(json!({"role": "tool",
                    "tool_call_id": block["tool_use_id"],
                    "content": result_text(&block["content"])})),
                _ => out.push(json!({"role": "user", "content": block["text"]})),
            }
        }
        return;
    }
    // Consecutive assistant messages arrive merged as text blocks: one message each again.
    let mut texts: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
    let text = texts.pop().unwrap_or_default();
    for earlier in texts {
        out.push(json!({"role": "assistant", "content": earlier}));
    }
    let calls: Vec<Value> = blocks
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .map(|b| {
            json!({"id": b["id"], "type": "function",
                "function": {"name": b["name"], "arguments": b["input"].to_string()}})
        })
        .collect();
    let mut view = json!({"role": "assistant", "content": text});
    if !calls.is_empty() {
        if text.is_empty() {
            view["content"] = Value::Null;
        }
        view["tool_calls"] = json!(calls);
    }
    out.push(view);
}

/// A `tool_result`'s content as text (a string, or text blocks).
fn result_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
        _ => String::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// Replies as Anthropic's events.

/// The events of one streamed message, with content block indexes counted.
struct Events {
    frames: Vec<String>,
    next_index: u64,
    /// Pieces of content sent: the default output token count.
    pieces: u64,
}

impl Events {
    fn push(&mut self, event: Value) {
        let kind = event["type"].as_str().unwrap_or("message").to_owned();
        self.frames
            .push(format!("event: {kind}\ndata: {event}\n\n"));
    }

    fn text_block(&mut self, pieces: Vec<String>) {
        let index = self.next_index;
        self.next_index += 1;
        self.push(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "text", "text": ""}}));
        for piece in pieces {
            self.pieces += 1;
            self.push(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "text_delta", "text": piece}}));
        }
        self.push(json!({"type": "content_block_stop", "index": index}));
    }

    fn tool_use_block(&mut self, id: &str, name: &str, input: &str) {
        let index = self.next_index;
        self.next_index += 1;
        self.push(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}));
        for piece in pieces(input, 5) {
            self.pieces += 1;
            self.push(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece}}));
        }
        self.push(json!({"type": "content_block_stop", "index": index}));
    }
}

/// The frames of a streamed reply (none for a status reply).
fn event_frames(
    reply: &Reply,
    model: &str,
    answer_tool: Option<&str>,
    script: &mut Script,
) -> Vec<String> {
    let id = format!("msg_scripted_{}", script.next_completion_id);
    script.next_completion_id += 1;
    let (prompt, completion) = reply.usage.unzip();
    let mut events = Events {
        frames: Vec::new(),
        next_index: 0,
        pieces: 0,
    };
    events.push(json!({"type": "message_start", "message": {"id": id, "type": "message",
        "role": "assistant", "model": model, "content": [], "stop_reason": null,
        "stop_sequence": null, "usage": {"input_tokens": prompt.unwrap_or(10), "output_tokens": 1}}}));
    events.push(json!({"type": "ping"}));
    let stop_reason = match &reply.kind {
        Kind::Status(_) => return Vec::new(),
        Kind::Raw(raw) => return raw.iter().map(|p| raw_frame(p)).collect(),
        Kind::Malformed => {
            events.text_block(vec!["Hel".into()]);
            events
                .frames
                .push("event: content_block_delta\ndata: {\"type\": \"content_\n\n".into());
            return events.frames;
        }
        Kind::Truncated => {
            events.text_block(vec!["Hello ".into(), "wor".into()]);
            events.frames.pop();
            return events.frames;
        }
        Kind::StreamError { text, error_type } => {
            events.text_block(words(text));
            events.push(error_body(error_type, "scripted mid-stream error"));
            return events.frames;
        }
        Kind::Text(text) => {
            events.text_block(words(text));
            "end_turn"
        }
        Kind::Json(value) => match answer_tool {
            Some(tool) => {
                let call_id = next_call_id(script);
                events.tool_use_block(&call_id, tool, &value.to_string());
                "tool_use"
            }
            None => {
                events.text_block(pieces(&value.to_string(), 6));
                "end_turn"
            }
        },
        Kind::ToolCalls { text, calls } => {
            if let Some(text) = text {
                events.text_block(words(text));
            }
            for (name, arguments) in calls {
                let call_id = next_call_id(script);
                events.tool_use_block(&call_id, name, arguments);
            }
            "tool_use"
        }
    };
    let output = completion.unwrap_or(events.pieces);
    events.push(json!({"type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": null},
        "usage": {"output_tokens": output}}));
    events.push(json!({"type": "message_stop"}));
    events.frames
}

fn next_call_id(script: &mut Script) -> String {
    let id = format!("toolu_scripted_{}", script.next_call_id);
    script.next_call_id += 1;
    id
}

/// A verbatim payload, named by its `type` when it has one.
fn raw_frame(payload: &str) -> String {
    let kind = serde_json::from_str::<Value>(payload)
        .ok()
        .and_then(|v| v["type"].as_str().map(str::to_owned));
    match kind {
        Some(kind) => format!("event: {kind}\ndata: {payload}\n\n"),
        None => format!("data: {payload}\n\n"),
    }
}
