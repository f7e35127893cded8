//! Driver errors become registry errors here, and only here. Their text is
//! logged, never returned: callers learn only that the store is unavailable.

use crate::domain::error::RegistryError;

/// SQLSTATE classes and codes that mean "the store cannot answer now".
const UNAVAILABLE_STATES: &[&str] = &[
    "08",    // connection exception
    "28",    // invalid authorization: the configured role cannot log in
    "3D",    // invalid catalog name: the configured database is gone
    "53",    // insufficient resources
    "57",    // operator intervention: shutdown, statement timeout, cancel
    "40001", // serialization failure
];

/// SQLSTATEs that mean "this operation's row is busy": another transaction
/// holds it longer than the lock timeout, or the wait deadlocked.
const BUSY_STATES: &[&str] = &[
    "55P03", // lock not available (lock_timeout)
    "40P01", // deadlock detected
];

impl From<sqlx::Error> for RegistryError {
    fn from(error: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &error
            && db
                .code()
                .is_some_and(|code| BUSY_STATES.contains(&code.as_ref()))
        {
            tracing::info!(error = %error, "operation busy");
            return RegistryError::OperationBusy;
        }
        let unavailable = match &error {
            sqlx::Error::Database(db) => db.code().is_some_and(|code| {
                UNAVAILABLE_STATES
                    .iter()
                    .any(|state| code.starts_with(state))
            }),
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Protocol(_) => true,
            _ => false,
        };
        if unavailable {
            tracing::warn!(error = %error, "store unavailable");
            RegistryError::StoreUnavailable
        } else {
            tracing::error!(error = %error, "unexpected store error");
            RegistryError::Internal
        }
    }
}
