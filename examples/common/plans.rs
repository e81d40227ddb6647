//! The benchmarks' plans of instant tool steps (`math.calculate "1 + 1"`). Shared through
//! `#[path = "common/plans.rs"] mod plans;`.

use serde_json::{Value, json};

/// An instant tool step after `deps`.
pub fn step(id: String, deps: Vec<String>) -> Value {
    json!({ "id": id, "kind": "tool", "depends_on": deps,
            "input": { "tool": "math.calculate", "arguments": { "expression": "1 + 1" } } })
}

/// A plan of `n` steps, each after the one before.
pub fn chain(n: usize) -> Value {
    let steps: Vec<Value> = (0..n)
        .map(|i| {
            let after: Vec<String> = (i > 0).then(|| format!("s{}", i - 1)).into_iter().collect();
            step(format!("s{i}"), after)
        })
        .collect();
    json!({ "steps": steps })
}
