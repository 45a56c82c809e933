//! Claims by their form: what placement looks at in a request (`queue::same_placement`).
//! Claims of one form fit, and fail to fit, alike, so while the fleet stays as it is work
//! fetch asks placement once per form and model, not once per waiting claim, and a
//! forward step asks once per waiting form whether anything fits what it freed. A queue
//! is mostly many claims of a few forms.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::request::{ClaimRequest, GpuForm, Milli};

/// What placement looks at in a request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Form {
    gpu: Option<GpuForm>,
    accelerator_type: Option<String>,
    cpus: Option<Milli>,
    node: Option<String>,
    devices: Option<Vec<u32>>,
}

impl Form {
    /// A request's form.
    pub(super) fn of(req: &ClaimRequest) -> Form {
        Form {
            gpu: req.gpu,
            accelerator_type: req.accelerator_type.clone(),
            cpus: req.cpus,
            node: req.node.clone(),
            devices: req.devices.clone(),
        }
    }

    /// The form in words that tell every two forms apart (the fair-share ledger groups
    /// a project's waiting claims by them, `PendingClaim::form`).
    pub(super) fn words(req: &ClaimRequest) -> String {
        format!("{:?}", Form::of(req))
    }

    /// Whether `req` is of this form.
    fn is(&self, req: &ClaimRequest) -> bool {
        self.gpu == req.gpu
            && self.accelerator_type == req.accelerator_type
            && self.cpus == req.cpus
            && self.node == req.node
            && self.devices == req.devices
    }
}

/// A hash of a request's form and a model, without building the form.
fn key(req: &ClaimRequest, model: Option<&str>) -> u64 {
    let mut h = DefaultHasher::new();
    req.gpu.hash(&mut h);
    req.accelerator_type.as_deref().hash(&mut h);
    req.cpus.hash(&mut h);
    req.node.as_deref().hash(&mut h);
    req.devices.as_deref().hash(&mut h);
    model.hash(&mut h);
    h.finish()
}

/// Whether claims of a form fit on a model (`None`: any), as worked out at one
/// generation of the fleet.
#[derive(Clone, Debug, Default)]
pub(super) struct FitsSeen {
    generation: u64,
    seen: HashMap<u64, Vec<(Form, Option<String>, bool)>>,
}

impl FitsSeen {
    /// Whether `req` fits on `model` at the fleet's `generation`: asked of `fits` once
    /// per form and model while the generation stays.
    pub(super) fn fits(
        &mut self,
        generation: u64,
        req: &ClaimRequest,
        model: Option<&str>,
        fits: impl FnOnce() -> bool,
    ) -> bool {
        if self.generation != generation {
            self.generation = generation;
            self.seen.clear();
        }
        let same = self.seen.entry(key(req, model)).or_default();
        if let Some(&(_, _, known)) = same
            .iter()
            .find(|(form, m, _)| form.is(req) && m.as_deref() == model)
        {
            return known;
        }
        let answer = fits();
        same.push((Form::of(req), model.map(str::to_string), answer));
        answer
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn req(v: serde_json::Value) -> ClaimRequest {
        ClaimRequest::from_json(&v).unwrap()
    }

    #[test]
    fn placement_is_asked_once_per_form_and_model_while_the_fleet_stays() {
        let one = req(serde_json::json!({"num_gpus": 1, "project": "a"}));
        let other_project = req(serde_json::json!({"num_gpus": 1, "project": "b", "ttl": 60}));
        let two = req(serde_json::json!({"num_gpus": 2, "project": "a"}));
        let pinned = req(serde_json::json!({"num_gpus": 1, "project": "a", "node": "n1"}));
        let mut seen = FitsSeen::default();
        let mut asked = 0;
        let mut ask = |seen: &mut FitsSeen, g, r: &ClaimRequest, m, answer| {
            seen.fits(g, r, m, || {
                asked += 1;
                answer
            })
        };
        assert!(ask(&mut seen, 1, &one, Some("A100"), true));
        // Another project, another ttl: the same form, the answer kept.
        assert!(ask(&mut seen, 1, &other_project, Some("A100"), false));
        assert!(!ask(&mut seen, 1, &two, Some("A100"), false));
        assert!(!ask(&mut seen, 1, &pinned, Some("A100"), false));
        assert!(!ask(&mut seen, 1, &one, Some("H100"), false));
        assert!(!ask(&mut seen, 1, &one, None, false));
        // The fleet changed: asked again.
        assert!(!ask(&mut seen, 2, &one, Some("A100"), false));
        assert_eq!(asked, 6);
        assert_eq!(Form::of(&one), Form::of(&other_project));
        assert_ne!(Form::of(&one), Form::of(&pinned));
    }
}
