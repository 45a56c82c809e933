//! The GPUs list: the columns it sorts by, and what a filter matches in a device row
//! (including a GPU named as the screens print it, `node-b:5`).

use std::cmp::{Ordering, Reverse};

use crate::snapshot::DeviceView;

use super::Column;
use super::shown::{Columns, ShownColumn, Width};

/// What the GPUs list sorts by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GpuColumn {
    /// As the sources list them: node by node, in index order.
    Node,
    /// Most free memory first.
    Free,
    /// Most memory used (telemetry) first.
    Used,
    /// Busiest first.
    Util,
    /// Most memory reserved by claims first.
    Allocated,
    /// Most claims sharing it first.
    Sharers,
}

impl Column for GpuColumn {
    const ALL: &'static [Self] = &[
        GpuColumn::Node,
        GpuColumn::Free,
        GpuColumn::Used,
        GpuColumn::Util,
        GpuColumn::Allocated,
        GpuColumn::Sharers,
    ];

    fn name(self) -> &'static str {
        match self {
            GpuColumn::Node => "node",
            GpuColumn::Free => "free",
            GpuColumn::Used => "used",
            GpuColumn::Util => "util",
            GpuColumn::Allocated => "allocated",
            GpuColumn::Sharers => "sharers",
        }
    }
}

impl GpuColumn {
    /// How two devices compare under this column (`Equal` keeps the sources' order: the
    /// sort is stable).
    pub fn order(self, a: &DeviceView, b: &DeviceView) -> Ordering {
        let used = |d: &DeviceView| {
            d.telemetry
                .as_ref()
                .and_then(|t| t.memory_used)
                .map_or(0, |b| b.0)
        };
        let util = |d: &DeviceView| {
            d.telemetry
                .as_ref()
                .and_then(|t| t.utilization_gpu)
                .unwrap_or(0)
        };
        match self {
            GpuColumn::Node => Ordering::Equal,
            GpuColumn::Free => Reverse(a.memory_free).cmp(&Reverse(b.memory_free)),
            GpuColumn::Used => Reverse(used(a)).cmp(&Reverse(used(b))),
            GpuColumn::Util => Reverse(util(a)).cmp(&Reverse(util(b))),
            GpuColumn::Allocated => Reverse(a.memory_allocated).cmp(&Reverse(b.memory_allocated)),
            GpuColumn::Sharers => Reverse(a.holders.len()).cmp(&Reverse(b.holders.len())),
        }
    }
}

/// A column the GPUs view shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuField {
    /// The source's name (with several sources).
    Source,
    /// The node, shortened in the middle when it must be.
    Node,
    /// The device index.
    Index,
    /// The model with its memory size (`A100 80G`), in the narrower sets.
    ModelMemory,
    /// The model's short name, in the widest set.
    Model,
    /// The memory bar.
    Memory,
    /// Memory allocated by claims over capacity.
    Allocated,
    /// Memory in use (telemetry).
    Used,
    /// Memory free to claim.
    MemFree,
    /// Compute free to claim.
    GpuFree,
    /// How many claims share it.
    Sharers,
    /// Compute allocated, in GPUs.
    Compute,
    /// Temperature.
    Temp,
    /// Power draw and limit.
    Power,
    /// Utilization.
    Util,
    /// Flags (`idle`, `unclaimed`, `cordon`...).
    Flags,
}

impl ShownColumn for GpuField {
    fn header(self) -> &'static str {
        match self {
            GpuField::Source => "SRC",
            GpuField::Node => "NODE",
            GpuField::Index => "#",
            GpuField::ModelMemory | GpuField::Model => "MODEL",
            GpuField::Memory => "MEMORY",
            GpuField::Allocated => "ALLOC",
            GpuField::Used => "USED",
            GpuField::MemFree => "MEM FREE",
            GpuField::GpuFree => "GPU FREE",
            GpuField::Sharers => "SHR",
            GpuField::Compute => "COMPUTE",
            GpuField::Temp => "TEMP",
            GpuField::Power => "POWER",
            GpuField::Util => "UTIL",
            GpuField::Flags => "FLAGS",
        }
    }
}

/// FLAGS keeps at least this much (`unclaimed`).
const FLAGS_MIN: u16 = 9;

/// The GPUs view's columns in `width` cells. Three sets by width (under 110 columns,
/// under 170, wider), SRC with several sources; under 80, USED and GPU FREE make way for
/// FLAGS (which says `unclaimed` where use exceeds the allocation). NODE takes the width
/// of the longest name (`longest_node` characters) that fits and is shortened in the
/// middle only when nothing else can give; FLAGS takes the rest, at least 9.
pub fn gpu_columns(width: u16, multi: bool, longest_node: usize) -> Columns<GpuField> {
    use GpuField as F;
    let tier = match width {
        0..110 => 0,
        110..170 => 1,
        _ => 2,
    };
    let mut c = Columns::new();
    if multi {
        c.fixed([(F::Source, 8)]);
    }
    c.push(F::Node, Width::Fixed(0));
    c.fixed([
        (F::Index, 2),
        if tier > 1 {
            (F::Model, 18)
        } else {
            (F::ModelMemory, 8)
        },
    ]);
    if tier > 0 {
        c.fixed([(F::Memory, 16)]);
    }
    if width < 80 {
        c.fixed([(F::Allocated, 11), (F::MemFree, 8)]);
    } else {
        c.fixed([
            (F::Allocated, 11),
            (F::Used, 6),
            (F::MemFree, 8),
            (F::GpuFree, 8),
        ]);
    }
    if tier > 0 {
        c.fixed([(F::Sharers, 3)]);
    }
    if tier > 1 {
        c.fixed([(F::Compute, 10), (F::Temp, 4), (F::Power, 8)]);
    }
    c.fixed([(F::Util, 4)]);
    c.push(F::Flags, Width::Fill);
    // Borders, and a gap per column.
    let others = c.fixed_total();
    let gaps = u16::try_from(c.len()).unwrap_or(u16::MAX);
    let budget = width.saturating_sub(2 + others + gaps + FLAGS_MIN).max(6);
    let node = u16::try_from(longest_node)
        .unwrap_or(u16::MAX)
        .clamp(4, budget);
    c.set(F::Node, Width::Fixed(node));
    c.fill = usize::from(
        width
            .saturating_sub(2 + others + gaps + node)
            .max(FLAGS_MIN),
    );
    c
}

/// The words a filter matches in a device row: its node, model, index and source, the
/// FLAGS column's words (`idle`, `unclaimed`, `cordon`...), `cordoned`, and `stale`
/// while its source is.
pub fn device_words(source: &str, node: &str, d: &DeviceView, stale: bool) -> Vec<String> {
    let flags = d.flag_words().join(" ");
    let cordoned = if d.cordoned { "cordoned" } else { "" };
    let stale = if stale { "stale" } else { "" };
    [node, &d.model, &d.index.to_string(), source, &flags]
        .into_iter()
        .map(str::to_string)
        .chain([cordoned, stale].map(str::to_string))
        .collect()
}

/// A filter that names one GPU: `NODE:INDEX` (or `NODE INDEX`, `SOURCE/NODE:INDEX`), the
/// node's name whole or its end. It matches that GPU (and in Claims the claims holding a
/// share of it), not `node-b:50`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuFilter {
    /// The source's name, lowercased (empty: any source).
    source: String,
    /// The node's name or its end, lowercased.
    node: String,
    /// The device index.
    index: u32,
}

impl GpuFilter {
    /// The GPU a (lowercased) filter names, if it names one.
    pub fn parse(needle: &str) -> Option<GpuFilter> {
        let needle = needle.trim();
        let (source, rest) = match needle.split_once('/') {
            Some((s, r)) => (s.to_string(), r),
            None => (String::new(), needle),
        };
        let (node, index) = rest
            .rsplit_once(':')
            .or_else(|| rest.rsplit_once(' ').filter(|(n, _)| !n.contains(' ')))?;
        let index: u32 = index.trim().parse().ok()?;
        let node = node.trim();
        (!node.is_empty() && !node.contains(' ')).then(|| GpuFilter {
            source,
            node: node.to_string(),
            index,
        })
    }

    /// Whether GPU `index` of `node` on `source` is the one named.
    pub fn names(&self, source: &str, node: &str, index: u32) -> bool {
        index == self.index
            && node.to_lowercase().ends_with(self.node.as_str())
            && (self.source.is_empty() || source.to_lowercase() == self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_columns_give_way_by_width_and_keep_flags_whole() {
        let headers = |w, multi| gpu_columns(w, multi, 6).headers().join(" ");
        assert_eq!(headers(79, false), "NODE # MODEL ALLOC MEM FREE UTIL FLAGS");
        assert_eq!(
            headers(100, true),
            "SRC NODE # MODEL ALLOC USED MEM FREE GPU FREE UTIL FLAGS"
        );
        assert_eq!(
            headers(200, false),
            "NODE # MODEL MEMORY ALLOC USED MEM FREE GPU FREE SHR COMPUTE TEMP POWER UTIL FLAGS"
        );
        let c = gpu_columns(200, false, 6);
        assert!(c.has(GpuField::Model) && !c.has(GpuField::ModelMemory));
        assert_eq!(c.width_of(GpuField::Node), Some(6), "the longest name fits");
        // Every cell accounted for: borders, a gap per column, the fixed ones, the rest.
        let gaps = c.len();
        assert_eq!(2 + gaps + usize::from(c.fixed_total()) + c.fill, 200);
        // A name longer than the room shrinks NODE, never FLAGS below `unclaimed`.
        let c = gpu_columns(80, false, 60);
        assert_eq!(c.fill, 9);
        assert!(c.width_of(GpuField::Node).unwrap() < 60);
    }

    #[test]
    fn a_gpu_is_named_as_the_screens_print_it() {
        let g = GpuFilter::parse("node-b:5").unwrap();
        assert!(g.names("demo", "node-b", 5));
        assert!(g.names("demo", "prod-node-b", 5));
        assert!(!g.names("demo", "node-b", 50));
        assert!(!g.names("demo", "node-c", 5));
        let g = GpuFilter::parse("far/node-b 5").unwrap();
        assert!(g.names("far", "node-b", 5));
        assert!(!g.names("near", "node-b", 5));
        assert_eq!(GpuFilter::parse("node-b"), None);
        assert_eq!(GpuFilter::parse("a b:5"), None);
        assert_eq!(GpuFilter::parse(":5"), None);
    }
}
