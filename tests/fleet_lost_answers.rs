//! A fleet claim whose answer is lost, over real `gpuboard serve` processes on 127.0.0.1:
//! a TCP relay in front of endpoint `a` forwards the claim and then drops the connection
//! before the answer (or swallows the request, or holds the claim sent again with the
//! same idempotency key unanswered). The CLI must end with exactly one claim across the
//! fleet and say which, or, when `a` stays silent, name `a`, the attempt label and the
//! commands that find and release a phantom.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::ok;
use crate::common::relay::read_request;
use crate::common::text;

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Server;
use serde_json::Value;

/// What the relay does with one request.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// Forward it and the answer.
    Forward,
    /// Forward it, read the answer, and close the connection without it.
    DropAnswer,
    /// Close the connection without forwarding it.
    Swallow,
    /// Neither forward nor answer; wait for the client to hang up.
    Hold,
    /// Forward it and the answer, then stop listening: the next connection is refused.
    ForwardThenShut,
}

/// A TCP relay, one request per connection: its plan is a queue of (request line prefix,
/// act); a request matching the head of the queue takes that act (and pops it), any
/// other is forwarded.
struct Relay {
    url: String,
}

impl Relay {
    fn start(upstream: &str, plan: &[(&'static str, Act)]) -> Relay {
        let upstream = upstream.trim_start_matches("http://").to_string();
        let plan = Arc::new(Mutex::new(plan.iter().copied().collect::<VecDeque<_>>()));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            let mut listening = Some(listener);
            while let Some(l) = &listening {
                let Ok((conn, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                conn.set_nonblocking(false).unwrap();
                // One connection at a time, so a shut closes the listener before the next
                // connection can be queued on it.
                relay_one(conn, &upstream, &plan, &mut listening);
            }
        });
        Relay { url }
    }
}

fn relay_one(
    mut conn: TcpStream,
    upstream: &str,
    plan: &Mutex<VecDeque<(&'static str, Act)>>,
    listening: &mut Option<TcpListener>,
) {
    let Some((head, body)) = read_request(&mut conn) else {
        return;
    };
    let act = {
        let mut plan = plan.lock().unwrap();
        match plan.front() {
            Some((prefix, act)) if head.starts_with(prefix) => {
                let act = *act;
                plan.pop_front();
                act
            }
            _ => Act::Forward,
        }
    };
    match act {
        Act::Swallow => {}
        Act::Hold => {
            // Until the client gives up on it.
            conn.set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            let _ = conn.read(&mut [0u8; 1]);
        }
        Act::Forward | Act::DropAnswer | Act::ForwardThenShut => {
            let mut up = crate::common::relay::send(upstream, &head, &body).unwrap();
            let mut answer = Vec::new();
            up.read_to_end(&mut answer).unwrap();
            // Closed before the answer goes out: the kernel queues (and then resets) a
            // connection made to a listener still open, and a fast client connects again
            // within microseconds of reading the answer.
            if matches!(act, Act::ForwardThenShut) {
                *listening = None;
            }
            if matches!(act, Act::Forward | Act::ForwardThenShut) {
                let _ = conn.write_all(&answer);
            }
        }
    }
}

/// Two endpoints, `a` (behind a relay, once started) and `b`, one 80 GiB GPU each.
struct Fleet {
    root: tempfile::TempDir,
    a: Server,
    b: Server,
    config: PathBuf,
}

impl Fleet {
    fn start() -> Fleet {
        let root = tempfile::tempdir().unwrap();
        let server = |n: &str| {
            let dir = root.path().join(n);
            std::fs::create_dir_all(&dir).unwrap();
            let inv = root.path().join(format!("{n}.toml"));
            std::fs::write(
                &inv,
                format!(
                    "[[nodes]]\nname = \"host-{n}\"\n[[nodes.gpus]]\nmodel = \"NVIDIA A100-SXM4-80GB\"\nmemory = \"80GiB\"\ncount = 1\n"
                ),
            )
            .unwrap();
            Server::start(&dir, &inv, &[])
        };
        let (a, b) = (server("a"), server("b"));
        let config = root.path().join("config.toml");
        let f = Fleet { root, a, b, config };
        f.write_config(None);
        f
    }

    /// The config: `a` at its own URL or at the relay's.
    fn write_config(&self, a_url: Option<&str>) {
        let mut text = String::new();
        for (name, s, url) in [
            ("a", &self.a, a_url.unwrap_or(&self.a.url)),
            ("b", &self.b, &self.b.url),
        ] {
            writeln!(
                text,
                "[[endpoints]]\nname = \"{name}\"\nurl = \"{url}\"\ntoken_file = \"{}\"",
                s.dir.join("operator.token").display()
            )
            .unwrap();
        }
        std::fs::write(&self.config, text).unwrap();
    }

    /// `a` with 40 GiB taken, so binpack sends the next claim there; then the relay.
    fn relay_a(&self, plan: &[(&'static str, Act)]) {
        ok(&self.cli(&["claim", "--memory", "40GiB", "--endpoint", "a"]));
        let relay = Relay::start(&self.a.url, plan);
        self.write_config(Some(&relay.url));
    }

    fn cli(&self, args: &[&str]) -> Output {
        let config = self.config.display().to_string();
        let mut all = vec![args[0], "--config", &config];
        all.extend_from_slice(&args[1..]);
        self.exactly(&all)
    }

    /// `gpuboard ARGS` as written, with the fleet's cache and no other credentials.
    fn exactly(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_gpuboard"))
            .args(args)
            .env("GPUBOARD_CACHE_DIR", self.root.path().join("cache"))
            .env_remove("GPUBOARD_TOKEN")
            .env_remove("GPUBOARD_ENDPOINT")
            .env_remove("GPUBOARD_DATA_DIR")
            .output()
            .unwrap()
    }

    /// The claims of an endpoint, read from it directly (not through the relay).
    fn claims(s: &Server) -> Vec<Value> {
        let out = Command::new("curl")
            .args(["-sf", "-H"])
            .arg(format!("Authorization: Bearer {}", s.read_token()))
            .arg(format!("{}/v1/snapshot", s.url))
            .output()
            .unwrap();
        assert!(out.status.success());
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["claims"].as_array().unwrap().clone()
    }

    /// Every claim of the fleet carrying an attempt label: (endpoint, id, label value).
    fn attempts(&self) -> Vec<(&'static str, u64, String)> {
        let mut all = Vec::new();
        for (name, s) in [("a", &self.a), ("b", &self.b)] {
            for c in Fleet::claims(s) {
                if let Some(l) = c["request"]["labels"]["gpuboard.attempt"].as_str() {
                    all.push((name, c["id"].as_u64().unwrap(), l.to_string()));
                }
            }
        }
        all
    }
}

const POST: &str = "POST /v1/claims ";
/// What a fleet claim reads of each endpoint before placing.
const READ: &str = "GET /v1/capacity ";

#[test]
fn an_answer_lost_after_the_claim_was_placed_is_found_by_its_label_and_nothing_else_is_tried() {
    let fleet = Fleet::start();
    fleet.relay_a(&[(POST, Act::DropAnswer)]);
    let out = fleet.cli(&["claim", "--memory", "10GiB"]);
    let (stdout, stderr) = (ok(&out), text(&out.stderr));
    assert!(
        stdout.contains("claim a/2 placed on endpoint a"),
        "{stdout}"
    );
    let attempts = fleet.attempts();
    assert_eq!(
        attempts.len(),
        1,
        "exactly one claim across the fleet: {attempts:?}"
    );
    let (at, id, label) = &attempts[0];
    assert_eq!((*at, *id), ("a", 2));
    assert!(
        stderr.contains(&format!(
            "a placed it; its answer was lost (cannot reach {}",
            fleet_url_of_relay(&stderr)
        )) && stderr.contains(&format!(
            "found it as a/2 by its label gpuboard.attempt={label}"
        )),
        "{stderr}"
    );
    assert!(Fleet::claims(&fleet.b).is_empty(), "b was never asked");
}

/// The relay's URL as the error names it (whatever follows `cannot reach ` up to `:`).
fn fleet_url_of_relay(stderr: &str) -> String {
    let rest = stderr.split("cannot reach ").nth(1).unwrap_or_default();
    rest.split(": ").next().unwrap_or_default().to_string()
}

#[test]
fn a_request_that_never_landed_is_sent_again_with_its_key_and_placed_once() {
    let fleet = Fleet::start();
    fleet.relay_a(&[(POST, Act::Swallow)]);
    let out = fleet.cli(&["claim", "--memory", "10GiB"]);
    let (stdout, stderr) = (ok(&out), text(&out.stderr));
    // Sent again with the same key, a runs it now: the best endpoint takes it, once.
    assert!(
        stdout.contains("claim a/2 placed on endpoint a"),
        "{stdout}"
    );
    let attempts = fleet.attempts();
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!((attempts[0].0, attempts[0].1), ("a", 2));
    assert!(
        stderr.contains("(asked again with the same key)"),
        "{stderr}"
    );
    assert!(Fleet::claims(&fleet.b).is_empty(), "b was never asked");
    assert!(!stderr.contains("phantom"), "{stderr}");
}

#[test]
fn a_silent_endpoint_that_comes_back_in_the_same_command_has_its_phantom_released() {
    let fleet = Fleet::start();
    // The claim sent again is held unanswered until the CLI gives up on a (within
    // --place-within); asked once more after b took it, a answers with its copy.
    fleet.relay_a(&[(POST, Act::DropAnswer), (POST, Act::Hold)]);
    let out = fleet.cli(&["claim", "--memory", "10GiB", "--place-within", "3"]);
    let (stdout, stderr) = (ok(&out), text(&out.stderr));
    assert!(
        stdout.contains("claim b/1 placed on endpoint b"),
        "{stdout}"
    );
    let attempts = fleet.attempts();
    assert_eq!(attempts.len(), 1, "the phantom on a is gone: {attempts:?}");
    assert_eq!((attempts[0].0, attempts[0].1), ("b", 1));
    assert!(
        stderr.contains("skipped a: ")
            && stderr.contains("still no answer when asked again")
            && stderr.contains(&format!(
                "a came back: it had placed the claim too, as a/2 (label gpuboard.attempt={})",
                attempts[0].2
            ))
            && stderr.contains("released a/2"),
        "{stderr}"
    );
    // a keeps only the claim it had before.
    let a: Vec<u64> = Fleet::claims(&fleet.a)
        .iter()
        .map(|c| c["id"].as_u64().unwrap())
        .collect();
    assert_eq!(a, vec![1]);
}

#[test]
fn an_endpoint_silent_to_the_end_is_named_with_the_label_the_lease_and_the_commands() {
    let fleet = Fleet::start();
    fleet.relay_a(&[
        (POST, Act::DropAnswer),
        (POST, Act::Hold),
        (POST, Act::Hold),
    ]);
    let out = fleet.cli(&[
        "claim",
        "--memory",
        "10GiB",
        "--ttl",
        "600",
        "--place-within",
        "3",
    ]);
    let (stdout, stderr) = (ok(&out), text(&out.stderr));
    assert!(
        stdout.contains("claim b/1 placed on endpoint b"),
        "{stdout}"
    );
    // The phantom is there, and the warning names it: endpoint, label, lease, commands.
    let attempts = fleet.attempts();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    let label = &attempts[0].2;
    assert!(
        attempts.iter().all(|(_, _, l)| l == label),
        "one attempt id"
    );
    assert!(
        stderr.contains("warning: endpoint a may hold a phantom claim")
            && stderr.contains(&format!(
                "(label gpuboard.attempt={label}) holds GPUs until its lease ends, about "
            ))
            && stderr.contains("UTC (ttl 600 s from when it was sent)"),
        "{stderr}"
    );
    let config = fleet.config.display().to_string();
    let ls = format!("gpuboard ls --config {config} --endpoint a --label gpuboard.attempt={label}");
    assert!(stderr.contains(&format!("`{ls}`")), "{ls}\n{stderr}");
    let release = format!("gpuboard release --config {config} --endpoint a a/ID");
    assert!(
        stderr.contains(&format!("`{release}`")),
        "{release}\n{stderr}"
    );
    // The printed ls command finds exactly the phantom (a answers again by now).
    let words: Vec<&str> = ls.split(' ').skip(1).collect();
    let listed = ok(&fleet.exactly(&words));
    let rows: Vec<&str> = listed.lines().skip(1).collect();
    assert_eq!(rows.len(), 1, "{listed}");
    assert!(rows[0].starts_with("2 "), "{listed}");
    // ... and the release command with its id leaves one claim across the fleet.
    let release = release.replace("a/ID", "a/2");
    let words: Vec<&str> = release.split(' ').skip(1).collect();
    ok(&fleet.exactly(&words));
    assert_eq!(fleet.attempts().len(), 1);
}

#[test]
fn when_nothing_else_takes_it_a_silent_endpoint_that_comes_back_holds_the_answer() {
    let fleet = Fleet::start();
    // b is full: only a can take 10 GiB.
    ok(&fleet.cli(&["claim", "--memory", "80GiB", "--endpoint", "b"]));
    fleet.relay_a(&[(POST, Act::DropAnswer), (POST, Act::Hold)]);
    let out = fleet.cli(&["claim", "--memory", "10GiB", "--place-within", "3"]);
    let (stdout, stderr) = (ok(&out), text(&out.stderr));
    assert!(
        stdout.contains("claim a/2 placed on endpoint a"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("a placed it; its answer was lost") && stderr.contains("found it as a/2"),
        "{stderr}"
    );
    assert_eq!(fleet.attempts().len(), 1);
}

#[test]
fn a_move_whose_answer_is_lost_finds_its_claim_on_the_target_and_releases_the_old_one() {
    let fleet = Fleet::start();
    ok(&fleet.cli(&["claim", "--memory", "10GiB", "--endpoint", "b"]));
    fleet.relay_a(&[(POST, Act::DropAnswer)]);
    let out = fleet.cli(&["move", "b/1", "--to", "a"]);
    let (stdout, stderr) = (ok(&out), text(&out.stderr));
    assert!(
        stdout.contains("claim b/1 moved to a/2"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("a placed it; its answer was lost") && stderr.contains("found it as a/2"),
        "{stderr}"
    );
    assert!(
        Fleet::claims(&fleet.b).is_empty(),
        "the old claim is released"
    );
    let attempts = fleet.attempts();
    assert_eq!(attempts.len(), 1, "one moved claim: {attempts:?}");
    assert_eq!((attempts[0].0, attempts[0].1), ("a", 2));
}

#[test]
fn a_move_to_a_target_silent_to_the_end_keeps_the_old_claim_and_names_the_phantom() {
    let fleet = Fleet::start();
    ok(&fleet.cli(&[
        "claim",
        "--memory",
        "10GiB",
        "--endpoint",
        "b",
        "--ttl",
        "300",
    ]));
    // The claim sent again is held until the move gives up on it (15 s).
    fleet.relay_a(&[(POST, Act::DropAnswer), (POST, Act::Hold)]);
    let out = fleet.cli(&["move", "b/1", "--to", "a"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert_eq!(Fleet::claims(&fleet.b).len(), 1, "the old claim stays");
    let attempts = fleet.attempts();
    assert_eq!(attempts.len(), 1, "the phantom on a: {attempts:?}");
    assert!(
        stderr.contains("warning: endpoint a may hold a phantom claim")
            && stderr.contains(&format!("label gpuboard.attempt={}", attempts[0].2))
            && stderr.contains("ttl 300 s"),
        "{stderr}"
    );
}

#[test]
fn an_endpoint_refusing_the_connection_was_sent_nothing_and_is_not_suspected() {
    let fleet = Fleet::start();
    // a is read, then stops listening before the claim.
    fleet.relay_a(&[(READ, Act::ForwardThenShut)]);
    let out = fleet.cli(&["claim", "--memory", "10GiB"]);
    let (stdout, stderr) = (ok(&out), text(&out.stderr));
    assert!(
        stdout.contains("claim b/1 placed on endpoint b"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("skipped a: cannot reach")
            && stderr.contains("no connection, nothing sent"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("phantom") && !stderr.contains("asked again"),
        "{stderr}"
    );
    assert_eq!(fleet.attempts().len(), 1);
}
