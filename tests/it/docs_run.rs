//! The README and the pages of docs/ work as printed: their shell blocks run, in order, with
//! bash against the real `orca serve` (offline provider), and where a page shows what a block
//! prints, the block prints that.
//!
//! The conventions the pages follow (README.md's Development section says them too):
//!
//! - A ` ```sh ` block runs. ` ```sh norun ` marks one that must not run here (cargo, docker,
//!   apt-get, PostgreSQL, a model provider); markdown renderers show only `sh`. The tools the
//!   blocks use besides `orca` are curl, jq and python3.
//! - A ` ```text ` block right after a ` ```sh ` block (only blank lines between) is what that
//!   block prints, standard output and standard error together. `…` stands for any text within
//!   a line; a line that is only `…` stands for any number of lines.
//! - Blocks of one page run in one bash, one after another, so a variable set in one block is
//!   there in the next, as in one terminal (`set -eu`: a failing command or an unset variable
//!   stops the page). Every page starts with a fresh `orca serve` in an empty directory holding
//!   the repository's `examples/` and `config/`; a line `… orca serve …` in a block starts it
//!   again with what that line says, as if in another terminal.
//! - `localhost:8080` and `127.0.0.1:8080` become the test server's address, which `orca`
//!   (on the PATH) finds through `ORCA_URL` and `orca serve` binds through `ORCA_BIND`;
//!   `127.0.0.1:9999` (a local webhook receiver) becomes another free port.
//! - A block that prints a problem document (`"type":"…","title":…`) fails unless the page
//!   shows that output.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// How long one page's blocks may take together.
const PAGE_PATIENCE: Duration = Duration::from_secs(120);

/// Where a block's output starts in the combined output.
const MARK: &str = "@@orca-docs-block@@";

#[derive(Debug)]
struct Block {
    /// The line of its opening fence, 1-based.
    line: usize,
    code: String,
    /// What the page shows it prints.
    expected: Option<String>,
}

/// The runnable shell blocks of a markdown page, each with the output the page shows for it.
fn blocks(markdown: &str) -> Vec<Block> {
    let mut found: Vec<Block> = Vec::new();
    let mut lines = markdown.lines().enumerate();
    // Set after a runnable block closes: its index, while only blank lines follow.
    let mut awaiting_output: Option<usize> = None;
    while let Some((n, line)) = lines.next() {
        let Some(info) = line.trim_start().strip_prefix("```") else {
            if !line.trim().is_empty() {
                awaiting_output = None;
            }
            continue;
        };
        let fence_indent = line.len() - line.trim_start().len();
        let mut body = String::new();
        for (_, l) in lines.by_ref() {
            if l.trim_start().starts_with("```") {
                break;
            }
            body.push_str(l.get(fence_indent..).unwrap_or(l.trim_start()));
            body.push('\n');
        }
        let words: Vec<&str> = info.split_whitespace().collect();
        match (words.first().copied(), awaiting_output.take()) {
            (Some("text"), Some(i)) => found[i].expected = Some(body),
            (Some("sh"), _) if !words.contains(&"norun") => {
                found.push(Block {
                    line: n + 1,
                    code: body,
                    expected: None,
                });
                awaiting_output = Some(found.len() - 1);
            }
            _ => {}
        }
    }
    found
}

/// `text` with the documented addresses replaced by the test's: the server's (`addr`) and a
/// local webhook receiver's (`hook`).
fn at(text: &str, addr: &str, hook: &str) -> String {
    text.replace("localhost:8080", addr)
        .replace("127.0.0.1:8080", addr)
        .replace("127.0.0.1:9999", hook)
}

/// Two loopback addresses for each of `n` pages, all different: each port is held until all
/// are chosen.
fn addresses(n: usize) -> Vec<(String, String)> {
    let held: Vec<std::net::TcpListener> = (0..2 * n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addr = |l: &std::net::TcpListener| l.local_addr().unwrap().to_string();
    held.chunks(2).map(|p| (addr(&p[0]), addr(&p[1]))).collect()
}

/// A line of a block that starts the server (`ENV=… orca serve …  # comment`), rewritten to
/// stop the running one and start this one in the background, then wait until it is ready.
fn serve_line(line: &str) -> Option<String> {
    let code = line.split(" #").next().unwrap_or(line).trim_end();
    let words: Vec<&str> = code.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "orca")?;
    let starts = words.get(at + 1) == Some(&"serve")
        && words[..at].iter().all(|w| w.contains('='))
        && !code.contains(['|', ';', '&']);
    starts.then(|| format!("orca_docs_stop; {code} >>serve.log 2>&1 & orca_docs_ready $!"))
}

/// The bash script that runs `blocks` one after another, marking where each one's output
/// starts.
fn script(blocks: &[Block]) -> String {
    let mut s = String::from(
        r#"exec 2>&1
set -eu
ORCA_DOCS_SERVER=
orca_docs_stop() {
    if [ -n "$ORCA_DOCS_SERVER" ]; then
        kill "$ORCA_DOCS_SERVER" 2>/dev/null || true
        for _ in $(seq 1 600); do
            kill -0 "$ORCA_DOCS_SERVER" 2>/dev/null || return 0
            sleep 0.05
        done
        echo "orca serve did not stop"; return 1
    fi
}
# The server runs "in another terminal": not a job of this shell, so a block's `wait` does not
# wait for it.
orca_docs_started=0
orca_docs_ready() {
    ORCA_DOCS_SERVER=$1
    disown "$1"
    orca_docs_started=$((orca_docs_started + 1))
    for _ in $(seq 1 600); do
        # Ready once this server printed its address (so it is the one listening there).
        if [ "$(grep -c '^orca console:' serve.log)" -ge "$orca_docs_started" ] \
            && curl -s -o /dev/null "$ORCA_URL/readyz"; then return 0; fi
        kill -0 "$ORCA_DOCS_SERVER" 2>/dev/null || { echo "orca serve exited:"; tail -5 serve.log; return 1; }
        sleep 0.05
    done
    echo "orca serve did not become ready"; return 1
}
trap orca_docs_stop EXIT
orca serve >>serve.log 2>&1 & orca_docs_ready $!
"#,
    );
    for (i, block) in blocks.iter().enumerate() {
        s.push_str(&format!("printf '\\n{MARK}{i}\\n'\n"));
        for line in block.code.lines() {
            match serve_line(line) {
                Some(serve) => s.push_str(&serve),
                None => s.push_str(line),
            }
            s.push('\n');
        }
    }
    s.push_str(&format!("printf '\\n{MARK}end\\n'\n"));
    s
}

/// Whether `actual` is what `expected` shows, `…` standing for any text within a line and a
/// line of only `…` for any number of lines.
fn matches(expected: &[&str], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first.trim() == "…" => {
            (0..=actual.len()).any(|skip| matches(rest, &actual[skip..]))
        }
        Some((first, rest)) => actual
            .split_first()
            .is_some_and(|(line, more)| line_matches(first, line) && matches(rest, more)),
    }
}

fn line_matches(pattern: &str, line: &str) -> bool {
    let (pattern, line) = (pattern.trim_end(), line.trim_end());
    let mut parts = pattern.split('…');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = line.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

fn is_problem(output: &str) -> bool {
    output.contains("\"type\":\"") && output.contains("\"title\":") && output.contains("\"code\":")
}

/// A directory like a fresh clone's working directory, for a page's blocks to run in.
fn workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    for shipped in ["examples", "config"] {
        std::os::unix::fs::symlink(repo.join(shipped), dir.path().join(shipped)).unwrap();
    }
    dir
}

/// Runs `page`'s blocks; returns what went wrong, if anything.
async fn run_page(page: &Path, ports: (String, String)) -> Result<usize, String> {
    let markdown = std::fs::read_to_string(page).unwrap();
    let blocks = blocks(&markdown);
    if blocks.is_empty() {
        return Ok(0);
    }
    let dir = workdir();
    let (addr, hook) = ports;
    let blocks: Vec<Block> = blocks
        .into_iter()
        .map(|b| Block {
            code: at(&b.code, &addr, &hook),
            expected: b.expected.map(|e| at(&e, &addr, &hook)),
            ..b
        })
        .collect();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_orca"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Into a file, not a pipe: what a page printed before it hung is kept.
    let out_path = dir.path().join("docs-run.out");
    let out = std::fs::File::create(&out_path).unwrap();
    let mut command = tokio::process::Command::new("bash");
    command
        .arg("-c")
        .arg(script(&blocks))
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", path)
        .env("HOME", std::env::var("HOME").unwrap_or_default())
        .env("LANG", "C.UTF-8")
        .env("ORCA_URL", format!("http://{addr}"))
        .env("ORCA_BIND", &addr)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn().unwrap();
    let group = child.id().expect("running");
    let status = tokio::time::timeout(PAGE_PATIENCE, child.wait()).await;
    // Whatever is left of the page's processes (a server, a receiver) goes with it.
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .stderr(Stdio::null())
        .status();
    let serve_log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
    let stdout = String::from_utf8_lossy(&std::fs::read(&out_path).unwrap()).into_owned();
    let status = status.ok().map(|s| s.unwrap().code());
    let mut outputs: Vec<(String, String)> = Vec::new();
    for chunk in stdout.split(&format!("\n{MARK}")).skip(1) {
        let (tag, text) = chunk.split_once('\n').unwrap_or((chunk, ""));
        outputs.push((tag.to_owned(), text.trim_end().to_owned()));
    }
    let ran = outputs.iter().filter(|(tag, _)| tag != "end").count();
    let finished = outputs.last().is_some_and(|(tag, _)| tag == "end");
    if !finished {
        let (block, text) = match ran.checked_sub(1) {
            Some(i) => (&blocks[i], outputs[i].1.as_str()),
            None => (&blocks[0], stdout.as_str()),
        };
        let why = match status {
            None => format!("did not end within {PAGE_PATIENCE:?}"),
            Some(code) => format!("failed (bash exit {code:?})"),
        };
        return Err(format!(
            "{}:{}: the block {why}:\n{}\n--- it printed:\n{text}\n--- orca serve logged:\n{}",
            page.display(),
            block.line,
            block.code,
            tail(&serve_log, 20)
        ));
    }
    for (block, (_, text)) in blocks.iter().zip(&outputs) {
        let actual: Vec<&str> = text.lines().collect();
        let wrong = match &block.expected {
            Some(expected) => {
                let expected: Vec<&str> = expected.lines().collect();
                (!matches(&expected, &actual))
                    .then(|| format!("the page shows:\n{}", expected.join("\n")))
            }
            None => is_problem(text).then(|| "it printed an error the page does not show".into()),
        };
        if let Some(wrong) = wrong {
            return Err(format!(
                "{}:{}: the block\n{}\n--- printed:\n{text}\n--- but {wrong}",
                page.display(),
                block.line,
                block.code
            ));
        }
    }
    Ok(blocks.len())
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn pages() -> Vec<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    std::iter::once(repo.join("README.md"))
        .chain(docs)
        .collect()
}

#[tokio::test]
async fn every_shell_block_of_the_readme_and_docs_runs_as_printed() {
    let pages = pages();
    // The pages run side by side, each with its own server and directory.
    let runs = pages
        .iter()
        .zip(addresses(pages.len()))
        .map(|(p, a)| run_page(p, a));
    let results = futures::future::join_all(runs).await;
    let failures: Vec<String> = results.iter().filter_map(|r| r.clone().err()).collect();
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
    let readme = results[0].clone().unwrap();
    assert!(readme >= 8, "the README's blocks ran: {readme}");
}

#[test]
fn blocks_are_read_with_their_shown_output_and_norun_is_left_out() {
    let page = "intro\n```sh\necho hi\n```\n\n```text\nhi\n```\n```sh norun\ncargo build\n```\n\
                ```sh\necho a\n```\nprose\n```text\nnot output\n```\n";
    let found = blocks(page);
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(
        (
            found[0].line,
            found[0].code.as_str(),
            found[0].expected.as_deref()
        ),
        (2, "echo hi\n", Some("hi\n"))
    );
    assert_eq!(found[1].expected, None, "prose between: not its output");
    let expected = ["id: …", "…", "done in …s"];
    assert!(matches(&expected, &["id: 42", "a", "b", "done in 0.3s"]));
    assert!(matches(&expected, &["id: 42", "done in 1s"]));
    assert!(!matches(&expected, &["id: 42", "done"]));
    assert!(line_matches("{\"a\":…,\"b\":2}", "{\"a\":1,\"b\":2}"));
    assert!(!line_matches("x…yy", "xy"));
    assert_eq!(
        serve_line("ORCA_X=1 orca serve   # comment").as_deref(),
        Some("orca_docs_stop; ORCA_X=1 orca serve >>serve.log 2>&1 & orca_docs_ready $!")
    );
    assert_eq!(serve_line("orca serve --help | head"), None);
    assert_eq!(serve_line("orca run x"), None);
}
