//! The driver: owns the terminal, turns the outside world into messages, performs the
//! effects `update` returns, and draws when the state is dirty, at most once per frame.

use std::io::{self, Write};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event};
use ratatui::crossterm::terminal::{
    self, BeginSynchronizedUpdate, EndSynchronizedUpdate, EnterAlternateScreen,
    LeaveAlternateScreen,
};
use ratatui::crossterm::{cursor, execute};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::time::{Instant, MissedTickBehavior};

use crate::clock::{Clock, SystemClock};
use crate::sources::{Action, Failure, Fetched, Outcome, Source};

use super::msg::{Asker, Effect, Msg};
use super::state::State;
use super::theme::Theme;
use super::update::update;
use super::{ConsoleArgs, Setup, config, initial_state, logging, setup, views};

/// Minimum time between two frames (a 30 fps cap).
pub const FRAME_MS: u64 = 33;

/// Minimum time between two rebuilds after fetched snapshots (`State::settle`): while
/// answers stream in (a thousand hosts at start, a hundred changing every second) the
/// screen follows them four times a second; a key still settles and draws at once.
pub const SETTLE_MS: u64 = 250;

/// Undoes every terminal mode the console enables; idempotent, also run from the panic hook.
pub struct TerminalGuard {
    active: bool,
}

/// Restores the terminal: leave the alternate screen, show the cursor, cooked mode.
pub fn restore_terminal() {
    let mut out = io::stdout();
    let _ = execute!(
        out,
        EndSynchronizedUpdate,
        LeaveAlternateScreen,
        cursor::Show
    );
    let _ = terminal::disable_raw_mode();
    let _ = out.flush();
}

impl TerminalGuard {
    /// Enters raw mode and the alternate screen, and installs a panic hook that restores
    /// the terminal before the panic message is printed.
    pub fn enter() -> io::Result<TerminalGuard> {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore_terminal();
            previous(info);
        }));
        terminal::enable_raw_mode()?;
        let guard = TerminalGuard { active: true };
        execute!(io::stdout(), EnterAlternateScreen, cursor::Hide)?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        if self.active {
            self.active = false;
            restore_terminal();
        }
    }
}

/// Ends a synchronized update when dropped, so a failed draw never leaves the terminal
/// holding its output.
struct SyncGuard;

impl SyncGuard {
    fn begin() -> SyncGuard {
        let _ = execute!(io::stdout(), BeginSynchronizedUpdate);
        SyncGuard
    }
}

impl Drop for SyncGuard {
    fn drop(&mut self) {
        let _ = execute!(io::stdout(), EndSynchronizedUpdate);
    }
}

/// Reads the terminal on its own thread; a read error (EOF, EIO after an SSH drop) ends it.
fn spawn_input(tx: UnboundedSender<Msg>) {
    std::thread::spawn(move || {
        loop {
            let msg = match event::read() {
                Ok(Event::Key(k)) => Msg::Key(k),
                Ok(Event::Resize(width, height)) => Msg::Resize { width, height },
                Ok(_) => continue,
                Err(e) => {
                    let _ = tx.send(Msg::InputClosed(e.to_string()));
                    return;
                }
            };
            if tx.send(msg).is_err() {
                return;
            }
        }
    });
}

/// Forwards each source's change notices as `Msg::Changed`, so a change reaches the
/// screen without waiting for the next refresh (`update` keeps one fetch in flight).
fn spawn_change_watchers(sources: &[Arc<dyn Source>], tx: &UnboundedSender<Msg>) {
    for (i, src) in sources.iter().enumerate() {
        let Some(notify) = src.changed() else {
            continue;
        };
        let tx = tx.clone();
        tokio::spawn(async move {
            loop {
                notify.notified().await;
                if tx.send(Msg::Changed(i)).is_err() {
                    return;
                }
            }
        });
    }
}

fn spawn_signals(tx: &UnboundedSender<Msg>) -> io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    for (kind, name) in [
        (SignalKind::hangup(), "SIGHUP"),
        (SignalKind::terminate(), "SIGTERM"),
        (SignalKind::interrupt(), "SIGINT"),
    ] {
        let mut s = signal(kind)?;
        let tx = tx.clone();
        tokio::spawn(async move {
            if s.recv().await.is_some() {
                let _ = tx.send(Msg::Signal(name.to_string()));
            }
        });
    }
    Ok(())
}

/// Performs one effect; results come back as messages. `readonly` is checked here too:
/// whatever `update` asked, no action reaches a source in read-only mode.
// One arm per `Effect`, each spawning its call and sending the answer back: the driver's
// whole repertoire in one match, looked up by effect.
#[allow(clippy::too_many_lines)]
pub fn perform(
    effect: Effect,
    sources: &[Arc<dyn Source>],
    readonly: bool,
    timeout: Duration,
    clock: &Arc<dyn Clock>,
    tx: &UnboundedSender<Msg>,
) {
    let tx = tx.clone();
    let clock = Arc::clone(clock);
    match effect {
        Effect::Quit => {}
        // On the blocking pool: the join takes tens of milliseconds at thousands of GPUs,
        // and the update step waits for nothing.
        Effect::Join(input) => {
            tokio::task::spawn_blocking(move || {
                let _ = tx.send(Msg::Joined(Box::new(input.join())));
            });
        }
        Effect::History(ask) => super::history::perform(ask, sources, timeout, &tx),
        Effect::Usage(ask) => super::usage::perform(ask, sources, &tx),
        Effect::Forecast(source) => super::forecast::ask_forecast(source, sources, &tx),
        Effect::Preview { source, action } => {
            super::forecast::ask_preview(source, action, sources, &tx);
        }
        Effect::Fetch(i) => {
            let Some(src) = sources.get(i) else { return };
            let fut = src.fetch();
            tokio::spawn(async move {
                let result = bounded(fut, timeout).await;
                let _ = tx.send(Msg::Fetched {
                    source: i,
                    at: clock.now(),
                    result,
                });
            });
        }
        Effect::Claim {
            source,
            request,
            key,
            move_id,
            asker,
        } => {
            let Some(src) = sources.get(source) else {
                return;
            };
            let action = Action::Claim {
                request: request.clone(),
            };
            // The first send goes through the fleet protocol's endpoint, as its re-asks do.
            let asked = Asked {
                src: Arc::clone(src),
                move_id,
            };
            let run = move || -> BoxFuture<'static, Result<Outcome, Failure>> {
                Box::pin(async move {
                    crate::fleet::Endpoint::claim(&asked, &request, &key, timeout).await
                })
            };
            send_action(
                src.as_ref(),
                &action,
                run,
                readonly,
                timeout,
                &tx,
                (source, asker),
            );
        }
        Effect::Recheck {
            source,
            attempt,
            request,
            key,
            move_id,
            asker,
            within,
        } => {
            let Some(src) = sources.get(source) else {
                return;
            };
            // Whatever `update` asked, nothing reaches a source that may not act; the step
            // waiting on the answer still gets one.
            if readonly || !src.can_act() {
                let _ = tx.send(Msg::Rechecked {
                    source,
                    attempt,
                    asker,
                    result: Err(Failure::ReadOnly(format!(
                        "source {} does not accept actions",
                        src.name()
                    ))),
                });
                return;
            }
            let src = Arc::clone(src);
            tokio::spawn(async move {
                let result = resend(src, request, &key, move_id, within).await;
                let _ = tx.send(Msg::Rechecked {
                    source,
                    attempt,
                    asker,
                    result,
                });
            });
        }
        Effect::Plan { source, request } => {
            let Some(src) = sources.get(source) else {
                return;
            };
            let fut = src.plan(request);
            tokio::spawn(async move {
                let result = bounded(fut, timeout).await;
                let _ = tx.send(Msg::Planned { source, result });
            });
        }
        Effect::Act {
            source,
            action,
            asker,
        } => {
            let Some(src) = sources.get(source) else {
                return;
            };
            let step = action.clone();
            let run = move || src.act(step);
            send_action(
                src.as_ref(),
                &action,
                run,
                readonly,
                timeout,
                &tx,
                (source, asker),
            );
        }
        Effect::ActInMove {
            source,
            action,
            move_id,
            asker,
        } => {
            let Some(src) = sources.get(source) else {
                return;
            };
            let (step, id) = (action.clone(), move_id);
            let run = move || src.act_in_move(step, &id);
            send_action(
                src.as_ref(),
                &action,
                run,
                readonly,
                timeout,
                &tx,
                (source, asker),
            );
        }
    }
}

/// Fetches `ids`: the answers ready at once (a watched endpoint answers from its mirror)
/// are returned for the caller to take in the same pass, without a task or a message
/// each; the others go in one task, answering with one `Msg::FetchedMany` for every group
/// of answers ready together, so a slow source's answer still comes on its own when it
/// comes.
fn fetch_all(
    ids: Vec<usize>,
    sources: &[Arc<dyn Source>],
    timeout: Duration,
    clock: &Arc<dyn Clock>,
    tx: &UnboundedSender<Msg>,
) -> Vec<(usize, Result<Fetched, Failure>)> {
    use futures::FutureExt as _;
    use futures::stream::{FuturesUnordered, StreamExt as _};
    let mut ready = Vec::new();
    let mut pending = FuturesUnordered::new();
    for i in ids {
        let Some(src) = sources.get(i) else { continue };
        let mut fut = src.fetch();
        match (&mut fut).now_or_never() {
            Some(result) => ready.push((i, result)),
            None => pending.push(async move { (i, bounded(fut, timeout).await) }),
        }
    }
    if pending.is_empty() {
        return ready;
    }
    let (tx, clock) = (tx.clone(), Arc::clone(clock));
    tokio::spawn(async move {
        while let Some(first) = pending.next().await {
            let mut results = vec![first];
            while let Some(Some(more)) = pending.next().now_or_never() {
                results.push(more);
            }
            let msg = Msg::FetchedMany {
                at: clock.now(),
                results,
            };
            if tx.send(msg).is_err() {
                return;
            }
        }
    });
    ready
}

/// Sends a claim again with its key until the source answers what the first send did
/// (placed, queued or refused) or `within` passes (`fleet::reask`).
async fn resend(
    src: Arc<dyn Source>,
    request: crate::request::ClaimRequest,
    key: &str,
    move_id: Option<String>,
    within: Duration,
) -> Result<Outcome, Failure> {
    let asked = Asked { src, move_id };
    crate::fleet::reask(&asked, &request, key, within).await.1
}

/// A source as the fleet protocol's endpoint, its claims tagged with a move's id if any.
struct Asked {
    src: Arc<dyn Source>,
    move_id: Option<String>,
}

impl crate::fleet::Endpoint for Asked {
    type Answer = Result<Outcome, Failure>;

    fn claim(
        &self,
        request: &crate::request::ClaimRequest,
        key: &str,
        patience: Duration,
    ) -> impl std::future::Future<Output = Self::Answer> + Send {
        let fut = self.src.claim_keyed(
            request.clone(),
            key.to_string(),
            self.move_id.clone(),
            patience,
        );
        bounded(fut, patience)
    }

    fn pause(&self, pause: Duration) -> impl std::future::Future<Output = ()> + Send {
        tokio::time::sleep(pause)
    }

    fn now(&self) -> std::time::Instant {
        std::time::Instant::now()
    }
}

/// A source's answer, or `Failure::Timeout` once `within` has passed without one.
async fn bounded<T>(
    fut: impl std::future::Future<Output = Result<T, Failure>>,
    within: Duration,
) -> Result<T, Failure> {
    let ms = u64::try_from(within.as_millis()).unwrap_or(u64::MAX);
    tokio::time::timeout(within, fut)
        .await
        .unwrap_or(Err(Failure::Timeout(ms)))
}

/// Runs an action (the future `run` makes) under the timeout and answers `Msg::Acted` to
/// `asker` of `source`; refuses it without making it when the console is read-only or the
/// source cannot act.
fn send_action(
    src: &dyn Source,
    action: &Action,
    run: impl FnOnce() -> BoxFuture<'static, Result<Outcome, Failure>>,
    readonly: bool,
    timeout: Duration,
    tx: &UnboundedSender<Msg>,
    (source, asker): (usize, Asker),
) {
    let name = src.name().to_string();
    let reply = move |action, result| Msg::Acted {
        source,
        action,
        asker,
        result,
    };
    if readonly {
        tracing::warn!(actor = "console", action = action.verb(), target = %action.target(), source = %name, "refused: read-only");
        let _ = tx.send(reply(
            action.clone(),
            Err(Failure::ReadOnly(
                "the console was started with --readonly".to_string(),
            )),
        ));
        return;
    }
    if !src.can_act() && !matches!(action, Action::Engine(_)) {
        let _ = tx.send(reply(
            action.clone(),
            Err(Failure::ReadOnly(format!(
                "source {name} does not accept actions"
            ))),
        ));
        return;
    }
    let fut = run();
    let action = action.clone();
    let tx = tx.clone();
    tokio::spawn(async move {
        let result = bounded(fut, timeout).await;
        let user = crate::identity::LocalUser::current().actor();
        match &result {
            Ok(o) => {
                tracing::info!(actor = %user, action = action.verb(), target = %action.target(), source = %name, "{}", o.message());
            }
            Err(e) => {
                tracing::warn!(actor = %user, action = action.verb(), target = %action.target(), source = %name, "refused: {e}");
            }
        }
        let _ = tx.send(reply(action, result));
    });
}

/// Runs the console until the operator quits, a signal arrives or the terminal goes away.
pub fn run(args: &ConsoleArgs) -> anyhow::Result<()> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let setup = setup(args, Arc::clone(&clock))?;
    let (tx, rx) = unbounded_channel();
    let log_dir = config::log_dir();
    let _log_guard = match logging::start(&log_dir, tx.clone()) {
        Ok(g) => Some(g),
        Err(e) => {
            eprintln!("gpuboard: logging to {} is off: {e}", log_dir.display());
            None
        }
    };
    for w in &setup.warnings {
        tracing::warn!("{w}");
    }
    tracing::info!(
        sources = setup.sources.len(),
        readonly = setup.readonly,
        "console starting; log in {}",
        log_dir.display()
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(event_loop(setup, clock, tx, rx))
}

async fn event_loop(
    setup: Setup,
    clock: Arc<dyn Clock>,
    tx: UnboundedSender<Msg>,
    mut rx: UnboundedReceiver<Msg>,
) -> anyhow::Result<()> {
    let mut state: State = initial_state(&setup);
    state.physical.background.on = true;
    let theme: Theme = setup.theme.clone();
    let timeout = Duration::from_millis(setup.refresh_ms.clamp(1_000, 10_000));
    let guard = TerminalGuard::enter()?;
    let mut terminal = Terminal::new(CrosstermBackend::new(io::stdout()))?;
    terminal.clear()?;
    let size = terminal.size()?;
    state.size = (size.width, size.height);
    spawn_signals(&tx)?;
    spawn_input(tx.clone());
    spawn_change_watchers(&setup.sources, &tx);
    let perform_all = |effects: Vec<Effect>| {
        for effect in effects {
            perform(effect, &setup.sources, setup.readonly, timeout, &clock, &tx);
        }
    };
    if let Some(at) = setup.at {
        // Now first: a rewind never goes past it.
        let mut effects = update(&mut state, Msg::Tick(clock.now()));
        effects.extend(super::update::rewind_to(&mut state, at));
        perform_all(effects);
    }
    {
        let tx = tx.clone();
        let clock = Arc::clone(&clock);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(super::time::TICK_MS));
            every.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                if tx.send(Msg::Tick(clock.now())).is_err() {
                    return;
                }
            }
        });
    }
    let mut frames = Frames::new(super::telemetry_settle(setup.sources.len()));
    let mut trim = Trim::default();
    loop {
        let msg = if state.dirty {
            tokio::select! {
                m = rx.recv() => m,
                () = tokio::time::sleep_until(frames.next(&state)) => {
                    perform_all(frames.draw(&mut terminal, &mut state, &theme)?);
                    continue;
                }
            }
        } else {
            rx.recv().await
        };
        let Some(msg) = msg else { break };
        // Drain everything pending, then draw once.
        let mut batch = vec![msg];
        while let Ok(m) = rx.try_recv() {
            batch.push(m);
        }
        let mut effects = Vec::new();
        for m in batch {
            effects.extend(super::update::update_unsettled(&mut state, m));
        }
        // The fetches the batch asks for go out together (`fetch_all`); the rest one by
        // one. Those answered at once are taken now, and what they ask for is done in
        // turn (a second round at most: only a change reported while a fetch was in
        // flight fetches again, and no message is read meanwhile).
        loop {
            effects.extend(super::update::asks_due(&mut state));
            let mut fetches = Vec::new();
            for effect in effects.drain(..) {
                match effect {
                    Effect::Fetch(i) => fetches.push(i),
                    other => perform(other, &setup.sources, setup.readonly, timeout, &clock, &tx),
                }
            }
            let ready = fetch_all(fetches, &setup.sources, timeout, &clock, &tx);
            if ready.is_empty() {
                break;
            }
            let answered = Msg::FetchedMany {
                at: clock.now(),
                results: ready,
            };
            effects = super::update::update_unsettled(&mut state, answered);
        }
        if state.quit {
            break;
        }
        if trim.due(&state, Instant::now()) {
            release_freed();
        }
        if state.dirty && Instant::now() >= frames.next(&state) {
            perform_all(frames.draw(&mut terminal, &mut state, &theme)?);
        }
    }
    drop(terminal);
    drop(guard);
    tracing::info!("console stopped");
    Ok(())
}

/// When to give freed memory back (`release_freed`): once every source has answered or
/// failed (the load at start is over), then once a minute.
#[derive(Default)]
struct Trim {
    last: Option<Instant>,
}

impl Trim {
    fn due(&mut self, state: &State, now: Instant) -> bool {
        let due = match self.last {
            Some(last) => now.duration_since(last) >= Duration::from_mins(1),
            None => state
                .sources
                .iter()
                .all(|s| s.data.is_some() || s.error.is_some()),
        };
        if due {
            self.last = Some(now);
        }
        due
    }
}

/// Gives the blocks the allocator keeps freed back to the system. A console that loaded a
/// thousand endpoints' first snapshots at once keeps a quarter of its RSS in blocks freed
/// since: 222 MiB before a trim, 161 MiB after (docs/performance.md, "A thousand
/// endpoints").
fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointer; it only walks glibc's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The frames' pace: when the last was drawn and the last rebuild made.
struct Frames {
    last_draw: Instant,
    last_settle: Instant,
    /// The pace of rebuilds when only telemetry changed since the last
    /// (`State::settling`), however many hosts send theirs in between.
    telemetry_settle: Duration,
}

impl Frames {
    fn new(telemetry_settle: Duration) -> Frames {
        let now = Instant::now();
        Frames {
            last_draw: now - Duration::from_millis(FRAME_MS),
            last_settle: now - telemetry_settle,
            telemetry_settle,
        }
    }

    /// When the next frame may be drawn: a frame after the last, and when it must rebuild
    /// after answers, `SETTLE_MS` after the last rebuild (`telemetry_settle` when the
    /// answers brought telemetry alone).
    fn next(&self, state: &State) -> Instant {
        let at = self.last_draw + Duration::from_millis(FRAME_MS);
        if !state.unsettled {
            at
        } else if state.settling.all {
            at.max(self.last_settle + Duration::from_millis(SETTLE_MS))
        } else {
            at.max(self.last_settle + self.telemetry_settle)
        }
    }

    /// Settles and draws now (`draw_now`), noting when.
    fn draw(
        &mut self,
        terminal: &mut Terminal<CrosstermBackend<io::Stdout>>,
        state: &mut State,
        theme: &Theme,
    ) -> io::Result<Vec<Effect>> {
        if state.unsettled {
            self.last_settle = Instant::now();
        }
        let effects = draw_now(terminal, state, theme);
        self.last_draw = Instant::now();
        effects
    }
}

/// Settles and draws; answers what settling asks for (a background join) for the caller
/// to perform.
fn draw_now(
    terminal: &mut Terminal<CrosstermBackend<io::Stdout>>,
    state: &mut State,
    theme: &Theme,
) -> io::Result<Vec<Effect>> {
    let effects = super::update::settle(state);
    let _sync = SyncGuard::begin();
    terminal.draw(|f| views::draw(f, state, theme))?;
    state.dirty = false;
    Ok(effects)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::keymap::Keymap;
    use crate::console::state::SourceSlot;

    #[test]
    fn freed_memory_goes_back_once_loaded_then_once_a_minute() {
        let slot = |n: &str| SourceSlot::new(n, "gpuboard".parse().unwrap(), true, None);
        let mut state = State::new(vec![slot("a"), slot("b")], Keymap::builtin(), 2_000, false);
        let (mut trim, t0) = (Trim::default(), Instant::now());
        assert!(!trim.due(&state, t0), "both still loading");
        state.sources[0].data = Some(Arc::new(crate::snapshot::Snapshot::default()));
        assert!(!trim.due(&state, t0), "b still loading");
        state.sources[1].error = Some("refused".into());
        assert!(trim.due(&state, t0), "every source answered or failed");
        assert!(!trim.due(&state, t0 + Duration::from_secs(59)));
        assert!(trim.due(&state, t0 + Duration::from_mins(1)));
        assert!(!trim.due(&state, t0 + Duration::from_secs(61)));
    }
}
