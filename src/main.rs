//! The `gpuboard` command.

use clap::{Parser, Subcommand};

/// Share GPUs by memory and fraction, keep fair-share accounts, and operate it all from a terminal.
#[derive(Parser, Debug)]
#[command(name = "gpuboard", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Pick GPU indexes for a Flink worker (a drop-in discovery script).
    Discover(gpuboard::discovery::command::DiscoverArgs),
    /// Explain what GPUs this machine has and why none is seen.
    Doctor(gpuboard::doctor::DoctorArgs),
    /// Run the fair-share scheduler on a simulated clock over a scenario file.
    Simulate(gpuboard::simulate::SimulateArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Discover(args)) => gpuboard::discovery::command::run(args),
        Some(Command::Doctor(args)) => gpuboard::doctor::run(args),
        Some(Command::Simulate(args)) => gpuboard::simulate::run(args),
        None => Ok(0),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(error) => {
            eprintln!("gpuboard: {error:#}");
            std::process::exit(1);
        }
    }
}
