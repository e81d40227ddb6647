//! Human input: runs waiting on a `user_input` step register here; `POST /v1/runs/{id}/input`
//! takes the wait (checking the answer against the step's schema), the engine stores the
//! answer, and only then is it delivered — so an acknowledged answer survives a crash.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::oneshot;

use crate::domain::{RunId, StepPath};
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

/// A run's wait for an answer, taken out of the box while its answer is being stored.
pub struct Waiting {
    /// The step's place: answers name its id (the leaf); its answer is stored under it all.
    pub step: StepPath,
    /// The step's answer schema, compiled when its plan was validated.
    schema: Option<JsonSchema>,
    answer: oneshot::Sender<Value>,
}

impl Waiting {
    /// Hands the (stored) answer to the waiting run. The run may have ended meanwhile; then
    /// the answer has nowhere to go, which is what an ended run means.
    pub fn deliver(self, value: Value) {
        let _ = self.answer.send(value);
    }
}

/// Checks an answer against its step's schema; problems point into the request body.
pub fn check_answer(schema: &JsonSchema, value: &Value) -> Result<(), InputError> {
    let problems: Vec<InputProblem> = schema
        .check(value)
        .into_iter()
        .map(|v| InputProblem {
            pointer: format!("/value{}", v.pointer),
            message: v.message,
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(InputError::Invalid(problems))
    }
}

/// Runs waiting for input. A std mutex: lookups and swaps only.
#[derive(Clone, Default)]
pub struct InputBox {
    waiting: Arc<Mutex<HashMap<RunId, Waiting>>>,
}

impl InputBox {
    /// Registers a run as waiting on the step at `step`; the receiver yields the answer once
    /// it is stored.
    pub fn wait(
        &self,
        run: RunId,
        step: &StepPath,
        schema: Option<&JsonSchema>,
    ) -> oneshot::Receiver<Value> {
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().expect("input lock").insert(
            run,
            Waiting {
                step: step.clone(),
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
            .map(|w| w.step.leaf().to_owned())
    }

    /// Takes the run's wait if it waits on this step and `value` fits its schema. While it is
    /// out, a second answer finds the run not waiting; [`Self::put_back`] returns it when the
    /// answer could not be stored.
    pub fn take(&self, run: RunId, step_id: &str, value: &Value) -> Result<Waiting, InputError> {
        let mut map = self.waiting.lock().expect("input lock");
        let Some(w) = map.get(&run) else {
            return Err(InputError::NotWaiting(None));
        };
        if w.step.leaf() != step_id {
            return Err(InputError::NotWaiting(Some(w.step.leaf().to_owned())));
        }
        if let Some(schema) = &w.schema {
            check_answer(schema, value)?;
        }
        Ok(map.remove(&run).expect("checked above"))
    }

    /// Where the run's pending answer would be stored, if it waits.
    pub fn waiting_at(&self, run: RunId) -> Option<StepPath> {
        self.waiting
            .lock()
            .expect("input lock")
            .get(&run)
            .map(|w| w.step.clone())
    }

    /// Takes the run's wait if it is still for the step at `step`: its answer was stored
    /// through another replica, which already checked it.
    pub fn take_stored(&self, run: RunId, step: &StepPath) -> Option<Waiting> {
        let mut map = self.waiting.lock().expect("input lock");
        if map.get(&run)?.step != *step {
            return None;
        }
        map.remove(&run)
    }

    /// Returns a taken wait whose answer was not stored, unless the run already left.
    pub fn put_back(&self, run: RunId, waiting: Waiting) {
        if !waiting.answer.is_closed() {
            self.waiting
                .lock()
                .expect("input lock")
                .entry(run)
                .or_insert(waiting);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn an_answer_taken_for_the_waited_step_reaches_the_waiter_once() {
        let (inputs, run) = (InputBox::default(), RunId::new());
        let step = StepPath::top("team").step("ask");
        let schema = JsonSchema::compile(&json!({"type": "string"})).unwrap();
        let answer = inputs.wait(run, &step, Some(&schema));
        assert_eq!(inputs.waiting_on(run).as_deref(), Some("ask"));
        let other = inputs.take(run, "other", &json!("x")).err().unwrap();
        assert!(matches!(other, InputError::NotWaiting(Some(s)) if s == "ask"));
        let Err(InputError::Invalid(problems)) = inputs.take(run, "ask", &json!(3)) else {
            panic!("a number is no string")
        };
        assert_eq!(problems[0].pointer, "/value");
        let waiting = inputs.take(run, "ask", &json!("yes")).unwrap();
        assert_eq!(waiting.step, step);
        assert!(matches!(
            inputs.take(run, "ask", &json!("again")),
            Err(InputError::NotWaiting(None))
        ));
        // Not stored: put back, and a second try delivers.
        inputs.put_back(run, waiting);
        inputs
            .take(run, "ask", &json!("yes"))
            .unwrap()
            .deliver(json!("yes"));
        assert_eq!(answer.await.unwrap(), json!("yes"));
    }

    #[test]
    fn a_wait_whose_run_left_is_not_put_back() {
        let (inputs, run) = (InputBox::default(), RunId::new());
        let answer = inputs.wait(run, &StepPath::top("ask"), None);
        let waiting = inputs.take(run, "ask", &json!(1)).unwrap();
        drop(answer);
        inputs.put_back(run, waiting);
        assert_eq!(inputs.waiting_on(run), None);
    }
}
