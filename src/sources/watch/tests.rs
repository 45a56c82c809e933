//! The model and the watch task, driven by a scripted feed, a recording pace and a
//! manual clock: no sockets, no real time.

use std::collections::VecDeque;
use std::sync::Mutex;

use futures::stream;

use super::*;
use crate::clock::ManualClock;
use crate::snapshot::{HostView, NodeView, ProjectView, SnapshotChange, diff};

fn v(epoch: u64, seq: u64) -> SnapshotVersion {
    SnapshotVersion { epoch, seq }
}

fn snap(revision: u64, nodes: &[&str], projects: &[&str]) -> Snapshot {
    Snapshot {
        revision,
        nodes: nodes
            .iter()
            .map(|n| NodeView {
                name: (*n).to_string(),
                ..NodeView::default()
            })
            .collect(),
        projects: projects
            .iter()
            .map(|p| ProjectView {
                name: (*p).to_string(),
                ..ProjectView::default()
            })
            .collect(),
        ..Snapshot::default()
    }
}

fn a() -> Snapshot {
    snap(1, &["n1"], &["p"])
}
fn b() -> Snapshot {
    snap(2, &["n1", "n2"], &["p"])
}
fn c() -> Snapshot {
    snap(3, &["n2"], &["p", "q"])
}

fn full(s: Snapshot, version: SnapshotVersion) -> WatchEvent {
    WatchEvent::Snapshot {
        version,
        snapshot: Box::new(s),
    }
}

fn delta(old: &Snapshot, new: &Snapshot, from: SnapshotVersion, to: SnapshotVersion) -> WatchEvent {
    WatchEvent::Delta(DeltaBody {
        from,
        to,
        changes: diff(old, new),
    })
}

fn resync() -> WatchEvent {
    WatchEvent::Resync {
        reason: "other epoch".into(),
    }
}

/// A name, the events, the snapshot and version they make, and which asked to reconnect.
type Case = (
    &'static str,
    Vec<WatchEvent>,
    Option<Snapshot>,
    Option<SnapshotVersion>,
    Vec<bool>,
);

#[test]
fn the_model_follows_snapshots_deltas_and_resyncs() {
    let reconnect = |s: &Step| matches!(s, Step::Reconnect(_));
    let cases: Vec<Case> = vec![
        (
            "snapshot then deltas",
            vec![
                full(a(), v(7, 1)),
                delta(&a(), &b(), v(7, 1), v(7, 2)),
                delta(&b(), &c(), v(7, 2), v(7, 3)),
            ],
            Some(c()),
            Some(v(7, 3)),
            vec![false, false, false],
        ),
        (
            "resync replaces the model with the snapshot that follows",
            vec![full(a(), v(7, 1)), resync(), full(c(), v(8, 1))],
            Some(c()),
            Some(v(8, 1)),
            vec![false, false, false],
        ),
        (
            "a delta that does not follow asks to reconnect",
            vec![full(a(), v(7, 1)), delta(&b(), &c(), v(7, 2), v(7, 3))],
            Some(a()),
            Some(v(7, 1)),
            vec![false, true],
        ),
        (
            "a repeated delta changes nothing",
            vec![
                full(a(), v(7, 1)),
                delta(&a(), &b(), v(7, 1), v(7, 2)),
                delta(&a(), &b(), v(7, 1), v(7, 2)),
            ],
            Some(b()),
            Some(v(7, 2)),
            vec![false, false, false],
        ),
        (
            "a delta before any snapshot asks to reconnect",
            vec![delta(&a(), &b(), v(7, 1), v(7, 2))],
            None,
            None,
            vec![true],
        ),
        (
            "a heartbeat ahead of the model asks to reconnect",
            vec![
                full(a(), v(7, 1)),
                WatchEvent::Heartbeat { version: v(7, 1) },
                WatchEvent::Heartbeat { version: v(7, 2) },
            ],
            Some(a()),
            Some(v(7, 1)),
            vec![false, false, true],
        ),
    ];
    for (name, events, want, version, reconnects) in cases {
        let mut m = Model::default();
        let steps: Vec<Step> = events.into_iter().map(|e| m.apply(e)).collect();
        assert_eq!(m.snapshot, want, "{name}");
        assert_eq!(m.version, version, "{name}");
        assert_eq!(
            steps.iter().map(reconnect).collect::<Vec<_>>(),
            reconnects,
            "{name}: {steps:?}"
        );
    }
}

#[test]
fn the_same_snapshot_again_is_no_change() {
    let mut m = Model::default();
    assert_eq!(m.apply(full(a(), v(7, 1))), Step::Changed);
    assert_eq!(m.apply(full(a(), v(7, 1))), Step::Same);
    assert_eq!(m.apply(resync()), Step::Same);
    assert_eq!(
        m.since(),
        None,
        "a pending resync asks for a whole snapshot"
    );
}

#[test]
fn backoff_doubles_to_thirty_seconds_with_jitter() {
    let mut b = ReconnectDelay::default();
    let waits: Vec<u128> = (0..9).map(|_| b.next(0.0).as_millis()).collect();
    assert_eq!(
        waits,
        [
            500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000
        ]
    );
    b.reset();
    assert_eq!(b.next(0.5).as_millis(), 375);
    assert_eq!(b.next(0.999_999).as_millis(), 500);
}

/// One answer of the scripted feed to `watch`.
enum Connect {
    Refused(ClientError),
    /// A stream that ends after these items.
    Ends(Vec<Result<WatchEvent, ClientError>>),
    /// A stream that stays open (silent) after these events.
    Open(Vec<WatchEvent>),
}

/// A feed that answers from a script and records what it was asked; `done` is notified
/// when an open stream has delivered its events or the script ran out.
#[derive(Default)]
struct Script {
    connects: Mutex<VecDeque<Connect>>,
    polls: Mutex<VecDeque<Result<Conditional, ClientError>>>,
    since: Mutex<Vec<Option<SnapshotVersion>>>,
    known: Mutex<Vec<Option<SnapshotVersion>>>,
    done: Arc<Notify>,
}

impl Feed for Script {
    fn snapshot_if_changed(
        &self,
        known: Option<SnapshotVersion>,
    ) -> BoxFuture<'static, Result<Conditional, ClientError>> {
        self.known.lock().unwrap().push(known);
        let next = self.polls.lock().unwrap().pop_front();
        Box::pin(async move { next.expect("a poll beyond the script") })
    }
    fn watch(
        &self,
        since: Option<SnapshotVersion>,
    ) -> BoxFuture<'static, Result<super::super::feed::WatchStream, ClientError>> {
        self.since.lock().unwrap().push(since);
        let done = Arc::clone(&self.done);
        match self.connects.lock().unwrap().pop_front() {
            Some(Connect::Refused(e)) => Box::pin(async move { Err(e) }),
            Some(Connect::Ends(items)) => Box::pin(async move { Ok(stream::iter(items).boxed()) }),
            Some(Connect::Open(events)) => Box::pin(async move {
                let silent = stream::once(async move {
                    done.notify_one();
                    futures::future::pending::<Result<WatchEvent, ClientError>>().await
                });
                Ok(stream::iter(events.into_iter().map(Ok))
                    .chain(silent)
                    .boxed())
            }),
            None => {
                done.notify_one();
                Box::pin(futures::future::pending())
            }
        }
    }
}

/// Records the waits, waits for none of them.
#[derive(Default)]
struct Recorded(Mutex<Vec<Duration>>);

impl Pace for Recorded {
    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()> {
        self.0.lock().unwrap().push(d);
        Box::pin(async {})
    }
    fn jitter(&self) -> f64 {
        0.0
    }
}

struct Rig {
    mirror: Mirror,
    script: Arc<Script>,
    pace: Arc<Recorded>,
    clock: ManualClock,
}

fn rig(connects: Vec<Connect>, polls: Vec<Result<Conditional, ClientError>>) -> Rig {
    let script = Arc::new(Script {
        connects: Mutex::new(connects.into()),
        polls: Mutex::new(polls.into()),
        ..Script::default()
    });
    let pace = Arc::new(Recorded::default());
    let clock = ManualClock::new(Timestamp(1_000_000));
    let mirror = Mirror::new(
        "lab",
        Arc::clone(&script) as Arc<dyn Feed>,
        Box::new(|e: ClientError| Failure::Unreachable {
            sent: !e.never_sent(),
            detail: e.to_string(),
        }),
        Arc::new(clock.clone()),
        Arc::clone(&pace) as Arc<dyn Pace>,
    );
    Rig {
        mirror,
        script,
        pace,
        clock,
    }
}

impl Rig {
    /// Starts the task with a fetch, lets the script play out, then answers that fetch.
    async fn play(&self) -> Result<Fetched, Failure> {
        let first = self.mirror.fetch();
        tokio::time::timeout(Duration::from_secs(5), self.script.done.notified())
            .await
            .expect("the script did not play out");
        first.await
    }
    fn since(&self) -> Vec<Option<SnapshotVersion>> {
        self.script.since.lock().unwrap().clone()
    }
    fn waits(&self) -> Vec<u128> {
        self.pace
            .0
            .lock()
            .unwrap()
            .iter()
            .map(Duration::as_millis)
            .collect()
    }
}

fn shown(f: Result<Fetched, Failure>) -> Snapshot {
    match f {
        Ok(Fetched::Snapshot(s)) => *s,
        other => panic!("expected a snapshot, got {other:?}"),
    }
}

fn cut() -> ClientError {
    ClientError::Unreachable {
        endpoint: "http://lab:7420/".into(),
        detail: "connection reset".into(),
        sent: true,
    }
}

#[tokio::test]
async fn deltas_reach_the_fetch_once_then_unchanged() {
    let r = rig(
        vec![Connect::Open(vec![
            full(a(), v(7, 1)),
            delta(&a(), &b(), v(7, 1), v(7, 2)),
            WatchEvent::Heartbeat { version: v(7, 2) },
        ])],
        vec![],
    );
    assert_eq!(shown(r.play().await), b());
    assert_eq!(r.mirror.fetch().await, Ok(Fetched::Unchanged));
    assert_eq!(r.since(), [None]);
    tokio::time::timeout(Duration::from_secs(1), r.mirror.changed().notified())
        .await
        .expect("a change wakes the console");
}

/// A change of telemetry alone since the last fetch is answered as such, so the console
/// takes it without comparing; anything else since then, as a snapshot.
#[test]
fn what_changed_since_the_last_fetch_is_told_telemetry_or_not() {
    let r = rig(vec![], vec![]);
    let inner = &r.mirror.inner;
    let hear = |event: WatchEvent| {
        let step = inner.lock().model.apply(event);
        inner.heard(&step);
        step
    };
    let figures = |from, to, cpu: f32| {
        WatchEvent::Delta(DeltaBody {
            from,
            to,
            changes: vec![
                SnapshotChange::Revision {
                    revision: a().revision,
                    taken_at: Timestamp(5_000),
                },
                SnapshotChange::Host {
                    host: Some(HostView {
                        cpu_pct: Some(cpu),
                        ..HostView::default()
                    }),
                },
            ],
        })
    };
    let kind = |f: Result<Fetched, Failure>| match f {
        Ok(Fetched::Snapshot(_)) => "snapshot",
        Ok(Fetched::Telemetry(_)) => "telemetry",
        Ok(Fetched::Unchanged) => "unchanged",
        Err(e) => panic!("{e}"),
    };
    // The first answer is always a snapshot.
    assert_eq!(hear(full(a(), v(7, 1))), Step::Changed);
    assert_eq!(kind(deliver(&mut inner.lock())), "snapshot");
    assert_eq!(hear(figures(v(7, 1), v(7, 2), 10.0)), Step::Telemetry);
    assert_eq!(hear(figures(v(7, 2), v(7, 3), 20.0)), Step::Telemetry);
    assert_eq!(kind(deliver(&mut inner.lock())), "telemetry");
    assert_eq!(kind(deliver(&mut inner.lock())), "unchanged");
    // Figures, then a new revision: a snapshot.
    assert_eq!(hear(figures(v(7, 3), v(7, 4), 30.0)), Step::Telemetry);
    let now = inner.lock().model.snapshot.clone().unwrap();
    let mut next = b();
    next.host.clone_from(&now.host);
    assert_eq!(hear(delta(&now, &next, v(7, 4), v(7, 5))), Step::Changed);
    assert_eq!(kind(deliver(&mut inner.lock())), "snapshot");
    assert_eq!(inner.lock().model.snapshot.as_ref(), Some(&next));
}

#[tokio::test]
async fn a_cut_stream_reconnects_with_since_after_backoff() {
    let r = rig(
        vec![
            Connect::Ends(vec![
                Ok(full(a(), v(7, 1))),
                Ok(delta(&a(), &b(), v(7, 1), v(7, 2))),
                Err(cut()),
            ]),
            Connect::Refused(cut()),
            Connect::Open(vec![delta(&b(), &c(), v(7, 2), v(7, 3))]),
        ],
        vec![],
    );
    assert_eq!(shown(r.play().await), c());
    assert_eq!(r.since(), [None, Some(v(7, 2)), Some(v(7, 2))]);
    assert_eq!(r.waits(), [500, 1_000]);
}

#[tokio::test]
async fn a_resync_reloads_even_across_a_cut() {
    let r = rig(
        vec![
            Connect::Ends(vec![Ok(full(a(), v(7, 1)))]),
            Connect::Ends(vec![Ok(resync())]),
            Connect::Open(vec![full(c(), v(8, 1))]),
        ],
        vec![],
    );
    assert_eq!(shown(r.play().await), c());
    assert_eq!(r.since(), [None, Some(v(7, 1)), None]);
}

#[tokio::test]
async fn a_down_stream_is_an_error_naming_why_and_keeps_the_model() {
    let r = rig(vec![Connect::Ends(vec![Ok(full(a(), v(7, 1)))])], vec![]);
    let e = r.play().await.unwrap_err();
    assert!(e.to_string().contains("watch stream closed"), "{e}");
    assert_eq!(r.mirror.last(), Some(a()));
    let r = rig(vec![Connect::Refused(cut())], vec![]);
    let e = r.play().await.unwrap_err();
    assert!(e.to_string().contains("connection reset"), "{e}");
}

#[tokio::test]
async fn silence_past_three_heartbeats_is_an_error() {
    let r = rig(vec![Connect::Open(vec![full(a(), v(7, 1))])], vec![]);
    assert_eq!(shown(r.play().await), a());
    r.clock.advance_millis(29_000);
    assert_eq!(r.mirror.fetch().await, Ok(Fetched::Unchanged));
    r.clock.advance_millis(2_000);
    let e = r.mirror.fetch().await.unwrap_err();
    assert!(e.to_string().contains("silent for 31 s"), "{e}");
}

#[tokio::test]
async fn without_a_delta_watch_it_polls_conditionally() {
    let taken_later = Snapshot {
        taken_at: Timestamp(5),
        ..b()
    };
    let refusals = [
        ClientError::NotFound {
            detail: "no route".into(),
        },
        ClientError::Invalid {
            rule: None,
            rule_number: None,
            field: None,
            detail: "unknown parameter deltas".into(),
        },
    ];
    for refusal in refusals {
        let fresh = |s: Snapshot, version| {
            Ok(Conditional::Fresh {
                snapshot: Box::new(s),
                version,
            })
        };
        let r = rig(
            vec![Connect::Refused(refusal)],
            vec![
                fresh(a(), Some(v(7, 1))),
                Ok(Conditional::NotModified),
                fresh(b(), Some(v(7, 2))),
                fresh(b(), None),
                fresh(taken_later.clone(), None),
            ],
        );
        // The task stops after the refusal; the first fetch waits for it, then polls.
        let answers = vec![
            r.mirror.fetch().await,
            r.mirror.fetch().await,
            r.mirror.fetch().await,
            r.mirror.fetch().await,
            r.mirror.fetch().await,
        ];
        let want = vec![
            Ok(Fetched::Snapshot(Box::new(a()))),
            Ok(Fetched::Unchanged),
            Ok(Fetched::Snapshot(Box::new(b()))),
            Ok(Fetched::Unchanged),
            Ok(Fetched::Unchanged),
        ];
        assert_eq!(answers, want);
        assert_eq!(
            *r.script.known.lock().unwrap(),
            [None, Some(v(7, 1)), Some(v(7, 1)), Some(v(7, 2)), None]
        );
        assert_eq!(r.since(), [None], "one watch attempt, then polls");
    }
}
