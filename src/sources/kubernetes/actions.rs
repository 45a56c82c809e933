//! Kubernetes's engine actions through its API: cordon and uncordon a node (a merge patch
//! of `spec.unschedulable`), evict a pod (the Eviction API, so a disruption budget can
//! refuse, in Kubernetes's words) and delete a pod. A refusal (403 from RBAC, 429 from a
//! budget, 404) comes back as the API server wrote it, and nothing else is sent.

use kube::Api;
use kube::api::{DeleteParams, EvictParams, Patch, PatchParams};
use serde_json::json;

use super::KubernetesSource;
use super::cluster::{KeptNode, KeptPod};
use crate::sources::actions::{EngineAction, EngineDone, EngineVerb};
use crate::sources::error::SourceError;

/// The eviction subresource is a pod's; the store's trimmed pod stands for it.
impl kube::api::Evict for KeptPod {}

/// The RBAC right a verb needs, for a 403.
fn right(verb: EngineVerb) -> &'static str {
    match verb {
        EngineVerb::KubeCordon | EngineVerb::KubeUncordon => "patch on nodes",
        EngineVerb::KubeEvict => "create on pods/eviction",
        _ => "delete on pods",
    }
}

impl KubernetesSource {
    /// Carries out `action` and returns the API server's answer.
    pub async fn engine_act(&self, action: &EngineAction) -> Result<EngineDone, SourceError> {
        let url = self.inner.config.shown();
        let c = self.connect().await?;
        let client = c.client.clone();
        let refused = |e: kube::Error| match e {
            kube::Error::Api(s) if s.code == 401 || s.code == 403 => SourceError::Unauthorized {
                url: url.clone(),
                status: s.code,
                message: format!("{} (RBAC: {} is needed)", s.message, right(action.verb)),
            },
            kube::Error::Api(s) => SourceError::Peer {
                url: url.clone(),
                peer: "Kubernetes API",
                message: format!("{} ({} {})", s.message, s.code, s.reason),
            },
            other => SourceError::Unreachable {
                url: url.clone(),
                detail: other.to_string(),
            },
        };
        let (ns, pod) = action
            .target
            .split_once('/')
            .unwrap_or(("", &action.target));
        let answer = match action.verb {
            EngineVerb::KubeCordon | EngineVerb::KubeUncordon => {
                let cordon = action.verb == EngineVerb::KubeCordon;
                let patch = Patch::Merge(json!({"spec": {"unschedulable": cordon}}));
                Api::<KeptNode>::all(client)
                    .patch(&action.target, &PatchParams::default(), &patch)
                    .await
                    .map_err(refused)?;
                format!(
                    "node {} {}",
                    action.target,
                    if cordon { "cordoned" } else { "uncordoned" }
                )
            }
            EngineVerb::KubeEvict => {
                Api::<KeptPod>::namespaced(client, ns)
                    .evict(pod, &EvictParams::default())
                    .await
                    .map_err(refused)?;
                format!("pod {ns}/{pod} evicted")
            }
            EngineVerb::KubeDelete => {
                Api::<KeptPod>::namespaced(client, ns)
                    .delete(pod, &DeleteParams::default())
                    .await
                    .map_err(refused)?;
                format!("pod {ns}/{pod} deleted")
            }
            other => {
                return Err(SourceError::Peer {
                    url,
                    peer: "Kubernetes API",
                    message: format!("`{other}` is not a Kubernetes action"),
                });
            }
        };
        Ok(EngineDone {
            action: action.clone(),
            answer,
        })
    }
}
