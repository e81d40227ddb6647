//! The instruction-count guard's workload: `--runs N` in-process 10-step chains of instant
//! tools (`math.calculate "1 + 1"`) with SQLite persistence, each created and followed to
//! `final` as `POST /v1/runs` with a stream does, one at a time on a one-thread runtime.
//!
//! Run under callgrind twice with different `--runs` (`.ci/instructions` does), the difference
//! divided by the difference in runs is the instructions one run costs, start-up excluded: a
//! figure that does not depend on the machine's speed or load, held to the budget in
//! `benches/instructions.budget`.
//!
//! Usage: `cargo run --example bench_instructions -- --runs 10`

use orca::app::App;
use orca::config::{Config, ProviderChoice};

#[path = "common/in_process.rs"]
mod in_process;
#[path = "common/plans.rs"]
mod plans;
use in_process::run_to_final;
use plans::chain;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs: usize = match &args[..] {
        [flag, n] if flag == "--runs" => n.parse().expect("--runs N"),
        [] => 10,
        _ => panic!("usage: bench_instructions [--runs N]"),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = Config::default();
        config.server.bind = "127.0.0.1:0".into();
        config.database.url = format!("sqlite://{}", dir.path().join("bench.db").display());
        config.llm.provider = ProviderChoice::Offline;
        let app = App::build(config).await.expect("app");
        let plan = chain(10);
        for _ in 0..runs {
            run_to_final(&app, &plan).await;
        }
    });
}
