//! The filtered and sorted rows of the lists, rebuilt when data, filter or sort change.
//! What a filter matches and how a column sorts are the lists' own (`console::lists`).

use crate::console::lists::{
    ClaimKey, ClaimWidths, DevKey, GpuFilter, ProjKey, claim_words, device_words, project_words,
    words_match,
};

use super::State;
use crate::snapshot::ClaimView;

impl State {
    /// Recomputes the filtered and sorted rows and the totals from the sources' data.
    /// Called when the data, the filter, the sort or the shown sources change; drawing
    /// only reads the result.
    pub fn rebuild_rows(&mut self) {
        self.recompute_totals();
        self.physical.reshape(&self.gpus.filter);
        self.rebuild_map();
        self.record_trends();
        // Each list has its own filter.
        let (dev_needle, claim_needle, proj_needle) = (
            self.gpus.filter.to_lowercase(),
            self.claims.filter.to_lowercase(),
            self.projects.filter.to_lowercase(),
        );
        // A GPU named as the screens print it (`node-b:5`, `b:5`, `node-b 5`) matches that
        // GPU and the claims holding a share of it, not `node-b:50`.
        let (dev_gpu, claim_gpu) = (
            GpuFilter::parse(&dev_needle),
            GpuFilter::parse(&claim_needle),
        );
        let mut devs = Vec::new();
        let mut claims = Vec::new();
        let mut projects = Vec::new();
        for (si, s) in self.shown_sources() {
            let Some(d) = &s.data else { continue };
            let stale = s.is_stale(self.now, self.refresh_ms);
            for (ni, n) in d.nodes.iter().enumerate() {
                for (di, dev) in n.devices.iter().enumerate() {
                    let hit = match &dev_gpu {
                        Some(g) => g.names(&s.name, &n.name, dev.index),
                        None => {
                            words_match(&dev_needle, || device_words(&s.name, &n.name, dev, stale))
                        }
                    };
                    if hit {
                        let k = DevKey {
                            source: si,
                            node: ni,
                            dev: di,
                        };
                        devs.push((k, dev));
                    }
                }
            }
            for (ci, c) in d.claims.iter().enumerate() {
                let hit = match (&claim_gpu, &c.node) {
                    (Some(g), Some(node)) => {
                        c.shares.iter().any(|sh| g.names(&s.name, node, sh.device))
                    }
                    (Some(_), None) => false,
                    (None, _) => words_match(&claim_needle, || claim_words(c, stale)),
                };
                if hit {
                    claims.push((
                        ClaimKey {
                            source: si,
                            idx: ci,
                        },
                        c,
                    ));
                }
            }
            for (pi, p) in d.projects.iter().enumerate() {
                if words_match(&proj_needle, || project_words(p, self.now)) {
                    projects.push((
                        ProjKey {
                            source: si,
                            idx: pi,
                        },
                        p,
                    ));
                }
            }
        }
        let sort = self.gpus.sort;
        devs.sort_by(|(_, a), (_, b)| sort.order(a, b));
        let sort = self.claims.sort;
        claims.sort_by(|(a, x), (b, y)| sort.order((a.source, x), (b.source, y)));
        let sort = self.projects.sort;
        projects.sort_by(|(_, a), (_, b)| sort.order(a, b));
        let mut devs: Vec<DevKey> = devs.into_iter().map(|(k, _)| k).collect();
        let widths = claim_widths(claims.iter().map(|(_, c)| *c));
        let mut claims: Vec<ClaimKey> = claims.into_iter().map(|(k, _)| k).collect();
        let mut projects: Vec<ProjKey> = projects.into_iter().map(|(k, _)| k).collect();
        if self.gpus.reverse {
            devs.reverse();
        }
        if self.claims.reverse {
            claims.reverse();
        }
        if self.projects.reverse {
            projects.reverse();
        }
        self.gpus.set_rows(devs);
        self.claim_widths = widths;
        self.claims.set_rows(claims);
        self.projects.set_rows(projects);
        self.follow_picks();
    }
}

/// Decimal digits of `n`.
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// The widest id (an engine's name, or the number) and holder among `claims`.
fn claim_widths<'a>(claims: impl Iterator<Item = &'a ClaimView>) -> ClaimWidths {
    claims.fold(ClaimWidths::default(), |w, c| {
        let id = c
            .name
            .as_ref()
            .map_or_else(|| digits(c.id.0), |n| n.chars().count());
        let holder = c.holder.as_ref().map_or(1, |h| h.chars().count());
        ClaimWidths {
            id: w.id.max(id),
            holder: w.holder.max(holder),
        }
    })
}
