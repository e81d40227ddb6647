//! Schedules in an applied folder (issue 45): `schedules/NAME.json` files applied with the
//! definitions (a schedule may run a workflow of its own bundle, nested ones included), fired
//! like one made by `POST /v1/schedules`; unchanged ones keep their ticks, changed ones show
//! a diff, prune spares unnamed schedules; bad files refuse the whole bundle; export → apply
//! changes nothing; a prune may not leave a kept definition (or schedule) naming a pruned
//! one; the CLI carries the folder both ways; and two PostgreSQL replicas fire an applied
//! schedule once per tick and stop when a prune through the other removes it.

use serde_json::{Value, json};

use crate::support::{TestApp, poll_json, spawn_app};

fn file(path: &str, content: &Value) -> Value {
    json!({ "path": path, "content": serde_json::to_string_pretty(content).unwrap() })
}

/// A workflow computing `6 * 7`.
fn calc() -> Value {
    json!({ "steps": [ { "id": "a", "kind": "tool", "input": { "tool": "math.calculate",
        "arguments": { "expression": "6 * 7" } } } ] })
}

/// A workflow running workflow `inner` as a step.
fn calls(inner: &str) -> Value {
    json!({ "steps": [ { "id": "w", "kind": "workflow", "input": { "workflow": inner } } ] })
}

fn runs(workflow: &str) -> Value {
    json!({ "input": "x", "orchestration": "fixed", "workflow": workflow })
}

/// Each change as `action kind name`.
fn actions(answer: &Value) -> Vec<String> {
    (answer["changes"].as_array().unwrap().iter())
        .map(|c| format!("{} {} {}", c["action"], c["kind"], c["name"]).replace('"', ""))
        .collect()
}

/// The tenant's schedules, oldest first.
async fn schedules(app: &TestApp) -> Vec<Value> {
    let (status, list) = app.get_json("/v1/schedules").await;
    assert_eq!(status, 200, "{list}");
    list["schedules"].as_array().unwrap().clone()
}

async fn named(app: &TestApp, name: &str) -> Value {
    (schedules(app).await.into_iter())
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no schedule `{name}`"))
}

#[tokio::test]
async fn an_applied_schedule_runs_a_nested_workflow_of_its_own_bundle() {
    let app = spawn_app(|_| {}).await;
    // `outer` runs `calc` as a step; neither is stored before the apply.
    let files = json!([
        file("workflows/calc.json", &calc()),
        file("workflows/outer.json", &calls("calc")),
        file(
            "schedules/every-second.yaml",
            &json!({ "interval_ms": 1000, "run": runs("outer") })
        ),
    ]);
    let (status, applied) = app.post_json("/v1/apply", &json!({ "files": files })).await;
    assert_eq!(status, 200, "{applied}");
    assert_eq!(
        actions(&applied),
        [
            "created workflow calc",
            "created workflow outer",
            "created schedule every-second"
        ]
    );
    let line = &applied["changes"][2];
    assert_eq!(line["path"], "schedules/every-second.yaml");
    assert_eq!(line["version"], Value::Null, "schedules keep no versions");

    let id = named(&app, "every-second").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let url = app.url(&format!("/v1/schedules/{id}"));
    let fired = poll_json(&app.client, &url, |s| s["fire_count"].as_u64() >= Some(1)).await;
    let run_id = fired["last_run_id"].as_str().unwrap();
    let run = poll_json(&app.client, &app.url(&format!("/v1/runs/{run_id}")), |r| {
        r["finished_at"].is_string()
    })
    .await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["schedule"]["id"], id.as_str());
    assert_eq!(run["output"]["result"], 42, "{run}");
}

#[tokio::test]
async fn reapplying_keeps_the_ticks_a_changed_cron_is_diffed_and_prune_spares_unnamed_ones() {
    let app = spawn_app(|_| {}).await;
    let nightly = |cron: &str| {
        file(
            "schedules/nightly.json",
            &json!({ "cron": cron, "timezone": "Europe/Paris", "run": runs("calc") }),
        )
    };
    let files = json!([file("workflows/calc.json", &calc()), nightly("30 2 * * *")]);
    let (status, applied) = app.post_json("/v1/apply", &json!({ "files": files })).await;
    assert_eq!(status, 200, "{applied}");
    let before = named(&app, "nightly").await;

    let (status, again) = app.post_json("/v1/apply", &json!({ "files": files })).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        actions(&again),
        ["unchanged workflow calc", "unchanged schedule nightly"]
    );
    let after = named(&app, "nightly").await;
    assert_eq!(after["id"], before["id"]);
    assert_eq!(after["next_fire_at"], before["next_fire_at"]);
    assert_eq!(after["updated_at"], before["updated_at"], "not written");

    let files = json!([file("workflows/calc.json", &calc()), nightly("0 3 * * *")]);
    let (status, changed) = app.post_json("/v1/apply", &json!({ "files": files })).await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(
        actions(&changed),
        ["unchanged workflow calc", "changed schedule nightly"]
    );
    assert_eq!(
        changed["changes"][1]["changes"],
        json!([{ "op": "replace", "path": "/cron", "value": "0 3 * * *" }])
    );
    let retimed = named(&app, "nightly").await;
    assert_eq!(retimed["id"], before["id"], "the same schedule, changed");
    let next = retimed["next_fire_at"].as_str().unwrap();
    // 03:00 in Paris is 02:00 UTC in winter, 01:00 UTC in summer.
    assert!(
        next.ends_with("T02:00:00Z") || next.ends_with("T01:00:00Z"),
        "{next}"
    );

    // Made through the API: one unnamed, one named like a file, one named otherwise.
    for name in [Value::Null, json!("adhoc"), json!("nightly report")] {
        let body = json!({ "name": name, "interval_ms": 3_600_000, "run": runs("calc") });
        let (status, made) = app.post_json("/v1/schedules", &body).await;
        assert_eq!(status, 201, "{made}");
    }
    let only = json!([file("workflows/calc.json", &calc())]);
    let body = json!({ "files": only, "prune": true, "dry_run": true });
    let (status, plan) = app.post_json("/v1/apply", &body).await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(
        actions(&plan),
        [
            "unchanged workflow calc",
            "deleted schedule adhoc",
            "deleted schedule nightly"
        ]
    );
    assert_eq!(schedules(&app).await.len(), 4, "a dry run deletes nothing");
    let (status, pruned) = app
        .post_json("/v1/apply", &json!({ "files": only, "prune": true }))
        .await;
    assert_eq!(status, 200, "{pruned}");
    let left: Vec<Value> = (schedules(&app).await.iter())
        .map(|s| s["name"].clone())
        .collect();
    assert_eq!(left, [Value::Null, json!("nightly report")]);
}

#[tokio::test]
async fn bad_schedule_files_refuse_the_whole_bundle_each_named() {
    let app = spawn_app(|_| {}).await;
    // Two schedules of the tenant share a name: a file of that name cannot tell which.
    for _ in 0..2 {
        let body = json!({ "name": "twin", "interval_ms": 3_600_000, "run": { "input": "x" } });
        let (status, made) = app.post_json("/v1/schedules", &body).await;
        assert_eq!(status, 201, "{made}");
    }
    let files = json!([
        file("workflows/calc.json", &calc()),
        file(
            "schedules/a.json",
            &json!({ "cron": "61 * * * *", "run": runs("calc") })
        ),
        file(
            "schedules/b.json",
            &json!({ "interval_ms": 1000, "run": runs("nope") })
        ),
        file(
            "schedules/c.json",
            &json!({ "name": "other", "interval_ms": 1000, "run": runs("calc") })
        ),
        file(
            "schedules/d.json",
            &json!({ "interval_ms": 1000, "run": runs("calc"), "every": 3 })
        ),
        file(
            "schedules/e.json",
            &json!({ "cron": "* * * * *", "interval_ms": 1000, "run": runs("calc") })
        ),
        file(
            "schedules/f.json",
            &json!({ "interval_ms": 1000, "run": runs("calc") })
        ),
        file(
            "schedules/f.yaml",
            &json!({ "interval_ms": 1000, "run": runs("calc") })
        ),
        file(
            "schedules/twin.json",
            &json!({ "interval_ms": 1000, "run": runs("calc") })
        ),
        file(
            "schedules/g.json",
            &json!({ "interval_ms": 1000, "run": { "input": "x", "orchestration": "fixed",
                "workflow": "calc", "model": "no-such-model" } })
        ),
        file(
            "schedules/Bad Name.json",
            &json!({ "interval_ms": 1000, "run": runs("calc") })
        ),
    ]);
    let (status, problem) = app.post_json("/v1/apply", &json!({ "files": files })).await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["code"], "validation_failed");
    let errors = problem["errors"].as_array().unwrap();
    let found = |pointer: &str, path: &str, text: &str| {
        errors.iter().any(|e| {
            let message = e["message"].as_str().unwrap();
            e["pointer"] == pointer
                && message.starts_with(&format!("{path}: "))
                && message.contains(text)
        })
    };
    assert!(
        found("/files/1/content/cron", "schedules/a.json", ""),
        "{problem}"
    );
    assert!(
        found("/files/2/content/run/workflow", "schedules/b.json", "nope"),
        "{problem}"
    );
    assert!(
        found("/files/3/content/name", "schedules/c.json", "other"),
        "{problem}"
    );
    let unknown = errors.iter().any(|e| {
        e["pointer"]
            .as_str()
            .unwrap()
            .starts_with("/files/4/content")
            && e["message"]
                .as_str()
                .unwrap()
                .starts_with("schedules/d.json: ")
            && e.to_string().contains("every")
    });
    assert!(unknown, "{problem}");
    assert!(
        found(
            "/files/5/content/interval_ms",
            "schedules/e.json",
            "not both"
        ),
        "{problem}"
    );
    assert!(
        found("/files/7/path", "schedules/f.yaml", "twice"),
        "{problem}"
    );
    assert!(
        found(
            "/files/8/content",
            "schedules/twin.json",
            "2 schedules named `twin`"
        ),
        "{problem}"
    );
    assert!(
        found(
            "/files/9/content/run/model",
            "schedules/g.json",
            "no-such-model"
        ),
        "{problem}"
    );
    assert!(
        found("/files/10/path", "schedules/Bad Name.json", "names are"),
        "{problem}"
    );
    assert!(
        !errors
            .iter()
            .any(|e| e["pointer"].as_str().unwrap().starts_with("/files/0"))
    );

    let (_, workflows) = app.get_json("/v1/workflows").await;
    assert_eq!(workflows, json!([]), "no definition applied");
    assert_eq!(schedules(&app).await.len(), 2, "no schedule applied");
}

#[tokio::test]
async fn export_then_apply_is_a_no_op_schedules_included() {
    let app = spawn_app(|_| {}).await;
    let files = json!([
        file("workflows/calc.json", &calc()),
        file(
            "schedules/nightly.yaml",
            &json!({ "name": "nightly", "cron": "30 2 * * *", "run": runs("calc"),
                "missed": "catch_up_one" })
        ),
        file(
            "schedules/hourly.json",
            &json!({ "interval_ms": 3_600_000, "run": runs("calc"), "enabled": false })
        ),
    ]);
    let (status, applied) = app.post_json("/v1/apply", &json!({ "files": files })).await;
    assert_eq!(status, 200, "{applied}");
    let before = schedules(&app).await;

    let (status, exported) = app.get_json("/v1/export").await;
    assert_eq!(status, 200, "{exported}");
    let files = exported["files"].as_array().unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(
        paths,
        [
            "workflows/calc.json",
            "schedules/hourly.json",
            "schedules/nightly.json"
        ]
    );
    let nightly: Value = serde_json::from_str(files[2]["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        nightly,
        json!({ "cron": "30 2 * * *", "timezone": "UTC", "run": runs("calc"), "enabled": true,
            "missed": "catch_up_one" }),
        "the declarative members only"
    );

    let (status, again) = app
        .post_json("/v1/apply", &json!({ "files": files, "prune": true }))
        .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        actions(&again),
        [
            "unchanged workflow calc",
            "unchanged schedule hourly",
            "unchanged schedule nightly"
        ]
    );
    assert_eq!(schedules(&app).await, before, "nothing written");
}

#[tokio::test]
async fn a_prune_may_not_leave_a_kept_definition_or_schedule_naming_a_pruned_one() {
    let app = spawn_app(|_| {}).await;
    let agent_step = json!({ "steps": [ { "id": "a", "kind": "agent",
        "input": { "agent": "helper", "prompt": "hi" } } ] });
    let files = json!([
        file(
            "agents/helper.json",
            &json!({ "instructions": "Be brief." })
        ),
        file("workflows/asks.json", &agent_step),
        file("workflows/calc.json", &calc()),
        file("workflows/outer.json", &calls("calc")),
        file(
            "schedules/daily.json",
            &json!({ "cron": "0 6 * * *", "run": runs("calc") })
        ),
    ]);
    let (status, applied) = app.post_json("/v1/apply", &json!({ "files": files })).await;
    assert_eq!(status, 200, "{applied}");
    let all = files.as_array().unwrap();

    // Without the agent: the workflow naming it is refused.
    let kept = json!([all[1], all[2], all[3], all[4]]);
    let (status, refused) = app
        .post_json("/v1/apply", &json!({ "files": kept, "prune": true }))
        .await;
    assert_eq!(status, 422, "{refused}");
    let text = refused["errors"].to_string();
    assert!(
        text.contains("workflows/asks.json") && text.contains("helper"),
        "{text}"
    );

    // Without `calc`: the nested workflow naming it, and the schedule running it.
    let kept = json!([all[0], all[1], all[3], all[4]]);
    let (status, refused) = app
        .post_json("/v1/apply", &json!({ "files": kept, "prune": true }))
        .await;
    assert_eq!(status, 422, "{refused}");
    let errors = refused["errors"].as_array().unwrap();
    let pointers: Vec<&str> = errors
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    assert!(
        pointers.iter().any(|p| p.starts_with("/files/2/content")),
        "{refused}"
    );
    assert!(
        pointers.contains(&"/files/3/content/run/workflow"),
        "{refused}"
    );

    // Nothing was removed; without prune the same files apply (nothing is removed then).
    let (status, _) = app.get_json("/v1/agents/helper").await;
    assert_eq!(status, 200);
    let (status, _) = app.get_json("/v1/workflows/calc").await;
    assert_eq!(status, 200);
    let (status, kept) = app.post_json("/v1/apply", &json!({ "files": kept })).await;
    assert_eq!(status, 200, "{kept}");
}

#[tokio::test]
async fn the_cli_applies_and_exports_a_schedules_folder() {
    let app = spawn_app(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap().to_owned();
    for folder in ["workflows", "schedules"] {
        std::fs::create_dir_all(dir.path().join(folder)).unwrap();
    }
    let write = |path: &str, text: &str| std::fs::write(dir.path().join(path), text).unwrap();
    write("workflows/calc.json", &calc().to_string());
    write(
        "schedules/hourly.yaml",
        "cron: \"0 * * * *\"\nrun:\n  input: x\n  orchestration: fixed\n  workflow: calc\n",
    );
    let out = app.orca(&["apply", &root], "").await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("schedule hourly"), "{text}");
    assert_eq!(named(&app, "hourly").await["cron"], "0 * * * *");

    let exported = tempfile::tempdir().unwrap();
    let target = exported.path().to_str().unwrap();
    assert!(app.orca(&["export", target], "").await.status.success());
    let written = std::fs::read_to_string(exported.path().join("schedules/hourly.json")).unwrap();
    let written: Value = serde_json::from_str(&written).unwrap();
    assert_eq!(written["run"], runs("calc"));
    let out = app.orca(&["apply", target, "--prune", "--json"], "").await;
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        actions(&answer),
        ["unchanged workflow calc", "unchanged schedule hourly"]
    );
}

#[tokio::test]
async fn an_applied_schedule_fires_once_per_tick_across_two_replicas() {
    use crate::support::TwoReplicas;
    let replicas = TwoReplicas::start(&[("ORCA_LLM__PROVIDER", "offline")]).await;
    let (a, b) = (&replicas.a, &replicas.b);
    let post = |server: &crate::support::Server, path: &str, body: Value| {
        let request = server.client.post(server.url(path)).json(&body);
        async move {
            let resp = request.send().await.unwrap();
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
        }
    };
    let get = |server: &crate::support::Server, path: &str| {
        let request = server.client.get(server.url(path));
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    // Applied through one replica, every second; both look for due ticks.
    let files = json!([
        file("workflows/calc.json", &calc()),
        file(
            "schedules/each-second.json",
            &json!({ "cron": "* * * * * *", "run": runs("calc") })
        ),
    ]);
    let (status, applied) = post(a, "/v1/apply", json!({ "files": files })).await;
    assert_eq!(status, 200, "{applied}");
    let list = get(b, "/v1/schedules").await;
    let id = list["schedules"][0]["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/schedules/{id}");
    poll_json(&b.client, &b.url(&path), |s| {
        s["fire_count"].as_u64() >= Some(3)
    })
    .await;

    // Pruned through the other: it stops, and every tick it fired started one run.
    let only = json!([file("workflows/calc.json", &calc())]);
    let (status, pruned) = post(b, "/v1/apply", json!({ "files": only, "prune": true })).await;
    assert_eq!(status, 200, "{pruned}");
    let resp = a.client.get(a.url(&path)).send().await.unwrap();
    assert_eq!(resp.status(), 404);
    let runs = get(a, "/v1/runs?limit=200").await;
    let mut ticks: Vec<&str> = (runs["runs"].as_array().unwrap().iter())
        .map(|r| r["schedule"]["fire_at"].as_str().unwrap())
        .collect();
    let all = ticks.len();
    ticks.sort();
    ticks.dedup();
    assert!(all >= 3, "{runs}");
    assert_eq!(ticks.len(), all, "one run per tick: {runs}");
}
