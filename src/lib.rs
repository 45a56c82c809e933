//! gpuboard: GPU sharing by memory and fraction, fair share between projects, and an operator console.

pub mod fairshare;
pub mod simulate;
pub mod units;
