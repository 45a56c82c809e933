//! What a console runs on an SSH host to read it with gpuboard's own readers, writing to
//! stdout so the SSH channel carries it and no port is opened:
//!
//! - `gpuboard watch --stdio`: this host's running serve's delta watch (found as the
//!   console finds it: `serve.lock`, the host lock, the default address), relayed as the
//!   same server-sent events `GET /v1/watch?deltas=1` sends, with the token the SSH user
//!   can read from the data directory;
//! - `gpuboard telemetry --stdio`: this host's GPUs sampled through NVML every interval,
//!   each round one snapshot of JSON a line (a node with its devices' telemetry and
//!   processes, and the host), or an empty line when it reads as the last one did; with
//!   no NVML it says why on stderr and fails;
//! - `gpuboard relay --request JSON`: one API request made to this host's serve with the
//!   operator token the SSH user can read, its answer printed as one JSON line
//!   (`client::Relayed`, `client::RelayAnswer`); `gpuboard relay --check` says whether that
//!   token can be read (`ok USER`, or `read-only: WHY`).

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use clap::Args;
use futures::StreamExt as _;
use tokio::io::AsyncWriteExt as _;

use super::attach::{self, Credentials};
use crate::client::{Client, RELAY_OK, RELAY_READ_ONLY, RelayAnswer, Relayed, TlsTrust};
use crate::clock::{Clock as _, SystemClock, Timestamp};
use crate::endpoint::live::{self, LiveConfig, LiveRound};
use crate::snapshot::{DeviceView, EndpointInfo, NodeView, SCHEMA_VERSION, Snapshot};
use crate::telemetry::{BackendStatus, SamplerConfig, TelemetrySnapshot};
use crate::units::Bytes;
use crate::wire::SnapshotVersion;

/// `gpuboard watch`.
#[derive(Args, Debug)]
pub struct WatchArgs {
    /// Write the events to stdout (the form an SSH host's reader runs; required).
    #[arg(long, required = true)]
    pub stdio: bool,
    /// Resume after this version (`EPOCH.SEQ`, as the HTTP watch's `since`).
    #[arg(long, value_name = "VERSION")]
    pub since: Option<String>,
    /// Relay the figures form (`format=3`): telemetry as screens show it, without
    /// sparklines. Without it, the per-project form (`format=2`) a console from before
    /// the figures form reads.
    #[arg(long)]
    pub figures: bool,
    /// Data directory of this host's serve (its serve.lock and tokens).
    #[arg(long, env = "GPUBOARD_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

/// `gpuboard telemetry`.
#[derive(Args, Debug)]
pub struct TelemetryArgs {
    /// Write the rounds to stdout (the form an SSH host's reader runs; required).
    #[arg(long, required = true)]
    pub stdio: bool,
    /// Seconds between rounds (1 to 3600).
    #[arg(long, value_name = "SECONDS", default_value_t = 2)]
    pub interval: u64,
    /// Rounds to print before exiting (default: until stdout is closed).
    #[arg(long)]
    pub count: Option<u64>,
    /// NVML library to load instead of the driver's libnvidia-ml.so.1 (a path).
    #[arg(
        long,
        alias = "nvml-library",
        env = "GPUBOARD_NVML_LIBRARY",
        value_name = "PATH"
    )]
    pub nvml_lib: Option<PathBuf>,
}

/// `gpuboard relay`.
#[derive(Args, Debug)]
pub struct RelayArgs {
    /// Say whether this host's serve can be acted on with the operator token this user can
    /// read: `ok USER@HOST`, or `read-only: WHY`.
    #[arg(long, conflicts_with = "request")]
    pub check: bool,
    /// One API request as JSON (`method`, `path`, `body`, `key`, `move_id`), made to this
    /// host's serve; its answer is printed as one JSON line.
    #[arg(long, value_name = "JSON", required_unless_present = "check")]
    pub request: Option<String>,
    /// Data directory of this host's serve (its serve.lock and tokens).
    #[arg(long, env = "GPUBOARD_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

/// This host's serve, a client of it holding the operator token this user can read
/// (`GPUBOARD_TOKEN` first), or why there is none.
fn operator_client(dir: &std::path::Path) -> Result<Client, String> {
    let local = attach::local_serve(dir).ok_or_else(|| {
        format!(
            "no gpuboard serve runs on this host (none named by {}, none answering at the \
             default address)",
            dir.join(attach::SERVE_LOCK_FILE).display()
        )
    })?;
    if local.read_only {
        return Err(local.note);
    }
    let token = operator_token(&local, dir)?;
    let creds = Credentials {
        data_dir: dir.to_path_buf(),
        ..Credentials::default()
    }
    .for_local(&local);
    let trust = creds.trust(&local.url, &TlsTrust::default());
    Client::with_trust(&local.url, Some(token), Duration::from_mins(1), &trust)
        .map_err(|e| e.to_string())
}

/// The operator token of the serve at `local` as this user can read it: `GPUBOARD_TOKEN`,
/// else `operator.token` in the serve's own data directory (the host lock names it), else
/// in `dir`; the reason is the first directory's when neither can be read.
fn operator_token(local: &attach::LocalServe, dir: &std::path::Path) -> Result<String, String> {
    if let Some(t) = std::env::var("GPUBOARD_TOKEN")
        .ok()
        .filter(|t| !t.trim().is_empty())
    {
        return Ok(t.trim().to_string());
    }
    let mut first_error = None;
    for d in local.data_dir.iter().map(PathBuf::as_path).chain([dir]) {
        match crate::endpoint::auth::read_token_file(&crate::endpoint::auth::default_token_path(d))
        {
            Ok(t) => return Ok(t),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(format!(
        "{} cannot read the operator token of the serve at {}: {}",
        crate::identity::LocalUser::current().actor(),
        local.url,
        first_error.map_or_else(|| "none found".to_string(), |e| e.to_string())
    ))
}

/// `gpuboard relay`: `--check` says whether this host's serve can be acted on;
/// `--request` makes one request to it and prints the answer.
///
/// # Errors
/// A request that is not JSON of a relayed request; stdout closed.
pub fn relay(args: &RelayArgs) -> anyhow::Result<i32> {
    let dir = args
        .data_dir
        .clone()
        .unwrap_or_else(crate::store::claims::default_data_dir);
    let client = operator_client(&dir);
    let mut out = std::io::stdout().lock();
    let Some(request) = &args.request else {
        match client {
            Ok(_) => writeln!(
                out,
                "{RELAY_OK} {}",
                crate::identity::LocalUser::current().actor()
            )?,
            Err(why) => writeln!(out, "{RELAY_READ_ONLY} {why}")?,
        }
        return Ok(0);
    };
    let request: Relayed = serde_json::from_str(request)
        .map_err(|e| anyhow!("--request: not a relayed API request ({e})"))?;
    let answer = match client {
        Err(why) => RelayAnswer::ReadOnly { why },
        Ok(client) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(client.send_relayed(&request)),
    };
    writeln!(out, "{}", serde_json::to_string(&answer)?)?;
    Ok(0)
}

/// `gpuboard watch --stdio`: relays the local serve's watch until it or stdout closes.
///
/// # Errors
/// No serve runs here, its token cannot be read, it refuses the watch, or it closes it.
pub fn watch(args: &WatchArgs) -> anyhow::Result<i32> {
    let dir = args
        .data_dir
        .clone()
        .unwrap_or_else(crate::store::claims::default_data_dir);
    let since = args
        .since
        .as_deref()
        .map(str::parse::<SnapshotVersion>)
        .transpose()
        .map_err(|e| anyhow!("--since: {e}"))?;
    let local = attach::local_serve(&dir).ok_or_else(|| {
        anyhow!(
            "no gpuboard serve runs on this host (none named by {}, none answering at the \
             default address)",
            dir.join(attach::SERVE_LOCK_FILE).display()
        )
    })?;
    let creds = Credentials {
        env_token: std::env::var("GPUBOARD_TOKEN").ok(),
        data_dir: dir,
        ..Credentials::default()
    }
    .for_local(&local);
    let url = local.url.clone();
    let token = creds.token(&url).context("the local serve's token")?;
    let trust = creds.trust(&url, &TlsTrust::default());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let client = Client::with_trust(&url, token, Duration::from_secs(10), &trust)?;
        let mut bytes = client.watch_bytes(since, args.figures).await?;
        let mut out = tokio::io::stdout();
        while let Some(chunk) = bytes.next().await {
            let chunk = chunk?;
            // Written as it comes: the console reads each event as soon as it is sent.
            if out.write_all(&chunk).await.is_err() || out.flush().await.is_err() {
                // The console went away: nothing left to do.
                return Ok(0);
            }
        }
        Err(anyhow!("the serve at {url} closed the watch"))
    })
}

/// `gpuboard telemetry --stdio`: prints a round now and one every interval.
///
/// # Errors
/// A bad interval; no GPU telemetry here.
pub fn telemetry(args: &TelemetryArgs) -> anyhow::Result<i32> {
    if !(1..=3600).contains(&args.interval) {
        anyhow::bail!(
            "--interval {}: give whole seconds from 1 to 3600",
            args.interval
        );
    }
    let (mut core, first) = live::open_local(args.nvml_lib.as_deref(), SamplerConfig::default());
    if let BackendStatus::Unavailable { reason, .. } = &first.backend {
        anyhow::bail!("no GPU telemetry on this host: {reason}");
    }
    let host = live::hostname();
    let mut round = first;
    let mut printed = 0u64;
    let mut out = std::io::stdout().lock();
    // The last round written whole, and when.
    let mut last: Option<(Snapshot, std::time::Instant)> = None;
    loop {
        let snap = round_snapshot(round, &host);
        let quiet = last.as_ref().is_some_and(|(shown, at)| {
            at.elapsed() < Duration::from_millis(live::HOST_REFRESH_MS)
                && same_but_times(shown, &snap)
        });
        let written = if quiet {
            // Nothing to show changed: an empty line says the stream is alive.
            writeln!(out)
        } else {
            let line = serde_json::to_string(&snap)?;
            last = Some((snap, std::time::Instant::now()));
            writeln!(out, "{line}")
        };
        if written.and_then(|()| out.flush()).is_err() {
            // The console went away.
            return Ok(0);
        }
        printed += 1;
        if args.count.is_some_and(|c| printed >= c) {
            return Ok(0);
        }
        std::thread::sleep(Duration::from_secs(args.interval));
        round = core.round(SystemClock.now());
    }
}

/// Whether two rounds read the same but for their times and the host's figures (which
/// move every round: they are sent at least every `live::HOST_REFRESH_MS`, as a serve
/// does).
pub fn same_but_times(a: &Snapshot, b: &Snapshot) -> bool {
    let plain = |s: &Snapshot| {
        let mut s = s.clone();
        s.taken_at = Timestamp(0);
        s.host = None;
        for d in s.nodes.iter_mut().flat_map(|n| n.devices.iter_mut()) {
            if let Some(t) = d.telemetry.as_mut() {
                t.sampled_at = Timestamp(0);
            }
        }
        s
    };
    plain(a) == plain(b)
}

/// One round as a snapshot: this host's node, each device with its telemetry and
/// processes (no claims: nothing schedules here), and the host's figures.
pub fn round_snapshot(round: TelemetrySnapshot, host: &str) -> Snapshot {
    let spec = live::inventory(&round, host, Bytes(0));
    let mut snap = Snapshot {
        schema: SCHEMA_VERSION,
        endpoint: EndpointInfo {
            name: host.to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            kind: "telemetry".to_string(),
            policy: String::new(),
            actions: false,
            telemetry_note: None,
            warnings: Vec::new(),
            store_failed: None,
        },
        revision: 0,
        taken_at: Timestamp(round.fetched_unix_ms),
        nodes: vec![NodeView {
            name: host.to_string(),
            cpus_milli: None,
            cpus_allocated_milli: 0,
            devices: spec
                .devices
                .iter()
                .map(|d| DeviceView {
                    index: d.index,
                    model: d.model.clone(),
                    uuid: d.uuid.clone(),
                    memory_capacity: d.memory,
                    ..DeviceView::default()
                })
                .collect(),
        }],
        ..Snapshot::default()
    };
    let config = LiveConfig {
        coordination_file: None,
        ..LiveConfig::local(host)
    };
    let live_round = LiveRound::gather(round, &config);
    live::merge(&mut snap, &live_round, host, &BTreeSet::new());
    snap
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{DeviceTelemetry, HostView};

    fn round(at: u64, util: u32, cpu: f32) -> Snapshot {
        Snapshot {
            schema: SCHEMA_VERSION,
            taken_at: Timestamp(at),
            nodes: vec![NodeView {
                name: "h".into(),
                cpus_milli: None,
                cpus_allocated_milli: 0,
                devices: vec![DeviceView {
                    telemetry: Some(DeviceTelemetry {
                        sampled_at: Timestamp(at),
                        utilization_gpu: Some(util),
                        ..DeviceTelemetry::default()
                    }),
                    ..DeviceView::default()
                }],
            }],
            host: Some(HostView {
                hostname: "h".into(),
                cpu_pct: Some(cpu),
                cores: None,
                memory_used: None,
                memory_total: None,
                load1: None,
            }),
            ..Snapshot::default()
        }
    }

    #[test]
    fn a_round_that_reads_as_the_last_but_for_its_times_is_not_sent_again() {
        assert!(same_but_times(&round(1, 30, 5.0), &round(2, 30, 7.0)));
        assert!(!same_but_times(&round(1, 30, 5.0), &round(2, 31, 5.0)));
    }
}
