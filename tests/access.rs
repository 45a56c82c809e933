//! Who may reach an endpoint, over real sockets and real `gpuboard serve` processes on
//! 127.0.0.1: the console's credentials (the README's `gpuboard --endpoint URL` on the
//! serving host), attaching to the local serve, named tokens (revoked: 401 and nothing
//! changes; the audit log names the token), TLS with a pinned fingerprint end to end.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::text;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use common::{Server, demo_fleet};
use gpuboard::client::{Client, ClientError, TlsTrust};
use gpuboard::clock::SystemClock;
use gpuboard::console::{ConsoleArgs, setup};
use gpuboard::request::ClaimRequest;
use gpuboard::sources::{Action, Fetched, Outcome};
use gpuboard::units::Bytes;

fn gpuboard(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuboard"))
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .env_remove("GPUBOARD_TOKEN")
        .env_remove("GPUBOARD_ENDPOINT")
        .env_remove("GPUBOARD_TLS_FINGERPRINT")
        .output()
        .unwrap()
}

fn request() -> ClaimRequest {
    ClaimRequest::memory(Bytes(1 << 30), "access")
}

fn client(url: &str, token: Option<String>) -> Client {
    Client::new(url, token, Duration::from_secs(10)).unwrap()
}

/// The console as `gpuboard --endpoint URL` (and the flags in `args`) builds it: its one
/// source reads the endpoint and claims and releases on it.
async fn console_reads_and_acts(args: ConsoleArgs) -> String {
    let attached = setup(&args, Arc::new(SystemClock)).unwrap();
    assert_eq!(attached.sources.len(), 1);
    let src = &attached.sources[0];
    assert_eq!(src.kind().as_str(), "gpuboard");
    let fetched = src.fetch().await.unwrap();
    let (Fetched::Snapshot(snap) | Fetched::Telemetry(snap)) = fetched else {
        panic!("a first fetch is a snapshot");
    };
    assert!(!snap.nodes.is_empty());
    let Outcome::Claimed(claim) = src.act(Action::Claim { request: request() }).await.unwrap()
    else {
        panic!("claimed");
    };
    let released = src.act(Action::Release { id: claim.id }).await.unwrap();
    assert!(matches!(released, Outcome::Released { .. }), "{released:?}");
    src.note().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_console_command_reads_and_acts_on_the_serving_host() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Server::start(dir.path(), &demo_fleet(), &[]);
    // No token flag, no config: the data directory's operator.token is found, as the CLI does.
    let args = ConsoleArgs {
        endpoints: vec![serve.url.clone()],
        data_dir: Some(dir.path().to_path_buf()),
        config: Some(write_config(dir.path(), "")),
        ..ConsoleArgs::default()
    };
    console_reads_and_acts(args).await;
    // --token-file wins over the data directory: a wrong one is refused, named.
    let wrong = dir.path().join("wrong.token");
    std::fs::write(&wrong, "0123\n").unwrap();
    set_mode(&wrong, 0o600);
    let args = ConsoleArgs {
        endpoints: vec![serve.url.clone()],
        data_dir: Some(dir.path().to_path_buf()),
        token_file: Some(wrong),
        config: Some(write_config(dir.path(), "")),
        ..ConsoleArgs::default()
    };
    let setup = setup(&args, Arc::new(SystemClock)).unwrap();
    let e = setup.sources[0].fetch().await.unwrap_err();
    assert!(e.to_string().contains("not valid"), "{e}");
    // The config's token_file serves an endpoint that is not on this host's data directory.
    let elsewhere = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("copied.token");
    std::fs::write(&token_file, serve.operator_token()).unwrap();
    set_mode(&token_file, 0o600);
    let args = ConsoleArgs {
        endpoints: vec![serve.url.clone()],
        data_dir: Some(elsewhere.path().to_path_buf()),
        config: Some(write_config(
            dir.path(),
            &format!("token_file = {:?}\n", token_file.display().to_string()),
        )),
        ..ConsoleArgs::default()
    };
    console_reads_and_acts(args).await;
}

fn write_config(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("console.toml");
    std::fs::write(&p, body).unwrap();
    p
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_with_no_source_attaches_to_the_local_serve() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Server::start(dir.path(), &demo_fleet(), &[]);
    let held = client(&serve.url, Some(serve.operator_token()))
        .claim(&request())
        .await
        .unwrap();
    // The serving process writes serve.lock (its pid and address); where this build's serve
    // does not yet, write what it would.
    let lock = dir.path().join("serve.lock");
    if !lock.exists() {
        std::fs::write(
            &lock,
            format!(
                r#"{{"pid": {}, "address": "{}"}}"#,
                serve.child.id(),
                serve.url
            ),
        )
        .unwrap();
    }
    let args = ConsoleArgs {
        data_dir: Some(dir.path().to_path_buf()),
        config: Some(write_config(dir.path(), "")),
        ..ConsoleArgs::default()
    };
    let attached = setup(&args, Arc::new(SystemClock)).unwrap();
    assert_eq!(attached.sources.len(), 1);
    let src = &attached.sources[0];
    assert_eq!(
        src.kind().as_str(),
        "gpuboard",
        "not the embedded scheduler"
    );
    let note = src.note().unwrap();
    assert!(
        note.contains("attached") && note.contains(&serve.url),
        "{note}"
    );
    let (Fetched::Snapshot(snap) | Fetched::Telemetry(snap)) = src.fetch().await.unwrap() else {
        panic!("snapshot");
    };
    assert!(
        snap.claims.iter().any(|c| c.id == held.claim().id),
        "the endpoint's claims are shown"
    );
    assert_eq!(src.name(), "local");
    // Named on the command line by its URL, this host's serve keeps that name; another
    // endpoint is `ep2` (the second named).
    let args = ConsoleArgs {
        data_dir: Some(dir.path().to_path_buf()),
        config: Some(write_config(dir.path(), "")),
        endpoints: vec![serve.url.clone(), "http://127.0.0.1:9".to_string()],
        ..ConsoleArgs::default()
    };
    let named = setup(&args, Arc::new(SystemClock)).unwrap();
    let names: Vec<&str> = named.sources.iter().map(|s| s.name()).collect();
    assert_eq!(names, ["local", "ep2"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn named_tokens_act_under_their_name_and_stop_when_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Server::start(dir.path(), &demo_fleet(), &[]);
    let add = gpuboard(dir.path(), &["token", "add", "alice", "--role", "operator"]);
    assert!(add.status.success(), "{}", text(&add.stderr));
    let alice = text(&add.stdout).trim().to_string();
    assert_eq!(alice.len(), 64);
    let stored = std::fs::read_to_string(dir.path().join("tokens.json")).unwrap();
    assert!(!stored.contains(&alice), "only the hash is stored");
    let add = gpuboard(dir.path(), &["token", "add", "ci", "--role", "read"]);
    let ci = text(&add.stdout).trim().to_string();

    // Alice claims; the audit event names her token and the user@host her client reports.
    let c = client(&serve.url, Some(alice.clone()));
    let made = c.claim(&request()).await.unwrap();
    let snap = c.snapshot().await.unwrap();
    let event = snap
        .events
        .iter()
        .rev()
        .find(|e| e.action.contains("claim") || e.target.contains(&made.claim().id.to_string()))
        .expect("an audit event of the claim");
    assert!(event.actor.starts_with("alice ("), "{event:?}");
    assert!(event.actor.contains('@'), "{event:?}");
    // operator.token stays valid, as admin.
    let admin = client(&serve.url, Some(serve.operator_token()));
    admin.renew(made.claim().id, Some(60)).await.unwrap();
    let snap = admin.snapshot().await.unwrap();
    assert!(snap.events.last().unwrap().actor.starts_with("admin"));
    // A read token reads and may not change anything.
    let reader = client(&serve.url, Some(ci));
    reader.snapshot().await.unwrap();
    let e = reader.release(made.claim().id).await.unwrap_err();
    assert!(matches!(e, ClientError::Forbidden { .. }), "{e}");

    // Revoked: 401 on the next request, and nothing changes.
    let ls = gpuboard(dir.path(), &["token", "ls"]);
    assert!(text(&ls.stdout).contains("alice"), "{}", text(&ls.stdout));
    let rev = gpuboard(dir.path(), &["token", "revoke", "alice"]);
    assert!(rev.status.success(), "{}", text(&rev.stderr));
    let before = admin.snapshot().await.unwrap();
    let e = c.release(made.claim().id).await.unwrap_err();
    assert!(matches!(e, ClientError::Unauthorized { .. }), "{e}");
    let e = c.claim(&request()).await.unwrap_err();
    assert!(matches!(e, ClientError::Unauthorized { .. }), "{e}");
    let after = admin.snapshot().await.unwrap();
    assert_eq!(
        before.revision, after.revision,
        "a revoked token changed nothing"
    );
    assert_eq!(before.claims.len(), after.claims.len());
    let ls = gpuboard(dir.path(), &["token", "ls"]);
    assert!(!text(&ls.stdout).contains("alice"));
    // admin cannot be revoked by name: its file is the way.
    let rev = gpuboard(dir.path(), &["token", "revoke", "admin"]);
    assert!(!rev.status.success());

    // An expired token: 401 that says so.
    let add = gpuboard(
        dir.path(),
        &[
            "token",
            "add",
            "temp",
            "--role",
            "operator",
            "--expires",
            "1s",
        ],
    );
    assert!(add.status.success(), "{}", text(&add.stderr));
    let temp = client(&serve.url, Some(text(&add.stdout).trim().to_string()));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let e = temp.claim(&request()).await.unwrap_err();
    assert!(
        matches!(&e, ClientError::Unauthorized { detail } if detail.contains("expired")),
        "{e}"
    );
    let add = gpuboard(dir.path(), &["token", "add", "x y", "--role", "read"]);
    assert!(!add.status.success());
    assert!(
        text(&add.stderr).contains("not allowed"),
        "{}",
        text(&add.stderr)
    );

    // The bearer scheme is case-insensitive.
    gpuboard::client::install_crypto_provider();
    let raw = reqwest::Client::new()
        .get(format!("{}/v1/snapshot", serve.url))
        .header(
            "authorization",
            format!("bearer {}", serve.operator_token()),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn https_with_the_pinned_fingerprint_works_end_to_end_and_a_wrong_one_sends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Server::start(dir.path(), &demo_fleet(), &["--tls"]);
    assert!(serve.url.starts_with("https://127.0.0.1:"), "{}", serve.url);
    let fp = serve.fingerprint.clone().unwrap();
    // doctor shows the same fingerprint.
    let doctor = gpuboard(dir.path(), &["doctor"]);
    assert!(
        text(&doctor.stdout).contains(&fp),
        "{}",
        text(&doctor.stdout)
    );
    let token = serve.operator_token();
    let pinned_to = |pin: &str| {
        Client::with_trust(
            &serve.url,
            Some(token.clone()),
            Duration::from_secs(10),
            &TlsTrust::pinned(pin),
        )
        .unwrap()
    };
    let pinned = pinned_to(&fp);
    let made = pinned.claim(&request()).await.unwrap();
    pinned.release(made.claim().id).await.unwrap();
    let before = pinned.snapshot().await.unwrap();

    // A wrong pin: a clear error with both fingerprints, before any request is sent.
    let wrong_fp = fp.replace(&fp[..2], if &fp[..2] == "00" { "11" } else { "00" });
    let wrong = pinned_to(&wrong_fp);
    let e = wrong.claim(&request()).await.unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains(&fp) && msg.contains(&wrong_fp), "{msg}");
    let after = pinned.snapshot().await.unwrap();
    assert_eq!(before.revision, after.revision);
    gpuboard::client::install_crypto_provider();
    let metrics = reqwest::Client::builder()
        .tls_danger_accept_invalid_certs(true)
        .build()
        .unwrap()
        .get(format!("{}/metrics", serve.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let answered: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("gpuboard_http_responses_total"))
        .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
        .sum();
    // claim, release, snapshot, snapshot: the mismatched client reached no handler.
    assert_eq!(answered, 4, "{metrics}");
    // https without anything to trust is refused before connecting.
    let e = Client::new(&serve.url, Some(token), Duration::from_secs(5)).unwrap_err();
    assert!(matches!(e, ClientError::BadEndpoint { .. }), "{e}");

    // The CLI: claim, ls and release over https with --tls-fingerprint; run too.
    let cli = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend(["--endpoint", &serve.url, "--tls-fingerprint", &fp]);
        gpuboard(dir.path(), &a)
    };
    let out = cli(&["claim", "--memory", "1GiB", "--project", "p", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["id"].as_u64().unwrap().to_string();
    let out = cli(&["release", &id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = Command::new(env!("CARGO_BIN_EXE_gpuboard"))
        .args(["run", "--memory", "1GiB", "--endpoint", &serve.url])
        .args(["--tls-fingerprint", &fp, "--data-dir"])
        .arg(dir.path())
        .args(["--", "sh", "-c", "test -n \"$CUDA_VISIBLE_DEVICES\""])
        .env_remove("GPUBOARD_TOKEN")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = cli(&["claim", "--memory", "1GiB"]);
    assert!(out.status.success());
    let out = Command::new(env!("CARGO_BIN_EXE_gpuboard"))
        .args([
            "ls",
            "--endpoint",
            &serve.url,
            "--tls-fingerprint",
            &wrong_fp,
        ])
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(&fp), "{}", text(&out.stderr));

    // The console over https: the local certificate is trusted without a flag on this
    // host, and a fingerprint given in the config is used elsewhere.
    let args = ConsoleArgs {
        endpoints: vec![serve.url.clone()],
        data_dir: Some(dir.path().to_path_buf()),
        config: Some(write_config(dir.path(), "")),
        ..ConsoleArgs::default()
    };
    console_reads_and_acts(args).await;
    let elsewhere = tempfile::tempdir().unwrap();
    let args = ConsoleArgs {
        endpoints: vec![serve.url.clone()],
        token_file: Some(copy_token(&serve)),
        config: Some(write_config(
            dir.path(),
            &format!("tls_fingerprint = \"{fp}\"\n"),
        )),
        data_dir: Some(elsewhere.path().to_path_buf()),
        ..ConsoleArgs::default()
    };
    console_reads_and_acts(args).await;
}

fn copy_token(serve: &Server) -> PathBuf {
    let p = serve.dir.join("copy.token");
    std::fs::write(&p, serve.operator_token()).unwrap();
    set_mode(&p, 0o600);
    p
}
