use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// gpuboard: share GPUs by memory and fraction, keep fair-share accounts, operate from a terminal.
#[derive(Debug, Parser)]
#[command(name = "gpuboard", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the fair-share scheduler on a simulated clock over a scenario file.
    Simulate(gpuboard::simulate::SimulateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => gpuboard::simulate::run(args),
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
