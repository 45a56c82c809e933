//! The claim form: its request forms, fields, round-trip stage, and the draft it makes;
//! and the rows of the move picker.

use crate::request::{ClaimRequest, RequestError};
use crate::wire::ClaimDraft;

/// The claim form's request forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormKind {
    /// Ray `gpu_memory`.
    Memory,
    /// Ray `num_gpus` fraction.
    Fraction,
    /// Koordinator share: `gpu-memory` or `gpu-memory-ratio` (amount ending in %), core, shared.
    Share,
    /// `nvidia.com/gpu`: whole devices.
    Whole,
}

impl FormKind {
    /// In cycle order.
    pub const ALL: [FormKind; 4] = [
        FormKind::Memory,
        FormKind::Fraction,
        FormKind::Share,
        FormKind::Whole,
    ];
    /// Label.
    pub fn label(self) -> &'static str {
        match self {
            FormKind::Memory => "memory (gpu_memory)",
            FormKind::Fraction => "fraction (num_gpus)",
            FormKind::Share => "share (gpu-memory / ratio %, gpu-core, gpu.shared)",
            FormKind::Whole => "whole GPUs (nvidia.com/gpu)",
        }
    }
}

/// The claim form's fields, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormField {
    /// Request form (a choice).
    Kind,
    /// Memory (`10Gi`), fraction (`0.25`), ratio (`50%`) or count.
    Amount,
    /// `gpu-core` percent (share form).
    Core,
    /// `gpu.shared` devices (share form).
    Shared,
    /// Project.
    Project,
    /// Holder.
    Holder,
    /// Lease seconds.
    Ttl,
    /// Node to pin (optional).
    Node,
    /// Wait as pending when it does not fit (a choice).
    Wait,
}

impl FormField {
    /// In order.
    pub const ALL: [FormField; 9] = [
        FormField::Kind,
        FormField::Amount,
        FormField::Core,
        FormField::Shared,
        FormField::Project,
        FormField::Holder,
        FormField::Ttl,
        FormField::Node,
        FormField::Wait,
    ];
    /// Label.
    pub fn label(self) -> &'static str {
        match self {
            FormField::Kind => "Request form",
            FormField::Amount => "Amount",
            FormField::Core => "Core %",
            FormField::Shared => "Shared on",
            FormField::Project => "Project",
            FormField::Holder => "Holder",
            FormField::Ttl => "TTL (s)",
            FormField::Node => "Node",
            FormField::Wait => "Wait if full",
        }
    }
}

/// Where the claim form is in its round trip.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FormStage {
    /// Being filled in.
    Editing,
    /// Waiting for the placement preview.
    Planning,
    /// The preview is shown; confirm to submit.
    Preview(String),
    /// Submitted, waiting for the answer.
    Submitting,
}

/// The claim form.
// Not `Eq`: a hand-over's steps hold actions.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimForm {
    /// The source it goes to.
    pub source: usize,
    /// Request form.
    pub kind: FormKind,
    /// Text of each text field, indexed like `FormField::ALL`.
    pub text: [String; 9],
    /// Wait as pending.
    pub wait: bool,
    /// Focused field.
    pub focus: usize,
    /// Round-trip stage.
    pub stage: FormStage,
    /// The source's or the validator's error, in its words.
    pub error: Option<String>,
    /// The sources to try next, in the preview's order, when the source refuses the
    /// claim or does not answer.
    pub next: Vec<usize>,
    /// The sources that refused it so far, each `name: words`.
    pub refused: Vec<String>,
    /// A hand-over's steps before this claim (empty: a plain claim); submitting asks to
    /// confirm them all in one dialog.
    pub handover: Vec<crate::console::flows::StepPlan>,
    /// The attempt label of a claim sent across several sources (`gpuboard.attempt`).
    pub attempt: Option<crate::placement::AttemptId>,
    /// The source that did not answer and is being asked again for the attempt's claim.
    pub rechecking: Option<crate::fleet::Lost>,
    /// Sources still silent when asked again: they may hold a phantom claim.
    pub suspects: Vec<crate::fleet::Lost>,
    /// What the claim would do, as the source previews it (asked once the placement
    /// preview is shown).
    pub what_if: super::DialogPreview,
}

impl ClaimForm {
    /// A fresh form for `source`, its holder the operator (`identity`) when known, as
    /// the CLI's.
    pub fn for_holder(source: usize, operator: Option<&str>) -> ClaimForm {
        let mut form = ClaimForm::new(source);
        if let Some(me) = operator {
            form.set_field(FormField::Holder, me.to_string());
        }
        form
    }

    /// A fresh form for `source`.
    pub fn new(source: usize) -> ClaimForm {
        let mut text: [String; 9] = Default::default();
        text[1] = "10Gi".to_string();
        text[4] = "default".to_string();
        ClaimForm {
            source,
            kind: FormKind::Memory,
            text,
            wait: false,
            focus: 1,
            stage: FormStage::Editing,
            error: None,
            next: Vec::new(),
            refused: Vec::new(),
            handover: Vec::new(),
            attempt: None,
            rechecking: None,
            suspects: Vec::new(),
            what_if: super::DialogPreview::Unasked,
        }
    }

    /// Sets the text of a field.
    pub fn set_field(&mut self, f: FormField, value: String) {
        if let Some(i) = FormField::ALL.iter().position(|x| *x == f) {
            self.text[i] = value;
        }
    }

    /// The text of a field.
    pub fn field(&self, f: FormField) -> &str {
        let i = FormField::ALL.iter().position(|x| *x == f).unwrap_or(0);
        self.text.get(i).map_or("", String::as_str)
    }

    /// The fields that apply to the chosen form.
    pub fn visible(&self) -> Vec<FormField> {
        FormField::ALL
            .into_iter()
            .filter(|f| {
                !matches!(f, FormField::Core | FormField::Shared) || self.kind == FormKind::Share
            })
            .collect()
    }

    /// The operator's entries as a draft: the form picks the request form, the draft
    /// decides the wire fields.
    pub fn draft(&self) -> ClaimDraft {
        let text = |f: FormField| {
            let v = self.field(f).trim();
            (!v.is_empty()).then(|| v.to_string())
        };
        let amount = text(FormField::Amount);
        let mut d = ClaimDraft {
            project: text(FormField::Project),
            holder: text(FormField::Holder),
            node: text(FormField::Node),
            ttl: text(FormField::Ttl),
            wait: self.wait,
            ..ClaimDraft::default()
        };
        match self.kind {
            FormKind::Memory => d.memory = Some(amount.unwrap_or_default()),
            FormKind::Fraction => d.fraction = Some(amount.unwrap_or_default()),
            FormKind::Whole => d.gpus = Some(amount.unwrap_or_default()),
            FormKind::Share => {
                let amount = amount.unwrap_or_default();
                match amount.strip_suffix('%') {
                    Some(r) => d.ratio = Some(r.to_string()),
                    None => d.memory = Some(amount),
                }
                d.core = text(FormField::Core);
                d.shared = text(FormField::Shared);
                d.koordinator = true;
            }
        }
        d
    }

    /// The validated request, or the validator's words on what is wrong.
    pub fn request(&self) -> Result<ClaimRequest, RequestError> {
        self.draft().to_request(serde_json::Map::new())
    }
}

/// One GPU the move picker offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveRow {
    /// The source it belongs to (another acting source than the claim's: a move across
    /// sources, claimed there first and then released here).
    pub source: usize,
    /// Node.
    pub node: String,
    /// Device index.
    pub index: u32,
    /// Model name.
    pub model: String,
    /// Free memory and compute, in words.
    pub free: String,
    /// Whether one of the claim's per-device shares fits in what is free (the source
    /// re-checks; rows that fit are listed first).
    pub fits: bool,
    /// The claim's share is larger than the whole GPU: it never fits there, freed or not
    /// (else a row that does not fit is too full now).
    pub too_small: bool,
    /// The row is "any other source": the best by placement, then the next on refusal
    /// (`node` and `index` are unused).
    pub any: bool,
}
