//! The Messages API's streamed events read into [`LlmEvent`]s.
//!
//! It owns the content blocks being assembled: text streams out as it comes; a `tool_use`
//! block becomes one [`ToolCall`] when it stops; the answer tool's input streams out as text,
//! since it *is* the structured answer. Usage is reported once, after `message_stop`. It must
//! never panic on what the server sends, and never put the key into an error.

use std::collections::{BTreeMap, VecDeque};

use serde::Deserialize;

use crate::config::Secret;
use crate::llm::providers::http::{
    Decode, ToolNames, redact, stream_error_message, truncate_chars,
};
use crate::llm::{Error, LlmEvent, ToolCall, Usage};

/// Reads one streamed answer.
pub(super) struct Decoder {
    names: ToolNames,
    answer_tool: Option<String>,
    key: Secret,
    /// Blocks that started and have not stopped, by index.
    blocks: BTreeMap<u64, Block>,
    /// Whether an answer-tool block was streamed: a second one is ignored, so the answer stays
    /// one JSON value.
    answered: bool,
    usage: Option<Usage>,
}

enum Block {
    Text,
    ToolUse {
        id: String,
        name: String,
        input: String,
    },
    /// The answer tool's input, streamed as text.
    Answer,
    /// Blocks orca does not read (thinking, a second answer).
    Ignored,
}

impl Decoder {
    pub(super) fn new(names: ToolNames, answer_tool: Option<String>, key: Secret) -> Self {
        Decoder {
            names,
            answer_tool,
            key,
            blocks: BTreeMap::new(),
            answered: false,
            usage: None,
        }
    }

    fn start(&mut self, index: u64, block: wire::StartBlock, out: &mut VecDeque<LlmEvent>) {
        let block = match block {
            wire::StartBlock::Text { text } => {
                push_text(out, text);
                Block::Text
            }
            wire::StartBlock::ToolUse { id, name } => {
                if self.answer_tool.as_deref() == Some(name.as_str()) {
                    if std::mem::replace(&mut self.answered, true) {
                        Block::Ignored
                    } else {
                        Block::Answer
                    }
                } else {
                    Block::ToolUse {
                        id,
                        name,
                        input: String::new(),
                    }
                }
            }
            wire::StartBlock::Other => Block::Ignored,
        };
        self.blocks.insert(index, block);
    }

    fn delta(
        &mut self,
        index: u64,
        delta: wire::Delta,
        out: &mut VecDeque<LlmEvent>,
    ) -> Result<(), Error> {
        let block = self.blocks.get_mut(&index);
        match (block, delta) {
            (Some(Block::Ignored), _) | (_, wire::Delta::Other) => {}
            (Some(Block::Text) | None, wire::Delta::Text { text }) => push_text(out, text),
            (Some(Block::Answer), wire::Delta::InputJson { partial_json }) => {
                push_text(out, partial_json)
            }
            (Some(Block::ToolUse { input, .. }), wire::Delta::InputJson { partial_json }) => {
                input.push_str(&partial_json)
            }
            (_, wire::Delta::Text { .. } | wire::Delta::InputJson { .. }) => {
                return Err(Error::Malformed(format!(
                    "content block {index} got a delta of another kind, or one before it started"
                )));
            }
        }
        Ok(())
    }

    fn stop(&mut self, index: u64, out: &mut VecDeque<LlmEvent>) -> Result<(), Error> {
        if let Some(Block::ToolUse { id, name, input }) = self.blocks.remove(&index) {
            if name.is_empty() {
                return Err(Error::Malformed(format!(
                    "tool_use block {index} has no name"
                )));
            }
            let id = if id.is_empty() {
                format!("toolu_{index}")
            } else {
                id
            };
            let arguments = if input.trim().is_empty() {
                "{}".to_owned()
            } else {
                input
            };
            out.push_back(LlmEvent::ToolCall(ToolCall {
                id,
                name: self.names.ours(&name),
                arguments,
            }));
        }
        Ok(())
    }

    /// `message_stop`: blocks left open are closed (leniently), then usage, last.
    fn finish(&mut self, out: &mut VecDeque<LlmEvent>) -> Result<(), Error> {
        let open: Vec<u64> = self.blocks.keys().copied().collect();
        for index in open {
            self.stop(index, out)?;
        }
        if let Some(usage) = self.usage.take() {
            out.push_back(LlmEvent::Usage(usage));
        }
        Ok(())
    }

    fn error(&self, error: wire::ErrorBody) -> Error {
        let message = stream_error_message(&self.key, &error.message);
        match error.kind.as_str() {
            "overloaded_error" => Error::Status {
                status: 529,
                message,
            },
            "api_error" => Error::Status {
                status: 500,
                message,
            },
            "rate_limit_error" => Error::RateLimited { retry_after: None },
            _ => Error::Status {
                status: 400,
                message,
            },
        }
    }
}

fn push_text(out: &mut VecDeque<LlmEvent>, text: String) {
    if !text.is_empty() {
        out.push_back(LlmEvent::TextDelta(text));
    }
}

impl Decode for Decoder {
    fn decode(&mut self, frame: &str, out: &mut VecDeque<LlmEvent>) -> Result<bool, Error> {
        let event: wire::Event = serde_json::from_str(frame).map_err(|e| {
            // Redact before cutting, so no part of a key can survive in the snippet.
            let snippet = redact(&self.key, frame.trim().to_owned());
            Error::Malformed(format!(
                "an event is not a Messages API event ({e}); it starts with `{}`",
                truncate_chars(&snippet, 60)
            ))
        })?;
        match event {
            wire::Event::MessageStart { message } => {
                let usage = message.usage.unwrap_or_default();
                self.usage = Some(Usage {
                    prompt_tokens: usage.input_tokens
                        + usage.cache_creation_input_tokens
                        + usage.cache_read_input_tokens,
                    completion_tokens: usage.output_tokens,
                });
            }
            wire::Event::ContentBlockStart {
                index,
                content_block,
            } => self.start(index, content_block, out),
            wire::Event::ContentBlockDelta { index, delta } => self.delta(index, delta, out)?,
            wire::Event::ContentBlockStop { index } => self.stop(index, out)?,
            wire::Event::MessageDelta { usage } => {
                // `output_tokens` here is cumulative: the last one is the answer's total.
                if let Some(output) = usage.and_then(|u| u.output_tokens) {
                    self.usage.get_or_insert_default().completion_tokens = output;
                }
            }
            wire::Event::MessageStop => {
                self.finish(out)?;
                return Ok(true);
            }
            wire::Event::Error { error } => return Err(self.error(error)),
            wire::Event::Ping | wire::Event::Unknown => {}
        }
        Ok(false)
    }

    fn ended_early(&mut self, _out: &mut VecDeque<LlmEvent>) -> Result<(), Error> {
        Err(Error::Malformed(
            "the stream ended before `message_stop`".into(),
        ))
    }
}

/// The streamed events, as far as orca reads them. Unknown event and block types are
/// accepted and ignored (Anthropic adds them over time); known ones must have their shape.
mod wire {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub(super) enum Event {
        MessageStart {
            message: StartMessage,
        },
        ContentBlockStart {
            index: u64,
            content_block: StartBlock,
        },
        ContentBlockDelta {
            index: u64,
            delta: Delta,
        },
        ContentBlockStop {
            index: u64,
        },
        MessageDelta {
            #[serde(default)]
            usage: Option<DeltaUsage>,
        },
        MessageStop,
        Ping,
        Error {
            error: ErrorBody,
        },
        #[serde(other)]
        Unknown,
    }

    #[derive(Debug, Deserialize)]
    pub(super) struct StartMessage {
        #[serde(default)]
        pub usage: Option<StartUsage>,
    }

    #[derive(Debug, Default, Deserialize)]
    pub(super) struct StartUsage {
        #[serde(default)]
        pub input_tokens: u64,
        #[serde(default)]
        pub cache_creation_input_tokens: u64,
        #[serde(default)]
        pub cache_read_input_tokens: u64,
        #[serde(default)]
        pub output_tokens: u64,
    }

    #[derive(Debug, Deserialize)]
    pub(super) struct DeltaUsage {
        #[serde(default)]
        pub output_tokens: Option<u64>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub(super) enum StartBlock {
        Text {
            #[serde(default)]
            text: String,
        },
        ToolUse {
            #[serde(default)]
            id: String,
            #[serde(default)]
            name: String,
        },
        #[serde(other)]
        Other,
    }

    #[derive(Debug, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub(super) enum Delta {
        #[serde(rename = "text_delta")]
        Text { text: String },
        #[serde(rename = "input_json_delta")]
        InputJson { partial_json: String },
        #[serde(other)]
        Other,
    }

    #[derive(Debug, Deserialize)]
    pub(super) struct ErrorBody {
        #[serde(rename = "type", default)]
        pub kind: String,
        #[serde(default)]
        pub message: String,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::llm::ToolSpec;

    const KEY: &str = "sk-ant-secret";

    fn decoder() -> Decoder {
        let names = ToolNames::new(&[ToolSpec {
            name: "clock.now".into(),
            description: String::new(),
            parameters: json!({"type": "object"}),
        }]);
        Decoder::new(names, Some("answer".into()), Secret::new(KEY))
    }

    /// Decodes `frames` in order: the events, and whether the last frame ended the answer.
    fn decode(frames: &[serde_json::Value]) -> Result<(Vec<LlmEvent>, bool), Error> {
        let mut decoder = decoder();
        let mut out = VecDeque::new();
        let mut done = false;
        for frame in frames {
            done = decoder.decode(&frame.to_string(), &mut out)?;
        }
        Ok((out.into(), done))
    }

    fn start(usage: serde_json::Value) -> serde_json::Value {
        json!({"type": "message_start", "message": {"id": "msg_1", "usage": usage}})
    }

    fn block(index: u64, block: serde_json::Value) -> serde_json::Value {
        json!({"type": "content_block_start", "index": index, "content_block": block})
    }

    fn delta(index: u64, delta: serde_json::Value) -> serde_json::Value {
        json!({"type": "content_block_delta", "index": index, "delta": delta})
    }

    fn stop(index: u64) -> serde_json::Value {
        json!({"type": "content_block_stop", "index": index})
    }

    fn text(t: &str) -> serde_json::Value {
        json!({"type": "text_delta", "text": t})
    }

    fn json_piece(t: &str) -> serde_json::Value {
        json!({"type": "input_json_delta", "partial_json": t})
    }

    #[test]
    fn text_tool_calls_and_usage() {
        let (events, done) = decode(&[
            start(json!({"input_tokens": 5, "cache_creation_input_tokens": 2,
                         "cache_read_input_tokens": 3, "output_tokens": 1})),
            json!({"type": "ping"}),
            block(0, json!({"type": "text", "text": ""})),
            delta(0, text("Let me ")),
            delta(0, text("check.")),
            stop(0),
            block(
                1,
                json!({"type": "tool_use", "id": "toolu_1", "name": "clock_now", "input": {}}),
            ),
            delta(1, json_piece("{\"tz\":")),
            delta(1, json_piece("\"UTC\"}")),
            stop(1),
            block(
                2,
                json!({"type": "tool_use", "id": "toolu_2", "name": "clock_now", "input": {}}),
            ),
            stop(2),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                   "usage": {"output_tokens": 9}}),
            json!({"type": "something_new", "x": 1}),
            json!({"type": "message_stop"}),
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
                LlmEvent::TextDelta("Let me ".into()),
                LlmEvent::TextDelta("check.".into()),
                call("toolu_1", r#"{"tz":"UTC"}"#),
                call("toolu_2", "{}"),
                LlmEvent::Usage(Usage {
                    prompt_tokens: 10,
                    completion_tokens: 9
                }),
            ]
        );
    }

    #[test]
    fn the_answer_tool_streams_as_text_once() {
        let (events, _) = decode(&[
            start(json!({"input_tokens": 1})),
            block(
                0,
                json!({"type": "tool_use", "id": "t1", "name": "answer", "input": {}}),
            ),
            delta(0, json_piece("{\"a\":")),
            delta(0, json_piece("1}")),
            stop(0),
            block(
                1,
                json!({"type": "tool_use", "id": "t2", "name": "answer", "input": {}}),
            ),
            delta(1, json_piece("{\"a\":2}")),
            stop(1),
            block(2, json!({"type": "thinking", "thinking": ""})),
            delta(2, json!({"type": "thinking_delta", "thinking": "hmm"})),
            json!({"type": "message_stop"}),
        ])
        .unwrap();
        assert_eq!(
            events,
            [
                LlmEvent::TextDelta("{\"a\":".into()),
                LlmEvent::TextDelta("1}".into()),
                LlmEvent::Usage(Usage {
                    prompt_tokens: 1,
                    completion_tokens: 0
                }),
            ]
        );
    }

    #[test]
    fn error_events_map_to_errors() {
        let error = |kind: &str| {
            let frame = json!({"type": "error",
                "error": {"type": kind, "message": format!("went  wrong {KEY}")}});
            decode(&[start(json!({})), frame]).unwrap_err()
        };
        let overloaded = error("overloaded_error");
        assert!(
            matches!(&overloaded, Error::Status { status: 529, message } if message == "went wrong ***"),
            "{overloaded:?}"
        );
        assert!(overloaded.retryable());
        assert!(matches!(
            error("api_error"),
            Error::Status { status: 500, .. }
        ));
        assert!(matches!(
            error("rate_limit_error"),
            Error::RateLimited { .. }
        ));
        let invalid = error("invalid_request_error");
        assert!(matches!(invalid, Error::Status { status: 400, .. }));
        assert!(!invalid.retryable());
    }

    #[test]
    fn bad_input_is_malformed_never_a_panic() {
        let cases = [
            vec![json!("just a string")],
            vec![json!({"no": "type"})],
            vec![json!({"type": "content_block_delta", "index": "x", "delta": text("a")})],
            vec![json!({"type": "message_start"})],
            vec![delta(3, json_piece("{}"))],
            vec![
                block(0, json!({"type": "text"})),
                delta(0, json_piece("{}")),
            ],
            vec![block(0, json!({"type": "tool_use", "id": "t"})), stop(0)],
        ];
        for frames in cases {
            let err = decode(&frames).unwrap_err();
            assert!(matches!(err, Error::Malformed(_)), "{frames:?}: {err:?}");
        }
        let mut decoder = decoder();
        let mut out = VecDeque::new();
        let err = decoder
            .decode(&format!("not json {KEY}"), &mut out)
            .unwrap_err();
        assert!(!err.to_string().contains(KEY), "{err}");
        assert!(matches!(
            decoder.ended_early(&mut out),
            Err(Error::Malformed(_))
        ));
    }
}
