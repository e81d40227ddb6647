//! `orca runs fork` and `orca runs replan`: time travel from the command line (a new run from
//! a checkpoint of another; a reactive run taken back to an earlier plan version).

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::{Value, json};

use super::client::{Client, Error};
use super::progress::{Mode, View};
use super::{ClientArgs, connect, follow, json_file, run_path, show};

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The run to fork.
    id: String,
    /// The checkpoint to start from (`GET /v1/runs/{id}/checkpoints`; 0: from the start).
    /// Default: the latest.
    #[arg(long, conflicts_with = "before_step")]
    checkpoint: Option<u64>,
    /// Start before this step (an id, or a nested step's path such as `outer/each[1]/ask`)
    /// had finished: it and what follows run again.
    #[arg(long, value_name = "STEP")]
    before_step: Option<String>,
    /// Another input: text, or a JSON object when it parses as one.
    #[arg(long)]
    input: Option<String>,
    /// Another plan (a JSON file, the AgentPlan schema) in place of the one at the checkpoint.
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
    /// Follow the fork's events to its end (as `orca run` does).
    #[arg(long)]
    watch: bool,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, Args)]
pub struct ReplanArgs {
    /// The reactive run.
    id: String,
    /// What you want changed; the re-planner reads it.
    #[arg(long, required_unless_present = "restore_version")]
    message: Option<String>,
    /// Go back to this earlier plan version instead of asking the re-planner.
    #[arg(long, value_name = "N")]
    restore_version: Option<u32>,
    #[command(flatten)]
    client: ClientArgs,
}

pub async fn fork(args: ForkArgs) -> Result<ExitCode, Error> {
    let mut body = json!({});
    if let Some(n) = args.checkpoint {
        body["checkpoint"] = json!(n);
    }
    if let Some(step) = &args.before_step {
        body["before_step"] = json!(step);
    }
    if let Some(text) = &args.input {
        body["input"] = match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => v,
            _ => Value::String(text.clone()),
        };
    }
    if let Some(file) = &args.plan {
        body["plan"] = json_file(file)?;
    }
    let client = connect(&args.client)?;
    let forked = client.post(&run_path(&args.id, "/fork"), &body).await?;
    let id = forked["id"].as_str().unwrap_or_default().to_owned();
    if !args.watch {
        return show(args.client.json, &forked, |f| {
            let from = &f["parent"];
            outln!(
                "run {id} forked from {} at checkpoint {}",
                from["run_id"].as_str().unwrap_or("-"),
                from["checkpoint"]
            );
        });
    }
    let stream = client.events(&id, 0).await?;
    let mut view = View::new(Mode::detect(args.client.json));
    follow(&client, stream, Some(id), &mut view).await
}

pub async fn replan(args: ReplanArgs) -> Result<ExitCode, Error> {
    let mut body = json!({});
    if let Some(message) = &args.message {
        body["message"] = json!(message);
    }
    if let Some(n) = args.restore_version {
        body["restore_version"] = json!(n);
    }
    let path = run_path(&args.id, "/replan");
    let run = connect(&args.client)?.post(&path, &body).await?;
    show(args.client.json, &run, |_| match args.restore_version {
        Some(n) => outln!("run {} goes back to plan version {n}", args.id),
        None => outln!("run {} re-plans next", args.id),
    })
}

/// The top-level steps fork `id` kept from its parent (done there, not run again): those its
/// first checkpoint holds, the parent's checkpoints folded when the fork was made. Empty when
/// that cannot be read: the progress view then counts only what the fork runs.
pub async fn kept_steps(client: &Client, id: &str) -> HashSet<String> {
    let Ok(checkpoints) = client.get(&run_path(id, "/checkpoints")).await else {
        return HashSet::new();
    };
    let first = &checkpoints[0];
    if first["id"] != 1 || first["state"]["reset"] != true {
        return HashSet::new();
    }
    let steps = first["state"]["steps"].as_object().into_iter().flatten();
    steps
        .filter(|(_, s)| s["status"] == "completed" || s["status"] == "skipped")
        .map(|(id, _)| id.clone())
        .collect()
}
