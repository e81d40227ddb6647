//! `fs.read`: reads one UTF-8 text file from the configured workspace directory.
//!
//! Owns the confinement rules. The path comes from an LLM, which may have been talked into
//! asking for `/etc/passwd` or `../../secrets`, so this file must never open anything that is
//! not a regular file inside the workspace after every symlink is resolved, and must never
//! read more than the configured limit into memory.
//!
//! The checks are made twice: on the canonical path before opening it (so a FIFO or device is
//! never opened), and on the opened file itself (so a directory swapped for a symlink between
//! the check and the open is still caught). The second check asks the kernel what was opened:
//! `fstat` for its kind and, on Linux, `/proc/self/fd` for its real path, which must still lie
//! inside the workspace. The open itself never blocks (`O_NONBLOCK`) and never follows a final
//! symlink (`O_NOFOLLOW`).

use std::io;
use std::path::{Component, Path, PathBuf};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

use super::registry::{ToolsConfig, parse_args};
use super::{Effects, Tool, ToolError};
use crate::domain::ErrorCode;

/// The tool's registered name.
pub const NAME: &str = "fs.read";

/// The `fs.read` tool.
#[derive(Debug, Clone)]
pub struct FsRead {
    /// As configured; canonicalized on every call rather than once at start, so a workspace
    /// created (or moved) after start is picked up and a missing one is a per-call error
    /// instead of a failed start.
    workspace: PathBuf,
    /// The most bytes one call may return, whatever `max_bytes` asks for.
    limit: u64,
}

impl FsRead {
    pub fn new(config: &ToolsConfig) -> Self {
        FsRead {
            workspace: config.workspace_dir.clone(),
            limit: config.fs_read_max_bytes,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    #[serde(default)]
    max_bytes: Option<u64>,
}

#[async_trait]
impl Tool for FsRead {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Reads a UTF-8 text file from the workspace directory and returns its whole content. \
         Paths are relative to the workspace root (e.g. \"notes/todo.md\"); absolute paths, \
         `..` and links that lead outside the workspace are refused, as are directories, \
         binary files and files over the size limit."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 4096,
                    "description": "File path relative to the workspace root, with `/` \
                                    separators, e.g. \"reports/2026-q1.csv\". No leading `/` \
                                    and no `..`.",
                },
                "max_bytes": {
                    "type": "integer",
                    "minimum": 1,
                    "description": format!(
                        "Refuse the file if it is larger than this many bytes. Can only lower \
                         the service's limit of {} bytes, never raise it.",
                        self.limit
                    ),
                }
            },
            "required": ["path"],
            "additionalProperties": false,
        })
    }

    fn effects(&self) -> Effects {
        Effects::None
    }

    async fn call(&self, args: Value, cancel: &CancellationToken) -> Result<Value, ToolError> {
        let args: Args = parse_args(NAME, args)?;
        let limit = args.max_bytes.map_or(self.limit, |m| m.min(self.limit));
        // Biased so that a token that already fired wins over a read that would also be ready.
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(ToolError::Cancelled),
            read = read_confined(&self.workspace, &args.path, limit) => {
                let (content, bytes) = read?;
                Ok(json!({ "path": args.path, "content": content, "bytes": bytes }))
            }
        }
    }
}

/// Resolves `requested` inside `workspace` and reads it whole, refusing anything the module
/// docs rule out. Returns the text and its length in bytes.
async fn read_confined(
    workspace: &Path,
    requested: &str,
    limit: u64,
) -> Result<(String, usize), ToolError> {
    let relative = check_relative(requested)?;

    let root = tokio::fs::canonicalize(workspace).await.map_err(|e| {
        if is_missing(&e) {
            ToolError::failed(
                ErrorCode::FileNotFound,
                "the workspace directory does not exist",
            )
        } else {
            io_error(requested, &e)
        }
    })?;
    // Canonicalizing resolves every symlink, so the prefix check below sees where the file
    // really is, not where its name says it is.
    let target = tokio::fs::canonicalize(root.join(relative))
        .await
        .map_err(|e| {
            if is_missing(&e) {
                ToolError::failed(
                    ErrorCode::FileNotFound,
                    format!("no file `{requested}` in the workspace"),
                )
            } else {
                io_error(requested, &e)
            }
        })?;
    if !target.starts_with(&root) {
        return Err(outside(requested));
    }

    // Check the kind before opening: opening a FIFO for reading would block until a writer
    // appears, and a device could stream forever.
    let meta = tokio::fs::metadata(&target)
        .await
        .map_err(|e| io_error(requested, &e))?;
    if !meta.is_file() {
        let what = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        };
        return Err(ToolError::failed(
            ErrorCode::NotAFile,
            format!("`{requested}` is {what}; give the path of a file"),
        ));
    }

    let file = open_checked(&root, &target, requested).await?;
    // Read one byte past the limit instead of trusting the metadata length: a file can grow
    // between the two, and /proc-style files report 0. Capacity is capped by the limit, so a
    // huge reported size cannot make us allocate more than we would ever read.
    let capacity = meta.len().min(limit).saturating_add(1);
    let mut buf = Vec::with_capacity(usize::try_from(capacity).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut buf)
        .await
        .map_err(|e| io_error(requested, &e))?;
    if buf.len() as u64 > limit {
        return Err(ToolError::failed(
            ErrorCode::FileTooLarge,
            format!("`{requested}` is larger than the limit of {limit} bytes"),
        ));
    }
    let bytes = buf.len();
    let content = String::from_utf8(buf).map_err(|e| {
        ToolError::failed(
            ErrorCode::NotText,
            format!(
                "`{requested}` is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })?;
    Ok((content, bytes))
}

/// Rejects, before touching the disk, any path that names something outside the workspace by
/// its spelling alone: absolute paths and `..` anywhere (even `a/../b`, which would stay inside,
/// because a model that writes `..` is probing and a clear refusal teaches it the rule).
fn check_relative(requested: &str) -> Result<&Path, ToolError> {
    let path = Path::new(requested);
    if requested.is_empty() {
        return Err(ToolError::failed(
            ErrorCode::FileNotFound,
            "the path is empty; give a file path relative to the workspace",
        ));
    }
    for component in path.components() {
        match component {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(outside(requested));
            }
        }
    }
    Ok(path)
}

/// Opens `target` for reading and checks, on the opened file, that it is a regular file inside
/// `root`: whatever happened to the path since it was checked, what is read is what was allowed.
async fn open_checked(
    root: &Path,
    target: &Path,
    requested: &str,
) -> Result<tokio::fs::File, ToolError> {
    let mut options = tokio::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    options.custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC);
    let file = options.open(target).await.map_err(|e| {
        // ELOOP: the last component became a symlink after it was checked.
        #[cfg(unix)]
        if e.raw_os_error() == Some(libc::ELOOP) {
            return outside(requested);
        }
        io_error(requested, &e)
    })?;
    let meta = file.metadata().await.map_err(|e| io_error(requested, &e))?;
    if !meta.is_file() {
        return Err(ToolError::failed(
            ErrorCode::NotAFile,
            format!("`{requested}` is not a regular file; give the path of a file"),
        ));
    }
    if !opened_inside(&file, root) {
        return Err(outside(requested));
    }
    Ok(file)
}

/// Whether the kernel places the opened file inside `root`. Where that cannot be asked (no
/// `/proc`, other systems), the path checks made before opening stand alone.
fn opened_inside(file: &tokio::fs::File, root: &Path) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let link = format!("/proc/self/fd/{}", file.as_raw_fd());
        match std::fs::read_link(link) {
            Ok(real) => return real.starts_with(root),
            Err(e) if e.kind() != io::ErrorKind::NotFound => return false,
            Err(_) => {}
        }
    }
    let _ = (file, root);
    true
}

fn outside(requested: &str) -> ToolError {
    ToolError::failed(
        ErrorCode::PathOutsideWorkspace,
        format!(
            "`{requested}` is outside the workspace; use a path relative to the workspace root \
             without `..`"
        ),
    )
}

fn is_missing(e: &io::Error) -> bool {
    // NotADirectory: a path like `file.txt/x` names nothing, which is what the caller needs
    // to hear.
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// An IO failure that is not the caller's fault in an obvious way. The message names the
/// requested path but not the absolute workspace path, which the model has no need to learn.
fn io_error(requested: &str, e: &io::Error) -> ToolError {
    if e.kind() == io::ErrorKind::PermissionDenied {
        return ToolError::failed(
            ErrorCode::PermissionDenied,
            format!("`{requested}` cannot be read: permission denied"),
        );
    }
    if is_missing(e) {
        return ToolError::failed(
            ErrorCode::FileNotFound,
            format!("no file `{requested}` in the workspace"),
        );
    }
    ToolError::failed(
        ErrorCode::IoError,
        format!("`{requested}` cannot be read: {}", e.kind()),
    )
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    struct Fixture {
        /// Holds the workspace and, beside it, a file that must stay out of reach.
        dir: tempfile::TempDir,
        tool: FsRead,
    }

    impl Fixture {
        fn new(limit: u64) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let ws = dir.path().join("ws");
            std::fs::create_dir_all(ws.join("sub")).unwrap();
            std::fs::write(ws.join("hello.txt"), "hello, world\n").unwrap();
            std::fs::write(ws.join("sub/note.md"), "# note é\n").unwrap();
            std::fs::write(dir.path().join("secret.txt"), "top secret").unwrap();
            let tool = FsRead::new(&ToolsConfig {
                workspace_dir: ws,
                fs_read_max_bytes: limit,
                ..Default::default()
            });
            Fixture { dir, tool }
        }

        fn ws(&self) -> PathBuf {
            self.dir.path().join("ws")
        }

        async fn read(&self, args: Value) -> Result<Value, ToolError> {
            self.tool.call(args, &CancellationToken::new()).await
        }

        async fn code(&self, path: &str) -> ErrorCode {
            match self.read(json!({ "path": path })).await {
                Ok(v) => panic!("{path:?} was read: {v}"),
                Err(e) => e.code(),
            }
        }
    }

    #[tokio::test]
    async fn reads_a_file_inside_the_workspace() {
        let f = Fixture::new(1024);
        let out = f.read(json!({"path": "hello.txt"})).await.unwrap();
        assert_eq!(
            out,
            json!({"path": "hello.txt", "content": "hello, world\n", "bytes": 13})
        );
        let out = f.read(json!({"path": "./sub/note.md"})).await.unwrap();
        assert_eq!(out["content"], "# note é\n");
        // Bytes, not characters: é is two bytes.
        assert_eq!(out["bytes"], 10);
    }

    #[tokio::test]
    async fn refuses_paths_that_leave_the_workspace_by_spelling() {
        let f = Fixture::new(1024);
        let secret = f.dir.path().join("secret.txt");
        for path in [
            "../secret.txt",
            "sub/../../secret.txt",
            "sub/../hello.txt",
            "..",
            secret.to_str().unwrap(),
            "/etc/passwd",
            "/",
        ] {
            assert_eq!(f.code(path).await, "path_outside_workspace", "{path:?}");
        }
    }

    #[tokio::test]
    async fn refuses_symlinks_that_escape() {
        let f = Fixture::new(1024);
        symlink(f.dir.path().join("secret.txt"), f.ws().join("link.txt")).unwrap();
        symlink(f.dir.path(), f.ws().join("up")).unwrap();
        assert_eq!(f.code("link.txt").await, "path_outside_workspace");
        assert_eq!(f.code("up/secret.txt").await, "path_outside_workspace");
    }

    /// The check made on the opened file, not its name: a file outside the workspace is refused
    /// even when the name-based checks were passed (as when a directory is swapped for a
    /// symlink between check and open).
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_opened_file_itself_must_lie_inside() {
        let f = Fixture::new(1024);
        let root = std::fs::canonicalize(f.ws()).unwrap();
        let outside_file = std::fs::canonicalize(f.dir.path().join("secret.txt")).unwrap();
        let err = open_checked(&root, &outside_file, "secret.txt")
            .await
            .unwrap_err();
        assert_eq!(err.code(), "path_outside_workspace");
        let inside = root.join("hello.txt");
        assert!(open_checked(&root, &inside, "hello.txt").await.is_ok());
    }

    #[tokio::test]
    async fn a_final_symlink_is_not_followed_at_open() {
        let f = Fixture::new(1024);
        let root = std::fs::canonicalize(f.ws()).unwrap();
        // As if `alias.txt` was checked as a plain file, then replaced by a link.
        symlink(root.join("hello.txt"), root.join("alias.txt")).unwrap();
        let err = open_checked(&root, &root.join("alias.txt"), "alias.txt")
            .await
            .unwrap_err();
        assert_eq!(err.code(), "path_outside_workspace");
    }

    #[tokio::test]
    async fn follows_symlinks_that_stay_inside() {
        let f = Fixture::new(1024);
        symlink(f.ws().join("sub/note.md"), f.ws().join("alias.md")).unwrap();
        symlink("sub", f.ws().join("sub2")).unwrap();
        let out = f.read(json!({"path": "alias.md"})).await.unwrap();
        assert_eq!(out["content"], "# note é\n");
        assert_eq!(out["path"], "alias.md");
        let out = f.read(json!({"path": "sub2/note.md"})).await.unwrap();
        assert_eq!(out["content"], "# note é\n");
    }

    #[tokio::test]
    async fn workspace_reached_through_a_symlink_still_works() {
        let f = Fixture::new(1024);
        let link = f.dir.path().join("ws-link");
        symlink(f.ws(), &link).unwrap();
        let tool = FsRead::new(&ToolsConfig {
            workspace_dir: link,
            fs_read_max_bytes: 1024,
            ..Default::default()
        });
        let out = tool
            .call(json!({"path": "hello.txt"}), &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(out["bytes"], 13);
    }

    #[tokio::test]
    async fn refuses_files_over_the_limit() {
        let f = Fixture::new(13);
        // Exactly at the limit is fine.
        assert!(f.read(json!({"path": "hello.txt"})).await.is_ok());
        std::fs::write(f.ws().join("big.txt"), "x".repeat(14)).unwrap();
        let err = f.read(json!({"path": "big.txt"})).await.unwrap_err();
        assert_eq!(err.code(), "file_too_large");
        assert!(err.to_string().contains("limit of 13 bytes"), "{err}");
    }

    #[tokio::test]
    async fn max_bytes_lowers_but_never_raises_the_limit() {
        let f = Fixture::new(13);
        let err = f
            .read(json!({"path": "hello.txt", "max_bytes": 5}))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "file_too_large");
        std::fs::write(f.ws().join("big.txt"), "x".repeat(14)).unwrap();
        let err = f
            .read(json!({"path": "big.txt", "max_bytes": 1_000_000}))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "file_too_large");
        assert!(err.to_string().contains("limit of 13 bytes"), "{err}");
    }

    #[tokio::test]
    async fn missing_file_or_workspace_is_file_not_found() {
        let f = Fixture::new(1024);
        assert_eq!(f.code("nope.txt").await, "file_not_found");
        assert_eq!(f.code("hello.txt/inner").await, "file_not_found");
        assert_eq!(f.code("").await, "file_not_found");
        symlink(f.ws().join("gone"), f.ws().join("dangling")).unwrap();
        assert_eq!(f.code("dangling").await, "file_not_found");

        let tool = FsRead::new(&ToolsConfig {
            workspace_dir: f.dir.path().join("no-such-workspace"),
            fs_read_max_bytes: 1024,
            ..Default::default()
        });
        let err = tool
            .call(json!({"path": "hello.txt"}), &CancellationToken::new())
            .await
            .unwrap_err();
        assert_eq!(err.code(), "file_not_found");
        assert!(
            err.to_string()
                .contains("workspace directory does not exist")
        );
    }

    #[tokio::test]
    async fn refuses_directories() {
        let f = Fixture::new(1024);
        assert_eq!(f.code("sub").await, "not_a_file");
        assert_eq!(f.code(".").await, "not_a_file");
    }

    #[tokio::test]
    async fn refuses_a_fifo_without_blocking_on_it() {
        let f = Fixture::new(1024);
        let fifo = f.ws().join("pipe");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        assert_eq!(f.code("pipe").await, "not_a_file");
    }

    #[tokio::test]
    async fn refuses_binary_content() {
        let f = Fixture::new(1024);
        std::fs::write(f.ws().join("blob.bin"), [b'o', b'k', 0xff, 0xfe]).unwrap();
        let err = f.read(json!({"path": "blob.bin"})).await.unwrap_err();
        assert_eq!(err.code(), "not_text");
        assert!(err.to_string().contains("offset 2"), "{err}");
    }

    #[tokio::test]
    async fn cancelled_token_wins() {
        let f = Fixture::new(1024);
        let cancel = CancellationToken::new();
        cancel.cancel();
        let err = f
            .tool
            .call(json!({"path": "hello.txt"}), &cancel)
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::Cancelled));
    }

    #[test]
    fn schema_mentions_the_configured_limit() {
        let f = Fixture::new(4096);
        let schema = f.tool.input_schema();
        let text = schema["properties"]["max_bytes"]["description"]
            .as_str()
            .unwrap();
        assert!(text.contains("4096 bytes"), "{text}");
    }
}
