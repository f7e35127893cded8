//! Running PostgreSQL as a supervised child: under a non-root user when opreg
//! runs as root, in its own process group (a terminal's Ctrl-C reaches opreg,
//! which then drains before stopping PostgreSQL), and with a parent-death
//! signal so it never outlives opreg.
#![allow(unsafe_code)]

use std::io;
use std::os::unix::fs::chown;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use super::EmbeddedError;

const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// The user PostgreSQL runs as: this process's own, or a system user when root.
#[derive(Clone, Copy, Debug)]
pub struct RunAs {
    ids: Option<(u32, u32)>,
}

impl RunAs {
    pub fn for_postgres() -> Self {
        let ids = is_root()
            .then(|| system_user(&["postgres", "nobody"]))
            .flatten();
        Self { ids }
    }

    /// Hands `path` to the PostgreSQL user.
    pub fn own(&self, path: &Path) -> Result<(), EmbeddedError> {
        match self.ids {
            Some((uid, gid)) => {
                chown(path, Some(uid), Some(gid)).map_err(|source| EmbeddedError::Io {
                    step: "handing the data directory to the PostgreSQL user",
                    source,
                })
            }
            None => Ok(()),
        }
    }

    pub fn prepare<'c>(&self, command: &'c mut Command) -> &'c mut Command {
        if let Some((uid, gid)) = self.ids {
            // The caller's working directory may be closed to that user.
            command.uid(uid).gid(gid).current_dir("/");
        }
        command.process_group(0)
    }
}

/// PostgreSQL refuses to run as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The uid and gid of the first of `names` in /etc/passwd.
fn system_user(names: &[&str]) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    names.iter().find_map(|name| {
        passwd.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            match fields.as_slice() {
                [user, _, uid, gid, ..] if user == name => {
                    Some((uid.parse().ok()?, gid.parse().ok()?))
                }
                _ => None,
            }
        })
    })
}

/// A child process that is stopped (SIGINT: PostgreSQL's fast shutdown) when
/// dropped, and signalled the same way by the kernel if the thread that
/// spawned it exits first.
#[derive(Debug)]
pub struct Supervised {
    child: Child,
}

impl Supervised {
    pub fn spawn(command: &mut Command) -> io::Result<Self> {
        let parent = std::process::id();
        // SAFETY: the closure runs between fork and exec and calls only
        // async-signal-safe functions (prctl, getppid).
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGINT) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The parent may have died before the signal was armed.
                if u32::try_from(libc::getppid()).ok() != Some(parent) {
                    return Err(io::Error::other("parent exited during spawn"));
                }
                Ok(())
            });
        }
        Ok(Self {
            child: command.spawn()?,
        })
    }

    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    fn signal(&self, signal: libc::c_int) {
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill has no memory-safety preconditions; the pid is our
            // unreaped child, so it cannot have been recycled.
            unsafe { libc::kill(pid, signal) };
        }
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if self.exit_status().is_some() {
            return;
        }
        self.signal(libc::SIGINT);
        let started = Instant::now();
        while self.exit_status().is_none() {
            if started.elapsed() > STOP_TIMEOUT {
                // Immediate shutdown; PostgreSQL recovers from WAL on next start.
                self.signal(libc::SIGQUIT);
                let _ = self.child.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
