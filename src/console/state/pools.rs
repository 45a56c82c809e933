//! The Overview's sources by pool, when there are more of them than its table has rows:
//! a thousand hosts become a row per pool (how many, how many live, stale, down or still
//! loading, their GPUs and claims, and the first one in trouble and why), and the fleet
//! map keeps its place above them. A source's pool is its name up to the first `.`,
//! less the number that ends it (`rack03-gpu017` and `rack03-gpu018` are `rack03-gpu*`).

use std::fmt::Write as _;

use crate::sources::SourceKind;

use super::{SourceHealth, State};

/// The pool a source named `name` belongs to: the name up to its first `.`, less the
/// digits and the `-`, `_` or `.` that end it; the whole name when that leaves nothing.
pub fn pool_of(name: &str) -> &str {
    let host = name.split('.').next().unwrap_or(name);
    let stem = host
        .trim_end_matches(|c: char| c.is_ascii_digit())
        .trim_end_matches(['-', '_']);
    if stem.is_empty() { name } else { stem }
}

/// One pool as the Overview lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolRow {
    /// The pool (`pool_of` its sources' names).
    pub pool: String,
    /// Its sources' kind, when they are all of one.
    pub kind: Option<SourceKind>,
    /// How many sources it has.
    pub sources: usize,
    /// Of those, answering and fresh.
    pub live: usize,
    /// Not answered yet.
    pub loading: usize,
    /// Their data is older than it should be.
    pub stale: usize,
    /// Their last fetch failed.
    pub down: usize,
    /// GPUs of its sources that answered.
    pub gpus: usize,
    /// Claims of its sources that answered.
    pub claims: usize,
    /// The first source down (else stale) and why.
    pub first_problem: Option<String>,
}

impl State {
    /// How many pools the sources make.
    pub fn pool_count(&self) -> usize {
        let mut seen: Vec<&str> = self.sources.iter().map(|s| pool_of(&s.name)).collect();
        seen.sort_unstable();
        seen.dedup();
        seen.len()
    }

    /// Whether the Overview lists pools instead of sources in a body of `rest` rows (below
    /// the totals): when the sources and the table's frame would leave the fleet map less
    /// than `min_map` rows, and pooling makes fewer rows.
    pub fn sources_pooled(&self, rest: u16, min_map: u16) -> bool {
        let want = self.sources.len() + 3 + usize::from(min_map);
        want > usize::from(rest) && self.pool_count() < self.sources.len()
    }

    /// The pools, those with a source down first, then those with one stale, each group in
    /// the order its first source comes, with their counts now.
    pub fn pool_rows(&self) -> Vec<PoolRow> {
        let mut rows: Vec<PoolRow> = Vec::new();
        for s in &self.sources {
            let pool = pool_of(&s.name);
            let at = if let Some(i) = rows.iter().position(|r| r.pool == pool) {
                i
            } else {
                rows.push(PoolRow {
                    pool: pool.to_string(),
                    kind: Some(s.kind),
                    ..PoolRow::default()
                });
                rows.len() - 1
            };
            let Some(r) = rows.get_mut(at) else { continue };
            if r.kind != Some(s.kind) {
                r.kind = None;
            }
            r.sources += 1;
            if let Some(d) = &s.data {
                r.gpus += d.devices().count();
                r.claims += d.claims.len();
            }
            match s.health(self.now, self.refresh_ms) {
                SourceHealth::Ok => r.live += 1,
                SourceHealth::Loading => r.loading += 1,
                SourceHealth::Stale { .. } => {
                    r.stale += 1;
                    if r.down == 0 && r.first_problem.is_none() {
                        r.first_problem = Some(format!("{} stale", s.name));
                    }
                }
                SourceHealth::Down { message, .. } => {
                    if r.down == 0 {
                        r.first_problem = Some(format!("{}: {message}", s.name));
                    }
                    r.down += 1;
                }
            }
        }
        rows.sort_by_key(|r| (r.down == 0, r.stale == 0));
        rows
    }
}

impl PoolRow {
    /// Its health in a few characters: `● 100 live` when all are, else each count that is
    /// not zero with its sign (`●98 …1 ◌0 ✖1` less the zeros).
    pub fn health(&self) -> String {
        if self.live == self.sources {
            return format!("● {} live", self.live);
        }
        [
            ("●", self.live),
            ("…", self.loading),
            ("◌", self.stale),
            ("✖", self.down),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(sign, n)| format!("{sign}{n}"))
        .collect::<Vec<_>>()
        .join(" ")
    }

    /// What its NOTE says: how many sources, and the first in trouble and why.
    pub fn note(&self) -> String {
        let plural = if self.sources == 1 { "" } else { "s" };
        let mut text = format!("{} source{plural}", self.sources);
        if self.down > 0 {
            let _ = write!(text, ", {} down", self.down);
        }
        if self.stale > 0 {
            let _ = write!(text, ", {} stale", self.stale);
        }
        if self.loading > 0 {
            let _ = write!(text, ", {} loading", self.loading);
        }
        if let Some(p) = &self.first_problem {
            text.push_str(": ");
            text.push_str(p);
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_is_the_name_less_its_number_and_domain() {
        assert_eq!(pool_of("rack03-gpu017"), "rack03-gpu");
        assert_eq!(pool_of("gpu017.lab.example.org"), "gpu");
        assert_eq!(pool_of("dgx-a-12"), "dgx-a");
        assert_eq!(pool_of("node_7"), "node");
        assert_eq!(pool_of("login"), "login");
        // Nothing left but digits: the name is its own pool.
        assert_eq!(pool_of("42"), "42");
        assert_eq!(pool_of("10.0.0.7"), "10.0.0.7");
    }

    #[test]
    fn health_and_note_count_what_is_not_live() {
        let all = PoolRow {
            pool: "rack".into(),
            sources: 100,
            live: 100,
            ..PoolRow::default()
        };
        assert_eq!(all.health(), "● 100 live");
        assert_eq!(all.note(), "100 sources");
        let some = PoolRow {
            pool: "rack".into(),
            sources: 100,
            live: 97,
            loading: 1,
            down: 2,
            first_problem: Some("rack-017: timed out".into()),
            ..PoolRow::default()
        };
        assert_eq!(some.health(), "●97 …1 ✖2");
        assert_eq!(
            some.note(),
            "100 sources, 2 down, 1 loading: rack-017: timed out"
        );
    }
}
