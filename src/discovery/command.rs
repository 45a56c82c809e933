//! `gpuboard discover AMOUNT`: a drop-in for Flink's GPU discovery script. Prints the
//! chosen indexes comma-separated; exits 1 with a message when there are not enough.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};

use super::coordination::{self, CoordinationError, CoordinationOptions};
use super::script::parse_indexes;
use crate::telemetry::nvml::NvmlBackend;
use crate::telemetry::{BackendStatus, DeviceError, TelemetryBackend};

/// Arguments of `gpuboard discover`. Both Flink's shipped spellings and the FLIP's are
/// accepted.
#[derive(clap::Args, Debug, Clone)]
pub struct DiscoverArgs {
    /// How many GPUs to return (Flink passes `external-resource.gpu.amount` here).
    pub amount: u32,
    /// Coordinate with other workers through the coordination file; indexes of dead
    /// owners are taken over (Flink's shipped script).
    #[arg(long)]
    pub enable_coordination_mode: bool,
    /// The FLIP's spelling of coordination mode; dead owners are taken over only with
    /// `--check-dead`.
    #[arg(long)]
    pub privilege: bool,
    /// Take over indexes whose recorded owner process is dead.
    #[arg(long)]
    pub check_dead: bool,
    /// The shared coordination file (the FLIP calls it `--assign-file`).
    #[arg(
        long,
        visible_alias = "assign-file",
        value_name = "PATH",
        default_value = coordination::DEFAULT_COORDINATION_FILE
    )]
    pub coordination_file: PathBuf,
    /// Use these GPU indexes instead of asking NVML, e.g. `0,1,2,3`.
    #[arg(long, value_name = "LIST")]
    pub indexes: Option<String>,
    /// Record this pid as owner instead of the calling (parent) process.
    #[arg(long)]
    pub pid: Option<u32>,
    /// Load NVML from this file instead of the driver's `libnvidia-ml.so.1`.
    #[arg(
        long = "nvml-lib",
        alias = "nvml-library",
        env = "GPUBOARD_NVML_LIBRARY",
        value_name = "PATH"
    )]
    pub nvml_library: Option<PathBuf>,
    /// Longest wait for another process's lock on the coordination file, in seconds.
    #[arg(long, default_value_t = 30, value_name = "SECONDS")]
    pub lock_timeout: u64,
}

/// The GPUs NVML sees and can still talk to.
fn nvml_indexes(library: Option<&std::path::Path>) -> anyhow::Result<Vec<u32>> {
    let mut backend = NvmlBackend::open(library);
    if let BackendStatus::Unavailable { reason, .. } = backend.status() {
        bail!("no GPU is visible: {reason}");
    }
    let count = backend
        .device_count()
        .map_err(|e| anyhow::anyhow!("counting GPUs through NVML: {e}"))?;
    Ok((0..count)
        .filter(|i| !matches!(backend.device_info(*i), Err(DeviceError::Lost)))
        .collect())
}

/// Runs the command; the result is the process exit code.
pub fn run(args: DiscoverArgs) -> anyhow::Result<i32> {
    if args.amount == 0 {
        bail!("AMOUNT must be at least 1 (got 0)");
    }
    let visible = match &args.indexes {
        Some(list) => parse_indexes(list)
            .map_err(|problem| anyhow::anyhow!("--indexes `{list}`: {problem}"))?,
        None => nvml_indexes(args.nvml_library.as_deref())?,
    };
    let chosen = if args.enable_coordination_mode || args.privilege {
        let options = CoordinationOptions {
            file: args.coordination_file.clone(),
            take_over_dead: args.enable_coordination_mode || args.check_dead,
            owner_pid: args.pid.unwrap_or_else(std::os::unix::process::parent_id),
            lock_timeout: Duration::from_secs(args.lock_timeout),
        };
        match coordination::assign(&visible, args.amount, &options) {
            Ok(chosen) => chosen,
            Err(e @ CoordinationError::NotEnough { .. }) => {
                eprintln!("{e}");
                return Ok(1);
            }
            Err(e) => return Err(e).context("assigning GPUs"),
        }
    } else {
        if visible.len() < args.amount as usize {
            eprintln!(
                "{} Asked for {}, {} visible: {visible:?}",
                coordination::NOT_ENOUGH_MESSAGE,
                args.amount,
                visible.len()
            );
            return Ok(1);
        }
        visible[..args.amount as usize].to_vec()
    };
    let line = chosen
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    println!("{line}");
    Ok(0)
}
