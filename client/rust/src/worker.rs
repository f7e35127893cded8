//! The worker helper: pulls due work from one namespace (ClaimDue) and runs
//! each operation under the lease it was handed, by the run-once rules —
//! renewals every third of the TTL, the work dropped when the lease is lost,
//! the result recorded with Complete, Lookup in doubt.
//!
//! - Handlers are chosen by operation kind: the key up to its first `:`
//!   (`settle:A:W` is kind `settle`), else the default handler. An operation
//!   no handler takes is recorded retryable with error class `NO_HANDLER`.
//! - RECONCILE operations go to the reconcile callback. Without one they are
//!   left alone: the reconcile lease lapses and they come back later.
//! - At most `max_in_flight` operations run at once; ClaimDue asks for the
//!   free slots only. An empty answer waits a poll interval (with jitter);
//!   transport errors back off with jitter.
//! - Stop: no more pulls; a pull in flight is answered first (what it handed
//!   out runs, rather than lapse unexecuted); in-flight operations get `grace`
//!   to finish, then their work is dropped (their leases lapse, nothing is
//!   recorded).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::client::Client;
use crate::decide::{retry_delay, stretched};
use crate::error::Error;
use crate::outcomes::{RunError, Success, Verdict, WorkError};
use crate::proto::{self as pb, ClaimOutcome};
use crate::run_once::{DEFAULT_DEADLINE, LeaseHandle, RunOnce};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type Handler =
    Arc<dyn Fn(pb::Operation, LeaseHandle) -> BoxFuture<Result<Success, WorkError>> + Send + Sync>;
type Reconcile = Arc<dyn Fn(pb::Operation, pb::Lease, String) -> BoxFuture<Verdict> + Send + Sync>;

/// The error class recorded for an operation no handler takes.
pub(crate) const NO_HANDLER: &str = "NO_HANDLER";

/// The kind of an operation: its key up to the first `:`, or the whole key.
pub fn operation_kind(operation_key: &str) -> &str {
    operation_key
        .split_once(':')
        .map_or(operation_key, |(kind, _)| kind)
}

/// What a worker did until it stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Operations handed to this worker.
    pub handed: u64,
    /// Recorded as succeeded (executed or reconciled).
    pub succeeded: u64,
    /// Recorded with a retry scheduled (the queue hands them out again).
    pub retried: u64,
    /// Ended otherwise: business failure, lease lost, unknown, unrecorded, dead.
    pub other: u64,
    /// RECONCILE operations left alone for want of a reconcile callback.
    pub skipped_reconciles: u64,
    /// Operations still running when the grace ran out; their work was dropped.
    pub abandoned: u64,
}

/// Pulls due work from one namespace and runs it.
///
/// ```no_run
/// # async fn example(client: opreg_client::Client) -> Result<(), opreg_client::Error> {
/// use opreg_client::{Success, Worker};
/// let report = Worker::new(&client, "payouts")
///     .handler("payout", |operation, lease| async move {
///         // pay operation.parameters, fenced by lease.fencing_token()
///         Ok(Success::new(b"paid".to_vec()))
///     })
///     .run(async {
///         let _ = tokio::signal::ctrl_c().await;
///     })
///     .await?;
/// # Ok(()) }
/// ```
pub struct Worker {
    client: Client,
    namespace: String,
    owner: String,
    execution_id: String,
    handlers: HashMap<String, Handler>,
    default_handler: Option<Handler>,
    reconcile: Option<Reconcile>,
    max_in_flight: usize,
    poll_interval: Duration,
    lease_ttl: Duration,
    operation_deadline: Duration,
    call_timeout: Duration,
    grace: Duration,
}

impl Worker {
    /// A worker pulling from `namespace`; add handlers, then [`Worker::run`].
    pub fn new(client: &Client, namespace: impl Into<String>) -> Self {
        Self {
            client: client.clone(),
            namespace: namespace.into(),
            owner: format!(
                "worker-{}-{:08x}",
                std::process::id(),
                rand::random::<u32>()
            ),
            execution_id: String::new(),
            handlers: HashMap::new(),
            default_handler: None,
            reconcile: None,
            max_in_flight: 10,
            poll_interval: Duration::from_secs(1),
            lease_ttl: Duration::from_secs(30),
            operation_deadline: DEFAULT_DEADLINE,
            call_timeout: Duration::from_secs(10),
            grace: Duration::from_secs(20),
        }
    }

    /// Runs operations of `kind` (the key up to its first `:`).
    pub fn handler<F, Fut>(mut self, kind: impl Into<String>, handler: F) -> Self
    where
        F: Fn(pb::Operation, LeaseHandle) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Success, WorkError>> + Send + 'static,
    {
        self.handlers.insert(kind.into(), boxed_handler(handler));
        self
    }

    /// Runs operations no kind-specific handler takes.
    pub fn default_handler<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(pb::Operation, LeaseHandle) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Success, WorkError>> + Send + 'static,
    {
        self.default_handler = Some(boxed_handler(handler));
        self
    }

    /// Asks the remote system what happened to an attempt whose outcome is
    /// unknown: called with the operation, its reconcile lease and `remote_ref`.
    pub fn reconcile<F, Fut>(mut self, reconcile: F) -> Self
    where
        F: Fn(pb::Operation, pb::Lease, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Verdict> + Send + 'static,
    {
        self.reconcile = Some(Arc::new(move |operation, lease, remote_ref| {
            Box::pin(reconcile(operation, lease, remote_ref))
        }));
        self
    }

    /// Names this worker in leases (default: host, pid and a random suffix).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    /// The scheduler's run id, recorded in the history.
    pub fn execution_id(mut self, execution_id: impl Into<String>) -> Self {
        self.execution_id = execution_id.into();
        self
    }

    /// Most operations run at once.
    pub fn max_in_flight(mut self, operations: usize) -> Self {
        self.max_in_flight = operations.max(1);
        self
    }

    /// The wait after ClaimDue handed out nothing (with jitter).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// The lease length asked for each handed operation.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// Bounds one operation's recording retries, as RunOnce's deadline does.
    pub fn operation_deadline(mut self, deadline: Duration) -> Self {
        self.operation_deadline = deadline;
        self
    }

    /// Bounds each ClaimDue (and, per operation, each call as RunOnce's
    /// `call_timeout` does); a stop waits for the ClaimDue in flight.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// How long in-flight operations may finish after `stop`.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Pulls and runs until `stop` resolves, then drains. Errors only when
    /// ClaimDue refuses the worker itself (for example an invalid namespace).
    pub async fn run(self, stop: impl Future<Output = ()>) -> Result<WorkerReport, Error> {
        tokio::pin!(stop);
        let worker = Arc::new(self);
        let mut report = WorkerReport::default();
        let mut running: JoinSet<Ended> = JoinSet::new();
        let mut failures = 0u32;
        let pulled = loop {
            while let Some(ended) = running.try_join_next() {
                report.count(ended);
            }
            let free = worker.max_in_flight.saturating_sub(running.len());
            if free == 0 {
                tokio::select! {
                    () = &mut stop => break Ok(()),
                    Some(ended) = running.join_next() => report.count(ended),
                }
                continue;
            }
            if resolved(stop.as_mut()).await {
                break Ok(());
            }
            // The leases handed out began no earlier than this.
            let sent = Instant::now();
            // Not raced against the stop: an answered ClaimDue has handed its
            // operations to this worker, and dropping them would leave them
            // unexecuted until their leases lapse.
            let handed = worker.pull(u32::try_from(free).unwrap_or(u32::MAX)).await;
            let wait = match handed {
                Ok(handed) if !handed.is_empty() => {
                    failures = 0;
                    for due in handed {
                        report.handed += 1;
                        running.spawn(Arc::clone(&worker).run_one(due, sent));
                    }
                    continue;
                }
                Ok(_) => stretched(worker.poll_interval, rand::random()),
                Err(error) if error.is_transient() => {
                    failures += 1;
                    retry_delay(failures, error.retry_after(), rand::random())
                }
                Err(error) => break Err(error),
            };
            tokio::select! {
                () = &mut stop => break Ok(()),
                () = tokio::time::sleep(wait) => {}
                Some(ended) = running.join_next(), if !running.is_empty() => report.count(ended),
            }
        };
        let drained = tokio::time::timeout(worker.grace, async {
            while let Some(ended) = running.join_next().await {
                report.count(ended);
            }
        })
        .await;
        if drained.is_err() {
            report.abandoned += running.len() as u64;
            running.abort_all();
        }
        pulled.map(|()| report)
    }

    async fn pull(&self, limit: u32) -> Result<Vec<pb::DueOperation>, Error> {
        let request = pb::ClaimDueRequest {
            namespace: self.namespace.clone(),
            owner: self.owner.clone(),
            execution_id: self.execution_id.clone(),
            lease_ttl: Some(prost_types::Duration {
                seconds: i64::try_from(self.lease_ttl.as_secs()).unwrap_or(i64::MAX),
                nanos: i32::try_from(self.lease_ttl.subsec_nanos()).unwrap_or(0),
            }),
            limit: limit.min(1_000),
        };
        match tokio::time::timeout(self.call_timeout, self.client.claim_due(request)).await {
            Ok(answer) => Ok(answer?.operations),
            Err(_) => Err(Error::Unavailable {
                message: "ClaimDue timed out".into(),
                retry_after: None,
            }),
        }
    }

    /// Runs one handed-out operation to its recorded end.
    async fn run_one(self: Arc<Self>, due: pb::DueOperation, granted_at: Instant) -> Ended {
        let operation = due.operation.clone().unwrap_or_default();
        let mut run = RunOnce::for_handed(
            &self.client,
            &operation,
            &self.owner,
            self.lease_ttl,
            self.operation_deadline,
        )
        .call_timeout(self.call_timeout);
        if due.outcome() == ClaimOutcome::Reconcile {
            let Some(reconcile) = self.reconcile.clone() else {
                return Ended::SkippedReconcile;
            };
            let subject = operation.clone();
            run = run
                .reconcile(move |lease, remote_ref| reconcile(subject.clone(), lease, remote_ref));
        }
        let handler = self
            .handlers
            .get(operation_kind(&operation.operation_key))
            .or(self.default_handler.as_ref())
            .cloned();
        let kind = operation_kind(&operation.operation_key).to_owned();
        let result = run
            .run_handed(due, granted_at, move |lease| {
                let operation = operation.clone();
                let handler = handler.clone();
                let kind = kind.clone();
                async move {
                    match handler {
                        Some(handler) => handler(operation, lease).await,
                        None => Err(WorkError::Retryable {
                            error_class: NO_HANDLER.into(),
                            message: format!("no handler for operation kind {kind:?}"),
                            retry_after: None,
                        }),
                    }
                }
            })
            .await;
        Ended::Ran(result.map(|completed| completed.is_some()))
    }
}

/// How one handed-out operation ended.
enum Ended {
    /// `Ok(true)`: recorded as succeeded; `Ok(false)`: a retry is scheduled.
    Ran(Result<bool, RunError>),
    SkippedReconcile,
}

impl WorkerReport {
    fn count(&mut self, ended: Result<Ended, tokio::task::JoinError>) {
        match ended {
            Ok(Ended::Ran(Ok(true))) => self.succeeded += 1,
            Ok(Ended::Ran(Ok(false))) => self.retried += 1,
            Ok(Ended::SkippedReconcile) => self.skipped_reconciles += 1,
            Ok(Ended::Ran(Err(_))) | Err(_) => self.other += 1,
        }
    }
}

/// Whether `stop` has resolved, without waiting for it.
async fn resolved(stop: Pin<&mut impl Future<Output = ()>>) -> bool {
    tokio::select! {
        biased;
        () = stop => true,
        () = std::future::ready(()) => false,
    }
}

fn boxed_handler<F, Fut>(handler: F) -> Handler
where
    F: Fn(pb::Operation, LeaseHandle) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Success, WorkError>> + Send + 'static,
{
    Arc::new(move |operation, lease| Box::pin(handler(operation, lease)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_is_the_key_up_to_its_first_colon() {
        assert_eq!(operation_kind("settle:A:W:V"), "settle");
        assert_eq!(operation_kind("payout"), "payout");
        assert_eq!(operation_kind(":x"), "");
    }
}
