//! A restore from backup, for real: a base backup with `pg_basebackup`, the
//! WAL archived, a workload before and after a point in time, then the
//! database restored to that point (`recovery_target_time`) and the registry
//! started on it again. The restored sequence is behind tokens already
//! handed out (checked first, so the hazard is shown to be real), and yet:
//!
//! - no token is issued twice, and every token after the restore is above
//!   every token before it (the first draw lifts the sequence to the clock);
//! - a resource outside the database that keeps its own fence accepts the
//!   new holders and refuses a holder from before the restore;
//! - after `opreg-server restore`, every operation unfinished at the restore
//!   point answers RECONCILE, never ACQUIRED, and each has an audit row;
//!   what had finished still replays.

mod common;
mod fault;

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Client, claim_request, complete_request, retryable, success, unknown, write_request};
use fault::{Replica, free_address};
use opreg_client::proto::ClaimOutcome;
use opreg_embedded::{EmbeddedOptions, EmbeddedPostgres};
use sqlx::{Connection, PgConnection};

const NAMESPACE: &str = "restore";
const DATABASE: &str = "opreg";
/// The longest any step of the restore may take before the test gives up.
const PATIENCE: Duration = Duration::from_secs(60);

/// A resource outside the database (the article's remote service) that keeps
/// its own fence: the highest token that wrote. A lower one is superseded.
#[derive(Default)]
struct RemoteFence {
    fence: u64,
}

impl RemoteFence {
    fn write(&mut self, token: u64) -> bool {
        if token < self.fence {
            return false;
        }
        self.fence = token;
        true
    }
}

/// The cluster under test: its directory, the archive, and PostgreSQL
/// running on the test's own thread (it stops when dropped).
struct Database {
    root: PathBuf,
    running: Option<EmbeddedPostgres>,
}

impl Database {
    fn options(&self) -> EmbeddedOptions {
        EmbeddedOptions {
            root: self.root.clone(),
            bin_dir: None,
            ephemeral: false,
        }
    }

    fn start(&mut self) {
        let started = tokio::task::block_in_place(|| EmbeddedPostgres::start(&self.options()));
        self.running = Some(started.expect("PostgreSQL starts"));
    }

    fn stop(&mut self) {
        // A fast shutdown: the data directory is thrown away next anyway.
        drop(self.running.take());
    }

    fn pgdata(&self) -> PathBuf {
        self.root.join("pgdata")
    }

    fn archive(&self) -> PathBuf {
        self.root.join("archive")
    }

    fn url(&self) -> String {
        format!(
            "postgres://{}@localhost/{DATABASE}?host={}",
            opreg_embedded::SUPERUSER,
            self.root.join("run").display()
        )
    }

    async fn connect(&self) -> PgConnection {
        self.connect_to(DATABASE).await
    }

    async fn connect_to(&self, database: &str) -> PgConnection {
        let options = self.running.as_ref().unwrap().connect_options(database);
        PgConnection::connect_with(&options).await.unwrap()
    }

    /// A command as the user PostgreSQL runs as (the owner of its data).
    fn as_postgres(&self, program: &str) -> Command {
        // The directory of the real `postgres` (PATH may hold only links to
        // initdb and postgres), where the client tools of its version are.
        let postgres = opreg_embedded::find_bin_dir()
            .expect("PostgreSQL binaries")
            .join("postgres");
        let bin = std::fs::canonicalize(postgres).unwrap();
        let bin = bin.parent().unwrap();
        let owner = std::fs::metadata(self.pgdata()).unwrap();
        let mut command = Command::new(bin.join(program));
        if opreg_embedded::is_root() {
            command.uid(owner.uid()).gid(owner.gid()).current_dir("/");
        }
        command
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn run(command: &mut Command) {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("{command:?}: {error}"));
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn copy_tree(from: &Path, to: &Path) {
    run(Command::new("cp").arg("-a").arg(from).arg(to));
}

fn connect(address: std::net::SocketAddr) -> Client {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .timeout(Duration::from_secs(10))
        .connect_lazy();
    Client::new(channel)
}

/// Claims `key`; the answer's outcome and its lease's token (0 without one).
async fn claim(client: &mut Client, key: &str) -> (ClaimOutcome, u64) {
    let request = claim_request(NAMESPACE, key, "worker", serde_json::json!({ "key": key }));
    let answer = common::claim(client, request).await;
    let token = answer.lease.as_ref().map_or(0, |lease| lease.fencing_token);
    (common::outcome(&answer), token)
}

/// Fails the test once `started` is [`PATIENCE`] ago; else waits 100 ms.
async fn patiently(started: std::time::Instant, what: &str) {
    assert!(
        started.elapsed() < PATIENCE,
        "{what}: not after {PATIENCE:?}"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// `opreg-server restore` against the database; its exit status and output.
fn run_restore(db: &Database) -> (bool, String) {
    let output = tokio::task::block_in_place(|| {
        Command::new(env!("CARGO_BIN_EXE_opreg-server"))
            .env_clear()
            .env("OPREG_DATABASE_URL", db.url())
            .args([
                "restore",
                "--operator",
                "alice",
                "--reason",
                "restored to before the incident",
            ])
            .output()
            .unwrap()
    });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_to_an_earlier_point_never_reissues_tokens_and_reconciles_what_was_unfinished() {
    let root = std::env::temp_dir().join(format!("opreg-restore-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut db = Database {
        root,
        running: None,
    };
    db.start();
    // Every finished WAL segment goes to the archive, as a backup tool would keep it.
    std::fs::create_dir_all(db.archive()).unwrap();
    let owner = std::fs::metadata(db.pgdata()).unwrap();
    std::os::unix::fs::chown(db.archive(), Some(owner.uid()), Some(owner.gid())).unwrap();
    {
        let mut admin = db.connect_to("postgres").await;
        for statement in [
            "ALTER SYSTEM SET archive_mode = on".to_owned(),
            format!(
                "ALTER SYSTEM SET archive_command = 'cp %p {}/%f'",
                db.archive().display()
            ),
            format!("CREATE DATABASE {DATABASE}"),
        ] {
            sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
                .execute(&mut admin)
                .await
                .unwrap();
        }
    }
    db.stop();
    db.start();

    let address = free_address();
    let log = db.root.join("server.log");
    let mut server = tokio::task::block_in_place(|| Replica::start(address, &db.url(), &[], log));
    let mut client = connect(address);
    let mut issued = BTreeSet::new();
    let mut remote = RemoteFence::default();

    // The base backup, taken while the registry serves.
    let (_, token) = claim(&mut client, "before-backup").await;
    issued.insert(token);
    let backup = db.root.join("backup");
    tokio::task::block_in_place(|| {
        run(db
            .as_postgres("pg_basebackup")
            .arg("-h")
            .arg(db.root.join("run"))
            .args(["-U", opreg_embedded::SUPERUSER, "-X", "stream", "-D"])
            .arg(&backup));
    });

    // Before the restore point: one finished, one unknown, one retry
    // scheduled, leases still running (one of them wrote, to the registry's
    // resource and to the remote).
    let (_, token) = claim(&mut client, "done").await;
    issued.insert(token);
    client
        .complete(complete_request(NAMESPACE, "done", token, success(b"done")))
        .await
        .unwrap();
    let (_, token) = claim(&mut client, "unknown").await;
    issued.insert(token);
    client
        .complete(complete_request(
            NAMESPACE,
            "unknown",
            token,
            unknown("ref-1"),
        ))
        .await
        .unwrap();
    let (_, token) = claim(&mut client, "retrying").await;
    issued.insert(token);
    client
        .complete(complete_request(
            NAMESPACE,
            "retrying",
            token,
            retryable(None),
        ))
        .await
        .unwrap();
    let running: Vec<String> = (0..5).map(|n| format!("running-{n}")).collect();
    for key in running.iter().chain([&"finishes-later".to_owned()]) {
        let (outcome, token) = claim(&mut client, key).await;
        assert_eq!(outcome, ClaimOutcome::Acquired);
        issued.insert(token);
    }
    let (_, early_writer) = claim(&mut client, "writer-before").await;
    issued.insert(early_writer);
    assert!(remote.write(early_writer));
    client
        .fenced_write(write_request(
            NAMESPACE,
            "writer-before",
            early_writer,
            b"before",
        ))
        .await
        .unwrap();

    tokio::time::sleep(Duration::from_millis(300)).await;
    let restore_point: String = sqlx::query_scalar("SELECT clock_timestamp()::text")
        .fetch_one(&mut db.connect().await)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // After it: what the restore will lose. Enough tokens that the sequence's
    // logged look-ahead (32) cannot cover them.
    for n in 0..100 {
        let key = format!("after-{n}");
        let (_, token) = claim(&mut client, &key).await;
        issued.insert(token);
        client
            .complete(complete_request(NAMESPACE, &key, token, success(b"done")))
            .await
            .unwrap();
    }
    // The holder resumes its own lease: the same token.
    let (_, token) = claim(&mut client, "finishes-later").await;
    client
        .complete(complete_request(
            NAMESPACE,
            "finishes-later",
            token,
            success(b"done"),
        ))
        .await
        .unwrap();
    let (_, late_writer) = claim(&mut client, "writer-after").await;
    issued.insert(late_writer);
    assert!(remote.write(late_writer));
    client
        .fenced_write(write_request(
            NAMESPACE,
            "writer-after",
            late_writer,
            b"after",
        ))
        .await
        .unwrap();
    let highest_issued = *issued.last().unwrap();

    // The WAL up to here reaches the archive; then everything stops.
    {
        let mut admin = db.connect().await;
        let segment: String = sqlx::query_scalar("SELECT pg_walfile_name(pg_switch_wal())")
            .fetch_one(&mut admin)
            .await
            .unwrap();
        let archived = db.archive().join(&segment);
        let started = std::time::Instant::now();
        while !archived.exists() {
            patiently(started, "the WAL archived").await;
        }
    }
    server.kill();
    db.stop();

    // The restore: the base backup, the archive replayed to the restore
    // point, where the recovery pauses until it is told to end.
    std::fs::remove_dir_all(db.pgdata()).unwrap();
    copy_tree(&backup, &db.pgdata());
    let recovery = format!(
        "restore_command = 'cp {archive}/%f %p'\n\
         recovery_target_time = '{restore_point}'\n\
         recovery_target_action = 'pause'\n",
        archive = db.archive().display()
    );
    let auto_conf = db.pgdata().join("postgresql.auto.conf");
    let mut conf = std::fs::read_to_string(&auto_conf).unwrap();
    conf.push_str(&recovery);
    std::fs::write(&auto_conf, conf).unwrap();
    std::fs::write(db.pgdata().join("recovery.signal"), "").unwrap();
    for file in [auto_conf, db.pgdata().join("recovery.signal")] {
        std::os::unix::fs::chown(file, Some(owner.uid()), Some(owner.gid())).unwrap();
    }
    db.start();
    let mut check = db.connect().await;
    let started = std::time::Instant::now();
    while sqlx::query_scalar::<_, String>("SELECT pg_get_wal_replay_pause_state()")
        .fetch_one(&mut check)
        .await
        .unwrap()
        != "paused"
    {
        patiently(started, "the recovery paused at its target").await;
    }
    let (lost, sequence_at): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM operations WHERE operation_key LIKE 'after-%'),
                (SELECT last_value FROM fencing_tokens)",
    )
    .fetch_one(&mut check)
    .await
    .unwrap();
    assert_eq!(lost, 0, "the restore went back before the later operations");
    // The hazard is real: a bare nextval would hand out tokens already issued.
    assert!(
        u64::try_from(sequence_at).unwrap() < highest_issued,
        "the restored sequence ({sequence_at}) is behind the tokens issued ({highest_issued})"
    );
    // The restore mode refuses a database that is still recovering.
    let (succeeded, report) = run_restore(&db);
    assert!(
        !succeeded && report.contains("still in recovery"),
        "{report}"
    );
    sqlx::query("SELECT pg_wal_replay_resume()")
        .execute(&mut check)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    while sqlx::query_scalar::<_, bool>("SELECT pg_is_in_recovery()")
        .fetch_one(&mut check)
        .await
        .unwrap()
    {
        patiently(started, "the promotion").await;
    }

    // The first tokens after the restore, before the restore mode has run
    // (which lifts too): through the server, and through the SQL door.
    tokio::task::block_in_place(|| server.restart());
    let mut client = connect(address);
    let (outcome, fresh) = claim(&mut client, "fresh").await;
    assert_eq!(outcome, ClaimOutcome::Acquired);
    sqlx::query("SELECT opreg_sql.grant_namespace(current_user::regrole, $1)")
        .bind(NAMESPACE)
        .execute(&mut check)
        .await
        .unwrap();
    let door: i64 = sqlx::query_scalar(
        r#"SELECT fencing_token FROM opreg_sql.claim($1, 'door', '{"key": "door"}', 'door-caller')"#,
    )
    .bind(NAMESPACE)
    .fetch_one(&mut check)
    .await
    .unwrap();
    let mut after = vec![fresh, u64::try_from(door).unwrap()];
    server.kill();

    // The restore mode, before traffic: the nine operations unfinished at the
    // restore point, and the two claimed since.
    let (succeeded, report) = run_restore(&db);
    assert!(succeeded, "{report}");
    assert!(report.contains("made UNKNOWN: 11 operations"), "{report}");
    assert!(report.contains("restore point: 20"), "{report}");
    let audited: Vec<(String, String, String, String)> = sqlx::query_as(
        "SELECT operation_key, status_before, operator, reason FROM audit_entries
         WHERE action = 'restore' ORDER BY operation_key",
    )
    .fetch_all(&mut check)
    .await
    .unwrap();
    let mut unfinished: Vec<&str> = running.iter().map(String::as_str).collect();
    unfinished.extend([
        "before-backup",
        "door",
        "finishes-later",
        "fresh",
        "retrying",
        "writer-before",
    ]);
    unfinished.sort_unstable();
    let expected: Vec<(String, String, String, String)> = unfinished
        .iter()
        .map(|key| {
            let before = if *key == "retrying" {
                "retry_scheduled"
            } else {
                "in_progress"
            };
            (
                (*key).to_owned(),
                before.to_owned(),
                "alice".to_owned(),
                "restored to before the incident".to_owned(),
            )
        })
        .collect();
    assert_eq!(audited, expected);
    // Run again, it finds nothing unfinished.
    let (succeeded, report) = run_restore(&db);
    assert!(
        succeeded && report.contains("made UNKNOWN: 0 operations"),
        "{report}"
    );

    tokio::task::block_in_place(|| server.restart());
    let mut client = connect(address);
    // Every operation unfinished at the restore point reconciles, and the
    // one already unknown still does; none is executed again blindly.
    for key in unfinished.iter().chain(&["unknown"]) {
        let (outcome, token) = claim(&mut client, key).await;
        assert_eq!(outcome, ClaimOutcome::Reconcile, "{key}");
        after.push(token);
    }
    assert_eq!(claim(&mut client, "done").await.0, ClaimOutcome::Replayed);
    let (outcome, newest) = claim(&mut client, "fresh-after-restore").await;
    assert_eq!(outcome, ClaimOutcome::Acquired);
    after.push(newest);

    // No token twice; every new one above every earlier one.
    for token in &after {
        assert!(
            *token > highest_issued,
            "token {token} after the restore, {highest_issued} before it"
        );
        assert!(issued.insert(*token), "token {token} issued twice");
    }
    // The holder from before the restore point is superseded: the registry
    // refuses its Complete, and its fenced resource takes the new holder and
    // refuses the old; so does a resource outside the database that keeps
    // its own fence (it saw the later writer, which the database forgot).
    let stale = client
        .complete(complete_request(
            NAMESPACE,
            "writer-before",
            early_writer,
            success(b"late"),
        ))
        .await;
    assert!(stale.is_err(), "{stale:?}");
    client
        .fenced_write(write_request(
            NAMESPACE,
            "fresh-after-restore",
            newest,
            b"new",
        ))
        .await
        .unwrap();
    for old in [early_writer, late_writer] {
        let refused = client
            .fenced_write(write_request(NAMESPACE, "writer-before", old, b"old"))
            .await;
        assert!(refused.is_err(), "{refused:?}");
    }
    assert!(remote.write(newest), "a new holder refused by the remote");
    assert!(!remote.write(late_writer));
    assert!(!remote.write(early_writer));
    server.kill();
}
