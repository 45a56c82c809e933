//! `gpuboard act ... --then-claim ENDPOINT [CLAIM FLAGS]`: a hand-over's last step, a
//! claim on a gpuboard endpoint of the config, with `gpuboard claim`'s flags, checked by
//! the endpoint's own validator before any step is sent.

use clap::Args;

use crate::request::ClaimRequest;
use crate::wire::ClaimDraft;

/// The claim that ends a hand-over.
#[derive(Args, Debug, Default)]
pub struct ThenClaimArgs {
    /// Last step: claim on this gpuboard endpoint (its name in the config) what the steps
    /// before freed; the claim flags below as for `gpuboard claim`.
    #[arg(long, value_name = "ENDPOINT", conflicts_with = "list")]
    pub then_claim: Option<String>,
    /// Whole GPUs, exclusive (nvidia.com/gpu).
    #[arg(long, requires = "then_claim")]
    pub gpus: Option<u32>,
    /// GPU memory (20GiB, 512Mi).
    #[arg(long, requires = "then_claim")]
    pub memory: Option<String>,
    /// A fraction of one GPU (0 < f < 1).
    #[arg(long, requires = "then_claim")]
    pub fraction: Option<f64>,
    /// CPU cores.
    #[arg(long, requires = "then_claim")]
    pub cpus: Option<f64>,
    /// Project to account.
    #[arg(long, requires = "then_claim")]
    pub project: Option<String>,
    /// Holder name (default: the user).
    #[arg(long, requires = "then_claim")]
    pub holder: Option<String>,
    /// Lease in seconds.
    #[arg(long, requires = "then_claim")]
    pub ttl: Option<u64>,
    /// Only this node.
    #[arg(long, requires = "then_claim")]
    pub node: Option<String>,
    /// Only these device indexes, comma-separated.
    #[arg(long, value_delimiter = ',', requires = "then_claim")]
    pub devices: Option<Vec<u32>>,
    /// Only this accelerator type.
    #[arg(long, requires = "then_claim")]
    pub accelerator: Option<String>,
    /// Queue when it does not fit now instead of failing.
    #[arg(long, requires = "then_claim")]
    pub wait: bool,
}

impl ThenClaimArgs {
    /// The validated request, the holder defaulting to `user`; the validator's words
    /// otherwise.
    pub(super) fn request(&self, user: Option<String>) -> Result<ClaimRequest, String> {
        ClaimDraft {
            memory: self.memory.clone(),
            fraction: self.fraction.map(|f| f.to_string()),
            gpus: self.gpus.map(|g| g.to_string()),
            cpus: self.cpus.map(|c| c.to_string()),
            accelerator_type: self.accelerator.clone(),
            project: self.project.clone(),
            holder: self.holder.clone().or(user),
            ttl: self.ttl.map(|t| t.to_string()),
            node: self.node.clone(),
            devices: self.devices.clone(),
            wait: self.wait,
            ..ClaimDraft::default()
        }
        .to_request(serde_json::Map::new())
        .map_err(|e| e.to_string())
    }
}
