//! `orca functions …`: the named LLM functions plans call. `list` and `show` cover the
//! configured ones and the tenant's own; `put` and `delete` the tenant's own (declared
//! through the API), whose versions, diffs and labels are [`definitions`]' commands.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::json;

use super::client::Error;
use super::definitions::{self, Kind, VersionNote, VersionsCommand};
use super::{ClientArgs, connect, definition_file, encode, show};

#[derive(Debug, Subcommand)]
pub enum FunctionsCommand {
    /// Declare (or replace) one of your LLM functions from a JSON file: `prompt` (a `{{ }}`
    /// template over `input`), optional `description`, `system`, `model`, `output_schema`.
    Put {
        /// The function's JSON file.
        file: PathBuf,
        /// The name to declare it under (default: the file's `name`, else the file stem).
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        version: VersionNote,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Every function your plans may call: the configured ones and your own.
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// One function with its prompt (and its latest version, if it is your own).
    Show {
        /// The function's name.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Remove one of your functions with its versions.
    Delete {
        /// The function's name.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    #[command(flatten)]
    Versions(VersionsCommand),
}

pub async fn functions(command: FunctionsCommand) -> Result<ExitCode, Error> {
    let kind = Kind::Function;
    match command {
        FunctionsCommand::Put {
            file,
            name,
            version,
            client,
        } => {
            let (name, definition) = definition_file(&file, name)?;
            let path = version.put_path(kind, &name);
            let body = connect(&client)?.put(&path, &definition).await?;
            show(client.json, &body, |b| {
                outln!("{}", definitions::registered(kind, &name, b))
            })
        }
        FunctionsCommand::List { client } => {
            let body = connect(&client)?.get("/v1/functions").await?;
            show(client.json, &body, |body| {
                outln!("{:<24} {:<9} DESCRIPTION", "NAME", "FROM");
                for f in body.as_array().into_iter().flatten() {
                    let from = match (f["declared"] == true, f["builtin"] == true) {
                        (true, _) => "yours",
                        (false, true) => "built-in",
                        (false, false) => "config",
                    };
                    let name = f["name"].as_str().unwrap_or("");
                    let description = f["description"].as_str().unwrap_or("");
                    outln!("{name:<24} {from:<9} {description}");
                }
            })
        }
        FunctionsCommand::Show { name, client } => {
            let path = format!("/v1/functions/{}", encode(&name));
            let body = connect(&client)?.get(&path).await?;
            show(client.json, &body, |body| {
                outln!("{}", serde_json::to_string_pretty(body).unwrap_or_default())
            })
        }
        FunctionsCommand::Delete { name, client } => {
            let path = format!("/v1/functions/{}", encode(&name));
            connect(&client)?.delete(&path).await?;
            show(client.json, &json!({ "deleted": name }), |_| {
                outln!("function {name} deleted")
            })
        }
        FunctionsCommand::Versions(command) => definitions::versions(kind, command).await,
    }
}
