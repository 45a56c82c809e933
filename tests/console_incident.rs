//! Issue 16's findings, each replayed on the real binary in tmux and shown fixed: on
//! `--demo`, and on a real `gpuboard serve` over `tests/fixtures/incident.toml` (host names
//! that differ only at the end, mixed A100 40GB/80GB) holding 18 claims in every request
//! form, 4 of them pending, with one project backed off. Mostly at 80x24; the wide layout
//! at 120 columns and FLAGS at 60x20. Waits poll the screen with a deadline; nothing
//! asserts a timing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::console_fixtures;
use crate::common::text;
use crate::common::tmux;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use common::{Server, fixture};
use serde_json::Value;
use tmux::Session;

/// Runs the CLI against `server`.
fn cli(server: &Server, args: &[&str]) -> Output {
    server.cli(args)
}

/// `gpuboard claim ARGS --json`: the claim as answered (placed, or pending with `--wait`).
fn claim(server: &Server, args: &[&str]) -> Value {
    let mut all = vec!["claim", "--json"];
    all.extend_from_slice(args);
    let out = cli(server, &all);
    assert!(
        out.status.success(),
        "{args:?}: exit {:?}: {}",
        out.status.code(),
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

fn claims(server: &Server) -> Vec<Value> {
    let out = cli(server, &["ls", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The incident: a real serve with 18 claims (14 placed, 4 pending; `batch` backed off
/// on H100), and the ids the tests look for.
struct Incident {
    server: Server,
    _dir: tempfile::TempDir,
    /// 49.8GiB on node-017:0, holder alice, with this test's pid.
    alice: u64,
    /// Six whole H100s of node-018 (2-7).
    six: u64,
    /// 30GiB asked of an A100-SXM4-80GB.
    a100_80: u64,
    /// 20GiB asked of an A100-SXM4-40GB.
    a100_40: u64,
    /// Pending: 70GiB of an A100 80GB card.
    pending_80: u64,
}

const H017: &str = "prod-h100-node-017";
const H018: &str = "prod-h100-node-018";
const A021: &str = "prod-a100-node-021";

impl Incident {
    fn start() -> Incident {
        let dir = tempfile::tempdir().unwrap();
        let server = Server::start(dir.path(), &fixture("incident.toml"), &["--tick-ms", "100"]);
        let pid = format!(r#"{{"pid": {}}}"#, std::process::id());
        let id = |v: Value| v["id"].as_u64().unwrap();
        let s = &server;
        // node-017: one claim a device (the two on 2-3 share one Koordinator claim).
        let alice = id(claim(
            s,
            &[
                "--memory",
                "49.8GiB",
                "--node",
                H017,
                "--devices",
                "0",
                "--project",
                "vision",
                "--holder",
                "alice",
                "--request",
                &pid,
            ],
        ));
        claim(
            s,
            &[
                "--memory",
                "20Gi",
                "--core",
                "30",
                "--shared",
                "1",
                "--node",
                H017,
                "--devices",
                "1",
                "--project",
                "vision",
                "--holder",
                "bob",
            ],
        );
        claim(
            s,
            &[
                "--ratio",
                "50",
                "--shared",
                "2",
                "--node",
                H017,
                "--devices",
                "2,3",
                "--project",
                "training",
                "--holder",
                "carol",
            ],
        );
        claim(
            s,
            &[
                "--fraction",
                "0.25",
                "--node",
                H017,
                "--devices",
                "4",
                "--project",
                "nlp",
                "--holder",
                "dave",
            ],
        );
        claim(
            s,
            &[
                "--memory",
                "8.2G",
                "--node",
                H017,
                "--devices",
                "5",
                "--project",
                "nlp",
                "--holder",
                "dave",
            ],
        );
        claim(
            s,
            &[
                "--request",
                &format!(r#"{{"gpu-memory-ratio": 30, "node": "{H017}", "devices": [6]}}"#),
                "--project",
                "vision",
                "--holder",
                "bob",
            ],
        );
        let freed = id(claim(
            s,
            &[
                "--gpus",
                "1",
                "--node",
                H017,
                "--devices",
                "7",
                "--project",
                "training",
            ],
        ));
        // node-018: a half, 10MB as written, and six whole GPUs.
        claim(
            s,
            &[
                "--fraction",
                "0.5",
                "--node",
                H018,
                "--devices",
                "0",
                "--project",
                "vision",
                "--holder",
                "alice",
            ],
        );
        claim(
            s,
            &[
                "--request",
                &format!(r#"{{"gpu_memory": "10MB", "node": "{H018}", "devices": [1]}}"#),
                "--project",
                "nlp",
                "--holder",
                "dave",
            ],
        );
        let six = id(claim(
            s,
            &[
                "--gpus",
                "6",
                "--node",
                H018,
                "--project",
                "training",
                "--holder",
                "erin",
            ],
        ));
        // The mixed A100 node: one claim per card size, then every card taken.
        let a100_80 = id(claim(
            s,
            &[
                "--memory",
                "30GiB",
                "--accelerator",
                "NVIDIA A100-SXM4-80GB",
                "--project",
                "vision",
                "--holder",
                "frank",
            ],
        ));
        let a100_40 = id(claim(
            s,
            &[
                "--memory",
                "20GiB",
                "--accelerator",
                "NVIDIA A100-SXM4-40GB",
                "--project",
                "vision",
                "--holder",
                "frank",
            ],
        ));
        claim(
            s,
            &[
                "--gpus",
                "4",
                "--node",
                A021,
                "--project",
                "training",
                "--holder",
                "erin",
            ],
        );
        claim(
            s,
            &[
                "--request",
                &format!(r#"{{"gpu-memory-ratio": 200, "gpu.shared": 2, "node": "{A021}"}}"#),
                "--project",
                "research",
                "--holder",
                "gina",
            ],
        );
        // Backoff: batch (owed most: it runs nothing) waits for 8 whole H100s, nlp for
        // one; when one frees, work fetch passes over batch and places nlp's.
        claim(
            s,
            &[
                "--gpus",
                "8",
                "--accelerator",
                "H100",
                "--project",
                "batch",
                "--holder",
                "hal",
                "--wait",
            ],
        );
        let nlp = id(claim(
            s,
            &[
                "--gpus",
                "1",
                "--accelerator",
                "H100",
                "--project",
                "nlp",
                "--holder",
                "dave",
                "--wait",
            ],
        ));
        let out = cli(s, &["release", &freed.to_string()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let start = Instant::now();
        while claims(s)
            .iter()
            .any(|c| c["id"] == nlp && c["state"] != "placed")
        {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "nlp's claim never placed"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // Three more that wait: two whole GPUs, 70GiB of an 80GB card, a held device.
        claim(
            s,
            &[
                "--gpus",
                "2",
                "--project",
                "research",
                "--holder",
                "gina",
                "--wait",
            ],
        );
        let pending_80 = id(claim(
            s,
            &[
                "--memory",
                "70GiB",
                "--accelerator",
                "NVIDIA A100-SXM4-80GB",
                "--project",
                "vision",
                "--holder",
                "frank",
                "--wait",
            ],
        ));
        claim(
            s,
            &[
                "--fraction",
                "0.5",
                "--node",
                H018,
                "--devices",
                "2",
                "--project",
                "nlp",
                "--holder",
                "dave",
                "--wait",
            ],
        );
        let all = claims(s);
        assert_eq!(all.len(), 18, "{all:#?}");
        let pending = all.iter().filter(|c| c["state"] == "pending").count();
        assert_eq!(pending, 4, "{all:#?}");
        Incident {
            server,
            _dir: dir,
            alice,
            six,
            a100_80,
            a100_40,
            pending_80,
        }
    }

    /// The incident and its console at 80x24 (with the console's home folder).
    fn at_80x24(tag: &str) -> (Incident, Session, tempfile::TempDir) {
        let inc = Incident::start();
        let home = tempfile::tempdir().unwrap();
        let s = inc.console(80, 24, tag, home.path());
        (inc, s, home)
    }

    /// The console on this serve, `w` x `h`.
    fn console(&self, w: u16, h: u16, tag: &str, home: &Path) -> Session {
        let token = self.server.dir.join("operator.token");
        let args = format!(
            "--endpoint {} --token-file {}",
            self.server.url,
            token.display()
        );
        let s = Session::console(w, h, tag, home, &args);
        s.wait_for("GPUs (24)");
        s
    }
}

/// The table rows of a screen: lines starting (inside the border) with a number (a
/// claim id, or a GPU index after the node) and the rows of GPUs (a node name).
fn table_rows(screen: &str) -> Vec<&str> {
    screen
        .lines()
        .filter(|l| {
            let cells: Vec<&str> = l.trim_start_matches('│').split_whitespace().collect();
            cells.first().is_some_and(|w| w.parse::<u64>().is_ok())
                || cells.first().is_some_and(|w| w.starts_with("prod-"))
        })
        .collect()
}

/// The row whose first cell (after the border) is `id`.
fn claim_row(screen: &str, id: u64) -> &str {
    let id = id.to_string();
    screen
        .lines()
        .find(|l| l.trim_start_matches('│').split_whitespace().next() == Some(id.as_str()))
        .unwrap_or_else(|| panic!("no row for claim {id}:\n{screen}"))
}

/// The claim ids in the Claims table on screen.
fn claim_ids(screen: &str) -> Vec<u64> {
    screen
        .lines()
        .filter(|l| l.starts_with('│'))
        .filter_map(|l| {
            l.trim_start_matches('│')
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

// Finding 2: columns cut identity.

#[test]
fn two_nodes_that_differ_at_the_end_are_told_apart_at_80x24() {
    let (_inc, s, _home) = Incident::at_80x24("f2nodes");
    let screen = s.wait_for("GPUs (24)");
    let rows = table_rows(&screen);
    let node_of = |r: &str| {
        r.trim_start_matches('│')
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    let nodes: std::collections::BTreeSet<String> = rows.iter().map(|r| node_of(r)).collect();
    // Before: both read `prod-h100-n`. Now a middle ellipsis keeps each one's end.
    assert!(
        nodes.len() >= 3,
        "017, 018 and 021 distinct: {nodes:?}\n{screen}"
    );
    for n in &nodes {
        assert!(
            n.ends_with("017") || n.ends_with("018") || n.ends_with("021"),
            "the end of the name is kept: {n}\n{screen}"
        );
        assert!(n.starts_with("prod-"), "{n}");
    }
}

#[test]
fn place_keeps_node_and_devices_and_ranges_read_2_7() {
    let (inc, s, _home) = Incident::at_80x24("f2place");
    s.keys(&["3"]);
    let screen = s.wait_for("Claims (18)");
    // Claims on node-017:0 and node-018:0 are no longer both `prod-h100-node-0`.
    let alice = claim_row(&screen, inc.alice);
    assert!(
        alice.contains("…e-017:0 ") || alice.contains(&format!("{H017}:0 ")),
        "{alice}"
    );
    let six = claim_row(&screen, inc.six);
    assert!(six.contains("-018:2-7 "), "a range, not `:2,3,4,5`: {six}");
    // ALLOC-like figures whole: 49.8G, not `49.8G/79.`.
    assert!(alice.contains(" 49.8G "), "{alice}");
    // At 120 columns PLACE has room for the whole name.
    s.resize(120, 40);
    let screen = s.wait_for("HOLDER");
    let alice = claim_row(&screen, inc.alice);
    assert!(alice.contains(&format!("{H017}:0 ")), "{alice}");
}

#[test]
fn alloc_whole_and_model_names_its_memory_size_in_gpus_and_fair_share() {
    let (inc, s, _home) = Incident::at_80x24("f2model");
    let screen = s.wait_for("GPUs (24)");
    let first = table_rows(&screen)[0];
    assert!(first.contains(" 49.8G/79.2G "), "ALLOC whole: {first}");
    assert!(first.contains("H100 80G"), "{first}");
    // The mixed node: 40 GB and 80 GB cards read differently.
    s.keys(&["/", "021", "Enter"]);
    let screen = s.wait_for("GPUs (8)");
    let rows = table_rows(&screen);
    assert_eq!(
        rows.iter().filter(|r| r.contains("A100 40G")).count(),
        4,
        "{screen}"
    );
    assert_eq!(
        rows.iter().filter(|r| r.contains("A100 80G")).count(),
        4,
        "{screen}"
    );
    // The claim for an 80GB card sits on one, the 40GB one on a 40GB card.
    let all = claims(&inc.server);
    let device = |id: u64| {
        let c = all.iter().find(|c| c["id"] == id).unwrap();
        c["shares"][0]["device"].as_u64().unwrap()
    };
    let on = |d: u64| {
        rows.iter()
            .find(|r| r.trim_start_matches('│').split_whitespace().nth(1) == Some(&d.to_string()))
            .unwrap()
            .to_string()
    };
    assert!(
        on(device(inc.a100_80)).contains("A100 80G"),
        "{}",
        on(device(inc.a100_80))
    );
    assert!(
        on(device(inc.a100_40)).contains("A100 40G"),
        "{}",
        on(device(inc.a100_40))
    );
    // Fair share: two A100 rows per project, told apart.
    s.keys(&["4"]);
    let screen = s.wait_for("Fair share (5)");
    assert!(
        screen.contains("A100 40G") && screen.contains("A100 80G"),
        "{screen}"
    );
}

#[test]
fn wide_layout_at_120_columns() {
    let inc = Incident::start();
    let home = tempfile::tempdir().unwrap();
    let s = inc.console(120, 40, "f2wide", home.path());
    let screen = s.wait_for("GPUs (24)");
    for col in ["MEMORY", "SHR", "MEM FREE", "GPU FREE", "FLAGS"] {
        assert!(screen.contains(col), "{col}:\n{screen}");
    }
    assert!(
        screen.contains(&format!("{H018} 7 ")),
        "whole node names:\n{screen}"
    );
    s.keys(&["3"]);
    let screen = s.wait_for("Claims (18)");
    for col in ["HOLDER", "FRACTION", "FORM", "LEASE"] {
        assert!(screen.contains(col), "{col}:\n{screen}");
    }
    let alice = claim_row(&screen, inc.alice);
    assert!(
        alice.contains(" alice ") && alice.contains("gpu_memory=49.8"),
        "{alice}"
    );
    // A form longer than FORM ends in `…`, never a cut that reads as another value.
    let ratio = claim_row(&screen, 3);
    let form = ratio[ratio.find("gpu-memory-ratio").unwrap()..]
        .split_whitespace()
        .next()
        .unwrap();
    assert!(
        ratio.contains("gpu-memory-ratio=50 gpu.shared=2") || form.ends_with('…'),
        "{ratio}"
    );
}

#[test]
fn flags_stay_at_60x20() {
    let home = tempfile::tempdir().unwrap();
    let s = Session::console(60, 20, "f2flags", home.path(), "--demo");
    let screen = s.wait_for("GPUs (28)");
    assert!(screen.contains("FLAGS"), "{screen}");
    s.keys(&["/", "uncl", "Enter"]);
    let screen = s.wait_for("filter:uncl");
    let rows: Vec<&str> = screen
        .lines()
        .filter(|l| l.contains(" unclaimed"))
        .collect();
    assert!(
        !rows.is_empty(),
        "the demo's unclaimed GPU shows its flag at 60 columns:\n{screen}"
    );
}

// Finding 3: misleading figures.

#[test]
fn overview_says_na_without_telemetry_and_columns_say_what_is_free() {
    let (_inc, s, _home) = Incident::at_80x24("f3na");
    s.keys(&["1"]);
    let screen = s.wait_for("Over limit");
    for (label, value) in [
        ("Memory used", "n/a"),
        ("Over limit", "n/a"),
        ("Idle", "n/a"),
        ("Unclaimed use", "n/a"),
        ("Claims", "14 placed, 4 pending"),
    ] {
        let line = screen
            .lines()
            .find(|l| l.trim_start_matches(['▸', ' ']).starts_with(label))
            .unwrap_or_else(|| panic!("{label}:\n{screen}"));
        let rest = line
            .trim_start_matches(['▸', ' '])
            .strip_prefix(label)
            .unwrap();
        assert!(rest.starts_with(' '), "label and value apart: {line}");
        assert!(rest.trim_start().starts_with(value), "{line}");
    }
    // The serve's telemetry note is longer than the NOTE column: it is shown whole below.
    let notes: String = screen
        .lines()
        .skip_while(|l| !l.contains("ep1 "))
        .skip(1)
        .map(|l| l.trim_matches(['│', ' ']))
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        notes.contains("ep1: the NVIDIA management library")
            && (notes.contains("libnvidia-ml.so.1") || notes.contains("grep nvidia`)")),
        "{screen}"
    );
    let compute = screen
        .lines()
        .find(|l| l.contains("Compute allocated"))
        .unwrap();
    assert!(
        compute.contains("Compute allocated "),
        "not `allocated13.65`: {compute}"
    );
    // GPUs: free memory and free compute are two named columns, not `FREE` and `FREE%`.
    s.keys(&["2"]);
    let screen = s.wait_for("GPUs (24)");
    assert!(
        screen.contains("MEM FREE") && screen.contains("GPU FREE"),
        "{screen}"
    );
    let held = table_rows(&screen)
        .into_iter()
        .find(|r| r.contains("e-017 7 "))
        .unwrap();
    assert!(held.contains("79.2G/79.2G n/a    0        0%"), "{held}");
}

#[test]
fn gpu_detail_lists_each_claims_share_on_this_gpu() {
    let (inc, s, _home) = Incident::at_80x24("f3detail");
    s.keys(&["/", "018", "Enter"]);
    s.wait_for("GPUs (8)");
    s.keys(&["j", "j", "Enter"]);
    let screen = s.wait_for(&format!("{H018}:2 "));
    // Claim `six` holds 475G over six GPUs; this GPU's share is one of them.
    let line = screen
        .lines()
        .find(|l| l.contains(&format!("claim {}", inc.six)))
        .unwrap_or_else(|| panic!("{screen}"));
    assert!(line.contains("79.2G / 1 GPU"), "{line}");
    assert!(!screen.contains("475G"), "{screen}");
}

#[test]
fn fair_share_has_one_debt_column_and_absolute_backoff_times() {
    let (_inc, s, _home) = Incident::at_80x24("f3fair");
    s.keys(&["4"]);
    let screen = s.wait_for("Fair share (5)");
    let header = screen.lines().find(|l| l.contains("PROJECT")).unwrap();
    assert_eq!(header.matches("DEBT").count(), 1, "{header}");
    assert!(header.contains("BACKED OFF UNTIL"), "{header}");
    // Debts of a fraction of a unit read `0`, not `-0`.
    assert!(!screen.contains(" -0 "), "{screen}");
    // batch's H100 row: until a local time of day, and what is left.
    let row = screen
        .lines()
        .skip_while(|l| !l.contains("batch"))
        .find(|l| l.contains("H100 80G"))
        .unwrap_or_else(|| panic!("{screen}"));
    let until = row.split(" - ").nth(1).unwrap_or_else(|| panic!("{row}"));
    let t: Vec<&str> = until
        .split_whitespace()
        .next()
        .unwrap()
        .split(':')
        .collect();
    assert!(
        t.len() == 3 && t.iter().all(|p| p.len() == 2 && p.parse::<u8>().is_ok()),
        "absolute HH:MM:SS: {row}"
    );
    assert!(
        until.contains('m') && until.contains('('),
        "and what is left: {row}"
    );
    // `!` lists the backed-off projects: batch alone.
    s.keys(&["!"]);
    let screen = s.wait_for("Fair share (1)");
    assert!(
        screen.contains("batch") && !screen.contains("vision"),
        "{screen}"
    );
}

#[test]
fn a_debt_under_half_a_unit_reads_0_not_minus_0() {
    use console_fixtures::{NOW, feed, lab_snapshot, lab_state};
    use gpuboard::console::headless::{buffer_text, render};
    use gpuboard::console::state::View;
    use gpuboard::console::update::show_view;
    let mut st = lab_state();
    let mut snap = lab_snapshot();
    for p in &mut snap.projects {
        for r in &mut p.resources {
            r.debt = -0.3;
        }
    }
    feed(&mut st, 0, snap, NOW.0);
    show_view(&mut st, View::Ledger);
    let theme = gpuboard::console::theme::load_strict("default", &[]).unwrap();
    let screen = buffer_text(&render(&st, &theme, 80, 24).unwrap());
    assert!(screen.contains("Fair share"), "{screen}");
    assert!(!screen.contains(" -0 "), "{screen}");
}

// Finding 4: problems could not be found.

#[test]
fn problem_lists_idle_and_unclaimed_match_what_state_and_flags_show() {
    let home = tempfile::tempdir().unwrap();
    let s = Session::console(80, 24, "f4uncl", home.path(), "--demo");
    s.wait_for("GPUs (28)");
    s.keys(&["/", "uncl", "Enter"]);
    let screen = s.wait_for("filter:uncl");
    let rows = screen
        .lines()
        .filter(|l| l.starts_with('│') && l.contains("G/"))
        .collect::<Vec<_>>();
    assert!(!rows.is_empty(), "{screen}");
    for r in &rows {
        assert!(r.contains("unclaimed"), "{r}\n{screen}");
    }
    // In Claims, `!` cycles the problem lists: over-limit first, then pending, then idle.
    s.keys(&["3"]);
    s.wait_for("Claims (");
    s.keys(&["!"]);
    s.wait_for("filter:over-limit");
    s.keys(&["!", "!"]);
    let screen = s.wait_until("the idle list, not empty", |now| {
        now.contains("filter:idle") && !claim_ids(now).is_empty()
    });
    let ids = claim_ids(&screen);
    for id in ids {
        assert!(claim_row(&screen, id).contains(" idle "), "{screen}");
    }
}

#[test]
fn sort_by_over_limit_puts_the_over_limit_claims_first() {
    let home = tempfile::tempdir().unwrap();
    let s = Session::console(80, 24, "f4over", home.path(), "--demo");
    s.wait_for("GPUs (28)");
    s.keys(&["3"]);
    s.wait_for("Claims (");
    s.keys(&[":", "sort over", "Enter"]);
    // USED carries a `!` mark when over the reservation (`23.4G!`).
    let marked = |screen: &str| -> Vec<bool> {
        claim_ids(screen)
            .iter()
            .map(|&id| {
                claim_row(screen, id)
                    .split_whitespace()
                    .any(|c| c.len() > 1 && c.ends_with('!'))
            })
            .collect()
    };
    // The demo's use moves: wait for a screen where some claim on it is over its limit.
    let screen = s.wait_until("sorted, with an over-limit claim shown", |now| {
        now.contains("sort:over") && marked(now).contains(&true)
    });
    let over = marked(&screen);
    assert!(
        over.first() == Some(&true),
        "an over-limit claim on top:\n{screen}"
    );
    let first_not = over.iter().position(|o| !o).unwrap_or(over.len());
    assert!(
        over[first_not..].iter().all(|o| !o),
        "over-limit claims together first:\n{screen}"
    );
}

#[test]
fn page_down_visits_every_claim_at_80x24() {
    let (inc, s, _home) = Incident::at_80x24("f4pgdn");
    s.keys(&["3"]);
    let mut screen = s.wait_for("Claims (18)");
    let mut seen: std::collections::BTreeSet<u64> = claim_ids(&screen).into_iter().collect();
    let visible = seen.len();
    assert!(
        visible < 18,
        "the table shows fewer than 18 rows at 80x24:\n{screen}"
    );
    for _ in 0..4 {
        let before = screen.clone();
        s.keys(&["PageDown"]);
        screen = s.wait_until("the page to move", |now| {
            claim_ids(now) != claim_ids(&before) || claim_ids(now).contains(&19)
        });
        seen.extend(claim_ids(&screen));
    }
    let all: std::collections::BTreeSet<u64> = claims(&inc.server)
        .iter()
        .map(|c| c["id"].as_u64().unwrap())
        .collect();
    assert_eq!(seen, all, "every claim shown by paging");
}

#[test]
fn events_scroll_to_the_oldest() {
    let (inc, s, _home) = Incident::at_80x24("f4events");
    s.keys(&["6"]);
    let screen = s.wait_for("Audit events (");
    let oldest = format!("claim {} ", inc.alice);
    assert!(
        !screen.contains(&oldest),
        "the newest first, the oldest off screen:\n{screen}"
    );
    s.keys(&["End"]);
    let screen = s.wait_for(&oldest);
    assert!(screen.contains("gpu_memory=49."), "{screen}");
    s.keys(&["Home"]);
    s.wait_until("back at the newest", |now| !now.contains(&oldest));
}

#[test]
fn a_pending_claim_shows_every_reason_and_enter_opens_its_detail() {
    let (inc, s, _home) = Incident::at_80x24("f4pending");
    s.keys(&["3"]);
    s.wait_for("Claims (18)");
    s.keys(&["/", "pending", "Enter"]);
    let screen = s.wait_for("Claims (4)");
    let ids = claim_ids(&screen);
    let at = ids.iter().position(|&id| id == inc.pending_80).unwrap();
    for _ in 0..at {
        s.keys(&["j"]);
    }
    let screen = s.wait_for(&format!("claim {} on ep1", inc.pending_80));
    // The panel under the table says how many reasons there are, and where to read them.
    assert!(
        screen.contains("why pending (1 of 4, Enter lists all)"),
        "{screen}"
    );
    s.keys(&["Enter"]);
    // Waits for the whole list: a capture taken mid-redraw has the title before the rest.
    let screen = s.wait_until("every reason of the pending claim", |sc| {
        sc.contains("Why pending (4 reasons)")
            && sc.contains("fair share on gpu:NVIDIA A100-SXM4-80GB")
            && sc.contains("4/8 GPUs other accelerator type")
    });
    for node in [H017, H018, A021] {
        assert!(
            screen.contains(&format!("node {node}: ")),
            "{node}:\n{screen}"
        );
    }
    assert!(
        screen.contains("fair share on gpu:NVIDIA A100-SXM4-80GB"),
        "{screen}"
    );
    // The 40GB cards count as another type, never as a place for 70GiB of an 80GB card.
    assert!(
        screen.contains("4/8 GPUs other accelerator type"),
        "{screen}"
    );
}

#[test]
fn holder_and_pid_are_visible_at_80x24() {
    let (inc, s, _home) = Incident::at_80x24("f4holder");
    s.keys(&["3"]);
    let screen = s.wait_for("Claims (18)");
    // Claim 1 is selected: the panel under the table names its holder.
    assert!(screen.contains("holder alice"), "{screen}");
    s.keys(&["Enter"]);
    let screen = s.wait_for(&format!("claim {} placed on ep1", inc.alice));
    let line = screen.lines().find(|l| l.contains("holder")).unwrap();
    assert!(line.contains("alice"), "{line}");
    assert!(
        line.contains(&format!("pid {}", std::process::id())),
        "{line}"
    );
}

// Finding 5: smaller.

/// Moves the Overview's cursor down to the count labelled `label`, one key at a time,
/// each seen to move the `▸` before the next (only counts with a list take the cursor).
fn overview_cursor_to(s: &Session, label: &str) {
    let marked = |screen: &str| -> Option<String> {
        screen
            .lines()
            .find(|l| l.starts_with('▸'))
            // The label's column: `▸` and 18 characters.
            .map(|l| l.chars().take(19).collect())
    };
    let start = Instant::now();
    while !s.screen().contains(&format!("▸{label}")) {
        assert!(start.elapsed() < Duration::from_secs(30), "{}", s.screen());
        let before = marked(&s.screen());
        s.keys(&["j"]);
        s.wait_until("the cursor to move", |now| marked(now) != before);
    }
}

/// The SGR parameters (`1;3;4`) in force where `text` starts on `line` (the last escape
/// before it).
fn sgr_before<'a>(line: &'a str, text: &str) -> &'a str {
    let at = line
        .find(text)
        .unwrap_or_else(|| panic!("{text} in {line:?}"));
    let esc = line[..at]
        .rfind("\x1b[")
        .unwrap_or_else(|| panic!("no style before {text}: {line:?}"));
    line[esc + 2..at].trim_end_matches('m')
}

#[test]
fn in_mono_over_limit_does_not_look_like_the_selection() {
    let home = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_gpuboard");
    let script = format!(
        "env NO_COLOR=1 HOME={h} XDG_CONFIG_HOME={h}/config XDG_STATE_HOME={h}/state {bin} --demo; sleep 60",
        h = home.path().display()
    );
    let s = Session::start(80, 24, "f5mono", &script);
    s.wait_for("GPUs (28)");
    s.keys(&["3"]);
    s.wait_for("Claims (");
    s.keys(&["!"]);
    s.wait_for("filter:over-limit");
    s.wait_until("an over-limit row", |now| now.contains("G!"));
    let styled = s.styled_screen();
    let rows: Vec<&str> = styled.lines().filter(|l| l.contains("G!")).collect();
    assert!(!rows.is_empty(), "{styled}");
    let selected = styled
        .lines()
        .filter(|l| l.starts_with('│') && l.contains("\x1b[7m"))
        .count();
    assert_eq!(selected, 1, "one selected row, in reverse video:\n{styled}");
    for r in rows {
        // The USED figure: from the end of the escape before it to its `!`.
        let end = r.find("G!").unwrap() + 2;
        let used = &r[r[..end].rfind('m').unwrap() + 1..end];
        let over = sgr_before(r, used);
        let params: Vec<&str> = over.split(';').collect();
        assert!(
            params.contains(&"4"),
            "over-limit is underlined: {over:?} in {r:?}"
        );
        if !r.contains("\x1b[7m") {
            assert!(
                !params.contains(&"7"),
                "an unselected over-limit row is not reversed: {r:?}"
            );
        }
    }
}

#[test]
fn each_view_keeps_its_own_filter() {
    let (_inc, s, _home) = Incident::at_80x24("f5filter");
    s.keys(&["3"]);
    s.wait_for("Claims (18)");
    s.keys(&["/", "vision", "Enter"]);
    s.wait_for("filter:vision");
    s.keys(&["2"]);
    let screen = s.wait_for("GPUs (24)");
    assert!(!screen.contains("filter:"), "{screen}");
    s.keys(&["3"]);
    let screen = s.wait_for("filter:vision");
    for id in claim_ids(&screen) {
        assert!(claim_row(&screen, id).contains(" vision "), "{screen}");
    }
}

#[test]
fn esc_returns_where_you_came_from() {
    let (_inc, s, _home) = Incident::at_80x24("f5esc");
    // Claims -> claim detail -> Esc: Claims, same claim selected (not GPUs).
    s.keys(&["3"]);
    s.wait_for("Claims (18)");
    s.keys(&["j", "j"]);
    s.wait_for("claim 3 on ep1");
    s.keys(&["Enter"]);
    s.wait_for("claim 3 placed on ep1");
    let screen = s.escape_from("claim 3 placed on ep1");
    let screen = if screen.contains("Claims (18)") {
        screen
    } else {
        s.wait_for("Claims (18)")
    };
    assert!(screen.contains("claim 3 on ep1"), "{screen}");
    // Overview -> a count's list -> Esc: the Overview.
    s.keys(&["1"]);
    s.wait_for("Sources");
    overview_cursor_to(&s, "Claims");
    s.keys(&["Enter"]);
    s.wait_for("Claims (");
    s.escape_from("Claims (");
    s.wait_for("▸Claims");
    // GPU detail (5) from Claims: Esc goes back to Claims, not to GPUs.
    s.keys(&["3"]);
    s.wait_for("Claims (18)");
    s.keys(&["5"]);
    s.wait_for("no GPU selected");
    s.escape_from("no GPU selected");
    s.wait_for("Claims (18)");
    // GPU detail opened from GPUs: Esc goes back to GPUs.
    s.keys(&["2"]);
    s.wait_for("GPUs (24)");
    s.keys(&["Enter"]);
    s.wait_for("Processes and claims");
    s.escape_from("Processes and claims");
    s.wait_for("GPUs (24)");
}

#[test]
fn long_messages_wrap_whole_and_the_footer_names_keys() {
    let (_inc, s, _home) = Incident::at_80x24("f5flash");
    let screen = s.wait_for("GPUs (24)");
    let footer = screen.lines().rev().nth(1).unwrap();
    assert!(
        footer.contains("enter open") && footer.contains("x cordon"),
        "{footer}"
    );
    assert!(
        !footer.contains('_'),
        "human names, not `sort_next`: {footer}"
    );
    // The problem-list message is longer than a line: it wraps, its end visible.
    s.keys(&["!"]);
    s.wait_until("the whole message, its end visible", |sc| {
        sc.contains("Message") && sc.contains("stale)")
    });
}

#[test]
fn move_picker_lists_the_roomiest_first_and_follows_j_k() {
    let (inc, s, _home) = Incident::at_80x24("f5move");
    s.keys(&["3"]);
    s.wait_for("Claims (18)");
    s.keys(&["m"]);
    let screen = s.wait_for(&format!("Move claim {} from", inc.alice));
    let targets: Vec<&str> = screen
        .lines()
        .filter_map(|l| l.split('│').nth(2))
        .filter(|c| c.starts_with("prod-"))
        .collect();
    assert!(targets.len() >= 3, "{screen}");
    // One line per GPU: a row never wraps (it pushed the selection out of the window).
    let inside: Vec<&str> = screen.lines().filter_map(|l| l.split('│').nth(2)).collect();
    assert!(
        !inside
            .iter()
            .any(|c| c.starts_with("(too") || c.starts_with("full)")),
        "{screen}"
    );
    assert!(
        targets
            .iter()
            .all(|t| t.contains(" H100 80G ") || t.contains(" A100 ")),
        "{targets:?}"
    );
    let free = |t: &str| -> f64 {
        let gib = t
            .split(" GiB free")
            .next()
            .unwrap()
            .rsplit(' ')
            .next()
            .unwrap();
        gib.parse().unwrap_or_else(|_| panic!("{t}"))
    };
    // The most free first; a full GPU never ahead of one with room.
    let firsts: Vec<f64> = targets.iter().take(3).map(|t| free(t)).collect();
    assert!(firsts.windows(2).all(|w| w[0] >= w[1]), "{targets:?}");
    let second = targets[1].split_whitespace().next().unwrap();
    s.keys(&["j", "Enter"]);
    let screen = s.wait_for("[ Cancel ]");
    assert!(
        screen.contains(&format!("to {second}")) || screen.contains(second),
        "j picked the second:\n{screen}"
    );
    s.keys(&["Enter"]);
}

#[test]
fn command_completion_lists_candidates() {
    let (_inc, s, _home) = Incident::at_80x24("f5colon");
    s.keys(&[":", "so"]);
    let screen = s.wait_for(":so");
    let line = screen.lines().find(|l| l.starts_with(":so")).unwrap();
    for cand in ["sort", "source"] {
        assert!(line.contains(cand), "{line}");
    }
}

#[test]
fn the_demo_shows_physically_possible_figures() {
    let home = tempfile::tempdir().unwrap();
    let s = Session::console(120, 40, "f5demo", home.path(), "--demo");
    let gib = |v: &str| -> f64 {
        let (n, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len()));
        let n: f64 = n.parse().unwrap_or_else(|_| panic!("{v}"));
        match unit {
            "T" => n * 1024.0,
            "G" | "" => n,
            "M" => n / 1024.0,
            "K" => n / 1024.0 / 1024.0,
            _ => panic!("{v}"),
        }
    };
    // Three refreshes of the whole fleet: used never above the card's memory.
    for _ in 0..3 {
        let screen = s.wait_for("GPUs (28)");
        let mut checked = 0;
        for row in screen
            .lines()
            .filter(|l| l.contains('/') && l.starts_with('│'))
        {
            let cells: Vec<&str> = row.trim_matches('│').split_whitespace().collect();
            let Some(alloc) = cells.iter().find(|c| c.contains('/') && c.ends_with('G')) else {
                continue;
            };
            let total = gib(alloc.split('/').nth(1).unwrap());
            let at = cells.iter().position(|c| c == alloc).unwrap();
            let used = cells[at + 1];
            if used != "n/a" {
                assert!(
                    gib(used.trim_end_matches('!')) <= total,
                    "used {used} of {total}G: {row}"
                );
                checked += 1;
            }
        }
        assert!(checked >= 20, "{screen}");
        std::thread::sleep(Duration::from_millis(1_100));
    }
}

// The correctness bugs found on the way.

#[test]
fn decimal_quantities_per_device_accelerators_and_a_409_said_once() {
    let inc = Incident::start();
    let all = claims(&inc.server);
    let get = |id: u64| all.iter().find(|c| c["id"] == id).unwrap().clone();
    // `--memory 49.8GiB` and `8.2G` were refused; an inventory at 79.2GiB stopped serve.
    // Its form, and the node and device the scenario pinned it to.
    assert_eq!(
        get(inc.alice)["form"],
        "gpu_memory=49.8GiB node=prod-h100-node-017 devices=0"
    );
    assert!(
        all.iter().any(|c| c["form"]
            .as_str()
            .is_some_and(|f| f.starts_with("gpu_memory=8.2GB"))),
        "{all:#?}"
    );
    assert!(
        all.iter().any(|c| c["form"]
            .as_str()
            .is_some_and(|f| f.starts_with("gpu_memory=10MB"))),
        "{all:#?}"
    );
    // Per device on model and memory size: 80GB cards are 4-7 of the mixed node.
    let dev = |id: u64| get(id)["shares"][0]["device"].as_u64().unwrap();
    assert!((4..8).contains(&dev(inc.a100_80)), "{:#}", get(inc.a100_80));
    assert!((0..4).contains(&dev(inc.a100_40)), "{:#}", get(inc.a100_40));
    // batch's 8 GPUs: node-018's largest free (79.2 GiB less the 10MB claim's 16M) and
    // what it needs read alike at one decimal, so the reason says the shortfall.
    let batch = all.iter().find(|c| c["project"] == "batch").unwrap();
    let on_018 = batch["pending_reasons"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|r| {
            r.as_str()
                .filter(|r| r.starts_with(&format!("node {H018}:")))
        })
        .unwrap_or_else(|| panic!("{batch:#}"));
    assert!(on_018.ends_with(" more)"), "{on_018}");
    // A refusal (409, exit 4) names each reason once on stderr.
    let out = cli(
        &inc.server,
        &[
            "claim",
            "--memory",
            "70GiB",
            "--accelerator",
            "NVIDIA A100-SXM4-80GB",
        ],
    );
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.matches(&format!("node {A021}:")).count(), 1, "{err}");
    assert_eq!(err.matches(&format!("node {H017}:")).count(), 1, "{err}");
}

#[test]
fn a_claim_on_two_gpus_moves_to_two_gpus_from_the_console() {
    let (inc, s, _home) = Incident::at_80x24("move2");
    s.keys(&["3"]);
    s.wait_for("Claims (18)");
    s.keys(&["/", "training", "Enter"]);
    s.wait_for("filter:training");
    s.keys(&["m"]);
    let screen = s.wait_for("Move claim 3 from");
    let targets: Vec<&str> = screen
        .lines()
        .filter_map(|l| l.split('│').nth(2))
        .filter(|c| c.starts_with("prod-"))
        .collect();
    let at = targets
        .iter()
        .position(|t| t.starts_with(&format!("{H017}:4 ")))
        .unwrap_or_else(|| panic!("{screen}"));
    for _ in 0..at {
        s.keys(&["j"]);
    }
    s.keys(&["Enter"]);
    // The dialog names both GPUs it goes to (the picked one and the next on its node).
    let screen = s.wait_for("[ Cancel ]");
    let dialog: String = screen
        .lines()
        .map(|l| l.trim_matches(['│', ' ']))
        .collect::<Vec<_>>()
        .join(" ");
    assert!(dialog.contains(&format!("{H017}:4,5")), "{screen}");
    s.keys(&["Tab", "Enter"]);
    let start = Instant::now();
    loop {
        let all = claims(&inc.server);
        let c = all.iter().find(|c| c["id"] == 3).unwrap();
        let devices: Vec<u64> = c["shares"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["device"].as_u64().unwrap())
            .collect();
        if devices == [4, 5] {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{c:#}\n{}",
            s.screen()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    s.wait_for("-017:4-5 ");
}

// Finding 1 beyond GPUs: every mutating action names its target and waits for a yes.

#[test]
fn b_names_the_backed_off_project_and_clears_it_only_when_confirmed() {
    let (_inc, s, _home) = Incident::at_80x24("f1reset");
    s.keys(&["4"]);
    s.wait_for("Fair share (5)");
    // batch is the first project (sorted by name): `b` asks, Cancel focused.
    s.keys(&["b"]);
    let screen = s.wait_for("[ Cancel ]");
    assert!(
        screen.contains("Clear project batch's backoffs"),
        "{screen}"
    );
    assert!(
        screen.contains("Backed off now on: gpu:NVIDIA H100 80GB HBM3"),
        "{screen}"
    );
    s.keys(&["Enter"]);
    s.wait_until("the dialog closed", |now| !now.contains("[ Cancel ]"));
    // Cancel sent nothing: still backed off on screen.
    let row = s
        .screen()
        .lines()
        .skip_while(|l| !l.contains("batch"))
        .find(|l| l.contains("H100 80G"))
        .unwrap()
        .to_string();
    assert!(h100_backed_off(&row), "{row}");
    // Confirmed: the backoff goes.
    s.keys(&["b"]);
    s.wait_for("[ Cancel ]");
    s.keys(&["Tab", "Enter"]);
    s.wait_until("batch's H100 backoff cleared", |now| {
        now.lines()
            .skip_while(|l| !l.contains("batch"))
            .find(|l| l.contains("H100 80G"))
            .is_some_and(|l| !h100_backed_off(l))
    });
}

/// Whether a Fair share row of the H100 resource shows a time in BACKED OFF UNTIL (the
/// third figure after the resource: DEBT, D, then `-` or the time).
fn h100_backed_off(row: &str) -> bool {
    row.split("H100 80G")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().nth(2))
        .is_some_and(|until| until != "-")
}

#[test]
fn in_claims_the_selection_follows_the_claim_as_claims_come_and_go() {
    let home = tempfile::tempdir().unwrap();
    let s = Session::console(80, 24, "f1claims", home.path(), "--demo");
    s.wait_for("GPUs (28)");
    s.keys(&["3"]);
    s.wait_for("Claims (");
    let picked = |screen: &str| -> Option<u64> {
        let l = screen.lines().find(|l| l.contains(" on demo: "))?;
        l.split("claim ")
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    // Down five rows, each key seen before the next (so none is still in flight).
    let mut first = s.wait_until("a claim selected", |now| picked(now).is_some());
    for _ in 0..5 {
        let before = picked(&first);
        s.keys(&["j"]);
        first = s.wait_until("the selection to move", |now| {
            picked(now).is_some() && picked(now) != before
        });
    }
    let id = picked(&first).unwrap();
    let count = |screen: &str| -> Option<String> {
        let l = screen.lines().find(|l| l.contains("Claims ("))?;
        Some(l.split("Claims (").nth(1)?.split(')').next()?.to_string())
    };
    let (ids, n) = (claim_ids(&first), count(&first));
    // The demo's workload adds and removes claims: wait until the table changed.
    let changed = s.wait_until("claims to come or go", |now| {
        claim_ids(now) != ids || count(now) != n
    });
    if claim_ids(&changed).contains(&id) {
        assert_eq!(picked(&changed), Some(id), "{changed}");
        // The release dialog names that same claim.
        s.keys(&["r"]);
        let dialog = s.wait_for("[ Cancel ]");
        assert!(dialog.contains(&format!("claim {id}")), "{dialog}");
        s.keys(&["Enter"]);
    }
}

#[test]
fn events_say_who_was_backed_off_until_when_in_words() {
    let (_inc, s, _home) = Incident::at_80x24("f4ledger");
    s.keys(&["6"]);
    s.wait_for("Audit events (");
    s.keys(&["/", "fairshare", "Enter"]);
    let screen = s.wait_for("Audit events (1)");
    let panel: String = screen
        .lines()
        .skip_while(|l| !l.contains("Selected event"))
        .skip(1)
        .take(2)
        .map(|l| l.trim_matches(['│', ' ']))
        .collect::<Vec<_>>()
        .join(" ");
    // Not the ledger's JSON (`{"event":"back`), and not cut at DETAIL's 14 columns.
    assert!(
        panel.contains("batch backed off on gpu:NVIDIA H100 80GB HBM3 until 20"),
        "{screen}"
    );
    assert!(panel.contains("(interval "), "{screen}");
    assert!(!screen.contains("{\"event\""), "{screen}");
}

#[test]
fn the_overview_over_limit_count_opens_the_over_limit_claims() {
    let home = tempfile::tempdir().unwrap();
    let s = Session::console(80, 24, "f4count", home.path(), "--demo");
    s.wait_for("GPUs (28)");
    s.keys(&["1"]);
    s.wait_for("Sources");
    overview_cursor_to(&s, "Over limit");
    s.keys(&["Enter"]);
    let screen = s.wait_until("the over-limit list, not empty", |now| {
        now.contains("filter:over-limit") && !claim_ids(now).is_empty()
    });
    for id in claim_ids(&screen) {
        let row = claim_row(&screen, id);
        assert!(
            row.split_whitespace()
                .any(|c| c.len() > 1 && c.ends_with('!')),
            "{row}\n{screen}"
        );
    }
}

// Issue 25: act on exactly what the operator named; answer the README's incident
// questions in the keys it says.

/// The serve's audit events (from `status --once --json`), each `action target`.
fn audit(server: &Server) -> Vec<String> {
    let out = cli(server, &["status", "--once", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["sources"][0]["snapshot"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["action"].as_str().unwrap_or_default(),
                e["target"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// The serve's cordoned GPUs, as `node:index`.
fn cordoned(server: &Server) -> Vec<String> {
    let out = cli(server, &["status", "--once", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut found = Vec::new();
    for n in doc["sources"][0]["snapshot"]["nodes"].as_array().unwrap() {
        for d in n["devices"].as_array().unwrap() {
            if d["cordoned"] == true {
                found.push(format!("{}:{}", n["name"].as_str().unwrap(), d["index"]));
            }
        }
    }
    found
}

/// Esc until `text` is gone (the first Esc may only dismiss a message); at most three.
fn esc_until_gone(s: &Session, text: &str) {
    for _ in 0..3 {
        if !s.screen().contains(text) {
            return;
        }
        s.keys(&["Escape"]);
        std::thread::sleep(Duration::from_millis(400));
    }
    s.wait_until(&format!("`{text}` gone after Esc"), |now| {
        !now.contains(text)
    });
}

/// Runs `text` on the console's `:` line.
fn colon(s: &Session, text: &str) {
    s.keys(&[":"]);
    s.wait_for(":▏");
    s.keys(&[text]);
    s.wait_for(&format!(":{text}"));
    s.keys(&["Enter"]);
}

#[test]
fn i25_commands_reach_exactly_the_gpu_and_claim_named_or_send_nothing() {
    let (inc, s, _home) = Incident::at_80x24("i25named");
    let events_before = audit(&inc.server);
    // The hint names what Enter will do with a GPU named by the end of its node's name,
    // never "no such command" for a command that runs.
    s.keys(&[":"]);
    s.wait_for(":▏");
    s.keys(&["gpu 018:3"]);
    let screen = s.wait_for(&format!("Enter: open {H018}:3"));
    assert!(!screen.contains("no such command"), "{screen}");
    s.keys(&["Escape"]);
    s.wait_until("the command line closed", |now| !now.contains(":gpu 018:3"));
    // The selected row is node-017:0; the command names node-018:3.
    colon(&s, &format!("cordon {H018} 3"));
    let screen = s.wait_for("[ Cancel ]");
    assert!(
        screen.contains(&format!("You typed: cordon {H018} 3")),
        "{screen}"
    );
    assert!(!screen.contains(&format!("{H017}:0")), "{screen}");
    // Enter with nothing typed, on the focused Cancel: closed, nothing sent.
    s.keys(&["Enter"]);
    s.wait_until("the dialog closed", |now| !now.contains("[ Cancel ]"));
    assert!(cordoned(&inc.server).is_empty());
    // Named in full: typed once, so Enter confirms that GPU and no other. From the
    // Overview, where no GPU is selected, `x` opens `:cordon ` for the name: three keys
    // (x, Enter, Enter) besides it.
    s.keys(&["1"]);
    s.keys(&["x"]);
    s.wait_for(":cordon ▏");
    s.keys(&[&format!("{H018}:3")]);
    s.wait_for(&format!(":cordon {H018}:3"));
    s.keys(&["Enter"]);
    s.wait_for("[ Cancel ]");
    s.wait_for(&format!("{H018}:3_"));
    s.keys(&["Enter"]);
    let start = Instant::now();
    while cordoned(&inc.server).is_empty() {
        assert!(start.elapsed() < Duration::from_secs(30), "{}", s.screen());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(cordoned(&inc.server), vec![format!("{H018}:3")]);
    // What is not there, or not in that state, is refused on screen and never sent.
    colon(&s, &format!("uncordon {H017} 0"));
    s.wait_for("is not cordoned");
    colon(&s, "cordon node-c 3");
    s.wait_for("no node `node-c`");
    colon(&s, "release 999");
    s.wait_for("no claim `999`");
    // `:r ID` (the release key as a command) in another view, with another claim
    // selected: that claim; frank's, so its id must be typed, and the command typed it:
    // Enter releases. Five keys besides the id.
    s.keys(&["3"]);
    s.wait_for("Claims (18)");
    let id = inc.a100_40.to_string();
    colon(&s, &format!("r {id}"));
    let screen = s.wait_for("[ Cancel ]");
    assert!(
        screen.contains(&format!("Release claim {id} on")),
        "{screen}"
    );
    s.wait_for(&format!("confirm: {id}_"));
    s.keys(&["Enter"]);
    s.wait_for("Claims (17)");
    let left = claims(&inc.server);
    assert_eq!(left.len(), 17);
    assert!(left.iter().all(|c| c["id"] != inc.a100_40));
    let new: Vec<String> = audit(&inc.server)
        .into_iter()
        .filter(|e| !events_before.contains(e))
        .filter(|e| e.starts_with("cordon") || e.starts_with("release"))
        .collect();
    assert_eq!(new.len(), 2, "one cordon and one release only: {new:?}");
}

#[test]
fn i25_the_readme_incident_questions_in_the_keys_it_says_at_80x24() {
    let (inc, s, _home) = Incident::at_80x24("i25keys");
    // Who holds GPU 3 on node-018: `:gpu NODE:INDEX` Enter, from any view.
    s.keys(&["3"]);
    s.wait_for("Claims (18)");
    colon(&s, &format!("gpu {H018}:3"));
    let screen = s.wait_for("erin");
    assert!(screen.contains(&format!("{H018}:3")), "{screen}");
    assert!(screen.contains(&inc.six.to_string()), "{screen}");
    s.escape_from("erin");
    // Or a filter as the screens print it (`018:3`), then Enter.
    s.keys(&["2"]);
    s.wait_for("GPUs (24)");
    s.keys(&["/", "018:3", "Enter"]);
    s.wait_for("GPUs (1)");
    s.keys(&["Enter"]);
    s.wait_for("erin");
    s.escape_from("erin");
    esc_until_gone(&s, "filter:018:3");
    // Over limit: `3` `!`; no claim's use is measured on this serve: n/a, not 0.
    s.keys(&["3"]);
    s.wait_for("Claims (18)");
    s.keys(&["!"]);
    let screen = s.wait_for("filter:over-limit");
    assert!(screen.contains("Claims (n/a)"), "{screen}");
    assert!(
        screen.contains("n/a (no claim's use is measured)"),
        "{screen}"
    );
    esc_until_gone(&s, "filter:over-limit");
    // Idle GPUs: `2` `!` (no telemetry here: n/a); `!` again, unclaimed.
    s.keys(&["2"]);
    s.wait_for("GPUs (24)");
    s.keys(&["!"]);
    let screen = s.wait_for("filter:idle");
    assert!(screen.contains("GPUs (n/a)"), "{screen}");
    s.keys(&["!"]);
    s.wait_for("filter:unclaimed");
    esc_until_gone(&s, "filter:unclaimed");
    // Why is claim c pending: `:claim c` Enter, every reason.
    colon(&s, &format!("claim {}", inc.pending_80));
    s.wait_for("Why pending (");
    s.escape_from("Why pending (");
    // Backed off: `4` `!`.
    s.keys(&["4"]);
    s.wait_for("Fair share (5)");
    s.keys(&["!"]);
    let screen = s.wait_for("filter:backed-off");
    assert!(screen.contains("batch"), "{screen}");
    // Stale sources and the Overview's counts: `1`.
    s.keys(&["1"]);
    s.wait_for("Sources");
}

#[test]
fn i25_demo_with_a_config_present_is_the_demo_alone() {
    let inc = Incident::start();
    let home = tempfile::tempdir().unwrap();
    let cfg_dir = home.path().join("config/gpuboard");
    std::fs::create_dir_all(&cfg_dir).unwrap();
    let config = format!(
        "[[endpoints]]\nname = \"real\"\nurl = \"{}\"\ntoken_file = \"{}\"\n",
        inc.server.url,
        inc.server.dir.join("operator.token").display()
    );
    std::fs::write(cfg_dir.join("config.toml"), &config).unwrap();
    let status = |extra: &[&str]| -> Vec<String> {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpuboard"))
            .args(["status", "--once", "--json"])
            .args(extra)
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .env("XDG_STATE_HOME", home.path().join("state"))
            .env_remove("GPUBOARD_TOKEN")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["sources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect()
    };
    // The config is read when asked for, and names its endpoint beside the demo.
    assert_eq!(status(&["--demo"]), vec!["demo"]);
    let file = cfg_dir.join("config.toml");
    assert_eq!(
        status(&["--demo", "--config", file.to_str().unwrap()]),
        vec!["demo", "real"]
    );
    // The console: the demo's GPUs only; a cordon on its selected row reaches no real
    // endpoint.
    let s = Session::console(80, 24, "i25demo", home.path(), "--demo");
    let screen = s.wait_for("GPUs (28)");
    assert!(!screen.contains("prod-"), "{screen}");
    s.keys(&["x"]);
    s.wait_for("[ Cancel ]");
    s.keys(&["Tab", "Enter"]);
    s.wait_until("the dialog closed", |now| !now.contains("[ Cancel ]"));
    std::thread::sleep(Duration::from_millis(500));
    assert!(cordoned(&inc.server).is_empty());
    assert!(
        !audit(&inc.server).iter().any(|e| e.starts_with("cordon")),
        "{:?}",
        audit(&inc.server)
    );
}
