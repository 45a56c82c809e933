//! The move picker's rows over every acting source, and a move to another source: claim
//! the same request there first, then release the claim on its own source (never the
//! reverse, so the holder never goes without GPUs). If the release fails, both claims are
//! named with the error and the operator releases one.

use crate::ids::ClaimId;
use crate::placement::{DeviceShare, MoveTarget, moved_request};
use crate::snapshot::ClaimView;
use crate::sources::{Action, Failure, Outcome};

use super::{act, flash};
use crate::console::msg::Effect;
use crate::console::state::{Confirm, Mode, MoveAcross, MovePick, MoveRow, State};

/// The GPUs claim `c` of source `own` may move to, on every acting source with data: not
/// the devices it holds, not cordoned ones; those its largest per-device share fits on
/// first, then the emptiest (a full GPU is the last thing to offer).
pub(super) fn rows(state: &State, own: usize, c: &ClaimView) -> Vec<MoveRow> {
    let node = c.node.clone().unwrap_or_default();
    let held: Vec<u32> = c.shares.iter().map(|s| s.device).collect();
    let need: Option<DeviceShare> = c
        .shares
        .iter()
        .copied()
        .max_by_key(|s| (s.memory, s.compute));
    let mut rows = Vec::new();
    for (i, slot) in state.sources.iter().enumerate() {
        if i != own && !slot.can_act {
            continue;
        }
        for n in slot.data.iter().flat_map(|d| d.nodes.iter()) {
            for d in &n.devices {
                if d.cordoned || (i == own && n.name == node && held.contains(&d.index)) {
                    continue;
                }
                let fits = need.is_none_or(|s| {
                    s.memory <= d.memory_free
                        && s.compute <= d.compute_free
                        && s.slots <= d.slots_free
                });
                rows.push((
                    d.memory_free,
                    MoveRow {
                        source: i,
                        node: n.name.clone(),
                        index: d.index,
                        model: d.model.clone(),
                        free: format!("{} free, {} GPU free", d.memory_free.iec(), d.compute_free),
                        fits,
                    },
                ));
            }
        }
    }
    rows.sort_by(|(fa, a), (fb, b)| {
        (
            !a.fits,
            std::cmp::Reverse(*fa),
            a.source != own,
            a.source,
            &a.node,
            a.index,
        )
            .cmp(&(
                !b.fits,
                std::cmp::Reverse(*fb),
                b.source != own,
                b.source,
                &b.node,
                b.index,
            ))
    });
    rows.into_iter().map(|(_, r)| r).collect()
}

/// Where the picked row sends the claim: as many devices as it holds, the picked one and
/// then the next rows of the same source and node in the list's order.
pub(super) fn target(m: &MovePick) -> Result<Option<(usize, MoveTarget)>, String> {
    let Some(first) = m.targets.get(m.selected) else {
        return Ok(None);
    };
    let mut devices = vec![first.index];
    devices.extend(
        m.targets
            .iter()
            .filter(|r| r.source == first.source && r.node == first.node && r.index != first.index)
            .map(|r| r.index)
            .take(m.holds.saturating_sub(1)),
    );
    if devices.len() < m.holds {
        return Err(format!(
            "claim {} holds {} GPUs; {} has only {} to move to",
            m.id,
            m.holds,
            first.node,
            devices.len()
        ));
    }
    devices.sort_unstable();
    Ok(Some((
        first.source,
        MoveTarget {
            node: Some(first.node.clone()),
            devices: Some(devices),
        },
    )))
}

/// Asks to move claim `m.id` to `t` on source `to`, naming both places: once confirmed,
/// the same request is claimed there (then, when that succeeded, released here). False
/// when the claim is gone (said in the picker).
pub(super) fn ask(state: &mut State, m: &mut MovePick, to: usize, t: MoveTarget) -> bool {
    let Some(old) = claim_of(state, m.source, m.id) else {
        m.error = Some(format!("claim {} is gone from its source", m.id));
        return false;
    };
    let place = format!(
        "{}:{}",
        t.node.as_deref().unwrap_or("?"),
        t.devices
            .as_ref()
            .map(|d| d.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
            .unwrap_or_default()
    );
    let name = |i: usize| {
        state
            .sources
            .get(i)
            .map_or("?", |s| s.name.as_str())
            .to_string()
    };
    let body = vec![
        format!(
            "Move claim {} from {} {} to {} {place}?",
            m.id,
            name(m.source),
            m.from,
            name(to)
        ),
        "It is claimed there first, then released here; its processes must be restarted."
            .to_string(),
    ];
    let request = moved_request(&old.request, t.node, t.devices);
    let mut confirm = Confirm::new(
        to,
        Action::Claim { request },
        "Move claim across sources",
        body,
    );
    confirm.back = Some(Box::new(Mode::Move(Box::new(m.clone()))));
    let mut under_way = m.clone();
    under_way.sent = true;
    under_way.error = None;
    under_way.across = Some(MoveAcross {
        target: to,
        claimed: None,
    });
    confirm.then = Some(Box::new(Mode::Move(Box::new(under_way))));
    super::confirm::ask(state, confirm);
    true
}

fn claim_of(state: &State, source: usize, id: ClaimId) -> Option<ClaimView> {
    state
        .sources
        .get(source)?
        .data
        .as_ref()?
        .claims
        .iter()
        .find(|c| c.id == id)
        .cloned()
}

fn name(state: &State, source: usize) -> String {
    state
        .sources
        .get(source)
        .map_or_else(|| "?".to_string(), |s| s.name.clone())
}

/// The next step of a move across sources when `action`'s result belongs to it: after
/// the claim on the target, the release on the claim's own source; after that, done (or
/// both claims named with the release's error). `None` when the result is not part of one.
pub(super) fn step(
    state: &mut State,
    source: usize,
    action: &Action,
    result: &Result<Outcome, Failure>,
) -> Option<Vec<Effect>> {
    let Mode::Move(m) = &state.mode else {
        return None;
    };
    let across = m.across.clone()?;
    let mut m = m.clone();
    state.dirty = true;
    match (action, across.claimed) {
        (Action::Claim { .. }, None) if source == across.target => match result {
            Ok(Outcome::Claimed(view)) => {
                m.across = Some(MoveAcross {
                    target: across.target,
                    claimed: Some(view.id),
                });
                let out = act(state, m.source, Action::Release { id: m.id });
                state.mode = Mode::Move(m);
                let mut out = out;
                out.push(Effect::Fetch(across.target));
                Some(out)
            }
            Ok(_) => None,
            Err(e) => {
                m.sent = false;
                m.across = None;
                m.error = Some(format!(
                    "{} refused the claim; nothing changed: {e}",
                    name(state, across.target)
                ));
                state.mode = Mode::Move(m);
                Some(Vec::new())
            }
        },
        (Action::Release { id }, Some(new)) if source == m.source && *id == m.id => {
            let (from, to) = (name(state, m.source), name(state, across.target));
            state.mode = Mode::Normal;
            match result {
                Ok(_) => flash(
                    state,
                    format!("claim {from}/{} moved to {to}/{new}", m.id),
                    false,
                ),
                Err(e) => flash(
                    state,
                    format!(
                        "claimed {to}/{new} but releasing {from}/{} failed: {e}; both claims hold GPUs now: release one",
                        m.id
                    ),
                    true,
                ),
            }
            Some(vec![Effect::Fetch(m.source)])
        }
        _ => None,
    }
}
