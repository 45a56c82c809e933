//! The README's exit-code table, kept true: every row's code is provoked here by running the
//! real binary against real `gpuboard serve`s and a small HTTP server that is not gpuboard,
//! and every fault the table names lands on its row (never 1 for bad input, never "not
//! found" for a web page). The table itself is read from the README, so a row added there
//! without a case here fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::text;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::Server;
use common::foreign::Foreign;

/// An inventory of one node with `gpus` 80 GiB GPUs.
fn inventory(dir: &Path, node: &str, gpus: u32) -> PathBuf {
    common::one_node_inventory(dir, node, "NVIDIA H100 80GB HBM3", "80GiB", gpus)
}

/// A web page where an endpoint was expected.
const WEB_PAGE: (&str, &str, &str) = (
    "404 Not Found",
    "text/html",
    "<!DOCTYPE HTML><html><body>nope</body></html>",
);

/// An endpoint failing with a 500 and gpuboard's JSON error shape.
const FAILING: (&str, &str, &str) = (
    "500 Internal Server Error",
    "application/json",
    r#"{"error":"internal","detail":"boom"}"#,
);

/// `gpuboard ARGS`, isolated from this machine's environment and config.
fn gpuboard(home: &Path, args: &[&str]) -> Output {
    common::isolated_cli(home).args(args).output().unwrap()
}

/// The codes of the README's exit-code table, in order.
fn readme_codes() -> Vec<u8> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme
        .find("#### Exit codes")
        .expect("README has an Exit codes section");
    readme[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('|').nth(1)?.trim().parse().ok())
        .collect()
}

/// One provoked fault: what was run, the code it must exit with, and words stderr must hold.
struct Case {
    what: String,
    out: Output,
    code: u8,
    says: &'static str,
}

#[test]
fn every_row_of_the_exit_code_table_is_provoked() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let dirs: Vec<PathBuf> = ["a", "b"]
        .iter()
        .map(|n| {
            let d = root.path().join(n);
            std::fs::create_dir_all(&d).unwrap();
            d
        })
        .collect();
    let a = Server::start(&dirs[0], &inventory(root.path(), "node-a", 8), &[]);
    let b = Server::start(&dirs[1], &inventory(root.path(), "node-b", 8), &[]);
    let page = Foreign::start(WEB_PAGE);
    let failing = Foreign::start(FAILING);
    let wrong_token = root.path().join("wrong.token");
    std::fs::write(&wrong_token, "not-the-token\n").unwrap();
    std::fs::set_permissions(
        &wrong_token,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let config = root.path().join("fleet.toml");
    std::fs::write(
        &config,
        format!(
            "[[endpoints]]\nname = \"a\"\nurl = \"{}\"\ntoken_file = \"{}\"\n[[endpoints]]\nname = \"b\"\nurl = \"{}\"\ntoken_file = \"{}\"\n",
            a.url,
            dirs[0].join("operator.token").display(),
            b.url,
            dirs[1].join("operator.token").display()
        ),
    )
    .unwrap();
    let typo = root.path().join("typo.toml");
    std::fs::write(
        &typo,
        format!(
            "[[endpoints]]\nname = \"a\"\nurl = \"{}\"\nkind = \"gpuBoard\"\n",
            a.url
        ),
    )
    .unwrap();
    let cfg = config.to_str().unwrap();
    let data_a = dirs[0].to_str().unwrap();
    let on_a = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--endpoint", a.url.as_str(), "--data-dir", data_a]);
        gpuboard(&home, &all)
    };
    // A claim without a lease, for the conflict row: renewing it is refused (409).
    let made = on_a(&["claim", "--memory", "1GiB", "--holder", "t"]);
    assert!(made.status.success(), "{}", text(&made.stderr));
    let closed = common::free_port();
    let https_to_plain = a.url.replace("http://", "https://");
    let pin = ["AB"; 32].join(":");
    let closed_url = format!("http://127.0.0.1:{closed}");
    let scheme_less = a.url.trim_start_matches("http://").to_string();
    let mut cases: Vec<Case> = Vec::new();
    let mut case = |what: &str, out: Output, code: u8, says: &'static str| {
        cases.push(Case {
            what: what.to_string(),
            out,
            code,
            says,
        });
    };
    case("ls", on_a(&["ls"]), 0, "");
    case(
        "an endpoint answering 500",
        gpuboard(&home, &["ls", "--endpoint", &failing.url]),
        1,
        "HTTP 500",
    );
    case(
        "an unknown flag",
        gpuboard(&home, &["claim", "--no-such-flag"]),
        2,
        "--no-such-flag",
    );
    case(
        "--memory 1.5 (no unit)",
        on_a(&["claim", "--memory", "1.5"]),
        3,
        "add a unit",
    );
    case(
        "--request that is not JSON",
        on_a(&["claim", "--request", "gpu_memory=1Gi"]),
        3,
        "--request is not a valid JSON object",
    );
    case(
        "--request with a key twice",
        on_a(&[
            "claim",
            "--request",
            r#"{"gpu_memory": "1Gi", "gpu_memory": "2Gi"}"#,
        ]),
        3,
        "given twice",
    );
    case(
        "a scheme-less --endpoint",
        gpuboard(&home, &["ls", "--endpoint", &scheme_less]),
        3,
        "not a URL",
    );
    case(
        "an ftp:// endpoint",
        gpuboard(&home, &["ls", "--endpoint", "ftp://x"]),
        3,
        "ftp",
    );
    case(
        "an ambiguous bare id",
        gpuboard(&home, &["renew", "1", "--config", cfg]),
        3,
        "ambiguous",
    );
    case(
        "a config naming an unknown kind",
        gpuboard(&home, &["ls", "--config", typo.to_str().unwrap()]),
        3,
        "kind `gpuBoard` is not supported; supported: gpuboard, ray, prometheus, slurm, boinc",
    );
    case(
        "--gpus 9 on 8-GPU nodes",
        on_a(&["claim", "--gpus", "9"]),
        4,
        "it has 8 GPUs, the request needs 9",
    );
    case(
        "a closed port",
        gpuboard(&home, &["ls", "--endpoint", &closed_url]),
        5,
        "cannot reach",
    );
    case(
        "a web page where an endpoint should be",
        gpuboard(&home, &["ls", "--endpoint", &page.url]),
        5,
        "is not a gpuboard endpoint: it answered HTTP 404 Not Found",
    );
    case(
        "https:// to a plain HTTP endpoint",
        gpuboard(
            &home,
            &[
                "ls",
                "--endpoint",
                &https_to_plain,
                "--tls-fingerprint",
                &pin,
            ],
        ),
        5,
        "speaks plain HTTP, not TLS",
    );
    case(
        "a wrong token file",
        gpuboard(
            &home,
            &[
                "claim",
                "--memory",
                "1GiB",
                "--endpoint",
                &a.url,
                "--token-file",
                wrong_token.to_str().unwrap(),
            ],
        ),
        6,
        "wrong.token",
    );
    case("renew 999", on_a(&["renew", "999"]), 7, "not found");
    case(
        "reset of a project the endpoint does not have",
        on_a(&["project", "reset", "nosuch"]),
        7,
        "does not exist",
    );
    case(
        "the detail of a claim no source lists",
        gpuboard(
            &home,
            &[
                "status",
                "--dump-screen",
                "claim:999",
                "--endpoint",
                &a.url,
                "--data-dir",
                data_a,
            ],
        ),
        7,
        "claim:999",
    );
    case(
        "renew of a claim without a lease",
        on_a(&["renew", "1"]),
        8,
        "lease",
    );
    let mut wrong = Vec::new();
    for c in &cases {
        let err = text(&c.out.stderr);
        if c.out.status.code() != Some(i32::from(c.code)) || !err.contains(c.says) {
            wrong.push(format!(
                "{}: exit {:?} (want {}), stderr {err:?} (want it to say {:?})",
                c.what,
                c.out.status.code(),
                c.code,
                c.says
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let mut provoked: Vec<u8> = cases.iter().map(|c| c.code).collect();
    provoked.dedup();
    assert_eq!(
        readme_codes(),
        provoked,
        "the README's table and the codes provoked here must be the same rows"
    );
    assert_eq!(page.hits(), 1, "the web page was asked once");
    // Several ids: the first is released, the one refused is named with its endpoint.
    let out = gpuboard(&home, &["release", "a/1", "b/99", "--config", cfg]);
    let (said, err) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(7), "{said}{err}");
    assert!(said.contains("claim a/1: released"), "{said}");
    assert!(
        err.contains("release of claim b/99: endpoint b refused it"),
        "{err}"
    );
}

#[test]
fn a_refused_token_names_the_variable_it_came_from() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("a");
    std::fs::create_dir_all(&dir).unwrap();
    let a = Server::start(&dir, &inventory(root.path(), "node-a", 1), &[]);
    let out = Command::new(env!("CARGO_BIN_EXE_gpuboard"))
        .args(["claim", "--memory", "1GiB", "--endpoint", &a.url])
        .env("HOME", root.path())
        .env("XDG_CONFIG_HOME", root.path().join("config"))
        .env("GPUBOARD_TOKEN", "not-the-token")
        .env_remove("GPUBOARD_ENDPOINT")
        .env_remove("GPUBOARD_DATA_DIR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("GPUBOARD_TOKEN"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn http_to_a_tls_endpoint_says_it_speaks_tls() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("a");
    std::fs::create_dir_all(&dir).unwrap();
    let a = Server::start(&dir, &inventory(root.path(), "node-a", 1), &["--tls"]);
    let plain = a.url.replace("https://", "http://");
    let out = gpuboard(root.path(), &["ls", "--endpoint", &plain]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(
        err.contains("speaks TLS, not plain HTTP: write https://"),
        "{err}"
    );
}

/// Every client command lands on the table's row for each fault it can meet: the console's
/// `status` and `show`, `doctor`, `report`, `events` and `act` as well as the claim commands.
#[test]
fn every_client_command_lands_on_its_row() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let dir = root.path().join("a");
    std::fs::create_dir_all(&dir).unwrap();
    let a = Server::start(&dir, &inventory(root.path(), "node-a", 2), &[]);
    let page = Foreign::start(WEB_PAGE);
    let failing = Foreign::start(FAILING);
    let wrong_token = root.path().join("wrong.token");
    std::fs::write(&wrong_token, "not-the-token\n").unwrap();
    std::fs::set_permissions(
        &wrong_token,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let wrong = wrong_token.to_str().unwrap();
    let closed = format!("http://127.0.0.1:{}", common::free_port());
    let data = dir.to_str().unwrap();
    // An engine source nobody listens on, for `act`.
    let engines = root.path().join("engines.toml");
    std::fs::write(
        &engines,
        format!("[[endpoints]]\nname = \"r\"\nkind = \"ray\"\nurl = \"{closed}\"\n"),
    )
    .unwrap();
    let engines = engines.to_str().unwrap();
    let run = |args: &[&str]| gpuboard(&home, args);
    let on = |url: &str, args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--endpoint", url]);
        gpuboard(&home, &all)
    };
    let mut cases: Vec<Case> = Vec::new();
    let mut case = |what: &str, out: Output, code: u8, says: &'static str| {
        cases.push(Case {
            what: what.to_string(),
            out,
            code,
            says,
        });
    };
    // 1: the endpoint failed.
    case(
        "events, a 500",
        on(&failing.url, &["events"]),
        1,
        "HTTP 500",
    );
    case("report, a 500", on(&failing.url, &["report"]), 1, "500");
    // 3: invalid input.
    for (what, args) in [
        (
            "status --at yesterday",
            &["status", "--once", "--at", "yesterday"][..],
        ),
        (
            "status --at 25:99",
            &["status", "--once", "--at", "25:99"][..],
        ),
        (
            "status --at in the future",
            &["status", "--once", "--at", "2999-01-01 00:00"][..],
        ),
        (
            "events --since yesterday",
            &["events", "--since", "yesterday"][..],
        ),
        (
            "report --from yesterday",
            &["report", "--from", "yesterday"][..],
        ),
    ] {
        let mut all = args.to_vec();
        all.extend(["--endpoint", a.url.as_str(), "--data-dir", data]);
        case(what, run(&all), 3, "");
    }
    case(
        "status --dump-screen nosuch (does not parse)",
        run(&["status", "--dump-screen", "nosuch"]),
        2,
        "no view `nosuch`",
    );
    case(
        "doctor, an ftp:// endpoint",
        run(&["doctor", "--endpoint", "ftp://x"]),
        3,
        "ftp",
    );
    case(
        "act, a source the config lacks",
        run(&["act", "nosuch", "--list", "--config", engines]),
        3,
        "nosuch",
    );
    // 5: no gpuboard endpoint answered.
    case(
        "status --once, a web page",
        on(&page.url, &["status", "--once"]),
        5,
        "",
    );
    case(
        "status --once, a closed port",
        on(&closed, &["status", "--once"]),
        5,
        "",
    );
    case("doctor, a closed port", on(&closed, &["doctor"]), 5, "");
    case("doctor, a web page", on(&page.url, &["doctor"]), 5, "");
    case("events, a closed port", on(&closed, &["events"]), 5, "");
    case(
        "report, a web page",
        on(&page.url, &["report"]),
        5,
        "not a gpuboard endpoint",
    );
    case("show, a closed port", on(&closed, &["show", "1"]), 5, "");
    case(
        "act, an engine not listening",
        run(&["act", "r", "stop-job", "x", "--yes", "--config", engines]),
        5,
        "",
    );
    // 6: the token was refused.
    for (what, args) in [
        ("ls", &["ls"][..]),
        ("events", &["events"][..]),
        ("report", &["report"][..]),
        ("doctor", &["doctor"][..]),
        ("status --once", &["status", "--once"][..]),
    ] {
        let mut all = args.to_vec();
        all.extend(["--endpoint", a.url.as_str(), "--token-file", wrong]);
        case(what, run(&all), 6, "");
    }
    // 7: not found.
    case(
        "show 999",
        on(&a.url, &["show", "999", "--data-dir", data]),
        7,
        "999",
    );
    case(
        "status --dump-screen gpu:node-z:0",
        on(
            &a.url,
            &[
                "status",
                "--dump-screen",
                "gpu:node-z:0",
                "--data-dir",
                data,
            ],
        ),
        7,
        "node-z",
    );
    let mut bad = Vec::new();
    for c in &cases {
        let err = text(&c.out.stderr);
        if c.out.status.code() != Some(i32::from(c.code))
            || !err.contains(c.says)
            || err.trim().is_empty()
        {
            bad.push(format!(
                "{}: exit {:?} (want {}), stderr {err:?} (want it to say {:?})",
                c.what,
                c.out.status.code(),
                c.code,
                c.says
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
