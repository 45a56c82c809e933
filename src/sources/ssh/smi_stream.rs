//! Reader 3, streamed: both nvidia-smi queries run once on the host with `-l SECS` (NVML
//! stays open there between periods), their lines tagged `g ` and `a ` by a POSIX shell
//! loop and interleaved on one ssh channel. `Periods` (pure) cuts the GPU lines into
//! periods: one is complete when the next period's first line comes (its index is not
//! above the last one's) or when the burst goes quiet. nvidia-smi prints nothing for a
//! period without processes, so a process is kept while it was printed within the last
//! period and a half. A period printing what the last one printed is not given out again.
//! No GPU line for three periods is a hung stream.

use std::time::Duration;

use super::command::Streaming;
use super::failure::{self, HostFailure};
use super::nvidia_smi::{APP_FIELDS, GPU_FIELDS};
use super::{Context, Outlet, Turn, smi_snapshot};
use crate::clock::Timestamp;

/// The stream, for `sh` (the end of the probe's script, which prints its `@start` line
/// first): both queries looping every `secs`, their lines tagged, each query's exit
/// status last (`g @exit N`).
pub fn script(secs: u64) -> String {
    format!(
        r#"run() {{
  tag=$1; shift
  {{ nvidia-smi "$@" --format=csv,noheader,nounits -l {secs} 2>&1; echo "@exit $?"; }} |
    while IFS= read -r l; do printf '%s %s\n' "$tag" "$l"; done
}}
run g --query-gpu={GPU_FIELDS} &
run a --query-compute-apps={APP_FIELDS} &
wait
"#
    )
}

/// A complete period: its GPU lines and the processes printed lately.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Period {
    /// The `--query-gpu` lines.
    pub gpus: String,
    /// The `--query-compute-apps` lines still current.
    pub apps: String,
    /// The apps query's exit status: `Some(0)` while it runs.
    pub apps_status: Option<i32>,
}

/// What a line did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fed {
    /// Nothing to show yet.
    Nothing,
    /// It began a new period, so the one before is complete.
    Period(Period),
    /// The GPU query ended (nvidia-smi exited): its status and first line.
    GpusEnded {
        /// Its exit status, when it said.
        status: Option<i32>,
        /// Its first line in this period (its error, usually).
        said: String,
    },
}

/// The periods of a tagged stream.
#[derive(Debug)]
pub struct Periods {
    /// How long a process stays listed after it was last printed.
    keep_apps_ms: u64,
    /// This period's GPU lines so far.
    gpus: Vec<String>,
    /// The index of the last GPU line of this period.
    last_index: Option<u32>,
    /// Processes by (GPU UUID, pid): their line and when it was last printed.
    apps: Vec<(String, String, Timestamp)>,
    apps_status: Option<i32>,
    /// The last period given out.
    last: Option<Period>,
}

impl Periods {
    /// Periods of `period`.
    pub fn new(period: Duration) -> Periods {
        Periods {
            keep_apps_ms: u64::try_from(period.as_millis() * 3 / 2).unwrap_or(u64::MAX),
            gpus: Vec::new(),
            last_index: None,
            apps: Vec::new(),
            apps_status: Some(0),
            last: None,
        }
    }

    /// Whether a period has begun and is not complete yet.
    pub fn pending(&self) -> bool {
        !self.gpus.is_empty()
    }

    /// Takes one line of the stream, read at `now`.
    pub fn line(&mut self, line: &str, now: Timestamp) -> Fed {
        if let Some(rest) = line.strip_prefix("g ") {
            if let Some(status) = rest.strip_prefix("@exit") {
                let said = self
                    .gpus
                    .iter()
                    .find(|l| !l.trim().is_empty())
                    .map_or_else(|| "(no output)".to_string(), |l| l.trim().to_string());
                self.gpus.clear();
                self.last_index = None;
                return Fed::GpusEnded {
                    status: status.trim().parse().ok(),
                    said,
                };
            }
            let index = rest
                .split(',')
                .next()
                .and_then(|i| i.trim().parse::<u32>().ok());
            let mut fed = Fed::Nothing;
            if let (Some(i), Some(last)) = (index, self.last_index)
                && i <= last
                && let Some(p) = self.complete(now)
            {
                fed = Fed::Period(p);
            }
            self.gpus.push(rest.to_string());
            if index.is_some() {
                self.last_index = index;
            }
            return fed;
        }
        if let Some(rest) = line.strip_prefix("a ") {
            if let Some(status) = rest.strip_prefix("@exit") {
                self.apps_status = status.trim().parse().ok().or(Some(-1));
                return Fed::Nothing;
            }
            let key = rest
                .splitn(3, ',')
                .take(2)
                .map(|p| p.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
                .join(",");
            self.apps.retain(|(k, _, _)| *k != key);
            self.apps.push((key, rest.to_string(), now));
        }
        // Anything untagged is the shell's, not nvidia-smi's: nothing to show.
        Fed::Nothing
    }

    /// The burst went quiet: the period begun is complete.
    pub fn quiet(&mut self, now: Timestamp) -> Option<Period> {
        if self.pending() {
            self.complete(now)
        } else {
            None
        }
    }

    /// Ends the period begun; `None` when it printed what the last one did, which changes
    /// nothing on screen (as the HTTP watch sends no delta when nothing changed).
    fn complete(&mut self, now: Timestamp) -> Option<Period> {
        let keep = self.keep_apps_ms;
        self.apps
            .retain(|(_, _, seen)| now.millis_since(*seen) <= keep);
        let mut gpus = self.gpus.join("\n");
        gpus.push('\n');
        self.gpus.clear();
        self.last_index = None;
        let period = Period {
            gpus,
            apps: self
                .apps
                .iter()
                .fold(String::new(), |mut all, (_, line, _)| {
                    all.push_str(line);
                    all.push('\n');
                    all
                }),
            apps_status: self.apps_status,
        };
        if self.last.as_ref() == Some(&period) {
            return None;
        }
        self.last = Some(period.clone());
        Some(period)
    }
}

/// Reads nvidia-smi's stream on the host (`child`, the probe's session after its `@start`
/// line), publishing each period, until the stream ends, goes silent for three periods, or
/// the source is gone.
pub(super) async fn follow(
    ctx: &Context,
    outlet: &Outlet,
    hostname: Option<&str>,
    note: &str,
    mut child: Streaming,
) -> Turn {
    let secs = ctx.period_secs();
    let what = format!("nvidia-smi -l {secs}");
    let mut periods = Periods::new(Duration::from_secs(secs));
    let silent = ctx.silent_after();
    // A period's lines come in one burst: this much quiet ends it.
    let gap = Duration::from_millis(200);
    let mut last_gpu = tokio::time::Instant::now();
    let publish = |p: &Period| {
        let snap = smi_snapshot(ctx, hostname, &p.gpus, Some((&p.apps, p.apps_status)), note);
        outlet.publish(Ok(snap))
    };
    loop {
        let wait = if periods.pending() {
            gap
        } else {
            silent.saturating_sub(last_gpu.elapsed())
        };
        match tokio::time::timeout(wait, child.line()).await {
            Ok(Some(line)) => {
                if line.starts_with("g ") {
                    last_gpu = tokio::time::Instant::now();
                }
                match periods.line(&line, ctx.clock.now()) {
                    Fed::Nothing => {}
                    Fed::Period(p) => {
                        if !publish(&p) {
                            return Turn::Gone;
                        }
                    }
                    Fed::GpusEnded { status, said } => {
                        let _ = child.stop().await;
                        return Turn::Failed(HostFailure::NvidiaSmi { status, said });
                    }
                }
            }
            Ok(None) => {
                let (ended, stderr) = child.finish().await;
                return Turn::Stopped(failure::stopped(&what, &ended, &stderr));
            }
            Err(_) => {
                if let Some(p) = periods.quiet(ctx.clock.now()) {
                    if !publish(&p) {
                        return Turn::Gone;
                    }
                } else if last_gpu.elapsed() >= silent {
                    let _ = child.stop().await;
                    return Turn::Stopped(HostFailure::Silent {
                        what,
                        secs: silent.as_secs(),
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "g 0, GPU-a, T4, 15360, 10, 1, 20.5, 40";
    const B: &str = "g 1, GPU-b, T4, 15360, 20, 2, 21.5, 41";

    #[test]
    fn a_period_ends_when_the_next_begins_or_goes_quiet() {
        let mut p = Periods::new(Duration::from_secs(2));
        assert_eq!(p.line(A, Timestamp(0)), Fed::Nothing);
        assert_eq!(p.line("g not a GPU line", Timestamp(0)), Fed::Nothing);
        assert_eq!(p.line(B, Timestamp(0)), Fed::Nothing);
        let Fed::Period(first) = p.line(A, Timestamp(2000)) else {
            panic!("the next period's first line completes the first");
        };
        assert_eq!(
            first.gpus,
            format!("{}\nnot a GPU line\n{}\n", &A[2..], &B[2..])
        );
        assert_eq!(first.apps_status, Some(0));
        assert_eq!(p.line(B, Timestamp(2000)), Fed::Nothing);
        let second = p.quiet(Timestamp(2200)).unwrap();
        assert_eq!(second.gpus.lines().count(), 2);
        assert_eq!(p.quiet(Timestamp(2300)), None, "nothing pending after it");
        // The same lines again change nothing: no period is given out.
        assert_eq!(p.line(A, Timestamp(4000)), Fed::Nothing);
        assert_eq!(p.line(B, Timestamp(4000)), Fed::Nothing);
        assert_eq!(p.quiet(Timestamp(4200)), None, "the same as the last");
        p.line("g 0, GPU-a, T4, 15360, 11, 1, 20.5, 40", Timestamp(6000));
        assert!(p.quiet(Timestamp(6200)).is_some(), "a value moved");
    }

    #[test]
    fn processes_stay_a_period_and_a_half_after_they_were_last_printed() {
        let mut p = Periods::new(Duration::from_secs(2));
        p.line("a GPU-a, 42, 100, python", Timestamp(0));
        p.line("a gpu-A, 42, 120, python", Timestamp(100));
        p.line(A, Timestamp(100));
        let one = p.quiet(Timestamp(300)).unwrap();
        assert_eq!(one.apps, "gpu-A, 42, 120, python\n", "one line per process");
        p.line(B, Timestamp(2100));
        assert_eq!(p.quiet(Timestamp(2300)).unwrap().apps.lines().count(), 1);
        p.line(A, Timestamp(4100));
        assert_eq!(p.quiet(Timestamp(4300)).unwrap().apps, "", "gone after 3 s");
    }

    #[test]
    fn a_query_that_ends_says_how() {
        let mut p = Periods::new(Duration::from_secs(2));
        p.line(
            "g NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
            Timestamp(0),
        );
        assert_eq!(
            p.line("g @exit 9", Timestamp(0)),
            Fed::GpusEnded {
                status: Some(9),
                said:
                    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
                        .into()
            }
        );
        p.line("a No devices were found", Timestamp(0));
        p.line("a @exit 6", Timestamp(0));
        p.line(A, Timestamp(10));
        let period = p.quiet(Timestamp(20)).unwrap();
        assert_eq!(period.apps_status, Some(6));
    }

    #[test]
    fn the_script_tags_both_queries_and_loops_them() {
        let c = script(2);
        assert!(c.contains("-l 2 2>&1"), "{c}");
        assert!(c.contains("run g --query-gpu=index,uuid"), "{c}");
        assert!(c.contains("run a --query-compute-apps=gpu_uuid"), "{c}");
    }
}
