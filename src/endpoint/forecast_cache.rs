//! What the forecast routes keep between requests (`forecast`): the last forecast with its
//! revision and the hold-time table. Apart from the routes, so the state every route shares
//! (`api_state`) holds it without importing the routes back.

use std::sync::{Arc, Mutex, PoisonError};

use crate::clock::Timestamp;
use crate::forecast::HoldTimes;
use crate::wire::forecast::Forecast;

/// The last forecast and hold-time table, shared by the routes.
#[derive(Debug, Default)]
pub struct Forecasts {
    /// The durable revision it was computed at, and the forecast.
    pub(super) last: Mutex<Option<(u64, Arc<Forecast>)>>,
    /// When the table was built, and the table.
    pub(super) holds: Mutex<Option<(Timestamp, Arc<HoldTimes>)>>,
    /// One computation at a time: a second request waits and takes the first's answer.
    pub(super) busy: tokio::sync::Mutex<()>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
