//! Loop detection in what a model chose, over HTTP: the same tool call giving the same result
//! `engine.loop_repeats` times ends the run with `loop_detected` — in a simple run's
//! conversation and in a planner's plan — while a workflow author's repetition is left alone.

use serde_json::{Value, json};

use crate::support::scripted_llm::{Reply, ScriptedLlm};
use crate::support::*;

fn loop_events(events: &[SseMessage]) -> Vec<Value> {
    events
        .iter()
        .map(|e| e.json())
        .filter(|e| e["kind"] == "error" && e["data"]["code"] == "loop_detected")
        .map(|e| e["data"].clone())
        .collect()
}

#[tokio::test]
async fn a_model_calling_the_same_tool_for_the_same_result_is_stopped() {
    let llm = ScriptedLlm::start().await;
    for raw in [r#"{"expression": "1 + 1"}"#, r#"{ "expression":"1 + 1" }"#].repeat(3) {
        // Written differently, the same arguments.
        llm.push(Reply::tool_call_raw("math.calculate", raw));
    }
    let app = spawn_app(|c| use_scripted(c, &llm)).await;
    let events = app
        .stream_run(json!({ "input": "what is 1 + 1?", "orchestration": "simple" }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["completion"], "error", "{fin}");
    assert_eq!(fin["error"]["code"], "loop_detected");
    let told = loop_events(&events);
    assert_eq!(told.len(), 1);
    assert!(
        told[0]["message"]
            .as_str()
            .unwrap()
            .contains("`math.calculate` was called 3 times"),
        "{told:?}"
    );
    assert_eq!(
        llm.request_count(),
        3,
        "the model is not asked again after the loop"
    );
    assert_eq!(fin["usage"]["tool_calls"], 3);
}

#[tokio::test]
async fn a_planned_repetition_ends_partial_but_an_authors_workflow_may_repeat() {
    let calc = |id: &str, dep: Option<&str>| {
        let mut step = json!({ "id": id, "kind": "tool",
            "input": { "tool": "math.calculate", "arguments": { "expression": "2 * 21" } } });
        if let Some(dep) = dep {
            step["depends_on"] = json!([dep]);
        }
        step
    };
    let plan = json!({ "steps": [calc("a", None), calc("b", Some("a")), calc("c", Some("b")), calc("d", Some("c"))] });
    let llm = ScriptedLlm::start().await;
    llm.push(Reply::json(plan.clone()));
    let app = spawn_app(|c| use_scripted(c, &llm)).await;

    let events = app
        .stream_run(json!({ "input": "x", "orchestration": "planner" }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["completion"], "partial", "{fin}");
    assert_eq!(fin["error"]["code"], "loop_detected");
    assert_eq!(
        fin["output"],
        json!({ "a": { "expression": "2 * 21", "result": 42 },
                                      "b": { "expression": "2 * 21", "result": 42 } })
    );
    assert_eq!(loop_events(&events).len(), 1);
    assert_eq!(fin["usage"]["tool_calls"], 3, "`d` never ran");

    let events = app
        .stream_run(json!({ "input": "x", "orchestration": "fixed", "plan": plan }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["completion"], "success", "{fin}");
    assert!(loop_events(&events).is_empty());
}
