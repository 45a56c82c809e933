//! A TLS endpoint under a connection flood (issue 31, item 4): `serve --tls
//! --max-connections 64` while hundreds of connections are opened that never send a
//! `ClientHello`, each reopened as soon as the endpoint closes it. A ttl=3 claim renewed once
//! a second over a new connection each time keeps its lease: 30 renewals of 30 succeed, and
//! every health check gets through too. The same over plain HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::{Server, demo_fleet};
use gpuboard::client::{Client, TlsTrust};
use gpuboard::request::ClaimRequest;
use gpuboard::snapshot::ClaimState;
use gpuboard::units::Bytes;

/// Connections the flood holds open at once (each task holds one).
const FLOODERS: usize = 240;
/// Renewals, one a second.
const RENEWALS: usize = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn renewals_and_health_checks_get_through_a_flood_of_silent_tls_connections() {
    renewals_through_a_silent_flood(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn renewals_and_health_checks_get_through_a_flood_of_silent_plain_connections() {
    renewals_through_a_silent_flood(false).await;
}

async fn renewals_through_a_silent_flood(tls: bool) {
    let dir = tempfile::tempdir().unwrap();
    let mut flags = vec!["--max-connections", "64", "--tick-ms", "200"];
    if tls {
        flags.push("--tls");
    }
    let server = Server::start(dir.path(), &demo_fleet(), &flags);
    let scheme = if tls { "https://" } else { "http://" };
    assert!(server.url.starts_with(scheme), "{}", server.url);
    let trust = server
        .fingerprint
        .as_deref()
        .map(TlsTrust::pinned)
        .unwrap_or_default();
    let token = server.operator_token();
    // A new client, so a new connection and a new TLS handshake, for every call.
    let fresh = || {
        Client::with_trust(
            &server.url,
            Some(token.clone()),
            Duration::from_secs(10),
            &trust,
        )
        .unwrap()
    };
    let mut req = ClaimRequest::memory(Bytes(1 << 30), "flood");
    req.ttl = Some(3);
    let id = fresh().claim(&req).await.unwrap().claim().id;

    let addr = server.url.trim_start_matches(scheme).to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicU64::new(0));
    let floods = common::flood::start(FLOODERS, &addr, b"", &stop, &opened);
    // Let the flood fill every place before the first renewal.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut renewed = 0;
    let mut healthy = 0;
    let mut failures = Vec::new();
    let start = tokio::time::Instant::now();
    for i in 0..RENEWALS {
        match fresh().renew(id, None).await {
            Ok(_) => renewed += 1,
            Err(e) => failures.push(format!("renewal {i}: {e}")),
        }
        match fresh().healthz().await {
            Ok(()) => healthy += 1,
            Err(e) => failures.push(format!("health check {i}: {e}")),
        }
        // One a second, on the second, however long the calls took.
        let next = start + Duration::from_secs(u64::try_from(i).unwrap() + 1);
        tokio::time::sleep_until(next).await;
    }
    let opened_during = opened.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for f in floods {
        let _ = f.await;
    }
    assert!(
        opened_during > FLOODERS as u64,
        "the flood kept reopening the connections the endpoint closed ({opened_during} opened)"
    );
    assert_eq!(renewed, RENEWALS, "renewals failed: {failures:#?}");
    assert_eq!(healthy, RENEWALS, "health checks failed: {failures:#?}");
    let snap = fresh().snapshot().await.unwrap();
    let claim = snap
        .claims
        .iter()
        .find(|c| c.id == id)
        .expect("the ttl=3 claim survived the flood");
    assert_eq!(claim.state, ClaimState::Placed);
}
