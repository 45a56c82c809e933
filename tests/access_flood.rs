//! Slow and many clients against a real `gpuboard serve` on 127.0.0.1: a flood of
//! half-sent connections (with the connection cap lowered by `--max-connections` rather
//! than exhausting descriptors) takes no place among the requests served, and with the cap
//! then filled by kept-alive connections, lease renewals and health checks still get
//! through and a ttl lease survives; a client trickling its request head is closed; past
//! the cap, other requests are answered 503 rather than left waiting.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::{Server, demo_fleet};
use gpuboard::client::Client;
use gpuboard::request::ClaimRequest;
use gpuboard::units::Bytes;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const CAP: &str = "8";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lease_survives_a_flood_of_half_sent_connections() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &demo_fleet(),
        &[
            "--max-connections",
            CAP,
            "--header-timeout-ms",
            "3000",
            "--tick-ms",
            "200",
        ],
    );
    let token = server.operator_token();
    let fresh = || Client::new(&server.url, Some(token.clone()), Duration::from_secs(5)).unwrap();
    let mut req = ClaimRequest::memory(Bytes(1 << 30), "flood");
    req.ttl = Some(3);
    let id = fresh().claim(&req).await.unwrap().claim().id;

    let addr = server.url.trim_start_matches("http://").to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicU64::new(0));
    let floods = common::flood::start(
        60,
        &addr,
        b"GET /v1/snapshot HTTP/1.1
host: x
",
        &stop,
        &opened,
    );
    // Let the flood fill its places.
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Connections that never finish a request head take no place among those served: an
    // ordinary request still is.
    let status = common::http()
        .get(format!("{}/v1/snapshot", server.url))
        .bearer_auth(&token)
        .send()
        .await
        .expect("an ordinary request is answered")
        .status();
    assert_eq!(
        status, 200,
        "half-sent connections crowded out a whole request"
    );
    // Now fill the cap with kept-alive connections that did send a request: from here on,
    // past the cap, only renewals and health checks get through.
    let mut holders = Vec::new();
    for _ in 0..CAP.parse::<usize>().unwrap() {
        let mut sock = TcpStream::connect(&addr).await.unwrap();
        sock.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = sock.read(&mut buf).await.unwrap();
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&buf[..n])
        );
        holders.push(sock);
    }

    let mut refused_fast = 0;
    let mut served = 0;
    // Nine seconds, three times the lease: every renewal and health check goes through a
    // new connection made during the flood.
    for _ in 0..9 {
        fresh()
            .renew(id, None)
            .await
            .expect("a renewal gets through the flood");
        fresh()
            .healthz()
            .await
            .expect("a health check gets through the flood");
        gpuboard::client::install_crypto_provider();
        let raw = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap()
            .get(format!("{}/v1/snapshot", server.url))
            .bearer_auth(&token)
            .send()
            .await
            .expect("an ordinary request is answered, not left waiting");
        match raw.status().as_u16() {
            503 => refused_fast += 1,
            200 => served += 1,
            s => panic!("unexpected status {s}"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stop.store(true, Ordering::Relaxed);
    drop(holders);
    for f in floods {
        let _ = f.await;
    }
    assert!(
        opened.load(Ordering::Relaxed) > 60,
        "the flood kept reopening connections the endpoint closed"
    );
    assert!(
        refused_fast > 0,
        "past the cap ordinary requests are refused ({served} served)"
    );
    let snap = fresh().snapshot().await.unwrap();
    let claim = snap
        .claims
        .iter()
        .find(|c| c.id == id)
        .expect("the ttl=3 claim survived the flood");
    assert_eq!(claim.state, gpuboard::snapshot::ClaimState::Placed);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_trickling_its_request_head_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &["--header-timeout-ms", "1000"]);
    let addr = server.url.trim_start_matches("http://").to_string();
    let mut sock = TcpStream::connect(&addr).await.unwrap();
    let head = b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut closed = false;
    // One byte every 100 ms: the whole head would take about 8 s, the endpoint allows 1 s.
    for b in head {
        if sock.write_all(&[*b]).await.is_err() {
            closed = true;
            break;
        }
        let mut buf = [0u8; 256];
        match tokio::time::timeout(Duration::from_millis(100), sock.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => {
                closed = true;
                break;
            }
            Ok(Ok(n)) => {
                let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
                assert!(
                    !answer.contains("200 OK"),
                    "served a trickled head: {answer}"
                );
            }
            Err(_) => {}
        }
    }
    assert!(
        closed,
        "the endpoint kept a connection trickling its head open"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_connection_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &demo_fleet(),
        &["--idle-timeout-ms", "800", "--header-timeout-ms", "60000"],
    );
    let addr = server.url.trim_start_matches("http://").to_string();
    let mut sock = TcpStream::connect(&addr).await.unwrap();
    sock.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = sock.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    // Keep-alive, then silence: the endpoint closes it (the read ends) well before 20 s.
    let end = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(end.is_ok(), "an idle keep-alive connection stayed open");
}
