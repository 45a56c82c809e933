//! Claims across a fleet of real `gpuboard serve` processes on 127.0.0.1 (each with its
//! own inventory and tokens, named in a config's `[[endpoints]]`): best-fit placement
//! across endpoints, fallback on a 409 when an endpoint filled up between read and claim,
//! moves between endpoints (form and lease kept, both audited with one move id), the
//! release-failure path, `ls` over the fleet, and 50 concurrent claims on 10 endpoints.
//!
//! A test proxy stands in front of an endpoint where a race or a failure must happen on
//! cue: it serves a stale snapshot and capacity (the endpoint "filled up since it was read") or refuses
//! releases, and forwards everything else to the real endpoint.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::ok;
use crate::common::text;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::Server;
use serde_json::Value;

const GIB: u64 = 1 << 30;

/// An inventory of one node `node` with `gpus` GPUs of `gib` GiB.
fn inventory(dir: &Path, node: &str, gpus: u32, gib: u32) -> PathBuf {
    common::one_node_inventory(
        dir,
        node,
        "NVIDIA A100-SXM4-80GB",
        &format!("{gib}GiB"),
        gpus,
    )
}

/// A fleet: one serve per name, each with one node `host-NAME`.
struct Fleet {
    root: tempfile::TempDir,
    servers: Vec<(String, Server)>,
    config: PathBuf,
}

impl Fleet {
    fn start(names: &[&str], gpus: u32, gib: u32) -> Fleet {
        let root = tempfile::tempdir().unwrap();
        let servers: Vec<(String, Server)> = names
            .iter()
            .map(|n| {
                let dir = root.path().join(n);
                std::fs::create_dir_all(&dir).unwrap();
                let inv = inventory(root.path(), &format!("host-{n}"), gpus, gib);
                ((*n).to_string(), Server::start(&dir, &inv, &[]))
            })
            .collect();
        let config = root.path().join("config.toml");
        let mut f = Fleet {
            root,
            servers,
            config,
        };
        f.write_config(&[]);
        f
    }

    /// The config: every endpoint by its URL, except those given another URL (a proxy).
    fn write_config(&mut self, instead: &[(&str, &str)]) {
        let mut text = String::new();
        for (name, s) in &self.servers {
            let url = instead
                .iter()
                .find(|(n, _)| n == name)
                .map_or(s.url.as_str(), |(_, u)| *u);
            writeln!(
                text,
                "[[endpoints]]\nname = \"{name}\"\nurl = \"{url}\"\ntoken_file = \"{}\"",
                s.dir.join("operator.token").display()
            )
            .unwrap();
        }
        std::fs::write(&self.config, text).unwrap();
    }

    fn server(&self, name: &str) -> &Server {
        &self.servers.iter().find(|(n, _)| n == name).unwrap().1
    }

    /// `gpuboard ARGS` against the fleet's config (every endpoint unless ARGS name some).
    fn cli(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gpuboard"));
        // The config right after the subcommand: `run` takes everything after `--` as CMD.
        c.arg(args[0])
            .arg("--config")
            .arg(&self.config)
            .args(&args[1..])
            .env("GPUBOARD_CACHE_DIR", self.root.path().join("cache"))
            .env_remove("GPUBOARD_TOKEN")
            .env_remove("GPUBOARD_ENDPOINT")
            .env_remove("GPUBOARD_DATA_DIR");
        c
    }

    /// An endpoint's snapshot as JSON.
    fn snapshot(&self, name: &str) -> Value {
        let s = self.server(name);
        let out = Command::new("curl")
            .args(["-sf", "-H"])
            .arg(format!("Authorization: Bearer {}", s.read_token()))
            .arg(format!("{}/v1/snapshot", s.url))
            .output()
            .unwrap();
        assert!(out.status.success(), "snapshot of {name}");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn claims(&self, name: &str) -> Vec<Value> {
        self.snapshot(name)["claims"].as_array().unwrap().clone()
    }
}

/// A proxy in front of one endpoint: a stale snapshot instead of the real one, and/or
/// every release refused with 503; the rest is forwarded.
mod proxy {
    use axum::body::{Body, to_bytes};
    use axum::extract::{Request, State};
    use axum::http::{HeaderValue, Method, StatusCode, header};
    use axum::response::{IntoResponse, Response};

    #[derive(Clone)]
    struct Cfg {
        upstream: String,
        stale: Option<String>,
        fail_release: bool,
        http: reqwest::Client,
    }

    /// The proxy's URL; it runs on its own thread until the test process ends.
    pub fn start(upstream: &str, stale: Option<String>, fail_release: bool) -> String {
        gpuboard::client::install_crypto_provider();
        let cfg = Cfg {
            upstream: upstream.trim_end_matches('/').to_string(),
            stale,
            fail_release,
            http: reqwest::Client::new(),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(format!("http://{}", l.local_addr().unwrap()))
                    .unwrap();
                let app = axum::Router::new().fallback(forward).with_state(cfg);
                axum::serve(l, app).await.unwrap();
            });
        });
        rx.recv().unwrap()
    }

    async fn forward(State(cfg): State<Cfg>, req: Request) -> Response {
        let path = req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        if req.method() == Method::GET
            && req.uri().path() == "/v1/snapshot"
            && let Some(s) = &cfg.stale
        {
            return ([(header::CONTENT_TYPE, "application/json")], s.clone()).into_response();
        }
        // What a fleet claim places on: the capacity of the stale snapshot.
        if req.method() == Method::GET
            && req.uri().path() == "/v1/capacity"
            && let Some(s) = &cfg.stale
        {
            let snap: gpuboard::snapshot::Snapshot = serde_json::from_str(s).unwrap();
            let body = serde_json::to_string(&gpuboard::wire::capacity::CapacitySummary::of(&snap));
            return ([(header::CONTENT_TYPE, "application/json")], body.unwrap()).into_response();
        }
        if req.method() == Method::DELETE && cfg.fail_release {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::CONTENT_TYPE, "application/json")],
                r#"{"error":"unavailable","detail":"the test proxy refuses releases"}"#,
            )
                .into_response();
        }
        let method = reqwest::Method::from_bytes(req.method().as_str().as_bytes()).unwrap();
        let mut out = cfg.http.request(method, format!("{}{path}", cfg.upstream));
        for (k, v) in req.headers() {
            if [
                "authorization",
                "content-type",
                "if-none-match",
                "x-gpuboard-move",
            ]
            .contains(&k.as_str())
            {
                out = out.header(k.as_str(), v.as_bytes());
            }
        }
        let body = to_bytes(req.into_body(), 1 << 24).await.unwrap();
        let resp = out.body(body.to_vec()).send().await.unwrap();
        let status = StatusCode::from_u16(resp.status().as_u16()).unwrap();
        let mut r = Response::builder().status(status);
        for k in ["content-type", "etag"] {
            if let Some(v) = resp.headers().get(k) {
                r = r.header(k, HeaderValue::from_bytes(v.as_bytes()).unwrap());
            }
        }
        r.body(Body::from(resp.bytes().await.unwrap())).unwrap()
    }
}

#[test]
fn claims_land_where_the_policy_says_and_ls_lists_the_fleet() {
    let fleet = Fleet::start(&["a", "b", "c"], 2, 80);
    // a: 60 GiB on one GPU, c: 30 GiB on one GPU, b empty.
    ok(&fleet.cli(&["claim", "--memory", "60GiB", "--endpoint", "a"]));
    ok(&fleet.cli(&["claim", "--memory", "30GiB", "--endpoint", "c"]));

    // Binpack: a's GPU with 20 GiB free is filled exactly.
    let out = ok(&fleet.cli(&["claim", "--memory", "20GiB", "--holder", "h"]));
    assert!(
        out.contains("claim a/2 placed on endpoint a, node host-a:0"),
        "{out}"
    );
    // Spread: the emptiest host, b.
    let out = ok(&fleet.cli(&["claim", "--memory", "20GiB", "--policy", "spread"]));
    assert!(out.contains("placed on endpoint b, node host-b:"), "{out}");
    // Binpack again: a's other GPU would stay 60 free; c's used one leaves 30: c.
    let out = ok(&fleet.cli(&["claim", "--memory", "20GiB", "--json"]));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["endpoint"], "c");
    assert_eq!(v["node"], "host-c");

    // ls over the fleet: every claim, as ENDPOINT/ID.
    let table = ok(&fleet.cli(&["ls"]));
    for id in ["a/1", "a/2", "b/1", "c/1", "c/2"] {
        assert!(
            table.lines().any(|l| l.starts_with(&format!("{id} "))),
            "{id} in\n{table}"
        );
    }
    let all: Vec<Value> = serde_json::from_str(&ok(&fleet.cli(&["ls", "--json"]))).unwrap();
    assert_eq!(all.len(), 5);
    assert_eq!(all.iter().filter(|c| c["endpoint"] == "a").count(), 2);
    // A plain id is ambiguous with several endpoints; ENDPOINT/ID is not.
    let out = fleet.cli(&["release", "1"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains("ENDPOINT/1"),
        "{}",
        text(&out.stderr)
    );
    let out = ok(&fleet.cli(&["release", "b/1", "c/2"]));
    assert!(out.contains("claim b/1: released"), "{out}");
    assert!(fleet.claims("b").is_empty());
    assert_eq!(fleet.claims("c").len(), 1);
    let out = fleet.cli(&["release", "zz/1"]);
    assert!(
        text(&out.stderr).contains("no endpoint named `zz`"),
        "{}",
        text(&out.stderr)
    );
    // --endpoint by URL works without the config's names.
    let a = fleet.server("a");
    let token = a.dir.join("operator.token");
    let out = ok(&fleet.cli(&[
        "ls",
        "--endpoint",
        &a.url,
        "--token-file",
        token.to_str().unwrap(),
    ]));
    assert!(out.lines().any(|l| l.starts_with("2 ")), "{out}");
}

#[test]
fn ls_names_an_endpoint_it_cannot_read_and_lists_the_rest() {
    let mut fleet = Fleet::start(&["a", "b"], 1, 80);
    ok(&fleet.cli(&["claim", "--memory", "1GiB", "--endpoint", "b"]));
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", free.local_addr().unwrap());
    drop(free);
    fleet.write_config(&[("a", &dead)]);
    let out = fleet.cli(&["ls"]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("b/1"), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("endpoint a: cannot reach"),
        "{}",
        text(&out.stderr)
    );
    // A claim skips it and lands on b, saying so.
    let out = fleet.cli(&["claim", "--memory", "1GiB"]);
    assert!(
        text(&out.stdout).contains("endpoint b"),
        "{}",
        text(&out.stdout)
    );
    assert!(text(&out.stderr).contains("skipped a: cannot reach"));
}

#[test]
fn a_409_after_the_read_falls_back_to_the_next_endpoint() {
    let mut fleet = Fleet::start(&["x", "y"], 1, 80);
    // x as it was read: 70 GiB taken, so binpack prefers it for 10 GiB...
    ok(&fleet.cli(&["claim", "--memory", "70GiB", "--endpoint", "x"]));
    let stale = serde_json::to_string(&fleet.snapshot("x")).unwrap();
    // ...but it filled up since.
    ok(&fleet.cli(&["claim", "--memory", "10GiB", "--endpoint", "x"]));
    let proxy = proxy::start(&fleet.server("x").url, Some(stale), false);
    fleet.write_config(&[("x", &proxy)]);

    // One try only: x refuses, nothing else is tried; the reason is said once.
    let out = fleet.cli(&["claim", "--memory", "10GiB", "--tries", "1"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(
        err.matches("x: refused since it was read").count(),
        1,
        "{err}"
    );
    assert!(fleet.claims("y").is_empty());

    let out = fleet.cli(&["claim", "--memory", "10GiB"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("claim y/1 placed on endpoint y, node host-y:0"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stderr).contains("skipped x: refused since it was read"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(fleet.claims("x").len(), 2, "x was never over-committed");
}

#[test]
fn a_refusal_lists_its_reasons_once() {
    let fleet = Fleet::start(&["a", "b"], 1, 80);
    let out = fleet.cli(&["claim", "--memory", "500GiB", "--endpoint", "a"]);
    assert_eq!(out.status.code(), Some(4));
    let err = text(&out.stderr);
    assert_eq!(err.matches("node host-a: 1/1 GPU").count(), 1, "{err}");
    // Across the fleet: each endpoint's line once, named.
    let out = fleet.cli(&["claim", "--memory", "500GiB"]);
    assert_eq!(out.status.code(), Some(4));
    let err = text(&out.stderr);
    assert!(err.starts_with("gpuboard: infeasible"), "{err}");
    assert_eq!(err.matches("a: node host-a").count(), 1, "{err}");
    assert_eq!(err.matches("b: node host-b").count(), 1, "{err}");
}

/// The audit events of an endpoint that name a move.
fn move_events(fleet: &Fleet, name: &str) -> Vec<(String, String)> {
    fleet.snapshot(name)["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["actor"].as_str().unwrap().contains("(move "))
        .map(|e| {
            (
                e["actor"].as_str().unwrap().to_string(),
                e["action"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_move_across_endpoints_keeps_the_form_and_lease_and_is_audited_on_both() {
    let fleet = Fleet::start(&["a", "b"], 2, 80);
    // A Koordinator share on two devices, with a project, holder and lease.
    let out = ok(&fleet.cli(&[
        "claim",
        "--memory",
        "20GiB",
        "--shared",
        "2",
        "--project",
        "p",
        "--holder",
        "h",
        "--ttl",
        "600",
        "--endpoint",
        "a",
        "--json",
    ]));
    let old: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(old["shares"].as_array().unwrap().len(), 2);

    let out = ok(&fleet.cli(&["move", "a/1", "--to", "b/host-b", "--json"]));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["released"], true);
    let new = &v["to"];
    assert_eq!(new["endpoint"], "b");
    assert_eq!(new["node"], "host-b");
    for k in ["project", "holder", "memory_reserved"] {
        assert_eq!(new[k], old[k], "{k}");
    }
    // The same form, pinned where it was moved to (the form names the node it asked for).
    let (new_form, old_form) = (new["form"].as_str().unwrap(), old["form"].as_str().unwrap());
    assert!(
        new_form.starts_with(old_form) && new_form.contains("node=host-b"),
        "{new_form} / {old_form}"
    );
    assert_eq!(new["shares"].as_array().unwrap().len(), 2, "both devices");
    assert_eq!(new["request"]["ttl"], 600);
    assert!(new["lease_expires_at"].is_u64());
    assert!(fleet.claims("a").is_empty());
    assert_eq!(fleet.claims("b").len(), 1);
    // Both endpoints audit the same move id.
    let move_id = v["move"].as_str().unwrap();
    let on_a = move_events(&fleet, "a");
    let on_b = move_events(&fleet, "b");
    // The actor is the token's name and the user@host the CLI reports, then the move id.
    let suffix = format!(" (move {move_id})");
    assert_eq!(on_a.len(), 1, "{on_a:?}");
    assert_eq!(on_b.len(), 1, "{on_b:?}");
    assert_eq!(on_a[0].1, "release");
    assert_eq!(on_b[0].1, "claim");
    assert!(
        on_a[0].0.starts_with("admin (") && on_a[0].0.ends_with(&suffix),
        "{on_a:?}"
    );
    assert_eq!(
        on_a[0].0, on_b[0].0,
        "one actor and one move id on both endpoints"
    );

    // And back, onto named devices, in words.
    let out = ok(&fleet.cli(&["move", "b/1", "--to", "a", "--devices", "0,1"]));
    assert!(out.contains("claim b/1 moved to a/2 (move mv-"), "{out}");
    assert!(
        out.contains("placed on endpoint a, node host-a:0-1"),
        "{out}"
    );
    // A target that cannot take it changes nothing.
    ok(&fleet.cli(&["claim", "--gpus", "2", "--endpoint", "b"]));
    let out = fleet.cli(&["move", "a/2", "--to", "b"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("nothing changed"));
    assert_eq!(fleet.claims("a").len(), 1);
}

#[test]
fn a_failed_release_shows_both_claims_and_the_error() {
    let mut fleet = Fleet::start(&["a", "b"], 1, 80);
    ok(&fleet.cli(&["claim", "--memory", "8GiB", "--endpoint", "a"]));
    let proxy = proxy::start(&fleet.server("a").url, None, true);
    fleet.write_config(&[("a", &proxy)]);
    let out = fleet.cli(&["move", "a/1", "--to", "b"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("claimed b/1 but releasing a/1 failed"),
        "{err}"
    );
    assert!(err.contains("the test proxy refuses releases"), "{err}");
    assert!(err.contains("a/1  (old) host-a:0"), "{err}");
    assert!(err.contains("b/1  (new) host-b:0"), "{err}");
    assert_eq!(fleet.claims("a").len(), 1);
    assert_eq!(fleet.claims("b").len(), 1);
    // --json says the same on stdout.
    ok(&fleet.cli(&["claim", "--memory", "8GiB", "--endpoint", "a"]));
    let out = fleet.cli(&["move", "a/2", "--to", "b", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["released"], false);
    assert_eq!(v["from"]["id"], 2);
    assert_eq!(v["to"]["endpoint"], "b");
    assert!(v["error"].as_str().unwrap().contains("HTTP 503"));
}

#[test]
fn fifty_concurrent_claims_on_ten_endpoints_all_land_and_never_over_commit() {
    let names: Vec<String> = (0..10).map(|i| format!("e{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    // Room for exactly 50 claims of 16 GiB: 10 endpoints x 5 GPUs x 16 GiB.
    let fleet = Fleet::start(&refs, 5, 16);
    let mut children: Vec<std::process::Child> = (0..50)
        .map(|i| {
            let policy = if i % 2 == 0 { "binpack" } else { "spread" };
            fleet
                .command(&[
                    "claim", "--memory", "16GiB", "--tries", "10", "--policy", policy, "--json",
                ])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut placed = 0;
    for c in children.drain(..) {
        let out = c.wait_with_output().unwrap();
        ok(&out);
        placed += 1;
    }
    assert_eq!(placed, 50);
    let mut total = 0;
    for n in &refs {
        let snap = fleet.snapshot(n);
        for d in snap["nodes"][0]["devices"].as_array().unwrap() {
            let cap = d["memory_capacity"].as_u64().unwrap();
            assert!(d["memory_allocated"].as_u64().unwrap() <= cap, "{n}: {d}");
            assert_eq!(cap, 16 * GIB);
        }
        total += snap["claims"].as_array().unwrap().len();
    }
    assert_eq!(total, 50, "every claim placed once");
    // The fleet is full now: the 51st is refused everywhere.
    let out = fleet.cli(&["claim", "--memory", "16GiB"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
}

#[test]
fn run_places_across_the_fleet_and_releases_where_it_claimed() {
    let fleet = Fleet::start(&["a", "b"], 1, 80);
    // a is fuller: binpack sends the run's claim there.
    ok(&fleet.cli(&["claim", "--memory", "50GiB", "--endpoint", "a"]));
    let out = fleet.cli(&[
        "run",
        "--memory",
        "20GiB",
        "--",
        "sh",
        "-c",
        "echo \"$GPUBOARD_ENDPOINT $GPUBOARD_CLAIM_ID $CUDA_VISIBLE_DEVICES\"",
    ]);
    let stdout = ok(&out);
    assert_eq!(
        stdout.trim(),
        format!("{}/ 2 0", fleet.server("a").url.trim_end_matches('/')),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("claim a/2 on endpoint a, node host-a"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(fleet.claims("a").len(), 1, "released after CMD exited");
    assert!(fleet.claims("b").is_empty());
}
