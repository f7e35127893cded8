//! Client processes: the workload's callers in a process of their own, so a
//! scenario can SIGSTOP one while it holds a lease, for longer than the lease,
//! and SIGCONT it (the paused-JVM case) with a real process rather than a
//! simulated stall. The process is this test binary again, running only its
//! `holder_process` test; its history joins the run's on CLOCK_MONOTONIC.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::history::{Event, Recorder};
use super::workload::Workload;

/// Set in a holder process: what it is to do (see [`HolderProcess::spawn`]).
const TASK: &str = "OPREG_FAULT_HOLDER";
/// How long a holder works under each lease: most of its time, so a stop
/// nearly always finds it holding one.
const WORK: Duration = Duration::from_millis(250);

pub struct HolderProcess {
    pub id: usize,
    child: Child,
    history: PathBuf,
}

impl HolderProcess {
    /// One caller, numbered `id`, calling through `endpoint` for `length`.
    pub fn spawn(
        endpoint: SocketAddr,
        id: usize,
        length: Duration,
        recorder: &Recorder,
        dir: &Path,
    ) -> Self {
        let history = dir.join(format!("holder-{id}.json"));
        let task = format!(
            "{endpoint};{id};{};{};{}",
            length.as_millis(),
            recorder.monotonic_origin().as_nanos(),
            history.display()
        );
        let log = std::fs::File::create(dir.join(format!("holder-{id}.log"))).unwrap();
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["holder_process", "--exact", "--ignored", "--nocapture"])
            .env(TASK, task)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Self { id, child, history }
    }

    pub fn stop(&self) {
        assert!(
            self.signal(libc::SIGSTOP),
            "holder {} cannot be stopped",
            self.id
        );
    }

    pub fn resume(&self) {
        assert!(
            self.signal(libc::SIGCONT),
            "holder {} cannot be resumed",
            self.id
        );
    }

    /// Only while the child is not reaped, so its pid is still its own.
    #[allow(unsafe_code)]
    fn signal(&self, signal: libc::c_int) -> bool {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill has no memory effects.
        unsafe { libc::kill(pid, signal) == 0 }
    }

    /// Waits for the process to finish its calls and returns its history.
    pub fn finish(mut self) -> Vec<Event> {
        self.resume();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "holder {} failed: {status}", self.id);
        serde_json::from_slice(&std::fs::read(&self.history).unwrap()).unwrap()
    }
}

impl Drop for HolderProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // SIGKILL ends a stopped process too.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The holder's side: in a process started by [`HolderProcess::spawn`], runs
/// the caller and writes its history; elsewhere does nothing.
pub fn run_if_asked() {
    let Ok(task) = std::env::var(TASK) else {
        return;
    };
    let parts: Vec<&str> = task.split(';').collect();
    let [endpoint, id, length, origin, history] = parts[..] else {
        panic!("malformed {TASK}: {task}");
    };
    let endpoint: SocketAddr = endpoint.parse().unwrap();
    let length = Duration::from_millis(length.parse().unwrap());
    let origin = Duration::from_nanos(origin.parse().unwrap());
    let workload = Workload {
        first_id: id.parse().unwrap(),
        work: WORK,
        ..Workload::new(1, 0, 0.0)
    };
    let recorder = Recorder::joining(origin);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(workload.run(&[endpoint], &recorder, length));
    std::fs::write(history, serde_json::to_vec(&recorder.events()).unwrap()).unwrap();
}
