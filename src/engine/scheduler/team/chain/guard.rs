//! `guardrail` on text: whole (an input message, an answer that did not stream) or streamed
//! piece by piece. A stream holds back the last `window` characters, and a match that reaches
//! the end of what arrived, until more text or the end shows where a match could be — so a
//! match split across chunks is redacted (or blocks) before any of it goes out.

use std::sync::Arc;

use crate::domain::{ErrorCode, RunError};
use crate::plan::middleware_spec::{GuardAction, Guardrail};

use crate::engine::calls::model::{Filters, TextFilter};

/// How much of the held text [`GuardStream::release`] lets out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Release {
    /// What can no longer be part of a match: more text may come.
    Settled,
    /// Everything: the text has ended.
    All,
}

/// One guardrail over one stream of text.
pub(crate) struct GuardStream {
    guard: Arc<Guardrail>,
    /// Text received and not yet let out.
    held: String,
}

impl GuardStream {
    pub(crate) fn new(guard: Arc<Guardrail>) -> GuardStream {
        GuardStream {
            guard,
            held: String::new(),
        }
    }

    /// The guardrail applied to a whole text.
    pub(crate) fn apply(guard: &Arc<Guardrail>, text: &str) -> Result<String, RunError> {
        let mut stream = GuardStream::new(guard.clone());
        stream.held.push_str(text);
        stream.release(Release::All)
    }

    /// Lets out what can no longer be part of a match, or everything.
    fn release(&mut self, release: Release) -> Result<String, RunError> {
        let end = release == Release::All;
        if self.guard.action == GuardAction::Block
            && let Some(re) = self
                .guard
                .patterns
                .iter()
                .find(|re| re.is_match(&self.held))
        {
            return Err(RunError::new(
                ErrorCode::GuardrailBlocked,
                format!("the answer matched the guardrail pattern `{}`", re.as_str()),
            ));
        }
        let mut cut = if end {
            self.held.len()
        } else {
            let chars = self.held.chars().count();
            let keep_from = chars.saturating_sub(self.guard.window);
            self.held
                .char_indices()
                .nth(keep_from)
                .map_or(self.held.len(), |(i, _)| i)
        };
        let mut out = String::new();
        let mut pos = 0;
        while let Some((start, stop)) = self.next_match(pos) {
            if start >= cut {
                break;
            }
            if !end && stop == self.held.len() {
                // It may go on in the next chunk: held back whole.
                cut = start;
                break;
            }
            out.push_str(&self.held[pos..start]);
            out.push_str(&self.guard.replacement);
            pos = stop;
            if stop == start {
                // An empty match: step over one character so the scan moves on.
                let next = self.held[start..].chars().next().map_or(0, char::len_utf8);
                out.push_str(&self.held[start..start + next]);
                pos = start + next;
            }
        }
        let upto = cut.max(pos);
        out.push_str(&self.held[pos..upto]);
        self.held.drain(..upto);
        Ok(out)
    }

    /// The earliest (then longest) match of any pattern at or after `pos`.
    fn next_match(&self, pos: usize) -> Option<(usize, usize)> {
        if pos >= self.held.len() {
            return None;
        }
        self.guard
            .patterns
            .iter()
            .filter_map(|re| re.find_at(&self.held, pos))
            .map(|m| (m.start(), m.end()))
            .min_by_key(|&(start, stop)| (start, std::cmp::Reverse(stop)))
    }
}

impl TextFilter for GuardStream {
    fn push(&mut self, delta: &str) -> Result<String, RunError> {
        self.held.push_str(delta);
        self.release(Release::Settled)
    }

    fn finish(&mut self) -> Result<String, RunError> {
        self.release(Release::All)
    }
}

/// Guardrails in the order streamed text meets them: the innermost middleware first.
pub(crate) struct GuardChain(pub Vec<Arc<Guardrail>>);

impl Filters for GuardChain {
    fn start(&self) -> Box<dyn TextFilter> {
        let stages = self.0.iter().cloned().map(GuardStream::new).collect();
        Box::new(Stages(stages))
    }
}

/// Text through every stage in turn.
struct Stages(Vec<GuardStream>);

impl TextFilter for Stages {
    fn push(&mut self, delta: &str) -> Result<String, RunError> {
        let mut text = delta.to_owned();
        for stage in &mut self.0 {
            text = stage.push(&text)?;
        }
        Ok(text)
    }

    fn finish(&mut self) -> Result<String, RunError> {
        let mut text = String::new();
        for stage in &mut self.0 {
            text = stage.push(&text)?;
            text.push_str(&stage.finish()?);
        }
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(patterns: &[&str], action: GuardAction, window: usize) -> Arc<Guardrail> {
        Arc::new(Guardrail {
            patterns: patterns
                .iter()
                .map(|p| regex::Regex::new(p).unwrap())
                .collect(),
            action,
            replacement: "[x]".into(),
            window,
            refusal: String::new(),
        })
    }

    /// Streams `chunks` through `g`: what went out, piece by piece.
    fn stream(g: &Arc<Guardrail>, chunks: &[&str]) -> Result<Vec<String>, RunError> {
        let mut s = GuardStream::new(g.clone());
        let mut out = Vec::new();
        for c in chunks {
            out.push(s.push(c)?);
        }
        out.push(s.finish()?);
        Ok(out)
    }

    #[test]
    fn matches_split_across_chunks_are_redacted_before_they_go_out() {
        let g = guard(&[r"sk-[a-z0-9]+"], GuardAction::Redact, 8);
        let cases: &[(&[&str], &str)] = &[
            (&["the key is s", "k-ab", "c12 ok"], "the key is [x] ok"),
            (&["sk-", "abc"], "[x]"),
            (
                &["no secrets ", "here at all, friend"],
                "no secrets here at all, friend",
            ),
            (&["ünïcødé sk-é", "x sk-", "é"], "ünïcødé sk-éx sk-é"),
        ];
        for (chunks, want) in cases {
            let out = stream(&g, chunks).unwrap();
            assert_eq!(out.concat(), *want, "{chunks:?}");
            assert!(out.iter().all(|p| !p.contains("sk-a")), "{out:?}");
        }
        assert_eq!(
            GuardStream::apply(&g, "a sk-1 b sk-2").unwrap(),
            "a [x] b [x]"
        );
    }

    #[test]
    fn block_fails_on_a_split_match() {
        let g = guard(&["forbidden"], GuardAction::Block, 16);
        let err = stream(&g, &["this is forb", "idden"]).unwrap_err();
        assert_eq!(err.code, ErrorCode::GuardrailBlocked);
        assert!(stream(&g, &["fine"]).is_ok());
    }

    #[test]
    fn stages_apply_innermost_first() {
        let chain = GuardChain(vec![
            guard(&["A"], GuardAction::Redact, 4),
            guard(&["x"], GuardAction::Redact, 4),
        ]);
        let mut f = chain.start();
        let mut out = f.push("xAx").unwrap();
        out.push_str(&f.finish().unwrap());
        // A first: `x[x]x`, then every `x`; the other way round would give `[x][x][x]`.
        assert_eq!(out, "[x][[x]][x]");
    }
}
