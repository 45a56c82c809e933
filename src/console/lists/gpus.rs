//! The GPUs list: the columns it sorts by, and what a filter matches in a device row
//! (including a GPU named as the screens print it, `node-b:5`).

use std::cmp::{Ordering, Reverse};

use crate::snapshot::DeviceView;

use super::Column;

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
