//! Definitions as code (issue 45), the client side: `orca apply DIR` and `orca export DIR`
//! (`/v1/apply`, `/v1/export`), and the version commands that `orca workflows`, `orca agents`,
//! `orca tools` and `orca functions` share (`/v1/KIND/{name}/versions|diff|labels`).
//!
//! A folder of definitions is the five kind folders of [`FOLDERS`] and their direct files
//! ending `.json`, `.yaml` or `.yml`; anything else in it (examples/ also holds programs and
//! run requests) is not read. Files are sent as text: the server parses them, so YAML needs
//! nothing here. `export` writes only paths inside its folder, whatever the server sends.
//!
//! Rendering is kept in functions that return lines, so the tests pin it from sample answers
//! without a server.

use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde::Serialize;
use serde_json::{Value, json};

use super::client::Error;
use super::{ClientArgs, connect, count, encode, show};

/// The folders of a definitions folder, one per kind the server takes, in its words.
const FOLDERS: [&str; 5] = ["workflows", "agents", "tools", "functions", "schedules"];

/// The file endings `apply` reads (and the server parses).
const EXTENSIONS: [&str; 3] = ["json", "yaml", "yml"];

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// The folder whose workflows/, agents/, tools/ and schedules/ hold the definitions.
    dir: PathBuf,
    /// Show what would change; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also delete the registered definitions that have no file here.
    #[arg(long)]
    prune: bool,
    /// Why: stored with each new version.
    #[arg(short, long)]
    message: Option<String>,
    /// Who: stored with each new version.
    #[arg(long)]
    author: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The folder to write into (created if missing); files of the same path are replaced,
    /// other files are left alone.
    dir: PathBuf,
    #[command(flatten)]
    client: ClientArgs,
}

/// The version commands of a kind of definition; `workflows` and `agents` flatten them into
/// their own commands, `tools` has only these.
#[derive(Debug, Subcommand)]
pub enum VersionsCommand {
    /// A definition's versions, newest first, with their labels.
    Versions {
        /// The definition's name.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// One version's definition (pretty JSON; `--json`: with its version fields).
    Version {
        /// The definition's name.
        name: String,
        /// A version number or a label (`latest` is the latest version).
        #[arg(value_name = "REF")]
        reference: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// What changed between two versions, as JSON Patch operations.
    Diff {
        /// The definition's name.
        name: String,
        /// The older version: a number or a label.
        from: String,
        /// The newer version: a number or a label (default: the latest).
        to: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Point a label (e.g. `production`) at a version; runs can ask for `NAME@LABEL`.
    Label {
        /// The definition's name.
        name: String,
        /// The label: lowercase letters, digits, `_ . -`, starting with a letter.
        label: String,
        /// The version number it points at.
        version: u64,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Remove a label.
    Unlabel {
        /// The definition's name.
        name: String,
        /// The label.
        label: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Delete one version (not the latest, nor one a label or an unfinished run uses).
    DeleteVersion {
        /// The definition's name.
        name: String,
        /// The version number.
        version: u64,
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// Why and by whom a `put` is made: stored with the version it creates.
#[derive(Debug, Args)]
pub struct VersionNote {
    /// Why: stored with the new version.
    #[arg(short, long)]
    message: Option<String>,
    /// Who: stored with the new version.
    #[arg(long)]
    author: Option<String>,
}

impl VersionNote {
    pub fn put_path(&self, kind: Kind, name: &str) -> String {
        let (message, author) = (self.message.as_deref(), self.author.as_deref());
        put_path(kind, name, message, author)
    }
}

/// A kind of versioned definition: its path segment and its noun are all that differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Workflow,
    Agent,
    Tool,
    Function,
}

impl Kind {
    /// The collection's path segment: `/v1/{segment}/…`.
    fn segment(self) -> &'static str {
        match self {
            Kind::Workflow => "workflows",
            Kind::Agent => "agents",
            Kind::Tool => "tools",
            Kind::Function => "functions",
        }
    }

    /// The word for one, as the server's `kind` field spells it.
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Workflow => "workflow",
            Kind::Agent => "agent",
            Kind::Tool => "tool",
            Kind::Function => "function",
        }
    }

    /// `/v1/{segment}/{name}{tail}`, the name encoded.
    fn path(self, name: &str, tail: &str) -> String {
        format!("/v1/{}/{}{tail}", self.segment(), encode(name))
    }
}

/// The path a `put` sends a definition to: the why and who of its new version ride as query
/// parameters, encoded as path segments are (`%20` for a space reads back the same in any
/// decoder, where `+` is only a space to form decoders).
fn put_path(kind: Kind, name: &str, message: Option<&str>, author: Option<&str>) -> String {
    let pairs = [("message", message), ("author", author)];
    let query: Vec<String> = (pairs.iter())
        .filter_map(|(key, value)| value.map(|v| format!("{key}={}", encode(v))))
        .collect();
    match query.is_empty() {
        true => kind.path(name, ""),
        false => format!("{}?{}", kind.path(name, ""), query.join("&")),
    }
}

/// What `put` prints: the name, and the latest version when the server says it.
pub fn registered(kind: Kind, name: &str, body: &Value) -> String {
    match body["latest_version"].as_u64() {
        Some(n) => format!("{} {name} registered (latest version v{n})", kind.noun()),
        None => format!("{} {name} registered", kind.noun()),
    }
}

pub async fn versions(kind: Kind, command: VersionsCommand) -> Result<ExitCode, Error> {
    match command {
        VersionsCommand::Versions { name, client } => {
            let body = connect(&client)?
                .get(&kind.path(&name, "/versions"))
                .await?;
            show(client.json, &body, |b| {
                for line in versions_table(b) {
                    outln!("{line}");
                }
            })
        }
        VersionsCommand::Version {
            name,
            reference,
            client,
        } => {
            let tail = format!("/versions/{}", encode(&reference));
            let body = connect(&client)?.get(&kind.path(&name, &tail)).await?;
            show(client.json, &body, |b| {
                let pretty = serde_json::to_string_pretty(&b["definition"]).unwrap_or_default();
                outln!("{pretty}");
            })
        }
        VersionsCommand::Diff {
            name,
            from,
            to,
            client,
        } => {
            let mut query = format!("/diff?from={}", encode(&from));
            if let Some(to) = &to {
                query.push_str(&format!("&to={}", encode(to)));
            }
            let body = connect(&client)?.get(&kind.path(&name, &query)).await?;
            show(client.json, &body, |b| {
                for line in diff_lines(&b["changes"]) {
                    outln!("{line}");
                }
            })
        }
        VersionsCommand::Label {
            name,
            label,
            version,
            client,
        } => {
            let tail = format!("/labels/{}", encode(&label));
            let body = connect(&client)?
                .put(&kind.path(&name, &tail), &json!({ "version": version }))
                .await?;
            show(client.json, &body, |b| {
                outln!("{}", labelled(kind, &name, b))
            })
        }
        VersionsCommand::Unlabel {
            name,
            label,
            client,
        } => {
            let tail = format!("/labels/{}", encode(&label));
            connect(&client)?.delete(&kind.path(&name, &tail)).await?;
            let body = json!({ "kind": kind.noun(), "name": name, "unlabelled": label });
            show(client.json, &body, |_| {
                outln!("label {label} removed from {} {name}", kind.noun())
            })
        }
        VersionsCommand::DeleteVersion {
            name,
            version,
            client,
        } => {
            let tail = format!("/versions/{version}");
            connect(&client)?.delete(&kind.path(&name, &tail)).await?;
            let body = json!({ "kind": kind.noun(), "name": name, "deleted_version": version });
            show(client.json, &body, |_| {
                outln!("{} {name} v{version} deleted", kind.noun())
            })
        }
    }
}

/// `orca apply DIR`: the folder's definitions in one request, then what changed.
pub async fn apply(args: ApplyArgs) -> Result<ExitCode, Error> {
    let body = ApplyBody {
        files: bundle(&args.dir)?,
        dry_run: args.dry_run,
        prune: args.prune,
        message: args.message,
        author: args.author,
    };
    let body = serde_json::to_value(&body)
        .map_err(|e| Error::Usage(format!("encoding the request: {e}")))?;
    // A 422 lists every file's problems: `Error`'s rendering prints each pointer and message.
    let answer = connect(&args.client)?.post("/v1/apply", &body).await?;
    show(args.client.json, &answer, |a| {
        for line in apply_lines(a) {
            outln!("{line}");
        }
    })
}

/// `orca export DIR`: the tenant's definitions written as files `apply` takes back.
pub async fn export(args: ExportArgs) -> Result<ExitCode, Error> {
    let body = connect(&args.client)?.get("/v1/export").await?;
    let written = write_export(&args.dir, &body)?;
    let dir = args.dir.display().to_string();
    let answer = json!({ "dir": dir, "files": written });
    show(args.client.json, &answer, |_| {
        outln!("wrote {} to {dir}", count(written.len() as u64, "file"))
    })
}

/// The body of `POST /v1/apply`.
#[derive(Debug, Serialize)]
struct ApplyBody {
    files: Vec<File>,
    dry_run: bool,
    prune: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    author: Option<String>,
}

/// One definition file: its path from the folder, `/`-separated (the server reads the kind
/// from its first segment), and its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct File {
    path: String,
    content: String,
}

/// Reads `dir`'s definition files, sorted by path. A folder with none of [`FOLDERS`], or with
/// no definition file in them, is a mistake (the wrong folder, most likely: `src/` has a
/// `tools/`), not an empty set: with `--prune` it would delete everything.
fn bundle(dir: &Path) -> Result<Vec<File>, Error> {
    if !dir.is_dir() {
        return Err(Error::Usage(format!("{} is not a folder", dir.display())));
    }
    let folders: Vec<&str> = (FOLDERS.iter().copied())
        .filter(|f| dir.join(f).is_dir())
        .collect();
    if folders.is_empty() {
        return Err(Error::Usage(format!(
            "{} has none of the folders workflows/, agents/, tools/, functions/, schedules/: \
             nothing to apply",
            dir.display()
        )));
    }
    let mut files = Vec::new();
    for folder in &folders {
        let read_err = |e: std::io::Error| {
            Error::Usage(format!("reading {}: {e}", dir.join(folder).display()))
        };
        for entry in std::fs::read_dir(dir.join(folder)).map_err(read_err)? {
            let path = entry.map_err(read_err)?.path();
            if !(path.is_file() && is_definition(&path)) {
                continue;
            }
            let file_name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
                Error::Usage(format!("{} is not a UTF-8 file name", path.display()))
            })?;
            let content = std::fs::read_to_string(&path)
                .map_err(|e| Error::Usage(format!("reading {}: {e}", path.display())))?;
            files.push(File {
                path: format!("{folder}/{file_name}"),
                content,
            });
        }
    }
    if files.is_empty() {
        let looked: Vec<String> = folders.iter().map(|f| format!("{f}/")).collect();
        return Err(Error::Usage(format!(
            "{} has no .json, .yaml or .yml file in {}: nothing to apply",
            dir.display(),
            looked.join(", ")
        )));
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

/// Whether a file's name ends as a definition file's does (exactly: the server takes no
/// other spelling).
fn is_definition(path: &Path) -> bool {
    let extension = path.extension().and_then(|e| e.to_str());
    extension.is_some_and(|e| EXTENSIONS.contains(&e))
}

/// What `apply` prints: a line per change (a changed one's operations under it), then what
/// happened in all.
fn apply_lines(answer: &Value) -> Vec<String> {
    let changes = answer["changes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut lines = Vec::new();
    let mut tally = [
        ("created", 0),
        ("changed", 0),
        ("unchanged", 0),
        ("deleted", 0),
    ];
    for c in changes {
        let action = c["action"].as_str().unwrap_or("?");
        if let Some((_, n)) = tally.iter_mut().find(|(a, _)| *a == action) {
            *n += 1;
        }
        let mut line = format!(
            "{action:<7}  {} {}",
            c["kind"].as_str().unwrap_or("?"),
            c["name"].as_str().unwrap_or("?")
        );
        if let Some(v) = c["version"].as_u64() {
            // The answer has only the new version; it follows the latest, which a delete never
            // removes, so the one it replaces is the number before it.
            match action {
                "changed" if v > 1 => line.push_str(&format!("  v{} -> v{v}", v - 1)),
                _ => line.push_str(&format!("  v{v}")),
            }
        }
        if let Some(path) = c["path"].as_str() {
            line.push_str(&format!("  ({path})"));
        }
        lines.push(line);
        for op in c["changes"].as_array().into_iter().flatten() {
            lines.push(format!(
                "  {} {}",
                op["op"].as_str().unwrap_or("?"),
                op["path"].as_str().unwrap_or("")
            ));
        }
    }
    if answer["applied"] != true {
        lines.push("dry run: nothing applied".to_owned());
        return lines;
    }
    let counted: Vec<String> = (tally.iter())
        .filter(|(_, n)| *n > 0)
        .map(|(action, n)| format!("{n} {action}"))
        .collect();
    match counted.is_empty() {
        true => lines.push("applied: no definitions".to_owned()),
        false => lines.push(format!("applied: {}", counted.join(", "))),
    }
    lines
}

/// The `versions` table, newest first, the latest marked.
fn versions_table(body: &Value) -> Vec<String> {
    let mut versions: Vec<&Value> = body["versions"].as_array().into_iter().flatten().collect();
    if versions.is_empty() {
        return vec!["no versions".to_owned()];
    }
    versions.sort_by_key(|v| std::cmp::Reverse(v["version"].as_u64()));
    let latest = body["latest_version"].as_u64();
    let mut lines = vec![format!(
        "{:<12} {:<25} {:<16} {:<20} MESSAGE",
        "VERSION", "CREATED", "AUTHOR", "LABELS"
    )];
    let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    for v in versions {
        let n = v["version"].as_u64();
        let version = match n {
            Some(n) if Some(n) == latest => format!("{n} (latest)"),
            Some(n) => n.to_string(),
            None => "?".to_owned(),
        };
        let labels: Vec<&str> = (v["labels"].as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .collect();
        // Without an author, the API key that made the version says who.
        let author = text(&v["author"]).or_else(|| text(&v["key"]));
        let message = text(&v["message"]).unwrap_or_default();
        lines.push(
            format!(
                "{version:<12} {:<25} {:<16} {:<20} {}",
                v["created_at"].as_str().unwrap_or("-"),
                author.as_deref().unwrap_or("-"),
                if labels.is_empty() {
                    "-".to_owned()
                } else {
                    labels.join(", ")
                },
                message.lines().next().unwrap_or("")
            )
            .trim_end()
            .to_owned(),
        );
    }
    lines
}

/// A diff's operations one per line: `replace /steps/0/input/x: "new"`.
fn diff_lines(changes: &Value) -> Vec<String> {
    let ops = changes.as_array().map(Vec::as_slice).unwrap_or_default();
    if ops.is_empty() {
        return vec!["no changes".to_owned()];
    }
    ops.iter()
        .map(|op| {
            let mut line = format!(
                "{} {}",
                op["op"].as_str().unwrap_or("?"),
                op["path"].as_str().unwrap_or("")
            );
            if let Some(from) = op["from"].as_str() {
                line.push_str(&format!(" (from {from})"));
            }
            if let Some(value) = op.get("value") {
                line.push_str(&format!(": {value}"));
            }
            line
        })
        .collect()
}

/// What `label` prints: `label production: workflow triage v2 (was v3)`.
fn labelled(kind: Kind, name: &str, body: &Value) -> String {
    let label = body["label"].as_str().unwrap_or("?");
    let version = body["version"].as_u64().unwrap_or(0);
    let was = match body["previous"].as_u64() {
        Some(p) => format!(" (was v{p})"),
        None => String::new(),
    };
    format!("label {label}: {} {name} v{version}{was}", kind.noun())
}

/// The `definitions` a run uses, as `runs show` prints them: `workflow triage v2, agent
/// billing v1 (shared)`; `None` when it names none.
pub fn run_definitions(run: &Value) -> Option<String> {
    let list = run["definitions"].as_array().filter(|d| !d.is_empty())?;
    let shown: Vec<String> = (list.iter())
        .map(|d| {
            let shared = if d["shared"] == true { " (shared)" } else { "" };
            format!(
                "{} {} v{}{shared}",
                d["kind"].as_str().unwrap_or("?"),
                d["name"].as_str().unwrap_or("?"),
                d["version"]
            )
        })
        .collect();
    Some(shown.join(", "))
}

/// Writes an export's files under `dir`. Every path is checked before anything is written: a
/// server that sends one outside `dir` (absolute, or through `..`) gets nothing written.
/// Returns the paths written.
fn write_export(dir: &Path, body: &Value) -> Result<Vec<String>, Error> {
    let files = body["files"]
        .as_array()
        .ok_or_else(|| Error::Usage("the server's export has no `files` list".into()))?;
    let mut checked = Vec::with_capacity(files.len());
    for f in files {
        let (Some(path), Some(content)) = (f["path"].as_str(), f["content"].as_str()) else {
            return Err(Error::Usage(format!(
                "the server's export has a file without a path or content: {f}"
            )));
        };
        if !inside(path) {
            return Err(Error::Usage(format!(
                "the server's export has the path `{path}`, outside the folder: nothing written"
            )));
        }
        checked.push((path, content));
    }
    for (path, content) in &checked {
        let target = dir.join(path);
        let write_err =
            |e: std::io::Error| Error::Usage(format!("writing {}: {e}", target.display()));
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(write_err)?;
        }
        std::fs::write(&target, content).map_err(write_err)?;
    }
    Ok(checked.into_iter().map(|(p, _)| p.to_owned()).collect())
}

/// Whether a path from the server stays inside the folder it is written to: relative, and
/// only names (no `..`, no root, no drive).
fn inside(path: &str) -> bool {
    let p = Path::new(path);
    !path.is_empty()
        && !path.contains('\\')
        && (p.components()).all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        && p.components().any(|c| matches!(c, Component::Normal(_)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::StatusCode;

    /// The top-level commands as `orca` parses them.
    #[derive(Debug, clap::Parser)]
    struct Orca {
        #[command(subcommand)]
        command: crate::cli::Command,
    }

    fn parse(line: &[&str]) -> crate::cli::Command {
        use clap::Parser;
        let words = std::iter::once("orca").chain(line.iter().copied());
        Orca::try_parse_from(words).unwrap().command
    }

    #[test]
    fn the_commands_parse_for_each_kind() {
        use crate::cli::{AgentsCommand, Command, WorkflowsCommand};
        <Orca as clap::CommandFactory>::command().debug_assert();
        let Command::Workflows {
            command: WorkflowsCommand::Versions(VersionsCommand::Diff { name, from, to, .. }),
        } = parse(&["workflows", "diff", "triage", "1", "production"])
        else {
            panic!("not a workflow diff");
        };
        assert_eq!((name.as_str(), from.as_str()), ("triage", "1"));
        assert_eq!(to.as_deref(), Some("production"));
        let Command::Agents {
            command: AgentsCommand::Put { version, .. },
        } = parse(&["agents", "put", "a.json", "-m", "why", "--author", "ana"])
        else {
            panic!("not an agent put");
        };
        assert_eq!(
            version.put_path(Kind::Agent, "a"),
            "/v1/agents/a?message=why&author=ana"
        );
        assert!(matches!(
            parse(&["tools", "delete-version", "weather", "2"]),
            Command::Tools {
                command: VersionsCommand::DeleteVersion { version: 2, .. }
            }
        ));
        let Command::Apply(args) = parse(&["apply", "examples", "--dry-run", "-m", "hi"]) else {
            panic!("not an apply");
        };
        assert!(args.dry_run && !args.prune);
        assert_eq!(args.message.as_deref(), Some("hi"));
    }

    fn write(dir: &Path, path: &str, text: &str) {
        let target = dir.join(path);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(target, text).unwrap();
    }

    fn paths(files: &[File]) -> Vec<&str> {
        files.iter().map(|f| f.path.as_str()).collect()
    }

    #[test]
    fn a_bundle_is_the_kind_folders_direct_definition_files_sorted() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for (path, text) in [
            ("workflows/triage.json", "{\"steps\": []}\n"),
            ("workflows/b.yaml", "steps: []\n"),
            ("workflows/a.yml", "steps: []\n"),
            ("workflows/notes.txt", "not a definition"),
            ("workflows/README.JSON", "{}"), // the server takes only these spellings
            ("workflows/nested/deep.json", "{}"),
            ("agents/billing.json", "{}"),
            ("tools/weather.yaml", "url: x\n"),
            ("schedules/nightly.json", "{}"),
            ("runs/request.json", "{}"),
            ("bench.rs", "fn main() {}"),
            ("top.json", "{}"),
        ] {
            write(d, path, text);
        }
        let files = bundle(d).unwrap();
        assert_eq!(
            paths(&files),
            [
                "agents/billing.json",
                "schedules/nightly.json",
                "tools/weather.yaml",
                "workflows/a.yml",
                "workflows/b.yaml",
                "workflows/triage.json",
            ]
        );
        assert_eq!(files[5].content, "{\"steps\": []}\n");
    }

    #[test]
    fn a_folder_without_any_kind_folder_is_a_usage_error() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "runs/a.json", "{}");
        write(dir.path(), "workflows", "a file, not a folder");
        let Err(Error::Usage(why)) = bundle(dir.path()) else {
            panic!("expected a usage error");
        };
        assert!(
            why.contains("none of the folders workflows/, agents/, tools/, functions/, schedules/")
        );
        let missing = dir.path().join("nowhere");
        assert!(matches!(bundle(&missing), Err(Error::Usage(_))));
    }

    #[test]
    fn kind_folders_without_definition_files_are_a_usage_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("agents")).unwrap();
        write(dir.path(), "tools/mod.rs", "mod http;");
        let Err(Error::Usage(why)) = bundle(dir.path()) else {
            panic!("expected a usage error");
        };
        assert!(
            why.ends_with("has no .json, .yaml or .yml file in agents/, tools/: nothing to apply")
        );
    }

    #[test]
    fn the_examples_folder_bundles_only_its_definitions() {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
        let files = bundle(&examples).unwrap();
        assert!(paths(&files).contains(&"agents/billing.json"));
        assert!(files.iter().all(|f| {
            FOLDERS.iter().any(|k| f.path.starts_with(&format!("{k}/")))
                && f.path.matches('/').count() == 1
        }));
    }

    #[test]
    fn the_apply_body_carries_the_flags_and_leaves_out_what_was_not_given() {
        let files = vec![File {
            path: "workflows/x.json".into(),
            content: "{}".into(),
        }];
        let body = ApplyBody {
            files: files.clone(),
            dry_run: true,
            prune: false,
            message: Some("why".into()),
            author: None,
        };
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({"files": [{"path": "workflows/x.json", "content": "{}"}],
                   "dry_run": true, "prune": false, "message": "why"})
        );
    }

    #[test]
    fn apply_prints_each_change_then_the_tally() {
        let answer = json!({"applied": true, "changes": [
            {"kind": "workflow", "name": "triage", "path": "workflows/triage.json",
             "action": "created", "version": 1, "changes": null},
            {"kind": "agent", "name": "billing", "path": "agents/billing.json",
             "action": "changed", "version": 3, "changes": [
                {"op": "replace", "path": "/instructions", "value": "new"},
                {"op": "add", "path": "/tools/1", "value": "web.fetch"}]},
            {"kind": "tool", "name": "weather", "path": "tools/weather.yaml",
             "action": "unchanged", "version": 4, "changes": []},
            {"kind": "schedule", "name": "nightly", "path": null,
             "action": "deleted", "version": null, "changes": null}
        ]});
        assert_eq!(
            apply_lines(&answer),
            [
                "created  workflow triage  v1  (workflows/triage.json)",
                "changed  agent billing  v2 -> v3  (agents/billing.json)",
                "  replace /instructions",
                "  add /tools/1",
                "unchanged  tool weather  v4  (tools/weather.yaml)",
                "deleted  schedule nightly",
                "applied: 1 created, 1 changed, 1 unchanged, 1 deleted",
            ]
        );
    }

    #[test]
    fn a_dry_run_says_nothing_was_applied() {
        let answer = json!({"applied": false, "changes": [
            {"kind": "workflow", "name": "triage", "path": "workflows/triage.json",
             "action": "unchanged", "version": 2, "changes": null}]});
        assert_eq!(
            apply_lines(&answer),
            [
                "unchanged  workflow triage  v2  (workflows/triage.json)",
                "dry run: nothing applied",
            ]
        );
        let nothing = json!({"applied": true, "changes": []});
        assert_eq!(apply_lines(&nothing), ["applied: no definitions"]);
    }

    #[test]
    fn a_refused_apply_prints_every_problem() {
        let body = json!({"title": "Validation failed", "status": 422,
            "code": "validation_failed", "detail": "the files have 2 problems",
            "errors": [
                {"pointer": "/files/0/content", "message": "workflows/a.json: not valid JSON"},
                {"pointer": "/files/2/content/steps/0", "message": "agents/b.yaml: unknown tool"}]});
        let e = Error::Status {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            body,
        };
        let text = e.to_string();
        assert!(text.contains("\n  /files/0/content: workflows/a.json: not valid JSON"));
        assert!(text.contains("\n  /files/2/content/steps/0: agents/b.yaml: unknown tool"));
    }

    #[test]
    fn the_versions_table_is_newest_first_with_the_latest_marked() {
        let body = json!({"name": "triage", "kind": "workflow", "latest_version": 3,
            "labels": {"production": 2},
            "versions": [
                {"version": 2, "digest": "sha256:b", "author": null, "key": "ci",
                 "message": "tighter prompt\nsecond line", "created_at": "2025-01-02T00:00:00Z",
                 "labels": ["production", "canary"]},
                {"version": 3, "digest": "sha256:c", "author": "ana", "key": null,
                 "message": null, "created_at": "2025-01-03T00:00:00Z", "labels": []},
                {"version": 1, "digest": "sha256:a", "author": null, "key": null,
                 "message": "first", "created_at": "2025-01-01T00:00:00Z", "labels": []}]});
        let table = versions_table(&body);
        let want = [
            "VERSION      CREATED                   AUTHOR           LABELS               MESSAGE",
            "3 (latest)   2025-01-03T00:00:00Z      ana              -",
            "2            2025-01-02T00:00:00Z      ci               production, canary   tighter prompt",
            "1            2025-01-01T00:00:00Z      -                -                    first",
        ];
        assert_eq!(table, want);
        assert_eq!(versions_table(&json!({"versions": []})), ["no versions"]);
    }

    #[test]
    fn a_diff_prints_one_operation_a_line_with_compact_values() {
        let changes = json!([
            {"op": "replace", "path": "/steps/0/input/x", "value": {"a": [1, 2]}},
            {"op": "remove", "path": "/steps/1"},
            {"op": "add", "path": "/description", "value": "new text"},
            {"op": "add", "path": "/retries", "value": null}
        ]);
        assert_eq!(
            diff_lines(&changes),
            [
                r#"replace /steps/0/input/x: {"a":[1,2]}"#,
                "remove /steps/1",
                r#"add /description: "new text""#,
                "add /retries: null",
            ]
        );
        assert_eq!(diff_lines(&json!([])), ["no changes"]);
    }

    #[test]
    fn a_label_says_where_it_pointed_before() {
        let moved = json!({"label": "production", "version": 2, "previous": 3,
            "updated_at": "2025-01-03T00:00:00Z"});
        assert_eq!(
            labelled(Kind::Workflow, "triage", &moved),
            "label production: workflow triage v2 (was v3)"
        );
        let new = json!({"label": "canary", "version": 1, "previous": null});
        assert_eq!(
            labelled(Kind::Tool, "weather", &new),
            "label canary: tool weather v1"
        );
    }

    #[test]
    fn a_put_sends_message_and_author_encoded() {
        assert_eq!(
            put_path(Kind::Agent, "billing", None, None),
            "/v1/agents/billing"
        );
        assert_eq!(
            put_path(
                Kind::Workflow,
                "tri age",
                Some("fix: a+b & c"),
                Some("Ana B")
            ),
            "/v1/workflows/tri%20age?message=fix%3A%20a%2Bb%20%26%20c&author=Ana%20B"
        );
        assert_eq!(
            put_path(Kind::Tool, "w", None, Some("ana")),
            "/v1/tools/w?author=ana"
        );
        assert_eq!(
            registered(Kind::Agent, "billing", &json!({"latest_version": 4})),
            "agent billing registered (latest version v4)"
        );
    }

    #[test]
    fn a_run_lists_the_definitions_it_uses() {
        let run = json!({"definitions": [
            {"kind": "workflow", "name": "triage", "version": 2, "digest": "sha256:a", "shared": false},
            {"kind": "agent", "name": "billing", "version": 1, "digest": "sha256:b", "shared": true}]});
        assert_eq!(
            run_definitions(&run).as_deref(),
            Some("workflow triage v2, agent billing v1 (shared)")
        );
        assert_eq!(run_definitions(&json!({"definitions": []})), None);
        assert_eq!(run_definitions(&json!({})), None);
    }

    #[test]
    fn an_export_writes_its_files_and_leaves_others() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(d, "workflows/triage.json", "old");
        write(d, "workflows/mine.json", "kept");
        let body = json!({"files": [
            {"path": "workflows/triage.json", "content": "{\n  \"steps\": []\n}\n"},
            {"path": "agents/billing.json", "content": "{}\n"}]});
        let written = write_export(d, &body).unwrap();
        assert_eq!(written, ["workflows/triage.json", "agents/billing.json"]);
        let read = |p: &str| std::fs::read_to_string(d.join(p)).unwrap();
        assert_eq!(read("workflows/triage.json"), "{\n  \"steps\": []\n}\n");
        assert_eq!(read("agents/billing.json"), "{}\n");
        assert_eq!(read("workflows/mine.json"), "kept");
        // What export writes, apply reads back.
        assert_eq!(bundle(d).unwrap().len(), 3);
    }

    #[test]
    fn an_export_outside_the_folder_writes_nothing() {
        for hostile in [
            "/etc/passwd",
            "../escape.json",
            "workflows/../../escape.json",
            "workflows\\..\\x.json",
            "",
            ".",
        ] {
            let dir = tempfile::tempdir().unwrap();
            let body = json!({"files": [
                {"path": "workflows/fine.json", "content": "{}"},
                {"path": hostile, "content": "{}"}]});
            let result = write_export(dir.path(), &body);
            assert!(
                matches!(result, Err(Error::Usage(_))),
                "{hostile:?} was accepted"
            );
            assert!(
                !dir.path().join("workflows").exists(),
                "{hostile:?}: something was written"
            );
        }
        assert!(inside("workflows/triage.json"));
        assert!(inside("./agents/a.json"));
    }
}
