//! The fault suite: three server replicas on one PostgreSQL, clients spread
//! over them through fault-injecting proxies, and in each scenario faults
//! while the workload runs: a replica SIGKILLed and restarted, PostgreSQL
//! stopped with `-m immediate` and restarted, the network to PostgreSQL and
//! to the replicas cut, blackholed and slowed, and holders stalled past their
//! lease (the paused-process case). Every call is recorded; afterwards workers
//! drain the due queue and the checker (`fault/checker.rs`) holds the history
//! and the final database against the guarantees. A build with a planted bug
//! must make the checker fail, and each property's check is shown to fail on
//! a history that breaks it.
//!
//! Each scenario runs a fixed time (`SCENARIO`), so the suite is bounded.

mod fault;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fault::checker::{self, Final, Violation};
use fault::history::{Answer, Call, Event, Granted, Recorder, Report};
use fault::holder::{self, HolderProcess};
use fault::pgbouncer::PgBouncer;
use fault::proxy::{Proxy, Target};
use fault::workload::Workload;
use fault::{Cluster, Replica, free_address, installed};
use sqlx::{Connection, PgConnection};

const REPLICAS: usize = 3;
const SCENARIO: Duration = Duration::from_secs(10);
const DRAIN: Duration = Duration::from_secs(15);
/// The per-scenario table, also written under `target/tmp/` for CI to show.
const REPORT: &str = "fault-suite.txt";
/// Client processes' caller numbers, apart from the in-process callers'.
const HOLDER_IDS: usize = 20_000;

/// The faults a scenario injects, each at its offset from the start.
#[derive(Clone, Copy, Debug)]
enum Fault {
    KillReplica(usize),
    RestartReplica(usize),
    CrashPostgres,
    CutDatabase,
    BlackholeDatabase(Duration),
    SlowDatabase(Duration, Duration),
    CutClients,
    BlackholeClients(usize, Duration),
    /// SIGSTOP of a client process for this long, then SIGCONT.
    StopHolder(usize, Duration),
    /// The replica replaced by one of this build (which migrates on start).
    Upgrade(usize),
}

struct Scenario {
    name: &'static str,
    faults: Vec<(Duration, Fault)>,
    pause_chance: f64,
    planted_bug: bool,
    /// The replicas reach PostgreSQL through PgBouncer's transaction pooling.
    through_pgbouncer: bool,
    /// Callers in processes of their own, which `StopHolder` stops.
    holder_processes: usize,
    /// The replicas start as this build of the previous release (on its
    /// schema), until `Upgrade` replaces them.
    previous_release: Option<std::path::PathBuf>,
}

impl Scenario {
    fn new(name: &'static str, faults: Vec<(Duration, Fault)>) -> Self {
        Self {
            name,
            faults,
            pause_chance: 0.1,
            planted_bug: false,
            through_pgbouncer: false,
            holder_processes: 0,
            previous_release: None,
        }
    }
}

/// PgBouncer's server connections for the transaction pool, far fewer than
/// the replicas' client connections (3 × `OPREG_POOL_MAX_CONNECTIONS`).
const PGBOUNCER_SERVERS: u32 = 3;

struct Environment {
    cluster: Arc<Cluster>,
    database_proxy: Proxy,
    pgbouncer: Option<PgBouncer>,
    replicas: Vec<Replica>,
    client_proxies: Vec<Proxy>,
    holders: Vec<HolderProcess>,
}

async fn environment(cluster: &Arc<Cluster>, database: &str, scenario: &Scenario) -> Environment {
    let mut admin = PgConnection::connect_with(&cluster.direct("postgres"))
        .await
        .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(&mut admin)
        .await
        .unwrap();
    admin.close().await.unwrap();
    let pgbouncer = scenario.through_pgbouncer.then(|| {
        tokio::task::block_in_place(|| PgBouncer::start(cluster, database, PGBOUNCER_SERVERS))
    });
    let database_proxy = match &pgbouncer {
        Some(pgbouncer) => Proxy::start(Target::Tcp(pgbouncer.address)).await,
        None => Proxy::start(Target::Unix(cluster.socket.clone())).await,
    };
    let url = |database: &str| {
        format!(
            "postgres://{}@{}/{database}",
            opreg_embedded::SUPERUSER,
            database_proxy.address
        )
    };
    let session_url = url(&format!("{database}_session"));
    let url = url(database);
    let mut settings = vec![
        ("OPREG_MAINTENANCE_INTERVAL", "1s"),
        ("OPREG_HEALTH_PROBE_INTERVAL", "500ms"),
        ("OPREG_POOL_MAX_CONNECTIONS", "8"),
        ("OPREG_GAUGE_REFRESH_INTERVAL", "5s"),
    ];
    if scenario.planted_bug {
        settings.push(("OPREG_PLANTED_BUG", "acknowledge-stale-complete"));
    }
    if pgbouncer.is_some() {
        settings.push(("OPREG_DATABASE_POOLER", "transaction"));
        settings.push(("OPREG_SESSION_DATABASE_URL", &session_url));
    }
    let log_dir = cluster.root.join(database);
    std::fs::create_dir_all(&log_dir).unwrap();
    let mut replicas = Vec::new();
    let mut client_proxies = Vec::new();
    for index in 0..REPLICAS {
        let address = free_address();
        let log = log_dir.join(format!("replica-{index}.log"));
        // The first replica migrates; the others find nothing to do.
        replicas.push(tokio::task::block_in_place(|| {
            match &scenario.previous_release {
                Some(binary) => {
                    Replica::start_binary(binary.clone(), address, &url, &settings, log)
                }
                None => Replica::start(address, &url, &settings, log),
            }
        }));
        client_proxies.push(Proxy::start(Target::Tcp(address)).await);
    }
    Environment {
        cluster: Arc::clone(cluster),
        database_proxy,
        pgbouncer,
        replicas,
        client_proxies,
        holders: Vec::new(),
    }
}

impl Environment {
    fn endpoints(&self) -> Vec<SocketAddr> {
        self.client_proxies
            .iter()
            .map(|proxy| proxy.address)
            .collect()
    }

    async fn inject(&mut self, fault: Fault) {
        match fault {
            Fault::KillReplica(index) => self.replicas[index].kill(),
            Fault::RestartReplica(index) => {
                tokio::task::block_in_place(|| self.replicas[index].restart());
            }
            Fault::CrashPostgres => {
                tokio::task::block_in_place(|| self.cluster.crash_and_restart())
            }
            Fault::CutDatabase => self.database_proxy.cut(),
            Fault::BlackholeDatabase(length) => {
                self.database_proxy.blackhole(true);
                tokio::time::sleep(length).await;
                self.database_proxy.blackhole(false);
            }
            Fault::SlowDatabase(delay, length) => {
                self.database_proxy.latency(delay);
                tokio::time::sleep(length).await;
                self.database_proxy.heal();
            }
            Fault::CutClients => self.client_proxies.iter().for_each(Proxy::cut),
            Fault::BlackholeClients(index, length) => {
                self.client_proxies[index].blackhole(true);
                tokio::time::sleep(length).await;
                self.client_proxies[index].blackhole(false);
            }
            Fault::StopHolder(index, length) => {
                self.holders[index].stop();
                tokio::time::sleep(length).await;
                self.holders[index].resume();
            }
            Fault::Upgrade(index) => {
                tokio::task::block_in_place(|| self.replicas[index].upgrade());
            }
        }
    }

    fn heal(&mut self) {
        self.database_proxy.heal();
        self.client_proxies.iter().for_each(Proxy::heal);
    }
}

struct Outcome {
    calls: usize,
    acknowledged: usize,
    violations: Vec<Violation>,
}

async fn run(cluster: &Arc<Cluster>, index: usize, scenario: &Scenario) -> Outcome {
    let database = format!("fault_{index}");
    let mut environment = environment(cluster, &database, scenario).await;
    let endpoints = environment.endpoints();
    let recorder = Recorder::new();
    let workload = Workload {
        operator: true,
        helpers: 2,
        ..Workload::new(12, 3, scenario.pause_chance)
    };
    let running = {
        let recorder = recorder.clone();
        let endpoints = endpoints.clone();
        tokio::spawn(async move { workload.run(&endpoints, &recorder, SCENARIO).await })
    };
    let log_dir = cluster.root.join(&database);
    environment.holders = (0..scenario.holder_processes)
        .map(|index| {
            let endpoint = endpoints[index % endpoints.len()];
            HolderProcess::spawn(endpoint, HOLDER_IDS + index, SCENARIO, &recorder, &log_dir)
        })
        .collect();
    if scenario.previous_release.is_some() {
        // The old replicas run on the old schema until the first new one migrates.
        assert!(
            schema_version(cluster, &database).await < latest_migration(),
            "the previous release's replicas run on this release's schema: nothing to upgrade"
        );
    }
    let mut injected = Vec::new();
    for &(offset, fault) in &scenario.faults {
        let wait = offset.saturating_sub(recorder.now());
        tokio::time::sleep(wait).await;
        injected.push((recorder.now(), fault));
        environment.inject(fault).await;
    }
    running.await.unwrap();
    if scenario.previous_release.is_some() {
        assert_eq!(schema_version(cluster, &database).await, latest_migration());
    }
    let holders = std::mem::take(&mut environment.holders);
    let holder_ids: Vec<usize> = holders.iter().map(|holder| holder.id).collect();
    for holder in holders {
        recorder.extend(tokio::task::block_in_place(|| holder.finish()));
    }
    let mut multiplexed = None;
    if let Some(pgbouncer) = &environment.pgbouncer {
        let clients = pgbouncer.clients(&database).await;
        let servers = pgbouncer.servers(&database).await;
        assert!(
            clients > servers && servers <= PGBOUNCER_SERVERS as usize,
            "PgBouncer did not multiplex: {clients} clients, {servers} servers"
        );
        multiplexed = Some(format!(
            "  PgBouncer served {clients} client connections over {servers} server connections\n"
        ));
    }
    environment.heal();
    Workload::drain(&endpoints, &recorder, DRAIN).await;
    let events = recorder.events();
    let end = fault::final_state(cluster.direct(&database)).await;
    let violations = checker::check(&events, &end);
    let injected: Vec<(Duration, String)> = injected
        .iter()
        .map(|(at, fault)| (*at, format!("{fault:?}")))
        .collect();
    fault::report(REPORT, scenario.name, &events, &injected, &violations);
    if let Some(line) = multiplexed {
        fault::append(REPORT, &line);
    }
    if !holder_ids.is_empty() {
        let superseded = superseded_calls(&events, &holder_ids);
        fault::append(
            REPORT,
            &format!(
                "  client processes: {} calls, {superseded} refused after a stop as superseded\n",
                events
                    .iter()
                    .filter(|event| holder_ids.contains(&event.client))
                    .count()
            ),
        );
        assert!(
            superseded > 0,
            "no stopped client process came back to a superseded lease"
        );
    }
    Outcome {
        calls: events.len(),
        acknowledged: checker::acknowledged(&events),
        violations,
    }
}

/// The newest migration applied to `database`.
async fn schema_version(cluster: &Cluster, database: &str) -> i64 {
    let mut db = PgConnection::connect_with(&cluster.direct(database))
        .await
        .unwrap();
    sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations")
        .fetch_one(&mut db)
        .await
        .unwrap()
}

/// The newest migration of this build.
fn latest_migration() -> i64 {
    opreg_server::store::MIGRATOR
        .iter()
        .map(|migration| migration.version)
        .max()
        .unwrap()
}

/// Calls of these clients refused because their lease was superseded.
fn superseded_calls(events: &[Event], clients: &[usize]) -> usize {
    events
        .iter()
        .filter(|event| clients.contains(&event.client))
        .filter(|event| {
            matches!(&event.answer, Answer::Failed { reason, .. }
                if reason == "STALE_FENCING_TOKEN" || reason == "LEASE_NOT_HELD")
        })
        .count()
}

fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

fn millis(milliseconds: u64) -> Duration {
    Duration::from_millis(milliseconds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_guarantees_hold_under_faults_and_a_planted_bug_is_caught() {
    fault::start_report(REPORT);
    let cluster = Arc::new(
        tokio::task::spawn_blocking(|| Cluster::start("suite"))
            .await
            .unwrap(),
    );
    let mut scenarios = vec![
        Scenario::new("no faults", vec![]),
        Scenario::new(
            "a replica SIGKILLed mid-call, then restarted",
            vec![
                (secs(3), Fault::KillReplica(0)),
                (secs(5), Fault::RestartReplica(0)),
            ],
        ),
        Scenario::new(
            "PostgreSQL stopped -m immediate, then restarted",
            vec![(secs(3), Fault::CrashPostgres)],
        ),
        Scenario::new(
            "the network to PostgreSQL cut, blackholed, slowed",
            vec![
                (secs(2), Fault::CutDatabase),
                (secs(4), Fault::BlackholeDatabase(secs(2))),
                (secs(7), Fault::SlowDatabase(millis(30), secs(2))),
            ],
        ),
        Scenario::new(
            "the network to the replicas cut and blackholed",
            vec![
                (secs(3), Fault::CutClients),
                (secs(5), Fault::BlackholeClients(1, secs(2))),
            ],
        ),
        Scenario {
            pause_chance: 0.15,
            ..Scenario::new(
                "combined",
                vec![
                    (secs(2), Fault::KillReplica(1)),
                    (secs(3), Fault::CutDatabase),
                    (secs(4), Fault::CrashPostgres),
                    (secs(6), Fault::RestartReplica(1)),
                    (secs(7), Fault::CutClients),
                ],
            )
        },
    ];
    scenarios.push(Scenario {
        holder_processes: 2,
        ..Scenario::new(
            "client processes SIGSTOPped past their lease, then SIGCONT",
            vec![
                (secs(2), Fault::StopHolder(0, millis(2_500))),
                (secs(5), Fault::StopHolder(1, millis(2_500))),
                (millis(7_800), Fault::StopHolder(0, millis(1_500))),
            ],
        )
    });
    if installed("pgbouncer") {
        scenarios.push(Scenario {
            through_pgbouncer: true,
            ..Scenario::new(
                "through PgBouncer's transaction pooling: cut, PostgreSQL stopped, a replica killed",
                vec![
                    (secs(2), Fault::CutDatabase),
                    (secs(4), Fault::CrashPostgres),
                    (secs(6), Fault::KillReplica(2)),
                    (secs(7), Fault::RestartReplica(2)),
                ],
            )
        });
    } else {
        assert!(
            std::env::var_os("OPREG_REQUIRE_PGBOUNCER").is_none(),
            "OPREG_REQUIRE_PGBOUNCER is set but pgbouncer is missing"
        );
        eprintln!("skipped the PgBouncer scenario: install pgbouncer to run it");
    }
    // The previous release's server (deploy/upgrade/build-previous.sh), upgraded
    // replica by replica while the workload runs: the first new replica
    // migrates while two old ones serve on the new schema, and every call of
    // either version is checked alike.
    match std::env::var_os("OPREG_PREVIOUS_SERVER_BIN") {
        Some(binary) => scenarios.push(Scenario {
            previous_release: Some(binary.into()),
            ..Scenario::new(
                "a rolling upgrade from the previous release: old and new replicas on one database during the migration",
                vec![
                    (secs(2), Fault::Upgrade(0)),
                    (secs(5), Fault::Upgrade(1)),
                    (secs(8), Fault::Upgrade(2)),
                ],
            )
        }),
        None => {
            assert!(
                std::env::var_os("OPREG_REQUIRE_PREVIOUS_RELEASE").is_none(),
                "OPREG_REQUIRE_PREVIOUS_RELEASE is set but OPREG_PREVIOUS_SERVER_BIN is not"
            );
            eprintln!(
                "skipped the rolling upgrade: set OPREG_PREVIOUS_SERVER_BIN to the binary \
                 deploy/upgrade/build-previous.sh prints"
            );
        }
    }
    // OPREG_FAULT_SCENARIO=text runs only the scenarios whose name holds it
    // (the planted bug's included), for working on one.
    let only = std::env::var("OPREG_FAULT_SCENARIO").ok();
    let chosen = |scenario: &Scenario| {
        only.as_ref()
            .is_none_or(|text| scenario.name.contains(text))
    };
    let mut failures = Vec::new();
    for (index, scenario) in scenarios.iter().enumerate().filter(|(_, s)| chosen(s)) {
        let outcome = run(&cluster, index, scenario).await;
        assert!(
            outcome.calls > 100 && outcome.acknowledged > 10,
            "{}: too little work to judge",
            scenario.name
        );
        if !outcome.violations.is_empty() {
            failures.push(format!("{}: {:?}", scenario.name, outcome.violations));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");

    // The same checker on a build that acknowledges stale Completes.
    let planted = Scenario {
        pause_chance: 0.3,
        planted_bug: true,
        ..Scenario::new("planted bug: stale Completes acknowledged", vec![])
    };
    if !chosen(&planted) {
        return;
    }
    let outcome = run(&cluster, scenarios.len(), &planted).await;
    assert!(
        outcome
            .violations
            .iter()
            .any(|violation| violation.property == checker::ONE_HOLDER),
        "the checker missed the planted bug: {:?}",
        outcome.violations
    );
}

/// The body of a client process (`fault/holder.rs`); does nothing when run
/// as a test.
#[test]
#[ignore = "run by the fault suite as a client process of its own"]
fn holder_process() {
    holder::run_if_asked();
}

// -- each property's check fails on a history that breaks it ---------------

fn event(client: usize, call: Call, invoked: u64, completed: u64, answer: Answer) -> Event {
    Event {
        client,
        call,
        invoked: millis(invoked),
        completed: millis(completed),
        answer,
    }
}

fn granted(key: &str, token: u64) -> Answer {
    Answer::Leases(vec![Granted {
        key: key.into(),
        token,
        reconcile: false,
    }])
}

fn claim(key: &str) -> Call {
    Call::Claim {
        key: key.into(),
        conflicting: false,
        compensates: None,
    }
}

fn complete(key: &str, token: u64, result: &str) -> Call {
    Call::Complete {
        key: key.into(),
        token,
        report: Report::Success(result.into()),
    }
}

fn write(key: &str, token: u64, value: &str) -> Call {
    Call::FencedWrite {
        resource: "r".into(),
        key: key.into(),
        token,
        value: value.into(),
    }
}

fn succeeded(key: &str, result: &str) -> Final {
    let mut end = Final::default();
    end.operations
        .insert(key.into(), ("succeeded".into(), result.into(), None));
    end
}

fn properties(violations: &[Violation]) -> Vec<&'static str> {
    let mut found: Vec<_> = violations
        .iter()
        .map(|violation| violation.property)
        .collect();
    found.dedup();
    found
}

#[test]
fn a_consistent_history_passes() {
    let events = [
        event(0, claim("k"), 0, 10, granted("k", 1)),
        event(0, write("k", 1, "v1"), 20, 30, Answer::Accepted),
        event(0, complete("k", 1, "ok"), 40, 50, Answer::Accepted),
    ];
    let mut end = succeeded("k", "ok");
    end.resources.insert("r".into(), (1, b"v1".to_vec()));
    assert_eq!(checker::check(&events, &end), vec![]);
}

#[test]
fn a_complete_accepted_after_a_takeover_breaks_one_holder() {
    let events = [
        event(0, claim("k"), 0, 10, granted("k", 1)),
        event(1, Call::ClaimDue, 2_000, 2_010, granted("k", 2)),
        event(0, complete("k", 1, "stale"), 2_500, 2_510, Answer::Accepted),
    ];
    let found = properties(&checker::check(&events, &succeeded("k", "stale")));
    assert!(found.contains(&checker::ONE_HOLDER), "{found:?}");
}

#[test]
fn a_token_reused_or_going_backwards_breaks_tokens() {
    let events = [
        event(0, claim("a"), 0, 10, granted("a", 5)),
        event(1, claim("b"), 20, 30, granted("b", 5)),
        event(2, claim("c"), 40, 50, granted("c", 3)),
    ];
    let found = checker::check(&events, &Final::default());
    assert_eq!(
        found
            .iter()
            .filter(|v| v.property == checker::TOKENS)
            .count(),
        3,
        "{found:?}"
    );
}

#[test]
fn a_holder_resuming_its_own_live_lease_is_not_a_new_issue() {
    // A Claim by the live holder answers its lease again: same token, later.
    let events = [
        event(0, claim("a"), 0, 10, granted("a", 5)),
        event(1, claim("b"), 20, 30, granted("b", 9)),
        event(0, claim("a"), 40, 50, granted("a", 5)),
    ];
    assert_eq!(checker::check(&events, &Final::default()), vec![]);
}

#[test]
fn a_superseded_write_or_a_wrong_final_value_breaks_fencing() {
    let events = [
        event(0, write("k", 7, "new"), 0, 10, Answer::Accepted),
        event(1, write("j", 6, "old"), 20, 30, Answer::Accepted),
    ];
    let mut end = Final::default();
    end.resources.insert("r".into(), (6, b"old".to_vec()));
    let found = checker::check(&events, &end);
    assert_eq!(
        found
            .iter()
            .filter(|v| v.property == checker::FENCING)
            .count(),
        2,
        "{found:?}"
    );
}

#[test]
fn a_replay_or_an_acknowledgement_the_database_contradicts_is_caught() {
    let events = [
        event(0, complete("k", 1, "ok"), 0, 10, Answer::Accepted),
        event(
            1,
            claim("k"),
            20,
            30,
            Answer::Replayed {
                key: "k".into(),
                status: "succeeded".into(),
                result: b"ok".to_vec(),
                failure_code: None,
            },
        ),
    ];
    let found = properties(&checker::check(&events, &succeeded("k", "different")));
    assert!(
        found.contains(&checker::DURABLE) && found.contains(&checker::REPLAYS),
        "{found:?}"
    );
}

#[test]
fn a_re_execution_before_a_reconcile_breaks_unknown() {
    let mut end = succeeded("k", "ok");
    end.executions.insert(
        "k".into(),
        vec![
            (1, "first".into(), "unknown".into()),
            (2, "retry".into(), "succeeded".into()),
        ],
    );
    assert_eq!(
        properties(&checker::check(&[], &end)),
        vec![checker::UNKNOWN]
    );
    end.executions.insert(
        "k".into(),
        vec![
            (1, "first".into(), "unknown".into()),
            (2, "reconcile".into(), "retryable".into()),
            (3, "retry".into(), "succeeded".into()),
        ],
    );
    assert_eq!(checker::check(&[], &end), vec![]);
}

#[test]
fn a_stranded_operation_breaks_settled() {
    let mut end = Final::default();
    end.stranded.push(("k".into(), "in_progress".into()));
    assert_eq!(
        properties(&checker::check(&[], &end)),
        vec![checker::SETTLED]
    );
}

#[test]
fn a_compensation_of_an_unsettled_or_re_executed_original_breaks_unknown() {
    let mut end = Final::default();
    end.compensations.push(checker::Compensation {
        key: "undo-k".into(),
        original: "k".into(),
        original_status: "unknown".into(),
        original_settled_before: false,
        original_executions_after: 0,
    });
    assert_eq!(
        properties(&checker::check(&[], &end)),
        vec![checker::UNKNOWN]
    );
    end.compensations[0].original_status = "succeeded".into();
    end.compensations[0].original_settled_before = true;
    assert_eq!(checker::check(&[], &end), vec![]);
    end.compensations[0].original_executions_after = 1;
    assert_eq!(
        properties(&checker::check(&[], &end)),
        vec![checker::UNKNOWN]
    );
}

#[test]
fn an_operators_resolution_the_database_contradicts_breaks_durability() {
    let resolve = Call::Admin {
        key: "k".into(),
        action: fault::history::AdminAction::Resolve,
    };
    let events = [event(0, resolve, 0, 10, Answer::Accepted)];
    let resolved = String::from_utf8(fault::history::resolved_result("k")).unwrap();
    assert_eq!(checker::check(&events, &succeeded("k", &resolved)), vec![]);
    assert_eq!(
        properties(&checker::check(&events, &succeeded("k", "other"))),
        vec![checker::DURABLE]
    );
}

#[test]
fn a_holder_resuming_a_lease_whose_grant_was_lost_is_not_a_new_issue() {
    // Client 0's first Claim of "a" was issued token 5 but its answer was lost;
    // its next Claim resumes that lease after token 9 was handed out elsewhere.
    let lost = Answer::Failed {
        code: tonic::Code::Unavailable,
        reason: String::new(),
    };
    let events = [
        event(0, claim("a"), 0, 10, lost),
        event(1, claim("b"), 20, 30, granted("b", 9)),
        event(0, claim("a"), 40, 50, granted("a", 5)),
    ];
    assert_eq!(checker::check(&events, &Final::default()), vec![]);
    // Without the Claim in doubt, the same grant is a token going backwards.
    let found = checker::check(&events[1..], &Final::default());
    assert_eq!(properties(&found), vec![checker::TOKENS]);
}
