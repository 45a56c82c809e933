//! Time as the scheduler sees it: plain values handed in by the caller, so a simulation
//! can run a day of scheduling in milliseconds and tests never read a real clock.

use std::time::Duration;

use crate::clock::Timestamp;

/// What the ledger needs of a [`Timestamp`] beyond the clock's own methods.
pub trait TimestampExt {
    /// The time `secs` seconds after the origin.
    fn from_secs(secs: u64) -> Timestamp;
    /// This time plus a span (saturating).
    fn after(self, span: Duration) -> Timestamp;
    /// The span from `earlier` to this time, zero if `earlier` is later.
    fn since(self, earlier: Timestamp) -> Duration;
    /// Seconds since the origin, for reports.
    fn secs(self) -> f64;
}

impl TimestampExt for Timestamp {
    fn from_secs(secs: u64) -> Timestamp {
        Timestamp(0).plus_secs(secs)
    }

    fn after(self, span: Duration) -> Timestamp {
        self.plus_millis(u64::try_from(span.as_millis()).unwrap_or(u64::MAX))
    }

    fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.millis_since(earlier))
    }

    fn secs(self) -> f64 {
        self.secs_since(Timestamp(0))
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
