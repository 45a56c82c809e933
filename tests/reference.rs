//! The references in docs/reference/ cannot drift from the code:
//! - config.md and inventory.md list exactly the keys the real parsers accept (asked of the
//!   parsers themselves: an unknown key's error lists the known ones), and their examples parse;
//! - snapshot.md, watch.md and exit-codes.md are generated here, from a real `serve`'s
//!   snapshot, the watch's event types and the `EXIT_*` constants of src/; the test fails when
//!   the committed file differs. `GPUBOARD_UPDATE_REFERENCE=1 cargo test --test it reference::`
//!   rewrites them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use gpuboard::snapshot::{ClaimFigures, DeviceFigures, NodeFigures, Snapshot, SnapshotChange};
use gpuboard::wire::{DeltaBody, HeartbeatBody, ResyncBody, SnapshotVersion, watch_events};
use serde_json::{Value, json};

use crate::common::schema;

use schema::{check_generated, reference, schema_table};

/// The documented keys of each table: `""` for the top level, `endpoints`, `nodes.gpus`...
fn documented_keys(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut tables: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut table = None;
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            table = if heading.starts_with("Top-level") {
                Some(String::new())
            } else {
                heading
                    .strip_prefix("`[[")
                    .and_then(|h| h.strip_suffix("]]`"))
                    .map(str::to_string)
            };
            continue;
        }
        if let (Some(t), Some(row)) = (&table, line.strip_prefix("| `")) {
            let key = row.split('`').next().unwrap().to_string();
            tables.entry(t.clone()).or_default().insert(key);
        }
    }
    tables
}

/// TOML that puts an unknown key into the table at `path` (`nodes.gpus` →
/// `[[nodes]]`, `[[nodes.gpus]]`, the key).
fn probe_text(path: &str) -> String {
    let mut text = String::new();
    let mut prefix = String::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        if !prefix.is_empty() {
            prefix.push('.');
        }
        prefix.push_str(part);
        let _ = writeln!(text, "[[{prefix}]]");
    }
    text.push_str("zz_not_a_key = 1\n");
    text
}

/// The keys the parser knows for a table, from its error for an unknown one.
fn keys_in_code(error: &str, path: &str) -> BTreeSet<String> {
    let list = error
        .split("expected one of ")
        .nth(1)
        .or_else(|| error.split("expected ").nth(1))
        .unwrap_or_else(|| panic!("table `{path}`: no list of known keys in: {error}"));
    list.lines()
        .next()
        .unwrap()
        .split(", ")
        .map(|k| k.trim().trim_matches('`').to_string())
        .collect()
}

/// The TOML example block of a reference page.
fn example(text: &str) -> String {
    text.split("```toml\n")
        .nth(1)
        .and_then(|t| t.split("```").next())
        .expect("an example in a ```toml block")
        .to_string()
}

/// Checks a key reference against a parser: same keys in every table, tables found by
/// following the `array of tables` keys, and the example parses and uses every key.
fn check_keys(page: &str, parse: impl Fn(&str) -> Result<(), String>) {
    let text = std::fs::read_to_string(reference(page)).unwrap();
    let documented = documented_keys(&text);
    let mut to_check = vec![String::new()];
    let mut checked = BTreeSet::new();
    while let Some(path) = to_check.pop() {
        let error = parse(&probe_text(&path)).expect_err("an unknown key is refused");
        let in_code = keys_in_code(&error, &path);
        let in_doc = documented.get(&path).cloned().unwrap_or_default();
        let undocumented: Vec<_> = in_code.difference(&in_doc).collect();
        let unknown: Vec<_> = in_doc.difference(&in_code).collect();
        assert!(
            undocumented.is_empty(),
            "{page}: table `{path}` accepts {undocumented:?}, which the reference does not list"
        );
        assert!(
            unknown.is_empty(),
            "{page}: table `{path}` documents {unknown:?}, which the parser refuses"
        );
        for line in text.lines() {
            let Some(row) = line.strip_prefix("| `") else {
                continue;
            };
            let key = row.split('`').next().unwrap();
            if row.contains("| array of tables |") && in_code.contains(key) {
                let child = if path.is_empty() {
                    key.to_string()
                } else {
                    format!("{path}.{key}")
                };
                if documented.contains_key(&child) || !checked.contains(&child) {
                    to_check.push(child);
                }
            }
        }
        checked.insert(path);
    }
    let extra: Vec<_> = documented
        .keys()
        .filter(|t| !checked.contains(*t))
        .collect();
    assert!(
        extra.is_empty(),
        "{page}: tables {extra:?} are not tables of the file"
    );
    let ex = example(&text);
    parse(&ex).unwrap_or_else(|e| panic!("{page}: the example does not parse: {e}"));
    for (table, keys) in &documented {
        for key in keys {
            let used = ex.lines().any(|l| {
                l.trim_start().starts_with(&format!("{key} ="))
                    || l.trim()
                        == format!(
                            "[[{}]]",
                            if table.is_empty() {
                                key.clone()
                            } else {
                                format!("{table}.{key}")
                            }
                        )
            });
            assert!(used, "{page}: the example never sets `{key}` of `{table}`");
        }
    }
}

#[test]
fn the_config_reference_lists_every_key_the_parser_accepts() {
    check_keys("config.md", |t| {
        gpuboard::console::config::Config::parse(t)
            .map(|_| ())
            .map_err(|e| format!("{e:?}"))
    });
}

#[test]
fn the_inventory_reference_lists_every_key_the_parser_accepts() {
    check_keys("inventory.md", |t| {
        gpuboard::inventory::parse(t, "probe")
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    // The demo fleet is a valid inventory too.
    gpuboard::inventory::load(&common::demo_fleet()).unwrap();
}

/// A serve of the demo fleet with a placed claim and a pending one (so claims, pending
/// reasons and audit events are all in its snapshot), and its snapshots before and after.
async fn busy_serve() -> (tempfile::TempDir, common::Server, Value, Value) {
    let dir = tempfile::tempdir().unwrap();
    let server = common::Server::start(
        dir.path(),
        &common::demo_fleet(),
        &["--open-reads", "--tick-ms", "50"],
    );
    let http = common::http();
    let get = || async {
        http.get(format!("{}/v1/snapshot", server.url))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    };
    let before = get().await;
    let token = server.operator_token();
    for (body, status) in [
        (
            json!({"nvidia.com/gpu": 8, "node": "dgx-a100-80", "project": "vision", "holder": "alice"}),
            201,
        ),
        (
            json!({"nvidia.com/gpu": 8, "node": "dgx-a100-80", "project": "nlp", "wait": true}),
            202,
        ),
        (
            json!({"gpu_memory": "10Gi", "labels": {"team": "infra"}}),
            201,
        ),
    ] {
        let r = http
            .post(format!("{}/v1/claims", server.url))
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status().as_u16(),
            status,
            "{body}: {}",
            r.text().await.unwrap()
        );
    }
    // The scheduler acts at its ticks (backoffs, pending reasons): read until the state
    // has settled, so the page does not depend on when the read fell.
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    let mut after = get().await;
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let again = get().await;
        if again["revision"] == after["revision"] && again["projects"] == after["projects"] {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the state never settled"
        );
        after = again;
    }
    (dir, server, before, after)
}

#[tokio::test]
async fn the_snapshot_and_watch_references_match_the_code() {
    let (_dir, server, before, after) = busy_serve().await;
    let mut snapshot_page = String::from(
        "# Snapshot schema reference\n\n\
         What `GET /v1/snapshot` answers (and `gpuboard status --once --json` prints per source,\n\
         and a watch's `snapshot` event carries): every field path, with `[]` for the items of an\n\
         array, and the JSON types it takes. Generated by `tests/reference.rs` from a real\n\
         `gpuboard serve` of the demo fleet holding a placed and a pending claim; the test fails\n\
         when the code's output and this page differ. Sizes are bytes, times milliseconds since\n\
         the Unix epoch, compute in units of 1/10000 of a GPU.\n\n",
    );
    snapshot_page.push_str(&schema_table(&[before.clone(), after.clone()]));
    check_generated("snapshot.md", &snapshot_page);
    check_generated("capacity.md", &capacity_page(&server.url).await);

    let old: Snapshot = serde_json::from_value(before).unwrap();
    let new: Snapshot = serde_json::from_value(after).unwrap();
    let version = |seq| SnapshotVersion { epoch: 7, seq };
    let mut changes = gpuboard::snapshot::diff(&old, &new);
    changes.extend(every_change(&new));
    let mut ops = BTreeMap::new();
    for c in &changes {
        let v = serde_json::to_value(c).unwrap();
        let op = v["op"].as_str().unwrap().to_string();
        ops.entry(op).or_insert_with(Vec::new).push(v);
    }
    let mut page = format!(
        "# Watch schema reference\n\n\
         `GET /v1/watch?deltas=1` is a stream of server-sent events; each `event:` line names one\n\
         of the kinds below, its `data:` is JSON and its `id:` the snapshot version\n\
         (`EPOCH.SEQ`). Resume with `?since=VERSION`. A reader that adds `format=2` gets\n\
         `project`, `project_removed` and `revision` changes; one that does not never does: it\n\
         gets whole `projects` lists and `header`s, several versions then coming as one delta.\n\
         A reader that adds `format=3` (gpuboard's own, since telemetry figures) gets those and\n\
         `figures` changes too: devices and claims whose telemetry figures alone changed, each\n\
         device an array (index, utilization, memory utilization, °C, W, SM and memory MHz, fan,\n\
         memory used MiB, each process's MiB short of the device's, unclaimed MiB, the\n\
         utilization samples appended, the sparkline's length when it changed), each claim\n\
         `[id, MiB used beyond its processes' sum, over limit, idle]`. Generated by `tests/reference.rs` from the\n\
         code's types (every kind of change) and a real `gpuboard serve`'s snapshots; the test\n\
         fails when they and this page differ.\n\n\
         | Event | Data |\n|---|---|\n\
         | `{}` | the whole snapshot ([snapshot.md](snapshot.md)) |\n\
         | `{}` | the changes from one version to the next (below) |\n\
         | `{}` | `since` cannot be resumed; a `snapshot` follows |\n\
         | `{}` | nothing changed for {} s |\n\n",
        watch_events::SNAPSHOT,
        watch_events::DELTA,
        watch_events::RESYNC,
        watch_events::HEARTBEAT,
        gpuboard::wire::HEARTBEAT.as_secs(),
    );
    let delta = DeltaBody {
        from: version(1),
        to: version(2),
        changes: Vec::new(),
    };
    page.push_str("## `delta`\n\n");
    page.push_str(&schema_table(&[serde_json::to_value(&delta).unwrap()]));
    page.push_str(
        "\nEach item of `changes` is an object whose `op` names the change; apply them in order.\n\n",
    );
    for (op, samples) in &ops {
        let _ = write!(page, "### `op: {op}`\n\n");
        page.push_str(&schema_table(samples));
        page.push('\n');
    }
    page.push_str("## `resync`\n\n");
    page.push_str(&schema_table(&[serde_json::to_value(ResyncBody {
        reason: "why".into(),
    })
    .unwrap()]));
    page.push_str("\n## `heartbeat`\n\n");
    page.push_str(&schema_table(&[serde_json::to_value(HeartbeatBody {
        version: version(3),
    })
    .unwrap()]));
    check_generated("watch.md", &page);
}

/// The capacity page: a real serve's `GET /v1/capacity`, and one of the type with every
/// optional field set (a cordoned, unhealthy device with a UUID on a node with CPU taken).
async fn capacity_page(url: &str) -> String {
    use gpuboard::wire::capacity::{CapacitySummary, DeviceCapacity, NodeCapacity};
    let served: Value = common::http()
        .get(format!("{url}/v1/capacity"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let every = CapacitySummary {
        nodes: vec![NodeCapacity {
            cpus_milli: Some(8000),
            cpus_allocated_milli: 1000,
            devices: vec![DeviceCapacity {
                uuid: Some("GPU-0".into()),
                cordoned: true,
                health: gpuboard::placement::Health::Unhealthy("xid 79".into()),
                ..DeviceCapacity::default()
            }],
            ..NodeCapacity::default()
        }],
        ..CapacitySummary::default()
    };
    let mut page = String::from(
        "# Capacity schema reference\n\n\
         What `GET /v1/capacity` answers: what placement needs of an endpoint (per node its CPU,\n\
         per device its model, schedulable memory and what claims hold of memory, compute and\n\
         slots, cordons and health), which a fleet claim ranks endpoints on instead of their\n\
         snapshots. Its `ETag` is a digest of the body: `If-None-Match` with it answers 304\n\
         while the capacity is unchanged. Fields at their default (no CPU taken, not\n\
         cordoned, healthy, no UUID) are left out. Generated by `tests/reference.rs` from a\n\
         real `gpuboard serve` and the type; the test fails when they and this page differ.\n\n",
    );
    page.push_str(&schema_table(&[
        served,
        serde_json::to_value(&every).unwrap(),
    ]));
    page
}

/// One change of every kind, filled from `snap`. The match below is exhaustive: a new kind
/// of change does not compile until it is added here, and so to watch.md.
fn every_change(snap: &Snapshot) -> Vec<SnapshotChange> {
    let node = snap.nodes[0].clone();
    let claim = snap.claims[0].clone();
    let all = vec![
        SnapshotChange::Header {
            endpoint: snap.endpoint.clone(),
            revision: snap.revision,
            taken_at: snap.taken_at,
        },
        SnapshotChange::Node { node: node.clone() },
        SnapshotChange::NodeRemoved {
            name: node.name.clone(),
        },
        SnapshotChange::Nodes {
            nodes: snap.nodes.clone(),
        },
        SnapshotChange::Claim {
            claim: Box::new(claim.clone()),
        },
        SnapshotChange::ClaimRemoved { id: claim.id },
        SnapshotChange::Claims {
            claims: snap.claims.clone(),
        },
        SnapshotChange::Projects {
            projects: snap.projects.clone(),
        },
        SnapshotChange::Project {
            project: snap.projects[0].clone(),
        },
        SnapshotChange::ProjectRemoved {
            name: snap.projects[0].name.clone(),
        },
        SnapshotChange::Revision {
            revision: snap.revision,
            taken_at: snap.taken_at,
        },
        SnapshotChange::Resources {
            resources: snap.resources.clone(),
        },
        SnapshotChange::Coordination {
            records: snap.coordination.clone(),
        },
        SnapshotChange::Host {
            host: snap.host.clone(),
        },
        SnapshotChange::EventsAppended {
            events: snap.events.clone(),
            keep: 100,
        },
        SnapshotChange::Events {
            events: snap.events.clone(),
        },
        SnapshotChange::Figures {
            at: Some(snap.taken_at),
            nodes: vec![NodeFigures {
                name: node.name.clone(),
                devices: vec![DeviceFigures {
                    index: 0,
                    utilization_gpu: Some(57),
                    utilization_memory: Some(34),
                    temperature_c: Some(55),
                    power_w: Some(412),
                    clock_sm_mhz: Some(1_271),
                    clock_memory_mhz: Some(1_593),
                    fan_pct: None,
                    memory_used_mib: Some(40_960),
                    processes_short_mib: vec![Some(0)],
                    unclaimed_mib: Some(0),
                    utilization_samples: vec![55, 57],
                    history_len: None,
                }],
            }],
            claims: vec![ClaimFigures {
                id: claim.id,
                memory_beyond_mib: Some(0),
                over_limit: false,
                idle: false,
            }],
        },
    ];
    for c in &all {
        match c {
            SnapshotChange::Header { .. }
            | SnapshotChange::Node { .. }
            | SnapshotChange::NodeRemoved { .. }
            | SnapshotChange::Nodes { .. }
            | SnapshotChange::Claim { .. }
            | SnapshotChange::ClaimRemoved { .. }
            | SnapshotChange::Claims { .. }
            | SnapshotChange::Projects { .. }
            | SnapshotChange::Project { .. }
            | SnapshotChange::ProjectRemoved { .. }
            | SnapshotChange::Revision { .. }
            | SnapshotChange::Resources { .. }
            | SnapshotChange::Coordination { .. }
            | SnapshotChange::Host { .. }
            | SnapshotChange::EventsAppended { .. }
            | SnapshotChange::Events { .. }
            | SnapshotChange::Figures { .. } => {}
        }
    }
    all
}

/// `(name, code, doc)` of every `pub const EXIT_*: u8` under src/, with its doc comment.
fn exit_constants() -> Vec<(String, u8, String)> {
    fn files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut all = Vec::new();
    files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut all);
    let mut found = Vec::new();
    for f in all {
        let text = std::fs::read_to_string(&f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(rest) = line.trim().strip_prefix("pub const EXIT_") else {
                continue;
            };
            let (name, value) = rest.split_once(": u8 = ").unwrap_or_else(|| {
                panic!(
                    "{}: exit code constants are `pub const EXIT_NAME: u8 = N;`",
                    f.display()
                )
            });
            let code: u8 = value.trim_end_matches(';').parse().unwrap();
            let mut doc = Vec::new();
            for prev in lines[..i].iter().rev() {
                let Some(d) = prev.trim().strip_prefix("///") else {
                    break;
                };
                doc.insert(0, d.trim().to_string());
            }
            let doc = doc.join(" ");
            let doc = doc.strip_prefix("Exit code: ").unwrap_or(&doc).to_string();
            found.push((format!("EXIT_{name}"), code, doc));
        }
    }
    found.sort_by_key(|(_, code, _)| *code);
    found
}

#[test]
fn the_exit_code_reference_matches_the_constants() {
    let constants = exit_constants();
    assert!(constants.len() >= 6, "{constants:?}");
    let mut seen = BTreeSet::new();
    for (name, code, _) in &constants {
        assert!(
            seen.insert(*code),
            "exit code {code} is used twice ({name})"
        );
        assert!(*code > 2, "{name} = {code} collides with 0, 1 or 2");
    }
    let mut page = String::from(
        "# Exit codes\n\n\
         What a `gpuboard` client command's exit status means. Generated by `tests/reference.rs`\n\
         from the `EXIT_*` constants of src/ and their doc comments; the test fails when they and\n\
         this page differ. `gpuboard run` exits with its command's status once the command ran.\n\n\
         | Code | Constant | Meaning |\n|---|---|---|\n\
         | 0 | | success |\n\
         | 1 | | any other failure (an endpoint error, an unreadable answer, a command that cannot start) |\n\
         | 2 | | bad command-line usage (clap) |\n",
    );
    for (name, code, doc) in &constants {
        let _ = writeln!(page, "| {code} | `{name}` | {doc} |");
    }
    check_generated("exit-codes.md", &page);
}

#[test]
fn the_readme_links_every_reference() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    for page in [
        "config.md",
        "inventory.md",
        "snapshot.md",
        "watch.md",
        "exit-codes.md",
        "api-bodies.md",
        "report.md",
    ] {
        assert!(reference(page).exists(), "docs/reference/{page} missing");
        assert!(
            readme.contains(&format!("docs/reference/{page}")),
            "README does not link docs/reference/{page}"
        );
    }
}

/// The fields each body's section of api-bodies.md (a heading naming its route) lists, and
/// its JSON example when it has one.
fn documented_bodies(text: &str) -> BTreeMap<String, (BTreeSet<String>, Option<String>)> {
    let mut bodies: BTreeMap<String, (BTreeSet<String>, Option<String>)> = BTreeMap::new();
    let mut section = None;
    let mut example: Option<String> = None;
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("## `") {
            section = heading.strip_suffix('`').map(str::to_string);
            continue;
        }
        let Some(s) = &section else { continue };
        let entry = bodies.entry(s.clone()).or_default();
        if line == "```json" {
            example = Some(String::new());
        } else if line == "```" {
            entry.1 = example.take();
        } else if let Some(ex) = &mut example {
            ex.push_str(line);
        } else if let Some(row) = line.strip_prefix("| `") {
            entry.0.insert(row.split('`').next().unwrap().to_string());
        }
    }
    bodies
}

#[test]
fn the_api_bodies_reference_lists_every_field_each_body_accepts() {
    use gpuboard::request::ClaimRequest;
    use gpuboard::wire::{MoveBody, RenewBody, RequestBody, ShareBody, read_body};
    type Read = fn(Value) -> Result<(), gpuboard::request::RequestError>;

    /// The fields a body allows, from its error for an unknown one.
    fn allowed(error: Result<(), gpuboard::request::RequestError>) -> BTreeSet<String> {
        let e = error.expect_err("an unknown field is refused");
        assert_eq!(e.field.as_deref(), Some("zz_not_a_field"), "{e}");
        let list = e.message.split("allowed fields: ").nth(1).unwrap();
        list.split(", ").map(str::to_string).collect()
    }
    fn typed<T: RequestBody>(v: Value) -> Result<(), gpuboard::request::RequestError> {
        read_body::<T>(v).map(|_| ())
    }
    let probe = || json!({"zz_not_a_field": 1});
    let text = std::fs::read_to_string(reference("api-bodies.md")).unwrap();
    let documented = documented_bodies(&text);
    let in_code: BTreeMap<&str, (BTreeSet<String>, Read)> = [
        (
            "POST /v1/claims",
            (
                allowed(ClaimRequest::from_json(&probe()).map(|_| ())),
                (|v: Value| ClaimRequest::from_json(&v).map(|_| ())) as Read,
            ),
        ),
        (
            "POST /v1/claims/{id}/move",
            (allowed(typed::<MoveBody>(probe())), typed::<MoveBody>),
        ),
        (
            "POST /v1/claims/{id}/renew",
            (allowed(typed::<RenewBody>(probe())), typed::<RenewBody>),
        ),
        (
            "PUT /v1/projects/{name}",
            (allowed(typed::<ShareBody>(probe())), typed::<ShareBody>),
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        documented.keys().map(String::as_str).collect::<Vec<_>>(),
        in_code.keys().copied().collect::<Vec<_>>(),
        "api-bodies.md has one section per body"
    );
    for (route, (fields, example)) in &documented {
        let (accepted, read) = &in_code[route.as_str()];
        assert_eq!(
            fields, accepted,
            "api-bodies.md, `{route}`: documented vs accepted fields"
        );
        if let Some(ex) = example {
            let v: Value = serde_json::from_str(ex).unwrap();
            read(v).unwrap_or_else(|e| panic!("api-bodies.md, `{route}`: the example: {e}"));
        }
    }
}
