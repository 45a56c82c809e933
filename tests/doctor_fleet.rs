//! `gpuboard doctor` checks every configured endpoint on real `gpuboard serve`s and says
//! what to fix: a wrong token, a read-only one, a TLS certificate that does not match its
//! pin, an endpoint that does not answer; a good one passes every check.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Server, demo_fleet, free_port, gpuboard};
use serde_json::Value;

fn token_file(dir: &Path, name: &str, token: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let p = dir.join(name);
    std::fs::write(&p, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

fn doctor(config: &Path, home: &Path, json: bool) -> std::process::Output {
    let mut cmd = Command::new(gpuboard());
    cmd.arg("doctor")
        .arg("--config")
        .arg(config)
        .args(["--nvml-lib", "/nonexistent/libnvidia-ml.so.1", "--data-dir"])
        .arg(home.join("no-data-dir"))
        .env("HOME", home)
        .env_remove("GPUBOARD_TOKEN")
        .env_remove("GPUBOARD_ENDPOINT")
        .env_remove("GPUBOARD_TLS_FINGERPRINT");
    if json {
        cmd.arg("--json");
    }
    cmd.output().unwrap()
}

#[test]
fn doctor_names_a_wrong_token_a_wrong_pin_and_an_unreachable_endpoint() {
    let work = tempfile::tempdir().unwrap();
    let tls_dir = tempfile::tempdir().unwrap();
    let http_dir = tempfile::tempdir().unwrap();
    let tls = Server::start(tls_dir.path(), &demo_fleet(), &["--tls"]);
    let plain = Server::start(http_dir.path(), &demo_fleet(), &[]);
    let pin = tls.fingerprint.clone().unwrap();
    let wrong_pin = vec!["AB"; 32].join(":");
    let good = token_file(work.path(), "good.token", &tls.operator_token());
    let plain_good = token_file(work.path(), "plain.token", &plain.operator_token());
    let reader = token_file(work.path(), "read.token", &plain.read_token());
    let wrong = token_file(work.path(), "wrong.token", &"0".repeat(64));
    let gone = format!("http://127.0.0.1:{}", free_port());
    let config = work.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[[endpoints]]
name = "good"
url = "{tls_url}"
token_file = "{good}"
tls_fingerprint = "{pin}"

[[endpoints]]
name = "badpin"
url = "{tls_url}"
token_file = "{good}"
tls_fingerprint = "{wrong_pin}"

[[endpoints]]
name = "plain"
url = "{plain_url}"
token_file = "{plain_good}"

[[endpoints]]
name = "badtoken"
url = "{plain_url}"
token_file = "{wrong}"

[[endpoints]]
name = "reader"
url = "{plain_url}"
token_file = "{reader}"

[[endpoints]]
name = "gone"
url = "{gone}"

[[endpoints]]
name = "ray"
url = "http://127.0.0.1:1"
kind = "ray"
"#,
            tls_url = tls.url,
            plain_url = plain.url,
            good = good.display(),
            plain_good = plain_good.display(),
            reader = reader.display(),
            wrong = wrong.display(),
        ),
    )
    .unwrap();

    let out = doctor(&config, work.path(), true);
    // An endpoint that cannot be reached is the exit-code table's row 5, named on stderr.
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("gpuboard: doctor: endpoint"));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let endpoints = report["endpoints"].as_array().unwrap();
    let names: Vec<&str> = endpoints
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    // Engine sources are not gpuboard endpoints: not checked.
    assert_eq!(
        names,
        ["good", "badpin", "plain", "badtoken", "reader", "gone"],
        "{report:#}"
    );
    let by = |n: &str| endpoints.iter().find(|e| e["name"] == n).unwrap();
    let problems = |n: &str| -> String {
        by(n)["problems"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    for ok in ["good", "plain"] {
        let e = by(ok);
        assert_eq!(e["reachable"], true, "{e:#}");
        assert_eq!(e["token"], "operator", "{e:#}");
        assert_eq!(e["version"], env!("CARGO_PKG_VERSION"), "{e:#}");
        assert!(e["problems"].as_array().unwrap().is_empty(), "{e:#}");
        // Same host, same clock (the Date header has whole seconds).
        assert!(
            e["clock_skew_seconds"].as_i64().unwrap().abs() <= 2,
            "{e:#}"
        );
    }
    let badpin = problems("badpin");
    assert_eq!(by("badpin")["reachable"], false);
    assert!(badpin.contains("TLS certificate mismatch"), "{badpin}");
    assert!(badpin.contains(&pin) && badpin.contains("fix:"), "{badpin}");
    assert_eq!(by("badtoken")["token"], "refused");
    let badtoken = problems("badtoken");
    assert!(
        badtoken.contains("token was refused") && badtoken.contains("fix:"),
        "{badtoken}"
    );
    assert_eq!(by("reader")["token"], "read-only");
    assert!(
        problems("reader").contains("operator token"),
        "{}",
        problems("reader")
    );
    assert_eq!(by("gone")["reachable"], false);
    let gone_text = problems("gone");
    assert!(
        gone_text.contains(&gone) && gone_text.contains("fix: start it"),
        "{gone_text}"
    );

    // The same as text: one block per endpoint, each problem with its fix.
    let out = doctor(&config, work.path(), false);
    let text = String::from_utf8(out.stdout).unwrap();
    let section = &text[text.find("endpoints (6):").expect(&text)..];
    assert!(
        section.contains("good") && section.contains(" ok: reachable"),
        "{section}"
    );
    for bad in ["badpin", "badtoken", "reader", "gone"] {
        let line = section
            .lines()
            .find(|l| l.trim_start().starts_with(bad))
            .unwrap();
        assert!(line.contains("PROBLEM"), "{section}");
    }
    assert!(section.matches("fix:").count() >= 4, "{section}");
}

#[test]
fn doctor_without_endpoints_says_how_to_give_them() {
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("config.toml");
    std::fs::write(&config, "theme = \"light\"\n").unwrap();
    let out = doctor(&config, work.path(), false);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("endpoints: none configured (give --endpoint URL"),
        "{text}"
    );
}
