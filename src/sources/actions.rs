//! Actions on the engines themselves, as values: what an operator asks Slurm, BOINC or Ray
//! to do (`EngineVerb`, with its target in `EngineAction`), which verbs each source kind
//! offers and, for those it cannot carry out, why (`offers`), and what the engine answered
//! (`EngineDone`). The executors live beside each adapter (`slurm/actions`,
//! `boinc/actions`, `ray/actions`); the console and `gpuboard act` both go through
//! `Source::act` with `Action::Engine`.

use std::fmt;

use super::kind::SourceKind;

/// One thing an engine can be asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EngineVerb {
    /// Slurm: cancel a job (`DELETE /job/{id}`): its GPUs and shards come free.
    SlurmCancel,
    /// Slurm: hold a pending job (priority 0, `JobHeldUser`).
    SlurmHold,
    /// Slurm: release a held job.
    SlurmRelease,
    /// Slurm: requeue a running job.
    SlurmRequeue,
    /// Slurm: drain a node (its GPUs take no new jobs).
    SlurmDrain,
    /// Slurm: resume a drained node.
    SlurmResume,
    /// BOINC: suspend a project (its tasks stop, its GPUs come free).
    BoincSuspendProject,
    /// BOINC: resume a suspended project.
    BoincResumeProject,
    /// BOINC: the project fetches no new tasks.
    BoincNoNewTasks,
    /// BOINC: the project may fetch tasks again.
    BoincAllowNewTasks,
    /// BOINC: the client's GPU mode (never, auto, always): the whole client's GPUs.
    BoincGpuMode,
    /// BOINC: abort a task (it is gone; its GPU comes free).
    BoincAbortTask,
    /// BOINC: suspend a task (it stops; its GPU comes free).
    BoincSuspendTask,
    /// BOINC: resume a suspended task.
    BoincResumeTask,
    /// Ray: stop a job submitted through the Jobs API (its tasks and actors end).
    RayStopJob,
    /// Kubernetes: cordon a node (`spec.unschedulable`): no new pods on its GPUs.
    KubeCordon,
    /// Kubernetes: uncordon a node.
    KubeUncordon,
    /// Kubernetes: evict a pod through the Eviction API (disruption budgets apply).
    KubeEvict,
    /// Kubernetes: delete a pod (no disruption budget is asked).
    KubeDelete,
}

impl EngineVerb {
    /// Every verb, in the order `--list` and `?` show them.
    pub const ALL: &'static [EngineVerb] = &[
        EngineVerb::SlurmCancel,
        EngineVerb::SlurmHold,
        EngineVerb::SlurmRelease,
        EngineVerb::SlurmRequeue,
        EngineVerb::SlurmDrain,
        EngineVerb::SlurmResume,
        EngineVerb::BoincSuspendProject,
        EngineVerb::BoincResumeProject,
        EngineVerb::BoincNoNewTasks,
        EngineVerb::BoincAllowNewTasks,
        EngineVerb::BoincGpuMode,
        EngineVerb::BoincAbortTask,
        EngineVerb::BoincSuspendTask,
        EngineVerb::BoincResumeTask,
        EngineVerb::RayStopJob,
        EngineVerb::KubeCordon,
        EngineVerb::KubeUncordon,
        EngineVerb::KubeEvict,
        EngineVerb::KubeDelete,
    ];

    /// The source kind that carries it out (Slurm, BOINC, Ray).
    pub fn kind(self) -> SourceKind {
        use EngineVerb as V;
        match self {
            V::SlurmCancel
            | V::SlurmHold
            | V::SlurmRelease
            | V::SlurmRequeue
            | V::SlurmDrain
            | V::SlurmResume => SourceKind::Slurm,
            V::BoincSuspendProject
            | V::BoincResumeProject
            | V::BoincNoNewTasks
            | V::BoincAllowNewTasks
            | V::BoincGpuMode
            | V::BoincAbortTask
            | V::BoincSuspendTask
            | V::BoincResumeTask => SourceKind::Boinc,
            V::RayStopJob => SourceKind::Ray,
            V::KubeCordon | V::KubeUncordon | V::KubeEvict | V::KubeDelete => {
                SourceKind::Kubernetes
            }
        }
    }

    /// The name on the command line (`gpuboard act SOURCE NAME TARGET`).
    pub fn name(self) -> &'static str {
        use EngineVerb as V;
        match self {
            V::SlurmCancel => "cancel",
            V::SlurmHold => "hold",
            V::SlurmRelease => "release",
            V::SlurmRequeue => "requeue",
            V::SlurmDrain => "drain",
            V::SlurmResume => "resume",
            V::BoincSuspendProject => "suspend-project",
            V::BoincResumeProject => "resume-project",
            V::BoincNoNewTasks => "no-new-tasks",
            V::BoincAllowNewTasks => "allow-new-tasks",
            V::BoincGpuMode => "gpu-mode",
            V::BoincAbortTask => "abort-task",
            V::BoincSuspendTask => "suspend-task",
            V::BoincResumeTask => "resume-task",
            V::RayStopJob => "stop-job",
            V::KubeCordon => "cordon",
            V::KubeUncordon => "uncordon",
            V::KubeEvict => "evict",
            V::KubeDelete => "delete-pod",
        }
    }

    /// What the target is, for `--list` and messages.
    pub fn target_kind(self) -> &'static str {
        use EngineVerb as V;
        match self {
            V::SlurmCancel | V::SlurmHold | V::SlurmRelease | V::SlurmRequeue => "JOB_ID",
            V::SlurmDrain | V::SlurmResume | V::KubeCordon | V::KubeUncordon => "NODE",
            V::KubeEvict | V::KubeDelete => "NAMESPACE/POD",
            V::BoincSuspendProject
            | V::BoincResumeProject
            | V::BoincNoNewTasks
            | V::BoincAllowNewTasks => "PROJECT",
            V::BoincGpuMode => "never|auto|always",
            V::BoincAbortTask | V::BoincSuspendTask | V::BoincResumeTask => "TASK",
            V::RayStopJob => "SUBMISSION_ID",
        }
    }

    /// What it does on the engine, in one line.
    pub fn effect(self) -> &'static str {
        use EngineVerb as V;
        match self {
            V::SlurmCancel => "cancels the job (DELETE /job/{id}); its GPUs and shards come free",
            V::SlurmHold => "holds a pending job (priority 0): it will not start",
            V::SlurmRelease => "releases a held job: it may start again",
            V::SlurmRequeue => "requeues a running job: it stops and waits again",
            V::SlurmDrain => "drains the node: its GPUs take no new jobs",
            V::SlurmResume => "resumes a drained node",
            V::BoincSuspendProject => "suspends the project: its tasks stop, their GPUs come free",
            V::BoincResumeProject => "resumes the project",
            V::BoincNoNewTasks => "the project fetches no new tasks",
            V::BoincAllowNewTasks => "the project may fetch new tasks again",
            V::BoincGpuMode => "sets the client's GPU mode: never frees every GPU it uses",
            V::BoincAbortTask => "aborts the task (it is gone); its GPU comes free",
            V::BoincSuspendTask => "suspends the task; its GPU comes free",
            V::BoincResumeTask => "resumes a suspended task",
            V::RayStopJob => {
                "stops the submitted job; its tasks and actors end, their GPUs come free"
            }
            V::KubeCordon => "cordons the node (spec.unschedulable): no new pods on its GPUs",
            V::KubeUncordon => "uncordons the node: new pods may land on it again",
            V::KubeEvict => {
                "evicts the pod (Eviction API: its disruption budget may refuse); its GPUs come free"
            }
            V::KubeDelete => "deletes the pod (no disruption budget asked); its GPUs come free",
        }
    }

    /// Whether it frees GPUs, so the console asks for the target typed out before it runs.
    pub fn destructive(self) -> bool {
        matches!(
            self,
            EngineVerb::SlurmCancel
                | EngineVerb::SlurmRequeue
                | EngineVerb::BoincAbortTask
                | EngineVerb::RayStopJob
                | EngineVerb::KubeEvict
                | EngineVerb::KubeDelete
        )
    }

    /// Why the adapter cannot carry it out, when it cannot: the engine's API here has no
    /// such operation.
    pub fn unavailable(self) -> Option<&'static str> {
        match self {
            EngineVerb::SlurmRequeue => Some(
                "slurmrestd's v0.0.38 API (Slurm 22.05), the one gpuboard reads, has no requeue \
                 operation; use `scontrol requeue JOB_ID`",
            ),
            EngineVerb::SlurmDrain | EngineVerb::SlurmResume => Some(
                "slurmrestd's v0.0.38 API (Slurm 22.05), the one gpuboard reads, cannot update \
                 nodes (node updates came with v0.0.39); use `scontrol update NodeName=... \
                 State=DRAIN|RESUME`",
            ),
            _ => None,
        }
    }

    /// The verb of `kind` named `name`; the error names what `kind` offers.
    pub fn parse(kind: SourceKind, name: &str) -> Result<EngineVerb, EngineActionError> {
        let offered: Vec<EngineVerb> = offers(kind);
        if offered.is_empty() {
            return Err(EngineActionError::NoActions { kind });
        }
        offered
            .iter()
            .copied()
            .find(|v| v.name() == name)
            .ok_or_else(|| EngineActionError::UnknownVerb {
                kind,
                name: name.to_string(),
                known: offered
                    .iter()
                    .map(|v| v.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

impl fmt::Display for EngineVerb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The verbs a source kind has (those it cannot carry out included, with their reason in
/// `EngineVerb::unavailable`); none for kinds that are not engines.
pub fn offers(kind: SourceKind) -> Vec<EngineVerb> {
    EngineVerb::ALL
        .iter()
        .copied()
        .filter(|v| v.kind() == kind)
        .collect()
}

/// What `?` says of a source kind's engine actions: what it offers, and each verb it does
/// not with why (the reason up to its advice). Empty for kinds that are not engines.
pub fn help_lines(kind: SourceKind) -> Vec<String> {
    let verbs = offers(kind);
    if verbs.is_empty() {
        return Vec::new();
    }
    let on: Vec<&str> = verbs
        .iter()
        .filter(|v| v.unavailable().is_none())
        .map(|v| v.name())
        .collect();
    let mut out = vec![format!("{kind} (E, :act VERB [TARGET]): {}", on.join(", "))];
    for v in verbs.iter().filter(|v| v.unavailable().is_some()) {
        let why = v.unavailable().unwrap_or_default();
        out.push(format!(
            "  {v}: not offered: {}",
            why.split(';').next().unwrap_or(why)
        ));
    }
    if kind == SourceKind::Ray {
        out.push("  tasks, actors, placement groups: read-only; stop their job".to_string());
    }
    out
}

/// What Ray's holders other than submitted jobs are, and why they stay read-only.
pub const RAY_READ_ONLY: &str = "Ray tasks, actors and placement groups of a job are stopped \
     with their job (stop-job); the dashboard's Jobs API has no call to kill one of them, and \
     jobs started by a driver script (not `ray job submit`) cannot be stopped from outside";

/// The GPU modes of a BOINC client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuMode {
    /// Never use the GPUs.
    Never,
    /// Use them per the preferences.
    Auto,
    /// Always use them.
    Always,
}

impl GpuMode {
    /// The GUI RPC tag and command-line word.
    pub fn word(self) -> &'static str {
        match self {
            GpuMode::Never => "never",
            GpuMode::Auto => "auto",
            GpuMode::Always => "always",
        }
    }
}

/// An engine action: the verb and what it acts on, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineAction {
    /// What to do.
    pub verb: EngineVerb,
    /// On what: a Slurm job id, a node, a BOINC project or task, a GPU mode, a Ray job.
    pub target: String,
}

impl EngineAction {
    /// Checks `target` for `verb`: a job id is a number, a GPU mode one of three words, and
    /// no target is empty or carries markup.
    pub fn new(verb: EngineVerb, target: &str) -> Result<EngineAction, EngineActionError> {
        let t = target.trim();
        let bad = |why: &str| EngineActionError::BadTarget {
            verb,
            target: target.to_string(),
            why: why.to_string(),
        };
        if t.is_empty() {
            return Err(bad(&format!("give a {}", verb.target_kind())));
        }
        let pod = verb.target_kind() == "NAMESPACE/POD";
        if pod && t.split('/').filter(|p| !p.is_empty()).count() != 2 {
            return Err(bad("a pod is named NAMESPACE/POD, such as ml/train-0"));
        }
        let slash_ok = verb.kind() == SourceKind::Boinc || pod;
        if t.contains(['<', '>', '&', '?', '#']) && verb.kind() != SourceKind::Boinc
            || t.contains('/') && !slash_ok
        {
            return Err(bad("it has characters no name or id of this engine has"));
        }
        if t == "." || t == ".." || t.chars().any(char::is_control) {
            return Err(bad("it is not a name or id"));
        }
        if t.contains(['<', '>', '&']) {
            return Err(bad("it has markup characters no BOINC name has"));
        }
        match verb {
            EngineVerb::SlurmCancel
            | EngineVerb::SlurmHold
            | EngineVerb::SlurmRelease
            | EngineVerb::SlurmRequeue
                if t.parse::<u32>().is_err() =>
            {
                return Err(bad("a Slurm job id is a whole number, such as 42"));
            }
            EngineVerb::BoincGpuMode => {
                GpuMode::parse(t).ok_or_else(|| bad("the GPU mode is never, auto or always"))?;
            }
            _ => {}
        }
        Ok(EngineAction {
            verb,
            target: t.to_string(),
        })
    }

    /// The GPU mode of a `gpu-mode` action.
    pub fn gpu_mode(&self) -> Option<GpuMode> {
        (self.verb == EngineVerb::BoincGpuMode)
            .then(|| GpuMode::parse(&self.target))
            .flatten()
    }

    /// What it acts on, in words (`job 42`, `project Einstein`, `GPU mode never`).
    pub fn describe_target(&self) -> String {
        let t = &self.target;
        match self.verb.target_kind() {
            "JOB_ID" => format!("job {t}"),
            "NODE" => format!("node {t}"),
            "PROJECT" => format!("project {t}"),
            "TASK" => format!("task {t}"),
            "SUBMISSION_ID" => format!("Ray job {t}"),
            "NAMESPACE/POD" => format!("pod {t}"),
            _ => format!("GPU mode {t}"),
        }
    }
}

impl GpuMode {
    /// `never`, `auto` or `always`.
    pub fn parse(word: &str) -> Option<GpuMode> {
        match word.trim() {
            "never" => Some(GpuMode::Never),
            "auto" => Some(GpuMode::Auto),
            "always" => Some(GpuMode::Always),
            _ => None,
        }
    }
}

/// What an engine answered to a done action, in one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineDone {
    /// The action.
    pub action: EngineAction,
    /// The engine's answer, in its words where it gave some.
    pub answer: String,
}

/// A malformed engine action.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EngineActionError {
    /// The source kind takes no engine actions.
    #[error(
        "a {kind} source takes no engine actions; engines with actions: slurm, boinc, ray, kubernetes"
    )]
    NoActions {
        /// The kind.
        kind: SourceKind,
    },
    /// No such verb for this kind.
    #[error("{kind} has no action `{name}`; it has: {known}")]
    UnknownVerb {
        /// The kind.
        kind: SourceKind,
        /// What was asked.
        name: String,
        /// What it has.
        known: String,
    },
    /// The target does not fit the verb.
    #[error("{verb} `{target}`: {why}")]
    BadTarget {
        /// The verb.
        verb: EngineVerb,
        /// The target as given.
        target: String,
        /// What is wrong and what is allowed.
        why: String,
    },
}

/// The audit line of an engine action: who, what, on which source, and the engine's
/// answer or refusal. The console's log and `gpuboard act` write the same line.
pub fn audit_line(
    actor: &str,
    source: &str,
    action: &EngineAction,
    result: Result<&str, &str>,
) -> String {
    let (status, words) = match result {
        Ok(w) => ("done", w),
        Err(w) => ("refused", w),
    };
    format!(
        "actor={actor} source={source} action={} target={} {status}: {words}",
        action.verb,
        action.describe_target()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verb_round_trips_through_its_kind_and_name() {
        for v in EngineVerb::ALL {
            assert_eq!(EngineVerb::parse(v.kind(), v.name()).unwrap(), *v);
        }
        let e = EngineVerb::parse(SourceKind::Slurm, "kill")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cancel, hold, release"), "{e}");
        let e = EngineVerb::parse(SourceKind::Prometheus, "cancel").unwrap_err();
        assert!(matches!(e, EngineActionError::NoActions { .. }));
    }

    #[test]
    fn targets_are_checked() {
        let ok = EngineAction::new(EngineVerb::SlurmCancel, " 42 ").unwrap();
        assert_eq!(ok.target, "42");
        assert_eq!(ok.describe_target(), "job 42");
        for (verb, bad) in [
            (EngineVerb::SlurmCancel, "forty"),
            (EngineVerb::SlurmHold, ""),
            (EngineVerb::BoincGpuMode, "sometimes"),
            (EngineVerb::BoincSuspendProject, "<x>"),
            (EngineVerb::RayStopJob, "../x"),
            (EngineVerb::RayStopJob, ".."),
            (EngineVerb::BoincAbortTask, "a\nb"),
        ] {
            let e = EngineAction::new(verb, bad).unwrap_err();
            assert!(matches!(e, EngineActionError::BadTarget { .. }), "{e}");
        }
        let m = EngineAction::new(EngineVerb::BoincGpuMode, "never").unwrap();
        assert_eq!(m.gpu_mode(), Some(GpuMode::Never));
    }

    #[test]
    fn unavailable_verbs_say_why() {
        assert!(
            EngineVerb::SlurmDrain
                .unavailable()
                .unwrap()
                .contains("v0.0.38")
        );
        assert!(EngineVerb::SlurmCancel.unavailable().is_none());
        assert_eq!(offers(SourceKind::Ray), vec![EngineVerb::RayStopJob]);
        assert!(offers(SourceKind::Gpuboard).is_empty());
    }

    #[test]
    fn the_audit_line_names_actor_action_target_and_answer() {
        let a = EngineAction::new(EngineVerb::SlurmCancel, "7").unwrap();
        assert_eq!(
            audit_line("ann", "cluster", &a, Err("Invalid job id specified")),
            "actor=ann source=cluster action=cancel target=job 7 refused: Invalid job id specified"
        );
    }
}
