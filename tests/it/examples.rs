//! Every file in `examples/` (the agents, the team runs, the workflow) runs as the README shows
//! it — sent with curl's body and `accept: text/event-stream`, and from the CLI — against the
//! offline model, and shows the feature it is named after.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::app::{TestApp, final_data, spawn_app};

fn example(path: &str) -> String {
    format!("{}/examples/{path}", env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(example(path)).unwrap()).unwrap()
}

/// `orca ARGS --json` against `app` with `stdin`: exit code, the events printed, standard error.
async fn orca(app: &TestApp, args: &[&str], stdin: &str) -> (i32, Vec<Value>, String) {
    let args: Vec<&str> = args.iter().copied().chain(["--json"]).collect();
    let out = app.orca(&args, stdin).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let events = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), events, stderr)
}

/// Both ways of running a team example: its events (as JSON) over HTTP and from the CLI.
async fn both_ways(app: &TestApp, file: &str) -> [Vec<Value>; 2] {
    let streamed = app.stream_run(read(file)).await;
    let http: Vec<Value> = streamed.iter().map(|e| e.json()).collect();
    let (code, cli, stderr) = orca(app, &["run", "--request", &example(file)], "").await;
    assert_eq!(code, 0, "{file} from the CLI: {stderr}");
    [http, cli]
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

fn last_data(events: &[Value]) -> &Value {
    let last = events.last().expect("events");
    assert_eq!(last["kind"], "final", "{last}");
    &last["data"]
}

#[tokio::test]
async fn the_handoff_example_hands_billing_the_question_which_answers_from_a_tool() {
    let app = spawn_app(|_| {}).await;
    for agent in ["tech", "billing", "triage"] {
        let file = example(&format!("agents/{agent}.json"));
        let (code, _, stderr) = orca(&app, &["agents", "put", &file], "").await;
        assert_eq!(code, 0, "{agent}: {stderr}");
    }
    for events in both_ways(&app, "teams/handoff.json").await {
        let handoffs = of_kind(&events, "handoff");
        assert_eq!(handoffs.len(), 1, "{handoffs:?}");
        assert_eq!(handoffs[0]["data"]["from"], "triage");
        assert_eq!(handoffs[0]["data"]["to"], "billing");
        let calls = of_kind(&events, "tool_call");
        assert_eq!(calls[0]["data"]["tool"], "math.calculate");
        let fin = last_data(&events);
        assert_eq!(fin["output"], "The result is 42.", "{fin}");
    }
}

#[tokio::test]
async fn the_sequential_example_computes_then_reports() {
    let app = spawn_app(|_| {}).await;
    for events in both_ways(&app, "teams/sequential.json").await {
        let started: Vec<&str> = of_kind(&events, "step")
            .into_iter()
            .filter(|e| e["path"].is_null() && e["data"]["status"] == "running")
            .map(|e| e["step_id"].as_str().unwrap())
            .collect();
        assert_eq!(started, ["compute", "report"]);
        assert_eq!(
            of_kind(&events, "tool_call")[0]["data"]["arguments"]["expression"],
            "17 * 23"
        );
        let fin = last_data(&events);
        assert!(fin["output"].as_str().unwrap().contains("391"), "{fin}");
    }
}

#[tokio::test]
async fn the_chat_example_ends_on_its_keyword_before_its_round_limit() {
    let app = spawn_app(|_| {}).await;
    for events in both_ways(&app, "teams/chat.json").await {
        let speakers = of_kind(&events, "speaker");
        let fin = last_data(&events);
        let transcript = fin["output"].as_array().unwrap_or_else(|| panic!("{fin}"));
        assert!(
            speakers.len() < 6 && transcript.len() == speakers.len(),
            "the keyword ended it before max_rounds 6: {fin}"
        );
        let last = transcript.last().unwrap()["text"].as_str().unwrap();
        assert!(last.contains("DONE"), "{last}");
    }
}

#[tokio::test]
async fn the_workflow_example_branches_asks_and_publishes() {
    let app = spawn_app(|_| {}).await;
    let file = example("workflows/publish-report.json");
    let (code, _, stderr) = orca(&app, &["workflows", "put", &file], "").await;
    assert_eq!(code, 0, "{stderr}");
    let input = r#"{"topic": "Q3", "threshold": 1000}"#;
    let (code, events, stderr) = orca(
        &app,
        &["run", input, "--workflow", "publish-report"],
        "yes\n",
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let skipped: Vec<&Value> = of_kind(&events, "step")
        .into_iter()
        .filter(|e| e["data"]["status"] == "skipped")
        .collect();
    assert_eq!(skipped[0]["step_id"], "archive", "the branch took `then`");
    let fin = last_data(&events);
    assert_eq!(fin["output"]["profit"], 1200, "{fin}");
    assert_eq!(fin["output"]["decision"], json!({ "approved": true }));

    // As the README's curl lines do: the run streams up to its question.
    let body = json!({ "input": { "topic": "Q3", "threshold": 5000 }, "orchestration": "fixed",
                       "workflow": "publish-report" });
    let fin = final_data(&app.stream_run(body).await);
    assert_eq!(
        fin["output"]["draft"],
        Value::Null,
        "below the threshold it archives: {fin}"
    );
    assert!(Path::new(&file).exists());
}
