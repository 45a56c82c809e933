//! Messages into the console's `update`, and the effects it asks the driver to perform.

use ratatui::crossterm::event::KeyEvent;

use super::flows::FlowId;
use super::state::{ChartKey, JoinInput, SourceUsage, TrendPoints, UsageKey};
use crate::clock::Timestamp;
use crate::physical::PhysicalFleet;
use crate::placement::Allocation;
use crate::request::ClaimRequest;
use crate::sources::history::{AtTime, Sample};
use crate::sources::{Action, Failure, Fetched, Outcome};
use crate::wire::forecast::{Forecast, Preview, PreviewAction};
use crate::wire::history::{Direction, Target};

/// Everything that can happen to the console.
// An action (with its claim request) is moved through the channel once per operator
// action; boxing it would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Msg {
    /// A key was pressed.
    Key(KeyEvent),
    /// The terminal changed size.
    Resize {
        /// Columns.
        width: u16,
        /// Rows.
        height: u16,
    },
    /// Time passed; the console's notion of now.
    Tick(Timestamp),
    /// A source answered a fetch.
    Fetched {
        /// The source's position.
        source: usize,
        /// When the fetch completed.
        at: Timestamp,
        /// The snapshot (or that nothing changed), or why not.
        result: Result<Fetched, Failure>,
    },
    /// Several sources answered their fetches together (at `at`): one message for a
    /// thousand hosts' answers to one round, in the order they came.
    FetchedMany {
        /// When the last of them completed.
        at: Timestamp,
        /// Each source's position and its answer.
        results: Vec<(usize, Result<Fetched, Failure>)>,
    },
    /// A source reported that its data changed: fetch it now.
    Changed(usize),
    /// The physical-GPU join asked for (`Effect::Join`) is done.
    Joined(Box<PhysicalFleet>),
    /// A source answered a placement preview.
    Planned {
        /// The source.
        source: usize,
        /// Where the claim would go, or why it would not fit.
        result: Result<Allocation, Failure>,
    },
    /// A source carried out (or refused) an action (`Effect::Act`, `Effect::ActInMove`,
    /// `Effect::Claim`).
    Acted {
        /// The source.
        source: usize,
        /// What was asked.
        action: Action,
        /// Who waits for it, as the effect said: the result goes to that one alone.
        asker: Asker,
        /// What happened.
        result: Result<Outcome, Failure>,
    },
    /// A source answered (or not) when sent a claim again with its idempotency key
    /// (`Effect::Recheck`): what its first send did, or no definite answer in time.
    Rechecked {
        /// The source.
        source: usize,
        /// The attempt id (`gpuboard.attempt`).
        attempt: String,
        /// Who waits for it, as the effect said.
        asker: Asker,
        /// The claim it placed (or queued), its refusal, or why no answer came (still
        /// `Failure::InFlight` or silent when the time ran out).
        result: Result<Outcome, Failure>,
    },
    /// A line from the console's own log.
    Log(String),
    /// A signal asking the console to stop (SIGHUP, SIGTERM).
    Signal(String),
    /// The terminal's input is gone (EOF or EIO after an SSH drop).
    InputClosed(String),
    /// A source's history answered (`Effect::History`).
    History(HistoryAnswer),
    /// A source's report for the Usage view answered (`Effect::Usage`).
    Usage(UsageAnswer),
    /// A source's forecast answered (`Effect::Forecast`); `None`: the source gives none.
    Forecast {
        /// The source.
        source: usize,
        /// Every waiting claim's expected start, or why not.
        result: Option<Result<Forecast, Failure>>,
    },
    /// A source's preview of an action answered (`Effect::Preview`); `None`: the source
    /// cannot preview.
    Previewed {
        /// The source.
        source: usize,
        /// What was asked (the dialog still showing it takes the answer).
        action: PreviewAction,
        /// What the action would do, or why not.
        result: Option<Box<Result<Preview, Failure>>>,
    },
}

/// Who waits for an action's answer: named when the action is sent and carried back with
/// the answer, so the answer goes to that one alone (never guessed from which source
/// answered what).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asker {
    /// The operator, from a confirmation or the move picker: the answer is said, and the
    /// dialog it came from closed (or shown its refusal).
    Operator,
    /// The claim form: a refusal may send it to the next source, a lost answer is asked
    /// for again.
    Form,
    /// Step `step` of the flow `flow` (`flows::Flows`): the answer goes to that flow alone,
    /// and is only logged once the flow is over.
    Flow {
        /// The flow's id.
        flow: FlowId,
        /// Which of its sends, in the flow's own numbering (a hand-over's step position,
        /// a move's `MOVE_CLAIM` or `MOVE_RELEASE`).
        step: usize,
    },
}

/// Work for the driver: the only way `update` reaches the outside world.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Fetch a snapshot from a source (the state already marked it in flight).
    Fetch(usize),
    /// Ask a source where a claim request would go.
    Plan {
        /// The source.
        source: usize,
        /// The validated request.
        request: ClaimRequest,
    },
    /// Ask a source to carry out an action; answered by `Msg::Acted` with `asker`.
    Act {
        /// The source.
        source: usize,
        /// The action.
        action: Action,
        /// Who waits for the answer.
        asker: Asker,
    },
    /// Ask a source to carry out one step of a move across sources, tagged with the
    /// move's id (both endpoints audit it); answered by `Msg::Acted` with `asker`.
    ActInMove {
        /// The source.
        source: usize,
        /// The action (the release on the claim's source, or a take-back on a target).
        action: Action,
        /// The move's id (`wire::move_actor`).
        move_id: String,
        /// Who waits for the answer (the move's flow, or the take-back's).
        asker: Asker,
    },
    /// Send a claim with an idempotency key (`placement::AttemptId::key`); answered by
    /// `Msg::Acted` with `asker`.
    Claim {
        /// The source.
        source: usize,
        /// The validated request (with its attempt label).
        request: ClaimRequest,
        /// The idempotency key.
        key: String,
        /// The move's id, when the claim is a move's new claim (the endpoint audits it).
        move_id: Option<String>,
        /// Who waits for the answer.
        asker: Asker,
    },
    /// Send a claim whose answer was lost (or was "in flight") again, with the same
    /// request and key, until the source answers what the first send did or `within`
    /// passes; answered by `Msg::Rechecked`.
    Recheck {
        /// The source.
        source: usize,
        /// The attempt id (`gpuboard.attempt`).
        attempt: String,
        /// The same request as the first send.
        request: ClaimRequest,
        /// The same idempotency key as the first send.
        key: String,
        /// The move's id, when the claim is a move's new claim.
        move_id: Option<String>,
        /// Who waits for the answer: the one that sent the claim first (a flow keeps its
        /// id), or the lost answer's own flow once the claim landed elsewhere.
        asker: Asker,
        /// How long to keep asking.
        within: std::time::Duration,
    },
    /// Ask a source's history (rewinding, charts); answered by `Msg::History`.
    History(HistoryAsk),
    /// Ask a source's report over a window (the Usage view); answered by `Msg::Usage`.
    Usage(UsageAsk),
    /// Ask a source for its waiting claims' expected starts; answered by `Msg::Forecast`.
    Forecast(usize),
    /// Ask a source what an action would do (a dialog opened); answered by
    /// `Msg::Previewed`.
    Preview {
        /// The source.
        source: usize,
        /// The action.
        action: PreviewAction,
    },
    /// Join every source's data into physical GPUs off the update step; answered by
    /// `Msg::Joined`.
    Join(Box<JoinInput>),
    /// Leave: restore the terminal and exit.
    Quit,
}

/// A question for one source's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HistoryAsk {
    /// Its state at a time.
    At {
        /// The source.
        source: usize,
        /// The rewind's ask number.
        generation: u64,
        /// The time.
        at: Timestamp,
    },
    /// Its next or previous change touching something.
    Seek {
        /// The source.
        source: usize,
        /// The rewind's ask number.
        generation: u64,
        /// From when.
        at: Timestamp,
        /// Which way.
        dir: Direction,
        /// What the change touches.
        what: Option<Target>,
    },
    /// A device's samples over a window.
    Telemetry {
        /// For the rewound state's charts (else the live one's).
        rewound: bool,
        /// The device and window.
        key: ChartKey,
    },
    /// Its figures at times, for the Overview's sparklines.
    Trend {
        /// The source.
        source: usize,
        /// For the rewound state's sparklines (else the live one's).
        rewound: bool,
        /// The times, oldest first.
        times: Vec<Timestamp>,
    },
}

/// What a source's history answered.
#[derive(Clone, Debug, PartialEq)]
pub enum HistoryAnswer {
    /// The state at a time.
    At {
        /// The source.
        source: usize,
        /// The ask it answers.
        generation: u64,
        /// The state, or why not; `None`: the source keeps no history.
        result: Option<Result<AtTime, Failure>>,
    },
    /// The change found.
    Sought {
        /// The source.
        source: usize,
        /// The ask it answers.
        generation: u64,
        /// Its time (`None`: no such change), or why not; `None` outside: no history.
        result: Option<Result<Option<Timestamp>, Failure>>,
    },
    /// A device's samples.
    Telemetry {
        /// For the rewound state's charts.
        rewound: bool,
        /// The device and window asked.
        key: ChartKey,
        /// The samples, or why not; `None`: the source keeps no history.
        result: Option<Result<Vec<Sample>, Failure>>,
    },
    /// Its figures at the times asked (`None` at a time before its history begins).
    Trend {
        /// The source.
        source: usize,
        /// For the rewound state's sparklines.
        rewound: bool,
        /// The figures, or why not; `None` outside: the source keeps no history.
        result: Option<Result<TrendPoints, Failure>>,
    },
}

/// A window's report asked of one source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsageAsk {
    /// The source.
    pub source: usize,
    /// For the rewound state's Usage view (else the live one's).
    pub rewound: bool,
    /// The window.
    pub key: UsageKey,
}

/// What the source said.
#[derive(Clone, Debug, PartialEq)]
pub struct UsageAnswer {
    /// The source.
    pub source: usize,
    /// For the rewound state's Usage view.
    pub rewound: bool,
    /// The window asked.
    pub key: UsageKey,
    /// Its answer.
    pub said: SourceUsage,
}
