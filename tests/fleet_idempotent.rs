//! Idempotent claims over real `gpuboard serve` processes on 127.0.0.1: a claim whose
//! answer is late (a commit held up by another process's database lock, or a relay that
//! delays `POST /v1/claims`) is never held twice across the fleet, and the endpoint
//! answers a key it has seen with its first answer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::ok;
use crate::common::relay::read_request;
use crate::common::text;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::Server;
use serde_json::{Value, json};

const GIB: u64 = 1 << 30;

/// Endpoints with one 80 GiB GPU each, and a config naming them (some at other URLs).
struct Fleet {
    root: tempfile::TempDir,
    servers: Vec<(String, Server)>,
    config: PathBuf,
}

impl Fleet {
    fn start(names: &[&str]) -> Fleet {
        let root = tempfile::tempdir().unwrap();
        let servers = names
            .iter()
            .map(|n| {
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
                ((*n).to_string(), Server::start(&dir, &inv, &[]))
            })
            .collect();
        let config = root.path().join("config.toml");
        let f = Fleet {
            root,
            servers,
            config,
        };
        f.write_config(&[]);
        f
    }

    fn server(&self, name: &str) -> &Server {
        &self.servers.iter().find(|(n, _)| n == name).unwrap().1
    }

    /// The config, with `urls` replacing some endpoints' own URLs.
    fn write_config(&self, urls: &[(&str, &str)]) {
        let mut text = String::new();
        for (name, s) in &self.servers {
            let url = urls
                .iter()
                .find(|(n, _)| n == name)
                .map_or(s.url.as_str(), |(_, u)| u);
            writeln!(
                text,
                "[[endpoints]]\nname = \"{name}\"\nurl = \"{url}\"\ntoken_file = \"{}\"",
                s.dir.join("operator.token").display()
            )
            .unwrap();
        }
        std::fs::write(&self.config, text).unwrap();
    }

    /// `gpuboard ARGS --config FLEET`, with the fleet's cache and no other credentials.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpuboard"));
        cmd.arg(args[0])
            .arg("--config")
            .arg(&self.config)
            .args(&args[1..])
            .env("GPUBOARD_CACHE_DIR", self.root.path().join("cache"))
            .env_remove("GPUBOARD_TOKEN")
            .env_remove("GPUBOARD_ENDPOINT")
            .env_remove("GPUBOARD_DATA_DIR");
        cmd
    }

    fn cli(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// The claims of one endpoint, read from it directly.
    fn claims(s: &Server) -> Vec<Value> {
        let out = Command::new("curl")
            .args(["-sf", "--max-time", "60", "-H"])
            .arg(format!("Authorization: Bearer {}", s.read_token()))
            .arg(format!("{}/v1/snapshot", s.url))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["claims"].as_array().unwrap().clone()
    }

    /// Every claim of the fleet by its attempt label: label -> [(endpoint, id)].
    fn by_attempt(&self) -> BTreeMap<String, Vec<(String, u64)>> {
        let mut all: BTreeMap<String, Vec<(String, u64)>> = BTreeMap::new();
        for (name, s) in &self.servers {
            for c in Fleet::claims(s) {
                if let Some(l) = c["request"]["labels"]["gpuboard.attempt"].as_str() {
                    all.entry(l.to_string())
                        .or_default()
                        .push((name.clone(), c["id"].as_u64().unwrap()));
                }
            }
        }
        all
    }

    /// Releases every labelled claim of the fleet (between rounds).
    fn release_attempts(&self) {
        for (label, at) in self.by_attempt() {
            for (name, id) in at {
                let out = self.cli(&["release", &format!("{name}/{id}")]);
                assert!(out.status.success(), "{label}: {}", text(&out.stderr));
            }
        }
    }
}

/// Labels whose claim is held more than once across the fleet.
fn duplicates(by_attempt: &BTreeMap<String, Vec<(String, u64)>>) -> Vec<String> {
    by_attempt
        .iter()
        .filter(|(_, at)| at.len() > 1)
        .map(|(l, at)| format!("{l}: {at:?}"))
        .collect()
}

/// The probe: three endpoints, binpack prefers `epa`, whose database write lock
/// another process holds for 4 s while a claim with `--timeout 2` runs. Before keys, the
/// re-check read `epa`'s last committed snapshot, found nothing, placed on `epb`, and
/// `epa` committed its copy when the lock went: held twice (20 of 20). Whether `epa`'s
/// serve waits the lock out or fails its store, the claim must end held exactly once.
#[test]
fn a_commit_stalled_by_a_held_database_lock_never_leaves_a_claim_held_twice() {
    let fleet = Fleet::start(&["epa", "epb", "epc"]);
    // epa fuller: binpack sends the claim there first.
    ok(&fleet.cli(&["claim", "--memory", "40GiB", "--endpoint", "epa"]));
    let db = fleet.server("epa").dir.join("gpuboard.sqlite");
    // Three rounds: each holds the lock 4 s (the figure), so about 15 s in all.
    for round in 0..3 {
        let hold = Duration::from_secs(4);
        let locker = {
            let db = db.clone();
            let (taken_tx, taken) = std::sync::mpsc::channel();
            let t = std::thread::spawn(move || {
                let conn = rusqlite::Connection::open(&db).unwrap();
                conn.busy_timeout(Duration::from_secs(30)).unwrap();
                conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                taken_tx.send(()).unwrap();
                std::thread::sleep(hold);
                conn.execute_batch("ROLLBACK").unwrap();
            });
            taken.recv().unwrap();
            t
        };
        let out = fleet.cli(&["claim", "--memory", "1GiB", "--timeout", "2", "--json"]);
        locker.join().unwrap();
        let stderr = text(&out.stderr);
        // Once the lock is gone every commit lands; then the fleet is counted.
        let by_attempt = settled(&fleet);
        assert!(
            duplicates(&by_attempt).is_empty(),
            "round {round}: held twice: {by_attempt:?}\n{stderr}"
        );
        if out.status.success() {
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            let (name, id) = (
                v["endpoint"].as_str().unwrap().to_string(),
                v["id"].as_u64().unwrap(),
            );
            let held: Vec<&(String, u64)> = by_attempt.values().flatten().collect();
            assert_eq!(held, [&(name, id)], "round {round}: {stderr}");
        } else {
            // A serve that fails its store on a busy database refuses the claim; nothing
            // may be held then either, but for what the CLI names.
            assert!(by_attempt.len() <= 1, "round {round}: {by_attempt:?}");
        }
        fleet.release_attempts();
    }
}

/// The fleet's labelled claims once no commit is pending (a snapshot waits for pending
/// commits; a relay may still forward a late copy): read until two reads agree.
fn settled(fleet: &Fleet) -> BTreeMap<String, Vec<(String, u64)>> {
    let deadline = Instant::now() + Duration::from_mins(2);
    let mut last = fleet.by_attempt();
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = fleet.by_attempt();
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// A relay that holds each `POST /v1/claims` for `delay` before forwarding it (the
/// claim lands late, after the client gave up) and forwards everything else at once.
/// One thread per connection, so concurrent clients are delayed side by side.
struct DelayingRelay {
    url: String,
    /// Requests read and not yet answered by the upstream.
    busy: Arc<AtomicUsize>,
}

impl DelayingRelay {
    fn start(upstream: &str, delay: Duration) -> DelayingRelay {
        let upstream = upstream.trim_start_matches("http://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let busy = Arc::new(AtomicUsize::new(0));
        let counter = busy.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (upstream, busy) = (upstream.clone(), counter.clone());
                std::thread::spawn(move || relay_one(conn, &upstream, delay, &busy));
            }
        });
        DelayingRelay { url, busy }
    }

    /// Waits until no request is held or being forwarded (a late copy has landed).
    fn drain(&self) {
        let deadline = Instant::now() + Duration::from_mins(2);
        while self.busy.load(Ordering::SeqCst) > 0 {
            assert!(Instant::now() < deadline, "the relay never drained");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn relay_one(mut conn: TcpStream, upstream: &str, delay: Duration, busy: &AtomicUsize) {
    // One request per connection: the answer says `Connection: close`.
    let Some((head, body)) = read_request(&mut conn) else {
        return;
    };
    busy.fetch_add(1, Ordering::SeqCst);
    forward(&mut conn, upstream, delay, &head, &body);
    busy.fetch_sub(1, Ordering::SeqCst);
}

/// Forwards one request, a claim only after `delay`.
fn forward(conn: &mut TcpStream, upstream: &str, delay: Duration, head: &str, body: &[u8]) {
    if head.starts_with("POST /v1/claims ") {
        std::thread::sleep(delay);
    }
    crate::common::relay::forward(conn, upstream, head, body);
}

/// The proxy probe, 100 times: `POST /v1/claims` to the preferred endpoint is
/// delayed past the client's timeout, so every first answer is lost and the claim lands
/// after the client gave up. Each claim must be held exactly once.
///
/// Durations: the client's `--timeout` is 2 s and the relay's delay 3 s (the issue used
/// 2 s and 3.5 s; what matters is delay > timeout, by enough that a loaded machine keeps
/// the order). Each claim then takes about 2 s (lost answer) + 3 s (the re-sent claim's
/// delay) + process start, ~6 s. 100 claims run 10 at a time in 10 rounds: ~1 min on an
/// idle machine, a few on a loaded 2-core one.
#[test]
fn a_claim_delayed_past_the_clients_timeout_is_held_once_100_of_100() {
    const ROUNDS: usize = 10;
    const AT_ONCE: usize = 10;
    let fleet = Fleet::start(&["epa", "epb", "epc"]);
    ok(&fleet.cli(&["claim", "--memory", "40GiB", "--endpoint", "epa"]));
    let relay = DelayingRelay::start(&fleet.server("epa").url, Duration::from_secs(3));
    fleet.write_config(&[("epa", &relay.url)]);
    let mut dup = Vec::new();
    let mut placed = BTreeMap::<String, usize>::new();
    for round in 0..ROUNDS {
        let children: Vec<std::process::Child> = (0..AT_ONCE)
            .map(|_| {
                fleet
                    .command(&["claim", "--memory", "1GiB", "--timeout", "2"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut named = Vec::new();
        let mut said = String::new();
        for c in children {
            let pid = c.id();
            let out = c.wait_with_output().unwrap();
            let _ = writeln!(
                said,
                "pid {pid}: {}{}",
                text(&out.stdout),
                text(&out.stderr)
            );
            // "claim EPA/ID placed on endpoint ..."
            let stdout = ok(&out);
            let (e, id) = stdout
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.split_once('/'))
                .unwrap_or_else(|| panic!("{stdout}"));
            named.push((e.to_string(), id.parse::<u64>().unwrap()));
        }
        // The relay may still be forwarding a late copy: wait for it to land.
        relay.drain();
        let by_attempt = settled(&fleet);
        dup.extend(duplicates(&by_attempt));
        assert_eq!(
            by_attempt.len(),
            AT_ONCE,
            "round {round}: {by_attempt:?}\n{said}"
        );
        // What each CLI named is what the fleet holds.
        let mut held: Vec<(String, u64)> = by_attempt.into_values().flatten().collect();
        held.sort();
        named.sort();
        assert_eq!(held, named, "round {round}\n{said}");
        for (e, _) in named {
            *placed.entry(e).or_default() += 1;
        }
        fleet.release_attempts();
    }
    assert!(dup.is_empty(), "held twice: {dup:?}");
    assert_eq!(placed.values().sum::<usize>(), ROUNDS * AT_ONCE);
    // The delayed endpoint took them (its late answer was asked for, not skipped).
    assert_eq!(placed.get("epa"), Some(&(ROUNDS * AT_ONCE)), "{placed:?}");
}

/// The endpoint's side, on the wire: a key seen again answers the first answer (placed or
/// refused, same status, same body), even after a restart; another body under the key is
/// refused naming the key; a malformed key is refused naming the rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_seen_again_answers_the_first_answer_even_after_a_restart() {
    let root = tempfile::tempdir().unwrap();
    let inv = root.path().join("inv.toml");
    std::fs::write(
        &inv,
        "[[nodes]]\nname = \"n\"\n[[nodes.gpus]]\nmodel = \"NVIDIA A100-SXM4-80GB\"\nmemory = \"80GiB\"\ncount = 1\n",
    )
    .unwrap();
    let dir = root.path().join("data");
    let mut server = Server::start(&dir, &inv, &[]);
    let http = common::http();
    let post = |url: String, token: String, key: &'static str, body: Value| {
        let http = http.clone();
        async move {
            let r = http
                .post(format!("{url}/v1/claims"))
                .bearer_auth(token)
                .header("Idempotency-Key", key)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let replayed = r.headers().contains_key("idempotent-replayed");
            (status, replayed, r.json::<Value>().await.unwrap())
        }
    };
    let token = server.operator_token();
    let ten = json!({"gpu_memory": "10GiB"});
    let (s1, r1, first) = post(server.url.clone(), token.clone(), "k-1", ten.clone()).await;
    assert_eq!((s1, r1), (201, false), "{first}");
    let (s2, r2, again) = post(server.url.clone(), token.clone(), "k-1", ten.clone()).await;
    assert_eq!((s2, r2), (201, true));
    assert_eq!(again, first, "the same answer, the same claim");
    // Too big: refused, and the refusal is what the key answers from then on.
    let huge = json!({"gpu_memory": "90GiB"});
    let (s3, _, refused) = post(server.url.clone(), token.clone(), "k-2", huge.clone()).await;
    assert_eq!(s3, 409, "{refused}");
    let (s4, r4, refused_again) =
        post(server.url.clone(), token.clone(), "k-2", huge.clone()).await;
    assert_eq!((s4, r4), (409, true));
    assert_eq!(refused_again, refused);
    // Another body under a used key: refused, the key named.
    let (s5, _, reused) = post(
        server.url.clone(),
        token.clone(),
        "k-1",
        json!({"gpu_memory": "11GiB"}),
    )
    .await;
    assert_eq!(s5, 422, "{reused}");
    assert_eq!(reused["error"], "idempotency_key_reused");
    assert!(
        reused["detail"].as_str().unwrap().contains("`k-1`"),
        "{reused}"
    );
    // A key with a space: refused, the rule said.
    let r = http
        .post(format!("{}/v1/claims", server.url))
        .bearer_auth(&token)
        .header("Idempotency-Key", "a b")
        .json(&ten)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 422);
    let v: Value = r.json().await.unwrap();
    assert!(
        v["detail"].as_str().unwrap().contains("visible ASCII"),
        "{v}"
    );
    // The key was committed with its claim: a restarted endpoint still answers it.
    server.kill9();
    let server = Server::start(&dir, &inv, &[]);
    let (s6, r6, after) = post(server.url.clone(), token.clone(), "k-1", ten).await;
    assert_eq!((s6, r6), (201, true));
    assert_eq!(after, first);
    let snap: Value = http
        .get(format!("{}/v1/snapshot", server.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        snap["claims"].as_array().unwrap().len(),
        1,
        "one claim for three sends of k-1"
    );
    assert_eq!(
        snap["nodes"][0]["devices"][0]["memory_allocated"],
        10 * GIB,
        "{snap}"
    );
}

/// The second request of a key whose first is stuck behind a held database lock is told
/// "in flight" (409 `in_flight`), never "no such claim"; once the lock goes it gets the
/// first answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_whose_first_request_is_still_committing_answers_in_flight() {
    let root = tempfile::tempdir().unwrap();
    let inv = root.path().join("inv.toml");
    std::fs::write(
        &inv,
        "[[nodes]]\nname = \"n\"\n[[nodes.gpus]]\nmodel = \"NVIDIA A100-SXM4-80GB\"\nmemory = \"80GiB\"\ncount = 1\n",
    )
    .unwrap();
    let dir = root.path().join("data");
    let server = Server::start(&dir, &inv, &[]);
    let token = server.operator_token();
    let blocker = lock(&dir);
    let http = common::http();
    let send = |http: reqwest::Client| {
        let (url, token) = (server.url.clone(), token.clone());
        async move {
            let r = http
                .post(format!("{url}/v1/claims"))
                .bearer_auth(token)
                .header("Idempotency-Key", "stuck")
                .json(&json!({"gpu_memory": "10GiB"}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    // Two sends of one key while its commit is held: whichever reached the endpoint first
    // waits on the commit; the other is told it is in flight, without waiting for it.
    let mut a = tokio::spawn(send(http.clone()));
    let mut b = tokio::spawn(send(http.clone()));
    let (told, stuck) = tokio::select! {
        r = &mut a => (r.unwrap(), b),
        r = &mut b => (r.unwrap(), a),
    };
    assert_eq!(told.0, 409, "{}", told.1);
    assert_eq!(told.1["error"], "in_flight", "{}", told.1);
    assert!(
        told.1["detail"].as_str().unwrap().contains("`stuck`"),
        "{}",
        told.1
    );
    drop(blocker);
    let (s1, a1) = stuck.await.unwrap();
    let (s2, a2) = send(http.clone()).await;
    assert_eq!((s1, s2), (201, 201), "{a1} {a2}");
    assert_eq!(a1["id"], a2["id"], "one claim");
}

/// Holds the write lock of the database in `dir` until dropped.
fn lock(dir: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(dir.join("gpuboard.sqlite")).unwrap();
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    conn
}

/// Under contention, with one endpoint stopped: every claim lands while slots are free
/// elsewhere (before, `--tries 3` let 18 of 30 exit "does not fit" with 4 slots free).
#[test]
fn contended_claims_keep_trying_while_some_endpoint_has_room() {
    let mut fleet = Fleet::start(&["e0", "e1", "e2", "e3"]);
    // e3 is gone (still in the config): its read fails, nothing is sent there.
    drop(fleet.servers.remove(3));
    // Room for exactly 15 claims of 16 GiB: 3 endpoints x 5.
    let children: Vec<std::process::Child> = (0..15)
        .map(|i| {
            let policy = if i % 2 == 0 { "binpack" } else { "spread" };
            fleet
                .command(&["claim", "--memory", "16GiB", "--policy", policy, "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        ok(&c.wait_with_output().unwrap());
    }
    let held: usize = fleet.by_attempt().values().map(Vec::len).sum();
    assert_eq!(held, 15);
    // The 16th does not fit anywhere now and says so at once (exit 4).
    let out = fleet.cli(&["claim", "--memory", "16GiB"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
}
