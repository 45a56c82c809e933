//! A large fleet for the Overview's fleet map, with every state a GPU can be in: a demo
//! world of `nodes - 1` nodes x 8 GPUs with some GPUs cordoned, lost, unhealthy, idle or
//! held by a claim over its limit, plus a second source of one node whose data is stale,
//! and a Slurm source whose job holds a GPU a demo claim holds too (one GPU seen by two
//! sources, booked twice). Deterministic; included with `#[path]` by the render bench too.
#![allow(dead_code)]

use gpuboard::console::keymap::Keymap;
use gpuboard::console::msg::Msg;
use gpuboard::console::state::{SourceSlot, State};
use gpuboard::console::update::update;
use gpuboard::placement::DeviceShare;
use gpuboard::placement::Health;
use gpuboard::snapshot::{ClaimState, NodeView, Snapshot};
use gpuboard::sources::demo::DemoWorld;
use gpuboard::units::{Bytes, Slots, Units};

pub use super::console_fixtures::{NOW, feed};

/// A state over `nodes` nodes of 8 GPUs (the last node on a stale second source), on
/// the Overview, dates in UTC.
pub fn fleet_map_state(nodes: usize) -> anyhow::Result<State> {
    let mut world = DemoWorld::scaled(nodes - 1, 8, nodes * 4, 7)?;
    world.advance(NOW);
    let mut snap = world.snapshot(NOW);
    mark_states(&mut snap);
    let mut far_world = DemoWorld::scaled(1, 8, 4, 9)?;
    far_world.advance(NOW);
    let mut far = far_world.snapshot(NOW);
    for n in &mut far.nodes {
        n.name = n.name.replace("node", "far");
    }
    for c in &mut far.claims {
        c.node = c.node.as_ref().map(|n| n.replace("node", "far"));
    }
    let slurm = booked_twice(&snap)?;
    let mut st = State::new(
        vec![
            SourceSlot::new("demo", "demo".parse()?, true, None),
            SourceSlot::new("far", "gpuboard".parse()?, true, None),
            SourceSlot::new("slurm", "slurm".parse()?, false, None),
        ],
        Keymap::builtin(),
        2_000,
        false,
    );
    st.zone = jiff::tz::TimeZone::UTC;
    // `far` answered two minutes ago and not since: stale now.
    let _ = update(
        &mut st,
        Msg::Tick(gpuboard::clock::Timestamp(NOW.0 - 180_000)),
    );
    feed(&mut st, 1, far, NOW.0 - 120_000);
    feed(&mut st, 0, snap, NOW.0 - 1_000);
    feed(&mut st, 2, slurm, NOW.0 - 1_000);
    let _ = update(&mut st, Msg::Tick(NOW));
    st.view = gpuboard::console::state::View::Overview;
    Ok(st)
}

/// Cordons, loses, idles and overruns some GPUs, every few nodes, so each state shows.
fn mark_states(snap: &mut Snapshot) {
    for c in snap.claims.iter_mut().step_by(29) {
        if c.state == ClaimState::Placed {
            c.over_limit = true;
        }
    }
    for (i, n) in snap.nodes.iter_mut().enumerate() {
        let Some(d) = n.devices.get_mut(i % 8) else {
            continue;
        };
        match i % 13 {
            3 => d.cordoned = true,
            5 => d.health = Health::Lost,
            7 => d.health = Health::Unhealthy("XID 79".to_string()),
            9 => {
                if d.memory_allocated.0 == 0 {
                    d.memory_allocated = Bytes::gib(10);
                }
                let t = d.telemetry.get_or_insert_with(Default::default);
                t.utilization_gpu = Some(0);
                t.history_utilization = vec![0; 40];
            }
            _ => {}
        }
    }
}

/// A Slurm cluster of one node, named as a demo node, whose job holds a whole GPU that a
/// demo claim (healthy, within its limit) holds a share of: that GPU is double-booked.
fn booked_twice(demo: &Snapshot) -> anyhow::Result<Snapshot> {
    let (node, dev, held) = demo
        .nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| ![3, 5, 7, 9].contains(&(i % 13)))
        .flat_map(|(_, n)| n.devices.iter().map(move |d| (n, d)))
        .find_map(|(n, d)| {
            let c = demo.claims.iter().find(|c| {
                d.holders.contains(&c.id) && !c.over_limit && c.state == ClaimState::Placed
            })?;
            Some((n, d, c))
        })
        .ok_or_else(|| anyhow::anyhow!("no demo GPU held within its limit"))?;
    let mut job = held.clone();
    job.id = gpuboard::ids::ClaimId(900_001);
    job.name = Some("4242".to_string());
    job.holder = Some("slurm-user".to_string());
    job.shares = vec![DeviceShare {
        device: dev.index,
        memory: Bytes(0),
        compute: Units::FULL,
        slots: Slots(1),
    }];
    job.memory_reserved = Bytes(0);
    job.compute_reserved = Units::FULL;
    let mut device = dev.clone();
    device.holders = vec![job.id];
    device.telemetry = None;
    Ok(Snapshot {
        nodes: vec![NodeView {
            name: node.name.clone(),
            devices: vec![device],
            ..NodeView::default()
        }],
        claims: vec![job],
        projects: Vec::new(),
        events: Vec::new(),
        ..demo.clone()
    })
}
