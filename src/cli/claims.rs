//! The claim subcommands: `gpuboard claim` (flags to a validated request through
//! `wire::ClaimDraft`), `release`, `move`, `renew` and `ls`, with how a claim and the
//! claims table print.

use anyhow::Context;
use clap::Args;
use serde_json::{Map, Value, json};

use super::{Conn, EXIT_INVALID, connect, print_json, user};
use crate::client::{ClaimOutcome, ClientError};
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::ids::ClaimId;
use crate::placement::MoveTarget;
use crate::request::ClaimRequest;
use crate::snapshot::{ClaimState, ClaimView};
use crate::wire::ClaimDraft;

/// `gpuboard claim`.
#[derive(Args, Debug)]
pub struct ClaimArgs {
    /// GPU memory (20GiB, 512Mi, 40G): Ray's gpu_memory, or Koordinator's gpu-memory with --shared/--core.
    #[arg(long)]
    pub memory: Option<String>,
    /// A fraction of one GPU (Ray num_gpus, 0 < f < 1).
    #[arg(long)]
    pub fraction: Option<f64>,
    /// Whole GPUs, exclusive (nvidia.com/gpu).
    #[arg(long)]
    pub gpus: Option<u32>,
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
    /// Lease in seconds; renew with `gpuboard renew`.
    #[arg(long)]
    pub ttl: Option<u64>,
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
    #[command(flatten)]
    pub conn: Conn,
}

/// `gpuboard release ID...`: one line per claim, or one JSON array.
pub(super) async fn release(ids: Vec<ClaimId>, conn: &Conn) -> anyhow::Result<u8> {
    let c = connect(conn)?;
    let mut out = Vec::new();
    for id in ids {
        let r = c.release(id).await?;
        if !conn.json {
            println!(
                "claim {id}: {}",
                if r.released {
                    "released"
                } else {
                    "already released"
                }
            );
        }
        out.push(json!({"id": r.id, "released": r.released}));
    }
    if conn.json {
        print_json(&out)?;
    }
    Ok(0)
}

/// `gpuboard move ID --node/--devices`: at least one target is required.
pub(super) async fn move_claim(
    id: ClaimId,
    node: Option<String>,
    devices: Option<Vec<u32>>,
    conn: &Conn,
) -> anyhow::Result<u8> {
    if node.is_none() && devices.is_none() {
        eprintln!("gpuboard move: give --node, --devices, or both");
        return Ok(EXIT_INVALID);
    }
    let c = connect(conn)?;
    let view = c.move_claim(id, &MoveTarget { node, devices }).await?;
    print_claim(&view, conn.json)?;
    Ok(0)
}

/// `gpuboard ls`: the claims table, or the claims as JSON.
pub(super) async fn ls(conn: &Conn) -> anyhow::Result<u8> {
    let c = connect(conn)?;
    let snap = c.snapshot().await?;
    if conn.json {
        print_json(&snap.claims)?;
    } else {
        print!("{}", claims_table(&snap.claims, SystemClock.now()));
    }
    Ok(0)
}

/// `gpuboard renew ID [--ttl]`.
pub(super) async fn renew(id: ClaimId, ttl: Option<u64>, conn: &Conn) -> anyhow::Result<u8> {
    let c = connect(conn)?;
    let view = c.renew(id, ttl).await?;
    print_claim(&view, conn.json)?;
    Ok(0)
}

/// One claim as a sentence (placed where, or pending and why), or as JSON.
fn print_claim(c: &ClaimView, as_json: bool) -> anyhow::Result<()> {
    if as_json {
        return print_json(c);
    }
    match c.state {
        ClaimState::Placed => println!(
            "claim {} placed on {}:{} ({} memory, {} GPU)",
            c.id,
            c.node.as_deref().unwrap_or("?"),
            devices_of(c),
            c.memory_reserved.iec(),
            c.compute_reserved
        ),
        ClaimState::Pending => {
            println!("claim {} pending:", c.id);
            for r in &c.pending_reasons {
                println!("  {r}");
            }
        }
    }
    Ok(())
}

/// The claim's device indexes, comma-separated (also `CUDA_VISIBLE_DEVICES` for `run`).
pub(super) fn devices_of(c: &ClaimView) -> String {
    c.shares
        .iter()
        .map(|s| s.device.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The `ls` table: one row per claim, columns padded to their widest cell.
fn claims_table(claims: &[ClaimView], now: Timestamp) -> String {
    let mut rows = vec![
        [
            "ID", "STATE", "PROJECT", "HOLDER", "WHERE", "FORM", "MEMORY", "GPU", "LEASE", "AGE",
        ]
        .map(str::to_string),
    ];
    for c in claims {
        let place = match (&c.node, c.state) {
            (Some(n), _) => format!("{n}:{}", devices_of(c)),
            (None, _) => "-".to_string(),
        };
        let lease = c.lease_expires_at.map_or("-".to_string(), |t| {
            format!("{}s", t.millis_since(now) / 1000)
        });
        rows.push([
            c.id.to_string(),
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
            format!("{}s", now.millis_since(c.created_at) / 1000),
        ]);
    }
    let mut widths = [0usize; 10];
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

/// The flags as typed; `wire::ClaimDraft` decides which wire field each becomes.
fn claim_draft(a: &ClaimArgs) -> ClaimDraft {
    ClaimDraft {
        memory: a.memory.clone(),
        fraction: a.fraction.map(|f| f.to_string()),
        gpus: a.gpus.map(|g| g.to_string()),
        ratio: a.ratio.map(|r| r.to_string()),
        core: a.core.map(|c| c.to_string()),
        shared: a.shared.map(|s| s.to_string()),
        cpus: a.cpus.map(|c| c.to_string()),
        accelerator_type: a.accelerator.clone(),
        project: a.project.clone(),
        holder: a.holder.clone().or_else(user),
        ttl: a.ttl.map(|t| t.to_string()),
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
    match serde_json::from_str(text)
        .with_context(|| format!("--request is not valid JSON: {text}"))?
    {
        Value::Object(m) => Ok(m),
        _ => anyhow::bail!("--request must be a JSON object, e.g. '{{\"gpu_memory\": \"10Gi\"}}'"),
    }
}

/// The validated request the flags describe: refused here, by the endpoint's own
/// validator, before anything is sent.
fn claim_request(a: &ClaimArgs) -> anyhow::Result<ClaimRequest> {
    let base = base_request(a)?;
    claim_draft(a)
        .to_request(base)
        .map_err(|e| ClientError::from(e).into())
}

/// `gpuboard claim`: places or queues the claim; a claim that does not fit lists each
/// node's reason on stderr (unless `--json`) and fails with the does-not-fit exit code.
pub(super) async fn claim(a: ClaimArgs) -> anyhow::Result<()> {
    let request = claim_request(&a)?;
    let c = connect(&a.conn)?;
    match c.claim(&request).await {
        Ok(ClaimOutcome::Placed(v) | ClaimOutcome::Pending(v)) => print_claim(&v, a.conn.json),
        Err(e @ ClientError::DoesNotFit { .. }) if !a.conn.json => {
            // One node a line, then the typed error for the exit code.
            if let ClientError::DoesNotFit { reasons, .. } = &e {
                eprintln!("does not fit:");
                for r in reasons {
                    eprintln!("  {r}");
                }
            }
            Err(e.into())
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_flags_build_the_right_form() {
        let args = |extra: &[&str]| {
            #[derive(clap::Parser)]
            struct T {
                #[command(flatten)]
                a: ClaimArgs,
            }
            let mut v = vec!["t"];
            v.extend_from_slice(extra);
            <T as clap::Parser>::parse_from(v).a
        };
        let body = |a: ClaimArgs| claim_draft(&a).to_json(base_request(&a).unwrap());
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
    }
}
