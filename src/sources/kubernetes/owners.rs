//! The pods that hosts' cgroups name by UID, given their namespace and name from the pods
//! a Kubernetes source holds (its snapshot's `pods`: every pod, GPU or not). The console
//! joins them where it merges its sources: the host's telemetry knows only the UID, the
//! cluster only the pods. Pure.

use crate::snapshot::{ClaimView, PodNames, ProcessOwner, ProcessView, Snapshot};

/// The label a pod's claim carries its UID in (`claims::request_of`).
const UID: &str = "k8s.uid";

/// The UID of the pod a claim stands for, when a Kubernetes source made it.
pub fn pod_uid(claim: &ClaimView) -> Option<&str> {
    claim
        .request
        .labels
        .get(UID)
        .map(String::as_str)
        .filter(|u| !u.is_empty())
}

/// The processes whose cgroups name pod `uid`, in `snaps` (the hosts' sources), with the
/// index of the device each runs on.
pub fn processes_of_pod<'a>(
    snaps: impl IntoIterator<Item = &'a Snapshot>,
    uid: &str,
) -> Vec<(u32, &'a ProcessView)> {
    let mut out = Vec::new();
    for (_, d) in snaps.into_iter().flat_map(Snapshot::devices) {
        let processes = d.telemetry.iter().flat_map(|t| t.processes.iter());
        out.extend(
            processes
                .filter(|p| p.owner.as_ref().and_then(ProcessOwner::pod_uid) == Some(uid))
                .map(|p| (d.index, p)),
        );
    }
    out
}

/// Names the pods `snap`'s processes belong to, where one of `pods` (the Kubernetes
/// sources' pods by UID) has their UIDs. Returns how many were named.
pub fn join_owners(snap: &mut Snapshot, pods: &[&PodNames]) -> usize {
    let mut named = 0;
    let processes = snap
        .nodes
        .iter_mut()
        .flat_map(|n| n.devices.iter_mut())
        .filter_map(|d| d.telemetry.as_mut())
        .flat_map(|t| t.processes.iter_mut());
    for owner in processes.filter_map(|p| p.owner.as_mut()) {
        if pods.iter().any(|names| owner.name_pod(names)) {
            named += 1;
        }
    }
    named
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Timestamp;
    use crate::snapshot::{DeviceTelemetry, DeviceView, NodeView, ProcessView};
    use crate::sources::kubernetes::decode;
    use crate::sources::kubernetes::objects::{ContainerFacts, PodFacts};

    fn host(owners: Vec<Option<ProcessOwner>>) -> Snapshot {
        let processes = owners
            .into_iter()
            .enumerate()
            .map(|(i, owner)| ProcessView {
                pid: 100 + u32::try_from(i).unwrap_or(0),
                owner,
                ..ProcessView::default()
            })
            .collect();
        Snapshot {
            nodes: vec![NodeView {
                devices: vec![DeviceView {
                    telemetry: Some(DeviceTelemetry {
                        processes,
                        ..DeviceTelemetry::default()
                    }),
                    ..DeviceView::default()
                }],
                ..NodeView::default()
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn a_pod_uid_the_cluster_has_is_named_gpu_or_not_and_others_are_left_as_they_are() {
        let pod = PodFacts {
            name: "train-0".into(),
            namespace: "ml".into(),
            uid: "u-1".into(),
            phase: "Pending".into(),
            containers: vec![ContainerFacts {
                limits: [("nvidia.com/gpu".to_string(), "1".to_string())].into(),
                ..ContainerFacts::default()
            }],
            ..PodFacts::default()
        };
        // A pod asking for no GPU is no claim, but its processes are named all the same.
        let plain = PodFacts {
            name: "notebook".into(),
            namespace: "lab".into(),
            uid: "u-2".into(),
            phase: "Running".into(),
            node_name: Some("n1".into()),
            containers: vec![ContainerFacts::default()],
            ..PodFacts::default()
        };
        let cluster = decode::snapshot([], [&pod, &plain], "k", "", Timestamp(0));
        assert_eq!(cluster.claims.len(), 1, "the GPU pod only is a claim");
        assert_eq!(cluster.pods.len(), 2, "both pods are named");
        let job = ProcessOwner::SlurmJob { job: 4, step: None };
        let mut snap = host(vec![
            Some(ProcessOwner::pod("u-1", None, None)),
            Some(ProcessOwner::pod("u-2", None, None)),
            Some(ProcessOwner::pod("u-3", None, None)),
            Some(job.clone()),
            None,
        ]);
        assert_eq!(join_owners(&mut snap, &[&cluster.pods]), 2);
        let owners: Vec<_> = snap.nodes[0].devices[0]
            .telemetry
            .as_ref()
            .map(|t| t.processes.iter().map(|p| p.owner.clone()).collect())
            .unwrap_or_default();
        let short = |i: usize| owners[i].as_ref().map(ProcessOwner::short);
        assert_eq!(short(0).as_deref(), Some("pod ml/train-0"));
        assert_eq!(short(1).as_deref(), Some("pod lab/notebook"));
        assert_eq!(owners[2], Some(ProcessOwner::pod("u-3", None, None)));
        assert_eq!(owners[3], Some(job));
        assert_eq!(owners[4], None);
        // The pod's claim finds its process on the host.
        let uid = pod_uid(&cluster.claims[0]).unwrap();
        let found = processes_of_pod([&snap], uid);
        assert_eq!(found.iter().map(|(_, p)| p.pid).collect::<Vec<_>>(), [100]);
        assert!(processes_of_pod([&snap], "u-9").is_empty());
    }
}
