//! Operator changes: cordoning devices, setting project shares and resetting the
//! fair-share accounts. Each is journaled and audited.

use super::{Change, Scheduler, SchedulerError};
use crate::clock::Timestamp;
use crate::fairshare::{ProjectName, Share};
use crate::placement::FleetError;

impl Scheduler {
    /// Stops or resumes new claims on a device.
    pub fn set_cordon(
        &mut self,
        node: &str,
        index: u32,
        cordoned: bool,
        actor: &str,
        now: Timestamp,
    ) -> Result<(), FleetError> {
        self.fleet.set_cordon(node, index, cordoned)?;
        self.journal.push(Change::Cordon {
            node: node.to_string(),
            index,
            cordoned,
        });
        let action = if cordoned { "cordon" } else { "uncordon" };
        self.audit(
            now,
            actor,
            action,
            format!("{node}:{index}"),
            format!("{action}ed"),
        );
        Ok(())
    }

    /// Sets a project's resource share (0 to 1 000 000; 0 gets no work).
    pub fn set_share(
        &mut self,
        project: &str,
        share: u32,
        actor: &str,
        now: Timestamp,
    ) -> Result<(), SchedulerError> {
        let name = ProjectName::new(project)?;
        self.ledger.set_share(now, &name, Share::new(share)?);
        self.shares.insert(project.to_string(), share);
        self.save_ledger(now);
        self.journal.push(Change::Share {
            project: project.to_string(),
            share,
        });
        self.audit(
            now,
            actor,
            "share",
            format!("project {project}"),
            format!("share set to {share}"),
        );
        Ok(())
    }

    /// Sets a project's debts to zero and clears its backoffs (or every project's).
    pub fn reset_project(
        &mut self,
        project: Option<&str>,
        actor: &str,
        now: Timestamp,
    ) -> Result<(), SchedulerError> {
        let name = project.map(ProjectName::new).transpose()?;
        self.ledger.reset(now, name.as_ref())?;
        self.save_ledger(now);
        let target = project.map_or("all projects".to_string(), |p| format!("project {p}"));
        self.audit(
            now,
            actor,
            "reset",
            target,
            "debts and backoffs cleared".to_string(),
        );
        self.place_pending(now);
        Ok(())
    }
}
