//! The fixed-workflow registry (`/v1/workflows`, the workflows directory loaded at start), a
//! run's plans and checkpoints (`/v1/runs/{id}/plans`, `/checkpoints`), and the store methods
//! behind them.

use orca::config::{ApiKey, Secret};
use orca::domain::{RunId, Tenant};
use orca::store::Store;
use serde_json::{Value, json};

use crate::support::*;

const KEY_A: &str = "key-for-team-a-0123456789";
const KEY_B: &str = "key-for-team-b-0123456789";

/// A valid two-step workflow: a calculator call, then an LLM step that uses its result.
fn two_step(description: &str) -> Value {
    json!({
        "description": description,
        "version": "1.0",
        "steps": [
            {
                "id": "add",
                "kind": "tool",
                "input": { "tool": "math.calculate", "arguments": { "expression": "1 + 2" } }
            },
            {
                "id": "explain",
                "kind": "llm",
                "input": { "prompt": "Explain the result {{ steps.add.output }}" },
                "depends_on": ["add"]
            }
        ]
    })
}

fn with_keys(c: &mut orca::config::Config) {
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
}

async fn put(app: &TestApp, key: Option<&str>, name: &str, body: &Value) -> (u16, Value) {
    let mut req = app
        .client
        .put(app.url(&format!("/v1/workflows/{name}")))
        .json(body);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().await.expect("PUT workflow");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn send(
    app: &TestApp,
    method: reqwest::Method,
    key: Option<&str>,
    path: &str,
) -> (u16, Value) {
    let mut req = app.client.request(method, app.url(path));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn pointers(problem: &Value) -> Vec<String> {
    problem["errors"]
        .as_array()
        .map(|errors| {
            errors
                .iter()
                .filter_map(|e| e["pointer"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

// ---- store ------------------------------------------------------------------------------

async fn temp_store(dir: &tempfile::TempDir) -> Store {
    let url = crate::support::db::database_url(dir.path());
    Store::connect(&url, 2).await.expect("store connects")
}

#[tokio::test]
async fn the_store_keeps_plans_by_version_and_numbers_checkpoints_per_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(&dir).await;
    let (run, other) = (RunId::new(), RunId::new());

    store
        .insert_plan(run, 2, "step_failed", &json!({ "v": 2 }))
        .await
        .unwrap();
    store
        .insert_plan(run, 1, "initial", &json!({ "v": 1 }))
        .await
        .unwrap();
    let plans = store.list_plans(run).await.unwrap();
    let got: Vec<(u32, &str, &Value)> = plans
        .iter()
        .map(|p| (p.version, p.reason.as_str(), &*p.plan))
        .collect();
    assert_eq!(
        got,
        [
            (1, "initial", &json!({ "v": 1 })),
            (2, "step_failed", &json!({ "v": 2 }))
        ]
    );
    assert!(store.list_plans(other).await.unwrap().is_empty());
    // A plan version is written once.
    assert!(
        store
            .insert_plan(run, 1, "again", &json!({}))
            .await
            .is_err()
    );

    assert_eq!(store.latest_checkpoint(run).await.unwrap(), None);
    for (i, want) in [1u64, 2, 3].into_iter().enumerate() {
        let id = store
            .insert_checkpoint(run, 1, &json!({ "done": i }))
            .await
            .unwrap();
        assert_eq!(id, want);
    }
    // Numbering is per run.
    assert_eq!(
        store.insert_checkpoint(other, 1, &json!({})).await.unwrap(),
        1
    );
    let all = store.list_checkpoints(run).await.unwrap();
    assert_eq!(all.iter().map(|c| c.id).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(all[2].state, json!({ "done": 2 }));
    let latest = store.latest_checkpoint(run).await.unwrap().expect("latest");
    assert_eq!((latest.id, latest.plan_version), (3, 1));
}

#[tokio::test]
async fn concurrent_checkpoints_get_distinct_ids() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(&dir).await;
    let run = RunId::new();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..10 {
        let store = store.clone();
        tasks.spawn(async move { store.insert_checkpoint(run, 1, &json!(i)).await.unwrap() });
    }
    let mut ids = tasks.join_all().await;
    ids.sort_unstable();
    assert_eq!(ids, (1..=10).collect::<Vec<u64>>());
}

#[tokio::test]
async fn concurrent_replan_requests_get_distinct_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(&dir).await;
    let run = RunId::new();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..10 {
        let store = store.clone();
        let message = format!("note {i}");
        tasks.spawn(async move {
            store
                .save_replan_request(run, &message, None)
                .await
                .unwrap()
        });
    }
    let mut seqs = tasks.join_all().await;
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=10).collect::<Vec<u64>>());
    let stored = store.replan_requests_after(run, 0).await.unwrap();
    let mut messages: Vec<String> = stored.into_iter().map(|r| r.message).collect();
    messages.sort();
    assert_eq!(
        messages,
        (0..10).map(|i| format!("note {i}")).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn the_store_scopes_workflows_by_tenant_with_shared_ones_underneath() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(&dir).await;
    let (a, b) = (Tenant("a".into()), Tenant("b".into()));

    store
        .put_shared_workflow("common", &json!({ "from": "dir" }))
        .await
        .unwrap();
    let put = store.put_workflow(&a, "mine", &json!({ "v": 1 })).await;
    let put = put.unwrap();
    assert!(put.created && put.changed && put.version == 1, "{put:?}");
    let first = store.get_workflow(&a, "mine").await.unwrap().unwrap();
    let put = store.put_workflow(&a, "mine", &json!({ "v": 2 })).await;
    let put = put.unwrap();
    assert!(!put.created && put.changed && put.version == 2, "{put:?}");
    let again = store.put_workflow(&a, "mine", &json!({ "v": 2 })).await;
    let again = again.unwrap();
    assert!(
        !again.changed && again.version == 2,
        "an equal put stores no version: {again:?}"
    );
    let second = store.get_workflow(&a, "mine").await.unwrap().unwrap();
    assert_eq!(second.definition, json!({ "v": 2 }));
    assert_eq!(
        second.created_at, first.created_at,
        "a replacement keeps created_at"
    );
    assert!(second.updated_at >= first.updated_at);

    // b sees only the shared one; a sees both, by name.
    assert_eq!(store.get_workflow(&b, "mine").await.unwrap(), None);
    let names = |list: Vec<orca::store::WorkflowRecord>| {
        list.into_iter()
            .map(|w| (w.name, w.shared))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(store.list_workflows(&a).await.unwrap()),
        [("common".to_owned(), true), ("mine".to_owned(), false)]
    );
    assert_eq!(
        names(store.list_workflows(&b).await.unwrap()),
        [("common".to_owned(), true)]
    );

    // A tenant's own workflow shadows the shared one of the same name, for that tenant only.
    let put = store
        .put_workflow(&b, "common", &json!({ "from": "b" }))
        .await;
    assert!(put.unwrap().created);
    let own = store.get_workflow(&b, "common").await.unwrap().unwrap();
    assert_eq!(
        (own.shared, own.definition),
        (false, json!({ "from": "b" }))
    );
    assert_eq!(
        names(store.list_workflows(&b).await.unwrap()),
        [("common".to_owned(), false)]
    );
    assert!(
        store
            .get_workflow(&a, "common")
            .await
            .unwrap()
            .unwrap()
            .shared
    );

    // Deleting touches only the tenant's own rows; the shared one shows through again.
    assert!(!store.delete_workflow(&a, "common").await.unwrap());
    assert!(store.delete_workflow(&b, "common").await.unwrap());
    assert!(
        store
            .get_workflow(&b, "common")
            .await
            .unwrap()
            .unwrap()
            .shared
    );
    assert!(!store.delete_workflow(&b, "mine").await.unwrap());

    // Syncing the directory's set drops shared workflows no longer there.
    store
        .sync_shared_workflows(&[("fresh".to_owned(), json!({}))])
        .await
        .unwrap();
    assert_eq!(store.get_workflow(&a, "common").await.unwrap(), None);
    assert_eq!(
        names(store.list_workflows(&b).await.unwrap()),
        [("fresh".to_owned(), true)]
    );
}

// ---- /v1/workflows ----------------------------------------------------------------------

#[tokio::test]
async fn a_workflow_is_created_replaced_read_listed_and_deleted() {
    let app = spawn_app(|_| {}).await;

    let (status, created) = put(&app, None, "calc", &two_step("adds")).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["name"], "calc");
    assert_eq!(created["description"], "adds");
    assert_eq!(created["version"], "1.0");
    assert_eq!(created["shared"], false);
    assert_eq!(
        created["definition"]["name"], "calc",
        "the path name is filled in"
    );
    assert_eq!(created["definition"]["steps"][0]["id"], "add");

    // The same name in the body is fine; a replacement answers 200 and keeps created_at.
    let mut body = two_step("adds, again");
    body["name"] = json!("calc");
    let (status, replaced) = put(&app, None, "calc", &body).await;
    assert_eq!(status, 200, "{replaced}");
    assert_eq!(replaced["description"], "adds, again");
    assert_eq!(replaced["created_at"], created["created_at"]);
    assert_eq!(
        (&created["latest_version"], &replaced["latest_version"]),
        (&json!(1), &json!(2)),
        "each change is a version"
    );

    let (status, got) = app.get_json("/v1/workflows/calc").await;
    assert_eq!(status, 200);
    assert_eq!(got, replaced);

    let (status, list) = app.get_json("/v1/workflows").await;
    assert_eq!(status, 200);
    assert_eq!(
        list,
        json!([{
            "name": "calc",
            "description": "adds, again",
            "version": "1.0",
            "shared": false,
            "latest_version": 2,
            "created_at": created["created_at"],
            "updated_at": replaced["updated_at"],
        }])
    );

    let (status, _) = send(&app, reqwest::Method::DELETE, None, "/v1/workflows/calc").await;
    assert_eq!(status, 204);
    let (status, problem) = app.get_json("/v1/workflows/calc").await;
    assert_eq!((status, problem["code"].as_str()), (404, Some("not_found")));
    let (status, _) = send(&app, reqwest::Method::DELETE, None, "/v1/workflows/calc").await;
    assert_eq!(status, 404);
    assert_eq!(app.get_json("/v1/workflows").await.1, json!([]));
}

#[tokio::test]
async fn invalid_workflows_are_422_with_a_pointer_to_each_problem() {
    let app = spawn_app(|_| {}).await;
    let tool = |id: &str, deps: Value| {
        json!({
            "id": id, "kind": "tool", "depends_on": deps,
            "input": { "tool": "clock.now", "arguments": {} }
        })
    };
    let cycle = json!({ "steps": [tool("a", json!(["b"])), tool("b", json!(["a"]))] });
    let duplicate = json!({ "steps": [tool("a", json!([])), tool("a", json!([]))] });
    let unknown_tool = json!({ "steps": [{
        "id": "a", "kind": "tool", "input": { "tool": "no.such.tool", "arguments": {} }
    }]});
    let bad_arguments = json!({ "steps": [{
        "id": "add", "kind": "tool",
        "input": { "tool": "math.calculate", "arguments": { "expression": 5 } }
    }]});
    let no_steps = json!({ "description": "nothing to do" });
    let cases: [(&str, &Value, &str); 5] = [
        ("cycle", &cycle, "/steps/0/depends_on/0"),
        ("duplicate id", &duplicate, "/steps/1/id"),
        ("unknown tool", &unknown_tool, "/steps/0/input/tool"),
        (
            "bad arguments",
            &bad_arguments,
            "/steps/0/input/arguments/expression",
        ),
        ("missing steps", &no_steps, "/steps"),
    ];
    for (what, body, pointer) in cases {
        let (status, problem) = put(&app, None, "broken", body).await;
        assert_eq!(status, 422, "{what}: {problem}");
        assert_eq!(problem["code"], "validation_failed", "{what}");
        let got = pointers(&problem);
        assert!(
            got.iter().any(|p| p == pointer),
            "{what}: wanted {pointer} in {got:?}"
        );
    }
    // Nothing invalid was stored.
    assert_eq!(app.get_json("/v1/workflows/broken").await.0, 404);

    // The body's name must match the path's.
    let mut body = two_step("x");
    body["name"] = json!("other");
    let (status, problem) = put(&app, None, "calc", &body).await;
    assert_eq!(status, 422);
    assert_eq!(pointers(&problem), ["/name"]);

    // A name that cannot be a workflow name.
    let (status, problem) = put(&app, None, "bad%20name", &two_step("x")).await;
    assert_eq!(status, 422);
    assert_eq!(pointers(&problem), ["/name"]);

    // Malformed JSON is 400, never a 500.
    let resp = app
        .client
        .put(app.url("/v1/workflows/calc"))
        .header("content-type", "application/json")
        .body("{\"steps\": [")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
}

#[tokio::test]
async fn tenants_cannot_see_or_delete_each_others_workflows() {
    let app = spawn_app(with_keys).await;
    let (status, _) = put(&app, Some(KEY_A), "calc", &two_step("a's")).await;
    assert_eq!(status, 201);

    let get = |key| send(&app, reqwest::Method::GET, Some(key), "/v1/workflows/calc");
    assert_eq!(get(KEY_A).await.0, 200);
    assert_eq!(get(KEY_B).await.0, 404);
    assert_eq!(
        send(&app, reqwest::Method::GET, Some(KEY_B), "/v1/workflows")
            .await
            .1,
        json!([])
    );
    assert_eq!(
        send(
            &app,
            reqwest::Method::DELETE,
            Some(KEY_B),
            "/v1/workflows/calc"
        )
        .await
        .0,
        404
    );
    // b may use the same name for its own workflow without touching a's.
    let (status, _) = put(&app, Some(KEY_B), "calc", &two_step("b's")).await;
    assert_eq!(status, 201);
    assert_eq!(get(KEY_A).await.1["description"], "a's");
    assert_eq!(get(KEY_B).await.1["description"], "b's");
    // Without a key: 401.
    assert_eq!(put(&app, None, "calc", &two_step("x")).await.0, 401);
}

// ---- the workflows directory --------------------------------------------------------------

#[tokio::test]
async fn workflow_files_are_loaded_at_start_as_shared() {
    let files = tempfile::tempdir().unwrap();
    std::fs::write(
        files.path().join("daily-sum.json"),
        serde_json::to_vec_pretty(&two_step("from a file")).unwrap(),
    )
    .unwrap();
    std::fs::write(files.path().join("README.md"), "not a workflow").unwrap();
    let dir = files.path().to_owned();
    let app = spawn_app(move |c| {
        with_keys(c);
        c.workflows.dir = dir;
    })
    .await;

    for key in [KEY_A, KEY_B] {
        let (status, list) = send(&app, reqwest::Method::GET, Some(key), "/v1/workflows").await;
        assert_eq!(status, 200);
        let list = list.as_array().expect("array").clone();
        assert_eq!(list.len(), 1, "{list:?}");
        assert_eq!(list[0]["name"], "daily-sum", "named after the file");
        assert_eq!(list[0]["shared"], true);
        assert_eq!(list[0]["description"], "from a file");
    }
    let (status, got) = send(
        &app,
        reqwest::Method::GET,
        Some(KEY_A),
        "/v1/workflows/daily-sum",
    )
    .await;
    assert_eq!((status, got["shared"].as_bool()), (200, Some(true)));

    // Shared workflows are not the tenant's to delete; its own copy shadows it, for it only.
    let (status, problem) = send(
        &app,
        reqwest::Method::DELETE,
        Some(KEY_A),
        "/v1/workflows/daily-sum",
    )
    .await;
    assert_eq!((status, problem["code"].as_str()), (409, Some("conflict")));
    assert_eq!(
        put(&app, Some(KEY_A), "daily-sum", &two_step("mine"))
            .await
            .0,
        201
    );
    let own = send(
        &app,
        reqwest::Method::GET,
        Some(KEY_A),
        "/v1/workflows/daily-sum",
    )
    .await;
    assert_eq!(
        (own.1["shared"].as_bool(), own.1["description"].as_str()),
        (Some(false), Some("mine"))
    );
    let theirs = send(
        &app,
        reqwest::Method::GET,
        Some(KEY_B),
        "/v1/workflows/daily-sum",
    )
    .await;
    assert_eq!(theirs.1["shared"], true);
}

#[tokio::test]
async fn an_invalid_workflow_file_stops_the_start_naming_file_and_problem() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(workspace(&root)).unwrap();
    let files = root.path().join("workflows");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(
        files.join("good.json"),
        serde_json::to_vec(&two_step("fine")).unwrap(),
    )
    .unwrap();
    let broken = json!({ "steps": [{
        "id": "add", "kind": "tool",
        "input": { "tool": "math.calculate", "arguments": { "expression": 5 } }
    }]});
    std::fs::write(
        files.join("broken.json"),
        serde_json::to_vec(&broken).unwrap(),
    )
    .unwrap();

    let mut config = test_config(&root);
    config.workflows.dir = files;
    let err = match orca::app::App::build(config).await {
        Ok(_) => panic!("an invalid workflow file must stop the start"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("workflows.dir"), "{err}");
    assert!(err.contains("broken.json"), "{err}");
    assert!(!err.contains("good.json"), "{err}");
    assert!(err.contains("/steps/0/input/arguments/expression"), "{err}");

    // A directory that does not exist is an error naming the setting too.
    let mut config = test_config(&root);
    config.workflows.dir = root.path().join("missing");
    let err = match orca::app::App::build(config).await {
        Ok(_) => panic!("a missing workflows directory must stop the start"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        err.contains("workflows.dir") && err.contains("missing"),
        "{err}"
    );
}

// ---- /v1/runs/{id}/plans and /checkpoints -----------------------------------------------

#[tokio::test]
async fn plans_and_checkpoints_are_404_for_unknown_runs_and_a_simple_run_keeps_only_its_answer() {
    let app = spawn_app(with_keys).await;
    for path in ["plans", "checkpoints"] {
        for id in ["not-a-uuid", "0190a0a0-0000-7000-8000-000000000000"] {
            let (status, problem) = send(
                &app,
                reqwest::Method::GET,
                Some(KEY_A),
                &format!("/v1/runs/{id}/{path}"),
            )
            .await;
            assert_eq!(
                (status, problem["code"].as_str()),
                (404, Some("not_found")),
                "{id}/{path}"
            );
        }
    }
    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .bearer_auth(KEY_A)
        .json(&json!({ "input": "hello" }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let run: Value = resp.json().await.unwrap();
    let id = run["id"].as_str().unwrap();
    let events = app.events_with_key(id, KEY_A).await.read_to_final().await;
    let answer = &final_data(&events)["output"];
    // A simple run has no plan; its one checkpoint keeps the model's answer, nothing else.
    let url = format!("/v1/runs/{id}/plans");
    let plans = send(&app, reqwest::Method::GET, Some(KEY_A), &url).await;
    assert_eq!(plans, (200, json!([])));
    let url = format!("/v1/runs/{id}/checkpoints");
    let (status, checkpoints) = send(&app, reqwest::Method::GET, Some(KEY_A), &url).await;
    assert_eq!(status, 200);
    let kept = checkpoints.as_array().unwrap();
    assert_eq!(kept.len(), 1, "{checkpoints}");
    assert_eq!(kept[0]["state"]["kind"], "conversation");
    assert_eq!(&kept[0]["state"]["answer"], answer);
    assert_eq!(kept[0]["state"]["messages"], json!([]));
    for path in ["plans", "checkpoints"] {
        let url = format!("/v1/runs/{id}/{path}");
        // Another tenant's run is as unknown as a missing one.
        assert_eq!(
            send(&app, reqwest::Method::GET, Some(KEY_B), &url).await.0,
            404
        );
    }
}
