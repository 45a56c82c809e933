//! Who runs this process, read one way everywhere: the holder a claim defaults to (the CLI,
//! the console's claim form), the `user@host` a client reports for an endpoint's audit log
//! (which puts the token's name before it: `admin (alice@gpu-01)`), and the actor of
//! `gpuboard act`'s audit lines. `USER` when set, else the login name the password database
//! gives this process's uid (cron jobs and containers often have no `USER`), else `uid{N}`.

/// Who runs this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalUser {
    /// The login name.
    pub user: String,
    /// This machine's host name (`unknown` when it cannot be read).
    pub host: String,
}

impl LocalUser {
    /// The identity of this process, read now.
    pub fn current() -> LocalUser {
        LocalUser::from_parts(
            std::env::var("USER").ok(),
            login_name,
            // SAFETY: getuid cannot fail and touches no memory.
            unsafe { libc::getuid() },
            host_name(),
        )
    }

    /// The identity from what the environment gave: `USER` (when not empty), else the
    /// password database's name for `uid` (asked only then), else `uid{uid}`.
    pub fn from_parts(
        user_var: Option<String>,
        login: impl FnOnce() -> Option<String>,
        uid: u32,
        host: String,
    ) -> LocalUser {
        let user = user_var
            .filter(|u| !u.is_empty())
            .or_else(login)
            .unwrap_or_else(|| format!("uid{uid}"));
        LocalUser { user, host }
    }

    /// The holder a claim defaults to: the login name.
    pub fn holder(&self) -> &str {
        &self.user
    }

    /// `user@host`: what a client reports for the audit log and the actor of `act`'s
    /// audit lines.
    pub fn actor(&self) -> String {
        format!("{}@{}", self.user, self.host)
    }
}

/// This machine's host name.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

/// The password database's name for this process's uid.
fn login_name() -> Option<String> {
    let mut pwd = std::mem::MaybeUninit::<libc::passwd>::uninit();
    let mut buf = vec![0 as libc::c_char; 4096];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes the record into `pwd` and its strings into `buf`, which
    // outlive the call; `found` is null or points at `pwd`. getuid cannot fail.
    let rc = unsafe {
        libc::getpwuid_r(
            libc::getuid(),
            pwd.as_mut_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
            &raw mut found,
        )
    };
    if rc != 0 || found.is_null() {
        return None;
    }
    // SAFETY: the call succeeded, so `pwd` is initialised and `pw_name` is a
    // NUL-terminated string inside `buf`, still alive here.
    let name = unsafe { std::ffi::CStr::from_ptr((*found).pw_name) };
    name.to_str()
        .ok()
        .filter(|n| !n.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_then_login_name_then_uid() {
        let host = || "gpu-01".to_string();
        let id = LocalUser::from_parts(Some("ann".into()), || panic!("not asked"), 7, host());
        assert_eq!((id.holder(), id.actor()), ("ann", "ann@gpu-01".to_string()));
        // USER unset or empty: the password database's name, for holder and actor alike.
        for var in [None, Some(String::new())] {
            let id = LocalUser::from_parts(var, || Some("root".into()), 0, host());
            assert_eq!(id.holder(), "root");
            assert_eq!(id.actor(), "root@gpu-01");
        }
        let id = LocalUser::from_parts(None, || None, 1000, host());
        assert_eq!(id.actor(), "uid1000@gpu-01");
    }

    #[test]
    fn the_login_name_comes_from_the_password_database() {
        let out = std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap();
        let expected = String::from_utf8(out.stdout).unwrap().trim().to_string();
        assert_eq!(login_name(), Some(expected));
    }
}
