//! A fleet claim end to end: `gpuboard claim --memory 1GiB` (the real binary, a fresh
//! process each time) against N endpoints of 8 GPUs each (real engines, `SQLite` stores
//! with `--sync full`, axum on 127.0.0.1, all in this process), named in a config's
//! `[[endpoints]]` with their token files. The claim reads every endpoint, ranks them,
//! and claims on the best; the bench then releases it (not timed). Prints p50/p90 per N,
//! with the snapshot cache cold (every read a full one) and warm (the endpoints that did
//! not change since the last claim answer 304).
//!
//! `cargo bench --bench fleet_claim` (N = 1, 10, 50, 100; `BENCH_ITERS` claims each,
//! default 30); `cargo test --benches` runs it with N = 3 and 3 claims as a smoke test.
//! `BENCH_BINS=OLD:NEW` times other `gpuboard` binaries against the same endpoints, their
//! claims interleaved one by one (an older CLI reads whole snapshots: before and after
//! in one run); `BENCH_SIZES=100` picks the sizes; `BENCH_HELD=20` has every endpoint
//! hold that many claims of 1 GiB (four projects) throughout, as endpoints in use do;
//! `BENCH_BIG=1000` gives the first endpoint that many nodes of 8 GPUs (a large cluster
//! among small ones: its capacity answer is what a fleet claim reads most of).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuboard::clock::SystemClock;
use gpuboard::endpoint::api::{self, ApiState};
use gpuboard::endpoint::auth::Tokens;
use gpuboard::endpoint::engine::{Engine, EngineConfig, LocalProcesses};
use gpuboard::store::claims::SyncMode;

/// One endpoint with `nodes` nodes of 8 x 80 GiB, on its own thread and runtime until
/// the bench ends; returns its URL and token file.
fn start(root: &Path, i: usize, nodes: usize) -> (String, String) {
    let dir = root.join(format!("e{i}"));
    std::fs::create_dir_all(&dir).unwrap();
    let inv = dir.join("inventory.toml");
    let mut text = String::new();
    for k in 0..nodes {
        let name = if k == 0 {
            format!("host-{i}")
        } else {
            format!("host-{i}-{k}")
        };
        writeln!(
            text,
            "[[nodes]]\nname = \"{name}\"\n[[nodes.gpus]]\nmodel = \"NVIDIA A100-SXM4-80GB\"\nmemory = \"80GiB\"\ncount = 8"
        )
        .unwrap();
    }
    std::fs::write(&inv, text).unwrap();
    let nodes = gpuboard::inventory::load(&inv).unwrap();
    let tokens = Tokens::load_or_create(&dir).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let token_file = dir.join("operator.token").display().to_string();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let (engine, _) = Engine::open(
                EngineConfig::default(),
                nodes,
                &dir,
                SyncMode::Full,
                Arc::new(SystemClock),
                Arc::new(LocalProcesses),
            )
            .unwrap();
            let state = ApiState::new(engine, tokens, false);
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            api::serve(listener, state, std::future::pending())
                .await
                .unwrap();
        });
    });
    (url, token_file)
}

fn pct(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// `iters` claims with each of `bins` in turn against the first `n` endpoints; the cache
/// dir is emptied before each claim when `cold`. Returns the sorted latencies per binary.
fn measure(
    root: &Path,
    eps: &[(String, String)],
    n: usize,
    iters: usize,
    cold: bool,
    bins: &[String],
) -> Vec<Vec<Duration>> {
    let config = root.join(format!("config-{n}.toml"));
    let mut text = String::new();
    for (i, (url, token)) in eps.iter().take(n).enumerate() {
        writeln!(
            text,
            "[[endpoints]]\nname = \"e{i}\"\nurl = \"{url}\"\ntoken_file = \"{token}\""
        )
        .unwrap();
    }
    std::fs::write(&config, text).unwrap();
    let mut lat = vec![Vec::new(); bins.len()];
    // One claim first (not counted), so that a warm run starts warm.
    for k in 0..=iters {
        for (b, bin) in bins.iter().enumerate() {
            let cache = root.join(format!("cache-{n}-{cold}-{b}"));
            if cold {
                let _ = std::fs::remove_dir_all(&cache);
            }
            let took = claim_and_release(bin, &config, &cache, eps);
            if k > 0 {
                lat[b].push(took);
            }
        }
    }
    for l in &mut lat {
        l.sort();
    }
    lat
}

/// One `gpuboard claim` with `bin` (timed), then its release (not timed).
fn claim_and_release(bin: &str, config: &Path, cache: &Path, eps: &[(String, String)]) -> Duration {
    let t = Instant::now();
    let out = Command::new(bin)
        .args(["claim", "--memory", "1GiB", "--json", "--config"])
        .arg(config)
        .env("GPUBOARD_CACHE_DIR", cache)
        .env_remove("GPUBOARD_ENDPOINT")
        .env_remove("GPUBOARD_TOKEN")
        .output()
        .unwrap();
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["id"].as_u64().unwrap();
    // Release it where it landed (with several endpoints the answer names it).
    let at = v["endpoint"]
        .as_str()
        .and_then(|e| e.strip_prefix('e'))
        .map_or(0, |i| i.parse::<usize>().unwrap());
    let out = Command::new(bin)
        .args([
            "release",
            &id.to_string(),
            "--endpoint",
            &eps[at].0,
            "--token-file",
            &eps[at].1,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// Places `held` claims of 1 GiB on every endpoint (kept until the bench ends).
fn hold(eps: &[(String, String)], held: usize) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let all = eps.iter().map(|(url, token_file)| async move {
            let token = std::fs::read_to_string(token_file).unwrap();
            let client = gpuboard::client::Client::new(
                url,
                Some(token.trim().to_string()),
                Duration::from_mins(1),
            )
            .unwrap();
            for k in 0..held {
                let project = ["vision", "nlp", "speech", "recsys"][k % 4];
                let req = gpuboard::request::ClaimRequest::memory(
                    gpuboard::units::Bytes::gib(1),
                    project,
                );
                client.claim(&req).await.unwrap();
            }
        });
        futures::future::join_all(all).await;
    });
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs it briefly.
    let quick = !std::env::args().any(|a| a == "--bench");
    let (sizes, iters): (Vec<usize>, usize) = if quick {
        (vec![3], 3)
    } else {
        let iters = std::env::var("BENCH_ITERS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(30);
        let sizes = std::env::var("BENCH_SIZES").ok().map_or_else(
            || vec![1, 10, 50, 100],
            |v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect(),
        );
        (sizes, iters)
    };
    let bins: Vec<String> = std::env::var("BENCH_BINS")
        .ok()
        .map(|v| {
            v.split(':')
                .filter(|b| !b.is_empty())
                .map(str::to_string)
                .collect()
        })
        .filter(|b: &Vec<String>| !b.is_empty())
        .unwrap_or_else(|| vec![env!("CARGO_BIN_EXE_gpuboard").to_string()]);
    let root = tempfile::tempdir().unwrap();
    let max = sizes.iter().copied().max().unwrap_or(1);
    let big: usize = std::env::var("BENCH_BIG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let eps: Vec<_> = (0..max)
        .map(|i| start(root.path(), i, if i == 0 { big.max(1) } else { 1 }))
        .collect();
    let held: usize = std::env::var("BENCH_HELD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if held > 0 {
        hold(&eps, held);
    }
    println!(
        "fleet claim: `gpuboard claim --memory 1GiB` over N endpoints x 8 GPUs (the first {big} nodes) holding {held} claims each, {iters} claims each"
    );
    for &n in &sizes {
        for cold in [true, false] {
            let lat = measure(root.path(), &eps, n, iters, cold, &bins);
            for (bin, lat) in bins.iter().zip(&lat) {
                println!(
                    "  N = {n:>3}, cache {:<4}: p50 {:>6.1} ms, p90 {:>6.1} ms  ({bin})",
                    if cold { "cold" } else { "warm" },
                    pct(lat, 50).as_secs_f64() * 1e3,
                    pct(lat, 90).as_secs_f64() * 1e3
                );
            }
        }
    }
}
