//! A `memory.*` tool's call (issue 48): it acts in the run's own memory and nowhere else — its
//! tenant's, under its user (`user/USER/…`), its session (`session/SESSION/…`) or the tenant's
//! shared namespace (`shared/…`, written only by runs of no user). Every call is a
//! `tool_call`/`tool_result` pair and part of its step's attempt, like any tool's
//! ([`super::tool_call::call_tool`] announces it); a write carries its run and step
//! ([`WriteOp`]), so the same write made again by a resumed run is found stored and not
//! applied twice.

use serde_json::{Value, json};

use crate::domain::memory::{MemoryItem, Namespace, SearchMode, check_key};
use crate::domain::{ErrorCode, RunError, StepPath};
use crate::engine::runtime::context::RunContext;
use crate::store::memory::{NewItem, Put, Searched, WriteOp};
use crate::tools::memory::MemoryOp;

/// Items a search returns unless it asks.
const DEFAULT_LIMIT: u32 = 5;

/// Calls memory tool `op` for the run with `args` (checked against its schema first).
pub async fn call_memory(
    ctx: &RunContext,
    step: &StepPath,
    op: MemoryOp,
    args: Value,
) -> Result<Value, RunError> {
    if let Err(e) = ctx.services.tools.validate(op.name(), &args) {
        return Err(e.to_run_error());
    }
    let text = |name: &str| args.get(name).and_then(Value::as_str);
    let scope = text("scope").unwrap_or("user");
    let access = match op {
        MemoryOp::Put => Access::Write,
        MemoryOp::Get | MemoryOp::Search => Access::Read,
    };
    let namespace = namespace_of(ctx, scope, text("namespace"), access)?;
    let memory = &ctx.services.memory;
    match op {
        MemoryOp::Put => {
            let key = checked_key(text("key"))?;
            let value = Value::String(text("value").unwrap_or_default().to_owned());
            put(ctx, step, (&namespace, key), value, args.get("ttl_seconds")).await
        }
        MemoryOp::Get => {
            let key = checked_key(text("key"))?;
            let found = (memory.get(&ctx.tenant, &namespace, key).await).map_err(unavailable)?;
            Ok(match found {
                Some(item) => json!({ "found": true, "item": shown(&item) }),
                None => json!({ "found": false, "namespace": namespace.as_str(), "key": key }),
            })
        }
        MemoryOp::Search => {
            let query = text("query").unwrap_or_default();
            let limit = args.get("limit").and_then(Value::as_u64);
            let limit = limit.map_or(DEFAULT_LIMIT, |n| n as u32);
            let items = search(ctx, &namespace, query, limit).await?;
            Ok(json!({
                "namespace": namespace.as_str(),
                "items": items.iter().map(shown).collect::<Vec<_>>(),
            }))
        }
    }
}

/// The items of `namespace` closest to `query`, best first: what `memory.search` answers and
/// what an agent's recall puts before its prompt.
pub async fn search(
    ctx: &RunContext,
    namespace: &Namespace,
    query: &str,
    limit: u32,
) -> Result<Vec<MemoryItem>, RunError> {
    let memory = &ctx.services.memory;
    let limit = limit.min(memory.limits().max_search_results);
    let searched = (memory.search(&ctx.tenant, namespace, query, limit, SearchMode::Auto)).await;
    match searched.map_err(unavailable)? {
        Searched::Found(items, _) => Ok(items),
        Searched::Embedding(e) => Err(e.to_run_error()),
        Searched::NoEmbedder => Ok(Vec::new()), // `auto` never asks for meaning without one
    }
}

async fn put(
    ctx: &RunContext,
    step: &StepPath,
    (namespace, key): (&Namespace, &str),
    value: Value,
    ttl: Option<&Value>,
) -> Result<Value, RunError> {
    let request = &ctx.spec.request;
    let op = WriteOp {
        run: ctx.run_id,
        step: step.to_string(),
    };
    let session = matches!(namespace.owner(), crate::domain::memory::Owner::Session(_));
    let memory = &ctx.services.memory;
    let embedding = (memory.embedding_of(key, &value).await).map_err(|e| e.to_run_error())?;
    let item = NewItem {
        namespace,
        key,
        value: &value,
        ttl_secs: ttl.and_then(Value::as_u64),
        user_id: request.user_id.as_deref(),
        session_id: request.session_id.as_deref().filter(|_| session),
        written_by: Some(&op),
        embedding: embedding.as_ref().map(|(v, m)| (v.as_slice(), m.as_str())),
    };
    let put = (memory.put(&ctx.tenant, item).await).map_err(unavailable)?;
    match put {
        Put::Stored(item, _) => Ok(json!({ "stored": true, "item": shown(&item) })),
        Put::Replayed(item) => Ok(json!({ "stored": true, "item": shown(&item) })),
        Put::TooLarge(why) => Err(RunError::new(ErrorCode::MemoryLimitExceeded, why)),
    }
}

/// An item as a tool's result shows it to a model.
fn shown(item: &MemoryItem) -> Value {
    let mut out = json!({
        "namespace": item.namespace,
        "key": item.key,
        "value": item.value,
        "revision": item.revision,
        "updated_at": item.updated_at,
    });
    if let Some(score) = item.score {
        out["score"] = json!(score);
    }
    out
}

fn checked_key(key: Option<&str>) -> Result<&str, RunError> {
    let key = key.unwrap_or_default();
    check_key(key).map_err(|m| RunError::new(ErrorCode::InvalidToolArguments, m))?;
    Ok(key)
}

/// What a call does in a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// The namespace `scope` and `sub` name for the run, to read or write.
pub fn namespace_of(
    ctx: &RunContext,
    scope: &str,
    sub: Option<&str>,
    access: Access,
) -> Result<Namespace, RunError> {
    let request = &ctx.spec.request;
    let missing = |what: &str| {
        RunError::new(
            ErrorCode::MemoryScopeUnavailable,
            format!("this run has no {what}, so it has no `{scope}` memory"),
        )
    };
    let named = match scope {
        "user" => {
            let user = request
                .user_id
                .as_deref()
                .ok_or_else(|| missing("user_id"))?;
            Namespace::of_user(user, sub)
        }
        "session" => {
            let session = (request.session_id.as_deref()).ok_or_else(|| missing("session_id"))?;
            Namespace::of_session(session, sub)
        }
        _ if access == Access::Write && request.user_id.is_some() => {
            return Err(RunError::new(
                ErrorCode::MemoryScopeUnavailable,
                "a run of a user reads the tenant's `shared` memory but does not write it",
            ));
        }
        _ => Namespace::shared(sub),
    };
    named.map_err(|m| RunError::new(ErrorCode::InvalidToolArguments, m))
}

pub(crate) fn unavailable(e: crate::store::Error) -> RunError {
    RunError::new(
        ErrorCode::StoreUnavailable,
        format!("the memory store failed: {e}"),
    )
}
