//! Headless modes from the same model: `gpuboard status --once --json` (every source's
//! snapshot with its health, versioned, numbers only) and `--dump-screen VIEW` (the real
//! view drawn into ratatui's `TestBackend`, printed as text).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use serde::Serialize;

use crate::clock::{Clock, SystemClock, Timestamp};
use crate::snapshot::{Snapshot, SourceWarning};
use crate::sources::Fetched;

use super::msg::Msg;
use super::state::{State, View};
use super::theme::Theme;
use super::update::update;
use super::{ConsoleArgs, initial_state, setup, views};

/// Version of the `status --json` document.
pub const STATUS_SCHEMA: u32 = 1;

/// `gpuboard status` flags.
// clap turns these doc comments into `--help` text, where backticks would show.
#[allow(clippy::doc_markdown)]
#[derive(Args, Debug, Clone)]
pub struct StatusArgs {
    /// Print once and exit (without it, print every refresh until interrupted).
    #[arg(long)]
    pub once: bool,
    /// JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Draw a view as text: overview, gpus, claims, fairshare, detail, events, usage, or claim:ID
    /// (one claim's detail; claim:SOURCE/ID where two sources have that id).
    #[arg(long, value_name = "VIEW", value_parser = view_name)]
    pub dump_screen: Option<String>,
    /// Only the view, without the tabs, key hints and status line, and without the blank
    /// rows below it (`gpuboard show`).
    #[arg(skip)]
    pub body_only: bool,
    /// Screen size for --dump-screen, COLSxROWS.
    #[arg(long, default_value = "120x40", value_name = "COLSxROWS", value_parser = size_text)]
    pub size: String,
    /// Which sources to read: the same flags as the console.
    #[command(flatten)]
    pub console: super::ConsoleArgs,
}

/// One source in the status document.
#[derive(Debug, Serialize)]
pub struct SourceStatus {
    /// Name.
    pub name: String,
    /// Kind.
    pub kind: String,
    /// `ok` or `down`.
    pub health: &'static str,
    /// The error, when down.
    pub error: Option<String>,
    /// Note (no GPUs, how to see the demo).
    pub note: Option<String>,
    /// Sections of the peer's answer that could not be read (the source stays `ok`).
    pub warnings: Vec<SourceWarning>,
    /// When the snapshot arrived, Unix ms.
    pub fetched_at: Option<u64>,
    /// Its snapshot, when it answered.
    pub snapshot: Option<Snapshot>,
    /// Every waiting claim's expected start (`--json`, from a gpuboard endpoint that has
    /// waiting claims; the endpoint's `GET /v1/forecast`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forecast: Option<crate::wire::forecast::Forecast>,
}

/// The status document.
#[derive(Debug, Serialize)]
pub struct Status {
    /// `STATUS_SCHEMA`.
    pub schema: u32,
    /// When it was made, Unix ms.
    pub generated_at: u64,
    /// Every source.
    pub sources: Vec<SourceStatus>,
    /// The sources' devices joined into physical GPUs, each with every engine's holders
    /// and its flags (double-booked, unexplained; idle once watched for long enough), and
    /// the devices that could not be matched.
    pub physical: crate::physical::PhysicalFleet,
}

/// Checks `--dump-screen` while the command line is read, so a wrong view is a usage
/// error (exit 2) like any other.
fn view_name(s: &str) -> Result<String, String> {
    match s.split_once(':') {
        // Which claims there are is known once the sources answered.
        Some(("claim" | "gpu", id)) if !id.is_empty() => Ok(s.to_string()),
        _ => View::parse(s).map(|_| s.to_string()).ok_or_else(|| {
            format!(
                "no view `{s}`; views: {}, claim:ID, gpu:NODE:IDX",
                View::ALL.map(View::name).join(", ")
            )
        }),
    }
}

/// Checks `--size` while the command line is read (exit 2 when wrong).
fn size_text(s: &str) -> Result<String, String> {
    parse_size(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// Parses `120x40`.
pub fn parse_size(s: &str) -> anyhow::Result<(u16, u16)> {
    let bad =
        || anyhow::anyhow!("size `{s}` must be COLSxROWS with each from 20 to 1000, e.g. 120x40");
    let (w, h) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let (w, h): (u16, u16) = (
        w.trim().parse().map_err(|_| bad())?,
        h.trim().parse().map_err(|_| bad())?,
    );
    if !(20..=1000).contains(&w) || !(5..=1000).contains(&h) {
        return Err(bad());
    }
    Ok((w, h))
}

/// The buffer's text, one line per row, trailing spaces trimmed.
pub fn buffer_text(buf: &Buffer) -> String {
    let mut out = String::new();
    for y in 0..buf.area.height {
        let mut line = String::new();
        for x in 0..buf.area.width {
            if let Some(c) = buf.cell((x, y)) {
                line.push_str(c.symbol());
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Draws the state into a `TestBackend` of this size.
pub fn render(state: &State, theme: &Theme, width: u16, height: u16) -> anyhow::Result<Buffer> {
    let mut term = Terminal::new(TestBackend::new(width, height))?;
    term.draw(|f| views::draw(f, state, theme))?;
    Ok(term.backend().buffer().clone())
}

/// The console flags `status` reads: those written after `status`, joined with those
/// written before it (`gpuboard --demo status` shows the demo): switches are on when
/// either has them, sources from both, a value after `status` wins.
pub fn merged_flags(before: &ConsoleArgs, after: &ConsoleArgs) -> ConsoleArgs {
    let join = |a: &Vec<String>, b: &Vec<String>| a.iter().chain(b).cloned().collect();
    ConsoleArgs {
        demo: before.demo || after.demo,
        demo_quiet: before.demo_quiet || after.demo_quiet,
        endpoints: join(&before.endpoints, &after.endpoints),
        rays: join(&before.rays, &after.rays),
        prometheuses: join(&before.prometheuses, &after.prometheuses),
        slurms: join(&before.slurms, &after.slurms),
        boincs: join(&before.boincs, &after.boincs),
        boinc_password_file: after
            .boinc_password_file
            .clone()
            .or_else(|| before.boinc_password_file.clone()),
        kubeconfig: after
            .kubeconfig
            .clone()
            .or_else(|| before.kubeconfig.clone()),
        kube_context: after
            .kube_context
            .clone()
            .or_else(|| before.kube_context.clone()),
        ssh: join(&before.ssh, &after.ssh),
        ssh_hosts: before
            .ssh_hosts
            .iter()
            .chain(&after.ssh_hosts)
            .cloned()
            .collect(),
        ssh_config: after
            .ssh_config
            .clone()
            .or_else(|| before.ssh_config.clone()),
        config: after.config.clone().or_else(|| before.config.clone()),
        theme: after.theme.clone().or_else(|| before.theme.clone()),
        readonly: before.readonly || after.readonly,
        // clap fills the default seed (42) in both: one that differs was written.
        seed: if after.seed == 42 {
            before.seed
        } else {
            after.seed
        },
        refresh: after.refresh.or(before.refresh),
        token_file: after
            .token_file
            .clone()
            .or_else(|| before.token_file.clone()),
        data_dir: after.data_dir.clone().or_else(|| before.data_dir.clone()),
        tls_fingerprint: after
            .tls_fingerprint
            .clone()
            .or_else(|| before.tls_fingerprint.clone()),
        tls_ca: after.tls_ca.clone().or_else(|| before.tls_ca.clone()),
        at: after.at.clone().or_else(|| before.at.clone()),
    }
}

pub use crate::exit::{NoSourceAnswered, NoSuchClaim};

/// `status --once` where no source answered: exit 6 when a token was refused, 1 when an
/// endpoint failed (HTTP 5xx), else 5 (unreachable, timed out, not a gpuboard endpoint).
fn no_source_answered(first: Option<crate::sources::Failure>) -> NoSourceAnswered {
    use crate::exit::{EXIT_AUTH, EXIT_UNREACHABLE};
    use crate::sources::Failure;
    let code = match &first {
        Some(Failure::Unauthorized(_)) => EXIT_AUTH,
        Some(Failure::Http { status, .. }) if *status >= 500 => 1,
        _ => EXIT_UNREACHABLE,
    };
    NoSourceAnswered {
        code,
        first: first.map(|f| f.to_string()),
    }
}

/// Runs `gpuboard status`; `before` are the console flags written before `status`.
pub fn run(before: &ConsoleArgs, args: &StatusArgs) -> anyhow::Result<()> {
    let console = &merged_flags(before, &args.console);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let setup = setup(console, Arc::clone(&clock))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let timeout = Duration::from_millis(setup.refresh_ms.clamp(1_000, 10_000));
    if let Some(view) = &args.dump_screen {
        let claim = view.strip_prefix("claim:");
        let gpu = view.strip_prefix("gpu:");
        let v = View::parse(view)
            .or(claim.map(|_| View::ClaimDetail))
            .or(gpu.map(|_| View::Detail))
            .ok_or_else(|| {
                crate::exit::UsageError(format!(
                    "no view `{view}`; views: {}, claim:ID, gpu:NODE:IDX",
                    View::ALL.map(View::name).join(", ")
                ))
            })?;
        let (w, h) = parse_size(&args.size)?;
        let mut state = initial_state(&setup);
        state.size = (w, h);
        let results = rt.block_on(fetch_all(&setup.sources, timeout, &clock));
        // A claim or GPU named where no source answered: the sources' fault, not the name's.
        let all_down = !results.is_empty() && results.iter().all(|(_, r)| r.is_err());
        let first_failure = results.iter().find_map(|(_, r)| r.as_ref().err().cloned());
        let named_fault = |why: String| -> anyhow::Error {
            if all_down {
                no_source_answered(first_failure.clone()).into()
            } else {
                NoSuchClaim(format!("--dump-screen {view}: {why}")).into()
            }
        };
        update(&mut state, Msg::Tick(clock.now()));
        for (i, (at, r)) in results.into_iter().enumerate() {
            update(
                &mut state,
                Msg::Fetched {
                    source: i,
                    at,
                    result: r,
                },
            );
        }
        match (claim, gpu) {
            (Some(name), _) => state.open_claim_named(name).map_err(named_fault)?,
            // A GPU several sources see: every engine's holders, as `:gpu` opens it.
            (_, Some(name))
                if !name.contains('/')
                    && state.physical_shared(name)
                    && state.open_physical_named(name).is_some() => {}
            (_, Some(name)) => state.open_gpu_named(name).map_err(named_fault)?,
            _ => super::update::show_view(&mut state, v),
        }
        let effects = if let Some(at) = setup.at {
            super::update::rewind_to(&mut state, at)
        } else {
            // Live: the waiting claims' expected starts and the sparklines' history too, as
            // the console asks them.
            let mut due = super::update::usage_due(&mut state);
            due.extend(super::update::asks_due(&mut state));
            due.extend(super::update::trends_due(&mut state));
            due
        };
        rt.block_on(settle(&mut state, &setup.sources, effects, timeout));
        if args.body_only {
            let mut term = Terminal::new(TestBackend::new(w, h))?;
            term.draw(|f| views::draw_body(f, &state, &setup.theme))?;
            let text = buffer_text(term.backend().buffer());
            println!("{}", text.trim_end_matches('\n'));
        } else {
            let buf = render(&state, &setup.theme, w, h)?;
            print!("{}", buffer_text(&buf));
        }
        return Ok(());
    }
    rt.block_on(print_status(&setup, args, timeout, &clock))
}

/// Prints the status once, or at every refresh until interrupted. Runs inside the runtime
/// throughout, so sources that follow their endpoint (the watch task) keep up between
/// prints; a source that answers `Unchanged` is shown with its last snapshot.
async fn print_status(
    setup: &super::Setup,
    args: &StatusArgs,
    timeout: Duration,
    clock: &Arc<dyn Clock>,
) -> anyhow::Result<()> {
    let mut last: Vec<Option<Snapshot>> = vec![None; setup.sources.len()];
    let mut idle = crate::physical::IdleClock::default();
    loop {
        let results = fetch_all(&setup.sources, timeout, clock).await;
        let mut first_failure = None;
        let mut status = Status {
            schema: STATUS_SCHEMA,
            generated_at: clock.now().0,
            sources: setup
                .sources
                .iter()
                .zip(results)
                .zip(last.iter_mut())
                .map(|((s, (at, r)), last)| {
                    let (snapshot, error) = match r {
                        Ok(Fetched::Snapshot(snap) | Fetched::Telemetry(snap)) => {
                            *last = Some(*snap);
                            (last.clone(), None)
                        }
                        Ok(Fetched::Unchanged) => (last.clone(), None),
                        Err(e) => {
                            let words = e.to_string();
                            first_failure.get_or_insert(e);
                            (None, Some(words))
                        }
                    };
                    SourceStatus {
                        name: s.name().to_string(),
                        kind: s.kind().to_string(),
                        health: if error.is_none() { "ok" } else { "down" },
                        error,
                        note: s.note(),
                        warnings: snapshot
                            .as_ref()
                            .map(|s| s.endpoint.warnings.clone())
                            .unwrap_or_default(),
                        fetched_at: snapshot.as_ref().map(|_| at.0),
                        snapshot,
                        forecast: None,
                    }
                })
                .collect(),
            physical: crate::physical::PhysicalFleet::default(),
        };
        status.physical = physical_of(&status, &setup.sources, &setup.aliases);
        idle.observe(&mut status.physical, clock.now());
        if args.json {
            add_forecasts(&mut status, &setup.sources, timeout).await;
        }
        if args.json {
            println!("{}", serde_json::to_string_pretty(&status)?);
        } else {
            print!("{}", table(&status));
        }
        if args.once {
            let down = status.sources.iter().all(|s| s.error.is_some());
            if down {
                return Err(no_source_answered(first_failure).into());
            }
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(setup.refresh_ms)).await;
    }
}

/// The answered sources' devices joined into physical GPUs.
fn physical_of(
    status: &Status,
    sources: &[Arc<dyn crate::sources::Source>],
    aliases: &crate::physical::Aliases,
) -> crate::physical::PhysicalFleet {
    let views: Vec<crate::physical::SourceView<'_>> = status
        .sources
        .iter()
        .zip(sources)
        .enumerate()
        .filter_map(|(i, (s, source))| {
            Some(crate::physical::SourceView {
                source: i,
                name: &s.name,
                engine: source.kind().gpu_engine(),
                snapshot: s.snapshot.as_ref()?,
            })
        })
        .collect();
    crate::physical::join(&views, aliases)
}

/// The expected starts of the sources that give them and have a waiting claim; a source
/// whose forecast cannot be read is left without one (its snapshot says the rest).
async fn add_forecasts(
    status: &mut Status,
    sources: &[Arc<dyn crate::sources::Source>],
    timeout: Duration,
) {
    for (s, source) in status.sources.iter_mut().zip(sources) {
        let waiting = s.snapshot.as_ref().is_some_and(|snap| {
            snap.claims
                .iter()
                .any(|c| c.state == crate::snapshot::ClaimState::Pending)
        });
        if let Some(ask) = source.forecast().filter(|_| waiting) {
            s.forecast = tokio::time::timeout(timeout, ask)
                .await
                .ok()
                .and_then(Result::ok);
        }
    }
}

/// Waits for the history, reports and forecasts `effects` ask (rewinding, the charts, the
/// Usage view, the waiting claims' starts) and for those their answers ask in turn.
pub async fn settle(
    state: &mut State,
    sources: &[Arc<dyn crate::sources::Source>],
    mut effects: Vec<super::msg::Effect>,
    timeout: Duration,
) {
    use super::msg::Effect;
    // Answers may ask again (the charts once the detail's device is known): a few rounds.
    for _ in 0..4 {
        let (mut history, mut usage, mut forecasts) = (Vec::new(), Vec::new(), Vec::new());
        for e in effects.drain(..) {
            match e {
                Effect::History(ask) => history.push(ask),
                Effect::Usage(ask) => usage.push(ask),
                Effect::Forecast(source) => forecasts.push(source),
                _ => {}
            }
        }
        if history.is_empty() && usage.is_empty() && forecasts.is_empty() {
            return;
        }
        for source in forecasts {
            let ask = sources.get(source).and_then(|s| s.forecast());
            let result = match ask {
                Some(fut) => Some(
                    tokio::time::timeout(super::forecast::FORECAST_TIMEOUT, fut)
                        .await
                        .unwrap_or(Err(crate::sources::Failure::Timeout(
                            u64::try_from(super::forecast::FORECAST_TIMEOUT.as_millis())
                                .unwrap_or(u64::MAX),
                        ))),
                ),
                None => None,
            };
            effects.extend(update(state, Msg::Forecast { source, result }));
        }
        let history = futures::future::join_all(history.into_iter().map(|ask| {
            let h = super::history::history_of(&ask, sources);
            super::history::answer(ask, h, timeout)
        }));
        let usage = futures::future::join_all(usage.into_iter().map(|ask| {
            let h = sources.get(ask.source).and_then(|s| s.history());
            super::usage::answer(ask, h, super::usage::REPORT_TIMEOUT)
        }));
        let (history, usage) = futures::future::join(history, usage).await;
        for a in history {
            effects.extend(update(state, Msg::History(a)));
        }
        for a in usage {
            effects.extend(update(state, Msg::Usage(a)));
        }
    }
}

async fn fetch_all(
    sources: &[Arc<dyn crate::sources::Source>],
    timeout: Duration,
    clock: &Arc<dyn Clock>,
) -> Vec<(Timestamp, Result<Fetched, crate::sources::Failure>)> {
    let limit = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let futs = sources.iter().map(|s| {
        let f = s.fetch();
        let clock = Arc::clone(clock);
        async move {
            let r = tokio::time::timeout(timeout, f)
                .await
                .unwrap_or(Err(crate::sources::Failure::Timeout(limit)));
            (clock.now(), r)
        }
    });
    futures::future::join_all(futs).await
}

/// A plain table of the sources and their totals.
pub fn table(status: &Status) -> String {
    let mut out =
        String::from("SOURCE       KIND      HEALTH  GPUS  CLAIMS  PENDING  MEM-ALLOC/CAP\n");
    for s in &status.sources {
        let (g, c, p, a, cap) = s.snapshot.as_ref().map_or((0, 0, 0, 0, 0), |d| {
            (
                d.devices().count(),
                d.claims.len(),
                d.claims
                    .iter()
                    .filter(|c| c.state == crate::snapshot::ClaimState::Pending)
                    .count(),
                d.devices().map(|(_, x)| x.memory_allocated.0).sum::<u64>(),
                d.devices()
                    .map(|(_, x)| x.memory_capacity.unwrap_or_default().0)
                    .sum::<u64>(),
            )
        });
        let _ = writeln!(
            out,
            "{:<12} {:<9} {:<7} {:>4}  {:>6}  {:>7}  {}/{}",
            s.name,
            s.kind,
            s.health,
            g,
            c,
            p,
            views::short_bytes(crate::units::Bytes(a)),
            views::short_bytes(crate::units::Bytes(cap)),
        );
        if let Some(e) = &s.error {
            let _ = writeln!(out, "  error: {e}");
        }
        if let Some(n) = &s.note {
            let _ = writeln!(out, "  note: {n}");
        }
        // Made-up figures say so here too, never passing for a GPU's.
        if let Some(d) = s.snapshot.as_ref().filter(|d| {
            d.devices()
                .any(|(_, x)| x.telemetry.as_ref().is_some_and(|t| t.simulated))
        }) {
            let note = d.endpoint.telemetry_note.as_deref().unwrap_or("SIMULATED");
            let _ = writeln!(out, "  telemetry: {note}");
        }
    }
    // What no one source can see: a GPU's flags across engines.
    for g in &status.physical.gpus {
        for f in &g.flags {
            let _ = writeln!(out, "GPU {}: {}", g.place(), f.describe(g));
        }
    }
    out
}
