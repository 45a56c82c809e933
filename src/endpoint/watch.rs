//! `GET /v1/watch`: server-sent events as the state changes. Without `deltas=1`, the
//! original revision feed (`audit`, `revision`, `resync` events). With it, the delta watch
//! of docs/api.md, "Watch with deltas": a `snapshot`, then one `delta` per version (from
//! the shared ring, never recomputed per watcher), `resync` when `since` cannot be
//! resumed, and a `heartbeat` whenever nothing else was sent for a while; with
//! `deflate=1`, all of it as one deflate stream (`wire::deflate`).
//!
//! The ring holds deltas in the per-project form (`snapshot::diff`). A watcher that did
//! not ask for it (`format=2`, a console from before it) is never sent a change it cannot
//! read: a run of deltas holding one becomes one delta from its version to the current
//! one in the whole-list form (`snapshot::to_whole_lists`); other runs go as stored. A
//! watcher of the third form (`format=3`) gets each delta's figures form when it has one
//! (`snapshot::with_figures`: devices and claims whose telemetry figures alone changed, as
//! those figures). A per-project watcher that asked `telemetry_ms=N` gets a run of
//! telemetry-only versions at most every N ms, as one delta from the version it has
//! (`snapshot::diff`, or `snapshot::diff_figures` for the third form).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt as _};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::endpoint::api_error::ApiError;
use crate::endpoint::api_state::ApiState;
use crate::endpoint::engine::{Engine, StateKeyWatch};
use crate::endpoint::versions::StoredDelta;
use crate::endpoint::versions::{BuiltSnapshot, SnapshotVersions};
use crate::snapshot::{diff, diff_figures, to_whole_lists};
use crate::wire::deflate::{self, Deflater};
use crate::wire::paths::{DELTA_FORMAT, PER_PROJECT_FORMAT};
use crate::wire::{DeltaBody, HeartbeatBody, ResyncBody, SnapshotVersion, watch_events};

/// How long a watcher waits after a change before reading the new version, so a burst of
/// commits makes one version.
const COALESCE: Duration = Duration::from_millis(20);

#[derive(Deserialize)]
pub(crate) struct WatchQuery {
    since: Option<String>,
    deltas: Option<String>,
    format: Option<String>,
    deflate: Option<String>,
    telemetry_ms: Option<String>,
}

/// The slowest telemetry pace a watcher may ask for (`telemetry_ms`).
pub const TELEMETRY_MS_MAX: u64 = 60_000;

/// `telemetry_ms`: absent, or whole milliseconds up to `TELEMETRY_MS_MAX`.
fn telemetry_ms(value: Option<&str>) -> Result<Option<Duration>, ApiError> {
    let Some(v) = value else { return Ok(None) };
    match v.parse::<u64>() {
        Ok(ms) if ms <= TELEMETRY_MS_MAX => Ok(Some(Duration::from_millis(ms))),
        _ => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            format!(
                "`telemetry_ms` must be whole milliseconds from 0 to {TELEMETRY_MS_MAX}, not `{v}`"
            ),
        )),
    }
}

/// A flag's value: absent, `1`/`true` or `0`/`false`; anything else is refused (400) rather
/// than read as "off" and answered with a watch the client did not ask for.
fn flag(name: &str, value: Option<&str>) -> Result<bool, ApiError> {
    match value {
        None | Some("0" | "false") => Ok(false),
        Some("1" | "true") => Ok(true),
        Some(other) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            format!("`{name}` must be 1 or 0 (true or false), not `{other}`"),
        )),
    }
}

/// Both watches on one path: `deltas=1` (or `true`) picks the delta watch. A parameter it
/// cannot read is refused at once (400), never answered with a stream that stays silent.
pub(crate) async fn watch(State(st): State<ApiState>, Query(q): Query<WatchQuery>) -> Response {
    let checked = flag("deltas", q.deltas.as_deref()).and_then(|deltas| {
        let deflate = flag("deflate", q.deflate.as_deref())?;
        let form = match q.format.as_deref() {
            None | Some("1") => Form::WholeLists,
            Some(f) if f == PER_PROJECT_FORMAT => Form::PerProject,
            Some(f) if f == DELTA_FORMAT => Form::Figures,
            Some(other) => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_query",
                    format!(
                        "`format` must be 1, {PER_PROJECT_FORMAT} or {DELTA_FORMAT}, not `{other}`"
                    ),
                ));
            }
        };
        Ok((
            deltas,
            deflate,
            form,
            telemetry_ms(q.telemetry_ms.as_deref())?,
        ))
    });
    let (deltas, deflate, form, pace) = match checked {
        Ok(d) => d,
        Err(e) => return e.into_response(),
    };
    if deltas {
        let mut session =
            DeltaSession::new(Arc::clone(&st.versions), q.since.as_deref(), st.heartbeat);
        session.per_project = form != Form::WholeLists;
        session.figures = form == Form::Figures;
        // Merged runs are written in the per-project form: only its readers are paced.
        session.pace = pace.filter(|_| session.per_project);
        let stream = futures::stream::unfold(session, |mut s| async move {
            s.next().await.map(|ev| (Ok::<Event, Infallible>(ev), s))
        });
        let sse = Sse::new(stream).into_response();
        if deflate {
            return deflated(sse);
        }
        return sse;
    }
    match revisions(&st.engine, q.since.as_deref()) {
        Ok(sse) => sse.into_response(),
        Err(e) => e.into_response(),
    }
}

/// The form of the changes a delta watcher reads (`format`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// Whole project lists and headers (`format=1`, or none).
    WholeLists,
    /// Projects one by one and the short header (`format=2`).
    PerProject,
    /// The per-project form with telemetry figures (`format=3`).
    Figures,
}

/// One delta watcher: where it is, and what is queued for it.
struct DeltaSession {
    versions: Arc<SnapshotVersions>,
    changes: StateKeyWatch,
    /// The version the watcher has (`None`: it needs a snapshot).
    at: Option<SnapshotVersion>,
    queue: VecDeque<Event>,
    heartbeat: Duration,
    last_sent: Instant,
    /// The watcher reads per-project changes (`format=2` and later).
    per_project: bool,
    /// The watcher reads telemetry figures (`format=3`).
    figures: bool,
    /// Telemetry alone is sent at most this often (`telemetry_ms`): a run of versions
    /// that changed nothing else waits, then goes as one delta.
    pace: Option<Duration>,
    /// The version the watcher has, whole (what a merged delta is computed from).
    sent: Option<Arc<BuiltSnapshot>>,
    /// When telemetry was last sent.
    telemetry_sent: Instant,
}

impl DeltaSession {
    fn new(versions: Arc<SnapshotVersions>, since: Option<&str>, heartbeat: Duration) -> Self {
        let changes = versions.engine().state_changes();
        let mut session = DeltaSession {
            versions,
            changes,
            at: None,
            queue: VecDeque::new(),
            heartbeat,
            last_sent: Instant::now(),
            per_project: false,
            figures: false,
            pace: None,
            sent: None,
            telemetry_sent: Instant::now(),
        };
        match since.map(str::parse::<SnapshotVersion>) {
            None => {}
            Some(Ok(v)) => session.at = Some(v),
            Some(Err(e)) => session.resync(&e.to_string()),
        }
        session
    }

    /// The next event to send; `None` ends the stream (the snapshot could not be written).
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(ev) = self.queue.pop_front() {
                self.last_sent = Instant::now();
                return Some(ev);
            }
            let current = match self.versions.current().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!("cannot serialize the snapshot for a watcher: {e}");
                    return None;
                }
            };
            match self.at {
                None => self.send_snapshot(&current),
                Some(at) if at == current.version => {
                    let due = self.last_sent + self.heartbeat;
                    // Telemetry held back by its pace is built once the pace allows, even
                    // when no further round comes to wake the watcher.
                    let held = self.versions.telemetry_held_until().map(Instant::from_std);
                    let held = async move {
                        match held {
                            Some(at) => tokio::time::sleep_until(at).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        () = self.changes.changed() => tokio::time::sleep(COALESCE).await,
                        () = held => {}
                        // No `id:` line: the version is in the data, and the
                        // last id the watcher has is this one already (27 bytes a beat).
                        () = tokio::time::sleep_until(due) => self.queue.push_back(
                            event(watch_events::HEARTBEAT, None)
                                .data(json_text(&HeartbeatBody { version: at })),
                        ),
                    }
                }
                Some(at) => match self.versions.deltas(at, current.version) {
                    Ok(deltas) if self.per_project || !deltas.iter().any(|d| per_project(d)) => {
                        if let Some(due) = self.telemetry_due(&deltas) {
                            self.wait_for_pace(at, due).await;
                            continue;
                        }
                        self.send_deltas(at, deltas, &current);
                    }
                    Ok(deltas) => {
                        if let Some(json) = whole_lists(at, &deltas, &current) {
                            self.queue.push_back(
                                event(watch_events::DELTA, Some(current.version)).data(json),
                            );
                            self.at = Some(current.version);
                        } else {
                            self.resync("the changes could not be written for this reader");
                            self.send_snapshot(&current);
                        }
                    }
                    Err(gap) => {
                        self.resync(&gap.to_string());
                        self.send_snapshot(&current);
                    }
                },
            }
        }
    }

    /// When the run `deltas` may be sent, if it must wait for the watcher's pace: it
    /// changes telemetry alone and telemetry went out less than the pace ago.
    fn telemetry_due(&self, deltas: &[Arc<StoredDelta>]) -> Option<Instant> {
        let due = self.telemetry_sent + self.pace?;
        (deltas.iter().all(|d| d.telemetry_only) && due > Instant::now()).then_some(due)
    }

    /// Waits until `due`, another version or a heartbeat (with the version `at` the
    /// watcher has), whichever comes first.
    async fn wait_for_pace(&mut self, at: SnapshotVersion, due: Instant) {
        let beat = self.last_sent + self.heartbeat;
        tokio::select! {
            () = self.changes.changed() => tokio::time::sleep(COALESCE).await,
            () = tokio::time::sleep_until(due) => {}
            () = tokio::time::sleep_until(beat) => self.queue.push_back(
                event(watch_events::HEARTBEAT, None)
                    .data(json_text(&HeartbeatBody { version: at })),
            ),
        }
    }

    /// Queues the run `deltas` from `at` to `current`: as stored, or, for a paced watcher
    /// and a run of several, as one delta from the version it has.
    fn send_deltas(
        &mut self,
        at: SnapshotVersion,
        deltas: Vec<Arc<StoredDelta>>,
        current: &Arc<BuiltSnapshot>,
    ) {
        let merged = match &self.sent {
            Some(sent) if self.pace.is_some() && deltas.len() > 1 && sent.version == at => {
                let changes = if self.figures {
                    diff_figures(&sent.snapshot, &current.snapshot)
                } else {
                    diff(&sent.snapshot, &current.snapshot)
                };
                let body = DeltaBody {
                    from: at,
                    to: current.version,
                    changes,
                };
                serde_json::to_string(&body).ok()
            }
            _ => None,
        };
        // Whatever changed, the watcher now has the latest telemetry.
        self.telemetry_sent = Instant::now();
        match merged {
            Some(json) => self
                .queue
                .push_back(event(watch_events::DELTA, Some(current.version)).data(json)),
            None => {
                for d in deltas {
                    let json = match &d.figures_json {
                        Some(f) if self.figures => f,
                        _ => &d.json,
                    };
                    self.queue
                        .push_back(event(watch_events::DELTA, Some(d.to)).data(json));
                }
            }
        }
        self.at = Some(current.version);
        self.sent = Some(Arc::clone(current));
    }

    fn resync(&mut self, reason: &str) {
        let body = ResyncBody {
            reason: reason.to_string(),
        };
        self.queue
            .push_back(event(watch_events::RESYNC, None).data(json_text(&body)));
        self.at = None;
    }

    fn send_snapshot(&mut self, current: &Arc<BuiltSnapshot>) {
        // serde_json writes UTF-8; the check only avoids a panic path.
        let text = String::from_utf8_lossy(&current.json);
        self.queue
            .push_back(event(watch_events::SNAPSHOT, Some(current.version)).data(text.as_ref()));
        self.at = Some(current.version);
        self.sent = Some(Arc::clone(current));
        self.telemetry_sent = Instant::now();
    }
}

/// The event stream as one deflate stream, each event flushed whole (`wire::deflate`),
/// for a watcher that asked `deflate=1`. Still `text/event-stream`, so the gzip layer
/// leaves it be; the header tells the watcher to inflate it.
fn deflated(sse: Response) -> Response {
    let (mut parts, body) = sse.into_parts();
    parts
        .headers
        .insert(deflate::HEADER, HeaderValue::from_static("1"));
    let mut z = Deflater::default();
    let frames = body
        .into_data_stream()
        .map(move |chunk| chunk.map(|c| Bytes::from(z.frame(&c))));
    Response::from_parts(parts, Body::from_stream(frames))
}

/// Whether a stored delta holds a change only per-project readers know. In JSON written by
/// serde a string's quotes are escaped, so `"op":"project` appears only as an op.
fn per_project(d: &StoredDelta) -> bool {
    d.json.contains(r#""op":"project""#)
        || d.json.contains(r#""op":"project_removed""#)
        || d.json.contains(r#""op":"revision""#)
}

/// The run of `deltas` from `at` to `current` as one delta in the whole-list form (for a
/// reader from before per-project changes); `None` if a stored delta cannot be read back.
fn whole_lists(
    at: SnapshotVersion,
    deltas: &[Arc<StoredDelta>],
    current: &BuiltSnapshot,
) -> Option<String> {
    let mut changes = Vec::new();
    for d in deltas {
        let body: DeltaBody = serde_json::from_str(&d.json).ok()?;
        changes.extend(body.changes);
    }
    let body = DeltaBody {
        from: at,
        to: current.version,
        changes: to_whole_lists(changes, &current.snapshot),
    };
    serde_json::to_string(&body).ok()
}

fn event(name: &str, id: Option<SnapshotVersion>) -> Event {
    let ev = Event::default().event(name);
    match id {
        Some(v) => ev.id(v.to_string()),
        None => ev,
    }
}

fn json_text(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// The original watch: `audit` events after revision `since`, then `revision`.
fn revisions(
    engine: &Engine,
    since: Option<&str>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>> + use<>>, ApiError> {
    let rx = engine.subscribe();
    let now = *rx.borrow();
    let since = match since {
        None => now,
        Some(s) => s.parse::<u64>().map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_query",
                format!("`since` must be a revision (a whole number), not `{s}`"),
            )
        })?,
    };
    // Far past this endpoint's revision: not one it issued (another endpoint's revisions
    // are a few ahead at most, and answered with a resync).
    if since > now.saturating_mul(2).saturating_add(1_000_000) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            format!("`since` {since} is no revision of this endpoint (it is at {now})"),
        ));
    }
    let start = RevisionWatch {
        engine: engine.clone(),
        rx,
        last: since,
        queue: VecDeque::new(),
        hello: true,
    };
    let stream = futures::stream::unfold(start, |mut w| async move {
        loop {
            if let Some(ev) = w.queue.pop_front() {
                return Some((Ok(ev), w));
            }
            let committed = *w.rx.borrow_and_update();
            if w.hello || committed != w.last {
                w.fill(committed);
                continue;
            }
            if w.rx.changed().await.is_err() {
                return None;
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

struct RevisionWatch {
    engine: Engine,
    rx: watch::Receiver<u64>,
    last: u64,
    queue: VecDeque<Event>,
    hello: bool,
}

impl RevisionWatch {
    /// Queues the events from `last` to `committed`, then a `revision` event.
    fn fill(&mut self, committed: u64) {
        self.hello = false;
        let (events, gap) = self.engine.events_between(self.last, committed);
        // A `since` from the future (another endpoint's revision) or events no longer in
        // memory: the client must reload the snapshot.
        if gap || self.last > committed {
            self.queue.push_back(
                Event::default()
                    .event("resync")
                    .data(json!({"revision": committed}).to_string()),
            );
        } else {
            for e in events {
                let data = serde_json::to_string(&e).unwrap_or_default();
                self.queue.push_back(
                    Event::default()
                        .event("audit")
                        .id(e.revision.to_string())
                        .data(data),
                );
            }
        }
        self.queue.push_back(
            Event::default()
                .event("revision")
                .id(committed.to_string())
                .data(json!({"revision": committed}).to_string()),
        );
        self.last = committed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_telemetry_pace_is_whole_milliseconds_up_to_a_minute() {
        assert_eq!(telemetry_ms(None).unwrap(), None);
        assert_eq!(
            telemetry_ms(Some("5000")).unwrap(),
            Some(Duration::from_secs(5))
        );
        for bad in ["-1", "2.5", "60001", "soon"] {
            let e = telemetry_ms(Some(bad)).unwrap_err();
            assert!(format!("{e:?}").contains("telemetry_ms"), "{bad}: {e:?}");
        }
    }
}
