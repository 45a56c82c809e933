//! The group of processes `gpuboard run` starts, kept in a cgroup of their own where one
//! can be made: `gpuboard-run-<pid>` (v2) under `run`'s own cgroup. No process there can
//! leave it without privileges (not by `setsid`, a double fork or a cleared environment),
//! and every user can see from `/proc/<pid>/cgroup` who is in it, so the endpoint keeps the
//! claim while anything in it runs, even after `run` is gone (`endpoint::owners`). Where
//! no cgroup can be made (cgroup v1 only, or a cgroup this user may not write), the
//! command still carries `GPUBOARD_RUN_PID`, which the endpoint scans for instead.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::io::{AsRawFd as _, RawFd};
use std::path::{Path, PathBuf};

use crate::endpoint::owners::{cgroup_name, cgroup_pid};

/// A cgroup made for one `run`.
#[derive(Debug)]
pub struct RunGroup {
    dir: PathBuf,
    /// Its `cgroup.procs`, open for the command to write itself into before it execs.
    procs: File,
}

impl RunGroup {
    /// Makes the cgroup for this process's command, after removing the empty ones earlier
    /// `run`s left (a `run` killed with `kill -9` cannot remove its own). Says why not
    /// when no cgroup can be made here.
    pub fn make() -> Result<RunGroup, String> {
        let parent = own_cgroup().ok_or("no cgroup v2 hierarchy is mounted")?;
        sweep(&parent);
        let dir = parent.join(cgroup_name(std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot make {}: {e}", dir.display())),
        }
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
            .map_err(|e| {
                let _ = std::fs::remove_dir(&dir);
                format!("cannot open {}/cgroup.procs: {e}", dir.display())
            })?;
        Ok(RunGroup { dir, procs })
    }

    /// The descriptor the command writes `0` to (itself) between fork and exec.
    pub fn procs_fd(&self) -> RawFd {
        self.procs.as_raw_fd()
    }

    /// Moves `pid` in (the command, from `run`'s side too, in case its own write failed).
    pub fn add(&self, pid: u32) {
        let _ = (&self.procs).write_all(pid.to_string().as_bytes());
    }

    /// The processes in it now.
    pub fn pids(&self) -> Vec<libc::pid_t> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Sends `sig` to every process in it; whether there was any.
    pub fn signal(&self, sig: libc::c_int) -> bool {
        let pids = self.pids();
        for pid in &pids {
            // SAFETY: signalling processes of the command's own cgroup.
            unsafe { libc::kill(*pid, sig) };
        }
        !pids.is_empty()
    }

    /// Removes the cgroup (only possible once it is empty).
    pub fn remove(self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// This process's cgroup v2 directory: the `cgroup2` mount point joined with the `0::`
/// line of `/proc/self/cgroup`.
fn own_cgroup() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = cgroup2_mount(&mounts)?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = mount.join(rel.trim_start_matches('/'));
    dir.is_dir().then_some(dir)
}

/// The mount point of the cgroup2 file system in a `/proc/self/mountinfo` text.
fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        (right.split_whitespace().next()? == "cgroup2")
            .then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
    })
}

/// Removes the run cgroups under `parent` whose `run` is gone (a cgroup with processes
/// left cannot be removed: those stay, as they must).
fn sweep(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(cgroup_pid) else {
            continue;
        };
        let Ok(raw) = libc::pid_t::try_from(pid) else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(raw, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup2_mount_is_found_among_others() {
        let hybrid = "31 25 0:27 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
                      33 31 0:29 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
                      41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let v1 = "33 31 0:29 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(cgroup2_mount(v1), None);
        assert_eq!(cgroup2_mount("garbage"), None);
    }

    #[test]
    fn only_cgroups_of_gone_runs_are_swept() {
        let tmp = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let mine = tmp.path().join(cgroup_name(std::process::id()));
        let old = tmp.path().join(cgroup_name(dead));
        let other = tmp.path().join("user.slice");
        for d in [&mine, &old, &other] {
            std::fs::create_dir(d).unwrap();
        }
        sweep(tmp.path());
        assert!(mine.exists() && other.exists());
        assert!(!old.exists());
    }
}
