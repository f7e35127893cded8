//! The scenarios: what is set up before the clock starts, and what one call is.

use std::sync::atomic::{AtomicU64, Ordering};

use opreg_client::OperationRegistryClient;
use opreg_client::proto::{self as pb, ClaimOutcome, complete_request::Outcome};
use opreg_client::{Client, Transport};
use rand::Rng;
use serde_json::json;

/// One call's answer, for the tally: a Claim outcome, or an error's reason.
pub type Answer = String;

/// Keys a `hot-key` round races for: that many claims of one fresh key.
pub const HOT_KEY_RACE: u64 = 1_000;
/// Most keys `replay` completes before the clock starts.
const REPLAY_KEYS: u64 = 10_000;
/// Operations one ClaimDue asks for in `claim-due`.
const DUE_BATCH: u32 = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Every call claims a new key (ACQUIRED).
    NewKeys,
    /// Calls claim keys completed beforehand (REPLAYED); `--hit-rate` mixes in new keys.
    Replay,
    /// Every call claims one key another owner holds (IN_PROGRESS).
    InProgress,
    /// Claim of a new key, then Complete with a success: one call is both.
    Lifecycle,
    /// Every call claims one key with different parameters (PARAMETER_CONFLICT).
    Conflict,
    /// Rounds of 1,000 claims racing for one fresh key: one ACQUIRED per round.
    HotKey,
    /// Drains operations made due beforehand with ClaimDue and Complete: one call is one operation.
    ClaimDue,
    /// BatchClaim of `--batch` new keys per call: one call is that many operations.
    BatchClaim,
    /// BatchClaim of `--batch` new keys, then one BatchComplete of them all
    /// with a success: one call is that many operations, each claimed and completed.
    BatchLifecycle,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::NewKeys => "new-keys",
            Scenario::Replay => "replay",
            Scenario::InProgress => "in-progress",
            Scenario::Lifecycle => "lifecycle",
            Scenario::Conflict => "conflict",
            Scenario::HotKey => "hot-key",
            Scenario::ClaimDue => "claim-due",
            Scenario::BatchClaim => "batch-claim",
            Scenario::BatchLifecycle => "batch-lifecycle",
        }
    }
}

/// A scenario, set up and ready to be called.
#[derive(Debug)]
pub struct Target {
    pub scenario: Scenario,
    namespace: String,
    hit_rate: f64,
    /// Claims per BatchClaim (`batch-claim`).
    batch: usize,
    /// Keys completed beforehand (`replay`).
    completed: u64,
    /// New keys are numbered from here.
    next_key: AtomicU64,
}

impl Target {
    /// Sets the scenario up, untimed: completed keys for `replay`, a held
    /// key for `in-progress`, a registered key for `conflict`, due
    /// operations for `claim-due` (as many as `calls`).
    pub async fn prepare(
        scenario: Scenario,
        clients: &[Client],
        namespace: String,
        (hit_rate, batch): (f64, usize),
        concurrency: usize,
        calls: u64,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let target = Self {
            scenario,
            namespace,
            hit_rate,
            batch,
            completed: 0,
            next_key: AtomicU64::new(0),
        };
        let client = &clients[0];
        match scenario {
            Scenario::InProgress => {
                let mut request = target.claim_request("held", "holder", "same");
                request.lease_ttl = Some(prost_seconds(3_600));
                client.claim(request).await?;
            }
            Scenario::Conflict => {
                client
                    .claim(target.claim_request("conflict", "first", "same"))
                    .await?;
            }
            Scenario::Replay => {
                let keys = calls.min(REPLAY_KEYS);
                target
                    .complete_many(clients, concurrency, keys, "done", success())
                    .await?;
                return Ok(Self {
                    completed: keys,
                    ..target
                });
            }
            Scenario::ClaimDue => {
                let retry = Outcome::Retryable(pb::RetryableError {
                    error_class: "Bench".into(),
                    message: "due again at once".into(),
                    retry_after: Some(prost_millis(1)),
                });
                target
                    .complete_many(clients, concurrency, calls, "due", retry)
                    .await?;
            }
            Scenario::NewKeys
            | Scenario::Lifecycle
            | Scenario::HotKey
            | Scenario::BatchClaim
            | Scenario::BatchLifecycle => {}
        }
        Ok(target)
    }

    /// Claims keys `{prefix}-0` to `{prefix}-{count - 1}` and completes each
    /// with `outcome`, `concurrency` at a time.
    async fn complete_many(
        &self,
        clients: &[Client],
        concurrency: usize,
        count: u64,
        prefix: &str,
        outcome: Outcome,
    ) -> Result<(), Box<dyn std::error::Error>> {
        use futures::stream::{self, StreamExt, TryStreamExt};
        stream::iter(0..count)
            .map(|index| {
                let stub = stub(&clients[crate::drive::round_robin(index, clients.len())]);
                self.complete_new(stub, format!("{prefix}-{index}"), outcome.clone())
            })
            .buffer_unordered(concurrency)
            .try_collect::<()>()
            .await
            .map_err(|status| format!("setting up failed: {}", status.message()).into())
    }

    fn claim_request(&self, key: &str, owner: &str, variant: &str) -> pb::ClaimRequest {
        pb::ClaimRequest {
            namespace: self.namespace.clone(),
            operation_key: key.into(),
            owner: owner.into(),
            fingerprint: Some(pb::claim_request::Fingerprint::Parameters(
                opreg_client::parameters(
                    json!({"amount": 100, "account": "A", "variant": variant}),
                ),
            )),
            ..Default::default()
        }
    }

    fn new_key(&self) -> String {
        format!("key-{}", self.next_key.fetch_add(1, Ordering::Relaxed))
    }

    /// Claims `key` and completes it with `outcome`.
    async fn complete_new(
        &self,
        mut stub: OperationRegistryClient<Transport>,
        key: String,
        outcome: Outcome,
    ) -> Result<(), tonic::Status> {
        let claimed = stub
            .claim(self.claim_request(&key, "bench", "same"))
            .await?
            .into_inner();
        let Some(lease) = claimed.lease else {
            return Ok(());
        };
        stub.complete(pb::CompleteRequest {
            namespace: self.namespace.clone(),
            operation_key: key,
            fencing_token: lease.fencing_token,
            outcome: Some(outcome),
        })
        .await?;
        Ok(())
    }

    /// One call numbered `call`: its answers (one per operation it handled;
    /// none when `claim-due` finds nothing left).
    pub async fn call(
        &self,
        stub: &mut OperationRegistryClient<Transport>,
        call: u64,
    ) -> Vec<Answer> {
        let answered = match self.scenario {
            Scenario::NewKeys => self.claim(stub, &self.new_key(), "same").await,
            Scenario::Replay => {
                let hit = self.hit_rate >= 1.0 || rand::rng().random_bool(self.hit_rate);
                let key = if hit && self.completed > 0 {
                    format!("done-{}", rand::rng().random_range(0..self.completed))
                } else {
                    self.new_key()
                };
                self.claim(stub, &key, "same").await
            }
            Scenario::InProgress => self.claim(stub, "held", "same").await,
            Scenario::Conflict => self.claim(stub, "conflict", "other").await,
            Scenario::HotKey => {
                let key = format!("hot-{}", call / HOT_KEY_RACE);
                self.claim(stub, &key, "same").await
            }
            Scenario::Lifecycle => {
                let key = self.new_key();
                match self.complete_new(stub.clone(), key, success()).await {
                    Ok(()) => Ok("SUCCEEDED".to_owned()),
                    Err(status) => Err(status),
                }
            }
            Scenario::ClaimDue => return self.drain_due(stub).await,
            Scenario::BatchClaim => return self.batch_claim(stub).await.0,
            Scenario::BatchLifecycle => return self.batch_lifecycle(stub).await,
        };
        vec![answered.unwrap_or_else(|status| refusal(&status))]
    }

    async fn claim(
        &self,
        stub: &mut OperationRegistryClient<Transport>,
        key: &str,
        variant: &str,
    ) -> Result<Answer, tonic::Status> {
        let owner = format!("bench-{}", rand::rng().random::<u32>());
        let claimed = stub
            .claim(self.claim_request(key, &owner, variant))
            .await?
            .into_inner();
        Ok(outcome_name(claimed.outcome()))
    }

    /// One BatchClaim of new keys: an answer per claim, and the leases granted
    /// as (key, token).
    async fn batch_claim(
        &self,
        stub: &mut OperationRegistryClient<Transport>,
    ) -> (Vec<Answer>, Vec<(String, u64)>) {
        let keys: Vec<String> = (0..self.batch).map(|_| self.new_key()).collect();
        let claims = keys
            .iter()
            .map(|key| self.claim_request(key, "bench", "same"))
            .collect();
        let results = match stub.batch_claim(pb::BatchClaimRequest { claims }).await {
            Ok(response) => response.into_inner().results,
            Err(status) => return (vec![refusal(&status)], Vec::new()),
        };
        let mut leases = Vec::with_capacity(results.len());
        let answers = results
            .into_iter()
            .zip(keys)
            .map(|(result, key)| match result.result {
                Some(pb::batch_claim_result::Result::Claim(claimed)) => {
                    if let Some(lease) = &claimed.lease {
                        leases.push((key, lease.fencing_token));
                    }
                    outcome_name(claimed.outcome())
                }
                Some(pb::batch_claim_result::Result::Error(status)) => {
                    format!("{:?}", tonic::Code::from(status.code))
                }
                None => "EMPTY".to_owned(),
            })
            .collect();
        (answers, leases)
    }

    /// One BatchClaim of new keys and one BatchComplete of every lease it
    /// granted: an answer per key, its Complete's when it got that far.
    async fn batch_lifecycle(&self, stub: &mut OperationRegistryClient<Transport>) -> Vec<Answer> {
        let (mut answers, leases) = self.batch_claim(stub).await;
        if leases.is_empty() {
            return answers;
        }
        let completions = leases
            .into_iter()
            .map(|(operation_key, fencing_token)| pb::CompleteRequest {
                namespace: self.namespace.clone(),
                operation_key,
                fencing_token,
                outcome: Some(success()),
            })
            .collect();
        let request = pb::BatchCompleteRequest { completions };
        let results = match stub.batch_complete(request).await {
            Ok(response) => response.into_inner().results,
            Err(status) => return vec![refusal(&status); answers.len()],
        };
        let completed = results.into_iter().map(|result| match result.result {
            Some(pb::batch_complete_result::Result::Completed(_)) => "SUCCEEDED".to_owned(),
            Some(pb::batch_complete_result::Result::Error(status)) => {
                format!("{:?}", tonic::Code::from(status.code))
            }
            None => "EMPTY".to_owned(),
        });
        let acquired = answers.iter_mut().filter(|answer| *answer == "ACQUIRED");
        for (answer, completed) in acquired.zip(completed) {
            *answer = completed;
        }
        answers
    }

    /// One ClaimDue and a Complete of each operation it handed out.
    async fn drain_due(&self, stub: &mut OperationRegistryClient<Transport>) -> Vec<Answer> {
        let request = pb::ClaimDueRequest {
            namespace: self.namespace.clone(),
            owner: "bench-worker".into(),
            limit: DUE_BATCH,
            ..Default::default()
        };
        let handed = match stub.claim_due(request).await {
            Ok(response) => response.into_inner().operations,
            Err(status) => return vec![refusal(&status)],
        };
        let mut answers = Vec::with_capacity(handed.len());
        for due in handed {
            let (Some(operation), Some(lease)) = (due.operation, due.lease) else {
                continue;
            };
            let completed = stub
                .complete(pb::CompleteRequest {
                    namespace: self.namespace.clone(),
                    operation_key: operation.operation_key,
                    fencing_token: lease.fencing_token,
                    outcome: Some(success()),
                })
                .await;
            answers.push(match completed {
                Ok(_) => "SUCCEEDED".to_owned(),
                Err(status) => refusal(&status),
            });
        }
        answers
    }
}

pub fn stub(client: &Client) -> OperationRegistryClient<Transport> {
    OperationRegistryClient::new(client.transport())
}

fn success() -> Outcome {
    Outcome::Success(pb::Success {
        result: b"done".to_vec(),
        result_ref: String::new(),
    })
}

fn outcome_name(outcome: ClaimOutcome) -> Answer {
    outcome
        .as_str_name()
        .trim_start_matches("CLAIM_OUTCOME_")
        .to_owned()
}

/// An error as its ErrorInfo reason, or its code when it has none.
fn refusal(status: &tonic::Status) -> Answer {
    opreg_client::error_reason(status).unwrap_or_else(|| format!("{:?}", status.code()))
}

fn prost_seconds(seconds: i64) -> prost_types::Duration {
    prost_types::Duration { seconds, nanos: 0 }
}

fn prost_millis(millis: i32) -> prost_types::Duration {
    prost_types::Duration {
        seconds: 0,
        nanos: millis * 1_000_000,
    }
}
