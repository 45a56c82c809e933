//! Open files for the sources. Each source holds a file descriptor or a few (an endpoint's
//! watch connection; an SSH host's pipes from its `ssh`),
//! so a thousand sources need more than the common soft limit of 1 024. At start the
//! console raises its soft limit as far as its sources need, within the hard limit, or says
//! how many of them it can watch and why. The arithmetic is here, plain; `raise` is the
//! one call that reads and sets the process's limit.

use crate::sources::SourceKind;

/// Descriptors the console holds whatever its sources: the terminal, the log, the
/// runtime's poller and wakers, history and usage reads and the connections of the
/// actions in flight, with room to spare.
pub const BASE_FDS: u64 = 64;

/// Descriptors one source of `kind` holds while it is watched.
pub fn per_source(kind: SourceKind) -> u64 {
    match kind {
        // In the console's own process: no descriptor of their own.
        SourceKind::Demo | SourceKind::Embedded => 0,
        // An SSH host: the stdout and stderr pipes of its `ssh`, and one for a probe beside
        // them. A cluster: a watch on nodes and one on pods, and one for a read beside them.
        SourceKind::Ssh | SourceKind::Kubernetes => 3,
        // The watch (or poll) connection; an action's or a read's connection is short and
        // comes out of `BASE_FDS`.
        SourceKind::Gpuboard
        | SourceKind::Ray
        | SourceKind::Prometheus
        | SourceKind::Slurm
        | SourceKind::Boinc => 1,
    }
}

/// Descriptors the console needs to watch sources of these kinds.
pub fn needed(kinds: &[SourceKind]) -> u64 {
    kinds
        .iter()
        .map(|&k| per_source(k))
        .fold(BASE_FDS, u64::saturating_add)
}

/// How many of the sources, in order, fit within `limit` descriptors.
pub fn watchable(kinds: &[SourceKind], limit: u64) -> usize {
    let mut used = BASE_FDS;
    kinds
        .iter()
        .take_while(|&&k| {
            used = used.saturating_add(per_source(k));
            used <= limit
        })
        .count()
}

/// The process's limit on open files (`RLIMIT_NOFILE`); `u64::MAX` is "unlimited".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// What the process may open now.
    pub soft: u64,
    /// What the soft limit may be raised to without privilege.
    pub hard: u64,
}

/// What to do about the limit for a set of sources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FdPlan {
    /// The soft limit already covers them.
    Enough,
    /// Raise the soft limit to `to` (within the hard limit): then every source fits.
    Raise {
        /// The new soft limit.
        to: u64,
    },
    /// Even the hard limit is short: raise to it, and only `watchable` sources fit.
    Short {
        /// The new soft limit (the hard one).
        to: u64,
        /// Sources that fit, in order.
        watchable: usize,
        /// Descriptors all of them would need.
        needed: u64,
    },
}

/// The plan for sources of these kinds under `limits`.
pub fn plan(kinds: &[SourceKind], limits: Limits) -> FdPlan {
    let need = needed(kinds);
    if need <= limits.soft {
        FdPlan::Enough
    } else if need <= limits.hard {
        FdPlan::Raise { to: need }
    } else {
        FdPlan::Short {
            to: limits.hard,
            watchable: watchable(kinds, limits.hard),
            needed: need,
        }
    }
}

/// The hard limit, as `short_message` names it.
pub const HARD: &str = "the hard limit, ulimit -Hn";

/// What the console says when its sources do not all fit: how many it can watch and why
/// (`limit`, which `what` names), and what would let it watch them all.
pub fn short_message(
    sources: usize,
    watchable: usize,
    needed: u64,
    (limit, what): (u64, &str),
) -> String {
    format!(
        "open files: {sources} sources need about {needed} file descriptors, but this \
         process may open {limit} ({what}): {watchable} of them can be \
         watched, the others fail with \"too many open files\"; raise the hard limit \
         (nofile in /etc/security/limits.conf, LimitNOFILE= for a systemd unit, or ulimit \
         -Hn as root) to watch them all"
    )
}

/// Reads the process's limit on open files.
fn current() -> std::io::Result<Limits> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid, writable rlimit for the call to fill.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut r) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let v = |x: libc::rlim_t| {
        if x == libc::RLIM_INFINITY {
            u64::MAX
        } else {
            x
        }
    };
    Ok(Limits {
        soft: v(r.rlim_cur),
        hard: v(r.rlim_max),
    })
}

/// Sets the soft limit to `to`, keeping the hard one.
fn set_soft(to: u64, hard: u64) -> std::io::Result<()> {
    let v = |x: u64| {
        if x == u64::MAX {
            libc::RLIM_INFINITY
        } else {
            x
        }
    };
    let r = libc::rlimit {
        rlim_cur: v(to),
        rlim_max: v(hard),
    };
    // SAFETY: `r` is a valid rlimit; the call only reads it.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const r) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Raises the soft limit on open files as far as sources of these kinds need, within the
/// hard limit. Returns what to tell the operator when they do not all fit (or the limit
/// could not be read or set), `None` when they do.
pub fn raise(kinds: &[SourceKind]) -> Option<String> {
    let limits = match current() {
        Ok(l) => l,
        Err(e) => return Some(format!("open files: cannot read the limit ({e})")),
    };
    let (to, short) = match plan(kinds, limits) {
        FdPlan::Enough => return None,
        FdPlan::Raise { to } => (to, None),
        FdPlan::Short {
            to,
            watchable,
            needed,
        } => (
            to,
            Some(short_message(kinds.len(), watchable, needed, (to, HARD))),
        ),
    };
    match set_soft(to, limits.hard) {
        Ok(()) => {
            tracing::info!(
                from = limits.soft,
                to,
                sources = kinds.len(),
                "raised the soft limit on open files"
            );
            short
        }
        Err(e) => Some(short_message(
            kinds.len(),
            watchable(kinds, limits.soft),
            needed(kinds),
            (
                limits.soft,
                &format!("its soft limit, which could not be raised to {to}: {e}"),
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints(n: usize) -> Vec<SourceKind> {
        vec![SourceKind::Gpuboard; n]
    }

    #[test]
    fn a_thousand_endpoints_need_more_than_the_common_soft_limit() {
        assert_eq!(needed(&endpoints(1_000)), 64 + 1_000);
        assert_eq!(needed(&[]), BASE_FDS);
        let soft = Limits {
            soft: 1_024,
            hard: 524_288,
        };
        assert_eq!(plan(&endpoints(100), soft), FdPlan::Enough);
        assert_eq!(plan(&endpoints(1_000), soft), FdPlan::Raise { to: 1_064 });
    }

    #[test]
    fn ssh_hosts_and_in_process_sources_count_what_they_hold() {
        let kinds = [
            SourceKind::Ssh,
            SourceKind::Ssh,
            SourceKind::Demo,
            SourceKind::Embedded,
            SourceKind::Kubernetes,
            SourceKind::Prometheus,
        ];
        // Two SSH hosts, the cluster and Prometheus; the demo and embedded hold none.
        assert_eq!(needed(&kinds), 64 + 3 + 3 + 3 + 1);
    }

    #[test]
    fn under_a_short_hard_limit_it_counts_the_sources_that_fit_in_order() {
        let limits = Limits {
            soft: 256,
            hard: 1_024,
        };
        // 1 024 - 64 = 960 endpoints fit.
        assert_eq!(
            plan(&endpoints(1_000), limits),
            FdPlan::Short {
                to: 1_024,
                watchable: 960,
                needed: 1_064
            }
        );
        // An SSH host first takes 3: three endpoints fewer fit after it.
        let mut kinds = vec![SourceKind::Ssh];
        kinds.extend(endpoints(999));
        assert_eq!(watchable(&kinds, 1_024), 1 + 957);
        assert_eq!(watchable(&endpoints(10), 10), 0);
    }

    #[test]
    fn an_unlimited_hard_limit_raises_to_what_is_needed() {
        let limits = Limits {
            soft: 1_024,
            hard: u64::MAX,
        };
        assert_eq!(plan(&endpoints(5_000), limits), FdPlan::Raise { to: 5_064 });
    }

    #[test]
    fn the_message_says_how_many_can_be_watched_why_and_what_to_change() {
        let m = short_message(1_000, 960, 1_064, (1_024, HARD));
        assert!(
            m.contains("1000 sources need about 1064 file descriptors"),
            "{m}"
        );
        assert!(
            m.contains("may open 1024 (the hard limit, ulimit -Hn)"),
            "{m}"
        );
        assert!(m.contains("960 of them can be watched"), "{m}");
        assert!(m.contains("LimitNOFILE="), "{m}");
    }
}
