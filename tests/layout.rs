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
    ("identity", 0),
    ("fairshare", 1),
    ("request", 2),
    ("placement", 3),
    ("inventory", 4),
    ("snapshot", 5),
    ("scheduler", 6),
    ("wire", 6),
    ("history", 6),
    ("simulate", 6),
    ("telemetry", 7),
    ("accounting", 7),
    ("attribution", 8),
    ("discovery", 8),
    ("endpoint", 9),
    ("client", 9),
    ("sources", 10),
    ("doctor", 10),
    ("console", 11),
    ("cli", 11),
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
