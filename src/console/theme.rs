//! Themes: TOML files of semantic slots (`ok`, `warn`, `critical`, `allocated`, `used`,
//! `free`, `stale`, `selection`...), with `extends` for small variations. The built-in
//! themes live in `themes/`; a user theme is a path or a name under the config
//! directory's `themes/`. A theme that cannot be read warns and falls back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ratatui::style::{Color, Modifier, Style};
use serde::Deserialize;

/// How deep `extends` may chain (also stops cycles).
pub const MAX_EXTENDS: usize = 4;

/// The built-in themes: name and TOML text.
pub const BUILTIN: &[(&str, &str)] = &[
    ("default", include_str!("../../themes/default.toml")),
    ("light", include_str!("../../themes/light.toml")),
    (
        "high-contrast",
        include_str!("../../themes/high-contrast.toml"),
    ),
    ("ansi16", include_str!("../../themes/ansi16.toml")),
    ("mono", include_str!("../../themes/mono.toml")),
];

macro_rules! slots {
    ($($name:ident $fallback:literal;)*) => {
        /// The resolved styles of every slot.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct Theme {
            /// The theme's name.
            pub name: String,
            $(#[doc = concat!("Style of `", stringify!($name), "`.")] pub $name: Style,)*
        }

        /// Every slot name, with the slot it falls back to when a theme leaves it out.
        pub const SLOTS: &[(&str, &str)] = &[$((stringify!($name), $fallback),)*];

        impl Theme {
            fn from_map(name: &str, map: &BTreeMap<String, Style>) -> Theme {
                let get = |slot: &str| resolve(slot, map, 0);
                Theme { name: name.to_string(), $($name: get(stringify!($name)),)* }
            }
        }
    };
}

slots! {
    text "";
    dim "text";
    title "text";
    border "dim";
    header "title";
    selection "text";
    tab "text";
    tab_active "selection";
    accent "text";
    ok "text";
    warn "text";
    critical "warn";
    allocated "accent";
    used "accent";
    free "ok";
    bar_empty "dim";
    stale "warn";
    idle "warn";
    rogue "critical";
    over_limit "critical";
    cordoned "warn";
    pending "warn";
    status "text";
    flash_info "ok";
    flash_error "critical";
}

fn resolve(slot: &str, map: &BTreeMap<String, Style>, depth: usize) -> Style {
    if let Some(s) = map.get(slot) {
        return *s;
    }
    match SLOTS.iter().find(|(n, _)| *n == slot) {
        Some((_, fb)) if !fb.is_empty() && depth < SLOTS.len() => resolve(fb, map, depth + 1),
        _ => Style::default(),
    }
}

/// What was wrong with a theme.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThemeError {
    /// No built-in theme of that name and no such file.
    #[error(
        "no theme `{0}`: give a built-in name (default, light, high-contrast, ansi16, mono) or a path to a .toml file"
    )]
    NotFound(String),
    /// The file could not be read.
    #[error("cannot read theme {path}: {message}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// Not TOML of the right shape.
    #[error("theme {origin} is not valid: {message}")]
    Parse {
        /// The theme.
        origin: String,
        /// The parser's words.
        message: String,
    },
    /// A slot, colour or modifier that does not exist.
    #[error("theme {origin}: {message}")]
    Invalid {
        /// The theme.
        origin: String,
        /// What was wrong and what is allowed.
        message: String,
    },
    /// `extends` too deep or circular.
    #[error("theme {origin}: `extends` chains deeper than {MAX_EXTENDS} (or loops)")]
    TooDeep {
        /// The theme.
        origin: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
    #[serde(default)]
    extends: Option<String>,
    #[serde(default)]
    slots: BTreeMap<String, SlotSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SlotSpec {
    #[serde(default)]
    fg: Option<String>,
    #[serde(default)]
    bg: Option<String>,
    #[serde(default)]
    modifiers: Vec<String>,
}

const COLOURS: &[(&str, Color)] = &[
    ("reset", Color::Reset),
    ("black", Color::Black),
    ("red", Color::Red),
    ("green", Color::Green),
    ("yellow", Color::Yellow),
    ("blue", Color::Blue),
    ("magenta", Color::Magenta),
    ("cyan", Color::Cyan),
    ("gray", Color::Gray),
    ("darkgray", Color::DarkGray),
    ("lightred", Color::LightRed),
    ("lightgreen", Color::LightGreen),
    ("lightyellow", Color::LightYellow),
    ("lightblue", Color::LightBlue),
    ("lightmagenta", Color::LightMagenta),
    ("lightcyan", Color::LightCyan),
    ("white", Color::White),
];

const MODIFIERS: &[(&str, Modifier)] = &[
    ("bold", Modifier::BOLD),
    ("dim", Modifier::DIM),
    ("italic", Modifier::ITALIC),
    ("underlined", Modifier::UNDERLINED),
    ("reversed", Modifier::REVERSED),
];

/// Whether a colour is one of the 16 ANSI colours or `reset` (what the default theme may use).
pub fn is_ansi16(c: Color) -> bool {
    COLOURS.iter().any(|(_, k)| *k == c)
}

fn colour(text: &str) -> Result<Color, String> {
    if let Some((_, c)) = COLOURS.iter().find(|(n, _)| *n == text) {
        return Ok(*c);
    }
    if let Some(hex) = text.strip_prefix('#')
        && hex.len() == 6
        && let Ok(v) = u32::from_str_radix(hex, 16)
    {
        let [_, r, g, b] = v.to_be_bytes();
        return Ok(Color::Rgb(r, g, b));
    }
    if let Some(i) = text.strip_prefix("idx:").and_then(|n| n.parse::<u8>().ok()) {
        return Ok(Color::Indexed(i));
    }
    Err(format!(
        "unknown colour `{text}`; use one of {}, `#rrggbb`, or `idx:N` (0-255)",
        COLOURS
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(" ")
    ))
}

/// A theme's own slots (before `extends`), parsed and validated.
struct Layer {
    name: Option<String>,
    extends: Option<String>,
    slots: BTreeMap<String, Style>,
}

fn parse_layer(text: &str, origin: &str) -> Result<Layer, ThemeError> {
    let file: File = toml::from_str(text).map_err(|e| ThemeError::Parse {
        origin: origin.to_string(),
        message: e.to_string(),
    })?;
    let invalid = |message: String| ThemeError::Invalid {
        origin: origin.to_string(),
        message,
    };
    let mut slots = BTreeMap::new();
    for (slot, spec) in file.slots {
        if !SLOTS.iter().any(|(n, _)| *n == slot) {
            return Err(invalid(format!(
                "unknown slot `{slot}`; slots: {}",
                SLOTS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(" ")
            )));
        }
        let mut style = Style::default();
        if let Some(fg) = &spec.fg {
            style = style.fg(colour(fg).map_err(|m| invalid(format!("slot {slot}: {m}")))?);
        }
        if let Some(bg) = &spec.bg {
            style = style.bg(colour(bg).map_err(|m| invalid(format!("slot {slot}: {m}")))?);
        }
        for m in &spec.modifiers {
            let (_, k) = MODIFIERS.iter().find(|(n, _)| n == m).ok_or_else(|| {
                invalid(format!(
                    "slot {slot}: unknown modifier `{m}`; use bold dim italic underlined reversed"
                ))
            })?;
            style = style.add_modifier(*k);
        }
        slots.insert(slot, style);
    }
    Ok(Layer {
        name: file.name,
        extends: file.extends,
        slots,
    })
}

/// Where a theme name or path leads: its text and the name it goes by.
fn find(spec: &str, dirs: &[PathBuf]) -> Result<(String, String), ThemeError> {
    if let Some((name, text)) = BUILTIN.iter().find(|(n, _)| *n == spec) {
        return Ok(((*name).to_string(), (*text).to_string()));
    }
    let as_path = Path::new(spec);
    let candidates: Vec<PathBuf> = if spec.contains('/')
        || Path::new(spec)
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("toml"))
    {
        vec![as_path.to_path_buf()]
    } else {
        dirs.iter()
            .map(|d| d.join(format!("{spec}.toml")))
            .collect()
    };
    for p in candidates {
        if p.exists() {
            let text = std::fs::read_to_string(&p).map_err(|e| ThemeError::Read {
                path: p.display().to_string(),
                message: e.to_string(),
            })?;
            return Ok((p.display().to_string(), text));
        }
    }
    Err(ThemeError::NotFound(spec.to_string()))
}

/// Loads a theme by built-in name or path, following `extends` (looked up among the
/// built-ins and in `dirs`), strictly: any problem is an error.
pub fn load_strict(spec: &str, dirs: &[PathBuf]) -> Result<Theme, ThemeError> {
    let (origin, text) = find(spec, dirs)?;
    from_text(&text, &origin, dirs)
}

/// Builds a theme from TOML text, following `extends`.
pub fn from_text(text: &str, origin: &str, dirs: &[PathBuf]) -> Result<Theme, ThemeError> {
    let mut layers = vec![parse_layer(text, origin)?];
    let mut seen = vec![origin.to_string()];
    while let Some(parent) = layers.last().and_then(|l| l.extends.clone()) {
        if layers.len() > MAX_EXTENDS || seen.contains(&parent) {
            return Err(ThemeError::TooDeep {
                origin: origin.to_string(),
            });
        }
        let (porigin, ptext) = find(&parent, dirs)?;
        seen.push(parent);
        layers.push(parse_layer(&ptext, &porigin)?);
    }
    let name = layers
        .first()
        .and_then(|l| l.name.clone())
        .unwrap_or_else(|| origin.to_string());
    let mut map = BTreeMap::new();
    for layer in layers.into_iter().rev() {
        map.extend(layer.slots);
    }
    Ok(Theme::from_map(&name, &map))
}

/// Loads a theme for the console: `spec` if given, else `mono` when `no_color`, else
/// `default`. A theme that cannot be loaded gives the fallback and a warning to show.
pub fn load(spec: Option<&str>, no_color: bool, dirs: &[PathBuf]) -> (Theme, Option<String>) {
    let fallback_name = if no_color { "mono" } else { "default" };
    let fallback = || load_strict(fallback_name, &[]).unwrap_or_else(|_| Theme::plain());
    match spec {
        None => (fallback(), None),
        Some(s) => match load_strict(s, dirs) {
            Ok(t) => (t, None),
            Err(e) => (
                fallback(),
                Some(format!("{e}; using the `{fallback_name}` theme")),
            ),
        },
    }
}

impl Theme {
    /// No styling at all: the last resort if even the built-in themes failed.
    pub fn plain() -> Theme {
        Theme::from_map("plain", &BTreeMap::new())
    }

    /// Every colour the theme uses.
    pub fn colours(&self) -> Vec<Color> {
        let map = self.slot_styles();
        map.iter()
            .flat_map(|(_, s)| [s.fg, s.bg])
            .flatten()
            .collect()
    }

    /// Every slot with its style.
    pub fn slot_styles(&self) -> Vec<(&'static str, Style)> {
        let all = [
            self.text,
            self.dim,
            self.title,
            self.border,
            self.header,
            self.selection,
            self.tab,
            self.tab_active,
            self.accent,
            self.ok,
            self.warn,
            self.critical,
            self.allocated,
            self.used,
            self.free,
            self.bar_empty,
            self.stale,
            self.idle,
            self.rogue,
            self.over_limit,
            self.cordoned,
            self.pending,
            self.status,
            self.flash_info,
            self.flash_error,
        ];
        SLOTS.iter().map(|(n, _)| *n).zip(all).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_and_every_file_in_themes_parses_strictly() {
        for (name, _) in BUILTIN {
            let t = load_strict(name, &[]).unwrap();
            assert_eq!(&t.name, name);
        }
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("themes");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let p = entry.unwrap().path();
            load_strict(p.to_str().unwrap(), std::slice::from_ref(&dir))
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            n += 1;
        }
        assert_eq!(n, BUILTIN.len(), "every file in themes/ is built in");
    }

    #[test]
    fn default_uses_only_ansi16_and_mono_no_colour() {
        let d = load_strict("default", &[]).unwrap();
        assert!(d.colours().into_iter().all(is_ansi16));
        let m = load_strict("mono", &[]).unwrap();
        assert!(m.colours().is_empty(), "{:?}", m.colours());
        assert_ne!(
            m.over_limit,
            Style::default(),
            "mono still marks over-limit"
        );
    }

    #[test]
    fn extends_overrides_and_falls_back() {
        let t = from_text(
            "extends = \"default\"\n[slots]\nok = { fg = \"#102030\" }\n",
            "t",
            &[],
        )
        .unwrap();
        assert_eq!(t.ok.fg, Some(Color::Rgb(0x10, 0x20, 0x30)));
        assert_eq!(t.warn, load_strict("default", &[]).unwrap().warn);
        // A slot left out falls back along the chain: rogue -> critical.
        let t = from_text("[slots]\ncritical = { fg = \"red\" }\n", "t", &[]).unwrap();
        assert_eq!(t.rogue.fg, Some(Color::Red));
    }

    #[test]
    fn broken_themes_warn_and_fall_back() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p.display().to_string()
        };
        let cases = [
            (
                write("a.toml", "[slots]\nok = { fg = \"chartreuse\" }\n"),
                "unknown colour `chartreuse`",
            ),
            (
                write("b.toml", "[slots]\nsparkle = {}\n"),
                "unknown slot `sparkle`",
            ),
            (write("c.toml", "[slots\n"), "not valid"),
            (
                write(
                    "d.toml",
                    &format!("extends = \"{}\"\n", dir.path().join("d.toml").display()),
                ),
                "deeper than",
            ),
            (
                write("e.toml", "[slots]\nok = { modifiers = [\"blink\"] }\n"),
                "unknown modifier `blink`",
            ),
            ("nope".to_string(), "no theme `nope`"),
        ];
        let dirs = [dir.path().to_path_buf()];
        for (spec, want) in cases {
            let (t, warning) = load(Some(&spec), false, &dirs);
            assert_eq!(t.name, "default");
            let w = warning.unwrap();
            assert!(w.contains(want), "{spec}: {w}");
            assert!(w.contains("using the `default` theme"), "{w}");
        }
        let (t, w) = load(Some("nope"), true, &dirs);
        assert_eq!((t.name.as_str(), w.is_some()), ("mono", true));
        assert_eq!(load(None, true, &dirs).0.name, "mono");
    }
}
