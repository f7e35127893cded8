//! The fault suite's parts: a PostgreSQL that can crash, a TCP proxy that can
//! cut, blackhole and delay connections, server replicas that can be killed,
//! the recorded history, the workload that makes it, and the checker.
#![allow(dead_code)]

pub mod checker;
pub mod history;
pub mod holder;
pub mod pgbouncer;
pub mod proxy;
pub mod workload;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use opreg_embedded::{EmbeddedOptions, EmbeddedPostgres};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

use checker::{Compensation, Final, Violation};
use history::Event;
use workload::NAMESPACE;

/// PostgreSQL on a thread of its own (it is told to stop when the thread that
/// started it exits), which crashes it and starts it again on request.
pub struct Cluster {
    pub socket: PathBuf,
    pub root: PathBuf,
    restarts: mpsc::Sender<mpsc::Sender<()>>,
}

impl Cluster {
    pub fn start(name: &str) -> Self {
        let root = std::env::temp_dir().join(format!("opreg-fault-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        // Durable commits: with the test clusters' synchronous_commit=off, a
        // crash loses acknowledged commits, and the checker says so.
        let options = EmbeddedOptions {
            root: root.clone(),
            bin_dir: None,
            ephemeral: false,
        };
        let (ready, started) = mpsc::channel();
        let (restarts, requests) = mpsc::channel::<mpsc::Sender<()>>();
        std::thread::spawn(move || {
            let mut running = EmbeddedPostgres::start(&options).expect("PostgreSQL starts");
            ready.send(running.socket_dir().to_owned()).unwrap();
            while let Ok(done) = requests.recv() {
                running.stop_immediately();
                running = EmbeddedPostgres::start(&options).expect("PostgreSQL restarts");
                let _ = done.send(());
            }
        });
        let socket_dir = started.recv().unwrap();
        Self {
            socket: socket_dir.join(".s.PGSQL.5432"),
            root,
            restarts,
        }
    }

    /// `pg_ctl stop -m immediate`, then a start that recovers from the WAL;
    /// returns once PostgreSQL accepts connections again.
    pub fn crash_and_restart(&self) {
        let (done, restarted) = mpsc::channel();
        self.restarts.send(done).unwrap();
        restarted.recv().unwrap();
    }

    /// Connection options straight to the socket, for setup and checking.
    pub fn direct(&self, database: &str) -> PgConnectOptions {
        PgConnectOptions::new()
            .socket(self.socket.parent().unwrap())
            .port(5432)
            .username(opreg_embedded::SUPERUSER)
            .database(database)
    }
}

/// One opreg-server process; SIGKILLed and started again on request.
pub struct Replica {
    pub address: SocketAddr,
    /// The server binary: this build's, or the previous release's.
    binary: PathBuf,
    database_url: String,
    settings: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
}

impl Replica {
    pub fn start(
        address: SocketAddr,
        database_url: &str,
        settings: &[(&str, &str)],
        log: PathBuf,
    ) -> Self {
        Self::start_binary(
            PathBuf::from(env!("CARGO_BIN_EXE_opreg-server")),
            address,
            database_url,
            settings,
            log,
        )
    }

    /// A replica of another build of the server (the previous release).
    pub fn start_binary(
        binary: PathBuf,
        address: SocketAddr,
        database_url: &str,
        settings: &[(&str, &str)],
        log: PathBuf,
    ) -> Self {
        let mut replica = Self {
            binary,
            address,
            database_url: database_url.to_owned(),
            settings: settings
                .iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
                .collect(),
            log,
            child: None,
        };
        replica.spawn();
        replica
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(&self.binary)
            .env_clear()
            .env("OPREG_DATABASE_URL", &self.database_url)
            .env("OPREG_LISTEN_ADDR", self.address.to_string())
            .env("OPREG_METRICS_ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "warn")
            .envs(self.settings.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let child = self.child.insert(child);
        let log = &self.log;
        wait_until_listening(self.address, || {
            // A replica that refused its settings says why in its log.
            child.try_wait().ok().flatten().map(|status| {
                let log = std::fs::read_to_string(log).unwrap_or_default();
                format!("a replica exited ({status}) before listening; its log:\n{log}")
            })
        });
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Stops this replica and starts this build's server in its place, on
    /// the same address and settings: one step of a rolling upgrade.
    pub fn upgrade(&mut self) {
        self.kill();
        self.binary = PathBuf::from(env!("CARGO_BIN_EXE_opreg-server"));
        self.spawn();
    }

    /// The running server's process id; `None` between a kill and a restart.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits for `address` to accept connections; `exited` says why the process
/// behind it stopped, if it did.
pub fn wait_until_listening(address: SocketAddr, mut exited: impl FnMut() -> Option<String>) {
    let started = Instant::now();
    while std::net::TcpStream::connect_timeout(&address, Duration::from_millis(100)).is_err() {
        if let Some(why) = exited() {
            panic!("{why}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "nothing listened on {address}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether `program` is on the PATH.
pub fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|output| output.status.success())
}

/// A loopback address nothing listens on (at the time of asking).
pub fn free_address() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// The operations, executions and resources of the workload's namespace at
/// the end, and what is stranded.
pub async fn final_state(options: PgConnectOptions) -> Final {
    let mut db = PgConnection::connect_with(&options).await.unwrap();
    let mut end = Final::default();
    type Row = (String, String, Option<Vec<u8>>, Option<String>);
    let operations: Vec<Row> = sqlx::query_as(
        "SELECT operation_key, status, result, failure_code FROM operations WHERE namespace = $1",
    )
    .bind(NAMESPACE)
    .fetch_all(&mut db)
    .await
    .unwrap();
    for (key, status, result, code) in operations {
        end.operations
            .insert(key, (status, result.unwrap_or_default(), code));
    }
    let executions: Vec<(String, i64, String, String)> = sqlx::query_as(
        "SELECT operation_key, fencing_token, kind, outcome FROM executions
         WHERE namespace = $1 ORDER BY operation_key, fencing_token",
    )
    .bind(NAMESPACE)
    .fetch_all(&mut db)
    .await
    .unwrap();
    for (key, token, kind, outcome) in executions {
        end.executions
            .entry(key)
            .or_default()
            .push((token.try_into().unwrap(), kind, outcome));
    }
    let resources: Vec<(String, i64, Vec<u8>)> =
        sqlx::query_as("SELECT resource, fence, value FROM resources WHERE namespace = $1")
            .bind(NAMESPACE)
            .fetch_all(&mut db)
            .await
            .unwrap();
    for (resource, fence, value) in resources {
        end.resources
            .insert(resource, (fence.try_into().unwrap(), value));
    }
    type CompensationRow = (String, String, String, bool, i64);
    let compensations: Vec<CompensationRow> = sqlx::query_as(
        "SELECT c.operation_key, o.operation_key, o.status,
                coalesce(o.completed_at <= c.created_at, false),
                (SELECT count(*) FROM executions e
                  WHERE e.namespace = o.namespace AND e.operation_key = o.operation_key
                    AND e.started_at > c.created_at)
         FROM operations c
         JOIN operations o ON o.namespace = c.namespace AND o.operation_key = c.compensates
         WHERE c.namespace = $1",
    )
    .bind(NAMESPACE)
    .fetch_all(&mut db)
    .await
    .unwrap();
    end.compensations = compensations
        .into_iter()
        .map(
            |(key, original, original_status, settled, after)| Compensation {
                key,
                original,
                original_status,
                original_settled_before: settled,
                original_executions_after: after,
            },
        )
        .collect();
    // Past one maintenance interval and a lease beyond due, with workers pulling.
    end.stranded = sqlx::query_as(
        "SELECT operation_key, status FROM operations
         WHERE namespace = $1 AND held_at IS NULL AND (
             (status = 'in_progress' AND lease_expires_at < clock_timestamp() - interval '3 seconds')
          OR (status = 'retry_scheduled' AND next_attempt_at < clock_timestamp() - interval '3 seconds'))",
    )
    .bind(NAMESPACE)
    .fetch_all(&mut db)
    .await
    .unwrap();
    db.close().await.unwrap();
    end
}

/// Per scenario: calls, faults, acknowledged operations, violations, and how
/// long callers saw errors after each fault. Printed, and appended to `file`
/// under the test target's scratch directory, which `.ci/run` shows (the test
/// harness keeps a passing test's output to itself).
pub fn report(
    file: &str,
    name: &str,
    events: &[Event],
    injected: &[(Duration, String)],
    violations: &[Violation],
) {
    use std::fmt::Write as _;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "scenario {name}: {} calls, {} faults, {} operations acknowledged, {} violations",
        events.len(),
        injected.len(),
        checker::acknowledged(events),
        violations.len()
    );
    let _ = writeln!(text, "  {}", mix(events));
    for (position, (at, fault)) in injected.iter().enumerate() {
        let until = injected
            .get(position + 1)
            .map_or(Duration::MAX, |next| next.0);
        let errors: Vec<&Event> = events
            .iter()
            .filter(|event| event.indefinite() && event.completed >= *at && event.completed < until)
            .collect();
        let window = errors
            .iter()
            .map(|event| event.completed)
            .max()
            .map_or(Duration::ZERO, |last| last - *at);
        let _ = writeln!(
            text,
            "  {:>6.2}s {fault}: {} calls failed in doubt, the last {:.2}s after",
            at.as_secs_f64(),
            errors.len(),
            window.as_secs_f64()
        );
    }
    for violation in violations.iter().take(10) {
        let _ = writeln!(text, "  violation {violation}");
    }
    append(file, &text);
}

/// The operator's accepted actions and the compensations registered.
fn mix(events: &[Event]) -> String {
    use history::{AdminAction, Answer, Call};
    let accepted = |event: &&Event| matches!(event.answer, Answer::Accepted | Answer::Leases(_));
    let actions = |wanted: AdminAction| {
        events
            .iter()
            .filter(accepted)
            .filter(|event| matches!(event.call, Call::Admin { action, .. } if action == wanted))
            .count()
    };
    let compensations = events
        .iter()
        .filter(|event| matches!(&event.answer, Answer::Leases(granted) if !granted.is_empty()))
        .filter(|event| {
            matches!(
                &event.call,
                Call::Claim {
                    compensates: Some(_),
                    ..
                }
            )
        })
        .count();
    let helper_runs = events
        .iter()
        .filter(|event| (workload::HELPER_IDS..workload::HELPER_IDS + 100).contains(&event.client))
        .filter(|event| matches!(event.call, Call::Complete { .. }))
        .count();
    format!(
        "operator: {} resolved, {} requeued, {} held, {} released; {compensations} compensations granted; {helper_runs} run-once successes",
        actions(AdminAction::Resolve),
        actions(AdminAction::Requeue),
        actions(AdminAction::Hold),
        actions(AdminAction::Release),
    )
}

/// Prints `text` and appends it to `file` under the scratch directory.
pub fn append(file: &str, text: &str) {
    print!("{text}");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(file);
    if let Ok(mut out) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = std::io::Write::write_all(&mut out, text.as_bytes());
    }
}

/// Starts `file` afresh for this run's reports.
pub fn start_report(file: &str) {
    let _ = std::fs::remove_file(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(file));
}
