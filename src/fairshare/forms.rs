//! A project's pending claims by form: claims whose caller gave them the same form (what
//! placement looks at) and that have the same demand fit alike, so work fetch asks about
//! the oldest claim of each form instead of walking the whole queue (a queue is mostly
//! many claims of a few forms). Claims without a form are asked about one by one.

use std::collections::BTreeMap;

use crate::ids::ClaimId;
use crate::units::Units;

/// Claims of one form and demand, by their place in the queue.
#[derive(Clone, Debug)]
pub(super) struct Group {
    pub(super) form: String,
    /// The types that could run them, with what each takes there.
    pub(super) demand: Vec<(usize, Units)>,
    pub(super) queue: BTreeMap<u64, ClaimId>,
}

/// A project's pending claims, grouped where they have a form.
#[derive(Clone, Debug, Default)]
pub(super) struct Forms {
    /// One per form and demand, in no set order.
    pub(super) groups: Vec<Group>,
    /// Claims without a form, by their place in the queue.
    pub(super) alone: BTreeMap<u64, ClaimId>,
}

impl Forms {
    /// Adds a claim at its place `seq` in the queue.
    pub(super) fn insert(
        &mut self,
        seq: u64,
        id: ClaimId,
        form: Option<&str>,
        demand: &[(usize, Units)],
    ) {
        let Some(form) = form else {
            self.alone.insert(seq, id);
            return;
        };
        match self
            .groups
            .iter_mut()
            .find(|g| g.form == form && g.demand == demand)
        {
            Some(group) => {
                group.queue.insert(seq, id);
            }
            None => self.groups.push(Group {
                form: form.to_string(),
                demand: demand.to_vec(),
                queue: BTreeMap::from([(seq, id)]),
            }),
        }
    }

    /// Takes out the claim at `seq`, added with this form and demand.
    pub(super) fn remove(&mut self, seq: u64, form: Option<&str>, demand: &[(usize, Units)]) {
        let Some(form) = form else {
            self.alone.remove(&seq);
            return;
        };
        if let Some(i) = self
            .groups
            .iter()
            .position(|g| g.form == form && g.demand == demand)
        {
            self.groups[i].queue.remove(&seq);
            if self.groups[i].queue.is_empty() {
                self.groups.swap_remove(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::HashMap;
    use std::time::Duration;

    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use crate::clock::Timestamp;
    use crate::fairshare::{
        Ledger, LedgerConfig, PendingClaim, Placed, ProjectName, ResourceDemand, ResourceId,
        ResourceType,
    };
    use crate::ids::ClaimId;
    use crate::units::Units;

    #[derive(Clone, Debug)]
    enum Op {
        /// A claim of this project and form (0: either type, 1: the first, 2: the second).
        Submit(u8, u8),
        /// Work fetch with these (form, type) pairs fitting (bit `form * 2 + type`).
        Fetch(u8),
        /// The n-th claim submitted ends (placed or not).
        Release(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u8..4, 0u8..3).prop_map(|(p, f)| Op::Submit(p, f)),
            3 => (0u8..64).prop_map(Op::Fetch),
            1 => (0usize..60).prop_map(Op::Release),
        ]
    }

    fn types() -> [ResourceId; 2] {
        [
            ResourceId::gpu("NVIDIA A100").unwrap(),
            ResourceId::gpu("NVIDIA H100").unwrap(),
        ]
    }

    fn demand(form: u8) -> Vec<ResourceDemand> {
        let [a, h] = types();
        let d = |resource, units| ResourceDemand {
            resource,
            units: Units(units),
        };
        match form {
            0 => vec![d(a, 10_000), d(h, 10_000)],
            1 => vec![d(a, 5_000)],
            _ => vec![d(h, 20_000)],
        }
    }

    fn ledger() -> Ledger {
        let mut ledger = Ledger::new(LedgerConfig::default()).unwrap();
        for r in types() {
            ledger.set_resource(Timestamp(0), ResourceType::new(r, 4));
        }
        ledger
    }

    proptest! {
        /// Asking about the oldest claim of each form decides as walking every claim
        /// does: the same claims placed, the same projects backed off.
        #[test]
        fn by_form_decides_as_claim_by_claim(ops in proptest::collection::vec(op(), 1..80)) {
            let (mut grouped, mut alone) = (ledger(), ledger());
            let (mut rng_g, mut rng_a) = (StdRng::seed_from_u64(7), StdRng::seed_from_u64(7));
            let mut forms: HashMap<ClaimId, u8> = HashMap::new();
            let mut ids = Vec::new();
            for (k, op) in ops.into_iter().enumerate() {
                let now = Timestamp(1_000 * k as u64);
                match op {
                    Op::Submit(p, f) => {
                        let id = ClaimId(k as u64 + 1);
                        let claim = PendingClaim {
                            id,
                            project: ProjectName::new(&format!("p{p}")).unwrap(),
                            demand: demand(f),
                            expected_duration: Some(Duration::from_mins(10)),
                            submitted: now,
                            form: Some(format!("form {f}")),
                        };
                        grouped.submit(now, claim.clone()).unwrap();
                        alone.submit(now, PendingClaim { form: None, ..claim }).unwrap();
                        forms.insert(id, f);
                        ids.push(id);
                    }
                    Op::Fetch(mask) => {
                        let types = types();
                        let mut fit = |c: &PendingClaim, r: &ResourceId, _: Units| {
                            let t = u8::from(*r == types[1]);
                            mask & (1 << (forms[&c.id] * 2 + t)) != 0
                        };
                        let g = grouped.work_fetch(now, &mut fit, &mut rng_g);
                        let a = alone.work_fetch(now, &mut fit, &mut rng_a);
                        prop_assert_eq!(&g, &a);
                        if let Some(f) = g {
                            for ledger in [&mut grouped, &mut alone] {
                                let placed = Placed {
                                    id: f.claim,
                                    project: f.project.clone(),
                                    resource: f.resource.clone(),
                                    units: f.units,
                                    expected_duration: None,
                                };
                                ledger.placed(now, placed).unwrap();
                            }
                        }
                    }
                    Op::Release(n) => {
                        if let Some(&id) = ids.get(n) {
                            prop_assert_eq!(grouped.released(now, id), alone.released(now, id));
                        }
                    }
                }
                prop_assert_eq!(grouped.drain_events(), alone.drain_events());
            }
        }
    }
}
