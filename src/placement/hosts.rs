//! Choosing among hosts: each endpoint of a fleet is one `Fleet` (rebuilt from its
//! snapshot by the caller), each plans the request on its own, and the hosts that could
//! take it are ranked by the placement policy applied across hosts. No I/O: the CLI and
//! the console send the claim to the first host and, on a 409, to the next; the endpoint
//! re-checks, as it is the authority.

use super::Policy;
use super::explain::NoFit;
use super::fleet::Fleet;
use super::model::Allocation;
use crate::request::ClaimRequest;
use crate::units::Units;

/// Parts per million: how free a device (or host) is, in one integer scale.
const PPM: u64 = 1_000_000;

/// One host that could take the request now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostFit {
    /// The host's position in the slice given to [`rank_hosts`].
    pub host: usize,
    /// Where it would land there.
    pub allocation: Allocation,
    /// How free the devices it lands on stay afterwards, ppm of memory plus ppm of
    /// compute, summed over those devices (0 = filled exactly).
    pub devices_left: u64,
    /// How free the whole host stays afterwards, ppm of its schedulable memory.
    pub host_left: u64,
}

/// Every host's answer: those that fit, best first, and why the others do not.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostRanking {
    /// Hosts that could take it now, in the order to try them.
    pub fits: Vec<HostFit>,
    /// Hosts that could not, with their reasons, in host order.
    pub refused: Vec<(usize, NoFit)>,
}

impl HostRanking {
    /// Whether some refusing host could take it later (not every refusal is infeasible).
    pub fn could_wait(&self) -> Option<usize> {
        self.refused
            .iter()
            .find(|(_, no)| !no.infeasible)
            .map(|(h, _)| *h)
    }
}

/// Ranks `hosts` for `req`. Binpack tries first the host whose chosen devices stay the
/// fullest (whole GPUs stay free elsewhere), then the fullest host; spread tries first
/// the emptiest host, then the emptiest devices. Ties go to the earlier host, so the
/// order is deterministic.
pub fn rank_hosts(hosts: &[&Fleet], req: &ClaimRequest, policy: Policy) -> HostRanking {
    let mut out = HostRanking::default();
    for (host, fleet) in hosts.iter().enumerate() {
        match fleet.plan(req) {
            Ok(allocation) => out.fits.push(score(host, fleet, allocation)),
            Err(no) => out.refused.push((host, no)),
        }
    }
    match policy {
        Policy::Binpack => out
            .fits
            .sort_by_key(|f| (f.devices_left, f.host_left, f.host)),
        Policy::Spread => out.fits.sort_by_key(|f| {
            (
                std::cmp::Reverse(f.host_left),
                std::cmp::Reverse(f.devices_left),
                f.host,
            )
        }),
    }
    out
}

/// How free the landing devices and the host stay once `allocation` is placed.
fn score(host: usize, fleet: &Fleet, allocation: Allocation) -> HostFit {
    let mut devices_left = 0;
    let mut capacity = 0u64;
    let mut free = 0u64;
    if let Some(node) = fleet.node(&allocation.node) {
        for d in &node.devices {
            if !d.schedulable() {
                continue;
            }
            let cap = d.capacity().0;
            let mut mem_free = d.memory_free().0;
            if let Some(s) = allocation.shares.iter().find(|s| s.device == d.spec.index) {
                mem_free = mem_free.saturating_sub(s.memory.0);
                let compute_free = d.compute_free().0.saturating_sub(s.compute.0);
                devices_left +=
                    ratio(mem_free, cap) + ratio(u64::from(compute_free), u64::from(Units::FULL.0));
            }
            capacity += cap;
            free += mem_free;
        }
    }
    // Other nodes of the same endpoint count towards how full the host is.
    for n in fleet.nodes().iter().filter(|n| n.name != allocation.node) {
        for d in n.devices.iter().filter(|d| d.schedulable()) {
            capacity += d.capacity().0;
            free += d.memory_free().0;
        }
    }
    HostFit {
        host,
        allocation,
        devices_left,
        host_left: ratio(free, capacity),
    }
}

/// The request a claim moved to another host is made with: the old claim's own (form,
/// project, holder, labels, lease length), pinned where asked, never queued (a move
/// happens now or not at all), and without the pid (it names a process of the old host).
pub fn moved_request(
    old: &ClaimRequest,
    node: Option<String>,
    devices: Option<Vec<u32>>,
) -> ClaimRequest {
    let mut r = old.clone();
    r.node = node;
    r.devices = devices;
    r.wait = false;
    r.pid = None;
    r
}

/// `part / whole` in ppm (0 for an empty whole).
fn ratio(part: u64, whole: u64) -> u64 {
    if whole == 0 {
        return 0;
    }
    u64::try_from(u128::from(part) * u128::from(PPM) / u128::from(whole)).unwrap_or(PPM)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::ClaimId;
    use crate::placement::{DeviceSpec, NodeSpec};
    use crate::units::Bytes;
    use serde_json::json;

    const GIB: u64 = 1 << 30;

    fn host(name: &str, gpus: u32, gib: u64) -> Fleet {
        let mut f = Fleet::new(Policy::Binpack);
        f.add_node(NodeSpec {
            name: name.to_string(),
            devices: (0..gpus)
                .map(|index| DeviceSpec {
                    index,
                    model: "NVIDIA A100-SXM4-80GB".to_string(),
                    uuid: None,
                    memory: Some(Bytes(gib * GIB)),
                    link_group: None,
                })
                .collect(),
            cpus: None,
        })
        .unwrap();
        f
    }

    fn req(v: serde_json::Value) -> ClaimRequest {
        ClaimRequest::from_json(&v).unwrap()
    }

    /// Three hosts of 2 x 80 GiB: `a` empty, `b` with 60 GiB on one device, `c` with
    /// 30 GiB on one device.
    fn three() -> Vec<Fleet> {
        let a = host("a", 2, 80);
        let mut b = host("b", 2, 80);
        b.claim(ClaimId(1), &req(json!({"gpu_memory": "60Gi"})))
            .unwrap();
        let mut c = host("c", 2, 80);
        c.claim(ClaimId(1), &req(json!({"gpu_memory": "30Gi"})))
            .unwrap();
        vec![a, b, c]
    }

    #[test]
    fn binpack_fills_the_fullest_device_that_fits() {
        let hosts = three();
        let refs: Vec<&Fleet> = hosts.iter().collect();
        let r = rank_hosts(&refs, &req(json!({"gpu_memory": "20Gi"})), Policy::Binpack);
        let order: Vec<usize> = r.fits.iter().map(|f| f.host).collect();
        // b's 60 GiB device is filled exactly, then c's 30 GiB one, then empty a.
        assert_eq!(order, vec![1, 2, 0]);
        assert_eq!(r.fits[0].allocation.shares[0].memory, Bytes(20 * GIB));
        assert!(r.refused.is_empty());
        // 30 GiB no longer fits b's used device: b's other device ties with a's and the
        // fuller host wins.
        let r = rank_hosts(&refs, &req(json!({"gpu_memory": "30Gi"})), Policy::Binpack);
        let order: Vec<usize> = r.fits.iter().map(|f| f.host).collect();
        assert_eq!(order, vec![2, 1, 0]);
    }

    #[test]
    fn spread_picks_the_emptiest_host() {
        let hosts = three();
        let refs: Vec<&Fleet> = hosts.iter().collect();
        let r = rank_hosts(&refs, &req(json!({"gpu_memory": "20Gi"})), Policy::Spread);
        let order: Vec<usize> = r.fits.iter().map(|f| f.host).collect();
        assert_eq!(order, vec![0, 2, 1]);
    }

    #[test]
    fn hosts_that_cannot_take_it_say_why_and_whether_waiting_helps() {
        let hosts = three();
        let refs: Vec<&Fleet> = hosts.iter().collect();
        // Two whole GPUs: only empty a has both free.
        let r = rank_hosts(&refs, &req(json!({"nvidia.com/gpu": 2})), Policy::Binpack);
        assert_eq!(r.fits.len(), 1);
        assert_eq!(r.fits[0].host, 0);
        assert_eq!(r.fits[0].devices_left, 0, "whole GPUs leave nothing");
        assert_eq!(
            r.refused.iter().map(|(h, _)| *h).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(r.could_wait(), Some(1));
        // 100 GiB fits no 80 GiB device, ever.
        let r = rank_hosts(&refs, &req(json!({"gpu_memory": "100Gi"})), Policy::Binpack);
        assert!(r.fits.is_empty());
        assert_eq!(r.could_wait(), None);
        // A node pinned by name exists on one host only.
        let r = rank_hosts(
            &refs,
            &req(json!({"gpu_memory": "1Gi", "node": "c"})),
            Policy::Binpack,
        );
        assert_eq!(r.fits.iter().map(|f| f.host).collect::<Vec<_>>(), vec![2]);
    }

    #[test]
    fn the_moved_request_keeps_the_form_and_lease_and_drops_the_pid() {
        let old = req(json!({
            "gpu-memory": "20Gi", "gpu.shared": 2, "project": "p", "holder": "h",
            "ttl": 600, "pid": 42, "wait": true, "node": "a", "labels": {"k": "v"}
        }));
        let r = moved_request(&old, Some("b".into()), None);
        assert_eq!(r.gpu, old.gpu);
        assert_eq!((r.project.as_str(), r.holder.as_deref()), ("p", Some("h")));
        assert_eq!(r.ttl, Some(600));
        assert_eq!(r.labels, old.labels);
        assert_eq!(r.node.as_deref(), Some("b"));
        assert_eq!((r.pid, r.wait, r.devices), (None, false, None));
    }

    #[test]
    fn empty_capacity_is_not_a_division_by_zero() {
        assert_eq!(ratio(5, 0), 0);
        assert_eq!(ratio(1, 2), PPM / 2);
        assert_eq!(ratio(u64::MAX, u64::MAX), PPM);
    }
}
