//! The run console: a single-page app served from the binary itself, at `/` and
//! `/console/{file}`. Its files (`src/api/console/`) are plain ES modules and CSS, embedded
//! at compile time, so there is nothing to build or deploy beside `orca`.
//!
//! The console is only a client of the public `/v1` API: it holds no privileges of its own.
//! Its files are public (they contain no data); every call they make carries the API key the
//! user typed, so tenants and keys apply exactly as for any other client. A strict content
//! security policy allows scripts, styles and connections to this origin only.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::AppState;
use super::error::ApiError;

/// Every embedded file: name, media type, contents.
const FILES: &[(&str, &str, &str)] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("console/index.html"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("console/style.css"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("console/favicon.svg"),
    ),
    ("app.js", JS, include_str!("console/app.js")),
    ("api.js", JS, include_str!("console/api.js")),
    ("ui.js", JS, include_str!("console/ui.js")),
    ("runs.js", JS, include_str!("console/runs.js")),
    ("run.js", JS, include_str!("console/run.js")),
    ("schedules.js", JS, include_str!("console/schedules.js")),
    ("workers.js", JS, include_str!("console/workers.js")),
    ("sessions.js", JS, include_str!("console/sessions.js")),
    ("family.js", JS, include_str!("console/family.js")),
    ("review.js", JS, include_str!("console/review.js")),
    ("form.js", JS, include_str!("console/form.js")),
    ("graph.js", JS, include_str!("console/graph.js")),
    ("timeline.js", JS, include_str!("console/timeline.js")),
    ("registry.js", JS, include_str!("console/registry.js")),
    ("versions.js", JS, include_str!("console/versions.js")),
];

const JS: &str = "text/javascript; charset=utf-8";

/// Same-origin only; no inline script; the page cannot be framed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// The console's routes, merged outside the API-key check (the files hold no data).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(|| async { file("index.html") }))
        .route(
            "/console/{file}",
            get(|Path(name): Path<String>| async move { file(&name) }),
        )
}

fn file(name: &str) -> Response {
    let Some((_, media, body)) = FILES.iter().find(|(n, _, _)| *n == name) else {
        return ApiError::NotFound(format!("no console file `{name}`")).into_response();
    };
    let mut response = (*body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
    // Revalidated on every load, so an upgraded binary's console is never mixed with an old one.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_the_console_imports_is_embedded() {
        let names: Vec<&str> = FILES.iter().map(|(n, _, _)| *n).collect();
        for (_, _, body) in FILES {
            for import in body.split("from './").skip(1) {
                let module = import.split('\'').next().unwrap_or_default();
                assert!(
                    names.contains(&module),
                    "{module} is imported but not embedded"
                );
            }
        }
    }

    #[test]
    fn unknown_files_are_a_problem_404() {
        let response = file("../Cargo.toml");
        assert_eq!(response.status(), 404);
    }
}
