//! The forecast and the preview as the API answers them (`GET /v1/forecast`,
//! `POST /v1/preview`), and their words for people: the `ls` START column and the
//! sentence of a claim's detail. `forecast` computes them; the CLI and the console render
//! them from here.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::placement::MoveTarget;
use crate::request::ClaimRequest;

/// How a holder's end was worked out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndBasis {
    /// From its request's `expected_duration`.
    Declared,
    /// From the hold times of past claims of its project and form.
    Learned,
    /// Its lease (no local owner renews it): it ends when the lease runs out.
    Lease,
    /// Nothing bounds it: no `expected_duration`, no history, no lease that runs out.
    Unbounded,
}

impl EndBasis {
    /// The word shown beside a time.
    pub fn word(self) -> &'static str {
        match self {
            EndBasis::Declared => "declared",
            EndBasis::Learned => "learned",
            EndBasis::Lease => "lease",
            EndBasis::Unbounded => "unbounded",
        }
    }
}

/// p10, p50 and p90 of a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Band {
    /// Early (10th percentile).
    pub p10: Timestamp,
    /// Expected (median).
    pub p50: Timestamp,
    /// Late (90th percentile).
    pub p90: Timestamp,
}

/// The holder whose end frees a waiting claim's place.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreedBy {
    /// The holder.
    pub claim: ClaimId,
    /// How its end was worked out.
    pub basis: EndBasis,
    /// Its lease's end, if it has one.
    pub lease_expires_at: Option<Timestamp>,
}

/// When one waiting claim is expected to start, and why then.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpectedStart {
    /// The waiting claim.
    pub claim: ClaimId,
    /// Its project.
    pub project: String,
    /// When it starts; `None`: unknown (see `unknown`).
    pub start: Option<Band>,
    /// Where it starts (the middle run's placement).
    pub node: Option<String>,
    /// The devices on `node` it starts on.
    #[serde(default)]
    pub devices: Vec<u32>,
    /// The holder whose end frees its place; `None` when it starts on what is free now or
    /// when a backoff ends.
    pub freed_by: Option<FreedBy>,
    /// Waiting claims fair share places before it.
    pub ahead: u32,
    /// Why the start is unknown, when it is.
    pub unknown: Option<Unknown>,
}

/// Why a waiting claim's start is unknown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unknown {
    /// A holder that nothing bounds, whose end the claim waits on (`None`: it waits on
    /// nothing that ends: cordons, health, or its project's share keep it out).
    pub holder: Option<ClaimId>,
    /// In words.
    pub why: String,
}

/// `GET /v1/forecast`: every waiting claim's expected start.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forecast {
    /// The revision it was computed at.
    pub revision: u64,
    /// When it was computed (the simulated clock starts here).
    pub at: Timestamp,
    /// One per waiting claim, in id order.
    pub starts: Vec<ExpectedStart>,
    /// The engine whose own estimates these are (`Slurm`, from its pending jobs'
    /// `start_time`): each a time alone, with no band, place or reason; `None`: gpuboard's
    /// forecast.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
}

impl Forecast {
    /// The expected start of `id`, if it waits.
    pub fn of(&self, id: ClaimId) -> Option<&ExpectedStart> {
        self.starts
            .binary_search_by_key(&id, |s| s.claim)
            .ok()
            .and_then(|i| self.starts.get(i))
    }
}

impl ExpectedStart {
    /// The `ls` START column: `~14m (8-31m)`, `now`, or `unknown`.
    pub fn short(&self, now: Timestamp) -> String {
        let Some(b) = self.start else {
            return "unknown".to_string();
        };
        let (lo, mid, hi) = (
            b.p10.millis_since(now),
            b.p50.millis_since(now),
            b.p90.millis_since(now),
        );
        if hi < 1_000 {
            return "now".to_string();
        }
        let (unit, per) = unit_for(hi);
        let round = |ms: u64| (ms + per / 2) / per;
        if lo / per == hi.div_ceil(per) || lo == hi {
            return format!("~{}{unit}", round(mid));
        }
        format!(
            "~{}{unit} ({}-{}{unit})",
            round(mid),
            lo / per,
            hi.div_ceil(per)
        )
    }

    /// The detail's sentence: "expected to start ~03:40 (03:34-03:58) on node-b:5 when
    /// claim 17 ends; its lease runs to 03:38; 3 claims ahead of it in fair share", with
    /// times as `clock` writes them (`HH:MM` in the operator's zone).
    pub fn sentence(&self, clock: &dyn Fn(Timestamp) -> String) -> String {
        let Some(b) = self.start else {
            let why = self.unknown.as_ref().map_or("", |u| u.why.as_str());
            return format!("expected start unknown: {why}");
        };
        let mut s = if b.p10 == b.p90 {
            format!("expected to start ~{}", clock(b.p50))
        } else {
            format!(
                "expected to start ~{} ({}-{})",
                clock(b.p50),
                clock(b.p10),
                clock(b.p90)
            )
        };
        if let Some(node) = &self.node {
            let devices: Vec<String> = self.devices.iter().map(ToString::to_string).collect();
            if devices.is_empty() {
                let _ = write!(s, " on {node}");
            } else {
                let _ = write!(s, " on {node}:{}", devices.join(","));
            }
        }
        if let Some(f) = &self.freed_by {
            let _ = write!(s, " when claim {} ends", f.claim);
            match (f.basis, f.lease_expires_at) {
                (_, Some(lease)) => {
                    let _ = write!(s, "; its lease runs to {}", clock(lease));
                }
                (EndBasis::Declared, None) => s.push_str(" (its declared duration)"),
                (EndBasis::Learned, None) => s.push_str(" (as claims like it did)"),
                _ => {}
            }
        }
        let ahead = match self.ahead {
            0 => "no claim ahead of it in fair share".to_string(),
            1 => "1 claim ahead of it in fair share".to_string(),
            n => format!("{n} claims ahead of it in fair share"),
        };
        format!("{s}; {ahead}")
    }
}

/// The unit a span up to `ms` is best shown in, and its length in ms.
fn unit_for(ms: u64) -> (&'static str, u64) {
    match ms {
        0..90_000 => ("s", 1_000),
        90_000..5_400_000 => ("m", 60_000),
        5_400_000..172_800_000 => ("h", 3_600_000),
        _ => ("d", 86_400_000),
    }
}

/// What a preview is asked about: one action, as the API and `--dry-run` take it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum PreviewAction {
    /// Release a claim.
    Release {
        /// The claim.
        claim: ClaimId,
    },
    /// Move a placed claim.
    Move {
        /// The claim.
        claim: ClaimId,
        /// Another node, or none to stay on the claim's node.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
        /// Device indexes, or none to let placement pick.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        devices: Option<Vec<u32>>,
    },
    /// Cordon a device.
    Cordon {
        /// Its node.
        node: String,
        /// Its index.
        index: u32,
    },
    /// Uncordon a device.
    Uncordon {
        /// Its node.
        node: String,
        /// Its index.
        index: u32,
    },
    /// Set a project's share.
    Share {
        /// The project.
        project: String,
        /// The share (0 to 1 000 000).
        share: u32,
    },
    /// Zero a project's debts and clear its backoffs (or every project's).
    Reset {
        /// The project; every project when absent.
        #[serde(default)]
        project: Option<String>,
    },
    /// Submit a claim.
    Claim {
        /// The request, as `POST /v1/claims` takes it (read by its one validator).
        #[serde(with = "claim_wire")]
        request: Box<ClaimRequest>,
    },
}

impl PreviewAction {
    /// A move's target.
    pub fn move_target(node: Option<String>, devices: Option<Vec<u32>>) -> MoveTarget {
        MoveTarget { node, devices }
    }

    /// What it is, in words: `release claim 2`, `cordon node-a:0`.
    pub fn describe(&self) -> String {
        match self {
            PreviewAction::Release { claim } => format!("release claim {claim}"),
            PreviewAction::Move {
                claim,
                node,
                devices,
            } => {
                let devices = devices.as_ref().map(|d| joined(d, ","));
                match (node, devices) {
                    (Some(n), Some(d)) => format!("move claim {claim} to {n}:{d}"),
                    (Some(n), None) => format!("move claim {claim} to node {n}"),
                    (None, Some(d)) => format!("move claim {claim} to devices {d}"),
                    (None, None) => format!("move claim {claim}"),
                }
            }
            PreviewAction::Cordon { node, index } => format!("cordon {node}:{index}"),
            PreviewAction::Uncordon { node, index } => format!("uncordon {node}:{index}"),
            PreviewAction::Share { project, share } => {
                format!("set project {project}'s share to {share}")
            }
            PreviewAction::Reset { project } => match project {
                Some(p) => format!("reset project {p}"),
                None => "reset every project".to_string(),
            },
            PreviewAction::Claim { request } => format!("claim {}", request.describe()),
        }
    }
}

/// Items written one after another, `sep` between them.
fn joined<T: ToString>(list: &[T], sep: &str) -> String {
    list.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(sep)
}

/// A claim request inside a preview, in the wire form `POST /v1/claims` takes.
mod claim_wire {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::request::ClaimRequest;

    pub(super) fn serialize<S: Serializer>(r: &ClaimRequest, s: S) -> Result<S::Ok, S::Error> {
        super::super::claim_body(r).serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Box<ClaimRequest>, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        ClaimRequest::from_json(&value)
            .map(Box::new)
            .map_err(serde::de::Error::custom)
    }
}

/// A claim placed by the action's step, and where.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacedClaim {
    /// The claim.
    pub claim: ClaimId,
    /// Its project.
    pub project: String,
    /// Where, as `node:devices`.
    pub at: String,
}

/// A project's debt, before and after.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DebtChange {
    /// The project.
    pub project: String,
    /// Its debt now, in instance-seconds (GPU- or core-seconds) summed over its resource
    /// types, as the Fair share view shows each.
    pub before: f64,
    /// Right after the action's step.
    pub after_step: f64,
    /// An hour on, with the action taken.
    pub in_an_hour: f64,
    /// An hour on, without it.
    pub in_an_hour_without: f64,
}

/// A waiting claim whose expected start the action moves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartMoved {
    /// The claim.
    pub claim: ClaimId,
    /// Its expected start (median) without the action; `None`: unknown.
    pub before: Option<Timestamp>,
    /// With it.
    pub after: Option<Timestamp>,
}

/// `POST /v1/preview`: what an action would do, worked out on a copy of the state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Preview {
    /// The action.
    pub action: PreviewAction,
    /// The revision it was worked out at.
    pub revision: u64,
    /// When.
    pub at: Timestamp,
    /// Refused as the endpoint would refuse it (the message it would answer).
    pub refused: Option<String>,
    /// Claims placed at once (by the action itself, or the tick that follows it).
    pub placed: Vec<PlacedClaim>,
    /// Claims the action leaves on devices that take no new claims (a cordon's holders).
    pub on_cordoned: Vec<ClaimId>,
    /// Waiting claims whose start was bounded before and is not after.
    pub stranded: Vec<ClaimId>,
    /// The new claim's id, state and place, or its expected start (a `claim` action).
    pub new_claim: Option<ExpectedStart>,
    /// Each project's debt.
    pub debts: Vec<DebtChange>,
    /// Waiting claims whose expected start moves by a minute or more.
    pub starts_moved: Vec<StartMoved>,
}

impl Preview {
    /// What follows, for people, a line each: `at once:` (the claims placed and where,
    /// those left on a cordoned device, those stranded, where the new claim waits) and
    /// `in the next hour:` (each project's debt, the expected starts that move), or the
    /// refusal the endpoint would answer. Times as `clock` writes them; `now` is when the
    /// operator reads it (a start already due reads `now`).
    pub fn consequences(&self, now: Timestamp, clock: &dyn Fn(Timestamp) -> String) -> Vec<String> {
        if let Some(why) = &self.refused {
            return vec![format!("the endpoint would refuse it: {why}")];
        }
        let mut out = vec!["at once:".to_string()];
        if self.placed.is_empty() {
            out.push("  no claim would be placed".to_string());
        }
        for c in &self.placed {
            out.push(format!(
                "  claim {} ({}) would be placed on {}",
                c.claim, c.project, c.at
            ));
        }
        match self.on_cordoned.as_slice() {
            [] => {}
            [one] => out.push(format!(
                "  claim {one} stays on the cordoned device, which takes no new claim"
            )),
            many => out.push(format!(
                "  claims {} stay on the cordoned device, which takes no new claim",
                joined(many, ", ")
            )),
        }
        match self.stranded.as_slice() {
            [] => {}
            [one] => out.push(format!(
                "  stranded (no expected start any more): claim {one}"
            )),
            many => out.push(format!(
                "  stranded (no expected start any more): claims {}",
                joined(many, ", ")
            )),
        }
        if let Some(n) = &self.new_claim
            && !self.placed.iter().any(|c| c.claim == n.claim)
        {
            out.push(format!("  the new claim would wait: {}", n.sentence(clock)));
        }
        out.push("in the next hour:".to_string());
        for d in &self.debts {
            out.push(format!(
                "  project {}: debt {:.0} instance-seconds now, {:.0} in an hour ({:.0} without this)",
                d.project, d.before, d.in_an_hour, d.in_an_hour_without
            ));
        }
        // A claim the step places is said above, not again as a start that moves.
        let moved: Vec<&StartMoved> = self
            .starts_moved
            .iter()
            .filter(|m| !self.placed.iter().any(|c| c.claim == m.claim))
            .collect();
        if moved.is_empty() {
            out.push("  no expected start moves".to_string());
        }
        let at = |t: Option<Timestamp>| {
            t.map_or("unknown".to_string(), |t| {
                if t <= now {
                    "now".to_string()
                } else {
                    format!("~{}", clock(t))
                }
            })
        };
        for m in moved {
            out.push(match (m.before, m.after) {
                (Some(before), None) => format!(
                    "  claim {} would have no expected start (now {})",
                    m.claim,
                    at(Some(before))
                ),
                (None, Some(after)) => format!(
                    "  claim {} would start {} (unknown now)",
                    m.claim,
                    at(Some(after))
                ),
                (before, after) => format!(
                    "  claim {} would start {} instead of {}",
                    m.claim,
                    at(after),
                    at(before)
                ),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timestamp = Timestamp(1_000_000_000);

    fn start(p10_s: u64, p50_s: u64, p90_s: u64) -> ExpectedStart {
        ExpectedStart {
            claim: ClaimId(13),
            project: "vision".into(),
            start: Some(Band {
                p10: NOW.plus_secs(p10_s),
                p50: NOW.plus_secs(p50_s),
                p90: NOW.plus_secs(p90_s),
            }),
            node: Some("node-b".into()),
            devices: vec![5],
            freed_by: Some(FreedBy {
                claim: ClaimId(17),
                basis: EndBasis::Learned,
                lease_expires_at: Some(NOW.plus_secs(13 * 60)),
            }),
            ahead: 3,
            unknown: None,
        }
    }

    /// Minutes after `NOW` as `HH:MM`, for the sentence (03:25 is `NOW`).
    fn clock(t: Timestamp) -> String {
        let m = 3 * 60 + 25 + t.millis_since(NOW) / 60_000;
        format!("{:02}:{:02}", m / 60, m % 60)
    }

    #[test]
    fn the_start_column_is_the_median_and_its_band_in_one_unit() {
        assert_eq!(start(480, 840, 1860).short(NOW), "~14m (8-31m)");
        assert_eq!(start(600, 600, 600).short(NOW), "~10m");
        assert_eq!(start(20, 40, 60).short(NOW), "~40s (20-60s)");
        assert_eq!(start(0, 0, 0).short(NOW), "now");
        assert_eq!(start(3 * 3600, 4 * 3600, 9 * 3600).short(NOW), "~4h (3-9h)");
        let mut unknown = start(0, 0, 0);
        unknown.start = None;
        assert_eq!(unknown.short(NOW), "unknown");
    }

    #[test]
    fn the_sentence_says_when_where_after_whom_and_behind_how_many() {
        assert_eq!(
            start(9 * 60, 15 * 60, 33 * 60).sentence(&clock),
            "expected to start ~03:40 (03:34-03:58) on node-b:5 when claim 17 ends; its lease \
             runs to 03:38; 3 claims ahead of it in fair share"
        );
        let mut e = start(600, 600, 600);
        e.freed_by = Some(FreedBy {
            claim: ClaimId(2),
            basis: EndBasis::Declared,
            lease_expires_at: None,
        });
        e.ahead = 1;
        assert_eq!(
            e.sentence(&clock),
            "expected to start ~03:35 on node-b:5 when claim 2 ends (its declared duration); 1 \
             claim ahead of it in fair share"
        );
        e.start = None;
        e.unknown = Some(Unknown {
            holder: Some(ClaimId(4)),
            why: "it waits on claim 4".into(),
        });
        assert_eq!(
            e.sentence(&clock),
            "expected start unknown: it waits on claim 4"
        );
    }

    #[test]
    fn the_consequences_name_each_claim_once_in_the_right_number() {
        let p = Preview {
            action: PreviewAction::Cordon {
                node: "node-a".into(),
                index: 0,
            },
            revision: 1,
            at: NOW,
            refused: None,
            placed: vec![PlacedClaim {
                claim: ClaimId(3),
                project: "nlp".into(),
                at: "node-a:1".into(),
            }],
            on_cordoned: vec![ClaimId(1)],
            stranded: vec![ClaimId(4), ClaimId(5)],
            new_claim: None,
            debts: Vec::new(),
            starts_moved: vec![
                // Placed at once: said above, not as a start that moves.
                StartMoved {
                    claim: ClaimId(3),
                    before: Some(NOW.plus_secs(600)),
                    after: Some(NOW),
                },
                StartMoved {
                    claim: ClaimId(6),
                    before: Some(NOW.plus_secs(33 * 60)),
                    after: None,
                },
            ],
        };
        assert_eq!(p.action.describe(), "cordon node-a:0");
        assert_eq!(
            p.consequences(NOW, &clock),
            [
                "at once:",
                "  claim 3 (nlp) would be placed on node-a:1",
                "  claim 1 stays on the cordoned device, which takes no new claim",
                "  stranded (no expected start any more): claims 4, 5",
                "in the next hour:",
                "  claim 6 would have no expected start (now ~03:58)",
            ]
        );
        let refused = Preview {
            refused: Some("no claim 9".into()),
            ..p
        };
        assert_eq!(
            refused.consequences(NOW, &clock),
            ["the endpoint would refuse it: no claim 9"]
        );
    }

    #[test]
    fn a_preview_action_is_read_from_its_json_and_refuses_what_it_does_not_know() {
        let a: PreviewAction =
            serde_json::from_value(serde_json::json!({"action": "release", "claim": 17})).unwrap();
        assert_eq!(a, PreviewAction::Release { claim: ClaimId(17) });
        let a: PreviewAction = serde_json::from_value(serde_json::json!(
            {"action": "claim", "request": {"num_gpus": 0.5, "project": "p"}}
        ))
        .unwrap();
        assert!(matches!(a, PreviewAction::Claim { .. }));
        let back = serde_json::to_value(&a).unwrap();
        assert_eq!(back["request"]["num_gpus"], 0.5, "{back}");
        for bad in [
            serde_json::json!({"action": "drain"}),
            serde_json::json!({"action": "release", "claim": 1, "extra": 2}),
            serde_json::json!({"action": "claim", "request": {"num_gpus": 7.5}}),
        ] {
            assert!(
                serde_json::from_value::<PreviewAction>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }
}
