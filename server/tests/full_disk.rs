//! A full disk: PostgreSQL's WAL on a small filesystem of the test's own (a
//! tmpfs), filled by a ballast file while the workload runs. PostgreSQL then
//! cannot create its next WAL segment: the backend that needs one PANICs, the
//! crash recovery that follows needs one too and fails, and the postmaster
//! exits. A supervisor starts it again, as systemd's `Restart=always` or
//! Patroni would, and it exits again until the disk has room. The same opreg
//! server serves throughout, never restarted, and:
//!
//! - while the disk is full, Claim, Complete and Lookup are each answered
//!   within 2 s, UNAVAILABLE with exactly one ErrorInfo (STORE_UNAVAILABLE) and
//!   a RetryInfo, and health reports NOT_SERVING from the first failed probe
//!   until the ballast goes;
//! - nothing acknowledged is lost: every lease handed out and every report
//!   accepted, before or during the fault, is in the database afterwards, and
//!   the fault suite's checker finds the whole history consistent;
//! - once the ballast is removed, the service recovers by itself: health is
//!   SERVING, a Claim acquires, a lease held across the fault takes its
//!   report, and the workload's calls succeed again.
//!
//! Mounting needs root. Without root, or if the mount fails, the test says why
//! and passes, unless OPREG_REQUIRE_FULL_DISK=1, which makes that a failure.

mod common;
mod fault;

use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use common::{claim_request, complete_request, lookup_request, serve, success};
use fault::checker::{self, Final};
use fault::history::{Answer, Call, Event, Recorder, Report};
use fault::workload::Workload;
use opreg_client::proto as pb;
use opreg_embedded::{EmbeddedOptions, EmbeddedPostgres};
use opreg_server::config::Config;
use opreg_server::store;
use serde_json::json;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_types::{ErrorDetail, StatusExt};

const DATABASE: &str = "opreg";
/// The namespace of the test's own calls, apart from the workload's.
const PROBES: &str = "probes";
const REGISTRY: &str = "opreg.v1.OperationRegistry";
/// The per-run summary, also written under `target/tmp/` for CI to show.
const REPORT: &str = "full-disk.txt";

/// The WAL's filesystem, in MB. It is larger than the WAL can grow
/// (`wal_keep_size` plus about two `max_wal_size`), so only the ballast fills it.
const WAL_DISK_MB: u32 = 128;
/// Mounted as `opreg-wal-<pid>`, so a later run can tell a killed run's mount.
const DISK_PREFIX: &str = "opreg-wal-";
/// Appended to the cluster's `postgresql.conf`. Segments of 1 MB (initdb's
/// `--wal-segsize 1`) make "no room for one more" a precise condition. By
/// default PostgreSQL renames old segments into new ones at each checkpoint,
/// which needs no space, so a full disk would go unnoticed for as long as
/// recycling keeps up. `wal_keep_size` forbids recycling the newest 48 MB:
/// new WAL then needs new files, and the first one after the fill fails. The
/// smaller `min_wal_size` and `max_wal_size` keep the WAL well inside the disk.
const SETTINGS: &str = "
# server/tests/full_disk.rs: WAL on a small tmpfs that the test fills.
min_wal_size = 2MB
max_wal_size = 16MB
wal_keep_size = 48MB
log_line_prefix = '%m [%p] %b '
";

/// Workload before the fill, and after recovery.
const BEFORE: Duration = Duration::from_secs(3);
const AFTER: Duration = Duration::from_secs(5);
/// How long the disk stays full once PostgreSQL has refused WAL. This is longer
/// than one crash recovery: if room came back earlier, PostgreSQL would recover
/// without exiting, and the restart path would go untested.
const FULL_FOR: Duration = Duration::from_secs(5);
/// The promise: a refusal within 2 s, never a call left hanging.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);
/// Every start after a crash fsyncs the data directory first, which can take
/// seconds on a busy disk.
const RECOVERY: Duration = Duration::from_secs(20);
const DRAIN: Duration = Duration::from_secs(15);
/// The supervisor's pause between a postmaster's exit and the next start.
const RESTART_DELAY: Duration = Duration::from_millis(250);
/// Deadline of each of the test's own calls. It is far beyond `ANSWER_WITHIN`,
/// so what answers is the server, not the client's timer.
const PATIENCE: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_wal_disk_is_refused_fast_loses_nothing_and_recovers_by_itself() {
    fault::start_report(REPORT);
    let Some(rig) = tokio::task::block_in_place(FullDiskRig::prepare) else {
        return;
    };
    // Opened before the fault: after the fill, PostgreSQL may not take a new
    // connection.
    let mut pusher = PgConnection::connect_with(&rig.connect_options("postgres"))
        .await
        .unwrap();
    for statement in ["CREATE DATABASE opreg", "CREATE TABLE wal_push (n int)"] {
        sqlx::raw_sql(statement).execute(&mut pusher).await.unwrap();
    }
    let mut config = Config::defaults();
    config.listeners.listen_addr = "127.0.0.1:0".parse().unwrap();
    config.listeners.metrics_addr = "127.0.0.1:0".parse().unwrap();
    // While the probe has not yet found the store down, calls queue for the
    // pool, whose acquire (1 s) retries "starting up". A 500 ms probe bounds
    // that wait well inside ANSWER_WITHIN, as in failing_fast.rs.
    config.database.health_probe_interval = Duration::from_millis(500);
    config.lifecycle.maintenance_interval = Duration::from_secs(1);
    let db_options = rig.connect_options(DATABASE);
    let pool = store::connect(db_options.clone(), &config.database.pool_settings())
        .await
        .unwrap();
    store::MIGRATOR.run(&pool).await.unwrap();
    let app = serve(&config, pool, db_options.clone()).await;
    let address: SocketAddr = app.endpoint.trim_start_matches("http://").parse().unwrap();
    app.until_health(ServingStatus::Serving, Duration::from_secs(10))
        .await;
    let mut client = app.new_client().await;
    // A lease taken before the fault, long enough to outlive it. Its holder
    // reports during the fault (refused) and after it (taken).
    let held = client
        .claim(pb::ClaimRequest {
            lease_ttl: Some(prost_types::Duration {
                seconds: 120,
                nanos: 0,
            }),
            ..claim_request(PROBES, "held", "holder", json!({}))
        })
        .await
        .unwrap()
        .into_inner();
    let held_token = common::token(&held);

    let recorder = Recorder::new();
    let workload = |first_id: usize, operator: bool| Workload {
        first_id,
        operator,
        helpers: 1,
        ..Workload::new(8, 2, 0.05)
    };
    let before = {
        let (workload, recorder) = (workload(0, true), recorder.clone());
        tokio::spawn(async move { workload.run(&[address], &recorder, BEFORE + FULL_FOR).await })
    };
    tokio::time::sleep(BEFORE).await;

    // The fault: the disk fills, then WAL is pushed until PostgreSQL refuses it.
    let filled_at = recorder.now();
    let ballast = tokio::task::block_in_place(|| rig.fill());
    let refusal = push_wal_until_refused(&mut pusher).await;
    let fault = Instant::now();
    let fault_at = recorder.now();
    drop(pusher);
    // The refusal could come from a dropped connection. The log says why.
    let mut evidence = String::new();
    while fault.elapsed() < Duration::from_secs(5) && !evidence.contains("No space left on device")
    {
        evidence = rig.postgres_log();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        evidence.contains("No space left on device"),
        "PostgreSQL's log shows no full disk; the push ended with: {refusal}"
    );

    // While full: every call refused fast and retryable, health NOT_SERVING
    // from the first failed probe on.
    let mut slowest = Duration::ZERO;
    let mut refused = 0;
    let mut noticed = None;
    while fault.elapsed() < FULL_FOR {
        let status = app.health(REGISTRY).await;
        match noticed {
            None if status == Some(ServingStatus::NotServing) => noticed = Some(fault.elapsed()),
            // Until the next probe finds the store down.
            None => {}
            Some(_) => assert_eq!(
                status,
                Some(ServingStatus::NotServing),
                "health came back while the disk was still full"
            ),
        }
        let key = format!("during-{refused}");
        let mut request = tonic::Request::new(claim_request(PROBES, &key, "prober", json!({})));
        request.set_timeout(PATIENCE);
        let started = Instant::now();
        let answer = client.claim(request).await;
        slowest = slowest.max(assert_refused("Claim", answer, started.elapsed()));
        let report = complete_request(PROBES, "held", held_token, success(b"during"));
        let mut request = tonic::Request::new(report);
        request.set_timeout(PATIENCE);
        let started = Instant::now();
        let answer = client.complete(request).await;
        slowest = slowest.max(assert_refused("Complete", answer, started.elapsed()));
        let mut request = tonic::Request::new(lookup_request(PROBES, "held"));
        request.set_timeout(PATIENCE);
        let started = Instant::now();
        let answer = client.lookup(request).await;
        slowest = slowest.max(assert_refused("Lookup", answer, started.elapsed()));
        refused += 3;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let noticed = noticed.expect("health never reported NOT_SERVING while the disk was full");
    assert_eq!(app.health("").await, Some(ServingStatus::NotServing));

    // The ballast goes. Nothing else is touched: the supervisor's next start
    // finds room, and the server must find its database again by itself.
    let healed = Instant::now();
    let healed_at = recorder.now();
    rig.remove_ballast();
    let mut attempt = 0;
    let recovered = loop {
        assert!(
            healed.elapsed() < RECOVERY,
            "not recovered {RECOVERY:?} after the ballast went; health {:?}",
            app.health(REGISTRY).await
        );
        if app.health(REGISTRY).await == Some(ServingStatus::Serving) {
            attempt += 1;
            let key = format!("after-{attempt}");
            let claimed = client
                .claim(claim_request(PROBES, &key, "prober", json!({})))
                .await;
            if claimed.is_ok_and(|answer| answer.get_ref().lease.is_some()) {
                break healed.elapsed();
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let recovered_at = recorder.now();
    assert_eq!(app.health("").await, Some(ServingStatus::Serving));
    client
        .complete(complete_request(
            PROBES,
            "held",
            held_token,
            success(b"after the disk filled"),
        ))
        .await
        .expect("the lease held across the fault takes its report");
    let found = client
        .lookup(lookup_request(PROBES, "held"))
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    assert_eq!(found.status(), pb::OperationStatus::Succeeded);
    assert_eq!(found.result, b"after the disk filled");

    // The workload again, through the same server, then everything due drained.
    workload(100, false).run(&[address], &recorder, AFTER).await;
    before.await.unwrap();
    Workload::drain(&[address], &recorder, DRAIN).await;

    let events = recorder.events();
    let end = fault::final_state(db_options).await;
    let violations = checker::check(&events, &end);
    let lost = lost(&events, &end);
    let injected = [
        (fault_at, "WAL disk full".to_owned()),
        (healed_at, "ballast removed".to_owned()),
    ];
    fault::report(REPORT, "a full WAL disk", &events, &injected, &violations);
    let lives = rig.lives();
    let exited = lives
        .iter()
        .find(|(at, life)| matches!(life, Life::Exited) && *at >= fault)
        .map(|(at, _)| *at - fault);
    let refused_starts = lives
        .iter()
        .filter(|(at, life)| matches!(life, Life::StartFailed) && *at >= fault && *at < healed)
        .count();
    let ready = lives
        .iter()
        .find(|(at, life)| matches!(life, Life::Ready) && *at >= healed)
        .map(|(at, _)| *at - healed);
    let acknowledged = |from: Duration, to: Duration| {
        events
            .iter()
            .filter(|event| {
                matches!(
                    (&event.call, &event.answer),
                    (Call::Complete { .. }, Answer::Accepted)
                )
            })
            .filter(|event| event.completed >= from && event.completed < to)
            .count()
    };
    let (before_fault, during, after) = (
        acknowledged(Duration::ZERO, fault_at),
        acknowledged(fault_at, healed_at),
        acknowledged(recovered_at, Duration::MAX),
    );
    fault::append(
        REPORT,
        &format!(
            "  {} MB of ballast; PostgreSQL refused WAL {:.2}s after the fill ({refusal})\n  \
             while full: {refused} calls refused UNAVAILABLE, the slowest in {:.2}s; health NOT_SERVING after {:.2}s\n  \
             PostgreSQL: {}, {refused_starts} starts refused while full, {}\n  \
             recovered {:.2}s after the ballast went, the server never restarted\n  \
             Completes acknowledged: {before_fault} before the fault, {during} during it, {after} after recovery; {} acknowledgements lost\n",
            ballast >> 20,
            (fault_at - filled_at).as_secs_f64(),
            slowest.as_secs_f64(),
            noticed.as_secs_f64(),
            exited.map_or("did not exit".to_owned(), |took| format!(
                "exited {:.2}s after the fault",
                took.as_secs_f64()
            )),
            ready.map_or("never ready again".to_owned(), |took| format!(
                "ready {:.2}s after the ballast went",
                took.as_secs_f64()
            )),
            recovered.as_secs_f64(),
            lost.len(),
        ),
    );
    assert!(
        before_fault > 0 && after > 0,
        "too little work to judge: {before_fault} Completes acknowledged before the fault, {after} after recovery"
    );
    assert!(
        lost.is_empty(),
        "acknowledged but not in the database: {lost:#?}"
    );
    assert!(violations.is_empty(), "{violations:#?}");
    // The fault took the path the test is about: PostgreSQL went down, could
    // not start while the disk was full, and started once it had room.
    assert!(
        exited.is_some(),
        "PostgreSQL never exited while the disk was full"
    );
    assert!(
        refused_starts > 0,
        "no start of PostgreSQL was refused while the disk was full"
    );
    assert!(
        ready.is_some(),
        "PostgreSQL never started again after the ballast went"
    );

    drop(app);
    tokio::task::block_in_place(|| drop(rig));
}

/// A call made while the disk was full, refused as promised: UNAVAILABLE,
/// exactly one ErrorInfo saying the store is unavailable, a RetryInfo, and
/// within `ANSWER_WITHIN`. Returns how long it took.
fn assert_refused<T: std::fmt::Debug>(
    rpc: &str,
    answer: Result<tonic::Response<T>, tonic::Status>,
    took: Duration,
) -> Duration {
    let status = match answer {
        Ok(answer) => panic!(
            "{rpc} answered {:?} with the WAL disk full",
            answer.get_ref()
        ),
        Err(status) => status,
    };
    assert!(
        took < ANSWER_WITHIN,
        "{rpc} was refused only after {took:?}"
    );
    assert_eq!(status.code(), Code::Unavailable, "{rpc}: {status:?}");
    let details = status
        .check_error_details_vec()
        .unwrap_or_else(|error| panic!("{rpc}: undecodable details ({error}): {status:?}"));
    let infos: Vec<&tonic_types::ErrorInfo> = details
        .iter()
        .filter_map(|detail| match detail {
            ErrorDetail::ErrorInfo(info) => Some(info),
            _ => None,
        })
        .collect();
    assert_eq!(infos.len(), 1, "{rpc}: exactly one ErrorInfo: {status:?}");
    assert_eq!(infos[0].domain, "opreg", "{rpc}: {status:?}");
    assert_eq!(infos[0].reason, "STORE_UNAVAILABLE", "{rpc}: {status:?}");
    assert!(
        details
            .iter()
            .any(|detail| matches!(detail, ErrorDetail::RetryInfo(_))),
        "{rpc}: UNAVAILABLE carries RetryInfo: {status:?}"
    );
    took
}

/// Makes PostgreSQL need new WAL segments until it fails: each round writes a
/// row and switches to the next segment. Fifty rounds per statement take
/// milliseconds, faster than any checkpoint could recycle a segment. Returns
/// the error that ended it.
async fn push_wal_until_refused(db: &mut PgConnection) -> String {
    for _ in 0..20 {
        let pushed = sqlx::raw_sql(
            "DO $$ BEGIN
                 FOR round IN 1..50 LOOP
                     INSERT INTO wal_push VALUES (round);
                     PERFORM pg_switch_wal();
                 END LOOP;
             END $$",
        )
        .execute(&mut *db)
        .await;
        if let Err(error) = pushed {
            return error.to_string();
        }
    }
    panic!("PostgreSQL wrote 1000 MB of WAL onto a {WAL_DISK_MB} MB disk that was full");
}

/// What the history says was acknowledged but the database does not hold.
/// These are the leases a Claim or ClaimDue handed out, and the reports a
/// Complete had accepted, each on its own execution. The checker's durability
/// property covers settled outcomes only. This also covers leases and the
/// retryable and unknown reports, which a lost commit would erase just the same.
fn lost(events: &[Event], end: &Final) -> Vec<String> {
    let execution = |key: &str, token: u64| {
        end.executions
            .get(key)
            .into_iter()
            .flatten()
            .find(|execution| execution.0 == token)
    };
    let mut lost = Vec::new();
    for event in events {
        let answered = event.completed.as_secs_f64();
        match (&event.call, &event.answer) {
            (Call::Claim { .. } | Call::ClaimDue, Answer::Leases(granted)) => {
                for grant in granted {
                    if execution(&grant.key, grant.token).is_none() {
                        lost.push(format!(
                            "the lease {} of {} answered at {answered:.3}s",
                            grant.token, grant.key
                        ));
                    }
                }
            }
            (Call::Complete { key, token, report }, Answer::Accepted) => {
                let expected = match report {
                    Report::Success(_) => "succeeded",
                    Report::Failure(_) => "failed",
                    Report::Retryable => "retryable",
                    Report::Unknown => "unknown",
                };
                let recorded = execution(key, *token).map(|execution| execution.2.as_str());
                if recorded != Some(expected) {
                    lost.push(format!(
                        "the {expected} report of {key} under token {token} answered at {answered:.3}s; the database has {recorded:?}"
                    ));
                }
            }
            _ => {}
        }
    }
    lost
}

/// Says why the test cannot run here, or fails if it must run.
fn cannot_run(reason: &str) {
    assert!(
        !std::env::var("OPREG_REQUIRE_FULL_DISK").is_ok_and(|value| value == "1"),
        "OPREG_REQUIRE_FULL_DISK=1, but {reason}"
    );
    eprintln!("skipped the full-disk test: {reason}");
}

/// The cluster under test, with its WAL on a tmpfs of its own, under a
/// supervisor. Dropping it stops PostgreSQL, unmounts and removes everything.
struct FullDiskRig {
    root: PathBuf,
    wal_disk: PathBuf,
    mounted: bool,
    supervisor: Option<Supervisor>,
}

impl FullDiskRig {
    /// Mounts the disk, creates the cluster on it and starts PostgreSQL; `None`
    /// (after saying why) where that cannot be done.
    fn prepare() -> Option<Self> {
        if !opreg_embedded::is_root() {
            cannot_run("mounting the WAL's filesystem needs root");
            return None;
        }
        unmount_stale_disks();
        let bin_dir = opreg_embedded::find_bin_dir().expect("PostgreSQL server binaries");
        // The user opreg_embedded runs PostgreSQL as, under root.
        let (uid, gid) = postgres_user().expect("a postgres or nobody user to run PostgreSQL");
        let root = std::env::temp_dir().join(format!("opreg-fulldisk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let wal_disk = root.join("wal-disk");
        std::fs::create_dir_all(&wal_disk).unwrap();
        let mut rig = Self {
            root,
            wal_disk,
            mounted: false,
            supervisor: None,
        };
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={WAL_DISK_MB}m,mode=0700,uid={uid},gid={gid}"))
            .arg(format!("{DISK_PREFIX}{}", std::process::id()))
            .arg(&rig.wal_disk)
            .output();
        match mounted {
            Ok(output) if output.status.success() => rig.mounted = true,
            Ok(output) => {
                let why = String::from_utf8_lossy(&output.stderr);
                cannot_run(&format!("mount -t tmpfs failed: {}", why.trim()));
                return None;
            }
            Err(error) => {
                cannot_run(&format!("mount could not run: {error}"));
                return None;
            }
        }
        std::os::unix::fs::chown(&rig.root, Some(uid), Some(gid)).unwrap();
        // The cluster is made here rather than by EmbeddedPostgres, which has
        // no WAL directory or segment size option. With a PG_VERSION in
        // pgdata/, EmbeddedPostgres::start only starts it.
        let output = opreg_embedded::initdb_command(&bin_dir, &rig.root.join("pgdata"))
            .arg("--waldir")
            .arg(rig.wal_disk.join("pg_wal"))
            .args(["--wal-segsize", "1", "--no-sync"])
            .uid(uid)
            .gid(gid)
            .current_dir("/")
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::OpenOptions::new()
            .append(true)
            .open(rig.root.join("pgdata/postgresql.conf"))
            .and_then(|mut conf| conf.write_all(SETTINGS.as_bytes()))
            .unwrap();
        // Not ephemeral: with synchronous_commit=off, the PANIC would lose
        // acknowledged commits, and the test would rightly say so.
        rig.supervisor = Some(Supervisor::start(EmbeddedOptions {
            root: rig.root.clone(),
            bin_dir: None,
            ephemeral: false,
        }));
        Some(rig)
    }

    fn connect_options(&self, database: &str) -> PgConnectOptions {
        PgConnectOptions::new()
            .socket(self.root.join("run"))
            .port(5432)
            .username(opreg_embedded::SUPERUSER)
            .database(database)
    }

    fn ballast(&self) -> PathBuf {
        self.wal_disk.join("ballast")
    }

    /// Writes the ballast until the filesystem refuses, as another tenant of
    /// the disk would. Returns the bytes written.
    fn fill(&self) -> u64 {
        let mut ballast = std::fs::File::create(self.ballast()).unwrap();
        let chunk = vec![0_u8; 1 << 20];
        let mut written = 0_u64;
        loop {
            match ballast.write(&chunk) {
                Ok(0) => return written,
                Ok(bytes) => written += u64::try_from(bytes).unwrap(),
                Err(error) if error.kind() == std::io::ErrorKind::StorageFull => return written,
                Err(error) => panic!("writing the ballast: {error}"),
            }
        }
    }

    fn remove_ballast(&self) {
        std::fs::remove_file(self.ballast()).unwrap();
    }

    fn postgres_log(&self) -> String {
        std::fs::read_to_string(self.root.join("postgres.log")).unwrap_or_default()
    }

    fn lives(&self) -> Vec<(Instant, Life)> {
        self.supervisor
            .as_ref()
            .map(|supervisor| supervisor.lives.lock().unwrap().clone())
            .unwrap_or_default()
    }
}

impl Drop for FullDiskRig {
    fn drop(&mut self) {
        // Room first: PostgreSQL's shutdown checkpoint writes WAL.
        let _ = std::fs::remove_file(self.ballast());
        drop(self.supervisor.take());
        if self.mounted {
            unmount(&self.wal_disk);
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The first of `postgres` and `nobody` in /etc/passwd, as `opreg_embedded`
/// chooses: its uid and gid.
fn postgres_user() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    ["postgres", "nobody"].into_iter().find_map(|name| {
        passwd.lines().find_map(
            |line| match line.split(':').collect::<Vec<_>>().as_slice() {
                [user, _, uid, gid, ..] if *user == name => {
                    Some((uid.parse().ok()?, gid.parse().ok()?))
                }
                _ => None,
            },
        )
    })
}

/// Unmounts what a killed run of this test left mounted (its Drop never ran).
fn unmount_stale_disks() {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    for line in mounts.lines() {
        let mut fields = line.split_whitespace();
        let (Some(source), Some(target)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some(pid) = source
            .strip_prefix(DISK_PREFIX)
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid.to_string()).exists() {
            unmount(Path::new(target));
        }
    }
}

fn unmount(target: &Path) {
    let unmounted = Command::new("umount")
        .arg(target)
        .status()
        .is_ok_and(|status| status.success());
    if !unmounted {
        // Still busy: detached now, gone when its last user is.
        let _ = Command::new("umount").arg("-l").arg(target).status();
    }
}

/// What the supervisor saw PostgreSQL do.
#[derive(Clone, Copy, Debug)]
enum Life {
    /// Started and accepting connections.
    Ready,
    /// The postmaster exited by itself.
    Exited,
    /// A start ended with the postmaster's exit before it was ready.
    StartFailed,
}

/// PostgreSQL run the way a service manager runs it (systemd's
/// `Restart=always`, Patroni, a container's restart policy): started again
/// `RESTART_DELAY` after it exits, for as long as it keeps exiting. One thread
/// starts every postmaster, because each postmaster is told to stop when the
/// thread that started it exits.
struct Supervisor {
    stopping: Arc<AtomicBool>,
    lives: Arc<Mutex<Vec<(Instant, Life)>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Supervisor {
    /// Returns once PostgreSQL first accepts connections.
    fn start(options: EmbeddedOptions) -> Self {
        let stopping = Arc::new(AtomicBool::new(false));
        let lives = Arc::new(Mutex::new(Vec::new()));
        let (first, started) = mpsc::channel();
        let thread = {
            let (stopping, lives) = (Arc::clone(&stopping), Arc::clone(&lives));
            std::thread::spawn(move || supervise(&options, &stopping, &lives, first))
        };
        if let Err(why) = started.recv().unwrap() {
            panic!("PostgreSQL starts: {why}");
        }
        Self {
            stopping,
            lives,
            thread: Some(thread),
        }
    }
}

impl Drop for Supervisor {
    /// Stops the supervision and PostgreSQL with it (a fast shutdown).
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn supervise(
    options: &EmbeddedOptions,
    stopping: &AtomicBool,
    lives: &Mutex<Vec<(Instant, Life)>>,
    first: mpsc::Sender<Result<(), String>>,
) {
    let mut first = Some(first);
    let note = |life: Life| lives.lock().unwrap().push((Instant::now(), life));
    while !stopping.load(Ordering::SeqCst) {
        match EmbeddedPostgres::start(options) {
            Ok(running) => {
                note(Life::Ready);
                if let Some(first) = first.take() {
                    let _ = first.send(Ok(()));
                }
                let pid = postmaster_pid(&options.root).expect("a ready postmaster's pid file");
                while !stopping.load(Ordering::SeqCst) && !exited(pid) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                if !stopping.load(Ordering::SeqCst) {
                    note(Life::Exited);
                }
                // Reaps an exited postmaster; stops a running one.
                drop(running);
            }
            Err(error) => {
                if let Some(first) = first.take() {
                    let _ = first.send(Err(error.to_string()));
                    return;
                }
                note(Life::StartFailed);
                std::thread::sleep(RESTART_DELAY);
            }
        }
    }
}

/// The postmaster's pid, the first line of its pid file.
fn postmaster_pid(root: &Path) -> Option<u32> {
    std::fs::read_to_string(root.join("pgdata/postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// Whether the postmaster `pid` has exited. It is this process's child,
/// unreaped until its EmbeddedPostgres is dropped, so the pid cannot have been
/// reused: an exited one is a zombie.
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_none_or(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))),
        Err(_) => true,
    }
}
