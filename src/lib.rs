//! gpuboard: GPU sharing by memory and fraction, fair share between projects, and an operator console.
//!
//! The domain (`units`, `request`, `placement`, `scheduler`) is plain synchronous Rust
//! with no I/O; the server, the CLI, the console and the simulator all call it.

pub mod api;
pub mod auth;
pub mod cli;
pub mod client;
pub mod clock;
pub mod engine;
pub mod inventory;
pub mod placement;
pub mod request;
pub mod scheduler;
pub mod snapshot;
pub mod store;
pub mod units;
