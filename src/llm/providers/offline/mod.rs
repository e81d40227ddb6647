//! The offline provider: a deterministic stand-in for a chat model, so orca completes runs with
//! no network, no key and no model. It is a demonstration and test provider, not an assistant:
//! it recognises a few requests by keyword (the current time, arithmetic, reading a file) and
//! answers them through real tool calls, turns tool results into a final sentence, plans the
//! samples, chooses an orchestration for the auto selector (`select.rs`), hands off and chats
//! in teams of agents (`team.rs`), writes a minimal conforming JSON value when asked for other
//! structured output, and otherwise echoes.
//!
//! It streams like a real provider (one text delta per word, usage last) and honours
//! cancellation. It must stay deterministic: the same request always gives the same answer, so
//! tests and demos can rely on it. It must not do IO.

use std::collections::VecDeque;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::llm::{
    ChatRequest, Error, LlmEvent, LlmProvider, LlmStream, Message, ToolCall, ToolSpec, Usage,
    tokens,
};

mod plans;
mod replans;
mod select;
mod team;

/// The model name routes use for this provider.
pub const MODEL: &str = "offline";

/// Tools the offline provider knows how to call (the built-ins the README's examples use).
const CLOCK_TOOL: &str = "clock.now";
const MATH_TOOL: &str = "math.calculate";
const FILE_TOOL: &str = "fs.read";

/// Longest text delta; longer words (file contents, JSON) are cut so they still stream.
const MAX_CHUNK_CHARS: usize = 16;
/// JSON output is cut into pieces this long, like a model writing it token by token.
const JSON_CHUNK_CHARS: usize = 8;
/// `$ref`s followed at most this deep when inventing a value, so a recursive schema ends.
const MAX_SCHEMA_DEPTH: usize = 32;

/// A deterministic chat model that needs no network. See the module docs.
#[derive(Debug, Clone)]
pub struct OfflineProvider {
    /// Pause before each streamed event after the first, so the stream looks like a model's.
    token_delay: Duration,
}

impl OfflineProvider {
    /// Pacing of the default provider: visible as a stream in a terminal, too short to slow
    /// tests down noticeably.
    pub const DEFAULT_TOKEN_DELAY: Duration = Duration::from_millis(5);

    pub fn new() -> Self {
        Self::with_token_delay(Self::DEFAULT_TOKEN_DELAY)
    }

    /// A provider pausing `token_delay` between streamed events (`Duration::ZERO` for none).
    pub fn with_token_delay(token_delay: Duration) -> Self {
        OfflineProvider { token_delay }
    }
}

impl Default for OfflineProvider {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl LlmProvider for OfflineProvider {
    fn name(&self) -> &str {
        MODEL
    }

    async fn embed(&self, _model: &str, texts: &[String]) -> Result<Vec<Vec<f32>>, Error> {
        Ok(texts
            .iter()
            .map(|t| crate::llm::embed::offline(t))
            .collect())
    }

    async fn stream(
        &self,
        request: ChatRequest,
        cancel: CancellationToken,
    ) -> Result<LlmStream, Error> {
        if cancel.is_cancelled() {
            return Err(Error::Cancelled);
        }
        let events = events_for(&request);
        let state = Replay {
            events: events.into(),
            cancel,
            delay: self.token_delay,
            started: false,
            finished: false,
        };
        let stream = futures::stream::unfold(state, |mut state| async move {
            let item = state.next().await?;
            Some((item, state))
        });
        Ok(stream.boxed())
    }
}

/// Hands out precomputed events with pacing, stopping at cancellation.
struct Replay {
    events: VecDeque<LlmEvent>,
    cancel: CancellationToken,
    delay: Duration,
    started: bool,
    finished: bool,
}

impl Replay {
    async fn next(&mut self) -> Option<Result<LlmEvent, Error>> {
        if self.finished {
            return None;
        }
        if self.cancel.is_cancelled() {
            return self.cancelled();
        }
        let event = self.events.pop_front()?;
        if self.started && !self.delay.is_zero() {
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return self.cancelled(),
                _ = tokio::time::sleep(self.delay) => {}
            }
        }
        self.started = true;
        Some(Ok(event))
    }

    fn cancelled(&mut self) -> Option<Result<LlmEvent, Error>> {
        self.finished = true;
        Some(Err(Error::Cancelled))
    }
}

/// What the model decided to say.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    Text(String),
    /// JSON text for a structured-output request; streamed in smaller pieces than prose.
    Json(String),
    ToolCalls(Vec<ToolCall>),
}

/// The whole stream for `request`: deltas or tool calls, then usage.
fn events_for(request: &ChatRequest) -> Vec<LlmEvent> {
    let answer = answer(request);
    let mut events: Vec<LlmEvent> = match &answer {
        Answer::Text(text) => word_chunks(text)
            .into_iter()
            .map(LlmEvent::TextDelta)
            .collect(),
        Answer::Json(text) => char_chunks(text, JSON_CHUNK_CHARS)
            .into_iter()
            .map(LlmEvent::TextDelta)
            .collect(),
        Answer::ToolCalls(calls) => calls.iter().cloned().map(LlmEvent::ToolCall).collect(),
    };
    let completion_tokens = match &answer {
        Answer::Text(text) | Answer::Json(text) => u64::from(tokens::count(text)),
        Answer::ToolCalls(calls) => calls
            .iter()
            .map(|c| u64::from(tokens::count(&c.name) + tokens::count(&c.arguments)))
            .sum(),
    };
    events.push(LlmEvent::Usage(Usage {
        prompt_tokens: prompt_tokens(request),
        completion_tokens,
    }));
    events
}

fn answer(request: &ChatRequest) -> Answer {
    if let Some(schema) = &request.response_schema {
        if schema.name == "agent_plan" {
            let plan = plans::plan_for(plans::task_of(first_user(request)));
            let later = request.messages.iter().skip(1).filter_map(|m| match m {
                Message::User { content } => Some(content.as_str()),
                _ => None,
            });
            return Answer::Json(plans::revised(plan, &plans::rejections(later)).to_string());
        }
        if schema.name == "replan" {
            return Answer::Json(replans::replan_for(first_user(request)).to_string());
        }
        // The name the engine's selector gives its structured output.
        if schema.name == "orchestration_type" {
            return Answer::Json(select::orchestration_for(first_user(request)).to_string());
        }
        // The name the group chat's `llm` speaker selector gives its structured output.
        if schema.name == "speaker_choice" {
            return Answer::Json(team::speaker(&schema.schema, first_user(request)).to_string());
        }
        return Answer::Json(example_value(&schema.schema).to_string());
    }
    let last_user = request
        .messages
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }));
    let user_text = match last_user.map(|i| &request.messages[i]) {
        Some(Message::User { content }) => content.as_str(),
        _ => "",
    };
    // The target of a handoff answers the request, not the note that handed it over.
    let user_text = team::request_behind(&request.messages, user_text);
    // Tool results after the user's last message mean this round is the answer to them; the
    // provider never calls a tool twice for one question, so a run cannot loop on it.
    let since_user = &request.messages[last_user.map_or(0, |i| i + 1)..];
    let results: Vec<(&str, &str)> = since_user
        .iter()
        .filter_map(|m| match m {
            Message::Tool { call_id, content } => Some((call_id.as_str(), content.as_str())),
            _ => None,
        })
        .collect();
    if !results.is_empty() {
        let sentences: Vec<String> = results
            .iter()
            .map(|(call_id, content)| {
                describe_result(find_call(&request.messages, call_id), content)
            })
            .collect();
        return Answer::Text(sentences.join("\n\n"));
    }
    let first_id = 1 + request
        .messages
        .iter()
        .map(|m| match m {
            Message::Assistant { tool_calls, .. } => tool_calls.len(),
            _ => 0,
        })
        .sum::<usize>();
    let system = request.messages.iter().find_map(|m| match m {
        Message::System { content } => Some(content.as_str()),
        _ => None,
    });
    if let Some(text) = team::chat_line(system, &request.messages, first_user(request)) {
        return Answer::Text(text);
    }
    let id = format!("call_{first_id}");
    if let Some(call) = team::transfer(&request.messages, user_text, &request.tools, id) {
        return Answer::ToolCalls(vec![call]);
    }
    if let Some(text) = plans::text_for(system, user_text) {
        return Answer::Text(text);
    }
    match tool_intent(user_text, &request.tools) {
        Some((name, arguments)) => Answer::ToolCalls(vec![ToolCall {
            id: format!("call_{first_id}"),
            name: name.to_owned(),
            arguments: arguments.to_string(),
        }]),
        None => Answer::Text(echo(user_text)),
    }
}

/// The first user message: a planner's prompt, whatever repairs followed it.
fn first_user(request: &ChatRequest) -> &str {
    request
        .messages
        .iter()
        .find_map(|m| match m {
            Message::User { content } => Some(content.as_str()),
            _ => None,
        })
        .unwrap_or_default()
}

fn echo(user_text: &str) -> String {
    let text = user_text.trim();
    if text.is_empty() {
        "Hello! This is orca's offline demonstration model. Ask me for the current time, a \
         calculation such as 10 + 20, or to read a file like hello.txt."
            .to_owned()
    } else {
        format!(
            "This is orca's offline demonstration model. You said: \"{text}\". Ask me for the \
             current time, a calculation such as 10 + 20, or to read a file like hello.txt."
        )
    }
}

/// The tool call a request asks for, if its tool is offered: time, then arithmetic, then files.
fn tool_intent(text: &str, tools: &[ToolSpec]) -> Option<(&'static str, Value)> {
    let offered = |name: &str| tools.iter().any(|t| t.name == name);
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let has_word = |prefixes: &[&str]| {
        words
            .iter()
            .any(|w| prefixes.iter().any(|p| w.starts_with(p)))
    };

    let wants_time = ["시간", "몇 시", "몇시", "시각"]
        .iter()
        .any(|k| lower.contains(k))
        || words.iter().any(|w| matches!(*w, "time" | "clock"));
    if wants_time && offered(CLOCK_TOOL) {
        let timezone = if text.chars().any(is_hangul) {
            "Asia/Seoul"
        } else {
            "UTC"
        };
        return Some((CLOCK_TOOL, json!({ "timezone": timezone })));
    }

    let math_keyword = lower.contains("계산") || has_word(&["calculat", "comput"]);
    if offered(MATH_TOOL)
        && let Some(expression) = extract_expression(text, math_keyword)
    {
        return Some((MATH_TOOL, json!({ "expression": expression })));
    }

    let file_keyword =
        ["파일", "읽어"].iter().any(|k| lower.contains(k)) || has_word(&["read", "file", "open"]);
    if file_keyword
        && offered(FILE_TOOL)
        && let Some(path) = extract_file_name(text)
    {
        return Some((FILE_TOOL, json!({ "path": path })));
    }
    None
}

fn is_hangul(c: char) -> bool {
    matches!(c, '\u{AC00}'..='\u{D7A3}' | '\u{1100}'..='\u{11FF}' | '\u{3130}'..='\u{318F}')
}

/// The longest arithmetic expression in `text` (digits, `+ - * / ( ) ^ % .` and spaces). Without
/// a keyword such as "calculate", a bare `-` between digits is not enough (dates have those).
fn extract_expression(text: &str, keyword: bool) -> Option<String> {
    let allowed = |c: char| c.is_ascii_digit() || " .+-*/()^%".contains(c);
    let mut best: Option<String> = None;
    for run in text.split(|c: char| !allowed(c)) {
        let candidate = run
            .trim()
            .trim_end_matches(|c: char| " .+-*/^%(".contains(c))
            .trim_start_matches(|c: char| " .+*/^%)".contains(c))
            .trim();
        let has_digit = candidate.chars().any(|c| c.is_ascii_digit());
        let has_operator = candidate.chars().any(|c| "+*/^%".contains(c))
            || (keyword && candidate.trim_start_matches('-').contains('-'))
            || candidate.contains(" - ");
        if has_digit && has_operator && best.as_ref().is_none_or(|b| candidate.len() > b.len()) {
            best = Some(candidate.to_owned());
        }
    }
    best
}

/// The first token that looks like a file name (`hello.txt`, `notes/today.md`): ASCII name
/// characters around a dot and an extension that starts with a letter, so `3.14` is not one.
fn extract_file_name(text: &str) -> Option<String> {
    let name_char = |c: char| c.is_ascii_alphanumeric() || "-_./".contains(c);
    text.split(|c: char| !name_char(c))
        // A sentence's full stop is not part of the name; a leading `../` is (the tool
        // decides whether such a path is allowed, not the model).
        .map(|t| t.trim_end_matches('.'))
        .find(|token| {
            let Some((stem, extension)) = token.rsplit_once('.') else {
                return false;
            };
            !stem.is_empty()
                && (1..=8).contains(&extension.len())
                && extension.starts_with(|c: char| c.is_ascii_alphabetic())
                && extension.chars().all(|c| c.is_ascii_alphanumeric())
        })
        .map(str::to_owned)
}

/// The tool call with this id, from the latest assistant message that made it.
fn find_call<'a>(messages: &'a [Message], call_id: &str) -> Option<&'a ToolCall> {
    messages.iter().rev().find_map(|m| match m {
        Message::Assistant { tool_calls, .. } => tool_calls.iter().find(|c| c.id == call_id),
        _ => None,
    })
}

/// One sentence about one tool result. The values the tool returned appear verbatim, so a
/// reader (or a test) finds them in the answer.
fn describe_result(call: Option<&ToolCall>, content: &str) -> String {
    let name = call.map_or("the tool", |c| c.name.as_str());
    let output: Value =
        serde_json::from_str(content).unwrap_or_else(|_| Value::String(content.to_owned()));
    let arguments: Value = call
        .and_then(|c| serde_json::from_str(&c.arguments).ok())
        .unwrap_or(Value::Null);

    if let Some(error) = output.as_object().and_then(|o| o.get("error")) {
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| error.to_string(), str::to_owned);
        return format!("Sorry, {name} failed: {message}");
    }
    match name {
        MATH_TOOL => {
            let value =
                pick(&output, &["result", "value", "answer"]).unwrap_or_else(|| content.to_owned());
            format!("The result is {value}.")
        }
        CLOCK_TOOL => {
            // Clock tools tend to give both a readable time and an ISO timestamp: show the
            // readable one, and the timestamp too when it says more.
            let readable = pick(&output, &["time", "formatted", "local", "datetime", "now"]);
            let iso = pick(&output, &["iso", "rfc3339", "utc"]);
            let time = match (readable, iso) {
                (Some(r), Some(i)) if !r.contains(&i) => format!("{r} ({i})"),
                (Some(r), _) => r,
                (None, Some(i)) => i,
                (None, None) => content.to_owned(),
            };
            match pick(&output, &["timezone", "tz"]) {
                Some(zone) if !time.contains(&zone) => {
                    format!("The current time in {zone} is {time}.")
                }
                _ => format!("The current time is {time}."),
            }
        }
        FILE_TOOL => {
            let text = pick(&output, &["content", "contents", "text", "data"])
                .unwrap_or_else(|| content.to_owned());
            match arguments.get("path").and_then(Value::as_str) {
                Some(path) => format!("Here is the content of {path}:\n\n{text}"),
                None => format!("Here is the file's content:\n\n{text}"),
            }
        }
        _ => format!("{name} returned {content}."),
    }
}

/// The first of `keys` present in an object (or the value itself when it is a scalar), as text:
/// strings without quotes, numbers exactly as the tool wrote them.
fn pick(output: &Value, keys: &[&str]) -> Option<String> {
    let value = match output {
        Value::Object(map) => keys.iter().find_map(|k| map.get(*k))?,
        other => other,
    };
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// A small value that satisfies simple JSON Schemas: `const`, the first `enum` value, `default`
/// or the first example when given; else by type — required properties only, `minItems` items,
/// `minLength` characters, the minimum number. Local `$ref`s and the first branch of
/// `anyOf`/`oneOf` are followed; `allOf` branches are merged.
pub fn example_value(schema: &Value) -> Value {
    example_at(schema, schema, 0)
}

/// [`example_value`] for `schema`, found `depth` references or branches below `root`.
fn example_at(root: &Value, schema: &Value, depth: usize) -> Value {
    let Some(obj) = schema.as_object() else {
        // `true` (or a missing schema) accepts anything.
        return Value::Null;
    };
    if depth > MAX_SCHEMA_DEPTH {
        return Value::Null;
    }
    if let Some(target) = obj
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix('#'))
        .and_then(|pointer| root.pointer(pointer))
    {
        return example_at(root, target, depth + 1);
    }
    if let Some(v) = given_example(obj) {
        return v.clone();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(first) = obj
            .get(key)
            .and_then(Value::as_array)
            .and_then(|b| b.first())
        {
            return example_at(root, first, depth + 1);
        }
    }
    if let Some(branches) = obj.get("allOf").and_then(Value::as_array) {
        let mut merged = Map::new();
        for branch in branches {
            match example_at(root, branch, depth + 1) {
                Value::Object(part) => merged.extend(part),
                other => return other,
            }
        }
        if !obj.contains_key("properties") {
            return Value::Object(merged);
        }
    }
    match schema_type(obj) {
        "object" => object_example(root, obj, depth),
        "array" => array_example(root, obj, depth),
        "string" => string_example(obj),
        "integer" | "number" => number_example(obj),
        "boolean" => Value::Bool(false),
        _ => Value::Null,
    }
}

/// A value the schema names itself: `const`, the first of `enum`, `default`, the first of
/// `examples` (in that order).
fn given_example(obj: &Map<String, Value>) -> Option<&Value> {
    let first = |key| {
        obj.get(key)
            .and_then(Value::as_array)
            .and_then(|e| e.first())
    };
    obj.get("const")
        .or_else(|| first("enum"))
        .or_else(|| obj.get("default"))
        .or_else(|| first("examples"))
}

/// The type an example is made for: `type` (of several, the first that is not `null`), else
/// what `properties` or `items` imply.
fn schema_type(obj: &Map<String, Value>) -> &str {
    match obj.get("type") {
        Some(Value::String(t)) => t.as_str(),
        // `["string", "null"]`: the first non-null type.
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ if obj.contains_key("properties") => "object",
        _ if obj.contains_key("items") => "array",
        _ => "null",
    }
}

/// The required properties, each with its own example.
fn object_example(root: &Value, obj: &Map<String, Value>, depth: usize) -> Value {
    let properties = obj.get("properties").and_then(Value::as_object);
    let mut out = Map::new();
    for name in obj
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        let property = properties.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
        out.insert(name.to_owned(), example_at(root, property, depth + 1));
    }
    Value::Object(out)
}

/// `minItems` items (at most 16), each the example of `items`.
fn array_example(root: &Value, obj: &Map<String, Value>, depth: usize) -> Value {
    let count = obj
        .get("minItems")
        .and_then(Value::as_u64)
        .unwrap_or(0)
        .min(16);
    let items = obj.get("items").unwrap_or(&Value::Null);
    Value::Array(
        (0..count)
            .map(|_| example_at(root, items, depth + 1))
            .collect(),
    )
}

/// A sample of the `format` when it has one, padded with `x` to `minLength` (at most 1024
/// more characters).
fn string_example(obj: &Map<String, Value>) -> Value {
    let format = obj.get("format").and_then(Value::as_str);
    let sample = match format {
        Some("date-time") => "1970-01-01T00:00:00Z",
        Some("date") => "1970-01-01",
        Some("uuid") => "00000000-0000-0000-0000-000000000000",
        Some("email") => "user@example.com",
        Some("uri") => "https://example.com",
        _ => "",
    };
    let min = obj.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
    let padding = min.saturating_sub(sample.chars().count()).min(1024);
    Value::String(format!("{sample}{}", "x".repeat(padding)))
}

/// The smallest whole number the bounds allow from 0 up: 0, or a positive `minimum` rounded
/// up, or one past a non-negative `exclusiveMinimum`.
fn number_example(obj: &Map<String, Value>) -> Value {
    let bound = |key| obj.get(key).and_then(Value::as_f64);
    let value = match (bound("minimum"), bound("exclusiveMinimum")) {
        (Some(min), _) if min > 0.0 => min.ceil(),
        (_, Some(min)) if min >= 0.0 => min.floor() + 1.0,
        _ => 0.0,
    };
    json!(value as i64)
}

/// Text cut after each run of whitespace, so each word (with its trailing space) is one delta
/// and the deltas concatenate back to `text` exactly.
fn word_chunks(text: &str) -> Vec<String> {
    let mut chunks = Vec::new();
    let mut current = String::new();
    let mut in_space = false;
    for c in text.chars() {
        if !c.is_whitespace() && in_space {
            chunks.push(std::mem::take(&mut current));
        }
        in_space = c.is_whitespace();
        current.push(c);
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
        .iter()
        .flat_map(|chunk| char_chunks(chunk, MAX_CHUNK_CHARS))
        .collect()
}

fn char_chunks(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(size.max(1))
        .map(|c| c.iter().collect())
        .collect()
}

/// The prompt's tokens, counted with the tokenizer (see [`tokens`]), at least 1.
fn prompt_tokens(request: &ChatRequest) -> u64 {
    u64::from(tokens::count_messages(&request.messages)).max(1)
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;
    use crate::llm::ResponseSchema;

    fn tools() -> Vec<ToolSpec> {
        [CLOCK_TOOL, MATH_TOOL, FILE_TOOL]
            .into_iter()
            .map(|name| ToolSpec {
                name: name.into(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            })
            .collect()
    }

    fn ask(text: &str, tools: Vec<ToolSpec>) -> ChatRequest {
        let mut request = ChatRequest::new(
            MODEL,
            vec![
                Message::System {
                    content: "You are orca.".into(),
                },
                Message::User {
                    content: text.into(),
                },
            ],
        );
        request.tools = tools;
        request
    }

    enum Expect {
        Call(&'static str, Value),
        TextContaining(&'static str),
    }

    fn check(request: ChatRequest, expect: Expect) {
        let got = answer(&request);
        match (&got, expect) {
            (Answer::ToolCalls(calls), Expect::Call(name, args)) => {
                assert_eq!(calls.len(), 1, "{got:?}");
                assert_eq!(calls[0].name, name);
                assert_eq!(
                    serde_json::from_str::<Value>(&calls[0].arguments).unwrap(),
                    args
                );
                assert_eq!(calls[0].id, "call_1");
            }
            (Answer::Text(text), Expect::TextContaining(want)) => {
                assert!(text.contains(want), "{text:?} lacks {want:?}");
            }
            (_, _) => panic!("unexpected answer {got:?}"),
        }
    }

    #[test]
    fn questions_become_tool_calls_or_echoes() {
        use Expect::*;
        let cases = [
            (
                "현재 시간 알려줘",
                Call(CLOCK_TOOL, json!({"timezone": "Asia/Seoul"})),
            ),
            (
                "What time is it?",
                Call(CLOCK_TOOL, json!({"timezone": "UTC"})),
            ),
            (
                "10 + 20 계산해줘",
                Call(MATH_TOOL, json!({"expression": "10 + 20"})),
            ),
            (
                "What is 2*(3+4)?",
                Call(MATH_TOOL, json!({"expression": "2*(3+4)"})),
            ),
            (
                "calculate 7 - 2",
                Call(MATH_TOOL, json!({"expression": "7 - 2"})),
            ),
            (
                "hello.txt 파일 읽어줘",
                Call(FILE_TOOL, json!({"path": "hello.txt"})),
            ),
            (
                "please read notes/todo.md",
                Call(FILE_TOOL, json!({"path": "notes/todo.md"})),
            ),
            (
                "../secret.txt 파일 읽어줘",
                Call(FILE_TOOL, json!({"path": "../secret.txt"})),
            ),
            (
                "Read hello.txt.",
                Call(FILE_TOOL, json!({"path": "hello.txt"})),
            ),
            ("안녕하세요", TextContaining("안녕하세요")),
            ("Sometimes I wonder", TextContaining("Sometimes I wonder")),
            ("I was born on 2001-02-03", TextContaining("2001-02-03")),
            ("read the file", TextContaining("read the file")),
            ("", TextContaining("offline demonstration model")),
        ];
        for (text, expect) in cases {
            check(ask(text, tools()), expect);
        }
    }

    #[test]
    fn tools_that_are_not_offered_are_not_called() {
        for text in [
            "현재 시간 알려줘",
            "10 + 20 계산해줘",
            "hello.txt 파일 읽어줘",
        ] {
            check(ask(text, vec![]), Expect::TextContaining(text));
        }
    }

    fn after_tool(question: &str, name: &str, arguments: Value, output: Value) -> ChatRequest {
        let mut request = ask(question, tools());
        request.messages.push(Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: name.into(),
                arguments: arguments.to_string(),
            }],
        });
        request.messages.push(Message::Tool {
            call_id: "call_1".into(),
            content: output.to_string(),
        });
        request
    }

    #[test]
    fn tool_results_become_the_final_answer() {
        use Expect::TextContaining;
        let cases = [
            (
                after_tool(
                    "10 + 20 계산해줘",
                    MATH_TOOL,
                    json!({"expression": "10 + 20"}),
                    json!({"result": 30}),
                ),
                TextContaining("The result is 30."),
            ),
            (
                after_tool("10 + 20 계산해줘", MATH_TOOL, json!({}), json!(30)),
                TextContaining("The result is 30."),
            ),
            (
                after_tool(
                    "현재 시간 알려줘",
                    CLOCK_TOOL,
                    json!({"timezone": "Asia/Seoul"}),
                    json!({"timezone": "Asia/Seoul", "iso": "2026-05-01T09:30:00+09:00"}),
                ),
                TextContaining("The current time in Asia/Seoul is 2026-05-01T09:30:00+09:00."),
            ),
            (
                after_tool(
                    "What time is it?",
                    CLOCK_TOOL,
                    json!({"timezone": "UTC"}),
                    json!({"timezone": "UTC", "time": "09:30:00", "iso": "2026-05-01T09:30:00Z"}),
                ),
                TextContaining("The current time in UTC is 09:30:00 (2026-05-01T09:30:00Z)."),
            ),
            (
                after_tool(
                    "hello.txt 파일 읽어줘",
                    FILE_TOOL,
                    json!({"path": "hello.txt"}),
                    json!({"path": "hello.txt", "content": "Hello, orca!\n"}),
                ),
                TextContaining("Hello, orca!\n"),
            ),
            (
                after_tool(
                    "hello.txt 파일 읽어줘",
                    FILE_TOOL,
                    json!({"path": "hello.txt"}),
                    json!({"error": {"code": "not_found", "message": "no such file"}}),
                ),
                TextContaining("fs.read failed: no such file"),
            ),
            (
                after_tool(
                    "weather?",
                    "weather.get",
                    json!({}),
                    json!({"sky": "clear"}),
                ),
                TextContaining("{\"sky\":\"clear\"}"),
            ),
        ];
        for (request, expect) in cases {
            check(request, expect);
        }
    }

    #[test]
    fn tool_call_ids_stay_unique_in_a_conversation() {
        let mut request = after_tool("What time is it?", CLOCK_TOOL, json!({}), json!("12:00"));
        request.messages.push(Message::Assistant {
            content: "The current time is 12:00.".into(),
            tool_calls: vec![],
        });
        request.messages.push(Message::User {
            content: "What time is it now?".into(),
        });
        let Answer::ToolCalls(calls) = answer(&request) else {
            panic!("expected a tool call");
        };
        assert_eq!(calls[0].id, "call_2");
    }

    #[test]
    fn structured_output_conforms_to_simple_schemas() {
        let schemas = [
            json!({
                "type": "object",
                "required": ["orchestrationType"],
                "properties": {"orchestrationType": {"enum": ["simple", "fixed", "planner", "reactive"]}}
            }),
            json!({
                "type": "object",
                "additionalProperties": false,
                "required": ["name", "count", "ratio", "tags", "done", "inner", "maybe"],
                "properties": {
                    "name": {"type": "string", "minLength": 3},
                    "count": {"type": "integer", "minimum": 1},
                    "ratio": {"type": "number", "exclusiveMinimum": 0},
                    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                    "done": {"type": "boolean"},
                    "inner": {"$ref": "#/$defs/inner"},
                    "maybe": {"anyOf": [{"type": "null"}, {"type": "string"}]}
                },
                "$defs": {"inner": {"type": "object", "required": ["at"],
                    "properties": {"at": {"type": "string", "format": "date-time"}}}}
            }),
            json!({"type": "array", "items": {"type": "object"}}),
        ];
        for schema in schemas {
            let value = example_value(&schema);
            assert!(
                jsonschema::is_valid(&schema, &value),
                "{value} does not conform to {schema}"
            );
        }
        let mut request = ask("pick one", tools());
        request.response_schema = Some(ResponseSchema::new(
            "selector",
            json!({"type": "object", "required": ["orchestrationType"],
                "properties": {"orchestrationType": {"enum": ["simple", "fixed"]}}}),
        ));
        assert_eq!(
            answer(&request),
            Answer::Json("{\"orchestrationType\":\"simple\"}".into())
        );
    }

    #[test]
    fn chunks_concatenate_back_to_the_text() {
        for text in [
            "The result is 30.",
            "  two  spaces ",
            "현재 시간은 9시입니다",
            "a".repeat(40).as_str(),
            "",
        ] {
            let chunks = word_chunks(text);
            assert_eq!(chunks.concat(), text);
            assert!(chunks.iter().all(|c| c.chars().count() <= MAX_CHUNK_CHARS));
        }
        assert_eq!(
            word_chunks("The result is 30."),
            ["The ", "result ", "is ", "30."]
        );
    }

    async fn collect(provider: &OfflineProvider, request: ChatRequest) -> Vec<LlmEvent> {
        let stream = provider
            .stream(request, CancellationToken::new())
            .await
            .unwrap();
        stream.map(|item| item.unwrap()).collect().await
    }

    #[tokio::test]
    async fn streams_word_deltas_then_usage() {
        let provider = OfflineProvider::with_token_delay(Duration::ZERO);
        let events = collect(&provider, ask("hello there", tools())).await;
        let text: String = events
            .iter()
            .filter_map(|e| match e {
                LlmEvent::TextDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert!(text.contains("hello there"));
        let deltas = events.len() - 1;
        assert!(deltas > 5, "{events:?}");
        assert_eq!(
            events.last(),
            Some(&LlmEvent::Usage(Usage {
                prompt_tokens: u64::from(tokens::count_messages(
                    &ask("hello there", tools()).messages
                )),
                completion_tokens: u64::from(tokens::count(&text)),
            }))
        );

        let events = collect(&provider, ask("10 + 20 계산해줘", tools())).await;
        assert!(matches!(&events[0], LlmEvent::ToolCall(c) if c.name == MATH_TOOL));
        assert!(matches!(events[1], LlmEvent::Usage(_)));
    }

    #[tokio::test]
    async fn cancellation_stops_the_stream_and_its_pacing() {
        // A minute between tokens: the stream only ends in time if cancelling cuts the pause.
        let provider = OfflineProvider::with_token_delay(Duration::from_secs(60));
        let cancel = CancellationToken::new();
        let mut stream = provider
            .stream(
                ask("a long enough question to stream", tools()),
                cancel.clone(),
            )
            .await
            .unwrap();
        assert!(matches!(
            stream.next().await,
            Some(Ok(LlmEvent::TextDelta(_)))
        ));
        // `join!` polls the stream first, so it is parked in its pause when the token fires.
        let (next, ()) = tokio::time::timeout(Duration::from_secs(5), async {
            tokio::join!(stream.next(), async { cancel.cancel() })
        })
        .await
        .expect("cancellation did not interrupt the pause");
        assert!(matches!(next, Some(Err(Error::Cancelled))));
        assert!(stream.next().await.is_none());

        let result = provider.stream(ask("hi", tools()), cancel).await;
        assert!(matches!(result, Err(Error::Cancelled)));
    }
}
