//! The test harness: one PostgreSQL per test binary (embedded, or the server
//! at `DATABASE_URL`), a fresh database per test, and the real opreg server on
//! 127.0.0.1:0 reached through the generated client.
#![allow(dead_code)]

pub mod accounts;
pub mod pki;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use opreg_client::proto::{self as pb, ClaimOutcome};
use opreg_client::{OperationAdminClient, OperationRegistryClient, error_reason};
use opreg_embedded::{EmbeddedOptions, EmbeddedPostgres};
use opreg_server::app::Application;
use opreg_server::config::Config;
use opreg_server::store;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Connection, PgConnection};
use tonic::transport::Channel;

pub type Client = OperationRegistryClient<Channel>;
pub type Admin = OperationAdminClient<Channel>;

/// A running server over its own database.
pub struct TestApp {
    pub client: Client,
    pub admin: Admin,
    pub endpoint: String,
    pub metrics_addr: std::net::SocketAddr,
    /// Direct access to the test's database, for assertions.
    pub db: PgPool,
    pub db_options: PgConnectOptions,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

pub async fn spawn_app_with(configure: impl FnOnce(&mut Config)) -> TestApp {
    let db_options = fresh_database().await;
    let mut config = Config::defaults();
    config.listeners.listen_addr = "127.0.0.1:0".parse().unwrap();
    config.listeners.metrics_addr = "127.0.0.1:0".parse().unwrap();
    configure(&mut config);
    let pool = first_connection(&db_options, &config).await;
    store::MIGRATOR.run(&pool).await.unwrap();
    serve(&config, pool, db_options).await
}

/// The server's pool over a database just created. Its first connection may
/// take longer than the server's short acquire timeout on a loaded machine
/// (the cluster has just started, or just copied the template), so that one
/// wait alone is retried.
async fn first_connection(options: &PgConnectOptions, config: &Config) -> PgPool {
    let mut attempts = 0;
    loop {
        match store::connect(options.clone(), &config.database.pool_settings()).await {
            Err(sqlx::Error::PoolTimedOut) if attempts < 5 => attempts += 1,
            connected => return connected.unwrap(),
        }
    }
}

/// The real server over a database that cannot be reached: nothing listens on
/// the socket its pool points at. `configure` adjusts the defaults.
pub async fn spawn_app_without_database(configure: impl FnOnce(&mut Config)) -> TestApp {
    let mut config = Config::defaults();
    config.listeners.listen_addr = "127.0.0.1:0".parse().unwrap();
    config.listeners.metrics_addr = "127.0.0.1:0".parse().unwrap();
    configure(&mut config);
    let nowhere = PgConnectOptions::new()
        .socket(std::env::temp_dir().join("opreg-no-such-socket"))
        .username("opreg")
        .database("opreg");
    let pool = PgPoolOptions::new()
        .acquire_timeout(config.database.pool_acquire_timeout)
        .connect_lazy_with(nowhere.clone());
    serve(&config, pool, nowhere).await
}

/// The URL of the test's database, for a server started as a process.
pub fn database_url(options: &PgConnectOptions) -> String {
    let socket = options
        .get_socket()
        .expect("the test database is on a socket");
    format!(
        "postgres://{}@localhost/{}?host={}",
        options.get_username(),
        options.get_database().unwrap(),
        socket.display()
    )
}

/// A loopback port nothing listens on (at the time of asking).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An operation and its whole history.
pub async fn lookup_history(client: &mut Client, namespace: &str, key: &str) -> pb::LookupResponse {
    client
        .lookup(pb::LookupRequest {
            namespace: namespace.into(),
            operation_key: key.into(),
            include_executions: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

/// Serves `pool` with `config`; the database options are kept for assertions.
pub async fn serve(config: &Config, pool: PgPool, db_options: PgConnectOptions) -> TestApp {
    let app = Application::build(config, pool).await.unwrap();
    let scheme = if config.listeners.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    let endpoint = format!("{scheme}://{}", app.local_addr().unwrap());
    let metrics_addr = app.metrics_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(app.serve(async {
        let _ = stopped.await;
    }));
    // Lazy: a server that speaks TLS or requires credentials is reached
    // through clients the test builds with them.
    let plain = tonic::transport::Endpoint::from_shared(endpoint.clone())
        .unwrap()
        .connect_lazy();
    let client = OperationRegistryClient::new(plain.clone());
    let admin = OperationAdminClient::new(plain);
    let db = PgPoolOptions::new()
        .max_connections(4)
        .connect_lazy_with(db_options.clone());
    TestApp {
        client,
        admin,
        endpoint,
        metrics_addr,
        db,
        db_options,
        stop: Some(stop),
    }
}

impl TestApp {
    /// Starts the server's graceful shutdown, as SIGTERM does.
    pub fn begin_shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// The gRPC health status of `service` ("" for the server), on a new
    /// connection; `None` when the server does not answer.
    pub async fn health(
        &self,
        service: &str,
    ) -> Option<tonic_health::pb::health_check_response::ServingStatus> {
        let channel = tonic::transport::Endpoint::from_shared(self.endpoint.clone())
            .ok()?
            .connect()
            .await
            .ok()?;
        let answer = tonic_health::pb::health_client::HealthClient::new(channel)
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .ok()?;
        Some(answer.into_inner().status())
    }

    /// Polls the registry service's health until it is `expected`, for at
    /// most `within`; how long that took.
    pub async fn until_health(
        &self,
        expected: tonic_health::pb::health_check_response::ServingStatus,
        within: Duration,
    ) -> Duration {
        let started = std::time::Instant::now();
        while self.health("opreg.v1.OperationRegistry").await != Some(expected) {
            assert!(
                started.elapsed() < within,
                "health never became {expected:?} within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        started.elapsed()
    }

    /// Locks `key`'s operation row from a connection of its own, as a slow
    /// transaction elsewhere would, until the lock is released.
    pub async fn lock_row(&self, key: &str) -> RowLock {
        let mut connection = PgConnection::connect_with(&self.db_options).await.unwrap();
        sqlx::raw_sql("BEGIN")
            .execute(&mut connection)
            .await
            .unwrap();
        sqlx::query("SELECT 1 FROM operations WHERE operation_key = $1 FOR UPDATE")
            .bind(key)
            .execute(&mut connection)
            .await
            .unwrap();
        RowLock(connection)
    }

    /// Deadlocks PostgreSQL has detected in this database.
    pub async fn deadlocks(&self) -> i64 {
        self.count("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
            .await
    }

    /// Another client with its own HTTP/2 connection.
    pub async fn new_client(&self) -> Client {
        opreg_client::connect(self.endpoint.clone()).await.unwrap()
    }

    pub async fn count(&self, sql: &'static str) -> i64 {
        sqlx::query_scalar(sql).fetch_one(&self.db).await.unwrap()
    }

    /// Tokens drawn since the first draw lifted the sequence to the clock
    /// (`fencing_token_floor`), the first one included.
    pub async fn tokens_drawn(&self) -> i64 {
        self.count(
            "SELECT t.last_value - f.last_value FROM fencing_tokens AS t, fencing_token_floor AS f",
        )
        .await
    }

    /// Rows in every table, to prove a refused request wrote nothing.
    pub async fn row_counts(&self) -> (i64, i64, i64) {
        sqlx::query_as(
            "SELECT (SELECT count(*) FROM operations), (SELECT count(*) FROM executions),
                    (SELECT count(*) FROM resources)",
        )
        .fetch_one(&self.db)
        .await
        .unwrap()
    }

    /// Inserts `key`'s operation (parameters `{"amount": 100}`) on a connection
    /// of its own and leaves the transaction open, as a racing registration
    /// elsewhere would.
    pub async fn uncommitted_registration(
        &self,
        namespace: &str,
        key: &str,
        owner: &str,
    ) -> PgConnection {
        let mut tx = PgConnection::connect_with(&self.db_options).await.unwrap();
        sqlx::raw_sql("BEGIN").execute(&mut tx).await.unwrap();
        let digest = opreg_server::domain::parameters::Fingerprint::from_struct(
            &opreg_client::parameters(serde_json::json!({"amount": 100})),
        )
        .unwrap();
        sqlx::query(
            "INSERT INTO operations (namespace, operation_key, status, parameters_digest, parameters_canonical,
                 fencing_token, lease_owner, lease_expires_at, attempts, max_attempts, initial_backoff_us,
                 max_backoff_us, deadline_at, created_at, updated_at)
             VALUES ($1, $2, 'in_progress', $3, $4, next_fencing_token(), $5,
                 clock_timestamp() + interval '30 seconds', 1, 5, 1000000, 300000000,
                 clock_timestamp() + interval '1 day', clock_timestamp(), clock_timestamp())",
        )
        .bind(namespace)
        .bind(key)
        .bind(&digest.digest)
        .bind(&digest.canonical)
        .bind(owner)
        .execute(&mut tx)
        .await
        .unwrap();
        tx
    }

    /// Waits until one of the server's connections to this database is waiting on
    /// a lock, as `pg_stat_activity` shows it: the race is observed, not assumed.
    pub async fn observe_lock_wait(&self) {
        self.observe_lock_waits(Some("opreg"), 1).await;
    }

    /// Waits until `waiters` sessions of this database (of `application`, or
    /// of any) are waiting on a lock, as `pg_stat_activity` shows them.
    pub async fn observe_lock_waits(&self, application: Option<&str>, waiters: i64) {
        let database = self.db_options.get_database().unwrap().to_owned();
        for _ in 0..500 {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = $1 AND wait_event_type = 'Lock'
                   AND ($2::text IS NULL OR application_name = $2)",
            )
            .bind(&database)
            .bind(application)
            .fetch_one(&self.db)
            .await
            .unwrap();
            if waiting >= waiters {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("fewer than {waiters} sessions were observed waiting on a lock");
    }

    /// Makes the current lease of an operation expire now, by the database clock.
    pub async fn expire_lease(&self, namespace: &str, key: &str) {
        let updated = sqlx::query(
            "UPDATE operations SET lease_expires_at = clock_timestamp() - interval '1 millisecond'
             WHERE namespace = $1 AND operation_key = $2 AND status = 'in_progress'",
        )
        .bind(namespace)
        .bind(key)
        .execute(&self.db)
        .await
        .unwrap();
        assert_eq!(updated.rows_affected(), 1, "no live lease to expire");
    }

    /// Moves a scheduled retry `by` later than now, by the database clock.
    pub async fn push_due_time(&self, key: &str, by: Duration) {
        sqlx::query(
            "UPDATE operations SET next_attempt_at = clock_timestamp() + $2 * interval '1 second'
             WHERE operation_key = $1 AND status = 'retry_scheduled'",
        )
        .bind(key)
        .bind(by.as_secs_f64())
        .execute(&self.db)
        .await
        .unwrap();
    }

    /// Makes a scheduled retry due now.
    pub async fn make_retry_due(&self, namespace: &str, key: &str) {
        let updated = sqlx::query(
            "UPDATE operations SET next_attempt_at = clock_timestamp() - interval '1 millisecond'
             WHERE namespace = $1 AND operation_key = $2 AND status = 'retry_scheduled'",
        )
        .bind(namespace)
        .bind(key)
        .execute(&self.db)
        .await
        .unwrap();
        assert_eq!(updated.rows_affected(), 1, "no scheduled retry");
    }
}

/// A row lock held by an open transaction outside the server.
pub struct RowLock(PgConnection);

impl RowLock {
    pub async fn release(mut self) {
        sqlx::raw_sql("ROLLBACK")
            .execute(&mut self.0)
            .await
            .unwrap();
    }
}

/// A claim request with the usual fields filled.
pub fn claim_request(
    namespace: &str,
    key: &str,
    owner: &str,
    parameters: serde_json::Value,
) -> pb::ClaimRequest {
    pb::ClaimRequest {
        namespace: namespace.into(),
        operation_key: key.into(),
        fingerprint: Some(pb::claim_request::Fingerprint::Parameters(
            opreg_client::parameters(parameters),
        )),
        owner: owner.into(),
        execution_id: format!("run-{owner}"),
        ..Default::default()
    }
}

pub async fn claim(client: &mut Client, request: pb::ClaimRequest) -> pb::ClaimResponse {
    client.claim(request).await.unwrap().into_inner()
}

pub fn outcome(response: &pb::ClaimResponse) -> ClaimOutcome {
    ClaimOutcome::try_from(response.outcome).unwrap()
}

pub fn token(response: &pb::ClaimResponse) -> u64 {
    response.lease.as_ref().expect("a lease").fencing_token
}

pub fn lookup_request(namespace: &str, key: &str) -> pb::LookupRequest {
    pb::LookupRequest {
        namespace: namespace.into(),
        operation_key: key.into(),
        ..Default::default()
    }
}

pub fn complete_request(
    namespace: &str,
    key: &str,
    token: u64,
    outcome: pb::complete_request::Outcome,
) -> pb::CompleteRequest {
    pb::CompleteRequest {
        namespace: namespace.into(),
        operation_key: key.into(),
        fencing_token: token,
        outcome: Some(outcome),
    }
}

pub fn success(result: &[u8]) -> pb::complete_request::Outcome {
    pb::complete_request::Outcome::Success(pb::Success {
        result: result.to_vec(),
        result_ref: String::new(),
    })
}

pub fn retryable(retry_after: Option<Duration>) -> pb::complete_request::Outcome {
    pb::complete_request::Outcome::Retryable(pb::RetryableError {
        error_class: "downstream_timeout".into(),
        message: "connect timed out".into(),
        retry_after: retry_after.map(|d| prost_types::Duration {
            seconds: d.as_secs().try_into().unwrap(),
            nanos: d.subsec_nanos().try_into().unwrap(),
        }),
    })
}

/// A Renew of `key`'s lease by `owner` with the server's default TTL.
pub fn renew_request(namespace: &str, key: &str, owner: &str, token: u64) -> pb::RenewRequest {
    pb::RenewRequest {
        namespace: namespace.into(),
        operation_key: key.into(),
        owner: owner.into(),
        fencing_token: token,
        lease_ttl: None,
    }
}

/// A FencedWrite of resource `account:1` under `key`'s token.
pub fn write_request(
    namespace: &str,
    key: &str,
    token: u64,
    value: &[u8],
) -> pb::FencedWriteRequest {
    pb::FencedWriteRequest {
        namespace: namespace.into(),
        resource: "account:1".into(),
        operation_key: key.into(),
        fencing_token: token,
        value: value.to_vec(),
    }
}

/// Registers `key` and completes its first attempt with `outcome`; returns the token.
pub async fn settle(
    client: &mut Client,
    namespace: &str,
    key: &str,
    outcome: pb::complete_request::Outcome,
) -> u64 {
    let claimed = claim(
        client,
        claim_request(namespace, key, "setup", serde_json::json!({"key": key})),
    )
    .await;
    let token = token(&claimed);
    client
        .complete(complete_request(namespace, key, token, outcome))
        .await
        .unwrap();
    token
}

/// A retry policy of `max_attempts`, with short backoffs and a day's deadline.
pub fn policy(max_attempts: u32) -> pb::RetryPolicy {
    let seconds = |seconds| Some(prost_types::Duration { seconds, nanos: 0 });
    pb::RetryPolicy {
        max_attempts,
        initial_backoff: seconds(1),
        max_backoff: seconds(1),
        deadline: seconds(86_400),
    }
}

/// Pulls due work in `namespace` for `owner`.
pub async fn claim_due(
    client: &mut Client,
    namespace: &str,
    owner: &str,
    limit: u32,
) -> Vec<pb::DueOperation> {
    client
        .claim_due(pb::ClaimDueRequest {
            namespace: namespace.into(),
            owner: owner.into(),
            execution_id: format!("pull-{owner}"),
            lease_ttl: None,
            limit,
        })
        .await
        .unwrap()
        .into_inner()
        .operations
}

pub fn unknown(remote_ref: &str) -> pb::complete_request::Outcome {
    pb::complete_request::Outcome::Unknown(pb::UnknownOutcome {
        remote_ref: remote_ref.into(),
        message: "response lost after send".into(),
    })
}

/// Asserts a failed call's code and `ErrorInfo.reason`; returns the status.
pub fn assert_error<T: std::fmt::Debug>(
    result: Result<T, tonic::Status>,
    code: tonic::Code,
    reason: &str,
) -> tonic::Status {
    let status = result.expect_err("the call should fail");
    assert_eq!(status.code(), code, "{status:?}");
    assert_eq!(error_reason(&status).as_deref(), Some(reason), "{status:?}");
    status
}

pub fn metadata(status: &tonic::Status, key: &str) -> String {
    opreg_client::error_info(status)
        .and_then(|info| info.metadata.get(key).cloned())
        .unwrap_or_default()
}

/// A new, migrated-on-serve database on the shared cluster.
pub async fn fresh_database() -> PgConnectOptions {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let admin = cluster_admin_options();
    let name = format!(
        "opreg_test_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let mut connection = PgConnection::connect_with(&admin).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut connection)
        .await
        .unwrap();
    connection.close().await.unwrap();
    admin.database(&name)
}

/// The cluster's maintenance database: `DATABASE_URL`, or an embedded cluster
/// started once per test binary on a thread that lives as long as the process
/// (PostgreSQL is signalled to stop when that thread, hence the process, exits).
fn cluster_admin_options() -> PgConnectOptions {
    static ADMIN: OnceLock<PgConnectOptions> = OnceLock::new();
    ADMIN
        .get_or_init(|| {
            if let Ok(url) = std::env::var("DATABASE_URL") {
                return url.parse().expect("DATABASE_URL is a PostgreSQL URL");
            }
            let (ready, started) = std::sync::mpsc::channel();
            std::thread::Builder::new()
                .name("embedded-postgres".into())
                .spawn(move || {
                    remove_stale_clusters();
                    let options = EmbeddedOptions {
                        root: std::env::temp_dir()
                            .join(format!("opreg-test-{}", std::process::id())),
                        bin_dir: None,
                        ephemeral: true,
                    };
                    match EmbeddedPostgres::start(&options) {
                        Ok(cluster) => {
                            ready.send(Ok(cluster.connect_options("postgres"))).unwrap();
                            loop {
                                std::thread::park();
                            }
                        }
                        Err(error) => ready.send(Err(error.to_string())).unwrap(),
                    }
                })
                .unwrap();
            started.recv().unwrap().expect("embedded PostgreSQL starts")
        })
        .clone()
}

/// Scratch directories (`opreg-<what>-<pid>`) of test runs whose process is
/// gone: a test binary's PostgreSQL and policy files live until it exits, so
/// each binary clears what the ones before it left.
fn remove_stale_clusters() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("opreg-")
            .and_then(|rest| rest.rsplit_once('-'))
            .and_then(|(_, pid)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let gone = !std::path::Path::new("/proc").join(pid.to_string()).exists();
        if gone && entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

pub fn is_outcome(response: &pb::ClaimResponse, expected: ClaimOutcome) -> bool {
    outcome(response) == expected
}

/// One scrape of `/metrics`: series (name plus sorted labels) to value.
#[derive(Debug, Default)]
pub struct Scrape {
    pub series: std::collections::HashMap<String, f64>,
    pub text: String,
}

impl Scrape {
    /// The value of `name` with exactly `labels` (any order), 0 when absent.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.series
            .get(&series_key(name, labels))
            .copied()
            .unwrap_or(0.0)
    }
}

fn series_key(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}

/// One HTTP/1.1 GET of `path` on the metrics port: the head and the body.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: opreg\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.to_owned(), body.to_owned())
}

/// The status code of `GET path` on the metrics port.
pub async fn http_status(addr: std::net::SocketAddr, path: &str) -> u16 {
    let (head, _) = http_get(addr, path).await;
    head.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap()
}

/// Reads the Prometheus text at `http://{addr}/metrics`.
pub async fn scrape(addr: std::net::SocketAddr) -> Scrape {
    let (head, body) = http_get(addr, "/metrics").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    let mut series = std::collections::HashMap::new();
    for line in body
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
    {
        let (metric, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match metric.split_once('{') {
            Some((name, labels)) => (name, labels.trim_end_matches('}')),
            None => (metric, ""),
        };
        let labels: Vec<(&str, &str)> = labels
            .split("\",")
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let (k, v) = pair.split_once('=').unwrap();
                (k, v.trim_matches('"'))
            })
            .collect();
        series.insert(series_key(name, &labels), value.parse().unwrap());
    }
    Scrape {
        series,
        text: body.to_owned(),
    }
}

/// Two replicas over one new database, each waiting up to 30 s for a pooled
/// connection, so that a heavy race is refused by nothing but the database.
pub async fn two_patient_replicas() -> (TestApp, TestApp) {
    let patient =
        |config: &mut Config| config.database.pool_acquire_timeout = Duration::from_secs(30);
    let first = spawn_app_with(patient).await;
    let second = replica_of(&first, patient).await;
    (first, second)
}

/// Another replica over `first`'s database; `configure` adjusts the defaults.
pub async fn replica_of(first: &TestApp, configure: impl FnOnce(&mut Config)) -> TestApp {
    replica_on(first.db_options.clone(), configure).await
}

/// A replica over a database already migrated, reached through `options`
/// (a proxy in front of it, say); `configure` adjusts the defaults.
pub async fn replica_on(options: PgConnectOptions, configure: impl FnOnce(&mut Config)) -> TestApp {
    let mut config = Config::defaults();
    config.listeners.listen_addr = "127.0.0.1:0".parse().unwrap();
    config.listeners.metrics_addr = "127.0.0.1:0".parse().unwrap();
    configure(&mut config);
    let pool = store::connect(options.clone(), &config.database.pool_settings())
        .await
        .unwrap();
    serve(&config, pool, options).await
}
