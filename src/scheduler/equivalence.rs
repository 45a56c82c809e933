//! The tick that looks only at what is due against the reference that scans every claim
//! and works out every fit afresh: on an injected clock, through random claims, releases,
//! renewals, cordons, shares, owners ending and time passing, both agree at every step
//! (what each call answers, the journal, and the whole snapshot: leases, placements,
//! pending reasons, debts and backoffs).

use proptest::prelude::*;
use serde_json::{Value, json};

use super::due::Due;
use super::*;
use crate::clock::Timestamp;
use crate::inventory::a100_node;
use crate::placement::{DeviceSpec, NodeSpec};
use crate::units::Bytes;

/// A fixed-seed xorshift: proptest picks the seed, the seed picks the steps.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Two A100 nodes and one of mixed A10G / 80 GB devices, so work fetch sees three types.
fn nodes() -> Vec<NodeSpec> {
    let mixed = NodeSpec {
        name: "m".to_string(),
        devices: (0..3)
            .map(|i| DeviceSpec {
                index: i,
                model: if i == 0 {
                    "NVIDIA A10G"
                } else {
                    "NVIDIA A100-SXM4-80GB"
                }
                .to_string(),
                uuid: None,
                memory: Some(Bytes::gib(if i == 0 { 24 } else { 80 })),
                link_group: None,
            })
            .collect(),
        cpus: None,
    };
    vec![a100_node("a", 2), a100_node("b", 4), mixed]
}

fn random_request(rng: &mut Rng) -> Value {
    let mut v = match rng.below(6) {
        0 => json!({"num_gpus": format!("0.{:02}", 10 + rng.below(80))}),
        1 => json!({"gpu_memory": format!("{}Gi", 2 + rng.below(40))}),
        2 => json!({"nvidia.com/gpu": 1 + rng.below(3)}),
        3 => json!({"gpu-memory": format!("{}Gi", 4 + rng.below(20)), "gpu.shared": 2}),
        4 => json!({"num_gpus": 1}),
        _ => json!({"gpu_memory": "200Gi"}),
    };
    v["project"] = json!(["vision", "nlp", "speech"][rng.below(3) as usize]);
    // Most wait for devices rather than being refused: the queue is what is under test.
    v["wait"] = json!(rng.below(4) != 0);
    if rng.below(3) == 0 {
        v["ttl"] = json!(1 + rng.below(8));
    }
    if rng.below(4) == 0 {
        v["pid"] = json!(100 + rng.below(3));
    }
    v
}

/// One random step on both schedulers; panics (with the step) where they disagree.
fn step(
    rng: &mut Rng,
    fast: &mut Scheduler,
    slow: &mut Scheduler,
    now: &mut Timestamp,
    alive: &mut [bool; 3],
) {
    let id = ClaimId(1 + rng.below(fast.next_id.0.max(2)));
    let what = match rng.below(10) {
        0..=2 => {
            let v = random_request(rng);
            let r = ClaimRequest::from_json(&v).unwrap();
            let a = fast.submit(r.clone(), "t", *now);
            let b = slow.submit(r, "t", *now);
            assert_eq!(a, b, "submit {v}");
            format!("submit {v}")
        }
        3 => {
            assert_eq!(fast.release(id, "t", *now), slow.release(id, "t", *now));
            format!("release {id}")
        }
        4 => {
            let ttl = (rng.below(2) == 0).then(|| 1 + rng.below(6));
            assert_eq!(
                fast.renew(id, ttl, "t", *now),
                slow.renew(id, ttl, "t", *now)
            );
            format!("renew {id} {ttl:?}")
        }
        5 => {
            let (node, index, on) = (
                ["a", "b", "m"][rng.below(3) as usize],
                rng.below(3) as u32,
                rng.below(2) == 0,
            );
            let a = fast.set_cordon(node, index, on, "t", *now).is_ok();
            assert_eq!(a, slow.set_cordon(node, index, on, "t", *now).is_ok());
            format!("cordon {node}:{index} {on}")
        }
        6 => {
            let (p, share) = (
                ["vision", "nlp"][rng.below(2) as usize],
                rng.below(3) as u32 * 50,
            );
            assert_eq!(
                fast.set_share(p, share, "t", *now),
                slow.set_share(p, share, "t", *now)
            );
            format!("share {p} {share}")
        }
        7 => {
            let pid = rng.below(3) as usize;
            alive[pid] = !alive[pid];
            format!("pid {} alive {}", 100 + pid, alive[pid])
        }
        _ => {
            *now = Timestamp(now.0 + rng.below(4_000));
            let owner = |pid: u32| {
                pid.checked_sub(100)
                    .is_some_and(|i| alive.get(i as usize) == Some(&true))
            };
            fast.tick(*now, &owner);
            slow.tick(*now, &owner);
            format!("tick at {}", now.0)
        }
    };
    assert_eq!(
        fast.take_changes(),
        slow.take_changes(),
        "journal after {what}"
    );
    assert_eq!(
        fast.snapshot(*now),
        slow.snapshot(*now),
        "snapshot after {what}"
    );
    assert_eq!(fast.due, Due::of(fast.claims()), "due lists after {what}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn ticking_only_what_is_due_matches_scanning_everything(seed in 1u64..) {
        let mut rng = Rng(seed);
        let config = SchedulerConfig { seed, ..SchedulerConfig::default() };
        let mut fast = Scheduler::new(config.clone(), nodes()).unwrap();
        let mut slow = Scheduler::new(config, nodes()).unwrap();
        slow.reference = true;
        let mut now = Timestamp(1_000_000);
        let mut alive = [true; 3];
        for _ in 0..120 {
            step(&mut rng, &mut fast, &mut slow, &mut now, &mut alive);
        }
    }
}

#[test]
fn a_restored_scheduler_knows_what_is_due() {
    let mut s = Scheduler::new(SchedulerConfig::default(), nodes()).unwrap();
    let t0 = Timestamp(1_000_000);
    for v in [
        json!({"num_gpus": 0.5, "ttl": 5}),
        json!({"num_gpus": 1, "pid": 101}),
        json!({"gpu_memory": "500Gi", "wait": true}),
    ] {
        s.submit(ClaimRequest::from_json(&v).unwrap(), "t", t0);
    }
    let mut persisted = Persisted::default();
    for change in s.take_changes() {
        match change {
            Change::Claim(c) => {
                persisted.claims.retain(|x| x.id != c.id);
                persisted.claims.push(*c);
            }
            Change::Counters { revision, next_id } => {
                persisted.revision = revision;
                persisted.next_id = next_id;
            }
            _ => {}
        }
    }
    let (restored, _) = Scheduler::restore(SchedulerConfig::default(), nodes(), persisted).unwrap();
    assert_eq!(restored.due, Due::of(restored.claims()));
    assert_eq!(
        restored.due.waiting().len(),
        0,
        "the 500 GiB claim is refused, not waiting"
    );
    assert_eq!(
        restored.due.at(t0.plus_secs(5)).len(),
        2,
        "the lease and the owned claim"
    );
}

#[test]
fn an_idle_scheduler_says_until_when_ticks_have_nothing_to_do() {
    let t0 = Timestamp(1_000_000);
    let never = |_: u32| false;
    let mut s = Scheduler::new(SchedulerConfig::default(), nodes()).unwrap();
    assert_eq!(s.idle_until(), None, "the ledger was never saved: tick");
    s.tick(t0, &never);
    assert_eq!(
        s.idle_until(),
        Some(t0.plus_millis(LEDGER_IDLE_SAVE_MS)),
        "the next save: nothing was revised since this one"
    );
    let lease = ClaimRequest::from_json(&json!({"num_gpus": 0.5, "ttl": 5})).unwrap();
    s.submit(lease, "t", t0);
    assert_eq!(
        s.idle_until(),
        Some(t0.plus_secs(5)),
        "the lease runs out first"
    );
    // Ticking before then changes nothing; at the lease's end it is released.
    s.take_changes();
    s.tick(t0.plus_secs(4), &never);
    assert!(s.take_changes().is_empty());
    s.tick(t0.plus_secs(5), &never);
    assert!(s.claim(ClaimId(1)).is_none());
    let owned = ClaimRequest::from_json(&json!({"num_gpus": 0.5, "pid": 4242})).unwrap();
    s.submit(owned, "t", t0.plus_secs(5));
    assert_eq!(s.idle_until(), None, "an owner is checked on every tick");
    s.release(ClaimId(2), "t", t0.plus_secs(5));
    let big = ClaimRequest::from_json(&json!({"nvidia.com/gpu": 4, "wait": true})).unwrap();
    for _ in 0..2 {
        s.submit(big.clone(), "t", t0.plus_secs(5));
    }
    assert_eq!(s.due.waiting().len(), 1);
    assert_eq!(
        s.idle_until(),
        None,
        "work fetch runs on every tick while a claim waits"
    );
}

#[test]
fn the_ledger_is_saved_30_s_after_a_change_and_every_10_minutes_while_nothing_changes() {
    let t0 = Timestamp(1_000_000);
    let never = |_: u32| false;
    let mut s = Scheduler::new(SchedulerConfig::default(), nodes()).unwrap();
    let saves = |s: &mut Scheduler| {
        s.take_changes()
            .iter()
            .filter(|c| matches!(c, Change::Ledger(_)))
            .count()
    };
    s.tick(t0, &never);
    assert_eq!(saves(&mut s), 1, "the first tick saves");
    let r = ClaimRequest::from_json(&json!({"num_gpus": 0.5})).unwrap();
    s.submit(r, "t", t0.plus_secs(1));
    s.take_changes();
    assert_eq!(s.idle_until(), Some(t0.plus_millis(LEDGER_SAVE_MS)));
    s.tick(t0.plus_secs(29), &never);
    assert_eq!(saves(&mut s), 0);
    let t1 = t0.plus_millis(LEDGER_SAVE_MS);
    s.tick(t1, &never);
    assert_eq!(
        saves(&mut s),
        1,
        "30 s after the last save, with a claim since"
    );
    // Nothing revised since: debts accrue at the same rates, the next save waits.
    s.tick(t1.plus_millis(LEDGER_SAVE_MS), &never);
    assert_eq!(saves(&mut s), 0);
    assert_eq!(s.idle_until(), Some(t1.plus_millis(LEDGER_IDLE_SAVE_MS)));
    s.tick(t1.plus_millis(LEDGER_IDLE_SAVE_MS), &never);
    assert_eq!(saves(&mut s), 1, "10 minutes after, all the same");
    // A release revises: back to 30 s.
    let t2 = t1.plus_millis(LEDGER_IDLE_SAVE_MS);
    s.release(ClaimId(1), "t", t2.plus_secs(1));
    assert_eq!(s.idle_until(), Some(t2.plus_millis(LEDGER_SAVE_MS)));
}
