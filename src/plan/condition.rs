//! Conditions: CEL expressions (branch `condition`, loop `while`) compiled once at validation
//! and evaluated against a [`Scope`].
//!
//! Owns the mapping of run data into CEL variables (`input`, `steps`, `vars`, `session`,
//! `step`, `local`, and `item`/`index`, the old names of `local.item`/`local.index`)
//! and the static list of what an expression reads, so validation can check it. It must not
//! widen what an expression can do: no custom functions, nothing but the CEL standard library.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedEntryExpr, IdedExpr, LiteralValue};
use cel::objects::{Key, Map as CelMap};
use cel::{Context, Env, Program, Value as CelValue};
use serde_json::{Map, Value};

use super::template::{Scope, StepView};

/// The standard environment, built once: building it registers every standard function,
/// which is too much work to repeat on each evaluation.
static STDLIB: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

/// Identifiers CEL itself defines (type names), which are not run data.
const CEL_NAMES: [&str; 11] = [
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
];

/// Something an expression reads, found by walking its syntax tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CelRef {
    Input,
    /// `steps.ID` or `steps["ID"]`.
    Step(String),
    /// `steps` used otherwise (`steps[x]`, `steps.all(...)`): every step may be read.
    AnyStep,
    /// `vars.NAME` or `vars["NAME"]`.
    Var(String),
    /// `vars` used otherwise.
    AnyVar,
    /// `session.NAME` or `session["NAME"]`.
    Session(String),
    /// `session` used otherwise.
    AnySession,
    /// `step`: the current step's own data.
    CurrentStep,
    /// `local.NAME` or `local["NAME"]`.
    Local(String),
    /// `local` used otherwise.
    AnyLocal,
    Item,
    Index,
    /// `output`: the step's own output, which only its `expect` condition reads.
    Output,
    /// A name that is none of the above.
    Unknown(String),
}

/// A compiled CEL condition. Cloning is cheap (the program is shared).
#[derive(Clone)]
pub struct Condition {
    source: Arc<str>,
    program: Arc<Program>,
    refs: Arc<[CelRef]>,
}

impl fmt::Debug for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Condition").field(&&*self.source).finish()
    }
}

impl PartialEq for Condition {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Condition {
    /// Parses `expr`. The error is the parser's message (with line and column).
    pub fn compile(expr: &str) -> Result<Condition, String> {
        let program = STDLIB.compile(expr).map_err(|e| e.to_string())?;
        let mut refs = Vec::new();
        walk(program.expression(), &mut Vec::new(), &mut refs);
        refs.dedup();
        Ok(Condition {
            source: Arc::from(expr),
            program: Arc::new(program),
            refs: refs.into(),
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// What the expression reads, in order of first appearance.
    pub fn references(&self) -> &[CelRef] {
        &self.refs
    }

    /// Evaluates the condition. A result that is not a boolean is an error, as is a name the
    /// scope does not define (e.g. `item` outside a loop) or a missing map key.
    pub fn eval(&self, scope: &Scope<'_>) -> Result<bool, String> {
        self.eval_with(scope, Context::with_env(Arc::clone(&STDLIB)))
    }

    /// Evaluates an `expect` condition: the scope, and `output`, the step's output.
    pub fn eval_expect(&self, scope: &Scope<'_>, output: &Value) -> Result<bool, String> {
        let mut ctx = Context::with_env(Arc::clone(&STDLIB));
        if self.refs.contains(&CelRef::Output) {
            ctx.add_variable_from_value("output", to_cel(output));
        }
        self.eval_with(scope, ctx)
    }

    fn eval_with(&self, scope: &Scope<'_>, mut ctx: Context<'_, '_>) -> Result<bool, String> {
        // Only what the expression reads is converted: outputs can be large.
        let reads = |f: fn(&CelRef) -> bool| self.refs.iter().any(f);
        if reads(|r| matches!(r, CelRef::Input)) {
            ctx.add_variable_from_value("input", to_cel(scope.input));
        }
        if reads(|r| matches!(r, CelRef::Var(_) | CelRef::AnyVar)) {
            ctx.add_variable_from_value("vars", object_to_cel(scope.vars));
        }
        if let Some(item) = scope.item.filter(|_| reads(|r| matches!(r, CelRef::Item))) {
            ctx.add_variable_from_value("item", to_cel(item));
        }
        if let Some(index) = scope.index {
            ctx.add_variable_from_value("index", CelValue::Int(clamp_i64(index)));
        }
        if reads(|r| matches!(r, CelRef::Session(_) | CelRef::AnySession)) {
            ctx.add_variable_from_value("session", self.session_to_cel(scope));
        }
        if let Some(step) = scope
            .step
            .filter(|_| reads(|r| matches!(r, CelRef::CurrentStep)))
        {
            ctx.add_variable_from_value("step", to_cel(step));
        }
        if reads(|r| matches!(r, CelRef::Local(_) | CelRef::AnyLocal)) {
            ctx.add_variable_from_value("local", local_to_cel(scope));
        }
        let mut steps: HashMap<Key, CelValue> = HashMap::new();
        if reads(|r| matches!(r, CelRef::AnyStep)) {
            scope.steps.each(&mut |id, view| {
                steps.insert(Key::from(id.to_owned()), step_to_cel(view));
            });
        } else {
            for r in self.refs.iter() {
                if let CelRef::Step(id) = r
                    && let Some(view) = scope.steps.get(id)
                {
                    steps.insert(Key::from(id.clone()), step_to_cel(view));
                }
            }
        }
        ctx.add_variable_from_value(
            "steps",
            CelValue::Map(CelMap {
                map: Arc::new(steps),
            }),
        );
        match self.program.execute(&ctx) {
            Ok(CelValue::Bool(b)) => Ok(b),
            Ok(other) => Err(format!(
                "the condition `{}` must give true or false, not {}",
                self.source,
                describe(&other)
            )),
            Err(e) => Err(format!("the condition `{}` failed: {e}", self.source)),
        }
    }
}

impl Condition {
    /// The session's variables; a name the expression reads that no run has set yet is null,
    /// as in templates.
    fn session_to_cel(&self, scope: &Scope<'_>) -> CelValue {
        let mut m: HashMap<Key, CelValue> = scope
            .session
            .into_iter()
            .flatten()
            .map(|(k, v)| (Key::from(k.clone()), to_cel(v)))
            .collect();
        for r in self.refs.iter() {
            if let CelRef::Session(name) = r {
                m.entry(Key::from(name.clone())).or_insert(CelValue::Null);
            }
        }
        CelValue::Map(CelMap { map: Arc::new(m) })
    }
}

/// `local`: the loop body's `item` and `index`, those that are defined here.
fn local_to_cel(scope: &Scope<'_>) -> CelValue {
    let mut m: HashMap<Key, CelValue> = HashMap::with_capacity(2);
    if let Some(item) = scope.item {
        m.insert(Key::from("item".to_owned()), to_cel(item));
    }
    if let Some(index) = scope.index {
        m.insert(
            Key::from("index".to_owned()),
            CelValue::Int(clamp_i64(index)),
        );
    }
    CelValue::Map(CelMap { map: Arc::new(m) })
}

fn clamp_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn describe(v: &CelValue) -> String {
    match v.json() {
        Ok(json) => {
            let text = json.to_string();
            if text.chars().count() > 60 {
                format!("a {}", v.type_of())
            } else {
                format!("{text} (a {})", v.type_of())
            }
        }
        Err(_) => format!("a {}", v.type_of()),
    }
}

fn step_to_cel(view: StepView<'_>) -> CelValue {
    let mut m: HashMap<Key, CelValue> = HashMap::with_capacity(2);
    m.insert(
        Key::from("status".to_owned()),
        CelValue::String(Arc::new(view.status.as_str().to_owned())),
    );
    m.insert(
        Key::from("output".to_owned()),
        view.output.map_or(CelValue::Null, to_cel),
    );
    CelValue::Map(CelMap { map: Arc::new(m) })
}

/// JSON to CEL. Integers become `int` when they fit (so `x > 3` compares like with like),
/// `uint` above `i64::MAX`, and every other number a `double`.
pub fn to_cel(v: &Value) -> CelValue {
    match v {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                CelValue::Int(i)
            } else if let Some(u) = n.as_u64() {
                CelValue::UInt(u)
            } else {
                CelValue::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => CelValue::String(Arc::new(s.clone())),
        Value::Array(items) => CelValue::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => object_to_cel(map),
    }
}

fn object_to_cel(map: &Map<String, Value>) -> CelValue {
    let m: HashMap<Key, CelValue> = map
        .iter()
        .map(|(k, v)| (Key::from(k.clone()), to_cel(v)))
        .collect();
    CelValue::Map(CelMap { map: Arc::new(m) })
}

/// Collects what `e` reads. `bound` holds the names comprehension macros introduce
/// (`steps.all(s, ...)` binds `s`), which shadow run data.
fn walk(e: &IdedExpr, bound: &mut Vec<String>, out: &mut Vec<CelRef>) {
    let free = |name: &str, bound: &[String]| !bound.iter().any(|b| b == name);
    match &e.expr {
        Expr::Unspecified | Expr::Literal(_) => {}
        Expr::Ident(name) => {
            if free(name, bound) {
                out.push(match name.as_str() {
                    "input" => CelRef::Input,
                    "steps" => CelRef::AnyStep,
                    "vars" => CelRef::AnyVar,
                    "session" => CelRef::AnySession,
                    "step" => CelRef::CurrentStep,
                    "local" => CelRef::AnyLocal,
                    "item" => CelRef::Item,
                    "index" => CelRef::Index,
                    "output" => CelRef::Output,
                    n if CEL_NAMES.contains(&n) => return,
                    other => CelRef::Unknown(other.to_owned()),
                });
            }
        }
        Expr::Select(select) => {
            if let Expr::Ident(root) = &select.operand.expr
                && free(root, bound)
            {
                match root.as_str() {
                    "steps" => return out.push(CelRef::Step(select.field.clone())),
                    "vars" => return out.push(CelRef::Var(select.field.clone())),
                    "session" => return out.push(CelRef::Session(select.field.clone())),
                    "local" => return out.push(CelRef::Local(select.field.clone())),
                    _ => {}
                }
            }
            walk(&select.operand, bound, out);
        }
        Expr::Call(call) => {
            if let Some(r) = indexed_ref(call, bound) {
                return out.push(r);
            }
            if let Some(target) = &call.target {
                walk(target, bound, out);
            }
            for arg in &call.args {
                walk(arg, bound, out);
            }
        }
        Expr::Comprehension(c) => {
            walk(&c.iter_range, bound, out);
            walk(&c.accu_init, bound, out);
            let before = bound.len();
            bound.push(c.iter_var.clone());
            bound.extend(c.iter_var2.clone());
            bound.push(c.accu_var.clone());
            walk(&c.loop_cond, bound, out);
            walk(&c.loop_step, bound, out);
            walk(&c.result, bound, out);
            bound.truncate(before);
        }
        Expr::List(list) => {
            for el in &list.elements {
                walk(el, bound, out);
            }
        }
        Expr::Map(map) => walk_entries(&map.entries, bound, out),
        Expr::Struct(s) => walk_entries(&s.entries, bound, out),
    }
}

/// `steps["fetch-data"]`, `vars["x"]` or `session["x"]`: how names that are not CEL identifiers are read.
fn indexed_ref(call: &CallExpr, bound: &[String]) -> Option<CelRef> {
    if call.func_name != "_[_]" || call.target.is_some() {
        return None;
    }
    let [
        container,
        IdedExpr {
            expr: Expr::Literal(LiteralValue::String(key)),
            ..
        },
    ] = call.args.as_slice()
    else {
        return None;
    };
    let Expr::Ident(root) = &container.expr else {
        return None;
    };
    if bound.contains(root) {
        return None;
    }
    match root.as_str() {
        "steps" => Some(CelRef::Step(key.inner().to_owned())),
        "vars" => Some(CelRef::Var(key.inner().to_owned())),
        "session" => Some(CelRef::Session(key.inner().to_owned())),
        "local" => Some(CelRef::Local(key.inner().to_owned())),
        _ => None,
    }
}

fn walk_entries(entries: &[IdedEntryExpr], bound: &mut Vec<String>, out: &mut Vec<CelRef>) {
    for entry in entries {
        match &entry.expr {
            EntryExpr::MapEntry(m) => {
                walk(&m.key, bound, out);
                walk(&m.value, bound, out);
            }
            EntryExpr::StructField(f) => walk(&f.value, bound, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::StepStatus;
    use crate::plan::template::{NoResults, StepState};

    fn eval(expr: &str) -> Result<bool, String> {
        let mut steps = HashMap::new();
        steps.insert(
            "fetch".to_owned(),
            StepState::completed(json!({"count": 3, "tags": ["a", "b"]})),
        );
        steps.insert(
            "check-it".to_owned(),
            StepState {
                status: StepStatus::Failed,
                output: None,
            },
        );
        let input = json!({"n": 5, "text": "hello", "big": 18446744073709551615u64, "f": 1.5});
        let vars = json!({"limit": 4});
        let scope = Scope::new(&input, &steps, vars.as_object().unwrap());
        Condition::compile(expr)?.eval(&scope)
    }

    #[test]
    fn evaluates_true_and_false() {
        let table = [
            ("input.n > 3", true),
            ("input.n > vars.limit && input.text == 'hello'", true),
            ("steps.fetch.output.count == 3", true),
            ("steps.fetch.status == 'completed'", true),
            ("steps['check-it'].status == 'failed'", true),
            ("'b' in steps.fetch.output.tags", true),
            ("size(steps.fetch.output.tags) > 5", false),
            ("input.f < 1.0", false),
            ("has(input.missing)", false),
            ("steps.exists(id, id == 'fetch')", true),
            ("input.big > 0u", true),
        ];
        for (expr, want) in table {
            assert_eq!(eval(expr), Ok(want), "{expr}");
        }
    }

    #[test]
    fn a_result_that_is_not_a_boolean_is_an_error() {
        let err = eval("input.n + 1").unwrap_err();
        assert!(
            err.contains("must give true or false, not 6 (a int)"),
            "{err}"
        );
        let err = eval("input.text").unwrap_err();
        assert!(err.contains("not \"hello\""), "{err}");
    }

    #[test]
    fn undefined_names_and_keys_fail_at_evaluation() {
        let err = eval("nope > 1").unwrap_err();
        assert!(err.contains("Undeclared reference to 'nope'"), "{err}");
        let err = eval("item.x == 1").unwrap_err();
        assert!(err.contains("item"), "{err}");
        let err = eval("steps.ghost.status == 'completed'").unwrap_err();
        assert!(err.contains("ghost"), "{err}");
    }

    #[test]
    fn syntax_errors_fail_to_compile() {
        for bad in ["input.n >", "(a", "1 +* 2", "'unclosed"] {
            assert!(Condition::compile(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn loop_variables_come_from_the_scope() {
        let (input, vars) = (json!({}), Map::new());
        let item = json!({"ok": true});
        let scope = Scope::new(&input, &NoResults, &vars).in_loop(Some(&item), 2);
        let c = Condition::compile("item.ok && index == 2").unwrap();
        assert_eq!(c.eval(&scope), Ok(true));
    }

    #[test]
    fn session_step_and_local_come_from_the_scope() {
        let (input, vars) = (json!({}), Map::new());
        let session = json!({"count": 2, "topic": "cats"});
        let step = json!({"id": "s1", "attempt": 1, "metadata": {"level": 3}});
        let item = json!({"ok": true});
        let mut scope = Scope::new(&input, &NoResults, &vars)
            .with_session(session.as_object().unwrap())
            .in_loop(Some(&item), 2);
        scope.step = Some(&step);
        let table = [
            ("session.count == 2 && session['topic'] == 'cats'", true),
            ("session.unset == null", true),
            ("has(session.topic)", true),
            (
                "step.id == 's1' && step.attempt == 1 && step.metadata.level > 2",
                true,
            ),
            (
                "local.item.ok && local.index == 2 && local['index'] == index",
                true,
            ),
            ("session.count > 5", false),
        ];
        for (expr, want) in table {
            let c = Condition::compile(expr).unwrap();
            assert_eq!(c.eval(&scope), Ok(want), "{expr}");
        }
        let c = Condition::compile("session.n == null && size(session) == 0").unwrap();
        let bare = Scope::new(&input, &NoResults, &vars);
        assert_eq!(
            c.eval(&bare),
            Ok(false),
            "a referenced unset name is null, and counted"
        );
        let c = Condition::compile("session.n == null").unwrap();
        assert_eq!(c.eval(&bare), Ok(true));
    }

    #[test]
    fn lists_what_an_expression_reads() {
        let c = Condition::compile(
            "steps.a.output > 1 && steps['b-c'].status == 'x' && vars.v && item.y && index > 0 \
             && input.z && foo && [1].all(x, x > 0) && type(1) == int",
        )
        .unwrap();
        assert_eq!(
            c.references(),
            [
                CelRef::Step("a".into()),
                CelRef::Step("b-c".into()),
                CelRef::Var("v".into()),
                CelRef::Item,
                CelRef::Index,
                CelRef::Input,
                CelRef::Unknown("foo".into()),
            ]
        );
        let c = Condition::compile(
            "session.a && session['b c'] && size(session) > 0 && step.id == 'x' && local.item \
             && local['index'] > 0 && local.size() > 0",
        )
        .unwrap();
        assert_eq!(
            c.references(),
            [
                CelRef::Session("a".into()),
                CelRef::Session("b c".into()),
                CelRef::AnySession,
                CelRef::CurrentStep,
                CelRef::Local("item".into()),
                CelRef::Local("index".into()),
                CelRef::AnyLocal,
            ]
        );
        let c = Condition::compile("steps[vars.k].status == 'completed'").unwrap();
        assert_eq!(c.references(), [CelRef::AnyStep, CelRef::Var("k".into())]);
    }

    #[test]
    fn conditions_are_shareable_across_tasks() {
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<Condition>();
    }
}
