//! The session variables a run has read, loaded the first time its plan names them (a run
//! loads only what it reads: `sessions.max_*` bound a session, not what one run holds).

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::plan::SessionReads;

use super::context::RunContext;

/// The session variables a run has read: each name once, the first time a plan names it.
#[derive(Debug, Default)]
pub struct SessionCache {
    values: Arc<Map<String, Value>>,
    /// Names read, set or not: an unset one is not asked for again.
    read: BTreeSet<String>,
    /// Every variable was read (a plan reads `session` as a whole).
    all: bool,
}

impl SessionCache {
    /// What of `reads` is still to be read: `None` when nothing.
    fn missing(&self, reads: &SessionReads) -> Option<Option<Vec<String>>> {
        if self.all {
            return None;
        }
        if reads.all {
            return Some(None);
        }
        let names: Vec<String> = reads
            .names
            .iter()
            .filter(|n| !self.read.contains(*n))
            .cloned()
            .collect();
        (!names.is_empty()).then_some(Some(names))
    }

    /// Keeps what was read; a name read before keeps its first value.
    fn merge(&mut self, asked: Option<Vec<String>>, found: Map<String, Value>) {
        let values = Arc::make_mut(&mut self.values);
        for (name, value) in found {
            if !self.read.contains(&name) {
                values.insert(name.clone(), value);
                self.read.insert(name);
            }
        }
        match asked {
            None => self.all = true,
            Some(names) => self.read.extend(names),
        }
    }
}

impl RunContext {
    /// Reads the session variables of `reads` the run has not read yet (nothing without a
    /// session). A store error is logged and the run goes on without them (they read as
    /// null), as it always has.
    pub async fn read_session(&self, reads: &SessionReads) {
        let Some(session) = &self.spec.request.session_id else {
            return;
        };
        let missing = self.session.lock().expect("session cache").missing(reads);
        let Some(asked) = missing else {
            return;
        };
        let store = self.services.store();
        match store
            .session_variables_named(&self.tenant, session, asked.as_deref())
            .await
        {
            Ok((found, bytes)) => {
                self.services.metrics.session_variables_read(bytes);
                self.session
                    .lock()
                    .expect("session cache")
                    .merge(asked, found);
            }
            Err(e) => tracing::warn!(error = ?e, "reading session variables failed"),
        }
    }

    /// The session's variables the run has read.
    pub fn session_vars(&self) -> Arc<Map<String, Value>> {
        self.session.lock().expect("session cache").values.clone()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::RunId;

    fn reads(names: &[&str]) -> SessionReads {
        let mut reads = SessionReads::default();
        for name in names {
            reads.name(name);
        }
        reads
    }

    async fn set(ctx: &RunContext, values: serde_json::Value) {
        let store = ctx.services.store();
        let values = values.as_object().unwrap().clone();
        let (writer, limits) = (RunId::new(), Default::default());
        let written = store.set_session_variables(&ctx.tenant, "s", &values, writer, limits);
        written.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn each_session_variable_is_read_once_set_or_not() {
        let ctx = RunContext::for_test()
            .spec(json!({"session_id": "s"}))
            .build()
            .await;
        set(&ctx, json!({"a": 1})).await;
        ctx.read_session(&reads(&["a", "b"])).await;
        assert_eq!(*ctx.session_vars(), *json!({"a": 1}).as_object().unwrap());
        set(&ctx, json!({"a": 2, "b": 3, "c": 4})).await;
        ctx.read_session(&reads(&["a", "b"])).await;
        assert_eq!(
            ctx.session_vars()["a"],
            1,
            "read once: the run's first value stays"
        );
        assert!(
            !ctx.session_vars().contains_key("b"),
            "an unset name is not asked again"
        );
        ctx.read_session(&reads(&["c"])).await;
        assert_eq!(ctx.session_vars()["c"], 4, "a new name is read");
        let all = SessionReads {
            all: true,
            ..Default::default()
        };
        ctx.read_session(&all).await;
        // Every name now, but those read before keep what the run first read of them.
        let vars = ctx.session_vars();
        let seen = (&vars["a"], vars.get("b"), &vars["c"]);
        assert_eq!(seen, (&json!(1), None, &json!(4)), "{vars:?}");
    }

    #[test]
    fn once_all_was_read_nothing_is_missing() {
        let mut cache = SessionCache::default();
        assert_eq!(
            cache.missing(&reads(&["x"])),
            Some(Some(vec!["x".to_owned()]))
        );
        let all = SessionReads {
            all: true,
            ..Default::default()
        };
        assert_eq!(cache.missing(&all), Some(None));
        cache.merge(None, Map::new());
        assert_eq!(cache.missing(&all), None);
        assert_eq!(cache.missing(&reads(&["y"])), None);
    }
}
