//! Templates: JSON values whose strings carry `{{ ... }}` references to data of the run.
//!
//! Owns the reference syntax, its parser, and resolution against a [`Scope`]. It must not know
//! where results are kept: the engine hands in a [`Scope`] whose step results come through the
//! [`StepResults`] trait.
//!
//! Syntax of a reference (whitespace inside the braces is ignored):
//!
//! ```text
//! input            input.a.b          input.items[0]        input["odd key"]
//! steps.ID.output  steps.ID.output.x  steps.ID.status       steps["id.with.dots"].output
//! vars.NAME        vars.NAME.a[2]                            (the plan scope)
//! session.NAME     session.NAME.a                            (the session scope; unset: null)
//! step.id  step.name  step.kind  step.attempt  step.path  step.metadata.x   (the current step)
//! local.item       local.item.field  local.index             (loop bodies only)
//! item             index                                     (old names of local.item, local.index)
//! ```
//!
//! A string that is exactly one `{{ ... }}` resolves to the referenced value with its JSON type;
//! a string with text around its references interpolates them (strings as they are, any other
//! value as compact JSON). Arrays and objects are resolved member by member. A step id may
//! contain dots as long as no dot-separated part of it is `output` or `status`; otherwise quote
//! it: `steps["a.output"].output`. There is no escape for a literal `{{`.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde_json::{Map, Value};

use crate::domain::{ErrorCode, RunError, StepStatus};
use crate::schema::json_type_name;

/// What a step produced so far, as the engine knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepState {
    pub status: StepStatus,
    /// `None` until the step completes (and for steps that failed or were skipped).
    pub output: Option<Value>,
}

/// A borrowed view of one step's result.
#[derive(Debug, Clone, Copy)]
pub struct StepView<'a> {
    pub status: StepStatus,
    pub output: Option<&'a Value>,
}

/// Where references find step results. The engine implements it on whatever it keeps results
/// in; maps keyed by step id work out of the box. `Sync` so that a [`Scope`] can be held
/// across an `.await` in a task that must be `Send`.
pub trait StepResults: Sync {
    /// The result of step `id`, if the step has one yet.
    fn get(&self, id: &str) -> Option<StepView<'_>>;
    /// Every known result, for conditions that index `steps` with a computed key.
    fn each(&self, f: &mut dyn FnMut(&str, StepView<'_>));
}

impl StepResults for HashMap<String, StepState> {
    fn get(&self, id: &str) -> Option<StepView<'_>> {
        HashMap::get(self, id).map(StepState::view)
    }
    fn each(&self, f: &mut dyn FnMut(&str, StepView<'_>)) {
        for (id, state) in self {
            f(id, state.view());
        }
    }
}

impl StepResults for BTreeMap<String, StepState> {
    fn get(&self, id: &str) -> Option<StepView<'_>> {
        BTreeMap::get(self, id).map(StepState::view)
    }
    fn each(&self, f: &mut dyn FnMut(&str, StepView<'_>)) {
        for (id, state) in self {
            f(id, state.view());
        }
    }
}

/// No step results at all (e.g. resolving a loop's `for_each` before anything ran).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoResults;

impl StepResults for NoResults {
    fn get(&self, _id: &str) -> Option<StepView<'_>> {
        None
    }
    fn each(&self, _f: &mut dyn FnMut(&str, StepView<'_>)) {}
}

impl StepState {
    pub fn completed(output: Value) -> Self {
        StepState {
            status: StepStatus::Completed,
            output: Some(output),
        }
    }

    /// A step that ended without an output (`failed`, `skipped`).
    pub fn without_output(status: StepStatus) -> Self {
        StepState {
            status,
            output: None,
        }
    }

    pub fn skipped() -> Self {
        Self::without_output(StepStatus::Skipped)
    }

    pub fn view(&self) -> StepView<'_> {
        StepView {
            status: self.status,
            output: self.output.as_ref(),
        }
    }
}

/// Everything a reference can name, borrowed from the engine for one resolution. Building one
/// costs nothing: it only holds references.
#[derive(Clone, Copy)]
pub struct Scope<'a> {
    pub input: &'a Value,
    pub steps: &'a dyn StepResults,
    pub vars: &'a Map<String, Value>,
    /// The current element inside a `for_each` loop body.
    pub item: Option<&'a Value>,
    /// The current iteration (from 0) inside a loop body.
    pub index: Option<u64>,
    /// The session's variables (`session.NAME`); `None` reads like an empty session.
    pub session: Option<&'a Map<String, Value>>,
    /// The current step (`step.id`, `step.attempt`, ...); `None` outside a step (a plan's
    /// `output`, its `session_variables`).
    pub step: Option<&'a Value>,
}

impl<'a> Scope<'a> {
    /// A scope outside any loop.
    pub fn new(input: &'a Value, steps: &'a dyn StepResults, vars: &'a Map<String, Value>) -> Self {
        Scope {
            input,
            steps,
            vars,
            item: None,
            index: None,
            session: None,
            step: None,
        }
    }

    /// The same scope with the session's variables.
    pub fn with_session(self, session: &'a Map<String, Value>) -> Self {
        Scope {
            session: Some(session),
            ..self
        }
    }

    /// The same scope inside a loop body, at iteration `index` (with `item` for `for_each`).
    pub fn in_loop(self, item: Option<&'a Value>, index: u64) -> Self {
        Scope {
            item,
            index: Some(index),
            ..self
        }
    }
}

impl fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope")
            .field("input", self.input)
            .field("vars", self.vars)
            .field("item", &self.item)
            .field("index", &self.index)
            .field("session", &self.session)
            .field("step", &self.step)
            .finish_non_exhaustive()
    }
}

/// Which part of a step's result a reference reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepField {
    Output,
    Status,
}

/// What a reference starts from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Root {
    Input,
    Step {
        id: String,
        field: StepField,
    },
    Var(String),
    /// `session.NAME`: a variable kept across the runs of one session.
    Session(String),
    /// `step.FIELD`: the current step's own data, one of [`STEP_FIELDS`].
    CurrentStep(String),
    /// `item` or `local.item`.
    Item,
    /// `index` or `local.index`.
    Index,
}

/// What `step.` may be followed by.
pub const STEP_FIELDS: [&str; 6] = ["id", "name", "kind", "attempt", "path", "metadata"];

/// The names a reference (or a condition) may start with.
pub const SCOPES: &str = "`input`, `steps`, `vars`, `session`, `step`, `local`, `item` or `index`";

/// One step of a path into a value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    Key(String),
    Index(usize),
}

/// A parsed `{{ ... }}` reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    pub root: Root,
    pub path: Vec<Segment>,
}

/// Why a template could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error(transparent)]
    Ref(#[from] RefError),
    #[error("the rendered value would be larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
}

/// A template that could not be rendered, as a step error.
pub fn render_error(e: RenderError) -> RunError {
    let code = match e {
        RenderError::Ref(_) => ErrorCode::BadReference,
        RenderError::TooLarge { .. } => ErrorCode::RenderLimitExceeded,
    };
    RunError::new(code, e.to_string())
}

/// What is left of a render's size limit.
struct Budget {
    left: usize,
    limit: usize,
}

impl Budget {
    fn spend(&mut self, bytes: usize) -> Result<(), RenderError> {
        self.left = self
            .left
            .checked_sub(bytes)
            .ok_or(RenderError::TooLarge { limit: self.limit })?;
        Ok(())
    }
}

/// The length of `v`'s JSON text, about: strings by their bytes, numbers as 8.
fn json_size(v: &Value) -> usize {
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => items.iter().map(json_size).sum::<usize>() + items.len() + 2,
        Value::Object(members) => {
            members
                .iter()
                .map(|(k, v)| k.len() + 4 + json_size(v))
                .sum::<usize>()
                + 2
        }
    }
}

/// A reference that could not be resolved: which one, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reference}: {message}")]
pub struct RefError {
    /// The reference in canonical form, e.g. `steps.fetch.output.items[3]`.
    pub reference: String,
    pub message: String,
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.root {
            Root::Input => f.write_str("input")?,
            Root::Item => f.write_str("item")?,
            Root::Index => f.write_str("index")?,
            Root::Var(name) => {
                f.write_str("vars")?;
                write_key(f, name)?;
            }
            Root::Session(name) => {
                f.write_str("session")?;
                write_key(f, name)?;
            }
            Root::CurrentStep(field) => write!(f, "step.{field}")?,
            Root::Step { id, field } => {
                let plain = id
                    .split('.')
                    .all(|part| is_key(part) && part != "output" && part != "status");
                if plain {
                    write!(f, "steps.{id}")?;
                } else {
                    write!(f, "steps[{}]", quote(id))?;
                }
                f.write_str(match field {
                    StepField::Output => ".output",
                    StepField::Status => ".status",
                })?;
            }
        }
        write_path(f, &self.path)
    }
}

fn write_path(f: &mut impl fmt::Write, path: &[Segment]) -> fmt::Result {
    for segment in path {
        match segment {
            Segment::Key(k) => write_key(f, k)?,
            Segment::Index(i) => write!(f, "[{i}]")?,
        }
    }
    Ok(())
}

fn write_key(f: &mut impl fmt::Write, key: &str) -> fmt::Result {
    if is_key(key) {
        write!(f, ".{key}")
    } else {
        write!(f, "[{}]", quote(key))
    }
}

fn quote(s: &str) -> String {
    if s.contains('"') {
        format!("'{s}'")
    } else {
        format!("\"{s}\"")
    }
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Whether `s` may name a session variable: 1-64 letters, digits, `_` or `-`.
pub fn is_variable_name(s: &str) -> bool {
    is_key(s) && s.len() <= 64
}

fn is_key(s: &str) -> bool {
    !s.is_empty() && s.chars().all(is_key_char)
}

/// A token of a reference's text.
#[derive(Debug, PartialEq)]
enum Token {
    /// `name` at the start or `.name`.
    Name(String),
    /// `["name"]` or `['name']`.
    Quoted(String),
    /// `[3]`.
    Index(usize),
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    let name_at = |i: &mut usize| -> Option<String> {
        let start = *i;
        while *i < chars.len() && is_key_char(chars[*i]) {
            *i += 1;
        }
        (*i > start).then(|| chars[start..*i].iter().collect())
    };
    match name_at(&mut i) {
        Some(name) => tokens.push(Token::Name(name)),
        None => return Err(format!("`{text}` must start with a name")),
    }
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                match name_at(&mut i) {
                    Some(name) => tokens.push(Token::Name(name)),
                    None => {
                        return Err(format!(
                            "expected a name after `.` at character {} of `{text}`",
                            i + 1
                        ));
                    }
                }
            }
            '[' => {
                i += 1;
                while i < chars.len() && chars[i] == ' ' {
                    i += 1;
                }
                match chars.get(i) {
                    Some(&q @ ('"' | '\'')) => {
                        let start = i + 1;
                        let Some(len) = chars[start..].iter().position(|&c| c == q) else {
                            return Err(format!("unclosed quote in `{text}`"));
                        };
                        tokens.push(Token::Quoted(chars[start..start + len].iter().collect()));
                        i = start + len + 1;
                    }
                    Some(c) if c.is_ascii_digit() => {
                        let start = i;
                        while i < chars.len() && chars[i].is_ascii_digit() {
                            i += 1;
                        }
                        let digits: String = chars[start..i].iter().collect();
                        let n = digits
                            .parse::<usize>()
                            .map_err(|_| format!("index `{digits}` is too large in `{text}`"))?;
                        tokens.push(Token::Index(n));
                    }
                    _ => {
                        return Err(format!(
                            "`[` must hold an index (0, 1, ...) or a quoted key, in `{text}`"
                        ));
                    }
                }
                while i < chars.len() && chars[i] == ' ' {
                    i += 1;
                }
                if chars.get(i) != Some(&']') {
                    return Err(format!("expected `]` at character {} of `{text}`", i + 1));
                }
                i += 1;
            }
            c => {
                return Err(format!(
                    "unexpected `{c}` at character {} of `{text}`",
                    i + 1
                ));
            }
        }
    }
    Ok(tokens)
}

/// The root a reference starts with, taking what it needs from `tokens` (`text` is the
/// whole reference, for messages).
fn parse_root(
    root: &str,
    tokens: &mut impl Iterator<Item = Token>,
    text: &str,
) -> Result<Root, String> {
    Ok(match root {
        "input" => Root::Input,
        "item" => Root::Item,
        "index" => Root::Index,
        "vars" => match tokens.next() {
            Some(Token::Name(n) | Token::Quoted(n)) => Root::Var(n),
            _ => {
                return Err(format!(
                    "`vars` must be followed by a variable name: `vars.NAME`, in `{text}`"
                ));
            }
        },
        "session" => match tokens.next() {
            Some(Token::Name(n) | Token::Quoted(n)) => Root::Session(n),
            _ => {
                return Err(format!(
                    "`session` must be followed by a variable name: `session.NAME`, in `{text}`"
                ));
            }
        },
        "step" => match tokens.next() {
            Some(Token::Name(n)) if STEP_FIELDS.contains(&n.as_str()) => Root::CurrentStep(n),
            _ => {
                return Err(format!(
                    "`step` is the current step: `step.id`, `step.name`, `step.kind`, `step.attempt`, `step.path` or `step.metadata`, in `{text}`"
                ));
            }
        },
        "local" => match tokens.next() {
            Some(Token::Name(n)) if n == "item" => Root::Item,
            Some(Token::Name(n)) if n == "index" => Root::Index,
            _ => {
                return Err(format!(
                    "`local` holds a loop body's `local.item` and `local.index`, in `{text}`"
                ));
            }
        },
        "steps" => {
            let mut id_parts: Vec<String> = Vec::new();
            let field = loop {
                match tokens.next() {
                    Some(Token::Quoted(q)) if id_parts.is_empty() => id_parts.push(q),
                    Some(Token::Name(n)) if n == "output" && !id_parts.is_empty() => {
                        break StepField::Output;
                    }
                    Some(Token::Name(n)) if n == "status" && !id_parts.is_empty() => {
                        break StepField::Status;
                    }
                    Some(Token::Name(n)) => id_parts.push(n),
                    _ => {
                        return Err(format!(
                            "a step reference is `steps.ID.output` or `steps.ID.status`, in `{text}`"
                        ));
                    }
                }
            };
            Root::Step {
                id: id_parts.join("."),
                field,
            }
        }
        other => {
            return Err(format!(
                "unknown scope `{other}` in `{text}`: a reference starts with {SCOPES}"
            ));
        }
    })
}

impl Reference {
    /// Parses the text between `{{` and `}}`.
    pub fn parse(text: &str) -> Result<Reference, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("empty reference `{{ }}`".to_owned());
        }
        let mut tokens = tokenize(text)?.into_iter().peekable();
        let root = match tokens.next() {
            Some(Token::Name(n)) => n,
            _ => return Err(format!("`{text}` must start with a name")),
        };
        let root = parse_root(&root, &mut tokens, text)?;
        let path: Vec<Segment> = tokens
            .map(|t| match t {
                Token::Name(n) | Token::Quoted(n) => Segment::Key(n),
                Token::Index(i) => Segment::Index(i),
            })
            .collect();
        if !path.is_empty() {
            match &root {
                Root::CurrentStep(f) if f != "metadata" => {
                    return Err(format!(
                        "`step.{f}` is a plain value; only `step.metadata` has members, in `{text}`"
                    ));
                }
                Root::Index => {
                    return Err(format!(
                        "`index` is a number; nothing can follow it, in `{text}`"
                    ));
                }
                Root::Step {
                    field: StepField::Status,
                    ..
                } => {
                    return Err(format!(
                        "a status is a string; nothing can follow `.status`, in `{text}`"
                    ));
                }
                _ => {}
            }
        }
        Ok(Reference { root, path })
    }

    /// The referenced value, borrowed from the scope where possible.
    pub fn resolve<'s>(&self, scope: &Scope<'s>) -> Result<Cow<'s, Value>, RefError> {
        let Some(base) = self.base(scope)? else {
            return Ok(Cow::Owned(Value::Null));
        };
        if self.path.is_empty() {
            return Ok(base);
        }
        // Walking a borrowed value stays borrowed; only `index` and `status` are owned, and
        // neither can have a path.
        let Cow::Borrowed(mut current) = base else {
            return Err(self.error("nothing can follow this value".to_owned()));
        };
        for (n, segment) in self.path.iter().enumerate() {
            current = self.step_into(current, segment, n)?;
        }
        Ok(Cow::Borrowed(current))
    }

    fn error(&self, message: String) -> RefError {
        RefError {
            reference: self.to_string(),
            message,
        }
    }

    /// The value the root names; `None` for the output of a skipped step or a session
    /// variable not set yet, which are null whatever follows them.
    fn base<'s>(&self, scope: &Scope<'s>) -> Result<Option<Cow<'s, Value>>, RefError> {
        let fail = |message: String| self.error(message);
        Ok(Some(match &self.root {
            Root::Input => Cow::Borrowed(scope.input),
            Root::Item => Cow::Borrowed(scope.item.ok_or_else(|| {
                fail("`item` is only defined inside the body of a `for_each` loop".to_owned())
            })?),
            Root::Index => {
                Cow::Owned(Value::from(scope.index.ok_or_else(|| {
                    fail("`index` is only defined inside a loop body".to_owned())
                })?))
            }
            Root::Var(name) => Cow::Borrowed(
                scope
                    .vars
                    .get(name)
                    .ok_or_else(|| fail(format!("no variable `{name}`")))?,
            ),
            // A session variable no run has set yet reads as null, whatever follows it: the
            // first run of a session has none.
            Root::Session(name) => match scope.session.and_then(|s| s.get(name)) {
                Some(v) => Cow::Borrowed(v),
                None => return Ok(None),
            },
            Root::CurrentStep(field) => {
                let step = scope
                    .step
                    .ok_or_else(|| fail("`step` is only defined inside a step".to_owned()))?;
                Cow::Borrowed(step.get(field).unwrap_or(&Value::Null))
            }
            Root::Step { id, field } => {
                let view = scope
                    .steps
                    .get(id)
                    .ok_or_else(|| fail(format!("step `{id}` has no result yet")))?;
                // A skipped step (an arm not taken) has no output, and everything read from
                // it is null rather than an error: a join after a branch can read both arms.
                if field == &StepField::Output && view.status == StepStatus::Skipped {
                    return Ok(None);
                }
                match field {
                    StepField::Status => Cow::Owned(Value::from(view.status.as_str())),
                    StepField::Output => Cow::Borrowed(view.output.ok_or_else(|| {
                        fail(format!(
                            "step `{id}` has no output (it is {})",
                            view.status.as_str()
                        ))
                    })?),
                }
            }
        }))
    }

    /// Follows path segment `n` from `current`.
    fn step_into<'v>(
        &self,
        current: &'v Value,
        segment: &Segment,
        n: usize,
    ) -> Result<&'v Value, RefError> {
        let so_far = || {
            let mut s = Reference {
                root: self.root.clone(),
                path: Vec::new(),
            }
            .to_string();
            let _ = write_path(&mut s, &self.path[..n]);
            s
        };
        match (segment, current) {
            (Segment::Key(k), Value::Object(map)) => map
                .get(k)
                .ok_or_else(|| self.error(format!("`{}` has no member `{k}`", so_far()))),
            (Segment::Index(i), Value::Array(items)) => items.get(*i).ok_or_else(|| {
                self.error(format!(
                    "index {i} is out of range: `{}` has {} item{}",
                    so_far(),
                    items.len(),
                    if items.len() == 1 { "" } else { "s" }
                ))
            }),
            (Segment::Key(k), other) => Err(self.error(format!(
                "`{}` is {}, not an object, so it has no member `{k}`",
                so_far(),
                json_type_name(other)
            ))),
            (Segment::Index(i), other) => Err(self.error(format!(
                "`{}` is {}, not an array, so it has no index {i}",
                so_far(),
                json_type_name(other)
            ))),
        }
    }
}

/// A piece of an interpolated string.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Text(String),
    Ref(Reference),
}

/// A JSON value with its references parsed once, ready to resolve many times.
#[derive(Debug, Clone, PartialEq)]
pub enum Template {
    /// No reference anywhere inside: resolving is a clone.
    Literal(Value),
    /// A string that is exactly one reference: the referenced value, type kept.
    Ref(Reference),
    /// A string with text around its references.
    Text(Vec<Piece>),
    Array(Vec<Template>),
    Object(Vec<(String, Template)>),
}

/// A syntax error in a template, located by a JSON Pointer relative to the template's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    pub pointer: String,
    pub message: String,
}

impl Template {
    /// Parses every string of `value`. Reports every bad string, each with its pointer.
    pub fn parse(value: &Value) -> Result<Template, Vec<SyntaxError>> {
        let mut errors = Vec::new();
        let template = parse_at(value, &mut String::new(), &mut errors);
        if errors.is_empty() {
            Ok(template)
        } else {
            Err(errors)
        }
    }

    /// Whether resolving can change the value.
    pub fn has_references(&self) -> bool {
        !matches!(self, Template::Literal(_))
    }

    /// Every reference, with the pointer (relative to the template) of the string holding it.
    pub fn references(&self) -> Vec<(String, &Reference)> {
        let mut out = Vec::new();
        self.collect(&mut String::new(), &mut out);
        out
    }

    fn collect<'t>(&'t self, pointer: &mut String, out: &mut Vec<(String, &'t Reference)>) {
        match self {
            Template::Literal(_) => {}
            Template::Ref(r) => out.push((pointer.clone(), r)),
            Template::Text(pieces) => {
                for piece in pieces {
                    if let Piece::Ref(r) = piece {
                        out.push((pointer.clone(), r));
                    }
                }
            }
            Template::Array(items) => {
                for (i, t) in items.iter().enumerate() {
                    let len = pointer.len();
                    pointer.push_str(&format!("/{i}"));
                    t.collect(pointer, out);
                    pointer.truncate(len);
                }
            }
            Template::Object(members) => {
                for (k, t) in members {
                    let len = pointer.len();
                    pointer.push('/');
                    pointer.push_str(&escape_pointer(k));
                    t.collect(pointer, out);
                    pointer.truncate(len);
                }
            }
        }
    }

    /// The value with every reference replaced. Stops at the first reference that fails.
    pub fn resolve(&self, scope: &Scope<'_>) -> Result<Value, RefError> {
        self.render(scope, usize::MAX).map_err(|e| match e {
            RenderError::Ref(e) => e,
            RenderError::TooLarge { .. } => unreachable!("no value is larger than usize::MAX"),
        })
    }

    /// [`Self::resolve`], refusing to build a value of more than `max_bytes` (counted as its
    /// JSON text): a template that repeats a large value must not turn a small plan into a
    /// huge allocation. Gives up as soon as the budget is spent.
    pub fn render(&self, scope: &Scope<'_>, max_bytes: usize) -> Result<Value, RenderError> {
        let mut budget = Budget {
            left: max_bytes,
            limit: max_bytes,
        };
        self.render_within(scope, &mut budget)
    }

    fn render_within(&self, scope: &Scope<'_>, budget: &mut Budget) -> Result<Value, RenderError> {
        Ok(match self {
            Template::Literal(v) => {
                budget.spend(json_size(v))?;
                v.clone()
            }
            Template::Ref(r) => {
                let v = r.resolve(scope)?;
                budget.spend(json_size(&v))?;
                v.into_owned()
            }
            Template::Text(pieces) => {
                let mut out = String::new();
                for piece in pieces {
                    match piece {
                        Piece::Text(t) => {
                            budget.spend(t.len())?;
                            out.push_str(t);
                        }
                        Piece::Ref(r) => {
                            // Counted before it is copied: a huge value is refused, not built.
                            let v = r.resolve(scope)?;
                            match v.as_ref() {
                                Value::String(s) => {
                                    budget.spend(s.len())?;
                                    out.push_str(s);
                                }
                                other => {
                                    budget.spend(json_size(other))?;
                                    out.push_str(&other.to_string());
                                }
                            }
                        }
                    }
                }
                Value::String(out)
            }
            Template::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|t| t.render_within(scope, budget))
                    .collect::<Result<_, _>>()?,
            ),
            Template::Object(members) => Value::Object(
                members
                    .iter()
                    .map(|(k, t)| {
                        budget.spend(k.len())?;
                        Ok((k.clone(), t.render_within(scope, budget)?))
                    })
                    .collect::<Result<_, RenderError>>()?,
            ),
        })
    }
}

pub(crate) use crate::schema::escape_pointer;

/// Whether any string inside `value` (keys excepted) contains `{{`.
pub fn contains_template(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains("{{"),
        Value::Array(items) => items.iter().any(contains_template),
        Value::Object(map) => map.values().any(contains_template),
        _ => false,
    }
}

fn parse_at(value: &Value, pointer: &mut String, errors: &mut Vec<SyntaxError>) -> Template {
    if !contains_template(value) {
        return Template::Literal(value.clone());
    }
    match value {
        Value::String(s) => match parse_string(s) {
            Ok(t) => t,
            Err(message) => {
                errors.push(SyntaxError {
                    pointer: pointer.clone(),
                    message,
                });
                Template::Literal(value.clone())
            }
        },
        Value::Array(items) => Template::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let len = pointer.len();
                    pointer.push_str(&format!("/{i}"));
                    let t = parse_at(v, pointer, errors);
                    pointer.truncate(len);
                    t
                })
                .collect(),
        ),
        Value::Object(map) => Template::Object(
            map.iter()
                .map(|(k, v)| {
                    let len = pointer.len();
                    pointer.push('/');
                    pointer.push_str(&escape_pointer(k));
                    let t = parse_at(v, pointer, errors);
                    pointer.truncate(len);
                    (k.clone(), t)
                })
                .collect(),
        ),
        other => Template::Literal(other.clone()),
    }
}

fn parse_string(s: &str) -> Result<Template, String> {
    let mut pieces = Vec::new();
    let mut rest = s;
    while let Some(open) = rest.find("{{") {
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_owned()));
        }
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            return Err(format!(
                "`{{{{` at character {} has no closing `}}}}`",
                s.len() - rest.len() + open + 1
            ));
        };
        let inner = &after[..close];
        if inner.contains("{{") {
            return Err(format!("`{{{{` inside the reference `{{{{{inner}}}}}`"));
        }
        pieces.push(Piece::Ref(Reference::parse(inner)?));
        rest = &after[close + 2..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_owned()));
    }
    if let [Piece::Ref(_)] = pieces.as_slice() {
        let Some(Piece::Ref(r)) = pieces.pop() else {
            unreachable!("matched one reference just above")
        };
        return Ok(Template::Ref(r));
    }
    Ok(Template::Text(pieces))
}

/// Resolves `template` against `scope`, parsing it on the way (the tests' shorthand; the
/// engine resolves the parsed templates a validated plan's specs hold).
#[cfg(test)]
pub fn resolve(template: &Value, scope: &Scope<'_>) -> Result<Value, RefError> {
    Template::parse(template)
        .map_err(|errors| RefError {
            reference: errors
                .first()
                .map(|e| e.pointer.clone())
                .unwrap_or_default(),
            message: errors
                .iter()
                .map(|e| e.message.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        })?
        .resolve(scope)
}

/// Every reference in `template`, in document order; the first syntax error otherwise (the
/// tests' shorthand).
#[cfg(test)]
pub fn references(template: &Value) -> Result<Vec<Reference>, String> {
    match Template::parse(template) {
        Ok(t) => Ok(t.references().into_iter().map(|(_, r)| r.clone()).collect()),
        Err(errors) => Err(errors
            .into_iter()
            .next()
            .map(|e| {
                if e.pointer.is_empty() {
                    e.message
                } else {
                    format!("{}: {}", e.pointer, e.message)
                }
            })
            .unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn results() -> HashMap<String, StepState> {
        let mut steps = HashMap::new();
        steps.insert(
            "fetch".to_owned(),
            StepState::completed(json!({"items": [{"name": "a"}, {"name": "b"}], "count": 2})),
        );
        steps.insert(
            "broken".to_owned(),
            StepState {
                status: StepStatus::Failed,
                output: None,
            },
        );
        steps.insert("a.b".to_owned(), StepState::completed(json!("dotted")));
        steps
    }

    fn check(template: Value, want: Result<Value, &str>) {
        let steps = results();
        let vars = json!({"greeting": "hi", "limits": {"max": [1, 2, 3]}});
        let input = json!({"q": "what", "items": [10, 20], "odd key": true});
        let item = json!({"x": 1});
        let scope = Scope::new(&input, &steps, vars.as_object().unwrap()).in_loop(Some(&item), 4);
        let got = resolve(&template, &scope).map_err(|e| e.to_string());
        assert_eq!(got, want.map_err(str::to_owned), "{template}");
    }

    #[test]
    fn whole_string_references_keep_their_type() {
        let table = [
            (
                json!("{{ input }}"),
                json!({"q": "what", "items": [10, 20], "odd key": true}),
            ),
            (json!("{{input.items}}"), json!([10, 20])),
            (json!("{{ input.items[1] }}"), json!(20)),
            (json!("{{ input[\"odd key\"] }}"), json!(true)),
            (json!("{{ steps.fetch.output.count }}"), json!(2)),
            (json!("{{ steps.fetch.output.items[1].name }}"), json!("b")),
            (json!("{{ steps.fetch.status }}"), json!("completed")),
            (json!("{{ steps.broken.status }}"), json!("failed")),
            (json!("{{ steps.a.b.output }}"), json!("dotted")),
            (json!("{{ steps['a.b'].output }}"), json!("dotted")),
            (json!("{{ vars.limits.max[2] }}"), json!(3)),
            (json!("{{ item.x }}"), json!(1)),
            (json!("{{ index }}"), json!(4)),
        ];
        for (template, want) in table {
            check(template, Ok(want));
        }
    }

    #[test]
    fn text_around_references_interpolates() {
        let table = [
            (json!("Q: {{ input.q }}!"), json!("Q: what!")),
            (json!("{{vars.greeting}} {{ input.q }}"), json!("hi what")),
            (json!("n={{ steps.fetch.output.count }}"), json!("n=2")),
            (json!("items {{ input.items }}"), json!("items [10,20]")),
            (json!(" {{ index }}"), json!(" 4")),
            (json!("no refs {single} }}"), json!("no refs {single} }}")),
        ];
        for (template, want) in table {
            check(template, Ok(want));
        }
    }

    #[test]
    fn templates_apply_inside_arrays_and_objects() {
        check(
            json!({"a": ["{{ input.items[0] }}", "x{{ index }}", 5], "b": {"c": "{{ vars.greeting }}"}}),
            Ok(json!({"a": [10, "x4", 5], "b": {"c": "hi"}})),
        );
    }

    #[test]
    fn missing_paths_say_which_reference_and_why() {
        let table = [
            (
                "{{ steps.fetch.output.items[3] }}",
                "steps.fetch.output.items[3]: index 3 is out of range: `steps.fetch.output.items` has 2 items",
            ),
            (
                "{{ input.nope.deeper }}",
                "input.nope.deeper: `input` has no member `nope`",
            ),
            (
                "{{ input.q.x }}",
                "input.q.x: `input.q` is a string, not an object, so it has no member `x`",
            ),
            (
                "{{ input[0] }}",
                "input[0]: `input` is an object, not an array, so it has no index 0",
            ),
            (
                "{{ steps.ghost.output }}",
                "steps.ghost.output: step `ghost` has no result yet",
            ),
            (
                "{{ steps.broken.output }}",
                "steps.broken.output: step `broken` has no output (it is failed)",
            ),
            ("{{ vars.nope }}", "vars.nope: no variable `nope`"),
        ];
        for (template, want) in table {
            check(json!(template), Err(want));
        }
    }

    #[test]
    fn session_step_and_local_scopes_resolve() {
        let steps = results();
        let (input, vars) = (json!({}), Map::new());
        let session = json!({"topic": "cats", "n": {"k": 2}});
        let step = json!({"id": "s1", "attempt": 2, "metadata": {"team": "a"}});
        let item = json!("it");
        let mut scope = Scope::new(&input, &steps, &vars)
            .with_session(session.as_object().unwrap())
            .in_loop(Some(&item), 3);
        scope.step = Some(&step);
        let table = [
            ("{{ session.topic }}", json!("cats")),
            ("{{ session.n.k }}", json!(2)),
            ("{{ session.unset }}", Value::Null),
            ("{{ session.unset.deeper }}", Value::Null),
            ("{{ step.id }}", json!("s1")),
            ("{{ step.attempt }}", json!(2)),
            ("{{ step.metadata.team }}", json!("a")),
            ("{{ step.name }}", Value::Null),
            ("{{ local.item }}", json!("it")),
            ("{{ local.index }}", json!(3)),
            (
                "{{ step.id }}#{{ step.attempt }} {{ session.topic }}",
                json!("s1#2 cats"),
            ),
        ];
        for (template, want) in table {
            assert_eq!(resolve(&json!(template), &scope), Ok(want), "{template}");
        }
        let bare = Scope::new(&input, &steps, &vars);
        assert_eq!(
            resolve(&json!("{{ session.topic }}"), &bare),
            Ok(Value::Null)
        );
        let err = resolve(&json!("{{ step.id }}"), &bare).unwrap_err();
        assert!(err.message.contains("only defined inside a step"), "{err}");
        let refs = references(&json!(
            "{{ local.item.x }} {{ session['a b'] }} {{ step.metadata.k }}"
        ))
        .unwrap();
        let texts: Vec<String> = refs.iter().map(ToString::to_string).collect();
        assert_eq!(texts, ["item.x", "session[\"a b\"]", "step.metadata.k"]);
    }

    #[test]
    fn item_and_index_need_a_loop() {
        let (input, vars) = (json!({}), Map::new());
        let scope = Scope::new(&input, &NoResults, &vars);
        let err = resolve(&json!("{{ item }}"), &scope).unwrap_err();
        assert_eq!(err.reference, "item");
        assert!(err.message.contains("for_each"), "{err}");
        assert!(resolve(&json!("{{ index }}"), &scope).is_err());
    }

    #[test]
    fn syntax_errors_are_reported_statically() {
        let table = [
            ("{{ }}", "empty reference"),
            ("{{ input", "has no closing"),
            ("{{ foo.bar }}", "unknown scope `foo`"),
            ("{{ session }}", "`session.NAME`"),
            ("{{ step }}", "`step` is the current step"),
            ("{{ step.nope }}", "`step` is the current step"),
            ("{{ step.id.x }}", "only `step.metadata` has members"),
            ("{{ local.other }}", "`local.item` and `local.index`"),
            ("{{ steps.x }}", "`steps.ID.output` or `steps.ID.status`"),
            ("{{ steps.x.status.y }}", "nothing can follow `.status`"),
            ("{{ index.x }}", "nothing can follow it"),
            ("{{ vars }}", "`vars.NAME`"),
            ("{{ input.a[x] }}", "index (0, 1, ...) or a quoted key"),
            ("{{ input.a[1 }}", "expected `]`"),
            ("{{ input..a }}", "expected a name after `.`"),
            ("{{ input + 1 }}", "unexpected ` `"),
        ];
        for (text, want) in table {
            let err = references(&json!(text)).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
        let err = references(&json!({"a": ["ok", "{{ nope }}"]})).unwrap_err();
        assert!(err.starts_with("/a/1: "), "{err}");
    }

    #[test]
    fn references_are_listed_in_document_order_with_canonical_text() {
        let refs = references(&json!({
            "a": "{{ input.x }} and {{ steps.s1.output[0] }}",
            "b": ["{{ vars.v }}", "{{ steps[\"a.output\"].status }}"],
            "c": 3
        }))
        .unwrap();
        let texts: Vec<String> = refs.iter().map(ToString::to_string).collect();
        assert_eq!(
            texts,
            [
                "input.x",
                "steps.s1.output[0]",
                "vars.v",
                "steps[\"a.output\"].status"
            ]
        );
        let t = Template::parse(&json!({"a/b": ["{{ input }}"]})).unwrap();
        assert_eq!(t.references()[0].0, "/a~1b/0");
        assert!(
            !Template::parse(&json!({"x": [1, "plain"]}))
                .unwrap()
                .has_references()
        );
    }
}
