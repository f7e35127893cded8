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
    user: Option<SystemUser>,
}

#[derive(Clone, Copy, Debug)]
struct SystemUser {
    name: &'static str,
    uid: u32,
    gid: u32,
}

impl RunAs {
    pub fn for_postgres() -> Self {
        let user = is_root()
            .then(|| system_user(&["postgres", "nobody"]))
            .flatten();
        Self { user }
    }

    /// The user PostgreSQL runs as, when it is not this process's own.
    pub fn user_name(&self) -> Option<&'static str> {
        self.user.map(|user| user.name)
    }

    /// Hands `path` to the PostgreSQL user.
    pub fn own(&self, path: &Path) -> Result<(), EmbeddedError> {
        match self.user {
            Some(user) => {
                chown(path, Some(user.uid), Some(user.gid)).map_err(|source| EmbeddedError::Io {
                    step: "handing the data directory to the PostgreSQL user",
                    source,
                })
            }
            None => Ok(()),
        }
    }

    pub fn prepare<'c>(&self, command: &'c mut Command) -> &'c mut Command {
        if let Some(user) = self.user {
            // The caller's working directory may be closed to that user.
            command.uid(user.uid).gid(user.gid).current_dir("/");
        }
        command.process_group(0)
    }
}

/// PostgreSQL refuses to run as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The first of `names` that /etc/passwd knows.
fn system_user(names: &[&'static str]) -> Option<SystemUser> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    names.iter().find_map(|&name| {
        passwd.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            match fields.as_slice() {
                [user, _, uid, gid, ..] if *user == name => Some(SystemUser {
                    name,
                    uid: uid.parse().ok()?,
                    gid: gid.parse().ok()?,
                }),
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

    /// SIGQUIT, PostgreSQL's immediate shutdown, and waits for the exit.
    pub fn quit_now(&mut self) {
        self.signal(libc::SIGQUIT);
        let _ = self.child.wait();
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
