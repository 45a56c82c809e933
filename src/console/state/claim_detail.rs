//! The claim detail's data: the claim picked in Claims (or named by id on the `:` line
//! and in `--dump-screen claim:ID`), found again by id in its source's latest snapshot,
//! with what else that snapshot says about it (its processes, its project's accounts,
//! the audit events that concern it).

use crate::snapshot::{AuditEvent, ClaimView, ProcessView, ProjectView};

use super::{ClaimKey, Cursor, Picked, SourceSlot, State, View};

/// How many claim ids an error lists before saying how many more there are.
const IDS_LISTED: usize = 8;

impl State {
    /// Opens the claim detail on the claim selected in Claims; false when none is
    /// selected (or it is gone).
    pub fn open_claim_detail(&mut self) -> bool {
        let Some(k) = self.selected_claim() else {
            return false;
        };
        let Some((_, c)) = self.claim(k) else {
            return false;
        };
        self.claim_detail = Some((k.source, c.id));
        self.panes.claim_detail.cursor = Cursor::default();
        true
    }

    /// Opens the claim detail on the claim `name` names: `ID` (an engine's name, as
    /// `ml/train-0`, or a number), or `SOURCE/ID` where two sources have that id. The claim becomes the pick in Claims too. An id no source
    /// lists is an error that names the ids there are.
    pub fn open_claim_named(&mut self, name: &str) -> Result<(), String> {
        let k = self.find_claim(name)?;
        let Some((_, c)) = self.claim(k) else {
            return Err(format!("no claim `{name}`"));
        };
        let (src, id) = (k.source, c.id);
        self.claim_detail = Some((src, id));
        self.panes.claim_detail.cursor = Cursor::default();
        self.claims.picked = Some(Picked::Claim(src, id));
        self.follow_picks();
        // Esc goes back where it was opened from (a detail opened over a detail keeps
        // the first one's way back).
        if self.view != View::ClaimDetail {
            self.came_from = Some(self.view);
        }
        self.view = View::ClaimDetail;
        Ok(())
    }

    /// The names of the claims shown in Claims, as `open_claim_named` takes them (with
    /// the source where several are shown): what `:claim ` completes to.
    pub fn claim_names(&self) -> Vec<String> {
        let multi = self.sources.len() > 1;
        self.claims
            .rows
            .iter()
            .filter_map(|k| {
                let (slot, c) = self.claim(*k)?;
                Some(if multi {
                    format!("{}/{}", slot.name, c.shown_id())
                } else {
                    c.shown_id()
                })
            })
            .collect()
    }

    /// `claims: 1, 2, 3 (and 15 more)`, or that there are none.
    pub(super) fn claim_names_listed(&self) -> String {
        let names = self.claim_names();
        if names.is_empty() {
            return "no claims are listed".to_string();
        }
        let more = names.len().saturating_sub(IDS_LISTED);
        let shown: Vec<&str> = names.iter().take(IDS_LISTED).map(String::as_str).collect();
        let tail = if more > 0 {
            format!(" (and {more} more)")
        } else {
            String::new()
        };
        format!("claims: {}{tail}", shown.join(", "))
    }

    /// The claim an action (release, move) targets: in Claims the selected one, in the
    /// claim detail the claim it shows; `None` elsewhere or when it is gone.
    pub fn acted_claim(&self) -> Option<ClaimKey> {
        match self.view {
            View::Claims => self.selected_claim(),
            View::ClaimDetail => {
                let (src, id) = self.claim_detail?;
                let idx = self
                    .sources
                    .get(src)?
                    .data
                    .as_ref()?
                    .claims
                    .iter()
                    .position(|c| c.id == id)?;
                Some(ClaimKey { source: src, idx })
            }
            _ => None,
        }
    }

    /// The claim detail's claim when it is gone, in words (`claim 3 on lab`).
    pub fn detail_claim_gone(&self) -> Option<String> {
        let (src, id) = self.claim_detail?;
        if self.view != View::ClaimDetail || self.detail_claim().is_some() {
            return None;
        }
        let source = self
            .sources
            .get(src)
            .map_or("its source", |s| s.name.as_str());
        Some(format!("claim {id} on {source}"))
    }

    /// The claim shown in the claim detail, with its source, if its source still lists it.
    pub fn detail_claim(&self) -> Option<(&SourceSlot, &ClaimView)> {
        let (src, id) = self.claim_detail?;
        let slot = self.sources.get(src)?;
        Some((slot, slot.data.as_deref()?.claim(id)?))
    }

    /// The processes telemetry attributes to the detail's claim, with the device index
    /// each runs on; `None` when none of its devices has telemetry (unknown, not none).
    /// A Kubernetes pod's are those whose cgroups name its UID, in any source.
    pub fn detail_claim_processes(&self) -> Option<Vec<(u32, &ProcessView)>> {
        let (slot, c) = self.detail_claim()?;
        if let Some(uid) = crate::sources::kubernetes::owners::pod_uid(c) {
            let snaps = self.sources.iter().filter_map(|s| s.data.as_deref());
            let found = crate::sources::kubernetes::owners::processes_of_pod(snaps, uid);
            if !found.is_empty() {
                return Some(found);
            }
        }
        let node = c.node.as_deref()?;
        let n = slot
            .data
            .as_deref()?
            .nodes
            .iter()
            .find(|n| n.name == node)?;
        let mut seen = false;
        let mut out = Vec::new();
        for d in &n.devices {
            if !c.shares.iter().any(|s| s.device == d.index) {
                continue;
            }
            let Some(t) = d.telemetry.as_ref() else {
                continue;
            };
            seen = true;
            out.extend(
                t.processes
                    .iter()
                    .filter(|p| p.claim == Some(c.id))
                    .map(|p| (d.index, p)),
            );
        }
        seen.then_some(out)
    }

    /// The detail claim's project, with its fair-share accounts.
    pub fn detail_claim_project(&self) -> Option<&ProjectView> {
        let (slot, c) = self.detail_claim()?;
        slot.data
            .as_ref()?
            .projects
            .iter()
            .find(|p| p.name == c.project)
    }

    /// The audit events that concern the detail's claim, oldest first: those whose
    /// target it is, those that name it in their text, and those on what it depends on
    /// (a GPU it holds cordoned, its project's share, reset or backoffs).
    pub fn detail_claim_events(&self) -> Vec<&AuditEvent> {
        let Some((slot, c)) = self.detail_claim() else {
            return Vec::new();
        };
        let target = format!("claim {}", c.id);
        let node = c.node.as_deref().unwrap_or_default();
        let gpus: Vec<String> = c
            .shares
            .iter()
            .map(|s| format!("{node}:{}", s.device))
            .collect();
        let project = format!("project {}", c.project);
        // The ledger's events are JSON naming the project.
        let in_ledger = format!("\"project\":\"{}\"", c.project);
        let concerns = |e: &AuditEvent| {
            e.target == target
                || names_claim(&e.detail, &target)
                || gpus.contains(&e.target)
                || e.target == project
                || e.target == "all projects"
                || (e.target == "ledger" && e.detail.contains(&in_ledger))
        };
        slot.data
            .as_ref()
            .map(|d| d.events.iter().filter(|e| concerns(e)).collect())
            .unwrap_or_default()
    }

    /// How many lines the claim detail draws at most (its scroll range): the fixed
    /// lines (with a waiting claim's expected start) plus one per share, process, reason,
    /// project account and event.
    pub(super) fn claim_detail_lines(&self) -> usize {
        let Some((_, c)) = self.detail_claim() else {
            return 0;
        };
        let fixed = 17;
        fixed
            + c.shares.len()
            + self.detail_claim_processes().map_or(1, |p| p.len().max(1))
            + c.pending_reasons.len()
            + self.detail_claim_project().map_or(1, |p| p.resources.len())
            + self.detail_claim_events().len()
    }
}

/// Whether `text` names `claim N` as a whole word (`claim 1` is not in `claim 12`).
fn names_claim(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(i, _)| {
        let after = text[i + name.len()..].chars().next();
        let before = text[..i].chars().next_back();
        !after.is_some_and(|c| c.is_ascii_alphanumeric())
            && !before.is_some_and(|c| c.is_ascii_alphanumeric())
    })
}
