//! The design documents' samples, end to end with the offline provider and real tools.

use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn current_time_runs_clock_now_through_a_real_tool_call() {
    let app = spawn_app(|_| {}).await;
    let events = app.stream_run(json!({ "input": "현재 시간 알려줘" })).await;
    assert_well_formed(&events, 1);
    let call = events
        .iter()
        .find(|e| e.kind() == "tool_call")
        .expect("a tool call");
    assert_eq!(call.json()["data"]["tool"], "clock.now");
    assert_eq!(call.json()["data"]["arguments"]["timezone"], "Asia/Seoul");
    let result = events
        .iter()
        .find(|e| e.kind() == "tool_result")
        .expect("a tool result");
    let iso = result.json()["data"]["output"]["iso"]
        .as_str()
        .expect("iso time")
        .to_owned();
    assert!(iso.ends_with("+09:00"), "{iso}");
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded");
    assert_eq!(fin["completion"], "success");
    let time = result.json()["data"]["output"]["time"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(fin["output"].as_str().unwrap().contains(&time), "{fin}");
    assert!(
        events.iter().filter(|e| e.kind() == "token").count() > 1,
        "streamed in pieces"
    );
}

#[tokio::test]
async fn arithmetic_runs_math_calculate() {
    let app = spawn_app(|_| {}).await;
    let events = app.stream_run(json!({ "input": "10 + 20 계산해줘" })).await;
    assert_well_formed(&events, 1);
    let result = events
        .iter()
        .find(|e| e.kind() == "tool_result")
        .expect("tool result");
    assert_eq!(result.json()["data"]["tool"], "math.calculate");
    assert_eq!(result.json()["data"]["output"]["result"], 30);
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded");
    assert!(fin["output"].as_str().unwrap().contains("30"));
    assert_eq!(fin["usage"]["tool_calls"], 1);
    assert_eq!(fin["usage"]["llm_calls"], 2);
}

#[tokio::test]
async fn reading_a_file_uses_fs_read_inside_the_workspace() {
    let app = spawn_app(|_| {}).await;
    std::fs::write(
        workspace(&app.dir).join("hello.txt"),
        "Hello from the workspace!\n",
    )
    .unwrap();
    let events = app
        .stream_run(json!({ "input": "hello.txt 파일 읽어줘" }))
        .await;
    assert_well_formed(&events, 1);
    let result = events
        .iter()
        .find(|e| e.kind() == "tool_result")
        .expect("tool result");
    assert_eq!(result.json()["data"]["tool"], "fs.read");
    assert_eq!(
        result.json()["data"]["output"]["content"],
        "Hello from the workspace!\n"
    );
    let fin = final_data(&events);
    assert!(
        fin["output"]
            .as_str()
            .unwrap()
            .contains("Hello from the workspace!")
    );

    // The history records each step attempt with its timing.
    let run_id = events[0].json()["run_id"].as_str().unwrap().to_owned();
    let (status, steps) = app.get_json(&format!("/v1/runs/{run_id}/steps")).await;
    assert_eq!(status, 200);
    let steps = steps.as_array().unwrap();
    let kinds: Vec<&str> = steps.iter().map(|s| s["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["llm", "tool", "llm"]);
    for s in steps {
        assert_eq!(s["status"], "completed");
        assert_eq!(s["attempt"], 1);
        assert!(s["duration_ms"].is_u64());
        assert!(s["completed_at"].is_string());
    }
}

#[tokio::test]
async fn a_file_outside_the_workspace_is_refused_and_the_model_is_told() {
    let app = spawn_app(|_| {}).await;
    let events = app
        .stream_run(json!({ "input": "../secret.txt 파일 읽어줘" }))
        .await;
    assert_well_formed(&events, 1);
    let result = events
        .iter()
        .find(|e| e.kind() == "tool_result")
        .expect("tool result");
    assert_eq!(
        result.json()["data"]["error"]["code"],
        "path_outside_workspace"
    );
    assert!(events.iter().any(|e| e.kind() == "error"));
}

#[tokio::test]
async fn a_tool_allow_list_keeps_other_tools_away() {
    let app = spawn_app(|_| {}).await;
    // With only clock.now allowed, the arithmetic request gets no math tool.
    let events = app
        .stream_run(json!({ "input": "10 + 20 계산해줘", "tools": ["clock.now"] }))
        .await;
    assert!(
        !events.iter().any(|e| e.kind() == "tool_call"),
        "{:?}",
        kinds(&events)
    );
    assert_eq!(final_data(&events)["status"], "succeeded");
}
