//! `gpuboard run`: claim GPU memory, run a command with its devices in
//! `CUDA_VISIBLE_DEVICES` (and the memory limit in its environment), renew the lease while
//! it runs, forward signals to it, and release the claim when it exits.
//!
//! The command never outlives `run`: it gets its own process group (signals go to the
//! whole group, and what is left of the group when the command exits is ended) and a
//! parent-death signal, so a `kill -9` of `run` kills it too. What it started in the
//! background may live on after such a kill: those processes stay the claim's owners.
//! They are kept in a cgroup of their own where one can be made (`run_group`), and carry
//! `GPUBOARD_RUN_PID` in any case, by which a local endpoint keeps the claim (extending
//! its lease) while any of them runs, and releases it once the last has ended.

use std::time::Duration;

use clap::Args;
use serde_json::{Map, json};

use super::claims::{devices_of, refused};
use super::fleet::{PlaceArgs, place};
use super::members::members;
use super::run_group::RunGroup;
use super::snapcache::SnapshotCache;
use super::{Conn, user};
use crate::client::{ClaimOutcome, Client, ClientError};
use crate::ids::ClaimId;
use crate::units::Bytes;
use crate::wire::ClaimDraft;

/// `gpuboard run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// GPU memory per device (20GiB, 512Mi, 40G).
    #[arg(long)]
    pub memory: String,
    /// Lease in seconds, renewed every third of it while CMD runs.
    #[arg(long, default_value_t = 60)]
    pub ttl: u64,
    /// Project to account.
    #[arg(long)]
    pub project: Option<String>,
    /// Holder name (default: the user).
    #[arg(long)]
    pub holder: Option<String>,
    /// Only this node.
    #[arg(long)]
    pub node: Option<String>,
    /// Only this accelerator type.
    #[arg(long)]
    pub accelerator: Option<String>,
    #[command(flatten)]
    pub place: PlaceArgs,
    #[command(flatten)]
    pub conn: Conn,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub cmd: Vec<String>,
}

/// Whether the endpoint runs on this host, so that a pid means something to it.
fn endpoint_is_local(endpoint: &str) -> bool {
    reqwest::Url::parse(endpoint).ok().is_some_and(|u| {
        let host = u.host_str().unwrap_or_default();
        host == "localhost"
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    })
}

/// `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` for `count` visible devices each limited to `limit`:
/// `0=20G,1=20G` (ordinals as CMD sees them; whole GiB as `G`, else MiB as `M`, rounded down
/// so that the limit never exceeds the reservation).
pub fn mps_limit(count: usize, limit: Bytes) -> String {
    let value = if limit.0.is_multiple_of(1 << 30) {
        format!("{}G", limit.0 >> 30)
    } else {
        format!("{}M", limit.0 >> 20)
    };
    (0..count)
        .map(|i| format!("{i}={value}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `gpuboard run ... -- CMD`: the exit code is CMD's (128 + signal when a signal ended it).
// Left whole for now: others are reworking `run` with the fleet protocol; it is to be
// split into the claim, the child's start and its supervision.
#[allow(clippy::too_many_lines)]
pub(super) async fn run_command(a: RunArgs) -> anyhow::Result<u8> {
    Bytes::parse(&a.memory).map_err(|e| ClientError::Invalid {
        rule: None,
        rule_number: None,
        field: Some("memory".into()),
        detail: format!("--memory {}: {e}", a.memory),
    })?;
    let ttl = a.ttl.max(3);
    let members = members(&a.conn)?;
    let mut base = Map::new();
    base.insert(
        "labels".into(),
        json!({"command": a.cmd.first().cloned().unwrap_or_default()}),
    );
    // On this host the endpoint also releases the claim if this process dies.
    if members
        .list
        .iter()
        .all(|m| endpoint_is_local(m.client.endpoint()))
    {
        base.insert("pid".into(), json!(std::process::id()));
    }
    let draft = ClaimDraft {
        memory: Some(a.memory.clone()),
        ttl: Some(ttl.to_string()),
        project: a.project.clone(),
        holder: a.holder.clone().or_else(user),
        node: a.node.clone(),
        accelerator_type: a.accelerator.clone(),
        ..ClaimDraft::default()
    };
    let request = draft.to_request(base).map_err(ClientError::from)?;
    let placed = match place(&members, &request, &a.place, &SnapshotCache::user()).await {
        Ok(p) => p,
        Err(e) => return refused(e, false),
    };
    let c = &members.list[placed.member].client;
    let claim = match placed.outcome {
        ClaimOutcome::Placed(v) => v,
        ClaimOutcome::Pending(v) => {
            let _ = c.release(v.id).await;
            anyhow::bail!("claim {} was queued instead of placed; released it", v.id);
        }
    };
    let limit = claim
        .shares
        .iter()
        .map(|s| s.memory)
        .min()
        .unwrap_or_default();
    let visible = devices_of(&claim);
    let mut child = tokio::process::Command::new(&a.cmd[0]);
    child
        .args(&a.cmd[1..])
        .env("CUDA_VISIBLE_DEVICES", &visible)
        .env("GPUBOARD_MEMORY_LIMIT", limit.0.to_string())
        .env(
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
            mps_limit(claim.shares.len(), limit),
        )
        .env("GPUBOARD_CLAIM_ID", claim.id.to_string())
        .env("GPUBOARD_ENDPOINT", c.endpoint())
        .env(
            crate::endpoint::engine::RUN_PID_ENV,
            std::process::id().to_string(),
        );
    if members.many() {
        eprintln!(
            "gpuboard run: claim {} on endpoint {}, node {}",
            members.label(placed.member, claim.id),
            members.list[placed.member].name,
            claim.node.as_deref().unwrap_or("?")
        );
    }
    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    // Without a cgroup, the endpoint still finds the command's processes by their variable.
    let cgroup = RunGroup::make().ok();
    let procs_fd = cgroup.as_ref().map(RunGroup::procs_fd);
    let terminal = Terminal::take_over();
    // SAFETY: between fork and exec, only async-signal-safe calls.
    unsafe {
        child.pre_exec(move || {
            if let Some(fd) = procs_fd {
                // Into the run's cgroup before anything else can start: "0" is the writer.
                // A failure leaves the variable to find it by.
                libc::write(fd, b"0".as_ptr().cast(), 1);
            }
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if terminal.is_some() {
                // Not inherited from `run`'s own setting: the command stops on background
                // terminal output as usual.
                libc::signal(libc::SIGTTOU, libc::SIG_DFL);
                // The command gets the terminal (keys, Ctrl-C), as it would without `run`;
                // SIGTTOU is blocked so a background group may take it.
                let mut block: libc::sigset_t = std::mem::zeroed();
                let mut before: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&raw mut block);
                libc::sigaddset(&raw mut block, libc::SIGTTOU);
                libc::sigprocmask(libc::SIG_BLOCK, &raw const block, &raw mut before);
                libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpid());
                libc::sigprocmask(libc::SIG_SETMASK, &raw const before, std::ptr::null_mut());
            }
            // The signal follows the forking thread: a runtime worker, alive as long as `run`.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // `run` may have died before the signal was armed.
            if libc::getppid() != parent {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
            Ok(())
        });
    }
    let status = match child.spawn() {
        Ok(mut child) => {
            let group = child.id().and_then(|p| libc::pid_t::try_from(p).ok());
            if let (Some(cg), Some(pid)) = (&cgroup, child.id()) {
                cg.add(pid);
            }
            if let Some(group) = group {
                // Also from this side, so a signal forwarded at once finds the group (an
                // error means the command already did it and ran on).
                // SAFETY: moving our own child into its own group.
                unsafe { libc::setpgid(group, group) };
            }
            let status = supervise(c, claim.id, ttl, &mut child, group).await;
            if let Some(terminal) = terminal {
                terminal.give_back();
            }
            end_group(group, cgroup.as_ref()).await;
            status
        }
        Err(e) => Err(anyhow::anyhow!("cannot start `{}`: {e}", a.cmd[0])),
    };
    release_with_retry(c, claim.id).await;
    if let Some(cg) = cgroup {
        cg.remove();
    }
    let status = status?;
    Ok(exit_code_of(status))
}

/// Waits for CMD, renewing the lease every third of `ttl` and forwarding SIGTERM/SIGINT/SIGHUP.
async fn supervise(
    c: &Client,
    id: ClaimId,
    ttl: u64,
    child: &mut tokio::process::Child,
    group: Option<libc::pid_t>,
) -> anyhow::Result<std::process::ExitStatus> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut renew = tokio::time::interval(Duration::from_secs((ttl / 3).max(1)));
    renew.tick().await;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    loop {
        let sig = tokio::select! {
            status = child.wait() => return Ok(status?),
            _ = renew.tick() => {
                if let Err(e) = c.renew(id, Some(ttl)).await {
                    eprintln!("gpuboard run: renewing claim {id} failed: {e}");
                }
                continue;
            }
            _ = term.recv() => libc::SIGTERM,
            _ = int.recv() => libc::SIGINT,
            _ = hup.recv() => libc::SIGHUP,
        };
        if let Some(group) = group {
            // SAFETY: signalling the process group of our own child.
            unsafe {
                libc::kill(-group, sig);
            }
        }
    }
}

/// The terminal `run` was started in the foreground of, handed to the command's process
/// group while it runs and taken back after.
#[derive(Clone, Copy, Debug)]
struct Terminal {
    /// `run`'s own process group.
    group: libc::pid_t,
}

impl Terminal {
    /// `Some` when stdin is a terminal whose foreground group is `run`'s. Then `run`
    /// ignores SIGTTOU, so that it may take the terminal back from the background.
    fn take_over() -> Option<Terminal> {
        // SAFETY: plain queries of stdin and of this process; setting a disposition.
        unsafe {
            if libc::isatty(libc::STDIN_FILENO) != 1 {
                return None;
            }
            let group = libc::getpgrp();
            if libc::tcgetpgrp(libc::STDIN_FILENO) != group {
                return None;
            }
            libc::signal(libc::SIGTTOU, libc::SIG_IGN);
            Some(Terminal { group })
        }
    }

    fn give_back(self) {
        // SAFETY: returning the terminal to this process's group; SIGTTOU is ignored.
        unsafe {
            libc::tcsetpgrp(libc::STDIN_FILENO, self.group);
        }
    }
}

/// How long what is left of the command's group gets after SIGTERM, before SIGKILL.
const GROUP_GRACE: Duration = Duration::from_secs(2);

/// Ends what the command left running in its process group and its cgroup (background
/// children, also those that left the group), so that nothing keeps using the devices
/// after the claim is released: SIGTERM, then SIGKILL after `GROUP_GRACE`.
async fn end_group(group: Option<libc::pid_t>, cgroup: Option<&RunGroup>) {
    let signal = |sig| {
        // SAFETY: signal 0 and signals to the process group of our own child.
        let in_group = group.is_some_and(|g| unsafe { libc::kill(-g, sig) } == 0);
        let in_cgroup = cgroup.is_some_and(|c| c.signal(sig));
        in_group || in_cgroup
    };
    if !signal(libc::SIGTERM) {
        return;
    }
    let until = tokio::time::Instant::now() + GROUP_GRACE;
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if !signal(0) {
            return;
        }
    }
    signal(libc::SIGKILL);
    // The cgroup can be removed once the killed are gone.
    let until = tokio::time::Instant::now() + GROUP_GRACE;
    while cgroup.is_some_and(|c| !c.pids().is_empty()) && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn release_with_retry(c: &Client, id: ClaimId) {
    for attempt in 0..3 {
        match c.release(id).await {
            Ok(_) => return,
            Err(e) if attempt == 2 => {
                eprintln!(
                    "gpuboard run: could not release claim {id}: {e} (its lease will expire)"
                );
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

fn exit_code_of(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(1),
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mps_limits_are_per_visible_device() {
        assert_eq!(mps_limit(1, Bytes::gib(20)), "0=20G");
        assert_eq!(mps_limit(2, Bytes::gib(20)), "0=20G,1=20G");
        assert_eq!(
            mps_limit(1, Bytes(Bytes::gib(1).0 + (1 << 20) + 5)),
            "0=1025M"
        );
    }

    #[test]
    fn local_endpoints_are_recognised() {
        assert!(endpoint_is_local("http://127.0.0.1:7420"));
        assert!(endpoint_is_local("http://localhost:1"));
        assert!(endpoint_is_local("http://[::1]:1"));
        assert!(!endpoint_is_local("http://10.0.0.1:7420"));
        assert!(!endpoint_is_local("garbage"));
    }
}
