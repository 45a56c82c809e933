//! Every file or folder the README and docs/ name exists: a doc that points a newcomer at
//! `src/snapshot.rs` after it became a folder is a broken map. Paths are recognised by their
//! top-level folder (`src/`, `tests/`, `scripts/`, `assets/`, `docs/`, `benches/`, `themes/`);
//! `{a,b}` is expanded, and a path with a `*` or an upper-case placeholder is a pattern, not a
//! name, and is skipped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

const TOP: &[&str] = &[
    "src/", "tests/", "scripts/", "assets/", "docs/", "benches/", "themes/",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_./-{},*".contains(c)
}

/// The repository paths a line of Markdown names, `{a,b}` expanded.
fn paths_in(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<(usize, char)> = line.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let at = chars[i].0;
        let starts_word = i == 0 || !path_char(chars[i - 1].1);
        if starts_word && TOP.iter().any(|t| line[at..].starts_with(t)) {
            let mut j = i;
            while j < chars.len() && path_char(chars[j].1) {
                j += 1;
            }
            let end = chars.get(j).map_or(line.len(), |(b, _)| *b);
            let raw = line[at..end].trim_end_matches(['.', ',', '-']);
            // A trailing `,` of a sentence is not part of the path, but one inside `{}` is.
            let raw = if raw.contains('{') && !raw.contains('}') {
                raw.split('{').next().unwrap_or(raw)
            } else {
                raw
            };
            out.extend(expand(raw));
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// `a/{b,c}.rs` → `a/b.rs`, `a/c.rs` (one brace group, as the docs write them).
fn expand(p: &str) -> Vec<String> {
    match (p.find('{'), p.find('}')) {
        (Some(open), Some(close)) if open < close => p[open + 1..close]
            .split(',')
            .flat_map(|alt| expand(&format!("{}{}{}", &p[..open], alt, &p[close + 1..])))
            .collect(),
        _ => vec![p.to_string()],
    }
}

fn is_pattern(p: &str) -> bool {
    p.contains('*')
        || p.split('/')
            .any(|seg| seg.len() > 1 && seg.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
}

fn docs() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(p);
            }
        }
    }
    let mut out = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut out);
    out.sort();
    out
}

#[test]
fn the_extractor_finds_paths_as_the_docs_write_them() {
    assert_eq!(
        paths_in(
            "see `src/snapshot/` and tests/layout.rs, or src/endpoint/history_{store,api}.rs."
        ),
        [
            "src/snapshot/",
            "tests/layout.rs",
            "src/endpoint/history_store.rs",
            "src/endpoint/history_api.rs"
        ]
    );
    assert!(paths_in("the api/src/x and mysrc/y are not ours").is_empty());
    assert!(is_pattern("tests/corpus/ENGINE/case.json") && is_pattern("src/*.rs"));
}

#[test]
fn every_path_the_docs_name_exists() {
    let mut missing = Vec::new();
    let mut seen = 0;
    for doc in docs() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for (n, line) in text.lines().enumerate() {
            for p in paths_in(line) {
                if is_pattern(&p) {
                    continue;
                }
                seen += 1;
                if !root().join(&p).exists() {
                    let doc = doc.strip_prefix(root()).unwrap().display().to_string();
                    missing.push(format!("{doc}:{}: {p}", n + 1));
                }
            }
        }
    }
    assert!(
        seen > 50,
        "only {seen} paths found in the docs: is the extractor broken?"
    );
    assert!(
        missing.is_empty(),
        "the docs name paths that do not exist:\n{}",
        missing.join("\n")
    );
}
