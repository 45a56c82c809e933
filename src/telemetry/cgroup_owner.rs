//! Whose a process is, from its `/proc/PID/cgroup`: a Kubernetes pod (its UID, and the
//! container), a Slurm job, or a Docker container. The driver reports host PIDs only; the
//! cgroup path is where kubelet, the container runtimes and slurmstepd write the owner.
//!
//! Paths read (cgroup v1 lines `ID:CONTROLLERS:PATH` and the v2 line `0::PATH` alike):
//! - kubelet, systemd driver: `.../kubepods-burstable-pod<UID with _>.slice/<runtime>-<ID>.scope`
//!   (`kubepods-pod...` for guaranteed, `kubepods-besteffort-pod...`), runtime
//!   `cri-containerd`, `crio` or `docker`;
//! - kubelet, cgroupfs driver: `/kubepods/burstable/pod<UID>/<ID>` (or `crio-<ID>`);
//! - Docker: `/system.slice/docker-<ID>.scope` (systemd), `/docker/<ID>` (cgroupfs);
//! - Slurm: `/slurm/uid_1000/job_42/step_0/task_0` (v1), `.../slurmstepd.scope/job_42/step_0/...`
//!   (v2).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use crate::snapshot::ProcessOwner;

/// The environment variable naming where the host's `/proc` is, for a gpuboard that runs
/// in a container with the host's `/proc` mounted elsewhere (`/host/proc`); `/proc` when
/// unset. Tests point it at a directory of `PID/cgroup` files.
pub const HOST_PROC_ENV: &str = "GPUBOARD_HOST_PROC";

/// Where the host's `/proc` is: `$GPUBOARD_HOST_PROC`, else `/proc`.
pub fn host_proc() -> PathBuf {
    std::env::var_os(HOST_PROC_ENV)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/proc"), PathBuf::from)
}

/// Reads owners under a proc root, each pid once while it stays listed: a cgroup does
/// not change for a process's life, and the process lists come every few seconds.
#[derive(Debug)]
pub struct OwnerReader {
    root: PathBuf,
    cache: HashMap<u32, Option<ProcessOwner>>,
}

impl OwnerReader {
    /// Reads `ROOT/PID/cgroup`.
    pub fn new(root: impl Into<PathBuf>) -> OwnerReader {
        OwnerReader {
            root: root.into(),
            cache: HashMap::new(),
        }
    }

    /// The owner of `pid`: cached, or read now (`None` when the process has gone or its
    /// cgroup names nobody: neither is an error).
    pub fn owner(&mut self, pid: u32) -> Option<ProcessOwner> {
        if let Some(known) = self.cache.get(&pid) {
            return known.clone();
        }
        let found = read_owner(&self.root, pid);
        self.cache.insert(pid, found.clone());
        found
    }

    /// Forgets the pids not listed now, so a pid the kernel hands out again is read anew.
    pub fn keep_only(&mut self, listed: &BTreeSet<u32>) {
        self.cache.retain(|pid, _| listed.contains(pid));
    }
}

/// Reads the owner of `pid` under `proc_root` (normally `/proc`); `None` when the file
/// cannot be read or names no owner.
pub fn read_owner(proc_root: &Path, pid: u32) -> Option<ProcessOwner> {
    let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("cgroup")).ok()?;
    owner_of(&text)
}

/// The owner a `/proc/PID/cgroup` names: the most precise one over its lines (a pod with
/// its container over a pod alone).
pub fn owner_of(cgroup: &str) -> Option<ProcessOwner> {
    let mut best: Option<ProcessOwner> = None;
    for line in cgroup.lines() {
        let Some(path) = line.splitn(3, ':').nth(2) else {
            continue;
        };
        let Some(found) = owner_of_path(path) else {
            continue;
        };
        let precise = matches!(
            &found,
            ProcessOwner::Pod {
                container: Some(_),
                ..
            }
        ) || matches!(&found, ProcessOwner::SlurmJob { step: Some(_), .. })
            || matches!(&found, ProcessOwner::Docker { .. });
        if precise {
            return Some(found);
        }
        best.get_or_insert(found);
    }
    best
}

/// The owner one cgroup path names.
pub fn owner_of_path(path: &str) -> Option<ProcessOwner> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if let Some(at) = parts.iter().position(|p| pod_uid(p).is_some()) {
        let uid = pod_uid(parts[at])?;
        let (container, runtime) = parts
            .get(at + 1)
            .and_then(|c| container_id(c))
            .map_or((None, None), |(id, rt)| (Some(id), rt));
        return Some(ProcessOwner::pod(&uid, container, runtime));
    }
    if let Some(at) = parts.iter().position(|p| slurm_job(p).is_some()) {
        let job = slurm_job(parts[at])?;
        let step = parts
            .get(at + 1)
            .and_then(|s| s.strip_prefix("step_"))
            .map(str::to_string);
        return Some(ProcessOwner::SlurmJob { job, step });
    }
    for (i, p) in parts.iter().enumerate() {
        if let Some(id) = p
            .strip_prefix("docker-")
            .and_then(|r| r.strip_suffix(".scope"))
            && is_container_id(id)
        {
            return Some(ProcessOwner::Docker {
                container: id.to_string(),
            });
        }
        if *p == "docker"
            && let Some(id) = parts.get(i + 1)
            && is_container_id(id)
        {
            return Some(ProcessOwner::Docker {
                container: (*id).to_string(),
            });
        }
    }
    None
}

/// The pod UID of a `pod<UID>` (cgroupfs) or `kubepods[-QOS]-pod<UID_>.slice` (systemd)
/// path part.
fn pod_uid(part: &str) -> Option<String> {
    let raw = match part.strip_suffix(".slice") {
        Some(slice) => {
            let rest = slice.strip_prefix("kubepods-")?;
            rest.strip_prefix("burstable-")
                .or_else(|| rest.strip_prefix("besteffort-"))
                .unwrap_or(rest)
                .strip_prefix("pod")?
        }
        None => part.strip_prefix("pod")?,
    };
    let uid = raw.replace('_', "-");
    let ok = uid.len() == 36
        && uid.chars().enumerate().all(|(i, c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        });
    ok.then_some(uid)
}

/// A container's id and runtime from the path part under its pod.
fn container_id(part: &str) -> Option<(String, Option<&'static str>)> {
    let scope = part.strip_suffix(".scope").unwrap_or(part);
    let (id, runtime) = if let Some(id) = scope.strip_prefix("cri-containerd-") {
        (id, Some("containerd"))
    } else if let Some(id) = scope.strip_prefix("crio-") {
        // `crio-conmon-ID` is CRI-O's monitor, not the container.
        if id.starts_with("conmon-") {
            return None;
        }
        (id, Some("cri-o"))
    } else if let Some(id) = scope.strip_prefix("docker-") {
        (id, Some("docker"))
    } else {
        (scope, None)
    };
    is_container_id(id).then(|| (id.to_string(), runtime))
}

/// Container ids are 64 lowercase hex digits.
fn is_container_id(id: &str) -> bool {
    id.len() == 64 && id.chars().all(|c| c.is_ascii_hexdigit())
}

/// The job id of a `job_NNN` path part.
fn slurm_job(part: &str) -> Option<u64> {
    part.strip_prefix("job_")?.parse().ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const UID: &str = "6b3e7a6f-1234-4a1b-9c2d-0e1f2a3b4c5d";
    const ID: &str = "4f2b1c9d8e7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c";

    fn pod(container: Option<&str>, runtime: Option<&'static str>) -> ProcessOwner {
        ProcessOwner::pod(UID, container.map(str::to_string), runtime)
    }

    #[test]
    fn real_shaped_paths_name_their_owner() {
        let uid_ = UID.replace('-', "_");
        let cases: Vec<(String, Option<ProcessOwner>)> = vec![
            // cgroup v2, kubelet systemd driver, containerd.
            (
                format!(
                    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/cri-containerd-{ID}.scope\n"
                ),
                Some(pod(Some(ID), Some("containerd"))),
            ),
            // Guaranteed QoS: no class slice.
            (
                format!("0::/kubepods.slice/kubepods-pod{uid_}.slice/cri-containerd-{ID}.scope\n"),
                Some(pod(Some(ID), Some("containerd"))),
            ),
            // CRI-O, besteffort; conmon is not the container.
            (
                format!(
                    "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid_}.slice/crio-{ID}.scope\n"
                ),
                Some(pod(Some(ID), Some("cri-o"))),
            ),
            (
                format!(
                    "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid_}.slice/crio-conmon-{ID}.scope\n"
                ),
                Some(pod(None, None)),
            ),
            // cgroup v1, cgroupfs driver: every controller line names the same place.
            (
                format!(
                    "12:memory:/kubepods/burstable/pod{UID}/{ID}\n11:devices:/kubepods/burstable/pod{UID}/{ID}\n1:name=systemd:/kubepods/burstable/pod{UID}/{ID}\n"
                ),
                Some(pod(Some(ID), None)),
            ),
            (format!("0::/kubepods/pod{UID}\n"), Some(pod(None, None))),
            // Docker outside Kubernetes, systemd and cgroupfs.
            (
                format!("0::/system.slice/docker-{ID}.scope\n"),
                Some(ProcessOwner::Docker {
                    container: ID.into(),
                }),
            ),
            (
                format!("4:cpu,cpuacct:/docker/{ID}\n"),
                Some(ProcessOwner::Docker {
                    container: ID.into(),
                }),
            ),
            // Slurm, v1 and v2.
            (
                "7:devices:/slurm/uid_1000/job_4242/step_0/task_0\n".into(),
                Some(ProcessOwner::SlurmJob {
                    job: 4242,
                    step: Some("0".into()),
                }),
            ),
            (
                "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n".into(),
                Some(ProcessOwner::SlurmJob {
                    job: 77,
                    step: Some("batch".into()),
                }),
            ),
            (
                "0::/system.slice/slurmstepd.scope/job_77\n".into(),
                Some(ProcessOwner::SlurmJob {
                    job: 77,
                    step: None,
                }),
            ),
            // Nobody's: a user session, an odd pod part, garbage.
            (
                "0::/user.slice/user-1000.slice/session-3.scope\n".into(),
                None,
            ),
            ("0::/kubepods/podnot-a-uid/x\n".into(), None),
            ("garbage\n\n:::\n".into(), None),
            (String::new(), None),
        ];
        for (text, want) in cases {
            assert_eq!(owner_of(&text), want, "{text}");
        }
    }

    #[test]
    fn the_file_is_read_under_a_proc_root() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("9")).unwrap();
        std::fs::write(root.path().join("9/cgroup"), format!("0::/docker/{ID}\n")).unwrap();
        assert!(matches!(
            read_owner(root.path(), 9),
            Some(ProcessOwner::Docker { .. })
        ));
        assert_eq!(read_owner(root.path(), 10), None);
    }

    #[test]
    fn a_reader_reads_each_listed_pid_once_and_a_gone_one_is_no_error() {
        let root = tempfile::tempdir().unwrap();
        let write = |pid: u32, text: &str| {
            std::fs::create_dir_all(root.path().join(pid.to_string())).unwrap();
            std::fs::write(root.path().join(format!("{pid}/cgroup")), text).unwrap();
        };
        write(
            7,
            "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n",
        );
        let mut reader = OwnerReader::new(root.path());
        let job = Some(ProcessOwner::SlurmJob {
            job: 77,
            step: Some("0".into()),
        });
        assert_eq!(reader.owner(7), job);
        // Cached while listed: the file is not read again.
        write(7, "0::/user.slice\n");
        assert_eq!(reader.owner(7), job);
        // No such process: no owner, no error.
        assert_eq!(reader.owner(8), None);
        // Once unlisted, a pid is read anew (the kernel may hand it to another process).
        reader.keep_only(&BTreeSet::from([8]));
        assert_eq!(reader.owner(7), None);
    }
}
