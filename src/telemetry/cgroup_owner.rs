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

use std::fmt;
use std::path::Path;

/// Who a process belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CgroupOwner {
    /// A container of a Kubernetes pod.
    Pod {
        /// The pod's UID (with dashes, as the API writes it).
        uid: String,
        /// The container's id, when the path names it (not for the pod's own cgroup).
        container: Option<String>,
        /// The runtime the path names (`containerd`, `cri-o`, `docker`), when it does.
        runtime: Option<&'static str>,
    },
    /// A Slurm job (and step, when the path names one).
    SlurmJob {
        /// The job id.
        job: u64,
        /// The step (`0`, `batch`, `extern`), when named.
        step: Option<String>,
    },
    /// A Docker container outside Kubernetes.
    Docker {
        /// The container's id.
        container: String,
    },
}

impl fmt::Display for CgroupOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CgroupOwner::Pod { uid, container, .. } => {
                write!(f, "pod {uid}")?;
                if let Some(c) = container {
                    write!(f, " container {}", short(c))?;
                }
                Ok(())
            }
            CgroupOwner::SlurmJob { job, step } => {
                write!(f, "Slurm job {job}")?;
                if let Some(s) = step {
                    write!(f, " step {s}")?;
                }
                Ok(())
            }
            CgroupOwner::Docker { container } => write!(f, "Docker container {}", short(container)),
        }
    }
}

/// A container id as `docker ps` and `crictl ps` show it: its first 12 characters.
fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// Reads the owner of `pid` under `proc_root` (normally `/proc`); `None` when the file
/// cannot be read or names no owner.
pub fn read_owner(proc_root: &Path, pid: u32) -> Option<CgroupOwner> {
    let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("cgroup")).ok()?;
    owner_of(&text)
}

/// The owner a `/proc/PID/cgroup` names: the most precise one over its lines (a pod with
/// its container over a pod alone).
pub fn owner_of(cgroup: &str) -> Option<CgroupOwner> {
    let mut best: Option<CgroupOwner> = None;
    for line in cgroup.lines() {
        let Some(path) = line.splitn(3, ':').nth(2) else {
            continue;
        };
        let Some(found) = owner_of_path(path) else {
            continue;
        };
        let precise = matches!(
            &found,
            CgroupOwner::Pod {
                container: Some(_),
                ..
            }
        ) || matches!(&found, CgroupOwner::SlurmJob { step: Some(_), .. })
            || matches!(&found, CgroupOwner::Docker { .. });
        if precise {
            return Some(found);
        }
        best.get_or_insert(found);
    }
    best
}

/// The owner one cgroup path names.
pub fn owner_of_path(path: &str) -> Option<CgroupOwner> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if let Some(at) = parts.iter().position(|p| pod_uid(p).is_some()) {
        let uid = pod_uid(parts[at])?;
        let (container, runtime) = parts
            .get(at + 1)
            .and_then(|c| container_id(c))
            .map_or((None, None), |(id, rt)| (Some(id), rt));
        return Some(CgroupOwner::Pod {
            uid,
            container,
            runtime,
        });
    }
    if let Some(at) = parts.iter().position(|p| slurm_job(p).is_some()) {
        let job = slurm_job(parts[at])?;
        let step = parts
            .get(at + 1)
            .and_then(|s| s.strip_prefix("step_"))
            .map(str::to_string);
        return Some(CgroupOwner::SlurmJob { job, step });
    }
    for (i, p) in parts.iter().enumerate() {
        if let Some(id) = p
            .strip_prefix("docker-")
            .and_then(|r| r.strip_suffix(".scope"))
            && is_container_id(id)
        {
            return Some(CgroupOwner::Docker {
                container: id.to_string(),
            });
        }
        if *p == "docker"
            && let Some(id) = parts.get(i + 1)
            && is_container_id(id)
        {
            return Some(CgroupOwner::Docker {
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

    fn pod(container: Option<&str>, runtime: Option<&'static str>) -> CgroupOwner {
        CgroupOwner::Pod {
            uid: UID.to_string(),
            container: container.map(str::to_string),
            runtime,
        }
    }

    #[test]
    fn real_shaped_paths_name_their_owner() {
        let uid_ = UID.replace('-', "_");
        let cases: Vec<(String, Option<CgroupOwner>)> = vec![
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
                Some(CgroupOwner::Docker {
                    container: ID.into(),
                }),
            ),
            (
                format!("4:cpu,cpuacct:/docker/{ID}\n"),
                Some(CgroupOwner::Docker {
                    container: ID.into(),
                }),
            ),
            // Slurm, v1 and v2.
            (
                "7:devices:/slurm/uid_1000/job_4242/step_0/task_0\n".into(),
                Some(CgroupOwner::SlurmJob {
                    job: 4242,
                    step: Some("0".into()),
                }),
            ),
            (
                "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n".into(),
                Some(CgroupOwner::SlurmJob {
                    job: 77,
                    step: Some("batch".into()),
                }),
            ),
            (
                "0::/system.slice/slurmstepd.scope/job_77\n".into(),
                Some(CgroupOwner::SlurmJob {
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
    fn owners_read_as_operators_write_them() {
        assert_eq!(
            pod(Some(ID), Some("containerd")).to_string(),
            format!("pod {UID} container 4f2b1c9d8e7a")
        );
        assert_eq!(
            CgroupOwner::SlurmJob {
                job: 42,
                step: None
            }
            .to_string(),
            "Slurm job 42"
        );
    }

    #[test]
    fn the_file_is_read_under_a_proc_root() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("9")).unwrap();
        std::fs::write(root.path().join("9/cgroup"), format!("0::/docker/{ID}\n")).unwrap();
        assert!(matches!(
            read_owner(root.path(), 9),
            Some(CgroupOwner::Docker { .. })
        ));
        assert_eq!(read_owner(root.path(), 10), None);
    }
}
