//! Failover on highly available PostgreSQL: `deploy/ha/start.sh` runs etcd,
//! two Patroni nodes (synchronous_mode) and HAProxy; three replicas serve the
//! fault suite's workload through HAProxy while the primary's node dies
//! (SIGKILL of its Patroni and its postmaster). Patroni promotes the
//! synchronous standby, HAProxy follows it, the replicas reconnect by
//! themselves, and the checker finds no acknowledged operation lost and the
//! fencing tokens still increasing across the failover.
//!
//! Needs Debian's patroni, etcd-server and haproxy (`.ci/run` installs them).
//! Without them the test says so and passes, unless `OPREG_REQUIRE_HA` is set.

mod fault;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fault::checker;
use fault::history::{Answer, Recorder};
use fault::workload::Workload;
use fault::{Replica, free_address, installed};

const LENGTH: Duration = Duration::from_secs(30);
const KILL_AT: Duration = Duration::from_secs(5);
/// The scenario's line, also written under `target/tmp/` for CI to show.
const REPORT: &str = "ha.txt";

/// The HA cluster of `deploy/ha/`, stopped when dropped.
struct HaCluster {
    dir: PathBuf,
    url: String,
}

impl HaCluster {
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("opreg-ha-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let output = Command::new("bash")
            .arg(script("start.sh"))
            .arg(&dir)
            .output()
            .unwrap();
        let cluster = Self {
            url: String::from_utf8_lossy(&output.stdout).trim().to_owned(),
            dir,
        };
        assert!(
            output.status.success(),
            "deploy/ha/start.sh failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        cluster
    }

    /// The node Patroni calls the leader, as `nodeN`.
    fn leader(&self) -> String {
        for port in [8008, 8009] {
            let Ok(output) = Command::new("curl")
                .args(["-fsS", &format!("http://127.0.0.1:{port}/cluster")])
                .output()
            else {
                continue;
            };
            let Ok(cluster) = serde_json::from_slice::<serde_json::Value>(&output.stdout) else {
                continue;
            };
            let leader = cluster["members"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|member| member["role"] == "leader");
            if let Some(name) = leader.and_then(|member| member["name"].as_str()) {
                return name.to_owned();
            }
        }
        panic!("no Patroni leader");
    }

    /// SIGKILL of the leader's Patroni and its postmaster: the node is gone.
    fn kill_leader(&self) -> String {
        let leader = self.leader();
        let node = self.dir.join(&leader);
        let patroni = read_pid(&node.join("patroni.pid"));
        let postmaster = read_pid(&node.join("data/postmaster.pid"));
        for pid in [patroni, postmaster] {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
        leader
    }
}

impl Drop for HaCluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script("stop.sh"))
            .arg(&self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/ha")
        .join(name)
}

fn read_pid(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// True when `token` was handed out before `instant`.
fn granted_before(events: &[fault::history::Event], token: u64, instant: Duration) -> bool {
    events.iter().any(|event| {
        event.completed < instant
            && matches!(&event.answer, Answer::Leases(granted) if granted.iter().any(|grant| grant.token == token))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_failover_loses_no_acknowledged_operation() {
    if !["patroni", "etcd", "haproxy"].into_iter().all(installed) {
        assert!(
            std::env::var_os("OPREG_REQUIRE_HA").is_none(),
            "OPREG_REQUIRE_HA is set but patroni, etcd or haproxy is missing"
        );
        eprintln!("skipped: install patroni, etcd-server and haproxy to run the failover test");
        return;
    }
    let cluster = tokio::task::block_in_place(HaCluster::start);
    let settings = [
        ("OPREG_MAINTENANCE_INTERVAL", "1s"),
        ("OPREG_HEALTH_PROBE_INTERVAL", "500ms"),
        ("OPREG_POOL_MAX_CONNECTIONS", "8"),
    ];
    let replicas: Vec<Replica> = (0..3)
        .map(|index| {
            let log = cluster.dir.join(format!("replica-{index}.log"));
            tokio::task::block_in_place(|| {
                Replica::start(free_address(), &cluster.url, &settings, log)
            })
        })
        .collect();
    let endpoints: Vec<_> = replicas.iter().map(|replica| replica.address).collect();
    let recorder = Recorder::new();
    let workload = Workload {
        operator: true,
        helpers: 2,
        ..Workload::new(9, 3, 0.05)
    };
    let running = {
        let (endpoints, recorder) = (endpoints.clone(), recorder.clone());
        tokio::spawn(async move { workload.run(&endpoints, &recorder, LENGTH).await })
    };
    tokio::time::sleep(KILL_AT).await;
    let killed_at = recorder.now();
    let leader = tokio::task::block_in_place(|| cluster.kill_leader());
    running.await.unwrap();
    Workload::drain(&endpoints, &recorder, Duration::from_secs(30)).await;

    let events = recorder.events();
    let options: sqlx::postgres::PgConnectOptions = cluster.url.parse().unwrap();
    let end = fault::final_state(options).await;
    let violations = checker::check(&events, &end);
    fault::start_report(REPORT);
    fault::report(
        REPORT,
        "primary failover (Patroni, synchronous standby, HAProxy)",
        &events,
        &[(
            killed_at,
            format!("SIGKILL of {leader}'s Patroni and postmaster"),
        )],
        &violations,
    );
    // The sequence is WAL-logged ahead of use and replicated synchronously, so
    // the promoted standby never hands out a token the old primary did.
    let before = events
        .iter()
        .filter(|event| event.completed < killed_at)
        .filter_map(|event| match &event.answer {
            Answer::Leases(granted) => granted.iter().map(|grant| grant.token).max(),
            _ => None,
        })
        .max()
        .expect("leases before the failover");
    // New leases only: a holder resuming its own live lease gets its token again.
    let after = events
        .iter()
        .filter(|event| event.invoked > killed_at + Duration::from_secs(1))
        .filter_map(|event| match &event.answer {
            Answer::Leases(granted) => granted
                .iter()
                .map(|grant| grant.token)
                .filter(|&token| token > before || !granted_before(&events, token, killed_at))
                .min(),
            _ => None,
        })
        .min()
        .expect("leases after the failover");
    let tokens = format!("  tokens: up to {before} before the failover, from {after} after\n");
    print!("{tokens}");
    let _ = std::fs::OpenOptions::new()
        .append(true)
        .open(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(REPORT))
        .and_then(|mut out| std::io::Write::write_all(&mut out, tokens.as_bytes()));
    assert!(
        after > before,
        "a token after the failover is not above those before"
    );
    assert!(
        checker::acknowledged(&events) > 10,
        "too little work to judge"
    );
    assert!(violations.is_empty(), "{violations:#?}");
}
