//! `orca schedules …`: the client side of `/v1/schedules`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::{Map, Value, json};

use super::client::Error;
use super::{ClientArgs, connect, count, encode, json_file, show};

#[derive(Debug, Subcommand)]
pub enum SchedulesCommand {
    /// Create a schedule that starts a run on each tick.
    Create {
        /// The run's input as text (a `simple` or `auto` run); or give `--request`.
        input: Option<String>,
        /// The whole run body to start (the JSON of `POST /v1/runs`).
        #[arg(long, value_name = "FILE")]
        request: Option<PathBuf>,
        /// A cron expression: five fields, or six with seconds first (quote it).
        #[arg(
            long,
            conflicts_with = "every_ms",
            required_unless_present = "every_ms"
        )]
        cron: Option<String>,
        /// The IANA time zone the cron expression is read in (default UTC).
        #[arg(long, requires = "cron")]
        timezone: Option<String>,
        /// An interval in milliseconds instead of a cron expression (at least 1000).
        #[arg(long, value_name = "MS")]
        every_ms: Option<u64>,
        /// A name to tell it by.
        #[arg(long)]
        name: Option<String>,
        /// What a tick missed while the servers were down does.
        #[arg(long, value_parser = ["skip", "catch_up_one"])]
        missed: Option<String>,
        /// Create it disabled.
        #[arg(long)]
        disabled: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// The caller's schedules with their next ticks.
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// One schedule: its timing, its next ticks and the runs its latest ticks started.
    Show {
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Let a schedule fire again (its ticks count from now).
    Enable {
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Stop a schedule firing, keeping it.
    Disable {
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Delete a schedule (the runs it started stay).
    Delete {
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
}

fn path(id: &str) -> String {
    format!("/v1/schedules/{}", encode(id))
}

pub async fn schedules(command: SchedulesCommand) -> Result<ExitCode, Error> {
    match command {
        SchedulesCommand::Create {
            input,
            request,
            cron,
            timezone,
            every_ms,
            name,
            missed,
            disabled,
            client,
        } => {
            let timing = Timing {
                cron,
                timezone,
                every_ms,
            };
            let mut body = create_body(input, request, timing, name, missed)?;
            if disabled {
                body["enabled"] = json!(false);
            }
            let created = connect(&client)?.post("/v1/schedules", &body).await?;
            show(client.json, &created, print_schedule)
        }
        SchedulesCommand::List { client } => {
            let body = connect(&client)?.get("/v1/schedules").await?;
            show(client.json, &body, print_list)
        }
        SchedulesCommand::Show { id, client } => {
            let c = connect(&client)?;
            let mut body = c.get(&path(&id)).await?;
            body["fires"] = c.get(&format!("{}/fires", path(&id))).await?["fires"].take();
            show(client.json, &body, |s| {
                print_schedule(s);
                print_fires(&s["fires"]);
            })
        }
        SchedulesCommand::Enable { id, client } => switch(&id, true, &client).await,
        SchedulesCommand::Disable { id, client } => switch(&id, false, &client).await,
        SchedulesCommand::Delete { id, client } => {
            connect(&client)?.delete(&path(&id)).await?;
            show(client.json, &json!({ "deleted": id }), |_| {
                outln!("schedule {id} deleted")
            })
        }
    }
}

/// Enables or disables a schedule.
async fn switch(id: &str, enabled: bool, client: &ClientArgs) -> Result<ExitCode, Error> {
    let body = connect(client)?
        .patch(&path(id), &json!({ "enabled": enabled }))
        .await?;
    show(client.json, &body, print_schedule)
}

/// The timing flags of `create`.
struct Timing {
    cron: Option<String>,
    timezone: Option<String>,
    every_ms: Option<u64>,
}

fn create_body(
    input: Option<String>,
    request: Option<PathBuf>,
    Timing {
        cron,
        timezone,
        every_ms,
    }: Timing,
    name: Option<String>,
    missed: Option<String>,
) -> Result<Value, Error> {
    let mut run = match &request {
        Some(file) => json_file(file)?,
        None => json!({}),
    };
    if let Some(text) = input {
        run["input"] = Value::String(text);
    }
    if run.get("input").is_none() {
        return Err(Error::Usage(
            "give the run's input, or a --request file with one".into(),
        ));
    }
    let mut body = Map::new();
    let members = [
        ("name", name.map(Value::String)),
        ("cron", cron.map(Value::String)),
        ("timezone", timezone.map(Value::String)),
        ("interval_ms", every_ms.map(Value::from)),
        ("missed", missed.map(Value::String)),
    ];
    for (key, value) in members {
        if let Some(v) = value {
            body.insert(key.into(), v);
        }
    }
    body.insert("run".into(), run);
    Ok(Value::Object(body))
}

fn timing(s: &Value) -> String {
    match (s["cron"].as_str(), s["interval_ms"].as_u64()) {
        (Some(cron), _) => format!("cron `{cron}` {}", s["timezone"].as_str().unwrap_or("UTC")),
        (None, Some(ms)) => format!("every {ms} ms"),
        _ => "-".into(),
    }
}

fn print_list(body: &Value) {
    let list = body["schedules"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if list.is_empty() {
        outln!("no schedules");
        return;
    }
    outln!(
        "{:<36}  {:<8} {:<28} {:<6} NAME / TIMING",
        "ID",
        "ENABLED",
        "NEXT",
        "FIRED"
    );
    for s in list {
        outln!(
            "{:<36}  {:<8} {:<28} {:<6} {} ({})",
            s["id"].as_str().unwrap_or(""),
            if s["enabled"] == true { "yes" } else { "no" },
            s["next_fire_at"].as_str().unwrap_or("-"),
            s["fire_count"].as_u64().unwrap_or(0),
            s["name"].as_str().unwrap_or("-"),
            timing(s)
        );
    }
}

fn print_schedule(s: &Value) {
    outln!("schedule  {}", s["id"].as_str().unwrap_or(""));
    if let Some(name) = s["name"].as_str() {
        outln!("name      {name}");
    }
    outln!("timing    {}", timing(s));
    outln!(
        "enabled   {}   missed ticks: {}   fired {}",
        if s["enabled"] == true { "yes" } else { "no" },
        s["missed"].as_str().unwrap_or("skip"),
        count(s["fire_count"].as_u64().unwrap_or(0), "time")
    );
    for (i, t) in s["next_fire_times"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let label = if i == 0 { "next" } else { "" };
        outln!("{label:<10}{}", t.as_str().unwrap_or(""));
    }
    if let Some(run) = s["last_run_id"].as_str() {
        outln!(
            "last run  {run} (tick {})",
            s["last_fire_at"].as_str().unwrap_or("-")
        );
    }
}

fn print_fires(fires: &Value) {
    let fires = fires.as_array().map(Vec::as_slice).unwrap_or_default();
    if fires.is_empty() {
        return;
    }
    outln!("\n{:<28} RUN", "TICK");
    for f in fires {
        let outcome = match (f["run_id"].as_str(), f["error"].as_str()) {
            (Some(run), _) => run.to_owned(),
            (None, Some(error)) => format!("not started: {error}"),
            _ => "-".into(),
        };
        outln!("{:<28} {outcome}", f["fire_at"].as_str().unwrap_or(""));
    }
}
