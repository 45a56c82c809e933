//! Which GPUs this process may use: Flink's discovery-script contract (run a script with
//! the amount first, read comma-separated indexes), Flink's configuration keys, and
//! `gpuboard discover`, a drop-in for Flink's own script with the same coordination file.

pub mod command;
pub mod config;
pub mod coordination;
pub mod script;

pub use config::{ConfigError, GpuResourceConfig, flatten_toml, parse_flat_config};
pub use coordination::{
    AssignmentRecord, CoordinationError, CoordinationOptions, DEFAULT_COORDINATION_FILE, assign,
    read_records,
};
pub use script::{ScriptError, parse_indexes, run_discovery_script};
