//! `--dry-run` on `release`, `move`, `cordon`, `uncordon`, `project set|reset` and
//! `claim`: the endpoint previews the action (`POST /v1/preview`) on a copy of its state
//! and nothing changes. Prints what follows at once and in the next hour.

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

/// The preview for people.
pub(super) fn render(p: &Preview, now: Timestamp, clock: &dyn Fn(Timestamp) -> String) -> String {
    let mut out = format!("dry run: {} (nothing was changed)\n", p.action.describe());
    for line in p.consequences(now, clock) {
        out.push_str(&line);
        out.push('\n');
    }
    out
}
