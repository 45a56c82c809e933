//! The claim detail's data: the claim picked in Claims, found again by id in its
//! source's latest snapshot, with what else that snapshot says about it (its processes,
//! its project's accounts, the audit events that name it).

use crate::snapshot::{AuditEvent, ClaimView, ProcessView, ProjectView};

use super::{Cursor, SourceSlot, State, View};

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
        self.cursor[View::ClaimDetail.position()] = Cursor::default();
        true
    }

    /// The claim shown in the claim detail, with its source, if its source still lists it.
    pub fn detail_claim(&self) -> Option<(&SourceSlot, &ClaimView)> {
        let (src, id) = self.claim_detail?;
        let slot = self.sources.get(src)?;
        Some((slot, slot.data.as_ref()?.claim(id)?))
    }

    /// The processes telemetry attributes to the detail's claim, with the device index
    /// each runs on; `None` when none of its devices has telemetry (unknown, not none).
    pub fn detail_claim_processes(&self) -> Option<Vec<(u32, &ProcessView)>> {
        let (slot, c) = self.detail_claim()?;
        let node = c.node.as_deref()?;
        let n = slot.data.as_ref()?.nodes.iter().find(|n| n.name == node)?;
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

    /// The audit events that name the detail's claim as their target, oldest first.
    pub fn detail_claim_events(&self) -> Vec<&AuditEvent> {
        let Some((slot, c)) = self.detail_claim() else {
            return Vec::new();
        };
        let target = format!("claim {}", c.id);
        slot.data
            .as_ref()
            .map(|d| d.events.iter().filter(|e| e.target == target).collect())
            .unwrap_or_default()
    }

    /// How many lines the claim detail draws at most (its scroll range): the fixed
    /// lines plus one per share, process, reason, project account and event.
    pub(super) fn claim_detail_lines(&self) -> usize {
        let Some((_, c)) = self.detail_claim() else {
            return 0;
        };
        let fixed = 16;
        fixed
            + c.shares.len()
            + self.detail_claim_processes().map_or(1, |p| p.len().max(1))
            + c.pending_reasons.len()
            + self.detail_claim_project().map_or(1, |p| p.resources.len())
            + self.detail_claim_events().len()
    }
}
