//! The workload: clients spread over the replicas doing what callers do: new
//! keys, duplicate claims, conflicting parameters, fenced writes to shared
//! resources, renewals, completions of every kind, pauses past the lease (a
//! stalled process), and workers draining due work with ClaimDue. Every call
//! and its answer goes to the [`Recorder`].

use std::net::SocketAddr;
use std::time::Duration;

use opreg_client::proto::operation_admin_client::OperationAdminClient;
use opreg_client::proto::operation_registry_client::OperationRegistryClient;
use opreg_client::proto::{self as pb, ClaimOutcome, OperationStatus};
use rand::Rng;
use tonic::transport::Channel;

use std::sync::{Arc, Mutex};

use opreg_client::{LeaseHandle, RunOnce, Success, Verdict, WorkError};

use super::history::{AdminAction, Answer, Call, Granted, Recorder, Report, resolved_result};

pub const NAMESPACE: &str = "faults";
/// Leases are short, so pauses and kills cause takeovers within a scenario.
pub const LEASE: Duration = Duration::from_secs(1);
/// How long a waiting Claim waits: a few leases, well inside a scenario.
const WAIT: Duration = Duration::from_secs(2);
/// Run-once callers' numbers, after a process's other callers.
pub const HELPER_IDS: usize = 1_000;
/// The operator's number in the history.
const OPERATOR: usize = 30_000;
/// Resources shared by many operations, so fenced writes race.
const RESOURCES: usize = 6;

pub struct Workload {
    pub clients: usize,
    pub workers: usize,
    /// Chance that a holder stalls past its lease before it reports.
    pub pause_chance: f64,
    /// The first caller's number: callers of different processes keep apart.
    pub first_id: usize,
    /// How long a holder works under each lease before it reports.
    pub work: Duration,
    /// An operator resolves, requeues, holds and releases as the run goes.
    pub operator: bool,
    /// Callers that go through the Rust client's run-once helper.
    pub helpers: usize,
    /// Each caller and run-once helper starts an iteration (a Claim and what
    /// follows it; a run) at most once per this long, a start it misses
    /// skipped rather than made up, so a fault never turns into a burst.
    /// `None`: as fast as the answers come (the fault suite's load). The soak
    /// (`soak.rs`) runs at a set rate with it.
    pub pace: Option<Duration>,
}

impl Workload {
    pub fn new(clients: usize, workers: usize, pause_chance: f64) -> Self {
        Self {
            clients,
            workers,
            pause_chance,
            first_id: 0,
            work: Duration::ZERO,
            operator: false,
            helpers: 0,
            pace: None,
        }
    }
}

/// The ticks of a paced loop, if `pace` is set: the first at a random point of
/// the first period, so that paced callers do not all call at once.
fn pacing(pace: Option<Duration>) -> Option<tokio::time::Interval> {
    pace.map(|pace| {
        let offset = pace.mul_f64(rand::rng().random::<f64>());
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + offset, pace);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        ticks
    })
}

fn channel(address: SocketAddr) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .timeout(Duration::from_secs(3))
        .connect_timeout(Duration::from_secs(1))
        .connect_lazy()
}

fn stub(address: SocketAddr) -> OperationRegistryClient<Channel> {
    OperationRegistryClient::new(channel(address))
}

/// What a holder will do with its lease, drawn before any call (the thread's
/// random generator cannot be held across an await).
struct Plan {
    write_to: Option<String>,
    stall: Option<Duration>,
    renew: bool,
    report: Report,
}

impl Plan {
    fn draw(granted: &Granted, pause_chance: f64) -> Self {
        let mut rng = rand::rng();
        let write_to = (!granted.reconcile && rng.random_bool(0.6))
            .then(|| format!("resource-{}", rng.random_range(0..RESOURCES)));
        let stall = rng
            .random_bool(pause_chance)
            .then(|| LEASE + Duration::from_millis(rng.random_range(200..800)));
        let report = match rng.random_range(0..100) {
            0..60 => Report::Success(format!("ok:{}:{}", granted.key, granted.token).into_bytes()),
            60..70 => Report::Failure("DECLINED".into()),
            70..85 => Report::Retryable,
            _ if granted.reconcile => Report::Success(b"reconciled".to_vec()),
            _ => Report::Unknown,
        };
        Self {
            write_to,
            stall,
            renew: rng.random_bool(0.3),
            report,
        }
    }
}

fn failed(status: &tonic::Status) -> Answer {
    Answer::Failed {
        code: status.code(),
        reason: opreg_client::error_reason(status).unwrap_or_default(),
    }
}

fn parameters(key: &str, conflicting: bool) -> Option<pb::claim_request::Fingerprint> {
    let variant = if conflicting { "other" } else { "same" };
    Some(pb::claim_request::Fingerprint::Parameters(
        opreg_client::parameters(serde_json::json!({"key": key, "variant": variant})),
    ))
}

/// One client: calls until `until`, through the replica at `address`.
struct Caller {
    id: usize,
    stub: OperationRegistryClient<Channel>,
    recorder: Recorder,
    keys: Vec<String>,
    pause_chance: f64,
    work: Duration,
    pace: Option<Duration>,
}

impl Caller {
    async fn claim(
        &mut self,
        key: &str,
        conflicting: bool,
        compensates: Option<&str>,
        wait: Option<Duration>,
    ) -> Option<Granted> {
        let request = pb::ClaimRequest {
            wait: wait.map(|wait| prost_types::Duration {
                seconds: wait.as_secs().try_into().unwrap(),
                nanos: 0,
            }),
            compensates: compensates.unwrap_or_default().to_owned(),
            namespace: NAMESPACE.into(),
            operation_key: key.into(),
            owner: format!("client-{}", self.id),
            fingerprint: parameters(key, conflicting),
            lease_ttl: Some(prost_types::Duration {
                seconds: LEASE.as_secs().try_into().unwrap(),
                nanos: 0,
            }),
            retry_policy: Some(pb::RetryPolicy {
                max_attempts: 4,
                initial_backoff: Some(prost_types::Duration {
                    seconds: 0,
                    nanos: 100_000_000,
                }),
                max_backoff: Some(prost_types::Duration {
                    seconds: 0,
                    nanos: 400_000_000,
                }),
                deadline: Some(prost_types::Duration {
                    seconds: 3600,
                    nanos: 0,
                }),
            }),
            ..Default::default()
        };
        let invoked = self.recorder.now();
        let call = Call::Claim {
            key: key.to_owned(),
            conflicting,
            compensates: compensates.map(str::to_owned),
        };
        match self.stub.claim(request).await {
            Ok(response) => {
                let response = response.into_inner();
                let operation = response.operation.clone().unwrap_or_default();
                let answer = match response.outcome() {
                    ClaimOutcome::Acquired | ClaimOutcome::Reconcile => {
                        let granted = Granted {
                            key: key.to_owned(),
                            token: response
                                .lease
                                .as_ref()
                                .map_or(0, |lease| lease.fencing_token),
                            reconcile: response.outcome() == ClaimOutcome::Reconcile,
                        };
                        self.recorder.record(
                            self.id,
                            call,
                            invoked,
                            Answer::Leases(vec![granted.clone()]),
                        );
                        return Some(granted);
                    }
                    ClaimOutcome::Replayed => Answer::Replayed {
                        key: key.to_owned(),
                        status: match operation.status() {
                            OperationStatus::Succeeded => "succeeded",
                            OperationStatus::Failed => "failed",
                            _ => "other",
                        }
                        .to_owned(),
                        result: operation.result.clone(),
                        failure_code: operation
                            .failure
                            .as_ref()
                            .map(|failure| failure.code.clone()),
                    },
                    _ => Answer::Other,
                };
                self.recorder.record(self.id, call, invoked, answer);
            }
            Err(status) => self
                .recorder
                .record(self.id, call, invoked, failed(&status)),
        }
        None
    }

    /// Works under a lease the way a holder does: maybe a fenced write, maybe a
    /// renewal, maybe a stall past the lease, then a report (repeated while the
    /// answer is in doubt, as a careful caller does).
    async fn hold(&mut self, granted: Granted) {
        let plan = Plan::draw(&granted, self.pause_chance);
        if let Some(resource) = plan.write_to {
            let value = format!("{}:{}", granted.key, granted.token).into_bytes();
            let request = pb::FencedWriteRequest {
                namespace: NAMESPACE.into(),
                resource: resource.clone(),
                operation_key: granted.key.clone(),
                fencing_token: granted.token,
                value: value.clone(),
            };
            let invoked = self.recorder.now();
            let answer = match self.stub.fenced_write(request).await {
                Ok(_) => Answer::Accepted,
                Err(status) => failed(&status),
            };
            let call = Call::FencedWrite {
                resource,
                key: granted.key.clone(),
                token: granted.token,
                value,
            };
            self.recorder.record(self.id, call, invoked, answer);
        }
        tokio::time::sleep(self.work).await;
        if let Some(stall) = plan.stall {
            tokio::time::sleep(stall).await;
        } else if plan.renew {
            let request = pb::RenewRequest {
                namespace: NAMESPACE.into(),
                operation_key: granted.key.clone(),
                owner: format!("client-{}", self.id),
                fencing_token: granted.token,
                lease_ttl: None,
            };
            let invoked = self.recorder.now();
            let answer = match self.stub.renew(request).await {
                Ok(_) => Answer::Accepted,
                Err(status) => failed(&status),
            };
            let call = Call::Renew {
                key: granted.key.clone(),
                token: granted.token,
            };
            self.recorder.record(self.id, call, invoked, answer);
        }
        self.complete(&granted, plan.report).await;
    }

    async fn complete(&mut self, granted: &Granted, report: Report) {
        let outcome = match &report {
            Report::Success(result) => pb::complete_request::Outcome::Success(pb::Success {
                result: result.clone(),
                result_ref: String::new(),
            }),
            Report::Failure(code) => pb::complete_request::Outcome::Failure(pb::Failure {
                code: code.clone(),
                message: "declined by the downstream".into(),
            }),
            Report::Retryable => pb::complete_request::Outcome::Retryable(pb::RetryableError {
                error_class: "Downstream".into(),
                message: "try again".into(),
                retry_after: None,
            }),
            Report::Unknown => pb::complete_request::Outcome::Unknown(pb::UnknownOutcome {
                remote_ref: format!("ref-{}", granted.token),
                message: "timed out after sending".into(),
            }),
        };
        for _ in 0..5 {
            let request = pb::CompleteRequest {
                namespace: NAMESPACE.into(),
                operation_key: granted.key.clone(),
                fencing_token: granted.token,
                outcome: Some(outcome.clone()),
            };
            let invoked = self.recorder.now();
            let answered = self.stub.complete(request).await;
            let call = Call::Complete {
                key: granted.key.clone(),
                token: granted.token,
                report: report.clone(),
            };
            match answered {
                Ok(_) => {
                    self.recorder
                        .record(self.id, call, invoked, Answer::Accepted);
                    return;
                }
                Err(status) => {
                    let answer = failed(&status);
                    self.recorder.record(self.id, call, invoked, answer);
                    if !matches!(
                        status.code(),
                        tonic::Code::Unavailable
                            | tonic::Code::DeadlineExceeded
                            | tonic::Code::Unknown
                    ) {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    async fn claim_due(&mut self) -> Vec<Granted> {
        let request = pb::ClaimDueRequest {
            namespace: NAMESPACE.into(),
            owner: format!("worker-{}", self.id),
            limit: 5,
            lease_ttl: Some(prost_types::Duration {
                seconds: LEASE.as_secs().try_into().unwrap(),
                nanos: 0,
            }),
            ..Default::default()
        };
        let invoked = self.recorder.now();
        match self.stub.claim_due(request).await {
            Ok(response) => {
                let granted: Vec<Granted> = response
                    .into_inner()
                    .operations
                    .into_iter()
                    .map(|due| Granted {
                        key: due
                            .operation
                            .as_ref()
                            .map(|op| op.operation_key.clone())
                            .unwrap_or_default(),
                        token: due.lease.as_ref().map_or(0, |lease| lease.fencing_token),
                        reconcile: due.outcome() == ClaimOutcome::Reconcile,
                    })
                    .collect();
                self.recorder.record(
                    self.id,
                    Call::ClaimDue,
                    invoked,
                    Answer::Leases(granted.clone()),
                );
                granted
            }
            Err(status) => {
                self.recorder
                    .record(self.id, Call::ClaimDue, invoked, failed(&status));
                Vec::new()
            }
        }
    }

    /// Callers: new keys, duplicates, conflicts, and the holding that follows.
    async fn call_until(&mut self, until: tokio::time::Instant) {
        let mut next = 0;
        let mut ticks = pacing(self.pace);
        while tokio::time::Instant::now() < until {
            if let Some(ticks) = ticks.as_mut() {
                ticks.tick().await;
                if tokio::time::Instant::now() >= until {
                    break;
                }
            }
            let roll = rand::rng().random_range(0..100);
            let granted = if roll < 60 || self.keys.is_empty() {
                let key = format!("c{}-{next}", self.id);
                next += 1;
                self.keys.push(key.clone());
                self.claim(&key, false, None, None).await
            } else {
                let key = self.keys[rand::rng().random_range(0..self.keys.len())].clone();
                if roll >= 90 {
                    // Undo an earlier operation; refused unless it succeeded.
                    let compensation = format!("undo-{key}");
                    self.claim(&compensation, false, Some(&key), None).await
                } else {
                    // Half the repeated Claims wait for the operation to move:
                    // what wakes them must be a committed state.
                    let wait = (roll < 72).then_some(WAIT);
                    self.claim(&key, roll >= 85, None, wait).await
                }
            };
            if let Some(granted) = granted {
                self.hold(granted).await;
            }
        }
    }

    /// A worker: ClaimDue, then each handed lease held and reported.
    async fn work_until(&mut self, until: tokio::time::Instant) {
        while tokio::time::Instant::now() < until {
            let handed = self.claim_due().await;
            if handed.is_empty() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            for granted in handed {
                self.hold(granted).await;
            }
        }
    }
}

/// A caller through `opreg_client::RunOnce`, the helper applications use:
/// claims, renewals, retries and the Complete happen inside it. The history
/// records what the helper shows: each lease its work runs under (as a grant
/// answered when the work starts, sent no earlier than the run or the previous
/// attempt), the work's fenced writes, and the Complete a successful run made
/// (sent no earlier than the work's end), or the replay it returned. Those
/// bounds only widen the real calls' intervals, which the checker tolerates.
struct Helper {
    id: usize,
    client: opreg_client::Client,
    recorder: Recorder,
    pace: Option<Duration>,
}

/// What the helper's work leaves for the history.
#[derive(Default)]
struct Attempts {
    /// When the last attempt began waiting for its lease.
    since: Duration,
    /// When the last work ended.
    ended: Duration,
    /// The token the last work ran under: with the reconcile answering "not
    /// applied", every lease the helper acts on runs the work.
    token: u64,
}

impl Helper {
    async fn run_until(self, until: tokio::time::Instant) {
        let mut next = 0;
        let mut ticks = pacing(self.pace);
        while tokio::time::Instant::now() < until {
            if let Some(ticks) = ticks.as_mut() {
                ticks.tick().await;
                if tokio::time::Instant::now() >= until {
                    break;
                }
            }
            // Mostly new keys, sometimes one done before (a replay).
            let key = if next > 0 && rand::rng().random_bool(0.2) {
                format!("h{}-{}", self.id, rand::rng().random_range(0..next))
            } else {
                next += 1;
                format!("h{}-{}", self.id, next - 1)
            };
            self.run(&key).await;
        }
    }

    async fn run(&self, key: &str) {
        let started = self.recorder.now();
        let attempts = Arc::new(Mutex::new(Attempts {
            since: started,
            ended: started,
            token: 0,
        }));
        let run = RunOnce::new(
            &self.client,
            NAMESPACE,
            key,
            serde_json::json!({"key": key, "variant": "helper"}),
        )
        .owner(format!("helper-{}", self.id))
        .lease_ttl(LEASE)
        .renew_every(LEASE / 3)
        .deadline(Duration::from_secs(5))
        .reconcile(|_, _| async { Verdict::NotApplied })
        .run(|lease| self.work(key, lease, Arc::clone(&attempts)))
        .await;
        let Ok(completed) = run else {
            return;
        };
        let (call, invoked, answer) = if completed.replayed {
            let call = Call::Claim {
                key: key.to_owned(),
                conflicting: false,
                compensates: None,
            };
            let status = match completed.operation.status() {
                OperationStatus::Succeeded => "succeeded",
                _ => "other",
            };
            let answer = Answer::Replayed {
                key: key.to_owned(),
                status: status.to_owned(),
                result: completed.result,
                failure_code: None,
            };
            (call, started, answer)
        } else {
            let last = attempts.lock().unwrap();
            let call = Call::Complete {
                key: key.to_owned(),
                token: last.token,
                report: Report::Success(completed.result),
            };
            (call, last.ended, Answer::Accepted)
        };
        self.recorder.record(self.id, call, invoked, answer);
    }

    /// One attempt: a fenced write, a little work, and now and then a
    /// transient failure, after which the helper claims again.
    async fn work(
        &self,
        key: &str,
        lease: LeaseHandle,
        attempts: Arc<Mutex<Attempts>>,
    ) -> Result<Success, WorkError> {
        let token = lease.fencing_token();
        let since = attempts.lock().unwrap().since;
        let granted = Granted {
            key: key.to_owned(),
            token,
            reconcile: false,
        };
        let claim = Call::Claim {
            key: key.to_owned(),
            conflicting: false,
            compensates: None,
        };
        self.recorder
            .record(self.id, claim, since, Answer::Leases(vec![granted]));
        let (resource, pause, transient) = {
            let mut rng = rand::rng();
            (
                format!("resource-{}", rng.random_range(0..RESOURCES)),
                Duration::from_millis(rng.random_range(0..200)),
                rng.random_bool(0.2),
            )
        };
        let value = format!("{key}:{token}").into_bytes();
        let request = pb::FencedWriteRequest {
            namespace: NAMESPACE.into(),
            resource: resource.clone(),
            operation_key: key.to_owned(),
            fencing_token: token,
            value: value.clone(),
        };
        let invoked = self.recorder.now();
        // The generated stub on the helper's channel, for the raw status.
        let mut stub = OperationRegistryClient::new(self.client.transport());
        let answer = match stub.fenced_write(request).await {
            Ok(_) => Answer::Accepted,
            Err(status) => failed(&status),
        };
        let call = Call::FencedWrite {
            resource,
            key: key.to_owned(),
            token,
            value,
        };
        self.recorder.record(self.id, call, invoked, answer);
        tokio::time::sleep(pause).await;
        let now = self.recorder.now();
        *attempts.lock().unwrap() = Attempts {
            since: now,
            ended: now,
            token,
        };
        if transient {
            return Err(WorkError::Transient {
                message: "the downstream is busy".into(),
                retry_after: None,
            });
        }
        Ok(Success::new(format!("helper:{key}:{token}")))
    }
}

/// The operator: now and then resolves an unknown outcome, requeues a dead
/// operation, and holds a running one for a moment, each through
/// OperationAdmin and recorded like any call.
struct Operator {
    id: usize,
    admin: OperationAdminClient<Channel>,
    recorder: Recorder,
}

impl Operator {
    /// The first operation found in any of `statuses` (a read, not recorded).
    async fn find(&mut self, statuses: &[OperationStatus], held_only: bool) -> Vec<String> {
        let request = pb::ListOperationsRequest {
            namespace: NAMESPACE.into(),
            statuses: statuses.iter().map(|status| *status as i32).collect(),
            held_only,
            page_size: 20,
            ..Default::default()
        };
        match self.admin.list_operations(request).await {
            Ok(page) => page
                .into_inner()
                .operations
                .into_iter()
                .map(|operation| operation.operation_key)
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    async fn act(&mut self, key: &str, action: AdminAction) -> bool {
        let (operator, reason) = (
            "fault-suite".to_owned(),
            format!("{action:?} in the workload"),
        );
        let (namespace, operation_key) = (NAMESPACE.to_owned(), key.to_owned());
        let invoked = self.recorder.now();
        let answered = match action {
            AdminAction::Resolve => {
                let request = pb::ResolveOperationRequest {
                    namespace,
                    operation_key,
                    operator,
                    reason,
                    outcome: Some(pb::resolve_operation_request::Outcome::Success(
                        pb::Success {
                            result: resolved_result(key),
                            result_ref: String::new(),
                        },
                    )),
                };
                self.admin
                    .resolve_operation(request)
                    .await
                    .map(|r| r.into_inner().audit)
            }
            AdminAction::Requeue => {
                let request = pb::RequeueOperationRequest {
                    namespace,
                    operation_key,
                    operator,
                    reason,
                    revision: "workload".into(),
                    retry_policy: None,
                };
                self.admin
                    .requeue_operation(request)
                    .await
                    .map(|r| r.into_inner().audit)
            }
            AdminAction::Hold => {
                let request = pb::HoldOperationRequest {
                    namespace,
                    operation_key,
                    operator,
                    reason,
                };
                self.admin
                    .hold_operation(request)
                    .await
                    .map(|r| r.into_inner().audit)
            }
            AdminAction::Release => {
                let request = pb::ReleaseOperationRequest {
                    namespace,
                    operation_key,
                    operator,
                    reason,
                };
                self.admin
                    .release_operation(request)
                    .await
                    .map(|r| r.into_inner().audit)
            }
        };
        let accepted = answered.is_ok();
        let answer = match answered {
            // A superseded lease: the new token counts as issued.
            Ok(Some(audit)) if audit.token_after != audit.token_before => {
                Answer::Leases(vec![Granted {
                    key: key.to_owned(),
                    token: audit.token_after,
                    reconcile: false,
                }])
            }
            Ok(_) => Answer::Accepted,
            Err(status) => failed(&status),
        };
        let call = Call::Admin {
            key: key.to_owned(),
            action,
        };
        self.recorder.record(self.id, call, invoked, answer);
        accepted
    }

    async fn operate_until(&mut self, until: tokio::time::Instant) {
        while tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(300)).await;
            if let Some(key) = self.find(&[OperationStatus::Unknown], false).await.pop() {
                self.act(&key, AdminAction::Resolve).await;
            }
            if let Some(key) = self.find(&[OperationStatus::Dead], false).await.pop() {
                self.act(&key, AdminAction::Requeue).await;
            }
            if let Some(key) = self.find(&[OperationStatus::InProgress], false).await.pop()
                && self.act(&key, AdminAction::Hold).await
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
                self.act(&key, AdminAction::Release).await;
            }
        }
    }

    /// Releases whatever is still held (a release lost to a fault).
    async fn release_all(&mut self) {
        for key in self.find(&[], true).await {
            self.act(&key, AdminAction::Release).await;
        }
    }
}

impl Workload {
    /// Runs callers and workers over `replicas` (spread round-robin) for `length`.
    pub async fn run(&self, replicas: &[SocketAddr], recorder: &Recorder, length: Duration) {
        let until = tokio::time::Instant::now() + length;
        let mut tasks = Vec::new();
        for index in 0..self.clients + self.workers {
            let mut caller = Caller {
                id: self.first_id + index,
                stub: stub(replicas[index % replicas.len()]),
                recorder: recorder.clone(),
                keys: Vec::new(),
                pause_chance: self.pause_chance,
                work: self.work,
                pace: self.pace,
            };
            let worker = index >= self.clients;
            tasks.push(tokio::spawn(async move {
                if worker {
                    caller.work_until(until).await;
                } else {
                    caller.call_until(until).await;
                }
            }));
        }
        for index in 0..self.helpers {
            let helper = Helper {
                id: self.first_id + HELPER_IDS + index,
                client: opreg_client::Client::connect_lazy(format!(
                    "http://{}",
                    replicas[index % replicas.len()]
                ))
                .unwrap(),
                recorder: recorder.clone(),
                pace: self.pace,
            };
            tasks.push(tokio::spawn(async move { helper.run_until(until).await }));
        }
        if self.operator {
            let mut operator = Operator {
                id: OPERATOR,
                admin: OperationAdminClient::new(channel(replicas[0])),
                recorder: recorder.clone(),
            };
            tasks.push(tokio::spawn(async move {
                operator.operate_until(until).await;
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    }

    /// After the faults: workers only, until the due queue stays empty.
    pub async fn drain(replicas: &[SocketAddr], recorder: &Recorder, within: Duration) {
        let mut operator = Operator {
            id: OPERATOR,
            admin: OperationAdminClient::new(channel(replicas[0])),
            recorder: recorder.clone(),
        };
        operator.release_all().await;
        let mut worker = Caller {
            id: 10_000,
            stub: stub(replicas[0]),
            recorder: recorder.clone(),
            keys: Vec::new(),
            pause_chance: 0.0,
            work: Duration::ZERO,
            pace: None,
        };
        let until = tokio::time::Instant::now() + within;
        let mut idle_since = None;
        while tokio::time::Instant::now() < until {
            let handed = worker.claim_due().await;
            if handed.is_empty() {
                let idle = *idle_since.get_or_insert_with(tokio::time::Instant::now);
                // Leases of stalled holders lapse within one lease; then nothing is due.
                if idle.elapsed() > LEASE * 3 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            idle_since = None;
            for granted in handed {
                let report = if granted.reconcile {
                    Report::Success(b"reconciled".to_vec())
                } else {
                    Report::Success(
                        format!("drained:{}:{}", granted.key, granted.token).into_bytes(),
                    )
                };
                worker.complete(&granted, report).await;
            }
        }
    }
}
