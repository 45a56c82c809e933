//! Quantities with their units: GPU memory in bytes, compute in units of 1e-4 GPU,
//! and sharing slots. Allocation state uses only these integer types, so no floating
//! point ever decides whether something fits.

use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};

use serde::{Deserialize, Serialize};

/// Compute units in one device: 1 unit is 1e-4 GPU, Ray's rounding grain.
pub const UNITS_PER_DEVICE: u32 = 10_000;
/// How many claims may share one device (Koordinator reports `gpu.shared` = 100 x devices).
pub const SLOTS_PER_DEVICE: u32 = 100;
/// The largest memory quantity accepted anywhere: 1 EiB. Anything above is a typo.
pub const MAX_BYTES: u64 = 1 << 60;

/// An amount of memory in bytes.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Bytes(pub u64);

/// Compute in units of 1e-4 of a device (`UNITS_PER_DEVICE` is one whole GPU).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Units(pub u32);

/// Sharing slots on a device (`SLOTS_PER_DEVICE` per device).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Slots(pub u32);

macro_rules! arithmetic {
    ($t:ident) => {
        impl Add for $t {
            type Output = $t;
            fn add(self, rhs: $t) -> $t {
                $t(self.0.saturating_add(rhs.0))
            }
        }
        impl Sub for $t {
            type Output = $t;
            /// Saturating: a free amount is never negative.
            fn sub(self, rhs: $t) -> $t {
                $t(self.0.saturating_sub(rhs.0))
            }
        }
        impl AddAssign for $t {
            fn add_assign(&mut self, rhs: $t) {
                *self = *self + rhs;
            }
        }
        impl SubAssign for $t {
            fn sub_assign(&mut self, rhs: $t) {
                *self = *self - rhs;
            }
        }
    };
}
arithmetic!(Bytes);
arithmetic!(Units);
arithmetic!(Slots);

impl Units {
    /// One whole device.
    pub const FULL: Units = Units(UNITS_PER_DEVICE);

    /// The fraction of a GPU, for display only.
    pub fn as_fraction(self) -> f64 {
        f64::from(self.0) / f64::from(UNITS_PER_DEVICE)
    }
}

impl fmt::Display for Units {
    /// Shown as a GPU fraction with the 1e-4 grain, trailing zeros trimmed: `0.25`, `0.0003`, `1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / UNITS_PER_DEVICE;
        let rest = self.0 % UNITS_PER_DEVICE;
        if rest == 0 {
            return write!(f, "{whole}");
        }
        let digits = format!("{rest:04}");
        write!(f, "{whole}.{}", digits.trim_end_matches('0'))
    }
}

impl Slots {
    /// Every slot of one device: what an exclusive claim takes.
    pub const FULL: Slots = Slots(SLOTS_PER_DEVICE);
}

impl fmt::Display for Slots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Why a memory quantity could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Nothing was given.
    #[error(
        "empty memory quantity: give a number of bytes or a quantity such as 512Mi, 20Gi, 40G or 20GiB"
    )]
    Empty,
    /// A minus sign.
    #[error("memory quantity `{0}` is negative: memory must be a positive amount")]
    Negative(String),
    /// The number part is not a number.
    #[error(
        "memory quantity `{0}` is not a number followed by a unit; allowed units: Ki Mi Gi Ti Pi Ei (also KiB..EiB), k M G T P E (also KB..EB), or none for bytes"
    )]
    Malformed(String),
    /// The suffix is not a unit we know.
    #[error(
        "memory quantity `{input}` has unknown unit `{unit}`; allowed units: Ki Mi Gi Ti Pi Ei (also KiB..EiB), k M G T P E (also KB..EB), or none for bytes"
    )]
    UnknownUnit {
        /// The whole input.
        input: String,
        /// The suffix that was not understood.
        unit: String,
    },
    /// More than 1 EiB, or not a finite number.
    #[error("memory quantity `{0}` is absurd: the most accepted is 1 EiB")]
    TooLarge(String),
    /// A fraction of a byte.
    #[error("memory quantity `{0}` is not a whole number of bytes")]
    FractionalBytes(String),
}

impl Bytes {
    /// `n` KiB.
    pub const fn kib(n: u64) -> Bytes {
        Bytes(n << 10)
    }
    /// `n` MiB.
    pub const fn mib(n: u64) -> Bytes {
        Bytes(n << 20)
    }
    /// `n` GiB.
    pub const fn gib(n: u64) -> Bytes {
        Bytes(n << 30)
    }

    /// Parses a Kubernetes quantity (`512Mi`, `20Gi`, `40G`, `1e9`, `1.5Gi`) or a
    /// `GiB`/`GB` spelling. `G`/`GB` are powers of ten, `Gi`/`GiB` powers of two, as in
    /// Kubernetes. Lowercase `k`, `m` for milli, and fractions that leave part of a byte
    /// are refused with a message naming what is allowed.
    pub fn parse(input: &str) -> Result<Bytes, QuantityError> {
        let s = input.trim();
        if s.is_empty() {
            return Err(QuantityError::Empty);
        }
        if s.starts_with('-') {
            return Err(QuantityError::Negative(s.to_string()));
        }
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
            .unwrap_or(s.len());
        let (mut number, mut unit) = s.split_at(split);
        // Scientific notation (`1e9`, `1.5E3`) belongs to the number, not the unit.
        if let Some(rest) = unit.strip_prefix(['e', 'E'])
            && !rest.is_empty()
            && rest.chars().all(|c| c.is_ascii_digit())
        {
            number = s;
            unit = "";
        }
        let unit = unit.trim();
        let multiplier: u64 = match unit {
            "" | "B" => 1,
            "k" | "K" | "KB" | "kB" => 1_000,
            "M" | "MB" => 1_000_000,
            "G" | "GB" => 1_000_000_000,
            "T" | "TB" => 1_000_000_000_000,
            "P" | "PB" => 1_000_000_000_000_000,
            "E" | "EB" => 1_000_000_000_000_000_000,
            "Ki" | "KiB" => 1 << 10,
            "Mi" | "MiB" => 1 << 20,
            "Gi" | "GiB" => 1 << 30,
            "Ti" | "TiB" => 1 << 40,
            "Pi" | "PiB" => 1 << 50,
            "Ei" | "EiB" => 1 << 60,
            other => {
                return Err(QuantityError::UnknownUnit {
                    input: s.to_string(),
                    unit: other.to_string(),
                });
            }
        };
        if number.is_empty() {
            return Err(QuantityError::Malformed(s.to_string()));
        }
        // Integers are exact; only decimals and exponents go through a float.
        if number.chars().all(|c| c.is_ascii_digit()) {
            let n: u128 = number
                .parse()
                .map_err(|_| QuantityError::TooLarge(s.to_string()))?;
            let total = n.saturating_mul(u128::from(multiplier));
            if total > u128::from(MAX_BYTES) {
                return Err(QuantityError::TooLarge(s.to_string()));
            }
            return Ok(Bytes(
                u64::try_from(total).map_err(|_| QuantityError::TooLarge(s.to_string()))?,
            ));
        }
        let value: f64 = number
            .parse()
            .map_err(|_| QuantityError::Malformed(s.to_string()))?;
        Bytes::from_f64(value * multiplier as f64, s)
    }

    /// A byte count that arrived as a JSON/TOML number.
    pub fn from_number(value: f64) -> Result<Bytes, QuantityError> {
        let shown = format!("{value}");
        if value < 0.0 {
            return Err(QuantityError::Negative(shown));
        }
        Bytes::from_f64(value, &shown)
    }

    fn from_f64(total: f64, shown: &str) -> Result<Bytes, QuantityError> {
        if !total.is_finite() || total > MAX_BYTES as f64 {
            return Err(QuantityError::TooLarge(shown.to_string()));
        }
        if total < 0.0 {
            return Err(QuantityError::Negative(shown.to_string()));
        }
        if total.fract() != 0.0 {
            return Err(QuantityError::FractionalBytes(shown.to_string()));
        }
        // Checked above: finite, non-negative, integral and at most 2^60.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(Bytes(total as u64))
    }

    /// IEC display with one decimal where it matters: `3.1 GiB`, `512 MiB`, `12 B`.
    pub fn iec(self) -> String {
        const NAMES: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
        let mut unit = 0;
        let mut whole = self.0;
        while whole >= 1024 && unit < NAMES.len() - 1 {
            whole /= 1024;
            unit += 1;
        }
        if unit == 0 {
            return format!("{} B", self.0);
        }
        let scale = 1u64 << (10 * unit);
        if self.0.is_multiple_of(scale) {
            return format!("{} {}", self.0 / scale, NAMES[unit]);
        }
        let value = self.0 as f64 / scale as f64;
        if value >= 100.0 {
            format!("{value:.0} {}", NAMES[unit])
        } else {
            format!("{value:.1} {}", NAMES[unit])
        }
    }

    /// `ceil(self * num / den)` without overflow; `den` must not be zero.
    #[must_use]
    pub fn mul_div_ceil(self, num: u64, den: u64) -> Bytes {
        let wide = u128::from(self.0) * u128::from(num);
        let den = u128::from(den.max(1));
        Bytes(u64::try_from(wide.div_ceil(den)).unwrap_or(u64::MAX))
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.iec())
    }
}

impl std::str::FromStr for Bytes {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Bytes::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_quantities_and_spellings() {
        let cases = [
            ("512Mi", 512 << 20),
            ("20Gi", 20 << 30),
            ("20GiB", 20 << 30),
            ("40G", 40_000_000_000),
            ("40GB", 40_000_000_000),
            ("1e9", 1_000_000_000),
            ("1.5Gi", 3 << 29),
            ("12345", 12345),
            ("10MB", 10_000_000),
            ("1Ei", 1 << 60),
            (" 8Gi ", 8 << 30),
        ];
        for (input, want) in cases {
            assert_eq!(Bytes::parse(input), Ok(Bytes(want)), "{input}");
        }
    }

    #[test]
    fn bad_quantities_name_the_problem() {
        let err = Bytes::parse("12 parsecs").unwrap_err();
        assert!(matches!(err, QuantityError::UnknownUnit { ref unit, .. } if unit == "parsecs"));
        assert!(err.to_string().contains("allowed units"), "{err}");
        let err = Bytes::parse("-1Gi").unwrap_err();
        assert!(err.to_string().contains("negative"), "{err}");
        let err = Bytes::parse("1e30").unwrap_err();
        assert!(err.to_string().contains("absurd"), "{err}");
        assert_eq!(Bytes::parse(""), Err(QuantityError::Empty));
        assert!(matches!(
            Bytes::parse("Gi"),
            Err(QuantityError::Malformed(_))
        ));
        assert!(matches!(
            Bytes::parse("1.5"),
            Err(QuantityError::FractionalBytes(_))
        ));
        assert!(matches!(
            Bytes::parse("2Ei"),
            Err(QuantityError::TooLarge(_))
        ));
        assert!(matches!(
            Bytes::from_number(f64::NAN),
            Err(QuantityError::TooLarge(_))
        ));
        assert!(matches!(
            Bytes::from_number(-3.0),
            Err(QuantityError::Negative(_))
        ));
    }

    #[test]
    fn iec_display() {
        assert_eq!(Bytes(12).iec(), "12 B");
        assert_eq!(Bytes::gib(20).iec(), "20 GiB");
        assert_eq!(Bytes(3_328_599_654).iec(), "3.1 GiB");
        assert_eq!(Bytes(12_000_000).iec(), "11.4 MiB");
    }

    #[test]
    fn units_display_as_fraction() {
        assert_eq!(Units(2500).to_string(), "0.25");
        assert_eq!(Units(3).to_string(), "0.0003");
        assert_eq!(Units(10_000).to_string(), "1");
        assert_eq!(Units(15_000).to_string(), "1.5");
    }

    #[test]
    fn subtraction_saturates() {
        assert_eq!(Bytes(1) - Bytes(2), Bytes(0));
        assert_eq!(Units(1) - Units(2), Units(0));
    }
}
