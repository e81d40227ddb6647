//! Hub and spokes: the hub agent gets one tool `ask_<spoke>` per spoke; a call runs that
//! spoke's turn on the request and answers the hub with the spoke's answer, so control always
//! comes back to the hub, which answers in the end.

use serde_json::{Value, json};

use crate::domain::{ErrorCode, RunError, StepPath};
use crate::llm::{Message, ToolCall as ModelToolCall, ToolSpec};

use super::tool_name;
use super::turn::{Plain, take_turn};
use crate::engine::calls::converse::Hooks;
use crate::engine::runtime::context::RunContext;
use crate::engine::runtime::sink::EventSink;
use crate::engine::scheduler::frame::Frame;

/// The hub's hooks: its spokes as tools.
pub(crate) struct Spokes<'f> {
    pub frame: &'f Frame<'f>,
    pub spokes: &'f [String],
    /// The hub step's place: spoke turns sit at `<key>/<spoke>.<n>`.
    pub key: StepPath,
    /// Spoke turns taken so far (numbers their paths).
    pub asked: u32,
}

impl Hooks for Spokes<'_> {
    fn tools(&self) -> Vec<ToolSpec> {
        self.spokes
            .iter()
            .map(|name| {
                let about = self
                    .frame
                    .team
                    .agent(name)
                    .and_then(|a| a.description.clone())
                    .unwrap_or_else(|| format!("the agent `{name}`"));
                ToolSpec {
                    name: tool_name("ask_", name),
                    description: format!("Ask {about}; its answer comes back to you."),
                    parameters: json!({
                        "type": "object",
                        "properties": { "request": { "type": "string", "description": "What to ask." } },
                        "required": ["request"]
                    }),
                }
            })
            .collect()
    }

    async fn intercept(
        &mut self,
        _ctx: &RunContext,
        call: &ModelToolCall,
        sink: &mut EventSink,
    ) -> Option<Result<Value, RunError>> {
        let spoke = self
            .spokes
            .iter()
            .find(|s| tool_name("ask_", s) == call.name)?;
        self.asked += 1;
        let request = serde_json::from_str::<Value>(&call.arguments)
            .ok()
            .and_then(|v| v.get("request")?.as_str().map(str::to_owned));
        let Some(request) = request else {
            return Some(Err(RunError::new(
                ErrorCode::InvalidToolArguments,
                format!("`{}` takes {{\"request\": \"...\"}}", call.name),
            )));
        };
        let Some(agent) = self.frame.team.agent(spoke) else {
            return Some(Err(RunError::new(
                ErrorCode::InvalidStep,
                format!("no agent named `{spoke}`"),
            )));
        };
        let path = self.key.turn(spoke, self.asked);
        let messages = vec![Message::User { content: request }];
        // Boxed: a spoke's turn is a turn inside the hub's.
        let mut plain = Plain;
        let turn = Box::pin(take_turn(
            self.frame, agent, &path, messages, &mut plain, sink,
        ));
        Some(turn.await.map(|end| end.value))
    }
}
