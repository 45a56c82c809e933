//! The time machine's domain: what an endpoint's history is made of and how it is read
//! back. State versions are recorded exactly (keyframes, whole snapshots without their
//! telemetry, and between them the `SnapshotChange`s of the watch); telemetry is kept per
//! device in compressed columnar chunks; changes are indexed by the GPUs, claims and
//! projects they touch. Plain data and encoding, no I/O: the contract of its API is
//! `wire::history`, the store `store::history`, the routes `endpoint::history_api`.

pub mod changes;
pub mod chunk;
pub mod record;
pub mod sample;

pub use record::{Body, Record, Recording, replay, state_of};
pub use sample::{DeviceSample, join, samples_of};
