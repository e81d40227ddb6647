//! Safe defaults: no public bind without API keys unless opted in, and CORS only for the
//! origins configured.

use orca::app::App;
use orca::config::{ApiKey, Secret};
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn a_public_bind_without_api_keys_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(&dir);
    config.server.bind = "0.0.0.0:0".into();
    let err = App::build(config.clone())
        .await
        .err()
        .expect("the start is refused");
    let text = format!("{err:#}");
    assert!(text.contains("server.bind"), "{text}");
    assert!(
        text.contains("server.allow_unauthenticated_public_bind"),
        "{text}"
    );
    assert!(
        text.contains("ORCA_SERVER__ALLOW_UNAUTHENTICATED_PUBLIC_BIND"),
        "{text}"
    );

    // API keys make the same address acceptable. Port 0 of the loopback-only test machine.
    config.auth.api_keys = vec![ApiKey {
        user: None,
        key: Secret::new("a-key-for-tests-0123456789"),
        tenant: "t".into(),
    }];
    config.server.bind = "0.0.0.0:0".into();
    assert!(orca::config::Config::validate(&config).is_ok());
    config.auth.api_keys.clear();
    config.server.allow_unauthenticated_public_bind = true;
    assert!(orca::config::Config::validate(&config).is_ok());
}

#[tokio::test]
async fn no_origin_is_allowed_by_default() {
    let app = spawn_app(|_| {}).await;
    let resp = app
        .client
        .get(app.url("/v1/runs"))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(!resp.headers().contains_key("access-control-allow-origin"));
    let preflight = app
        .client
        .request(reqwest::Method::OPTIONS, app.url("/v1/runs"))
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(
        !preflight
            .headers()
            .contains_key("access-control-allow-origin")
    );
    assert_eq!(preflight.status(), 405);
}

#[tokio::test]
async fn configured_origins_get_cors_headers_and_preflights() {
    let origin = "https://app.example.com";
    let app = spawn_app(|c| c.server.cors.allowed_origins = vec![origin.into()]).await;

    let preflight = app
        .client
        .request(reqwest::Method::OPTIONS, app.url("/v1/runs"))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "content-type, idempotency-key",
        )
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success(), "{}", preflight.status());
    let h = preflight.headers();
    assert_eq!(h["access-control-allow-origin"], origin);
    let methods = h["access-control-allow-methods"].to_str().unwrap();
    for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
        assert!(methods.contains(method), "{method} not in {methods}");
    }
    let headers = h["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for name in ["content-type", "idempotency-key", "authorization"] {
        assert!(headers.contains(name), "{headers}");
    }
    assert_eq!(h["access-control-max-age"], "600");

    let resp = app
        .client
        .post(app.url("/v1/runs"))
        .header("origin", origin)
        .json(&json!({ "input": "hello" }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()["access-control-allow-origin"], origin);
    let exposed = resp.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(exposed.contains("location"), "{exposed}");

    // Errors carry the headers too, so a page can read the problem.
    let resp = app
        .client
        .get(app.url("/v1/runs/0190a0a0-0000-7000-8000-000000000000"))
        .header("origin", origin)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.headers()["access-control-allow-origin"], origin);

    // Another origin gets nothing.
    let resp = app
        .client
        .get(app.url("/v1/runs"))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert!(!resp.headers().contains_key("access-control-allow-origin"));
}
