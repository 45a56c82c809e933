//! The views, in tab order: titles, command-line names and problem filters.

/// The Overview's counts that list their items: label, the view and the filter Enter opens.
pub const OVERVIEW_JUMPS: [(&str, View, &str); 5] = [
    ("GPUs", View::Gpus, "cordon"),
    ("Claims", View::Claims, "pending"),
    ("Over limit", View::Claims, "over-limit"),
    ("Idle", View::Claims, "idle"),
    ("Unclaimed use", View::Gpus, "unclaimed"),
];

/// The views, in tab order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum View {
    /// Cluster totals and sources.
    Overview,
    /// One row per device.
    Gpus,
    /// Claims.
    Claims,
    /// Projects' fair-share accounts.
    Ledger,
    /// One device in depth.
    Detail,
    /// Audit events and the console log.
    Events,
    /// GPU time per project over a window, from the sources' recorded history.
    Usage,
    /// One claim in depth, opened by Enter on a claim (not a tab: it has no tab key).
    ClaimDetail,
}

impl View {
    /// All views in tab order.
    pub const ALL: [View; 7] = [
        View::Overview,
        View::Gpus,
        View::Claims,
        View::Ledger,
        View::Detail,
        View::Events,
        View::Usage,
    ];
    /// Tab title.
    pub fn title(self) -> &'static str {
        match self {
            View::Overview => "Overview",
            View::Gpus => "GPUs",
            View::Claims => "Claims",
            View::Ledger => "Fair share",
            View::Detail => "GPU detail",
            View::Events => "Events",
            View::Usage => "Usage",
            View::ClaimDetail => "Claim detail",
        }
    }
    /// Name on the command line and for `--dump-screen`.
    pub fn name(self) -> &'static str {
        match self {
            View::Overview => "overview",
            View::Gpus => "gpus",
            View::Claims => "claims",
            View::Ledger => "fairshare",
            View::Detail => "detail",
            View::Events => "events",
            View::Usage => "usage",
            View::ClaimDetail => "claim",
        }
    }
    /// Position in `ALL`; the claim detail, not a tab, comes after the tabs.
    pub fn position(self) -> usize {
        View::ALL
            .iter()
            .position(|v| *v == self)
            .unwrap_or(View::ALL.len())
    }
    /// Parses a view name.
    pub fn parse(s: &str) -> Option<View> {
        View::ALL.into_iter().find(|v| v.name() == s)
    }
    /// The problem filters `!` cycles through here: words the rows' states and flags match.
    pub fn problem_filters(self) -> &'static [&'static str] {
        match self {
            View::Overview => &["idle", "over-limit", "cordoned", "lost", "stale", "free"],
            View::Gpus => &["idle", "unclaimed", "cordon", "unhealthy", "stale"],
            View::Claims => &["over-limit", "pending", "idle", "stale"],
            View::Ledger => &["backed-off"],
            _ => &[],
        }
    }
}
