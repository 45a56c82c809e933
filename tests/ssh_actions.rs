//! Actions on a host read over SSH, against a real OpenSSH server on 127.0.0.1
//! (`common::sshd`): on `gpu-serve`, whose SSH user can read its serve's operator token, a
//! release, a keyed claim, a cordon and a refused move go to the serve through
//! `gpuboard relay` there and change it (seen through its own CLI and its audit); on
//! `gpu-serve-ro`, the same serve found through a data directory without its token, the
//! host is read (its claims come) but says it is read-only and why, and refuses actions
//! with that reason, the relay refusing them too when asked directly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use gpuboard::client::{Client, ClientError};
use gpuboard::clock::SystemClock;
use gpuboard::placement::MoveTarget;
use gpuboard::request::ClaimRequest;
use gpuboard::sources::ssh::SshSource;
use gpuboard::sources::ssh::act::SshRelay;
use gpuboard::sources::{Action, Failure, Outcome, Source};
use gpuboard::units::Bytes;
use serde_json::Value;

use crate::common::sshd::Sshd;
use crate::common::{self, text};
use crate::ssh_source::{config, note, serve_on, settled, until};

/// The serve's claims, as its own CLI lists them.
fn claims_there(serve: &common::Server) -> Vec<Value> {
    let out = serve.cli(&["ls", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    doc.as_array()
        .cloned()
        .or_else(|| doc["claims"].as_array().cloned())
        .unwrap_or_default()
}

/// The serve on `far-node` with one claim, its reads open (so that the SSH user who cannot
/// read its operator token can still watch it).
fn serve_with_a_claim(server: &Sshd) -> (common::Server, tempfile::TempDir) {
    let (serve, inventory) = serve_on(&server.serve_dir(), "far-node", &["--open-reads"]);
    let out = serve.cli(&["claim", "--memory", "1GiB", "--project", "far"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    (serve, inventory)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_go_to_the_hosts_serve_as_its_ssh_user_or_say_why_not() {
    if common::skip_peer("ssh") {
        return;
    }
    let server = Sshd::start();
    let (serve, _inventory) = serve_with_a_claim(&server);
    let connects = Arc::new(tokio::sync::Semaphore::new(4));
    let source = |alias: &str| {
        SshSource::with(
            config(&server, alias),
            Arc::clone(&connects),
            Arc::new(SystemClock),
        )
        .unwrap()
    };
    let host = source("gpu-serve");
    let ro = source("gpu-serve-ro");

    // The host whose SSH user reads the operator token: it acts, as that user.
    let first = until(&host, "the serve's claim", |r| {
        r.as_ref().is_ok_and(|s| s.claims.len() == 1)
    })
    .await
    .unwrap();
    assert!(first.endpoint.actions, "{}", note(&first));
    assert!(host.can_act());
    assert!(
        note(&first).contains("actions as ") && note(&first).contains("through its operator token"),
        "{}",
        note(&first)
    );
    let id = first.claims[0].id;

    // A release through the channel changes the serve.
    let released = host.act(Action::Release { id }).await.unwrap();
    assert!(
        matches!(&released, Outcome::Released { id: r, place: Some(_) } if *r == id),
        "{released:?}"
    );
    assert!(claims_there(&serve).is_empty(), "released on the serve");
    // And comes back over the watch.
    until(&host, "the release over the watch", |r| {
        r.as_ref().is_ok_and(|s| s.claims.is_empty())
    })
    .await
    .unwrap();

    // A keyed claim: placed once, and sent again with its key, answered the same.
    let request = ClaimRequest::memory(Bytes(1 << 30), "over-ssh");
    let patience = Duration::from_secs(20);
    let made = host
        .claim_keyed(request.clone(), "ssh-key-1".into(), None, patience)
        .await
        .unwrap();
    let Outcome::Claimed(claim) = made else {
        panic!("{made:?}")
    };
    let again = host
        .claim_keyed(request, "ssh-key-1".into(), None, patience)
        .await
        .unwrap();
    assert!(
        matches!(&again, Outcome::Claimed(c) if c.id == claim.id),
        "{again:?}"
    );
    let there = claims_there(&serve);
    assert_eq!(there.len(), 1, "{there:#?}");
    assert_eq!(there[0]["project"], "over-ssh");

    // A cordon; and a move the serve refuses comes back in its words.
    host.act(Action::Cordon {
        node: "far-node".into(),
        index: 1,
        cordoned: true,
    })
    .await
    .unwrap();
    let cordoned = until(&host, "the cordon over the watch", |r| {
        r.as_ref()
            .is_ok_and(|s| s.nodes[0].devices.iter().any(|d| d.cordoned))
    })
    .await
    .unwrap();
    assert!(cordoned.nodes[0].devices[1].cordoned);
    let refused = host
        .act(Action::Move {
            id: claim.id,
            target: MoveTarget {
                node: None,
                devices: Some(vec![1]),
            },
        })
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("cordon"),
        "the serve's reason: {refused}"
    );

    // The serve audited each as the SSH user, through its operator token.
    let events = serve.cli(&["events", "--json"]);
    let events: Value = serde_json::from_str(&text(&events.stdout)).unwrap();
    let actions: Vec<(String, String)> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap_or_default().to_string(),
                e["actor"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let user = gpuboard::identity::LocalUser::current().actor();
    for want in ["release", "claim", "cordon"] {
        assert!(
            actions
                .iter()
                .any(|(a, who)| a == want && who.starts_with("admin") && who.contains(&user)),
            "{want} by {user}: {actions:?}"
        );
    }

    // The host whose SSH user cannot read the token: read, read-only, and says why.
    let seen = settled(&ro).await.unwrap();
    assert_eq!(seen.claims.len(), 1, "its claims are read");
    assert!(!seen.endpoint.actions);
    assert!(!ro.can_act());
    let n = note(&seen);
    assert!(
        n.contains("read-only: ")
            && n.contains("cannot read the operator token")
            && n.contains("ro-data"),
        "{n}"
    );
    let e = ro.act(Action::Release { id: claim.id }).await.unwrap_err();
    assert!(
        matches!(&e, Failure::ReadOnly(m) if m.contains("cannot read the operator token")),
        "{e:?}"
    );
    // The relay there refuses it too, asked directly.
    let relay = Arc::new(SshRelay {
        options: config(&server, "gpu-serve-ro").options,
        destination: "gpu-serve-ro".into(),
    });
    let direct = Client::relayed(relay, Duration::from_secs(20))
        .unwrap()
        .release(claim.id)
        .await
        .unwrap_err();
    assert!(
        matches!(&direct, ClientError::Forbidden { detail } if detail.contains("cannot read the operator token")),
        "{direct:?}"
    );
    assert_eq!(claims_there(&serve).len(), 1, "nothing changed there");
    drop((host, ro));
    drop(server);
}

#[test]
fn the_console_releases_a_claim_on_an_ssh_host_and_says_why_another_is_read_only() {
    if common::skip_peer("ssh") {
        return;
    }
    let server = Sshd::start();
    let (serve, _inventory) = serve_with_a_claim(&server);
    let home = tempfile::tempdir().unwrap();
    let runtime = home.path().join("run");
    std::fs::create_dir_all(&runtime).unwrap();
    let console = |alias: &str| {
        format!(
            "env HOME={h} XDG_CONFIG_HOME={h}/config XDG_STATE_HOME={h}/state \
             XDG_RUNTIME_DIR={r} {bin} --refresh 1 --ssh {alias} --ssh-config {c}",
            h = home.path().display(),
            r = runtime.display(),
            bin = common::gpuboard().display(),
            c = server.ssh_config().display()
        )
    };
    // First the host whose SSH user cannot read the token, then the one who can.
    let script = format!(
        "{}; echo FIRST=$?; {}; echo EXIT=$?; sleep 60",
        console("gpu-serve-ro"),
        console("gpu-serve")
    );
    let s = common::tmux::Session::start(200, 50, "sshact", &script);
    s.wait_for("GPUs");
    s.keys(&["3"]);
    s.wait_for("Claims (1)");
    s.keys(&["r"]);
    let screen = s.wait_for("cannot read the operator token");
    assert!(screen.contains("read-only over ssh"), "{screen}");
    assert!(!screen.contains("[ Cancel ]"), "no dialog: {screen}");
    s.keys(&["q"]);
    // The second console comes up at once, over the first one's exit line.
    s.wait_for("gpu-serve ● live");
    s.keys(&["3"]);
    s.wait_for("Claims (1)");
    s.keys(&["r"]);
    s.wait_for("[ Cancel ]");
    s.keys(&["Tab", "Enter"]);
    s.wait_for("released");
    s.wait_for("Claims (0)");
    assert!(claims_there(&serve).is_empty(), "released on the serve");
    s.keys(&["q"]);
    let screen = s.wait_for("EXIT=");
    assert!(
        screen.contains("FIRST=0") && screen.contains("EXIT=0"),
        "{screen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serve_started_after_the_stream_began_is_found_and_read() {
    if common::skip_peer("ssh") {
        return;
    }
    let server = Sshd::start();
    let mut c = config(&server, "gpu-late");
    c.reprobe = Duration::from_secs(1);
    let host = SshSource::with(
        c,
        Arc::new(tokio::sync::Semaphore::new(2)),
        Arc::new(SystemClock),
    )
    .unwrap();
    // No serve, no NVML: nvidia-smi streams.
    let first = settled(&host).await.unwrap();
    assert!(
        note(&first).starts_with("reader: nvidia-smi -l 1"),
        "{}",
        note(&first)
    );
    assert!(!host.can_act());
    // A serve starts there: the host is asked again, and switches to it.
    let _serve = serve_on(&server.late_dir(), "late-node", &[]);
    let switched = until(&host, "the serve as the reader", |r| {
        r.as_ref()
            .is_ok_and(|s| note(s).starts_with("reader: gpuboard serve over ssh"))
    })
    .await
    .unwrap();
    assert_eq!(switched.nodes[0].name, "late-node");
    assert!(host.can_act(), "{}", note(&switched));
    drop(host);
    drop(server);
}
