//! PostgreSQL access: every statement the registry runs, one module per table.
//! Callers see domain records and [`RegistryError`]; SQL and driver errors stay here.

pub mod audit;
pub mod executions;
pub mod leadership;
pub mod operations;
pub mod resources;

mod errors;

use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

pub use errors::is_violation_of;

/// The migrations in `migrations/`, embedded at build time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// How the registry's connection pool is sized.
#[derive(Clone, Debug)]
pub struct PoolSettings {
    pub max_connections: u32,
    /// How long a request may queue for a connection; it must cover the
    /// queueing of a many-way race on one key.
    pub acquire_timeout: Duration,
    /// Upper bound on any one statement, lock waits included.
    pub statement_timeout: Duration,
}

/// Opens the pool. Every session runs in READ COMMITTED: races are settled by
/// unique constraints and row locks, never by serialization failures.
pub async fn connect(
    options: PgConnectOptions,
    settings: &PoolSettings,
) -> Result<PgPool, sqlx::Error> {
    let statement_timeout = format!("{}ms", settings.statement_timeout.as_millis());
    PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(settings.acquire_timeout)
        .connect_with(options.application_name("opreg").options([
            ("statement_timeout", statement_timeout.as_str()),
            ("default_transaction_isolation", "read committed"),
            // Short statements only: compiling one would cost more than it saves.
            ("jit", "off"),
        ]))
        .await
}

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
