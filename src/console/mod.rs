//! The operator console (ratatui + crossterm).
//!
//! One owner of state (`state::State`); every input is a `msg::Msg`; the pure
//! `update::update` changes the state and returns `msg::Effect`s; the `driver` performs
//! them (fetches, actions, quit) and draws with `views::draw` only when something changed,
//! at most `driver::FRAME_MS` apart. `headless` renders the same views without a terminal.

pub mod attach;
pub mod config;
pub mod driver;
pub mod fds;
pub mod flows;
pub mod forecast;
pub mod headless;
pub mod history;
pub mod keymap;
pub mod lists;
pub mod logging;
pub mod msg;
pub mod show;
pub mod state;
pub mod stdio;
pub mod theme;
pub mod time;
pub mod update;
pub mod usage;
pub mod views;
pub use crate::when;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use crate::client::TlsTrust;
use crate::clock::Clock;
use crate::sources::demo::{Demo, DemoWorld};
use crate::sources::embedded::Embedded;
use crate::sources::endpoint::Http;
use crate::sources::{EndpointConfig, Source, SourceKind};

/// The default refresh interval.
pub const DEFAULT_REFRESH_MS: u64 = 2_000;

/// The console's flags (also accepted by `gpuboard status`).
// clap turns these doc comments into `--help` text, where backticks would show.
#[allow(clippy::doc_markdown)]
#[derive(Args, Debug, Clone, Default)]
pub struct ConsoleArgs {
    /// Show the demo fleet with a synthetic workload instead of this machine.
    #[arg(long)]
    pub demo: bool,
    /// The demo with a frozen workload where only one GPU's telemetry moves (for measuring).
    #[arg(long, hide = true)]
    pub demo_quiet: bool,
    /// A gpuboard endpoint to read (repeatable), e.g. http://127.0.0.1:7420.
    #[arg(long = "endpoint", value_name = "URL")]
    pub endpoints: Vec<String>,
    /// A Ray dashboard to read (repeatable), e.g. http://head:8265; read-only.
    #[arg(long = "ray", value_name = "URL")]
    pub rays: Vec<String>,
    /// A Prometheus server with dcgm-exporter metrics (repeatable); read-only.
    #[arg(long = "prometheus", value_name = "URL")]
    pub prometheuses: Vec<String>,
    /// A slurmrestd to read (repeatable), e.g. http://slurm-head:6820; its JWT from
    /// SLURM_JWT, as Slurm's own tools take it.
    #[arg(long = "slurm", value_name = "URL")]
    pub slurms: Vec<String>,
    /// A BOINC client's GUI RPC to read (repeatable), e.g. 127.0.0.1:31416.
    #[arg(long = "boinc", value_name = "HOST:PORT")]
    pub boincs: Vec<String>,
    /// The GUI RPC password file of the --boinc clients (e.g.
    /// /var/lib/boinc-client/gui_rpc_auth.cfg).
    #[arg(long, value_name = "FILE")]
    pub boinc_password_file: Option<PathBuf>,
    /// A Kubernetes cluster to read through this kubeconfig (read-only).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The context of the Kubernetes cluster to read (with --kubeconfig, or kube's file).
    #[arg(long = "kube-context", value_name = "NAME")]
    pub kube_context: Option<String>,
    /// A host to read over SSH with nvidia-smi (repeatable): an ssh config alias, HOST,
    /// USER@HOST or USER@HOST:PORT; read-only.
    #[arg(long = "ssh", value_name = "HOST")]
    pub ssh: Vec<String>,
    /// A file of hosts to read over SSH, one a line (# comments); all-smi's host files too.
    #[arg(long = "ssh-hosts", value_name = "FILE")]
    pub ssh_hosts: Vec<PathBuf>,
    /// The ssh config file (ssh -F) for --ssh and --ssh-hosts (default: ~/.ssh/config).
    #[arg(long = "ssh-config", value_name = "FILE")]
    pub ssh_config: Option<PathBuf>,
    /// Config file (default: ~/.config/gpuboard/config.toml when it exists).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Theme: default, light, high-contrast, ansi16, mono, or a path to a theme file.
    #[arg(long)]
    pub theme: Option<String>,
    /// Refuse every action (claim, release, move, cordon, reset).
    #[arg(long)]
    pub readonly: bool,
    /// Seed of the demo workload.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Refresh interval in seconds (default 2).
    #[arg(long, value_name = "SECONDS")]
    pub refresh: Option<f64>,
    /// File holding the bearer token for --endpoint URLs (default: GPUBOARD_TOKEN, else
    /// operator.token in the data directory for an endpoint on this host, else the
    /// config's token_file).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Data directory of this host's endpoint (its tokens, certificate and serve.lock).
    #[arg(long, env = "GPUBOARD_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// SHA-256 fingerprint of https endpoints' certificate, as `gpuboard serve` printed it.
    #[arg(long, env = "GPUBOARD_TLS_FINGERPRINT", value_name = "SHA256")]
    pub tls_fingerprint: Option<String>,
    /// PEM file of CA certificates to trust for https endpoints.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Start rewound to TIME: 03:12 (today, local), -10m, 2026-11-25 03:12:30 (local),
    /// RFC 3339 or ms since the epoch; G returns to live.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub at: Option<String>,
}

/// Everything the console needs, resolved from flags and the config file.
pub struct Setup {
    /// The sources, in order.
    pub sources: Vec<Arc<dyn Source>>,
    /// The theme.
    pub theme: theme::Theme,
    /// The keymap.
    pub keymap: keymap::Keymap,
    /// Refresh interval, ms.
    pub refresh_ms: u64,
    /// Refuse actions.
    pub readonly: bool,
    /// Warnings to show once (bad theme, bad keymap...).
    pub warnings: Vec<String>,
    /// Start rewound to this time (`--at`).
    pub at: Option<crate::clock::Timestamp>,
    /// Node names the config says are one host (`[aliases]`).
    pub aliases: crate::physical::Aliases,
}

/// How often the console asks each endpoint for its telemetry: about twenty endpoints'
/// figures a second over the whole fleet, never more often than every 2 s (what an
/// endpoint sends at most) nor less than every 10 s: 2 s up to 40 endpoints, 5 s at 100.
pub fn telemetry_pace(sources: usize) -> Duration {
    let per_source = Duration::from_millis(50);
    per_source
        .saturating_mul(u32::try_from(sources).unwrap_or(u32::MAX))
        .clamp(Duration::from_secs(2), Duration::from_secs(10))
}

/// How often figures that changed alone are rebuilt and drawn (`driver::next_draw`): once a
/// second, as a sampler reads them, while each endpoint sends its own every 2 s; with more
/// endpoints, two fifths of their pace (`telemetry_pace`), at most every 2 s. At 100 hosts
/// each host's figures change every 5 s and the screen takes them every 2 s: a second
/// more, for half the frames.
pub fn telemetry_settle(sources: usize) -> Duration {
    telemetry_pace(sources)
        .mul_f64(0.4)
        .clamp(Duration::from_secs(1), Duration::from_secs(2))
}

/// Resolves flags and config into sources, theme and keymap.
pub fn setup(args: &ConsoleArgs, clock: Arc<dyn Clock>) -> anyhow::Result<Setup> {
    let cfg = world_config(args)?;
    let mut warnings = Vec::new();
    let refresh_ms = match args.refresh.or(cfg.refresh) {
        Some(s) if s.is_finite() && (0.1..=3600.0).contains(&s) => (s * 1000.0).round() as u64,
        Some(s) => anyhow::bail!("refresh = {s} s is out of range: give 0.1 to 3600 seconds"),
        None => DEFAULT_REFRESH_MS,
    };
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let theme_spec = args.theme.clone().or(cfg.theme.clone());
    let (theme, warn) = theme::load(theme_spec.as_deref(), no_color, &config::theme_dirs());
    warnings.extend(warn);
    let keymap = load_keymap(&cfg)?;
    let timeout = Duration::from_millis(refresh_ms.clamp(1_000, 10_000));
    let at = match &args.at {
        Some(text) => Some(
            when::parse_when(text, clock.now(), &jiff::tz::TimeZone::system())
                .with_context(|| format!("--at {text}"))?,
        ),
        None => None,
    };
    let mut sources: Vec<Arc<dyn Source>> = Vec::new();
    if args.demo || args.demo_quiet {
        let world = if args.demo_quiet {
            DemoWorld::quiet(args.seed)?
        } else {
            DemoWorld::new(args.seed)?
        };
        sources.push(Arc::new(Demo::new(world, Arc::clone(&clock))));
    }
    let creds = attach::Credentials {
        token_file: args.token_file.clone(),
        env_token: std::env::var("GPUBOARD_TOKEN").ok(),
        data_dir: args
            .data_dir
            .clone()
            .unwrap_or_else(crate::store::claims::default_data_dir),
        config_token_file: cfg.token_file.clone(),
        fingerprint: args
            .tls_fingerprint
            .clone()
            .or_else(|| cfg.tls_fingerprint.clone()),
        ca_file: args.tls_ca.clone().or_else(|| cfg.tls_ca.clone()),
    };
    let none = TlsTrust::default();
    // `--slurm` takes its JWT from `SLURM_JWT`, as scontrol's token does.
    let slurm_jwt = std::env::var("SLURM_JWT").ok().filter(|t| !t.is_empty());
    // One rule with the CLI (`sources::kind::chosen`): sources named on the command line
    // replace the config's; the config's are the world only when none is named. `--demo`
    // reads the config only when `--config` names it (`world_config`), so a demo never
    // reaches a real endpoint the operator did not add.
    // The endpoint this host's serve answers on has one name everywhere: `local`, as when
    // the console attaches to it by itself (and as `show` calls it).
    let local_url = (!args.endpoints.is_empty())
        .then(|| attach::local_serve(&creds.data_dir))
        .flatten()
        .map(|l| l.url);
    let mut named = named_sources(args, local_url.as_deref());
    named.extend(crate::sources::ssh::hosts::from_flags(
        &args.ssh,
        &args.ssh_hosts,
        args.ssh_config.as_deref(),
    )?);
    crate::sources::kind::check_names(&named)?;
    let world = crate::sources::kind::chosen(named, &cfg.world()?);
    let pace = telemetry_pace(world.len());
    for ep in &world {
        let jwt = slurm_jwt
            .clone()
            .filter(|_| ep.kind == SourceKind::Slurm && ep.token_file.is_none());
        sources.push(match jwt {
            Some(token) => crate::sources::connect(ep, Some(token), &none, timeout, Some(pace))?,
            None => engine_source(ep, &creds, timeout, pace)?,
        });
    }
    let mut attached_read_only = false;
    if sources.is_empty() {
        if let Some(local) = attach::local_serve(&creds.data_dir) {
            // The endpoint of this host holds the real claims: show those, never a
            // second, empty scheduler beside them.
            let url = &local.url;
            let own = creds.for_local(&local);
            let token = own.token(url).context("the local endpoint")?;
            let trust = own.trust(url, &none);
            sources.push(Arc::new(
                Http::with_trust("local", url, token, timeout, &trust, Some(pace))?
                    .with_note(local.note.clone()),
            ));
            if local.read_only {
                // Its source shows as down with the store's reason; say on the status line
                // too why nothing can be changed and why no scheduler was started instead.
                warnings.push(local.note.clone());
                attached_read_only = true;
            }
        } else {
            // Its own directory: a `gpuboard serve` may use the data directory itself.
            let dir = crate::store::claims::default_data_dir().join("embedded");
            sources.push(Arc::new(Embedded::local(Arc::clone(&clock), &dir)?));
        }
    }
    let kinds: Vec<SourceKind> = sources.iter().map(|s| s.kind()).collect();
    warnings.extend(fds::raise(&kinds));
    Ok(Setup {
        sources,
        theme,
        keymap,
        refresh_ms,
        readonly: args.readonly || attached_read_only,
        warnings,
        at,
        aliases: crate::physical::Aliases::new(&cfg.aliases),
    })
}

/// The config's keymap, else the built-in one.
fn load_keymap(cfg: &config::Config) -> anyhow::Result<keymap::Keymap> {
    let Some(p) = &cfg.keymap else {
        return Ok(keymap::Keymap::builtin());
    };
    let text = std::fs::read_to_string(p)
        .with_context(|| format!("cannot read keymap {}", p.display()))?;
    keymap::Keymap::parse(&text).with_context(|| format!("keymap {}", p.display()))
}

/// The sources the command line names, in the order the console lists them: endpoints,
/// Ray, Slurm, BOINC, Kubernetes, Prometheus. An endpoint at `local_url` (this host's
/// serve) is `local`, the others `ep1`, `ep2`...
fn named_sources(args: &ConsoleArgs, local_url: Option<&str>) -> Vec<EndpointConfig> {
    let mut named: Vec<EndpointConfig> = Vec::new();
    for (i, url) in args.endpoints.iter().enumerate() {
        let same = |l: &str| l.trim_end_matches('/') == url.trim_end_matches('/');
        let name = if local_url.is_some_and(same) {
            "local".to_string()
        } else {
            format!("ep{}", i + 1)
        };
        named.push(EndpointConfig::named(&name, url, SourceKind::Gpuboard));
    }
    for (i, url) in args.rays.iter().enumerate() {
        named.push(EndpointConfig::named(
            &format!("ray{}", i + 1),
            url,
            SourceKind::Ray,
        ));
    }
    for (i, url) in args.slurms.iter().enumerate() {
        named.push(EndpointConfig::named(
            &format!("slurm{}", i + 1),
            url,
            SourceKind::Slurm,
        ));
    }
    for (i, address) in args.boincs.iter().enumerate() {
        let mut ep = EndpointConfig::named(&format!("boinc{}", i + 1), address, SourceKind::Boinc);
        ep.token_file.clone_from(&args.boinc_password_file);
        named.push(ep);
    }
    if args.kubeconfig.is_some() || args.kube_context.is_some() {
        named.push(EndpointConfig::kubernetes(
            args.kubeconfig.clone(),
            args.kube_context.clone(),
        ));
    }
    for (i, url) in args.prometheuses.iter().enumerate() {
        let name = format!("prom{}", i + 1);
        named.push(EndpointConfig::named(&name, url, SourceKind::Prometheus));
    }
    named
}

/// The config the console's world is built from. `--demo` is the simulated fleet alone:
/// the default config file (with its endpoints) is read only when `--config` names it,
/// so a demo never reaches a real endpoint the operator did not add on the command line.
fn world_config(args: &ConsoleArgs) -> anyhow::Result<config::Config> {
    if (args.demo || args.demo_quiet) && args.config.is_none() {
        return Ok(config::Config::default());
    }
    config::Config::load(args.config.as_deref())
}

/// The source an entry names (`sources::connect`), with its token and trust: a gpuboard
/// endpoint's by the console's rules (its own `token_file` first), its watch asking for
/// telemetry every `pace`; an engine's from its `token_file`.
fn engine_source(
    ep: &EndpointConfig,
    creds: &attach::Credentials,
    timeout: Duration,
    pace: Duration,
) -> anyhow::Result<Arc<dyn Source>> {
    let mut token = ep.file_token()?;
    let mut trust = TlsTrust::default();
    if ep.kind == SourceKind::Gpuboard {
        if token.is_none() {
            token = creds
                .token(&ep.url)
                .with_context(|| format!("endpoint {}", ep.name))?;
        }
        trust = creds.trust(&ep.url, &ep.trust());
    }
    crate::sources::connect(ep, token, &trust, timeout, Some(pace))
}

/// The state for a setup's sources.
pub fn initial_state(setup: &Setup) -> state::State {
    let slots = setup
        .sources
        .iter()
        .map(|s| state::SourceSlot::new(s.name(), s.kind(), s.can_act(), s.note()))
        .collect();
    let mut st = state::State::new(
        slots,
        setup.keymap.clone(),
        setup.refresh_ms,
        setup.readonly,
    );
    st.operator = Some(crate::identity::LocalUser::current().user);
    st.physical.aliases = setup.aliases.clone();
    for w in &setup.warnings {
        st.push_log(w.clone());
        st.flash = Some(state::Flash {
            text: w.clone(),
            error: true,
            at: st.now,
        });
    }
    st
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_telemetry_pace_grows_with_the_fleet_within_2_to_10_s() {
        assert_eq!(telemetry_pace(1), Duration::from_secs(2));
        assert_eq!(telemetry_pace(40), Duration::from_secs(2));
        assert_eq!(telemetry_pace(100), Duration::from_secs(5));
        assert_eq!(telemetry_pace(1_000), Duration::from_secs(10));
    }

    #[test]
    fn figures_are_drawn_every_second_then_every_2_s_past_60_endpoints() {
        assert_eq!(telemetry_settle(1), Duration::from_secs(1));
        assert_eq!(telemetry_settle(50), Duration::from_secs(1));
        assert_eq!(telemetry_settle(60), Duration::from_millis(1_200));
        assert_eq!(telemetry_settle(100), Duration::from_secs(2));
        assert_eq!(telemetry_settle(1_000), Duration::from_secs(2));
    }
}
