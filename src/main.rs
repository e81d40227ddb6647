//! The `orca` binary: telemetry, configuration, then one of `serve`, `migrate`, `openapi`, or
//! a client command (`run`, `runs`, `workflows`, `agents`, `tools`, `apply`, `export`, `schedules`, `sessions`, `usage`, in
//! [`cli`]) against a running server.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use orca::app::App;
use orca::config::{Config, Overrides};
use tracing_subscriber::EnvFilter;

/// orca — an HTTP streaming orchestration service for LLM agents.
///
/// Configuration is layered: built-in defaults < TOML file (--config or ORCA_CONFIG, else
/// ./config/default.toml when present) < environment (DATABASE_URL, ORCA_BIND, OPENAI_BASE_URL,
/// OPENAI_API_KEY, ORCA_SECTION__KEY) < these flags. RUST_LOG sets the log filter.
///
/// `run`, `runs`, `workflows`, `agents`, `tools`, `functions`, `apply`, `export`, `schedules`,
/// `sessions` and `usage` are clients of a running server: ORCA_URL (default http://127.0.0.1:8080) and ORCA_API_KEY, or --url and
/// --api-key. `orca help COMMAND` explains each.
#[derive(Debug, Parser)]
#[command(name = "orca", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format.
    #[arg(long, global = true, value_parser = ["text", "json"], default_value = "text")]
    log_format: String,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start the HTTP service (binds 127.0.0.1:8080 unless told otherwise).
    Serve(ConfigArgs),
    /// Create the database if needed, apply pending migrations, and exit.
    Migrate(ConfigArgs),
    /// Print the OpenAPI 3.1 document as YAML (the repository's openapi.yaml).
    Openapi {
        /// Write to this file instead of standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    #[command(flatten)]
    Client(Box<cli::Command>),
}

#[derive(Debug, clap::Args)]
struct ConfigArgs {
    /// TOML configuration file (overrides ORCA_CONFIG).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Address to listen on, host:port (overrides ORCA_BIND and server.bind).
    #[arg(long)]
    bind: Option<String>,
    /// Database URL, e.g. sqlite://orca.db (overrides DATABASE_URL and database.url).
    #[arg(long)]
    database_url: Option<String>,
    /// Serve a non-loopback address even though no API keys are configured (sets
    /// server.allow_unauthenticated_public_bind). Anyone who can connect may then start runs
    /// and read every run.
    #[arg(long)]
    allow_unauthenticated_public_bind: bool,
}

impl ConfigArgs {
    fn load(&self) -> anyhow::Result<Config> {
        Ok(Config::load(&Overrides {
            config_file: self.config.clone(),
            bind: self.bind.clone(),
            database_url: self.database_url.clone(),
            allow_unauthenticated_public_bind: self.allow_unauthenticated_public_bind,
        })?)
    }
}

/// Logs go to standard error, coloured only when that is a terminal: a file, a pipe or a
/// container's log collector gets plain text.
fn init_tracing(format: &str) {
    use std::io::IsTerminal;
    // The MCP client library logs each handshake at info, with the whole server description.
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Runs the command; a failure is one line on standard error (`error: what: why`) and exit
/// status 1. Not anyhow's report from `main`, which adds a backtrace of orca's own source when
/// `RUST_BACKTRACE` is set: a user needs the setting to fix, not where orca noticed it.
fn main() -> ExitCode {
    let Cli {
        command,
        log_format,
    } = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let command = match command {
        // Client commands own their exit codes (0, 1 for a run that did not succeed, 2).
        Command::Client(c) => return runtime.block_on(cli::main(*c)),
        other => other,
    };
    match runtime.block_on(run(command, &log_format)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command, log_format: &str) -> anyhow::Result<()> {
    match command {
        Command::Openapi { output } => {
            let yaml = orca::openapi::yaml();
            match output {
                Some(path) => std::fs::write(&path, yaml)
                    .with_context(|| format!("writing {}", path.display()))?,
                None => print!("{yaml}"),
            }
            Ok(())
        }
        Command::Migrate(args) => {
            init_tracing(log_format);
            let config = args.load()?;
            orca::store::Store::migrate(&config.database.url).await?;
            tracing::info!(
                database = %orca::store::redact_url(&config.database.url),
                "migrations applied"
            );
            Ok(())
        }
        Command::Serve(args) => {
            init_tracing(log_format);
            // A file size limit (`ulimit -f`) reached makes a write fail with EFBIG, which
            // the store survives like a full disk, instead of killing the process mid-write.
            #[cfg(unix)]
            // SAFETY: only sets the signal's disposition to "ignore"; no handler runs.
            unsafe {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            }
            let config = args.load()?;
            if !config.uses_openai() {
                tracing::warn!(
                    "no OPENAI_BASE_URL or OPENAI_API_KEY: runs use the offline demonstration provider"
                );
            }
            if config.serves_others_without_keys() {
                tracing::warn!(
                    "serving {} with no API keys: anyone who can reach this port may start runs \
                     and read every run. Publish it on the host's loopback only (docker run -p \
                     127.0.0.1:8080:8080), or set keys: ORCA_AUTH__API_KEYS='[{{ key = \"a long \
                     random key\", tenant = \"default\" }}]' (see docs/operating.md)",
                    config.server.bind
                );
            }
            let console = config.server.console;
            // Before anything listens: a SIGTERM must never meet the default action (exit
            // at once) while the server already answers.
            let stop = stop_signal();
            let app = App::build(config).await?;
            // `replica`: on a shared PostgreSQL, the id this process's leases carry
            // (`runs.owner`); absent on SQLite.
            tracing::info!(
                address = %app.local_addr(),
                replica = app.replica(),
                "orca is listening"
            );
            if console {
                // On standard output, for the person who just started it: where to click.
                println!("orca console: http://{}/", app.local_addr());
            }
            app.run_until_stopped(stop).await?;
            tracing::info!("stopped");
            Ok(())
        }
        Command::Client(_) => unreachable!("client commands are run by main"),
    }
}

/// Ctrl-C or SIGTERM. The handlers are installed when this is called, not when the future is
/// first polled.
fn stop_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{Signal, SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).ok();
        let mut interrupt = signal(SignalKind::interrupt()).ok();
        async move {
            async fn received(signal: &mut Option<Signal>) {
                match signal {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            }
            tokio::select! {
                _ = received(&mut term) => {},
                _ = received(&mut interrupt) => {},
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
