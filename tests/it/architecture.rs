//! The crate's shape, held by reading `src/` as Rust (`syn`): the floors (no module imports
//! from a floor above its own, and the graph of top-level modules has no cycle) and the
//! length of functions (none over [`MAX_FN_LINES`]); inside `src/engine`, the floors of its rooms
//! (its direct files and folders: [`ENGINE_FLOORS`]) and no cycle between two of them.
//!
//! The module tree is followed from `src/lib.rs` through its `mod` declarations (honouring
//! `#[path]`), so every file is read as the module it is; a file under `src/` the tree never
//! reaches is reported too, since neither rule would see it. `src/main.rs` and `src/cli/`
//! belong to the binary and are not read.
//!
//! Test code is held to the same floors: a `#[cfg(test)] mod tests` or a `tests.rs` imports
//! what its module may import, so a module's tests never tie it to a module above it.
//!
//! References counted: `use` items (`use crate::…`, `use super::…` leaving the module) and
//! every path in items, types, expressions and patterns (`crate::x::f()`), including paths
//! written inside macro invocations (`format!`, `matches!`, …). Doc comments are text, not
//! references.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::visit::{self, Visit};

/// The floors, lowest first. A module may import from strictly lower floors, and from
/// siblings on its own floor as long as the module graph stays acyclic. ARCHITECTURE.md
/// ("Floors") has the same table.
const FLOORS: &[(&str, u8)] = &[
    // Vocabulary: ids, runs, plans, events, error codes; "did you mean".
    ("domain", 0),
    ("suggest", 0),
    // Pure computations over the vocabulary.
    ("schema", 1),
    ("timeline", 1),
    ("metrics", 1),
    // Data and its validation: plans (against a `plan::Catalog`), configuration.
    ("plan", 2),
    ("config", 2),
    // What runs are made of: storage, models, tools, traces.
    ("store", 3),
    ("llm", 3),
    ("tools", 3),
    ("telemetry", 3),
    // The registries built from them.
    ("functions", 4),
    ("workflows", 4),
    ("agents", 4),
    // The event hub.
    ("stream", 5),
    ("engine", 6),
    ("api", 7),
    // Background workers beside the API: schedule firing, webhook delivery, retention.
    ("workers", 7),
    ("app", 8),
];

/// The floors of the engine's rooms (its direct files and folders; `mod` is `engine/mod.rs`),
/// lowest first. A room may import from strictly lower floors, and from siblings on its own
/// floor while the rooms stay acyclic; a cycle inside one folder is the folder's own.
/// ARCHITECTURE.md ("The engine", "Its floors") has the same table.
const ENGINE_FLOORS: &[(&str, u8)] = &[
    // What every run stands on, importing no feature; the engine's refusals.
    ("runtime", 1),
    ("error", 1),
    // One call each; features on the runtime alone.
    ("calls", 2),
    ("fork", 2),
    ("review", 2),
    // Session history and summaries; `auto` settled at run time.
    ("session", 3),
    ("selector", 3),
    // A plan's DAG, one conversation, a request checked and resolved.
    ("scheduler", 4),
    ("simple", 4),
    ("intake", 4),
    // The executors that build on each other.
    ("fixed", 5),
    ("planner", 6),
    ("reactive", 7),
    // A run's task, then `Engine`: runs created and resumed, then what a client and the
    // replica do to the runs it holds.
    ("run", 8),
    ("mod", 9),
    ("control", 10),
    ("replica", 10),
];

/// The longest a function in `src/` may be, from its signature line to its closing brace.
const MAX_FN_LINES: usize = 100;

/// Functions allowed past [`MAX_FN_LINES`]: (file, function name).
const LONG_FN_EXCEPTIONS: &[(&str, &str)] = &[];

#[test]
fn no_import_runs_up_a_floor_and_modules_form_no_cycle() {
    let files = crate_files();
    let modules = module_paths(&files);
    let floors: BTreeMap<&str, u8> = FLOORS.iter().copied().collect();
    let mut problems = Vec::new();
    let mut graph: BTreeMap<String, BTreeMap<String, Reference>> = BTreeMap::new();

    for file in &files {
        let Some(from) = file.module.first() else {
            continue; // lib.rs: only declares modules
        };
        if !floors.contains_key(from.as_str()) {
            problems.push(format!(
                "{}: module `{from}` has no floor; add it to FLOORS in tests/it/architecture.rs \
                 and to ARCHITECTURE.md",
                file.display
            ));
            continue;
        }
        for reference in references(file, &modules) {
            if reference.target == *from {
                continue;
            }
            let Some(&to_floor) = floors.get(reference.target.as_str()) else {
                problems.push(format!(
                    "{}:{}: `crate::{}` is not a module with a floor",
                    file.display, reference.line, reference.target
                ));
                continue;
            };
            let from_floor = floors[from.as_str()];
            if to_floor > from_floor {
                problems.push(format!(
                    "{}:{}: {from} (floor {from_floor}) -> {} (floor {to_floor}) runs up a floor",
                    file.display, reference.line, reference.target
                ));
            }
            graph
                .entry(from.clone())
                .or_default()
                .entry(reference.target.clone())
                .or_insert(reference);
        }
    }
    problems.extend(cycle_problem(&graph, "the module graph has a cycle"));
    assert!(
        problems.is_empty(),
        "{} import(s) break the floors (ARCHITECTURE.md, \"Floors\"):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

#[test]
fn the_engine_rooms_stand_on_floors_without_a_cycle() {
    let files = crate_files();
    let modules = module_paths(&files);
    let floors: BTreeMap<&str, u8> = ENGINE_FLOORS.iter().copied().collect();
    let rooms: BTreeSet<String> = files
        .iter()
        .filter(|f| f.module.len() >= 2 && f.module[0] == "engine")
        .map(|f| f.module[1].clone())
        .collect();
    let room_of = |path: &[String]| -> Option<String> {
        match path {
            [top, room, ..] if top == "engine" && rooms.contains(room) => Some(room.clone()),
            [top, ..] if top == "engine" => Some("mod".to_owned()),
            _ => None,
        }
    };
    let mut problems = Vec::new();
    for room in rooms.iter().chain(std::iter::once(&"mod".to_owned())) {
        if !floors.contains_key(room.as_str()) {
            problems.push(format!(
                "src/engine: room `{room}` has no floor; add it to ENGINE_FLOORS in \
                 tests/it/architecture.rs and to ARCHITECTURE.md"
            ));
        }
    }
    let mut graph: BTreeMap<String, BTreeMap<String, Reference>> = BTreeMap::new();
    for file in &files {
        let Some(from) = room_of(&file.module) else {
            continue;
        };
        for reference in references(file, &modules) {
            let Some(to) = room_of(&reference.path).filter(|to| *to != from) else {
                continue;
            };
            let (Some(&from_floor), Some(&to_floor)) =
                (floors.get(from.as_str()), floors.get(to.as_str()))
            else {
                continue;
            };
            if to_floor > from_floor {
                problems.push(format!(
                    "{}:{}: {from} (floor {from_floor}) -> {to} (floor {to_floor}) runs up a floor",
                    reference.file, reference.line
                ));
            }
            graph
                .entry(from.clone())
                .or_default()
                .entry(to)
                .or_insert(reference);
        }
    }
    problems.extend(cycle_problem(&graph, "the engine's rooms have a cycle"));
    assert!(
        problems.is_empty(),
        "{} import(s) break the engine's floors (ARCHITECTURE.md, \"The engine\"):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

/// Every module of the crate, as its path from the root (`["engine", "runtime"]`).
fn module_paths(files: &[SourceFile]) -> BTreeSet<Vec<String>> {
    files
        .iter()
        .flat_map(|f| (1..=f.module.len()).map(|n| f.module[..n].to_vec()))
        .collect()
}

#[test]
fn no_function_is_longer_than_100_lines() {
    let mut offenders = Vec::new();
    let mut exceptions_seen = BTreeSet::new();
    for file in crate_files() {
        let mut lengths = FnLengths::default();
        lengths.visit_file(&file.syntax);
        for (name, line, length) in lengths.found {
            if length <= MAX_FN_LINES {
                continue;
            }
            if LONG_FN_EXCEPTIONS.contains(&(file.display.as_str(), name.as_str())) {
                exceptions_seen.insert((file.display.clone(), name));
                continue;
            }
            offenders.push(format!(
                "{}:{line}: fn {name} is {length} lines",
                file.display
            ));
        }
    }
    assert!(
        offenders.is_empty(),
        "{} function(s) longer than {MAX_FN_LINES} lines (split them into named steps):\n  {}",
        offenders.len(),
        offenders.join("\n  ")
    );
    for (file, name) in LONG_FN_EXCEPTIONS {
        assert!(
            exceptions_seen.contains(&(file.to_string(), name.to_string())),
            "{file}: fn {name} is listed in LONG_FN_EXCEPTIONS but is no longer over \
             {MAX_FN_LINES} lines (or no longer exists); remove the exception"
        );
    }
}

/// Error codes are `domain::ErrorCode` variants: outside `src/domain/error.rs`, library code
/// writes none as text — no `ErrorCode::Other`, `ErrorCode::from` or `ErrorCode::parse` of a
/// string literal, and no `.code == "<a code>"`. (Tests may: they pin the wire text.)
#[test]
fn error_codes_are_variants_not_text() {
    let known = known_error_codes();
    let mut offenders = Vec::new();
    for file in crate_files() {
        let is_test_file = file.module.iter().any(|m| m == "tests");
        if file.display == "src/domain/error.rs" || is_test_file {
            continue;
        }
        let mut finder = CodesAsText {
            known: &known,
            found: Vec::new(),
        };
        finder.visit_file(&file.syntax);
        for (line, what) in finder.found {
            offenders.push(format!("{}:{line}: {what}", file.display));
        }
    }
    assert!(
        offenders.is_empty(),
        "error codes written as text (use or add an `ErrorCode` variant in \
         src/domain/error.rs):\n  {}",
        offenders.join("\n  ")
    );
}

/// Every `ErrorCode` is in docs/api.md's tables, so a user meeting one can look it up.
#[test]
fn every_error_code_is_documented() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/api.md");
    let docs = std::fs::read_to_string(path).unwrap();
    let missing: Vec<String> = known_error_codes()
        .into_iter()
        .filter(|code| !docs.contains(&format!("`{code}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "error codes docs/api.md does not list: {missing:?}"
    );
}

/// The text of every `ErrorCode` variant, read from the `error_codes!` table.
fn known_error_codes() -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/domain/error.rs");
    let text = std::fs::read_to_string(path).unwrap();
    let codes: BTreeSet<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.ends_with(", true;") || l.ends_with(", false;"))
        .filter_map(|l| l.split('"').nth(1).map(str::to_owned))
        .collect();
    assert!(codes.len() > 40, "read the codes of error.rs: {codes:?}");
    codes
}

struct CodesAsText<'a> {
    known: &'a BTreeSet<String>,
    found: Vec<(usize, String)>,
}

impl CodesAsText<'_> {
    /// `x.code`, `x.code()`, `x.code.as_str()`.
    fn names_a_code(expr: &syn::Expr) -> bool {
        match expr {
            syn::Expr::Field(f) => matches!(&f.member, syn::Member::Named(n) if n == "code"),
            syn::Expr::MethodCall(m) if m.method == "code" => true,
            syn::Expr::MethodCall(m) if m.method == "as_str" => Self::names_a_code(&m.receiver),
            syn::Expr::Reference(r) => Self::names_a_code(&r.expr),
            syn::Expr::Paren(p) => Self::names_a_code(&p.expr),
            _ => false,
        }
    }

    fn literal(expr: &syn::Expr) -> Option<(String, usize)> {
        match expr {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some((s.value(), s.span().start().line)),
            syn::Expr::MethodCall(m) if m.method == "into" => Self::literal(&m.receiver),
            // `Cow::Borrowed("…")`, `String::from("…")`
            syn::Expr::Call(c) => c.args.first().and_then(Self::literal),
            _ => None,
        }
    }
}

fn is_test_item(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        let path = a.path();
        let cfg_test =
            path.is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test");
        cfg_test || path.segments.last().is_some_and(|s| s.ident == "test")
    })
}

impl<'ast> Visit<'ast> for CodesAsText<'_> {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if !is_test_item(&item.attrs) {
            visit::visit_item_mod(self, item);
        }
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if !is_test_item(&item.attrs) {
            visit::visit_item_fn(self, item);
        }
    }

    fn visit_expr_call(&mut self, call: &'ast syn::ExprCall) {
        if let syn::Expr::Path(path) = &*call.func {
            let names: Vec<String> = path
                .path
                .segments
                .iter()
                .map(|s| s.ident.to_string())
                .collect();
            let built = matches!(
                names
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .as_slice(),
                [.., "ErrorCode", "Other" | "from" | "parse"]
            );
            if let (true, Some((text, line))) = (built, call.args.first().and_then(Self::literal)) {
                self.found
                    .push((line, format!("{}(\"{text}\")", names.join("::"))));
            }
        }
        visit::visit_expr_call(self, call);
    }

    fn visit_expr_binary(&mut self, binary: &'ast syn::ExprBinary) {
        if matches!(binary.op, syn::BinOp::Eq(_) | syn::BinOp::Ne(_)) {
            for (code, other) in [
                (&*binary.left, &*binary.right),
                (&*binary.right, &*binary.left),
            ] {
                if let (true, Some((text, line))) = (Self::names_a_code(code), Self::literal(other))
                    && self.known.contains(&text)
                {
                    self.found
                        .push((line, format!("a code compared with \"{text}\"")));
                }
            }
        }
        visit::visit_expr_binary(self, binary);
    }
}

#[test]
fn no_engine_function_takes_a_bool() {
    let mut offenders = Vec::new();
    for file in crate_files() {
        if file.module.first().map(String::as_str) != Some("engine") {
            continue;
        }
        let mut finder = BoolParameters::default();
        finder.visit_file(&file.syntax);
        for (name, line, parameter) in finder.found {
            offenders.push(format!(
                "{}:{line}: fn {name}(.., {parameter})",
                file.display
            ));
        }
    }
    assert!(
        offenders.is_empty(),
        "{} engine function(s) take a `bool` parameter (name the choice with a two-variant \
         enum, or split the function; ARCHITECTURE.md, \"The engine\"):\n  {}",
        offenders.len(),
        offenders.join("\n  ")
    );
}

/// Every fn, method and trait method with a parameter of type `bool`, `&bool` or
/// `Option<bool>`: (its name, `Type::name` for methods; its line; the parameter as written).
#[derive(Default)]
struct BoolParameters {
    /// The type or trait whose items are being read (`Engine`, `Hooks`), innermost last.
    owners: Vec<String>,
    found: Vec<(String, usize, String)>,
}

impl BoolParameters {
    fn record(&mut self, sig: &syn::Signature) {
        for input in &sig.inputs {
            let syn::FnArg::Typed(typed) = input else {
                continue;
            };
            let Some(ty) = bool_like(&typed.ty) else {
                continue;
            };
            let pattern = match &*typed.pat {
                syn::Pat::Ident(ident) => ident.ident.to_string(),
                _ => "_".to_owned(),
            };
            let parameter = format!("{pattern}: {ty}");
            let name = match self.owners.last() {
                Some(owner) => format!("{owner}::{}", sig.ident),
                None => sig.ident.to_string(),
            };
            self.found
                .push((name, sig.ident.span().start().line, parameter));
        }
    }
}

/// `bool`, `&bool`, `&mut bool` or `Option<bool>`, as written; `None` for any other type.
fn bool_like(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Reference(reference) => {
            let inner = bool_like(&reference.elem)?;
            let mutability = if reference.mutability.is_some() {
                "mut "
            } else {
                ""
            };
            Some(format!("&{mutability}{inner}"))
        }
        syn::Type::Paren(paren) => bool_like(&paren.elem),
        syn::Type::Path(path) if path.qself.is_none() => {
            if path.path.is_ident("bool") {
                return Some("bool".to_owned());
            }
            let last = path.path.segments.last()?;
            let syn::PathArguments::AngleBracketed(arguments) = &last.arguments else {
                return None;
            };
            let [syn::GenericArgument::Type(inner)] = Vec::from_iter(&arguments.args)[..] else {
                return None;
            };
            let inner = bool_like(inner)?;
            (last.ident == "Option").then(|| format!("Option<{inner}>"))
        }
        _ => None,
    }
}

impl<'ast> Visit<'ast> for BoolParameters {
    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        self.record(&item.sig);
        // A fn inside a method body belongs to no type.
        let owners = std::mem::take(&mut self.owners);
        visit::visit_item_fn(self, item);
        self.owners = owners;
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        let ty = &item.self_ty;
        let owner = match &**ty {
            syn::Type::Path(path) => path
                .path
                .segments
                .last()
                .map(|s| s.ident.to_string())
                .unwrap_or_default(),
            _ => String::new(),
        };
        self.owners.push(owner);
        visit::visit_item_impl(self, item);
        self.owners.pop();
    }

    fn visit_item_trait(&mut self, item: &'ast syn::ItemTrait) {
        self.owners.push(item.ident.to_string());
        visit::visit_item_trait(self, item);
        self.owners.pop();
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        self.record(&item.sig);
        visit::visit_impl_item_fn(self, item);
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        self.record(&item.sig);
        visit::visit_trait_item_fn(self, item);
    }
}

/// One file of the library, read as the module it is.
struct SourceFile {
    /// Path relative to the crate root, as messages show it (`src/plan/validate.rs`).
    display: String,
    /// Its module path below the crate root (`["plan", "validate"]`); empty for `lib.rs`.
    module: Vec<String>,
    syntax: syn::File,
}

/// Every file of the library's module tree, from `src/lib.rs`; fails on a file under `src/`
/// that the tree does not reach (other than `main.rs` and `cli/`, the binary's).
fn crate_files() -> Vec<SourceFile> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    read_module(root, &root.join("src/lib.rs"), Vec::new(), &mut files);

    let reached: BTreeSet<String> = files.iter().map(|f| f.display.clone()).collect();
    let mut on_disk = Vec::new();
    rust_files_under(&root.join("src"), &mut on_disk);
    let unreached: Vec<String> = on_disk
        .iter()
        .map(|path| relative(root, path))
        .filter(|path| path != "src/main.rs" && !path.starts_with("src/cli/"))
        .filter(|path| !reached.contains(path))
        .collect();
    assert!(
        unreached.is_empty(),
        "files under src/ that no `mod` declaration reaches: {unreached:?}"
    );
    files
}

/// Reads the file of module `module` and, recursively, the files of the modules it declares.
fn read_module(root: &Path, path: &Path, module: Vec<String>, files: &mut Vec<SourceFile>) {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let syntax =
        syn::parse_file(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    // Where this module's children live: `src/a/b.rs` and `src/a/b/mod.rs` both keep theirs
    // in `src/a/b/`; `lib.rs` and `mod.rs` in their own directory.
    let owns_directory = matches!(
        path.file_name().and_then(|n| n.to_str()),
        Some("lib.rs" | "mod.rs")
    );
    let directory = if owns_directory {
        path.parent().unwrap().to_path_buf()
    } else {
        path.with_extension("")
    };
    let mut declared = Vec::new();
    let file_directory = path.parent().unwrap();
    collect_mod_files(
        &syntax.items,
        &directory,
        file_directory,
        &module,
        &mut declared,
    );
    files.push(SourceFile {
        display: relative(root, path),
        module,
        syntax,
    });
    for (child_path, child_module) in declared {
        read_module(root, &child_path, child_module, files);
    }
}

/// The `mod x;` declarations among `items` (inline `mod x { … }` searched too), with the file
/// each one names and its module path. `directory` is where the children's files are looked
/// for, `path_base` what a `#[path]` is relative to (the file's own directory at its top
/// level, the children's directory inside an inline module).
fn collect_mod_files(
    items: &[syn::Item],
    directory: &Path,
    path_base: &Path,
    module: &[String],
    out: &mut Vec<(PathBuf, Vec<String>)>,
) {
    for item in items {
        let syn::Item::Mod(item) = item else { continue };
        let name = item.ident.to_string();
        let mut child = module.to_vec();
        child.push(name.clone());
        let explicit = item.attrs.iter().find_map(|attr| {
            let syn::Meta::NameValue(meta) = &attr.meta else {
                return None;
            };
            if !meta.path.is_ident("path") {
                return None;
            }
            match &meta.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value()),
                _ => None,
            }
        });
        match &item.content {
            Some((_, inner)) => {
                let inner_directory = directory.join(&name);
                collect_mod_files(inner, &inner_directory, &inner_directory, &child, out);
            }
            None => {
                let file = match explicit {
                    Some(explicit) => path_base.join(explicit),
                    None if directory.join(format!("{name}.rs")).exists() => {
                        directory.join(format!("{name}.rs"))
                    }
                    None => directory.join(&name).join("mod.rs"),
                };
                out.push((file, child));
            }
        }
    }
}

fn rust_files_under(directory: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(directory).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files_under(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn relative(root: &Path, path: &Path) -> String {
    let path = path.strip_prefix(root).unwrap_or(path);
    // `a/b/../c.rs` from a `#[path]` with `..`: shown as it is on disk.
    let mut parts: Vec<String> = Vec::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::CurDir => {}
            other => parts.push(other.as_os_str().to_string_lossy().into_owned()),
        }
    }
    parts.join("/")
}

/// A reference from a file to another module.
#[derive(Clone)]
struct Reference {
    /// The top-level module referred to.
    target: String,
    /// The whole path referred to, from the crate root (`["engine", "runtime", "sink", "emit"]`).
    path: Vec<String>,
    file: String,
    line: usize,
}

/// Every path in `file` that names a module by `crate::`, `super::`, `self::` or a child
/// module's name (`modules`: every module of the crate, as paths from its root).
fn references(file: &SourceFile, modules: &BTreeSet<Vec<String>>) -> Vec<Reference> {
    let mut finder = References {
        file: &file.display,
        module: file.module.clone(),
        modules,
        found: Vec::new(),
    };
    finder.visit_file(&file.syntax);
    finder.found
}

struct References<'a> {
    file: &'a str,
    /// The module being read: the file's, plus inline `mod`s entered.
    module: Vec<String>,
    modules: &'a BTreeSet<Vec<String>>,
    found: Vec<Reference>,
}

impl References<'_> {
    /// Resolves a path's leading segments (`crate`, `super`, `self`, or a child module of the
    /// module being read) to the path from the crate root it names.
    fn resolve(&mut self, segments: &[String], span: Span) {
        let child = |first: &String| {
            let mut path = self.module.clone();
            path.push(first.clone());
            segments.len() >= 2 && self.modules.contains(&path)
        };
        let mut at = match segments.first().map(String::as_str) {
            Some("crate") => Vec::new(),
            Some("super" | "self") => self.module.clone(),
            Some(_) if child(&segments[0]) => self.module.clone(),
            _ => return,
        };
        let mut rest = segments;
        if rest[0] == "crate" {
            rest = &rest[1..];
        } else {
            while let Some(first) = rest.first() {
                match first.as_str() {
                    "super" => {
                        at.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
        }
        at.extend(rest.iter().cloned());
        let Some(target) = at.first().cloned() else {
            return;
        };
        self.found.push(Reference {
            target,
            path: at,
            file: self.file.to_string(),
            line: span.start().line,
        });
    }

    /// Paths inside a macro's tokens: `crate :: x` and `super :: x` sequences.
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(group) => self.scan_tokens(group.stream()),
                TokenTree::Ident(ident) if ident == "crate" || ident == "super" => {
                    let mut segments = vec![ident.to_string()];
                    let mut j = i + 1;
                    while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) =
                        (tokens.get(j), tokens.get(j + 1))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        match tokens.get(j + 2) {
                            Some(TokenTree::Ident(next)) => segments.push(next.to_string()),
                            _ => break,
                        }
                        j += 3;
                    }
                    self.resolve(&segments, ident.span());
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(path) => {
                prefix.push(path.ident.to_string());
                self.use_tree(prefix, &path.tree);
                prefix.pop();
            }
            syn::UseTree::Name(name) => self.use_leaf(prefix, &name.ident),
            syn::UseTree::Rename(rename) => self.use_leaf(prefix, &rename.ident),
            syn::UseTree::Glob(glob) => {
                let span = glob.star_token.spans[0];
                if !prefix.is_empty() {
                    self.resolve(prefix, span);
                }
            }
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }

    fn use_leaf(&mut self, prefix: &[String], ident: &syn::Ident) {
        let mut segments = prefix.to_vec();
        segments.push(ident.to_string());
        self.resolve(&segments, ident.span());
    }
}

impl<'ast> Visit<'ast> for References<'_> {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        self.module.push(item.ident.to_string());
        visit::visit_item_mod(self, item);
        self.module.pop();
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if let Some(first) = path.segments.first() {
            self.resolve(&segments, first.ident.span());
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.scan_tokens(mac.tokens.clone());
        visit::visit_macro(self, mac);
    }

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {
        // Doc comments and attributes are not imports (`#[doc = "crate::api"]`).
    }

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {
        // `pub(super)` and `pub(in crate::engine)` say who may see an item, not what it uses.
    }
}

/// `graph`'s first cycle as a problem: `headline`, the cycle, and where each of its arrows
/// is first written.
fn cycle_problem(
    graph: &BTreeMap<String, BTreeMap<String, Reference>>,
    headline: &str,
) -> Option<String> {
    let cycle = find_cycle(graph)?;
    let mut message = format!("{headline}: {}", cycle.join(" -> "));
    for pair in cycle.windows(2) {
        let reference = &graph[&pair[0]][&pair[1]];
        let _ = write!(
            message,
            "\n    {} -> {}: first at {}:{}",
            pair[0], pair[1], reference.file, reference.line
        );
    }
    Some(message)
}

/// A cycle in the graph of top-level modules, as the modules along it (first repeated last).
fn find_cycle(graph: &BTreeMap<String, BTreeMap<String, Reference>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn walk(
        node: &str,
        graph: &BTreeMap<String, BTreeMap<String, Reference>>,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(node.to_string(), Mark::Open);
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flat_map(|edges| edges.keys()) {
            match marks.get(next.as_str()) {
                Some(Mark::Open) => {
                    let start = stack.iter().position(|n| n == next).unwrap();
                    let mut cycle = stack[start..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Some(Mark::Done) => {}
                None => {
                    if let Some(cycle) = walk(next, graph, marks, stack) {
                        return Some(cycle);
                    }
                }
            }
        }
        stack.pop();
        marks.insert(node.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if !marks.contains_key(node.as_str())
            && let Some(cycle) = walk(node, graph, &mut marks, &mut Vec::new())
        {
            return Some(cycle);
        }
    }
    None
}

/// Every function with a body: (name, first line, length in lines from its signature to
/// its closing brace). Closures are part of the function they are written in.
#[derive(Default)]
struct FnLengths {
    found: Vec<(String, usize, usize)>,
}

impl FnLengths {
    fn record(&mut self, vis: Option<&syn::Visibility>, sig: &syn::Signature, block: &syn::Block) {
        let start = match vis {
            Some(syn::Visibility::Public(token)) => token.span.start().line,
            Some(syn::Visibility::Restricted(restricted)) => restricted.pub_token.span.start().line,
            _ => sig
                .constness
                .as_ref()
                .map(|t| t.span.start().line)
                .or(sig.asyncness.as_ref().map(|t| t.span.start().line))
                .or(sig.unsafety.as_ref().map(|t| t.span.start().line))
                .unwrap_or(sig.fn_token.span.start().line),
        };
        let end = block.brace_token.span.close().end().line;
        self.found
            .push((sig.ident.to_string(), start, end + 1 - start));
    }
}

impl<'ast> Visit<'ast> for FnLengths {
    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        self.record(Some(&item.vis), &item.sig, &item.block);
        visit::visit_item_fn(self, item);
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        self.record(Some(&item.vis), &item.sig, &item.block);
        visit::visit_impl_item_fn(self, item);
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if let Some(block) = &item.default {
            self.record(None, &item.sig, block);
        }
        visit::visit_trait_item_fn(self, item);
    }
}
