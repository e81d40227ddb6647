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
    fn the_task_is_read_from_the_planner_prompt() {
        assert_eq!(
            task_of("Task: 10 + 20 계산해줘\n\nTools: []"),
            "10 + 20 계산해줘"
        );
    }
}
