//! The notices on `opreg_replays` (migrations/20261202000001): a trigger
//! sends one when a terminal record changes or goes, another when a watched
//! unfinished one does (migrations/20261206000001), and every replica sends
//! its own heartbeats through its pool. A replica reads them on a connection
//! of its own, outside the pool, that keeps its server connection (LISTEN
//! holds only for the session that ran it).

use std::time::Duration;

use sqlx::PgConnection;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};

use crate::domain::ids::{Namespace, OperationKey};

const CHANNEL: &str = "opreg_replays";

/// The name the listening session shows in `pg_stat_activity`.
const APPLICATION_NAME: &str = "opreg-replays";

/// One notice, as the listener reads it.
#[derive(Debug, PartialEq, Eq)]
pub enum Notice {
    /// This terminal record changed or was deleted.
    Changed {
        namespace: Namespace,
        operation_key: OperationKey,
    },
    /// This watched, unfinished operation changed or was deleted.
    Watched {
        namespace: Namespace,
        operation_key: OperationKey,
    },
    /// The table was truncated.
    All,
    /// A replica's heartbeat: its instance, and when it was sent in
    /// nanoseconds since that instance started.
    Heartbeat { instance: u64, sent_nanos: u64 },
}

/// The listening session.
#[derive(Debug)]
pub struct Notices {
    listener: PgListener,
}

impl Notices {
    /// Opens the session and listens; notices of the transactions that
    /// commit from now on are delivered, in commit order.
    pub async fn listen(options: &PgConnectOptions, timeout: Duration) -> sqlx::Result<Self> {
        // A pool of one only to own the connection: PgListener reads from a
        // pooled one. It is never reopened behind this type's back.
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .max_lifetime(None)
            .idle_timeout(None)
            .acquire_timeout(timeout)
            .connect_lazy_with(options.clone().application_name(APPLICATION_NAME));
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.eager_reconnect(false);
        listener.listen(CHANNEL).await?;
        Ok(Self { listener })
    }

    /// The next notice; `None` once the session is lost, after which notices
    /// may have been missed and this value must be dropped. Notices this
    /// version does not know are skipped.
    pub async fn next(&mut self) -> Option<Notice> {
        loop {
            match self.listener.try_recv().await {
                Ok(Some(notification)) => {
                    if let Some(notice) = parse(notification.payload()) {
                        return Some(notice);
                    }
                }
                Ok(None) => return None,
                Err(error) => {
                    tracing::debug!(%error, "the replay notices' session failed");
                    return None;
                }
            }
        }
    }
}

/// Sends this replica's heartbeat; it reaches the listeners when it commits.
pub async fn send_heartbeat(
    db: &mut PgConnection,
    instance: u64,
    sent_nanos: u64,
) -> crate::domain::error::Result<()> {
    let _timer = super::QueryTimer::start("replay_heartbeat");
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(format!("h\n{instance}\n{sent_nanos}"))
        .execute(db)
        .await?;
    Ok(())
}

fn parse(payload: &str) -> Option<Notice> {
    let mut parts = payload.splitn(3, '\n');
    match (parts.next()?, parts.next(), parts.next()) {
        ("k", Some(namespace), Some(key)) => Some(Notice::Changed {
            namespace: Namespace::from_stored(namespace.to_owned()),
            operation_key: OperationKey::from_stored(key.to_owned()),
        }),
        ("c", Some(namespace), Some(key)) => Some(Notice::Watched {
            namespace: Namespace::from_stored(namespace.to_owned()),
            operation_key: OperationKey::from_stored(key.to_owned()),
        }),
        ("a", None, None) => Some(Notice::All),
        ("h", Some(instance), Some(sent_nanos)) => Some(Notice::Heartbeat {
            instance: instance.parse().ok()?,
            sent_nanos: sent_nanos.parse().ok()?,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_parse_and_unknown_ones_are_skipped() {
        assert_eq!(
            parse("k\npayments\norder:1\nwith a newline"),
            Some(Notice::Changed {
                namespace: Namespace::from_stored("payments".into()),
                operation_key: OperationKey::from_stored("order:1\nwith a newline".into()),
            })
        );
        assert_eq!(
            parse("c\npayments\norder:2"),
            Some(Notice::Watched {
                namespace: Namespace::from_stored("payments".into()),
                operation_key: OperationKey::from_stored("order:2".into()),
            })
        );
        assert_eq!(parse("a"), Some(Notice::All));
        assert_eq!(
            parse("h\n7\n42"),
            Some(Notice::Heartbeat {
                instance: 7,
                sent_nanos: 42
            })
        );
        for unknown in [
            "",
            "k\npayments",
            "c\npayments",
            "h\nseven\n1",
            "x\n1\n2",
            "a\n",
        ] {
            assert_eq!(parse(unknown), None, "{unknown:?}");
        }
    }
}
