//! The client's answers: which requests one fetch sends, what was wrong with a reply, and
//! the small readers every section uses (numbers, flags, the reply's root).

use crate::snapshot::SourceWarning;
use crate::sources::xml::{self, Element};

/// The client's answers one fetch reads, as XML text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BoincAnswers {
    /// `<get_state/>`.
    pub state: String,
    /// `<get_cc_status/>`.
    pub cc_status: String,
}

/// Which answer something was wrong with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoincAnswerKind {
    /// `<get_state/>`.
    State,
    /// `<get_cc_status/>`.
    CcStatus,
}

impl BoincAnswerKind {
    pub(super) fn request(self) -> &'static str {
        match self {
            BoincAnswerKind::State => "<get_state/>",
            BoincAnswerKind::CcStatus => "<get_cc_status/>",
        }
    }
}

/// What was wrong with an answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("reply to {}: {what}", answer.request())]
pub struct BoincParseError {
    /// Which answer.
    pub answer: BoincAnswerKind,
    /// What was wrong, naming the element.
    pub what: String,
}

impl BoincParseError {
    /// This error as a warning on the source: at `path` in its reply, leaving out `left_out`.
    pub fn warning(&self, path: &str, left_out: &str) -> SourceWarning {
        SourceWarning {
            section: self.answer.request().to_string(),
            path: path.to_string(),
            found: self.what.clone(),
            left_out: left_out.to_string(),
        }
    }
}

/// A parse error in `answer`.
pub(super) fn bad(answer: BoincAnswerKind, what: impl Into<String>) -> BoincParseError {
    BoincParseError {
        answer,
        what: what.into(),
    }
}

/// Reads an optional number; present but not a finite number is an error naming the element.
pub(super) fn num(
    answer: BoincAnswerKind,
    el: &Element,
    name: &str,
    at: &str,
) -> Result<Option<f64>, BoincParseError> {
    match el.text_of(name) {
        None => Ok(None),
        Some(t) => t
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .map(Some)
            .ok_or_else(|| bad(answer, format!("`{at}/{name}` is {t:?}, not a number"))),
    }
}

/// A flag BOINC writes as `<x/>` (or `<x>1</x>`).
pub(super) fn flag(el: &Element, name: &str) -> bool {
    el.child(name)
        .is_some_and(|c| c.text.is_empty() || c.text.trim() != "0")
}

/// Seconds as milliseconds, clamped at zero.
pub(super) fn seconds_to_ms(s: f64) -> u64 {
    (s.max(0.0) * 1000.0).round() as u64
}

/// The reply's root, checked to be `<boinc_gui_rpc_reply>`.
pub(super) fn parse_reply(answer: BoincAnswerKind, text: &str) -> Result<Element, BoincParseError> {
    let root = xml::parse(text).map_err(|e| bad(answer, e.to_string()))?;
    if root.name != "boinc_gui_rpc_reply" {
        return Err(bad(
            answer,
            format!("the root is `<{}>`, not `<boinc_gui_rpc_reply>`", root.name),
        ));
    }
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_accept_both_spellings() {
        let el = xml::parse("<p><a/><b>1</b><c>0</c></p>").unwrap();
        assert!(flag(&el, "a") && flag(&el, "b"));
        assert!(!flag(&el, "c") && !flag(&el, "d"));
    }
}
