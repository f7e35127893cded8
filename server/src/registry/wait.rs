//! Claim and Lookup that wait for the operation to move instead of having
//! the caller poll. A call that asks to wait reads as any call does; only
//! if the answer is one to wait on does it take a place among the replica's
//! waiters, and then it reads again. The row must be watched (every change
//! of it then sends a notice): a replica marks it once per key until the
//! key's next notice (the row may have gone and come back unmarked), and a
//! call that found the mark made before its read needs nothing more;
//! otherwise it marks the row and reads again. From then on it sleeps
//! without a connection until a notice for its key, the time the row names
//! (a lease's expiry, a retry's due time), a fallback poll, the end of its
//! wait, or shutdown, and reads again each time it wakes. Having subscribed
//! before each of those reads, it cannot sleep through a change committed
//! after the read began.

use std::time::Duration;

use tokio::time::Instant;

use super::Registry;
use super::claim::ClaimAnswer;
use super::read::LookupAnswer;
use super::waiters::Wake;
use crate::domain::commands::{ClaimCommand, LookupQuery};
use crate::domain::error::Result;
use crate::domain::ids::{Namespace, OperationKey};
use crate::domain::operation::Status;
use crate::store::operations;
use crate::telemetry::metrics;

/// A waiter reads its operation at least this often, whatever it heard: a
/// bound on how long a lost notice can keep it waiting.
const FALLBACK_POLL: Duration = Duration::from_secs(5);

/// Waiters all woken at once read again within this long of each other.
const EVERYONE_SPREAD: Duration = Duration::from_secs(1);

/// A lease expiry or a due retry is read this long after the time the row
/// names, so that the database clock has passed it too.
const DUE_MARGIN: Duration = Duration::from_millis(5);

/// An answer, and how long the call was held before the read that gave it
/// began (`None`: this replica does not wait, and the caller should poll).
#[derive(Debug)]
pub struct Waited<T> {
    pub answer: T,
    pub waited: Option<Duration>,
}

/// How a waiting call ended, for the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    Woken,
    TimedOut,
    Shutdown,
}

impl Ended {
    fn label(self) -> &'static str {
        match self {
            Ended::Woken => "woken",
            Ended::TimedOut => "timed_out",
            Ended::Shutdown => "shutdown",
        }
    }
}

/// What a waiting call reads, and when it is done.
trait Awaited {
    /// The answer ends the wait.
    fn settled(&self) -> bool;
    /// When the row's own clock may change the answer without a write.
    fn due_in(&self) -> Option<Duration>;
}

impl Awaited for ClaimAnswer {
    fn settled(&self) -> bool {
        !self.outcome.asks_to_wait()
    }

    fn due_in(&self) -> Option<Duration> {
        self.retry_after
    }
}

/// What a waiting call reads each time it wakes. (A trait, not an async
/// closure: the handler's future must be `Send` for every lifetime.)
trait Reading {
    type Answer: Awaited + Send;

    fn read(&mut self, registry: &Registry) -> impl Future<Output = Result<Self::Answer>> + Send;
}

struct Claiming<'a>(&'a ClaimCommand);

impl Reading for Claiming<'_> {
    type Answer = ClaimAnswer;

    fn read(&mut self, registry: &Registry) -> impl Future<Output = Result<ClaimAnswer>> + Send {
        registry.claim(self.0)
    }
}

/// A Lookup, and the status it waits to move from (`None` until the first
/// read, when the caller named none).
struct LookingUp<'a> {
    query: &'a LookupQuery,
    from: Option<Status>,
}

impl Reading for LookingUp<'_> {
    type Answer = Looked;

    async fn read(&mut self, registry: &Registry) -> Result<Looked> {
        let answer = registry.lookup(self.query).await?;
        let from = *self.from.get_or_insert(answer.operation.status);
        Ok(Looked { answer, from })
    }
}

/// A Lookup's answer, against the status it must move from.
struct Looked {
    answer: LookupAnswer,
    from: Status,
}

impl Awaited for Looked {
    fn settled(&self) -> bool {
        self.answer.operation.status != self.from
    }

    fn due_in(&self) -> Option<Duration> {
        None
    }
}

impl Registry {
    /// A Claim held up to `wait` while it would answer IN_PROGRESS or
    /// RETRY_LATER; then answered as a fresh Claim would be. `on_wait` runs
    /// once if the call starts waiting.
    pub async fn claim_waiting(
        &self,
        claim: &ClaimCommand,
        wait: Duration,
        on_wait: impl FnOnce(),
    ) -> Result<Waited<ClaimAnswer>> {
        self.hold(
            "claim",
            (&claim.namespace, &claim.operation_key),
            (wait, on_wait),
            Claiming(claim),
        )
        .await
    }

    /// A Lookup held up to `wait` until the operation's status differs from
    /// `changed_from` (`None`: the status it has now). `on_wait` as for
    /// [`Registry::claim_waiting`].
    pub async fn lookup_waiting(
        &self,
        query: &LookupQuery,
        (wait, changed_from): (Duration, Option<Status>),
        on_wait: impl FnOnce(),
    ) -> Result<Waited<LookupAnswer>> {
        let waited = self
            .hold(
                "lookup",
                (&query.namespace, &query.operation_key),
                (wait, on_wait),
                LookingUp {
                    query,
                    from: changed_from,
                },
            )
            .await?;
        Ok(Waited {
            answer: waited.answer.answer,
            waited: waited.waited,
        })
    }

    /// Reads with `reading` until an answer settles or the wait ends,
    /// sleeping in between (see the module's comment).
    async fn hold<R: Reading>(
        &self,
        call: &'static str,
        (namespace, key): (&Namespace, &OperationKey),
        (asked, on_wait): (Duration, impl FnOnce()),
        mut reading: R,
    ) -> Result<Waited<R::Answer>> {
        let arrived = Instant::now();
        // Not asked to wait, or this replica does not: `waited` stays unset.
        let Some(wait) = self.waiters.granted(asked).filter(|wait| !wait.is_zero()) else {
            return Ok(Waited {
                answer: reading.read(self).await?,
                waited: None,
            });
        };
        // Most calls (a new key, a recorded result) need no waiting: they
        // are answered without a place among the waiters.
        let first = reading.read(self).await?;
        if first.settled() {
            return Ok(Waited {
                answer: first,
                waited: Some(Duration::ZERO),
            });
        }
        let mut waiter = self.waiters.enter(namespace, key).inspect_err(|_| {
            metrics::wait_ended(call, "refused");
        })?;
        let until = arrived + wait;
        let mut on_wait = Some(on_wait);
        let mut woke = None;
        loop {
            waiter.settle();
            // Marked before this read began: every later change notifies.
            let watched = waiter.watched();
            let began = arrived.elapsed();
            let answer = reading.read(self).await?;
            let ended = if answer.settled() {
                Some(Ended::Woken)
            } else if woke == Some(Wake::Closing) {
                Some(Ended::Shutdown)
            } else if Instant::now() >= until {
                Some(Ended::TimedOut)
            } else {
                None
            };
            if let Some(ended) = ended {
                if woke.is_some() || ended != Ended::Woken {
                    metrics::wait_ended(call, ended.label());
                }
                if let (Ended::Woken, Some(Wake::Heard), Some(noticed)) =
                    (ended, woke, waiter.noticed_at())
                {
                    metrics::wait_woken_after(noticed.elapsed().as_secs_f64());
                }
                return Ok(Waited {
                    answer,
                    waited: Some(began),
                });
            }
            if !watched {
                // A change between that read and the mark sent no notice:
                // mark, then read again.
                waiter
                    .mark_watched(
                        self.run(async |db| Ok(operations::watch(db, namespace, key).await?)),
                    )
                    .await?;
                continue;
            }
            if let Some(on_wait) = on_wait.take() {
                on_wait();
            }
            let now = Instant::now();
            let mut next = until.min(now + FALLBACK_POLL);
            if let Some(due_in) = answer.due_in() {
                next = next.min(now + due_in + DUE_MARGIN);
            }
            woke = Some(waiter.sleep_until(next).await);
            if woke == Some(Wake::Everyone) {
                // Every waiter here woke at once (a new listening session):
                // spread their reads rather than take the pool together.
                let spread = EVERYONE_SPREAD.mul_f64(rand::random::<f64>());
                tokio::time::sleep_until(until.min(Instant::now() + spread)).await;
            }
        }
    }
}
