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

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Stopper, fixture, free_port, skip_peer};
use gpuboard::clock::{ManualClock, Timestamp};
use gpuboard::placement::Health;
use gpuboard::snapshot::{ClaimState, Snapshot};
use gpuboard::sources::error::SourceError;
use gpuboard::sources::slurm::{SlurmAnswers, SlurmConfig, SlurmSource, snapshot};
use gpuboard::units::Units;
use serde_json::Value;

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

fn run(dir: &Path, cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .env("SLURM_CONF", dir.join("slurm.conf"))
        .output()
        .unwrap_or_else(|e| panic!("run {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn spawn(dir: &Path, name: &'static str, cmd: &str, args: &[&str]) -> Stopper {
    let log = std::fs::File::create(dir.join(format!("{name}.out"))).unwrap();
    let child = Command::new(cmd)
        .args(args)
        .env("SLURM_CONF", dir.join("slurm.conf"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("start {cmd}: {e}"));
    Stopper { child, name }
}

fn wait_for(what: &str, dir: &Path, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_mins(1);
    while !ok() {
        if Instant::now() > deadline {
            let logs: String = [
                "slurmctld.log",
                "slurmd.log",
                "slurmrestd.out",
                "munged.out",
            ]
            .iter()
            .map(|f| {
                format!(
                    "== {f}\n{}\n",
                    std::fs::read_to_string(dir.join(f)).unwrap_or_default()
                )
            })
            .collect();
            panic!("timed out waiting for {what}\n{logs}");
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Cancels the test's jobs and waits for them to go, so no step outlives the cluster.
struct Jobs<'a>(&'a Path);

impl Drop for Jobs<'_> {
    fn drop(&mut self) {
        let conf = self.0.join("slurm.conf");
        let _ = Command::new("scancel")
            .args(["--user", "root"])
            .env("SLURM_CONF", &conf)
            .status();
        for _ in 0..50 {
            let out = Command::new("squeue")
                .args(["-h", "-o", "%i"])
                .env("SLURM_CONF", &conf)
                .output();
            if out.is_ok_and(|o| o.status.success() && o.stdout.is_empty()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn short_hostname() -> String {
    let out = Command::new("hostname").arg("-s").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_cluster_agrees_with_scontrol_and_squeue() {
    if skip_peer("slurm") {
        eprintln!("GPUBOARD_SKIP_PEERS has slurm: skipped");
        return;
    }
    for bin in [
        "/usr/sbin/slurmctld",
        "/usr/sbin/slurmd",
        "/usr/sbin/slurmrestd",
        "/usr/sbin/munged",
    ] {
        assert!(
            Path::new(bin).is_file(),
            "no {bin}: run scripts/test (it installs slurm-wlm, slurmrestd and munge), or set \
             GPUBOARD_SKIP_PEERS=slurm to skip this test"
        );
    }
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the Slurm test starts slurmctld and slurmd, which needs root; GPUBOARD_SKIP_PEERS=slurm skips it"
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    use std::os::unix::fs::PermissionsExt;
    // slurmrestd runs as nobody: it must reach the munge socket and its own socket dir.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    for sub in ["state", "spool", "dev", "munge", "rest"] {
        std::fs::create_dir(dir.join(sub)).unwrap();
    }
    std::fs::set_permissions(dir.join("munge"), std::fs::Permissions::from_mode(0o711)).unwrap();
    std::os::unix::fs::chown(dir.join("rest"), Some(65534), None).unwrap();
    for i in 0..4 {
        std::fs::write(dir.join(format!("dev/nvidia{i}")), "").unwrap();
    }
    let key: Vec<u8> = (0..1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(dir.join("munge/munge.key"), key).unwrap();
    std::fs::set_permissions(
        dir.join("munge/munge.key"),
        std::fs::Permissions::from_mode(0o400),
    )
    .unwrap();

    let d = dir.display();
    let (ctld_port, slurmd_port) = (free_port(), free_port());
    let host = short_hostname();
    std::fs::write(
        dir.join("slurm.conf"),
        format!(
            "ClusterName=gpuboard\nSlurmctldHost={host}(127.0.0.1)\nSlurmctldPort={ctld_port}\n\
             SlurmdPort={slurmd_port}\nSlurmUser=root\nSlurmdUser=root\nMailProg=/bin/true\n\
             AuthType=auth/munge\nAuthInfo=socket={d}/munge/munge.socket\nCredType=cred/munge\n\
             CommunicationParameters=NoInAddrAny,NoCtldInAddrAny\n\
             StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd.log\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
             SchedulerType=sched/backfill\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
             GresTypes=gpu,shard\nMpiDefault=none\nReturnToService=2\n\
             NodeName=gpunode NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 Gres=gpu:a100:4,shard:a100:16 State=UNKNOWN\n\
             PartitionName=gpu Nodes=gpunode Default=YES MaxTime=INFINITE State=UP\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("gres.conf"),
        format!(
            "AutoDetect=off\nNodeName=gpunode Name=gpu Type=a100 File={d}/dev/nvidia[0-3]\n\
             NodeName=gpunode Name=shard Type=a100 Count=16\n"
        ),
    )
    .unwrap();

    let munge_socket = format!("{d}/munge/munge.socket");
    let _munged = spawn(
        dir,
        "munged",
        "/usr/sbin/munged",
        &[
            "--foreground",
            "--force",
            &format!("--key-file={d}/munge/munge.key"),
            &format!("--socket={munge_socket}"),
            &format!("--pid-file={d}/munge/munged.pid"),
            &format!("--log-file={d}/munged.log"),
            &format!("--seed-file={d}/munge/seed"),
        ],
    );
    wait_for("munged", dir, || Path::new(&munge_socket).exists());
    let conf = format!("{d}/slurm.conf");
    let _ctld = spawn(
        dir,
        "slurmctld",
        "/usr/sbin/slurmctld",
        &["-D", "-i", "-f", &conf],
    );
    wait_for("slurmctld", dir, || {
        std::net::TcpStream::connect(("127.0.0.1", ctld_port)).is_ok()
    });
    let _slurmd = spawn(
        dir,
        "slurmd",
        "/usr/sbin/slurmd",
        &["-D", "-N", "gpunode", "-f", &conf],
    );
    let socket = format!("{d}/rest/slurmrestd.sock");
    let _rest = spawn(
        dir,
        "slurmrestd",
        "/usr/sbin/slurmrestd",
        &[
            "-f",
            &conf,
            "-a",
            "rest_auth/local",
            "-s",
            "openapi/v0.0.38",
            "-u",
            "nobody",
            &format!("unix:{socket}"),
        ],
    );
    wait_for("the node to come up idle", dir, || {
        Command::new("sinfo")
            .args(["-h", "-n", "gpunode", "-o", "%T"])
            .env("SLURM_CONF", &conf)
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
    });
    let _jobs = Jobs(dir);
    run(
        dir,
        "sbatch",
        &[
            "-J",
            "train",
            "-A",
            "acct1",
            "--gres=gpu:a100:2",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 600",
        ],
    );
    run(
        dir,
        "sbatch",
        &[
            "-J",
            "infer",
            "--gres=shard:a100:3",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 600",
        ],
    );
    run(
        dir,
        "sbatch",
        &[
            "-J",
            "big",
            "--gres=gpu:a100:3",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 600",
        ],
    );
    wait_for(
        "two running jobs and one pending for resources",
        dir,
        || {
            let q = run(dir, "squeue", &["-h", "-o", "%j %T %r"]);
            q.contains("train RUNNING")
                && q.contains("infer RUNNING")
                && q.contains("big PENDING Resources")
        },
    );

    let clock = Arc::new(ManualClock::new(TAKEN));
    let mut cfg = SlurmConfig::new(format!("unix:{socket}"));
    cfg.name = "cluster".into();
    let source = SlurmSource::with_clock(cfg, clock).unwrap();
    let s = source.fetch().await.unwrap();
    check_cluster(&s);

    // Against scontrol: the GPUs in use and the shard's GPU, read from its own text.
    let node = run(dir, "scontrol", &["show", "node", "-d", "gpunode"]);
    assert!(node.contains("Gres=gpu:a100:4,shard:a100:16"), "{node}");
    assert!(
        node.contains("GresUsed=gpu:a100:2(IDX:0-1),shard:a100:1(IDX:2)"),
        "{node}"
    );
    let job = run(dir, "scontrol", &["show", "job", "-d"]);
    assert!(job.contains("GRES=gpu:a100:2(IDX:0-1)"), "{job}");
    assert!(job.contains("GRES=shard:a100:3(IDX:2)"), "{job}");
    // Against squeue: job ids, users, accounts, partitions.
    let q = run(dir, "squeue", &["-h", "-o", "%i %j %u %a %P %T"]);
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
    run(
        dir,
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
    run(
        dir,
        "scontrol",
        &["update", "NodeName=gpunode", "State=RESUME"],
    );
    let s = source.fetch().await.unwrap();
    assert!(s.nodes[0].devices.iter().all(|d| !d.cordoned));
}
