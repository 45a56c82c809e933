//! The filtered and sorted rows of the list views, rebuilt when data, filter or sort change.

use crate::snapshot::ClaimState;

use super::{ClaimKey, DevKey, ProjKey, State, View};

impl State {
    /// Recomputes the filtered and sorted rows and the totals from the sources' data.
    /// Called when the data, the filter, the sort or the shown sources change; drawing
    /// only reads the result.
    pub fn rebuild_rows(&mut self) {
        self.recompute_totals();
        // Each list has its own filter.
        let needle = |v: View| self.filters[v.position()].to_lowercase();
        let (dev_needle, claim_needle, proj_needle) = (
            needle(View::Gpus),
            needle(View::Claims),
            needle(View::Ledger),
        );
        // The hay is built only under a filter: at fleet scale (8 000 GPUs, 20 000 claims)
        // formatting it for every row on every change was most of an idle console's work.
        let matching = |needle: &str, hay: &dyn Fn() -> Vec<String>| {
            needle.is_empty() || hay().iter().any(|h| h.to_lowercase().contains(needle))
        };
        // A GPU named as the screens print it (`node-b:5`, `b:5`, `node-b 5`) matches that
        // GPU and the claims holding a share of it, not `node-b:50`.
        let (dev_gpu, claim_gpu) = (gpu_needle(&dev_needle), gpu_needle(&claim_needle));
        let mut devs = Vec::new();
        let mut claims = Vec::new();
        let mut projects = Vec::new();
        for (si, s) in self.shown_sources() {
            let Some(d) = &s.data else { continue };
            let stale = if s.is_stale(self.now, self.refresh_ms) {
                "stale"
            } else {
                ""
            };
            for (ni, n) in d.nodes.iter().enumerate() {
                for (di, dev) in n.devices.iter().enumerate() {
                    let hay = || {
                        // The FLAGS column's words (`idle`, `unclaimed`, `cordon`...) match too.
                        let flags = dev.flag_words().join(" ");
                        let cordoned = if dev.cordoned { "cordoned" } else { "" };
                        [&n.name, &dev.model, &dev.index.to_string(), &s.name, &flags]
                            .into_iter()
                            .cloned()
                            .chain([cordoned, stale].map(str::to_string))
                            .collect()
                    };
                    let hit = match &dev_gpu {
                        Some(g) => names_gpu(g, &s.name, &n.name, dev.index),
                        None => matching(&dev_needle, &hay),
                    };
                    if hit {
                        devs.push(DevKey {
                            source: si,
                            node: ni,
                            dev: di,
                        });
                    }
                }
            }
            for (ci, c) in d.claims.iter().enumerate() {
                let hay = || {
                    // The STATE column's words and the claim's flags.
                    let state = match c.state {
                        ClaimState::Placed if c.idle => "placed idle",
                        ClaimState::Placed => "placed",
                        ClaimState::Pending if c.infeasible => "pending never infeasible",
                        ClaimState::Pending => "pending",
                    };
                    let over = if c.over_limit { "over-limit" } else { "" };
                    [
                        c.id.to_string(),
                        c.project.clone(),
                        c.holder.clone().unwrap_or_default(),
                        c.node.clone().unwrap_or_default(),
                        c.place().unwrap_or_else(|| "pending".to_string()),
                        c.form.clone(),
                    ]
                    .into_iter()
                    .chain([state, over, stale].map(str::to_string))
                    .collect()
                };
                let hit = match (&claim_gpu, &c.node) {
                    (Some(g), Some(node)) => c
                        .shares
                        .iter()
                        .any(|sh| names_gpu(g, &s.name, node, sh.device)),
                    (Some(_), None) => false,
                    (None, _) => matching(&claim_needle, &hay),
                };
                if hit {
                    claims.push(ClaimKey {
                        source: si,
                        idx: ci,
                    });
                }
            }
            for (pi, p) in d.projects.iter().enumerate() {
                let now = self.now;
                let backed = if p
                    .resources
                    .iter()
                    .any(|r| r.backoff_until.is_some_and(|t| t > now))
                {
                    "backed-off backoff"
                } else {
                    ""
                };
                if matching(&proj_needle, &|| vec![p.name.clone(), backed.to_string()]) {
                    projects.push(ProjKey {
                        source: si,
                        idx: pi,
                    });
                }
            }
        }
        self.sort_rows(&mut devs, &mut claims, &mut projects);
        self.rows_devices = devs;
        self.claim_id_digits = self.rows_claims_digits(&claims);
        self.rows_claims = claims;
        self.rows_projects = projects;
        for v in [View::Gpus, View::Claims, View::Ledger] {
            let n = match v {
                View::Gpus => self.rows_devices.len(),
                View::Claims => self.rows_claims.len(),
                _ => self.rows_projects.len(),
            };
            let c = &mut self.cursor[v.position()];
            c.selected = c.selected.min(n.saturating_sub(1));
            c.offset = c.offset.min(c.selected);
        }
        self.follow_picks();
    }

    /// Digits of the longest id among `claims` (counted, not formatted).
    fn rows_claims_digits(&self, claims: &[ClaimKey]) -> usize {
        claims
            .iter()
            .filter_map(|k| self.claim(*k))
            .map(|(_, c)| c.id.0.checked_ilog10().map_or(1, |d| d as usize + 1))
            .max()
            .unwrap_or(0)
    }

    fn sort_rows(&self, devs: &mut [DevKey], claims: &mut [ClaimKey], projects: &mut [ProjKey]) {
        let col = |v: View| v.sort_columns().get(self.sort[v.position()]).copied();
        let dev = |k: &DevKey| self.device(*k);
        match col(View::Gpus) {
            Some("free") => devs
                .sort_by_key(|k| std::cmp::Reverse(dev(k).map_or(0, |(_, _, d)| d.memory_free.0))),
            Some("used") => devs.sort_by_key(|k| {
                std::cmp::Reverse(dev(k).map_or(0, |(_, _, d)| {
                    d.telemetry
                        .as_ref()
                        .and_then(|t| t.memory_used)
                        .map_or(0, |b| b.0)
                }))
            }),
            Some("util") => devs.sort_by_key(|k| {
                std::cmp::Reverse(dev(k).map_or(0, |(_, _, d)| {
                    d.telemetry
                        .as_ref()
                        .and_then(|t| t.utilization_gpu)
                        .unwrap_or(0)
                }))
            }),
            Some("allocated") => devs.sort_by_key(|k| {
                std::cmp::Reverse(dev(k).map_or(0, |(_, _, d)| d.memory_allocated.0))
            }),
            Some("sharers") => devs
                .sort_by_key(|k| std::cmp::Reverse(dev(k).map_or(0, |(_, _, d)| d.holders.len()))),
            _ => {}
        }
        if self.sort_reverse[View::Gpus.position()] {
            devs.reverse();
        }
        let claim = |k: &ClaimKey| self.claim(*k).map(|(_, c)| c);
        match col(View::Claims) {
            Some("project") => claims.sort_by(|a, b| {
                let (x, y) = (claim(a), claim(b));
                x.map(|c| (&c.project, c.id))
                    .cmp(&y.map(|c| (&c.project, c.id)))
            }),
            Some("memory") => claims
                .sort_by_key(|k| std::cmp::Reverse(claim(k).map_or(0, |c| c.memory_reserved.0))),
            Some("used") => claims.sort_by_key(|k| {
                std::cmp::Reverse(claim(k).and_then(|c| c.memory_used).map_or(0, |b| b.0))
            }),
            Some("age") => claims.sort_by_key(|k| claim(k).map_or(0, |c| c.created_at.0)),
            Some("over") => claims.sort_by_key(|k| {
                // Over their limit first, then by how far use is past the reservation.
                claim(k).map(|c| {
                    let used = c.memory_used.map_or(0, |b| b.0);
                    (
                        !c.over_limit,
                        std::cmp::Reverse(used.saturating_sub(c.memory_reserved.0)),
                        c.id,
                    )
                })
            }),
            Some("state") => {
                claims.sort_by_key(|k| claim(k).map(|c| (c.state != ClaimState::Pending, c.id)));
            }
            _ => claims.sort_by_key(|k| (k.source, claim(k).map(|c| c.id))),
        }
        if self.sort_reverse[View::Claims.position()] {
            claims.reverse();
        }
        let proj = |k: &ProjKey| self.project(*k).map(|(_, p)| p);
        match col(View::Ledger) {
            Some("debt") => projects.sort_by(|a, b| {
                let x = proj(a).map_or(0.0, |p| p.overall_debt);
                let y = proj(b).map_or(0.0, |p| p.overall_debt);
                y.total_cmp(&x)
            }),
            Some("pending") => {
                projects.sort_by_key(|k| std::cmp::Reverse(proj(k).map_or(0, |p| p.pending)));
            }
            Some("share") => {
                projects.sort_by_key(|k| std::cmp::Reverse(proj(k).map_or(0, |p| p.share)));
            }
            _ => {}
        }
        if self.sort_reverse[View::Ledger.position()] {
            projects.reverse();
        }
    }
}

/// A filter that names one GPU: `NODE:INDEX` (or `NODE INDEX`, `SOURCE/NODE:INDEX`), the
/// node's name whole or its end; lowercased, as `(source or "", node, index)`.
fn gpu_needle(needle: &str) -> Option<(String, String, u32)> {
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
    (!node.is_empty() && !node.contains(' ')).then(|| (source, node.to_string(), index))
}

/// Whether GPU `index` of `node` on `source` is the one `g` names.
fn names_gpu(g: &(String, String, u32), source: &str, node: &str, index: u32) -> bool {
    let (src, end, want) = g;
    index == *want
        && node.to_lowercase().ends_with(end.as_str())
        && (src.is_empty() || source.to_lowercase() == *src)
}
