//! The `gpuboard` command.

use clap::{Parser, Subcommand};

/// Share GPUs by memory and fraction, keep fair-share accounts, and operate it all from a terminal.
#[derive(Parser, Debug)]
#[command(name = "gpuboard", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Pick GPU indexes for a Flink worker (a drop-in discovery script).
    Discover(gpuboard::discovery::command::DiscoverArgs),
    /// Explain what GPUs this machine has and why none is seen.
    Doctor(gpuboard::doctor::DoctorArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Discover(args) => gpuboard::discovery::command::run(args),
        Command::Doctor(args) => gpuboard::doctor::run(args),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(error) => {
            eprintln!("gpuboard: {error:#}");
            std::process::exit(1);
        }
    }
}
