//! What a person (or a script) sees while a run streams: a live view on a terminal, plain lines
//! in a pipe or file, raw JSON lines with `--json`. It owns standard output during a run and
//! makes no requests.
//!
//! On a terminal the last line is a status line (spinner, steps done of total, the current step,
//! elapsed time) redrawn in place; finished steps and model tokens are written above it. Off a
//! terminal nothing is redrawn and no escape sequence is written.

use std::collections::HashSet;
use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::Event;
use super::count;

const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One JSON event per line, nothing else on standard output.
    Json,
    /// Plain lines, no escapes: standard output is not a terminal.
    Plain,
    /// A live view with a spinner and colours.
    Terminal,
}

impl Mode {
    pub fn detect(json: bool) -> Mode {
        use std::io::IsTerminal;
        if json {
            Mode::Json
        } else if std::io::stdout().is_terminal() {
            Mode::Terminal
        } else {
            Mode::Plain
        }
    }
}

pub struct View {
    mode: Mode,
    started: Instant,
    /// The current plan's top-level step ids: "done of total" counts these (nested steps of a
    /// parallel or loop step report too, but are not in the total).
    plan_steps: Vec<String>,
    done: HashSet<String>,
    current: Option<String>,
    frame: usize,
    /// A status line is on screen and must be cleared before anything else is written.
    status_drawn: bool,
    /// Tokens were written without a closing newline.
    in_tokens: bool,
    /// Every token of the run, to know whether the final output was already shown.
    streamed: String,
    /// Colours on: a terminal, and `NO_COLOR` unset or empty (https://no-color.org).
    color: bool,
}

impl View {
    pub fn new(mode: Mode) -> View {
        View {
            mode,
            started: Instant::now(),
            plan_steps: Vec::new(),
            done: HashSet::new(),
            current: None,
            frame: 0,
            status_drawn: false,
            in_tokens: false,
            streamed: String::new(),
            color: mode == Mode::Terminal
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// How often the spinner turns, if it does.
    pub fn tick_every(&self) -> Option<Duration> {
        (self.mode == Mode::Terminal).then_some(Duration::from_millis(100))
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// Writes a whole line above the status line (closing a token run first).
    fn line(&mut self, text: &str) {
        self.clear();
        self.end_tokens();
        outln!("{text}");
    }

    fn end_tokens(&mut self) {
        if self.in_tokens {
            outln!();
            self.in_tokens = false;
        }
    }

    /// Removes the status line, e.g. before asking for input.
    pub fn clear(&mut self) {
        if self.status_drawn {
            out!("\r\x1b[2K");
            self.status_drawn = false;
            let _ = std::io::stdout().flush();
        }
    }

    fn progress(&self) -> String {
        let total = self.plan_steps.len();
        let done = self
            .plan_steps
            .iter()
            .filter(|s| self.done.contains(*s))
            .count();
        let mut s = if total > 0 {
            format!("{done}/{} done", count(total as u64, "step"))
        } else {
            format!("{} done", count(self.done.len() as u64, "step"))
        };
        if let Some(current) = &self.current {
            s.push_str(&format!(" · {current}"));
        }
        s.push_str(&format!(" · {:.1}s", self.started.elapsed().as_secs_f64()));
        s
    }

    /// Redraws the status line (a terminal only, and not in the middle of model text).
    pub fn tick(&mut self) {
        if self.mode != Mode::Terminal || self.in_tokens {
            return;
        }
        self.frame = (self.frame + 1) % SPINNER.len();
        let line = format!("{} {}", SPINNER[self.frame], self.progress());
        out!("\r\x1b[2K{}", self.paint("36", &line));
        self.status_drawn = true;
        let _ = std::io::stdout().flush();
    }

    pub fn event(&mut self, ev: &Event) {
        if self.mode == Mode::Json {
            outln!("{}", ev.body);
            let _ = std::io::stdout().flush();
            return;
        }
        let d = ev.data();
        match ev.kind.as_str() {
            "token" => {
                let text = d["text"].as_str().unwrap_or("");
                self.clear();
                out!("{text}");
                self.streamed.push_str(text);
                self.in_tokens = true;
                let _ = std::io::stdout().flush();
                return;
            }
            "plan" => {
                self.plan_steps = d["plan"]["steps"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s["id"].as_str().map(str::to_owned))
                    .collect();
                let reason = d["reason"].as_str().unwrap_or("initial");
                let text = format!(
                    "plan v{}: {} ({reason})",
                    d["version"].as_u64().unwrap_or(1),
                    count(self.plan_steps.len() as u64, "step")
                );
                let text = self.paint("2", &text);
                self.line(&text);
            }
            "step" => {
                let id = d["step_id"].as_str().unwrap_or("?").to_owned();
                let status = d["status"].as_str().unwrap_or("");
                match status {
                    "running" => self.current = Some(id),
                    "completed" | "failed" | "skipped" | "cancelled" => {
                        self.done.insert(id.clone());
                        if self.current.as_deref() == Some(&id) {
                            self.current = None;
                        }
                        let took = d["duration_ms"]
                            .as_u64()
                            .map(|ms| format!(" {ms}ms"))
                            .unwrap_or_default();
                        let (mark, colour) = match status {
                            "completed" => ("✓", "32"),
                            "skipped" => ("-", "2"),
                            _ => ("✗", "31"),
                        };
                        let mut text = format!(
                            "{} step {id} ({}) {status}{took} [{}]",
                            self.paint(colour, mark),
                            d["kind"].as_str().unwrap_or("step"),
                            self.progress_count()
                        );
                        if let Some(msg) = d["error"]["message"].as_str() {
                            text.push_str(&format!(": {msg}"));
                        }
                        self.line(&text);
                    }
                    _ => {}
                }
            }
            "tool_call" => {
                let text = format!("→ {} {}", d["tool"].as_str().unwrap_or("?"), d["arguments"]);
                let text = self.paint("2", &text);
                self.line(&text);
            }
            "error" => {
                let text = format!(
                    "! {}: {}",
                    d["code"].as_str().unwrap_or("error"),
                    d["message"].as_str().unwrap_or("")
                );
                let text = self.paint("33", &text);
                self.line(&text);
            }
            "handoff" => {
                let text = format!("handoff {} → {}", d["from"], d["to"]);
                self.line(&text);
            }
            _ => {}
        }
        self.tick();
    }

    /// A fork's steps kept from its parent (`kept`: their ids): done before it ran anything,
    /// so they count as done and the next finished step reads e.g. `[4/6]`, not `[1/6]`.
    pub fn kept(&mut self, kept: &HashSet<String>) {
        let ids: Vec<String> = self
            .plan_steps
            .iter()
            .filter(|s| kept.contains(*s) && !self.done.contains(*s))
            .cloned()
            .collect();
        if self.mode == Mode::Json || ids.is_empty() {
            return;
        }
        self.done.extend(ids.iter().cloned());
        let text = format!(
            "{} kept {} from the parent run: {} [{}]",
            self.paint("32", "✓"),
            count(ids.len() as u64, "step"),
            ids.join(", "),
            self.progress_count()
        );
        self.line(&text);
        self.tick();
    }

    /// "done/total" for a finished step's line (`done` alone when there is no plan).
    fn progress_count(&self) -> String {
        let total = self.plan_steps.len();
        if total == 0 {
            format!("{} done", self.done.len())
        } else {
            let done = self
                .plan_steps
                .iter()
                .filter(|s| self.done.contains(*s))
                .count();
            format!("{done}/{total}")
        }
    }

    /// The run ended: a summary line, and the output unless the model text already showed it.
    pub fn finish(&mut self, data: &Value) {
        if self.mode == Mode::Json {
            return;
        }
        self.clear();
        self.end_tokens();
        let output = &data["output"];
        let shown = match output {
            Value::Null => true,
            Value::String(s) => !self.streamed.is_empty() && self.streamed.contains(s.as_str()),
            _ => false,
        };
        if !shown {
            match output {
                Value::String(s) => outln!("{s}"),
                other => outln!(
                    "{}",
                    serde_json::to_string_pretty(other).unwrap_or_default()
                ),
            }
        }
        let status = data["status"].as_str().unwrap_or("unknown");
        let secs = self.started.elapsed().as_secs_f64();
        let line = if status == "succeeded" {
            self.paint("32", &format!("✓ succeeded in {secs:.1}s"))
        } else {
            let why = data["error"]["message"]
                .as_str()
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            self.paint("31", &format!("✗ {status} after {secs:.1}s{why}"))
        };
        outln!("{line}");
        let _ = std::io::stdout().flush();
    }
}
