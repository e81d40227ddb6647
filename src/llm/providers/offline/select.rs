//! What the offline model answers orca's selector (the OrchestrationType schema): `planner` for
//! a task that reads as several steps, `simple` for everything else (a question, the time,
//! arithmetic, one file to read). A pure function of the task, so `auto` runs on the offline
//! model always choose the same way.

use serde_json::{Value, json};

/// Words that put one action after another.
const SEQUENCE_WORDS: [&str; 6] = ["then", "afterwards", "finally", "next", "after", "step"];
/// The same in Korean, matched anywhere (particles join words).
const SEQUENCE_KO: [&str; 6] = ["그 다음", "그다음", "다음에", "후에", "한 뒤", "하고 나서"];
/// Groups of verbs (word beginnings); a task naming actions of two groups has two steps.
const ACTIONS: [&[&str]; 8] = [
    &["read", "open", "load", "읽"],
    &["analy", "examin", "inspect", "분석"],
    &["summar", "요약"],
    &["write", "draft", "compose", "작성", "써"],
    &["compar", "비교"],
    &["translat", "번역"],
    &["search", "find", "look", "검색", "찾"],
    &["calculat", "comput", "계산"],
];

/// The selector's answer for `task`.
pub fn orchestration_for(task: &str) -> Value {
    let choice = if is_multi_step(task) {
        "planner"
    } else {
        "simple"
    };
    json!({ "orchestrationType": choice })
}

fn is_multi_step(task: &str) -> bool {
    let lower = task.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let names = |stem: &str| {
        if stem.is_ascii() {
            words.iter().any(|w| w.starts_with(stem))
        } else {
            lower.contains(stem)
        }
    };
    let sequenced = SEQUENCE_WORDS.iter().any(|s| words.contains(s))
        || SEQUENCE_KO.iter().any(|s| lower.contains(s));
    let actions = ACTIONS
        .iter()
        .filter(|group| group.iter().any(|stem| names(stem)))
        .count();
    actions >= 2 && (sequenced || actions >= 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_steps_plan_and_the_rest_is_simple() {
        let cases = [
            (
                "read hello.txt, analyse it, then write a summary",
                "planner",
            ),
            ("hello.txt 파일을 읽고 분석한 다음에 요약해줘", "planner"),
            (
                "read the report, compare it with last year's and translate it",
                "planner",
            ),
            ("10 + 20 계산해줘", "simple"),
            ("현재 시간 알려줘", "simple"),
            ("what time is it?", "simple"),
            ("hello.txt 파일 읽어줘", "simple"),
            ("read hello.txt", "simple"),
            ("then what?", "simple"),
            ("", "simple"),
        ];
        for (task, want) in cases {
            assert_eq!(
                orchestration_for(task),
                json!({ "orchestrationType": want }),
                "{task:?}"
            );
        }
    }
}
