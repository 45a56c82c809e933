//! The Usage list (projects, or one project's claims, over a window): the columns it sorts
//! by and what a filter matches.

use std::cmp::Ordering;

use crate::accounting::Figures;

use super::Column;
use super::shown::{Columns, ShownColumn};

/// What the Usage list sorts by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UsageColumn {
    /// Most GPU time held while idle first (the list's own order).
    Idle,
    /// Most GPU time reserved (by compute fraction) first.
    Reserved,
    /// Most GPU time used first.
    Used,
    /// Most GPU time reserved by memory fraction first.
    Memory,
    /// By name (the project, or the claim's source and id).
    Name,
}

impl Column for UsageColumn {
    const ALL: &'static [Self] = &[
        UsageColumn::Idle,
        UsageColumn::Reserved,
        UsageColumn::Used,
        UsageColumn::Memory,
        UsageColumn::Name,
    ];

    fn name(self) -> &'static str {
        match self {
            UsageColumn::Idle => "idle",
            UsageColumn::Reserved => "reserved",
            UsageColumn::Used => "used",
            UsageColumn::Memory => "memory",
            UsageColumn::Name => "name",
        }
    }
}

impl UsageColumn {
    /// How two rows (a name and its figures) compare under this column: the biggest first
    /// (names in order), ties by reserved GPU time, then by name.
    pub fn order(self, (na, a): (&str, &Figures), (nb, b): (&str, &Figures)) -> Ordering {
        let by = |x: f64, y: f64| y.total_cmp(&x);
        let first = match self {
            UsageColumn::Idle => by(a.idle_allocated.0, b.idle_allocated.0),
            UsageColumn::Reserved => by(a.reserved.compute.0, b.reserved.compute.0),
            UsageColumn::Used => by(a.used.0, b.used.0),
            UsageColumn::Memory => by(a.reserved.memory.0, b.reserved.memory.0),
            UsageColumn::Name => na.cmp(nb),
        };
        first
            .then_with(|| by(a.reserved.compute.0, b.reserved.compute.0))
            .then_with(|| na.cmp(nb))
    }
}

/// A column the Usage view shows (GPU-hours, two decimals; bars on one scale).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UsageField {
    /// The project (the list of projects).
    Project,
    /// How many claims it had.
    Claims,
    /// The claim (a project's claims), by its id.
    Claim,
    /// The claim with its source, with several sources.
    SourcedClaim,
    /// Who held the claim.
    Holder,
    /// Reserved, by compute fraction.
    Reserved,
    /// Its bar.
    ReservedBar,
    /// Reserved, by memory fraction.
    ByMemory,
    /// Used.
    Used,
    /// Its bar.
    UsedBar,
    /// Held while idle.
    Idle,
    /// Its bar.
    IdleBar,
    /// The claim's longest idle run.
    LongestIdle,
}

impl ShownColumn for UsageField {
    fn header(self) -> &'static str {
        match self {
            UsageField::Project => "PROJECT",
            UsageField::Claims => "CLAIMS",
            UsageField::Claim | UsageField::SourcedClaim => "CLAIM",
            UsageField::Holder => "HOLDER",
            UsageField::Reserved => "RESERVED",
            UsageField::ByMemory => "BY MEM",
            UsageField::Used => "USED",
            UsageField::Idle => "IDLE",
            UsageField::LongestIdle => "LONGEST IDLE",
            UsageField::ReservedBar | UsageField::UsedBar | UsageField::IdleBar => "",
        }
    }
}

/// Columns of one figure.
const NUM_W: u16 = 8;

/// The Usage view's columns in `width` cells: the projects (`claims` false) or one
/// project's claims (with HOLDER and LONGEST IDLE; the claim named with its source when
/// `multi`). Each figure is 8 wide; the three bars share what is left, up to 24 each.
pub fn usage_columns(width: u16, claims: bool, multi: bool) -> Columns<UsageField> {
    use UsageField as F;
    let mut c = Columns::new();
    if claims {
        c.fixed([
            if multi {
                (F::SourcedClaim, 16)
            } else {
                (F::Claim, 8)
            },
            (F::Holder, 14),
        ]);
    } else {
        c.fixed([(F::Project, 16), (F::Claims, 6)]);
    }
    let extra = if claims { 12 + 1 } else { 0 };
    // The name, the columns beside it with a gap each, four figures with theirs, borders.
    let fixed = c.fixed_total() + 1 + extra + 4 * (NUM_W + 1) + 2;
    let bar = ((width.saturating_sub(fixed) / 3).saturating_sub(1)).min(24);
    c.fixed([
        (F::Reserved, NUM_W),
        (F::ReservedBar, bar),
        (F::ByMemory, NUM_W),
        (F::Used, NUM_W),
        (F::UsedBar, bar),
        (F::Idle, NUM_W),
        (F::IdleBar, bar),
    ]);
    if claims {
        c.fixed([(F::LongestIdle, 12)]);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::{ByShare, GpuSeconds};

    #[test]
    fn the_usage_columns_share_the_rest_among_three_bars() {
        let p = usage_columns(120, false, true);
        assert_eq!(
            p.headers().join("|"),
            "PROJECT|CLAIMS|RESERVED||BY MEM|USED||IDLE|"
        );
        // 120 - (16 + 6 + 1 + 4 * 9 + 2) = 59 left: 19 a bar, less its gap: 18.
        assert_eq!(p.width_of(UsageField::UsedBar), Some(18));
        let c = usage_columns(200, true, true);
        assert!(c.has(UsageField::SourcedClaim) && c.has(UsageField::LongestIdle));
        assert_eq!(c.width_of(UsageField::IdleBar), Some(24), "at most 24");
        assert!(usage_columns(200, true, false).has(UsageField::Claim));
        assert_eq!(
            usage_columns(40, false, false).width_of(UsageField::ReservedBar),
            Some(0)
        );
    }

    fn f(reserved: f64, used: f64, idle: f64) -> Figures {
        Figures {
            reserved: ByShare {
                compute: GpuSeconds(reserved),
                memory: GpuSeconds(reserved / 2.0),
            },
            used: GpuSeconds(used),
            idle_allocated: GpuSeconds(idle),
            unmeasured: GpuSeconds(0.0),
        }
    }

    #[test]
    fn the_biggest_idle_holder_comes_first_then_the_biggest_reserver() {
        let rows = [
            ("a", f(10.0, 5.0, 0.0)),
            ("b", f(4.0, 1.0, 3.0)),
            ("c", f(20.0, 19.0, 0.0)),
        ];
        let sorted = |c: UsageColumn| {
            let mut r: Vec<_> = rows.iter().collect();
            r.sort_by(|x, y| c.order((x.0, &x.1), (y.0, &y.1)));
            r.iter().map(|x| x.0).collect::<Vec<_>>()
        };
        assert_eq!(sorted(UsageColumn::Idle), ["b", "c", "a"]);
        assert_eq!(sorted(UsageColumn::Used), ["c", "a", "b"]);
        assert_eq!(sorted(UsageColumn::Name), ["a", "b", "c"]);
        assert!(UsageColumn::parse("idle").is_ok());
        assert_eq!(
            UsageColumn::parse("waste").unwrap_err().names,
            "idle, reserved, used, memory, name"
        );
    }
}
