//! A database another process holds locked (issue 31, item 5): an operator's `sqlite3`
//! session in `BEGIN IMMEDIATE` on `<data dir>/gpuboard.sqlite` for 7 s, longer than
//! `SQLite`'s own busy timeout, while a claim is made. The serve waits it out: `/healthz`
//! answers 200 "degraded: database busy", reads are answered meanwhile, the claim is placed
//! once the lock goes, the serve is not frozen (a second claim works), a warning is logged,
//! and after `kill -9` and a restart both claims are there.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use common::{Server, demo_fleet};
use gpuboard::client::Client;
use gpuboard::request::ClaimRequest;
use gpuboard::units::Bytes;
use tokio::time::Instant;

/// How long the other process holds the write lock.
const HELD: Duration = Duration::from_secs(7);

async fn health(url: &str) -> (u16, String) {
    let resp = common::http()
        .get(format!("{url}/healthz"))
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_locked_by_another_process_is_waited_out_not_a_failed_store() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut server =
        Server::spawn_with_stderr(Server::command(&demo_fleet()), dir.path(), &[], log.into());
    let token = server.operator_token();
    let client = Client::new(&server.url, Some(token.clone()), Duration::from_mins(1)).unwrap();
    let first = client
        .claim(&ClaimRequest::memory(Bytes(1 << 30), "busy"))
        .await
        .unwrap()
        .claim()
        .id;

    // A reader (a console, say) has seen the state before.
    client.snapshot().await.unwrap();

    // The operator's session: a write transaction held open.
    let db = rusqlite::Connection::open(dir.path().join("gpuboard.sqlite")).unwrap();
    db.execute_batch("BEGIN IMMEDIATE").unwrap();
    let locked_at = Instant::now();

    let made = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .claim(&ClaimRequest::memory(Bytes(2 << 30), "busy"))
                .await
        })
    };
    // The wait shows on /healthz, still 200.
    let deadline = Instant::now() + Duration::from_secs(30);
    let degraded = loop {
        let (status, text) = health(&server.url).await;
        assert_eq!(status, 200, "a busy database is not a failed store: {text}");
        if text.starts_with("degraded: database busy") {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "/healthz never said the database is busy: {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(degraded.contains("another process"), "{degraded}");
    // Reads are answered meanwhile, from the last durable version.
    let read = client
        .snapshot()
        .await
        .expect("a read while the database is locked");
    assert!(read.claims.iter().any(|c| c.id == first));
    assert!(
        !made.is_finished(),
        "the claim was answered before its commit"
    );

    tokio::time::sleep_until(locked_at + HELD).await;
    db.execute_batch("ROLLBACK").unwrap();
    drop(db);

    let second = made
        .await
        .unwrap()
        .expect("the claim is placed once the lock goes")
        .claim()
        .id;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, text) = health(&server.url).await;
        if status == 200 && text == "ok\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "/healthz never came back to ok: {status} {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Not frozen: another change goes through.
    let third = client
        .claim(&ClaimRequest::memory(Bytes(1 << 30), "busy"))
        .await
        .expect("the serve still accepts changes")
        .claim()
        .id;

    // Nothing lost: after kill -9 and a restart on the same directory, all three are there.
    server.kill9();
    let logged = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        logged.contains("locked by another process") && logged.contains("free again"),
        "{logged}"
    );
    assert!(!logged.contains("commit failed"), "{logged}");
    let again = Server::start(dir.path(), &demo_fleet(), &[]);
    let snap = Client::new(&again.url, Some(token), Duration::from_secs(30))
        .unwrap()
        .snapshot()
        .await
        .unwrap();
    for id in [first, second, third] {
        assert!(
            snap.claims.iter().any(|c| c.id == id),
            "claim {id} lost: {:?}",
            snap.claims.iter().map(|c| c.id).collect::<Vec<_>>()
        );
    }
}
