//! [`StepPath`]: where a piece of work sits in a run, the one place that knows the grammar.
//!
//! A path is the chain from a top-level step down to a piece of work, `/`-separated: steps by
//! id, a loop's iteration as `[i]` after its step (`each[2]/inner`), an agent's turn as
//! `<agent>.<n>` (`desk/triage.1`), a chat's speaker choice as `select-<round>`, a handoff's
//! summary as `summary-<n>` and its question as `ask-<n>`, a team's stored conversation as
//! `convo`, a model-and-tools loop's rounds as `llm-<n>` and their tool calls as `tool-<n>-<k>`. Events, attempts, checkpoints, answers and the store all name work by it, in this
//! string form (the wire format of `path`, `step_id` and the stored step keys).
//!
//! Paths are built only through [`StepPath::join`] (and its shorthands), so no other module
//! formats or splits one; reading one back ([`StepPath::leaf`], [`StepPath::parent`],
//! [`StepPath::encloses`]) relies on what every segment excludes: `/` and `[`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where a step (or an agent turn, a selection, a summary…) sits in its run: its enclosing
/// work from the top-level step down, then itself. The empty path is the run itself, the
/// parent of every top-level step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct StepPath(String);

/// The run itself, for places that need a `&'static` root (a default).
pub static ROOT: StepPath = StepPath(String::new());

/// One level of a [`StepPath`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment<'a> {
    /// A step of a plan, by its id.
    Step(&'a str),
    /// Iteration `i` (from 0) of the loop step the path ends in.
    Iteration(usize),
    /// Turn `n` of an agent in a team (`<agent>.<n>`).
    Turn(&'a str, u32),
    /// A group chat's choice of the next speaker, in round `n` (`select-<n>`).
    Selection(u32),
    /// A handoff's summary of the conversation, before turn `n` (`summary-<n>`).
    Summary(u32),
    /// The review of plan version `version` (the plan whose digest is `plan`), asked for the
    /// `round`th time (`review-<version>-<plan>-<round>`).
    Review {
        version: u32,
        plan: &'a str,
        round: u32,
    },
    /// A handoff agent's question to a person, in turn `n` (`ask-<n>`).
    Ask(u32),
    /// Where a team keeps its conversation between turns (`convo`).
    Conversation,
    /// Model round `n` of a model-and-tools loop (`llm-<n>`).
    ModelRound(u32),
    /// Tool call `k` (from 1) the model asked for in round `n` (`tool-<n>-<k>`).
    ToolCall(u32, usize),
    /// An agent's recall from memory before its turn (`recall`).
    Recall,
    /// An agent's summary written to memory after its turn (`remember`), and its write
    /// (`remember-put`).
    Remember,
    RememberPut,
}

impl StepPath {
    /// The run itself: the parent of every top-level step.
    pub fn root() -> StepPath {
        StepPath(String::new())
    }

    /// Top-level step `id`.
    pub fn top(id: &str) -> StepPath {
        StepPath::root().step(id)
    }

    /// Whether this is the run itself (no step).
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// This path one level down: `segment` inside the work this path names.
    pub fn join(&self, segment: Segment<'_>) -> StepPath {
        use fmt::Write;
        let mut s = self.0.clone();
        if !matches!(segment, Segment::Iteration(_)) && !s.is_empty() {
            s.push('/');
        }
        match segment {
            Segment::Step(id) => s.push_str(id),
            Segment::Iteration(i) => {
                debug_assert!(!self.is_root(), "an iteration belongs to a loop step");
                let _ = write!(s, "[{i}]");
            }
            Segment::Turn(agent, n) => {
                let _ = write!(s, "{agent}.{n}");
            }
            Segment::Selection(n) => {
                let _ = write!(s, "select-{n}");
            }
            Segment::Summary(n) => {
                let _ = write!(s, "summary-{n}");
            }
            Segment::Ask(n) => {
                let _ = write!(s, "ask-{n}");
            }
            Segment::Review {
                version,
                plan,
                round,
            } => {
                let _ = write!(s, "review-{version}-{plan}-{round}");
            }
            Segment::Conversation => s.push_str("convo"),
            Segment::ModelRound(n) => {
                let _ = write!(s, "llm-{n}");
            }
            Segment::ToolCall(n, k) => {
                let _ = write!(s, "tool-{n}-{k}");
            }
            Segment::Recall => s.push_str("recall"),
            Segment::Remember => s.push_str("remember"),
            Segment::RememberPut => s.push_str("remember-put"),
        }
        StepPath(s)
    }

    /// Step `id` inside this path.
    pub fn step(&self, id: &str) -> StepPath {
        self.join(Segment::Step(id))
    }

    /// Iteration `i` of the loop step this path names.
    pub fn iteration(&self, i: usize) -> StepPath {
        self.join(Segment::Iteration(i))
    }

    /// Turn `n` of `agent` inside this (team) step.
    pub fn turn(&self, agent: &str, n: u32) -> StepPath {
        self.join(Segment::Turn(agent, n))
    }

    /// Where this (team) step keeps its conversation.
    pub fn conversation(&self) -> StepPath {
        self.join(Segment::Conversation)
    }

    /// Where a person is asked whether the work at this path may run: beside it, as
    /// `<leaf>-approval`.
    pub fn approval(&self) -> StepPath {
        StepPath(format!("{}-approval", self.0))
    }

    /// The last level: the id an attempt, an event and `GET /steps` show as `step_id`
    /// (`t2` for `seq/t2`, `triage.1` for `desk/triage.1`, `lp[0]` for `lp[0]`).
    pub fn leaf(&self) -> &str {
        self.0.rsplit_once('/').map_or(&self.0, |(_, leaf)| leaf)
    }

    /// The step a loop iteration belongs to (`each` for `each[2]`); any other path as it is.
    pub fn loop_step(&self) -> StepPath {
        match self
            .0
            .strip_suffix(']')
            .and_then(|p| p.rfind('[').map(|i| (p, i)))
        {
            Some((p, i)) if p[i + 1..].bytes().all(|b| b.is_ascii_digit()) => {
                StepPath(self.0[..i].to_owned())
            }
            _ => self.clone(),
        }
    }

    /// The work this path sits in (the root for a top-level step).
    pub fn parent(&self) -> StepPath {
        StepPath(self.0.rsplit_once('/').map_or("", |(p, _)| p).to_owned())
    }

    /// The parent as events and attempts carry it: absent at the top level.
    pub fn parent_if_nested(&self) -> Option<StepPath> {
        self.0
            .rsplit_once('/')
            .map(|(parent, _)| StepPath(parent.to_owned()))
    }

    /// Rebuilds a path from the `path` and `step_id` that events and attempts carry apart.
    pub fn from_parts(parent: Option<&StepPath>, leaf: &str) -> StepPath {
        match parent {
            Some(p) if !p.is_root() => StepPath(format!("{}/{leaf}", p.0)),
            _ => StepPath(leaf.to_owned()),
        }
    }

    /// Whether `other` lies strictly inside the work this path names (a child, an iteration,
    /// a turn, at any depth). The root contains every step.
    pub fn contains(&self, other: &StepPath) -> bool {
        if self.is_root() {
            return !other.is_root();
        }
        other
            .0
            .strip_prefix(&self.0)
            .is_some_and(|rest| rest.starts_with('/') || rest.starts_with('['))
    }

    /// Whether `other` is this path or lies inside it.
    pub fn encloses(&self, other: &StepPath) -> bool {
        self == other || self.contains(other)
    }

    /// How many levels deep (0 for the root, 1 for a top-level step); iterations do not
    /// count as levels of their own.
    pub fn depth(&self) -> usize {
        if self.is_root() {
            0
        } else {
            self.0.split('/').count()
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Why a string is not a step path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a step path (ids separated by `/`, loop iterations as `[i]`)")]
pub struct BadPath(String);

impl FromStr for StepPath {
    type Err = BadPath;

    /// Reads a path written by [`fmt::Display`]: `/`-separated levels of `[A-Za-z0-9_.-]`
    /// (1-64 characters), each optionally followed by iterations `[i]`. The empty string is
    /// the root.
    fn from_str(s: &str) -> Result<StepPath, BadPath> {
        if s.is_empty() || s.split('/').all(level_ok) {
            Ok(StepPath(s.to_owned()))
        } else {
            Err(BadPath(s.to_owned()))
        }
    }
}

/// One `/`-separated level: a name, then any number of `[digits]`.
fn level_ok(level: &str) -> bool {
    let (name, mut rest) = level.find('[').map_or((level, ""), |i| level.split_at(i));
    let name_ok = super::ids::is_step_id(name);
    while !rest.is_empty() {
        let Some(close) = rest.find(']') else {
            return false;
        };
        let digits = &rest[1..close];
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
        rest = &rest[close + 1..];
        if !rest.is_empty() && !rest.starts_with('[') {
            return false;
        }
    }
    name_ok
}

impl TryFrom<String> for StepPath {
    type Error = BadPath;
    fn try_from(s: String) -> Result<StepPath, BadPath> {
        s.parse()
    }
}

impl From<StepPath> for String {
    fn from(path: StepPath) -> String {
        path.0
    }
}

impl fmt::Display for StepPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for StepPath {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for StepPath {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_todays_strings_and_reads_them_back() {
        let seq = StepPath::top("seq");
        let cases = [
            (seq.step("par").step("t2"), "seq/par/t2"),
            (StepPath::top("lp").iteration(0).step("t3"), "lp[0]/t3"),
            (StepPath::top("lp").iteration(1).iteration(2), "lp[1][2]"),
            (StepPath::top("desk").turn("triage", 1), "desk/triage.1"),
            (
                StepPath::top("chat").join(Segment::Selection(3)),
                "chat/select-3",
            ),
            (StepPath::top("h").join(Segment::Summary(2)), "h/summary-2"),
            (StepPath::top("h").join(Segment::Ask(4)), "h/ask-4"),
            (
                StepPath::root().join(Segment::Review {
                    version: 2,
                    plan: "0a1b2c3d",
                    round: 1,
                }),
                "review-2-0a1b2c3d-1",
            ),
            (seq.step("team").conversation(), "seq/team/convo"),
            (StepPath::root().join(Segment::ModelRound(2)), "llm-2"),
            (seq.join(Segment::ToolCall(2, 1)), "seq/tool-2-1"),
            (
                seq.join(Segment::ToolCall(2, 1)).approval(),
                "seq/tool-2-1-approval",
            ),
        ];
        for (path, text) in cases {
            assert_eq!(path.to_string(), text);
            assert_eq!(text.parse::<StepPath>().unwrap(), path, "{text}");
            let json = serde_json::to_value(&path).unwrap();
            assert_eq!(json, serde_json::json!(text));
            assert_eq!(serde_json::from_value::<StepPath>(json).unwrap(), path);
        }
    }

    #[test]
    fn splits_into_parent_and_leaf() {
        let path: StepPath = "seq/lp[2]/a.b".parse().unwrap();
        assert_eq!(path.leaf(), "a.b");
        assert_eq!(path.parent(), "seq/lp[2]".parse::<StepPath>().unwrap());
        assert_eq!(path.parent().leaf(), "lp[2]");
        assert_eq!(StepPath::top("a").parent(), StepPath::root());
        assert_eq!(StepPath::top("a").parent_if_nested(), None);
        assert_eq!(path.depth(), 3);
        assert_eq!(
            path.parent().loop_step(),
            "seq/lp".parse::<StepPath>().unwrap()
        );
        assert_eq!(path.loop_step(), path);
        let parent = path.parent_if_nested().unwrap();
        assert_eq!(StepPath::from_parts(Some(&parent), path.leaf()), path);
        assert_eq!(StepPath::from_parts(None, "a"), StepPath::top("a"));
    }

    #[test]
    fn encloses_what_sits_inside_and_nothing_that_merely_shares_a_prefix() {
        let lp = StepPath::top("lp");
        let inside = ["lp/a", "lp[0]", "lp[0]/a", "lp/a/b"];
        let outside = ["lpx", "lp2/a", "l", "a/lp", "lp.1"];
        for s in inside {
            assert!(lp.contains(&s.parse().unwrap()), "{s}");
        }
        for s in outside {
            assert!(!lp.encloses(&s.parse().unwrap()), "{s}");
        }
        assert!(!lp.contains(&lp) && lp.encloses(&lp));
        assert!(StepPath::root().contains(&lp) && !StepPath::root().contains(&StepPath::root()));
    }

    #[test]
    fn refuses_what_no_builder_writes() {
        for bad in [
            "/a", "a/", "a//b", "a[", "a[x]", "a[1]b", "[1]", "a b", "a\\b",
        ] {
            assert!(bad.parse::<StepPath>().is_err(), "{bad}");
        }
        assert!(serde_json::from_value::<StepPath>(serde_json::json!("a//b")).is_err());
    }
}
