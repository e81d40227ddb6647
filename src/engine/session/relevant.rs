//! History by relevance (`[context] session_history = "relevant"`): a run's prompt holds the
//! session's newest earlier turn, then the turns most relevant to its input, then the newer
//! of the rest, while they fit `session_token_budget`; shown oldest first. Nothing is
//! summarised.
//!
//! Relevance is the memory store's own search (by meaning with an embedding model, else by
//! text), over the session's turns kept as memory items `session/<id>/turns/<run id>` (the
//! turn's input and output). A run puts the turns not yet kept before it searches, stamped
//! as its own writes (a resumed run finds them kept), and forgets those older than the turns
//! it loads, so the namespace holds at most `session_max_turns` of them. They count toward
//! the `[memory]` limits, and go with the session or its user when those are deleted. When
//! keeping or searching fails, the newest turns that fit are kept and an `error` event says
//! why.

use std::collections::HashSet;

use serde_json::json;

use super::{History, turn_messages, turn_tokens};
use crate::domain::event::ErrorData;
use crate::domain::memory::Namespace;
use crate::domain::run::input_text;
use crate::domain::{ErrorCode, RunError, StepPath};
use crate::engine::calls::memory_call::{self, unavailable};
use crate::engine::runtime::context::RunContext;
use crate::store::Turn;
use crate::store::memory::{NewItem, Put, WriteOp};

/// The step a run's writes of its session's turns are stamped with and its failures shown at.
pub const HISTORY_STEP: &str = "history";
/// The namespace below a session's that keeps its turns.
pub const TURNS: &str = "turns";

/// The session's earlier turns most relevant to the run's input, within the budget.
pub async fn history(ctx: &RunContext, session: &str) -> History {
    let context = &ctx.services.context;
    let loaded = ctx.services.store().session_turns(
        &ctx.tenant,
        session,
        ctx.run_id,
        None,
        context.session_max_turns,
    );
    let turns = match loaded.await {
        Ok(turns) => turns,
        Err(e) => {
            tracing::warn!(error = ?e, "loading session history failed; continuing without");
            return History {
                summary: None,
                turns: Vec::new(),
            };
        }
    };
    let ranked = match ranked(ctx, session, &turns).await {
        Ok(ranked) => ranked,
        Err(e) => {
            tracing::warn!(error = %e, "ranking the session's turns failed; the newest are kept");
            let at = StepPath::top(HISTORY_STEP);
            let error = ErrorData {
                error: e,
                step_id: Some(HISTORY_STEP.to_owned()),
            };
            ctx.emit(Some(&at), error).await;
            Vec::new()
        }
    };
    let tokens: Vec<u32> = turns.iter().map(turn_tokens).collect();
    let chosen = choose(&tokens, &ranked, context.session_token_budget);
    History {
        summary: None,
        turns: chosen
            .iter()
            .flat_map(|i| turn_messages(&turns[*i]))
            .collect(),
    }
}

/// Which turns (indices into `tokens`, oldest first) the prompt holds: the newest, then
/// those in `ranked` (most relevant first), then the rest newest first, each taken when it
/// still fits `budget` tokens. A budget of 0 is no budget.
pub fn choose(tokens: &[u32], ranked: &[usize], budget: u32) -> Vec<usize> {
    let Some(newest) = tokens.len().checked_sub(1) else {
        return Vec::new();
    };
    let order = std::iter::once(newest)
        .chain(ranked.iter().copied())
        .chain((0..newest).rev());
    let mut taken = vec![false; tokens.len()];
    let mut used = 0u32;
    for i in order {
        if i >= tokens.len() || taken[i] {
            continue;
        }
        let after = used.saturating_add(tokens[i]);
        if budget == 0 || after <= budget {
            taken[i] = true;
            used = after;
        }
    }
    (0..tokens.len()).filter(|i| taken[*i]).collect()
}

/// The turns search finds for the run's input, most relevant first (indices into `turns`).
async fn ranked(ctx: &RunContext, session: &str, turns: &[Turn]) -> Result<Vec<usize>, RunError> {
    if turns.is_empty() {
        return Ok(Vec::new());
    }
    let namespace = Namespace::of_session(session, Some(TURNS))
        .map_err(|m| RunError::new(ErrorCode::InternalError, m))?;
    // Each turn's key: its run id.
    let keys: Vec<String> = turns.iter().map(|t| t.run_id.to_string()).collect();
    keep(ctx, session, &namespace, (turns, &keys)).await?;
    let query = input_text(&ctx.spec.request.input);
    let limit = u32::try_from(turns.len()).unwrap_or(u32::MAX);
    let found = memory_call::search(ctx, &namespace, &query, limit).await?;
    let at = |key: &str| keys.iter().position(|k| k == key);
    // A search by meaning ranks every turn; one with nothing in common (a score of 0) is not
    // relevant, and is left to its place among the rest.
    let related = found
        .iter()
        .filter(|item| item.score.is_none_or(|s| s > 0.0));
    Ok(related.filter_map(|item| at(&item.key)).collect())
}

/// Puts the turns `namespace` does not hold yet, then forgets those older than `turns`. A
/// turn over `memory.max_item_bytes` is not kept (it is found by its place only).
async fn keep(
    ctx: &RunContext,
    session: &str,
    namespace: &Namespace,
    (turns, keys): (&[Turn], &[String]),
) -> Result<(), RunError> {
    let memory = &ctx.services.memory;
    let oldest = &keys[0];
    let kept = memory.keys_from(&ctx.tenant, namespace, oldest).await;
    let kept: HashSet<String> = kept.map_err(unavailable)?.into_iter().collect();
    let op = WriteOp {
        run: ctx.run_id,
        step: HISTORY_STEP.to_owned(),
    };
    let max = memory.limits().max_item_bytes;
    let mut wrote = false;
    for (turn, key) in turns.iter().zip(keys) {
        let value = json!({ "input": turn.input, "output": turn.output });
        if kept.contains(key) || (max > 0 && value.to_string().len() as u64 > max) {
            continue;
        }
        let embedding = memory.embedding_of(key, &value).await;
        let embedding = embedding.map_err(|e| e.to_run_error())?;
        let item = NewItem {
            namespace,
            key,
            value: &value,
            ttl_secs: None,
            user_id: ctx.spec.request.user_id.as_deref(),
            session_id: Some(session),
            written_by: Some(&op),
            embedding: embedding.as_ref().map(|(v, m)| (v.as_slice(), m.as_str())),
        };
        if let Put::TooLarge(why) = memory.put(&ctx.tenant, item).await.map_err(unavailable)? {
            return Err(RunError::new(ErrorCode::MemoryLimitExceeded, why));
        }
        wrote = true;
    }
    if wrote {
        let forgot = memory.forget_before(&ctx.tenant, namespace, oldest).await;
        forgot.map_err(unavailable)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::choose;

    #[test]
    fn the_newest_then_the_most_relevant_then_the_newer_fill_the_budget() {
        // (tokens oldest first, ranked, budget, chosen oldest first)
        type Case = (&'static [u32], &'static [usize], u32, &'static [usize]);
        let table: [Case; 7] = [
            (&[], &[], 100, &[]),
            // Everything fits: every turn, whatever the ranking.
            (&[10, 10, 10], &[0], 100, &[0, 1, 2]),
            // The newest, then the most relevant; the rest does not fit.
            (&[10, 10, 10, 10], &[0], 20, &[0, 3]),
            // Two relevant ones, best first, then the newest of the rest.
            (&[10, 10, 10, 10, 10], &[1, 0], 40, &[0, 1, 3, 4]),
            // A relevant turn too big for what is left is passed over for a smaller one.
            (&[10, 50, 10, 10], &[1, 0], 30, &[0, 2, 3]),
            // The newest alone is over budget: the others still may fit.
            (&[10, 10, 90], &[0], 30, &[0, 1]),
            // No budget: all of them.
            (&[500, 500], &[], 0, &[0, 1]),
        ];
        for (tokens, ranked, budget, want) in table {
            assert_eq!(
                choose(tokens, ranked, budget),
                want,
                "tokens {tokens:?}, ranked {ranked:?}, budget {budget}"
            );
        }
    }
}
