//! gpuboard: GPU sharing by memory and fraction, fair share between projects, and an operator console.
//!
//! Layers, lowest first; a module imports only from its own layer or below (`tests/layout.rs`
//! ranks every module; README, "Code map"):
//! - **Foundation**: `units`, `clock`, `ids`, `when` (the times an operator types), `identity`
//!   (who runs this process: the environment and the password database), `shared` (tables
//!   whose clone is a pointer: what a copy of the scheduler shares).
//! - **Domain, no I/O**: `fairshare`, `request`, `placement`, `snapshot` (the read model),
//!   `scheduler`, `wire` (the HTTP contract), `history` (its record over time), `accounting`
//!   (GPU time from a window of history), `forecast` (expected starts and previews, on a copy
//!   of the scheduler), `physical` (one GPU across every source that sees it, with every
//!   engine's holders nested and the flags no one engine can see); `inventory` and
//!   `simulate` read their one input file.
//! - **GPUs**: `telemetry` (NVML, /proc), `attribution` (whose claim each GPU process is: pure,
//!   over telemetry's process samples), `discovery` (Flink).
//! - **Edges**: `store` (what outlives the process, in `SQLite`), `endpoint` (what `gpuboard
//!   serve` is), `client` (its HTTP client), `sources` (where the console's data comes from),
//!   `fleet` (the protocol of a claim across endpoints, no I/O of its own, driven by both
//!   front ends), `doctor`, `exit` (every command's exit codes and the one mapping from a
//!   fault to its code).
//! - **Front ends**: `console` (the terminal UI) and `cli` (the subcommands).

pub mod accounting;
pub mod attribution;
pub mod cli;
pub mod client;
pub mod clock;
pub mod console;
pub mod discovery;
pub mod doctor;
pub mod endpoint;
pub mod exit;
pub mod fairshare;
pub mod fleet;
pub mod forecast;
pub mod history;
pub mod identity;
pub mod ids;
pub mod inventory;
pub mod physical;
pub mod placement;
pub mod request;
pub mod scheduler;
pub mod shared;
pub mod simulate;
pub mod snapshot;
pub mod sources;
pub mod store;
pub mod telemetry;
pub mod units;
pub mod when;
pub mod wire;
