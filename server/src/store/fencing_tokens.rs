//! The sequence `fencing_tokens` and its floor (migration `20261208000001`):
//! the sequences `fencing_token_floor` (what the last lift set the tokens to)
//! and `fencing_token_floor_start` (the start of the PostgreSQL that lifted).
//! Statements draw with `next_fencing_token()`, whose first call after
//! PostgreSQL starts lifts the tokens to the database clock in microseconds;
//! `opreg-server restore` lifts them here, unconditionally.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::store::QueryTimer;

/// The floor a lift set, and where the database stands.
#[derive(Debug, sqlx::FromRow)]
pub struct TokenFloor {
    /// Every token drawn from now on is above it.
    pub floor: i64,
    /// When the running PostgreSQL started.
    pub postmaster_started_at: DateTime<Utc>,
    /// The last transaction the recovery that ended replayed, when the
    /// database came back from a base backup and its WAL.
    pub wal_replayed_until: Option<DateTime<Utc>>,
}

/// Lifts the tokens to the clock (never down), even if this PostgreSQL has
/// already: a logical restore into a running server starts none.
pub async fn lift(db: &mut PgConnection) -> sqlx::Result<TokenFloor> {
    let _timer = QueryTimer::start("fencing_tokens_lift");
    sqlx::query_as(
        "SELECT lift_fencing_tokens() AS floor, pg_postmaster_start_time() AS postmaster_started_at,
                pg_last_xact_replay_timestamp() AS wal_replayed_until",
    )
    .fetch_one(db)
    .await
}

/// Whether the database is a standby or still replaying WAL (a restore
/// before its promotion): no token can be drawn there.
pub async fn in_recovery(db: &mut PgConnection) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT pg_is_in_recovery()")
        .fetch_one(db)
        .await
}
