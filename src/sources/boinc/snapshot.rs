//! The client's answers turned into a snapshot, one section at a time: the state and
//! status replies read on their own, then the host's devices (its coprocessors), the tasks
//! as claims counted on those devices, the resource types, and the projects.

use super::answers::{BoincAnswers, BoincParseError};
use super::projects::{projects_of, resources_of};
use super::state::{CcStatus, ClientState, parse_cc_status, parse_state};
use super::tasks::{FirstIndex, task_claims};
use crate::clock::Timestamp;
use crate::snapshot::{
    ClaimState, ClaimView, DeviceView, EndpointInfo, NodeView, SCHEMA_VERSION, Snapshot,
};
use crate::sources::sections::Sections;
use crate::units::{Slots, Units};

/// Turns the client's answers into a snapshot. `name` is the endpoint's display name
/// (the client's host name when empty).
pub fn snapshot(
    answers: &BoincAnswers,
    name: &str,
    taken_at: Timestamp,
) -> Result<Snapshot, BoincParseError> {
    // The core is the state reply with its host; the rest is optional, item by item.
    let mut sections = Sections::new();
    let mut skipped = Vec::new();
    let st = parse_state(&answers.state, &mut skipped)?;
    sections.extend(skipped.iter().map(|(path, e)| {
        let left_out = if path.contains("/project[") {
            "this project, its apps and tasks"
        } else {
            "this element"
        };
        e.warning(path, left_out)
    }));
    let cc = sections.optional(
        parse_cc_status(&answers.cc_status)
            .map_err(|e| e.warning("cc_status", "the client's suspend reasons and GPU mode")),
    );
    let node_name = if st.host.is_empty() {
        "localhost".to_string()
    } else {
        st.host.clone()
    };

    let (mut devices, first_index) = devices_of(&st, &cc);
    let (mut claims, usage) = task_claims(&st, &cc, &node_name, &first_index);
    count_on_devices(&claims, &mut devices);
    let resources = resources_of(&st, &usage);
    let projects = projects_of(&st, &usage, &resources);

    claims.sort_by(|a, b| {
        (a.state == ClaimState::Pending, &a.project, &a.holder).cmp(&(
            b.state == ClaimState::Pending,
            &b.project,
            &b.holder,
        ))
    });
    let mut endpoint = EndpointInfo::engine(
        if name.is_empty() { &node_name } else { name },
        "boinc",
        format!("boinc {}", st.version),
    );
    endpoint.warnings = sections.into_warnings();
    Ok(Snapshot {
        schema: SCHEMA_VERSION,
        endpoint,
        revision: 0,
        taken_at,
        nodes: vec![NodeView {
            name: node_name,
            cpus_milli: Some(u64::from(st.ncpus) * 1000),
            cpus_allocated_milli: (usage.cpus_used * 1000.0).round() as u64,
            devices,
        }],
        claims,
        projects,
        resources,
        ..Snapshot::default()
    })
}

/// Devices: each coprocessor instance, numbered across types in the client's order
/// (cordoned when the client's GPU mode is "never"); and where each type starts.
fn devices_of<'a>(st: &'a ClientState, cc: &CcStatus) -> (Vec<DeviceView>, FirstIndex<'a>) {
    let mut devices: Vec<DeviceView> = Vec::new();
    let mut first_index = FirstIndex::new();
    for c in &st.coprocs {
        let first = u32::try_from(devices.len()).unwrap_or(u32::MAX);
        first_index.insert(c.kind.as_str(), (first, c.count));
        for _ in 0..c.count {
            devices.push(DeviceView {
                index: u32::try_from(devices.len()).unwrap_or(u32::MAX),
                model: if c.model.is_empty() {
                    c.kind.clone()
                } else {
                    c.model.clone()
                },
                compute_free: Units::FULL,
                slots_free: Slots::FULL,
                // GPU mode "never": the client starts no GPU work.
                cordoned: cc.gpu_mode == 3,
                ..DeviceView::default()
            });
        }
    }
    (devices, first_index)
}

/// What the claims hold, counted on their devices.
fn count_on_devices(claims: &[ClaimView], devices: &mut [DeviceView]) {
    for c in claims {
        for s in &c.shares {
            if let Some(d) = devices.get_mut(s.device as usize) {
                d.compute_allocated = (d.compute_allocated + s.compute).min(Units::FULL);
                d.compute_free = Units::FULL - d.compute_allocated;
                d.slots_allocated = (d.slots_allocated + s.slots).min(Slots::FULL);
                d.slots_free = Slots::FULL - d.slots_allocated;
                d.holders.push(c.id);
            }
        }
    }
}
