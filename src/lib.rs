//! gpuboard: GPU sharing by memory and fraction, fair share between projects, and an operator console.

pub mod placement;
pub mod request;
pub mod units;
