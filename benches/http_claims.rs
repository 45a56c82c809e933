//! Durable claim + release throughput over HTTP: a real endpoint (engine, `SQLite` store,
//! axum) on 127.0.0.1 and 32 concurrent keep-alive HTTP/1.1 clients, each looping claim then
//! release. Prints pairs per second and p50/p99 latency of a pair, for `--sync full`
//! (fsync per group commit) and `--sync normal`.
//!
//! `cargo bench --bench http_claims`, or `scripts/bench-endpoint` which also measures Ray
//! placement groups (scripts/bench-ray.py) and prints the ratio. `BENCH_SECS` sets the
//! measuring time per mode (default 5), `BENCH_CLIENTS` the client count (default 32),
//! `BENCH_HISTORY=1` has the endpoint record its history (README, "History").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gpuboard::clock::SystemClock;
use gpuboard::endpoint::api::{self, ApiState};
use gpuboard::endpoint::auth::Tokens;
use gpuboard::endpoint::engine::{Engine, EngineConfig, LocalProcesses};
use gpuboard::store::claims::SyncMode;

#[derive(serde::Deserialize)]
struct IdOnly {
    id: u64,
}

/// A minimal keep-alive HTTP/1.1 client, so that the load generator spends as little of
/// the shared cores as it can (the endpoint is what is measured).
struct Conn {
    stream: tokio::io::BufReader<tokio::net::TcpStream>,
}

impl Conn {
    async fn open(addr: &str) -> Conn {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Conn {
            stream: tokio::io::BufReader::new(stream),
        }
    }

    /// Sends one request and reads the answer: status and body (Content-Length framed).
    async fn call(&mut self, request: &[u8]) -> (u16, Vec<u8>) {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
        self.stream.get_mut().write_all(request).await.unwrap();
        let mut line = String::new();
        self.stream.read_line(&mut line).await.unwrap();
        let status: u16 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        let mut length = 0;
        loop {
            line.clear();
            self.stream.read_line(&mut line).await.unwrap();
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await.unwrap();
        (status, body)
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Starts an endpoint on its own runtime thread; returns its URL and operator token.
fn start_server(dir: &std::path::Path, sync: SyncMode) -> (String, String, Engine) {
    let nodes = gpuboard::inventory::load(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/demo-fleet.toml"),
    )
    .unwrap();
    let tokens = Tokens::load_or_create(dir).unwrap();
    let token = tokens.operator.clone();
    let (engine, _) = Engine::open(
        EngineConfig::default(),
        nodes,
        dir,
        sync,
        Arc::new(SystemClock),
        Arc::new(LocalProcesses),
    )
    .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let state = ApiState::new(engine.clone(), tokens, false);
    // BENCH_HISTORY=1: the endpoint records its history, as `serve` does by default.
    let history = (std::env::var("BENCH_HISTORY").as_deref() == Ok("1")).then(|| {
        gpuboard::endpoint::history_recorder::RecordedHistory::open(
            dir,
            gpuboard::store::history::Retention::default(),
        )
        .unwrap()
    });
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let state = match history {
                Some(h) => state.recording(h).0,
                None => state,
            };
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            api::serve(listener, state, std::future::pending())
                .await
                .unwrap();
        });
    });
    (url, token, engine)
}

async fn run(sync: SyncMode, secs: u64, clients: u64) {
    let dir = tempfile::tempdir().unwrap();
    let (url, token, engine) = start_server(dir.path(), sync);
    let stop = Arc::new(AtomicBool::new(false));
    let warmup = Duration::from_millis(500);
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (addr, token, stop) = (
            url.trim_start_matches("http://").to_string(),
            token.clone(),
            Arc::clone(&stop),
        );
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(&addr).await;
            let body = r#"{"gpu_memory": "1Gi", "project": "bench"}"#;
            let claim = format!(
                "POST /v1/claims HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let started = Instant::now();
            let mut lat = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let (status, answer) = conn.call(claim.as_bytes()).await;
                assert_eq!(status, 201, "{}", String::from_utf8_lossy(&answer));
                let v: IdOnly = serde_json::from_slice(&answer).unwrap();
                let release = format!(
                    "DELETE /v1/claims/{} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n",
                    v.id
                );
                let (status, _) = conn.call(release.as_bytes()).await;
                assert_eq!(status, 200);
                if started.elapsed() > warmup {
                    lat.push(t.elapsed());
                }
            }
            lat
        }));
    }
    tokio::time::sleep(warmup).await;
    let stats = engine.store_stats();
    let commits0 = stats.commits.load(Ordering::Relaxed);
    let batches0 = stats.batches.load(Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = t0.elapsed();
    let commits = stats.commits.load(Ordering::Relaxed) - commits0;
    let batches = stats.batches.load(Ordering::Relaxed) - batches0;
    let mut lat: Vec<Duration> = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    lat.sort();
    let pct = |p: f64| {
        let i = ((lat.len() as f64 - 1.0) * p).round() as usize;
        lat.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "sync={:<6} clients={clients} pairs={} pairs/s={:.0} pair p50={:.2} ms p99={:.2} ms  \
         requests per commit={:.1}",
        format!("{sync:?}").to_lowercase(),
        lat.len(),
        lat.len() as f64 / elapsed.as_secs_f64(),
        pct(0.50),
        pct(0.99),
        if commits == 0 {
            0.0
        } else {
            batches as f64 / commits as f64
        },
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs it briefly as a smoke test.
    let quick = !std::env::args().any(|a| a == "--bench");
    let secs = if quick { 1 } else { env_or("BENCH_SECS", 5) };
    let clients = env_or("BENCH_CLIENTS", 32);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        run(SyncMode::Full, secs, clients).await;
        run(SyncMode::Normal, secs, clients).await;
    });
}
