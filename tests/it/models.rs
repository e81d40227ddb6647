//! Models and providers by alias: two scripted OpenAI-compatible servers as two named
//! providers; alias settings on the wire, keys from the environment, fallbacks, and a run's own
//! `instructions`.

use orca::config::{ApiKey, Config, Overrides, ProviderChoice, Secret};
use serde_json::{Value, json};

use crate::support::app::{assert_well_formed, final_data, spawn_app, spawn_app_in, use_scripted};
use crate::support::scripted_llm::{Reply, ScriptedLlm};

/// The `[llm]` section loaded the way `orca serve` loads it: from a TOML file, with `env` as
/// the environment (so each test has its own key variable and nothing touches the process's).
fn load_llm(toml: &str, env: &[(&str, &str)]) -> Result<orca::config::LlmConfig, String> {
    let file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::fs::write(file.path(), toml).unwrap();
    let mut vars: Vec<(String, String)> = vec![(
        "ORCA_CONFIG".into(),
        file.path().to_str().unwrap().to_owned(),
    )];
    vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Config::load_from(&Overrides::default(), &vars)
        .map(|c| c.llm)
        .map_err(|e| e.to_string())
}

/// Providers `primary` (keyed by `key_var`) and `secondary` (no key); aliases `fast`
/// (primary, with settings, falling back to `backup`) and `backup` (secondary).
fn two_providers(primary: &ScriptedLlm, secondary: &ScriptedLlm, key_var: &str) -> String {
    format!(
        r#"
[llm.providers.primary]
kind = "openai"
base_url = "{}"
api_key_env = "{key_var}"
max_retries = 1
retry_initial_delay_ms = 5
retry_max_delay_ms = 10
read_timeout_ms = 5000

[llm.providers.secondary]
kind = "openai"
base_url = "{}"
max_retries = 0

[llm.models.fast]
provider = "primary"
model = "m-fast"
temperature = 0.25
max_tokens = 77
fallback = "backup"

[llm.models.backup]
provider = "secondary"
model = "m-backup"
"#,
        primary.base_url(),
        secondary.base_url()
    )
}

fn configure(c: &mut Config, llm: orca::config::LlmConfig) {
    c.llm = llm;
    c.llm.provider = ProviderChoice::Auto;
    c.llm.offline_token_delay_ms = 0;
}

fn events_of(history: &[Value], kind: &str) -> Vec<Value> {
    history
        .iter()
        .filter(|e| e["kind"] == kind)
        .map(|e| e["data"].clone())
        .collect()
}

#[tokio::test]
async fn alias_settings_reach_the_wire_and_the_key_goes_to_its_own_server_only() {
    let (primary, secondary) = (ScriptedLlm::start().await, ScriptedLlm::start().await);
    let var = "ORCA_IT_MODELS_KEY_WIRE";
    let llm = load_llm(
        &two_providers(&primary, &secondary, var),
        &[(var, "sk-primary-0123456789")],
    )
    .unwrap();
    assert!(!format!("{llm:?}").contains("sk-primary-0123456789"));
    let app = spawn_app(|c| configure(c, llm)).await;
    primary.push(Reply::text("fast answer"));
    let events = app
        .stream_run(json!({ "input": "hi", "orchestration": "simple", "model": "fast" }))
        .await;
    assert_well_formed(&events, 1);
    assert_eq!(final_data(&events)["output"], "fast answer");
    let sent = primary.recorded();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body["model"], "m-fast");
    assert_eq!(sent[0].body["temperature"], 0.25);
    assert_eq!(sent[0].body["max_tokens"], 77);
    assert_eq!(
        sent[0].authorization.as_deref(),
        Some("Bearer sk-primary-0123456789")
    );
    assert_eq!(secondary.request_count(), 0);

    // The other provider is called without a key, and without settings its alias lacks.
    secondary.push(Reply::text("backup answer"));
    let events = app
        .stream_run(json!({ "input": "hi", "orchestration": "simple", "model": "backup" }))
        .await;
    assert_eq!(final_data(&events)["output"], "backup answer");
    let sent = secondary.recorded();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body["model"], "m-backup");
    assert_eq!(sent[0].authorization, None);
    assert!(
        sent[0].body.get("temperature").is_none(),
        "{}",
        sent[0].body
    );
    assert!(sent[0].body.get("max_tokens").is_none(), "{}", sent[0].body);
    assert_eq!(primary.request_count(), 1);
}

#[tokio::test]
async fn the_models_endpoint_lists_each_alias_and_where_it_goes_without_secrets() {
    let (primary, secondary) = (ScriptedLlm::start().await, ScriptedLlm::start().await);
    let var = "ORCA_IT_MODELS_KEY_LIST";
    let secret = "sk-primary-listed-0042";
    let llm = load_llm(&two_providers(&primary, &secondary, var), &[(var, secret)]).unwrap();
    let app = spawn_app(|c| {
        configure(c, llm);
        c.auth.api_keys = vec![ApiKey {
            user: None,
            key: Secret::new("models-key-0123456789"),
            tenant: "a".into(),
        }];
    })
    .await;

    // Behind the same keys as the rest of /v1.
    let anonymous = app.client.get(app.url("/v1/models")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);

    let resp = app
        .client
        .get(app.url("/v1/models"))
        .bearer_auth("models-key-0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let text = resp.text().await.unwrap();
    let models: Value = serde_json::from_str(&text).unwrap();
    // Sorted by name. `default` names the unconfigured `openai`, so the offline provider
    // answers it, and the list says so rather than what the file wished.
    assert_eq!(
        models,
        json!([
            {"name": "backup", "provider": "secondary", "model": "m-backup", "default": false},
            {"name": "default", "provider": "offline", "model": "offline", "default": true},
            {"name": "fast", "provider": "primary", "model": "m-fast", "default": false},
            {"name": "offline", "provider": "offline", "model": "offline", "default": false},
        ])
    );
    // Names only: no address, no key, no key variable.
    for leak in [
        secret,
        var,
        "127.0.0.1",
        "http",
        primary.base_url().as_str(),
    ] {
        assert!(!text.contains(leak), "{leak} in {text}");
    }
    // Every alias listed is one a run may name.
    for m in models.as_array().unwrap() {
        assert!(m["name"].is_string() && m["provider"].is_string() && m["model"].is_string());
    }
    assert_eq!(primary.request_count() + secondary.request_count(), 0);
}

#[tokio::test]
async fn a_fallback_alias_answers_when_the_primary_fails_after_its_retries() {
    let (primary, secondary) = (ScriptedLlm::start().await, ScriptedLlm::start().await);
    let var = "ORCA_IT_MODELS_KEY_FALLBACK";
    let llm = load_llm(
        &two_providers(&primary, &secondary, var),
        &[(var, "sk-primary-fallback-01")],
    )
    .unwrap();
    let app = spawn_app(|c| configure(c, llm)).await;
    primary.push(Reply::status(500)).push(Reply::status(500));
    secondary.push(Reply::text("the backup answered"));
    let events = app
        .stream_run(json!({ "input": "hi", "orchestration": "simple", "model": "fast" }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(fin["output"], "the backup answered");
    // One request and its one retry went to the primary, then one to the backup.
    assert_eq!(primary.request_count(), 2);
    assert_eq!(secondary.request_count(), 1);
    assert_eq!(secondary.recorded()[0].authorization, None);

    let id = events[0].json()["run_id"].as_str().unwrap().to_owned();
    let history = app.history(&id).await;
    let errors = events_of(&history, "error");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["code"], "llm_error");
    assert_eq!(errors[0]["step_id"], "llm-1");
    let message = errors[0]["message"].as_str().unwrap();
    assert!(
        message.contains("`fast`") && message.contains("`backup`"),
        "{message}"
    );
    assert!(!history.iter().any(|e| e.to_string().contains("sk-primary")));
    let attempts = app.attempts(&id, "llm-1").await;
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["status"], "completed");
    assert_eq!(attempts[0]["input"]["model"], "fast");
    assert_eq!(attempts[0]["input"]["answered_by"], "backup");
}

#[tokio::test]
async fn a_rejection_does_not_fall_back() {
    let (primary, secondary) = (ScriptedLlm::start().await, ScriptedLlm::start().await);
    let var = "ORCA_IT_MODELS_KEY_REJECT";
    let llm = load_llm(
        &two_providers(&primary, &secondary, var),
        &[(var, "sk-primary-reject-0001")],
    )
    .unwrap();
    let app = spawn_app(|c| configure(c, llm)).await;
    primary.push(Reply::status(400).message("bad request"));
    secondary.push(Reply::text("must not be used"));
    let events = app
        .stream_run(json!({ "input": "hi", "orchestration": "simple", "model": "fast" }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "failed", "{fin}");
    assert_eq!(fin["error"]["code"], "llm_rejected");
    assert_eq!(primary.request_count(), 1);
    assert_eq!(secondary.request_count(), 0);
    let id = events[0].json()["run_id"].as_str().unwrap().to_owned();
    let attempts = app.attempts(&id, "llm-1").await;
    assert!(attempts[0]["input"].get("answered_by").is_none());
}

#[tokio::test]
async fn a_missing_key_variable_stops_the_start_naming_the_key() {
    let (primary, secondary) = (ScriptedLlm::start().await, ScriptedLlm::start().await);
    let var = "ORCA_IT_MODELS_KEY_NEVER_SET";
    let err = load_llm(&two_providers(&primary, &secondary, var), &[]).unwrap_err();
    assert!(err.contains("llm.providers.primary.api_key_env"), "{err}");
    assert!(err.contains(var), "{err}");
}

fn system_prompt(request: &Value) -> String {
    let first = &request["messages"][0];
    assert_eq!(first["role"], "system", "{request}");
    first["content"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn instructions_replace_the_system_prompt_and_survive_a_restart() {
    let llm = ScriptedLlm::start().await;
    let instructions = "You are a terse pirate. Answer in one line.";
    llm.push(Reply::text("never finished").stall_after(2));
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        c.llm.openai.read_timeout_ms = 30_000;
    })
    .await;
    let run = app
        .create_run(json!({
            "input": "where is the treasure?",
            "orchestration": "simple",
            "instructions": instructions,
        }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    llm.wait_for_requests(1).await;
    assert_eq!(system_prompt(&llm.requests()[0]), instructions);

    let dir = app.stop().await;
    llm.push(Reply::text("Arr, under the palm."));
    let app = spawn_app_in(dir, |c| use_scripted(c, &llm)).await;
    let events = app.follow(&id).await;
    assert_eq!(final_data(&events)["output"], "Arr, under the palm.");
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(system_prompt(&requests[1]), instructions);

    // Without instructions, the built-in prompt.
    llm.push(Reply::text("plain"));
    app.stream_run(json!({ "input": "hi", "orchestration": "simple" }))
        .await;
    let prompt = system_prompt(&llm.requests()[2]);
    assert!(prompt.starts_with("You are orca"), "{prompt}");
}

#[tokio::test]
async fn oversized_instructions_are_refused_with_a_pointer() {
    let app = spawn_app(|_| {}).await;
    let too_long = "x".repeat(32 * 1024 + 1);
    for instructions in [json!(too_long), json!(""), json!(5)] {
        let (status, body) = app
            .post_json(
                "/v1/runs",
                &json!({ "input": "hi", "instructions": instructions }),
            )
            .await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(body["errors"][0]["pointer"], "/instructions", "{body}");
    }
    // 32 KiB of multi-byte text is over the byte limit even under 32768 characters.
    let (status, body) = app
        .post_json(
            "/v1/runs",
            &json!({ "input": "hi", "instructions": "é".repeat(20_000) }),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["errors"][0]["pointer"], "/instructions", "{body}");
}

#[tokio::test]
async fn the_auto_selector_records_the_fallback_that_answered_it() {
    let (primary, secondary) = (ScriptedLlm::start().await, ScriptedLlm::start().await);
    let var = "ORCA_IT_MODELS_KEY_SELECTOR";
    let llm = load_llm(
        &two_providers(&primary, &secondary, var),
        &[(var, "sk-primary-selector-01")],
    )
    .unwrap();
    let app = spawn_app(|c| {
        configure(c, llm);
        c.selector.use_llm = true;
    })
    .await;
    primary.push(Reply::status(500)).push(Reply::status(500));
    secondary.push(Reply::json(json!({ "orchestrationType": "simple" })));
    secondary.push(Reply::text("simple it is"));
    let events = app
        .stream_run(json!({ "input": "hi", "orchestration": "auto", "model": "fast" }))
        .await;
    let fin = final_data(&events);
    assert_eq!(fin["status"], "succeeded", "{fin}");
    let id = events[0].json()["run_id"].as_str().unwrap().to_owned();
    let selector = app.attempts(&id, "selector").await;
    assert_eq!(selector.len(), 1);
    assert_eq!(
        selector[0]["input"]["answered_by"], "backup",
        "{selector:?}"
    );
}

#[tokio::test]
async fn a_prompt_past_the_context_window_is_refused_before_the_call() {
    let llm = ScriptedLlm::start().await;
    let app = spawn_app(|c| {
        use_scripted(c, &llm);
        let mut small = orca::config::ModelAlias::new("openai", "small-model");
        small.capabilities.context_window = Some(1500);
        c.llm.models.insert("small".into(), small);
    })
    .await;
    let long = "Tell me about orcas. ".repeat(400);
    let fin = final_data(
        &app.stream_run(json!({ "input": long, "model": "small" }))
            .await,
    );
    assert_eq!(fin["status"], "failed", "{fin}");
    assert_eq!(fin["error"]["code"], "llm_rejected");
    let message = fin["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("context window of model `small` (1500 tokens)"),
        "{message}"
    );
    assert_eq!(llm.request_count(), 0, "nothing was sent");

    // A short prompt fits and is sent.
    let fin = final_data(
        &app.stream_run(json!({ "input": "Orcas?", "model": "small" }))
            .await,
    );
    assert_eq!(fin["status"], "succeeded", "{fin}");
    assert_eq!(llm.request_count(), 1);
}

/// The provider configurations docs/configuration.md shows load as written, and start a router.
#[tokio::test]
async fn the_documented_provider_configs_load() {
    let readme = include_str!("../../docs/configuration.md");
    let from = readme
        .find("Working configurations:")
        .expect("docs/configuration.md shows provider configurations");
    let block = readme[from..]
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a toml block");
    let env = [
        ("ANTHROPIC_API_KEY", "sk-ant-test"),
        ("LITELLM_KEY", "sk-lite"),
    ];
    let llm = load_llm(block, &env).unwrap_or_else(|e| panic!("{e}\n{block}"));
    for alias in ["default", "fast", "claude", "local", "qwen", "mixed"] {
        assert!(llm.models.contains_key(alias), "{alias}");
    }
    assert_eq!(llm.models["local"].capabilities.context_window, Some(32768));
    let config = orca::config::Config {
        llm,
        ..Default::default()
    };
    orca::llm::LlmRouter::from_config(&config).expect("a router for every provider kind");
}
