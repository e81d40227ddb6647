//! The OpenAI chat-completions dialect of the scripted server: `POST /v1/chat/completions`
//! answered with `chat.completion.chunk` frames, or refused the way OpenAI refuses.

use super::*;

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
    let system = system_text(&body);
    let request = RecordedRequest {
        wire: body.clone(),
        body,
        dialect: Dialect::OpenAi,
        authorization: header_text(&headers, header::AUTHORIZATION.as_str()),
        api_key: header_text(&headers, "x-api-key"),
    };
    let (reply, frames) = {
        let (reply, mut script) = shared.take_reply(request, &system);
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
    let body = json!({"error": {"message": message, "type": kind, "code": null}});
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
