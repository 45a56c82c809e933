//! The `gpuboard` binary: the console by default, and the endpoint and client subcommands.

use std::process::ExitCode;

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
    /// Run the fair-share scheduler on a simulated clock over a scenario file.
    Simulate(gpuboard::simulate::SimulateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Simulate(args)) => gpuboard::simulate::run(args),
        None => Ok(0),
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
