//! The tool registry: every tool the engine may call, each with its argument schema compiled
//! once, so that no tool ever sees arguments its schema rejects.
//!
//! Owns lookup by name, argument validation (all errors, each located by JSON Pointer) and the
//! cancellation guarantee around a call. It must not know what a tool does, nor anything of
//! runs, steps or HTTP: callers turn a [`ToolError`] into whatever their layer needs.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

pub use crate::config::ToolsConfig;

use super::clock::ClockNow;
use super::fs::FsRead;
use super::math::Calculate;
use super::{ArgumentError, Effects, Tool, ToolError};
use crate::plan::KnownTools;
use crate::schema::{SchemaViolation, json_type_name, truncate, violations};

/// What `GET /v1/tools` lists for one tool.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ToolInfo {
    pub name: String,
    pub description: String,
    #[schema(value_type = Object)]
    pub input_schema: Value,
}

/// One registered tool.
struct Entry {
    tool: Arc<dyn Tool>,
    /// Name, description and schema read once at registration, so the schema shown to models
    /// and clients is the very one `validator` was compiled from.
    info: ToolInfo,
    validator: jsonschema::Validator,
}

/// Every callable tool by name. Cloning is cheap (two `Arc`s). The tools registered at start
/// are copy-on-write, so registering after clones were handed out does not change what those
/// clones see. Tools a tenant declared at run time join a view of the registry made for that
/// tenant or run ([`ToolRegistry::with_declared`]); the registry itself never changes under
/// a running run.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    /// A `BTreeMap` so that listing is sorted by name without a sort on every request.
    tools: Arc<BTreeMap<String, Arc<Entry>>>,
    declared: Arc<BTreeMap<String, Arc<Entry>>>,
}

/// A tool ready to join a view of the registry: its schema compiled once, so views built for
/// many runs share the compiled validator.
#[derive(Clone)]
pub struct Declared(Arc<Entry>);

impl Declared {
    /// Compiles the tool's schema; an error when it does not compile.
    pub fn new(tool: Arc<dyn Tool>) -> Result<Declared, String> {
        let schema = tool.input_schema();
        let validator = jsonschema::draft202012::new(&schema).map_err(|e| e.to_string())?;
        let info = ToolInfo {
            name: tool.name().to_owned(),
            description: tool.description().to_owned(),
            input_schema: schema,
        };
        Ok(Declared(Arc::new(Entry {
            tool,
            info,
            validator,
        })))
    }
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        ToolRegistry::default()
    }

    /// The registry with every built-in tool, configured from `config`.
    pub fn with_builtins(config: &ToolsConfig) -> Self {
        let mut registry = ToolRegistry::new();
        registry.register(Arc::new(ClockNow::new()));
        registry.register(Arc::new(Calculate));
        registry.register(Arc::new(FsRead::new(config)));
        for op in super::memory::MemoryOp::ALL {
            registry.register(Arc::new(super::memory::MemoryTool(op)));
        }
        registry
    }

    /// Adds a tool (its schema is compiled now); replaces one of the same name.
    ///
    /// # Panics
    /// If the tool's input schema is not a valid JSON Schema. Schemas are written by the
    /// programmer, never by a user, so this is a bug to find at start, not an error to handle.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        let name = tool.name().to_owned();
        let schema = tool.input_schema();
        let validator = jsonschema::draft202012::new(&schema).unwrap_or_else(|e| {
            panic!("tool `{name}` has an input schema that does not compile: {e}")
        });
        let info = ToolInfo {
            name: name.clone(),
            description: tool.description().to_owned(),
            input_schema: schema,
        };
        Arc::make_mut(&mut self.tools).insert(
            name,
            Arc::new(Entry {
                tool,
                info,
                validator,
            }),
        );
    }

    pub fn contains(&self, name: &str) -> bool {
        self.entry(name).is_ok()
    }

    /// Whether `name` was registered at start (built-in, MCP or configured), so that it cannot
    /// be declared or removed through the API.
    pub fn is_fixed(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// This registry with `declared` beside the tools it was started with (a tenant's or a
    /// run's view); a declared tool never shadows one of those.
    pub fn with_declared(&self, declared: impl IntoIterator<Item = Declared>) -> ToolRegistry {
        let declared = declared
            .into_iter()
            .filter(|d| !self.is_fixed(&d.0.info.name))
            .map(|d| (d.0.info.name.clone(), d.0))
            .collect();
        ToolRegistry {
            tools: self.tools.clone(),
            declared: Arc::new(declared),
        }
    }

    /// Every tool, sorted by name.
    pub fn list(&self) -> Vec<ToolInfo> {
        let mut all: Vec<ToolInfo> = self
            .tools
            .values()
            .chain(self.declared.values())
            .map(|e| e.info.clone())
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// One tool's listing, if it is registered.
    pub fn info(&self, name: &str) -> Option<ToolInfo> {
        self.entry(name).ok().map(|e| e.info.clone())
    }

    /// What calling `name` can change ([`Effects::Outside`] for a tool it does not know).
    pub fn effects(&self, name: &str) -> Effects {
        self.entry(name)
            .map_or(Effects::Outside, |e| e.tool.effects())
    }

    /// The declaration of `name` when it is a worker tool.
    pub fn worker(&self, name: &str) -> Option<crate::domain::WorkerToolSpec> {
        self.entry(name).ok().and_then(|e| e.tool.worker().cloned())
    }

    /// Checks arguments against the tool's schema without calling it.
    pub fn validate(&self, name: &str, args: &Value) -> Result<(), ToolError> {
        self.entry(name)?.validate(args)
    }

    /// Validates, then calls.
    ///
    /// Returns [`ToolError::Cancelled`] as soon as `cancel` fires, even if the tool does not
    /// watch the token itself: the call's future is then dropped.
    pub async fn invoke(
        &self,
        name: &str,
        args: Value,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolError> {
        let entry = self.entry(name)?;
        entry.validate(&args)?;
        // Biased: a token that has already fired must win even over a tool that would finish
        // on its first poll, so a cancelled run never gets a fresh result.
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(ToolError::Cancelled),
            result = entry.tool.call(args, cancel) => result,
        }
    }

    fn entry(&self, name: &str) -> Result<Arc<Entry>, ToolError> {
        self.tools
            .get(name)
            .cloned()
            .or_else(|| self.declared.get(name).cloned())
            .ok_or_else(|| ToolError::NotFound(name.to_owned()))
    }
}

/// What plan validation asks of the tools: the names, and literal arguments checked exactly
/// as a call would check them.
impl KnownTools for ToolRegistry {
    fn has_tool(&self, name: &str) -> bool {
        self.contains(name)
    }

    fn tool_names(&self) -> Vec<String> {
        self.list().into_iter().map(|t| t.name).collect()
    }

    fn argument_problems(&self, name: &str, arguments: &Value) -> Vec<SchemaViolation> {
        match self.validate(name, arguments) {
            Err(ToolError::InvalidArguments { errors, .. }) => errors
                .into_iter()
                .map(|e| SchemaViolation {
                    pointer: e.pointer,
                    message: e.message,
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}

impl Entry {
    fn validate(&self, args: &Value) -> Result<(), ToolError> {
        let invalid = |errors| ToolError::InvalidArguments {
            tool: self.info.name.clone(),
            errors,
        };
        // Checked here as well as by each schema's `type: object`, so that a tool whose schema
        // forgot it still never receives a bare string or array.
        if !args.is_object() {
            return Err(invalid(vec![ArgumentError {
                pointer: String::new(),
                message: format!(
                    "arguments must be a JSON object, got {}",
                    json_type_name(args)
                ),
            }]));
        }
        let errors: Vec<ArgumentError> = violations(&self.validator, args)
            .into_iter()
            .map(|v| ArgumentError {
                pointer: v.pointer,
                message: v.message,
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(invalid(errors))
        }
    }
}

/// Deserializes arguments that already passed the tool's schema into the tool's own type.
///
/// Tools call this first thing in [`Tool::call`]. After validation it cannot fail unless the
/// schema and the type disagree, or the tool was called directly, bypassing the registry; either
/// way the caller gets [`ToolError::InvalidArguments`] rather than a panic.
pub(crate) fn parse_args<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args).map_err(|e| ToolError::InvalidArguments {
        tool: tool.to_owned(),
        errors: vec![ArgumentError {
            pointer: String::new(),
            message: truncate(e.to_string()),
        }],
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use async_trait::async_trait;
    use chrono::{DateTime, TimeZone, Utc};
    use serde_json::json;

    use super::*;
    use crate::schema::MAX_MESSAGE_CHARS;

    /// A test tool that only returns once the token fires, as a well-behaved slow tool would.
    struct Waits;

    #[async_trait]
    impl Tool for Waits {
        fn name(&self) -> &str {
            "test.waits"
        }
        fn description(&self) -> &str {
            "Waits for cancellation."
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object", "additionalProperties": false})
        }
        async fn call(&self, _args: Value, cancel: &CancellationToken) -> Result<Value, ToolError> {
            cancel.cancelled().await;
            Err(ToolError::Cancelled)
        }
    }

    /// A test tool that ignores the token and never finishes, as a buggy tool might.
    struct Hangs;

    #[async_trait]
    impl Tool for Hangs {
        fn name(&self) -> &str {
            "test.hangs"
        }
        fn description(&self) -> &str {
            "Never returns."
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object"})
        }
        async fn call(
            &self,
            _args: Value,
            _cancel: &CancellationToken,
        ) -> Result<Value, ToolError> {
            std::future::pending().await
        }
    }

    /// A test tool whose schema is built at construction, to test replacement and bad schemas.
    struct Custom {
        name: &'static str,
        schema: Value,
        answer: Value,
    }

    #[async_trait]
    impl Tool for Custom {
        fn name(&self) -> &str {
            self.name
        }
        fn description(&self) -> &str {
            "Returns a fixed answer."
        }
        fn input_schema(&self) -> Value {
            self.schema.clone()
        }
        async fn call(
            &self,
            _args: Value,
            _cancel: &CancellationToken,
        ) -> Result<Value, ToolError> {
            Ok(self.answer.clone())
        }
    }

    fn builtins() -> (ToolRegistry, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "alpha").unwrap();
        let registry = ToolRegistry::with_builtins(&ToolsConfig {
            workspace_dir: dir.path().to_owned(),
            fs_read_max_bytes: 1024,
            ..Default::default()
        });
        (registry, dir)
    }

    fn errors_of(result: Result<(), ToolError>) -> Vec<(String, String)> {
        match result {
            Err(ToolError::InvalidArguments { errors, .. }) => {
                errors.into_iter().map(|e| (e.pointer, e.message)).collect()
            }
            other => panic!("expected InvalidArguments, got {other:?}"),
        }
    }

    #[test]
    fn lists_builtins_sorted_with_closed_documented_schemas() {
        let (registry, _dir) = builtins();
        let names: Vec<String> = registry.list().into_iter().map(|t| t.name).collect();
        let memory = ["memory.get", "memory.put", "memory.search"];
        assert_eq!(names[..3], ["clock.now", "fs.read", "math.calculate"]);
        assert_eq!(names[3..], memory);
        for info in registry.list() {
            assert!(info.description.len() > 40, "{}", info.name);
            let schema = &info.input_schema;
            assert_eq!(schema["type"], "object", "{}", info.name);
            assert_eq!(schema["additionalProperties"], false, "{}", info.name);
            for (prop, spec) in schema["properties"].as_object().unwrap() {
                assert!(
                    spec["description"].as_str().is_some_and(|d| !d.is_empty()),
                    "{}.{prop} has no description",
                    info.name
                );
            }
            assert_eq!(registry.info(&info.name), Some(info.clone()));
            assert!(registry.contains(&info.name));
        }
        assert!(!registry.contains("shell.exec"));
        assert_eq!(registry.info("shell.exec"), None);
    }

    /// The built-in tools only read or compute, but for `memory.put`, which writes; any other
    /// tool, and a name the registry does not know, is taken to act outside orca (its attempt
    /// is stored before the call).
    #[test]
    fn only_the_built_in_tools_are_free_of_effects() {
        let (mut registry, _dir) = builtins();
        for info in registry.list() {
            let expected = match info.name.as_str() {
                "memory.put" => Effects::Outside,
                _ => Effects::None,
            };
            assert_eq!(registry.effects(&info.name), expected, "{}", info.name);
        }
        registry.register(Arc::new(Custom {
            name: "test.custom",
            schema: json!({ "type": "object" }),
            answer: json!(1),
        }));
        assert_eq!(registry.effects("test.custom"), Effects::Outside);
        assert_eq!(registry.effects("shell.exec"), Effects::Outside);
    }

    #[tokio::test]
    async fn unknown_tool_is_not_found() {
        let (registry, _dir) = builtins();
        let err = registry.validate("shell.exec", &json!({})).unwrap_err();
        assert!(matches!(&err, ToolError::NotFound(n) if n == "shell.exec"));
        assert_eq!(err.code(), "tool_not_found");
        let err = registry
            .invoke("shell.exec", json!({}), &CancellationToken::new())
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::NotFound(_)));
    }

    #[test]
    fn bad_arguments_report_every_error_with_a_pointer() {
        let (registry, _dir) = builtins();
        type Case = (&'static str, Value, &'static [(&'static str, &'static str)]);
        let cases: &[Case] = &[
            // wrong type
            (
                "clock.now",
                json!({"timezone": 5}),
                &[("/timezone", "string")],
            ),
            // missing required
            ("math.calculate", json!({}), &[("", "expression")]),
            // extra property
            (
                "math.calculate",
                json!({"expression": "1", "precision": 2}),
                &[("", "precision")],
            ),
            // too long
            (
                "math.calculate",
                json!({"expression": "1".repeat(1001)}),
                &[("/expression", "longer than 1000")],
            ),
            // below minimum
            (
                "fs.read",
                json!({"path": "a.txt", "max_bytes": 0}),
                &[("/max_bytes", "minimum")],
            ),
            // several at once, all reported
            (
                "fs.read",
                json!({"path": 1, "max_bytes": "big", "mode": "w"}),
                &[("/path", "string"), ("/max_bytes", "integer"), ("", "mode")],
            ),
            // not an object at all
            (
                "clock.now",
                json!("UTC"),
                &[("", "JSON object, got a string")],
            ),
            ("clock.now", json!(null), &[("", "JSON object, got null")]),
            (
                "math.calculate",
                json!([1]),
                &[("", "JSON object, got an array")],
            ),
        ];
        for (tool, args, want) in cases {
            let mut got = errors_of(registry.validate(tool, args));
            let mut want: Vec<_> = want.to_vec();
            got.sort();
            want.sort();
            assert_eq!(got.len(), want.len(), "{tool} {args}: {got:?}");
            for ((gp, gm), (wp, wm)) in got.iter().zip(&want) {
                assert_eq!(gp, wp, "{tool} {args}: {got:?}");
                assert!(gm.contains(wm), "{tool} {args}: {gm:?} lacks {wm:?}");
            }
        }
    }

    #[test]
    fn long_values_are_not_quoted_back() {
        let (registry, _dir) = builtins();
        let errors = errors_of(
            registry.validate("math.calculate", &json!({"expression": "9".repeat(1001)})),
        );
        assert_eq!(
            errors,
            [(
                "/expression".to_owned(),
                "the value is longer than 1000 characters".to_owned()
            )]
        );
        // Short values are quoted, which helps the model see what it sent.
        let errors = errors_of(registry.validate("clock.now", &json!({"timezone": 5})));
        assert_eq!(errors[0].1, r#"5 is not of type "string""#);
        assert_eq!(
            truncate("é".repeat(400)).chars().count(),
            MAX_MESSAGE_CHARS + 1
        );
    }

    #[test]
    fn invalid_arguments_display_names_tool_and_pointers() {
        let (registry, _dir) = builtins();
        let err = registry
            .validate("clock.now", &json!({"timezone": 5}))
            .unwrap_err();
        assert_eq!(err.code(), "invalid_tool_arguments");
        let text = err.to_string();
        assert!(
            text.contains("`clock.now`") && text.contains("/timezone"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn invokes_each_builtin() {
        let (registry, _dir) = builtins();
        let cancel = CancellationToken::new();

        let out = registry
            .invoke("math.calculate", json!({"expression": "10 + 20"}), &cancel)
            .await
            .unwrap();
        assert_eq!(out, json!({"expression": "10 + 20", "result": 30}));

        let out = registry
            .invoke("fs.read", json!({"path": "a.txt"}), &cancel)
            .await
            .unwrap();
        assert_eq!(
            out,
            json!({"path": "a.txt", "content": "alpha", "bytes": 5})
        );

        let out = registry
            .invoke("clock.now", json!({"timezone": "Asia/Tokyo"}), &cancel)
            .await
            .unwrap();
        assert_eq!(out["timezone"], "Asia/Tokyo");
        assert!(out["iso"].as_str().unwrap().ends_with("+09:00"), "{out}");

        // Tool failures come back with their own stable code.
        let err = registry
            .invoke("fs.read", json!({"path": "../x"}), &cancel)
            .await
            .unwrap_err();
        assert_eq!(err.code(), "path_outside_workspace");
    }

    #[tokio::test]
    async fn injected_clock_gives_exact_output_through_the_registry() {
        fn fixed() -> DateTime<Utc> {
            Utc.with_ymd_and_hms(2026, 3, 1, 12, 34, 56).unwrap()
        }
        let mut registry = ToolRegistry::new();
        registry.register(Arc::new(ClockNow::with_clock(fixed)));
        let out = registry
            .invoke("clock.now", json!({}), &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(out["iso"], "2026-03-01T12:34:56+00:00");
        assert_eq!(out["unix"], 1_772_368_496_i64);
    }

    #[tokio::test]
    async fn invalid_arguments_never_reach_the_tool() {
        let mut registry = ToolRegistry::new();
        registry.register(Arc::new(Waits));
        // Were the call made, it would wait forever on this token.
        let err = registry
            .invoke("test.waits", json!({"x": 1}), &CancellationToken::new())
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments { .. }));
    }

    #[tokio::test]
    async fn cancellation_ends_a_waiting_tool() {
        let mut registry = ToolRegistry::new();
        registry.register(Arc::new(Waits));
        let cancel = CancellationToken::new();
        let call = tokio::spawn({
            let (registry, cancel) = (registry.clone(), cancel.clone());
            async move { registry.invoke("test.waits", json!({}), &cancel).await }
        });
        tokio::task::yield_now().await;
        cancel.cancel();
        let result = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("cancellation was not prompt")
            .unwrap();
        assert!(matches!(result, Err(ToolError::Cancelled)));
    }

    #[tokio::test]
    async fn cancellation_ends_even_a_tool_that_ignores_the_token() {
        let mut registry = ToolRegistry::new();
        registry.register(Arc::new(Hangs));
        let cancel = CancellationToken::new();
        let call = tokio::spawn({
            let (registry, cancel) = (registry.clone(), cancel.clone());
            async move { registry.invoke("test.hangs", json!({}), &cancel).await }
        });
        tokio::task::yield_now().await;
        cancel.cancel();
        let result = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("cancellation was not prompt")
            .unwrap();
        assert!(matches!(result, Err(ToolError::Cancelled)));
    }

    #[tokio::test]
    async fn already_cancelled_token_wins_over_an_instant_tool() {
        let (registry, _dir) = builtins();
        let cancel = CancellationToken::new();
        cancel.cancel();
        let err = registry
            .invoke("math.calculate", json!({"expression": "1"}), &cancel)
            .await
            .unwrap_err();
        assert_eq!(err.code(), "cancelled");
    }

    #[tokio::test]
    async fn register_replaces_a_tool_of_the_same_name_without_touching_clones() {
        let custom = |answer: i64| Custom {
            name: "test.custom",
            schema: json!({"type": "object", "additionalProperties": false}),
            answer: json!(answer),
        };
        let mut registry = ToolRegistry::new();
        registry.register(Arc::new(custom(1)));
        let before = registry.clone();
        registry.register(Arc::new(custom(2)));
        assert_eq!(registry.list().len(), 1);
        let cancel = CancellationToken::new();
        let call = |r: ToolRegistry| {
            let cancel = cancel.clone();
            async move { r.invoke("test.custom", json!({}), &cancel).await.unwrap() }
        };
        assert_eq!(call(registry).await, json!(2));
        assert_eq!(call(before).await, json!(1));
    }

    #[tokio::test]
    async fn declared_tools_join_a_view_and_never_shadow_a_started_one() {
        let custom = |name: &'static str, answer: i64| Custom {
            name,
            schema: json!({"type": "object"}),
            answer: json!(answer),
        };
        let mut registry = ToolRegistry::new();
        registry.register(Arc::new(custom("test.fixed", 1)));
        let view = registry.with_declared([
            Declared::new(Arc::new(custom("test.fixed", 2))).unwrap(),
            Declared::new(Arc::new(custom("test.mine", 3))).unwrap(),
        ]);
        let cancel = CancellationToken::new();
        let fixed = view.invoke("test.fixed", json!({}), &cancel).await;
        assert_eq!(fixed.unwrap(), json!(1));
        assert_eq!(
            view.invoke("test.mine", json!({}), &cancel).await.unwrap(),
            json!(3)
        );
        assert!(
            !registry.contains("test.mine"),
            "the registry itself is unchanged"
        );
        let names: Vec<String> = view.list().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["test.fixed", "test.mine"]);
        assert!(
            Declared::new(Arc::new(Custom {
                name: "test.broken",
                schema: json!({"type": "objekt"}),
                answer: json!(null),
            }))
            .is_err()
        );
    }

    #[test]
    #[should_panic(expected = "tool `test.broken` has an input schema that does not compile")]
    fn a_schema_that_does_not_compile_panics_at_registration() {
        let mut registry = ToolRegistry::new();
        registry.register(Arc::new(Custom {
            name: "test.broken",
            schema: json!({"type": "objekt"}),
            answer: json!(null),
        }));
    }

    #[test]
    fn registry_is_shareable_across_tasks() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<ToolRegistry>();
    }

    #[test]
    fn parse_args_reports_instead_of_panicking() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Args {
            n: u32,
        }
        let err = parse_args::<Args>("test.parse", json!({"n": "x"})).unwrap_err();
        assert_eq!(err.code(), "invalid_tool_arguments");
    }
}
