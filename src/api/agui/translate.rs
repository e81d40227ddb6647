//! orca events → AG-UI events, one orca run at a time. Pure: no IO, no clocks.
//!
//! AG-UI clients check the order of what they receive (a message is started before its content
//! and ended before the run finishes; a step is finished only if it was started in the same
//! AG-UI run), so the translator keeps what is open. It tracks two things apart:
//! - what orca says is running (`running`), rebuilt from history when an AG-UI run resumes an
//!   interrupted one ([`Translator::absorb`]);
//! - what this AG-UI run has opened (`open_steps`, `messages`), closed before it ends.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::{Value, json};

use crate::domain::event::{
    FinalData, InputRequiredData, PlanData, StatusData, StepData, ToolCallData, ToolOutcome,
    ToolResultData,
};
use crate::domain::{Event, Payload, RunId, RunStatus};

/// How an AG-UI run ended: it is over, the stream closes after the events that said so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Finished,
    Interrupted,
    Errored,
}

pub struct Translator {
    thread_id: String,
    run_id: String,
    orca_run: RunId,
    /// The shared state (STATE_SNAPSHOT / STATE_DELTA): run status, plan, step statuses.
    state: Value,
    running: BTreeSet<String>,
    open_steps: BTreeSet<String>,
    /// Open text message per step id.
    messages: HashMap<String, String>,
    /// AG-UI tool call id per orca call id (orca's ids repeat across attempts; AG-UI's may not).
    tool_ids: HashMap<String, String>,
    used_tool_ids: HashSet<String>,
    next_message: u64,
    usage: (u64, u64),
}

/// The status a step event reports that ends the step.
fn finishes(status: &str) -> bool {
    matches!(
        status,
        "completed" | "failed" | "skipped" | "cancelled" | "timed_out"
    )
}

/// A JSON Pointer token: `~` and `/` escaped.
fn token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

impl Translator {
    pub fn new(thread_id: String, run_id: String, orca_run: RunId) -> Translator {
        Translator {
            thread_id,
            run_id,
            orca_run,
            state: json!({ "orca_run_id": orca_run.to_string(), "status": "queued",
                           "plan_version": null, "plan": null, "steps": {} }),
            running: BTreeSet::new(),
            open_steps: BTreeSet::new(),
            messages: HashMap::new(),
            tool_ids: HashMap::new(),
            used_tool_ids: HashSet::new(),
            next_message: 0,
            usage: (0, 0),
        }
    }

    /// Takes in an event that happened before this AG-UI run (a resumed run's history):
    /// state only, nothing to send.
    pub fn absorb(&mut self, ev: &Event) {
        match &ev.data {
            Payload::Status(data) => self.set_status(data),
            Payload::Plan(plan) => self.set_plan(plan),
            Payload::Step(data) => {
                self.step_status(ev, data);
            }
            _ => {}
        }
    }

    /// The opening events: RUN_STARTED, the state as it is, and the steps still running.
    pub fn begin(&mut self) -> Vec<Value> {
        let mut out = vec![json!({
            "type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id,
            "metadata": { "orca": { "run_id": self.orca_run.to_string() } },
        })];
        out.push(json!({ "type": "STATE_SNAPSHOT", "snapshot": self.state }));
        for key in self.running.clone() {
            out.push(json!({ "type": "STEP_STARTED", "stepName": key }));
            self.open_steps.insert(key);
        }
        out
    }

    /// The AG-UI events for one orca event, and whether the AG-UI run ended with them.
    pub fn translate(&mut self, ev: &Event) -> (Vec<Value>, Option<Ended>) {
        let mut out = Vec::new();
        let ended = match &ev.data {
            Payload::Status(data) => {
                self.set_status(data);
                out.push(delta("replace", "/status", self.state["status"].clone()));
                None
            }
            Payload::Plan(plan) => {
                self.set_plan(plan);
                out.push(json!({ "type": "STATE_SNAPSHOT", "snapshot": self.state }));
                None
            }
            Payload::Step(data) => {
                self.step(ev, data, &mut out);
                None
            }
            Payload::Token(text) => {
                self.text(ev, &text.text, &mut out);
                None
            }
            Payload::ToolCall(call) => {
                self.tool_call(ev, call, &mut out);
                None
            }
            Payload::ToolResult(result) => {
                self.tool_result(result, &mut out);
                None
            }
            Payload::Usage(usage) => {
                self.usage.0 += usage.prompt_tokens;
                self.usage.1 += usage.completion_tokens;
                None
            }
            Payload::InputRequired(asked) => Some(self.interrupt(asked, &mut out)),
            Payload::Final(data) => Some(self.finish(data, &mut out)),
            Payload::JsonPartial(_)
            | Payload::Handoff(_)
            | Payload::Speaker(_)
            | Payload::Error(_) => {
                out.push(custom(ev));
                None
            }
        };
        let ts = ev.ts.timestamp_millis();
        for e in &mut out {
            e["timestamp"] = json!(ts);
        }
        (out, ended)
    }

    fn set_status(&mut self, data: &StatusData) {
        self.state["status"] = json!(data.status);
    }

    fn set_plan(&mut self, plan: &PlanData) {
        self.state["plan_version"] = json!(plan.version);
        let steps: Vec<Value> = plan.plan["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| json!({ "id": s["id"], "kind": s["kind"], "depends_on": s.get("depends_on").cloned().unwrap_or(json!([])) }))
            .collect();
        self.state["plan"] =
            json!({ "version": plan.version, "reason": plan.reason, "steps": steps });
    }

    /// Records a step's status; gives its key and status.
    fn step_status(&mut self, ev: &Event, data: &StepData) -> Option<(String, &'static str)> {
        let key = ev.step()?.to_string();
        let status = data.status.as_str();
        self.state["steps"][&key] = json!(status);
        if status == "running" {
            self.running.insert(key.clone());
        } else if finishes(status) {
            self.running.remove(&key);
        }
        Some((key, status))
    }

    fn step(&mut self, ev: &Event, data: &StepData, out: &mut Vec<Value>) {
        let Some((key, status)) = self.step_status(ev, data) else {
            return;
        };
        out.push(delta(
            "add",
            &format!("/steps/{}", token(&key)),
            json!(status),
        ));
        if status == "running" && self.open_steps.insert(key.clone()) {
            out.push(json!({ "type": "STEP_STARTED", "stepName": key }));
        } else if finishes(status) {
            if let Some(id) = ev.step_id.as_deref() {
                self.end_message(id, out);
            }
            if self.open_steps.remove(&key) {
                out.push(json!({ "type": "STEP_FINISHED", "stepName": key }));
            }
        }
    }

    fn text(&mut self, ev: &Event, text: &str, out: &mut Vec<Value>) {
        if text.is_empty() {
            return;
        }
        let step = ev.step_id.clone().unwrap_or_default();
        let id = match self.messages.get(&step) {
            Some(id) => id.clone(),
            None => {
                self.next_message += 1;
                let id = format!("{}-m{}", self.orca_run, self.next_message);
                out.push(
                    json!({ "type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant" }),
                );
                self.messages.insert(step, id.clone());
                id
            }
        };
        out.push(json!({ "type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": text }));
    }

    fn end_message(&mut self, step: &str, out: &mut Vec<Value>) -> Option<String> {
        let id = self.messages.remove(step)?;
        out.push(json!({ "type": "TEXT_MESSAGE_END", "messageId": id }));
        Some(id)
    }

    fn tool_call(&mut self, ev: &Event, call: &ToolCallData, out: &mut Vec<Value>) {
        let step = ev.step_id.clone().unwrap_or_default();
        let parent = self.end_message(&step, out);
        let mut id = call.call_id.clone();
        let mut n = 1;
        while !self.used_tool_ids.insert(id.clone()) {
            n += 1;
            id = format!("{}#{n}", call.call_id);
        }
        self.tool_ids.insert(call.call_id.clone(), id.clone());
        let mut start = json!({ "type": "TOOL_CALL_START", "toolCallId": id,
                                "toolCallName": call.tool });
        if let Some(parent) = parent {
            start["parentMessageId"] = json!(parent);
        }
        out.push(start);
        out.push(json!({ "type": "TOOL_CALL_ARGS", "toolCallId": id, "delta": call.arguments.to_string() }));
        out.push(json!({ "type": "TOOL_CALL_END", "toolCallId": id }));
    }

    fn tool_result(&mut self, result: &ToolResultData, out: &mut Vec<Value>) {
        let Some(id) = self.tool_ids.get(&result.call_id).cloned() else {
            return;
        };
        let content = match &result.result {
            ToolOutcome::Error(error) => json!({ "error": error }).to_string(),
            ToolOutcome::Output(output) => output.to_string(),
        };
        out.push(
            json!({ "type": "TOOL_CALL_RESULT", "messageId": format!("{id}-result"),
                         "toolCallId": id, "role": "tool", "content": content }),
        );
    }

    /// Ends every open message and step: an AG-UI run may finish only with none open.
    fn close_all(&mut self, out: &mut Vec<Value>) {
        let mut steps: Vec<String> = self.messages.keys().cloned().collect();
        steps.sort();
        for step in steps {
            self.end_message(&step, out);
        }
        for key in std::mem::take(&mut self.open_steps) {
            out.push(json!({ "type": "STEP_FINISHED", "stepName": key }));
        }
    }

    fn interrupt(&mut self, asked: &InputRequiredData, out: &mut Vec<Value>) -> Ended {
        self.close_all(out);
        let step = asked.step_id.as_str();
        let mut interrupt = json!({
            "id": interrupt_id(self.orca_run, step),
            "reason": "input_required",
            "message": asked.prompt,
            "metadata": { "orca": { "run_id": self.orca_run.to_string(), "step_id": step } },
        });
        if let Some(schema) = asked.schema.as_ref().filter(|s| s.is_object()) {
            interrupt["responseSchema"] = schema.clone();
        }
        out.push(
            json!({ "type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.run_id,
                         "outcome": { "type": "interrupt", "interrupts": [interrupt] } }),
        );
        Ended::Interrupted
    }

    fn finish(&mut self, data: &FinalData, out: &mut Vec<Value>) -> Ended {
        self.close_all(out);
        let usage = json!([{ "inputTokens": self.usage.0, "outputTokens": self.usage.1,
                             "totalTokens": self.usage.0 + self.usage.1 }]);
        match data.status {
            RunStatus::Succeeded => {
                out.push(json!({ "type": "RUN_FINISHED", "threadId": self.thread_id,
                                 "runId": self.run_id, "result": data.output, "usage": usage }));
                Ended::Finished
            }
            RunStatus::Cancelled => {
                out.push(json!({ "type": "RUN_FINISHED", "threadId": self.thread_id,
                                 "runId": self.run_id, "outcome": { "type": "cancelled" }, "usage": usage }));
                Ended::Finished
            }
            status => {
                let (message, code) = match &data.error {
                    Some(e) => (json!(e.message), json!(e.code)),
                    None => (json!("the run failed"), json!(status.as_str())),
                };
                out.push(
                    json!({ "type": "RUN_ERROR", "message": message, "code": code,
                                 "usage": usage }),
                );
                Ended::Errored
            }
        }
    }
}

/// `orca:<run id>:<step id>`: an interrupt names the run and the step that waits.
pub fn interrupt_id(run: RunId, step: &str) -> String {
    format!("orca:{run}:{step}")
}

/// The run and step an interrupt id names, if it is one of orca's.
pub fn parse_interrupt_id(id: &str) -> Option<(RunId, String)> {
    let rest = id.strip_prefix("orca:")?;
    let (run, step) = rest.split_once(':')?;
    (!step.is_empty()).then(|| RunId::parse(run).map(|r| (r, step.to_owned())))?
}

fn delta(op: &str, path: &str, value: Value) -> Value {
    json!({ "type": "STATE_DELTA", "delta": [{ "op": op, "path": path, "value": value }] })
}

fn custom(ev: &Event) -> Value {
    let mut value = ev.data.to_data();
    if let (Some(obj), Some(key)) = (value.as_object_mut(), ev.step()) {
        obj.entry("step").or_insert(json!(key));
    }
    json!({ "type": "CUSTOM", "name": format!("orca.{}", ev.kind.as_str()), "value": value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::EventKind;

    fn event(seq: u64, kind: EventKind, step: Option<&str>, data: Value) -> Event {
        Event {
            seq,
            run_id: RunId::parse("01a20000-0000-7000-8000-000000000000").unwrap(),
            kind,
            ts: chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
            step_id: step.map(str::to_owned),
            path: None,
            data: Payload::decode(kind, data).expect("the data fits its kind"),
        }
    }

    fn types(out: &[Value]) -> Vec<&str> {
        out.iter().map(|e| e["type"].as_str().unwrap()).collect()
    }

    #[test]
    fn interrupt_ids_round_trip_and_foreign_ones_are_refused() {
        let run = RunId::parse("01a20000-0000-7000-8000-000000000000").unwrap();
        let id = interrupt_id(run, "review");
        assert_eq!(parse_interrupt_id(&id), Some((run, "review".to_owned())));
        for bad in [
            "review",
            "orca:",
            "orca:not-a-uuid:x",
            "orca:01a20000-0000-7000-8000-000000000000:",
        ] {
            assert_eq!(parse_interrupt_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_run_ends_with_nothing_open_and_a_resumed_one_reopens_what_runs() {
        let run = RunId::parse("01a20000-0000-7000-8000-000000000000").unwrap();
        let mut t = Translator::new("t".into(), "r".into(), run);
        t.begin();
        let step = |status: &str| json!({"step_id": "s", "name": "s", "kind": "tool", "status": status, "attempt": 1});
        let running = step("running");
        t.translate(&event(1, EventKind::Step, Some("s"), running.clone()));
        t.translate(&event(
            2,
            EventKind::Token,
            Some("s"),
            json!({"text": "Hi"}),
        ));
        let (out, ended) = t.translate(&event(
            3,
            EventKind::InputRequired,
            Some("s"),
            json!({"step_id": "s", "prompt": "ok?"}),
        ));
        assert_eq!(
            types(&out),
            ["TEXT_MESSAGE_END", "STEP_FINISHED", "RUN_FINISHED"]
        );
        assert_eq!(ended, Some(Ended::Interrupted));

        let mut again = Translator::new("t".into(), "r2".into(), run);
        again.absorb(&event(1, EventKind::Step, Some("s"), running));
        let opening = again.begin();
        assert_eq!(
            types(&opening),
            ["RUN_STARTED", "STATE_SNAPSHOT", "STEP_STARTED"]
        );
        let done = step("completed");
        let (out, _) = again.translate(&event(4, EventKind::Step, Some("s"), done));
        assert_eq!(types(&out), ["STATE_DELTA", "STEP_FINISHED"]);
    }

    #[test]
    fn repeated_orca_call_ids_get_distinct_tool_call_ids() {
        let run = RunId::parse("01a20000-0000-7000-8000-000000000000").unwrap();
        let mut t = Translator::new("t".into(), "r".into(), run);
        let call = json!({"call_id": "c", "tool": "x", "arguments": {}});
        let (a, _) = t.translate(&event(1, EventKind::ToolCall, Some("s"), call.clone()));
        let (b, _) = t.translate(&event(2, EventKind::ToolCall, Some("s"), call));
        assert_ne!(a[0]["toolCallId"], b[0]["toolCallId"]);
        let (result, _) = t.translate(&event(
            3,
            EventKind::ToolResult,
            Some("s"),
            json!({"call_id": "c", "tool": "x", "output": 1}),
        ));
        assert_eq!(
            result[0]["toolCallId"], b[0]["toolCallId"],
            "a result answers the latest call"
        );
    }
}
