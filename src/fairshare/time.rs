//! Time as the scheduler sees it: plain values handed in by the caller, so a simulation
//! can run a day of scheduling in milliseconds and tests never read a real clock.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// An absolute point in time in milliseconds: since the Unix epoch for a live endpoint,
/// since the start of the run for a simulation.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The time `secs` seconds after the origin.
    pub const fn from_secs(secs: u64) -> Timestamp {
        Timestamp(secs.saturating_mul(1000))
    }

    /// This time plus a span (saturating).
    pub fn after(self, span: Duration) -> Timestamp {
        let ms = u64::try_from(span.as_millis()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_add(ms))
    }

    /// The span from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// Seconds since the origin, for display and reports.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}s", self.as_secs_f64())
    }
}

/// (De)serializes a [`Duration`] as a number of seconds, the way operators write it.
pub mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    /// Writes the duration as fractional seconds.
    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(value.as_secs_f64())
    }

    /// Reads non-negative, finite seconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let value = f64::deserialize(deserializer)?;
        Duration::try_from_secs_f64(value).map_err(|_| {
            D::Error::custom(format!(
                "{value} is not a duration: give a finite, non-negative number of seconds"
            ))
        })
    }
}

/// Like [`secs`], for an optional duration.
pub mod opt_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    /// Writes the duration as fractional seconds, or nothing.
    pub fn serialize<S: Serializer>(
        value: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => serializer.serialize_some(&d.as_secs_f64()),
            None => serializer.serialize_none(),
        }
    }

    /// Reads non-negative, finite seconds, or nothing.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        match Option::<f64>::deserialize(deserializer)? {
            None => Ok(None),
            Some(value) => Duration::try_from_secs_f64(value).map(Some).map_err(|_| {
                D::Error::custom(format!(
                    "{value} is not a duration: give a finite, non-negative number of seconds"
                ))
            }),
        }
    }
}
