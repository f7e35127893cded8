//! `opreg-server restore`: the step after a restore from a backup.
//!
//! A restored database has forgotten everything after its restore point:
//! leases granted, outcomes recorded, operations registered. Its tokens are
//! safe already (the first draw after PostgreSQL starts lifts the sequence to
//! the clock, `store::fencing_tokens`); what is not is an operation the
//! database shows unfinished, whose execution may have run, even succeeded,
//! after the restore point. So every IN_PROGRESS and RETRY_SCHEDULED
//! operation becomes UNKNOWN (its next Claim is a RECONCILE lease, never a
//! blind second execution), each with an audit row, in one transaction; the
//! report says how far the database reaches and what changed.

use std::fmt;

use chrono::{DateTime, Utc};
use sqlx::{Connection, PgConnection};

use crate::domain::admin::Actor;
use crate::store::MIGRATOR;
use crate::store::fencing_tokens::{self, TokenFloor};
use crate::store::operations::{self, MadeUnknownRow};

/// What `restore` found and did.
#[derive(Debug)]
pub struct RestoreReport {
    pub floor: TokenFloor,
    pub made_unknown: Vec<MadeUnknownRow>,
}

impl RestoreReport {
    /// How many operations became UNKNOWN.
    pub fn total(&self) -> i64 {
        self.made_unknown.iter().map(|row| row.count).sum()
    }

    /// The end of the WAL the recovery replayed: the last moment the
    /// database knows of.
    pub fn restore_point(&self) -> Option<DateTime<Utc>> {
        self.floor.wal_replayed_until
    }

    /// Without replayed WAL, the latest change among the operations made
    /// UNKNOWN: the restore point is no earlier.
    pub fn newest_unfinished_change(&self) -> Option<DateTime<Utc>> {
        self.made_unknown.iter().map(|row| row.newest_change).max()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// A standby, or a restore whose WAL replay has not reached its target:
    /// nothing can be written until it is promoted.
    #[error("the database is still in recovery: run restore once it has been promoted")]
    StillRecovering,
    #[error(transparent)]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Lifts the tokens (unconditionally: a logical restore starts no new
/// PostgreSQL) and makes every unfinished operation UNKNOWN, in one
/// transaction.
pub async fn restore_after_backup(
    connection: &mut PgConnection,
    actor: &Actor,
) -> Result<RestoreReport, RestoreError> {
    if fencing_tokens::in_recovery(&mut *connection).await? {
        return Err(RestoreError::StillRecovering);
    }
    // A backup from before the release that added the floor has not got it.
    MIGRATOR.run(&mut *connection).await?;
    let mut tx = connection.begin().await?;
    let floor = fencing_tokens::lift(&mut tx).await?;
    let made_unknown = operations::make_unfinished_unknown(&mut *tx, actor).await?;
    tx.commit().await?;
    Ok(RestoreReport {
        floor,
        made_unknown,
    })
}

impl fmt::Display for RestoreReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.restore_point(), self.newest_unfinished_change()) {
            (Some(point), _) => writeln!(
                f,
                "restore point: {point} (the last transaction the recovery replayed). \
                 Operations registered, completed or changed after it are not in this \
                 database: a Claim of such a key registers it again."
            )?,
            (None, Some(change)) => writeln!(
                f,
                "restore point: no earlier than {change} (no WAL was replayed; the latest \
                 change among the unfinished operations). Operations registered, completed or \
                 changed after the restore point are not in this database."
            )?,
            (None, None) => writeln!(
                f,
                "restore point: unknown (no WAL was replayed and no operation was unfinished)."
            )?,
        }
        writeln!(
            f,
            "fencing tokens: every token from now on is above {} (lifted to the database \
             clock; PostgreSQL started at {}).",
            self.floor.floor, self.floor.postmaster_started_at
        )?;
        writeln!(
            f,
            "made UNKNOWN: {} operations (their next Claim is a RECONCILE lease; each has an \
             audit row, action restore).",
            self.total()
        )?;
        for row in &self.made_unknown {
            writeln!(
                f,
                "  {:<24} {:<16} {:>8}{}",
                row.namespace,
                row.status_before.as_str(),
                row.count,
                if row.held { "  held" } else { "" }
            )?;
        }
        Ok(())
    }
}
