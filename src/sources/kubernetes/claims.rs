//! A pod as a claim: what it asks for (by Kubernetes's rule over its containers and init
//! containers), the closest gpuboard
//! form to what was written, and the claim, pending with the scheduler's reason or placed.
//! Pure; `decode` decides the shares.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::decode::{MIG_PREFIX, PODS};
use super::encodings::HAMI_ALLOCATED;
use super::objects::{ContainerFacts, PodFacts, Problem};
use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::placement::DeviceShare;
use crate::request::{ClaimRequest, GpuForm, ShareMemory};
use crate::snapshot::{ClaimState, ClaimView, SourceWarning};
use crate::units::{Bytes, Units};

/// What a pod asks for (a limit stands for the request): summed over the containers that
/// run together, the larger of that and each init container (`asked_of`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Asked {
    /// The GPU resources as written, summed: name and total.
    pub(super) written: BTreeMap<String, u64>,
    /// Koordinator's `gpu-memory`, summed (a byte quantity, not a count).
    pub(super) koord_memory: Option<Bytes>,
    /// The byte quantities as written, by name (`+` between containers).
    pub(super) memory_written: BTreeMap<String, String>,
    /// HAMi: GPUs, memory (MiB x GPUs), memory percent x GPUs, cores x GPUs.
    pub(super) hami: Option<(u64, u64, u64, u64)>,
}

impl Asked {
    pub(super) fn get(&self, name: &str) -> u64 {
        self.written.get(name).copied().unwrap_or(0)
    }
    pub(super) fn koord(&self, what: &str) -> Option<u64> {
        self.written
            .get(&format!("koordinator.sh/{what}"))
            .or_else(|| self.written.get(&format!("kubernetes.io/{what}")))
            .copied()
    }
    pub(super) fn is_koord(&self) -> bool {
        self.koord_memory.is_some()
            || self
                .written
                .keys()
                .any(|k| k.starts_with("koordinator.sh/") || k.starts_with("kubernetes.io/gpu"))
    }
    pub(super) fn mig(&self) -> impl Iterator<Item = (&str, u64)> {
        self.written
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(MIG_PREFIX)?, *v)))
    }
    pub(super) fn is_gpu(&self) -> bool {
        !self.written.is_empty() || self.koord_memory.is_some()
    }
}

pub(super) fn warning(section: &str, path: &str, found: String, left_out: &str) -> SourceWarning {
    SourceWarning {
        section: section.to_string(),
        path: path.to_string(),
        found,
        left_out: left_out.to_string(),
    }
}

pub(super) fn warn_problems(
    out: &mut Vec<SourceWarning>,
    section: &str,
    object: &str,
    problems: &[Problem],
    left_out: &str,
) {
    out.extend(problems.iter().map(|p| {
        warning(
            section,
            &format!("{object} {}", p.path),
            p.found.clone(),
            left_out,
        )
    }));
}

pub(super) fn pod_label(p: &PodFacts) -> String {
    format!("pod {}/{}", p.namespace, p.name)
}

/// A count as written in a resource list (`2`; Kubernetes also allows `2k`, never seen
/// for GPUs, and refused with a warning).
pub(super) fn count(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// CPU millicores from a quantity (`8`, `7800m`).
pub(super) fn millicores(text: &str) -> Option<u64> {
    let t = text.trim();
    match t.strip_suffix('m') {
        Some(m) => m.parse().ok(),
        None => t.parse::<u64>().ok().map(|c| c.saturating_mul(1000)),
    }
}

/// What a pod asks for, by Kubernetes's rule for the effective request: per resource,
/// the larger of what runs together at the end (the app containers and every sidecar:
/// an init container with `restartPolicy: Always`) and what runs during each plain init
/// container (it, and the sidecars started before it).
pub(super) fn asked_of(p: &PodFacts, warnings: &mut Vec<SourceWarning>) -> Asked {
    let app: Vec<(String, &ContainerFacts)> = p
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("spec.containers[{i}]"), c))
        .chain(
            p.init_containers
                .iter()
                .enumerate()
                .filter(|(_, c)| c.sidecar)
                .map(|(i, c)| (format!("spec.initContainers[{i}]"), c)),
        )
        .collect();
    let mut asked = summed(p, &app, warnings);
    let mut sidecars: Vec<(String, &ContainerFacts)> = Vec::new();
    for (i, c) in p.init_containers.iter().enumerate() {
        let at = format!("spec.initContainers[{i}]");
        if c.sidecar {
            sidecars.push((at, c));
            continue;
        }
        // The sidecars' warnings were given with the app containers: only this one's here.
        let mut during = sidecars.clone();
        during.push((at.clone(), c));
        let mut seen = Vec::new();
        let alone = summed(p, &during, &mut seen);
        warnings.extend(seen.into_iter().filter(|w| w.path.contains(&at)));
        asked = asked.larger(alone);
    }
    asked
}

impl Asked {
    /// Per resource, the larger of the two.
    fn larger(mut self, other: Asked) -> Asked {
        for (k, v) in other.written {
            let e = self.written.entry(k).or_default();
            *e = (*e).max(v);
        }
        if other.koord_memory > self.koord_memory {
            self.koord_memory = other.koord_memory;
            self.memory_written = other.memory_written;
        }
        self.hami = match (self.hami, other.hami) {
            (Some(a), Some(b)) => Some((a.0.max(b.0), a.1.max(b.1), a.2.max(b.2), a.3.max(b.3))),
            (a, b) => a.or(b),
        };
        self
    }
}

/// What `containers` (each with where it is in the pod) ask for together: summed.
fn summed(
    p: &PodFacts,
    containers: &[(String, &ContainerFacts)],
    warnings: &mut Vec<SourceWarning>,
) -> Asked {
    let mut asked = Asked::default();
    let mut hami = (0u64, 0u64, 0u64, 0u64);
    let mut is_hami = false;
    for (at, c) in containers {
        let mut merged = c.requests.clone();
        merged.extend(c.limits.clone());
        let mut gpus_here = 0;
        let mut per_gpu = (0u64, 0u64, 0u64);
        for (k, v) in &merged {
            if k == "cpu" {
                continue;
            }
            if k.ends_with("/gpu-memory") && !k.starts_with("nvidia.com/") {
                match Bytes::parse(v) {
                    Ok(b) => {
                        asked.koord_memory = Some(asked.koord_memory.unwrap_or_default() + b);
                        let w = asked.memory_written.entry(k.clone()).or_default();
                        if !w.is_empty() {
                            w.push('+');
                        }
                        w.push_str(v.trim());
                    }
                    Err(e) => warnings.push(warning(
                        PODS,
                        &format!("{} {at}.resources {k}", pod_label(p)),
                        e.to_string(),
                        "this resource of its request",
                    )),
                }
                continue;
            }
            let Some(n) = count(v) else {
                warnings.push(warning(
                    PODS,
                    &format!("{} {at}.resources {k}", pod_label(p)),
                    format!("expected a whole number, found `{v}`"),
                    "this resource of its request",
                ));
                continue;
            };
            *asked.written.entry(k.clone()).or_default() += n;
            match k.as_str() {
                "nvidia.com/gpu" => gpus_here = n,
                "nvidia.com/gpumem" => (per_gpu.0, is_hami) = (n, true),
                "nvidia.com/gpumem-percentage" => (per_gpu.1, is_hami) = (n, true),
                "nvidia.com/gpucores" => (per_gpu.2, is_hami) = (n, true),
                _ => {}
            }
        }
        let g = gpus_here.max(u64::from(per_gpu != (0, 0, 0)));
        hami.0 += g;
        hami.1 += per_gpu.0 * g;
        hami.2 += per_gpu.1 * g;
        hami.3 += per_gpu.2 * g;
    }
    if is_hami || p.annotations.contains_key(HAMI_ALLOCATED) {
        asked.hami = Some(hami);
    }
    asked
}

/// The request in gpuboard's terms: the closest form to what was written.
pub(super) fn form_of(asked: &Asked) -> Option<GpuForm> {
    let pct = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    if asked.is_koord() {
        let legacy = asked.koord("gpu");
        let memory = match (asked.koord_memory, asked.koord("gpu-memory-ratio"), legacy) {
            (Some(b), _, _) => ShareMemory::Bytes(b),
            (None, Some(r), _) | (None, None, Some(r)) => ShareMemory::Ratio(pct(r)),
            (None, None, None) => ShareMemory::Ratio(100),
        };
        let shared = asked
            .written
            .get("koordinator.sh/gpu.shared")
            .or_else(|| asked.written.get("koordinator.sh/gpu-shared"))
            .copied()
            .unwrap_or(1)
            .max(1);
        return Some(GpuForm::KoordinatorShare {
            memory,
            core: asked.koord("gpu-core").or(legacy).map(pct),
            shared: pct(shared),
            legacy: legacy.is_some(),
        });
    }
    if let Some((gpus, mem, percent, cores)) = asked.hami
        && (mem, percent, cores) != (0, 0, 0)
    {
        let gpus = gpus.max(1);
        let memory = if mem > 0 {
            ShareMemory::Bytes(Bytes::mib(mem))
        } else if percent > 0 {
            ShareMemory::Ratio(pct(percent))
        } else {
            ShareMemory::Ratio(pct(100 * gpus))
        };
        return Some(GpuForm::KoordinatorShare {
            memory,
            core: (cores > 0).then(|| pct(cores)),
            shared: pct(gpus),
            legacy: false,
        });
    }
    let whole = asked.get("nvidia.com/gpu") + asked.mig().map(|(_, n)| n).sum::<u64>();
    (whole > 0).then(|| GpuForm::Vendor { count: pct(whole) })
}

/// `pod ns/name: nvidia.com/gpu=1 nvidia.com/gpumem=3000`.
pub(super) fn form_text(p: &PodFacts, asked: &Asked, note: &str) -> String {
    let mut s = pod_label(p);
    s.push(':');
    let mut all: BTreeMap<&str, String> = asked
        .written
        .iter()
        .map(|(k, v)| (k.as_str(), v.to_string()))
        .collect();
    all.extend(
        asked
            .memory_written
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone())),
    );
    for (k, v) in all {
        let _ = write!(s, " {k}={v}");
    }
    if asked.written.is_empty() && asked.koord_memory.is_none() {
        s.push_str(" (no GPU resources; annotated)");
    }
    s.push_str(note);
    s
}

pub(super) fn request_of(p: &PodFacts, asked: &Asked, node: Option<&str>) -> ClaimRequest {
    let mut labels = BTreeMap::from([
        ("k8s.namespace".to_string(), p.namespace.clone()),
        ("k8s.pod".to_string(), p.name.clone()),
        ("k8s.uid".to_string(), p.uid.clone()),
    ]);
    if let Some(n) = node {
        labels.insert("k8s.node".to_string(), n.to_string());
    }
    ClaimRequest {
        gpu: form_of(asked),
        accelerator_type: None,
        cpus: None,
        node: node.map(str::to_string),
        devices: None,
        project: project_of(p),
        holder: Some(p.name.clone()),
        ttl: None,
        pid: None,
        expected_duration: None,
        labels,
        wait: node.is_none(),
    }
}

pub(super) fn project_of(p: &PodFacts) -> String {
    if p.namespace.is_empty() {
        "(no namespace)".to_string()
    } else {
        p.namespace.clone()
    }
}

/// The claim id of a pod: its UID (its namespace and name when it has none).
fn claim_id(p: &PodFacts) -> ClaimId {
    if p.uid.is_empty() {
        ClaimId::of_name(&format!("k8s-pod/{}/{}", p.namespace, p.name))
    } else {
        ClaimId::of_name(&format!("k8s-pod/{}", p.uid))
    }
}

/// What operators call a pod, and what the console takes for it: `NAMESPACE/NAME`, as
/// kubectl writes it.
fn claim_name(p: &PodFacts) -> String {
    format!("{}/{}", p.namespace, p.name)
}

pub(super) fn created_at(p: &PodFacts) -> Timestamp {
    p.created
        .as_deref()
        .and_then(|c| c.parse::<jiff::Timestamp>().ok())
        .and_then(|t| u64::try_from(t.as_millisecond()).ok())
        .map_or(Timestamp(0), Timestamp)
}

pub(super) fn pending_claim(p: &PodFacts, asked: &Asked) -> ClaimView {
    let reason = match &p.scheduled {
        Some(c) if !c.is_true => format!(
            "Kubernetes: {}{}",
            if c.reason.is_empty() {
                "not scheduled"
            } else {
                &c.reason
            },
            if c.message.is_empty() {
                String::new()
            } else {
                format!(": {}", c.message)
            }
        ),
        _ => "Kubernetes: not yet scheduled".to_string(),
    };
    ClaimView {
        id: claim_id(p),
        name: Some(claim_name(p)),
        state: ClaimState::Pending,
        project: project_of(p),
        holder: Some(p.name.clone()),
        form: form_text(p, asked, ""),
        request: request_of(p, asked, None),
        node: None,
        shares: Vec::new(),
        memory_reserved: Bytes(0),
        compute_reserved: Units(0),
        memory_used: None,
        over_limit: false,
        idle: false,
        created_at: created_at(p),
        lease_expires_at: None,
        pending_reasons: vec![reason],
        infeasible: false,
    }
}

pub(super) fn placed_claim(
    p: &PodFacts,
    asked: &Asked,
    node: &str,
    shares: Vec<DeviceShare>,
    note: &str,
) -> ClaimView {
    let mut request = request_of(p, asked, Some(node));
    if !note.is_empty() {
        // Which GPUs is not published: the shares are where the console shows them.
        request
            .labels
            .insert("k8s.devices".to_string(), "guessed".to_string());
    }
    ClaimView {
        id: claim_id(p),
        name: Some(claim_name(p)),
        state: ClaimState::Placed,
        project: project_of(p),
        holder: Some(p.name.clone()),
        form: form_text(p, asked, note),
        request,
        node: Some(node.to_string()),
        memory_reserved: shares.iter().fold(Bytes(0), |a, s| a + s.memory),
        compute_reserved: shares.iter().fold(Units(0), |a, s| a + s.compute),
        shares,
        memory_used: None,
        over_limit: false,
        idle: false,
        created_at: created_at(p),
        lease_expires_at: None,
        pending_reasons: Vec::new(),
        infeasible: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A container asking for these resources (as limits); `sidecar` as written.
    fn c(resources: &[(&str, &str)], sidecar: bool) -> ContainerFacts {
        ContainerFacts {
            limits: resources
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
            sidecar,
            ..ContainerFacts::default()
        }
    }

    /// App containers, init containers, `nvidia.com/gpu` asked, gpu-memory asked.
    type Case = (Vec<ContainerFacts>, Vec<ContainerFacts>, u64, Option<Bytes>);

    #[test]
    fn init_containers_count_by_the_effective_request_rule() {
        const GPU: &str = "nvidia.com/gpu";
        const MEM: &str = "koordinator.sh/gpu-memory";
        let cases: Vec<Case> = vec![
            // An init container asking more than the app: its ask wins.
            (
                vec![c(&[(GPU, "1")], false)],
                vec![c(&[(GPU, "2")], false)],
                2,
                None,
            ),
            // App containers run together: summed, and more than the init container.
            (
                vec![c(&[(GPU, "1")], false), c(&[(GPU, "1")], false)],
                vec![c(&[(GPU, "1")], false)],
                2,
                None,
            ),
            // Init containers run one at a time: the largest, not their sum.
            (
                vec![c(&[(GPU, "1")], false)],
                vec![c(&[(GPU, "2")], false), c(&[(GPU, "2")], false)],
                2,
                None,
            ),
            // An init container without GPUs changes nothing.
            (vec![c(&[(GPU, "1")], false)], vec![c(&[], false)], 1, None),
            // A sidecar runs beside the app: added to it.
            (
                vec![c(&[(GPU, "1")], false)],
                vec![c(&[(GPU, "1")], true)],
                2,
                None,
            ),
            // A plain init container after a sidecar runs beside it: 1 + 2 = 3 > 1 + 1.
            (
                vec![c(&[(GPU, "1")], false)],
                vec![c(&[(GPU, "1")], true), c(&[(GPU, "2")], false)],
                3,
                None,
            ),
            // Before the sidecar it runs alone: 2 = 1 + 1.
            (
                vec![c(&[(GPU, "1")], false)],
                vec![c(&[(GPU, "2")], false), c(&[(GPU, "1")], true)],
                2,
                None,
            ),
            // Byte quantities follow the same rule.
            (
                vec![c(&[(MEM, "8Gi")], false)],
                vec![c(&[(MEM, "16Gi")], false)],
                0,
                Some(Bytes::gib(16)),
            ),
            (
                vec![c(&[(MEM, "8Gi")], false), c(&[(MEM, "8Gi")], false)],
                vec![c(&[(MEM, "12Gi")], false)],
                0,
                Some(Bytes::gib(16)),
            ),
        ];
        for (i, (app, init, gpus, memory)) in cases.into_iter().enumerate() {
            let pod = PodFacts {
                name: format!("case-{i}"),
                containers: app,
                init_containers: init,
                ..PodFacts::default()
            };
            let mut warnings = Vec::new();
            let asked = asked_of(&pod, &mut warnings);
            assert_eq!(asked.get(GPU), gpus, "case {i}: {asked:?}");
            assert_eq!(asked.koord_memory, memory, "case {i}: {asked:?}");
            assert!(warnings.is_empty(), "case {i}: {warnings:?}");
        }
    }

    #[test]
    fn a_bad_quantity_in_an_init_container_is_named_once() {
        let pod = PodFacts {
            name: "p".into(),
            namespace: "ns".into(),
            containers: vec![c(&[("nvidia.com/gpu", "1")], false)],
            init_containers: vec![
                c(&[("nvidia.com/gpu", "x")], true),
                c(&[("nvidia.com/gpu", "1")], false),
            ],
            ..PodFacts::default()
        };
        let mut warnings = Vec::new();
        let asked = asked_of(&pod, &mut warnings);
        assert_eq!(asked.get("nvidia.com/gpu"), 1);
        let paths: Vec<&str> = warnings.iter().map(|w| w.path.as_str()).collect();
        assert_eq!(
            paths,
            vec!["pod ns/p spec.initContainers[0].resources nvidia.com/gpu"]
        );
    }
}
