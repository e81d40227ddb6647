//! Benchmark: one auto-selector rule decision, in-process — the input lowercased once, then the
//! `[[selector.rules]]` checked in order until one matches (what `POST /v1/runs` adds for an
//! `auto` run before it is stored; a rule naming a workflow adds the workflow's read and
//! validation, not measured here).
//!
//! Eight rules as an operator might write them: four regular expressions, four keyword lists
//! (English and Korean). Cases: the first rule matches; the last matches; none matches (every
//! rule checked); none matches a 10,000-character input.
//!
//! Usage: `cargo run --release --example bench_selector -- [--decisions 100000] [--rounds 7]`

use std::hint::black_box;
use std::time::Instant;

use orca::Selector;
use orca::config::{SelectorConfig, SelectorRuleConfig};

fn rule(
    name: &str,
    pattern: Option<&str>,
    keywords: &[&str],
    orchestration: &str,
) -> SelectorRuleConfig {
    SelectorRuleConfig {
        name: name.into(),
        pattern: pattern.map(str::to_owned),
        keywords: keywords.iter().map(|k| k.to_string()).collect(),
        orchestration: Some(orchestration.into()),
        workflow: None,
    }
}

fn selector() -> Selector {
    let config = SelectorConfig {
        rules: vec![
            rule("arithmetic", Some(r"^[\d\s+\-*/().^%]+$"), &[], "simple"),
            rule("time", None, &["time", "clock", "시간", "몇 시"], "simple"),
            rule(
                "greeting",
                Some(r"(?i)^\s*(hi|hello|hey|안녕)\b"),
                &[],
                "simple",
            ),
            rule(
                "sequence",
                Some(r"(?i)\b(then|afterwards|step by step)\b"),
                &[],
                "planner",
            ),
            rule(
                "reports",
                None,
                &["report", "보고서", "summary", "요약"],
                "planner",
            ),
            rule(
                "research",
                None,
                &["research", "investigate", "조사"],
                "reactive",
            ),
            rule(
                "files",
                Some(r"\b[\w-]+\.(txt|md|csv|json)\b"),
                &[],
                "simple",
            ),
            rule("translate", None, &["translate", "번역"], "simple"),
        ],
        ..SelectorConfig::default()
    };
    Selector::from_config(&config).expect("valid rules")
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let decisions = arg("--decisions", 100_000);
    let rounds = arg("--rounds", 7);
    let selector = selector();
    let long = "lorem ipsum dolor sit amet ".repeat(370);
    let cases: [(&str, &str, Option<&str>); 4] = [
        ("first rule matches", "12 * (3 + 4)", Some("arithmetic")),
        (
            "last rule matches",
            "Please translate this paragraph into French for the customer",
            Some("translate"),
        ),
        (
            "no rule matches (8 checked)",
            "What is the capital of Australia, and why was it chosen over Sydney?",
            None,
        ),
        ("no rule matches, 10,000 characters", &long, None),
    ];
    println!("bench_selector: {decisions} decisions per round, {rounds} rounds, 8 rules");
    println!("| case | per decision, median | range |");
    println!("|---|---|---|");
    for (label, input, want) in cases {
        let decided = selector.matching(input).next().map(|(r, _)| r.name.clone());
        assert_eq!(decided.as_deref(), want, "{label}");
        let mut per_decision: Vec<f64> = (0..rounds)
            .map(|_| {
                let started = Instant::now();
                for _ in 0..decisions {
                    black_box(selector.matching(black_box(input)).next().is_some());
                }
                started.elapsed().as_nanos() as f64 / decisions as f64
            })
            .collect();
        per_decision.sort_by(f64::total_cmp);
        let median = per_decision[per_decision.len() / 2];
        let (low, high) = (per_decision[0], per_decision[per_decision.len() - 1]);
        println!(
            "| {label} | {} | {} – {} |",
            show(median),
            show(low),
            show(high)
        );
    }
}

fn show(ns: f64) -> String {
    if ns >= 1000.0 {
        format!("{:.2} µs", ns / 1000.0)
    } else {
        format!("{ns:.0} ns")
    }
}
