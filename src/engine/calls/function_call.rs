//! Every call orca makes to a model on its own behalf goes through [`open`], the twin of
//! [`super::tool_call`]: the planner and re-planner, the `auto` selector, the session and
//! handoff summaries and a group chat's speaker choice. It records the call as a step attempt
//! at the caller's place, routes the model (the function's alias, else the run's, with its
//! fallbacks), asks for the structured answer in the provider's dialect, streams or keeps quiet
//! as told, and ends the attempt with what the caller made of the answer, the fallback that
//! gave it showing in the attempt's input.
//!
//! [`opening`] renders a configured [`LlmFunction`]'s system prompt and prompt over its input;
//! [`configured`] looks one up. A step of kind `llm` is not a call of this kind: it is the
//! plan's own work, recorded by the scheduler, and asks through [`super::model::ask`].

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::domain::{AttemptInput, ErrorCode, RunError, StepKind, StepPath};
use crate::functions::LlmFunction;
use crate::llm::router::ModelRoute;
use crate::llm::{ChatRequest, Message, ResponseSchema};
use crate::plan::{NoResults, Scope};

use super::model::{ModelReply, TextKind, call_model, mark_answered_by};
use crate::engine::runtime::attempts::{AttemptEnd, AttemptKey, HeldEnd, NewAttempt};
use crate::engine::runtime::context::RunContext;
use crate::engine::runtime::sink::EventSink;

/// The configured function `name` (one orca itself calls: `planner`, `replanner`, `selector`,
/// `summarizer`); an `internal_error` when the configuration lacks it.
pub fn configured(ctx: &RunContext, name: &str) -> Result<Arc<LlmFunction>, RunError> {
    ctx.services.functions.get(name).ok_or_else(|| {
        RunError::new(
            ErrorCode::InternalError,
            format!("the {name} function is not configured"),
        )
    })
}

/// A function's opening messages: its system prompt, then its prompt rendered over `input`
/// (and nothing of the run).
pub fn opening(
    ctx: &RunContext,
    function: &LlmFunction,
    input: &Value,
) -> Result<Vec<Message>, RunError> {
    let vars = Map::new();
    let scope = Scope::new(input, &NoResults, &vars);
    let limit = ctx.services.config.max_rendered_bytes;
    let prompt = function
        .prompt
        .render(&scope, limit)
        .map_err(crate::plan::render_error)?;
    let mut messages = Vec::new();
    if let Some(system) = &function.system {
        messages.push(Message::System {
            content: system.clone(),
        });
    }
    messages.push(Message::User {
        content: match prompt {
            Value::String(s) => s,
            other => other.to_string(),
        },
    });
    Ok(messages)
}

/// One call, as the caller describes it.
pub struct FunctionCall<'a> {
    /// Where the call is recorded: its attempt's place, the step its events name.
    pub step: &'a StepPath,
    /// The attempt's name.
    pub name: &'a str,
    pub plan_version: u32,
    /// The model alias to ask (`None`: the run's model).
    pub model: Option<&'a str>,
    /// The structured answer asked for, if any.
    pub schema: Option<ResponseSchema>,
    /// How the answer's text goes out while it is written.
    pub text: TextKind,
    /// What the attempt shows as its input.
    pub input: Option<AttemptInput>,
}

impl<'a> FunctionCall<'a> {
    /// A call of the configured `function` as the attempt `name` at `step`, its structured
    /// answer (if the function has an output schema) sent under `schema_name`.
    pub fn of(
        function: &'a LlmFunction,
        step: &'a StepPath,
        name: &'a str,
        schema_name: &str,
    ) -> FunctionCall<'a> {
        FunctionCall {
            step,
            name,
            plan_version: crate::domain::plan::NO_PLAN,
            model: function.model.as_deref(),
            schema: function
                .output_schema
                .as_ref()
                .map(|s| ResponseSchema::new(schema_name, s.schema.clone())),
            text: TextKind::Json,
            input: None,
        }
    }
}

/// A call whose attempt is open: ask the model (once or more), then end it.
pub struct Open {
    key: AttemptKey,
    step: StepPath,
    route: ModelRoute,
    schema: Option<ResponseSchema>,
    text: TextKind,
    input: Option<AttemptInput>,
    /// The fallback alias that gave the last answer, if one did.
    answered_by: Option<String>,
}

/// Opens the call's attempt (its `running` event into `sink`) and routes its model; a model
/// that cannot be routed ends the attempt failed.
pub async fn open(
    ctx: &RunContext,
    call: FunctionCall<'_>,
    sink: &mut EventSink,
) -> Result<Open, RunError> {
    let new = NewAttempt {
        step: call.step,
        name: call.name,
        kind: StepKind::Llm,
        plan_version: call.plan_version,
        input: call.input.clone(),
    };
    let key = ctx.open_attempt(new, sink).await?;
    let alias = call.model.or(ctx.spec.request.model.as_deref());
    let route = match ctx.services.llm.route(alias) {
        Ok(route) => route,
        Err(e) => {
            let error = e.to_run_error();
            let end = AttemptEnd::failed(error.clone());
            ctx.close_attempt(&key, end, sink).await;
            return Err(error);
        }
    };
    Ok(Open {
        key,
        step: call.step.clone(),
        route,
        schema: call.schema,
        text: call.text,
        input: call.input,
        answered_by: None,
    })
}

impl Open {
    /// One model call on `messages` with the call's model, schema and text kind.
    pub async fn ask(
        &mut self,
        ctx: &RunContext,
        messages: Vec<Message>,
    ) -> Result<ModelReply, RunError> {
        let mut request = ChatRequest::new(self.route.alias(), messages);
        request.response_schema = self.schema.clone();
        let reply = call_model(ctx, &self.route, request, &self.step, self.text).await?;
        self.answered_by = reply.answered_by.clone();
        Ok(reply)
    }

    /// How the attempt ended with `result` (its output, or why it failed; cancelled when the
    /// run was), held open until what it produced is recorded.
    pub fn held(self, ctx: &RunContext, result: &Result<Value, RunError>) -> HeldEnd {
        let input = mark_answered_by(self.input, self.answered_by.as_deref());
        HeldEnd::new(self.key, AttemptEnd::of(ctx, result).with_input(input))
    }

    /// Ends the attempt with `result` now.
    pub async fn close(
        self,
        ctx: &RunContext,
        result: &Result<Value, RunError>,
        sink: &mut EventSink,
    ) {
        self.held(ctx, result).close(ctx, sink).await;
    }
}
