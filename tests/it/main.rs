//! Black-box tests: the real server on a random loopback port, a temp SQLite file, and a scripted
//! model server on loopback for the provider (OpenAI's dialect, or Anthropic's or Ollama's with
//! `ORCA_TEST_LLM=anthropic` / `ollama`).

mod support;

mod agents;
mod agui;
mod anthropic;
mod api_errors;
mod architecture;
mod cli;
mod connections;
mod console;
mod context;
mod definitions;
mod docs_run;
mod examples;
mod finding;
mod fixed;
mod forks;
mod history;
mod honest;
mod http_tools;
mod kept_outputs;
mod llm_provider;
mod loops;
mod mcp;
mod migrations;
mod models;
mod offline_samples;
mod ollama;
mod outage;
mod pause;
mod planning;
mod posture;
mod process;
mod promises;
mod quotas;
mod reactive;
mod replicas;
mod retention;
mod review;
mod schedules;
mod scripted_runs;
mod selector;
mod sessions;
mod stream_end;
mod structured;
mod teams;
mod teams_handoff;
mod teams_middleware;
mod telemetry;
mod timeline;
mod webhooks;
mod workflows;
mod write_budget;
