//! The console's endpoint source against a real `gpuboard serve` on 127.0.0.1: every
//! action kind through `Source::act`, snapshots through `Source::fetch`, and each kind of
//! refusal mapped to the console's `Failure` in the endpoint's words.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use common::{Server, demo_fleet};
use gpuboard::ids::ClaimId;
use gpuboard::placement::MoveTarget;
use gpuboard::request::ClaimRequest;
use gpuboard::snapshot::Snapshot;
use gpuboard::sources::endpoint::Http;
use gpuboard::sources::{Action, Failure, Fetched, Outcome, Source};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(20);

fn source(server: &Server, token: Option<String>) -> Http {
    Http::new("lab", &server.url, token, TIMEOUT).unwrap()
}

/// The next changed snapshot: fetches until one comes (a change may reach the source a
/// moment after the action that made it).
async fn changed(src: &Http) -> Snapshot {
    for _ in 0..100 {
        if let Fetched::Snapshot(s) | Fetched::Telemetry(s) = src.fetch().await.unwrap() {
            return *s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no change reached the source in 5 s");
}

fn req(v: serde_json::Value) -> ClaimRequest {
    ClaimRequest::from_json(&v).unwrap()
}

fn claim(request: serde_json::Value) -> Action {
    Action::Claim {
        request: req(request),
    }
}

fn reset(project: &str) -> Action {
    Action::ResetProject {
        project: project.into(),
    }
}

#[tokio::test]
async fn every_action_goes_through_the_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &[]);
    let src = source(&server, Some(server.operator_token()));

    // Planning needs a snapshot to preview against.
    let e = src
        .plan(req(json!({"gpu_memory": "20Gi"})))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Failure::Refused(m) if m.contains("no snapshot")),
        "{e}"
    );

    let snap = changed(&src).await;
    assert_eq!(snap.nodes.len(), 4);
    assert!(snap.claims.is_empty());
    let a10g = snap.nodes.iter().find(|n| n.name == "g5-a10g").unwrap();
    assert_eq!(a10g.devices.len(), 4);

    let request =
        json!({"gpu_memory": "20Gi", "project": "vision", "holder": "ana", "node": "g5-a10g"});
    let preview = src.plan(req(request.clone())).await.unwrap();
    assert_eq!(preview.node, "g5-a10g");

    let Outcome::Claimed(made) = src.act(claim(request)).await.unwrap() else {
        panic!("not a claim");
    };
    assert_eq!(made.node.as_deref(), Some("g5-a10g"));
    assert_eq!(made.project, "vision");
    let id = made.id;
    let first = made.shares[0].device;

    // The endpoint holds it: the next snapshot shows it where the outcome said.
    let snap = changed(&src).await;
    let seen = snap.claim(id).unwrap();
    assert_eq!(seen.shares[0].device, first);

    // Move to another device of the node: the old place comes from the last snapshot.
    let to = (first + 1) % 4;
    let out = src
        .act(Action::Move {
            id,
            target: MoveTarget {
                node: Some("g5-a10g".into()),
                devices: Some(vec![to]),
            },
        })
        .await
        .unwrap();
    assert_eq!(
        out,
        Outcome::Moved {
            id,
            from: format!("g5-a10g:{first}"),
            to: format!("g5-a10g:{to}"),
        }
    );

    // Cordon, seen in the snapshot; then uncordon.
    let out = src
        .act(Action::Cordon {
            node: "g5-a10g".into(),
            index: first,
            cordoned: true,
        })
        .await
        .unwrap();
    assert_eq!(out.message(), format!("g5-a10g:{first} cordoned"));
    let snap = changed(&src).await;
    let cordoned = |s: &gpuboard::snapshot::Snapshot| {
        s.nodes
            .iter()
            .find(|n| n.name == "g5-a10g")
            .unwrap()
            .devices
            .iter()
            .find(|d| d.index == first)
            .unwrap()
            .cordoned
    };
    assert!(cordoned(&snap));
    src.act(Action::Cordon {
        node: "g5-a10g".into(),
        index: first,
        cordoned: false,
    })
    .await
    .unwrap();
    assert!(!cordoned(&changed(&src).await));

    let out = src.act(reset("vision")).await.unwrap();
    assert_eq!(
        out,
        Outcome::Reset {
            project: "vision".into()
        }
    );

    // Release says where it was; a second release finds it gone.
    let out = src.act(Action::Release { id }).await.unwrap();
    assert_eq!(
        out,
        Outcome::Released {
            id,
            place: Some(format!("g5-a10g:{to}")),
        }
    );
    let out = src.act(Action::Release { id }).await.unwrap();
    assert_eq!(out, Outcome::Released { id, place: None });
    assert!(changed(&src).await.claims.is_empty());
    // Nothing changed since: the source says so instead of sending it all again.
    assert_eq!(src.fetch().await.unwrap(), Fetched::Unchanged);
}

#[tokio::test]
async fn refusals_carry_the_endpoints_words() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &[]);
    let src = source(&server, Some(server.operator_token()));

    // An invalid request never reaches the endpoint: actions carry a validated request,
    // and the validator (the endpoint's own) names the rule and the field.
    let e = ClaimRequest::from_json(&json!({"gpu_memory": "1Gi", "colour": "red"})).unwrap_err();
    let m = e.to_string();
    assert!(m.contains("rule 8: unknown-field"), "{m}");
    assert_eq!(e.field.as_deref(), Some("colour"));

    // 409: pin one GPU of the A10G node, then ask for all four of it.
    src.act(claim(json!({"gpu_memory": "20Gi", "node": "g5-a10g"})))
        .await
        .unwrap();
    let full = json!({"nvidia.com/gpu": 4, "node": "g5-a10g"});
    let e = src.act(claim(full.clone())).await.unwrap_err();
    let Failure::Refused(m) = &e else {
        panic!("not refused: {e:?}");
    };
    assert!(m.starts_with("does not fit now"), "{m}");
    assert!(m.contains("node g5-a10g:"), "{m}");

    // The preview on the last snapshot refuses it too, and says it is a preview.
    src.fetch().await.unwrap();
    let e = src.plan(req(full)).await.unwrap_err();
    assert!(
        matches!(&e, Failure::Refused(m) if m.starts_with("preview on the last snapshot: does not fit now")
            && m.contains("re-checks")),
        "{e}"
    );

    // 404: moving a claim the endpoint never made.
    let e = src
        .act(Action::Move {
            id: ClaimId(9999),
            target: MoveTarget {
                node: Some("hgx-h100".into()),
                devices: None,
            },
        })
        .await
        .unwrap_err();
    assert!(matches!(&e, Failure::Http { status: 404, .. }), "{e:?}");

    // 404 in the endpoint's words: cordoning a device the node lacks.
    let e = src
        .act(Action::Cordon {
            node: "g5-a10g".into(),
            index: 17,
            cordoned: true,
        })
        .await
        .unwrap_err();
    assert_eq!(
        e,
        Failure::Http {
            status: 404,
            message: "node `g5-a10g` has no device 17".into()
        }
    );
}

#[tokio::test]
async fn tokens_and_a_stopped_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &demo_fleet(), &[]);

    let wrong = source(&server, Some("not-the-token".into()));
    let e = wrong.fetch().await.unwrap_err();
    let Failure::Unauthorized(m) = &e else {
        panic!("not unauthorized: {e:?}");
    };
    assert!(m.contains("not valid for this endpoint"), "{m}");
    assert!(m.contains("token_file of endpoint `lab`"), "{m}");

    let none = source(&server, None);
    let e = none.fetch().await.unwrap_err();
    assert!(
        matches!(&e, Failure::Unauthorized(m) if m.contains("no token is configured for `lab`")),
        "{e:?}"
    );

    // A read token reads, but cannot act.
    let reader = source(&server, Some(server.read_token()));
    reader.fetch().await.unwrap();
    let e = reader.act(reset("vision")).await.unwrap_err();
    assert!(
        matches!(&e, Failure::Unauthorized(m) if m.contains("holds a read token")),
        "{e:?}"
    );

    let src = source(&server, Some(server.operator_token()));
    src.fetch().await.unwrap();
    server.kill9();
    // The watch notices the dropped stream, then every fetch says why, naming the endpoint.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let e = loop {
        match src.fetch().await {
            Err(e) => break e,
            Ok(_) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(f) => panic!("still {f:?} 5 s after the endpoint was killed"),
        }
    };
    assert!(matches!(&e, Failure::Unreachable { .. }), "{e:?}");
    assert!(e.to_string().contains(&server.url), "{e}");
    let e = src
        .act(Action::Release { id: ClaimId(1) })
        .await
        .unwrap_err();
    assert!(matches!(&e, Failure::Unreachable { .. }), "{e:?}");
}
