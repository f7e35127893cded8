//! PostgreSQL access: every statement the registry runs, one module per table.
//! Callers see domain records and [`RegistryError`]; SQL and driver errors stay here.

pub mod audit;
pub mod console_jobs;
pub mod console_sessions;
pub mod executions;
pub mod fencing_tokens;
pub mod leadership;
pub mod operations;
pub mod replay_notices;
pub mod resources;
pub mod session;
pub mod sql_door;

mod errors;

use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

pub use session::{Pooler, Session, Sessions};

/// The migrations in `migrations/`, embedded at build time. A database a
/// later release has migrated further is served as it is (`ignore_missing`):
/// migrations only expand what earlier releases use (CONTRIBUTING, "Changing
/// the schema"), so during a rolling upgrade a replica of this release can
/// start, or restart, after the next release's migrations ran.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate::Migrator {
    ignore_missing: true,
    ..sqlx::migrate!("../migrations")
};

/// How the registry's connection pool is sized.
#[derive(Clone, Debug)]
pub struct PoolSettings {
    pub max_connections: u32,
    /// How long a request may queue for a connection before UNAVAILABLE.
    pub acquire_timeout: Duration,
    /// Upper bound on any one statement, lock waits included.
    pub statement_timeout: Duration,
    /// Upper bound on one wait for a row lock: a locked row answers its own
    /// callers OPERATION_BUSY soon, instead of holding their connections.
    pub lock_timeout: Duration,
    /// What stands between the pool and PostgreSQL.
    pub pooler: Pooler,
}

/// Whether the store answers, as the health probe last found it. While it
/// does not, calls are refused at once instead of queueing for the pool.
#[derive(Debug)]
pub struct StoreHealth {
    up: std::sync::atomic::AtomicBool,
}

impl Default for StoreHealth {
    fn default() -> Self {
        Self {
            up: std::sync::atomic::AtomicBool::new(true),
        }
    }
}

impl StoreHealth {
    pub fn is_up(&self) -> bool {
        self.up.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn set(&self, up: bool) {
        self.up.store(up, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A connection of its own for a background task (health, gauges), outside
/// the pool, so a busy pool cannot starve it; reopened after a failure.
#[derive(Debug)]
pub struct Dedicated {
    options: PgConnectOptions,
    connection: Option<sqlx::PgConnection>,
}

impl Dedicated {
    pub fn new(options: PgConnectOptions) -> Self {
        Self {
            options,
            connection: None,
        }
    }

    /// The connection, opened within `timeout` if it is not open.
    pub async fn get(&mut self, timeout: Duration) -> Option<&mut sqlx::PgConnection> {
        use sqlx::Connection;
        if self.connection.is_none() {
            let opened =
                tokio::time::timeout(timeout, sqlx::PgConnection::connect_with(&self.options))
                    .await;
            match opened {
                Ok(Ok(connection)) => self.connection = Some(connection),
                Ok(Err(error)) => tracing::debug!(%error, "cannot open a dedicated connection"),
                Err(_) => tracing::debug!("opening a dedicated connection timed out"),
            }
        }
        self.connection.as_mut()
    }

    /// Drops the connection after it failed; the next `get` opens another.
    pub fn reset(&mut self) {
        self.connection = None;
    }
}

/// One probe of the store on `connection`, bounded by `timeout`.
pub async fn probe(connection: &mut sqlx::PgConnection, timeout: Duration) -> bool {
    let _timer = QueryTimer::start("probe");
    // The simple protocol: one round, safe behind a transaction pooler.
    matches!(
        tokio::time::timeout(timeout, sqlx::raw_sql("SELECT 1").execute(connection)).await,
        Ok(Ok(_))
    )
}

/// Opens the pool. Every session runs in READ COMMITTED: races are settled by
/// unique constraints and row locks, never by serialization failures.
pub async fn connect(
    options: PgConnectOptions,
    settings: &PoolSettings,
) -> Result<PgPool, sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(settings.acquire_timeout)
        .connect_with(session::pool_options(options, settings))
        .await
}

/// The options of a connection that must keep its server connection (the
/// migrations' and the maintenance connection's): nothing in the startup packet a
/// pooler's session pool would refuse.
pub fn session_options(options: PgConnectOptions) -> PgConnectOptions {
    options.application_name("opreg").extra_float_digits(None)
}

/// Applies the migrations over `session` (they take a session-level advisory
/// lock, so not through a transaction pooler), or over a connection taken out
/// of the pool. Either way without the registry's statement timeout: a
/// migration may build an index over a large table. The lock timeout stays, so
/// a migration that cannot lock a busy table gives up instead of queueing the
/// traffic behind it.
pub async fn migrate(pool: &PgPool, session: Option<&PgConnectOptions>) -> Result<(), BoxError> {
    use sqlx::Connection;
    let mut connection = match session {
        None => pool.acquire().await?.detach(),
        Some(options) => {
            sqlx::PgConnection::connect_with(&session_options(options.clone())).await?
        }
    };
    sqlx::query("SET statement_timeout = 0")
        .execute(&mut connection)
        .await?;
    MIGRATOR.run(&mut connection).await?;
    connection.close().await?;
    Ok(())
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Records a statement's duration in `opreg_db_query_duration_seconds` when dropped.
struct QueryTimer {
    query: &'static str,
    started: Instant,
}

impl QueryTimer {
    fn start(query: &'static str) -> Self {
        Self {
            query,
            started: Instant::now(),
        }
    }
}

impl Drop for QueryTimer {
    fn drop(&mut self) {
        crate::telemetry::metrics::query(self.query, self.started.elapsed().as_secs_f64());
    }
}
