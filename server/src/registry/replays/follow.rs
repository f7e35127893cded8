//! Keeps the replay cache in step with the database, and wakes waiting calls.
//! One listening session, outside the pool, applies the notices of changed
//! terminal records and wakes the waiters of every key a notice names; a
//! heartbeat sent through the pool (the path the writes take) every quarter
//! of the allowed staleness proves that the notices reach this process from
//! the database it writes to. A session that is lost, or that stays silent
//! for several heartbeats, is replaced, the cache starts over, and every
//! waiter reads its operation again (it may have missed a notice).

use std::time::{Duration, Instant};

use sqlx::postgres::PgConnectOptions;

use super::Replays;
use crate::registry::Registry;
use crate::registry::waiters::Waiters;
use crate::store::replay_notices::{self, Notice, Notices};
use crate::telemetry::metrics;

/// Longest wait for the listening session to open.
const OPEN_TIMEOUT: Duration = Duration::from_secs(5);

/// Pause before opening another listening session after one failed or ended.
const REOPEN_DELAY: Duration = Duration::from_millis(500);

/// Silence (not even this process's heartbeats) for this many heartbeat
/// intervals means the session is dead though its socket is not closed.
const SILENT_BEATS: u32 = 8;

impl Registry {
    /// Follows the changes for as long as it is polled; returns at once when
    /// neither the replay cache nor waiting is on.
    pub async fn follow_changes(&self, options: PgConnectOptions) {
        if !self.replays.enabled() && !self.waiters.enabled() {
            return;
        }
        let interval = self.replays.settings.max_staleness / 4;
        let instance: u64 = rand::random();
        let started = Instant::now();
        tokio::join!(
            self.send_heartbeats(instance, started, interval),
            follow_notices(
                (&self.replays, &self.waiters),
                &options,
                instance,
                started,
                interval
            ),
        );
    }

    async fn send_heartbeats(&self, instance: u64, started: Instant, interval: Duration) {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            // Taken before the connection, so the time claimed is never later
            // than the notice's commit.
            let sent = nanos(started.elapsed());
            let sent = self
                .run(async |db| replay_notices::send_heartbeat(db, instance, sent).await)
                .await;
            if let Err(error) = sent {
                tracing::debug!(%error, "a replay heartbeat was not sent");
            }
        }
    }
}

async fn follow_notices(
    (replays, waiters): (&Replays, &Waiters),
    options: &PgConnectOptions,
    instance: u64,
    started: Instant,
    interval: Duration,
) {
    let mut failed_before = false;
    loop {
        match Notices::listen(options, OPEN_TIMEOUT).await {
            Ok(notices) => {
                failed_before = false;
                replays.start_over();
                waiters.wake_all();
                apply(
                    (replays, waiters),
                    notices,
                    instance,
                    started,
                    interval * SILENT_BEATS,
                )
                .await;
                replays.start_over();
                waiters.wake_all();
                metrics::replay_cache_following(false);
            }
            Err(error) => {
                // The driver's text may quote the database: debug only.
                tracing::debug!(%error, "cannot listen for replay notices");
                if !failed_before {
                    tracing::warn!(
                        "cannot listen for change notices; replays read the database and waiting calls poll until it can"
                    );
                }
                failed_before = true;
            }
        }
        tokio::time::sleep(REOPEN_DELAY).await;
    }
}

/// Applies notices in the order they come until the session is lost or
/// stays silent for `silence`.
async fn apply(
    (replays, waiters): (&Replays, &Waiters),
    mut notices: Notices,
    instance: u64,
    started: Instant,
    silence: Duration,
) {
    while let Ok(Some(notice)) = tokio::time::timeout(silence, notices.next()).await {
        match notice {
            Notice::Changed {
                namespace,
                operation_key,
            } => {
                replays.forget(&namespace, &operation_key);
                waiters.wake(namespace.as_str(), operation_key.as_str());
            }
            Notice::Watched {
                namespace,
                operation_key,
            } => waiters.wake(namespace.as_str(), operation_key.as_str()),
            Notice::All => {
                replays.forget_all();
                waiters.wake_all();
            }
            Notice::Heartbeat {
                instance: from,
                sent_nanos,
            } if from == instance => {
                replays.heard(started + Duration::from_nanos(sent_nanos));
                metrics::replay_cache_following(true);
            }
            Notice::Heartbeat { .. } => {}
        }
    }
}

fn nanos(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
}
