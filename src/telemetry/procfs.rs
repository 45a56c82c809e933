//! The little /proc reading attribution needs: a process's parent chain, the claim id
//! `gpuboard run` put in its environment, and whether a pid is alive.

use std::path::Path;

use crate::ids::ClaimId;

/// The environment variable `gpuboard run` sets on the command it starts.
pub const CLAIM_ID_ENV: &str = "GPUBOARD_CLAIM_ID";
/// Parent chains longer than this are cut (pid namespaces nest, but not this deep).
const MAX_ANCESTORS: usize = 64;

/// Where a process comes from, as read from /proc by [`process_origin`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessOrigin {
    /// The process.
    pub pid: u32,
    /// Its parent, grandparent, ... nearest first.
    pub ancestors: Vec<u32>,
    /// `GPUBOARD_CLAIM_ID` from its environment, if readable and set.
    pub claim_id: Option<ClaimId>,
}

/// Reads where a process comes from under `proc_root` (normally `/proc`): its ancestors,
/// nearest first, and any claim id in its environment. Unreadable parts are left empty:
/// other users' environments are private.
pub fn process_origin(proc_root: &Path, pid: u32) -> ProcessOrigin {
    let mut ancestors = Vec::new();
    let mut current = pid;
    while ancestors.len() < MAX_ANCESTORS {
        match parent_pid(proc_root, current) {
            Some(parent) if parent > 0 && parent != current && !ancestors.contains(&parent) => {
                ancestors.push(parent);
                current = parent;
            }
            _ => break,
        }
    }
    let claim_id = std::fs::read(proc_root.join(pid.to_string()).join("environ"))
        .ok()
        .and_then(|environ| claim_id_from_environ(&environ));
    ProcessOrigin {
        pid,
        ancestors,
        claim_id,
    }
}

/// The `PPid:` line of `/proc/PID/status`.
pub fn parent_pid(proc_root: &Path, pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(proc_root.join(pid.to_string()).join("status")).ok()?;
    parse_ppid(&status)
}

fn parse_ppid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("PPid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Finds `GPUBOARD_CLAIM_ID=<number>` in a NUL-separated environment block.
pub fn claim_id_from_environ(environ: &[u8]) -> Option<ClaimId> {
    let prefix = format!("{CLAIM_ID_ENV}=");
    environ
        .split(|b| *b == 0)
        .find_map(|entry| entry.strip_prefix(prefix.as_bytes()))
        .and_then(|value| std::str::from_utf8(value).ok())
        .and_then(|value| value.trim().parse().ok())
}

/// Whether a process with this pid exists. A process we may not signal still exists.
pub fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 performs only the existence and permission check; nothing is sent.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn claim_id_is_found_among_other_variables() {
        let env = b"PATH=/bin\0GPUBOARD_CLAIM_ID=42\0HOME=/root\0";
        assert_eq!(claim_id_from_environ(env), Some(ClaimId(42)));
        assert_eq!(claim_id_from_environ(b"GPUBOARD_CLAIM_ID=abc\0"), None);
        assert_eq!(claim_id_from_environ(b"XGPUBOARD_CLAIM_ID=1\0"), None);
        assert_eq!(claim_id_from_environ(b""), None);
    }

    #[test]
    fn parent_chain_is_read_from_a_proc_tree() {
        let root = tempfile::tempdir().unwrap();
        for (pid, ppid) in [(30, 20), (20, 10), (10, 1), (1, 0)] {
            let dir = root.path().join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("status"), format!("Name:\tx\nPPid:\t{ppid}\n")).unwrap();
        }
        std::fs::write(root.path().join("30/environ"), b"GPUBOARD_CLAIM_ID=7\0").unwrap();
        let origin = process_origin(root.path(), 30);
        assert_eq!(origin.ancestors, vec![20, 10, 1]);
        assert_eq!(origin.claim_id, Some(ClaimId(7)));
    }

    #[test]
    fn this_process_is_alive_and_its_chain_is_real() {
        let me = std::process::id();
        assert!(pid_alive(me));
        let origin = process_origin(Path::new("/proc"), me);
        assert_eq!(
            origin.ancestors.first().copied(),
            Some(std::os::unix::process::parent_id())
        );
        assert!(!pid_alive(0));
    }
}
