//! The HTTP API v1 contract.
