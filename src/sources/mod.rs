//! Console sources that read other engines: Ray clusters, Prometheus servers, Slurm
//! clusters and BOINC clients.

pub mod boinc;
pub mod error;
pub mod gres;
pub mod guirpc;
pub mod http;
pub mod json;
pub mod md5;
pub mod prometheus;
pub mod ray;
pub mod slurm;
pub mod xml;
