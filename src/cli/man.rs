//! `gpuboard man`: roff man pages generated from the clap tree, one for `gpuboard` and one
//! per subcommand (`gpuboard-serve(1)`, `gpuboard-project-share(1)`...).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;

/// `gpuboard man`.
#[derive(Args, Debug)]
pub struct ManArgs {
    /// Write every page (gpuboard.1, gpuboard-SUBCOMMAND.1...) into this directory, e.g.
    /// /usr/local/share/man/man1, instead of printing gpuboard(1) to stdout.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Prints gpuboard(1), or writes all the pages into `--out` and lists them.
pub fn run(args: &ManArgs, command: clap::Command) -> anyhow::Result<()> {
    let command = command.version(crate::cli::VERSION);
    match &args.out {
        None => {
            let mut out = std::io::stdout().lock();
            clap_mangen::Man::new(command).render(&mut out)?;
            out.flush()?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(command, dir)
                .with_context(|| format!("cannot write man pages into {}", dir.display()))?;
            let mut pages: Vec<String> = std::fs::read_dir(dir)?
                .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().to_string()))
                .filter(|n| n.starts_with("gpuboard") && n.ends_with(".1"))
                .collect();
            pages.sort();
            println!("wrote {} man pages into {}", pages.len(), dir.display());
        }
    }
    Ok(())
}
