//! Plan validation, graph analysis and builder tests: whole documents in, a [`ValidPlan`] or
//! located problems out. Template and condition details are tested next to their code.

use serde_json::{Value, json};

use super::catalog::fake::BuiltinTools;
use super::validate::MAX_NESTING;
use super::*;
use crate::domain::{Orchestration, StepKind};

fn tools() -> BuiltinTools {
    BuiltinTools::new()
}

fn valid(doc: Value) -> ValidPlan {
    match validate_plan(&doc, &tools()) {
        Ok(plan) => plan,
        Err(problems) => panic!("expected a valid plan, got {problems:#?}\n{doc:#}"),
    }
}

fn problems(doc: Value) -> Vec<(String, String)> {
    match validate_plan(&doc, &tools()) {
        Ok(_) => panic!("expected problems with {doc:#}"),
        Err(problems) => problems
            .into_iter()
            .map(|p| (p.pointer, p.message))
            .collect(),
    }
}

/// Asserts that validating `doc` reports a problem at `pointer` whose message contains `want`.
fn check(doc: Value, pointer: &str, want: &str) {
    let found = problems(doc);
    assert!(
        found.iter().any(|(p, m)| p == pointer && m.contains(want)),
        "no problem at {pointer:?} containing {want:?}; got {found:#?}"
    );
}

fn llm(id: &str, prompt: &str) -> Value {
    json!({"id": id, "kind": "llm", "input": {"prompt": prompt}})
}

fn llm_after(id: &str, prompt: &str, deps: &[&str]) -> Value {
    json!({"id": id, "kind": "llm", "depends_on": deps, "input": {"prompt": prompt}})
}

fn ids(plan: &ValidPlan, positions: &[usize]) -> Vec<String> {
    positions
        .iter()
        .map(|&i| plan.specs()[i].id.to_string())
        .collect()
}

/// A plan that uses every step kind and every plan-level member.
fn every_kind() -> ValidPlan {
    valid(json!({
        "id": "everything",
        "name": "Every kind",
        "variables": {"topic": "rust", "limit": 3},
        "settings": {"max_parallel_steps": 3, "stop_on_first_failure": false,
                     "default_retry_policy": {"max_attempts": 2, "strategy": "fixed"}},
        "steps": [
            {"id": "ask", "kind": "llm", "name": "Ask", "timeout_ms": 5000,
             "retry_policy": {"max_attempts": 4, "strategy": "linear", "initial_delay_ms": 10},
             "metadata": {"estimated_ms": 200},
             "input": {"prompt": "Write about {{ vars.topic }}: {{ input.q }}", "system": "Be brief.",
                       "model": "fast", "output_schema": {"type": "object", "required": ["n"]}}},
            {"id": "calc", "kind": "tool", "depends_on": ["ask"],
             "input": {"tool": "math.calculate", "arguments": {"expression": "{{ steps.ask.output.n }} * 2"}}},
            {"id": "now", "kind": "tool", "input": {"tool": "clock.now"}},
            {"id": "decide", "kind": "branch", "depends_on": ["calc"],
             "input": {"condition": "steps.calc.output.result > vars.limit", "then": ["big"], "else": ["small"]}},
            llm_after("big", "big", &["decide"]),
            llm_after("small", "small", &["decide"]),
            {"id": "fan", "kind": "parallel", "input": {"aggregation": "merge", "steps": [
                llm("fan.a", "a {{ input }}"),
                {"id": "fan.b", "kind": "wait", "input": {"duration_ms": 10}}
            ]}},
            {"id": "seq", "kind": "sequential", "depends_on": ["ask"], "input": {"steps": [
                llm("seq.1", "one {{ steps.ask.output }}"),
                llm("seq.2", "two {{ steps.seq.1.output }}")
            ]}},
            {"id": "each", "kind": "loop", "depends_on": ["ask"], "input": {
                "for_each": "{{ steps.ask.output.items }}", "max_iterations": 10,
                "steps": [llm("each.body", "item {{ index }}: {{ item.name }}")]}},
            {"id": "again", "kind": "loop", "input": {
                "while": "index < 3 && (!has(steps.check) || steps.check.output != 'done')",
                "max_iterations": 5, "steps": [llm("check", "again?")]}},
            {"id": "pause", "kind": "wait", "input": {"until": "2030-01-01T00:00:00Z"}},
            {"id": "confirm", "kind": "user_input",
             "input": {"prompt": "OK to publish {{ vars.topic }}?", "schema": {"type": "boolean"}}}
        ],
        "output": {"answer": "{{ steps.big.output }}", "confirmed": "{{ steps.confirm.output }}"}
    }))
}

#[test]
fn a_plan_with_every_kind_keeps_its_domain_plan() {
    let plan = every_kind();
    let domain = plan.plan();
    assert_eq!(domain.id, "everything");
    assert_eq!(domain.orchestration, Orchestration::Planner);
    assert_eq!(domain.context["topic"], "rust");
    assert_eq!(domain.settings.max_parallel_steps, 3);
    assert!(!domain.settings.stop_on_first_failure);
    assert_eq!(domain.steps.len(), 12);
    assert_eq!(domain.steps[1].depends_on[0].as_str(), "ask");
    assert_eq!(domain.steps[0].timeout_ms, Some(5000));
    assert_eq!(
        domain.steps[0].retry_policy.as_ref().unwrap().max_attempts,
        4
    );
    assert_eq!(domain.steps[1].input["tool"], "math.calculate");
    assert!(plan.output().is_some_and(Template::has_references));

    let kinds: Vec<StepKind> = plan.specs().iter().map(StepSpec::step_kind).collect();
    use StepKind::*;
    assert_eq!(
        kinds,
        [
            Llm, Tool, Tool, Branch, Llm, Llm, Parallel, Sequential, Loop, Loop, Wait, UserInput
        ]
    );
    // Children are found by id; top-level positions too.
    assert_eq!(
        plan.spec("each.body").unwrap().pointer,
        "/steps/8/input/steps/0"
    );
    assert_eq!(plan.position("calc"), Some(1));
    assert_eq!(plan.position("seq.1"), None);
    assert_eq!(plan.spec("ghost").map(|s| s.id.clone()), None);
}

#[test]
fn a_plan_with_every_kind_parses_into_typed_specs() {
    let plan = every_kind();
    match &plan.specs()[0].kind {
        KindSpec::Llm {
            model,
            output_schema: Some(schema),
            system: Some(_),
            ..
        } => {
            assert_eq!(model.as_deref(), Some("fast"));
            assert!(schema.is_valid(&json!({"n": 1})));
            assert_eq!(schema.check(&json!({}))[0].pointer, "");
        }
        other => panic!("{other:?}"),
    }
    match &plan.specs()[2].kind {
        KindSpec::Tool { arguments, .. } => assert_eq!(arguments, &Template::Literal(json!({}))),
        other => panic!("{other:?}"),
    }
    match &plan.specs()[3].kind {
        KindSpec::Branch {
            then, otherwise, ..
        } => {
            assert_eq!(then[0].as_str(), "big");
            assert_eq!(otherwise[0].as_str(), "small");
        }
        other => panic!("{other:?}"),
    }
    match &plan.specs()[6].kind {
        KindSpec::Parallel { steps, aggregation } => {
            assert_eq!(*aggregation, Aggregation::Merge);
            assert_eq!(steps.len(), 2);
            assert_eq!(steps[1].pointer, "/steps/6/input/steps/1");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        &plan.specs()[8].kind,
        KindSpec::Loop {
            over: LoopOver::ForEach(Template::Ref(_)),
            max_iterations: 10,
            ..
        }
    ));
    assert!(matches!(
        &plan.specs()[9].kind,
        KindSpec::Loop {
            over: LoopOver::While(_),
            ..
        }
    ));
    assert!(matches!(
        &plan.specs()[10].kind,
        KindSpec::Wait(WaitSpec::Until(t)) if t.to_rfc3339() == "2030-01-01T00:00:00+00:00"
    ));
    assert!(matches!(
        &plan.specs()[11].kind,
        KindSpec::UserInput {
            schema: Some(_),
            ..
        }
    ));
}

#[test]
fn a_diamond_runs_in_a_stable_topological_order() {
    let plan = valid(json!({"steps": [
        llm_after("join", "j", &["left", "right"]),
        llm_after("right", "r", &["start"]),
        llm_after("left", "l", &["start"]),
        llm("start", "s"),
        llm("lonely", "x"),
    ]}));
    // `start` and `lonely` are ready first (declaration order breaks the tie: start is 3,
    // lonely 4); then `right` (1) before `left` (2).
    assert_eq!(
        ids(&plan, plan.order()),
        ["start", "right", "left", "join", "lonely"]
    );
    assert_eq!(ids(&plan, plan.dependencies(0)), ["left", "right"]);
    assert_eq!(ids(&plan, plan.dependents(3)), ["right", "left"]);
    assert_eq!(ids(&plan, &plan.leaves()), ["join", "lonely"]);
}

#[test]
fn the_critical_path_follows_the_heaviest_chain() {
    let weighted = |id: &str, ms: Value, deps: &[&str]| {
        json!({"id": id, "kind": "llm", "depends_on": deps, "metadata": {"estimated_ms": ms},
               "input": {"prompt": "p"}})
    };
    let plan = valid(json!({"steps": [
        weighted("start", json!(100), &[]),
        weighted("fast", json!(50), &["start"]),
        // No estimate: the timeout is the weight.
        {"id": "slow", "kind": "llm", "depends_on": ["start"], "timeout_ms": 400, "input": {"prompt": "p"}},
        weighted("join", json!(25.4), &["fast", "slow"]),
        // No estimate, no timeout: weight 1.
        llm("side", "p"),
    ]}));
    assert_eq!(
        plan.critical_path()
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>(),
        ["start", "slow", "join"]
    );
    assert_eq!(plan.critical_path_ms(), 100 + 400 + 25);
    assert_eq!(plan.weight(4), 1);

    // Equal weights: the first declared branch wins, every time.
    let tie = valid(json!({"steps": [
        llm("a", "p"), llm_after("b", "p", &["a"]), llm_after("c", "p", &["a"]),
        llm_after("d", "p", &["c", "b"]),
    ]}));
    let path: Vec<String> = tie
        .critical_path()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(path, ["a", "b", "d"]);
    assert_eq!(tie.critical_path_ms(), 3);
}

/// Asserts that each case's document is refused with a problem at its pointer whose message
/// contains the wanted text.
fn check_cases(cases: Vec<(&str, Value, &str, &str)>) {
    for (name, doc, pointer, want) in cases {
        let found = problems(doc);
        assert!(
            found.iter().any(|(p, m)| p == pointer && m.contains(want)),
            "{name}: no problem at {pointer:?} containing {want:?}; got {found:#?}"
        );
    }
}

#[test]
fn the_schema_is_checked_first() {
    check_cases(vec![
        (
            "schema: missing required member",
            json!({"steps": [{"id": "a", "kind": "llm", "input": {}}]}),
            "/steps/0/input/prompt",
            "`prompt` is required",
        ),
        (
            "schema: unknown field",
            json!({"steps": [llm("a", "p")], "extra": 1}),
            "/extra",
            "`extra` is not a known field",
        ),
        (
            "schema: unknown kind",
            json!({"steps": [{"id": "a", "kind": "dance", "input": {}}]}),
            "/steps/0/kind",
            "`kind` must be one of llm, tool, branch",
        ),
        (
            "schema: a kind missed by a letter",
            json!({"steps": [{"id": "a", "kind": "tol", "input": {}}]}),
            "/steps/0/kind",
            "`kind` must be one of llm, tool, branch, parallel, sequential, loop, wait, user_input, agent, handoff, group_chat, workflow; `tol`: did you mean `tool`?",
        ),
        (
            "schema: the steps alone, not a plan",
            json!([llm("a", "p")]),
            "",
            r#"a plan is an object with its steps under `steps`: wrap a list of steps as {"steps": [...]}"#,
        ),
        (
            "schema: bad step id",
            json!({"steps": [llm("has space", "p")]}),
            "/steps/0/id",
            "step ids are 1-64 characters",
        ),
        ("schema: no steps", json!({"steps": []}), "/steps", ""),
        (
            "schema: max_parallel_steps range",
            json!({"settings": {"max_parallel_steps": 0}, "steps": [llm("a", "p")]}),
            "/settings/max_parallel_steps",
            "minimum",
        ),
    ]);
}

#[test]
fn step_ids_dependencies_and_tools_are_checked() {
    check_cases(vec![
        (
            "child steps cannot depend",
            json!({"steps": [{"id": "p", "kind": "parallel", "input": {"steps": [
                {"id": "c", "kind": "llm", "depends_on": ["x"], "input": {"prompt": "p"}}]}}]}),
            "/steps/0/input/steps/0/depends_on",
            "child steps cannot have `depends_on`",
        ),
        (
            "duplicate ids, children included",
            json!({"steps": [llm("a", "p"), {"id": "s", "kind": "sequential", "input": {"steps": [llm("a", "q")]}}]}),
            "/steps/1/input/steps/0/id",
            "duplicate step id `a`: the step at /steps/0 has it already",
        ),
        (
            "unknown dependency",
            json!({"steps": [llm("a", "p"), llm_after("b", "p", &["a", "nope"])]}),
            "/steps/1/depends_on/1",
            "unknown dependency: no step has the id `nope`",
        ),
        (
            "dependency on a child step",
            json!({"steps": [{"id": "s", "kind": "sequential", "input": {"steps": [llm("c", "q")]}},
                             llm_after("b", "p", &["c"])]}),
            "/steps/1/depends_on/0",
            "`c` is a child step of `s`: depend on the top-level step `s` instead",
        ),
        (
            "self dependency",
            json!({"steps": [llm_after("a", "p", &["a"])]}),
            "/steps/0/depends_on/0",
            "cycle: a → a",
        ),
        (
            "unknown tool",
            json!({"steps": [{"id": "t", "kind": "tool", "input": {"tool": "shell.exec"}}]}),
            "/steps/0/input/tool",
            "unknown tool `shell.exec`; known tools: clock.now, fs.read, math.calculate",
        ),
        (
            "bad tool arguments",
            json!({"steps": [{"id": "t", "kind": "tool",
                              "input": {"tool": "math.calculate", "arguments": {"expression": 5}}}]}),
            "/steps/0/input/arguments/expression",
            "5 is not of type \"string\"",
        ),
        (
            "missing tool arguments",
            json!({"steps": [{"id": "t", "kind": "tool", "input": {"tool": "math.calculate"}}]}),
            "/steps/0/input/arguments",
            "expression",
        ),
    ]);
}

#[test]
fn references_must_name_what_a_step_can_read() {
    check_cases(vec![
        (
            "reference to a step that is not an ancestor",
            json!({"steps": [llm("a", "p"), llm("b", "use {{ steps.a.output }}")]}),
            "/steps/1/input/prompt",
            "`a` is not a dependency of `b`",
        ),
        (
            "reference to its own result",
            json!({"steps": [llm("a", "{{ steps.a.output }}")]}),
            "/steps/0/input/prompt",
            "a step cannot read its own result",
        ),
        (
            "reference to an unknown step",
            json!({"steps": [llm("a", "{{ steps.zzz.status }}")]}),
            "/steps/0/input/prompt",
            "no step has the id `zzz`",
        ),
        (
            "reference into another step's children",
            json!({"steps": [{"id": "s", "kind": "sequential", "input": {"steps": [llm("c", "q")]}},
                             llm_after("b", "{{ steps.c.output }}", &["s"])]}),
            "/steps/1/input/prompt",
            "`c` is a child step inside `s`",
        ),
        (
            "reference to a later sibling",
            json!({"steps": [{"id": "s", "kind": "sequential", "input": {"steps": [
                llm("c1", "{{ steps.c2.output }}"), llm("c2", "q")]}}]}),
            "/steps/0/input/steps/0/input/prompt",
            "nor an earlier step of the same sequence",
        ),
        (
            "reference to a parallel sibling",
            json!({"steps": [{"id": "p", "kind": "parallel", "input": {"steps": [
                llm("c1", "q"), llm("c2", "{{ steps.c1.output }}")]}}]}),
            "/steps/0/input/steps/1/input/prompt",
            "`c1` is neither a dependency",
        ),
    ]);
}

#[test]
fn loop_variables_vars_and_reference_syntax_are_checked() {
    check_cases(vec![
        (
            "item outside a loop",
            json!({"steps": [{"id": "t", "kind": "tool",
                              "input": {"tool": "math.calculate", "arguments": {"expression": "{{ item }}"}}}]}),
            "/steps/0/input/arguments/expression",
            "`item` is only defined inside the body of a `for_each` loop",
        ),
        (
            "index outside a loop",
            json!({"steps": [llm("a", "n={{ index }}")]}),
            "/steps/0/input/prompt",
            "`index` is only defined inside a loop body",
        ),
        (
            "item in a while loop",
            json!({"steps": [{"id": "l", "kind": "loop", "input": {"while": "index < 2", "max_iterations": 2,
                              "steps": [llm("c", "{{ item }}")]}}]}),
            "/steps/0/input/steps/0/input/prompt",
            "`item` is only defined",
        ),
        (
            "undeclared variable",
            json!({"variables": {"a": 1}, "steps": [llm("a", "{{ vars.b }}")]}),
            "/steps/0/input/prompt",
            "no variable `b` is declared in `variables`",
        ),
        (
            "reference syntax",
            json!({"steps": [llm("a", "hello {{ steps.a }}")]}),
            "/steps/0/input/prompt",
            "bad reference: a step reference is `steps.ID.output` or `steps.ID.status`",
        ),
        (
            "unclosed reference",
            json!({"steps": [llm("a", "hello {{ input")]}),
            "/steps/0/input/prompt",
            "has no closing `}}`",
        ),
        (
            "output reading a child",
            json!({"steps": [{"id": "s", "kind": "sequential", "input": {"steps": [llm("c", "q")]}}],
                   "output": ["{{ steps.c.output }}"]}),
            "/output/0",
            "`c` is a child step inside `s`",
        ),
    ]);
}

#[test]
fn conditions_and_branch_targets_are_checked() {
    check_cases(vec![
        (
            "bad CEL syntax",
            json!({"steps": [{"id": "b", "kind": "branch", "input": {"condition": "input.x >", "then": []}}]}),
            "/steps/0/input/condition",
            "invalid CEL expression",
        ),
        (
            "CEL with an unknown name",
            json!({"steps": [{"id": "b", "kind": "branch", "input": {"condition": "score > 1", "then": []}}]}),
            "/steps/0/input/condition",
            "unknown scope `score`",
        ),
        (
            "CEL reading a non-ancestor",
            json!({"steps": [llm("a", "p"), {"id": "b", "kind": "branch",
                              "input": {"condition": "steps.a.status == 'completed'", "then": []}}]}),
            "/steps/1/input/condition",
            "`steps.a`: `a` is not a dependency of `b`",
        ),
        (
            "CEL in a while loop with item",
            json!({"steps": [{"id": "l", "kind": "loop", "input": {"while": "item > 1", "max_iterations": 2,
                              "steps": [llm("c", "q")]}}]}),
            "/steps/0/input/while",
            "`item` is only defined",
        ),
        (
            "branch target not depending on the branch",
            json!({"steps": [{"id": "b", "kind": "branch", "input": {"condition": "true", "then": ["x"]}},
                             llm("x", "p")]}),
            "/steps/0/input/then/0",
            "`x` must list `b` in its `depends_on`",
        ),
        (
            "branch target unknown",
            json!({"steps": [{"id": "b", "kind": "branch", "input": {"condition": "true", "then": [], "else": ["y"]}}]}),
            "/steps/0/input/else/0",
            "no step has the id `y`",
        ),
        (
            "branch target on both sides",
            json!({"steps": [{"id": "b", "kind": "branch", "input": {"condition": "true", "then": ["x"], "else": ["x"]}},
                             llm_after("x", "p", &["b"])]}),
            "/steps/0/input/else/0",
            "`x` is in both `then` and `else`",
        ),
    ]);
}

#[test]
fn loops_waits_and_answer_schemas_are_checked() {
    check_cases(vec![
        (
            "branch in a sequence choosing an earlier sibling",
            json!({"steps": [{"id": "s", "kind": "sequential", "input": {"steps": [
                llm("c1", "q"), {"id": "b", "kind": "branch", "input": {"condition": "true", "then": ["c1"]}}]}}]}),
            "/steps/0/input/steps/1/input/then/0",
            "not a later step of the same sequence",
        ),
        (
            "loop with both for_each and while",
            json!({"steps": [{"id": "l", "kind": "loop", "input": {"for_each": [1], "while": "true",
                              "max_iterations": 2, "steps": [llm("c", "q")]}}]}),
            "/steps/0/input",
            "a loop needs exactly one of `for_each` or `while`",
        ),
        (
            "loop with neither",
            json!({"steps": [{"id": "l", "kind": "loop", "input": {"max_iterations": 2, "steps": [llm("c", "q")]}}]}),
            "/steps/0/input",
            "a loop needs exactly one of `for_each` or `while`",
        ),
        (
            "loop without max_iterations",
            json!({"steps": [{"id": "l", "kind": "loop", "input": {"for_each": [1], "steps": [llm("c", "q")]}}]}),
            "/steps/0/input/max_iterations",
            "`max_iterations` is required",
        ),
        (
            "for_each that cannot be an array",
            json!({"steps": [{"id": "l", "kind": "loop", "input": {"for_each": "items: {{ input }}",
                              "max_iterations": 2, "steps": [llm("c", "q")]}}]}),
            "/steps/0/input/for_each",
            "`for_each` must be one reference",
        ),
        (
            "wait with both",
            json!({"steps": [{"id": "w", "kind": "wait", "input": {"duration_ms": 1, "until": "2030-01-01T00:00:00Z"}}]}),
            "/steps/0/input",
            "a wait needs exactly one of `duration_ms` or `until`",
        ),
        (
            "wait with neither",
            json!({"steps": [{"id": "w", "kind": "wait", "input": {}}]}),
            "/steps/0/input",
            "a wait needs exactly one of `duration_ms` or `until`",
        ),
        (
            "wait until a non-date",
            json!({"steps": [{"id": "w", "kind": "wait", "input": {"until": "tomorrow"}}]}),
            "/steps/0/input/until",
            "not an RFC 3339 date-time",
        ),
        (
            "a bad answer schema",
            json!({"steps": [{"id": "u", "kind": "user_input", "input": {"prompt": "?", "schema": {"type": "nope"}}}]}),
            "/steps/0/input/schema",
            "not a valid JSON Schema",
        ),
    ]);
}

#[test]
fn a_cycle_is_named_in_running_order() {
    let found = problems(json!({"steps": [
        llm("solo", "p"),
        llm_after("a", "p", &["solo", "c"]),
        llm_after("b", "p", &["a"]),
        llm_after("c", "p", &["b"]),
    ]}));
    assert_eq!(
        found,
        [(
            "/steps/1/depends_on/1".to_owned(),
            "cycle: a → b → c → a".to_owned()
        )]
    );
}

#[test]
fn every_cycle_is_reported() {
    let found = problems(json!({"steps": [
        llm_after("a", "p", &["b"]),
        llm_after("b", "p", &["a"]),
        llm_after("x", "p", &["z"]),
        llm_after("y", "p", &["x"]),
        llm_after("z", "p", &["y"]),
    ]}));
    let messages: Vec<&str> = found.iter().map(|(_, m)| m.as_str()).collect();
    assert_eq!(messages, ["cycle: a → b → a", "cycle: x → y → z → x"]);
}

#[test]
fn problems_of_every_class_come_together() {
    let found = problems(json!({
        "steps": [
            {"id": "a", "kind": "llm", "input": {"prompt": "p"}, "colour": "red"},
            llm_after("a", "dup", &["ghost"]),
            {"id": "t", "kind": "tool", "input": {"tool": "nope"}},
            llm("r", "{{ steps.t.output }} {{ item }}"),
            {"id": "b", "kind": "branch", "input": {"condition": "((", "then": []}},
        ]
    }));
    let pointers: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
    for want in [
        "/steps/0/colour",
        "/steps/1/id",
        "/steps/1/depends_on/0",
        "/steps/2/input/tool",
        "/steps/3/input/prompt",
        "/steps/4/input/condition",
    ] {
        assert!(pointers.contains(&want), "{want} missing from {found:#?}");
    }
    // Both bad references of one string are reported.
    assert_eq!(
        pointers
            .iter()
            .filter(|p| **p == "/steps/3/input/prompt")
            .count(),
        2
    );
}

#[test]
fn odd_shapes_give_problems_not_panics() {
    let odd = [
        json!(null),
        json!([]),
        json!("plan"),
        json!({}),
        json!({"steps": {}}),
        json!({"steps": [null, 1, "x", [], {}]}),
        json!({"steps": [{"id": 5, "kind": ["llm"], "input": "p"}]}),
        json!({"steps": [{"id": "p", "kind": "parallel", "input": {"steps": "many"}}]}),
        json!({"steps": [{"id": "p", "kind": "loop", "input": {"steps": [null], "for_each": 3, "max_iterations": -1}}]}),
        json!({"steps": [{"id": "b", "kind": "branch", "input": {"condition": 1, "then": [1, null]}}]}),
        json!({"steps": [llm_after("a", "p", &[])], "variables": [], "settings": [], "output": "{{"}),
        json!({"steps": [{"id": "a", "kind": "llm", "depends_on": [1, {"x": 1}], "input": {"prompt": 3}}]}),
        json!({"steps": [{"id": "w", "kind": "wait", "input": {"until": 5}}]}),
        json!({"steps": [{"id": "a", "kind": "agent", "input": {}}]}),
    ];
    for doc in odd {
        let found = problems(doc.clone());
        assert!(!found.is_empty(), "{doc}");
    }
    // Deep nesting is refused, not recursed into without bound.
    let mut deep = llm("leaf", "p");
    for level in 0..12 {
        deep = json!({"id": format!("n{level}"), "kind": "sequential", "input": {"steps": [deep]}});
    }
    let too_deep = format!("/steps/0{}", "/input/steps/0".repeat(MAX_NESTING + 1));
    check(json!({"steps": [deep]}), &too_deep, "nest too deeply");
}

#[test]
fn literal_arguments_are_checked_but_templated_ones_wait_for_run_time() {
    // A template makes the arguments unknowable now: no check, no problem.
    valid(json!({"steps": [{"id": "t", "kind": "tool",
        "input": {"tool": "math.calculate", "arguments": {"expression": "{{ input.expr }}"}}}]}));
    valid(json!({"steps": [{"id": "t", "kind": "tool",
        "input": {"tool": "math.calculate", "arguments": {"expression": "1 + 1"}}}]}));
    check(
        json!({"steps": [{"id": "t", "kind": "tool",
            "input": {"tool": "math.calculate", "arguments": {"expression": "1", "extra": true}}}]}),
        "/steps/0/input/arguments",
        "extra",
    );
}

#[test]
fn children_read_ancestors_and_earlier_siblings() {
    valid(json!({
        "variables": {"n": 2},
        "steps": [
            llm("root", "p"),
            {"id": "outer", "kind": "sequential", "depends_on": ["root"], "input": {"steps": [
                llm("first", "{{ steps.root.output }}"),
                {"id": "inner", "kind": "loop", "input": {
                    "for_each": "{{ steps.first.output }}", "max_iterations": 3,
                    "steps": [
                        llm("body1", "{{ item }} {{ index }} {{ steps.first.output }} {{ vars.n }}"),
                        llm("body2", "{{ steps.body1.output }}"),
                        {"id": "gate", "kind": "branch", "input": {
                            "condition": "item == 'x' && index < vars.n", "then": ["body3"], "else": []}},
                        llm("body3", "{{ steps.root.status }}"),
                    ]}},
            ]}},
        ],
        "output": "{{ steps.outer.output }} {{ steps.root.output }}"
    }));
}

#[test]
fn builder_and_json_give_the_same_plan() {
    let tools = tools();
    let built = PlanBuilder::new()
        .id("p")
        .name("Built")
        .variable("k", json!(3))
        .settings(|s| s.max_parallel_steps = 3)
        .llm_step("s1", "prompt {{ input }}")
        .tool_step(
            "s2",
            "math.calculate",
            json!({"expression": "{{ steps.s1.output }}"}),
        )
        .depends_on("s1")
        .step(crate::domain::Step::new(
            crate::domain::StepId::new("s3").unwrap(),
            StepKind::Wait,
            json!({"duration_ms": 5}),
        ))
        .parallel(
            "par",
            vec![
                StepDraft::llm("c1", "a {{ vars.k }}").timeout_ms(100),
                StepDraft::wait_ms("c2", 1),
            ],
            Aggregation::All,
        )
        .depends_on("s2")
        .output(json!("{{ steps.s2.output }}"))
        .build(&tools)
        .unwrap();
    let from_json = validate_plan(
        &json!({
            "id": "p",
            "name": "Built",
            "variables": {"k": 3},
            "settings": {"max_parallel_steps": 3},
            "steps": [
                llm("s1", "prompt {{ input }}"),
                {"id": "s2", "kind": "tool", "depends_on": ["s1"],
                 "input": {"tool": "math.calculate", "arguments": {"expression": "{{ steps.s1.output }}"}}},
                {"id": "s3", "kind": "wait", "input": {"duration_ms": 5}},
                {"id": "par", "kind": "parallel", "depends_on": ["s2"], "input": {"aggregation": "all", "steps": [
                    {"id": "c1", "kind": "llm", "timeout_ms": 100, "input": {"prompt": "a {{ vars.k }}"}},
                    {"id": "c2", "kind": "wait", "input": {"duration_ms": 1}},
                ]}},
            ],
            "output": "{{ steps.s2.output }}"
        }),
        &tools,
    )
    .unwrap();
    assert_eq!(built.plan(), from_json.plan());
    assert_eq!(built.order(), from_json.order());
    assert_eq!(built.document(), from_json.document());
    assert_eq!(built.plan().settings.max_parallel_steps, 3);

    // Builder problems are the validator's problems.
    let err = PlanBuilder::new()
        .depends_on("x")
        .llm_step("a", "{{ steps.b.output }}")
        .build(&tools)
        .unwrap_err();
    assert_eq!(err[0].pointer, "/steps");
    assert!(
        err.iter().any(|p| p.pointer == "/steps/0/input/prompt"),
        "{err:#?}"
    );
    let err = PlanBuilder::new().build(&tools).unwrap_err();
    assert_eq!(err[0].pointer, "/steps");
}

#[test]
fn a_stored_plan_restores_through_validation() {
    let tools = tools();
    let plan = PlanBuilder::new()
        .variable("v", json!("x"))
        .settings(|s| {
            s.max_execution_time_ms = Some(1000);
            s.default_retry_policy = Some(crate::domain::RetryPolicy::none());
        })
        .step(
            StepDraft::llm("a", "{{ vars.v }}")
                .name("A")
                .description("first")
                .metadata("estimated_ms", json!(5))
                .retry(&crate::domain::RetryPolicy::default()),
        )
        .step(
            StepDraft::for_each(
                "l",
                json!("{{ steps.a.output }}"),
                3,
                [StepDraft::llm("b", "{{ item }}")],
            )
            .depends_on("a"),
        )
        .step(StepDraft::while_loop(
            "w",
            "index < 2",
            2,
            [StepDraft::user_input("q", "?")],
        ))
        .step(StepDraft::sequential(
            "s",
            [
                StepDraft::branch("g", "true", &["h"], &[]),
                StepDraft::llm("h", "p"),
            ],
        ))
        .build(&tools)
        .unwrap()
        .with_version(4)
        .with_orchestration(Orchestration::Reactive);
    let stored: crate::domain::Plan =
        serde_json::from_value(serde_json::to_value(plan.plan()).unwrap()).unwrap();
    let restored = ValidPlan::from_plan(&stored, &tools).unwrap();
    assert_eq!(restored.plan(), plan.plan());
    assert_eq!(restored.plan().version, 4);
    assert_eq!(restored.plan().orchestration, Orchestration::Reactive);
    assert_eq!(restored.critical_path_ms(), plan.critical_path_ms());
}

#[test]
fn resolving_a_validated_template_against_engine_state() {
    let plan = valid(json!({
        "variables": {"unit": "km"},
        "steps": [
            llm("a", "p"),
            {"id": "t", "kind": "tool", "depends_on": ["a"], "input": {"tool": "math.calculate",
              "arguments": {"expression": "{{ steps.a.output.n }} * 2"}}},
        ],
        "output": {"distance": "{{ steps.t.output.result }}", "text": "{{ steps.t.output.result }} {{ vars.unit }}"}
    }));
    let mut results = std::collections::HashMap::new();
    results.insert("a".to_owned(), StepState::completed(json!({"n": 21})));
    results.insert("t".to_owned(), StepState::completed(json!({"result": 42})));
    let input = json!("go");
    let scope = Scope::new(&input, &results, &plan.plan().context);
    let KindSpec::Tool { arguments, .. } = &plan.specs()[1].kind else {
        panic!("not a tool")
    };
    assert_eq!(
        arguments.resolve(&scope).unwrap(),
        json!({"expression": "21 * 2"})
    );
    assert_eq!(
        plan.output().unwrap().resolve(&scope).unwrap(),
        json!({"distance": 42, "text": "42 km"})
    );
}

#[test]
fn workflows_validate_their_name_input_schema_and_plan() {
    let tools = tools();
    let workflow = |name: Value| {
        json!({"name": name, "version": "1.0.0", "description": "d",
               "input_schema": {"type": "object", "required": ["city"]},
               "steps": [llm("a", "weather in {{ input.city }}")]})
    };
    let w = validate_workflow(&workflow(json!("weather.daily_v2")), &tools).unwrap();
    assert_eq!(w.name, "weather.daily_v2");
    assert_eq!(w.version.as_deref(), Some("1.0.0"));
    assert_eq!(w.plan.plan().id, "weather.daily_v2");
    assert_eq!(w.plan.plan().orchestration, Orchestration::Fixed);
    assert!(w.check_input(&json!({"city": "Seoul"})).is_empty());
    assert_eq!(
        w.check_input(&json!({}))[0].message,
        "\"city\" is a required property"
    );

    for ok in ["a", "0", "a-b.c_d", &"x".repeat(64)] {
        assert!(
            validate_workflow(&workflow(json!(ok)), &tools).is_ok(),
            "{ok}"
        );
    }
    for bad in [
        "",
        "Upper",
        "-lead",
        ".dot",
        "sp ace",
        "slash/",
        &"x".repeat(65),
    ] {
        let err = validate_workflow(&workflow(json!(bad)), &tools).unwrap_err();
        assert!(
            err.iter()
                .any(|p| p.pointer == "/name" && p.message.contains("lowercase")),
            "{bad}: {err:#?}"
        );
    }
    let err = validate_workflow(&json!({"steps": [llm("a", "p")]}), &tools).unwrap_err();
    assert_eq!(err[0].pointer, "/name");
    let err = validate_workflow(&json!([llm("a", "p")]), &tools).unwrap_err();
    assert_eq!(
        err[0].message,
        r#"a workflow is an object with its steps under `steps`: wrap a list of steps as {"name": "...", "steps": [...]}"#
    );

    // Plan problems in a workflow point where they would in a plan.
    let err = validate_workflow(
        &json!({"name": "w", "input_schema": {"type": 3},
                "steps": [{"id": "t", "kind": "tool", "input": {"tool": "x"}},
                          {"id": "c", "kind": "loop", "input": {}},
                          {"id": "d", "kind": "dance", "input": {}}]}),
        &tools,
    )
    .unwrap_err();
    let pointers: Vec<&str> = err.iter().map(|p| p.pointer.as_str()).collect();
    for want in [
        "/input_schema",
        "/steps/0/input/tool",
        "/steps/1/input/max_iterations",
    ] {
        assert!(pointers.contains(&want), "{want}: {err:#?}");
    }
    // The plan schema's own messages survive the workflow schema's `$ref`s.
    let messages: Vec<&str> = err.iter().map(|p| p.message.as_str()).collect();
    assert!(
        messages.contains(&"a loop needs exactly one of `for_each` or `while`"),
        "{err:#?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("`kind` must be one of")),
        "{err:#?}"
    );
}

#[test]
fn valid_plans_are_shareable_across_tasks() {
    fn assert_send_sync<T: Send + Sync + Clone + std::fmt::Debug + 'static>() {}
    assert_send_sync::<ValidPlan>();
    assert_send_sync::<Workflow>();
    assert_send_sync::<Problem>();
}

#[test]
fn session_variables_are_checked_and_survive_a_round_trip() {
    let doc = json!({
        "steps": [{ "id": "a", "kind": "llm", "metadata": { "team": "x" },
            "input": { "prompt": "{{ session.topic }} {{ step.metadata.team }}" } }],
        "session_variables": { "topic": "{{ steps.a.output }}", "count": 1 }
    });
    let plan = valid(doc);
    let names: Vec<&str> = plan
        .session_writes()
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(names, ["count", "topic"]);
    assert_eq!(plan.specs()[0].metadata["team"], "x");
    let restored = ValidPlan::from_plan(plan.plan(), &tools()).unwrap();
    assert_eq!(restored.session_writes().len(), 2);
    assert_eq!(
        restored.plan().session_variables,
        plan.plan().session_variables
    );

    let step = json!([{ "id": "a", "kind": "wait", "input": { "duration_ms": 1 } }]);
    check(
        json!({ "steps": step, "session_variables": { "x": "{{ step.id }}" } }),
        "/session_variables/x",
        "only defined inside a step",
    );
    check(
        json!({ "steps": step, "session_variables": { "x": "{{ vars.nope }}" } }),
        "/session_variables/x",
        "no variable `nope`",
    );
    check(
        json!({ "steps": step, "session_variables": { "bad name": 1 } }),
        "/session_variables/bad name",
        "not a session variable name",
    );
}
