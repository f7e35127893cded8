//! The soak: the fault suite's recorded workload (`fault/`) against three
//! replicas on one PostgreSQL for a long run at half its peak rate, with a
//! replica SIGKILLed and restarted every two minutes and PostgreSQL stopped
//! `-m immediate` and restarted every ten. At every sample (once a minute) it
//! reads each replica's resident memory and open files (`/proc`), its
//! database connections (its sockets to the database proxy) and its live
//! tokio tasks (its `/metrics`), and the database's backends; from the history
//! it reads the Claim latency and the calls of each minute. It shows that the
//! guarantees and the resources both hold over time, not only across one fault:
//!
//! - after a drain, the checker (`fault/checker.rs`) finds no violation in the
//!   whole history and the final database;
//! - nothing leaks: after the warm-up, the replica that is never killed uses
//!   no more memory, files or tasks at the end than early on, beyond noise; a
//!   replica process started late is no heavier than one started early; no
//!   replica holds more database connections than its pool and its dedicated
//!   sessions, nor the database more backends than the three replicas may.
//!
//! It runs only when `OPREG_SOAK_SECONDS` is set: CI runs 180 s, and
//! `bench/soak.sh` the full 1,800 (see [`Plan::new`] for how a short run scales
//! the schedule). The table goes to `target/tmp/soak.txt`, a plot of memory
//! and tasks to `target/tmp/soak.svg`, and each fault with the errors callers
//! saw after it to `target/tmp/soak-faults.txt`.

mod fault;

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fault::checker;
use fault::history::{Answer, Call, Event, Recorder};
use fault::proxy::{Proxy, Target};
use fault::workload::{self, Workload};
use fault::{Cluster, Replica, free_address};
use sqlx::{Connection, PgConnection};

const REPLICAS: usize = 3;
/// Never killed: one process for the whole run, the series in which a leak
/// shows as growth. The others are killed in turn.
const LONG_LIVED: usize = 0;
const DATABASE: &str = "soak";
/// The fault suite's mix: callers, ClaimDue workers, stalls past the lease.
const CLIENTS: usize = 12;
const WORKERS: usize = 3;
const PAUSE_CHANCE: f64 = 0.1;
/// How long the workload runs unpaced, before the soak, to find its peak.
const CALIBRATION: Duration = Duration::from_secs(15);
/// The unpaced run's callers' numbers, apart from the paced run's (so their
/// keys are apart too; both runs are in the one history the checker reads).
const CALIBRATION_IDS: usize = 500;
/// Between a replica's SIGKILL and its restart: its callers see it gone.
const RESTART_AFTER: Duration = Duration::from_secs(2);
/// The fault suite drains for 15 s; a long run may leave more due work.
const DRAIN: Duration = Duration::from_secs(30);
/// Each replica's pool (`OPREG_POOL_MAX_CONNECTIONS`), as in the fault suite.
const POOL_MAX: usize = 8;
/// Connections a replica opens outside its pool: the health probe's, the
/// gauges' and the maintenance connection's (`store::Dedicated`), and the replay
/// notices' listener (`store/replay_notices.rs`).
/// Four today (`maintenance.rs`, `monitor/health.rs`, `monitor/gauges.rs`,
/// `store/replay_notices.rs`); raise it if the server opens more.
const DEDICATED: usize = 4;
const CONNECTIONS_CAP: usize = POOL_MAX + DEDICATED;
/// The gauge of the replica's live tokio tasks (`RuntimeMetrics::num_alive_tasks`).
const TASKS_METRIC: &str = opreg_server::telemetry::metrics::RUNTIME_ALIVE_TASKS;
/// Under the test target's scratch directory (`target/tmp/`), like the fault
/// suite's `fault-suite.txt`.
const TABLE: &str = "soak.txt";
const PLOT: &str = "soak.svg";
const FAULTS: &str = "soak-faults.txt";

/// When things happen, as offsets from the start of the paced run.
struct Plan {
    length: Duration,
    sample_every: Duration,
    /// Samples before this show the start (pools filling, the replay cache
    /// filling up to its TTL, which is set to this) and are not judged.
    warm_up: Duration,
    kill_every: Duration,
    /// Each SIGKILL and the replica it kills; the restart is RESTART_AFTER later.
    kills: Vec<(Duration, usize)>,
    crashes: Vec<Duration>,
}

impl Plan {
    /// The issue's schedule for runs of 10 minutes or more: a sample a
    /// minute, a SIGKILL every 2 minutes, PostgreSQL every 10, the first 5
    /// minutes as warm-up. A shorter run keeps the shape at a smaller scale: a
    /// sample every 20 s, a SIGKILL every 2/9 of the run, PostgreSQL once at
    /// half time, the first third as warm-up. CI's 180 s: 10 samples (7 judged),
    /// SIGKILLs at 40, 80, 120 and 160 s, PostgreSQL at 90 s.
    fn new(length: Duration) -> Self {
        let full = length >= Duration::from_secs(600);
        let (sample_every, kill_every, warm_up) = if full {
            (secs(60), secs(120), secs(300))
        } else {
            (secs(20), (length * 2 / 9).max(secs(10)), length / 3)
        };
        // Round robin over every replica but the long-lived one.
        let killed: Vec<usize> = (0..REPLICAS).filter(|&index| index != LONG_LIVED).collect();
        let kills: Vec<(Duration, usize)> = (1..)
            .map(|k: u32| kill_every * k)
            .take_while(|&at| at < length)
            .zip(killed.iter().copied().cycle())
            .collect();
        let crashes: Vec<Duration> = if full {
            // Every 10 minutes, half a kill interval after the kill due then,
            // so PostgreSQL restarts while every replica is up, and never in
            // the last sample interval.
            (1..)
                .map(|k: u32| secs(600) * k + kill_every / 2)
                .take_while(|&at| at + sample_every < length)
                .collect()
        } else {
            vec![length / 2]
        };
        Self {
            length,
            sample_every,
            warm_up,
            kill_every,
            kills,
            crashes,
        }
    }

    fn timeline(&self) -> Vec<(Duration, Action)> {
        let mut timeline: Vec<(Duration, Action)> = (0..)
            .map(|k: u32| self.sample_every * k)
            .take_while(|&at| at < self.length)
            .chain([self.length])
            .map(|at| (at, Action::Sample))
            .collect();
        for &(at, replica) in &self.kills {
            timeline.push((at, Action::Kill(replica)));
            timeline.push((at + RESTART_AFTER, Action::Restart(replica)));
        }
        timeline.extend(self.crashes.iter().map(|&at| (at, Action::CrashPostgres)));
        // At one time a sample comes first: it sees the state before the fault.
        timeline.sort();
        timeline
    }
}

/// What the soak does at a point of its timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Action {
    Sample,
    Kill(usize),
    Restart(usize),
    CrashPostgres,
}

/// What one replica process uses at one moment; `None` where it could not be
/// read (a scrape that failed, say).
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    rss_mib: Option<f64>,
    fds: Option<f64>,
    connections: Option<f64>,
    tasks: Option<f64>,
}

#[derive(Clone, Debug)]
struct Sample {
    /// Since the paced run began.
    at: Duration,
    /// Per replica: which of its processes (0 the first, one more per
    /// restart), and what it uses (`None` while it is down).
    replicas: Vec<(usize, Option<Usage>)>,
    /// The database's client backends (pg_stat_activity), the sampler's own
    /// left out: every replica names itself `opreg` to PostgreSQL and reaches
    /// it through the one proxy, so PostgreSQL cannot tell them apart.
    backends: Option<usize>,
}

/// The replicas, the proxy in front of PostgreSQL, and PostgreSQL, dropped
/// in that order (the replicas killed first).
struct Soak {
    replicas: Vec<Replica>,
    /// Each replica's `/metrics` address, kept across restarts.
    metrics: Vec<SocketAddr>,
    /// When each replica's processes began, since the paced run began (the
    /// first, before it, at zero).
    began: Vec<Vec<Duration>>,
    /// The replicas reach PostgreSQL through it: their database connections
    /// are then TCP sockets to its one port, which `/proc` finds per process.
    database_proxy: Proxy,
    cluster: Cluster,
}

impl Soak {
    async fn start(cluster: Cluster, plan: &Plan) -> Self {
        let mut admin = PgConnection::connect_with(&cluster.direct("postgres"))
            .await
            .unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {DATABASE}")))
            .execute(&mut admin)
            .await
            .unwrap();
        admin.close().await.unwrap();
        let database_proxy = Proxy::start(Target::Unix(cluster.socket.clone())).await;
        let url = format!(
            "postgres://{}@{}/{DATABASE}",
            opreg_embedded::SUPERUSER,
            database_proxy.address
        );
        let log_dir = cluster.root.join(DATABASE);
        std::fs::create_dir_all(&log_dir).unwrap();
        let pool = POOL_MAX.to_string();
        // The replay cache keeps results for its TTL (5 minutes by default,
        // the full run's warm-up): at this, it is full when judging starts.
        let replay_ttl = format!("{}s", plan.warm_up.as_secs());
        let mut replicas = Vec::new();
        let mut metrics = Vec::new();
        for index in 0..REPLICAS {
            let metrics_address = free_address();
            let metrics_setting = metrics_address.to_string();
            let settings = [
                ("OPREG_MAINTENANCE_INTERVAL", "1s"),
                ("OPREG_HEALTH_PROBE_INTERVAL", "500ms"),
                ("OPREG_POOL_MAX_CONNECTIONS", pool.as_str()),
                ("OPREG_GAUGE_REFRESH_INTERVAL", "5s"),
                ("OPREG_REPLAY_CACHE_TTL", replay_ttl.as_str()),
                // A port of its own, the same after a restart: the settings
                // are set after `Replica`'s own `127.0.0.1:0`, and win.
                ("OPREG_METRICS_ADDR", metrics_setting.as_str()),
            ];
            let log = log_dir.join(format!("replica-{index}.log"));
            // The first replica migrates; the others find nothing to do.
            replicas.push(tokio::task::block_in_place(|| {
                Replica::start(free_address(), &url, &settings, log)
            }));
            metrics.push(metrics_address);
        }
        Self {
            replicas,
            metrics,
            began: vec![vec![Duration::ZERO]; REPLICAS],
            database_proxy,
            cluster,
        }
    }

    fn endpoints(&self) -> Vec<SocketAddr> {
        self.replicas
            .iter()
            .map(|replica| replica.address)
            .collect()
    }

    async fn sample(&self, at: Duration) -> Sample {
        let port = self.database_proxy.address.port();
        let mut replicas = Vec::new();
        for (index, replica) in self.replicas.iter().enumerate() {
            let process = self.began[index].len() - 1;
            let Some(pid) = replica.pid() else {
                replicas.push((process, None));
                continue;
            };
            let usage = Usage {
                rss_mib: rss_mib(pid),
                fds: open_files(pid),
                connections: database_connections(pid, port),
                tasks: alive_tasks(self.metrics[index]).await,
            };
            replicas.push((process, Some(usage)));
        }
        Sample {
            at,
            replicas,
            backends: backends(&self.cluster).await,
        }
    }
}

/// VmRSS of `/proc/<pid>/status`, in MiB.
fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

/// The entries of `/proc/<pid>/fd`.
fn open_files(pid: u32) -> Option<f64> {
    let entries = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(entries.count() as f64)
}

/// The process's established TCP connections to `port` (the database proxy):
/// its sockets (`/proc/<pid>/fd` → `socket:[inode]`) matched by inode against
/// the kernel's table (`/proc/<pid>/net/tcp`: remote address and port in hex,
/// state `01` for ESTABLISHED, the inode in the tenth field). A connection the
/// database end closed and the replica has not yet (CLOSE_WAIT) is not
/// counted here but still shows in the open files.
fn database_connections(pid: u32, port: u16) -> Option<f64> {
    let inodes: HashSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .flatten()
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .filter_map(|target| {
            target
                .to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect();
    let mut count = 0_u32;
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(state), Some(inode)) =
                (fields.get(2), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let remote_port = remote
                .rsplit_once(':')
                .and_then(|(_, hex)| u16::from_str_radix(hex, 16).ok());
            if *state == "01"
                && remote_port == Some(port)
                && inode
                    .parse()
                    .is_ok_and(|inode: u64| inodes.contains(&inode))
            {
                count += 1;
            }
        }
    }
    Some(f64::from(count))
}

/// The replica's live tokio tasks, from its `/metrics` (the sum over the
/// gauge's series, should it have labels).
async fn alive_tasks(metrics: SocketAddr) -> Option<f64> {
    let body = tokio::time::timeout(Duration::from_secs(2), metrics_text(metrics))
        .await
        .ok()??;
    let values: Vec<f64> = body
        .lines()
        .filter(|line| {
            line.strip_prefix(TASKS_METRIC)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|line| line.rsplit_once(' ')?.1.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// One HTTP/1.1 GET of `/metrics`, as the tests' `common::http_get` does it:
/// the body, if the answer is a 200.
async fn metrics_text(address: SocketAddr) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
    let request = "GET /metrics HTTP/1.1\r\nHost: opreg\r\nConnection: close\r\n\r\n";
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

/// The database's client backends but the one asking.
async fn backends(cluster: &Cluster) -> Option<usize> {
    let mut db = PgConnection::connect_with(&cluster.direct(DATABASE))
        .await
        .ok()?;
    let count: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
    )
    .bind(DATABASE)
    .fetch_one(&mut db)
    .await
    .ok()?;
    let _ = db.close().await;
    usize::try_from(count).ok()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Metric {
    Rss,
    Fds,
    Connections,
    Tasks,
}

impl Metric {
    /// What a leak would make grow. Connections are bounded by the pool
    /// instead: a pool grows and shrinks with the load by design.
    const GROWING: [Self; 3] = [Self::Rss, Self::Fds, Self::Tasks];

    fn name(self) -> &'static str {
        match self {
            Self::Rss => "RSS MiB",
            Self::Fds => "open files",
            Self::Connections => "database connections",
            Self::Tasks => "tokio tasks",
        }
    }

    fn of(self, usage: &Usage) -> Option<f64> {
        match self {
            Self::Rss => usage.rss_mib,
            Self::Fds => usage.fds,
            Self::Connections => usage.connections,
            Self::Tasks => usage.tasks,
        }
    }

    /// How far above its baseline a later value may be and still count as
    /// noise: the allocator keeping freed pages and the replay cache for
    /// memory; connections of callers and the pool coming and going for
    /// files; calls in flight (a few tasks each) for tasks. A leak of a task
    /// or a file per call, or of a KiB per call at this rate, passes it
    /// within minutes; CI's short run only catches a gross one.
    fn allowance(self, baseline: f64) -> f64 {
        match self {
            Self::Rss => (baseline * 0.2).max(16.0),
            Self::Fds => 16.0,
            Self::Connections => 0.0,
            Self::Tasks => 50.0,
        }
    }

    fn allowance_text(self) -> &'static str {
        match self {
            Self::Rss => "20 % or 16 MiB, the larger",
            Self::Fds => "16",
            Self::Connections => "0",
            Self::Tasks => "50",
        }
    }
}

/// One replica's samples of `metric`: when, in which of its processes, the value.
fn series(
    samples: &[Sample],
    replica: usize,
    metric: Metric,
) -> impl Iterator<Item = (Duration, usize, f64)> {
    samples.iter().filter_map(move |sample| {
        let (process, usage) = sample.replicas[replica];
        Some((sample.at, process, metric.of(&usage?)?))
    })
}

/// One verdict on the curves.
struct Check {
    passed: bool,
    text: String,
}

/// The curves against growth. A SIGKILLed replica starts afresh, so each
/// series is compared like with like:
///
/// - the long-lived replica is one process throughout: the last sample must
///   not exceed the highest of the first third of the samples after the
///   warm-up by more than [`Metric::allowance`];
/// - a restarted replica's processes are compared with each other: the
///   heaviest process started after the warm-up must not exceed the heaviest
///   started before it by more than the allowance (each lives about two kill
///   intervals; the first ones also through the calibration, so the reference
///   errs high, and a process started late is sampled only a few times); this
///   finds what makes each start heavier (a start-up read of a growing table,
///   say);
/// - every replica's database connections stay within its pool and its
///   dedicated sessions at every sample, and the database's backends within
///   the replicas' together: a killed replica's backends that lingered would
///   pile up past it.
fn judge(plan: &Plan, samples: &[Sample], began: &[Vec<Duration>]) -> Vec<Check> {
    let mut checks = Vec::new();
    for metric in Metric::GROWING {
        let after: Vec<(Duration, f64)> = series(samples, LONG_LIVED, metric)
            .filter(|&(at, _, _)| at >= plan.warm_up)
            .map(|(at, _, value)| (at, value))
            .collect();
        let early = &after[..after.len().div_ceil(3)];
        let baseline = early.iter().map(|&(_, value)| value).reduce(f64::max);
        let (Some(baseline), Some(&(at, last)), true) = (baseline, after.last(), after.len() >= 3)
        else {
            checks.push(Check {
                passed: false,
                text: format!(
                    "replica {LONG_LIVED}, {}: {} samples after the warm-up, too few to judge (is it exported? is the run long enough?)",
                    metric.name(),
                    after.len()
                ),
            });
            continue;
        };
        let limit = baseline + metric.allowance(baseline);
        checks.push(Check {
            passed: last <= limit,
            text: format!(
                "replica {LONG_LIVED} (never killed), {}: {last:.1} at {} min, against at most {limit:.1} (the early peak after the warm-up, {baseline:.1}, + {})",
                metric.name(),
                minutes(at),
                metric.allowance_text()
            ),
        });
    }
    for replica in (0..REPLICAS).filter(|&index| index != LONG_LIVED) {
        let early = |process: usize| began[replica][process] < plan.warm_up;
        for metric in Metric::GROWING {
            let mut peaks: BTreeMap<usize, f64> = BTreeMap::new();
            for (_, process, value) in series(samples, replica, metric) {
                let peak = peaks.entry(process).or_insert(value);
                *peak = peak.max(value);
            }
            let reference = peaks
                .iter()
                .filter(|(process, _)| early(**process))
                .map(|(_, peak)| *peak)
                .reduce(f64::max);
            let heaviest = peaks
                .iter()
                .filter(|(process, _)| !early(**process))
                .max_by(|(_, a), (_, b)| a.total_cmp(b));
            let (Some(reference), Some((process, peak))) = (reference, heaviest) else {
                // Too short a run for a process after the warm-up; the
                // long-lived replica's check still stands.
                continue;
            };
            let limit = reference + metric.allowance(reference);
            checks.push(Check {
                passed: *peak <= limit,
                text: format!(
                    "replica {replica}, {} per process: the heaviest started after the warm-up (#{process}) peaked at {peak:.1}, against at most {limit:.1} (the heaviest started before, {reference:.1}, + {})",
                    metric.name(),
                    metric.allowance_text()
                ),
            });
        }
    }
    for replica in 0..REPLICAS {
        let most = series(samples, replica, Metric::Connections)
            .map(|(_, _, value)| value)
            .reduce(f64::max);
        checks.push(Check {
            passed: most.is_some_and(|most| most <= CONNECTIONS_CAP as f64),
            text: format!(
                "replica {replica}, database connections: at most {}, against its pool's {POOL_MAX} + {DEDICATED} dedicated",
                most.map_or_else(|| "none sampled".to_owned(), |most| format!("{most:.0}"))
            ),
        });
    }
    let most = samples.iter().filter_map(|sample| sample.backends).max();
    let cap = REPLICAS * CONNECTIONS_CAP;
    checks.push(Check {
        passed: most.is_some_and(|most| most <= cap),
        text: format!(
            "the database's backends: at most {}, against {cap} for {REPLICAS} replicas",
            most.map_or_else(|| "none sampled".to_owned(), |most| most.to_string())
        ),
    });
    checks
}

/// The callers' Claims of new keys, as (answered, latency). A new key's
/// Claim never waits (a repeated Claim may wait for its key, by design), so
/// its time is the server's, PostgreSQL's and the network's. A key's first
/// Claim in the history is its new-key Claim: only its caller claims it, one
/// call at a time. The run-once helpers' recorded Claims span their whole
/// attempt and are left out, as are compensations.
fn new_key_claims(events: &[Event]) -> Vec<(Duration, Duration)> {
    let mut seen = HashSet::new();
    events
        .iter()
        .filter(|event| event.client < workload::HELPER_IDS)
        .filter_map(|event| match &event.call {
            Call::Claim {
                key,
                conflicting: false,
                compensates: None,
            } if seen.insert(key.as_str()) => Some((
                event.completed,
                event.completed.saturating_sub(event.invoked),
            )),
            _ => None,
        })
        .collect()
}

fn percentile(sorted: &[Duration], percent: usize) -> Option<Duration> {
    let last = sorted.len().checked_sub(1)?;
    Some(sorted[last * percent / 100])
}

/// What the table and the plot show.
struct Run<'a> {
    plan: &'a Plan,
    samples: &'a [Sample],
    /// Each fault since the paced run began.
    injected: &'a [(Duration, Action)],
    events: &'a [Event],
    /// The paced run's start on the recorder's clock.
    started: Duration,
    /// Every call of the unpaced run, per second.
    peak_calls: f64,
    /// Each caller's least time between Claims.
    pace: Duration,
    violations: usize,
}

/// The markdown table (a row per sample; each row's latency and calls are of
/// the window since the sample before), the summary and the verdicts.
fn table(run: &Run<'_>, checks: &[Check]) -> String {
    let plan = run.plan;
    let end = run.started + plan.length;
    let paced_calls = run
        .events
        .iter()
        .filter(|event| (run.started..=end).contains(&event.completed))
        .count() as f64
        / plan.length.as_secs_f64();
    let killed: Vec<String> = (0..REPLICAS)
        .filter(|&index| index != LONG_LIVED)
        .map(|index| index.to_string())
        .collect();
    let crashes: Vec<String> = plan
        .crashes
        .iter()
        .map(|at| format!("{} s", at.as_secs()))
        .collect();
    let mut text = String::new();
    let _ = writeln!(
        text,
        "Soak of {} s: the fault suite's workload paced at a Claim per {} ms per caller, half its unpaced rate: {paced_calls:.0} calls/s, against {:.0} unpaced; replicas {} SIGKILLed in turn every {} s and restarted {} s later, replica {LONG_LIVED} never; PostgreSQL stopped -m immediate and restarted at {}; a sample every {} s, the first {} s a warm-up.\n",
        plan.length.as_secs(),
        run.pace.as_millis(),
        run.peak_calls,
        killed.join(" and "),
        plan.kill_every.as_secs(),
        RESTART_AFTER.as_secs(),
        crashes.join(", "),
        plan.sample_every.as_secs(),
        plan.warm_up.as_secs(),
    );
    let mut header = String::from("| min |");
    let mut rule = String::from("|---|");
    for replica in 0..REPLICAS {
        if replica == LONG_LIVED {
            let _ = write!(
                header,
                " replica {replica}, never killed: RSS MiB / fds / DB conns / tasks |"
            );
        } else {
            let _ = write!(header, " replica {replica} (process #) |");
        }
        rule.push_str("---|");
    }
    header.push_str(
        " DB backends | Claim p50 ms | Claim p99 ms | calls | failed | faults in the window |",
    );
    rule.push_str("---|---|---|---|---|---|");
    let _ = writeln!(text, "{header}\n{rule}");
    let claims = new_key_claims(run.events);
    let mut previous: Option<Duration> = None;
    for sample in run.samples {
        let mut row = format!("| {} |", minutes(sample.at));
        for (replica, &(process, usage)) in sample.replicas.iter().enumerate() {
            let _ = write!(row, " {} |", cell(replica, process, usage));
        }
        let backends = sample
            .backends
            .map_or_else(|| "–".to_owned(), |count| count.to_string());
        let window = match previous {
            Some(from) => Window::of(run, &claims, from, sample.at),
            None => Window::default(),
        };
        let _ = writeln!(
            row,
            " {backends} | {} | {} | {} | {} | {} |",
            window.p50, window.p99, window.calls, window.failed, window.faults
        );
        text.push_str(&row);
        previous = Some(sample.at);
    }
    let _ = writeln!(
        text,
        "\n{} calls, {} operations acknowledged, {} violations (the checker, over the whole history and the final database after a drain).",
        run.events.len(),
        checker::acknowledged(run.events),
        run.violations
    );
    let _ = writeln!(
        text,
        "Claim latency: Claims of new keys (which never wait) answered in the window since the sample before; calls and failed calls of the same window.\n"
    );
    for check in checks {
        let verdict = if check.passed { "pass" } else { "FAIL" };
        let _ = writeln!(text, "- {verdict}: {}", check.text);
    }
    text
}

/// A table cell: RSS / fds / connections / tasks, and which process.
fn cell(replica: usize, process: usize, usage: Option<Usage>) -> String {
    let Some(usage) = usage else {
        return "down".to_owned();
    };
    let figure = |value: Option<f64>, decimals: usize| {
        value.map_or_else(|| "–".to_owned(), |value| format!("{value:.decimals$}"))
    };
    let mut cell = format!(
        "{} / {} / {} / {}",
        figure(usage.rss_mib, 1),
        figure(usage.fds, 0),
        figure(usage.connections, 0),
        figure(usage.tasks, 0)
    );
    if replica != LONG_LIVED {
        let _ = write!(cell, " (#{process})");
    }
    cell
}

/// One row's figures from the history, for the window (from, to] since the
/// paced run began.
struct Window {
    p50: String,
    p99: String,
    calls: String,
    failed: String,
    faults: String,
}

impl Default for Window {
    fn default() -> Self {
        let none = || "–".to_owned();
        Self {
            p50: none(),
            p99: none(),
            calls: none(),
            failed: none(),
            faults: none(),
        }
    }
}

impl Window {
    fn of(run: &Run<'_>, claims: &[(Duration, Duration)], from: Duration, to: Duration) -> Self {
        let inside = |at: Duration| run.started + from < at && at <= run.started + to;
        let mut latencies: Vec<Duration> = claims
            .iter()
            .filter(|&&(answered, _)| inside(answered))
            .map(|&(_, latency)| latency)
            .collect();
        latencies.sort();
        let ms = |latency: Option<Duration>| {
            latency.map_or_else(
                || "–".to_owned(),
                |latency| format!("{:.1}", latency.as_secs_f64() * 1e3),
            )
        };
        let calls: Vec<&Event> = run
            .events
            .iter()
            .filter(|event| inside(event.completed))
            .collect();
        let failed = calls
            .iter()
            .filter(|event| matches!(event.answer, Answer::Failed { .. }))
            .count();
        let faults: Vec<String> = run
            .injected
            .iter()
            .filter(|&&(at, _)| from < at && at <= to)
            .filter_map(|&(_, action)| match action {
                Action::Kill(replica) => Some(format!("SIGKILL {replica}")),
                Action::CrashPostgres => Some("PostgreSQL".to_owned()),
                Action::Sample | Action::Restart(_) => None,
            })
            .collect();
        Self {
            p50: ms(percentile(&latencies, 50)),
            p99: ms(percentile(&latencies, 99)),
            calls: calls.len().to_string(),
            failed: failed.to_string(),
            faults: faults.join(", "),
        }
    }
}

/// A line chart, SVG by hand: each replica's RSS and live tasks over the run,
/// a line per process (a restart starts a new one), the SIGKILLs as thin
/// lines in the replica's colour and the PostgreSQL restarts dashed.
fn plot(run: &Run<'_>) -> String {
    const WIDTH: f64 = 760.0;
    const LEFT: f64 = 64.0;
    const RIGHT: f64 = 24.0;
    const TOP: f64 = 80.0;
    const PANEL: f64 = 200.0;
    const GAP: f64 = 64.0;
    const COLOURS: [&str; REPLICAS] = ["#1f77b4", "#d62728", "#2ca02c"];
    let height = TOP + 2.0 * PANEL + GAP + 48.0;
    let span = run.plan.length.as_secs_f64();
    let x = |at: Duration| LEFT + (WIDTH - LEFT - RIGHT) * at.as_secs_f64() / span;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"##
    );
    let _ = writeln!(
        svg,
        r##"<rect width="100%" height="100%" fill="#ffffff"/>"##
    );
    let kills = run
        .injected
        .iter()
        .filter(|(_, action)| matches!(action, Action::Kill(_)))
        .count();
    let _ = writeln!(
        svg,
        r##"<text x="{LEFT}" y="22" font-size="14" font-weight="bold">opreg soak: {} min, replica SIGKILLs: {kills}, PostgreSQL restarts: {}, violations: {}</text>"##,
        minutes(run.plan.length),
        run.plan.crashes.len(),
        run.violations
    );
    // The legend.
    let mut legend_x = LEFT;
    for (replica, colour) in COLOURS.iter().enumerate() {
        let name = if replica == LONG_LIVED {
            format!("replica {replica} (never killed)")
        } else {
            format!("replica {replica}")
        };
        let _ = writeln!(
            svg,
            r##"<line x1="{legend_x}" y1="44" x2="{}" y2="44" stroke="{colour}" stroke-width="2"/><text x="{}" y="48">{name}</text>"##,
            legend_x + 20.0,
            legend_x + 26.0
        );
        // The long-lived replica's label is longer.
        legend_x += if replica == LONG_LIVED { 190.0 } else { 120.0 };
    }
    let _ = writeln!(
        svg,
        r##"<line x1="{legend_x}" y1="44" x2="{}" y2="44" stroke="#777777" stroke-dasharray="4 3"/><text x="{}" y="48">PostgreSQL restart</text>"##,
        legend_x + 20.0,
        legend_x + 26.0
    );
    for (panel, metric, title) in [
        (0.0, Metric::Rss, "resident memory (MiB)"),
        (1.0, Metric::Tasks, "live tokio tasks"),
    ] {
        let top = TOP + panel * (PANEL + GAP);
        let bottom = top + PANEL;
        let highest = (0..REPLICAS)
            .flat_map(|replica| series(run.samples, replica, metric))
            .map(|(_, _, value)| value)
            .fold(0.0, f64::max);
        let scale = if highest > 0.0 { highest * 1.1 } else { 1.0 };
        let y = |value: f64| bottom - PANEL * value / scale;
        let _ = writeln!(
            svg,
            r##"<text x="{LEFT}" y="{}" font-weight="bold">{title}</text>"##,
            top - 8.0
        );
        for step in 0..=4_u32 {
            let value = scale * f64::from(step) / 4.0;
            let at = y(value);
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" y1="{at:.1}" x2="{}" y2="{at:.1}" stroke="#e5e5e5"/><text x="{}" y="{:.1}" text-anchor="end">{value:.0}</text>"##,
                WIDTH - RIGHT,
                LEFT - 6.0,
                at + 4.0
            );
        }
        for step in 0..=5_u32 {
            let at = run.plan.length * step / 5;
            let _ = writeln!(
                svg,
                r##"<line x1="{0:.1}" y1="{bottom}" x2="{0:.1}" y2="{1}" stroke="#999999"/><text x="{0:.1}" y="{2}" text-anchor="middle">{3}</text>"##,
                x(at),
                bottom + 4.0,
                bottom + 16.0,
                minutes(at)
            );
        }
        for &(at, action) in run.injected {
            let marker = match action {
                Action::Kill(replica) => {
                    format!(r##"stroke="{}" stroke-opacity="0.4""##, COLOURS[replica])
                }
                Action::CrashPostgres => r##"stroke="#777777" stroke-dasharray="4 3""##.to_owned(),
                Action::Sample | Action::Restart(_) => continue,
            };
            let _ = writeln!(
                svg,
                r##"<line x1="{0:.1}" y1="{top}" x2="{0:.1}" y2="{bottom}" {marker}/>"##,
                x(at)
            );
        }
        let mut drawn = false;
        for (replica, colour) in COLOURS.iter().enumerate() {
            let mut processes: BTreeMap<usize, Vec<String>> = BTreeMap::new();
            for (at, process, value) in series(run.samples, replica, metric) {
                processes
                    .entry(process)
                    .or_default()
                    .push(format!("{:.1},{:.1}", x(at), y(value)));
            }
            for points in processes.values() {
                drawn = true;
                let _ = writeln!(
                    svg,
                    r##"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"##,
                    points.join(" ")
                );
                for point in points {
                    let (cx, cy) = point.split_once(',').unwrap();
                    let _ = writeln!(
                        svg,
                        r##"<circle cx="{cx}" cy="{cy}" r="2.5" fill="{colour}"/>"##
                    );
                }
            }
        }
        if !drawn {
            let _ = writeln!(
                svg,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#999999">not sampled</text>"##,
                (LEFT + WIDTH - RIGHT) / 2.0,
                top + PANEL / 2.0
            );
        }
        let _ = writeln!(
            svg,
            r##"<rect x="{LEFT}" y="{top}" width="{}" height="{PANEL}" fill="none" stroke="#999999"/>"##,
            WIDTH - LEFT - RIGHT
        );
    }
    let _ = writeln!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">minutes</text>"##,
        (LEFT + WIDTH - RIGHT) / 2.0,
        height - 8.0
    );
    svg.push_str("</svg>\n");
    svg
}

fn minutes(at: Duration) -> String {
    format!("{:.1}", at.as_secs_f64() / 60.0)
}

fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

fn scratch(file: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(file)
}

/// `OPREG_SOAK_SECONDS`, the paced run's length; `None` when it is not set.
fn soak_length() -> Option<Duration> {
    let text = std::env::var("OPREG_SOAK_SECONDS").ok()?;
    let seconds: u64 = text
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("OPREG_SOAK_SECONDS={text:?} is not a number of seconds"));
    assert!(
        seconds >= 60,
        "OPREG_SOAK_SECONDS={seconds}: a soak needs at least 60 s"
    );
    Some(secs(seconds))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_guarantees_hold_and_resources_stay_flat_over_a_long_run() {
    let Some(length) = soak_length() else {
        eprintln!("skipped: set OPREG_SOAK_SECONDS to run the soak (CI: 180; bench/soak.sh: 1800)");
        return;
    };
    let plan = Plan::new(length);
    fault::start_report(TABLE);
    fault::start_report(FAULTS);
    let cluster = tokio::task::spawn_blocking(|| Cluster::start("soak"))
        .await
        .unwrap();
    let mut soak = Soak::start(cluster, &plan).await;
    let endpoints = soak.endpoints();
    let recorder = Recorder::new();

    // The peak: the same workload unpaced, without faults, on the fresh
    // replicas. It is in the history the checker reads, like the rest.
    let unpaced = Workload {
        first_id: CALIBRATION_IDS,
        operator: true,
        helpers: 2,
        ..Workload::new(CLIENTS, WORKERS, PAUSE_CHANCE)
    };
    unpaced.run(&endpoints, &recorder, CALIBRATION).await;
    let calibration = recorder.events();
    let calibrated = recorder.now();
    // A caller's iteration is one Claim and what follows it: paced at twice
    // the unpaced mean iteration, each caller (and helper) offers half the
    // load. A caller that misses a start (a stall, a fault) skips it, so the
    // rate is at most half; the table shows the calls per second it reached.
    let claims = calibration
        .iter()
        .filter(|event| (CALIBRATION_IDS..CALIBRATION_IDS + CLIENTS).contains(&event.client))
        .filter(|event| matches!(event.call, Call::Claim { .. }))
        .count();
    assert!(claims > 0, "the unpaced workload made no Claim");
    let pace =
        Duration::from_secs_f64(2.0 * CLIENTS as f64 * calibrated.as_secs_f64() / claims as f64);
    let peak_calls = calibration.len() as f64 / calibrated.as_secs_f64();
    eprintln!(
        "unpaced: {peak_calls:.0} calls/s, {claims} caller Claims in {:.1} s; pacing each caller at a Claim per {} ms",
        calibrated.as_secs_f64(),
        pace.as_millis()
    );

    let workload = Workload {
        pace: Some(pace),
        operator: true,
        helpers: 2,
        ..Workload::new(CLIENTS, WORKERS, PAUSE_CHANCE)
    };
    let started = recorder.now();
    let running = {
        let (endpoints, recorder) = (endpoints.clone(), recorder.clone());
        tokio::spawn(async move { workload.run(&endpoints, &recorder, length).await })
    };
    let mut samples = Vec::new();
    let mut injected = Vec::new();
    for (offset, action) in plan.timeline() {
        tokio::time::sleep((started + offset).saturating_sub(recorder.now())).await;
        let at = recorder.now().saturating_sub(started);
        match action {
            Action::Sample => samples.push(soak.sample(at).await),
            Action::Kill(index) => soak.replicas[index].kill(),
            Action::Restart(index) => {
                tokio::task::block_in_place(|| soak.replicas[index].restart());
                soak.began[index].push(at);
            }
            Action::CrashPostgres => {
                tokio::task::block_in_place(|| soak.cluster.crash_and_restart())
            }
        }
        if action != Action::Sample {
            injected.push((at, action));
        }
    }
    running.await.unwrap();

    // As the fault suite ends a scenario: drain, then check.
    Workload::drain(&endpoints, &recorder, DRAIN).await;
    let events = recorder.events();
    let end = fault::final_state(soak.cluster.direct(DATABASE)).await;
    let violations = checker::check(&events, &end);
    let faults: Vec<(Duration, String)> = injected
        .iter()
        .map(|&(at, action)| (started + at, format!("{action:?}")))
        .collect();
    fault::report(FAULTS, "soak", &events, &faults, &violations);

    let checks = judge(&plan, &samples, &soak.began);
    let run = Run {
        plan: &plan,
        samples: &samples,
        injected: &injected,
        events: &events,
        started,
        peak_calls,
        pace,
        violations: violations.len(),
    };
    fault::append(TABLE, &table(&run, &checks));
    std::fs::write(scratch(PLOT), plot(&run)).unwrap();
    eprintln!(
        "wrote {} and {}; replica logs in {}",
        scratch(TABLE).display(),
        scratch(PLOT).display(),
        soak.cluster.root.join(DATABASE).display()
    );

    assert!(
        events.len() > 100 && checker::acknowledged(&events) > 10,
        "too little work to judge"
    );
    assert!(
        violations.is_empty(),
        "{} violations, the first: {:#?}",
        violations.len(),
        &violations[..violations.len().min(20)]
    );
    let grew: Vec<&str> = checks
        .iter()
        .filter(|check| !check.passed)
        .map(|check| check.text.as_str())
        .collect();
    assert!(grew.is_empty(), "resources grew or overran: {grew:#?}");
}
