//! Benchmark: memory search latency (issue 48) over HTTP against `orca serve` (release build),
//! on SQLite or PostgreSQL, at 10,000 and 100,000 items in one namespace.
//!
//! - **Items**: notes of 8-20 words drawn from a 5,000-word vocabulary with a skew (a few
//!   words are common, most rare, as in prose), put over `PUT /v1/memory/bench/notes/{key}`,
//!   16 at a time. Each is embedded by a local OpenAI-compatible embeddings server this program
//!   runs (`--dims` dimensions, 1536 by default as `text-embedding-3-small`; a dense vector per
//!   word, summed and normalised), configured as `memory.embedding_model`.
//! - **Searches**: `POST /v1/memory/search` with a three-word query (drawn as the notes' words
//!   are), `limit` 10, one at a time, `--queries` per mode per round: `text` (FTS5 BM25 or
//!   PostgreSQL `ts_rank_cd`) and `meaning` (the query embedded by the local server, then every
//!   item's stored vector compared). Latency is request to parsed answer.
//!
//! The namespace is filled to the first size, measured, filled on to the next, measured.
//!
//! Usage: `cargo build --release && cargo run --release --example bench_memory --
//! [--sizes 10000,100000] [--queries 100] [--rounds 3] [--dims 1536]
//! [--database-url postgres://…/an_empty_database] [--bin target/release/orca]`

#[path = "common/server.rs"]
mod server;

use std::time::{Duration, Instant};

use axum::Json;
use futures::StreamExt;
use serde_json::{Value, json};

struct Args {
    sizes: Vec<usize>,
    queries: usize,
    rounds: usize,
    dims: usize,
    database: Option<String>,
    bin: String,
}

fn args() -> Args {
    let mut a = Args {
        sizes: vec![10_000, 100_000],
        queries: 100,
        rounds: 3,
        dims: 1536,
        database: None,
        bin: "target/release/orca".into(),
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    for pair in v.chunks(2) {
        let [flag, value] = pair else {
            panic!("flags take a value: {v:?}")
        };
        match flag.as_str() {
            "--sizes" => {
                a.sizes = (value.split(','))
                    .map(|n| n.parse().expect("--sizes N,M"))
                    .collect()
            }
            "--queries" => a.queries = value.parse().expect("--queries N"),
            "--rounds" => a.rounds = value.parse().expect("--rounds N"),
            "--dims" => a.dims = value.parse().expect("--dims N"),
            "--database-url" => a.database = Some(value.clone()),
            "--bin" => a.bin = value.clone(),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

/// A small deterministic generator (xorshift), so every run fills the same notes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A word of the vocabulary, skewed: word `k` comes about as often as 1/sqrt(k).
    fn word(&mut self) -> String {
        const VOCABULARY: f64 = 5000.0;
        let k = (VOCABULARY * self.unit().powi(2)) as u64;
        format!("w{k}")
    }

    fn words(&mut self, n: usize) -> String {
        (0..n).map(|_| self.word()).collect::<Vec<_>>().join(" ")
    }
}

/// The embedding of `text`: per word a dense pseudo-random vector seeded by the word, summed
/// and normalised.
fn embed(text: &str, dims: usize) -> Vec<f32> {
    let mut v = vec![0f32; dims];
    for word in text.split_whitespace() {
        let seed = word.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        let mut rng = Rng(seed | 1);
        for x in v.iter_mut() {
            *x += rng.unit() as f32 - 0.5;
        }
    }
    let norm = v
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::MIN_POSITIVE);
    v.into_iter().map(|x| x / norm).collect()
}

/// An OpenAI-compatible `POST /v1/embeddings` on a free loopback port; its base URL.
async fn embeddings_server(dims: usize) -> String {
    let route = axum::routing::post(move |Json(body): Json<Value>| async move {
        let texts: Vec<String> = match &body["input"] {
            Value::String(s) => vec![s.clone()],
            Value::Array(items) => items
                .iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        };
        let data: Vec<Value> = (texts.iter().enumerate())
            .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": embed(t, dims)}))
            .collect();
        Json(
            json!({"object": "list", "data": data, "model": body["model"],
                    "usage": {"prompt_tokens": 0, "total_tokens": 0}}),
        )
    });
    let app = axum::Router::new().route("/v1/embeddings", route);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/v1")
}

/// Puts notes `from..to` (16 at a time).
async fn fill(client: &reqwest::Client, base: &str, from: usize, to: usize) -> Duration {
    let t0 = Instant::now();
    let puts = futures::stream::iter(from..to).map(|i| {
        let mut rng =
            Rng(0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
        let n = 8 + (rng.next() % 13) as usize;
        let body = json!({ "value": rng.words(n) });
        let url = format!("{base}/v1/memory/bench/notes/n{i:07}");
        let client = client.clone();
        async move {
            let resp = client.put(url).json(&body).send().await.expect("PUT");
            assert!(resp.status().is_success(), "put: {}", resp.status());
        }
    });
    puts.buffer_unordered(16).collect::<Vec<()>>().await;
    t0.elapsed()
}

/// `queries` searches by `mode`, one at a time: each one's latency in ms.
async fn search(
    client: &reqwest::Client,
    base: &str,
    mode: &str,
    queries: usize,
    seed: u64,
) -> Vec<f64> {
    let mut rng = Rng(seed);
    let mut took = Vec::with_capacity(queries);
    for _ in 0..queries {
        let body = json!({"namespace": "bench", "query": rng.words(3), "mode": mode, "limit": 10});
        let t0 = Instant::now();
        let resp = client
            .post(format!("{base}/v1/memory/search"))
            .json(&body)
            .send()
            .await
            .expect("search");
        assert_eq!(resp.status().as_u16(), 200, "search");
        let found: Value = resp.json().await.expect("JSON");
        took.push(t0.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(found["mode"], mode, "{found}");
    }
    took
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn percentile(mut xs: Vec<f64>, p: f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[((xs.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let a = args();
    let embeddings = embeddings_server(a.dims).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("bench-memory.toml");
    std::fs::write(
        &config,
        format!(
            "[llm.providers.embeddings]\nkind = \"openai\"\nbase_url = \"{embeddings}\"\n\
             api_key_env = \"BENCH_EMBEDDINGS_KEY\"\n\n\
             [llm.models.embedder]\nprovider = \"embeddings\"\nmodel = \"text-embedding-3-small\"\n\n\
             [memory]\nembedding_model = \"embedder\"\nmax_namespace_items = 0\nmax_tenant_bytes = 0\n"
        ),
    )
    .expect("the config");
    let config = config.display().to_string();
    let env = [
        ("ORCA_CONFIG", config.as_str()),
        ("BENCH_EMBEDDINGS_KEY", "bench"),
    ];
    let server = server::start_on(&a.bin, a.database.as_deref(), &env).await;
    let client = reqwest::Client::new();
    let backend = if a
        .database
        .as_deref()
        .is_some_and(|d| d.starts_with("postgres"))
    {
        "PostgreSQL"
    } else {
        "SQLite"
    };
    println!(
        "memory search, {backend}, {} dimensions, {} queries x {} rounds per mode",
        a.dims, a.queries, a.rounds
    );
    println!("| items | mode | median | p95 | round medians |");
    println!("|---|---|---|---|---|");
    let mut filled = 0;
    for size in &a.sizes {
        let took = fill(&client, &server.base, filled, *size).await;
        eprintln!(
            "filled {filled}..{size} in {:.1} s ({:.0} puts/s)",
            took.as_secs_f64(),
            (size - filled) as f64 / took.as_secs_f64()
        );
        filled = *size;
        for mode in ["text", "meaning"] {
            // A few unmeasured queries first: the caches warm as a server's would.
            search(&client, &server.base, mode, 5, 1).await;
            let mut all = Vec::new();
            let mut rounds = Vec::new();
            for round in 0..a.rounds {
                let took = search(&client, &server.base, mode, a.queries, 100 + round as u64).await;
                rounds.push(median(took.clone()));
                all.extend(took);
            }
            rounds.sort_by(f64::total_cmp);
            println!(
                "| {size} | {mode} | {:.2} ms | {:.2} ms | {:.2}–{:.2} ms |",
                median(all.clone()),
                percentile(all, 0.95),
                rounds[0],
                rounds[rounds.len() - 1]
            );
        }
    }
}
