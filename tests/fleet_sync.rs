//! The console's endpoint source stays exactly in sync with a real `gpuboard serve` over
//! its delta watch, through an endpoint restart and through a link that cuts streams at
//! random points: real sockets, a real store, a TCP proxy in between.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Server, demo_fleet};
use gpuboard::client::Client;
use gpuboard::request::ClaimRequest;
use gpuboard::snapshot::Snapshot;
use gpuboard::sources::endpoint::Http;
use gpuboard::sources::{Fetched, Source};
use gpuboard::units::Bytes;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

const TIMEOUT: Duration = Duration::from_secs(10);

/// A TCP proxy on 127.0.0.1 to a target that can be switched, which cuts each of its
/// first `cuts` connections after a seeded random number of bytes from the endpoint.
struct Proxy {
    url: String,
    target: Arc<Mutex<String>>,
    cut: Arc<AtomicU64>,
}

impl Proxy {
    async fn start(target: &str, cuts: usize, seed: u64) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let target = Arc::new(Mutex::new(addr(target)));
        let cut_left = Arc::new(AtomicUsize::new(cuts));
        let cut = Arc::new(AtomicU64::new(0));
        let rng = Arc::new(Mutex::new(StdRng::seed_from_u64(seed)));
        let (t, left, counted) = (Arc::clone(&target), Arc::clone(&cut_left), Arc::clone(&cut));
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let to = t.lock().await.clone();
                let budget = if left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
                {
                    Some(rng.lock().await.random_range(100..6_000u64))
                } else {
                    None
                };
                let counted = Arc::clone(&counted);
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&to).await else {
                        return;
                    };
                    if pipe(client, server, budget).await {
                        counted.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        Proxy { url, target, cut }
    }

    async fn point_at(&self, target: &str) {
        *self.target.lock().await = addr(target);
    }
}

fn addr(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

/// Copies both ways; with a budget, drops both sides after that many bytes from the
/// server. True when it cut.
async fn pipe(client: TcpStream, server: TcpStream, budget: Option<u64>) -> bool {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut cr, &mut sw).await;
    });
    let mut left = budget.unwrap_or(u64::MAX);
    let mut buf = vec![0u8; 8192];
    let mut cut = false;
    loop {
        let n = match sr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let n64 = n as u64;
        if n64 >= left {
            let keep = usize::try_from(left).unwrap_or(n);
            let _ = cw.write_all(&buf[..keep]).await;
            cut = true;
            break;
        }
        left -= n64;
        if cw.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    up.abort();
    cut
}

fn source(url: &str, server: &Server) -> Http {
    Http::new("lab", url, Some(server.operator_token()), TIMEOUT).unwrap()
}

fn client(server: &Server) -> Client {
    Client::new(&server.url, Some(server.operator_token()), TIMEOUT).unwrap()
}

fn memory(gib: u64) -> ClaimRequest {
    ClaimRequest::memory(Bytes::gib(gib), "vision")
}

/// Fetches until the source's copy equals the endpoint's own snapshot (the model keeps
/// the last snapshot a fetch returned), or panics after `within`.
async fn converges(src: &Http, endpoint: &Client, model: &mut Option<Snapshot>, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Fetched::Snapshot(s) | Fetched::Telemetry(s)) = src.fetch().await {
            *model = Some(*s);
        }
        let truth = endpoint.snapshot().await.unwrap();
        if model.as_ref() == Some(&truth) {
            return;
        }
        if Instant::now() > deadline {
            let ids = |s: &Snapshot| s.claims.iter().map(|c| c.id.0).collect::<Vec<_>>();
            panic!(
                "no convergence within {within:?}: source has {:?} (revision {:?}), endpoint {:?} (revision {})",
                model.as_ref().map(ids),
                model.as_ref().map(|m| m.revision),
                ids(&truth),
                truth.revision
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_endpoint_is_shown_stale_then_exactly_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = Server::start(dir.path(), &demo_fleet(), &[]);
    let proxy = Proxy::start(&a.url, 0, 1).await;
    let src = source(&proxy.url, &a);
    let mut model = None;

    let first = client(&a).claim(&memory(4)).await.unwrap().claim().id;
    let second = client(&a).claim(&memory(8)).await.unwrap().claim().id;
    converges(&src, &client(&a), &mut model, TIMEOUT).await;

    a.kill9();
    let deadline = Instant::now() + TIMEOUT;
    let why = loop {
        match src.fetch().await {
            Err(e) => break e.to_string(),
            Ok(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(f) => panic!("still {f:?} after the endpoint died"),
        }
    };
    assert!(
        why.contains(&proxy.url) || why.contains("127.0.0.1"),
        "{why}"
    );

    // Same store, new process (a new epoch): what changed while the console was away
    // must show, and nothing that is gone.
    let b = Server::start(dir.path(), &demo_fleet(), &[]);
    let cb = client(&b);
    cb.release(first).await.unwrap();
    let third = cb.claim(&memory(2)).await.unwrap().claim().id;
    proxy.point_at(&b.url).await;
    converges(&src, &cb, &mut model, Duration::from_secs(40)).await;
    let ids: Vec<_> = model.unwrap().claims.iter().map(|c| c.id).collect();
    assert_eq!(ids, vec![second, third]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_cut_at_random_points_still_converge() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &[]);
    let proxy = Proxy::start(&server.url, 6, 7).await;
    let src = source(&proxy.url, &server);
    let endpoint = client(&server);
    let mut model = None;
    let mut rng = StdRng::seed_from_u64(11);
    let mut held = Vec::new();
    for round in 0..80 {
        if !held.is_empty() && rng.random_bool(0.4) {
            let id = held.swap_remove(rng.random_range(0..held.len()));
            endpoint.release(id).await.unwrap();
        } else if let Ok(made) = endpoint.claim(&memory(rng.random_range(1..6))).await {
            held.push(made.claim().id);
        }
        if round % 5 == 0 {
            // Let the console read mid-way, so cuts land inside live streams.
            if let Ok(Fetched::Snapshot(s) | Fetched::Telemetry(s)) = src.fetch().await {
                model = Some(*s);
            }
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    converges(&src, &endpoint, &mut model, Duration::from_mins(1)).await;
    let cuts = proxy.cut.load(Ordering::SeqCst);
    assert!(cuts >= 2, "the proxy cut only {cuts} streams");
}
