//! The Slurm source: captured Slurm 22.05.8 slurmrestd answers, and a real one-node
//! cluster on 127.0.0.1 (munged, slurmctld, slurmd, slurmrestd on a unix socket) with four
//! fake `gpu:a100` devices and 16 shards, running a job on two GPUs and a job on three
//! shards, with a third job pending. The source must agree with `scontrol show node -d`,
//! `scontrol show job -d` and `squeue`, and report a drained node as cordoned.
//!
//! Needs Debian's `slurm-wlm`, `slurmrestd` and `munge` (scripts/test installs them) and
//! root (the daemons run as root; slurmrestd drops to `nobody`, as it must).
//! `GPUBOARD_SKIP_PEERS=slurm` skips the real-cluster test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::format_collect,
    clippy::items_after_statements
)]

use crate::common;
use crate::common::slurm_cluster;

use std::sync::Arc;
use std::time::Duration;

use common::{fixture, skip_peer};
use gpuboard::clock::{ManualClock, Timestamp};
use gpuboard::placement::Health;
use gpuboard::snapshot::{ClaimState, Snapshot};
use gpuboard::sources::error::SourceError;
use gpuboard::sources::slurm::{SlurmAnswers, SlurmConfig, SlurmSource, snapshot};
use gpuboard::units::Units;
use serde_json::Value;
use slurm_cluster::Cluster;

const TAKEN: Timestamp = Timestamp(1_795_317_400_000);

fn json(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(fixture(&format!("slurm/{name}"))).unwrap()).unwrap()
}

/// The checks shared by the captured answers and the live cluster.
fn check_cluster(s: &Snapshot) {
    assert_eq!(s.endpoint.kind, "slurm");
    assert!(
        s.endpoint.version.starts_with("slurm 22.05"),
        "{}",
        s.endpoint.version
    );
    assert_eq!(s.nodes.len(), 1);
    let n = &s.nodes[0];
    assert_eq!(n.name, "gpunode");
    assert_eq!(n.devices.len(), 4);
    assert!(n.devices.iter().all(|d| d.model == "a100"));
    let compute: Vec<Units> = n.devices.iter().map(|d| d.compute_allocated).collect();
    // Two whole GPUs (IDX:0-1) and three of GPU 2's four shards (IDX:2).
    assert_eq!(
        compute,
        vec![Units(10_000), Units(10_000), Units(7_500), Units(0)]
    );
    let placed: Vec<_> = s
        .claims
        .iter()
        .filter(|c| c.state == ClaimState::Placed)
        .collect();
    assert_eq!(placed.len(), 2);
    assert_eq!(placed[0].request.labels["slurm.name"], "train");
    assert_eq!(placed[0].project, "acct1");
    assert_eq!(placed[0].holder.as_deref(), Some("root"));
    assert_eq!(placed[0].request.labels["slurm.partition"], "gpu");
    assert_eq!(
        placed[0]
            .shares
            .iter()
            .map(|s| s.device)
            .collect::<Vec<_>>(),
        vec![0, 1]
    );
    assert_eq!(placed[1].request.labels["slurm.name"], "infer");
    assert_eq!(placed[1].project, "(no account)");
    assert_eq!(placed[1].shares.len(), 1);
    assert_eq!(placed[1].shares[0].device, 2);
    assert_eq!(placed[1].shares[0].slots.0, 3);
    assert!(
        placed[1].form.contains("4 shards per GPU"),
        "{}",
        placed[1].form
    );
    assert_eq!(n.devices[2].holders, vec![placed[1].id]);
    let pending: Vec<_> = s
        .claims
        .iter()
        .filter(|c| c.state == ClaimState::Pending)
        .collect();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].request.labels["slurm.name"], "big");
    assert_eq!(
        pending[0].pending_reasons,
        vec!["Slurm: Resources (waiting for resources to become free)".to_string()]
    );
    let idle: Vec<f64> = s.resources.iter().map(|r| r.idle).collect();
    assert_eq!(idle, vec![1.0]);
}

#[test]
fn captured_cluster_is_read_whole() {
    let s = common::slurm_snapshot(false);
    check_cluster(&s);
    assert!(s.nodes[0].devices.iter().all(|d| !d.cordoned));
    assert_eq!(s.projects.len(), 2);
    // The captures agree with `scontrol show node -d` taken at the same moment.
    let scontrol = std::fs::read_to_string(fixture("slurm/scontrol_show_node_d.txt")).unwrap();
    assert!(scontrol.contains("GresUsed=gpu:a100:2(IDX:0-1),shard:a100:1(IDX:2)"));
}

#[test]
fn captured_drain_is_a_cordon() {
    let s = common::slurm_snapshot(true);
    let d = &s.nodes[0].devices[0];
    assert!(d.cordoned);
    assert_eq!(d.health, Health::Healthy);
}

#[test]
fn down_nodes_are_unhealthy_and_bad_gres_is_named() {
    let mut nodes = json("nodes.json");
    nodes["nodes"][0]["state"] = "down".into();
    nodes["nodes"][0]["state_flags"] = serde_json::json!(["NOT_RESPONDING"]);
    nodes["nodes"][0]["reason"] = "Not responding".into();
    let a = SlurmAnswers {
        nodes: nodes.clone(),
        jobs: json("jobs.json"),
    };
    let s = snapshot(&a, "", TAKEN).unwrap();
    let d = &s.nodes[0].devices[0];
    assert!(d.cordoned);
    assert_eq!(
        d.health,
        Health::Unhealthy("Slurm node down, not responding: Not responding".into())
    );

    let mut spare = nodes["nodes"][0].clone();
    spare["name"] = "spare".into();
    nodes["nodes"].as_array_mut().unwrap().push(spare);
    let whole = snapshot(
        &SlurmAnswers {
            nodes: nodes.clone(),
            jobs: json("jobs.json"),
        },
        "",
        TAKEN,
    )
    .unwrap();
    nodes["nodes"][0]["gres"] = "gpu:a100:four".into();
    // The other nodes stay; the unreadable one is a warning naming where and what.
    let a = SlurmAnswers {
        nodes: nodes.clone(),
        jobs: json("jobs.json"),
    };
    let s = snapshot(&a, "", TAKEN).unwrap();
    assert_eq!(s.nodes.len() + 1, whole.nodes.len());
    let w = &s.endpoint.warnings[0];
    assert_eq!(w.path, "nodes[0].gres");
    assert!(w.found.contains("`four`"), "{w}");
    assert_eq!(w.left_out, "this node");
    // With no node readable, the source is down.
    nodes["nodes"] = serde_json::json!([nodes["nodes"][0].clone()]);
    let a = SlurmAnswers {
        nodes,
        jobs: json("jobs.json"),
    };
    let e = snapshot(&a, "", TAKEN).unwrap_err().to_string();
    assert!(e.contains("nodes[0].gres"), "{e}");
}

#[test]
fn slurm_errors_and_foreign_json_are_told_apart() {
    let mut jobs = json("jobs.json");
    jobs["errors"] = serde_json::json!([{"description": "slurmctld config is unable to load", "error": "Unspecified error"}]);
    let a = SlurmAnswers {
        nodes: json("nodes.json"),
        jobs,
    };
    // The jobs answer failing is a warning: the nodes are still read.
    let s = snapshot(&a, "", TAKEN).unwrap();
    assert!(!s.nodes.is_empty());
    assert!(s.claims.is_empty());
    let w = &s.endpoint.warnings;
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].found.contains("slurmctld config is unable to load"),
        "{w:?}"
    );
    assert_eq!(w[0].left_out, "every job");
    let a = SlurmAnswers {
        nodes: serde_json::json!({"status": "success", "data": {}}),
        jobs: json("jobs.json"),
    };
    let e = snapshot(&a, "", TAKEN).unwrap_err();
    assert!(format!("{e}").contains("NotSlurm"), "{e}");
}

proptest::proptest! {
    #[test]
    fn arbitrary_gres_in_answers_never_panics(g in "\\PC{0,30}", d in "\\PC{0,30}") {
        let mut nodes = json("nodes.json");
        nodes["nodes"][0]["gres"] = g.into();
        let mut jobs = json("jobs.json");
        jobs["jobs"][0]["gres_detail"] = serde_json::json!([d]);
        let _ = snapshot(&SlurmAnswers { nodes, jobs }, "", TAKEN);
    }
}

#[tokio::test]
async fn a_missing_socket_is_named() {
    let mut cfg = SlurmConfig::new("unix:/nonexistent/gpuboard/slurmrestd.sock");
    cfg.timeout = Duration::from_secs(1);
    let e = SlurmSource::new(cfg).unwrap().fetch().await.unwrap_err();
    assert!(
        matches!(
            e,
            SourceError::Unreachable { .. } | SourceError::Refused { .. }
        ),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("unix:/nonexistent/gpuboard/slurmrestd.sock"),
        "{e}"
    );
    let e = SlurmSource::new(SlurmConfig::new("unix:relative.sock")).unwrap_err();
    assert!(matches!(e, SourceError::BadUrl { .. }), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_cluster_agrees_with_scontrol_and_squeue() {
    if skip_peer("slurm") {
        eprintln!("GPUBOARD_SKIP_PEERS has slurm: skipped");
        return;
    }
    let cluster = Cluster::start();
    // Two jobs that run (two whole GPUs; three shards of one) and one waiting for GPUs.
    for job in [
        &["-J", "train", "-A", "acct1", "--gres=gpu:a100:2"][..],
        &["-J", "infer", "--gres=shard:a100:3"],
        &["-J", "big", "--gres=gpu:a100:3"],
    ] {
        let mut args = job.to_vec();
        args.extend(["-o", "/dev/null", "--wrap", "sleep 600"]);
        cluster.run("sbatch", &args);
    }
    cluster.wait_for("two running jobs and one pending for resources", || {
        let q = cluster.run("squeue", &["-h", "-o", "%j %T %r"]);
        q.contains("train RUNNING")
            && q.contains("infer RUNNING")
            && q.contains("big PENDING Resources")
    });

    let clock = Arc::new(ManualClock::new(TAKEN));
    let mut cfg = SlurmConfig::new(cluster.url());
    cfg.name = "cluster".into();
    let source = SlurmSource::with_clock(cfg, clock).unwrap();
    let s = source.fetch().await.unwrap();
    check_cluster(&s);

    // Against scontrol: the GPUs in use and the shard's GPU, read from its own text.
    let node = cluster.run("scontrol", &["show", "node", "-d", "gpunode"]);
    assert!(node.contains("Gres=gpu:a100:4,shard:a100:16"), "{node}");
    assert!(
        node.contains("GresUsed=gpu:a100:2(IDX:0-1),shard:a100:1(IDX:2)"),
        "{node}"
    );
    let job = cluster.run("scontrol", &["show", "job", "-d"]);
    assert!(job.contains("GRES=gpu:a100:2(IDX:0-1)"), "{job}");
    assert!(job.contains("GRES=shard:a100:3(IDX:2)"), "{job}");
    // Against squeue: job ids, users, accounts, partitions.
    let q = cluster.run("squeue", &["-h", "-o", "%i %j %u %a %P %T"]);
    for c in &s.claims {
        let id = &c.request.labels["slurm.job_id"];
        let line = q
            .lines()
            .find(|l| l.starts_with(&format!("{id} ")))
            .unwrap_or_else(|| panic!("job {id} not in squeue:\n{q}"));
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f[1], c.request.labels["slurm.name"]);
        assert_eq!(Some(f[2]), c.holder.as_deref());
        let account = if f[3] == "(null)" {
            "(no account)"
        } else {
            f[3]
        };
        assert_eq!(account, c.project);
        assert_eq!(f[4], c.request.labels["slurm.partition"]);
        let want = if c.state == ClaimState::Placed {
            "RUNNING"
        } else {
            "PENDING"
        };
        assert_eq!(f[5], want);
    }

    // Draining the node shows as a cordon; resuming lifts it.
    cluster.run(
        "scontrol",
        &[
            "update",
            "NodeName=gpunode",
            "State=DRAIN",
            "Reason=gpuboard test",
        ],
    );
    let s = source.fetch().await.unwrap();
    assert!(s.nodes[0].devices.iter().all(|d| d.cordoned));
    cluster.run("scontrol", &["update", "NodeName=gpunode", "State=RESUME"]);
    let s = source.fetch().await.unwrap();
    assert!(s.nodes[0].devices.iter().all(|d| !d.cordoned));
}

/// The captured pending job's `start_time` is Slurm's own expected start, labelled as
/// Slurm's; the running jobs have none.
#[test]
fn captured_pending_job_carries_slurm_s_expected_start() {
    let answers = SlurmAnswers {
        nodes: json("nodes.json"),
        jobs: json("jobs.json"),
    };
    let f = gpuboard::sources::slurm::estimates(&answers, TAKEN);
    assert_eq!(f.engine.as_deref(), Some("Slurm"));
    let s = snapshot(&answers, "lab", TAKEN).unwrap();
    let pending: Vec<_> = s
        .claims
        .iter()
        .filter(|c| c.state == ClaimState::Pending)
        .collect();
    assert_eq!(f.starts.len(), 1, "{f:?}");
    assert_eq!(f.starts[0].claim, pending[0].id);
    let p50 = f.starts[0].start.unwrap().p50;
    assert_eq!(p50, Timestamp(1_826_853_381_000), "as slurmrestd wrote it");
}

/// Over a real socket: a slurmrestd stand-in answering the captured nodes and jobs by
/// path. After a fetch, the source's forecast is Slurm's own start for the pending job;
/// before any fetch it has none.
#[tokio::test]
async fn the_source_gives_slurm_s_start_after_a_fetch() {
    use gpuboard::sources::Source;
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (nodes, jobs) = (
        json("nodes.json").to_string(),
        json("jobs.json").to_string(),
    );
    std::thread::spawn(move || {
        for sock in listener.incoming() {
            let Ok(mut sock) = sock else { return };
            let mut buf = [0u8; 8192];
            let _ = sock.set_read_timeout(Some(Duration::from_secs(5)));
            let n = sock.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            let body = if head.starts_with("GET /slurm/v0.0.38/jobs") {
                &jobs
            } else {
                &nodes
            };
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(reply.as_bytes());
        }
    });
    let mut cfg = SlurmConfig::new(url);
    cfg.token = Some("t".into());
    let src = SlurmSource::with_clock(cfg, Arc::new(ManualClock::new(TAKEN))).unwrap();
    let before = src.forecast().unwrap().await.unwrap();
    assert!(before.starts.is_empty(), "{before:?}");
    let snap = src.fetch().await.unwrap();
    let pending = snap
        .claims
        .iter()
        .find(|c| c.state == ClaimState::Pending)
        .unwrap();
    let f = src.forecast().unwrap().await.unwrap();
    assert_eq!(f.engine.as_deref(), Some("Slurm"));
    assert_eq!(
        f.of(pending.id).and_then(|e| e.start).map(|b| b.p50),
        Some(Timestamp(1_826_853_381_000))
    );
}
