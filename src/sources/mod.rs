//! Console sources that read other engines: Ray clusters and Prometheus servers.

pub mod error;
pub mod http;
pub mod json;
pub mod prometheus;
pub mod ray;
