//! gpuboard: GPU sharing by memory and fraction, fair share between projects, and an operator console.
//!
//! Layers, lowest first; a module imports only from its own layer or below:
//! - **Domain, no I/O**: `units`, `clock`, `ids`, `fairshare`, `request`, `placement`,
//!   `scheduler`, `snapshot` (the read model), `history` (its record over time), `wire` (the HTTP contract), `inventory`,
//!   `attribution`, `simulate`, `forecast` (expected starts and previews, on a copy of the scheduler).
//! - **Edges**: `identity` (who runs this process), `telemetry` (NVML), `discovery` (Flink), `endpoint` (what `gpuboard serve`
//!   is), `client` (its HTTP client), `sources` (where the console's data comes from), `doctor`.
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
pub mod fairshare;
pub mod forecast;
pub mod history;
pub mod identity;
pub mod ids;
pub mod inventory;
pub mod placement;
pub mod request;
pub mod scheduler;
pub mod simulate;
pub mod snapshot;
pub mod sources;
pub mod telemetry;
pub mod units;
pub mod when;
pub mod wire;
