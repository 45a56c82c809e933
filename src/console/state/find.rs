//! Finding a GPU or a claim by the notation the screens print, for commands that name
//! their target (`:gpu node-b:5`, `:cordon node-b:5`, `:release 16`, `:move 16`): a GPU is
//! `NODE:INDEX` (also `NODE INDEX`, `SOURCE/NODE:INDEX` where two sources have that node),
//! the node's name whole or its unique end (`b:5` for `node-b:5`); a claim is `ID` (an
//! engine's own name for it, as `ml/train-0`, or gpuboard's number) or `SOURCE/ID`. What cannot be found is an error that says what there is.

use crate::ids::ClaimId;

use super::{ClaimKey, State};

/// How many names an error lists before saying how many more there are.
const NAMES_LISTED: usize = 6;

/// A GPU found by name: source, node name, device index.
pub type GpuName = (usize, String, u32);

impl State {
    /// Opens the detail of the GPU `text` names (as `find_gpu` reads it); Esc goes back.
    pub fn open_gpu_named(&mut self, text: &str) -> Result<(), String> {
        let key = self.find_gpu(text)?;
        self.open_gpu(key);
        Ok(())
    }

    /// Opens the detail of the GPU `key`; Esc goes back.
    pub fn open_gpu(&mut self, key: GpuName) {
        self.detail = Some(key);
        *self.cursor_mut(super::View::Detail) = super::Cursor::default();
        if self.view != super::View::Detail {
            self.came_from = Some(self.view);
        }
        self.view = super::View::Detail;
    }

    /// The GPU `text` names (`node-b:5`, `node-b 5`, `SOURCE/node-b:5`, or the unique end
    /// of a node's name, `b:5`), among every source's latest data.
    pub fn find_gpu(&self, text: &str) -> Result<GpuName, String> {
        let text = text.trim();
        let (source, rest) = match text.split_once('/') {
            Some((s, r)) => (Some(s), r),
            None => (None, text),
        };
        let split = rest
            .rsplit_once(':')
            .or_else(|| rest.rsplit_once(char::is_whitespace));
        let Some((node, index)) = split.map(|(n, i)| (n.trim(), i.trim())) else {
            return Err(format!(
                "GPU `{text}`: name it NODE:INDEX as the screens print it, e.g. `{}`",
                self.some_gpu_name()
            ));
        };
        let Ok(index) = index.parse::<u32>() else {
            return Err(format!(
                "GPU `{text}`: `{index}` is not a device index; name it NODE:INDEX, e.g. `{}`",
                self.some_gpu_name()
            ));
        };
        if let Some(s) = source
            && !self.sources.iter().any(|x| x.name == s)
        {
            let names: Vec<&str> = self.sources.iter().map(|x| x.name.as_str()).collect();
            return Err(format!(
                "GPU `{text}`: no source `{s}`; sources: {}",
                names.join(", ")
            ));
        }
        // Every node of the sources named: exact names first, else the unique end.
        let nodes: Vec<(usize, &crate::snapshot::NodeView)> = self
            .sources
            .iter()
            .enumerate()
            .filter(|(_, s)| source.is_none_or(|n| s.name == n))
            .filter_map(|(i, s)| Some((i, s.data.as_deref()?)))
            .flat_map(|(i, d)| d.nodes.iter().map(move |n| (i, n)))
            .collect();
        let mut found: Vec<&(usize, &crate::snapshot::NodeView)> =
            nodes.iter().filter(|(_, n)| n.name == node).collect();
        if found.is_empty() && !node.is_empty() {
            found = nodes
                .iter()
                .filter(|(_, n)| n.name.ends_with(node))
                .collect();
        }
        let names = |list: &[&(usize, &crate::snapshot::NodeView)]| -> String {
            let mut v: Vec<String> = list
                .iter()
                .map(|(s, n)| self.qualified(*s, &n.name))
                .collect();
            v.sort();
            v.dedup();
            listed(&v)
        };
        match found.as_slice() {
            [] => {
                let all: Vec<&(usize, &crate::snapshot::NodeView)> = nodes.iter().collect();
                Err(format!(
                    "GPU `{text}`: no node `{node}`; nodes: {}",
                    names(&all)
                ))
            }
            [(s, n)] => {
                if let Some(d) = n.devices.iter().find(|d| d.index == index) {
                    return Ok((*s, n.name.clone(), d.index));
                }
                let have: Vec<String> = n.devices.iter().map(|d| d.index.to_string()).collect();
                Err(format!(
                    "GPU `{text}`: node {} has no GPU {index}; its GPUs: {}",
                    n.name,
                    listed(&have)
                ))
            }
            many => Err(format!(
                "GPU `{text}`: `{node}` names {} nodes: {}; name one whole{}",
                many.len(),
                names(many),
                if many.iter().any(|(s, _)| *s != many[0].0) {
                    " (SOURCE/NODE:INDEX)"
                } else {
                    ""
                }
            )),
        }
    }

    /// The claim `name` names: its id as the Claims view shows it (an engine's own name,
    /// `ml/train-0`, `4242`, else gpuboard's number), or `SOURCE/ID` where two sources
    /// have that id. gpuboard's number for an engine's claim is taken too.
    pub fn find_claim(&self, name: &str) -> Result<ClaimKey, String> {
        let name = name.trim();
        // A pod's name has a `/` of its own: the whole text is tried first, then with a
        // source's name before the `/`.
        let mut found = self.claims_named(None, name);
        if found.is_empty()
            && let Some((source, id)) = name.split_once('/')
            && self.sources.iter().any(|s| s.name == source)
        {
            found = self.claims_named(Some(source), id);
        }
        match found.as_slice() {
            [one] => Ok(*one),
            [] if name.parse::<ClaimId>().is_err() && !name.contains('/') => Err(format!(
                "claim `{name}`: no claim has that name; an id is a number or an engine's \
                 name, as the Claims view shows it (`claim 3`, `claim NAMESPACE/POD`, \
                 `claim SOURCE/3`); {}",
                self.claim_names_listed()
            )),
            [] => Err(format!("no claim `{name}`; {}", self.claim_names_listed())),
            many => {
                let names: Vec<String> = many
                    .iter()
                    .filter_map(|k| {
                        let (slot, c) = self.claim(*k)?;
                        Some(format!("{}/{}", slot.name, c.shown_id()))
                    })
                    .collect();
                Err(format!(
                    "claim {name} is on {} sources: name one, {}",
                    many.len(),
                    names.join(" or ")
                ))
            }
        }
    }

    /// The claims `id` names among `source`'s (every source's when `None`): by the
    /// engine's name, or by number (`#3` too).
    fn claims_named(&self, source: Option<&str>, id: &str) -> Vec<ClaimKey> {
        let number: Option<ClaimId> = id.trim_start_matches('#').parse().ok();
        self.sources
            .iter()
            .enumerate()
            .filter(|(_, s)| source.is_none_or(|n| s.name == n))
            .filter_map(|(i, s)| {
                let idx = s
                    .data
                    .as_ref()?
                    .claims
                    .iter()
                    .position(|c| c.name.as_deref() == Some(id) || Some(c.id) == number)?;
                Some(ClaimKey { source: i, idx })
            })
            .collect()
    }

    /// Every GPU as `NODE:INDEX` (`SOURCE/NODE:INDEX` where two sources share a node
    /// name), for completing `:gpu` and `:cordon`.
    pub fn gpu_names(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, s) in self.sources.iter().enumerate() {
            for n in s.data.iter().flat_map(|d| d.nodes.iter()) {
                let node = self.qualified(i, &n.name);
                out.extend(n.devices.iter().map(|d| format!("{node}:{}", d.index)));
            }
        }
        out
    }

    /// A node's name, with its source's before it when another source has that node too.
    fn qualified(&self, source: usize, node: &str) -> String {
        let shared = self.sources.iter().enumerate().any(|(i, s)| {
            i != source
                && s.data
                    .as_ref()
                    .is_some_and(|d| d.nodes.iter().any(|n| n.name == node))
        });
        match self.sources.get(source) {
            Some(s) if shared => format!("{}/{node}", s.name),
            _ => node.to_string(),
        }
    }

    /// One GPU's name, for an example in an error.
    fn some_gpu_name(&self) -> String {
        self.gpu_names()
            .into_iter()
            .next()
            .unwrap_or_else(|| "node-a:0".to_string())
    }
}

/// The first names of a list, and how many more there are.
fn listed(names: &[String]) -> String {
    if names.is_empty() {
        return "none".to_string();
    }
    let shown = names[..names.len().min(NAMES_LISTED)].join(", ");
    if names.len() > NAMES_LISTED {
        format!("{shown} (+{} more)", names.len() - NAMES_LISTED)
    } else {
        shown
    }
}
