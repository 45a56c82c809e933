//! The move picker's rows over every acting source, and a move to another source: claim
//! the same request there first, then release the claim on its own source (never the
//! reverse, so the holder never goes without GPUs). Both steps carry one move id, which
//! both endpoints audit (`wire::move_actor`). A move to "any source" asks the best other
//! source by placement, then the next when one refuses or does not answer. If the release
//! fails, both claims are named with the error and the operator releases one. A move is a
//! flow (`flows::Flow::Move`): its sends name its id, and its answers come here by it.

use crate::fleet::Lost;
use crate::ids::ClaimId;
use crate::placement::{
    AttemptAnswer, AttemptStep, DeviceShare, MoveTarget, RESOLVE_WITHIN, decide_attempt,
    moved_request,
};
use crate::snapshot::{ClaimState, ClaimView};
use crate::sources::{Action, Failure, Outcome};

use super::ranking::{self, TRIES};
use super::{flash, lost, refusal};
use crate::console::flows::{Flow, FlowId, MOVE_CLAIM, MOVE_RELEASE, MoveAcross, Plan, TakeBack};
use crate::console::msg::{Asker, Effect};
use crate::console::state::{Confirm, Mode, MovePick, MoveRow, State};

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
                let too_small =
                    need.is_some_and(|s| d.memory_capacity.is_some_and(|cap| s.memory > cap));
                rows.push((
                    d.memory_free,
                    MoveRow {
                        source: i,
                        node: n.name.clone(),
                        index: d.index,
                        model: d.model.clone(),
                        free: format!("{} free, {} GPU free", d.memory_free.iec(), d.compute_free),
                        fits,
                        too_small,
                        any: false,
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
    let mut rows: Vec<MoveRow> = rows.into_iter().map(|(_, r)| r).collect();
    // Last (one `k` from the top): any other acting source, the best by placement first.
    if state
        .sources
        .iter()
        .enumerate()
        .any(|(i, s)| i != own && s.can_act && s.data.is_some())
    {
        rows.push(MoveRow {
            source: own,
            node: String::new(),
            index: 0,
            model: String::new(),
            free: format!(
                "any other source: the best by placement, then the next if it refuses (up to {TRIES})"
            ),
            fits: true,
            too_small: false,
            any: true,
        });
    }
    rows
}

/// Where the picked row sends the claim: as many devices as it holds, the picked one and
/// then the next rows of the same source and node in the list's order.
pub(super) fn target(m: &MovePick) -> Result<Option<(usize, MoveTarget)>, String> {
    let Some(first) = m.targets.get(m.selected).filter(|r| !r.any) else {
        return Ok(None);
    };
    let mut devices = vec![first.index];
    devices.extend(
        m.targets
            .iter()
            .filter(|r| {
                !r.any && r.source == first.source && r.node == first.node && r.index != first.index
            })
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

fn name(state: &State, source: usize) -> String {
    state
        .sources
        .get(source)
        .map_or_else(|| "?".to_string(), |s| s.name.clone())
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

/// The picked move's chain, before it is confirmed: the claim's request moved to `t` on
/// source `to`, or (`to` none) to the best other source by placement, with the next ones
/// to try. `Err` says why not (gone, already moving, fits on no other source).
fn chain(
    state: &State,
    m: &MovePick,
    to: Option<(usize, MoveTarget)>,
) -> Result<MoveAcross, String> {
    let Some(old) = claim_of(state, m.source, m.id) else {
        return Err(format!("claim {} is gone from its source", m.id));
    };
    if let Some(c) = state
        .flows
        .moves()
        .into_iter()
        .find(|c| c.source == m.source && c.id == m.id)
    {
        return Err(format!(
            "claim {} is already moving (move {}): wait for its answer",
            m.id, c.move_id
        ));
    }
    let (request, target, next) = if let Some((to, t)) = to {
        (
            moved_request(&old.request, t.node, t.devices),
            to,
            Vec::new(),
        )
    } else {
        let request = moved_request(&old.request, None, None);
        let ranked = ranking::rank(state, &request, Some(m.source))?;
        let mut order = ranked.order.into_iter();
        let Some(first) = order.next() else {
            return Err("no other source can take it".to_string());
        };
        (request, first, order.collect())
    };
    // A fresh attempt label (the old claim's is not this move's): a lost answer can be found.
    let mut request = request;
    crate::fleet::new_attempt(state.now).put_on(&mut request.labels);
    // The holder goes with the claim (a snapshot may keep it beside the request).
    if request.holder.is_none() {
        request.holder.clone_from(&old.holder);
    }
    Ok(MoveAcross {
        move_id: crate::fleet::new_move_id(state.now),
        source: m.source,
        id: m.id,
        from: m.from.clone(),
        request,
        target,
        next,
        refused: Vec::new(),
        claimed: None,
        rechecking: None,
        suspects: Vec::new(),
    })
}

/// Asks to move claim `m.id` to `to` (`t` on that source, or none: the best other source
/// by placement, then the next ones on refusal), naming both places: once confirmed, the
/// same request is claimed there (then, when that succeeded, released here), both steps
/// tagged with one move id. False when it cannot start (said in the picker).
pub(super) fn ask(state: &mut State, m: &mut MovePick, to: Option<(usize, MoveTarget)>) -> bool {
    let place = to.as_ref().map(|(_, t)| {
        format!(
            "{}:{}",
            t.node.as_deref().unwrap_or("?"),
            t.devices
                .as_ref()
                .map(|d| d.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
                .unwrap_or_default()
        )
    });
    let chain = match chain(state, m, to) {
        Ok(c) => c,
        Err(why) => {
            m.error = Some(why);
            return false;
        }
    };
    let target = name(state, chain.target);
    let whither = if let Some(place) = place {
        format!("{target} {place}")
    } else if chain.next.is_empty() {
        format!("{target} (the best other source by placement)")
    } else {
        let rest: Vec<String> = chain.next.iter().map(|i| name(state, *i)).collect();
        format!(
            "{target} (the best other source by placement; if it refuses: {})",
            rest.join(", then ")
        )
    };
    let body = vec![
        format!(
            "Move claim {} from {} {} to {whither}?",
            m.id,
            name(state, m.source),
            m.from,
        ),
        format!(
            "It is claimed there first, then released here (move {}); its processes must be restarted.",
            chain.move_id
        ),
    ];
    let mut confirm = Confirm::new(
        chain.target,
        Action::Claim {
            request: chain.request.clone(),
        },
        "Move claim across sources",
        body,
    );
    confirm.back = Some(Box::new(Mode::Move(Box::new(m.clone()))));
    // Once the move starts, the picker follows it by its flow id (set by the confirmation).
    let mut under_way = m.clone();
    under_way.sent = true;
    under_way.error = None;
    confirm.then = Some(Box::new(Mode::Move(Box::new(under_way))));
    confirm.starts = Some(Box::new(Plan::Move(chain)));
    super::ask(state, confirm);
    true
}

/// Sends a step of a move (`step` of flow `flow`), tagged with the move's id; nothing when
/// the console or the source cannot act (said on the status line).
fn send(
    state: &mut State,
    (flow, step): (FlowId, usize),
    source: usize,
    action: Action,
    move_id: &str,
) -> Vec<Effect> {
    if let Some(text) = refusal(state, source, &action) {
        flash(state, text, true);
        return Vec::new();
    }
    state.push_log(format!(
        "{}: {} {} sent (move {move_id})",
        name(state, source),
        action.verb(),
        action.target()
    ));
    let asker = Asker::Flow { flow, step };
    // The new claim goes with a key: a lost answer is asked for again, not booked twice.
    if let Action::Claim { request } = &action
        && let Some(attempt) = crate::placement::AttemptId::of_labels(&request.labels)
    {
        return vec![Effect::Claim {
            source,
            request: request.clone(),
            key: lost::key(&attempt, source),
            move_id: Some(move_id.to_string()),
            asker,
        }];
    }
    vec![Effect::ActInMove {
        source,
        action,
        move_id: move_id.to_string(),
        asker,
    }]
}

/// Starts a confirmed move: its first claim, on the best target. Kept in `State::flows`
/// from then on, whatever the operator does meanwhile; its id, unless nothing was sent.
pub(super) fn start(state: &mut State, chain: MoveAcross) -> (Option<FlowId>, Vec<Effect>) {
    let flow = state.flows.new_id();
    let sent = claim_on_target(state, flow, chain);
    ((!sent.is_empty()).then_some(flow), sent)
}

/// Sends the move's claim to its target; the move goes on (kept under `flow`) once sent.
fn claim_on_target(state: &mut State, flow: FlowId, chain: MoveAcross) -> Vec<Effect> {
    let action = Action::Claim {
        request: chain.request.clone(),
    };
    let sent = send(
        state,
        (flow, MOVE_CLAIM),
        chain.target,
        action,
        &chain.move_id,
    );
    if !sent.is_empty() {
        state.flows.put(flow, Flow::Move(chain));
    }
    sent
}

/// A refreshed view of source `i`, unless one is already on its way.
fn refetch(state: &mut State, i: usize, out: &mut Vec<Effect>) {
    if let Some(s) = state.sources.get_mut(i)
        && !s.in_flight
    {
        s.in_flight = true;
        out.push(Effect::Fetch(i));
    }
}

/// The picker showing move `flow`, if it is open.
fn picker(state: &mut State, flow: FlowId) -> Option<&mut MovePick> {
    match &mut state.mode {
        Mode::Move(m) if m.flow == Some(flow) => Some(m),
        _ => None,
    }
}

/// Step `step` of the move `flow` came back (the move taken out of `State::flows`). After
/// the claim on the target: the release on the claim's own source, or (refused, no
/// answer) the next target, or nothing changed. After the release: done, or both claims
/// named with the release's error so the operator releases one. Each step is said on the
/// status line and in Events.
pub(super) fn stepped(
    state: &mut State,
    flow: FlowId,
    chain: MoveAcross,
    step: usize,
    source: usize,
    action: &Action,
    result: Result<Outcome, Failure>,
) -> Vec<Effect> {
    state.dirty = true;
    match (step, action, &chain.claimed) {
        (MOVE_CLAIM, Action::Claim { .. }, None) if source == chain.target => {
            claim_answered(state, flow, chain, result)
        }
        (MOVE_RELEASE, Action::Release { id }, Some(_))
            if source == chain.source && *id == chain.id =>
        {
            release_answered(state, flow, &chain, result)
        }
        // Not a step the move waits for: it goes on as it was.
        _ => {
            state.flows.put(flow, Flow::Move(chain));
            state.push_log(format!(
                "{}: {} {} answered, which {flow} does not wait for: nothing done",
                name(state, source),
                action.verb(),
                action.target()
            ));
            Vec::new()
        }
    }
}

/// Says how the take-back of a claim a target queued went (an error leaves that claim
/// there, named, to release by hand): the take-back's flow ends here.
pub(super) fn took_back(
    state: &mut State,
    back: &TakeBack,
    source: usize,
    action: &Action,
    result: &Result<Outcome, Failure>,
) {
    let here = name(state, source);
    let move_id = &back.move_id;
    match result {
        Ok(o) => state.push_log(format!("{here} (move {move_id}): {}", o.message())),
        Err(e) => flash(
            state,
            format!(
                "{here} (move {move_id}): {} {} refused: {e}; release it there by hand",
                action.verb(),
                action.target()
            ),
            true,
        ),
    }
}

/// The target answered the move's claim.
pub(super) fn claim_answered(
    state: &mut State,
    flow: FlowId,
    mut chain: MoveAcross,
    result: Result<Outcome, Failure>,
) -> Vec<Effect> {
    let to = name(state, chain.target);
    let mut out = Vec::new();
    let why = match result {
        Ok(Outcome::Claimed(view)) if view.state == ClaimState::Placed => {
            let place = crate::sources::endpoint::place(&view);
            state.push_log(format!(
                "move {}: {to} took claim {} as {to}/{} at {place}; releasing {}/{} next",
                chain.move_id,
                chain.id,
                view.id,
                name(state, chain.source),
                chain.id
            ));
            chain.claimed = Some((view.id, place));
            let release = Action::Release { id: chain.id };
            let sent = send(
                state,
                (flow, MOVE_RELEASE),
                chain.source,
                release,
                &chain.move_id,
            );
            refetch(state, chain.target, &mut out);
            if sent.is_empty() {
                let text = state
                    .flash
                    .as_ref()
                    .map(|f| f.text.clone())
                    .unwrap_or_default();
                return release_failed(state, flow, &chain, &text, out);
            }
            state.flows.put(flow, Flow::Move(chain));
            out.extend(sent);
            return out;
        }
        // A move's claim never waits; should a target queue it anyway, it is taken back
        // (tagged with the move id too, a flow of its own so that its answer is said even
        // once the move is over) and the next target asked.
        Ok(Outcome::Claimed(view)) => {
            let back = TakeBack {
                move_id: chain.move_id.clone(),
                source: chain.target,
                id: view.id,
            };
            let taking = state.flows.new_id();
            let sent = send(
                state,
                (taking, 0),
                chain.target,
                Action::Release { id: view.id },
                &chain.move_id,
            );
            if !sent.is_empty() {
                state.flows.put(taking, Flow::TakeBack(back));
            }
            out.extend(sent);
            format!(
                "queued it as {to}/{} instead of placing it (taken back)",
                view.id
            )
        }
        Ok(other) => format!("answered `{}` instead of a claim", other.message()),
        // No answer: the target may have placed it; ask it before anything else (for this
        // move: the claim sent again keeps the move's id).
        Err(e) if lost::no_answer(&e) && chain.rechecking.is_none() => {
            if let Some(lost) =
                lost::of_request(state, chain.target, &chain.request, &e, &chain.move_id)
            {
                flash(
                    state,
                    format!(
                        "move {}: {to} did not answer ({e}); asking it whether it placed the claim (label {})",
                        chain.move_id,
                        lost.attempt.label()
                    ),
                    false,
                );
                let asker = Asker::Flow {
                    flow,
                    step: MOVE_CLAIM,
                };
                out.push(lost::resend(&lost, RESOLVE_WITHIN, asker));
                chain.rechecking = Some(lost);
                state.flows.put(flow, Flow::Move(chain));
                return out;
            }
            e.to_string()
        }
        Err(e) => {
            let words = e.to_string();
            if !ranking::try_next(&e) {
                chain.next.clear();
            }
            words
        }
    };
    out.extend(go_next(state, flow, chain, &why));
    out
}

/// A move's target asked again: found, the move goes on (the release here); none there,
/// the next target; silent, the next target and the silent one asked once more at the end.
pub(super) fn for_move(
    state: &mut State,
    flow: FlowId,
    mut chain: MoveAcross,
    lost: Lost,
    result: Result<Outcome, Failure>,
) -> Vec<Effect> {
    let here = name(state, lost.endpoint);
    let label = lost.attempt.label();
    let (what, view) = lost::found(result);
    match (decide_attempt(AttemptAnswer::NoAnswer, Some(what)), view) {
        (AttemptStep::Adopt, Some(view)) => {
            state.push_log(format!(
                "move {}: {here} placed it; its answer was lost ({}): sent again with the same key, it answered {here}/{} (label {label})",
                chain.move_id, lost.error, view.id
            ));
            claim_answered(state, flow, chain, Ok(Outcome::Claimed(Box::new(view))))
        }
        (AttemptStep::TryNextSuspect, _) => {
            let why = format!(
                "{}; still no answer when sent again with the same key",
                lost.error
            );
            chain.suspects.push(lost);
            go_next(state, flow, chain, &why)
        }
        _ => {
            let why = format!(
                "{}; sent again with the same key, it refused the claim labelled {label}",
                lost.error
            );
            go_next(state, flow, chain, &why)
        }
    }
}

/// The target refused (or did not answer, `why`): the next target, or nothing changed.
pub(super) fn go_next(
    state: &mut State,
    flow: FlowId,
    mut chain: MoveAcross,
    why: &str,
) -> Vec<Effect> {
    let to = name(state, chain.target);
    let mut out = Vec::new();
    chain.refused.push(format!("{to}: {why}"));
    if chain.next.is_empty() {
        let text = format!(
            "move {} of claim {}/{}: nothing changed, {}",
            chain.move_id,
            name(state, chain.source),
            chain.id,
            chain.refused.join(" · ")
        );
        if let Some(m) = picker(state, flow) {
            m.sent = false;
            m.flow = None;
            m.error = Some(text.clone());
        }
        flash(state, text, true);
        out.extend(lost::settle(state, chain.suspects, false));
        return out;
    }
    chain.target = chain.next.remove(0);
    flash(
        state,
        format!(
            "move {}: {to} refused ({why}); trying {}",
            chain.move_id,
            name(state, chain.target)
        ),
        false,
    );
    out.extend(claim_on_target(state, flow, chain));
    out
}

/// The claim's own source answered the move's release: the move ends.
fn release_answered(
    state: &mut State,
    flow: FlowId,
    chain: &MoveAcross,
    result: Result<Outcome, Failure>,
) -> Vec<Effect> {
    let mut out = Vec::new();
    refetch(state, chain.source, &mut out);
    out.extend(lost::settle(state, chain.suspects.clone(), false));
    match result {
        Ok(_) => {
            let (from, to) = (name(state, chain.source), name(state, chain.target));
            let new = chain.claimed.as_ref().map_or(0, |c| c.0.0);
            let mut text = format!(
                "claim {from}/{} moved to {to}/{new} (move {})",
                chain.id, chain.move_id
            );
            if !chain.refused.is_empty() {
                text = format!("{text} after {}", chain.refused.join(" · "));
            }
            if picker(state, flow).is_some() {
                state.mode = Mode::Normal;
            }
            flash(state, text, false);
            out
        }
        Err(e) => release_failed(state, flow, chain, &e.to_string(), out),
    }
}

/// The release of a moved claim failed: both claims hold GPUs; say which, with the
/// source's words, so the operator releases one. The move ends.
fn release_failed(
    state: &mut State,
    flow: FlowId,
    chain: &MoveAcross,
    words: &str,
    out: Vec<Effect>,
) -> Vec<Effect> {
    let (from, to) = (name(state, chain.source), name(state, chain.target));
    let (new, place) = chain
        .claimed
        .clone()
        .unwrap_or((ClaimId(0), "?".to_string()));
    let text = format!(
        "claimed {to}/{new} but releasing {from}/{} failed: {words}; both claims hold GPUs now: \
         {from}/{} (old, {}) and {to}/{new} (new, {place}): release one (move {})",
        chain.id, chain.id, chain.from, chain.move_id
    );
    if picker(state, flow).is_some() {
        state.mode = Mode::Normal;
    }
    flash(state, text, true);
    out
}
