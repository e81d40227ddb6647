//! What the offline model answers the `replanner` function: a deterministic new plan read
//! from the re-planner's prompt, so reactive runs re-plan with no network.
//!
//! - A failed, timed-out or surprising step: `alternative` (or, if the policy does not allow
//!   it, `partial`, `complete`, then `retry`) — the failed step and everything depending on
//!   it are replaced by one `recover` step that says what could not be done.
//! - The user's word or a limit close: `partial` (or `complete`, `alternative`) — the
//!   completed steps are kept and the rest replaced by one `revise` step that answers the
//!   request from what was done.
//!
//! Only a plan for the user's word says it completes the task (`completes_task`): a recovery
//! step stands in for work it does not do, and a plan wrapped up near a limit leaves work out.
//!
//! Everything here is a pure function of the prompt.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// The prompt the offline re-plans give the step that explains a failure.
pub const RECOVER: &str = "Recover from a failed step:";
/// The prompt the offline re-plans give the step that answers the user's request.
pub const REVISE: &str = "Revise the work as asked:";

/// The offline re-planner's answer to its prompt.
pub fn replan_for(prompt: &str) -> Value {
    let trigger = field(prompt, "Why a new plan is needed: ").unwrap_or_default();
    let allowed: Vec<String> = field(prompt, "Allowed strategies: ")
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    let plan: Value = current_plan(prompt).unwrap_or_else(|| json!({ "steps": [] }));
    let completed: Map<String, Value> = field(prompt, "Completed steps and their outputs: ")
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    let kind = trigger.split([' ', ':']).next().unwrap_or_default();
    let pick = |order: &[&str]| {
        order
            .iter()
            .find(|s| allowed.iter().any(|a| a == *s))
            .map(|s| s.to_string())
    };
    let (strategy, new_plan) = if matches!(kind, "user" | "limit_near") {
        let message = trigger.split_once(": ").map_or(trigger, |(_, m)| m);
        (
            pick(&["partial", "complete", "alternative"]),
            revised(&plan, &completed, message),
        )
    } else {
        let failed = between(trigger, "at step `", "`").unwrap_or_default();
        (
            pick(&["alternative", "partial", "complete", "retry"]),
            recovered(&plan, failed, trigger),
        )
    };
    // A recovery step only says what could not be done, and a plan wrapped up early near a
    // limit leaves work out: neither does the whole task. The user's word redefines the task.
    let completes_task = kind == "user";
    match strategy.as_deref() {
        Some("retry") => json!({
            "strategy": "retry",
            "reason": "The failure may pass; trying again.",
            "completes_task": true,
        }),
        Some(strategy) => json!({
            "strategy": strategy,
            "reason": format!("A new plan for: {trigger}"),
            "completes_task": completes_task,
            "plan": new_plan,
        }),
        None => json!({
            "strategy": "restore",
            "reason": "Going back to the first plan.",
            "completes_task": true,
            "restore_version": 1,
        }),
    }
}

/// The text after `label` up to the next blank line.
fn field<'a>(prompt: &'a str, label: &str) -> Option<&'a str> {
    let at = prompt.find(label)? + label.len();
    let rest = &prompt[at..];
    Some(rest.split("\n\n").next().unwrap_or(rest).trim())
}

/// The plan after `The current plan (version N): `.
fn current_plan(prompt: &str) -> Option<Value> {
    let at = prompt.find("The current plan (version ")?;
    let rest = &prompt[at..];
    let json = rest.split_once("): ")?.1;
    serde_json::from_str(json.split("\n\n").next()?.trim()).ok()
}

fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = text.find(start)? + start.len();
    let len = text[from..].find(end)?;
    Some(&text[from..from + len])
}

fn steps(plan: &Value) -> Vec<Value> {
    plan.get("steps")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn id_of(step: &Value) -> &str {
    step.get("id").and_then(Value::as_str).unwrap_or_default()
}

fn deps_of(step: &Value) -> Vec<&str> {
    step.get("depends_on")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// Text safe to put in a template (no `{{`).
fn plain(text: &str) -> String {
    text.replace("{{", "{ {").replace("}}", "} }")
}

/// An id not used by `steps`, from `base`.
fn fresh_id(steps: &[Value], base: &str) -> String {
    let taken: BTreeSet<&str> = steps.iter().map(id_of).collect();
    (1..)
        .map(|n| {
            if n == 1 {
                base.to_owned()
            } else {
                format!("{base}-{n}")
            }
        })
        .find(|id| !taken.contains(id.as_str()))
        .expect("some id is free")
}

/// The plan without `failed` and what depends on it, plus a step saying what failed.
fn recovered(plan: &Value, failed: &str, trigger: &str) -> Value {
    let all = steps(plan);
    let mut dropped: BTreeSet<String> = BTreeSet::from([failed.to_owned()]);
    loop {
        let more: Vec<String> = all
            .iter()
            .filter(|s| !dropped.contains(id_of(s)))
            .filter(|s| deps_of(s).iter().any(|d| dropped.contains(*d)))
            .map(|s| id_of(s).to_owned())
            .collect();
        if more.is_empty() {
            break;
        }
        dropped.extend(more);
    }
    let mut kept: Vec<Value> = all
        .iter()
        .filter(|s| !dropped.contains(id_of(s)))
        .cloned()
        .collect();
    let id = fresh_id(&all, "recover");
    kept.push(json!({ "id": id, "kind": "llm",
        "input": { "prompt": format!("{RECOVER} {}", plain(trigger)) } }));
    json!({ "steps": kept, "output": format!("{{{{ steps.{id}.output }}}}") })
}

/// The completed steps, plus a step answering `message` from their outputs.
fn revised(plan: &Value, completed: &Map<String, Value>, message: &str) -> Value {
    let all = steps(plan);
    let mut kept: Vec<Value> = all
        .iter()
        .filter(|s| completed.contains_key(id_of(s)))
        .cloned()
        .collect();
    let done: Vec<String> = kept.iter().map(|s| id_of(s).to_owned()).collect();
    // A completed branch has chosen already; it may name only the steps that are kept.
    for step in kept.iter_mut().filter(|s| s["kind"] == "branch") {
        for side in ["then", "else"] {
            if let Some(targets) = step["input"][side].as_array_mut() {
                targets.retain(|t| t.as_str().is_some_and(|t| done.iter().any(|d| d == t)));
            }
        }
    }
    let context: Vec<String> = done
        .iter()
        .map(|id| format!("{id}: {{{{ steps.{id}.output }}}}"))
        .collect();
    let id = fresh_id(&all, "revise");
    let mut step = json!({ "id": id, "kind": "llm", "input": { "prompt": format!(
        "{REVISE} {} Done so far: {}", plain(message), context.join("; ")) } });
    if !done.is_empty() {
        step["depends_on"] = json!(done);
    }
    kept.push(step);
    json!({ "steps": kept, "output": format!("{{{{ steps.{id}.output }}}}") })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(trigger: &str, strategies: &str, plan: &Value, completed: &Value) -> String {
        format!(
            "Task: read missing.txt\n\nWhy a new plan is needed: {trigger}\n\nAllowed strategies: \
             {strategies}\n\nThe current plan (version 1): {plan}\n\nCompleted steps and their \
             outputs: {completed}\n\nTools: []"
        )
    }

    fn five() -> Value {
        crate::llm::providers::offline::plans::plan_for(
            "read missing.txt, analyse it, then write a summary",
        )
    }

    #[test]
    fn a_failure_is_replaced_with_everything_that_depended_on_it() {
        let trigger = "step_failed at step `read`: no such file (file_not_found)";
        let answer = replan_for(&prompt(
            trigger,
            r#"["retry","alternative"]"#,
            &five(),
            &json!({}),
        ));
        assert_eq!(answer["strategy"], "alternative");
        let ids: Vec<&str> = answer["plan"]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(id_of)
            .collect();
        assert_eq!(ids, ["recover"]);
        assert_eq!(
            answer["completes_task"], false,
            "a recovery step stands in for the task"
        );
        let prompt_text = answer["plan"]["steps"][0]["input"]["prompt"]
            .as_str()
            .unwrap();
        assert!(prompt_text.starts_with(RECOVER) && prompt_text.contains("file_not_found"));
        let only_retry = replan_for(&prompt(trigger, r#"["retry"]"#, &five(), &json!({})));
        assert_eq!(
            only_retry,
            json!({ "strategy": "retry", "reason": "The failure may pass; trying again.",
                    "completes_task": true })
        );
    }

    #[test]
    fn a_completed_branch_names_only_the_steps_the_revision_keeps() {
        let calc = |id: &str, deps: &[&str]| {
            json!({ "id": id, "kind": "tool", "depends_on": deps,
                "input": { "tool": "math.calculate", "arguments": { "expression": "1 + 1" } } })
        };
        let plan = json!({ "steps": [
            calc("profit", &[]),
            { "id": "check", "kind": "branch", "depends_on": ["profit"], "input": {
                "condition": "true", "then": ["draft"], "else": ["archive"] } },
            calc("draft", &["check"]),
            calc("archive", &["check"]),
        ] });
        let done = json!({ "profit": { "result": 2 }, "check": true, "draft": { "result": 2 } });
        let answer = replan_for(&prompt(
            "user: shorter please",
            r#"["partial","complete"]"#,
            &plan,
            &done,
        ));
        let revised = &answer["plan"];
        assert_eq!(revised["steps"][1]["input"]["then"], json!(["draft"]));
        assert_eq!(revised["steps"][1]["input"]["else"], json!([]));
        let tools = crate::plan::catalog::fake::BuiltinTools::new();
        if let Err(problems) = crate::plan::validate_plan(revised, &tools) {
            panic!("the revision is a valid plan: {problems:#?}\n{revised:#}");
        }
    }

    #[test]
    fn the_users_word_keeps_what_completed() {
        let plan = json!({ "steps": [
            { "id": "a", "kind": "tool", "input": { "tool": "clock.now", "arguments": {} } },
            { "id": "b", "kind": "llm", "depends_on": ["a"], "input": { "prompt": "x" } }] });
        let answer = replan_for(&prompt(
            "user: make it shorter {{ input }}",
            r#"["partial","complete"]"#,
            &plan,
            &json!({ "a": { "now": "t" } }),
        ));
        assert_eq!(answer["strategy"], "partial");
        let steps = answer["plan"]["steps"].as_array().unwrap();
        assert_eq!(steps[0], plan["steps"][0], "the completed step as it was");
        assert_eq!(steps[1]["id"], "revise");
        assert_eq!(steps[1]["depends_on"], json!(["a"]));
        let text = steps[1]["input"]["prompt"].as_str().unwrap();
        assert!(
            text.contains("make it shorter { { input } }") && text.contains("{{ steps.a.output }}"),
            "{text}"
        );
    }
}
