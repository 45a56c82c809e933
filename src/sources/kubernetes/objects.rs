//! Nodes and pods as this source keeps them: only the fields it reads, so 10 000 pods stay
//! small. A field of the wrong type is not an error that drops the object: it is noted as a
//! `Problem` (where, what was found) and left out, and the snapshot turns problems into
//! warnings. Pure: JSON in, facts out.

use serde_json::Value;

/// Annotations kept (everything else, `last-applied-configuration` above all, is dropped).
const KEPT_ANNOTATIONS: [&str; 2] = ["hami.io/", "scheduling.koordinator.sh/"];
/// Node labels kept: what NVIDIA's GPU feature discovery says about the boards.
const KEPT_LABELS: [&str; 1] = ["nvidia.com/gpu."];

/// Whether a resource name is one the decoding reads (GPU encodings, and CPU).
pub fn is_kept_resource(name: &str) -> bool {
    name == "cpu"
        || name.starts_with("nvidia.com/")
        || name.starts_with("koordinator.sh/gpu")
        || name.starts_with("kubernetes.io/gpu")
}

/// A few strings by name (the annotations, labels and resources kept), in name order. A
/// sorted list rather than a `BTreeMap`: most hold one to four entries, and a map's first
/// node alone takes half a kilobyte, times 10 000 pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StrMap(Vec<(String, String)>);

impl StrMap {
    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&String> {
        self.find(key).ok().map(|i| &self.0[i].1)
    }

    /// Whether `key` is there.
    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// Sets `key` (replacing its value, as a map does).
    pub fn insert(&mut self, key: String, value: String) {
        match self.find(&key) {
            Ok(i) => self.0[i].1 = value,
            Err(i) => self.0.insert(i, (key, value)),
        }
    }

    /// The entries, in name order.
    pub fn iter(&self) -> <&StrMap as IntoIterator>::IntoIter {
        self.into_iter()
    }

    /// The names, in order.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.iter().map(|(k, _)| k)
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Extend<(String, String)> for StrMap {
    fn extend<I: IntoIterator<Item = (String, String)>>(&mut self, entries: I) {
        for (k, v) in entries {
            self.insert(k, v);
        }
    }
}

impl FromIterator<(String, String)> for StrMap {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(entries: I) -> StrMap {
        let mut m = StrMap::default();
        m.extend(entries);
        m.0.shrink_to_fit();
        m
    }
}

impl<const N: usize> From<[(String, String); N]> for StrMap {
    fn from(entries: [(String, String); N]) -> StrMap {
        entries.into_iter().collect()
    }
}

impl IntoIterator for StrMap {
    type Item = (String, String);
    type IntoIter = std::vec::IntoIter<(String, String)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a StrMap {
    type Item = (&'a String, &'a String);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, String)>,
        fn(&'a (String, String)) -> (&'a String, &'a String),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(pair as fn(_) -> _)
    }
}

fn pair((k, v): &(String, String)) -> (&String, &String) {
    (k, v)
}

/// A field that could not be read: where it is in the object, and what was there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The field's path (`spec.containers[0].resources.limits`).
    pub path: String,
    /// What was expected and found.
    pub found: String,
}

/// A node, trimmed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// The GPU-sharing annotations (`hami.io/...`, `scheduling.koordinator.sh/...`).
    pub annotations: StrMap,
    /// The `nvidia.com/gpu.*` labels.
    pub labels: StrMap,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// `status.capacity`, GPU resources and CPU only, quantities as written.
    pub capacity: StrMap,
    /// `status.allocatable`, likewise.
    pub allocatable: StrMap,
    /// The `Ready` condition, when reported.
    pub ready: Option<KubeCondition>,
    /// `status.nodeInfo.kubeletVersion`.
    pub kubelet_version: Option<String>,
    /// Fields that could not be read.
    pub problems: Vec<Problem>,
}

/// A pod, trimmed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodFacts {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.creationTimestamp`, as written (RFC 3339).
    pub created: Option<String>,
    /// Whether `metadata.deletionTimestamp` is set (terminating).
    pub deleting: bool,
    /// The GPU-sharing annotations.
    pub annotations: StrMap,
    /// `spec.nodeName`: where it is bound, when it is.
    pub node_name: Option<String>,
    /// `status.phase` (`Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`).
    pub phase: String,
    /// Its containers' GPU and CPU resources.
    pub containers: Vec<ContainerFacts>,
    /// Its init containers' (sidecars among them), in order: they count toward what the
    /// pod asks for by Kubernetes's rule (`claims::asked_of`).
    pub init_containers: Vec<ContainerFacts>,
    /// The `PodScheduled` condition, when reported.
    pub scheduled: Option<KubeCondition>,
    /// Fields that could not be read.
    pub problems: Vec<Problem>,
}

/// One container's resources, GPU and CPU names only, quantities as written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerFacts {
    /// `name`.
    pub name: String,
    /// `resources.requests`.
    pub requests: StrMap,
    /// `resources.limits`.
    pub limits: StrMap,
    /// An init container with `restartPolicy: Always`: a sidecar, running beside the
    /// app containers rather than before them.
    pub sidecar: bool,
}

/// A status condition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KubeCondition {
    /// `status` is `True`.
    pub is_true: bool,
    /// `reason`.
    pub reason: String,
    /// `message`.
    pub message: String,
}

/// Reads a node object.
pub fn node_facts(v: &Value) -> NodeFacts {
    let mut r = Reader::default();
    let mut n = NodeFacts {
        name: r.string(v, &["metadata", "name"]).unwrap_or_default(),
        uid: r.string(v, &["metadata", "uid"]).unwrap_or_default(),
        annotations: r.map_kept(v, &["metadata", "annotations"], |k| {
            KEPT_ANNOTATIONS.iter().any(|p| k.starts_with(p))
        }),
        labels: r.map_kept(v, &["metadata", "labels"], |k| {
            KEPT_LABELS.iter().any(|p| k.starts_with(p))
        }),
        unschedulable: r.boolean(v, &["spec", "unschedulable"]).unwrap_or(false),
        capacity: r.map_kept(v, &["status", "capacity"], is_kept_resource),
        allocatable: r.map_kept(v, &["status", "allocatable"], is_kept_resource),
        ready: r.condition(v, "Ready"),
        kubelet_version: r.string(v, &["status", "nodeInfo", "kubeletVersion"]),
        problems: Vec::new(),
    };
    n.problems = r.problems;
    n
}

/// Reads a pod object.
pub fn pod_facts(v: &Value) -> PodFacts {
    let mut r = Reader::default();
    let containers = containers_at(&mut r, v, "containers");
    let init_containers = containers_at(&mut r, v, "initContainers");
    let mut p = PodFacts {
        name: r.string(v, &["metadata", "name"]).unwrap_or_default(),
        namespace: r.string(v, &["metadata", "namespace"]).unwrap_or_default(),
        uid: r.string(v, &["metadata", "uid"]).unwrap_or_default(),
        created: r.string(v, &["metadata", "creationTimestamp"]),
        deleting: r
            .string(v, &["metadata", "deletionTimestamp"])
            .is_some_and(|s| !s.is_empty()),
        annotations: r.map_kept(v, &["metadata", "annotations"], |k| {
            KEPT_ANNOTATIONS.iter().any(|p| k.starts_with(p))
        }),
        node_name: r.string(v, &["spec", "nodeName"]).filter(|s| !s.is_empty()),
        phase: r.string(v, &["status", "phase"]).unwrap_or_default(),
        containers,
        init_containers,
        scheduled: r.condition(v, "PodScheduled"),
        problems: Vec::new(),
    };
    p.problems = r.problems;
    p
}

/// The containers under `spec.FIELD` (`containers`, `initContainers`).
fn containers_at(r: &mut Reader, v: &Value, field: &str) -> Vec<ContainerFacts> {
    let mut out = Vec::new();
    let Some(list) = r.array(v, &["spec", field]) else {
        return out;
    };
    for (i, c) in list.iter().enumerate() {
        let at = format!("spec.{field}[{i}]");
        let mut sub = Reader::default();
        out.push(ContainerFacts {
            name: sub.string(c, &["name"]).unwrap_or_default(),
            requests: sub.map_kept(c, &["resources", "requests"], is_kept_resource),
            limits: sub.map_kept(c, &["resources", "limits"], is_kept_resource),
            sidecar: sub.string(c, &["restartPolicy"]).as_deref() == Some("Always"),
        });
        r.problems.extend(sub.problems.into_iter().map(|p| Problem {
            path: format!("{at}.{}", p.path),
            found: p.found,
        }));
    }
    out.shrink_to_fit();
    out
}

/// Walks a JSON object, noting each field of the wrong type.
#[derive(Default)]
struct Reader {
    problems: Vec<Problem>,
}

impl Reader {
    /// The value at `path`; `None` when absent or null (not a problem), or when an
    /// object on the way is not one (a problem).
    fn at<'v>(&mut self, v: &'v Value, path: &[&str]) -> Option<&'v Value> {
        let mut cur = v;
        for (i, key) in path.iter().enumerate() {
            match cur {
                Value::Object(m) => match m.get(*key) {
                    None | Some(Value::Null) => return None,
                    Some(next) => cur = next,
                },
                other => {
                    self.wrong(&path[..i], "an object", other);
                    return None;
                }
            }
        }
        Some(cur)
    }

    fn wrong(&mut self, path: &[&str], expected: &str, found: &Value) {
        let path = if path.is_empty() {
            "(the object)".to_string()
        } else {
            path.join(".")
        };
        self.problems.push(Problem {
            path,
            found: format!(
                "expected {expected}, found {}",
                crate::wire::json_kind(found)
            ),
        });
    }

    fn string(&mut self, v: &Value, path: &[&str]) -> Option<String> {
        match self.at(v, path)? {
            Value::String(s) => Some(s.clone()),
            other => {
                self.wrong(path, "a string", other);
                None
            }
        }
    }

    fn boolean(&mut self, v: &Value, path: &[&str]) -> Option<bool> {
        match self.at(v, path)? {
            Value::Bool(b) => Some(*b),
            other => {
                self.wrong(path, "a boolean", other);
                None
            }
        }
    }

    fn array<'v>(&mut self, v: &'v Value, path: &[&str]) -> Option<&'v Vec<Value>> {
        match self.at(v, path)? {
            Value::Array(a) => Some(a),
            other => {
                self.wrong(path, "an array", other);
                None
            }
        }
    }

    /// A string map (annotations, labels, resource lists), keeping only the keys `keep`
    /// accepts. Kubernetes writes quantities as strings: anything else is a problem.
    fn map_kept(&mut self, v: &Value, path: &[&str], keep: impl Fn(&str) -> bool) -> StrMap {
        let mut out = StrMap::default();
        let Some(found) = self.at(v, path) else {
            return out;
        };
        let Value::Object(m) = found else {
            self.wrong(path, "an object", found);
            return out;
        };
        for (k, val) in m {
            if !keep(k) {
                continue;
            }
            match val {
                Value::String(s) => {
                    out.insert(k.clone(), s.clone());
                }
                other => {
                    let mut at: Vec<&str> = path.to_vec();
                    at.push(k);
                    self.wrong(&at, "a string", other);
                }
            }
        }
        out.0.shrink_to_fit();
        out
    }

    /// The status condition of `kind` (`Ready`, `PodScheduled`).
    fn condition(&mut self, v: &Value, kind: &str) -> Option<KubeCondition> {
        let list = self.array(v, &["status", "conditions"])?;
        for (i, c) in list.iter().enumerate() {
            let Value::Object(m) = c else {
                let at = format!("status.conditions[{i}]");
                self.wrong(&[at.as_str()], "an object", c);
                continue;
            };
            if m.get("type").and_then(Value::as_str) != Some(kind) {
                continue;
            }
            let text = |key: &str| {
                m.get(key)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            return Some(KubeCondition {
                is_true: m.get("status").and_then(Value::as_str) == Some("True"),
                reason: text("reason"),
                message: text("message"),
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_read_fields_are_kept() {
        let p = pod_facts(&json!({
            "metadata": {"name": "a", "namespace": "ns", "uid": "u1",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}",
                                "hami.io/vgpu-devices-allocated": "GPU-1,NVIDIA,3000,30:;"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {
                "limits": {"nvidia.com/gpu": "1", "memory": "1Gi", "cpu": "2"}}}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "PodScheduled", "status": "True"}]}
        }));
        assert_eq!(p.annotations.len(), 1);
        assert_eq!(p.containers[0].limits.len(), 2, "{:?}", p.containers);
        assert_eq!(p.containers[0].limits.get("cpu").unwrap(), "2");
        assert!(p.scheduled.unwrap().is_true);
        assert!(p.problems.is_empty());
    }

    #[test]
    fn a_wrong_type_is_a_problem_not_a_panic() {
        let p = pod_facts(&json!({
            "metadata": {"name": 3, "annotations": []},
            "spec": {"containers": {"x": 1}},
            "status": "odd"
        }));
        let paths: Vec<&str> = p.problems.iter().map(|p| p.path.as_str()).collect();
        assert!(paths.contains(&"metadata.name"), "{paths:?}");
        assert!(paths.contains(&"metadata.annotations"), "{paths:?}");
        assert!(paths.contains(&"spec.containers"), "{paths:?}");
        assert!(paths.contains(&"status"), "{paths:?}");
        let n = node_facts(&json!(42));
        assert_eq!(n.problems[0].path, "(the object)");
    }
}
