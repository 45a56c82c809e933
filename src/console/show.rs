//! `gpuboard show ID`: one claim's detail as text, the console's claim view drawn once
//! (as `gpuboard status --dump-screen claim:ID`), from the same sources as the console.

use clap::Args;

use super::ConsoleArgs;
use super::headless::{self, StatusArgs};

/// `gpuboard show`.
// clap turns these doc comments into `--help` text, where backticks would show.
#[allow(clippy::doc_markdown)]
#[derive(Args, Debug, Clone)]
pub struct ShowArgs {
    /// Claim id (`SOURCE/ID` where two sources have a claim of that id).
    pub id: String,
    /// Page size, COLSxROWS.
    #[arg(long, default_value = "120x40", value_name = "COLSxROWS")]
    pub size: String,
    /// Which sources to read: the same flags as the console.
    #[command(flatten)]
    pub console: ConsoleArgs,
}

/// Draws the claim's detail once; an unknown id is an error naming it.
pub fn run(before: &ConsoleArgs, args: &ShowArgs) -> anyhow::Result<()> {
    headless::parse_size(&args.size)?;
    let status = StatusArgs {
        once: true,
        json: false,
        dump_screen: Some(format!("claim:{}", args.id)),
        body_only: true,
        size: args.size.clone(),
        console: args.console.clone(),
    };
    // The claim's own words, without the `--dump-screen claim:ID` this borrows.
    headless::run(before, &status).map_err(|e| {
        let text = format!("{e:#}");
        let prefix = format!("--dump-screen claim:{}: ", args.id);
        match (text.strip_prefix(&prefix), e.is::<headless::NoSuchClaim>()) {
            (Some(why), true) => headless::NoSuchClaim(format!("show {}: {why}", args.id)).into(),
            (Some(why), false) => anyhow::anyhow!("show {}: {why}", args.id),
            (None, _) => e,
        }
    })
}
