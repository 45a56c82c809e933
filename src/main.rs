//! The `gpuboard` command: the console by default, the endpoint, its client, and tools.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use gpuboard::console::ConsoleArgs;
use gpuboard::console::headless::StatusArgs;

/// Share GPUs by memory and fraction, keep fair-share accounts, and operate it all from a terminal.
#[derive(Parser, Debug)]
#[command(name = "gpuboard", version = gpuboard::cli::VERSION, about)]
struct Cli {
    /// Console flags (with no subcommand the console opens).
    #[command(flatten)]
    console: ConsoleArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
#[allow(clippy::large_enum_variant)] // parsed once at start-up
enum Command {
    /// The endpoint and its client: serve, claim, release, move, ls, renew, cordon, project, run.
    #[command(flatten)]
    Endpoint(gpuboard::cli::Command),
    /// Pick GPU indexes for a Flink worker (a drop-in discovery script).
    Discover(gpuboard::discovery::command::DiscoverArgs),
    /// Explain what GPUs this machine has and why none is seen.
    Doctor(gpuboard::doctor::DoctorArgs),
    /// Run the fair-share scheduler on a simulated clock over a scenario file.
    Simulate(gpuboard::simulate::SimulateArgs),
    /// Print every source's state once (--once --json), or draw a view as text (--dump-screen VIEW).
    Status(StatusArgs),
    /// One claim's detail as text (the console's claim view, drawn once).
    Show(gpuboard::console::show::ShowArgs),
    /// Relay this host's serve's delta watch to stdout (--stdio): what a console reading
    /// this host over SSH runs.
    Watch(gpuboard::console::stdio::WatchArgs),
    /// Sample this host's GPUs through NVML, one snapshot of JSON a line on stdout
    /// (--stdio): what a console reading this host over SSH runs.
    Telemetry(gpuboard::console::stdio::TelemetryArgs),
    /// Make one API request to this host's serve with the operator token this user can
    /// read, printing its answer (--request JSON), or say whether it can (--check): what a
    /// console acting on this host over SSH runs.
    Relay(gpuboard::console::stdio::RelayArgs),
    /// Print a shell completion script (bash, zsh, fish...) covering every subcommand.
    Completions(gpuboard::cli::completions::CompletionsArgs),
    /// Print the man page, or write one per subcommand into a directory (--out DIR).
    Man(gpuboard::cli::man::ManArgs),
}

/// Reports and tables end quietly when their reader goes away (`gpuboard status | head`)
/// instead of panicking on a broken pipe. Only for commands that print and exit: the
/// endpoint and the console keep Rust's default, where a closed socket is an error value.
fn die_quietly_on_broken_pipe() {
    // SAFETY: called first thing in main, before any thread exists; SIG_DFL is always valid.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    gpuboard::client::install_crypto_provider();
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Some(
            Command::Status(_)
                | Command::Simulate(_)
                | Command::Doctor(_)
                | Command::Discover(_)
                | Command::Completions(_)
                | Command::Man(_)
                | Command::Show(_)
        )
    ) {
        die_quietly_on_broken_pipe();
    }
    let result = match cli.command {
        Some(Command::Endpoint(cmd)) => return gpuboard::cli::run(cmd),
        Some(Command::Discover(args)) => gpuboard::discovery::command::run(args),
        Some(Command::Doctor(args)) => gpuboard::cli::doctor_fleet::run(args),
        Some(Command::Simulate(args)) if args.backtest => gpuboard::cli::backtest::run(&args),
        Some(Command::Simulate(args)) => gpuboard::simulate::run(args),
        Some(Command::Status(args)) => {
            gpuboard::console::headless::run(&cli.console, &args).map(|()| 0)
        }
        Some(Command::Completions(args)) => {
            gpuboard::cli::completions::run(&args, Cli::command()).map(|()| 0)
        }
        Some(Command::Show(args)) => gpuboard::console::show::run(&cli.console, &args).map(|()| 0),
        Some(Command::Man(args)) => gpuboard::cli::man::run(&args, Cli::command()).map(|()| 0),
        Some(Command::Watch(args)) => gpuboard::console::stdio::watch(&args),
        Some(Command::Telemetry(args)) => gpuboard::console::stdio::telemetry(&args),
        Some(Command::Relay(args)) => gpuboard::console::stdio::relay(&args),
        None => gpuboard::console::driver::run(&cli.console).map(|()| 0),
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(error) => {
            eprintln!("gpuboard: {error:#}");
            ExitCode::from(gpuboard::exit::exit_code(&error))
        }
    }
}
