//! gpuboard: GPU sharing by memory and fraction, fair share between projects, and an operator console.

pub mod attribution;
pub mod discovery;
pub mod doctor;
pub mod telemetry;
pub mod units;
