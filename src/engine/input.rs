//! Human input: runs waiting on a `user_input` step register here; `POST /v1/runs/{id}/input`
//! delivers the answer after checking it against the step's schema.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::oneshot;

use crate::domain::RunId;
use crate::plan::JsonSchema;

/// One located problem with an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputProblem {
    pub pointer: String,
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("the run is not waiting for input{}", .0.as_ref().map(|s| format!(" (it waits on step `{s}`)")).unwrap_or_default())]
    NotWaiting(Option<String>),
    #[error("the value does not match the step's schema")]
    Invalid(Vec<InputProblem>),
}

struct Waiting {
    step_id: String,
    /// The step's answer schema, compiled when its plan was validated.
    schema: Option<JsonSchema>,
    answer: oneshot::Sender<Value>,
}

/// Runs waiting for input. A std mutex: lookups and swaps only.
#[derive(Clone, Default)]
pub struct InputBox {
    waiting: Arc<Mutex<HashMap<RunId, Waiting>>>,
}

impl InputBox {
    /// Registers a run as waiting on `step_id`; the receiver yields the validated answer.
    pub fn wait(
        &self,
        run: RunId,
        step_id: &str,
        schema: Option<&JsonSchema>,
    ) -> oneshot::Receiver<Value> {
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().expect("input lock").insert(
            run,
            Waiting {
                step_id: step_id.to_owned(),
                schema: schema.cloned(),
                answer: tx,
            },
        );
        rx
    }

    /// Forgets a run's wait (the run ended or was cancelled).
    pub fn forget(&self, run: RunId) {
        self.waiting.lock().expect("input lock").remove(&run);
    }

    pub fn waiting_on(&self, run: RunId) -> Option<String> {
        self.waiting
            .lock()
            .expect("input lock")
            .get(&run)
            .map(|w| w.step_id.clone())
    }

    /// Delivers an answer if the run waits on this step and the value fits its schema.
    pub fn answer(&self, run: RunId, step_id: &str, value: Value) -> Result<(), InputError> {
        let mut map = self.waiting.lock().expect("input lock");
        let Some(w) = map.get(&run) else {
            return Err(InputError::NotWaiting(None));
        };
        if w.step_id != step_id {
            return Err(InputError::NotWaiting(Some(w.step_id.clone())));
        }
        if let Some(schema) = &w.schema {
            let problems: Vec<InputProblem> = schema
                .check(&value)
                .into_iter()
                .map(|v| InputProblem {
                    pointer: format!("/value{}", v.pointer),
                    message: v.message,
                })
                .collect();
            if !problems.is_empty() {
                return Err(InputError::Invalid(problems));
            }
        }
        let w = map.remove(&run).expect("checked above");
        // The run task may have ended meanwhile; then the answer has nowhere to go, which is
        // what a cancelled run means.
        let _ = w.answer.send(value);
        Ok(())
    }
}
