//! Node names matched across sources: the same host is `n1` to Slurm, `N1.cluster.local`
//! to Kubernetes and `n1.cluster.local` to Prometheus. Names match by case and by short
//! name (the part before the first dot) unless two different domains share a short name;
//! an `[aliases]` table maps the rest (`"gpu-node-7" = "n7"`).

use std::collections::{BTreeMap, BTreeSet};

/// Names an operator says are the same host: alias to name, both as written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Aliases(BTreeMap<String, String>);

impl Aliases {
    /// The table, from `alias = name` pairs (case does not matter).
    pub fn new<I, A, B>(pairs: I) -> Aliases
    where
        I: IntoIterator<Item = (A, B)>,
        A: AsRef<str>,
        B: AsRef<str>,
    {
        Aliases(
            pairs
                .into_iter()
                .map(|(a, b)| (a.as_ref().to_lowercase(), b.as_ref().to_lowercase()))
                .collect(),
        )
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The name `name` is an alias for, lower-cased (itself when it is none).
    pub(super) fn resolve(&self, name: &str) -> String {
        let lower = name.to_lowercase();
        match self.0.get(&lower) {
            Some(to) => to.clone(),
            None => lower,
        }
    }
}

/// What a node name matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeMatch {
    /// The key every source's name for this host maps to.
    Key(String),
    /// A short name that several fully qualified names share: which ones.
    Ambiguous(Vec<String>),
}

/// Every node name the sources use, each mapped to one key per host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeNames {
    aliases: Aliases,
    /// Short name (lower case) to the distinct fully qualified names (lower case) seen.
    domains: BTreeMap<String, BTreeSet<String>>,
}

/// An address is never shortened (`10.0.0.5` is not host `10`).
fn is_address(name: &str) -> bool {
    name.parse::<std::net::IpAddr>().is_ok()
}

fn short(name: &str) -> &str {
    if is_address(name) {
        return name;
    }
    name.split('.').next().unwrap_or(name)
}

impl NodeNames {
    /// The names as the sources use them.
    pub fn new<'a>(aliases: &Aliases, names: impl IntoIterator<Item = &'a str>) -> NodeNames {
        let names: Vec<String> = names.into_iter().map(|n| aliases.resolve(n)).collect();
        NodeNames::resolved(aliases, names.iter().map(String::as_str))
    }

    /// The names, already resolved (`Aliases::resolve`).
    pub(super) fn resolved<'a>(
        aliases: &Aliases,
        names: impl IntoIterator<Item = &'a str>,
    ) -> NodeNames {
        let mut domains: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for name in names {
            let s = short(name);
            let set = match domains.get_mut(s) {
                Some(set) => set,
                None => domains.entry(s.to_string()).or_default(),
            };
            if name.contains('.') && !is_address(name) && !set.contains(name) {
                set.insert(name.to_string());
            }
        }
        NodeNames {
            aliases: aliases.clone(),
            domains,
        }
    }

    /// The key `name` maps to: its short name, unless two domains share that short name
    /// (then a fully qualified name keeps its domain and a short one is ambiguous).
    pub fn key(&self, name: &str) -> NodeMatch {
        self.key_resolved(&self.aliases.resolve(name))
    }

    /// The key of a name already resolved (`Aliases::resolve`).
    pub(super) fn key_resolved(&self, name: &str) -> NodeMatch {
        let s = short(name);
        match self.domains.get(s) {
            Some(full) if full.len() > 1 => {
                if full.contains(name) {
                    NodeMatch::Key(name.to_string())
                } else {
                    NodeMatch::Ambiguous(full.iter().cloned().collect())
                }
            }
            _ => NodeMatch::Key(s.to_string()),
        }
    }
}
