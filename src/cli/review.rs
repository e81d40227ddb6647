//! A plan review asked at the prompt (`orca run --review-plans`, `orca runs watch`): the plan
//! is shown, and the answer is typed as a word rather than the JSON of
//! `POST /v1/runs/{id}/input` (src/engine/review.rs owns that shape; JSON is still taken):
//!
//! | typed | sent |
//! |---|---|
//! | `approve` (or `yes`, `y`) | `{"decision": "approve"}` |
//! | `reject REASON` | `{"decision": "reject", "reason": "REASON"}` |
//! | `edit FILE` | `{"decision": "edit", "plan": <FILE's JSON>}` |
//! | `{"decision": …}` | as typed |

use serde_json::{Value, json};

/// How to answer, shown under the plan.
pub const HOW: &str = "answer approve, reject REASON, edit FILE (a plan to run instead), \
                       or the JSON {\"decision\": ...}";

/// What a typed review answer stands for; `Err` says what is wrong, and it is asked again.
pub fn answer(text: &str) -> Result<Value, String> {
    let text = text.trim();
    let (word, rest) = match text.split_once(char::is_whitespace) {
        Some((word, rest)) => (word, rest.trim()),
        None => (text, ""),
    };
    match word.to_ascii_lowercase().as_str() {
        "approve" | "yes" | "y" => Ok(json!({ "decision": "approve" })),
        "reject" if rest.is_empty() => {
            Err("say why after `reject` (the planner reads it): reject REASON".into())
        }
        "reject" => Ok(json!({ "decision": "reject", "reason": rest })),
        "edit" if rest.is_empty() => Err("name the plan file after `edit`: edit FILE".into()),
        "edit" => {
            let plan = super::json_file(std::path::Path::new(rest)).map_err(|e| e.to_string())?;
            Ok(json!({ "decision": "edit", "plan": plan }))
        }
        _ => serde_json::from_str(text).map_err(|_| format!("`{text}` is not an answer: {HOW}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_stand_for_the_decisions_and_json_is_taken_as_typed() {
        let approve = json!({ "decision": "approve" });
        for (typed, sent) in [
            ("approve", approve.clone()),
            (" Approve\n", approve.clone()),
            ("y", approve.clone()),
            (
                "reject also multiply by ten",
                json!({ "decision": "reject", "reason": "also multiply by ten" }),
            ),
            (r#"{"decision": "approve"}"#, approve.clone()),
        ] {
            assert_eq!(answer(typed), Ok(sent), "{typed}");
        }
        for (typed, says) in [
            ("reject", "reject REASON"),
            ("reject   ", "reject REASON"),
            ("edit", "edit FILE"),
            ("edit /no/such/plan.json", "reading /no/such/plan.json"),
            ("maybe", "`maybe` is not an answer"),
        ] {
            let err = answer(typed).unwrap_err();
            assert!(err.contains(says), "{typed}: {err}");
        }
    }
}
