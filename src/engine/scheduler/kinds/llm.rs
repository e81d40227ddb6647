//! `llm`: one model call with the step's prompt (and system prompt); with an output schema
//! the answer must be JSON valid against it, and the step outputs that JSON.

use serde_json::{Value, json};

use crate::domain::{ErrorCode, RunError};
use crate::llm::{ChatRequest, Message, ResponseSchema};
use crate::plan::{JsonSchema, StepSpec, Template};

use super::super::super::model::{TextKind, call_model};
use super::super::frame::{Frame, Locals};
use super::StepIo;

/// What an `llm` step asks, as the plan wrote it.
pub(crate) struct Ask<'a> {
    pub prompt: &'a Template,
    pub system: Option<&'a Template>,
    /// A model alias; the run's model when `None`.
    pub model: Option<&'a str>,
    pub output_schema: Option<&'a JsonSchema>,
}

pub(crate) async fn run(
    frame: &Frame<'_>,
    spec: &StepSpec,
    ask: Ask<'_>,
    locals: Locals<'_>,
    io: &mut StepIo<'_>,
) -> Result<Value, RunError> {
    let ctx = frame.ctx;
    let prompt = frame.resolve_text(locals, ask.prompt)?;
    let system = match ask.system {
        Some(s) => Some(frame.resolve_text(locals, s)?),
        None => None,
    };
    io.input = Some(json!({ "prompt": prompt, "system": system, "model": ask.model }));

    let alias = ask.model.or(ctx.spec.model.as_deref());
    let (provider, model) = ctx
        .services
        .llm
        .resolve(alias)
        .map_err(|e| e.to_run_error())?;
    let mut messages = Vec::new();
    if let Some(content) = system {
        messages.push(Message::System { content });
    }
    messages.push(Message::User { content: prompt });
    let mut request = ChatRequest::new(model, messages);
    let text_kind = match ask.output_schema {
        Some(schema) => {
            request.response_schema = Some(ResponseSchema {
                name: "step_output".into(),
                schema: schema.schema.clone(),
            });
            TextKind::Json
        }
        None => TextKind::Prose,
    };
    let reply = call_model(ctx, &*provider, request, spec.id.as_str(), text_kind).await?;
    match ask.output_schema {
        None => Ok(Value::String(reply.text)),
        Some(schema) => structured(&reply.text, schema),
    }
}

/// The model's answer as JSON valid against the step's output schema.
fn structured(text: &str, schema: &JsonSchema) -> Result<Value, RunError> {
    let value: Value = serde_json::from_str(text.trim()).map_err(|e| {
        RunError::new(
            ErrorCode::InvalidLlmOutput,
            format!("the model's answer is not JSON: {e}"),
        )
    })?;
    let problems: Vec<String> = schema
        .check(&value)
        .into_iter()
        .map(|v| format!("{} {}", v.pointer, v.message))
        .collect();
    if !problems.is_empty() {
        return Err(RunError::new(
            ErrorCode::InvalidLlmOutput,
            format!(
                "the model's answer breaks output_schema: {}",
                problems.join("; ")
            ),
        ));
    }
    Ok(value)
}
