//! `--dry-run` on `release`, `move`, `cordon`, `uncordon`, `project set|reset` and
//! `claim`: the endpoint previews the action (`POST /v1/preview`) on a copy of its state
//! and nothing changes. Prints what follows at once and in the next hour.

use std::fmt::Write as _;

use super::members::{ClaimRef, members};
use super::{Conn, EXIT_INVALID, print_json};
use crate::clock::Clock as _;
use crate::clock::{SystemClock, Timestamp};
use crate::wire::forecast::{Preview, PreviewAction};

/// Previews `action` on the endpoint `target` names (the only one without it).
pub(super) async fn dry_run(
    action: PreviewAction,
    target: Option<&ClaimRef>,
    conn: &Conn,
) -> anyhow::Result<u8> {
    let members = members(conn)?;
    let member = match target {
        Some(r) => &members.list[members.resolve(r)?],
        None => members.single()?,
    };
    let p = member.client.preview(&action).await?;
    if conn.json {
        print_json(&p)?;
    } else {
        print!("{}", render(&p, SystemClock.now(), &hhmm));
    }
    Ok(if p.refused.is_some() { EXIT_INVALID } else { 0 })
}

/// A time of day in the local zone, `HH:MM`.
fn hhmm(t: Timestamp) -> String {
    jiff::Timestamp::from_millisecond(i64::try_from(t.0).unwrap_or(i64::MAX)).map_or_else(
        |_| t.0.to_string(),
        |ts| {
            ts.to_zoned(jiff::tz::TimeZone::system())
                .strftime("%H:%M")
                .to_string()
        },
    )
}

/// What the action is, in words.
fn what(a: &PreviewAction) -> String {
    match a {
        PreviewAction::Release { claim } => format!("release claim {claim}"),
        PreviewAction::Move {
            claim,
            node,
            devices,
        } => {
            let devices = devices.as_ref().map(|d| {
                d.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            });
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

fn ids(list: &[crate::ids::ClaimId]) -> String {
    list.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The preview for people.
pub(super) fn render(p: &Preview, now: Timestamp, clock: &dyn Fn(Timestamp) -> String) -> String {
    let mut out = format!("dry run: {} (nothing was changed)\n", what(&p.action));
    if let Some(why) = &p.refused {
        let _ = writeln!(out, "the endpoint would refuse it: {why}");
        return out;
    }
    out.push_str("at once:\n");
    if p.placed.is_empty() {
        out.push_str("  no claim would be placed\n");
    }
    for c in &p.placed {
        let _ = writeln!(
            out,
            "  claim {} ({}) would be placed on {}",
            c.claim, c.project, c.at
        );
    }
    if !p.on_cordoned.is_empty() {
        let _ = writeln!(
            out,
            "  claims {} stay on the cordoned device, which takes no new claim",
            ids(&p.on_cordoned)
        );
    }
    if !p.stranded.is_empty() {
        let _ = writeln!(
            out,
            "  stranded (no expected start any more): claims {}",
            ids(&p.stranded)
        );
    }
    if let Some(n) = &p.new_claim
        && !p.placed.iter().any(|c| c.claim == n.claim)
    {
        let _ = writeln!(out, "  the new claim would wait: {}", n.sentence(clock));
    }
    out.push_str("in the next hour:\n");
    for d in &p.debts {
        let _ = writeln!(
            out,
            "  project {}: debt {:.0} GFLOP now, {:.0} in an hour ({:.0} without this)",
            d.project, d.before, d.in_an_hour, d.in_an_hour_without
        );
    }
    if p.starts_moved.is_empty() {
        out.push_str("  no expected start moves\n");
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
    for m in &p.starts_moved {
        let _ = writeln!(
            out,
            "  claim {} would start {} instead of {}",
            m.claim,
            at(m.after),
            at(m.before)
        );
    }
    out
}
