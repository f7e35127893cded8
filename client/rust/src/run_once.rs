//! The run-once helper: the protocol done right, so callers do not rediscover
//! leases, heartbeats, backoff and unknown outcomes.
//!
//! 1. Claim. REPLAYED returns the stored result (or the stored business
//!    failure), marked as a replay; IN_PROGRESS and RETRY_LATER wait and claim
//!    again; DEAD is an error; RECONCILE asks the caller's `reconcile` first.
//! 2. While the work (or `reconcile`) runs, the lease is renewed every third of
//!    its TTL, transient failures retried with jitter. A renew refused for any
//!    reason, or a lease that could not be renewed before it would expire
//!    (measured from the send of the call that granted it), cancels the work
//!    (its future is dropped) and no Complete is sent.
//! 3. The work's result becomes the Complete: success, business failure,
//!    retryable (then claimed again), or unknown (then claimed again to
//!    reconcile it when a `reconcile` was given, else an error).
//! 4. UNAVAILABLE and deadline errors are retried with exponential backoff and
//!    full jitter inside one overall deadline; nothing else is. Finished work is
//!    always reported: Complete gets time of its own past the deadline, is sent
//!    again with the same token when its answer is lost, and in doubt Lookup
//!    tells whether exactly this report was recorded.
//!
//! `client/PROTOCOL.md` is the decision table all opreg clients follow.
//!
//! Cancellation-safe: dropping the future stops the renewals, every
//! [`LeaseHandle`] reports the lease lost, and the lease simply expires.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::decide::{
    self, ClaimStep, CompleteError, InDoubt, RenewStep, proto_duration, std_duration,
};
use crate::error::Error;
use crate::outcomes::{Completed, RunError, Success, Verdict, WorkError};
use crate::proto::{self as pb, ExecutionOutcome, OperationStatus};
use pb::complete_request::Outcome;

/// The lease the work runs under.
#[derive(Clone, Debug)]
pub struct LeaseHandle {
    lease: pb::Lease,
    lost: CancellationToken,
}

impl LeaseHandle {
    /// The lease as the server granted it.
    pub fn lease(&self) -> &pb::Lease {
        &self.lease
    }

    /// Present this to protected resources (FencedWrite or your own).
    pub fn fencing_token(&self) -> u64 {
        self.lease.fencing_token
    }

    /// True once another execution holds the operation: stop writing.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// Resolves when the lease is lost.
    pub async fn lost(&self) {
        self.lost.cancelled().await;
    }
}

type Reconcile = Box<
    dyn FnMut(pb::Lease, String) -> Pin<Box<dyn Future<Output = Verdict> + Send>> + Send + Sync,
>;

/// Runs one operation at most once across every caller of the same key.
///
/// ```no_run
/// # async fn example(client: opreg_client::Client) -> Result<(), opreg_client::RunError> {
/// use opreg_client::{RunOnce, Success};
/// let done = RunOnce::new(&client, "payments", "debit:order-42", serde_json::json!({"amount": 100}))
///     .run(|lease| async move {
///         // debit the account, fenced by lease.fencing_token()
///         Ok(Success::new(b"ledger-entry-9".to_vec()))
///     })
///     .await?;
/// # Ok(()) }
/// ```
pub struct RunOnce {
    client: Client,
    request: pb::ClaimRequest,
    renew_every: Option<Duration>,
    deadline: Duration,
    call_timeout: Duration,
    reconcile: Option<Reconcile>,
}

/// After an execution: done, or claim again (a retry was scheduled).
enum Next {
    Done(Box<Completed>),
    ClaimAgain,
}

impl RunOnce {
    /// The helper for the operation `operation_key` in `namespace`, identified
    /// by `parameters` (sent as a Struct; see [`RunOnce::parameters_digest`]).
    pub fn new(
        client: &Client,
        namespace: &str,
        operation_key: &str,
        parameters: serde_json::Value,
    ) -> Self {
        let request = pb::ClaimRequest {
            namespace: namespace.into(),
            operation_key: operation_key.into(),
            fingerprint: Some(pb::claim_request::Fingerprint::Parameters(
                crate::parameters(parameters),
            )),
            owner: default_owner(),
            lease_ttl: Some(proto_duration(Duration::from_secs(30))),
            ..Default::default()
        };
        Self {
            client: client.clone(),
            request,
            renew_every: None,
            deadline: DEFAULT_DEADLINE,
            call_timeout: Duration::from_secs(10),
            reconcile: None,
        }
    }

    /// The helper for one operation handed out by ClaimDue: the key and
    /// namespace are the operation's, the owner and lease length the worker's.
    pub(crate) fn for_handed(
        client: &Client,
        operation: &pb::Operation,
        owner: &str,
        lease_ttl: Duration,
        deadline: Duration,
    ) -> Self {
        let request = pb::ClaimRequest {
            namespace: operation.namespace.clone(),
            operation_key: operation.operation_key.clone(),
            owner: owner.into(),
            lease_ttl: Some(proto_duration(lease_ttl)),
            ..Default::default()
        };
        Self {
            client: client.clone(),
            request,
            renew_every: None,
            deadline,
            call_timeout: Duration::from_secs(10),
            reconcile: None,
        }
    }

    /// Identify the parameters by a digest computed here instead of sending them.
    pub fn parameters_digest(mut self, digest: Vec<u8>) -> Self {
        self.request.fingerprint = Some(pb::claim_request::Fingerprint::ParametersDigest(digest));
        self
    }

    /// Names this process (or task); defaults to host, pid and a random suffix.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.request.owner = owner.into();
        self
    }

    /// The scheduler's run id, recorded in the history.
    pub fn execution_id(mut self, execution_id: impl Into<String>) -> Self {
        self.request.execution_id = execution_id.into();
        self
    }

    /// The lease length asked for (default 30 s).
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.request.lease_ttl = Some(proto_duration(ttl));
        self
    }

    /// What an existing key allows (default `REPLAY`): `AFTER_FAILURE` runs
    /// the work again after a recorded business failure or DEAD;
    /// `REJECT_EXISTING` answers `Error::OperationExists` for any existing key.
    /// It holds for the Claims until the run first holds the operation; the
    /// run's later Claims (after its own retryable report) replay.
    pub fn reuse(mut self, policy: pb::ReusePolicy) -> Self {
        self.request.reuse = policy.into();
        self
    }

    /// How often to renew; defaults to a third of the TTL.
    pub fn renew_every(mut self, every: Duration) -> Self {
        self.renew_every = Some(every);
        self
    }

    /// Bounds claiming, waiting and retrying (default 120 s); the work itself
    /// is not cut by it, and Complete gets time of its own past it.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The timeout of one call (default 10 s).
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The retry budget registered with a new operation (default: the server's).
    pub fn retry_policy(mut self, policy: pb::RetryPolicy) -> Self {
        self.request.retry_policy = Some(policy);
        self
    }

    /// Registers this operation as the compensation of `original_key`.
    pub fn compensates(mut self, original_key: impl Into<String>) -> Self {
        self.request.compensates = original_key.into();
        self
    }

    /// Asks the remote system what happened to an attempt whose outcome is unknown.
    pub fn reconcile<F, Fut>(mut self, mut reconcile: F) -> Self
    where
        F: FnMut(pb::Lease, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Verdict> + Send + 'static,
    {
        self.reconcile = Some(Box::new(move |lease, remote_ref| {
            Box::pin(reconcile(lease, remote_ref))
        }));
        self
    }

    /// Claims, runs `work` under the lease at most once across callers, and
    /// records its result (PROTOCOL.md).
    pub async fn run<W, Fut>(mut self, mut work: W) -> Result<Completed, RunError>
    where
        W: FnMut(LeaseHandle) -> Fut,
        Fut: Future<Output = Result<Success, WorkError>>,
    {
        let deadline = after(self.deadline);
        loop {
            let (claimed, sent) = self
                .retrying(deadline, |client, remaining| {
                    // Each attempt asks the server to wait the rest of the
                    // deadline (at most the cap) and gets that on top of the
                    // call timeout, so the answer that ends the wait arrives.
                    let wait = decide::server_wait(remaining);
                    let mut request = self.request.clone();
                    request.wait = (!wait.is_zero()).then(|| proto_duration(wait));
                    let call = async move { client.claim(request).await };
                    (self.call_timeout + wait, call)
                })
                .await?;
            let sent = sent.lease_start(claimed.waited.map(std_duration));
            let remote_ref = claimed
                .operation
                .as_ref()
                .map(|operation| operation.remote_ref.clone())
                .unwrap_or_default();
            let remaining = deadline.saturating_duration_since(Instant::now());
            let next = match decide::decide_claim_answer(claimed, remaining, rand::random()) {
                ClaimStep::Return(answer) => return answer.map(|completed| *completed),
                ClaimStep::Wait(wait) => {
                    tokio::time::sleep(wait).await;
                    continue;
                }
                ClaimStep::Execute { lease, reconcile } => {
                    // The reuse policy is for the key as this run found it:
                    // once the run held the operation, its later Claims
                    // (after its own retryable or unknown report) take what
                    // that report left, as every Claim of a run does.
                    self.request.reuse = pb::ReusePolicy::Unspecified.into();
                    let granted = Granted { lease, sent };
                    self.execute(reconcile, granted, remote_ref, &mut work, deadline)
                        .await?
                }
            };
            match next {
                Next::Done(completed) => return Ok(*completed),
                Next::ClaimAgain => continue,
            }
        }
    }

    /// Acts on a lease this caller was handed (ACQUIRED: run the work;
    /// RECONCILE: reconcile first), renewing it meanwhile, and records the result.
    async fn execute<W, Fut>(
        &mut self,
        reconcile: bool,
        granted: Granted,
        remote_ref: String,
        work: &mut W,
        deadline: Instant,
    ) -> Result<Next, RunError>
    where
        W: FnMut(LeaseHandle) -> Fut,
        Fut: Future<Output = Result<Success, WorkError>>,
    {
        let held = self.hold(granted);
        if reconcile {
            self.reconcile_under(held, remote_ref, work, deadline).await
        } else {
            self.work_under(held, work, deadline).await
        }
    }

    /// Runs one operation handed out by ClaimDue under its lease, by the same
    /// rules as [`RunOnce::run`]: `Ok(None)` when a retry was scheduled (the
    /// queue hands it out again when due).
    pub(crate) async fn run_handed<W, Fut>(
        mut self,
        handed: pb::DueOperation,
        sent: Instant,
        mut work: W,
    ) -> Result<Option<Completed>, RunError>
    where
        W: FnMut(LeaseHandle) -> Fut,
        Fut: Future<Output = Result<Success, WorkError>>,
    {
        let deadline = after(self.deadline);
        let reconcile = handed.outcome() == pb::ClaimOutcome::Reconcile;
        let lease = handed.lease.ok_or_else(|| decide::missing("lease"))?;
        let remote_ref = handed.operation.unwrap_or_default().remote_ref;
        match self
            .execute(
                reconcile,
                Granted { lease, sent },
                remote_ref,
                &mut work,
                deadline,
            )
            .await?
        {
            Next::Done(completed) => Ok(Some(*completed)),
            Next::ClaimAgain => Ok(None),
        }
    }

    /// Starts renewing the granted lease until the returned guard is dropped.
    fn hold(&self, granted: Granted) -> Held {
        let lost = CancellationToken::new();
        let ended = lost.child_token();
        let renewals = tokio::spawn(renew_until_lost(
            self.client.clone(),
            self.renew_request(&granted.lease),
            granted.sent,
            Renewals {
                ttl: self.ttl(),
                every: self.renew_interval(),
                call_timeout: self.call_timeout,
            },
            lost.clone(),
        ));
        Held {
            lease: granted.lease,
            lost,
            ended,
            renewals,
        }
    }

    /// Asks `reconcile` what happened to the unknown attempt, under the
    /// reconcile lease; then records the verdict, or executes if nothing happened.
    async fn reconcile_under<W, Fut>(
        &mut self,
        held: Held,
        remote_ref: String,
        work: &mut W,
        deadline: Instant,
    ) -> Result<Next, RunError>
    where
        W: FnMut(LeaseHandle) -> Fut,
        Fut: Future<Output = Result<Success, WorkError>>,
    {
        let Some(mut reconcile) = self.reconcile.take() else {
            // Hand the unknown outcome back rather than sit on the lease until it lapses.
            let still_unknown = Outcome::Unknown(pb::UnknownOutcome {
                remote_ref: remote_ref.clone(),
                message: "not reconciled: the caller gave no reconcile".into(),
            });
            self.record(&held, still_unknown, deadline).await?;
            return Err(RunError::ReconcileRequired { remote_ref });
        };
        let verdict = held.guard(reconcile(held.lease.clone(), remote_ref)).await;
        self.reconcile = Some(reconcile);
        let outcome = match verdict? {
            Verdict::Succeeded(success) => success.into(),
            Verdict::Failed { code, message } => Outcome::Failure(pb::Failure { code, message }),
            Verdict::NotApplied => return self.work_under(held, work, deadline).await,
        };
        let operation = self.record(&held, outcome, deadline).await?;
        decide::recorded(operation).map(|completed| Next::Done(Box::new(completed)))
    }

    /// Runs the work under a held lease, then records what it returned. The
    /// work is dropped as soon as the lease is lost, and nothing is recorded then.
    async fn work_under<W, Fut>(
        &self,
        held: Held,
        work: &mut W,
        deadline: Instant,
    ) -> Result<Next, RunError>
    where
        W: FnMut(LeaseHandle) -> Fut,
        Fut: Future<Output = Result<Success, WorkError>>,
    {
        let result = held.guard(work(held.handle())).await?;
        let (outcome, failure) = decide::work_report(result);
        let claim_again = decide::claims_again(&outcome, self.reconcile.is_some());
        let operation = self.record(&held, outcome, deadline).await?;
        drop(held);
        if let Some(error) = failure {
            return Err(RunError::Work(error));
        }
        match operation.status() {
            OperationStatus::Dead => Err(RunError::Dead),
            _ if claim_again => Ok(Next::ClaimAgain),
            _ => decide::recorded(operation).map(|completed| Next::Done(Box::new(completed))),
        }
    }

    /// Completes with the held token, renewing meanwhile, retrying transport
    /// errors. Finished work is not dropped unrecorded because the overall
    /// deadline passed while it ran: Complete always gets time of its own. In
    /// doubt, Lookup tells whether the report was recorded.
    async fn record(
        &self,
        held: &Held,
        outcome: Outcome,
        deadline: Instant,
    ) -> Result<pb::Operation, RunError> {
        let reported = decide::recorded_as(&outcome);
        let request = pb::CompleteRequest {
            namespace: self.request.namespace.clone(),
            operation_key: self.request.operation_key.clone(),
            fencing_token: held.lease.fencing_token,
            outcome: Some(outcome),
        };
        let until = deadline.max(after(self.call_timeout * COMPLETE_ATTEMPTS));
        let completed = self
            .retrying(until, |client, remaining| {
                let request = request.clone();
                let call = async move { client.complete(request).await };
                (remaining.min(self.call_timeout), call)
            })
            .await;
        let doubt = match completed {
            Ok((response, _)) => return Ok(response.operation.unwrap_or_default()),
            Err(error) => error,
        };
        match decide::decide_complete_error(&doubt) {
            CompleteError::LeaseLost => Err(RunError::LeaseLost),
            CompleteError::Raise => Err(doubt),
            CompleteError::InDoubt => {
                self.recorded_in_doubt(held.lease.fencing_token, reported, doubt)
                    .await
            }
        }
    }

    /// The operation, if the execution of `token` has exactly the `reported`
    /// outcome recorded; a superseded execution lost its lease.
    async fn recorded_in_doubt(
        &self,
        token: u64,
        reported: ExecutionOutcome,
        doubt: RunError,
    ) -> Result<pb::Operation, RunError> {
        let lookup = pb::LookupRequest {
            namespace: self.request.namespace.clone(),
            operation_key: self.request.operation_key.clone(),
            include_executions: true,
            ..Default::default()
        };
        // The Lookup gets as long as Complete's own time, retried like it.
        let until = after(self.call_timeout * COMPLETE_ATTEMPTS);
        let found = self
            .retrying(until, |client, remaining| {
                let lookup = lookup.clone();
                let call = async move { client.lookup(lookup).await };
                (remaining.min(self.call_timeout), call)
            })
            .await
            .ok()
            .map(|(found, _)| found);
        match decide::decide_call_in_doubt(found, token, reported) {
            InDoubt::Recorded(operation) => Ok(*operation),
            InDoubt::LeaseLost => Err(RunError::LeaseLost),
            InDoubt::NotRecorded => Err(RunError::Unrecorded {
                reason: doubt.to_string(),
            }),
        }
    }

    /// Calls until it succeeds, a non-transient error comes back, or the
    /// deadline passes; the answer, and when the first attempt was sent: a
    /// Claim whose answer was lost resumes the lease that attempt was
    /// granted. `call` makes each attempt from the time left before the
    /// deadline, with the timeout that attempt gets.
    async fn retrying<T, F, Fut>(
        &self,
        deadline: Instant,
        mut call: F,
    ) -> Result<(T, Sent), RunError>
    where
        F: FnMut(Client, Duration) -> (Duration, Fut),
        Fut: Future<Output = Result<T, Error>>,
    {
        let first_sent = Instant::now();
        for attempt in 0.. {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                break;
            }
            let (timeout, attempt_call) = call(self.client.clone(), remaining);
            let asked = match tokio::time::timeout(timeout, attempt_call).await {
                Ok(Ok(value)) => {
                    let sent = Sent {
                        first: first_sent,
                        answered_first: attempt == 0,
                    };
                    return Ok((value, sent));
                }
                Ok(Err(error)) if !error.is_transient() => return Err(error.into()),
                Ok(Err(error)) => error.retry_after(),
                Err(_) => None,
            };
            let wait = decide::retry_delay(attempt, asked, rand::random());
            if !sleep_within(wait, deadline).await {
                break;
            }
        }
        Err(RunError::DeadlineExceeded)
    }

    fn renew_request(&self, lease: &pb::Lease) -> pb::RenewRequest {
        pb::RenewRequest {
            namespace: self.request.namespace.clone(),
            operation_key: self.request.operation_key.clone(),
            owner: self.request.owner.clone(),
            fencing_token: lease.fencing_token,
            lease_ttl: self.request.lease_ttl,
        }
    }

    fn ttl(&self) -> Duration {
        self.request
            .lease_ttl
            .map_or(Duration::from_secs(30), std_duration)
    }

    fn renew_interval(&self) -> Duration {
        self.renew_every
            .unwrap_or(self.ttl() / 3)
            .max(Duration::from_millis(10))
    }
}

/// How many call timeouts Complete may still use once the overall deadline passed.
const COMPLETE_ATTEMPTS: u32 = 3;

/// Bounds claiming, waiting and retrying unless the caller says otherwise.
pub(crate) const DEFAULT_DEADLINE: Duration = Duration::from_secs(120);

/// When the first attempt of a retried call was sent, and whether the answer
/// came to that attempt.
struct Sent {
    first: Instant,
    answered_first: bool,
}

impl Sent {
    /// The earliest the lease of this Claim answer can have begun: the first
    /// attempt's send, plus the time the server says it held the call when
    /// the answer is that attempt's own (an earlier, lost attempt may have
    /// been granted the lease after a shorter wait).
    fn lease_start(&self, waited: Option<Duration>) -> Instant {
        match waited {
            Some(waited) if self.answered_first => self.first + waited,
            _ => self.first,
        }
    }
}

/// A lease as Claim or ClaimDue handed it out, and when that call was sent.
struct Granted {
    lease: pb::Lease,
    sent: Instant,
}

/// A lease this run holds: renewed in the background until dropped.
struct Held {
    lease: pb::Lease,
    /// Cancelled by the renewals when the lease is lost.
    lost: CancellationToken,
    /// What the work sees: cancelled when the lease is lost or this guard is
    /// dropped (the run finished, failed or was itself dropped).
    ended: CancellationToken,
    renewals: tokio::task::JoinHandle<()>,
}

impl Held {
    fn handle(&self) -> LeaseHandle {
        LeaseHandle {
            lease: self.lease.clone(),
            lost: self.ended.clone(),
        }
    }

    /// Runs `future` unless the lease is lost first; then it is dropped.
    async fn guard<F: Future>(&self, future: F) -> Result<F::Output, RunError> {
        tokio::select! {
            output = future => {
                if self.lost.is_cancelled() {
                    return Err(RunError::LeaseLost);
                }
                Ok(output)
            }
            () = self.lost.cancelled() => Err(RunError::LeaseLost),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.renewals.abort();
        self.ended.cancel();
    }
}

/// How a held lease is renewed.
struct Renewals {
    ttl: Duration,
    every: Duration,
    call_timeout: Duration,
}

/// Renews every `every` while the lease lasts. Any refusal (a stale token,
/// another owner, a revoked permission: anything not transient) loses it at
/// once; transient failures are retried with full jitter, and a lease that
/// could not be renewed before it would expire is lost too: another
/// execution may hold it by then. Validity is measured from the send of the
/// call that granted or renewed the lease: the server's lease began no earlier.
async fn renew_until_lost(
    client: Client,
    request: pb::RenewRequest,
    granted_at: Instant,
    renewals: Renewals,
    lost: CancellationToken,
) {
    let Renewals {
        ttl,
        every,
        call_timeout,
    } = renewals;
    let trusted = ttl - ttl / 10;
    let mut valid_until = granted_at.checked_add(trusted).unwrap_or(granted_at);
    loop {
        tokio::time::sleep_until(after(every).min(valid_until)).await;
        let mut attempt = 0;
        loop {
            let left = valid_until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                lost.cancel();
                return;
            }
            let sent = Instant::now();
            let failed =
                match tokio::time::timeout(left.min(call_timeout), client.renew(request.clone()))
                    .await
                {
                    Ok(Ok(_)) => {
                        valid_until = sent.checked_add(trusted).unwrap_or(valid_until);
                        break;
                    }
                    Ok(Err(error)) => Some(error),
                    Err(_) => None,
                };
            let left = valid_until.saturating_duration_since(Instant::now());
            match decide::decide_renew_failure(failed.as_ref(), attempt, left, rand::random()) {
                RenewStep::Lost => {
                    lost.cancel();
                    return;
                }
                RenewStep::RetryAfter(wait) => {
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
            }
        }
    }
}

/// Sleeps `wait`, unless that would pass `deadline`; false then.
async fn sleep_within(wait: Duration, deadline: Instant) -> bool {
    let Some(until) = Instant::now().checked_add(wait) else {
        return false;
    };
    if until > deadline {
        return false;
    }
    tokio::time::sleep_until(until).await;
    true
}

/// `now + duration`, saturating far in the future instead of overflowing.
fn after(duration: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(duration)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3_600))
}

fn default_owner() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "host".into());
    format!(
        "{}-{}-{:08x}",
        host.trim(),
        std::process::id(),
        rand::random::<u32>()
    )
}
