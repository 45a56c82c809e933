//! The `gpuboard` command.

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
    /// Pick GPU indexes for a Flink worker (a drop-in discovery script).
    Discover(gpuboard::discovery::command::DiscoverArgs),
    /// Explain what GPUs this machine has and why none is seen.
    Doctor(gpuboard::doctor::DoctorArgs),
    /// Run the fair-share scheduler on a simulated clock over a scenario file.
    Simulate(gpuboard::simulate::SimulateArgs),
    /// Print every source's state once (--once --json), or draw a view as text (--dump-screen VIEW).
    Status(StatusArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Discover(args)) => gpuboard::discovery::command::run(args),
        Some(Command::Doctor(args)) => gpuboard::doctor::run(args),
        Some(Command::Simulate(args)) => gpuboard::simulate::run(args),
        Some(Command::Status(args)) => {
            gpuboard::console::headless::run(&cli.console, &args).map(|()| 0)
        }
        None => gpuboard::console::driver::run(&cli.console).map(|()| 0),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(error) => {
            eprintln!("gpuboard: {error:#}");
            std::process::exit(1);
        }
    }
}
