//! Statements on `console_sessions`: the operator console's sign-ins. A row
//! is keyed by the SHA-256 of the secret its cookie carries; the secret itself
//! is never stored.

use std::time::Duration;

use sqlx::PgExecutor;

/// A signed-in principal: its name, and the SHA-256 of the key it signed in with.
#[derive(Debug, sqlx::FromRow)]
pub struct SessionRow {
    pub principal: String,
    pub key_sha256: Vec<u8>,
}

/// Records a sign-in for `ttl`, and forgets sessions that have expired (there
/// are few: one per operator's browser).
#[tracing::instrument(level = "debug", name = "store.console_sessions.open", skip_all)]
pub async fn open(
    db: impl PgExecutor<'_>,
    secret_sha256: &[u8],
    session: &SessionRow,
    ttl: Duration,
) -> sqlx::Result<()> {
    let _timer = super::QueryTimer::start("console_sessions_open");
    sqlx::query(
        "WITH expired AS (
             DELETE FROM console_sessions WHERE expires_at < clock_timestamp()
         )
         INSERT INTO console_sessions (secret_sha256, principal, key_sha256, created_at, expires_at)
         VALUES ($1, $2, $3, clock_timestamp(), clock_timestamp() + $4 * interval '1 millisecond')",
    )
    .bind(secret_sha256)
    .bind(&session.principal)
    .bind(&session.key_sha256)
    .bind(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
    .execute(db)
    .await?;
    Ok(())
}

/// Who signed in with this secret, while the session lasts.
#[tracing::instrument(level = "debug", name = "store.console_sessions.find", skip_all)]
pub async fn find(
    db: impl PgExecutor<'_>,
    secret_sha256: &[u8],
) -> sqlx::Result<Option<SessionRow>> {
    let _timer = super::QueryTimer::start("console_sessions_find");
    sqlx::query_as(
        "SELECT principal, key_sha256 FROM console_sessions
         WHERE secret_sha256 = $1 AND expires_at > clock_timestamp()",
    )
    .bind(secret_sha256)
    .fetch_optional(db)
    .await
}

#[tracing::instrument(level = "debug", name = "store.console_sessions.close", skip_all)]
pub async fn close(db: impl PgExecutor<'_>, secret_sha256: &[u8]) -> sqlx::Result<()> {
    let _timer = super::QueryTimer::start("console_sessions_close");
    sqlx::query("DELETE FROM console_sessions WHERE secret_sha256 = $1")
        .bind(secret_sha256)
        .execute(db)
        .await?;
    Ok(())
}
