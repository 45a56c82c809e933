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
    /// A number without a unit (a string or a JSON/TOML number alike) that is not a
    /// whole count of bytes: almost always a unit left out.
    #[error(
        "memory quantity `{0}` has no unit, so it is bytes, and a fraction of a byte is no size: add a unit (e.g. `{0}Gi`); allowed units: Ki Mi Gi Ti Pi Ei (also KiB..EiB), k M G T P E (also KB..EB)"
    )]
    FractionalBytes(String),
    /// More significant digits than any memory size needs.
    #[error("memory quantity `{0}` has more than 20 significant digits; write it shorter")]
    TooPrecise(String),
}

/// Which way a fraction of a byte goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Round {
    /// To the next byte (requests).
    Up,
    /// To the byte below (capacities).
    Down,
}

/// The other way of rounding.
fn flip(round: Round) -> Round {
    match round {
        Round::Up => Round::Down,
        Round::Down => Round::Up,
    }
}

/// Most significant digits read from a quantity: 10^20 x the largest unit (10^18) still
/// fits a u128.
const MAX_DIGITS: usize = 20;

/// `number` (`49.8`, `8.2`, `1e9`, `1.5E3`) times `multiplier`, in whole bytes, computed
/// exactly: the digits are an integer, the decimal point and exponent a power of ten.
fn exact_decimal(
    number: &str,
    multiplier: u64,
    round: Round,
    shown: &str,
) -> Result<u128, QuantityError> {
    let malformed = || QuantityError::Malformed(shown.to_string());
    let (mantissa, exponent) = match number.find(['e', 'E']) {
        Some(at) => (&number[..at], Some(&number[at + 1..])),
        None => (number, None),
    };
    let exponent: u32 = match exponent {
        None => 0,
        Some(e) if !e.is_empty() && e.chars().all(|c| c.is_ascii_digit()) => e
            .parse()
            .map_err(|_| QuantityError::TooLarge(shown.to_string()))?,
        Some(_) => return Err(malformed()),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |p: &str| p.chars().all(|c| c.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !all_digits(int) || !all_digits(frac) {
        return Err(malformed());
    }
    let digits = format!("{int}{frac}");
    let significant = digits.trim_start_matches('0');
    if significant.is_empty() {
        return Ok(0);
    }
    if significant.len() > MAX_DIGITS {
        return Err(QuantityError::TooPrecise(shown.to_string()));
    }
    let value: u128 = significant.parse().map_err(|_| malformed())?;
    let numerator = value * u128::from(multiplier);
    // numerator x 10^exponent / 10^frac_len
    let frac_len = u32::try_from(frac.len()).map_err(|_| malformed())?;
    if exponent >= frac_len {
        let scale = 10u128
            .checked_pow(exponent - frac_len)
            .ok_or_else(|| QuantityError::TooLarge(shown.to_string()))?;
        return numerator
            .checked_mul(scale)
            .ok_or_else(|| QuantityError::TooLarge(shown.to_string()));
    }
    let (whole, remainder) = match 10u128.checked_pow(frac_len - exponent) {
        Some(denominator) => (numerator / denominator, numerator % denominator),
        // Smaller than any byte.
        None => (0, numerator),
    };
    Ok(match round {
        Round::Up if remainder > 0 => whole + 1,
        _ => whole,
    })
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

    /// Parses a requested amount: a Kubernetes quantity (`512Mi`, `20Gi`, `40G`, `1e9`,
    /// `1.5Gi`, `49.8GiB`) or a `GiB`/`GB` spelling. `G`/`GB` are powers of ten,
    /// `Gi`/`GiB` powers of two, as in Kubernetes. Decimals are exact (integer decimal
    /// arithmetic, no floating point); a fraction of a byte rounds up to the next byte, as
    /// Kubernetes does for requests. Unknown units and `m` (milli) are refused with a
    /// message naming what is allowed.
    pub fn parse(input: &str) -> Result<Bytes, QuantityError> {
        Bytes::parse_rounding(input, Round::Up)
    }

    /// Parses a capacity (a GPU's memory in an inventory): as `parse`, but a fraction of a
    /// byte rounds down, so a device never offers more than it has.
    pub fn parse_capacity(input: &str) -> Result<Bytes, QuantityError> {
        Bytes::parse_rounding(input, Round::Down)
    }

    fn parse_rounding(input: &str, round: Round) -> Result<Bytes, QuantityError> {
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
        let total = exact_decimal(number, multiplier, round, s)?;
        // A bare number is bytes whether it came as a string or a number: `1.5` is refused
        // here as `from_number` refuses 1.5, never rounded to 2 bytes.
        if multiplier == 1 && total != exact_decimal(number, 1, flip(round), s)? {
            return Err(QuantityError::FractionalBytes(s.to_string()));
        }
        if total > u128::from(MAX_BYTES) {
            return Err(QuantityError::TooLarge(s.to_string()));
        }
        u64::try_from(total)
            .map(Bytes)
            .map_err(|_| QuantityError::TooLarge(s.to_string()))
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

    /// The shortest quantity that reads back as exactly these bytes (a request's
    /// rounding included): `10MB`, `49.8GiB`, `20GiB`, `12345B`. Shows a request the way
    /// it was written rather than converted (`10MB`, not `9.5 MiB`).
    pub fn quantity(self) -> String {
        const UNITS: [(&str, u128); 13] = [
            ("EiB", 1 << 60),
            ("EB", 1_000_000_000_000_000_000),
            ("PiB", 1 << 50),
            ("PB", 1_000_000_000_000_000),
            ("TiB", 1 << 40),
            ("TB", 1_000_000_000_000),
            ("GiB", 1 << 30),
            ("GB", 1_000_000_000),
            ("MiB", 1 << 20),
            ("MB", 1_000_000),
            ("KiB", 1 << 10),
            ("kB", 1_000),
            ("B", 1),
        ];
        let b = u128::from(self.0);
        let mut best: Option<String> = None;
        for (name, unit) in UNITS {
            for decimals in 0..=3u32 {
                let scale = 10u128.pow(decimals);
                // The largest d with ceil(d x unit / scale) <= b; it reads back as b when
                // d x unit / scale > b - 1.
                let d = b * scale / unit;
                if d == 0 || d * unit <= b.saturating_sub(1) * scale {
                    continue;
                }
                let whole = d / scale;
                let text = if decimals == 0 {
                    format!("{whole}{name}")
                } else {
                    let frac = d % scale;
                    let width = usize::try_from(decimals).unwrap_or(3);
                    format!("{whole}.{frac:0width$}{name}")
                };
                if best.as_ref().is_none_or(|t| text.len() < t.len()) {
                    best = Some(text);
                }
                break;
            }
        }
        best.unwrap_or_else(|| "0B".to_string())
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
            Bytes::parse("1.2.3Gi"),
            Err(QuantityError::Malformed(_))
        ));
        assert!(matches!(
            Bytes::parse("1.5e"),
            Err(QuantityError::UnknownUnit { .. })
        ));
        assert!(matches!(
            Bytes::parse("1.000000000000000000001Gi"),
            Err(QuantityError::TooPrecise(_))
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
    fn decimals_are_exact_requests_round_up_capacities_down() {
        // (input, as a request, as a capacity)
        let cases: [(&str, u64, u64); 13] = [
            // Not representable in binary floating point, exact here.
            ("8.2G", 8_200_000_000, 8_200_000_000),
            ("2.01G", 2_010_000_000, 2_010_000_000),
            ("0.1G", 100_000_000, 100_000_000),
            ("1.1e9", 1_100_000_000, 1_100_000_000),
            ("1.5E3", 1_500, 1_500),
            // 49.8 x 2^30 = 53 472 342 835.2, 79.2 x 2^30 = 85 040 352 460.8: up for a
            // request, down for a capacity.
            ("49.8GiB", 53_472_342_836, 53_472_342_835),
            ("79.2GiB", 85_040_352_461, 85_040_352_460),
            // Exactly on a byte: no rounding either way.
            ("1.5Gi", 3 << 29, 3 << 29),
            ("0.5Ki", 512, 512),
            // Just under and over a byte.
            ("0.001K", 1, 1),
            ("0.0001K", 1, 0),
            ("0.000", 0, 0),
            (".5Ki", 512, 512),
        ];
        for (input, up, down) in cases {
            assert_eq!(Bytes::parse(input), Ok(Bytes(up)), "request {input}");
            assert_eq!(
                Bytes::parse_capacity(input),
                Ok(Bytes(down)),
                "capacity {input}"
            );
        }
        // A bare number is bytes: a fraction of one is a unit left out, refused as the
        // JSON number 1.5 is, naming the units.
        for bare in ["1.5", "0.5B", "2.25e0"] {
            let e = Bytes::parse(bare).unwrap_err();
            assert!(
                matches!(e, QuantityError::FractionalBytes(_)),
                "{bare}: {e}"
            );
            assert!(e.to_string().contains("Gi"), "{e}");
            assert_eq!(Bytes::parse_capacity(bare).unwrap_err(), e);
        }
        assert_eq!(
            Bytes::from_number(1.5).unwrap_err().to_string(),
            Bytes::parse("1.5").unwrap_err().to_string()
        );
        assert_eq!(Bytes::parse("1.0"), Ok(Bytes(1)));
        // The largest accepted amount, and one byte more.
        assert_eq!(Bytes::parse("1Ei"), Ok(Bytes(1 << 60)));
        assert_eq!(Bytes::parse("1.0Ei"), Ok(Bytes(1 << 60)));
        assert!(matches!(
            Bytes::parse("1152921504606846977"),
            Err(QuantityError::TooLarge(_))
        ));
        // A sliver above 1 EiB rounds up past the limit; as a capacity it is 1 EiB.
        assert!(matches!(
            Bytes::parse("1125899906842624.0001Ki"),
            Err(QuantityError::TooLarge(_))
        ));
        assert_eq!(
            Bytes::parse_capacity("1125899906842624.0001Ki"),
            Ok(Bytes(1 << 60))
        );
    }

    #[test]
    fn a_quantity_reads_back_as_the_same_bytes() {
        let cases = [
            ("10MB", "10MB"),
            ("10Gi", "10GiB"),
            ("49.8GiB", "49.8GiB"),
            ("8.2G", "8.2GB"),
            ("2.01G", "2.01GB"),
            ("1.5Gi", "1.5GiB"),
            ("12345", "12345B"),
            ("0", "0B"),
            ("1Ei", "1EiB"),
        ];
        for (written, shown) in cases {
            let b = Bytes::parse(written).unwrap();
            assert_eq!(b.quantity(), shown, "{written}");
            assert_eq!(Bytes::parse(&b.quantity()), Ok(b), "{written} reads back");
        }
        // Every byte count reads back, whatever its spelling.
        for n in [1u64, 999, 1000, 1023, 1025, 53_472_342_835, (1 << 40) + 1] {
            assert_eq!(Bytes::parse(&Bytes(n).quantity()), Ok(Bytes(n)), "{n}");
        }
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
