//! What an action would do, before it is taken: the action is applied to an exact copy of
//! the scheduler by the same methods the endpoint calls, followed by the tick that hands
//! on what it freed; then the copy is forecast like the scheduler. Nothing of the copy is
//! kept.

use std::collections::BTreeMap;

use super::{HoldTimes, Stop, forecast, holder_ends, run};
use crate::clock::Timestamp;
use crate::fairshare::FairShareView;
use crate::ids::ClaimId;
use crate::scheduler::{Change, Scheduler, Submitted};
use crate::wire::forecast::{
    Band, DebtChange, ExpectedStart, Forecast, PlacedClaim, Preview, PreviewAction, StartMoved,
};

/// The step the preview looks at: the action, then one tick at the same instant (work
/// fetch hands on what a release, a move or an uncordon freed). Owners are taken to
/// run. Answers the new claim's id (a `claim` action), or the refusal the endpoint
/// would answer.
pub fn apply(
    s: &mut Scheduler,
    action: &PreviewAction,
    actor: &str,
    now: Timestamp,
) -> Result<Option<ClaimId>, String> {
    let new = match action {
        PreviewAction::Release { claim } => {
            if s.release(*claim, actor, now).is_none() {
                return Err(format!("no claim {claim}"));
            }
            None
        }
        PreviewAction::Move {
            claim,
            node,
            devices,
        } => {
            let target = PreviewAction::move_target(node.clone(), devices.clone());
            s.move_claim(*claim, &target, actor, now)
                .map_err(|e| e.to_string())?;
            None
        }
        PreviewAction::Cordon { node, index } | PreviewAction::Uncordon { node, index } => {
            let cordoned = matches!(action, PreviewAction::Cordon { .. });
            s.set_cordon(node, *index, cordoned, actor, now)
                .map_err(|e| e.to_string())?;
            None
        }
        PreviewAction::Share { project, share } => {
            s.set_share(project, *share, actor, now)
                .map_err(|e| e.to_string())?;
            None
        }
        PreviewAction::Reset { project } => {
            s.reset_project(project.as_deref(), actor, now)
                .map_err(|e| e.to_string())?;
            None
        }
        PreviewAction::Claim { request } => match s.submit((**request).clone(), actor, now) {
            Submitted::Placed(c) | Submitted::Pending(c) => Some(c.id),
            Submitted::Refused(no) => return Err(no.to_string()),
            Submitted::ShareZero(z) => return Err(z.to_string()),
        },
    };
    s.tick(now, &|_| true);
    Ok(new)
}

/// The claims a step placed (or moved), in order, with where: read from its journal.
pub fn placed_by(journal: &[Change]) -> Vec<PlacedClaim> {
    let mut out: Vec<PlacedClaim> = Vec::new();
    for change in journal {
        if let Change::Claim(c) = change
            && let Some(a) = &c.allocation
        {
            out.retain(|p| p.claim != c.id);
            out.push(PlacedClaim {
                claim: c.id,
                project: c.request.project.clone(),
                at: a.to_string(),
            });
        }
    }
    out
}

/// Each project's debt in a view as the Fair share view shows it: instance-seconds (GPU-
/// or core-seconds), summed over its resource types. The overall debt work fetch breaks ties
/// with weighs each type by its speed (GFLOP, tens of thousands of times larger for a GPU),
/// a figure no view shows.
pub fn debts(view: &FairShareView) -> BTreeMap<String, f64> {
    view.projects
        .iter()
        .map(|p| {
            let debt = p.resources.iter().map(|a| a.debt.0).sum();
            (p.name.as_str().to_string(), debt)
        })
        .collect()
}

/// An hour on.
const HOUR_MS: u64 = 3_600_000;

/// Each project's debt an hour on, every holder ending at its middle end (a learned
/// one at the mean of its hold times).
fn debts_in_an_hour(s: &Scheduler, now: Timestamp, holds: &HoldTimes) -> BTreeMap<String, f64> {
    let ends = holder_ends(s, now, holds);
    let until = now.plus_millis(HOUR_MS);
    let r = run(s, now, holds, &ends, 1, Stop::At(until));
    debts(&r.copy.ledger_view(until))
}

/// What `action` would do to `s` at `now`.
pub fn preview(
    s: &Scheduler,
    action: &PreviewAction,
    holds: &HoldTimes,
    actor: &str,
    now: Timestamp,
) -> Preview {
    let mut out = Preview {
        action: action.clone(),
        revision: s.revision(),
        at: now,
        refused: None,
        placed: Vec::new(),
        on_cordoned: Vec::new(),
        stranded: Vec::new(),
        new_claim: None,
        debts: Vec::new(),
        starts_moved: Vec::new(),
    };
    let mut copy = s.exact_copy();
    let new = match apply(&mut copy, action, actor, now) {
        Ok(new) => new,
        Err(why) => {
            out.refused = Some(why);
            return out;
        }
    };
    out.placed = placed_by(copy.pending_changes());
    if let PreviewAction::Cordon { node, index } = action {
        out.on_cordoned = copy
            .claims()
            .filter(|c| {
                c.allocation
                    .as_ref()
                    .is_some_and(|a| a.node == *node && a.shares.iter().any(|d| d.device == *index))
            })
            .map(|c| c.id)
            .collect();
    }
    let before = forecast(s, now, holds);
    let after = forecast(&copy, now, holds);
    out.stranded = stranded(&before, &after);
    out.starts_moved = moved(&before, &after);
    out.new_claim = new.map(|id| new_claim(&copy, &after, id, now));
    let now_debts = debts(&s.ledger_view(now));
    let step = debts(&copy.ledger_view(now));
    let hour = debts_in_an_hour(&copy, now, holds);
    let hour_without = debts_in_an_hour(s, now, holds);
    let mut projects: Vec<&String> = now_debts.keys().chain(step.keys()).collect();
    projects.sort();
    projects.dedup();
    out.debts = projects
        .into_iter()
        .map(|p| DebtChange {
            project: p.clone(),
            before: now_debts.get(p).copied().unwrap_or(0.0),
            after_step: step.get(p).copied().unwrap_or(0.0),
            in_an_hour: hour.get(p).copied().unwrap_or(0.0),
            in_an_hour_without: hour_without.get(p).copied().unwrap_or(0.0),
        })
        .collect();
    out
}

/// Waiting claims (still waiting after the action) with a start before it and none after.
pub fn stranded(before: &Forecast, after: &Forecast) -> Vec<ClaimId> {
    after
        .starts
        .iter()
        .filter(|a| a.start.is_none())
        .filter(|a| before.of(a.claim).is_some_and(|b| b.start.is_some()))
        .map(|a| a.claim)
        .collect()
}

/// Waiting claims whose median start moves by a minute or more, or turns known or
/// unknown. A claim the action placed moves to now.
fn moved(before: &Forecast, after: &Forecast) -> Vec<StartMoved> {
    before
        .starts
        .iter()
        .filter_map(|b| {
            let was = b.start.map(|s| s.p50);
            let is = match after.of(b.claim) {
                Some(a) => a.start.map(|s| s.p50),
                None => Some(after.at),
            };
            let far = match (was, is) {
                (Some(x), Some(y)) => x.0.abs_diff(y.0) >= 60_000,
                (None, None) => false,
                _ => true,
            };
            far.then_some(StartMoved {
                claim: b.claim,
                before: was,
                after: is,
            })
        })
        .collect()
}

/// The new claim: placed now (where), or its expected start.
fn new_claim(copy: &Scheduler, after: &Forecast, id: ClaimId, now: Timestamp) -> ExpectedStart {
    let c = copy.claim(id);
    let place = c.and_then(|c| c.allocation.as_ref());
    if place.is_none()
        && let Some(e) = after.of(id)
    {
        return e.clone();
    }
    ExpectedStart {
        claim: id,
        project: c.map(|c| c.request.project.clone()).unwrap_or_default(),
        start: Some(Band {
            p10: now,
            p50: now,
            p90: now,
        }),
        node: place.map(|a| a.node.clone()),
        devices: place
            .map(|a| a.shares.iter().map(|d| d.device).collect())
            .unwrap_or_default(),
        freed_by: None,
        ahead: 0,
        unknown: None,
    }
}
