//! Slurm GRES strings: what a node has (`gpu:a100:4,shard:a100:16`), what it has in use
//! (`gpu:a100:2(IDX:0-1),shard:a100:1(IDX:2)`), what a job holds
//! (`gpu:a100:2(IDX:0-1)`, `shard:a100:3(IDX:2)`) or asks for (`gres:gpu:a100:3`).
//!
//! An item is `name[:type][:count][(detail)]`, items separated by commas (commas inside
//! the parentheses belong to the detail). The count may carry Slurm's `k`/`m`/`g` suffix
//! (times 1024). The detail holds `IDX:` device indexes (`0-2,5`, or `N/A` for none),
//! `S:` socket affinity, and per-device `used/total` pairs (`-/5` for an unknown use).
//! A `gres:` or `gres/` prefix (job TRES spelling) is accepted. Errors name the offending
//! part and what is allowed.

use std::fmt;

/// Indexes or sockets listed in a detail, at most this many (a node has far fewer GPUs).
const MAX_LISTED: usize = 4096;

/// One GRES item.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gres {
    /// `gpu`, `shard`, `mps`...
    pub name: String,
    /// The type (`a100`), when given.
    pub kind: Option<String>,
    /// How many.
    pub count: u64,
    /// Device indexes (`IDX:`), when the detail lists them; empty for `IDX:N/A`.
    pub indexes: Option<Vec<u32>>,
    /// Socket affinity (`S:`), when given.
    pub sockets: Option<Vec<u32>>,
    /// Per-device use, when the detail gives `used/total` pairs.
    pub per_device: Option<Vec<DeviceUse>>,
}

/// One device's use of a shared GRES, from a `used/total` pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceUse {
    /// In use; `None` for `-`.
    pub used: Option<u64>,
    /// On the device.
    pub total: u64,
}

/// What was wrong with a part of a GRES string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GresProblem {
    /// An empty item between commas.
    EmptyItem,
    /// The name is missing or has characters Slurm does not allow.
    BadName,
    /// More than `name:type:count`.
    TooManyFields,
    /// The count is not a whole number (with an optional k/m/g suffix).
    BadCount,
    /// A `(` without its `)`, or text after the `)`.
    BadParentheses,
    /// A detail part that is not `IDX:`, `S:` or `used/total`.
    BadDetail,
    /// An index or socket list that is not numbers and `a-b` ranges, or too long.
    BadList,
}

impl fmt::Display for GresProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GresProblem::EmptyItem => "an empty item",
            GresProblem::BadName => "the name must be letters, digits, `_` or `-`",
            GresProblem::TooManyFields => "more fields than name:type:count",
            GresProblem::BadCount => "the count must be a whole number, optionally with k, m or g",
            GresProblem::BadParentheses => "the detail must be one `(...)` at the end",
            GresProblem::BadDetail => "detail parts must be IDX:<list>, S:<list> or used/total",
            GresProblem::BadList => {
                "a list must be numbers and a-b ranges (or N/A), at most 4096 entries"
            }
        })
    }
}

/// A GRES string that could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "bad GRES `{input}`: in `{part}`: {problem} (allowed: name[:type][:count][(IDX:0-3|S:0-1|used/total,...)], comma-separated)"
)]
pub struct GresError {
    /// The whole string.
    pub input: String,
    /// The part that was wrong.
    pub part: String,
    /// What was wrong with it.
    pub problem: GresProblem,
}

/// Parses a GRES list. `(null)`, `N/A` and the empty string are an empty list.
pub fn parse(input: &str) -> Result<Vec<Gres>, GresError> {
    let s = input.trim();
    if s.is_empty() || s == "(null)" || s == "N/A" {
        return Ok(Vec::new());
    }
    split_top(s)
        .into_iter()
        .map(|item| {
            parse_item(item.trim()).map_err(|(part, problem)| GresError {
                input: input.to_string(),
                part: part.to_string(),
                problem,
            })
        })
        .collect()
}

/// Splits on commas outside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

type Problem<'a> = (&'a str, GresProblem);

fn parse_item(item: &str) -> Result<Gres, Problem<'_>> {
    if item.is_empty() {
        return Err((item, GresProblem::EmptyItem));
    }
    let body = item
        .strip_prefix("gres:")
        .or_else(|| item.strip_prefix("gres/"))
        .unwrap_or(item);
    let (head, detail) = match body.find('(') {
        Some(open) => {
            let rest = &body[open + 1..];
            let close = rest
                .find(')')
                .filter(|&c| c + 1 == rest.len())
                .ok_or((item, GresProblem::BadParentheses))?;
            (&body[..open], Some(&rest[..close]))
        }
        None if body.contains(')') => return Err((item, GresProblem::BadParentheses)),
        None => (body, None),
    };
    let fields: Vec<&str> = head.split(':').collect();
    let name = fields[0];
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err((item, GresProblem::BadName));
    }
    let (kind, count) = match fields.as_slice() {
        [_] => (None, 1),
        [_, last] => match count(last) {
            Some(n) => (None, n),
            None if valid_type(last) => (Some(last.to_string()), 1),
            None => return Err((last, GresProblem::BadCount)),
        },
        [_, t, c] => {
            if !valid_type(t) {
                return Err((t, GresProblem::BadName));
            }
            (
                Some(t.to_string()),
                count(c).ok_or((*c, GresProblem::BadCount))?,
            )
        }
        _ => return Err((item, GresProblem::TooManyFields)),
    };
    let mut gres = Gres {
        name: name.to_string(),
        kind,
        count,
        ..Gres::default()
    };
    if let Some(d) = detail {
        parse_detail(d, &mut gres)?;
    }
    Ok(gres)
}

fn valid_type(t: &str) -> bool {
    !t.is_empty()
        && t.starts_with(|c: char| !c.is_ascii_digit())
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
}

fn count(s: &str) -> Option<u64> {
    let (digits, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

enum Field {
    Indexes,
    Sockets,
    PerDevice,
}

fn parse_detail<'a>(detail: &'a str, gres: &mut Gres) -> Result<(), Problem<'a>> {
    let mut field: Option<Field> = None;
    let mut lists: (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
    let mut per_device = Vec::new();
    let (mut saw_idx, mut saw_s) = (false, false);
    for part in detail.split(',') {
        let part = part.trim();
        let token = if let Some(rest) = part.strip_prefix("IDX:") {
            field = Some(Field::Indexes);
            saw_idx = true;
            rest
        } else if let Some(rest) = part.strip_prefix("S:") {
            field = Some(Field::Sockets);
            saw_s = true;
            rest
        } else if part.contains('/') && part != "N/A" {
            field = Some(Field::PerDevice);
            part
        } else {
            part
        };
        match field {
            Some(Field::Indexes) => lists.0.push(token),
            Some(Field::Sockets) => lists.1.push(token),
            Some(Field::PerDevice) => {
                let (used, total) = token
                    .split_once('/')
                    .ok_or((part, GresProblem::BadDetail))?;
                let total = count(total).ok_or((part, GresProblem::BadDetail))?;
                let used = match used {
                    "-" => None,
                    u => Some(count(u).ok_or((part, GresProblem::BadDetail))?),
                };
                per_device.push(DeviceUse { used, total });
                if per_device.len() > MAX_LISTED {
                    return Err((part, GresProblem::BadList));
                }
            }
            None => return Err((part, GresProblem::BadDetail)),
        }
    }
    if saw_idx {
        gres.indexes = Some(expand(&lists.0).ok_or((detail, GresProblem::BadList))?);
    }
    if saw_s {
        gres.sockets = Some(expand(&lists.1).ok_or((detail, GresProblem::BadList))?);
    }
    if !per_device.is_empty() {
        gres.per_device = Some(per_device);
    }
    Ok(())
}

/// Expands `0-2`, `5`, `N/A` tokens into numbers.
fn expand(tokens: &[&str]) -> Option<Vec<u32>> {
    if tokens == ["N/A"] {
        return Some(Vec::new());
    }
    let mut out = Vec::new();
    for t in tokens {
        let (a, b) = if let Some((a, b)) = t.split_once('-') {
            (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)
        } else {
            let n = t.parse::<u32>().ok()?;
            (n, n)
        };
        if b < a || (b - a) as usize >= MAX_LISTED - out.len().min(MAX_LISTED) {
            return None;
        }
        out.extend(a..=b);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(s: &str) -> Gres {
        let mut v = parse(s).unwrap();
        assert_eq!(v.len(), 1, "{s}");
        v.remove(0)
    }

    #[test]
    fn counts_types_and_defaults() {
        let g = one("gpu:a100:4");
        assert_eq!(
            (g.name.as_str(), g.kind.as_deref(), g.count),
            ("gpu", Some("a100"), 4)
        );
        let g = one("gpu:4");
        assert_eq!((g.kind, g.count), (None, 4));
        let g = one("gpu:a100");
        assert_eq!((g.kind.as_deref(), g.count), (Some("a100"), 1));
        assert_eq!(one("gpu").count, 1);
        assert_eq!(one("mps:2k").count, 2048);
        assert_eq!(one("gres:gpu:a100:3").kind.as_deref(), Some("a100"));
        assert_eq!(one("gres/gpu:2").count, 2);
        assert_eq!(one("shard:a100:16").count, 16);
    }

    #[test]
    fn details_from_real_node_and_job_strings() {
        // From `scontrol show node -d` and slurmrestd on Slurm 22.05.8.
        let used = parse("gpu:a100:2(IDX:0-1),shard:a100:1(IDX:2)").unwrap();
        assert_eq!(used[0].indexes, Some(vec![0, 1]));
        assert_eq!(used[1].name, "shard");
        assert_eq!(used[1].indexes, Some(vec![2]));
        let idle = parse("gpu:a100:0(IDX:N/A),shard:a100:0(IDX:N/A)").unwrap();
        assert_eq!(idle[0].indexes, Some(vec![]));
        assert_eq!(one("gpu:a100:3(IDX:0-1,3)").indexes, Some(vec![0, 1, 3]));
        let g = one("gpu:a100:2(S:0-1)");
        assert_eq!((g.sockets, g.indexes), (Some(vec![0, 1]), None));
        let g = one("gpu:a100:2(S:0,IDX:1-2)");
        assert_eq!((g.sockets, g.indexes), (Some(vec![0]), Some(vec![1, 2])));
        let g = one("shard:8(-/5,5/5,3/5,0/5)");
        let pd = g.per_device.unwrap();
        assert_eq!(pd.len(), 4);
        assert_eq!(
            pd[0],
            DeviceUse {
                used: None,
                total: 5
            }
        );
        assert_eq!(pd[2].used, Some(3));
        assert!(parse("(null)").unwrap().is_empty());
        assert!(parse(" ").unwrap().is_empty());
    }

    #[test]
    fn errors_name_the_bad_part() {
        for (s, part, problem) in [
            ("gpu:a100:4,,shard:2", "", GresProblem::EmptyItem),
            ("gpu:a100:x4", "x4", GresProblem::BadCount),
            ("gpu:4x", "4x", GresProblem::BadCount),
            ("gpu:a:b:c", "gpu:a:b:c", GresProblem::TooManyFields),
            (
                "gpu:a100:2(IDX:0-1",
                "gpu:a100:2(IDX:0-1",
                GresProblem::BadParentheses,
            ),
            (
                "gpu:a100:2(IDX:0)x",
                "gpu:a100:2(IDX:0)x",
                GresProblem::BadParentheses,
            ),
            ("gpu:a100:2(IDX:2-1)", "IDX:2-1", GresProblem::BadList),
            ("gpu:a100:2(FOO:1)", "FOO:1", GresProblem::BadDetail),
            ("shard:8(a/5)", "a/5", GresProblem::BadDetail),
            ("g pu:1", "g pu:1", GresProblem::BadName),
            (
                "gpu:a100:2(IDX:0-99999999)",
                "IDX:0-99999999",
                GresProblem::BadList,
            ),
        ] {
            let e = parse(s).unwrap_err();
            assert_eq!((e.part.as_str(), &e.problem), (part, &problem), "{s}: {e}");
            assert!(e.to_string().contains(&format!("`{s}`")), "{e}");
        }
    }

    proptest::proptest! {
        #[test]
        fn random_strings_never_panic(s in "\\PC{0,40}") {
            let _ = parse(&s);
        }

        #[test]
        fn gres_shaped_strings_never_panic(s in "[a-z0-9:(),/N/AIDXS-]{0,40}") {
            let _ = parse(&s);
        }

        #[test]
        fn well_formed_items_round_trip(n in 0u64..100_000, a in 0u32..64, w in 0u32..64) {
            let s = format!("gpu:h100:{n}(IDX:{a}-{}),shard:{n}", a + w);
            let v = parse(&s).unwrap();
            proptest::prop_assert_eq!(v[0].count, n);
            proptest::prop_assert_eq!(v[0].indexes.as_ref().map(Vec::len), Some(w as usize + 1));
            proptest::prop_assert_eq!(v[1].count, n);
        }
    }
}
