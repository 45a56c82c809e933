//! gpuboard: GPU sharing by memory and fraction, fair share between projects, and an operator console.
//!
//! The domain (`units`, `request`, `placement`, `scheduler`) is plain synchronous Rust
//! with no I/O; the server, the CLI, the console and the simulator all call it.

pub mod api;
pub mod attribution;
pub mod auth;
pub mod cli;
pub mod client;
pub mod clock;
pub mod console;
pub mod discovery;
pub mod doctor;
pub mod engine;
pub mod fairshare;
pub mod inventory;
pub mod live;
pub mod placement;
pub mod request;
pub mod scheduler;
pub mod simulate;
pub mod snapshot;
pub mod sources;
pub mod store;
pub mod telemetry;
pub mod units;
