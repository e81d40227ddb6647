//! The agent registry over HTTP (`/v1/agents`) and the agents directory loaded at start:
//! create, replace, read, list, delete; validation with a pointer to every problem; tenants
//! apart; shared agents validated together.

use orca::config::{ApiKey, Secret};
use serde_json::{Value, json};

use crate::support::*;

const KEY_A: &str = "key-for-team-a-0123456789";
const KEY_B: &str = "key-for-team-b-0123456789";

fn researcher() -> Value {
    json!({ "description": "Finds facts.", "instructions": "You research.",
            "tools": ["clock.now", "math.calculate"], "model": "default" })
}

async fn call(
    app: &TestApp,
    method: reqwest::Method,
    key: Option<&str>,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut req = app.client.request(method, app.url(path));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    if let Some(b) = body {
        req = req.json(b);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn put(app: &TestApp, key: Option<&str>, name: &str, body: &Value) -> (u16, Value) {
    call(
        app,
        reqwest::Method::PUT,
        key,
        &format!("/v1/agents/{name}"),
        Some(body),
    )
    .await
}

fn pointers(problem: &Value) -> Vec<&str> {
    problem["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["pointer"].as_str())
        .collect()
}

#[tokio::test]
async fn an_agent_is_created_replaced_read_listed_and_deleted() {
    let app = spawn_app(|_| {}).await;
    let (status, created) = put(&app, None, "researcher", &researcher()).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["name"], "researcher");
    assert_eq!(created["shared"], false);
    assert_eq!(
        created["definition"]["name"], "researcher",
        "the path name is filled in"
    );

    let mut again = researcher();
    again["description"] = json!("Finds more facts.");
    let (status, replaced) = put(&app, None, "researcher", &again).await;
    assert_eq!(status, 200, "{replaced}");
    assert_eq!(replaced["created_at"], created["created_at"]);
    assert_eq!(
        app.get_json("/v1/agents/researcher").await,
        (200, replaced.clone())
    );
    let (_, list) = app.get_json("/v1/agents").await;
    assert_eq!(list[0]["description"], "Finds more facts.");
    assert_eq!(list.as_array().unwrap().len(), 1);

    // A second agent may hand off to the first.
    let writer = json!({ "instructions": "You write.", "handoffs": [{ "to": "researcher", "context": "summarize" }] });
    assert_eq!(put(&app, None, "writer", &writer).await.0, 201);

    let (status, _) = call(
        &app,
        reqwest::Method::DELETE,
        None,
        "/v1/agents/researcher",
        None,
    )
    .await;
    assert_eq!(status, 204);
    assert_eq!(app.get_json("/v1/agents/researcher").await.0, 404);
    let (status, _) = call(
        &app,
        reqwest::Method::DELETE,
        None,
        "/v1/agents/researcher",
        None,
    )
    .await;
    assert_eq!(status, 404);
    let (status, problem) = put(&app, None, "Bad Name", &researcher()).await;
    assert_eq!(status, 422);
    assert_eq!(pointers(&problem), ["/name"]);
}

#[tokio::test]
async fn every_problem_of_an_agent_is_a_422_with_its_pointer() {
    let app = spawn_app(|_| {}).await;
    assert_eq!(
        put(
            &app,
            None,
            "writer",
            &json!({ "instructions": "You write." })
        )
        .await
        .0,
        201
    );
    let bad = json!({ "instructions": "You research.", "model": "gpt-9",
        "tools": ["clock.now", "no.such.tool"],
        "handoffs": ["researcher", "ghost", { "to": "writer", "context": "last_n" }],
        "middleware": ["audit_log", { "name": "teleport" }],
        "output_schema": { "type": 12 } });
    let (status, problem) = put(&app, None, "researcher", &bad).await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["code"], "validation_failed");
    assert_eq!(
        pointers(&problem),
        [
            "/model",
            "/tools/1",
            "/handoffs/0",
            "/handoffs/1",
            "/handoffs/2/last_n",
            "/middleware/1/name",
            "/output_schema"
        ]
    );
    let text = problem.to_string();
    for said in [
        "unknown tool `no.such.tool`",
        "no agent named `ghost`",
        "cannot hand off to itself",
        "unknown middleware `teleport`",
        "no model alias `gpt-9`",
    ] {
        assert!(text.contains(said), "{said}: {text}");
    }
    let (status, problem) = put(
        &app,
        None,
        "researcher",
        &json!({ "tools": "clock.now", "color": "red" }),
    )
    .await;
    assert_eq!(status, 422);
    let at = pointers(&problem);
    assert!(
        at.contains(&"/instructions") && at.contains(&"/color") && at.contains(&"/tools"),
        "{at:?}"
    );
    let (status, problem) = put(
        &app,
        None,
        "researcher",
        &json!({ "name": "other", "instructions": "x" }),
    )
    .await;
    assert_eq!((status, pointers(&problem)), (422, vec!["/name"]));
    assert_eq!(
        app.get_json("/v1/agents").await.1.as_array().unwrap().len(),
        1,
        "nothing invalid was stored"
    );
}

#[tokio::test]
async fn tenants_see_and_hand_off_to_their_own_agents_only() {
    let app = spawn_app(|c| {
        c.auth.api_keys = vec![
            ApiKey {
                user: None,
                key: Secret::new(KEY_A),
                tenant: "a".into(),
            },
            ApiKey {
                user: None,
                key: Secret::new(KEY_B),
                tenant: "b".into(),
            },
        ];
    })
    .await;
    assert_eq!(
        put(&app, Some(KEY_A), "researcher", &researcher()).await.0,
        201
    );
    let (status, list) = call(&app, reqwest::Method::GET, Some(KEY_B), "/v1/agents", None).await;
    assert_eq!((status, list), (200, json!([])));
    assert_eq!(
        call(
            &app,
            reqwest::Method::GET,
            Some(KEY_B),
            "/v1/agents/researcher",
            None
        )
        .await
        .0,
        404
    );
    assert_eq!(
        call(
            &app,
            reqwest::Method::DELETE,
            Some(KEY_B),
            "/v1/agents/researcher",
            None
        )
        .await
        .0,
        404
    );
    let writer = json!({ "instructions": "You write.", "handoffs": ["researcher"] });
    let (status, problem) = put(&app, Some(KEY_B), "writer", &writer).await;
    assert_eq!((status, pointers(&problem)), (422, vec!["/handoffs/0"]));
    assert_eq!(put(&app, Some(KEY_A), "writer", &writer).await.0, 201);
    assert_eq!(
        call(
            &app,
            reqwest::Method::GET,
            Some(KEY_A),
            "/v1/agents/researcher",
            None
        )
        .await
        .0,
        200
    );
}

#[tokio::test]
async fn agent_files_are_shared_validated_together_and_bad_ones_stop_the_start() {
    let files = tempfile::tempdir().unwrap();
    let write = |name: &str, body: Value| {
        std::fs::write(files.path().join(name), serde_json::to_vec(&body).unwrap()).unwrap();
    };
    write(
        "triage.json",
        json!({ "instructions": "Route.", "handoffs": ["billing", "support"] }),
    );
    write(
        "billing.json",
        json!({ "instructions": "Bills.", "handoffs": ["triage"] }),
    );
    write(
        "support.json",
        json!({ "name": "support", "instructions": "Helps.", "tools": ["clock.now"] }),
    );
    let dir = files.path().to_owned();
    let app = spawn_app(move |c| c.agents.dir = dir).await;
    let (_, list) = app.get_json("/v1/agents").await;
    let names: Vec<(&str, bool)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["name"].as_str().unwrap(), a["shared"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        names,
        [("billing", true), ("support", true), ("triage", true)]
    );
    let (status, problem) = call(
        &app,
        reqwest::Method::DELETE,
        None,
        "/v1/agents/triage",
        None,
    )
    .await;
    assert_eq!(status, 409, "{problem}");
    // A tenant's own agent may hand off to a shared one.
    let own = json!({ "instructions": "Mine.", "handoffs": ["triage"] });
    assert_eq!(put(&app, None, "mine", &own).await.0, 201);
    drop(app);

    write(
        "broken.json",
        json!({ "instructions": "Broken.", "handoffs": ["nobody"], "tools": ["nope"] }),
    );
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(workspace(&root)).unwrap();
    let mut config = test_config(&root);
    config.agents.dir = files.path().to_owned();
    let err = match orca::app::App::build(config).await {
        Ok(_) => panic!("an invalid agent file must stop the start"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("agents.dir"), "{err}");
    assert!(err.contains("agent `broken`"), "{err}");
    assert!(err.contains("/handoffs/0 no agent named `nobody`"), "{err}");
    assert!(err.contains("/tools/0 unknown tool `nope`"), "{err}");
    assert!(!err.contains("agent `triage`"), "{err}");
}
