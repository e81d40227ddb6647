//! `[selector]` checked and compiled: the default orchestration and the rules, each matched
//! against a run's input text. The configuration checks it as it loads (every problem names
//! its key); the auto selector (`engine::selector`) compiles it once at start and decides
//! with it. Pure: no IO, nothing about runs.

use regex::Regex;

use super::{SelectorConfig, SelectorRuleConfig};
use crate::domain::Orchestration;

/// What a rule decides when it matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `simple`, `planner` or `reactive`.
    Orchestration(Orchestration),
    /// A registered workflow, run as `fixed`.
    Workflow(String),
}

/// How a rule recognises an input.
#[derive(Debug, Clone)]
enum Matcher {
    Pattern(Regex),
    /// Lowercased, non-empty.
    Keywords(Vec<String>),
}

/// One compiled `[[selector.rules]]` entry.
#[derive(Debug, Clone)]
pub struct Rule {
    pub name: String,
    matcher: Matcher,
    pub target: Target,
}

/// Why a rule matched, for the run's `selected.reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hit {
    Pattern(String),
    Keyword(String),
}

impl std::fmt::Display for Hit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hit::Pattern(p) => write!(f, "pattern `{p}`"),
            Hit::Keyword(k) => write!(f, "keyword `{k}`"),
        }
    }
}

impl Rule {
    /// Whether the rule recognises `text`; `lowered` is `text` lowercased (computed once for
    /// every rule).
    pub fn hit(&self, text: &str, lowered: &str) -> Option<Hit> {
        match &self.matcher {
            Matcher::Pattern(re) => re
                .is_match(text)
                .then(|| Hit::Pattern(re.as_str().to_owned())),
            Matcher::Keywords(words) => words
                .iter()
                .find(|w| has_keyword(lowered, w))
                .map(|w| Hit::Keyword(w.clone())),
        }
    }
}

/// Whether `keyword` occurs in `text` (both lowercased) at the start of a word: `report`
/// matches "reports" but not "misreport". A keyword that does not begin with an ASCII letter or
/// digit (Korean, say, where particles join words) matches anywhere.
fn has_keyword(text: &str, keyword: &str) -> bool {
    let word_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let bounded = keyword.starts_with(word_char);
    text.match_indices(keyword)
        .any(|(at, _)| !bounded || !text[..at].chars().next_back().is_some_and(word_char))
}

/// A `[selector]` problem: the key that holds it and what is wrong, for the configuration error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    pub key: &'static str,
    pub message: String,
}

/// The orchestrations a rule or the default may name: the ones that run without a plan given.
const NAMEABLE: [Orchestration; 3] = [
    Orchestration::Simple,
    Orchestration::Planner,
    Orchestration::Reactive,
];

fn nameable(value: &str) -> Result<Orchestration, String> {
    match Orchestration::parse(value) {
        Some(o) if NAMEABLE.contains(&o) => Ok(o),
        Some(Orchestration::Fixed) => Err(format!(
            "`fixed` needs a workflow; name one with `workflow` instead (expected {})",
            names()
        )),
        _ => Err(format!(
            "unknown orchestration `{value}`; expected {}",
            names()
        )),
    }
}

fn names() -> String {
    NAMEABLE
        .iter()
        .map(|o| o.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `selector.default`, checked.
pub fn default_of(config: &SelectorConfig) -> Result<Orchestration, ConfigProblem> {
    nameable(&config.default).map_err(|message| ConfigProblem {
        key: "selector.default",
        message,
    })
}

/// Every rule of `[[selector.rules]]`, checked and compiled, in order. The first problem is
/// reported, naming the rule by index and name.
pub fn compile(config: &SelectorConfig) -> Result<Vec<Rule>, ConfigProblem> {
    let mut rules: Vec<Rule> = Vec::with_capacity(config.rules.len());
    for (i, given) in config.rules.iter().enumerate() {
        let problem = |member: &str, message: String| ConfigProblem {
            key: "selector.rules",
            message: format!(
                "selector.rules[{i}]{member} (rule `{}`): {message}",
                given.name
            ),
        };
        if given.name.trim().is_empty() {
            return Err(problem(".name", "every rule needs a name".into()));
        }
        if matches!(given.name.as_str(), REQUEST_PLAN | REQUEST_WORKFLOW)
            || rules.iter().any(|r| r.name == given.name)
        {
            return Err(problem(".name", "the name is already taken".into()));
        }
        let rule = compile_one(given).map_err(|(member, message)| problem(member, message))?;
        rules.push(rule);
    }
    Ok(rules)
}

/// The names the selector gives the request's own `plan` and `workflow` when it runs them.
pub const REQUEST_PLAN: &str = "request_plan";
pub const REQUEST_WORKFLOW: &str = "request_workflow";

fn compile_one(given: &SelectorRuleConfig) -> Result<Rule, (&'static str, String)> {
    let matcher = match (&given.pattern, given.keywords.is_empty()) {
        (Some(_), false) | (None, true) => {
            return Err(("", "give either `pattern` or `keywords`".into()));
        }
        (Some(pattern), true) => Matcher::Pattern(Regex::new(pattern).map_err(|e| {
            (
                ".pattern",
                format!("`{pattern}` is not a valid regular expression: {e}"),
            )
        })?),
        (None, false) => {
            if given.keywords.iter().any(|k| k.trim().is_empty()) {
                return Err((".keywords", "a keyword cannot be empty".into()));
            }
            Matcher::Keywords(given.keywords.iter().map(|k| k.to_lowercase()).collect())
        }
    };
    let target = match (&given.orchestration, &given.workflow) {
        (Some(o), None) => Target::Orchestration(nameable(o).map_err(|m| (".orchestration", m))?),
        (None, Some(w)) => {
            crate::domain::ids::check_name(w).map_err(|m| (".workflow", m))?;
            Target::Workflow(w.clone())
        }
        _ => {
            return Err(("", "give either `orchestration` or `workflow`".into()));
        }
    };
    Ok(Rule {
        name: given.name.clone(),
        matcher,
        target,
    })
}

/// `[selector]`, checked and compiled: the rules in order, the default, whether to ask the
/// model. Built once at start; cheap to share.
#[derive(Debug, Clone)]
pub struct Selector {
    rules: Vec<Rule>,
    default: Orchestration,
    use_llm: bool,
}

impl Selector {
    /// Compiles `[selector]`; the first problem names its key (bad regular expressions,
    /// unknown orchestrations, rules without a matcher or a target).
    pub fn from_config(config: &SelectorConfig) -> Result<Selector, ConfigProblem> {
        Ok(Selector {
            default: default_of(config)?,
            rules: compile(config)?,
            use_llm: config.use_llm,
        })
    }

    /// The configured orchestration for when nothing else decides.
    pub fn default_orchestration(&self) -> Orchestration {
        self.default
    }

    /// Whether the model is asked when no rule decides (`selector.use_llm`).
    pub fn asks_model(&self) -> bool {
        self.use_llm
    }

    /// Every rule matching `text`, in order, with what matched.
    pub fn matching<'a>(&'a self, text: &'a str) -> impl Iterator<Item = (&'a Rule, Hit)> + 'a {
        let lowered = text.to_lowercase();
        self.rules
            .iter()
            .filter_map(move |r| r.hit(text, &lowered).map(|h| (r, h)))
    }
}

impl Default for Selector {
    /// The shipped `[selector]`: no rules, ask the model, else `simple`.
    fn default() -> Self {
        Selector::from_config(&SelectorConfig::default()).expect("the default [selector] is valid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        name: &str,
        pattern: Option<&str>,
        keywords: &[&str],
        target: &str,
    ) -> SelectorRuleConfig {
        let (orchestration, workflow) = match target.strip_prefix("workflow:") {
            Some(w) => (None, Some(w.to_owned())),
            None => (Some(target.to_owned()), None),
        };
        SelectorRuleConfig {
            name: name.into(),
            pattern: pattern.map(str::to_owned),
            keywords: keywords.iter().map(|k| k.to_string()).collect(),
            orchestration,
            workflow,
        }
    }

    fn config(rules: Vec<SelectorRuleConfig>) -> SelectorConfig {
        SelectorConfig {
            rules,
            ..SelectorConfig::default()
        }
    }

    /// The first rule that matches `input`, with what matched.
    fn first(rules: &[Rule], input: &str) -> Option<(String, Hit)> {
        let lowered = input.to_lowercase();
        rules
            .iter()
            .find_map(|r| r.hit(input, &lowered).map(|h| (r.name.clone(), h)))
    }

    #[test]
    fn rules_match_in_order_by_pattern_or_keyword() {
        let rules = compile(&config(vec![
            rule("arith", Some(r"^\s*[\d\s+\-*/().]+\s*$"), &[], "simple"),
            rule(
                "reports",
                None,
                &["Report", "보고서"],
                "workflow:publish-report",
            ),
            rule("steps", Some(r"(?i)\bthen\b"), &[], "planner"),
            rule("anything", Some("."), &[], "reactive"),
        ]))
        .unwrap();
        let cases: &[(&str, Option<(&str, Hit)>)] = &[
            (
                "12 * (3 + 4)",
                Some(("arith", Hit::Pattern(r"^\s*[\d\s+\-*/().]+\s*$".into()))),
            ),
            (
                "Write the REPORTS for May",
                Some(("reports", Hit::Keyword("report".into()))),
            ),
            (
                "5월 보고서를 써줘",
                Some(("reports", Hit::Keyword("보고서".into()))),
            ),
            (
                "read it, Then summarise",
                Some(("steps", Hit::Pattern(r"(?i)\bthen\b".into()))),
            ),
            // `report` starts no word in "misreported"; `then` is no word in "authentication".
            (
                "misreported authentication",
                Some(("anything", Hit::Pattern(".".into()))),
            ),
            ("", None),
        ];
        for (input, want) in cases {
            let got = first(&rules, input);
            let want = want.clone().map(|(n, h)| (n.to_owned(), h));
            assert_eq!(got, want, "{input:?}");
        }
        assert_eq!(rules[1].target, Target::Workflow("publish-report".into()));
        assert_eq!(
            rules[2].target,
            Target::Orchestration(Orchestration::Planner)
        );
    }

    #[test]
    fn keywords_match_at_the_start_of_words_only() {
        let cases = [
            ("please report it", "report", true),
            ("reports", "report", true),
            ("misreport", "report", false),
            ("a_report", "report", false),
            ("(report)", "report", true),
            ("요약해줘", "요약", true),
            ("문서요약", "요약", true),
            ("10+20", "+", true),
        ];
        for (text, keyword, want) in cases {
            assert_eq!(has_keyword(text, keyword), want, "{keyword:?} in {text:?}");
        }
    }

    #[test]
    fn every_problem_names_the_rule_and_its_key() {
        let cases: Vec<(SelectorRuleConfig, &str)> = vec![
            (
                rule("a", Some("("), &[], "simple"),
                "selector.rules[0].pattern (rule `a`)",
            ),
            (
                rule("a", Some("x"), &["y"], "simple"),
                "selector.rules[0] (rule `a`): give either `pattern`",
            ),
            (
                rule("a", None, &[], "simple"),
                "give either `pattern` or `keywords`",
            ),
            (
                rule("a", None, &[" "], "simple"),
                "selector.rules[0].keywords",
            ),
            (
                rule("a", Some("x"), &[], "auto"),
                "selector.rules[0].orchestration (rule `a`): unknown orchestration `auto`",
            ),
            (
                rule("a", Some("x"), &[], "fixed"),
                "`fixed` needs a workflow",
            ),
            (
                rule("a", Some("x"), &[], "workflow:Not A Name"),
                "selector.rules[0].workflow",
            ),
            (rule("", Some("x"), &[], "simple"), "selector.rules[0].name"),
            (
                rule(REQUEST_PLAN, Some("x"), &[], "simple"),
                "already taken",
            ),
        ];
        for (given, want) in cases {
            let err = compile(&config(vec![given.clone()])).expect_err(want);
            assert_eq!(err.key, "selector.rules");
            assert!(
                err.message.contains(want),
                "{want:?} not in {:?}",
                err.message
            );
        }
        let twice = config(vec![
            rule("a", Some("x"), &[], "simple"),
            rule("a", Some("y"), &[], "planner"),
        ]);
        let err = compile(&twice).unwrap_err();
        assert!(
            err.message.starts_with("selector.rules[1].name"),
            "{}",
            err.message
        );
    }

    #[test]
    fn the_default_is_an_orchestration_that_runs_without_a_plan() {
        for (value, ok) in [
            ("simple", true),
            ("planner", true),
            ("reactive", true),
            ("fixed", false),
            ("auto", false),
            ("Simple", false),
        ] {
            let c = SelectorConfig {
                default: value.into(),
                ..SelectorConfig::default()
            };
            assert_eq!(default_of(&c).is_ok(), ok, "{value}");
        }
        assert_eq!(
            default_of(&SelectorConfig::default()),
            Ok(Orchestration::Simple)
        );
    }
}
