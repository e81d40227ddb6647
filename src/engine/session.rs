//! Sessions: what the runs sharing a `session_id` (per tenant) share.
//!
//! - **Variables** (`session.NAME` in templates and conditions): a run reads only the names its
//!   plans' templates and conditions name ([`crate::plan::SessionReads`]), each once, before
//!   the first step of the first plan that names it ([`RunContext::read_session`]): a session
//!   holding large variables a run never names costs that run nothing. Written by a plan's
//!   `session_variables` when it completes ([`render_writes`], [`store_variables`]), within
//!   the session's limits (`[context] session_max_*`). An unset variable reads as null.
//! - **History**: the input and output of the session's earlier succeeded runs, given to a
//!   simple run as earlier turns of its conversation ([`history`]). Counted by
//!   [`crate::llm::tokens`] (an estimate, or a real tokenizer when configured); when the turns (with the stored summary) pass
//!   `context.session_token_budget`, the older ones are summarised by the `summarizer`
//!   function and the summary is stored with the last turn it covers. Later runs reuse it and
//!   summarise only turns after it. The summariser's call is an attempt of the step
//!   `summarizer` and its usage counts toward the run's tokens. With `context.session_history
//!   = "relevant"` the turns most relevant to the run's input are kept instead, and nothing is
//!   summarised ([`relevant`]).

pub mod relevant;

use serde_json::{Map, Value, json};

use crate::domain::attempt_io::SessionSummaryInput;
use crate::domain::event::ErrorData;
use crate::domain::{ErrorCode, RunError, StepPath};
use crate::functions::{self, LlmFunction};
use crate::llm::{Message, tokens};
use crate::plan::{Scope, Template};
use crate::store::{SessionLimits, SessionSummary, Turn};

use super::calls::function_call::{self, FunctionCall};
use super::calls::model::TextKind;
use super::runtime::context::RunContext;
use super::runtime::hooks::RunHook;
use super::runtime::sink::EventSink;
use crate::domain::run::input_text;
use crate::plan::render_error;

/// The step the summariser's calls are recorded as.
pub const SUMMARY_STEP: &str = "summarizer";
/// How often a run queued behind its session's earlier runs looks whether they have ended
/// (they may run on another replica, so it asks the store).
const SESSION_TURN_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// A run whose session is busy waits for its turn (`enqueue`, `interrupt`): `queued`, holding
/// no running slot and with its clock paused (the wait does not count against
/// `max_duration_ms`), until the session's earlier runs have ended, on any replica.
pub struct SessionTurn;

#[async_trait::async_trait]
impl RunHook for SessionTurn {
    async fn before_start(&self, ctx: &RunContext) {
        use crate::domain::SessionConcurrency::{Enqueue, Interrupt};
        let policy = ctx
            .spec
            .session_policy(ctx.services.config.session_concurrency);
        if !matches!(policy, Some(Enqueue | Interrupt)) {
            return;
        }
        let Some(session) = ctx.spec.request.session_id.as_deref() else {
            return;
        };
        let store = ctx.services.store();
        ctx.clock.pause();
        loop {
            match store
                .session_unfinished(&ctx.tenant, session, Some(ctx.run_id))
                .await
            {
                Ok(earlier) if earlier.is_empty() => {
                    ctx.clock.resume();
                    return;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "reading the session's runs failed; asking again")
                }
            }
            tokio::time::sleep(SESSION_TURN_POLL).await;
        }
    }
}

/// The values of a plan's `session_variables`.
pub fn render_writes(
    writes: &[(String, Template)],
    scope: &Scope<'_>,
    limit: usize,
) -> Result<Map<String, Value>, RunError> {
    writes
        .iter()
        .map(|(name, template)| {
            let value = template.render(scope, limit).map_err(|e| {
                let e = render_error(e);
                RunError::new(e.code, format!("session_variables/{name}: {}", e.message))
            })?;
            Ok((name.clone(), value))
        })
        .collect()
}

/// Stores `values` for the run's session (nothing to do for none); a run without a session
/// has nowhere to keep them.
pub async fn store_variables(
    ctx: &RunContext,
    values: &Map<String, Value>,
) -> Result<(), RunError> {
    if values.is_empty() {
        return Ok(());
    }
    let Some(session) = &ctx.spec.request.session_id else {
        tracing::debug!("the plan sets session variables but the run has no session_id");
        return Ok(());
    };
    let limits = SessionLimits::of(&ctx.services.context);
    let stored = ctx
        .services
        .store()
        .set_session_variables(&ctx.tenant, session, values, ctx.run_id, limits)
        .await
        .map_err(|e| {
            RunError::new(
                ErrorCode::StoreUnavailable,
                format!("could not store the session variables: {e}"),
            )
        })?;
    stored.map_err(|refused| {
        RunError::new(
            ErrorCode::SessionLimitExceeded,
            format!("session_variables: {}", refused.describe()),
        )
    })
}

/// How many of the oldest turns to fold into the summary so the history fits `budget`
/// tokens: 0 when the summary (`summary_tokens`, 0 for none) and every turn fit. Otherwise
/// the newest turns that fit in half the budget are kept, leaving room for the summary and
/// the run's own prompt, and at least one turn is folded. A budget of 0 is no budget.
pub fn turns_to_fold(summary_tokens: u32, turn_tokens: &[u32], budget: u32) -> usize {
    let total = turn_tokens
        .iter()
        .fold(summary_tokens, |n, t| n.saturating_add(*t));
    if budget == 0 || total <= budget || turn_tokens.is_empty() {
        return 0;
    }
    let keep_budget = budget / 2;
    let mut used = 0u32;
    let kept = turn_tokens
        .iter()
        .rev()
        .take_while(|t| {
            used = used.saturating_add(**t);
            used <= keep_budget
        })
        .count();
    (turn_tokens.len() - kept).max(1)
}

/// A turn as the model sees it: the user's input, the assistant's answer.
fn turn_messages(turn: &Turn) -> [Message; 2] {
    [
        Message::User {
            content: input_text(&turn.input),
        },
        Message::Assistant {
            content: input_text(&turn.output),
            tool_calls: vec![],
        },
    ]
}

fn turn_tokens(turn: &Turn) -> u32 {
    tokens::count_messages(&turn_messages(turn))
}

/// The session's earlier conversation for a run's prompt: the summary of its older turns
/// (if any) and the turns after it, as messages. Summarises first when they are over budget.
pub struct History {
    pub summary: Option<String>,
    pub turns: Vec<Message>,
}

/// The history of the run's session (empty without one). Store and summariser failures are
/// logged (and the latter announced as an `error` event); the run goes on with what it has.
pub async fn history(ctx: &RunContext) -> History {
    let mut history = History {
        summary: None,
        turns: Vec::new(),
    };
    let Some(session) = ctx.spec.request.session_id.as_deref() else {
        return history;
    };
    if ctx.services.context.session_history == crate::config::SessionHistory::Relevant {
        return relevant::history(ctx, session).await;
    }
    let (summary, turns) = match load(ctx, session).await {
        Ok(loaded) => loaded,
        Err(e) => {
            tracing::warn!(error = ?e, "loading session history failed; continuing without");
            return history;
        }
    };
    let counts: Vec<u32> = turns.iter().map(turn_tokens).collect();
    let summary_tokens = summary.as_ref().map_or(0, |s| s.tokens);
    let fold = turns_to_fold(
        summary_tokens,
        &counts,
        ctx.services.context.session_token_budget,
    );
    let (summary, kept) = if fold == 0 {
        (summary, &turns[..])
    } else {
        match summarise(ctx, session, summary.as_ref(), &turns[..fold]).await {
            Ok(made) => (Some(made), &turns[fold..]),
            Err(e) => {
                tracing::warn!(error = %e, "summarising the session failed; older turns left out");
                ctx.emit(
                    Some(&StepPath::top(SUMMARY_STEP)),
                    ErrorData {
                        error: e,
                        step_id: Some(SUMMARY_STEP.to_owned()),
                    },
                )
                .await;
                (summary, &turns[fold..])
            }
        }
    };
    history.summary = summary.map(|s| s.text);
    history.turns = kept.iter().flat_map(turn_messages).collect();
    history
}

/// The stored summary and the turns after it.
async fn load(
    ctx: &RunContext,
    session: &str,
) -> Result<(Option<SessionSummary>, Vec<Turn>), crate::store::Error> {
    let store = ctx.services.store();
    let summary = store.session_summary(&ctx.tenant, session).await?;
    let turns = store
        .session_turns(
            &ctx.tenant,
            session,
            ctx.run_id,
            summary.as_ref().map(|s| s.through),
            ctx.services.context.session_max_turns,
        )
        .await?;
    Ok((summary, turns))
}

/// Folds `turns` (and the `previous` summary) into a new summary, stored before it is used.
async fn summarise(
    ctx: &RunContext,
    session: &str,
    previous: Option<&SessionSummary>,
    turns: &[Turn],
) -> Result<SessionSummary, RunError> {
    let function = function_call::configured(ctx, functions::SUMMARIZER)?;
    let input = json!({
        "transcript": transcript(previous, turns),
        "previous_summary": previous.map(|s| s.text.as_str()),
        "turns": turns.len(),
    });
    let asked = SessionSummaryInput { turns: turns.len() };
    let text = ask(ctx, &function, &input, asked).await?;
    let Some(last) = turns.last() else {
        return Err(RunError::new(
            ErrorCode::InternalError,
            "nothing to summarise",
        ));
    };
    let made = SessionSummary {
        tokens: tokens::count(&text),
        text,
        through: last.run_id,
        turns: previous.map_or(0, |p| p.turns) + u32::try_from(turns.len()).unwrap_or(u32::MAX),
    };
    ctx.services
        .store()
        .save_session_summary(&ctx.tenant, session, &made, ctx.run_id)
        .await
        .map_err(|e| {
            RunError::new(
                ErrorCode::StoreUnavailable,
                format!("could not store the session summary: {e}"),
            )
        })?;
    Ok(made)
}

/// What the summariser reads: the summary so far, then the turns to fold into it.
fn transcript(previous: Option<&SessionSummary>, turns: &[Turn]) -> String {
    let mut out = String::new();
    if let Some(p) = previous {
        out.push_str(&format!("Summary so far: {}\n\n", p.text));
    }
    for turn in turns {
        out.push_str(&format!(
            "User: {}\nAssistant: {}\n",
            input_text(&turn.input),
            input_text(&turn.output)
        ));
    }
    out
}

/// One summariser call over `input`, recorded as an attempt of the step `summarizer` whose
/// input is `asked`. Its text is not streamed (it is not the run's answer); its usage is
/// counted and announced.
async fn ask(
    ctx: &RunContext,
    function: &LlmFunction,
    input: &Value,
    asked: SessionSummaryInput,
) -> Result<String, RunError> {
    let messages = function_call::opening(ctx, function, input)?;
    let step = StepPath::top(SUMMARY_STEP);
    let mut sink = EventSink::Live;
    let call = FunctionCall {
        schema: None,
        text: TextKind::Quiet,
        input: Some(asked.into()),
        ..FunctionCall::of(function, &step, SUMMARY_STEP, "summary")
    };
    let mut open = function_call::open(ctx, call, &mut sink).await?;
    let reply = open.ask(ctx, messages).await;
    let shown = match &reply {
        Ok(r) => Ok(Value::String(r.text.clone())),
        Err(e) => Err(e.clone()),
    };
    open.close(ctx, &shown, &mut sink).await;
    reply.map(|r| r.text.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_cut_folds_the_oldest_turns() {
        // (summary tokens, turn tokens oldest first, budget, turns folded)
        let table: [(u32, &[u32], u32, usize); 11] = [
            (0, &[], 100, 0),
            (0, &[10, 10, 10], 100, 0),
            (0, &[40, 30, 30], 100, 0),
            // Over by one: the newest turns within half the budget stay.
            (0, &[40, 30, 31], 100, 2),
            (0, &[30, 30, 30, 30], 100, 3),
            (0, &[50, 10, 10, 10, 25], 100, 2),
            // A stored summary counts toward the budget.
            (50, &[20, 20], 100, 0),
            (50, &[20, 20, 20], 100, 1),
            // One huge newest turn: everything is folded, itself included.
            (0, &[10, 500], 100, 2),
            // Always at least one turn, even when the newest alone fills the half.
            (0, &[60, 50], 100, 1),
            // No budget: nothing is ever folded.
            (0, &[1000, 1000], 0, 0),
        ];
        for (summary, turns, budget, want) in table {
            assert_eq!(
                turns_to_fold(summary, turns, budget),
                want,
                "summary {summary}, turns {turns:?}, budget {budget}"
            );
        }
    }

    #[test]
    fn the_transcript_starts_from_the_summary_so_far() {
        let turn = |i: &str, o: &str| Turn {
            run_id: crate::domain::RunId::new(),
            input: json!(i),
            output: json!(o),
        };
        let previous = SessionSummary {
            text: "They met.".into(),
            through: crate::domain::RunId::new(),
            turns: 2,
            tokens: 3,
        };
        let text = transcript(Some(&previous), &[turn("hi", "hello"), turn("bye", "ciao")]);
        assert_eq!(
            text,
            "Summary so far: They met.\n\nUser: hi\nAssistant: hello\nUser: bye\nAssistant: ciao\n"
        );
        assert_eq!(
            transcript(None, &[turn("q", "a")]),
            "User: q\nAssistant: a\n"
        );
    }
}
