//! The Usage list (projects, or one project's claims, over a window): the columns it sorts
//! by and what a filter matches.

use std::cmp::Ordering;

use crate::accounting::Figures;

use super::Column;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::{ByShare, GpuSeconds};

    fn f(reserved: f64, used: f64, idle: f64) -> Figures {
        Figures {
            reserved: ByShare {
                compute: GpuSeconds(reserved),
                memory: GpuSeconds(reserved / 2.0),
            },
            used: GpuSeconds(used),
            idle_allocated: GpuSeconds(idle),
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
