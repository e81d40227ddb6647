//! Ollama's native chat API: `POST {base}/api/chat` with `stream: true`, read back as
//! newline-delimited JSON.
//!
//! Why not Ollama's OpenAI-compatible endpoint: only the native API takes the context window
//! (`options.num_ctx`; Ollama's default of a few thousand tokens silently cuts long prompts
//! such as plans) and the whole schema as `format`. This module owns the body (our
//! conversation in Ollama's shape: tool calls with arguments as objects, tool results named by
//! their tool) and the reading of the lines. Like every provider it must not retry once the
//! body has started, must not panic on anything the server sends, and must never let the key
//! out of the process.

use std::collections::{HashMap, VecDeque};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::http::{
    Auth, Decode, Endpoint, ToolNames, decoded_stream, ndjson_frames, redact, schema_in_prompt,
    stream_error_message, truncate_chars,
};
use crate::config::{OpenAiConfig, Secret};
use crate::llm::{
    ChatRequest, Error, LlmEvent, LlmProvider, LlmStream, Message, ToolCall, ToolSpec, Usage,
};

/// A model served by Ollama, over its native API.
#[derive(Debug)]
pub struct OllamaProvider {
    /// The provider's configured name, for logs.
    name: String,
    /// `{base}/api/chat`.
    endpoint: Endpoint,
    /// `{base}/api/embed`.
    embeddings: Endpoint,
}

impl OllamaProvider {
    /// The provider `[llm.providers.NAME]` of kind `ollama`; its base URL is the server's root
    /// (`http://127.0.0.1:11434`). Fails (with a message for the operator) when the base URL
    /// is not a usable http(s) URL.
    pub fn named(name: &str, cfg: &OpenAiConfig) -> Result<Self, String> {
        let key = format!("llm.providers.{name}");
        let endpoint = Endpoint::new(&key, &cfg.base_url, "/api/chat", cfg, Auth::Bearer)?;
        let embeddings = Endpoint::new(&key, &cfg.base_url, "/api/embed", cfg, Auth::Bearer)?;
        Ok(OllamaProvider {
            name: name.to_owned(),
            endpoint,
            embeddings,
        })
    }
}

#[async_trait]
impl LlmProvider for OllamaProvider {
    fn name(&self) -> &str {
        &self.name
    }

    /// `POST /api/embed` (`{model, input: [texts]}`): the vectors of `embeddings`, in order.
    async fn embed(&self, model: &str, texts: &[String]) -> Result<Vec<Vec<f32>>, Error> {
        let body = serde_json::json!({ "model": model, "input": texts });
        let answer = super::http::json_answer(&self.embeddings, &body).await?;
        let vectors = answer.get("embeddings").and_then(Value::as_array);
        let vectors: Option<Vec<Vec<f32>>> =
            vectors.map(|all| all.iter().filter_map(super::http::vector_of).collect());
        super::http::one_each(texts, vectors.unwrap_or_default())
    }

    async fn stream(
        &self,
        request: ChatRequest,
        cancel: CancellationToken,
    ) -> Result<LlmStream, Error> {
        let mode = request.capabilities.structured_output;
        let (request, json_mode) = schema_in_prompt(request, mode);
        let names = ToolNames::new(&request.tools);
        let body = Body::new(&request, &names, json_mode);
        // Dropping the losing branch aborts the in-flight request or backoff sleep.
        let response = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(Error::Cancelled),
            result = self.endpoint.send(&body, "application/x-ndjson") => {
                result.map_err(|f| f.error)?
            }
        };
        let key = self.endpoint.key();
        let decoder = Decoder {
            names,
            key: key.clone(),
            calls: 0,
        };
        Ok(decoded_stream(
            ndjson_frames(response, key),
            decoder,
            cancel,
            self.endpoint.read_timeout,
        ))
    }
}

#[derive(Debug, Serialize)]
struct Body {
    model: String,
    messages: Vec<WireMessage>,
    stream: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool>,
    /// The response schema (modes `strict`, `json_schema`) or `"json"` (`json_object`).
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<Value>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    options: Map<String, Value>,
}

#[derive(Debug, Serialize)]
struct WireMessage {
    role: &'static str,
    content: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall>,
    /// The tool a result answers (Ollama matches results by name, not by id).
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_name: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct WireToolCall {
    function: WireFunction,
}

#[derive(Debug, Serialize, Deserialize)]
struct WireFunction {
    #[serde(default)]
    name: String,
    /// An object on the wire, both ways.
    #[serde(default)]
    arguments: Value,
}

#[derive(Debug, Serialize)]
struct Tool {
    #[serde(rename = "type")]
    kind: &'static str,
    function: Function,
}

#[derive(Debug, Serialize)]
struct Function {
    name: String,
    description: String,
    parameters: Value,
}

impl Body {
    fn new(request: &ChatRequest, names: &ToolNames, json_mode: bool) -> Body {
        let format = match &request.response_schema {
            Some(schema) => Some(schema.schema.clone()),
            None if json_mode => Some(Value::String("json".into())),
            None => None,
        };
        Body {
            model: request.model.clone(),
            messages: messages(&request.messages, names),
            stream: true,
            tools: request.tools.iter().map(|t| tool(t, names)).collect(),
            format,
            options: options(request),
        }
    }
}

/// `num_ctx` from the model's context window (Ollama's own default is small), sampling and
/// length settings when the alias has them.
fn options(request: &ChatRequest) -> Map<String, Value> {
    let mut options = Map::new();
    if let Some(window) = request.capabilities.context_window {
        options.insert("num_ctx".into(), window.into());
    }
    if let Some(t) = request.temperature {
        options.insert("temperature".into(), f64::from(t).into());
    }
    if let Some(max) = request.max_tokens {
        options.insert("num_predict".into(), max.into());
    }
    options
}

fn tool(spec: &ToolSpec, names: &ToolNames) -> Tool {
    Tool {
        kind: "function",
        function: Function {
            name: names.wire(&spec.name).into_owned(),
            description: spec.description.clone(),
            parameters: spec.parameters.clone(),
        },
    }
}

/// Our messages in Ollama's shape; a tool result carries the name of the call it answers.
fn messages(messages: &[Message], names: &ToolNames) -> Vec<WireMessage> {
    let mut called: HashMap<&str, String> = HashMap::new();
    let plain = |role, content: &String| WireMessage {
        role,
        content: content.clone(),
        tool_calls: Vec::new(),
        tool_name: None,
    };
    messages
        .iter()
        .map(|message| match message {
            Message::System { content } => plain("system", content),
            Message::User { content } => plain("user", content),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let calls = tool_calls.iter().map(|call| {
                    let name = names.wire(&call.name).into_owned();
                    called.insert(&call.id, name.clone());
                    WireToolCall {
                        function: WireFunction {
                            name,
                            arguments: arguments_object(&call.arguments),
                        },
                    }
                });
                WireMessage {
                    tool_calls: calls.collect(),
                    ..plain("assistant", content)
                }
            }
            Message::Tool { call_id, content } => WireMessage {
                tool_name: called.get(call_id.as_str()).cloned(),
                ..plain("tool", content)
            },
        })
        .collect()
}

/// The model's argument text as the object Ollama takes (`{}` when empty or invalid).
fn arguments_object(arguments: &str) -> Value {
    serde_json::from_str::<Value>(arguments)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Map::new()))
}

/// Reads the lines of one answer.
struct Decoder {
    names: ToolNames,
    key: Secret,
    /// Tool calls seen so far: Ollama gives them no ids, so they are numbered.
    calls: u64,
}

/// One line of the stream. Every field is optional: a missing one is not worth failing over.
#[derive(Debug, Deserialize)]
struct Line {
    #[serde(default)]
    message: Option<LineMessage>,
    #[serde(default)]
    done: bool,
    #[serde(default)]
    prompt_eval_count: u64,
    #[serde(default)]
    eval_count: u64,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct LineMessage {
    #[serde(default)]
    content: String,
    #[serde(default)]
    tool_calls: Vec<WireToolCall>,
}

impl Decoder {
    fn tool_call(&mut self, call: WireToolCall) -> Result<LlmEvent, Error> {
        let WireFunction { name, arguments } = call.function;
        if name.is_empty() {
            return Err(Error::Malformed(
                "a tool call arrived without a name".into(),
            ));
        }
        self.calls += 1;
        let arguments = match arguments {
            Value::String(text) => text,
            Value::Null => "{}".to_owned(),
            other => other.to_string(),
        };
        Ok(LlmEvent::ToolCall(ToolCall {
            id: format!("call_{}", self.calls),
            name: self.names.ours(&name),
            arguments,
        }))
    }
}

impl Decode for Decoder {
    fn decode(&mut self, frame: &str, out: &mut VecDeque<LlmEvent>) -> Result<bool, Error> {
        let line: Line = serde_json::from_str(frame).map_err(|e| {
            // Redact before cutting, so no part of a key can survive in the snippet.
            let snippet = redact(&self.key, frame.trim().to_owned());
            Error::Malformed(format!(
                "a line is not an Ollama chat response ({e}); it starts with `{}`",
                truncate_chars(&snippet, 60)
            ))
        })?;
        if let Some(error) = line.error {
            let message = error
                .as_str()
                .map_or_else(|| error.to_string(), str::to_owned);
            // Ollama reports a failing model (out of memory, a crashed runner) this way.
            return Err(Error::Status {
                status: 500,
                message: stream_error_message(&self.key, &message),
            });
        }
        if let Some(message) = line.message {
            if !message.content.is_empty() {
                out.push_back(LlmEvent::TextDelta(message.content));
            }
            for call in message.tool_calls {
                let event = self.tool_call(call)?;
                out.push_back(event);
            }
        }
        if line.done {
            out.push_back(LlmEvent::Usage(Usage {
                prompt_tokens: line.prompt_eval_count,
                completion_tokens: line.eval_count,
            }));
        }
        Ok(line.done)
    }

    fn ended_early(&mut self, _out: &mut VecDeque<LlmEvent>) -> Result<(), Error> {
        Err(Error::Malformed(
            "the stream ended before a line with `done: true`".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::StructuredOutput;
    use crate::llm::{Capabilities, ResponseSchema};

    fn body(mut request: ChatRequest) -> Value {
        let (request_, json_mode) =
            schema_in_prompt(request.clone(), request.capabilities.structured_output);
        request = request_;
        let names = ToolNames::new(&request.tools);
        serde_json::to_value(Body::new(&request, &names, json_mode)).unwrap()
    }

    fn conversation() -> ChatRequest {
        let mut request = ChatRequest::new(
            "llama-test",
            vec![
                Message::System {
                    content: "be brief".into(),
                },
                Message::User {
                    content: "time?".into(),
                },
                Message::Assistant {
                    content: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "call_1".into(),
                        name: "clock.now".into(),
                        arguments: "not json".into(),
                    }],
                },
                Message::Tool {
                    call_id: "call_1".into(),
                    content: "09:30".into(),
                },
            ],
        );
        request.tools = vec![ToolSpec {
            name: "clock.now".into(),
            description: "the time".into(),
            parameters: json!({"type": "object"}),
        }];
        request
    }

    #[test]
    fn the_body_has_ollamas_shape() {
        let mut request = conversation();
        request.capabilities = Capabilities {
            context_window: Some(32_768),
            ..Capabilities::default()
        };
        request.max_tokens = Some(100);
        request.response_schema = Some(ResponseSchema::new("a", json!({"type": "object"})));
        assert_eq!(
            body(request),
            json!({
                "model": "llama-test",
                "stream": true,
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "time?"},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"function": {"name": "clock_now", "arguments": {}}}]},
                    {"role": "tool", "content": "09:30", "tool_name": "clock_now"},
                ],
                "tools": [{"type": "function", "function": {"name": "clock_now",
                    "description": "the time", "parameters": {"type": "object"}}}],
                "format": {"type": "object"},
                "options": {"num_ctx": 32_768, "num_predict": 100},
            })
        );
    }

    #[test]
    fn weaker_modes_ask_for_json_or_nothing() {
        for (mode, format) in [
            (StructuredOutput::JsonObject, Some(json!("json"))),
            (StructuredOutput::Prompt, None),
        ] {
            let mut request = conversation();
            request.response_schema = Some(ResponseSchema::new("a", json!({"type": "array"})));
            request.capabilities.structured_output = mode;
            let body = body(request);
            assert_eq!(body.get("format"), format.as_ref(), "{mode:?}");
            assert!(body.get("options").is_none());
            let system = body["messages"][0]["content"].as_str().unwrap();
            assert!(system.contains("\"array\""), "{mode:?}: {system}");
        }
    }

    fn decode(lines: &[Value]) -> Result<(Vec<LlmEvent>, bool), Error> {
        let mut decoder = Decoder {
            names: ToolNames::new(&conversation().tools),
            key: Secret::new("sk-secret"),
            calls: 0,
        };
        let mut out = VecDeque::new();
        let mut done = false;
        for line in lines {
            done = decoder.decode(&line.to_string(), &mut out)?;
        }
        Ok((out.into(), done))
    }

    #[test]
    fn lines_become_events() {
        let (events, done) = decode(&[
            json!({"message": {"role": "assistant", "content": "Hi "}, "done": false}),
            json!({"message": {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "clock_now", "arguments": {"tz": "UTC"}}},
                {"function": {"name": "clock_now", "arguments": "{}"}}]}, "done": false}),
            json!({"message": {"role": "assistant", "content": ""}, "done": true,
                   "done_reason": "stop", "prompt_eval_count": 12, "eval_count": 3}),
        ])
        .unwrap();
        assert!(done);
        let call = |id: &str, arguments: &str| {
            LlmEvent::ToolCall(ToolCall {
                id: id.into(),
                name: "clock.now".into(),
                arguments: arguments.into(),
            })
        };
        assert_eq!(
            events,
            [
                LlmEvent::TextDelta("Hi ".into()),
                call("call_1", r#"{"tz":"UTC"}"#),
                call("call_2", "{}"),
                LlmEvent::Usage(Usage {
                    prompt_tokens: 12,
                    completion_tokens: 3
                }),
            ]
        );
    }

    #[test]
    fn errors_and_bad_lines() {
        let err = decode(&[json!({"error": "model runner crashed sk-secret"})]).unwrap_err();
        assert!(
            matches!(&err, Error::Status { status: 500, message } if message == "model runner crashed ***"),
            "{err:?}"
        );
        for lines in [
            vec![json!("text")],
            vec![json!({"message": {"tool_calls": [{"function": {"arguments": {}}}]}})],
            vec![json!({"message": "x"})],
        ] {
            let err = decode(&lines).unwrap_err();
            assert!(matches!(err, Error::Malformed(_)), "{lines:?}: {err:?}");
        }
    }
}
