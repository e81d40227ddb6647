//! `orca sessions …`: the client side of `/v1/sessions` and `/v1/sessions/{id}`.

use std::process::ExitCode;

use clap::Subcommand;
use serde_json::{Map, Value, json};

use super::client::Error;
use super::{ClientArgs, connect, count, encode, key_values, show};

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// Sessions, the one with the newest run first, a page at a time (`--cursor` for the next).
    List {
        /// How many sessions per page (at most 200; the server's default is 50).
        #[arg(long)]
        limit: Option<u32>,
        /// The page after the one that printed this cursor.
        #[arg(long)]
        cursor: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// A session: its variables and its runs.
    Show {
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Set session variables, NAME=VALUE (a value that parses as JSON is that JSON).
    Set {
        id: String,
        #[arg(required = true, value_name = "NAME=VALUE")]
        variables: Vec<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Delete session variables by name.
    Unset {
        id: String,
        #[arg(required = true, value_name = "NAME")]
        names: Vec<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// The turns the session's next run is given, oldest first.
    History {
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Delete a session with its variables and runs (its runs must have finished).
    Delete {
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
}

fn path(id: &str) -> String {
    format!("/v1/sessions/{}", encode(id))
}

pub async fn sessions(command: SessionsCommand) -> Result<ExitCode, Error> {
    match command {
        SessionsCommand::List {
            limit,
            cursor,
            client,
        } => {
            let mut query = form_urlencoded::Serializer::new(String::new());
            if let Some(n) = limit {
                query.append_pair("limit", &n.to_string());
            }
            if let Some(c) = &cursor {
                query.append_pair("cursor", c);
            }
            let query = query.finish();
            let path = match query.as_str() {
                "" => "/v1/sessions".to_owned(),
                q => format!("/v1/sessions?{q}"),
            };
            let body = connect(&client)?.get(&path).await?;
            show(client.json, &body, |b| print_sessions(b, limit))
        }
        SessionsCommand::Show { id, client } => {
            let body = connect(&client)?.get(&path(&id)).await?;
            show(client.json, &body, print_session)
        }
        SessionsCommand::Set {
            id,
            variables,
            client,
        } => {
            let values: Map<String, Value> = key_values(&variables)?
                .into_iter()
                .map(|(k, v)| {
                    let value = serde_json::from_str(&v).unwrap_or(Value::String(v));
                    (k, value)
                })
                .collect();
            let body = connect(&client)?
                .patch(&path(&id), &json!({ "variables": values }))
                .await?;
            show(client.json, &body, print_session)
        }
        SessionsCommand::Unset { id, names, client } => {
            let values: Map<String, Value> = names.into_iter().map(|n| (n, Value::Null)).collect();
            let body = connect(&client)?
                .patch(&path(&id), &json!({ "variables": values }))
                .await?;
            show(client.json, &body, print_session)
        }
        SessionsCommand::History { id, client } => {
            let body = connect(&client)?
                .get(&format!("{}/history", path(&id)))
                .await?;
            show(client.json, &body, print_history)
        }
        SessionsCommand::Delete { id, client } => {
            connect(&client)?.delete(&path(&id)).await?;
            show(client.json, &json!({ "deleted": id }), |_| {
                outln!("session {id} deleted")
            })
        }
    }
}

/// One line a session: its id, runs, variables, and its newest run (time, status, id).
fn print_sessions(body: &Value, limit: Option<u32>) {
    let sessions = body["sessions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if sessions.is_empty() {
        outln!("no sessions");
        return;
    }
    let width = sessions
        .iter()
        .filter_map(|s| s["id"].as_str())
        .map(|id| id.chars().count())
        .fold("SESSION".len(), usize::max);
    outln!(
        "{:<width$}  {:>5}  {:>4}  {:<27}  {:<19}  LAST RUN",
        "SESSION",
        "RUNS",
        "VARS",
        "LAST RUN AT",
        "STATUS"
    );
    for s in sessions {
        let last = &s["last_run"];
        outln!(
            "{:<width$}  {:>5}  {:>4}  {:<27}  {:<19}  {}",
            s["id"].as_str().unwrap_or(""),
            s["run_count"].as_u64().unwrap_or(0),
            s["variable_count"].as_u64().unwrap_or(0),
            s["last_run_at"].as_str().unwrap_or("-"),
            if last.is_null() {
                "-".to_owned()
            } else {
                super::status_shown(last)
            },
            last["id"].as_str().unwrap_or("-")
        );
    }
    if let Some(c) = body["next_cursor"].as_str() {
        let limit = limit.map_or_else(String::new, |n| format!(" --limit {n}"));
        outln!("more: orca sessions list{limit} --cursor {c}");
    }
}

fn print_session(s: &Value) {
    outln!("session   {}", s["id"].as_str().unwrap_or(""));
    let vars = s["variables"].as_object().cloned().unwrap_or_default();
    if vars.is_empty() {
        outln!("variables none");
    }
    for (name, value) in vars {
        outln!("  {name} = {value}");
    }
    outln!("runs      {}", s["run_count"].as_u64().unwrap_or(0));
    for r in s["runs"].as_array().into_iter().flatten() {
        outln!(
            "  {}  {:<19} {}",
            r["id"].as_str().unwrap_or(""),
            super::status_shown(r),
            r["created_at"].as_str().unwrap_or("")
        );
    }
}

fn print_history(h: &Value) {
    if let Some(summary) = h["summary"]["text"].as_str() {
        let turns = h["summary"]["turns"].as_u64().unwrap_or(0);
        outln!("summary of {}: {summary}", count(turns, "earlier turn"));
    }
    let turns = h["turns"].as_array().map(Vec::as_slice).unwrap_or_default();
    if turns.is_empty() {
        outln!("no turns yet");
    }
    for t in turns {
        outln!("{}", t["run_id"].as_str().unwrap_or(""));
        outln!("  in:  {}", t["input"]);
        outln!("  out: {}", t["output"]);
    }
}
