//! The claim subcommands: `gpuboard claim` (flags to a validated request through
//! `wire::ClaimDraft`, placed across the fleet by `fleet`), `release`, `move` (across
//! endpoints by `fleet_move`), `renew` and `ls`, with how a claim, a refusal and the claims
//! table print.

use anyhow::Context;
use clap::Args;
use serde_json::{Map, Value, json};

use super::fleet::{PlaceArgs, place, read_all};
use super::fleet_move::{self, Moved};
use super::members::{ClaimRef, Members, members};
use super::snapcache::SnapshotCache;
use super::{Conn, EXIT_DOES_NOT_FIT, EXIT_INVALID, Usage, print_json, user};
use crate::client::ClientError;
use crate::clock::{Clock, SystemClock, Timestamp, age};
use crate::endpoint::strict_json;
use crate::placement::MoveTarget;
use crate::request::ClaimRequest;
use crate::snapshot::{ClaimState, ClaimView};
use crate::wire::ClaimDraft;
use crate::wire::forecast::PreviewAction;

/// `gpuboard claim`.
#[derive(Args, Debug)]
pub struct ClaimArgs {
    /// GPU memory (20GiB, 512Mi, 40G): Ray's gpu_memory, or Koordinator's gpu-memory with --shared/--core.
    #[arg(long)]
    pub memory: Option<String>,
    /// A fraction of one GPU (Ray num_gpus): above 0 and below 1 (0.25), or a percent (25%).
    #[arg(long)]
    pub fraction: Option<String>,
    /// Whole GPUs, exclusive (nvidia.com/gpu): 1, 2...
    #[arg(long)]
    pub gpus: Option<String>,
    /// Percent of each GPU's memory (Koordinator gpu-memory-ratio).
    #[arg(long)]
    pub ratio: Option<u32>,
    /// Percent of compute (Koordinator gpu-core).
    #[arg(long)]
    pub core: Option<u32>,
    /// Devices to spread a Koordinator share over (gpu.shared).
    #[arg(long)]
    pub shared: Option<u32>,
    /// CPU cores.
    #[arg(long)]
    pub cpus: Option<f64>,
    /// Project to account.
    #[arg(long)]
    pub project: Option<String>,
    /// Holder name (default: the user).
    #[arg(long)]
    pub holder: Option<String>,
    /// Lease: seconds (600) or a duration (90s, 10m, 2h, 1d); renew with `gpuboard renew`.
    #[arg(long)]
    pub ttl: Option<String>,
    /// Queue when it does not fit now (answer 202) instead of failing.
    #[arg(long)]
    pub wait: bool,
    /// Only this node.
    #[arg(long)]
    pub node: Option<String>,
    /// Only these device indexes, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub devices: Option<Vec<u32>>,
    /// Only this accelerator type (NVIDIA_A100, H100...).
    #[arg(long)]
    pub accelerator: Option<String>,
    /// The whole request as a JSON object (any accepted form); other request flags are added to it.
    #[arg(long)]
    pub request: Option<String>,
    /// Show where it would go or when it would start, and what else would follow; claim
    /// nothing (one endpoint).
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub place: PlaceArgs,
    #[command(flatten)]
    pub conn: Conn,
}

/// `gpuboard release ID...`: one line per claim, or one JSON array. Every id is resolved
/// to its endpoint before anything is released.
pub(super) async fn release(ids: Vec<ClaimRef>, conn: &Conn) -> anyhow::Result<u8> {
    let members = members(conn)?;
    let targets = ids
        .iter()
        .map(|r| members.resolve(r).map(|m| (m, r.id)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut out = Vec::new();
    for (m, id) in targets {
        let label = members.label(m, id);
        let r = members.list[m].client.release(id).await.with_context(|| {
            format!(
                "release of claim {label}: endpoint {} refused it (claims listed before this line were released)",
                members.list[m].name
            )
        })?;
        if !conn.json {
            println!(
                "claim {label}: {}",
                if r.released {
                    "released"
                } else {
                    "already released"
                }
            );
        }
        let mut v = json!({"id": r.id, "released": r.released});
        if members.many() {
            v["endpoint"] = json!(members.list[m].name);
        }
        out.push(v);
    }
    if conn.json {
        print_json(&out)?;
    }
    Ok(0)
}

/// `gpuboard move ID --node/--devices`, or `move ENDPOINT/ID --to OTHER[/NODE]` across
/// endpoints: at least one target is required.
pub(super) async fn move_claim(
    r: &ClaimRef,
    to: Option<&str>,
    mut node: Option<String>,
    devices: Option<Vec<u32>>,
    conn: &Conn,
) -> anyhow::Result<u8> {
    let members = members(conn)?;
    let from = members.resolve(r)?;
    if let Some(to) = to {
        let (other, to_node) = match to.split_once('/') {
            Some((o, n)) if !n.is_empty() => (o, Some(n.to_string())),
            Some((o, _)) => (o, None),
            None => (to, None),
        };
        let target = members.named(other)?;
        if to_node.is_some() && node.is_some() {
            eprintln!("gpuboard move: give the node once, as --to {other}/NODE or --node");
            return Ok(EXIT_INVALID);
        }
        if target != from {
            let to_node = to_node.or(node);
            let moved =
                fleet_move::across(&members, (from, r.id), (target, to_node), devices).await;
            return report_move(&members, moved, conn.json);
        }
        node = to_node.or(node);
    }
    if node.is_none() && devices.is_none() {
        eprintln!("gpuboard move: give --node, --devices, --to, or several");
        return Ok(EXIT_INVALID);
    }
    let c = &members.list[from].client;
    // Where it was, to say "moved from ... to ...": one read, for the sentence only.
    let was = if conn.json {
        None
    } else {
        c.snapshot()
            .await
            .ok()
            .and_then(|s| s.claims.into_iter().find(|x| x.id == r.id))
            .and_then(|v| v.place())
    };
    match c.move_claim(r.id, &MoveTarget { node, devices }).await {
        Ok(view) if !conn.json && view.state == ClaimState::Placed => {
            let label = members.label(from, view.id);
            match was {
                Some(was) => println!("claim {label} moved from {was} to {}", holding(&view)),
                None => println!("claim {label} moved to {}", holding(&view)),
            }
            Ok(0)
        }
        Ok(view) => {
            print_claim(
                &view,
                members.many().then(|| members.list[from].name.as_str()),
                conn.json,
            )?;
            Ok(0)
        }
        Err(e) => refused(e, conn.json),
    }
}

/// `gpuboard ls`: the claims table, or the claims as JSON; over the fleet with several
/// endpoints (ids as `ENDPOINT/ID`). An endpoint that cannot be read is named on stderr
/// and the exit code is its error's; the others are still listed. With `label`
/// (`KEY=VALUE`), only the claims carrying it; with `pending`, only the waiting claims,
/// each with the sentence saying when it is expected to start. A waiting claim's START
/// is its endpoint's forecast (`GET /v1/forecast`, asked only when claims wait).
pub(super) async fn ls(conn: &Conn, label: Option<&str>, pending: bool) -> anyhow::Result<u8> {
    let label_ok = label_filter(label)?;
    let keep = |c: &ClaimView| label_ok(c) && (!pending || c.state == ClaimState::Pending);
    let members = members(conn)?;
    let mut code = 0;
    let mut snaps = Vec::new();
    if members.many() {
        let reads = read_all(&members, &SnapshotCache::user()).await;
        let mut errors = Vec::new();
        for (m, r) in reads.into_iter().enumerate() {
            match r {
                Ok(s) => snaps.push((m, s)),
                Err(e) => {
                    eprintln!("gpuboard: endpoint {}: {e}", members.list[m].name);
                    if code == 0 {
                        code = e.exit_code();
                    }
                    errors.push(e);
                }
            }
        }
        if snaps.is_empty()
            && let Some(e) = errors.into_iter().next()
        {
            return Err(e.into());
        }
    } else {
        snaps.push((0, members.single()?.client.snapshot().await?));
    }
    let mut listed = Vec::new();
    for (m, mut s) in snaps {
        s.claims.retain(|c| keep(c));
        let waits = s.claims.iter().any(|c| c.state == ClaimState::Pending);
        // An endpoint that does not forecast leaves START as `?`.
        let forecast = if waits {
            members.list[m].client.forecast().await.ok()
        } else {
            None
        };
        listed.push((m, s.claims, forecast));
    }
    let now = SystemClock.now();
    if conn.json {
        let mut all = Vec::new();
        for (m, claims, forecast) in &listed {
            for c in claims {
                let mut v = if members.many() {
                    with_endpoint(c, &members.list[*m].name)?
                } else {
                    serde_json::to_value(c)?
                };
                if let Some(e) = forecast.as_ref().and_then(|f| f.of(c.id)) {
                    v["expected_start"] = serde_json::to_value(e)?;
                }
                all.push(v);
            }
        }
        print_json(&all)?;
        return Ok(code);
    }
    let mut rows = Vec::new();
    let mut sentences = Vec::new();
    for (m, claims, forecast) in &listed {
        for c in claims {
            let label = members.label(*m, c.id);
            let expected = forecast.as_ref().and_then(|f| f.of(c.id));
            let start = match (c.state, expected) {
                (ClaimState::Placed, _) => "-".to_string(),
                (ClaimState::Pending, Some(e)) => e.short(now),
                (ClaimState::Pending, None) => "?".to_string(),
            };
            if let Some(e) = expected {
                sentences.push(format!("claim {label}: {}", e.sentence(&hh_mm)));
            }
            rows.push((label, c, start));
        }
    }
    print!("{}", claims_table(&rows, now));
    if pending {
        for s in sentences {
            println!("{s}");
        }
    }
    Ok(code)
}

/// A time of day as the claim detail writes it (`03:40`, local time).
fn hh_mm(t: Timestamp) -> String {
    until_text(t)
        .get(..5)
        .map_or_else(|| t.0.to_string(), str::to_string)
}

/// Which claims `ls --label KEY=VALUE` keeps (all without it).
fn label_filter(label: Option<&str>) -> anyhow::Result<impl Fn(&ClaimView) -> bool> {
    let wanted = match label {
        None => None,
        Some(l) => match l.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Some((k.trim().to_string(), v.to_string())),
            _ => anyhow::bail!("--label `{l}`: write KEY=VALUE, e.g. gpuboard.attempt=18f2c-41-0"),
        },
    };
    Ok(move |c: &ClaimView| {
        wanted
            .as_ref()
            .is_none_or(|(k, v)| c.request.labels.get(k) == Some(v))
    })
}

/// `gpuboard renew ID [--ttl]`.
pub(super) async fn renew(r: &ClaimRef, ttl: Option<&str>, conn: &Conn) -> anyhow::Result<u8> {
    let ttl = ttl
        .map(|t| crate::request::parse_seconds("ttl", t))
        .transpose()
        .map_err(|mut e| {
            e.message = in_flag_words(&e.message);
            ClientError::from(e)
        })?;
    let members = members(conn)?;
    let m = members.resolve(r)?;
    let asked_at = SystemClock.now();
    let view = members.list[m].client.renew(r.id, ttl).await?;
    if conn.json {
        print_claim(
            &view,
            members.many().then(|| members.list[m].name.as_str()),
            true,
        )?;
        return Ok(0);
    }
    let label = members.label(m, view.id);
    // A renewal never shortens a lease: one that already ran past what was asked is kept.
    let kept = |until: Timestamp| {
        ttl.is_some_and(|t| until.0 > asked_at.plus_secs(t).0.saturating_add(5_000))
    };
    match view.lease_expires_at {
        Some(until) if kept(until) => println!(
            "claim {label}: its lease already ends at {} (in {}), later than --ttl asks; kept",
            until_text(until),
            age(until.millis_since(SystemClock.now()))
        ),
        Some(until) => println!(
            "claim {label} renewed: its lease ends at {} (in {})",
            until_text(until),
            age(until.millis_since(SystemClock.now()))
        ),
        None => println!("claim {label} renewed (it has no lease)"),
    }
    Ok(0)
}

/// A time of day as the console writes it (`18:31:03`, local time).
fn until_text(t: Timestamp) -> String {
    jiff::Timestamp::from_millisecond(i64::try_from(t.0).unwrap_or(i64::MAX)).map_or_else(
        |_| t.0.to_string(),
        |ts| {
            ts.to_zoned(jiff::tz::TimeZone::system())
                .strftime("%H:%M:%S")
                .to_string()
        },
    )
}

/// A claim as JSON with the endpoint it lives on.
pub(super) fn with_endpoint(c: &ClaimView, endpoint: &str) -> anyhow::Result<Value> {
    let mut v = serde_json::to_value(c)?;
    if let Value::Object(m) = &mut v {
        m.insert("endpoint".to_string(), json!(endpoint));
    }
    Ok(v)
}

/// A refusal: a 409 that does not fit says its lead and then each reason once, one a line,
/// on stderr, and exits with the does-not-fit code; other errors go up as they are.
pub(super) fn refused(e: ClientError, as_json: bool) -> anyhow::Result<u8> {
    match e {
        ClientError::DoesNotFit {
            detail,
            reasons,
            infeasible,
            ..
        } if !as_json => {
            eprintln!("gpuboard: {}:", fit_lead(&detail, &reasons, infeasible));
            for r in &reasons {
                eprintln!("  {r}");
            }
            Ok(EXIT_DOES_NOT_FIT)
        }
        e => Err(e.into()),
    }
}

/// The summary of a 409 without the reasons it repeats (they are listed under it).
fn fit_lead(detail: &str, reasons: &[String], infeasible: bool) -> String {
    let Some(first) = reasons.first() else {
        return detail.to_string();
    };
    match detail.find(first.as_str()) {
        Some(at) => detail[..at].trim_end().trim_end_matches(':').to_string(),
        None if detail.is_empty() => {
            if infeasible {
                "infeasible (no device could ever hold it)".to_string()
            } else {
                "does not fit now".to_string()
            }
        }
        None => detail.to_string(),
    }
}

/// One claim as a sentence (placed where, or pending and why), or as JSON; `endpoint`
/// is named when more than one endpoint is in play.
pub(super) fn print_claim(
    c: &ClaimView,
    endpoint: Option<&str>,
    as_json: bool,
) -> anyhow::Result<()> {
    if as_json {
        return match endpoint {
            Some(e) => print_json(&with_endpoint(c, e)?),
            None => print_json(c),
        };
    }
    let (id, at) = match endpoint {
        Some(e) => (format!("{e}/{}", c.id), format!("endpoint {e}, node ")),
        None => (c.id.to_string(), String::new()),
    };
    match c.state {
        ClaimState::Placed => println!("claim {id} placed on {at}{}", holding(c)),
        ClaimState::Pending => {
            println!("claim {id} pending:");
            for r in &c.pending_reasons {
                println!("  {r}");
            }
        }
    }
    Ok(())
}

/// Where a placed claim is and what it holds, as the console writes it: `node-b:5-6
/// (20 GiB memory, 0.25 GPU)`, or `node-c (CPUs only: 500m)` for one that holds no GPU.
pub(super) fn holding(c: &ClaimView) -> String {
    let place = c.place().unwrap_or_else(|| "?".to_string());
    if c.shares.is_empty() {
        return match c.request.cpus {
            Some(cpus) => format!("{place} (CPUs only: {cpus})"),
            None => format!("{place} (no GPU)"),
        };
    }
    format!(
        "{place} ({} memory, {} GPU)",
        c.memory_reserved.iec(),
        c.compute_reserved
    )
}

/// The claim's device indexes, comma-separated (also `CUDA_VISIBLE_DEVICES` for `run`).
pub(super) fn devices_of(c: &ClaimView) -> String {
    c.shares
        .iter()
        .map(|s| s.device.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The `ls` table: one row per claim (its id as labelled), columns padded to their
/// widest cell.
fn claims_table(claims: &[(String, &ClaimView, String)], now: Timestamp) -> String {
    let mut rows = vec![
        [
            "ID", "STATE", "PROJECT", "HOLDER", "WHERE", "FORM", "MEMORY", "GPU", "LEASE", "AGE",
            "START", "REASON",
        ]
        .map(str::to_string),
    ];
    for (label, c, start) in claims {
        let place = c.place().unwrap_or_else(|| "-".to_string());
        let lease = c
            .lease_expires_at
            .map_or("-".to_string(), |t| age(t.millis_since(now)));
        rows.push([
            label.clone(),
            match c.state {
                ClaimState::Placed => "placed".to_string(),
                ClaimState::Pending => "pending".to_string(),
            },
            c.project.clone(),
            c.holder.clone().unwrap_or_else(|| "-".to_string()),
            place,
            c.form.clone(),
            c.memory_reserved.iec(),
            c.compute_reserved.to_string(),
            lease,
            age(now.millis_since(c.created_at)),
            start.clone(),
            pending_reason(c),
        ]);
    }
    let mut widths = [0usize; 12];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    if claims.is_empty() {
        out.push_str("(no claims)\n");
    }
    out
}

/// Why a pending claim waits, on one line (the endpoint gives one reason per node); `-`
/// for a placed claim.
fn pending_reason(c: &ClaimView) -> String {
    match (c.state, c.pending_reasons.as_slice()) {
        (ClaimState::Placed, _) => "-".to_string(),
        (ClaimState::Pending, []) if c.infeasible => "can never fit this endpoint".to_string(),
        (ClaimState::Pending, []) => "waiting".to_string(),
        (ClaimState::Pending, reasons) => {
            let text = reasons.join("; ");
            if c.infeasible {
                format!("can never fit: {text}")
            } else {
                text
            }
        }
    }
}

/// The flags whose text the validator would read in another sense than the operator
/// meant: a memory without a unit (bytes), a fraction of 1 or more (whole GPUs), a
/// count of GPUs that is not whole. Refused here, naming the flag and what to write;
/// `--fraction 25%` reads as 0.25.
fn flag_values(a: &ClaimArgs) -> Result<(Option<String>, Option<String>), Usage> {
    if let Some(m) = &a.memory {
        let m = m.trim();
        if !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Usage(format!(
                "--memory {m} has no unit, so it would be {m} bytes: add a unit ({m}GiB, \
                 {m}Gi or {m}G; {m}B if bytes are meant)"
            )));
        }
    }
    let fraction = match a.fraction.as_deref().map(str::trim) {
        None => None,
        Some(f) => {
            let value = match f.strip_suffix('%') {
                Some(p) => p.trim().parse::<f64>().map(|p| p / 100.0),
                None => f.parse::<f64>(),
            };
            match value {
                Ok(v) if v > 0.0 && v < 1.0 => Some(v.to_string()),
                // Not whole (1.5): the validator names its rule.
                Ok(v) if v > 1.0 && v.fract() != 0.0 => Some(v.to_string()),
                _ => {
                    return Err(Usage(format!(
                        "--fraction {f}: a fraction of one GPU is above 0 and below 1 (0.25, \
                         or 25%); for whole GPUs use --gpus, for a share of memory --memory \
                         or --ratio"
                    )));
                }
            }
        }
    };
    let gpus = match a.gpus.as_deref().map(str::trim) {
        None => None,
        Some(g) => match g.parse::<u32>() {
            Ok(n) if n > 0 => Some(n.to_string()),
            _ => {
                return Err(Usage(format!(
                    "--gpus {g}: whole GPUs are counted 1, 2, 3...; for part of one GPU use \
                     --fraction 0.5 or --memory 20GiB"
                )));
            }
        },
    };
    Ok((fraction, gpus))
}

/// The validator's words with the wire fields it names given as the flags that set them
/// (`gpu.shared` is `--shared` here).
fn in_flag_words(message: &str) -> String {
    const FLAGS: &[(&str, &str)] = &[
        ("`gpu-memory-ratio`", "`--ratio`"),
        ("`gpu-memory`", "`--memory`"),
        ("`gpu_memory`", "`--memory`"),
        ("`gpu-core`", "`--core`"),
        ("`gpu.shared`", "`--shared`"),
        ("`num_gpus`", "`--fraction`"),
        ("`nvidia.com/gpu`", "`--gpus`"),
        ("`accelerator_type`", "`--accelerator`"),
        ("`ttl`", "`--ttl`"),
        ("`cpus`", "`--cpus`"),
    ];
    FLAGS
        .iter()
        .fold(message.to_string(), |m, (wire, flag)| m.replace(wire, flag))
}

/// The flags as typed; `wire::ClaimDraft` decides which wire field each becomes.
fn claim_draft(a: &ClaimArgs, (fraction, gpus): (Option<String>, Option<String>)) -> ClaimDraft {
    ClaimDraft {
        memory: a.memory.clone(),
        fraction,
        gpus,
        ratio: a.ratio.map(|r| r.to_string()),
        core: a.core.map(|c| c.to_string()),
        shared: a.shared.map(|s| s.to_string()),
        cpus: a.cpus.map(|c| c.to_string()),
        accelerator_type: a.accelerator.clone(),
        project: a.project.clone(),
        holder: a.holder.clone().or_else(user),
        ttl: a.ttl.clone(),
        node: a.node.clone(),
        devices: a.devices.clone(),
        wait: a.wait,
        koordinator: false,
    }
}

/// The `--request` JSON object the flags are added to.
fn base_request(a: &ClaimArgs) -> anyhow::Result<Map<String, Value>> {
    let Some(text) = &a.request else {
        return Ok(Map::new());
    };
    // As strict as the endpoint: a key given twice is refused, not the last one kept.
    match strict_json(text.as_bytes()).map_err(|e| {
        Usage(format!(
            "--request is not a valid JSON object ({e}): {text}"
        ))
    })? {
        Value::Object(m) => Ok(m),
        _ => Err(Usage(
            "--request must be a JSON object, e.g. '{\"gpu_memory\": \"10Gi\"}'".to_string(),
        )
        .into()),
    }
}

/// The validated request the flags describe: refused here, by the endpoint's own
/// validator, before anything is sent.
fn claim_request(a: &ClaimArgs) -> anyhow::Result<ClaimRequest> {
    let base = base_request(a)?;
    claim_draft(a, flag_values(a)?)
        .to_request(base)
        .map_err(|mut e| {
            // Fields of `--request` keep their wire names; a flag is named as a flag.
            if a.request.is_none() {
                e.message = in_flag_words(&e.message);
            }
            ClientError::from(e).into()
        })
}

/// `gpuboard claim`: places or queues the claim, on the best endpoint of the fleet when
/// there are several (endpoints skipped on the way are named on stderr); a claim that does
/// not fit lists each node's reason once on stderr (unless `--json`) and exits with the
/// does-not-fit code.
pub(super) async fn claim(a: ClaimArgs) -> anyhow::Result<u8> {
    let request = claim_request(&a)?;
    if a.dry_run {
        let action = PreviewAction::Claim {
            request: Box::new(request),
        };
        return super::dry_run::dry_run(action, None, &a.conn).await;
    }
    let members = members(&a.conn)?;
    match place(&members, &request, &a.place, &SnapshotCache::user()).await {
        Ok(p) => {
            if !a.conn.json {
                for s in &p.skipped {
                    eprintln!("gpuboard: skipped {s}");
                }
            }
            let name = members.many().then(|| members.list[p.member].name.as_str());
            print_claim(p.outcome.claim(), name, a.conn.json)?;
            Ok(0)
        }
        Err(e) => refused(e, a.conn.json),
    }
}

/// Prints a move's outcome and returns the exit code: 0 when done, the release error's
/// code when both claims are held.
pub(super) fn report_move(
    members: &Members,
    moved: Result<Moved, ClientError>,
    as_json: bool,
) -> anyhow::Result<u8> {
    let name = |m: usize| members.list[m].name.as_str();
    match moved {
        Err(e) => {
            if !as_json && matches!(e, ClientError::DoesNotFit { .. }) {
                eprintln!("gpuboard move: the target refused the claim; nothing changed");
            }
            refused(e, as_json)
        }
        Ok(Moved::Done {
            move_id,
            from,
            to,
            released,
        }) => {
            if as_json {
                print_json(&json!({
                    "move": move_id,
                    "from": with_endpoint(&from.1, name(from.0))?,
                    "released": released,
                    "to": with_endpoint(&to.1, name(to.0))?,
                }))?;
            } else {
                println!(
                    "claim {} moved to {} (move {move_id}){}",
                    members.label(from.0, from.1.id),
                    members.label(to.0, to.1.id),
                    if released {
                        ""
                    } else {
                        "; the old claim was already gone"
                    }
                );
                print_claim(&to.1, Some(name(to.0)), false)?;
            }
            Ok(0)
        }
        Ok(Moved::ReleaseFailed {
            move_id,
            from,
            to,
            error,
        }) => {
            let old = members.label(from.0, from.1.id);
            let new = members.label(to.0, to.1.id);
            if as_json {
                print_json(&json!({
                    "move": move_id,
                    "from": with_endpoint(&from.1, name(from.0))?,
                    "released": false,
                    "to": with_endpoint(&to.1, name(to.0))?,
                    "error": error.to_string(),
                }))?;
            }
            eprintln!(
                "gpuboard move: claimed {new} but releasing {old} failed: {error} (move {move_id})"
            );
            eprintln!("both claims hold GPUs now:");
            eprintln!("  {old}  (old) {}", where_held(&from.1));
            eprintln!("  {new}  (new) {}", where_held(&to.1));
            eprintln!(
                "release one of them: `gpuboard release {old}` once it answers, or `gpuboard release {new}` to stay"
            );
            Ok(error.exit_code())
        }
    }
}

/// Where a claim sits and what it holds, for the release-failure lines.
fn where_held(c: &ClaimView) -> String {
    format!("{}, {}", holding(c), c.form)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The claim flags as clap reads them from `extra`.
    fn args(extra: &[&str]) -> ClaimArgs {
        #[derive(clap::Parser)]
        struct T {
            #[command(flatten)]
            a: ClaimArgs,
        }
        let mut v = vec!["t"];
        v.extend_from_slice(extra);
        <T as clap::Parser>::parse_from(v).a
    }

    #[test]
    fn claim_flags_build_the_right_form() {
        let body = |a: ClaimArgs| {
            claim_draft(&a, flag_values(&a).unwrap()).to_json(base_request(&a).unwrap())
        };
        let b = body(args(&["--memory", "20GiB", "--holder", "h"]));
        assert_eq!(b, json!({"gpu_memory": "20GiB", "holder": "h"}));
        let b = body(args(&[
            "--memory", "20GiB", "--shared", "2", "--holder", "h",
        ]));
        assert_eq!(
            b,
            json!({"gpu-memory": "20GiB", "gpu.shared": 2, "holder": "h"})
        );
        let b = body(args(&[
            "--gpus",
            "2",
            "--devices",
            "0,1",
            "--wait",
            "--holder",
            "h",
        ]));
        assert_eq!(
            b,
            json!({"nvidia.com/gpu": 2, "devices": [0, 1], "wait": true, "holder": "h"})
        );
        assert!(claim_request(&args(&["--request", "[1]"])).is_err());
        let e = claim_request(&args(&["--memory", "lots", "--holder", "h"])).unwrap_err();
        let e = e.downcast_ref::<ClientError>().unwrap();
        assert_eq!(e.exit_code(), 3, "refused locally as invalid: {e}");
        let b = body(args(&["--fraction", "25%", "--ttl", "1h", "--holder", "h"]));
        assert_eq!(b, json!({"num_gpus": 0.25, "ttl": "1h", "holder": "h"}));
        assert_eq!(
            claim_request(&args(&["--ttl", "1h", "--fraction", "0.5"]))
                .unwrap()
                .ttl,
            Some(3600)
        );
    }

    #[test]
    fn flag_values_read_in_another_sense_are_refused_naming_the_flag() {
        for (flags, says) in [
            (&["--memory", "8"][..], "--memory 8 has no unit"),
            (
                &["--fraction", "25"][..],
                "--fraction 25: a fraction of one GPU",
            ),
            (&["--fraction", "0"][..], "above 0 and below 1"),
            (&["--gpus", "0.5"][..], "--gpus 0.5: whole GPUs"),
            (&["--gpus", "0"][..], "whole GPUs are counted"),
        ] {
            let e = claim_request(&args(flags)).unwrap_err();
            assert!(e.to_string().contains(says), "{flags:?}: {e}");
            assert_eq!(super::super::exit_code(&e), 3, "{flags:?}");
        }
        assert!(claim_request(&args(&["--memory", "8B"])).is_ok());
        // The validator's words name the flag, not the wire field.
        let e = claim_request(&args(&["--memory", "8Gi", "--core", "30"])).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("`--shared`") && !text.contains("gpu.shared"),
            "{text}"
        );
    }
}
