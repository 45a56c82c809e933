//! Whose a GPU process is, as the host's cgroups name it: a Kubernetes pod (its UID,
//! and its namespace/name once a Kubernetes source has the pod), a Slurm job, or a
//! Docker container. The driver reports host PIDs only; this is what says whose they are.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Who a process belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProcessOwner {
    /// A container of a Kubernetes pod.
    Pod {
        /// The pod's UID (with dashes, as the API writes it).
        uid: String,
        /// The container's id, when the cgroup path names it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        container: Option<String>,
        /// The runtime the path names (`containerd`, `cri-o`, `docker`), when it does.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        runtime: Option<String>,
        /// The pod's namespace, once a Kubernetes source has a pod with this UID.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        /// The pod's name, likewise.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// A Slurm job (and step, when the path names one).
    SlurmJob {
        /// The job id.
        job: u64,
        /// The step (`0`, `batch`, `extern`), when named.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<String>,
    },
    /// A Docker container outside Kubernetes.
    Docker {
        /// The container's id.
        container: String,
    },
}

impl ProcessOwner {
    /// A pod known only by its UID (and container), as the cgroup path names it.
    pub fn pod(uid: &str, container: Option<String>, runtime: Option<&str>) -> ProcessOwner {
        ProcessOwner::Pod {
            uid: uid.to_string(),
            container,
            runtime: runtime.map(str::to_string),
            namespace: None,
            name: None,
        }
    }

    /// The pod UID, when the owner is a pod.
    pub fn pod_uid(&self) -> Option<&str> {
        match self {
            ProcessOwner::Pod { uid, .. } => Some(uid),
            _ => None,
        }
    }

    /// A few words for narrow places (a flag, a total): `pod ml/train-0`, `pod 6b3e7a6f`,
    /// `job 42`, `docker 4f2b1c9d8e7a`.
    pub fn short(&self) -> String {
        match self {
            ProcessOwner::Pod {
                namespace: Some(ns),
                name: Some(n),
                ..
            } => format!("pod {ns}/{n}"),
            ProcessOwner::Pod { uid, .. } => format!("pod {}", uid.get(..8).unwrap_or(uid)),
            ProcessOwner::SlurmJob { job, .. } => format!("job {job}"),
            ProcessOwner::Docker { container } => format!("docker {}", short_id(container)),
        }
    }
}

impl fmt::Display for ProcessOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcessOwner::Pod {
                uid,
                container,
                namespace,
                name,
                ..
            } => {
                match (namespace, name) {
                    (Some(ns), Some(n)) => write!(f, "pod {ns}/{n}")?,
                    _ => write!(f, "pod {uid}")?,
                }
                if let Some(c) = container {
                    write!(f, " container {}", short_id(c))?;
                }
                Ok(())
            }
            ProcessOwner::SlurmJob { job, step } => {
                write!(f, "Slurm job {job}")?;
                if let Some(s) = step {
                    write!(f, " step {s}")?;
                }
                Ok(())
            }
            ProcessOwner::Docker { container } => {
                write!(f, "Docker container {}", short_id(container))
            }
        }
    }
}

/// Every pod a Kubernetes source holds, GPU or not, by UID: its namespace and name. Hosts'
/// cgroups give a pod's UID only; the console names the pods in other sources' process
/// owners from this (`ProcessOwner::name_pod`). Shared, so copies of a snapshot share it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodNames(Arc<HashMap<String, (String, String)>>);

impl PodNames {
    /// The namespace and name of the pod with this UID.
    pub fn get(&self, uid: &str) -> Option<(&str, &str)> {
        self.0.get(uid).map(|(ns, n)| (ns.as_str(), n.as_str()))
    }

    /// How many pods.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<(String, (String, String))> for PodNames {
    fn from_iter<I: IntoIterator<Item = (String, (String, String))>>(pods: I) -> PodNames {
        let mut map: HashMap<_, _> = pods.into_iter().collect();
        map.shrink_to_fit();
        PodNames(Arc::new(map))
    }
}

impl ProcessOwner {
    /// Names a pod owner whose UID `pods` has; whether it did.
    pub fn name_pod(&mut self, pods: &PodNames) -> bool {
        if let ProcessOwner::Pod {
            uid,
            namespace,
            name,
            ..
        } = self
            && let Some((ns, n)) = pods.get(uid)
        {
            *namespace = Some(ns.to_string());
            *name = Some(n.to_string());
            return true;
        }
        false
    }
}

/// A container id as `docker ps` and `crictl ps` show it: its first 12 characters.
fn short_id(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const UID: &str = "6b3e7a6f-1234-4a1b-9c2d-0e1f2a3b4c5d";

    #[test]
    fn owners_read_as_operators_write_them() {
        let mut pod = ProcessOwner::pod(UID, Some("4f2b1c9d8e7a6b5c".into()), Some("containerd"));
        assert_eq!(pod.to_string(), format!("pod {UID} container 4f2b1c9d8e7a"));
        assert_eq!(pod.short(), "pod 6b3e7a6f");
        if let ProcessOwner::Pod {
            namespace, name, ..
        } = &mut pod
        {
            *namespace = Some("ml".into());
            *name = Some("train-0".into());
        }
        assert_eq!(pod.to_string(), "pod ml/train-0 container 4f2b1c9d8e7a");
        assert_eq!(pod.short(), "pod ml/train-0");
        let job = ProcessOwner::SlurmJob {
            job: 42,
            step: Some("batch".into()),
        };
        assert_eq!(job.to_string(), "Slurm job 42 step batch");
        assert_eq!(job.short(), "job 42");
    }

    #[test]
    fn the_wire_form_leaves_out_what_is_unknown_and_reads_back() {
        let pod = ProcessOwner::pod(UID, None, None);
        let text = serde_json::to_string(&pod).unwrap();
        assert_eq!(text, format!(r#"{{"kind":"pod","uid":"{UID}"}}"#));
        assert_eq!(serde_json::from_str::<ProcessOwner>(&text).unwrap(), pod);
        let job: ProcessOwner = serde_json::from_str(r#"{"kind":"slurm_job","job":7}"#).unwrap();
        assert_eq!(job, ProcessOwner::SlurmJob { job: 7, step: None });
    }
}
