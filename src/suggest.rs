//! "Did you mean …?": the nearest of the names that exist to one that does not, for error
//! messages that teach (an unknown field, enum value, workflow or agent).
//!
//! Nearness is Jaro-Winkler similarity (`strsim`, which clap uses for the same purpose): it
//! favours a shared beginning, so `planer` → `planner` and `limit` → `limits`, and stays below
//! the bar for unrelated names.

/// Similarity at or above which a name is offered.
const CLOSE_ENOUGH: f64 = 0.8;

/// The candidate nearest to `wrong`, if one is near enough to offer.
pub fn nearest<'a>(wrong: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let wrong = wrong.to_lowercase();
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(&wrong, &c.to_lowercase()), c))
        .filter(|(score, _)| *score >= CLOSE_ENOUGH)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// `: did you mean `NAME`?` when a candidate is near, else nothing.
pub fn did_you_mean<'a>(wrong: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    nearest(wrong, candidates).map_or_else(String::new, |c| format!(": did you mean `{c}`?"))
}

/// The names as a list a person reads (`a`, `b` and `c`), or, past `at_most` of them, how many
/// there are and `how_to_list` them.
pub fn listed(names: &[&str], at_most: usize, how_to_list: &str) -> String {
    match names {
        [] => "there are none".to_owned(),
        _ if names.len() > at_most => format!("there are {} ({how_to_list})", names.len()),
        [only] => format!("`{only}`"),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(|n| format!("`{n}`")).collect();
            format!("{} or `{last}`", init.join(", "))
        }
    }
}

/// What a caller is told of a `what` (`workflow`, `agent`) named `name` that does not exist:
/// the nearest of `names` ("did you mean …?") and the names, or how many there are and
/// `how_to_list` them past ten, e.g. "no workflow `publsh`: did you mean `publish-report`?
/// (known: `publish-report`)".
pub fn unknown_name(what: &str, how_to_list: &str, name: &str, names: &[&str]) -> String {
    let known = match names.len() {
        0 => format!("there are no {what}s yet"),
        n if n > 10 => format!("{n} exist: {how_to_list}"),
        _ => format!("known: {}", listed(names, 10, how_to_list)),
    };
    format!(
        "no {what} `{name}`{} ({known})",
        did_you_mean(name, names.iter().copied()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_names_are_offered_and_far_ones_are_not() {
        let kinds = ["auto", "simple", "fixed", "planner", "reactive"];
        assert_eq!(nearest("planer", kinds), Some("planner"));
        assert_eq!(nearest("Reactiv", kinds), Some("reactive"));
        assert_eq!(nearest("banana", kinds), None);
        assert_eq!(
            nearest("limit", ["limits", "input", "metadata"]),
            Some("limits")
        );
        assert_eq!(did_you_mean("fixd", kinds), ": did you mean `fixed`?");
        assert_eq!(did_you_mean("zzz", kinds), "");
    }

    #[test]
    fn lists_read_as_sentences() {
        assert_eq!(listed(&["a", "b", "c"], 10, "x"), "`a`, `b` or `c`");
        assert_eq!(listed(&["a"], 10, "x"), "`a`");
        assert_eq!(listed(&[], 10, "x"), "there are none");
        assert_eq!(
            listed(&["a", "b", "c"], 2, "GET /v1/agents lists them"),
            "there are 3 (GET /v1/agents lists them)"
        );
    }

    #[test]
    fn an_unknown_name_is_told_with_the_nearest_and_the_known_ones() {
        let list = "GET /v1/workflows lists them";
        assert_eq!(
            unknown_name("workflow", list, "publsh", &["publish-report"]),
            "no workflow `publsh`: did you mean `publish-report`? (known: `publish-report`)"
        );
        assert_eq!(
            unknown_name("agent", list, "x", &[]),
            "no agent `x` (there are no agents yet)"
        );
        let many: Vec<String> = (0..11).map(|i| format!("w{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            unknown_name("workflow", list, "zzz", &many),
            "no workflow `zzz` (11 exist: GET /v1/workflows lists them)"
        );
    }
}
