//! `gpuboard completions SHELL`: a shell completion script for every subcommand and flag,
//! generated from the same clap tree that parses the command line (so it cannot drift).

use std::io::Write;

use clap::Args;
use clap_complete::Shell;

/// `gpuboard completions`.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell. Install, e.g. for bash:
    /// `gpuboard completions bash > /etc/bash_completion.d/gpuboard`; zsh: into a directory
    /// of $fpath as `_gpuboard`; fish: `~/.config/fish/completions/gpuboard.fish`.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Writes the completion script for `command` (the whole `gpuboard` tree) to stdout.
pub fn run(args: &CompletionsArgs, mut command: clap::Command) -> anyhow::Result<()> {
    let name = command.get_name().to_string();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(args.shell, &mut command, name, &mut out);
    out.flush()?;
    Ok(())
}
