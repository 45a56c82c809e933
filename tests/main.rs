//! The integration tests, one module per file beside this one, linked into one test binary
//! (one link instead of one per file: a smaller `target/` and a faster build).
//! Run one file's tests with `cargo test --test it FILE::`. A new file needs its `mod` line
//! here (tests/layout.rs fails on one left out); shared helpers go in `common/`.

// An integration test is one scenario against real peers, read top to bottom: start them,
// act, check each step; cut into helpers, its steps would be read apart from their checks.
#![allow(clippy::too_many_lines)]

mod common;

mod access;
mod access_flood;
mod api;
mod api_bodies;
mod boinc_source;
mod boinc_tasks;
mod busy_store;
mod cli;
mod cli_events;
mod console_by_gpu;
mod console_claim_detail;
mod console_detail_tmux;
mod console_engine_flags;
mod console_engine_views;
mod console_fairshare;
mod console_fleet;
mod console_fleet_map;
mod console_fleet_map_tmux;
mod console_handover;
mod console_idempotent;
mod console_incident;
mod console_lists;
mod console_moves;
mod console_named_targets;
mod console_pools;
mod console_render_props;
mod console_rewind;
mod console_rewind_tmux;
mod console_selection;
mod console_status;
mod console_tables;
mod console_tmux;
mod console_update;
mod console_usage;
mod console_views;
mod corpus;
mod crash;
mod discover;
mod docs_paths;
mod doctor_fleet;
mod endpoint_resolution;
mod endpoint_source;
mod engine_actions;
mod engine_console;
mod engine_fixtures;
mod engine_names;
mod exit_codes;
mod fairshare_ledger;
mod fairshare_sim;
mod fake_nvml;
mod faults;
mod fleet_capacity;
mod fleet_claims;
mod fleet_idempotent;
mod fleet_lost_answers;
mod fleet_sync;
mod forecast;
mod forecast_history;
mod history_exactness;
mod history_record;
mod history_serve;
mod kubernetes_decode;
mod kubernetes_record;
mod kubernetes_source;
mod layout;
mod one_gpu_peers;
mod one_scheduler;
mod packaging;
mod placement_props;
mod process_owners;
mod prometheus_source;
mod ray_source;
mod readme;
mod record_flags;
mod reference;
mod refusals;
mod report_engines;
mod report_scenario;
mod run_leases;
mod serve_nvml;
mod simulated_telemetry;
mod slurm_source;
mod source_failures;
mod ssh_actions;
mod ssh_source;
mod tls_flood;
mod token_usage;
mod watch_api;
mod watch_figures;
