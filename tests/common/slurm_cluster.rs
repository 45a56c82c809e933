//! A real one-node Slurm 22.05 cluster on 127.0.0.1 for the Slurm source and engine-action
//! tests: munged, slurmctld, slurmd and slurmrestd (on a unix socket, `rest_auth/local`,
//! dropped to `nobody`), four fake `gpu:a100` devices and 16 shards. slurmrestd acts as `nobody`, so jobs it may act on are submitted as `nobody`
//! (`sbatch --uid`); jobs of root show its permission refusal. Every process is stopped by
//! pid, and every job cancelled, when the cluster is dropped.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::format_collect
)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Stopper, free_port};

/// The running cluster.
pub struct Cluster {
    // Dropped in reverse start order: slurmrestd first, munged last.
    daemons: Vec<Stopper>,
    tmp: tempfile::TempDir,
    _turn: crate::common::PeerTurn,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("scancel")
            .args(["--user", "root"])
            .env("SLURM_CONF", self.conf())
            .status();
        let _ = Command::new("scancel")
            .args(["--user", "nobody"])
            .env("SLURM_CONF", self.conf())
            .status();
        for _ in 0..50 {
            let out = Command::new("squeue")
                .args(["-h", "-o", "%i"])
                .env("SLURM_CONF", self.conf())
                .output();
            if out.is_ok_and(|o| o.status.success() && o.stdout.is_empty()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        while let Some(d) = self.daemons.pop() {
            drop(d);
        }
    }
}

impl Cluster {
    /// The cluster's directory.
    pub fn dir(&self) -> &Path {
        self.tmp.path()
    }

    /// `slurm.conf`.
    pub fn conf(&self) -> PathBuf {
        self.dir().join("slurm.conf")
    }

    /// slurmrestd's socket, as a source URL (`unix:/...`).
    pub fn url(&self) -> String {
        format!("unix:{}", self.dir().join("rest/slurmrestd.sock").display())
    }

    /// Runs a Slurm command; panics with its stderr when it fails.
    pub fn run(&self, cmd: &str, args: &[&str]) -> String {
        let out = Command::new(cmd)
            .args(args)
            .env("SLURM_CONF", self.conf())
            .output()
            .unwrap_or_else(|e| panic!("run {cmd}: {e}"));
        assert!(
            out.status.success(),
            "{cmd} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Submits `sleep 600` as `user` asking for `gres`; returns the job id.
    pub fn submit(&self, user: &str, name: &str, gres: &str) -> u32 {
        let out = self.run(
            "sbatch",
            &[
                "--parsable",
                &format!("--uid={user}"),
                "--chdir=/tmp",
                "-J",
                name,
                &format!("--gres={gres}"),
                "-o",
                "/dev/null",
                "--wrap",
                "sleep 600",
            ],
        );
        out.trim().split(';').next().unwrap().parse().unwrap()
    }

    /// `STATE REASON` of a job, from squeue (empty once it is gone).
    pub fn job(&self, id: u32) -> String {
        let out = Command::new("squeue")
            .args(["-h", "-j", &id.to_string(), "-o", "%T %r"])
            .env("SLURM_CONF", self.conf())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Waits (up to a minute) until `ok`; panics with the daemons' logs.
    pub fn wait_for(&self, what: &str, mut ok: impl FnMut() -> bool) {
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
                        std::fs::read_to_string(self.dir().join(f)).unwrap_or_default()
                    )
                })
                .collect();
                panic!("timed out waiting for {what}\n{logs}");
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn spawn(&mut self, name: &'static str, cmd: &str, args: &[&str]) {
        let log = std::fs::File::create(self.dir().join(format!("{name}.out"))).unwrap();
        let child = Command::new(cmd)
            .args(args)
            .env("SLURM_CONF", self.conf())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {cmd}: {e}"));
        self.daemons.push(Stopper { child, name });
    }

    /// Starts the cluster, its node named `gpunode`, and waits for the node to be idle.
    pub fn start() -> Cluster {
        Cluster::start_on("gpunode")
    }

    /// Starts the cluster with its one node named `node` and waits for it to be idle.
    /// Needs root and Debian's `slurm-wlm`, `slurmrestd` and `munge`.
    // The cluster's start in the order it must happen (checks, files and keys, munged,
    // slurmctld, slurmd, slurmrestd, the node idle): a recipe read top to bottom.
    #[allow(clippy::too_many_lines)]
    pub fn start_on(node: &str) -> Cluster {
        let turn = crate::common::heavy_peer_turn();
        for bin in [
            "/usr/sbin/slurmctld",
            "/usr/sbin/slurmd",
            "/usr/sbin/slurmrestd",
            "/usr/sbin/munged",
        ] {
            assert!(
                Path::new(bin).is_file(),
                "no {bin}: run scripts/test (it installs slurm-wlm, slurmrestd and munge), or \
                 set GPUBOARD_SKIP_PEERS=slurm"
            );
        }
        // SAFETY: geteuid has no preconditions.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "slurmctld and slurmd need root; GPUBOARD_SKIP_PEERS=slurm skips this test"
        );
        let tmp = tempfile::tempdir().unwrap();
        let mut c = Cluster {
            daemons: Vec::new(),
            tmp,
            _turn: turn,
        };
        let dir = c.dir().to_path_buf();
        // slurmrestd runs as nobody: it must reach the munge socket and its own socket dir.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).unwrap();
        for sub in ["state", "spool", "dev", "munge", "rest"] {
            std::fs::create_dir(dir.join(sub)).unwrap();
        }
        std::fs::set_permissions(dir.join("munge"), std::fs::Permissions::from_mode(0o711))
            .unwrap();
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
        let host = String::from_utf8(Command::new("hostname").arg("-s").output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_string();
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
                 GresTypes=gpu,shard\nMpiDefault=none\nReturnToService=2\nSlurmdParameters=config_overrides\n\
                 NodeName={node} NodeAddr=127.0.0.1 CPUs=4 RealMemory=1000 Gres=gpu:a100:4,shard:a100:16 State=UNKNOWN\n\
                 PartitionName=gpu Nodes={node} Default=YES MaxTime=INFINITE State=UP\n"
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("gres.conf"),
            format!(
                "AutoDetect=off\nNodeName={node} Name=gpu Type=a100 File={d}/dev/nvidia[0-3]\n\
                 NodeName={node} Name=shard Type=a100 Count=16\n"
            ),
        )
        .unwrap();
        let munge_socket = format!("{d}/munge/munge.socket");
        c.spawn(
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
        c.wait_for("munged", || Path::new(&munge_socket).exists());
        let conf = format!("{d}/slurm.conf");
        c.spawn(
            "slurmctld",
            "/usr/sbin/slurmctld",
            &["-D", "-i", "-f", &conf],
        );
        c.wait_for("slurmctld", || {
            std::net::TcpStream::connect(("127.0.0.1", ctld_port)).is_ok()
        });
        c.spawn(
            "slurmd",
            "/usr/sbin/slurmd",
            &["-D", "-N", node, "-f", &conf],
        );
        let socket = format!("{d}/rest/slurmrestd.sock");
        c.spawn(
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
        c.wait_for("the node to come up idle", || {
            Command::new("sinfo")
                .args(["-h", "-n", node, "-o", "%T"])
                .env("SLURM_CONF", &conf)
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
        });
        c.wait_for("slurmrestd's socket", || Path::new(&socket).exists());
        c
    }
}
