//! The claim detail and the Fair share reasons on the real binary in tmux at 80x24, over
//! real `gpuboard serve` endpoints: open a claim's detail (Enter in Claims, `:claim ID`),
//! read it, release and move the claim from inside it, move one to another endpoint from
//! the move picker (audited on both with one move id), `--dump-screen claim:ID`, and the
//! Fair share "Why not now" pane opened whole with Enter. What the console did is checked
//! over the API too. Waits poll the screen with a deadline; nothing asserts a timing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::text;
use crate::common::tmux;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Server;
use serde_json::Value;
use tmux::Session;

/// A real serve over one node `NODE` with `gpus` 40 GiB A100s, and its files.
struct Endpoint {
    server: Server,
    _dir: tempfile::TempDir,
}

impl Endpoint {
    fn start(node: &str, gpus: u32) -> Endpoint {
        let dir = tempfile::tempdir().unwrap();
        let inv =
            common::one_node_inventory(dir.path(), node, "NVIDIA A100-SXM4-40GB", "40GiB", gpus);
        let server = Server::start(&dir.path().join("data"), &inv, &["--tick-ms", "100"]);
        Endpoint { server, _dir: dir }
    }

    /// `gpuboard claim ARGS --json`: the claim's id.
    fn claim(&self, args: &[&str]) -> u64 {
        let mut all = vec!["claim", "--json"];
        all.extend_from_slice(args);
        let out = self.server.cli(&all);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["id"].as_u64().unwrap()
    }

    /// The claims `gpuboard ls --json` lists.
    fn claims(&self) -> Vec<Value> {
        let out = self.server.cli(&["ls", "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn claim_json(&self, id: u64) -> Option<Value> {
        self.claims().into_iter().find(|c| c["id"] == id)
    }

    /// `GET /v1/snapshot` with the operator token.
    fn snapshot(&self) -> Value {
        let url = format!("{}/v1/snapshot", self.server.url);
        let token = self.server.operator_token();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                common::http()
                    .get(url)
                    .bearer_auth(token)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap()
            })
    }

    /// The audit events whose actor names a move: (actor, action, target).
    fn move_events(&self) -> Vec<(String, String, String)> {
        let snap = self.snapshot();
        snap["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["actor"].as_str().unwrap_or("").contains(" (move "))
            .map(|e| {
                let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
                (s("actor"), s("action"), s("target"))
            })
            .collect()
    }

    /// The console on this endpoint alone, at 80x24, run by [`OPERATOR`].
    fn console(&self, tag: &str, home: &Path) -> Session {
        let args = format!(
            "--endpoint {} --token-file {}",
            self.server.url,
            self.server.dir.join("operator.token").display()
        );
        let s = Session::console_as(80, 24, tag, home, Some(OPERATOR), &args);
        s.wait_for("GPUs (");
        s
    }
}

/// Waits (bounded) until `ok` holds for what the endpoint says.
fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < Duration::from_secs(30), "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The line of `screen` that starts (inside the border) with `label`.
fn line_of<'a>(screen: &'a str, label: &str) -> &'a str {
    screen
        .lines()
        .find(|l| l.trim_start_matches('│').starts_with(label))
        .unwrap_or_else(|| panic!("no `{label}` line:\n{screen}"))
}

/// In the open move picker, selects the target line containing `target` (by `j` from
/// the first row) and waits for it to be the one picked.
fn pick_target(s: &Session, target: &str) {
    let screen = s.wait_for("Move claim");
    let rows: Vec<&str> = screen
        .lines()
        .filter_map(|l| l.split('│').nth(2))
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    let at = rows
        .iter()
        .position(|r| r.starts_with(target))
        .unwrap_or_else(|| panic!("no target {target}:\n{screen}"));
    for _ in 0..at {
        s.keys(&["j"]);
    }
}

/// Waits for the claim detail titled `title` drawn down to its last section.
fn detail(s: &Session, title: &str) -> String {
    s.wait_until(&format!("`{title}` down to its audit history"), |screen| {
        screen.contains(title) && screen.contains("Audit history")
    })
}

/// Esc out of a screen showing `gone`, once the status line shows no message (Esc
/// dismisses a message first).
fn back_from(s: &Session, gone: &str) {
    s.wait_until("no message on the status line", |screen| {
        screen
            .lines()
            .rfind(|l| !l.trim().is_empty())
            .is_some_and(|l| l.trim_end().ends_with("live"))
    });
    s.escape_from(gone);
}

/// The user the console runs as (`USER`): releasing a claim another holder holds asks
/// for its id to be typed, one of this user's does not.
const OPERATOR: &str = "ops-ann";

#[test]
fn a_claims_detail_opened_with_enter_and_with_colon_reads_whole_and_releases_it() {
    let ep = Endpoint::start("gpu-node-a", 2);
    let pid = format!(r#"{{"pid": {}}}"#, std::process::id());
    // Another holder's claim, with this test's pid and a lease.
    let theirs = ep.claim(&[
        "--memory",
        "10GiB",
        "--devices",
        "0",
        "--node",
        "gpu-node-a",
        "--project",
        "vision",
        "--holder",
        "someone-else",
        "--ttl",
        "600",
        "--request",
        &pid,
    ]);
    // One of the console's own user (no id to type), written as a fraction.
    let me = OPERATOR;
    let mine = ep.claim(&[
        "--fraction",
        "0.25",
        "--devices",
        "1",
        "--node",
        "gpu-node-a",
        "--project",
        "nlp",
        "--holder",
        me,
    ]);
    let home = tempfile::tempdir().unwrap();
    let s = ep.console("detail", home.path());

    // Enter on the claim in Claims (filtered to its holder: one row).
    s.keys(&["3"]);
    s.wait_for("Claims (2)");
    s.keys(&["/", "someone-else", "Enter"]);
    s.wait_for("Claims (1");
    s.keys(&["Enter"]);
    let screen = detail(&s, &format!("claim {theirs} placed"));
    let holder = line_of(&screen, "holder");
    assert!(
        holder.contains("someone-else")
            && holder.contains("vision")
            && holder.contains(&format!("pid {}", std::process::id())),
        "{holder}"
    );
    // `expires 2026-… (in 9m59s), ttl 10m`: the absolute end, what is left, the ttl.
    let lease = line_of(&screen, "lease");
    assert!(
        lease.contains("expires 20") && lease.contains("ttl 10m"),
        "{lease}"
    );
    assert!(line_of(&screen, "form").contains("10GiB"), "{screen}");
    assert!(
        line_of(&screen, "place").contains("gpu-node-a:0"),
        "{screen}"
    );
    let shares = screen
        .lines()
        .skip_while(|l| !l.contains("Shares (1 GPU)"))
        .nth(1)
        .unwrap_or_else(|| panic!("{screen}"));
    assert!(
        shares.contains("gpu-node-a:0") && shares.contains("10G"),
        "{shares}"
    );

    // Release from inside: r, Tab to the button, Enter; another holder's id is typed.
    s.keys(&["r"]);
    let dialog = s.wait_for("[ Cancel ]");
    assert!(
        dialog.contains(&format!("Release claim {theirs}")),
        "{dialog}"
    );
    assert!(
        dialog.contains(&format!("Type {theirs} to confirm")),
        "another holder's claim asks for its id:\n{dialog}"
    );
    s.keys(&[&theirs.to_string(), "Tab", "Enter"]);
    eventually("the released claim gone from `gpuboard ls`", || {
        ep.claim_json(theirs).is_none()
    });
    s.wait_for(&format!("claim {theirs} is gone from its source"));
    assert!(ep.claim_json(mine).is_some(), "only that one released");

    // `:claim ID` opens the other one's detail; the user's own claim asks for no id.
    back_from(&s, &format!("claim {theirs} is gone"));
    s.keys(&[":", &format!("claim {mine}"), "Enter"]);
    let screen = detail(&s, &format!("claim {mine} placed"));
    assert!(line_of(&screen, "holder").contains(me), "{screen}");
    assert!(line_of(&screen, "form").contains("0.25"), "{screen}");
    assert!(
        line_of(&screen, "place").contains("gpu-node-a:1"),
        "{screen}"
    );
    s.keys(&["r"]);
    let dialog = s.wait_for("[ Cancel ]");
    assert!(
        dialog.contains(&format!("Release claim {mine}")) && !dialog.contains("to confirm:"),
        "the operator's own claim asks for no id:\n{dialog}"
    );
    s.keys(&["Tab", "Enter"]);
    eventually("the user's claim released", || {
        ep.claim_json(mine).is_none()
    });
    s.wait_for(&format!("claim {mine} is gone from its source"));
}

#[test]
fn a_claim_moves_to_another_gpu_of_its_endpoint_from_its_detail() {
    let ep = Endpoint::start("gpu-node-a", 3);
    let id = ep.claim(&[
        "--memory",
        "8GiB",
        "--devices",
        "0",
        "--node",
        "gpu-node-a",
        "--project",
        "vision",
    ]);
    let home = tempfile::tempdir().unwrap();
    let s = ep.console("detailmove", home.path());
    s.keys(&[":", &format!("claim {id}"), "Enter"]);
    s.wait_for(&format!("claim {id} placed"));
    s.keys(&["m"]);
    pick_target(&s, "gpu-node-a:2");
    s.keys(&["Enter"]);
    let dialog = s.wait_for("[ Cancel ]");
    assert!(dialog.contains("gpu-node-a:2"), "{dialog}");
    s.keys(&["Tab", "Enter"]);
    eventually("the claim on device 2", || {
        ep.claim_json(id)
            .is_some_and(|c| c["shares"][0]["device"] == 2 && c["node"] == "gpu-node-a")
    });
    // The detail follows the claim by id: same claim, new place.
    let screen = s.wait_until("the detail at gpu-node-a:2", |s| {
        s.lines()
            .any(|l| l.trim_start_matches('│').starts_with("place") && l.contains("gpu-node-a:2"))
    });
    assert!(screen.contains(&format!("claim {id} placed")), "{screen}");
}

#[test]
fn a_move_to_another_endpoint_is_audited_on_both_with_one_move_id_and_shown_in_events() {
    let east = Endpoint::start("east-node", 2);
    let west = Endpoint::start("west-node", 2);
    let id = east.claim(&[
        "--memory",
        "12GiB",
        "--project",
        "vision",
        "--holder",
        "mover",
        "--ttl",
        "600",
    ]);
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("console.toml");
    let entry = |name: &str, ep: &Endpoint| {
        format!(
            "[[endpoints]]\nname = \"{name}\"\nurl = \"{}\"\ntoken_file = \"{}\"\nkind = \"gpuboard\"\n",
            ep.server.url,
            ep.server.dir.join("operator.token").display()
        )
    };
    std::fs::write(
        &config,
        format!("{}\n{}", entry("east", &east), entry("west", &west)),
    )
    .unwrap();
    let s = Session::console(
        80,
        24,
        "detailacross",
        home.path(),
        &format!("--config {}", config.display()),
    );
    s.wait_for("GPUs (4)");
    s.keys(&[":", &format!("claim east/{id}"), "Enter"]);
    s.wait_for(&format!("claim {id} placed on east"));
    s.keys(&["m"]);
    pick_target(&s, "west/west-node:1");
    s.keys(&["Enter"]);
    let dialog = s.wait_for("[ Cancel ]");
    assert!(dialog.contains("west"), "{dialog}");
    s.keys(&["Tab", "Enter"]);
    eventually("the claim gone from east and one on west", || {
        east.claim_json(id).is_none() && west.claims().len() == 1
    });
    let moved = &west.claims()[0];
    assert_eq!(moved["node"], "west-node");
    assert_eq!(moved["shares"][0]["device"], 1);
    assert_eq!(
        (&moved["project"], &moved["holder"]),
        (&"vision".into(), &"mover".into())
    );
    // Both endpoints audit it under one actor ending in the same ` (move ID)`.
    let (on_east, on_west) = (east.move_events(), west.move_events());
    assert_eq!(on_east.len(), 1, "{on_east:?}");
    assert_eq!(on_west.len(), 1, "{on_west:?}");
    assert_eq!(
        (on_east[0].1.as_str(), on_west[0].1.as_str()),
        ("release", "claim")
    );
    assert_eq!(on_east[0].0, on_west[0].0, "one actor, one move id");
    let actor = &on_east[0].0;
    let move_id = actor
        .rsplit_once(" (move ")
        .and_then(|(_, m)| m.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{actor}"));
    assert!(move_id.starts_with("mv-"), "{actor}");
    // The console's Events view: both steps' DETAIL start with the move id (cut at 80
    // columns), the selected event says it whole; at 120 columns DETAIL has it whole.
    back_from(&s, &format!("claim {id} is gone"));
    s.keys(&["6"]);
    let picked = |screen: &str| {
        screen
            .lines()
            .skip_while(|l| !l.contains("Selected event"))
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    };
    // The selected (newest) event whole in the pane below, with the move id.
    let screen = s.wait_until("the selected event with its move id", |screen| {
        screen.contains("Audit events (3)") && picked(screen).contains(&format!("(move {move_id})"))
    });
    let rows: Vec<&str> = screen
        .lines()
        .filter(|l| l.contains(" release ") || l.contains(" claim  "))
        .filter(|l| l.contains("claim 1"))
        .collect();
    let with_id: Vec<&&str> = rows
        .iter()
        .filter(|l| {
            l.split("claim 1")
                .nth(1)
                .is_some_and(|d| d.trim_start().starts_with("move mv-"))
        })
        .collect();
    assert_eq!(
        with_id.len(),
        2,
        "east's release and west's claim:\n{screen}"
    );
    // Cut, it says so (it read `move mv-1a2099` before).
    assert!(
        with_id
            .iter()
            .all(|l| l.trim_end().trim_end_matches('│').ends_with('…')),
        "{screen}"
    );
    s.resize(120, 40);
    let wide = s.wait_for(&format!("move {move_id}: "));
    let audit_rows = wide
        .lines()
        .filter(|l| {
            l.trim_start_matches('│')
                .starts_with(|c: char| c.is_ascii_digit())
        })
        .filter(|l| l.contains(&format!("move {move_id}: ")))
        .count();
    assert_eq!(audit_rows, 2, "both endpoints' rows:\n{wide}");
}

#[test]
fn dump_screen_names_a_demo_claim_and_a_bad_id_lists_the_allowed_ones() {
    let dump = |what: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_gpuboard"))
            .args(["--demo", "status", "--dump-screen", what, "--size", "80x24"])
            .env("HOME", "/nonexistent")
            .output()
            .unwrap()
    };
    let bad = dump("claim:999999");
    assert!(!bad.status.success());
    let err = text(&bad.stderr);
    assert!(err.contains("999999"), "{err}");
    // The error lists the ids there are: take the first and draw its detail.
    let listed: Vec<u64> = err
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .filter(|n| *n != 999_999)
        .collect();
    let Some(id) = listed.first() else {
        panic!("no id named: {err}")
    };
    let ok = dump(&format!("claim:{id}"));
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    let screen = text(&ok.stdout);
    assert!(screen.contains(&format!("claim {id} ")), "{screen}");
    for label in ["holder", "place", "lease", "form"] {
        line_of(&screen, label);
    }
}

/// The text lines inside the box whose title line contains `title`.
fn boxed<'a>(screen: &'a str, title: &str) -> Vec<&'a str> {
    screen
        .lines()
        .skip_while(|l| !l.contains(title))
        .skip(1)
        .take_while(|l| !l.starts_with('└'))
        .map(|l| l.trim_matches(|c| c == '│' || c == ' '))
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn fair_share_reasons_that_overflow_the_pane_open_whole_with_enter() {
    let home = tempfile::tempdir().unwrap();
    let s = Session::console(80, 24, "whypane", home.path(), "--demo");
    s.wait_for("GPUs (");
    s.keys(&["4"]);
    // The demo's first project has more reasons than the pane's five lines.
    let screen = s.wait_for("more lines: Enter)");
    let pane = boxed(&screen, "Why not now");
    assert_eq!(pane.len(), 5, "{screen}");
    let more: usize = pane[4]
        .strip_prefix("(+")
        .and_then(|r| r.strip_suffix(" more lines: Enter)"))
        .unwrap_or_else(|| panic!("{screen}"))
        .parse()
        .unwrap();
    let project = pane[0].split_whitespace().next().unwrap().to_string();
    s.keys(&["Enter"]);
    let title = format!("Why not now: {project} (j/k scroll, Esc back)");
    let popup = s.wait_for(&title);
    let whole = boxed(&popup, &title);
    assert!(
        whole.len() >= 4 + more && whole[0].starts_with(&format!("{project} share")),
        "every line, {more} more than the pane:\n{popup}"
    );
    assert!(!popup.contains("more lines: Enter"), "{popup}");
    s.escape_from(&title);
    s.wait_for("more lines: Enter)");
}
