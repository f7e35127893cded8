//! The use cases: each RPC as a short sequence of store statements around a
//! pure domain decision. The only layer that knows both the rules and the SQL.

mod admin;
mod claim;
mod complete;
mod console;
mod due;
mod fencing;
mod gather;
mod maintenance;
mod planted;
mod read;
mod replays;
mod restore;
mod wait;
mod waiters;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use sqlx::PgConnection;

use crate::domain::claim::ClaimOutcome;
use crate::domain::error::{RegistryError, Result};
use crate::domain::operation::{Lease, Operation};
use crate::domain::policy::PerNamespace;
use crate::store::{Sessions, StoreHealth};
use crate::telemetry::metrics;
use gather::{Claims, Gatherer, Reports};
use replays::Replays;

pub use admin::AdminChange;
pub use claim::ClaimAnswer;
pub(crate) use claim::claim_on;
pub(crate) use complete::complete_in_transaction;
pub use console::{FinishedPage, JobStep, OperationView};
pub(crate) use fencing::fenced_write_on;
pub use gather::GatherSettings;
pub use maintenance::{MaintenancePass, MaintenanceSettings};
pub(crate) use read::lookup_on;
pub use read::{LookupAnswer, QueuePage};
pub use replays::ReplaySettings;
pub use restore::{RestoreError, RestoreReport, restore_after_backup};
pub use wait::Waited;
pub use waiters::WaitSettings;
use waiters::Waiters;

/// Steps of one batch call that need a database session of their own (a
/// retry, takeover, reconcile or exhaustion of an existing operation, a
/// compensation, a report the shared statement did not record) in flight at
/// once, so that one call does not take the pool from other callers.
const BATCH_SESSIONS_IN_FLIGHT: usize = 8;

/// The operation registry over one PostgreSQL database. Cheap to clone; any
/// number of replicas may serve the same database.
#[derive(Clone, Debug)]
pub struct Registry {
    sessions: Sessions,
    store: Arc<StoreHealth>,
    /// Most retry, takeover and reconcile leases live at once per namespace,
    /// as ClaimDue hands them out; `None` for no cap.
    retry_caps: Arc<PerNamespace<Option<u32>>>,
    /// Where ordinary Claims are registered together.
    claims: Gatherer<Claims>,
    /// Where the reports of current lease holders are recorded together.
    reports: Gatherer<Reports>,
    /// Terminal results that answer replays without a statement.
    replays: Replays,
    /// Calls waiting for an operation to move.
    waiters: Waiters,
}

impl Registry {
    /// Starts the claim and report writers, so it must be called on a Tokio
    /// runtime.
    pub fn new(
        sessions: Sessions,
        store: Arc<StoreHealth>,
        retry_caps: PerNamespace<Option<u32>>,
        (claims, reports): (GatherSettings, GatherSettings),
        replays: ReplaySettings,
        retention: PerNamespace<Option<Duration>>,
        waiting: WaitSettings,
    ) -> Self {
        Self {
            waiters: Waiters::new(waiting),
            claims: Gatherer::start(sessions.clone(), Arc::clone(&store), claims),
            reports: Gatherer::start(sessions.clone(), Arc::clone(&store), reports),
            replays: Replays::new(replays, retention),
            sessions,
            store,
            retry_caps: Arc::new(retry_caps),
        }
    }

    /// Shutdown has begun: every waiting call answers now, and later calls
    /// are answered at once.
    pub fn stop_waiting(&self) {
        self.waiters.close();
    }

    /// Runs one use case on one connection, counted while it waits for the
    /// pool (also when the call is cancelled while waiting). While the health
    /// probe finds the store down, refused at once rather than queued for the
    /// pool. Behind a transaction pooler the use case is one transaction,
    /// committed only if it succeeds.
    async fn run<T>(
        &self,
        use_case: impl AsyncFnOnce(&mut PgConnection) -> Result<T>,
    ) -> Result<T> {
        run_on(&self.sessions, &self.store, use_case).await
    }
}

/// [`Registry::run`], for the tasks that hold the sessions but not the registry.
async fn run_on<T>(
    sessions: &Sessions,
    store: &StoreHealth,
    use_case: impl AsyncFnOnce(&mut PgConnection) -> Result<T>,
) -> Result<T> {
    if !store.is_up() {
        return Err(RegistryError::StoreUnavailable);
    }
    let mut session = {
        let _waiting = metrics::PoolWaiter::start();
        sessions.open().await?
    };
    let outcome = use_case(&mut session).await;
    session.finish(outcome).await
}

/// Runs `step` for each `(index, input)` of a batch call: one operation's
/// items in their order, as if run in sequence, different operations
/// concurrently (at most [`BATCH_SESSIONS_IN_FLIGHT`]). Answers come back
/// with their indexes, in no particular order.
async fn each_operation_in_order<'a, S, T, F>(
    mut items: Vec<(usize, S)>,
    identity: impl Fn(usize) -> (&'a str, &'a str),
    step: impl Fn(usize, S) -> F,
) -> Vec<(usize, T)>
where
    F: Future<Output = T>,
{
    items.sort_by_key(|&(index, _)| (identity(index), index));
    let mut by_operation: Vec<Vec<(usize, S)>> = Vec::new();
    for (index, input) in items {
        match by_operation.last_mut() {
            Some(same) if identity(same[0].0) == identity(index) => same.push((index, input)),
            _ => by_operation.push(vec![(index, input)]),
        }
    }
    let step = &step;
    let answered: Vec<Vec<(usize, T)>> = futures::stream::iter(by_operation)
        .map(|items| async move {
            let mut answered = Vec::with_capacity(items.len());
            for (index, input) in items {
                answered.push((index, step(index, input).await));
            }
            answered
        })
        .buffer_unordered(BATCH_SESSIONS_IN_FLIGHT)
        .collect()
        .await;
    answered.into_iter().flatten().collect()
}

/// A batch call's answers once every slot is filled; an empty slot would be
/// a bug in the batch's bookkeeping, answered INTERNAL rather than panicking.
fn filled<T>(answers: Vec<Option<Result<T>>>) -> Vec<Result<T>> {
    answers
        .into_iter()
        .map(|answer| {
            answer.unwrap_or_else(|| {
                tracing::error!("a batch item was left unanswered");
                Err(RegistryError::Internal)
            })
        })
        .collect()
}

impl ClaimAnswer {
    fn new(outcome: ClaimOutcome, operation: Operation, retry_after: Option<Duration>) -> Self {
        Self {
            outcome,
            operation,
            retry_after,
        }
    }

    /// The lease the caller now holds, for the outcomes that ask it to act.
    pub fn lease(&self) -> Option<Lease> {
        match self.outcome {
            ClaimOutcome::Acquired | ClaimOutcome::Reconcile => self.operation.lease(),
            _ => None,
        }
    }
}
