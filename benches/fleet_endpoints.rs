//! A fleet of gpuboard endpoints in one process, for measuring a console over a thousand
//! of them on a machine that cannot hold a thousand `gpuboard serve` processes
//! (`scripts/measure-fleet --case thousand`; docs/performance.md, "A thousand endpoints").
//!
//! Each endpoint is the real API (`endpoint::api::serve`, the delta watch included) over
//! its own engine and `SQLite` store in its own directory, with its own tokens and its own
//! listener on 127.0.0.1: what a console reads is what a `gpuboard serve --inventory` of
//! one node of 8 GPUs answers. What it lacks beside a serve is the history recorder and
//! the host's telemetry sampler (an inventory serve without a GPU has no device telemetry
//! either). `--hang N` adds N listeners that accept connections and never answer.
//!
//! ```text
//! cargo bench --bench fleet_endpoints -- --endpoints 1000 --hang 1 --dir DIR
//! ```
//!
//! Writes `DIR/console.toml` (one `[[endpoints]]` entry per endpoint, with its operator
//! token file; the hanging ones last), then prints `ready N` and serves until its standard
//! input closes. Endpoint `k` is named `rackRR-gpuKKK` (ten racks), its node the same.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::PathBuf;
use std::sync::Arc;

use gpuboard::clock::SystemClock;
use gpuboard::endpoint::api::{self, ApiState};
use gpuboard::endpoint::auth::Tokens;
use gpuboard::endpoint::engine::{Engine, EngineConfig, LocalProcesses};
use gpuboard::store::claims::SyncMode;

const MODELS: [(&str, &str); 4] = [
    ("NVIDIA A100-SXM4-40GB", "40GiB"),
    ("NVIDIA A100-SXM4-80GB", "80GiB"),
    ("NVIDIA H100 80GB HBM3", "80GiB"),
    ("NVIDIA A10G", "24GiB"),
];

struct Args {
    endpoints: usize,
    hang: usize,
    dir: PathBuf,
}

fn args() -> Args {
    let mut a = Args {
        endpoints: 1000,
        hang: 0,
        dir: std::env::temp_dir().join("gpuboard-fleet-endpoints"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--bench" => {}
            "--endpoints" => a.endpoints = it.next().unwrap().parse().unwrap(),
            "--hang" => a.hang = it.next().unwrap().parse().unwrap(),
            "--dir" => a.dir = PathBuf::from(it.next().unwrap()),
            other => {
                eprintln!(
                    "fleet_endpoints: unknown flag {other}: --endpoints N, --hang N, --dir DIR"
                );
                std::process::exit(2);
            }
        }
    }
    a
}

/// One node of 8 GPUs named `name`, of model `k` modulo the four.
fn inventory(name: &str, k: usize) -> String {
    let (model, memory) = MODELS[k % MODELS.len()];
    let mut t = format!("[[nodes]]\nname = \"{name}\"\ncpus = 128\n");
    for group in 0..2 {
        let _ = write!(
            t,
            "[[nodes.gpus]]\nmodel = \"{model}\"\nmemory = \"{memory}\"\ncount = 4\nlink_group = {group}\n"
        );
    }
    t
}

fn name_of(k: usize) -> String {
    format!("rack{:02}-gpu{:03}", k % 10, k / 10)
}

fn main() {
    let a = args();
    std::fs::create_dir_all(&a.dir).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut config = String::from("# written by benches/fleet_endpoints.rs\n");
    rt.block_on(async {
        for k in 0..a.endpoints {
            let name = name_of(k);
            let dir = a.dir.join(&name);
            let nodes = gpuboard::inventory::parse(&inventory(&name, k), &name).unwrap();
            let tokens = Tokens::load_or_create(&dir).unwrap();
            let (engine, _) = Engine::open(
                EngineConfig::default(),
                nodes,
                &dir,
                SyncMode::Normal,
                Arc::new(SystemClock),
                Arc::new(LocalProcesses),
            )
            .unwrap();
            engine.spawn_ticker();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            let state = ApiState::new(engine, tokens, false);
            tokio::spawn(api::serve(listener, state, std::future::pending()));
            let token_file = dir.join(gpuboard::endpoint::auth::OPERATOR_TOKEN_FILE);
            let _ = write!(
                config,
                "\n[[endpoints]]\nname = \"{name}\"\nurl = \"{url}\"\ntoken_file = {:?}\n",
                token_file.display().to_string()
            );
        }
        for k in 0..a.hang {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            // Accepts and holds every connection, answering nothing.
            tokio::spawn(async move {
                let mut held = Vec::new();
                while let Ok((socket, _)) = listener.accept().await {
                    held.push(socket);
                }
            });
            let _ = write!(
                config,
                "\n[[endpoints]]\nname = \"hang{k:02}\"\nurl = \"{url}\"\n"
            );
        }
    });
    std::fs::write(a.dir.join("console.toml"), config).unwrap();
    println!("ready {}", a.endpoints + a.hang);
    // Serves on the runtime's threads until standard input closes.
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(rt);
}
