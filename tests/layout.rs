//! The code map holds: each top-level module imports only from layers below it, and no
//! source file grows past what a newcomer can read (README, "Code map").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Top-level modules by layer, lowest first. A module may import only modules of a
/// strictly lower rank (so peers of one rank stay independent of each other).
const RANKS: &[(&str, u8)] = &[
    ("units", 0),
    ("clock", 0),
    ("when", 1),
    ("ids", 0),
    ("shared", 0),
    ("identity", 0),
    ("fairshare", 1),
    ("request", 2),
    ("placement", 3),
    ("inventory", 4),
    ("snapshot", 5),
    ("scheduler", 6),
    ("wire", 6),
    ("simulate", 6),
    ("physical", 6),
    ("history", 7),
    ("telemetry", 7),
    ("accounting", 8),
    ("forecast", 8),
    ("attribution", 9),
    ("discovery", 9),
    ("store", 9),
    ("endpoint", 10),
    ("client", 10),
    ("sources", 11),
    ("fleet", 11),
    ("doctor", 11),
    ("exit", 11),
    ("console", 12),
    ("cli", 12),
];

/// Lines a source file may have before its `#[cfg(test)]` block.
const MAX_LINES: usize = 800;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level module a file under src/ belongs to (`None` for lib.rs and main.rs).
fn module_of(file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src()).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_string())
}

/// The code before the file's first `#[cfg(test)]`: what ships.
fn shipped(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |i| &text[..i])
}

fn is_test_file(file: &Path) -> bool {
    file.file_name().is_some_and(|n| n == "tests.rs")
        || file
            .components()
            .any(|c| c.as_os_str() == "tests" && file.starts_with(src()))
}

#[test]
fn every_top_level_module_has_a_layer() {
    let ranks: BTreeMap<_, _> = RANKS.iter().copied().collect();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    for f in &files {
        if let Some(m) = module_of(f) {
            assert!(
                ranks.contains_key(m.as_str()),
                "src/{m} has no layer: add it to RANKS here and to the README's code map"
            );
        }
    }
}

#[test]
fn imports_only_go_down_the_layers() {
    let ranks: BTreeMap<_, _> = RANKS.iter().copied().collect();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut upward = Vec::new();
    for f in &files {
        let Some(m) = module_of(f) else { continue };
        let Some(&rank) = ranks.get(m.as_str()) else {
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap();
        let code = shipped(&text);
        for (i, _) in code.match_indices("crate::") {
            let used: String = code[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if used == m {
                continue;
            }
            if let Some(&r) = ranks.get(used.as_str())
                && r >= rank
            {
                upward.push(format!(
                    "{} ({m}, layer {rank}) uses crate::{used} (layer {r})",
                    f.display()
                ));
            }
        }
    }
    upward.sort();
    upward.dedup();
    assert!(
        upward.is_empty(),
        "imports up or across the layers:\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_source_file_is_too_long_to_read() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let long: Vec<String> = files
        .iter()
        .filter(|f| !is_test_file(f))
        .filter_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let n = shipped(&text).lines().count();
            (n > MAX_LINES).then(|| format!("{} has {n} lines", f.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines outside their tests (split them by concept):\n{}",
        long.join("\n")
    );
}

#[test]
fn no_two_public_types_share_a_name() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for line in shipped(&text).lines() {
            let t = line.trim_start();
            for kind in ["pub struct ", "pub enum ", "pub trait ", "pub type "] {
                if let Some(rest) = t.strip_prefix(kind) {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    seen.entry(name).or_default().push(f.display().to_string());
                }
            }
        }
    }
    let twice: Vec<String> = seen
        .iter()
        .filter(|(_, at)| at.len() > 1)
        .map(|(name, at)| format!("{name}: {}", at.join(", ")))
        .collect();
    assert!(
        twice.is_empty(),
        "one name per concept; these public types share a name:\n{}",
        twice.join("\n")
    );
}

/// The kinds a source can be. Outside `sources/kind.rs` (where `SourceKind` reads them),
/// shipped code compares `SourceKind` values, never these names as strings.
const KIND_NAMES: &[&str] = &[
    "gpuboard",
    "ray",
    "prometheus",
    "slurm",
    "boinc",
    "kubernetes",
    "ssh",
    "demo",
    "embedded",
];

/// The ways a string-typed kind gets matched: `== "slurm"`, `"slurm" =>`, `("slurm", x)`.
fn kind_matches(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for k in KIND_NAMES {
        for form in [
            format!("== \"{k}\""),
            format!("!= \"{k}\""),
            format!("\"{k}\" =>"),
            format!("(\"{k}\","),
        ] {
            if code.contains(&form) {
                found.push(form);
            }
        }
    }
    found
}

#[test]
fn no_source_kind_is_matched_as_a_string() {
    assert_eq!(
        kind_matches("match kind { \"slurm\" => 1, _ => 0 }; if k == \"ray\" {}"),
        vec!["== \"ray\"", "\"slurm\" =>"],
        "the check itself must see a string-matched kind"
    );
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let kind_rs = src().join("sources").join("kind.rs");
    let mut at = Vec::new();
    for f in files.iter().filter(|f| **f != kind_rs) {
        let text = std::fs::read_to_string(f).unwrap();
        for form in kind_matches(shipped(&text)) {
            at.push(format!("{}: {form}", f.display()));
        }
    }
    assert!(
        at.is_empty(),
        "a source kind is a `SourceKind` (src/sources/kind.rs), not a string to match:\n{}",
        at.join("\n")
    );
}

/// The places a file names the API's route module `endpoint/api.rs` (`crate::endpoint::api`,
/// `super::api`, `endpoint::{api, ..}`), not its leaves `api_state`, `api_error`.
fn route_module_uses(code: &str) -> usize {
    let word_ends = |rest: &str| {
        !rest
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let mut n = 0;
    for prefix in ["endpoint::api", "super::api"] {
        n += code
            .match_indices(prefix)
            .filter(|(i, _)| word_ends(&code[i + prefix.len()..]))
            .count();
    }
    for (i, _) in code.match_indices("endpoint::{") {
        let group = code[i..].split('}').next().unwrap_or("");
        n += group
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| *w == "api")
            .count();
    }
    n
}

/// The routes (`endpoint/api.rs`) import their helpers (body, gate, watch, metrics,
/// history...); no file of `endpoint/` imports the routes back. What they share, `ApiState`
/// and `ApiError`, lives in `api_state.rs` and `api_error.rs`.
#[test]
fn no_endpoint_file_imports_the_api_routes_back() {
    assert_eq!(
        route_module_uses(
            "use crate::endpoint::api::{ApiError};\nuse super::api;\n\
             use crate::endpoint::{api, gate};\nuse crate::endpoint::api_state::ApiState;"
        ),
        3,
        "the check itself must see each way of naming the routes, and not their leaves"
    );
    let endpoint = src().join("endpoint");
    let mut files = Vec::new();
    rust_files(&endpoint, &mut files);
    let routes = endpoint.join("api.rs");
    let back: Vec<String> = files
        .iter()
        .filter(|f| **f != routes && **f != endpoint.join("mod.rs"))
        .filter(|f| route_module_uses(shipped(&std::fs::read_to_string(f).unwrap())) > 0)
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        back.is_empty(),
        "these import endpoint/api.rs back (import ApiState or ApiError from \
         endpoint/api_state.rs or endpoint/api_error.rs instead):\n{}",
        back.join("\n")
    );
}

/// The console's parts ranked, lowest first, so that it flows one way: the driver performs
/// effects and calls `update`, which changes the state; the messages name the state's
/// keys, never how it changes. The lists (columns, sorts, filters) know no state, the
/// flows (multi-step work: its values and their store) neither (nor each other), and
/// `time` (the tick, how a time is written) nothing of the console at all; the state
/// knows neither how it changes nor how it is drawn; `msg` holds every message, effect,
/// ask and answer; `history` and `usage` run asks; `update` changes the state and never
/// asks the drawing; `views` reads the state (and `update`'s constants) and changes
/// nothing; `driver` runs it all. A part may import only parts of a strictly lower rank.
const CONSOLE_RANKS: &[(&str, u8)] = &[
    ("lists", 0),
    ("flows", 0),
    ("time", 0),
    ("state", 1),
    ("msg", 2),
    ("history", 3),
    ("usage", 3),
    ("update", 4),
    ("views", 5),
    ("driver", 6),
];

/// The folders under src/ in which, and in every folder under which, the parts (each file or
/// folder directly in it) must not import each other in a circle.
const NO_CIRCLES_IN: &[&str] = &["console", "cli", "endpoint"];

/// The part (`state`, `update`, `driver`, ...) a path like `["state", "rows.rs"]` under a
/// folder (src/console/) belongs to, and the module path its `super::` starts from.
fn console_module(rel: &[&str]) -> (Option<String>, Vec<String>) {
    let mut path: Vec<String> = rel.iter().map(|s| (*s).to_string()).collect();
    let file = path.pop().unwrap_or_default();
    let stem = file.strip_suffix(".rs").unwrap_or(&file).to_string();
    if stem != "mod" {
        path.push(stem);
    }
    (path.first().cloned(), path)
}

/// The parts of `folder` a file's shipped code names: `crate::FOLDER::X`, and `super::`
/// paths resolved from the file's own module (`super::X`, `super::super::{X, Y}`).
fn part_uses(folder: &str, rel: &[&str], code: &str) -> Vec<String> {
    let (_, module) = console_module(rel);
    let mut used = Vec::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let absolute = format!("crate::{}::", folder.replace('/', "::"));
    for (i, _) in code.match_indices(&absolute) {
        used.push(ident(&code[i + absolute.len()..]));
    }
    let mut rest = code;
    while let Some(i) = rest.find("super::") {
        // Only the first `super::` of a chain starts a path.
        let starts_path = !rest[..i].ends_with("::");
        let mut tail = &rest[i..];
        let mut ups = 0;
        while let Some(t) = tail.strip_prefix("super::") {
            ups += 1;
            tail = t;
        }
        rest = tail;
        if !starts_path || ups > module.len() {
            continue;
        }
        let base = &module[..module.len() - ups];
        if let Some(top) = base.first() {
            used.push(top.clone());
            continue;
        }
        // From the console's root: the next name, or each name of a `{...}` group.
        if let Some(group) = tail.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or("");
            used.extend(group.split(',').map(|g| ident(g.trim())));
        } else {
            used.push(ident(tail));
        }
    }
    used.retain(|u| !u.is_empty());
    used.sort();
    used.dedup();
    used
}

/// Edges `from -> to` between the console's parts, from (path under src/console/, code).
fn console_edges(files: &[(Vec<&str>, &str)]) -> BTreeMap<String, Vec<String>> {
    part_edges("console", files)
}

/// Edges `from -> to` between the parts of `folder`, from (path under src/FOLDER/, code);
/// names at the folder's root that are no part (`ConsoleArgs`) are left out.
fn part_edges(folder: &str, files: &[(Vec<&str>, &str)]) -> BTreeMap<String, Vec<String>> {
    let parts: Vec<String> = files
        .iter()
        .filter_map(|(rel, _)| console_module(rel).0)
        .collect();
    let mut edges: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (rel, code) in files {
        let Some(from) = console_module(rel).0 else {
            continue;
        };
        for to in part_uses(folder, rel, code) {
            if to != from && parts.contains(&to) {
                edges.entry(from.clone()).or_default().push(to);
            }
        }
    }
    for v in edges.values_mut() {
        v.sort();
        v.dedup();
    }
    edges
}

/// An import circle among `parts`, as `a -> b -> a`, if there is one.
fn part_cycle(edges: &BTreeMap<String, Vec<String>>, parts: &[&str]) -> Option<String> {
    fn visit(
        at: &str,
        edges: &BTreeMap<String, Vec<String>>,
        parts: &[&str],
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Option<String> {
        if let Some(i) = path.iter().position(|p| p == at) {
            let mut circle = path[i..].to_vec();
            circle.push(at.to_string());
            return Some(circle.join(" -> "));
        }
        if done.iter().any(|d| d == at) {
            return None;
        }
        path.push(at.to_string());
        for next in edges.get(at).into_iter().flatten() {
            if parts.contains(&next.as_str())
                && let Some(c) = visit(next, edges, parts, path, done)
            {
                return Some(c);
            }
        }
        path.pop();
        done.push(at.to_string());
        None
    }
    let mut done = Vec::new();
    parts
        .iter()
        .find_map(|p| visit(p, edges, parts, &mut Vec::new(), &mut done))
}

/// The imports between ranked console parts that go up or across the ranks.
fn console_upward(edges: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let ranks: BTreeMap<_, _> = CONSOLE_RANKS.iter().copied().collect();
    let mut up = Vec::new();
    for (from, tos) in edges {
        let Some(&r) = ranks.get(from.as_str()) else {
            continue;
        };
        for to in tos {
            if ranks.get(to.as_str()).is_some_and(|&t| t >= r) {
                up.push(format!("console/{from} (rank {r}) imports console/{to}"));
            }
        }
    }
    up
}

#[test]
fn the_console_check_sees_a_circle() {
    // The fake tree before the renovation: the state read "idle" from the drawing code,
    // and the drawing asked `update` for the command line's candidates.
    let before: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["state", "totals.rs"],
            "use crate::console::views::allocated_but_idle;\nuse super::{State, View};",
        ),
        (vec!["state", "mod.rs"], "use super::keymap::Keymap;"),
        (vec!["keymap.rs"], "use crate::units::Bytes;"),
        (
            vec!["views", "chrome.rs"],
            "let o = crate::console::update::candidates(state, t);",
        ),
        (
            vec!["update", "keys.rs"],
            "use super::{flash, quit};\nuse super::super::state::State;",
        ),
        (
            vec!["headless.rs"],
            "use super::{ConsoleArgs, initial_state, views};",
        ),
    ];
    let edges = console_edges(&before);
    assert_eq!(edges["state"], ["keymap", "views"]);
    assert_eq!(edges["update"], ["state"]);
    assert_eq!(edges["headless"], ["views"]);
    assert_eq!(
        part_cycle(&edges, &["state", "update", "views"]).as_deref(),
        Some("state -> views -> update -> state")
    );
    assert_eq!(
        console_upward(&edges),
        ["console/state (rank 1) imports console/views"]
    );
    // Without the state's import there is no circle, and views may read update.
    let after: Vec<_> = before.into_iter().skip(1).collect();
    assert_eq!(console_edges(&after)["state"], ["keymap"]);
    let edges = console_edges(&after);
    assert_eq!(part_cycle(&edges, &["state", "update", "views"]), None);
    assert!(console_upward(&edges).is_empty());
    // A flow that reads the state it is kept in, or asks `update` how to go on: a circle.
    let mut flows = after.clone();
    flows.push((vec!["state", "mod.rs"], "use super::flows::Flows;"));
    flows.push((
        vec!["flows", "move_across.rs"],
        "use crate::console::state::State;\nuse super::super::update::flash;",
    ));
    let edges = console_edges(&flows);
    assert_eq!(edges["flows"], ["state", "update"]);
    let parts: Vec<&str> = CONSOLE_RANKS.iter().map(|(p, _)| *p).collect();
    assert_eq!(
        part_cycle(&edges, &parts).as_deref(),
        Some("flows -> state -> flows")
    );
    assert_eq!(
        console_upward(&edges),
        [
            "console/flows (rank 0) imports console/state",
            "console/flows (rank 0) imports console/update"
        ]
    );
}

/// Every file under src/FOLDER/, as (its path there, its shipped code).
fn folder_files(folder: &str) -> Vec<(Vec<String>, String)> {
    let root = src().join(folder);
    let mut paths = Vec::new();
    rust_files(&root, &mut paths);
    paths
        .iter()
        .map(|p| {
            let rel = p.strip_prefix(&root).unwrap();
            let parts = rel
                .components()
                .map(|c| c.as_os_str().to_str().unwrap().to_string())
                .collect();
            let text = std::fs::read_to_string(p).unwrap();
            (parts, shipped(&text).to_string())
        })
        .collect()
}

fn borrowed(texts: &[(Vec<String>, String)]) -> Vec<(Vec<&str>, &str)> {
    texts
        .iter()
        .map(|(rel, text)| (rel.iter().map(String::as_str).collect(), text.as_str()))
        .collect()
}

#[test]
fn the_circle_check_sees_one_in_any_folder() {
    // The CLI before its fleet protocol moved out: the claims printed a move that
    // fleet_move made, and fleet_move printed with the claims' helpers.
    let cli: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["mod.rs"],
            "mod claims;\nmod fleet_move;\npub struct Conn;",
        ),
        (
            vec!["claims.rs"],
            "use super::{Conn, Usage, fleet_move, print_json};\nfleet_move::report(m)",
        ),
        (
            vec!["fleet_move.rs"],
            "use super::claims::{print_claim, refused};\nuse crate::cli::Conn;",
        ),
        (vec!["act", "mod.rs"], "use crate::cli::claims::ClaimArgs;"),
    ];
    let edges = part_edges("cli", &cli);
    assert_eq!(edges["claims"], ["fleet_move"]);
    assert_eq!(edges["act"], ["claims"]);
    let parts: Vec<&str> = edges.keys().map(String::as_str).collect();
    assert_eq!(
        part_cycle(&edges, &parts).as_deref(),
        Some("claims -> fleet_move -> claims")
    );
    // The routes of the history and the report, each naming the other.
    let endpoint: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["history_api.rs"],
            ".route(REPORT_PATH, get(super::report_api::report))",
        ),
        (
            vec!["report_api.rs"],
            "use super::history_api::{HistoryRoutes, bad};",
        ),
    ];
    let edges = part_edges("endpoint", &endpoint);
    assert_eq!(
        part_cycle(&edges, &["history_api", "report_api"]).as_deref(),
        Some("history_api -> report_api -> history_api")
    );
    // One way only: no circle.
    let one_way: Vec<_> = endpoint.into_iter().skip(1).collect();
    let edges = part_edges("endpoint", &one_way);
    assert_eq!(part_cycle(&edges, &["history_api", "report_api"]), None);
    // A folder inside a folder (the console's update, before it routed keys by mode): the
    // keys ran the `:` line, and the `:` line ran the keys' actions.
    let update: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["mod.rs"],
            "mod command;\nmod keys;\nuse super::state::State;",
        ),
        (
            vec!["keys.rs"],
            "use super::command::{command, complete};\nuse crate::console::state::Mode;",
        ),
        (
            vec!["command.rs"],
            "use crate::console::update::keys::normal_action;",
        ),
    ];
    let edges = part_edges("console/update", &update);
    assert_eq!(edges["keys"], ["command"]);
    assert_eq!(
        part_cycle(&edges, &["command", "keys"]).as_deref(),
        Some("command -> keys -> command")
    );
    assert!(with_subfolders("console").contains(&"console/update".to_string()));
}

/// `folder` and every folder under it, as paths under src/ (`console`, `console/update`, ...).
fn with_subfolders(folder: &str) -> Vec<String> {
    let mut out = vec![folder.to_string()];
    let mut entries: Vec<_> = std::fs::read_dir(src().join(folder))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n != "tests"))
        .collect();
    entries.sort();
    for dir in entries {
        let name = dir.file_name().unwrap().to_str().unwrap();
        out.extend(with_subfolders(&format!("{folder}/{name}")));
    }
    out
}

#[test]
fn no_folder_imports_itself_in_a_circle() {
    for top in NO_CIRCLES_IN {
        for folder in with_subfolders(top) {
            let texts = folder_files(&folder);
            let files = borrowed(&texts);
            let edges = part_edges(&folder, &files);
            let mut parts: Vec<&str> = files
                .iter()
                .filter_map(|(rel, _)| rel.first().copied())
                .map(|p| p.strip_suffix(".rs").unwrap_or(p))
                .filter(|p| *p != "mod")
                .collect();
            parts.sort_unstable();
            parts.dedup();
            assert_eq!(
                part_cycle(&edges, &parts),
                None,
                "the parts of src/{folder}/ import each other in a circle"
            );
        }
    }
}

#[test]
fn the_console_flows_one_way() {
    let texts = folder_files("console");
    let files = borrowed(&texts);
    let edges = console_edges(&files);
    let parts: Vec<&str> = CONSOLE_RANKS.iter().map(|(p, _)| *p).collect();
    assert_eq!(
        part_cycle(&edges, &parts),
        None,
        "the console's ranked parts import each other in a circle"
    );
    let up = console_upward(&edges);
    assert!(
        up.is_empty(),
        "console imports against the ranks (lists, flows, time < state < msg < history, \
         usage < update < views < driver):\n{}",
        up.join("\n")
    );
}

/// With `autotests = false`, a file in tests/ that `tests/main.rs` does not declare would
/// never be compiled or run: every one must be a module of the one test binary.
#[test]
fn every_test_file_is_a_module_of_the_test_binary() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let main = std::fs::read_to_string(tests.join("main.rs")).unwrap();
    let declared: Vec<&str> = main
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    let mut missing = Vec::new();
    for e in std::fs::read_dir(&tests).unwrap() {
        let p = e.unwrap().path();
        let Some(stem) = p.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if p.extension().is_some_and(|x| x == "rs") && stem != "main" && !declared.contains(&stem) {
            missing.push(stem.to_string());
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "tests/main.rs does not declare these test files (add `mod NAME;`), so they never run: {missing:?}"
    );
}

/// The lines (1-based) of `text` that allow `clippy::too_many_lines` without a `//` comment
/// saying why: on the line itself, or just above it (other attributes and the other lints
/// of the same `allow(...)` list may stand between).
fn unreasoned_long_fn_allows(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let part_of_attribute = |l: &str| {
        let t = l.trim();
        t.starts_with("#[")
            || t.starts_with("#![")
            || t.starts_with(")]")
            || (t.starts_with("clippy::") && !t.contains(' '))
    };
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !line.contains("clippy::too_many_lines") || line.trim_start().starts_with("//") {
            continue;
        }
        let reason_here = line
            .split_once("//")
            .is_some_and(|(_, why)| !why.trim().is_empty());
        let reason_above = lines[..i]
            .iter()
            .rev()
            .find(|l| !part_of_attribute(l))
            .is_some_and(|l| {
                let t = l.trim_start();
                t.starts_with("//") && !t.starts_with("///") && !t.starts_with("//!")
            });
        if !reason_here && !reason_above {
            found.push(i + 1);
        }
    }
    found
}

#[test]
fn the_long_function_check_sees_an_allow_without_a_reason() {
    let code = "\
/// Does it.
#[allow(clippy::too_many_lines)]
fn a() {}

// One match arm per message: cut up, the arms would be read apart from the message.
#[allow(clippy::too_many_lines)]
#[must_use]
fn b() {}

#[allow(clippy::too_many_lines)] // a table of cases, one line each
fn c() {}

#![allow(
    clippy::unwrap_used,
    clippy::too_many_lines
)]
";
    assert_eq!(unreasoned_long_fn_allows(code), vec![2, 15]);
}

/// `clippy::too_many_lines` is on at its default (100 lines); a function longer than that is
/// split, or allowed with a comment saying why it reads best whole.
#[test]
fn every_long_function_allowed_says_why() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    assert!(
        !manifest
            .lines()
            .any(|l| l.trim().starts_with("too_many_lines")),
        "Cargo.toml must leave clippy::too_many_lines at its default"
    );
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut bare = Vec::new();
    for f in &files {
        // This file names the lint in its checks and their made-up code.
        if f.ends_with("tests/layout.rs") {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        for n in unreasoned_long_fn_allows(&text) {
            bare.push(format!("{}:{n}", f.strip_prefix(root).unwrap().display()));
        }
    }
    assert!(
        bare.is_empty(),
        "these allow clippy::too_many_lines without a `//` comment saying why the function reads best whole:\n{}",
        bare.join("\n")
    );
}
