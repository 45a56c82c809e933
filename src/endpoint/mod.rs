//! What `gpuboard serve` is: the engine (scheduler + durable store + ticker + live
//! telemetry), the HTTP API over it and its bearer tokens. The `SQLite` stores under it
//! are `crate::store`'s.
//!
//! Start at [`engine::Engine`] for behaviour, at [`api::router`] for the routes.

pub mod api;
mod api_error;
mod api_state;
pub mod auth;
mod body;
mod capacity;
mod conditional;
pub mod datadir;
pub mod engine;
mod forecast;
mod forecast_cache;
pub mod gate;
pub mod history_api;
pub mod history_recorder;
pub mod hostlock;
pub mod listener;
pub mod live;
mod metrics;
pub mod owners;
pub mod record_api;
pub mod report_api;
pub mod tls;
pub mod tokens;
pub mod versions;
mod watch;

pub use body::strict_json;
