//! The `gpuboard` binary: the console by default, and the endpoint and client subcommands.

use std::process::ExitCode;

use clap::Parser;

/// Share GPUs by memory and fraction, keep fair-share accounts, and operate it all from a terminal.
#[derive(Parser, Debug)]
#[command(name = "gpuboard", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<gpuboard::cli::Command>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(cmd) => gpuboard::cli::run(cmd),
        None => ExitCode::SUCCESS,
    }
}
