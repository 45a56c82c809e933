//! Which endpoints a CLI command acts on (README, "Which sources a command uses"), on real
//! serves driven as a real binary, in tmux as an operator types it and as a process: the
//! action reaches exactly the endpoint named, or nothing is sent anywhere.
//!
//! - A config with a kind typo, or one that names only a Slurm source, is refused (exit 3)
//!   and no endpoint gets anything: the CLI never falls back to one nobody named.
//! - `--endpoint NAME` picks that entry of the config, `--endpoint URL` replaces the config.
//! - `claim --wait` across endpoints where it fits nowhere now queues on one endpoint.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::text;
use crate::common::tmux;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::Server;
use common::foreign::Foreign;
use serde_json::Value;
use tmux::Session;

/// An inventory of one node with `gpus` 80 GiB GPUs.
fn inventory(dir: &Path, node: &str, gpus: u32) -> PathBuf {
    common::one_node_inventory(dir, node, "NVIDIA H100 80GB HBM3", "80GiB", gpus)
}

/// Serves `names`, one node `node-NAME` of `gpus` GPUs each, with a config listing them.
struct World {
    root: tempfile::TempDir,
    servers: Vec<(String, Server)>,
}

impl World {
    fn start(names: &[&str], gpus: u32) -> World {
        let root = tempfile::tempdir().unwrap();
        let servers = names
            .iter()
            .map(|n| {
                let dir = root.path().join(n);
                std::fs::create_dir_all(&dir).unwrap();
                let inv = inventory(root.path(), &format!("node-{n}"), gpus);
                ((*n).to_string(), Server::start(&dir, &inv, &[]))
            })
            .collect();
        std::fs::create_dir_all(root.path().join("home")).unwrap();
        World { root, servers }
    }

    fn server(&self, name: &str) -> &Server {
        &self.servers.iter().find(|(n, _)| n == name).unwrap().1
    }

    /// A config file `file` with every server as a gpuboard entry, then `extra`.
    fn config(&self, file: &str, extra: &str) -> PathBuf {
        let mut text = String::new();
        for (name, s) in &self.servers {
            write!(
                text,
                "[[endpoints]]\nname = \"{name}\"\nurl = \"{}\"\ntoken_file = \"{}\"\n",
                s.url,
                s.dir.join("operator.token").display()
            )
            .unwrap();
        }
        text.push_str(extra);
        let path = self.root.path().join(file);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    /// The shell line running `gpuboard ARGS` with nothing from the environment, then
    /// printing its exit code.
    fn line(&self, args: &str) -> String {
        format!(
            "env -u GPUBOARD_TOKEN -u GPUBOARD_ENDPOINT -u GPUBOARD_DATA_DIR -u GPUBOARD_CONFIG HOME={h} XDG_CONFIG_HOME={h}/config GPUBOARD_CACHE_DIR={h}/cache {bin} {args}; echo EXIT=$?; sleep 60",
            h = self.home().display(),
            bin = env!("CARGO_BIN_EXE_gpuboard")
        )
    }

    /// `gpuboard ARGS` as a process.
    fn cli(&self, args: &[&str]) -> Output {
        common::isolated_cli(&self.home())
            .args(args)
            .output()
            .unwrap()
    }

    /// The claims endpoint `name` holds, read with its own token.
    fn claims(&self, name: &str) -> Vec<Value> {
        let s = self.server(name);
        let out = Command::new("curl")
            .args(["-sf", "-H"])
            .arg(format!("Authorization: Bearer {}", s.read_token()))
            .arg(format!("{}/v1/snapshot", s.url))
            .output()
            .unwrap();
        assert!(out.status.success(), "snapshot of {name}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["claims"].as_array().unwrap().clone()
    }

    /// How many requests endpoint `name` has answered that change something, from its
    /// audit trail: none means nothing reached it.
    fn audited(&self, name: &str) -> usize {
        let s = self.server(name);
        let out = Command::new("curl")
            .args(["-sf", "-H"])
            .arg(format!("Authorization: Bearer {}", s.read_token()))
            .arg(format!("{}/v1/snapshot", s.url))
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["events"].as_array().unwrap().len()
    }
}

#[test]
fn a_config_with_a_kind_typo_or_no_gpuboard_endpoint_is_refused_in_tmux_and_nothing_is_sent() {
    let w = World::start(&["a"], 2);
    let before = w.audited("a");
    let typo = w.root.path().join("typo.toml");
    std::fs::write(
        &typo,
        format!(
            "[[endpoints]]\nname = \"a\"\nurl = \"{}\"\nkind = \"gpuBoard\"\n",
            w.server("a").url
        ),
    )
    .unwrap();
    let s = Session::start(
        120,
        30,
        "typo",
        &w.line(&format!("ls --config {}", typo.display())),
    );
    let screen = s.wait_for("EXIT=");
    assert!(screen.contains("EXIT=3"), "{screen}");
    assert!(
        screen.contains("kind `gpuBoard` is not supported"),
        "{screen}"
    );
    drop(s);

    let slurm = Foreign::start(("500 No", "text/plain", ""));
    let slurm_only = w.root.path().join("slurm.toml");
    std::fs::write(
        &slurm_only,
        format!(
            "[[endpoints]]\nname = \"cluster\"\nurl = \"{}\"\nkind = \"slurm\"\n",
            slurm.url
        ),
    )
    .unwrap();
    let s = Session::start(
        160,
        30,
        "slurmonly",
        &w.line(&format!(
            "claim --fraction 0.1 --config {}",
            slurm_only.display()
        )),
    );
    let screen = s.wait_for("EXIT=");
    assert!(screen.contains("EXIT=3"), "{screen}");
    assert!(
        screen.contains("names no gpuboard endpoint (it has: cluster (slurm))"),
        "{screen}"
    );
    drop(s);
    assert_eq!(slurm.hits(), 0, "nothing went to Slurm");
    assert!(w.claims("a").is_empty(), "nothing reached endpoint a");
    assert_eq!(w.audited("a"), before, "endpoint a audited nothing new");
}

#[test]
fn the_named_endpoint_and_only_it_takes_the_claim() {
    let w = World::start(&["a", "b"], 2);
    let config = w.config("fleet.toml", "");
    let cfg = config.to_str().unwrap();
    // In tmux: `--endpoint b` picks b of the config.
    let s = Session::start(
        160,
        30,
        "named",
        &w.line(&format!(
            "claim --memory 1GiB --holder t --config {cfg} --endpoint b"
        )),
    );
    let screen = s.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(screen.contains("claim 1 placed on node-b:"), "{screen}");
    drop(s);
    assert_eq!(w.claims("b").len(), 1);
    assert!(w.claims("a").is_empty(), "a got nothing");
    // `--endpoint URL` replaces the config's list: only a, though the config names both.
    let a_url = w.server("a").url.clone();
    let a_data = w.server("a").dir.to_str().unwrap().to_string();
    let out = w.cli(&[
        "claim",
        "--memory",
        "1GiB",
        "--holder",
        "t",
        "--config",
        cfg,
        "--endpoint",
        &a_url,
        "--data-dir",
        &a_data,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(w.claims("a").len(), 1);
    assert_eq!(w.claims("b").len(), 1, "b got nothing more");
}

#[test]
fn claim_wait_across_endpoints_queues_on_one_where_it_could_fit_later_in_tmux() {
    let w = World::start(&["a", "b", "c"], 1);
    let config = w.config("fleet.toml", "");
    let cfg = config.to_str().unwrap();
    for n in ["a", "b", "c"] {
        let out = w.cli(&[
            "claim",
            "--gpus",
            "1",
            "--holder",
            "t",
            "--config",
            cfg,
            "--endpoint",
            n,
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    // Without --wait: it fits nowhere now (exit 4), and nothing is queued.
    let out = w.cli(&["claim", "--gpus", "1", "--holder", "t", "--config", cfg]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let s = Session::start(
        160,
        30,
        "wait",
        &w.line(&format!("claim --gpus 1 --holder t --wait --config {cfg}")),
    );
    let screen = s.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(screen.contains("pending"), "{screen}");
    drop(s);
    let pending: Vec<(&str, usize)> = ["a", "b", "c"]
        .iter()
        .map(|n| {
            let p = w
                .claims(n)
                .iter()
                .filter(|c| c["state"] == "pending")
                .count();
            (*n, p)
        })
        .collect();
    let total: usize = pending.iter().map(|p| p.1).sum();
    assert_eq!(total, 1, "queued on exactly one endpoint: {pending:?}");
    assert!(
        screen.contains("claim a/2 pending"),
        "the first in ranking order: {screen}"
    );
}
