//! The client commands of the `orca` binary: `run`, `runs …`, `workflows …`, `agents …`,
//! `tools …` (versions), `functions …`, `schedules …`, `sessions …`, `usage`, `apply`, `export`, talking to a
//! running server over its public HTTP API only (never the store or the engine).
//! `workflows`, `agents`, `tools` and `functions` share their version commands (`versions`, `version`,
//! `diff`, `label`, `unlabel`, `delete-version`) from [`definitions`], as do `apply DIR` (a
//! folder of definitions in one request) and `export DIR` (the tenant's definitions as files).
//!
//! Exit codes: 0 the run succeeded (or the command did its job), 1 the run ended otherwise
//! (failed, timed out, cancelled), 2 a usage error, a connection error or an error answer from
//! the server (printed from its problem+json), 130 interrupted (Ctrl-C; the run goes on).

/// Writes to standard output. A reader that went away (`orca runs list | head -1`) ends the
/// command quietly with 141, as SIGPIPE ends other command-line tools, instead of a panic.
fn write_out(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().lock().write_fmt(args)
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(141);
    }
}

/// `println!` through [`write_out`].
macro_rules! outln {
    () => { $crate::cli::write_out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::cli::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` through [`write_out`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::write_out(format_args!($($arg)*)) };
}

mod client;
mod definitions;
mod functions;
mod progress;
mod review;
mod schedules;
mod sessions;
mod travel;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use client::{Client, Error, Event, EventStream};
use progress::{Mode, View};

/// Where the server is and how to talk to it; every client command takes these.
#[derive(Debug, Args)]
pub struct ClientArgs {
    /// The server's base URL.
    #[arg(long, env = "ORCA_URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// API key, sent as `Authorization: Bearer KEY`.
    #[arg(long, env = "ORCA_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// For scripts: JSON lines (events) or the JSON body, no progress view and no colours.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a run and stream it to the terminal; answers input requests from standard input.
    Run(RunArgs),
    /// List, show, watch, cancel, pause, resume, fork or replan runs.
    Runs {
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// Register or list fixed workflows; their versions, diffs and labels.
    Workflows {
        #[command(subcommand)]
        command: WorkflowsCommand,
    },
    /// Register, list, show or delete agents (for plans' `agent`, `handoff` and `group_chat`
    /// steps); their versions, diffs and labels.
    Agents {
        #[command(subcommand)]
        command: AgentsCommand,
    },
    /// The versions, diffs and labels of HTTP tools declared through the API.
    Tools {
        #[command(subcommand)]
        command: definitions::VersionsCommand,
    },
    /// Declare, list, show or delete named LLM functions; their versions, diffs and labels.
    Functions {
        #[command(subcommand)]
        command: functions::FunctionsCommand,
    },
    /// Send a folder's workflows/, agents/, tools/, functions/ and schedules/ files in one request: each
    /// definition created, changed (a new version) or unchanged; `--prune` deletes the rest.
    Apply(definitions::ApplyArgs),
    /// Write the tenant's own definitions as files into a folder (`apply` takes them back).
    Export(definitions::ExportArgs),
    /// Start runs on a cron expression or an interval: create, list, show (next ticks and
    /// the runs they started), enable, disable, delete.
    Schedules {
        #[command(subcommand)]
        command: schedules::SchedulesCommand,
    },
    /// A session's variables, runs and history; set or unset variables; delete it.
    Sessions {
        #[command(subcommand)]
        command: sessions::SessionsCommand,
    },
    /// What your tenant uses now (runs in progress, runs in the last minute, tokens today)
    /// against its quota.
    Usage {
        #[command(flatten)]
        client: ClientArgs,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The run's input: text, or a JSON object when it parses as one (optional with
    /// `--request`, whose `input` it replaces).
    input: Option<String>,
    /// A whole run request (the JSON body of `POST /v1/runs`, e.g. examples/teams/handoff.json);
    /// the other flags override its fields.
    #[arg(long, value_name = "FILE")]
    request: Option<PathBuf>,
    /// How the run is orchestrated (the server's default is `auto`).
    #[arg(long, value_parser = ["auto", "simple", "fixed", "planner", "reactive"])]
    orchestration: Option<String>,
    /// A registered workflow to run (implies `--orchestration fixed` unless given).
    #[arg(long)]
    workflow: Option<String>,
    /// A plan file (JSON, the AgentPlan schema) to run (implies `--orchestration fixed`).
    #[arg(long)]
    plan: Option<PathBuf>,
    /// A configured model alias (`GET /v1/models` lists them; default: the server's).
    #[arg(long)]
    model: Option<String>,
    /// A session id: runs of one session share their conversation history.
    #[arg(long)]
    session: Option<String>,
    /// What the run does when its session has a run in progress (the server's default is
    /// `engine.session_concurrency`).
    #[arg(long, requires = "session", value_parser = ["parallel", "reject", "enqueue", "interrupt"])]
    concurrency: Option<String>,
    /// Each plan version a model writes waits for your review (approve, edit or reject),
    /// asked inline like any input.
    #[arg(long)]
    review_plans: bool,
    /// Higher-priority runs leave the queue for a running slot first (-1000 to 1000).
    #[arg(long, allow_negative_numbers = true)]
    priority: Option<i64>,
    /// Where the server POSTs the run's signed summary once it ends (needs
    /// `webhooks.secret` on the server).
    #[arg(long, value_name = "URL")]
    webhook: Option<String>,
    /// Metadata stored with the run, KEY=VALUE (repeat for more); `runs list --metadata`
    /// filters by it.
    #[arg(long, value_name = "KEY=VALUE")]
    metadata: Vec<String>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// Runs, newest first, a page at a time (`--cursor` for the next).
    List {
        /// Only runs in this status.
        #[arg(long, value_parser = ["queued", "running", "waiting_input", "paused", "succeeded", "failed", "cancelled", "timed_out"])]
        status: Option<String>,
        /// Only runs of this orchestration.
        #[arg(long, value_parser = ["auto", "simple", "fixed", "planner", "reactive"])]
        orchestration: Option<String>,
        /// Only runs whose metadata has KEY=VALUE (repeat: all of them).
        #[arg(long, value_name = "KEY=VALUE")]
        metadata: Vec<String>,
        /// Only runs created at or after this time (RFC 3339).
        #[arg(long, value_name = "TIME")]
        created_after: Option<String>,
        /// Only runs created before this time (RFC 3339).
        #[arg(long, value_name = "TIME")]
        created_before: Option<String>,
        /// How many runs per page (at most 200; the server's default is 50).
        #[arg(long)]
        limit: Option<u32>,
        /// The page after the one that printed this cursor.
        #[arg(long)]
        cursor: Option<String>,
        /// Only the runs forked from this run.
        #[arg(long, value_name = "RUN")]
        parent: Option<String>,
        /// Only runs that ended so (`partial`: succeeded with only part of the task done).
        #[arg(long, value_parser = ["success", "partial", "error", "timeout", "cancelled"])]
        completion: Option<String>,
        /// Only the runs of this session.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// One run: status, completion and why, step counts, usage, input, output, and the
    /// definition versions it uses.
    Show {
        /// The run's id.
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Follow a run's events to its end, resuming after a dropped connection.
    Watch {
        /// The run's id.
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Ask a run to stop.
    Cancel {
        /// The run's id.
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Pause a run: running steps finish, none starts until `runs resume`.
    Pause {
        /// The run's id.
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Resume a paused run (or one held at a breakpoint).
    Resume {
        /// The run's id.
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Start a new run from a checkpoint of this one (time travel), optionally with another
    /// input or plan; what completed before the checkpoint is not run again.
    Fork(travel::ForkArgs),
    /// Ask a reactive run for a new plan with a message, or take it back to an earlier plan
    /// version (`--restore-version`).
    Replan(travel::ReplanArgs),
}

#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// Register (or replace) an agent from a JSON file (`schemas/Agent.schema.json`).
    Put {
        /// The agent's JSON file, e.g. examples/agents/billing.json.
        file: PathBuf,
        /// The name to register it under (default: the file's `name`, else the file stem).
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        version: definitions::VersionNote,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Registered agents.
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// One agent with its definition.
    Show {
        /// The agent's name.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Remove an agent.
    Delete {
        /// The agent's name.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    #[command(flatten)]
    Versions(definitions::VersionsCommand),
}

#[derive(Debug, Subcommand)]
pub enum WorkflowsCommand {
    /// Register (or replace) a workflow from a JSON file (`schemas/FixedWorkflow.schema.json`).
    Put {
        /// The workflow's JSON file.
        file: PathBuf,
        /// The name to register it under (default: the file's `name`, else the file stem).
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        version: definitions::VersionNote,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Registered workflows.
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    #[command(flatten)]
    Versions(definitions::VersionsCommand),
}

const FAILED: u8 = 1;
const USAGE: u8 = 2;

/// Runs one client command to its exit code; errors are printed to standard error.
pub async fn main(command: Command) -> ExitCode {
    match dispatch(command).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(USAGE)
        }
    }
}

fn connect(args: &ClientArgs) -> Result<Client, Error> {
    Client::new(&args.url, args.api_key.clone())
}

async fn dispatch(command: Command) -> Result<ExitCode, Error> {
    match command {
        Command::Run(args) => run(args).await,
        Command::Runs { command } => runs(command).await,
        Command::Workflows { command } => workflows(command).await,
        Command::Agents { command } => agents(command).await,
        Command::Tools { command } => definitions::versions(definitions::Kind::Tool, command).await,
        Command::Functions { command } => functions::functions(command).await,
        Command::Apply(args) => definitions::apply(args).await,
        Command::Export(args) => definitions::export(args).await,
        Command::Schedules { command } => schedules::schedules(command).await,
        Command::Usage { client } => usage(&client).await,
        Command::Sessions { command } => sessions::sessions(command).await,
    }
}

/// Prints the raw body for `--json`, else the human rendering.
fn show(json: bool, body: &Value, human: impl FnOnce(&Value)) -> Result<ExitCode, Error> {
    if json {
        outln!("{body}");
    } else {
        human(body);
    }
    Ok(ExitCode::SUCCESS)
}

async fn runs(command: RunsCommand) -> Result<ExitCode, Error> {
    match command {
        RunsCommand::List {
            status,
            orchestration,
            metadata,
            created_after,
            created_before,
            limit,
            cursor,
            parent,
            completion,
            session,
            client,
        } => {
            let mut query = form_urlencoded::Serializer::new(String::new());
            let limit = limit.map(|n| n.to_string());
            let pairs = [
                ("status", status.as_deref()),
                ("orchestration", orchestration.as_deref()),
                ("created_after", created_after.as_deref()),
                ("created_before", created_before.as_deref()),
                ("limit", limit.as_deref()),
                ("cursor", cursor.as_deref()),
                ("parent_id", parent.as_deref()),
                ("completion", completion.as_deref()),
                ("session_id", session.as_deref()),
            ];
            for (name, value) in pairs {
                if let Some(v) = value {
                    query.append_pair(name, v);
                }
            }
            for (key, value) in key_values(&metadata)? {
                query.append_pair(&format!("metadata.{key}"), &value);
            }
            let query = query.finish();
            let path = if query.is_empty() {
                "/v1/runs".to_owned()
            } else {
                format!("/v1/runs?{query}")
            };
            let body = connect(&client)?.get(&path).await?;
            show(client.json, &body, print_runs)
        }
        RunsCommand::Show { id, client } => {
            let c = connect(&client)?;
            let mut body = c.get(&run_path(&id, "")).await?;
            if !body["request"]["webhook"].is_null() {
                body["webhook"] = c.get(&run_path(&id, "/webhook")).await?;
            }
            show(client.json, &body, print_run)
        }
        RunsCommand::Watch { id, client } => {
            let c = connect(&client)?;
            let stream = c.events(&id, 0).await?;
            let mut view = View::new(Mode::detect(client.json));
            follow(&c, stream, Some(id), &mut view).await
        }
        RunsCommand::Cancel { id, client } => {
            let body = connect(&client)?
                .post(&run_path(&id, "/cancel"), &json!({}))
                .await?;
            show(client.json, &body, |_| {
                outln!("cancel requested for run {id}")
            })
        }
        RunsCommand::Pause { id, client } => pause(&id, "pause", &client).await,
        RunsCommand::Resume { id, client } => pause(&id, "resume", &client).await,
        RunsCommand::Fork(args) => travel::fork(args).await,
        RunsCommand::Replan(args) => travel::replan(args).await,
    }
}

/// `usage`: the tenant's usage against its quota (0: no limit).
async fn usage(client: &ClientArgs) -> Result<ExitCode, Error> {
    let body = connect(client)?.get("/v1/usage").await?;
    show(client.json, &body, |b| {
        let (u, q) = (&b["usage"], &b["quota"]);
        let limit = |v: &Value| match v.as_u64() {
            Some(0) | None => "no limit".to_owned(),
            Some(n) => format!("of {n}"),
        };
        outln!("tenant        {}", b["tenant"].as_str().unwrap_or("-"));
        outln!(
            "in progress   {} {}",
            u["running_runs"],
            limit(&q["running_runs"])
        );
        outln!(
            "last minute   {} {}",
            u["runs_last_minute"],
            limit(&q["runs_per_minute"])
        );
        outln!(
            "tokens today  {} {}",
            u["tokens_today"],
            limit(&q["tokens_per_day"])
        );
    })
}

/// `runs pause` and `runs resume`: `what` is the endpoint.
async fn pause(id: &str, what: &str, client: &ClientArgs) -> Result<ExitCode, Error> {
    let body = connect(client)?
        .post(&run_path(id, &format!("/{what}")), &json!({}))
        .await?;
    show(client.json, &body, |_| match what {
        "pause" => outln!("run {id} pauses once its running steps finish"),
        _ => outln!("run {id} goes on"),
    })
}

async fn workflows(command: WorkflowsCommand) -> Result<ExitCode, Error> {
    match command {
        WorkflowsCommand::Put {
            file,
            name,
            version,
            client,
        } => {
            let kind = definitions::Kind::Workflow;
            let (name, definition) = definition_file(&file, name)?;
            let path = version.put_path(kind, &name);
            let body = connect(&client)?.put(&path, &definition).await?;
            show(client.json, &body, |b| {
                outln!("{}", definitions::registered(kind, &name, b))
            })
        }
        WorkflowsCommand::List { client } => {
            let body = connect(&client)?.get("/v1/workflows").await?;
            show(client.json, &body, |body| {
                let list = body.as_array().map(Vec::as_slice).unwrap_or_default();
                if list.is_empty() {
                    outln!("no workflows");
                    return;
                }
                outln!("{:<24} {:<8} DESCRIPTION", "NAME", "VERSION");
                for w in list {
                    outln!(
                        "{:<24} {:<8} {}",
                        w["name"].as_str().unwrap_or(""),
                        w["version"].as_str().unwrap_or("-"),
                        w["description"].as_str().unwrap_or("")
                    );
                }
            })
        }
        WorkflowsCommand::Versions(command) => {
            definitions::versions(definitions::Kind::Workflow, command).await
        }
    }
}

/// `KEY=VALUE` arguments, split at the first `=`.
fn key_values(args: &[String]) -> Result<Vec<(String, String)>, Error> {
    args.iter()
        .map(|a| match a.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
            _ => Err(Error::Usage(format!("`{a}` is not KEY=VALUE"))),
        })
        .collect()
}

async fn agents(command: AgentsCommand) -> Result<ExitCode, Error> {
    match command {
        AgentsCommand::Put {
            file,
            name,
            version,
            client,
        } => {
            let kind = definitions::Kind::Agent;
            let (name, definition) = definition_file(&file, name)?;
            let path = version.put_path(kind, &name);
            let body = connect(&client)?.put(&path, &definition).await?;
            show(client.json, &body, |b| {
                outln!("{}", definitions::registered(kind, &name, b))
            })
        }
        AgentsCommand::List { client } => {
            let body = connect(&client)?.get("/v1/agents").await?;
            show(client.json, &body, |body| {
                outln!("{:<24} {:<7} DESCRIPTION", "NAME", "SHARED");
                for a in body.as_array().into_iter().flatten() {
                    outln!(
                        "{:<24} {:<7} {}",
                        a["name"].as_str().unwrap_or(""),
                        if a["shared"] == true { "yes" } else { "no" },
                        a["description"].as_str().unwrap_or("")
                    );
                }
            })
        }
        AgentsCommand::Show { name, client } => {
            let path = format!("/v1/agents/{}", encode(&name));
            let body = connect(&client)?.get(&path).await?;
            show(client.json, &body, |body| {
                let pretty = serde_json::to_string_pretty(body).unwrap_or_default();
                outln!("{pretty}");
            })
        }
        AgentsCommand::Delete { name, client } => {
            let path = format!("/v1/agents/{}", encode(&name));
            connect(&client)?.delete(&path).await?;
            show(client.json, &json!({ "deleted": name }), |_| {
                outln!("agent {name} deleted")
            })
        }
        AgentsCommand::Versions(command) => {
            definitions::versions(definitions::Kind::Agent, command).await
        }
    }
}

/// Reads a workflow or agent file; the name is `--name` (written into the body, which the server wants
/// to agree with the path), else the file's `name`, else its stem.
pub(super) fn definition_file(
    file: &std::path::Path,
    name: Option<String>,
) -> Result<(String, Value), Error> {
    let mut definition = json_file(file)?;
    let name = match name {
        Some(n) => {
            if let Some(obj) = definition.as_object_mut() {
                obj.insert("name".into(), Value::String(n.clone()));
            }
            n
        }
        None => definition["name"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| file.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .ok_or_else(|| Error::Usage("give the workflow a --name".into()))?,
    };
    Ok((name, definition))
}

fn encode(segment: &str) -> String {
    form_urlencoded::byte_serialize(segment.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

fn run_path(id: &str, tail: &str) -> String {
    format!("/v1/runs/{}{tail}", encode(id))
}

/// Reads a JSON file.
fn json_file(file: &std::path::Path) -> Result<Value, Error> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Error::Usage(format!("reading {}: {e}", file.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| Error::Usage(format!("{} is not valid JSON: {e}", file.display())))
}

async fn run(args: RunArgs) -> Result<ExitCode, Error> {
    let mut body = match &args.request {
        Some(file) => match json_file(file)? {
            body @ Value::Object(_) => body,
            _ => {
                return Err(Error::Usage(format!(
                    "{} is not a run request (a JSON object)",
                    file.display()
                )));
            }
        },
        None => json!({}),
    };
    match &args.input {
        Some(text) => {
            body["input"] = match serde_json::from_str::<Value>(text) {
                Ok(v @ Value::Object(_)) => v,
                _ => Value::String(text.clone()),
            };
        }
        None if args.request.is_none() => {
            return Err(Error::Usage(
                "give the run's input (orca run \"what is 2 + 2?\"), or --request FILE".into(),
            ));
        }
        None => {}
    }
    let orchestration = args
        .orchestration
        .clone()
        .or_else(|| (args.workflow.is_some() || args.plan.is_some()).then(|| "fixed".to_owned()));
    if let Some(o) = orchestration {
        body["orchestration"] = json!(o);
    }
    if let Some(w) = &args.workflow {
        body["workflow"] = json!(w);
    }
    if let Some(file) = &args.plan {
        body["plan"] = json_file(file)?;
    }
    if let Some(m) = &args.model {
        body["model"] = json!(m);
    }
    if let Some(session) = &args.session {
        body["session_id"] = json!(session);
    }
    if let Some(policy) = &args.concurrency {
        body["concurrency"] = json!(policy);
    }
    if let Some(url) = &args.webhook {
        body["webhook"] = json!({ "url": url });
    }
    if args.review_plans {
        body["review_plans"] = json!(true);
    }
    if let Some(priority) = args.priority {
        body["priority"] = json!(priority);
    }
    if !args.metadata.is_empty() {
        let pairs = key_values(&args.metadata)?;
        body["metadata"] = Value::Object(
            pairs
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect(),
        );
    }
    let client = connect(&args.client)?;
    let stream = client.start_run(&body).await?;
    let mut view = View::new(Mode::detect(args.client.json));
    follow(&client, stream, None, &mut view).await
}

/// How many times in a row a dropped stream is reopened before giving up.
const RECONNECTS: u32 = 5;

/// Shows a run's events to `final`, answering input requests, and reopens a dropped stream
/// after the last event seen (`Last-Event-ID`), so nothing is shown twice or missed.
async fn follow(
    client: &Client,
    mut stream: EventStream,
    mut run_id: Option<String>,
    view: &mut View,
) -> Result<ExitCode, Error> {
    let mut last_seq = 0;
    let mut failures = 0;
    let mut ticker = view.tick_every().map(tokio::time::interval);
    let mut interrupt = Interrupt::new();
    loop {
        let tick = async {
            match ticker.as_mut() {
                Some(t) => {
                    t.tick().await;
                }
                None => std::future::pending().await,
            }
        };
        let next = tokio::select! {
            ev = stream.next() => ev,
            _ = tick => { view.tick(); continue; }
            _ = interrupt.recv() => detach(view, run_id.as_deref()),
        };
        let why = match next {
            Some(Ok(ev)) => {
                failures = 0;
                if ev.seq <= last_seq {
                    continue;
                }
                last_seq = ev.seq;
                if run_id.is_none() {
                    run_id = ev.run_id().map(str::to_owned);
                }
                view.event(&ev);
                // A fork's plan: what it kept from its parent is done already.
                if ev.kind == "plan"
                    && ev.data()["reason"] == "fork"
                    && view.mode() != Mode::Json
                    && let Some(id) = &run_id
                {
                    view.kept(&travel::kept_steps(client, id).await);
                }
                match ev.kind.as_str() {
                    "final" => {
                        view.finish(ev.data());
                        return Ok(if ev.data()["status"] == "succeeded" {
                            ExitCode::SUCCESS
                        } else {
                            ExitCode::from(FAILED)
                        });
                    }
                    "input_required" => {
                        if let Some(id) = &run_id
                            && !answered(client, id, ev.seq).await
                        {
                            ask(client, id, &ev, view, &mut interrupt).await?;
                        }
                    }
                    _ => {}
                }
                continue;
            }
            Some(Err(e)) => e,
            None => "the stream ended before the run did".to_owned(),
        };
        let Some(id) = run_id.clone() else {
            return Err(Error::Usage(format!("the run's stream broke: {why}")));
        };
        failures += 1;
        if failures > RECONNECTS {
            return Err(Error::Usage(format!(
                "lost run {id}'s stream {RECONNECTS} times, last: {why}"
            )));
        }
        // A short, growing pause: a restarting server gets a moment to come back.
        tokio::time::sleep(Duration::from_millis(200 * u64::from(failures))).await;
        match client.events(&id, last_seq).await {
            Ok(s) => stream = s,
            Err(Error::Connect { .. }) => {} // try again on the next turn
            Err(e) => return Err(e),
        }
    }
}

/// Ctrl-C, listened for from the moment a run's view starts: a press at any point after that
/// is kept until it is looked at (a fresh `ctrl_c()` future would miss one pressed between
/// two polls, and the default action no longer applies once tokio has a handler).
struct Interrupt {
    #[cfg(unix)]
    signal: Option<tokio::signal::unix::Signal>,
}

impl Interrupt {
    fn new() -> Self {
        Interrupt {
            #[cfg(unix)]
            signal: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok(),
        }
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        match self.signal.as_mut() {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Ctrl-C: the client lets go, the run goes on (a server-side run is not the terminal's to
/// stop; `orca runs cancel` is). Exits at once with 130, the shell's code for SIGINT: a
/// blocked read of standard input would otherwise hold the runtime's shutdown.
fn detach(view: &mut View, run_id: Option<&str>) -> ! {
    view.clear();
    match run_id {
        Some(id) => eprintln!(
            "\ninterrupted: run {id} goes on; `orca runs watch {id}` follows it, \
             `orca runs cancel {id}` stops it"
        ),
        None => eprintln!("\ninterrupted"),
    }
    std::process::exit(130)
}

/// Whether the question of the `input_required` event at `seq` was answered already: a stream
/// replayed from the start (`orca runs watch`) meets the questions of the past too, and the
/// stored events after it show the run going on (or ended). When they cannot be read, it asks.
async fn answered(client: &Client, run_id: &str, seq: u64) -> bool {
    let Ok(Value::Array(later)) = client.stored_events(run_id, seq).await else {
        return false;
    };
    later.iter().any(|e| {
        e["kind"] == "final" || (e["kind"] == "status" && e["data"]["status"] != "waiting_input")
    })
}

/// Prompts for an `input_required` event until the server accepts an answer (422 shows the
/// problem and asks again; 409 means someone else answered). Standard input closing leaves
/// the run waiting for an answer from elsewhere.
async fn ask(
    client: &Client,
    run_id: &str,
    ev: &Event,
    view: &mut View,
    interrupt: &mut Interrupt,
) -> Result<(), Error> {
    let d = ev.data();
    let step_id = d["step_id"].as_str().unwrap_or_default().to_owned();
    view.clear();
    // With --json, standard output carries only events: the prompt goes to standard error.
    let say = |text: String| {
        if view.mode() == Mode::Json {
            eprintln!("{text}");
        } else {
            outln!("{text}");
        }
    };
    say(format!(
        "input required for step {step_id}: {}",
        d["prompt"].as_str().unwrap_or("")
    ));
    if let Some(plan) = d.get("plan").filter(|_| d["kind"] == "plan_review") {
        let shown = serde_json::to_string_pretty(plan).unwrap_or_default();
        say(format!("plan version {}:\n{shown}", d["plan_version"]));
        say(review::HOW.into());
    }
    if let Some(schema) = d.get("schema").filter(|s| !s.is_null()) {
        say(format!("schema: {schema}"));
    }
    loop {
        if view.mode() == Mode::Json {
            eprint!("> ");
        } else {
            out!("> ");
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let read = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            match std::io::stdin().read_line(&mut line) {
                Ok(0) | Err(_) => None,
                Ok(_) => Some(line),
            }
        });
        let line = tokio::select! {
            line = read => line.ok().flatten(),
            _ = interrupt.recv() => detach(view, Some(run_id)),
        };
        let Some(line) = line else {
            say("standard input closed: the run waits for an answer from elsewhere".into());
            return Ok(());
        };
        let text = line.trim_end_matches(['\r', '\n']);
        // A terminal echoed what was typed; piped input is shown so the transcript reads right.
        if !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            say(text.to_owned());
        }
        let value = if d["kind"] == "plan_review" {
            match review::answer(text) {
                Ok(value) => value,
                Err(why) => {
                    say(format!("{why}\ntry again"));
                    continue;
                }
            }
        } else {
            answer_value(text, d.get("schema"))
        };
        let body = json!({ "step_id": step_id, "value": value });
        match client.post(&run_path(run_id, "/input"), &body).await {
            Ok(_) => return Ok(()),
            Err(e @ Error::Status { status, .. }) if status.as_u16() == 422 => {
                say(format!("{e}\ntry again"));
            }
            Err(e @ Error::Status { status, .. }) if status.as_u16() == 409 => {
                say(format!("{e}"));
                return Ok(());
            }
            Err(e) => return Err(e),
        }
    }
}

/// What a typed answer stands for: JSON when it parses, else the text. A yes/no question (a
/// boolean schema, or an object of one boolean property) also takes yes/no, y/n (any case).
fn answer_value(text: &str, schema: Option<&Value>) -> Value {
    let yes_no = match text.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Some(true),
        "n" | "no" => Some(false),
        _ => None,
    };
    if let (Some(yes), Some(schema)) = (yes_no, schema) {
        if schema["type"] == "boolean" {
            return Value::Bool(yes);
        }
        let properties = schema["properties"].as_object();
        if let Some(props) = properties.filter(|p| p.len() == 1)
            && let Some((name, property)) = props.iter().next()
            && property["type"] == "boolean"
        {
            return json!({ name: yes });
        }
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.into()))
}

fn print_runs(body: &Value) {
    let runs = body["runs"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if runs.is_empty() {
        outln!("no runs");
    } else {
        outln!(
            "{:<36}  {:<19} {:<9} {:<27}  INPUT",
            "ID",
            "STATUS",
            "ORCH",
            "CREATED"
        );
    }
    for r in runs {
        let input = match &r["input"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let input: String = input.chars().take(40).collect();
        outln!(
            "{}  {:<19} {:<9} {}  {}",
            r["id"].as_str().unwrap_or(""),
            status_shown(r),
            r["orchestration"].as_str().unwrap_or(""),
            r["created_at"].as_str().unwrap_or(""),
            input.replace('\n', " ")
        );
    }
    if let Some(c) = body["next_cursor"].as_str() {
        outln!("more: {}", next_page(std::env::args().skip(1), c));
    }
}

/// The command that prints the next page: this one as typed (its filters and `--limit`, which
/// the server needs again: a cursor is only a place in the list), with `c` for its cursor. The
/// API key is left out (it is never printed), and so is `--json`, which prints no such line.
fn next_page(args: impl Iterator<Item = String>, c: &str) -> String {
    let mut words = vec!["orca".to_owned()];
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--cursor" | "--api-key" => {
                args.next();
            }
            "--json" => {}
            _ if arg.starts_with("--cursor=") || arg.starts_with("--api-key=") => {}
            _ => words.push(shell_word(&arg)),
        }
    }
    words.extend(["--cursor".to_owned(), shell_word(c)]);
    words.join(" ")
}

/// `word` as a POSIX shell reads it back: as is when it is plain, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=+,@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// `n` and its noun, plural unless `n` is 1: "1 step", "2 steps".
fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// A run's `step_counts` as words: "5 completed, 1 failed" ("-" when it has none).
fn step_counts(counts: &Value) -> String {
    let Some(counts) = counts.as_object().filter(|c| !c.is_empty()) else {
        return "-".to_owned();
    };
    let parts: Vec<String> = (counts.iter())
        .filter(|(_, n)| n.as_u64() != Some(0))
        .map(|(status, n)| format!("{n} {status}"))
        .collect();
    match parts.is_empty() {
        true => "-".to_owned(),
        false => parts.join(", "),
    }
}

/// A run's status as lists show it: with its completion in brackets when that is not the one
/// its status always has (`succeeded (partial)`: only part of the task was done).
fn status_shown(r: &Value) -> String {
    let status = r["status"].as_str().unwrap_or("");
    let usual = match status {
        "succeeded" => "success",
        "failed" => "error",
        "timed_out" => "timeout",
        "cancelled" => "cancelled",
        _ => return status.to_owned(),
    };
    match r["completion"].as_str() {
        Some(completion) if completion != usual => format!("{status} ({completion})"),
        _ => status.to_owned(),
    }
}

fn print_run(r: &Value) {
    let field = |name: &str| match &r[name] {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    for name in [
        "id",
        "status",
        "completion",
        "orchestration",
        "created_at",
        "started_at",
        "finished_at",
    ] {
        outln!("{name:<14}{}", field(name));
        if name == "completion" {
            outln!("{:<14}{}", "reason", field("completion_reason"));
            outln!("{:<14}{}", "steps", step_counts(&r["step_counts"]));
        }
    }
    let u = |name: &str| r["usage"][name].as_u64().unwrap_or(0);
    outln!(
        "{:<14}{} + {}, {}, {}",
        "usage",
        count(u("prompt_tokens"), "prompt token"),
        count(u("completion_tokens"), "completion token"),
        count(u("llm_calls"), "LLM call"),
        count(u("tool_calls"), "tool call")
    );
    outln!("{:<14}{}", "input", field("input"));
    outln!("{:<14}{}", "output", field("output"));
    if !r["error"].is_null() {
        outln!("{:<14}{}", "error", field("error"));
    }
    if let Some(parent) = r["parent"]["run_id"].as_str() {
        let step = r["parent"]["before_step"].as_str();
        let before = step
            .map(|s| format!(", before step {s}"))
            .unwrap_or_default();
        outln!(
            "{:<14}{parent} (checkpoint {}{before})",
            "forked from",
            r["parent"]["checkpoint"]
        );
    }
    if let Some(schedule) = r["schedule"]["id"].as_str() {
        outln!(
            "{:<14}{schedule} (tick {})",
            "schedule",
            r["schedule"]["fire_at"].as_str().unwrap_or("-")
        );
    }
    if let Some(definitions) = definitions::run_definitions(r) {
        outln!("{:<14}{definitions}", "definitions");
    }
    let w = &r["webhook"];
    if let Some(state) = w["state"].as_str() {
        let attempts = w["attempts"].as_array().map_or(0, Vec::len) as u64;
        let url = w["url"].as_str().unwrap_or("");
        outln!(
            "{:<14}{state} after {} → {url}",
            "webhook",
            count(attempts, "attempt")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_page_is_this_command_with_the_cursor_and_without_the_key() {
        let args = |line: &[&str]| line.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let typed = args(&[
            "runs",
            "list",
            "--status",
            "failed",
            "--metadata",
            "who=it's me",
            "--cursor",
            "old",
            "--api-key",
            "k1",
            "--api-key=k2",
            "--cursor=older",
            "--limit",
            "3",
        ]);
        assert_eq!(
            next_page(typed.into_iter(), "new"),
            r"orca runs list --status failed --metadata 'who=it'\''s me' --limit 3 --cursor new"
        );
        assert_eq!(
            next_page(args(&["runs", "list"]).into_iter(), "c"),
            "orca runs list --cursor c"
        );
    }

    #[test]
    fn counts_are_singular_for_one() {
        assert_eq!(
            [0, 1, 2].map(|n| count(n, "step")),
            ["0 steps", "1 step", "2 steps"]
        );
    }
}
