//! Operator actions: `gpuboard cordon`/`uncordon` (stop or resume new claims on a device)
//! and `gpuboard project` (set a share, clear debts and backoffs).

use clap::Subcommand;
use serde_json::json;

use super::{Conn, connect, done};
use crate::wire::forecast::PreviewAction;

/// `gpuboard project ...`.
#[derive(Subcommand, Debug)]
pub enum ProjectCommand {
    /// Set a project's resource share.
    Set {
        /// Project name.
        name: String,
        /// Share (default 100; a project with 200 gets twice the processing of one with 100).
        #[arg(long)]
        share: u32,
        /// Show what it would do (placements, stranded claims, debts, expected starts)
        /// and change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Clear a project's debts and backoffs.
    Reset {
        /// Project name.
        name: String,
        /// Show what it would do (placements, stranded claims, debts, expected starts)
        /// and change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        conn: Conn,
    },
}

/// `gpuboard cordon NODE INDEX`.
pub(super) async fn cordon(node: String, index: u32, conn: &Conn) -> anyhow::Result<u8> {
    connect(conn)?.cordon(&node, index).await?;
    done(
        conn,
        json!({"node": node, "index": index, "cordoned": true}),
        || format!("{node}:{index} cordoned"),
    )?;
    Ok(0)
}

/// `gpuboard uncordon NODE INDEX`.
pub(super) async fn uncordon(node: String, index: u32, conn: &Conn) -> anyhow::Result<u8> {
    connect(conn)?.uncordon(&node, index).await?;
    done(
        conn,
        json!({"node": node, "index": index, "cordoned": false}),
        || format!("{node}:{index} uncordoned"),
    )?;
    Ok(0)
}

/// `gpuboard project set|reset NAME`.
pub(super) async fn project(cmd: ProjectCommand) -> anyhow::Result<u8> {
    match cmd {
        ProjectCommand::Set {
            name,
            share,
            dry_run: true,
            conn,
        } => {
            let action = PreviewAction::Share {
                project: name,
                share,
            };
            return super::dry_run::dry_run(action, None, &conn).await;
        }
        ProjectCommand::Reset {
            name,
            dry_run: true,
            conn,
        } => {
            let action = PreviewAction::Reset {
                project: Some(name),
            };
            return super::dry_run::dry_run(action, None, &conn).await;
        }
        ProjectCommand::Set {
            name, share, conn, ..
        } => {
            connect(&conn)?.set_share(&name, share).await?;
            done(&conn, json!({"project": name, "share": share}), || {
                format!("project {name}: share {share}")
            })?;
        }
        ProjectCommand::Reset { name, conn, .. } => {
            connect(&conn)?.reset_project(&name).await?;
            done(&conn, json!({"project": name, "reset": true}), || {
                format!("project {name}: debts and backoffs cleared")
            })?;
        }
    }
    Ok(0)
}
