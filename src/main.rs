//! The `gpuboard` binary: the console by default, and the endpoint and client subcommands.

use clap::{Parser, Subcommand};
use gpuboard::console::ConsoleArgs;
use gpuboard::console::headless::StatusArgs;

/// Share GPUs by memory and fraction, keep fair-share accounts, and operate it all from a terminal.
#[derive(Parser, Debug)]
#[command(name = "gpuboard", version, about)]
struct Cli {
    /// Console flags (with no subcommand the console opens).
    #[command(flatten)]
    console: ConsoleArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print every source's state once (--once --json), or draw a view as text (--dump-screen VIEW).
    Status(StatusArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match &cli.command {
        None => gpuboard::console::driver::run(&cli.console),
        Some(Command::Status(args)) => gpuboard::console::headless::run(&cli.console, args),
    }
}
