//! The report as Markdown for a ticket: lines of at most 100 columns, times in UTC.

use std::fmt::Write as _;

use super::{Answered, FleetReport};
use crate::accounting::trouble::Condition;
use crate::clock::{Timestamp, age, date_time};

/// The widest line written.
pub const WIDTH: usize = 100;

fn utc(t: Timestamp) -> String {
    date_time(t, &jiff::tz::TimeZone::UTC)
}

/// `11-25 01:20:00`: the year is in the title.
fn short(t: Timestamp) -> String {
    utc(t).get(5..).map_or_else(|| utc(t), str::to_string)
}

fn span(from: Timestamp, to: Timestamp) -> String {
    age(to.millis_since(from))
}

/// Adds `text` as lines of at most [`WIDTH`] columns, continuation lines indented by `indent`.
fn wrapped(out: &mut String, text: &str, indent: usize) {
    let body = text.trim_start_matches(' ');
    let mut line = " ".repeat(text.len() - body.len());
    for word in body.split(' ') {
        if !line.trim_start().is_empty() && line.chars().count() + 1 + word.chars().count() > WIDTH
        {
            out.push_str(line.trim_end());
            out.push('\n');
            line = " ".repeat(indent);
        } else if !line.trim_start().is_empty() && !line.ends_with(' ') {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(line.trim_end());
    out.push('\n');
}

fn h(x: crate::accounting::GpuSeconds) -> String {
    format!("{:.2}", x.hours())
}

fn endpoints(out: &mut String, r: &FleetReport) {
    out.push_str("## Endpoints\n\n");
    for e in &r.endpoints {
        let from = e.history_from.map_or_else(
            || "no history recorded".to_string(),
            |f| format!("history from {}", utc(f)),
        );
        let line = match e.status {
            Answered::Ok => match e.accounted_from {
                Some(a) => format!(
                    "- `{}`: {from}; accounted from {} only (its history begins later)",
                    e.name,
                    utc(a)
                ),
                None => format!("- `{}`: {from}", e.name),
            },
            Answered::NoHistory => format!(
                "- `{}`: NO HISTORY in the window: {from}; ask for a later window",
                e.name
            ),
            Answered::Unreachable => format!(
                "- `{}` ({}): UNREACHABLE, not in this report: {}",
                e.name,
                e.url,
                e.detail.as_deref().unwrap_or("no answer")
            ),
        };
        wrapped(out, &line, 2);
    }
    out.push('\n');
}

fn usage(out: &mut String, r: &FleetReport) {
    let u = &r.usage;
    out.push_str("## GPU time per project\n\n");
    wrapped(
        out,
        &format!(
            "GPU-hours. Reserved: each claim's share of each GPU times how long, by compute \
             fraction and by memory fraction. Used: the GPU utilization of the claim's processes \
             times its share. Idle-allocated: held while its GPUs ran below {} % for {} or longer.",
            r.idle.idle_below_pct,
            age(r.idle.idle_for_ms)
        ),
        0,
    );
    out.push('\n');
    let name_w = u
        .projects
        .iter()
        .map(|p| p.project.chars().count())
        .chain([11])
        .max()
        .unwrap_or(11)
        .min(30);
    let _ = writeln!(
        out,
        "| {:<name_w$} | claims | reserved | by memory |   used | idle-allocated | used % |",
        "project"
    );
    let _ = writeln!(
        out,
        "|{}|-------:|---------:|----------:|-------:|---------------:|-------:|",
        "-".repeat(name_w + 2)
    );
    for p in &u.projects {
        let f = &p.figures;
        // Nothing measured (no telemetry sample): unknown, not 0.
        let unknown = f.unmeasured_whole();
        let pct = if unknown {
            "n/a".to_string()
        } else if f.reserved.compute.0 > 0.0 {
            format!("{:.0} %", 100.0 * f.used.0 / f.reserved.compute.0)
        } else {
            "-".to_string()
        };
        let (used, idle) = if unknown {
            ("n/a".to_string(), "n/a".to_string())
        } else {
            (h(f.used), h(f.idle_allocated))
        };
        let _ = writeln!(
            out,
            "| {:<name_w$} | {:>6} | {:>8} | {:>9} | {:>6} | {:>14} | {:>6} |",
            p.project,
            p.claims,
            h(f.reserved.compute),
            h(f.reserved.memory),
            used,
            idle,
            pct
        );
    }
    let _ = writeln!(
        out,
        "| {:<name_w$} | {:>6} | {:>8} | {:>9} | {:>6} | {:>14} | {:>6} |",
        "unallocated",
        "",
        h(u.unallocated.compute),
        h(u.unallocated.memory),
        "",
        "",
        ""
    );
    let _ = writeln!(
        out,
        "| {:<name_w$} | {:>6} | {:>8} | {:>9} | {:>6} | {:>14} | {:>6} |",
        "physical",
        "",
        h(u.physical),
        h(u.physical),
        "",
        "",
        ""
    );
    out.push('\n');
    idle_holders(out, r);
}

/// The ten biggest idle holders, biggest first.
fn idle_holders(out: &mut String, r: &FleetReport) {
    let idle: Vec<_> = r
        .usage
        .claims
        .iter()
        .filter(|c| c.item.figures.idle_allocated.0 > 0.0)
        .take(10)
        .collect();
    if !idle.is_empty() {
        out.push_str("Biggest idle holders:\n\n");
        for c in idle {
            let who = c
                .item
                .holder
                .as_deref()
                .map_or_else(String::new, |h| format!(", held by {h}"));
            wrapped(
                out,
                &format!(
                    "- `{}` claim {} ({}{who}): {} GPU-h idle of {} reserved; longest idle run {}",
                    c.endpoint,
                    c.item.claim,
                    c.item.project,
                    h(c.item.figures.idle_allocated),
                    h(c.item.figures.reserved.compute),
                    age(c.item.longest_idle_ms)
                ),
                2,
            );
        }
        out.push('\n');
    }
}

fn timeline(out: &mut String, r: &FleetReport) {
    let _ = writeln!(out, "## Timeline ({} audited actions)\n", r.timeline.len());
    if r.timeline.is_empty() {
        out.push_str("- none\n\n");
        return;
    }
    for a in &r.timeline {
        let e = &a.item;
        wrapped(
            out,
            &format!(
                "- {} `{}` **{}** by `{}` on {}: {}",
                short(e.at),
                a.endpoint,
                e.action,
                e.actor,
                e.target,
                crate::snapshot::detail_words(&e.detail, &jiff::tz::TimeZone::UTC)
            ),
            2,
        );
        wrapped(
            out,
            &format!(
                "  - before: {}; after: {}",
                or_dash(&e.before),
                or_dash(&e.after)
            ),
            4,
        );
    }
    out.push('\n');
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

fn until(to: Timestamp, ongoing: bool) -> String {
    if ongoing {
        "to the window's end (ongoing)".to_string()
    } else {
        format!("to {}", short(to))
    }
}

fn trouble(out: &mut String, r: &FleetReport) {
    out.push_str("## What went wrong\n\n");
    trouble_gpus(out, r);
    trouble_claims(out, r);
    trouble_backoffs(out, r);
}

/// GPUs stale, unhealthy or cordoned, and for how long.
fn trouble_gpus(out: &mut String, r: &FleetReport) {
    let t = &r.trouble;
    out.push_str("### GPUs stale, unhealthy or cordoned\n\n");
    for g in &t.gpus {
        let what = match g.item.condition {
            Condition::Stale => "stale (no telemetry)",
            Condition::Unhealthy => "unhealthy",
            Condition::Cordoned => "cordoned",
        };
        let why = if g.item.reason.is_empty() {
            String::new()
        } else {
            format!(" ({})", g.item.reason)
        };
        wrapped(
            out,
            &format!(
                "- `{}` {} {what}{why} for {}, from {} {}",
                g.endpoint,
                g.item.gpu,
                span(g.item.from, g.item.to),
                short(g.item.from),
                until(g.item.to, g.item.ongoing)
            ),
            2,
        );
    }
    if t.gpus.is_empty() {
        out.push_str("- none\n");
    }
}

/// Claims over their memory, and claims long pending with their reasons.
fn trouble_claims(out: &mut String, r: &FleetReport) {
    let t = &r.trouble;
    out.push_str("\n### Claims over their memory\n\n");
    for o in &t.over_limit {
        let i = &o.item;
        wrapped(
            out,
            &format!(
                "- `{}` claim {} ({}) on {}: its processes used up to {} of {} reserved, \
                 {} to {}",
                o.endpoint,
                i.claim,
                i.project,
                i.gpu,
                i.peak,
                i.reserved,
                short(i.from),
                short(i.to)
            ),
            2,
        );
    }
    if t.over_limit.is_empty() {
        out.push_str("- none\n");
    }
    let _ = writeln!(
        out,
        "\n### Claims pending {} or longer\n",
        age(r.pending_over_ms)
    );
    for p in &t.long_pending {
        let i = &p.item;
        let why = if i.reasons.is_empty() {
            "no reason given".to_string()
        } else {
            i.reasons.join("; ")
        };
        wrapped(
            out,
            &format!(
                "- `{}` claim {} ({}) waited {} from {}: {why}",
                p.endpoint,
                i.claim,
                i.project,
                span(i.from, i.to),
                short(i.from)
            ),
            2,
        );
    }
    if t.long_pending.is_empty() {
        out.push_str("- none\n");
    }
}

/// Projects backed off, on what and for how long.
fn trouble_backoffs(out: &mut String, r: &FleetReport) {
    let t = &r.trouble;
    out.push_str("\n### Projects backed off\n\n");
    for b in &t.backoffs {
        let i = &b.item;
        wrapped(
            out,
            &format!(
                "- `{}` {} on {}: {} from {} {}",
                b.endpoint,
                i.project,
                i.resource,
                span(i.from, i.to),
                short(i.from),
                until(i.to, i.ongoing)
            ),
            2,
        );
    }
    if t.backoffs.is_empty() {
        out.push_str("- none\n");
    }
}

/// Episodes listed one by one in Markdown; the JSON has them all.
const EPISODES_LISTED: usize = 50;

/// GPU-hours per flag, idle GPU-hours per owner of each engine, and the episodes.
fn flags(out: &mut String, r: &FleetReport) {
    let f = &r.flags;
    out.push_str("\n## Flags\n\n");
    wrapped(
        out,
        &format!(
            "GPU-hours flagged: double-booked (holders not nested in each other hold more than \
             the GPU has), unexplained (memory used by processes no holder accounts for), idle \
             (held, below {} % for {} min or longer, from when it went idle).",
            crate::physical::IDLE_BELOW_PERCENT,
            crate::physical::IDLE_FOR_MS / 60_000
        ),
        0,
    );
    out.push('\n');
    if f.totals.by_flag.is_empty() {
        out.push_str("- none\n");
        return;
    }
    out.push_str(
        "| flag          | episodes | GPU-hours |\n|---------------|---------:|----------:|\n",
    );
    for t in &f.totals.by_flag {
        let _ = writeln!(
            out,
            "| {:<13} | {:>8} | {:>9} |",
            t.flag,
            t.episodes,
            h(t.gpu_time)
        );
    }
    if !f.totals.idle_by_owner.is_empty() {
        out.push_str("\n### Idle GPU-hours by owner\n\n");
        let name_w = f
            .totals
            .idle_by_owner
            .iter()
            .map(|o| o.name.chars().count())
            .chain([4])
            .max()
            .unwrap_or(4)
            .min(40);
        let _ = writeln!(
            out,
            "| engine     | owner     | {:<name_w$} | episodes | idle GPU-hours |",
            "name"
        );
        let _ = writeln!(
            out,
            "|------------|-----------|{}|---------:|---------------:|",
            "-".repeat(name_w + 2)
        );
        for o in &f.totals.idle_by_owner {
            let _ = writeln!(
                out,
                "| {:<10} | {:<9} | {:<name_w$} | {:>8} | {:>14} |",
                o.engine.word(),
                o.kind,
                o.name,
                o.episodes,
                h(o.idle)
            );
        }
    }
    out.push_str("\n### Episodes\n\n");
    for e in f.episodes.iter().take(EPISODES_LISTED) {
        let i = &e.item;
        let to = i.ended.unwrap_or(r.to).min(r.to);
        wrapped(
            out,
            &format!(
                "- `{}` {}:{} for {}, from {} {}: {}",
                e.endpoint,
                i.node,
                i.index,
                span(i.started.max(r.from), to),
                short(i.started),
                until(to, i.ended.is_none_or(|end| end > r.to)),
                i.detail
            ),
            2,
        );
    }
    if f.episodes.len() > EPISODES_LISTED {
        let _ = writeln!(
            out,
            "- and {} more (`--format json` lists them all)",
            f.episodes.len() - EPISODES_LISTED
        );
    }
}

/// The report as Markdown.
pub fn markdown(r: &FleetReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# GPU report, {} to {} UTC ({})\n",
        utc(r.from),
        utc(r.to),
        span(r.from, r.to)
    );
    endpoints(&mut out, r);
    usage(&mut out, r);
    timeline(&mut out, r);
    trouble(&mut out, r);
    flags(&mut out, r);
    out
}
