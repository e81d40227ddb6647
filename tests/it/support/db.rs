//! Which database a test's server uses. By default a SQLite file in the test's directory.
//! With `ORCA_TEST_POSTGRES` set to a server URL (`.ci/run` starts a throwaway cluster and sets
//! it), every test gets its own schema in that server's database instead, created on first
//! use and remembered in the directory, so a restart on the same directory reopens it.
//!
//! A schema per test (through the URL's `search_path`), not a database per test: the suite
//! makes hundreds, and a schema costs a few kilobytes where a database costs megabytes.

use std::path::Path;

use sqlx::{Connection, Executor};

/// Leases in tests: short, so a run of a killed server is taken over (by its restart, or by
/// another replica) within moments.
pub const TEST_LEASE_TTL_MS: u64 = 1_500;

/// The server URL of the Postgres cluster the suite runs against, if any.
pub fn postgres_server() -> Option<String> {
    std::env::var("ORCA_TEST_POSTGRES")
        .ok()
        .filter(|s| !s.is_empty())
}

/// True when the suite runs against Postgres.
pub fn on_postgres() -> bool {
    postgres_server().is_some()
}

/// The database URL of the test whose files are in `dir`.
pub fn database_url(dir: &Path) -> String {
    match postgres_server() {
        Some(server) => database_url_on(&server, dir),
        None => format!("sqlite://{}", dir.join("orca.db").display()),
    }
}

/// A database (a schema) of its own on the Postgres `server` for the test whose files are
/// in `dir`.
pub fn database_url_on(server: &str, dir: &Path) -> String {
    let remembered = dir.join("postgres-url");
    if let Ok(url) = std::fs::read_to_string(&remembered) {
        return url;
    }
    let schema = format!("t_{}", uuid::Uuid::now_v7().simple());
    create_schema(server, &schema);
    let sep = if server.contains('?') { '&' } else { '?' };
    let url = format!("{server}{sep}options=-c%20search_path%3D{schema}");
    std::fs::write(&remembered, &url).expect("remember the test's database");
    url
}

/// Creates the schema on a thread of its own, so callers need not be async (or on a runtime
/// that allows blocking).
fn create_schema(server: &str, schema: &str) {
    let server = server.to_owned();
    let sql = format!("CREATE SCHEMA {schema}");
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut conn = sqlx::PgConnection::connect(&server)
                .await
                .expect("connect to ORCA_TEST_POSTGRES");
            conn.execute(sqlx::AssertSqlSafe(sql))
                .await
                .expect("create the test's schema");
            let _ = conn.close().await;
        })
    })
    .join()
    .expect("schema creation");
}

/// A pool on the test's database for what a test does behind the server's back (ageing rows,
/// counting them, holding locks). Statements use `$N` placeholders, as the store's do.
pub async fn pool(dir: &Path) -> sqlx::AnyPool {
    pool_on(&database_url(dir)).await
}

/// [`pool`] on the database at `url`.
pub async fn pool_on(url: &str) -> sqlx::AnyPool {
    sqlx::any::install_default_drivers();
    sqlx::any::AnyPoolOptions::new()
        .max_connections(2)
        .connect(url)
        .await
        .expect("open the test's database")
}

/// A Postgres server for tests that need one whatever the suite runs on (several replicas
/// share one database): `ORCA_TEST_POSTGRES`, or a throwaway cluster of its own started by
/// `.ci/postgres` (PostgreSQL's binaries from `bash .ci/setup`) and stopped on drop.
pub struct PgServer {
    pub url: String,
    own: Option<String>,
}

impl PgServer {
    pub fn start() -> PgServer {
        if let Some(url) = postgres_server() {
            return PgServer { url, own: None };
        }
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/postgres");
        let out = std::process::Command::new("bash")
            .args([script, "start"])
            .output()
            .expect("run .ci/postgres");
        assert!(
            out.status.success(),
            "these tests need PostgreSQL: .ci/postgres could not start a cluster: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let exports = String::from_utf8_lossy(&out.stdout);
        let value = |name: &str| {
            exports
                .lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .map(str::to_owned)
                .unwrap_or_else(|| panic!(".ci/postgres printed no {name}: {exports}"))
        };
        PgServer {
            url: value("ORCA_TEST_POSTGRES"),
            own: Some(value("ORCA_PG_DIR")),
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if let Some(dir) = &self.own {
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/postgres");
            let _ = std::process::Command::new("bash")
                .args([script, "stop", dir])
                .output();
        }
    }
}

/// The path of libfaketime, through which a test runs a replica with its clock off
/// (`.ci/faketime` finds it; `bash .ci/setup` installs Debian's `faketime`).
pub fn faketime_library() -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/faketime");
    let out = std::process::Command::new("bash")
        .arg(script)
        .output()
        .expect("run .ci/faketime");
    assert!(
        out.status.success(),
        "this test needs libfaketime: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
