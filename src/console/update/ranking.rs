//! The acting sources ranked for one request, from each source's last snapshot, by the
//! placement policy across hosts (`fleet::rank_members`, as the CLI ranks endpoints):
//! where the claim form sends a claim and where a move to "any source" goes, with the
//! next ones to try when the best refuses or does not answer.

use crate::fleet::rank_members;
use crate::placement::{Fleet, Policy};
use crate::request::ClaimRequest;
use crate::sources::fleet_of_snapshot;

use crate::console::state::State;

/// How many sources a claim or a move tries before giving up (the CLI's `--tries`).
pub(super) const TRIES: usize = 3;

/// The sources that could take a request, best first.
#[derive(Debug)]
pub(super) struct Ranked {
    /// The sources that fit, best first, at most `TRIES`.
    pub order: Vec<usize>,
    /// Where the best would put it, in words (`node:devices`).
    pub best: String,
    /// How many sources fit (before the cut at `TRIES`).
    pub fits: usize,
    /// How many sources were ranked (acting, with a readable snapshot).
    pub among: usize,
    /// The policy used: `binpack` or `spread`.
    pub policy: &'static str,
}

/// Ranks the acting sources with a readable snapshot, all but `except`, for `request`,
/// by the fleet's default policy. `Err` says why none could take it
/// (each source's reason), or that there is no source to rank.
pub(super) fn rank(
    state: &State,
    request: &ClaimRequest,
    except: Option<usize>,
) -> Result<Ranked, String> {
    let mut fleets = Vec::new();
    let mut of_fleet = Vec::new();
    for (i, s) in state.sources.iter().enumerate() {
        if !s.can_act || Some(i) == except {
            continue;
        }
        let Some(snap) = &s.data else { continue };
        if let Ok(f) = fleet_of_snapshot(snap) {
            fleets.push(f);
            of_fleet.push(i);
        }
    }
    if fleets.is_empty() {
        return Err("no other acting source with data to move to".to_string());
    }
    let refs: Vec<&Fleet> = fleets.iter().collect();
    let (ranking, policy) = rank_members(&refs, request, None);
    let name = |h: usize| state.sources[of_fleet[h]].name.as_str();
    let Some(best) = ranking.fits.first() else {
        let refused: Vec<String> = ranking
            .refused
            .iter()
            .map(|(h, no)| format!("{}: {}", name(*h), no.summary()))
            .collect();
        return Err(format!(
            "fits on none of the {} sources: {}",
            fleets.len(),
            refused.join(" · ")
        ));
    };
    Ok(Ranked {
        order: ranking
            .fits
            .iter()
            .take(TRIES)
            .map(|f| of_fleet[f.host])
            .collect(),
        best: best.allocation.to_string(),
        fits: ranking.fits.len(),
        among: fleets.len(),
        policy: match policy {
            Policy::Binpack => "binpack",
            Policy::Spread => "spread",
        },
    })
}

/// Whether a source's refusal lets the next one be tried: it does not fit there now
/// (409) or it did not answer. Anything else (bad request, credentials) would be refused
/// everywhere alike.
pub(super) fn try_next(e: &crate::sources::Failure) -> bool {
    use crate::sources::Failure;
    matches!(
        e,
        Failure::Refused(_) | Failure::Timeout(_) | Failure::Unreachable { .. }
    )
}
