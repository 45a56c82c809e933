//! The keymap: which keys trigger which action, per context, read from TOML
//! (`assets/keymap.toml` is built in; a config can point at another file). Help, the
//! footer hints and `:` completion are generated from it.

use std::collections::BTreeMap;
use std::fmt;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use serde::Deserialize;

/// The built-in keymap.
pub const DEFAULT_KEYMAP: &str = include_str!("../../assets/keymap.toml");

/// Where a key is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Context {
    /// Browsing views.
    Normal,
    /// Forms and dialogs.
    Dialog,
}

macro_rules! actions {
    ($($v:ident $name:literal $ctx:ident $mutates:literal $help:literal;)*) => {
        /// Something a key can do.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum KeyAction { $(#[doc = $help] $v,)* }

        impl KeyAction {
            /// Every action, in help order.
            pub const ALL: &'static [KeyAction] = &[$(KeyAction::$v,)*];
            /// The name used in the keymap file and on the `:` command line.
            pub fn name(self) -> &'static str { match self { $(KeyAction::$v => $name,)* } }
            /// The context it belongs to.
            pub fn context(self) -> Context { match self { $(KeyAction::$v => Context::$ctx,)* } }
            /// Whether it changes a source's state (hidden and refused in read-only mode).
            pub fn mutates(self) -> bool { match self { $(KeyAction::$v => $mutates,)* } }
            /// One line of help.
            pub fn help(self) -> &'static str { match self { $(KeyAction::$v => $help,)* } }
        }
    };
}

actions! {
    Quit "quit" Normal false "quit the console";
    Help "help" Normal false "show or hide this help";
    NextView "next_view" Normal false "next view";
    PrevView "prev_view" Normal false "previous view";
    ViewOverview "view_overview" Normal false "Overview: cluster totals and sources";
    ViewGpus "view_gpus" Normal false "GPUs: one row per device";
    ByGpu "by_gpu" Normal false "GPUs by GPU (one row per physical GPU, every engine's holders) or by source";
    ViewClaims "view_claims" Normal false "Claims: who holds what";
    ViewFairShare "view_fairshare" Normal false "Fair share: projects' debts and backoffs";
    ViewDetail "view_detail" Normal false "GPU detail: history, processes, claims";
    ViewEvents "view_events" Normal false "Events: audit log and console log";
    ViewUsage "view_usage" Normal false "Usage: GPU-hours per project over a window (Enter: its claims)";
    Up "up" Normal false "select the row above";
    Down "down" Normal false "select the row below";
    PageUp "page_up" Normal false "a page up";
    PageDown "page_down" Normal false "a page down";
    Top "top" Normal false "first row";
    Bottom "bottom" Normal false "last row";
    Left "left" Normal false "Overview: the fleet map's cell to the left";
    Right "right" Normal false "Overview: the fleet map's cell to the right";
    TrendSpan "trend_span" Normal false "Overview: sparklines over the last hour or the last day";
    Open "open" Normal false "open in detail: GPU, claim, a project's reasons (Fair share)";
    Back "back" Normal false "clear the filter, leave detail, dismiss a message";
    Filter "filter" Normal false "filter rows by text";
    Command "command" Normal false "command line (Tab completes)";
    SortNext "sort_next" Normal false "sort by the next column";
    Problems "problems" Normal false "list the next kind of problem here (over limit, idle, pending...)";
    SortReverse "sort_reverse" Normal false "reverse the sort";
    UsageWindow "usage_window" Normal false "Usage: the next window (1 h, 24 h, 7 d)";
    Freeze "freeze" Normal false "freeze the display (data keeps coming)";
    NextSource "next_source" Normal false "select the next source (or all)";
    Refresh "refresh" Normal false "fetch every source now";
    Claim "claim" Normal true "claim GPU memory or a fraction (form)";
    Release "release" Normal true "release the selected claim (confirm)";
    Move "move" Normal true "move the selected claim to another GPU";
    Cordon "cordon" Normal true "cordon or uncordon the selected GPU";
    ClearBackoff "clear_backoff" Normal true "clear the selected project's backoffs and debts";
    EngineAct "engine_act" Normal true "engine action on the selected claim: cancel/hold a Slurm job, suspend/resume a BOINC task, stop a Ray job";
    HandOver "hand_over" Normal true "hand-over from the selected claim: free its GPUs, then claim them on an endpoint (one confirmation)";
    Rewind "rewind" Normal false "rewind: show the fleet at a time (03:12, -10m, 2026-11-25 03:12:30)";
    Live "live" Normal false "back to live (rewound)";
    NextChange "next_change" Normal false "the next change of the selected GPU, claim or project (rewound)";
    PrevChange "prev_change" Normal false "the previous change of the selected GPU, claim or project";
    StepForward "step_forward" Normal false "one sample (5 s) later (rewound)";
    StepBack "step_back" Normal false "one sample (5 s) earlier";
    Play "play" Normal false "play forward from the time shown, or pause (rewound)";
    Faster "faster" Normal false "play faster (rewound)";
    Slower "slower" Normal false "play slower (rewound)";
    Confirm "confirm" Dialog false "confirm / submit";
    Cancel "cancel" Dialog false "cancel and close";
    NextField "next_field" Dialog false "next field";
    PrevField "prev_field" Dialog false "previous field";
    ChoiceLeft "choice_left" Dialog false "previous choice";
    ChoiceRight "choice_right" Dialog false "next choice";
}

/// A key with its modifiers, as written in the keymap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    code: KeyCodeOrd,
    ctrl: bool,
    alt: bool,
}

/// `KeyCode` subset that orders and hashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum KeyCodeOrd {
    Char(char),
    F(u8),
    Named(u8),
}

const NAMED: [(&str, KeyCode); 13] = [
    ("enter", KeyCode::Enter),
    ("esc", KeyCode::Esc),
    ("tab", KeyCode::Tab),
    ("backtab", KeyCode::BackTab),
    ("up", KeyCode::Up),
    ("down", KeyCode::Down),
    ("left", KeyCode::Left),
    ("right", KeyCode::Right),
    ("pgup", KeyCode::PageUp),
    ("pgdn", KeyCode::PageDown),
    ("home", KeyCode::Home),
    ("end", KeyCode::End),
    ("backspace", KeyCode::Backspace),
];

impl Key {
    /// Parses `q`, `ctrl-c`, `pgdn`, `f1`, `space`...
    pub fn parse(text: &str) -> Result<Key, String> {
        let mut rest = text;
        let (mut ctrl, mut alt) = (false, false);
        loop {
            if let Some(r) = rest.strip_prefix("ctrl-") {
                ctrl = true;
                rest = r;
            } else if let Some(r) = rest.strip_prefix("alt-") {
                alt = true;
                rest = r;
            } else {
                break;
            }
        }
        let code = if rest == "space" {
            KeyCodeOrd::Char(' ')
        } else if rest == "delete" {
            KeyCodeOrd::Named(NAMED.len() as u8)
        } else if let Some(i) = NAMED.iter().position(|(n, _)| *n == rest) {
            KeyCodeOrd::Named(i as u8)
        } else if let Some(n) = rest
            .strip_prefix('f')
            .and_then(|d| d.parse::<u8>().ok())
            .filter(|n| (1..=12).contains(n))
        {
            KeyCodeOrd::F(n)
        } else {
            let mut chars = rest.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => KeyCodeOrd::Char(c),
                _ => {
                    return Err(format!(
                        "unknown key `{text}`: use one character, or enter esc tab backtab up down left right pgup pgdn home end space backspace delete f1..f12, with optional ctrl- or alt-"
                    ));
                }
            }
        };
        Ok(Key { code, ctrl, alt })
    }

    /// The key of a terminal event, if it is one a keymap can name.
    pub fn from_event(ev: &KeyEvent) -> Option<Key> {
        let code = match ev.code {
            KeyCode::Char(c) => KeyCodeOrd::Char(c),
            KeyCode::F(n) => KeyCodeOrd::F(n),
            KeyCode::Delete => KeyCodeOrd::Named(NAMED.len() as u8),
            other => KeyCodeOrd::Named(NAMED.iter().position(|(_, k)| *k == other)? as u8),
        };
        Some(Key {
            code,
            ctrl: ev.modifiers.contains(KeyModifiers::CONTROL),
            alt: ev.modifiers.contains(KeyModifiers::ALT),
        })
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ctrl {
            write!(f, "ctrl-")?;
        }
        if self.alt {
            write!(f, "alt-")?;
        }
        match self.code {
            KeyCodeOrd::Char(' ') => write!(f, "space"),
            KeyCodeOrd::Char(c) => write!(f, "{c}"),
            KeyCodeOrd::F(n) => write!(f, "f{n}"),
            KeyCodeOrd::Named(i) => {
                write!(f, "{}", NAMED.get(usize::from(i)).map_or("delete", |n| n.0))
            }
        }
    }
}

/// What was wrong with a keymap file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeymapError {
    /// Not TOML of the right shape.
    #[error("keymap is not valid TOML: {0}")]
    Parse(String),
    /// A context or action that does not exist.
    #[error("keymap: unknown {what} `{name}`; known: {known}")]
    Unknown {
        /// `context` or `action`.
        what: &'static str,
        /// The name given.
        name: String,
        /// What is allowed.
        known: String,
    },
    /// A key that cannot be read.
    #[error("keymap [{context}] {action}: {message}")]
    BadKey {
        /// Context.
        context: String,
        /// Action.
        action: String,
        /// Why.
        message: String,
    },
    /// One key bound to two actions in one context.
    #[error("keymap [{context}]: key `{key}` is bound to both `{first}` and `{second}`")]
    Duplicate {
        /// Context.
        context: String,
        /// The key.
        key: String,
        /// One action.
        first: String,
        /// The other.
        second: String,
    },
    /// An action with no key.
    #[error("keymap [{context}]: `{action}` has no key; every action needs one")]
    Missing {
        /// Context.
        context: String,
        /// Action.
        action: String,
    },
}

/// The keys of every action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keymap {
    bindings: BTreeMap<(Context, Key), KeyAction>,
    keys: BTreeMap<KeyAction, Vec<Key>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    normal: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    dialog: BTreeMap<String, Vec<String>>,
}

impl Keymap {
    /// The built-in keymap.
    pub fn builtin() -> Keymap {
        // The built-in file is tested to parse; an empty map would still be usable.
        Keymap::parse(DEFAULT_KEYMAP).unwrap_or_else(|_| Keymap {
            bindings: BTreeMap::new(),
            keys: BTreeMap::new(),
        })
    }

    /// Parses and validates a keymap: known actions, readable keys, no duplicates,
    /// every action bound. Actions missing from `text` keep their built-in keys.
    pub fn parse(text: &str) -> Result<Keymap, KeymapError> {
        let file: File = toml::from_str(text).map_err(|e| KeymapError::Parse(e.to_string()))?;
        let mut keys: BTreeMap<KeyAction, Vec<Key>> = BTreeMap::new();
        for (ctx, table) in [
            (Context::Normal, &file.normal),
            (Context::Dialog, &file.dialog),
        ] {
            for (name, list) in table {
                let action = KeyAction::ALL
                    .iter()
                    .find(|a| a.name() == name && a.context() == ctx)
                    .ok_or_else(|| KeymapError::Unknown {
                        what: "action",
                        name: name.clone(),
                        known: KeyAction::ALL
                            .iter()
                            .filter(|a| a.context() == ctx)
                            .map(|a| a.name())
                            .collect::<Vec<_>>()
                            .join(", "),
                    })?;
                let parsed = list
                    .iter()
                    .map(|k| Key::parse(k))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|message| KeymapError::BadKey {
                        context: ctx_name(ctx).into(),
                        action: name.clone(),
                        message,
                    })?;
                keys.insert(*action, parsed);
            }
        }
        if text != DEFAULT_KEYMAP {
            let base = Keymap::parse(DEFAULT_KEYMAP)?;
            for (a, k) in base.keys {
                keys.entry(a).or_insert(k);
            }
        }
        let mut bindings = BTreeMap::new();
        for a in KeyAction::ALL {
            let list =
                keys.get(a)
                    .filter(|l| !l.is_empty())
                    .ok_or_else(|| KeymapError::Missing {
                        context: ctx_name(a.context()).into(),
                        action: a.name().into(),
                    })?;
            for k in list {
                if let Some(first) = bindings.insert((a.context(), *k), *a)
                    && first != *a
                {
                    return Err(KeymapError::Duplicate {
                        context: ctx_name(a.context()).into(),
                        key: k.to_string(),
                        first: first.name().into(),
                        second: a.name().into(),
                    });
                }
            }
        }
        Ok(Keymap { bindings, keys })
    }

    /// The action a key triggers in a context.
    pub fn action(&self, ctx: Context, ev: &KeyEvent) -> Option<KeyAction> {
        let key = Key::from_event(ev)?;
        // Shifted letters arrive as the upper-case character; SHIFT itself is not part of a key.
        self.bindings.get(&(ctx, key)).copied()
    }

    /// The keys of an action, as written (`q, ctrl-c`).
    pub fn keys_of(&self, a: KeyAction) -> String {
        self.keys
            .get(&a)
            .map(|l| {
                l.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    }

    /// The first key of an action, for hints.
    pub fn first_key(&self, a: KeyAction) -> String {
        self.keys
            .get(&a)
            .and_then(|l| l.first())
            .map(ToString::to_string)
            .unwrap_or_default()
    }
}

fn ctx_name(c: Context) -> &'static str {
    match c {
        Context::Normal => "normal",
        Context::Dialog => "dialog",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(code: KeyCode, m: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, m)
    }

    #[test]
    fn builtin_parses_and_binds_everything() {
        let k = Keymap::parse(DEFAULT_KEYMAP).unwrap();
        for a in KeyAction::ALL {
            assert!(!k.keys_of(*a).is_empty(), "{a:?}");
        }
        assert_eq!(
            k.action(
                Context::Normal,
                &ev(KeyCode::Char('c'), KeyModifiers::CONTROL)
            ),
            Some(KeyAction::Quit)
        );
        assert_eq!(
            k.action(
                Context::Normal,
                &ev(KeyCode::Char('G'), KeyModifiers::SHIFT)
            ),
            Some(KeyAction::Live)
        );
        assert_eq!(
            k.action(Context::Normal, &ev(KeyCode::End, KeyModifiers::NONE)),
            Some(KeyAction::Bottom)
        );
        assert_eq!(
            k.action(Context::Dialog, &ev(KeyCode::BackTab, KeyModifiers::SHIFT)),
            Some(KeyAction::PrevField)
        );
    }

    #[test]
    fn errors_name_what_was_wrong() {
        let e = Keymap::parse("[normal]\nquit = [\"q\"]\nhelp = [\"q\"]\n").unwrap_err();
        assert!(
            matches!(&e, KeymapError::Duplicate { key, .. } if key == "q"),
            "{e}"
        );
        let e = Keymap::parse("[normal]\nfly = [\"z\"]\n").unwrap_err();
        assert!(e.to_string().contains("unknown action `fly`"), "{e}");
        let e = Keymap::parse("[normal]\nquit = [\"meta-q\"]\n").unwrap_err();
        assert!(e.to_string().contains("unknown key `meta-q`"), "{e}");
        let e = Keymap::parse("[normal]\nquit = []\n").unwrap_err();
        assert!(matches!(e, KeymapError::Missing { .. }), "{e}");
        let e = Keymap::parse("[modes]\n").unwrap_err();
        assert!(matches!(e, KeymapError::Parse(_)), "{e}");
        // An override keeps the other built-in keys.
        let k = Keymap::parse("[normal]\nquit = [\"Q\"]\n").unwrap();
        assert_eq!(k.keys_of(KeyAction::Quit), "Q");
        assert_eq!(k.keys_of(KeyAction::Help), "?, f1");
    }
}
