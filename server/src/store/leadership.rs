//! Which replica runs the maintenance: the holder of the unexpired lease row
//! `leader_leases('maintenance')`. The leader renews it every interval; a
//! replica that dies, or loses PostgreSQL, stops renewing and another takes
//! the row once it has expired. A lease row, unlike a session advisory lock,
//! lives in the data: it holds behind a transaction pooler and on a
//! distributed engine, and its holder and expiry can be read.

use std::time::Duration;

use sqlx::PgConnection;

/// The lease row of the maintenance.
const MAINTENANCE: &str = "maintenance";

/// Takes the maintenance lease, or renews it for `holder`, until `lease` from
/// now on the database's clock. False while another holder's lease runs.
pub async fn lead(
    connection: &mut PgConnection,
    holder: &str,
    lease: Duration,
) -> sqlx::Result<bool> {
    let lease_us = i64::try_from(lease.as_micros()).unwrap_or(i64::MAX);
    let renewed = sqlx::query_scalar::<_, bool>(
        "INSERT INTO leader_leases AS lease (role, holder, expires_at)
         VALUES ($1, $2, clock_timestamp() + $3 * interval '1 microsecond')
         ON CONFLICT (role) DO UPDATE
             SET holder = excluded.holder, expires_at = excluded.expires_at
             WHERE lease.holder = excluded.holder OR lease.expires_at < clock_timestamp()
         RETURNING true",
    )
    .bind(MAINTENANCE)
    .bind(holder)
    .bind(lease_us)
    .fetch_optional(connection)
    .await?;
    Ok(renewed.is_some())
}

/// Gives the lease up, so another replica need not wait for it to expire.
pub async fn step_down(connection: &mut PgConnection, holder: &str) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM leader_leases WHERE role = $1 AND holder = $2")
        .bind(MAINTENANCE)
        .bind(holder)
        .execute(connection)
        .await?;
    Ok(())
}
