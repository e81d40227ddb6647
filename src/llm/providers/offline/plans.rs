//! What the offline model plans and writes for orca's own functions: plans for the sample
//! requests (the current time, arithmetic, reading a file, and the five-step "read hello.txt,
//! analyse it, then write a summary"), and short deterministic texts for the prompts those
//! plans use (an analysis, a summary, a final answer), so a `planner` run completes with no
//! network. Everything here is a pure function of the request.

use serde_json::{Value, json};

use super::{CLOCK_TOOL, FILE_TOOL, MATH_TOOL, extract_expression, extract_file_name, is_hangul};

/// The prompt the offline plans give `llm` steps that analyse a text.
const ANALYSE: &str = "Analyse this text:";
/// The prompt the offline plans give the step that writes the final answer.
const ANSWER: &str = "Write the answer from this summary:";

/// The task a planner prompt states (`Task: ...` up to the next blank line).
pub fn task_of(prompt: &str) -> &str {
    let rest = prompt.strip_prefix("Task:").unwrap_or(prompt);
    rest.split("\n\n").next().unwrap_or(rest).trim()
}

/// A plan for `task`.
pub fn plan_for(task: &str) -> Value {
    let lower = task.to_lowercase();
    let file = extract_file_name(task);
    let wants = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    if let Some(path) = &file
        && wants(&["analy", "분석"])
        && wants(&["summar", "요약"])
    {
        return read_analyse_summarise(path);
    }
    if wants(&["시간", "몇 시", "time", "clock"]) {
        let timezone = if task.chars().any(is_hangul) {
            "Asia/Seoul"
        } else {
            "UTC"
        };
        return one_tool("now", CLOCK_TOOL, json!({ "timezone": timezone }));
    }
    if let Some(expression) = extract_expression(task, wants(&["계산", "calculat", "comput"])) {
        return one_tool("calc", MATH_TOOL, json!({ "expression": expression }));
    }
    if let Some(path) = file {
        return one_tool("read", FILE_TOOL, json!({ "path": path }));
    }
    json!({ "steps": [{ "id": "answer", "kind": "llm", "input": { "prompt": task } }],
            "output": "{{ steps.answer.output }}" })
}

/// How the planner tells the model its plan was rejected (`engine::planner`'s
/// `rejection_request`): this, the reviewer's reason, then a line asking for a new plan.
pub const REJECTED: &str = "The reviewer rejected this plan: ";

/// The reviewer's reasons, in order, from the planner's messages after its first prompt.
pub fn rejections<'a>(later_user_messages: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    later_user_messages
        .into_iter()
        .filter_map(|m| m.strip_prefix(REJECTED))
        .map(|rest| rest.split('\n').next().unwrap_or(rest).trim())
        .collect()
}

/// `plan` changed by each rejection in turn, so the reviewer sees the reason acted on. A
/// reason naming one of the plan's steps (`drop measure`, "no `answer` step") removes that
/// step with every step that needs it; any other reason (or one that would leave nothing)
/// adds a last step that answers from what the plan did, told the reason.
pub fn revised(mut plan: Value, reasons: &[&str]) -> Value {
    for (i, reason) in reasons.iter().enumerate() {
        let dropped = named_step(&plan, reason).and_then(|id| without(&plan, &id));
        plan = match dropped {
            Some(smaller) => smaller,
            None => with_revision(plan, reason, i + 1),
        };
    }
    plan
}

/// The ids of the plan's top-level steps.
fn step_ids(plan: &Value) -> Vec<String> {
    let steps = plan["steps"].as_array().into_iter().flatten();
    steps
        .filter_map(|s| s["id"].as_str().map(str::to_owned))
        .collect()
}

/// The first of the plan's step ids `reason` has as a word.
fn named_step(plan: &Value, reason: &str) -> Option<String> {
    let words: Vec<&str> = reason
        .split(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.')))
        .map(|w| w.trim_matches('.'))
        .collect();
    step_ids(plan)
        .into_iter()
        .find(|id| words.contains(&id.as_str()))
}

/// The plan without step `id` and the steps that depend on it (directly or not); its
/// `output` goes when it reads a removed step. None when no step would be left.
fn without(plan: &Value, id: &str) -> Option<Value> {
    let steps = plan["steps"].as_array()?;
    let needs = |step: &Value, ids: &[String]| {
        let deps = step["depends_on"].as_array().into_iter().flatten();
        deps.filter_map(Value::as_str)
            .any(|d| ids.iter().any(|i| i == d))
    };
    let mut removed = vec![id.to_owned()];
    while let Some(next) = steps.iter().find(|s| {
        let sid = s["id"].as_str().unwrap_or_default();
        !removed.iter().any(|r| r == sid) && needs(s, &removed)
    }) {
        removed.push(next["id"].as_str().unwrap_or_default().to_owned());
    }
    let kept: Vec<Value> = steps
        .iter()
        .filter(|s| !removed.iter().any(|r| s["id"] == r.as_str()))
        .cloned()
        .collect();
    if kept.is_empty() {
        return None;
    }
    let mut smaller = plan.clone();
    smaller["steps"] = Value::Array(kept);
    let output = plan["output"].to_string();
    if removed
        .iter()
        .any(|r| output.contains(&format!("steps.{r}.")))
    {
        // The one step left at the end gives the output; with several, their outputs do.
        match last_steps(&smaller).as_slice() {
            [only] => smaller["output"] = json!(format!("{{{{ steps.{only}.output }}}}")),
            _ => {
                if let Some(map) = smaller.as_object_mut() {
                    map.remove("output");
                }
            }
        }
    }
    Some(smaller)
}

/// The ids of the top-level steps no other step depends on.
fn last_steps(plan: &Value) -> Vec<String> {
    let steps = plan["steps"].as_array().cloned().unwrap_or_default();
    step_ids(plan)
        .into_iter()
        .filter(|id| {
            !steps.iter().any(|s| {
                let deps = s["depends_on"].as_array().into_iter().flatten();
                deps.filter_map(Value::as_str).any(|d| d == id.as_str())
            })
        })
        .collect()
}

/// The plan with a last step, after every step nothing else needs, that answers from their
/// outputs as the reviewer asked; the plan's output is that step's.
fn with_revision(mut plan: Value, reason: &str, nth: usize) -> Value {
    let ids = step_ids(&plan);
    let last = last_steps(&plan);
    let mut id = if nth == 1 {
        "revise".to_owned()
    } else {
        format!("revise-{nth}")
    };
    while ids.contains(&id) {
        id.push('_');
    }
    let outputs: Vec<String> = last
        .iter()
        .map(|s| format!("{{{{ steps.{s}.output }}}}"))
        .collect();
    // The reason is the reviewer's text, not a template.
    let reason = reason.replace("{{", "{ {").replace("}}", "} }");
    let prompt = format!(
        "{} {reason} Done so far: {}",
        super::replans::REVISE,
        outputs.join(", ")
    );
    let step =
        json!({ "id": id, "kind": "llm", "depends_on": last, "input": { "prompt": prompt } });
    if let Some(list) = plan["steps"].as_array_mut() {
        list.push(step);
    }
    plan["output"] = json!(format!("{{{{ steps.{id}.output }}}}"));
    plan
}

fn one_tool(id: &str, tool: &str, arguments: Value) -> Value {
    json!({
        "steps": [{ "id": id, "kind": "tool", "input": { "tool": tool, "arguments": arguments } }],
        "output": format!("{{{{ steps.{id}.output }}}}"),
    })
}

/// Five steps: read the file; measure it and analyse it side by side; summarise the analysis
/// with the `summarizer` function; write the answer.
fn read_analyse_summarise(path: &str) -> Value {
    json!({
        "steps": [
            { "id": "read", "kind": "tool", "input": { "tool": FILE_TOOL, "arguments": { "path": path } } },
            { "id": "measure", "kind": "tool", "depends_on": ["read"],
              "input": { "tool": MATH_TOOL, "arguments": { "expression": "{{ steps.read.output.bytes }} * 1" } } },
            { "id": "analyse", "kind": "llm", "depends_on": ["read"],
              "input": { "prompt": format!("{ANALYSE} {{{{ steps.read.output.content }}}}") } },
            { "id": "summarise", "kind": "llm", "depends_on": ["analyse"],
              "input": { "function": "summarizer", "arguments": { "transcript": "{{ steps.analyse.output }}" } } },
            { "id": "answer", "kind": "llm", "depends_on": ["summarise", "measure"],
              "input": { "prompt": format!("{ANSWER} {{{{ steps.summarise.output }}}} ({{{{ steps.measure.output.result }}}} bytes)") } },
        ],
        "output": "{{ steps.answer.output }}",
    })
}

/// The offline model's text for the prompts the offline plans use, if `user_text` is one.
pub fn text_for(system: Option<&str>, user_text: &str) -> Option<String> {
    if let Some(text) = user_text.strip_prefix(ANALYSE) {
        let text = text.trim();
        let words = text.split_whitespace().count();
        let lines = text.lines().count().max(1);
        let first = text.lines().next().unwrap_or_default();
        return Some(format!(
            "The text has {words} words in {lines} line{}; it begins \"{first}\".",
            if lines == 1 { "" } else { "s" }
        ));
    }
    if system.is_some_and(|s| s.starts_with("Summarise the conversation")) {
        let first_sentence = user_text.split_inclusive('.').next().unwrap_or(user_text);
        return Some(format!("Summary: {}", first_sentence.trim()));
    }
    if let Some(rest) = user_text.strip_prefix(super::replans::RECOVER) {
        return Some(format!(
            "I could not finish every part of the task. {}",
            rest.trim()
        ));
    }
    if let Some(rest) = user_text.strip_prefix(super::replans::REVISE) {
        return Some(format!("Revised as you asked. {}", rest.trim()));
    }
    user_text
        .strip_prefix(ANSWER)
        .map(|rest| format!("Here is what I found. {}", rest.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_samples_get_their_plans() {
        let cases = [
            ("현재 시간 알려줘", "clock.now"),
            ("10 + 20 계산해줘", "math.calculate"),
            ("hello.txt 파일 읽어줘", "fs.read"),
        ];
        for (task, tool) in cases {
            let plan = plan_for(task);
            assert_eq!(plan["steps"][0]["input"]["tool"], tool, "{task}: {plan}");
        }
        let five = plan_for("read hello.txt, analyse it, then write a summary");
        assert_eq!(five["steps"].as_array().unwrap().len(), 5, "{five}");
        assert_eq!(five["steps"][3]["input"]["function"], "summarizer");
        assert_eq!(plan_for("tell me a joke")["steps"][0]["kind"], "llm");
    }

    #[test]
    fn a_rejection_changes_the_plan_as_its_reason_says() {
        let calc = plan_for("10 + 20 계산해줘");
        let told = rejections([
            "Task: x",
            "The reviewer rejected this plan: explain the sum\nAnswer with a new whole plan",
        ]);
        assert_eq!(told, ["explain the sum"]);
        // A reason naming no step: a last step answers from the plan's work, told the reason.
        let explained = revised(calc.clone(), &told);
        assert_eq!(
            explained["steps"][1],
            json!({ "id": "revise", "kind": "llm", "depends_on": ["calc"], "input": {
                "prompt": "Revise the work as asked: explain the sum Done so far: {{ steps.calc.output }}" } })
        );
        assert_eq!(explained["output"], "{{ steps.revise.output }}");
        // Naming a step drops it and what needs it; the first plan comes back here.
        assert_eq!(
            revised(calc.clone(), &["explain the sum", "drop `revise`"]),
            calc
        );
        // Dropping the only step would leave nothing: a revision instead, numbered.
        let again = revised(calc.clone(), &["a", "no calc"]);
        assert_eq!(again["steps"][2]["id"], "revise-2");
        assert_eq!(again["steps"][2]["depends_on"], json!(["revise"]));

        let five = plan_for("read hello.txt, analyse it, then write a summary");
        let four = revised(five, &["skip measure, please"]);
        let ids: Vec<&str> = four["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["read", "analyse", "summarise"]);
        assert_eq!(four["output"], "{{ steps.summarise.output }}");
    }

    #[test]
    fn the_task_is_read_from_the_planner_prompt() {
        assert_eq!(
            task_of("Task: 10 + 20 계산해줘\n\nTools: []"),
            "10 + 20 계산해줘"
        );
    }
}
