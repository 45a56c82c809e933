//! `gpuboard events`: the audit history the console's Events view shows, read from every
//! endpoint in play, filtered by time, actor and target, oldest first.

use std::fmt::Write as _;

use clap::Args;
use serde::Serialize;

use super::members::members;
use super::{Conn, EXIT_INVALID, print_json};
use crate::client::ClientError;
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::snapshot::AuditEvent;

/// `gpuboard events`.
#[derive(Args, Debug)]
pub struct EventsArgs {
    /// Only events at or after this: a time ago (`90s`, `30m`, `-10m`, `1h 30m`) or a
    /// time (`03:12`, `2026-11-25 03:12`, `2026-11-25T14:00:00Z`).
    #[arg(long, value_name = "AGO|TIME", allow_hyphen_values = true)]
    pub since: Option<String>,
    /// Only events by this actor (a token's name or role, `lease`, `owner-check`, `scheduler`).
    #[arg(long)]
    pub actor: Option<String>,
    /// Only events on this target: `claim 17` or just `17`, `project vision`, or a kind
    /// (`claim`, `device`, `project`).
    #[arg(long)]
    pub target: Option<String>,
    #[command(flatten)]
    pub conn: Conn,
}

/// Which events to keep.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventFilter {
    /// At or after.
    pub since: Option<Timestamp>,
    /// This actor: its name alone or the whole actor as the audit writes it.
    pub actor: Option<String>,
    /// This target, its last word (an id) or its first (a kind).
    pub target: Option<String>,
}

impl EventFilter {
    /// Whether `e` passes.
    pub fn keeps(&self, e: &AuditEvent) -> bool {
        self.since.is_none_or(|s| e.at >= s)
            && self.actor.as_ref().is_none_or(|a| actor_is(&e.actor, a))
            && self.target.as_ref().is_none_or(|t| {
                let t = t.trim();
                e.target == t
                    || e.target.split_whitespace().last() == Some(t)
                    || e.target.split_whitespace().next() == Some(t)
            })
    }
}

/// `--since` as an instant: any time `when::parse_when` reads (`30m` or `-30m` ago, `03:12`,
/// RFC 3339...), named with the flag when it is refused.
pub fn parse_since(text: &str, now: Timestamp) -> Result<Timestamp, String> {
    crate::when::parse_when(text, now, &jiff::tz::TimeZone::system())
        .map_err(|e| format!("--since: {e}"))
}

/// Whether the event's actor is `who`: the whole actor (`alice (root@vm)`) or its name alone,
/// the token's name or role that `--actor` takes.
fn actor_is(actor: &str, who: &str) -> bool {
    let who = who.trim();
    actor == who || actor.split(" (").next().is_some_and(|name| name == who)
}

/// One event with the endpoint it came from.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FleetEvent {
    /// The endpoint's name.
    pub endpoint: String,
    /// The event.
    #[serde(flatten)]
    pub event: AuditEvent,
}

/// The kept events of every endpoint, oldest first (ties in endpoint, then revision order).
pub fn merge(
    per_endpoint: Vec<(String, Vec<AuditEvent>)>,
    filter: &EventFilter,
) -> Vec<FleetEvent> {
    let mut all: Vec<FleetEvent> = per_endpoint
        .into_iter()
        .flat_map(|(endpoint, events)| {
            events
                .into_iter()
                .filter(|e| filter.keeps(e))
                .map(move |event| FleetEvent {
                    endpoint: endpoint.clone(),
                    event,
                })
        })
        .collect();
    all.sort_by(|a, b| {
        (a.event.at, &a.endpoint, a.event.revision).cmp(&(
            b.event.at,
            &b.endpoint,
            b.event.revision,
        ))
    });
    all
}

/// The events as a table; the endpoint column only when there are several.
pub fn table(events: &[FleetEvent], with_endpoint: bool) -> String {
    let mut rows = vec![
        vec!["TIME", "ENDPOINT", "ACTOR", "ACTION", "TARGET", "DETAIL"]
            .into_iter()
            .map(str::to_string)
            .collect::<Vec<_>>(),
    ];
    for e in events {
        let time = i64::try_from(e.event.at.0)
            .ok()
            .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
            .map_or_else(|| e.event.at.0.to_string(), |t| format!("{t:.0}"));
        rows.push(vec![
            time,
            e.endpoint.clone(),
            e.event.actor.clone(),
            e.event.action.clone(),
            e.event.target.clone(),
            // Times in words are UTC, as the TIME column.
            crate::snapshot::detail_words(&e.event.detail, &jiff::tz::TimeZone::UTC),
        ]);
    }
    if !with_endpoint {
        for r in &mut rows {
            r.remove(1);
        }
    }
    let cols = rows[0].len();
    let mut widths = vec![0usize; cols];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    if events.is_empty() {
        out.push_str("(no events)\n");
    }
    out
}

/// `gpuboard events`: an endpoint that cannot be read is named on stderr and the exit code
/// is its error's; the others' events are still printed.
pub(super) async fn events(a: EventsArgs) -> anyhow::Result<u8> {
    let now = SystemClock.now();
    let since = match a.since.as_deref().map(|s| parse_since(s, now)) {
        Some(Err(why)) => {
            eprintln!("gpuboard: {why}");
            return Ok(EXIT_INVALID);
        }
        Some(Ok(t)) => Some(t),
        None => None,
    };
    let filter = EventFilter {
        since,
        actor: a.actor,
        target: a.target,
    };
    let members = members(&a.conn)?;
    // Read whole: the snapshot cache keeps no audit events.
    let reads = futures::future::join_all(members.list.iter().map(|m| m.client.snapshot())).await;
    let mut code = 0;
    let mut got = Vec::new();
    let mut first_error: Option<ClientError> = None;
    for (m, r) in reads.into_iter().enumerate() {
        match r {
            Ok(s) => got.push((members.list[m].name.clone(), s.events)),
            Err(e) => {
                eprintln!("gpuboard: endpoint {}: {e}", members.list[m].name);
                if code == 0 {
                    code = e.exit_code();
                }
                first_error.get_or_insert(e);
            }
        }
    }
    if got.is_empty()
        && let Some(e) = first_error
    {
        return Err(e.into());
    }
    let events = merge(got, &filter);
    if a.conn.json {
        print_json(&events)?;
    } else {
        print!("{}", table(&events, members.many()));
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(at: u64, revision: u64, actor: &str, target: &str) -> AuditEvent {
        AuditEvent {
            revision,
            at: Timestamp(at),
            actor: actor.to_string(),
            action: "claim".to_string(),
            target: target.to_string(),
            detail: "placed".to_string(),
        }
    }

    #[test]
    fn since_reads_a_time_ago_or_a_time() {
        let now = Timestamp(1_795_000_000_000);
        assert_eq!(parse_since("30m", now), Ok(Timestamp(now.0 - 1_800_000)));
        assert_eq!(parse_since("-30m", now), Ok(Timestamp(now.0 - 1_800_000)));
        assert_eq!(parse_since("1h 30m", now), Ok(Timestamp(now.0 - 5_400_000)));
        assert_eq!(
            parse_since("2026-11-15T14:00:00Z", now),
            Ok(Timestamp(1_794_751_200_000))
        );
        let e = parse_since("yesterday", now).unwrap_err();
        assert!(e.contains("yesterday") && e.contains("-10m"), "{e}");
        let e = parse_since("2026-11-25T14:00:00Z", now).unwrap_err();
        assert!(e.contains("in the future"), "{e}");
    }

    #[test]
    fn the_filter_matches_actor_and_target_by_id_or_kind() {
        let f = EventFilter {
            actor: Some("alice".into()),
            target: Some("17".into()),
            ..EventFilter::default()
        };
        assert!(f.keeps(&ev(1, 1, "alice", "claim 17")));
        assert!(!f.keeps(&ev(1, 1, "alice", "claim 170")));
        assert!(!f.keeps(&ev(1, 1, "bob", "claim 17")));
        // A token's name matches the actor the audit writes with its user and host.
        assert!(f.keeps(&ev(1, 1, "alice (root@vm)", "claim 17")));
        assert!(!f.keeps(&ev(1, 1, "alicex (root@vm)", "claim 17")));
        let kind = EventFilter {
            target: Some("project".into()),
            since: Some(Timestamp(5)),
            ..EventFilter::default()
        };
        assert!(kind.keeps(&ev(5, 1, "op", "project vision")));
        assert!(!kind.keeps(&ev(4, 1, "op", "project vision")));
    }

    #[test]
    fn events_of_several_endpoints_merge_oldest_first() {
        let merged = merge(
            vec![
                (
                    "b".into(),
                    vec![ev(3, 1, "x", "claim 1"), ev(9, 2, "x", "claim 2")],
                ),
                ("a".into(), vec![ev(3, 7, "y", "claim 5")]),
            ],
            &EventFilter::default(),
        );
        let order: Vec<(&str, u64)> = merged
            .iter()
            .map(|e| (e.endpoint.as_str(), e.event.at.0))
            .collect();
        assert_eq!(order, [("a", 3), ("b", 3), ("b", 9)]);
        let text = table(&merged, true);
        assert!(text.starts_with("TIME"), "{text}");
        assert!(text.contains("ENDPOINT"), "{text}");
        assert!(!table(&merged, false).contains("ENDPOINT"));
    }
}
