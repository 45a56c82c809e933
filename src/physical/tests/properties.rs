//! The join's properties over random sources and changes: a kept join equals a cold one,
//! and new telemetry is taken in as a join would take it.

use proptest::prelude::*;

use super::*;

/// Per source: kind, devices (node, index, has uuid, spelling), claims (node, index, compute).
type ArbSource = (usize, Vec<(u8, u8, bool, u8)>, Vec<(u8, u8, u16)>);

/// Sources over a few nodes, named as each source would: short, FQDN, upper case.
fn arb_sources() -> impl Strategy<Value = Vec<ArbSource>> {
    prop::collection::vec(
        (
            0usize..4,
            prop::collection::vec((0u8..3, 0u8..4, any::<bool>(), 0u8..3), 0..10),
            prop::collection::vec((0u8..3, 0u8..4, 0u16..=10_000), 0..6),
        ),
        1..5,
    )
}

fn spelled(n: u8, how: u8) -> String {
    match how {
        0 => format!("n{n}"),
        1 => format!("N{n}.lab.example"),
        _ => format!("n{n}.LAB.example"),
    }
}

/// One arbitrary source as a snapshot of engine `kind` (`KINDS`), claims numbered from `i`.
fn arb_snap(i: usize, (kind, devices, claims): &ArbSource) -> Src {
    let mut nodes: BTreeMap<String, Vec<DeviceView>> = BTreeMap::new();
    for (n, idx, uuid, how) in devices {
        let list = nodes.entry(spelled(*n, *how)).or_default();
        if list.iter().any(|d| d.index == u32::from(*idx)) {
            continue;
        }
        let uuid = uuid.then(|| format!("GPU-{n}-{idx}"));
        let mut d = dev(u32::from(*idx), uuid.as_deref());
        // A reading on some: NVML's with the GPU's one process (each source lists it),
        // dcgm's without; times that tie across sources, or not.
        if (n + idx + how) % 2 == 0 {
            let pid = 3_000 + u32::from(*n) * 10 + u32::from(*idx);
            let ps = if KINDS[*kind] == GpuEngine::Telemetry {
                Vec::new()
            } else {
                vec![process(pid, 100, None, None)]
            };
            d = with_processes(d, Some(u32::from(*idx) * 3), ps);
            if let Some(t) = d.telemetry.as_mut() {
                t.sampled_at = Timestamp((i % 3) as u64);
            }
        }
        list.push(d);
    }
    let names: Vec<String> = nodes.keys().cloned().collect();
    let claims: Vec<ClaimView> = claims
        .iter()
        .enumerate()
        .filter_map(|(j, (n, idx, compute))| {
            let name = names
                .iter()
                .find(|m| m.to_lowercase().starts_with(&format!("n{n}")))?;
            let id = (i * 100 + j) as u64;
            Some(claim(
                id,
                name,
                u32::from(*idx),
                0,
                u32::from(*compute),
                &[],
            ))
        })
        .collect();
    let nodes = nodes.into_iter().map(|(n, d)| node(&n, d)).collect();
    snap(KINDS[*kind], nodes, claims)
}

const KINDS: [GpuEngine; 5] = [
    GpuEngine::Gpuboard,
    GpuEngine::Slurm,
    GpuEngine::Kubernetes,
    GpuEngine::Telemetry,
    GpuEngine::Ray,
];

/// A change to the sources: replace (or add, past the end) the one at a position with a
/// new snapshot, give one a new snapshot of the same devices (`touch`), remove one, join
/// again with nothing changed, or switch the aliases.
#[derive(Clone, Debug)]
enum Change {
    Put(usize, ArbSource),
    Touch(usize, u8, u8),
    Remove(usize),
    Nothing,
    Aliases,
}

/// The same devices a moment later, changed by `what` (telemetry, a claim gone, a model or
/// capacity, a process naming a claim, a claim's share, the processes' memory, new
/// readings alone, the claims' order or one from the middle), `n` choosing where.
fn touch(s: &mut Snapshot, what: u8, n: u8) {
    let first_claim = s.claims.first().map(|c| c.id.0);
    let mut devices: Vec<&mut DeviceView> = s
        .nodes
        .iter_mut()
        .flat_map(|m| m.devices.iter_mut())
        .collect();
    let count = devices.len().max(1);
    let at = usize::from(n) % count;
    match what {
        0 => {
            for (k, d) in devices.iter_mut().enumerate() {
                let k = u32::try_from(k).unwrap();
                let ps = if (u32::from(n) + k) % 3 == 0 {
                    vec![process(
                        1_000 + k + u32::from(n % 2) * 10,
                        u64::from(n),
                        None,
                        None,
                    )]
                } else {
                    Vec::new()
                };
                **d = with_processes(d.clone(), Some(u32::from(n) % 7 + k), ps);
                if let Some(t) = d.telemetry.as_mut() {
                    t.sampled_at = Timestamp(u64::from(n % 4));
                }
            }
        }
        5 => {
            // The same processes using more memory, read later or not.
            for d in devices {
                if let Some(t) = d.telemetry.as_mut() {
                    t.sampled_at = Timestamp(t.sampled_at.0 + u64::from(n % 2));
                    for p in &mut t.processes {
                        p.used_memory = p.used_memory.map(|m| m + Bytes::mib(1));
                    }
                }
            }
        }
        6 => {
            // New readings alone: the same processes, another utilization and time, the
            // device lost or back.
            for (k, d) in devices.iter_mut().enumerate() {
                let k = u32::try_from(k).unwrap();
                if let Some(t) = d.telemetry.as_mut() {
                    t.utilization_gpu = Some((u32::from(n) + k) % 10);
                    t.sampled_at = Timestamp(t.sampled_at.0 + u64::from(n % 3));
                    t.lost = (u32::from(n) + k) % 5 == 0;
                }
            }
            for c in &mut s.claims {
                c.memory_used = Some(Bytes::mib(u64::from(n)));
            }
        }
        7 => {
            // Claims in another order, or one from the middle gone.
            if n.is_multiple_of(2) {
                s.claims.reverse();
            } else if !s.claims.is_empty() {
                let len = s.claims.len();
                s.claims.remove(usize::from(n) % len);
            }
        }
        1 => {
            s.claims.pop();
        }
        2 => {
            if let Some(d) = devices.get_mut(at) {
                d.memory_capacity = Some(Bytes(u64::from(n) * GIB));
                d.model = format!("M{n}");
            }
        }
        3 => {
            if let Some(d) = devices.get_mut(at) {
                let p = process(2_000, 50, first_claim, None);
                **d = with_processes(d.clone(), Some(1), vec![p]);
            }
        }
        _ => {
            let len = s.claims.len().max(1);
            if let Some(share) = s
                .claims
                .get_mut(usize::from(n) % len)
                .and_then(|c| c.shares.first_mut())
            {
                share.compute = Units(u32::from(n) * 100);
            }
        }
    }
}

fn arb_change() -> impl Strategy<Value = Change> {
    prop_oneof![
        4 => (0usize..5, arb_sources().prop_map(|mut v| v.remove(0)))
            .prop_map(|(at, s)| Change::Put(at, s)),
        8 => (0usize..5, 0u8..8, any::<u8>()).prop_map(|(at, what, n)| Change::Touch(at, what, n)),
        1 => (0usize..5).prop_map(Change::Remove),
        1 => Just(Change::Nothing),
        1 => Just(Change::Aliases),
    ]
}

proptest! {
    #[test]
    fn every_device_lands_once_and_every_claim_on_its_gpu(sources in arb_sources()) {
        let snaps: Vec<(String, Src)> = sources
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("s{i}"), arb_snap(i, s)))
            .collect();
        let refs: Vec<(&str, &Src)> = snaps.iter().map(|(n, s)| (n.as_str(), s)).collect();
        let fleet = join_all(&refs);
        // Every device is seen exactly once.
        let devices: usize = snaps.iter().map(|(_, s)| s.snapshot.nodes.iter().map(|n| n.devices.len()).sum::<usize>()).sum();
        let sightings: usize = fleet.gpus.iter().map(|g| g.seen_by.len()).sum();
        prop_assert_eq!(devices, sightings);
        // Every claim on a device that exists is a holder exactly once, on the GPU that
        // device joined (gpuboard ids are per source; other engines' once per engine).
        for (i, (_, s)) in snaps.iter().enumerate() {
            for c in &s.snapshot.claims {
                let node = c.node.as_deref().unwrap();
                let d = c.shares[0].device;
                let on: Vec<&PhysicalGpu> = fleet.gpus.iter().map(|g| &**g).filter(|g| g.seen_by.iter().any(|v| v.source == i && *v.node == *node && v.index == d)).collect();
                prop_assert!(on.len() <= 1);
                if let Some(g) = on.first() {
                    let engine = s.engine;
                    let n = g.holders.iter().filter(|h| h.claim == c.id && h.engine == engine).count();
                    prop_assert_eq!(n, 1);
                }
            }
        }
        for g in &fleet.gpus {
            // No chain loops.
            for i in 0..g.holders.len() {
                prop_assert!(g.chain(i).len() <= g.holders.len());
            }
            // Double-booked exactly when the outermost holders ask more compute than one GPU.
            let compute: u64 = g.roots().map(|(_, h)| u64::from(h.compute.0)).sum();
            let with: usize = g.roots().filter(|(_, h)| h.compute.0 > 0).count();
            prop_assert_eq!(g.has_flag("double-booked"), with >= 2 && compute > 10_000);
            // Two sightings of one GPU by one source only when it listed it under two names.
            prop_assert!(g.unmatched.is_none() || g.seen_by.len() == 1);
        }
        // The join does not depend on anything but its input.
        prop_assert_eq!(join_all(&refs), fleet);
    }

    #[test]
    fn a_kept_join_equals_a_cold_one_after_any_changes(
        first in arb_sources(),
        changes in prop::collection::vec(arb_change(), 1..12),
        ray in any::<bool>(),
    ) {
        // Ray sources too, where asked (the Ray pass reads no cached key).
        let kind = |k: usize| if ray && k == 3 { 4 } else { k };
        let mut sources: Vec<(String, Arc<Snapshot>, GpuEngine)> = Vec::new();
        let mut made = 0usize;
        let mut put = |sources: &mut Vec<(String, Arc<Snapshot>, GpuEngine)>, at: usize, s: &ArbSource| {
            let mut s = s.clone();
            s.0 = kind(s.0);
            let src = arb_snap(made, &s);
            made += 1;
            let entry = (format!("s{made}"), Arc::new(src.snapshot), src.engine);
            match sources.get_mut(at) {
                Some(slot) => *slot = entry,
                None => sources.push(entry),
            }
        };
        for s in &first {
            put(&mut sources, usize::MAX, s);
        }
        let mut aliases = Aliases::default();
        let mut kept = Joiner::default();
        for change in changes {
            match change {
                Change::Put(at, s) => put(&mut sources, at, &s),
                Change::Touch(at, what, n) => {
                    if let Some((_, snapshot, _)) = sources.get_mut(at) {
                        let mut s = (**snapshot).clone();
                        touch(&mut s, what, n);
                        *snapshot = Arc::new(s);
                    }
                }
                Change::Remove(at) if at < sources.len() => {
                    sources.remove(at);
                }
                Change::Remove(_) | Change::Nothing => {}
                Change::Aliases => {
                    aliases = if aliases.is_empty() {
                        Aliases::new([("n1", "n2"), ("N0.lab.example", "n0.other.example")])
                    } else {
                        Aliases::default()
                    };
                }
            }
            let named: Vec<(&str, GpuEngine, &Arc<Snapshot>)> = sources
                .iter()
                .map(|(name, snapshot, engine)| (name.as_str(), *engine, snapshot))
                .collect();
            let (kept_one, cold) = kept_and_cold(&mut kept, &named, &aliases);
            prop_assert_eq!(kept_one, cold);
        }
    }
}

#[test]
fn new_readings_are_taken_in_as_a_join_would_take_them() {
    let telemetry = |util: u32, own: u64, loose: u64| {
        snap(
            GpuEngine::Gpuboard,
            vec![node(
                "n1",
                vec![
                    with_processes(
                        dev(0, Some("GPU-A")),
                        Some(util),
                        vec![
                            process(10, own, Some(1), None),
                            process(11, loose, None, None),
                        ],
                    ),
                    with_processes(dev(1, Some("GPU-B")), Some(util / 2), vec![]),
                ],
            )],
            vec![claim(1, "n1", 0, 8 * GIB, 5_000, &[])],
        )
    };
    let before = telemetry(40, 2_000, 100);
    let after = telemetry(70, 3_000, 900);
    assert!(before.snapshot.same_but_telemetry(&after.snapshot));
    let mut measured = telemetry(70, 3_000, 900);
    measured.snapshot.claims[0].memory_used = Some(Bytes::mib(3_000));
    assert!(before.snapshot.same_but_telemetry(&measured.snapshot));
    let mut cordoned = telemetry(70, 3_000, 900);
    cordoned.snapshot.nodes[0].devices[0].cordoned = true;
    assert!(!before.snapshot.same_but_telemetry(&cordoned.snapshot));
    let mut gone = telemetry(70, 3_000, 900);
    gone.snapshot.nodes[0].devices.pop();
    // GPU 0 seen by Slurm too: a GPU two sources see takes the readings the same way.
    let other = snap(
        GpuEngine::Slurm,
        vec![node("n1", vec![dev(0, None)])],
        vec![slurm_job(7, "n1", 0)],
    );
    let aliases = Aliases::default();
    for sources in [1, 2] {
        let with = |ep| [("ep", ep), ("batch", &other)][..sources].to_vec();
        let mut kept = Joiner::default();
        kept.join(&shared(&with(&before)), &aliases);
        let fleet = kept
            .refresh(&shared(&with(&after)), &aliases)
            .expect("the same devices: no grouping again");
        assert_eq!(fleet, join_all(&with(&after)));
        assert_eq!(fleet.gpus[0].seen_by.len(), sources);
        let util = fleet.gpus[0]
            .telemetry
            .as_ref()
            .and_then(|t| t.utilization_gpu);
        assert_eq!(util, Some(70));
        let unexplained = fleet.gpus[0].flags.iter().find_map(|f| match f {
            GpuFlag::Unexplained { memory, .. } => Some(*memory),
            _ => None,
        });
        assert_eq!(
            unexplained,
            Some(Bytes::mib(900)),
            "the flag's memory follows"
        );
        // A device gone groups again: not refreshed, and the join kept as it was.
        assert!(kept.refresh(&shared(&with(&gone)), &aliases).is_none());
        let again = kept.refresh(&shared(&with(&measured)), &aliases);
        assert_eq!(again, Some(join_all(&with(&measured))));
    }
}

/// Joins `sources` (name, engine, snapshot) with `kept` and at once: both results.
fn kept_and_cold(
    kept: &mut Joiner,
    sources: &[(&str, GpuEngine, &Arc<Snapshot>)],
    aliases: &Aliases,
) -> (PhysicalFleet, PhysicalFleet) {
    let shared: Vec<SharedSource> = sources
        .iter()
        .enumerate()
        .map(|(i, (name, engine, snapshot))| SharedSource {
            source: i,
            name: (*name).to_string(),
            engine: *engine,
            snapshot: Arc::clone(snapshot),
        })
        .collect();
    let views: Vec<SourceView<'_>> = shared
        .iter()
        .map(|s| SourceView {
            source: s.source,
            name: &s.name,
            engine: s.engine,
            snapshot: &s.snapshot,
        })
        .collect();
    (kept.join(&shared, aliases), join(&views, aliases))
}

/// Joins `sources` with `kept` and at once, and says whether they agree.
fn kept_is_cold(kept: &mut Joiner, sources: &[(&str, GpuEngine, &Arc<Snapshot>)]) -> bool {
    let (kept, cold) = kept_and_cold(kept, sources, &Aliases::default());
    kept == cold
}

#[test]
fn telemetry_another_reading_outranks_is_skipped_only_while_it_changes_nothing() {
    // One GPU seen by two endpoints (NVML, each with its own process) and dcgm.
    let reading = |at: u64, util: u32, ps: Vec<ProcessView>, engine: GpuEngine| {
        let mut d = with_processes(dev(0, Some("GPU-A")), Some(util), ps);
        if let Some(t) = d.telemetry.as_mut() {
            t.sampled_at = Timestamp(at);
        }
        Arc::new(snap(engine, vec![node("n1", vec![d])], Vec::new()).snapshot)
    };
    let a = |at, mib| {
        reading(
            at,
            50,
            vec![process(10, mib, None, None)],
            GpuEngine::Gpuboard,
        )
    };
    let b = |at, mib| {
        reading(
            at,
            60,
            vec![process(20, mib, None, None)],
            GpuEngine::Gpuboard,
        )
    };
    let dcgm = |at, util| reading(at, util, Vec::new(), GpuEngine::Telemetry);
    let mut kept = Joiner::default();
    let (mut sa, mut sb, mut sd) = (a(5, 100), b(4, 200), dcgm(5, 1));
    let mut step = |sa: &Arc<Snapshot>, sb: &Arc<Snapshot>, sd: &Arc<Snapshot>| {
        kept_is_cold(
            &mut kept,
            &[
                ("a", GpuEngine::Gpuboard, sa),
                ("b", GpuEngine::Gpuboard, sb),
                ("d", GpuEngine::Telemetry, sd),
            ],
        )
    };
    assert!(step(&sa, &sb, &sd));
    // dcgm's new reading is outranked by NVML's: the GPU stays as it was.
    sd = dcgm(6, 2);
    assert!(step(&sa, &sb, &sd));
    // b's process uses more memory: b's reading is not shown, its process is.
    sb = b(4, 300);
    assert!(step(&sa, &sb, &sd));
    // b's reading as new as a's: b, the later source, is shown now.
    sb = b(5, 300);
    assert!(step(&sa, &sb, &sd));
    // a's reading newer again, then lost: b's, then dcgm's, outrank it.
    sa = a(7, 100);
    assert!(step(&sa, &sb, &sd));
    let mut lost = (*a(8, 100)).clone();
    if let Some(t) = lost.nodes[0].devices[0].telemetry.as_mut() {
        t.lost = true;
    }
    sa = Arc::new(lost);
    assert!(step(&sa, &sb, &sd));
    sd = dcgm(9, 3);
    assert!(step(&sa, &sb, &sd));
}
