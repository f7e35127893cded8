//! How a use case holds its connection, directly or behind a transaction
//! pooler.
//!
//! A pooler in transaction mode (PgBouncer's `pool_mode = transaction`) hands
//! a server connection to a client for one transaction and then to the next
//! client. sqlx sends every statement with arguments in two rounds, each ended
//! by a Sync: Parse and Describe, then Bind and Execute. Outside a transaction
//! the pooler may give the second round to another server connection, where
//! the statement named in the Bind does not exist or is someone else's. So
//! behind such a pooler every use case runs inside one transaction (the pooler
//! keeps the server connection until it ends), statements are not cached
//! across transactions, and the session settings travel in the BEGIN instead
//! of the startup packet (which PgBouncer refuses to pass on).

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};
use sqlx::{Postgres, Transaction};

use super::PoolSettings;

/// What stands between the pool and PostgreSQL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pooler {
    /// PostgreSQL itself, or a pooler in session mode.
    #[default]
    None,
    /// A pooler that reassigns server connections between transactions.
    Transaction,
}

impl std::str::FromStr for Pooler {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "none" => Ok(Pooler::None),
            "transaction" => Ok(Pooler::Transaction),
            _ => Err(format!("{text:?} is not one of: none, transaction")),
        }
    }
}

/// The pool and the way each use case takes a connection from it.
#[derive(Clone, Debug)]
pub struct Sessions {
    pool: PgPool,
    /// The BEGIN of a pinned session; `None` for direct connections.
    pinned_begin: Option<Arc<str>>,
}

impl Sessions {
    pub fn new(pool: PgPool, settings: &PoolSettings) -> Self {
        let pinned_begin = (settings.pooler == Pooler::Transaction).then(|| {
            // DEALLOCATE ALL: the statements an earlier client (or an earlier
            // transaction of this one) left on this server connection go, so
            // a name can never meet a statement it did not prepare.
            format!(
                "BEGIN ISOLATION LEVEL READ COMMITTED; DEALLOCATE ALL; {}",
                session_settings(settings)
                    .iter()
                    .map(|(name, value)| format!("SET LOCAL {name} = '{value}';"))
                    .collect::<Vec<_>>()
                    .join(" ")
            )
            .into()
        });
        Self { pool, pinned_begin }
    }

    /// A connection for one use case; behind a transaction pooler, inside a
    /// transaction that [`Session::finish`] commits.
    pub async fn open(&self) -> sqlx::Result<Session> {
        Ok(match &self.pinned_begin {
            None => Session::Direct(self.pool.acquire().await?),
            Some(begin) => Session::Pinned(
                self.pool
                    .begin_with(sqlx::AssertSqlSafe(begin.to_string()))
                    .await?,
            ),
        })
    }
}

/// One use case's connection.
#[derive(Debug)]
pub enum Session {
    Direct(PoolConnection<Postgres>),
    /// Rolled back if dropped before [`Session::finish`].
    Pinned(Transaction<'static, Postgres>),
}

impl Session {
    /// Ends the use case with its outcome: a pinned session commits what a
    /// successful use case wrote (and a failed commit fails the use case, so
    /// nothing is acknowledged that did not commit) or rolls back a failed one.
    pub async fn finish<T, E: From<sqlx::Error>>(self, outcome: Result<T, E>) -> Result<T, E> {
        match self {
            Session::Direct(_) => outcome,
            Session::Pinned(transaction) => match outcome {
                Ok(value) => {
                    transaction.commit().await?;
                    Ok(value)
                }
                Err(error) => {
                    // The connection is discarded by the pool if this fails.
                    let _ = transaction.rollback().await;
                    Err(error)
                }
            },
        }
    }
}

impl Deref for Session {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        match self {
            Session::Direct(connection) => connection,
            Session::Pinned(transaction) => transaction,
        }
    }
}

impl DerefMut for Session {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match self {
            Session::Direct(connection) => connection,
            Session::Pinned(transaction) => transaction,
        }
    }
}

/// The settings every registry session runs with.
fn session_settings(settings: &PoolSettings) -> [(&'static str, String); 4] {
    [
        (
            "statement_timeout",
            format!("{}ms", settings.statement_timeout.as_millis()),
        ),
        (
            "lock_timeout",
            format!("{}ms", settings.lock_timeout.as_millis()),
        ),
        // Short statements only: compiling one would cost more than it saves.
        ("jit", "off".to_owned()),
        // Each statement is planned once per connection and kept. Every one
        // is written so that its plan is its indexes whatever the table's
        // size (keys, token guards, one primary-key probe per claim of a
        // batch). A custom plan per call would re-plan the registration
        // statement, milliseconds of CPU, on every batch: its generic
        // estimate of an array's rows never matches the batch, so the
        // planner never settles on the generic plan by itself.
        ("plan_cache_mode", "force_generic_plan".to_owned()),
    ]
}

/// The options the pool connects with: the session settings in the startup
/// packet, or, behind a transaction pooler, nothing it would refuse and no
/// statement cache (a cached statement lives on one server connection).
pub fn pool_options(options: PgConnectOptions, settings: &PoolSettings) -> PgConnectOptions {
    let options = options.application_name("opreg");
    match settings.pooler {
        Pooler::None => {
            let startup = session_settings(settings);
            options.options(
                startup
                    .iter()
                    .map(|(name, value)| (*name, value.as_str()))
                    .chain([("default_transaction_isolation", "read committed")]),
            )
        }
        Pooler::Transaction => options.statement_cache_capacity(0).extra_float_digits(None),
    }
}
