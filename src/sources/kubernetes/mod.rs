//! A Kubernetes cluster as a console source: nodes and pods, every GPU-share encoding
//! (extended resources, MIG, HAMi, Koordinator) read into one model.
//!
//! Where things live: `objects` (the trimmed node and pod this source keeps), `encodings`
//! (HAMi's and Koordinator's annotations), `decode` (nodes and pods into a snapshot).

pub mod decode;
pub mod encodings;
pub mod objects;
