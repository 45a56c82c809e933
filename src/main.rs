//! The `gpuboard` binary: the console by default, and the endpoint and client subcommands.

use clap::Parser;

/// Share GPUs by memory and fraction, keep fair-share accounts, and operate it all from a terminal.
#[derive(Parser, Debug)]
#[command(name = "gpuboard", version, about)]
struct Cli {}

fn main() {
    let _cli = Cli::parse();
}
