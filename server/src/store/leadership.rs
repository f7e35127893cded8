//! Which replica runs the maintenance: the one holding a session-level
//! advisory lock on its own connection. The lock goes with the connection, so
//! a replica that dies or loses PostgreSQL hands it on without any cleanup.

use sqlx::PgConnection;

/// One constant key for the whole database ("opreg-mt" as bytes).
const MAINTENANCE_LOCK: i64 = 0x6f70_7265_672d_6d74;

/// Takes the maintenance lock if no other session holds it.
pub async fn try_lead(connection: &mut PgConnection) -> sqlx::Result<bool> {
    let (acquired,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_lock($1)")
        .bind(MAINTENANCE_LOCK)
        .fetch_one(connection)
        .await?;
    Ok(acquired)
}

/// True while this session still holds the lock (an error means the
/// connection, and with it the lock, is gone).
pub async fn still_leading(connection: &mut PgConnection) -> sqlx::Result<bool> {
    let (held,): (bool,) = sqlx::query_as(
        "SELECT EXISTS (
             SELECT 1 FROM pg_locks
             WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
               AND ((classid::bigint << 32) | objid::bigint) = $1
         )",
    )
    .bind(MAINTENANCE_LOCK)
    .fetch_one(connection)
    .await?;
    Ok(held)
}
