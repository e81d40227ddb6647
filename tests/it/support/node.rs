//! The JavaScript clients in `tests/browser/` (the console's browser script, the AG-UI client),
//! run with Node.js. They need Node.js and `npm ci --prefix tests/browser` first (`bash
//! .ci/setup` does both; `bash .ci/test` runs it before the suite); without them a test fails
//! and says so.

use std::path::Path;
use std::time::Duration;

/// Runs `node tests/browser/<script> ARGS`; panics unless it exits 0. Gives standard output.
pub async fn run(script: &str, args: &[&str]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    assert!(
        root.join("node_modules").exists(),
        "the test clients are not installed: run `bash .ci/setup` (or `npm ci --prefix tests/browser`)"
    );
    let mut command = tokio::process::Command::new("node");
    command.arg(root.join(script)).args(args).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .unwrap_or_else(|_| panic!("{script} took over 2 minutes"))
        .expect(
            "Node.js is missing: run `bash .ci/setup` (installs it), or see https://nodejs.org",
        );
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Standard output as JSON lines.
pub fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}")))
        .collect()
}
