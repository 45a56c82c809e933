//! Conditional reads: whether a request's `If-None-Match` already names the entity tag
//! an answer would carry (then it is a 304).

use axum::http::{HeaderMap, header};

/// Whether any `If-None-Match` of `headers` names `tag` (weak or strong) or is `*`.
pub(crate) fn unchanged_for(headers: &HeaderMap, tag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == tag || t == "*")
}
