//! Replays the idempotency lab against a running opreg server, one line per check.
//!
//!     cargo run -p opreg-client --example settlement -- [ENDPOINT]
//!
//! ENDPOINT defaults to $OPREG_ENDPOINT or http://127.0.0.1:50051. Each run
//! uses a fresh namespace, so it can be repeated against the same server.
//! The account balance is an opreg resource written with FencedWrite, so every
//! debit is fenced by the lease of the operation that makes it.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use opreg_client::proto::{self as pb, ClaimOutcome, OperationStatus, complete_request::Outcome};
use opreg_client::{OperationRegistryClient, error_info, error_reason, parameters};
use serde_json::json;
use tonic::transport::Channel;

type Client = OperationRegistryClient<Channel>;
type Failure = Box<dyn std::error::Error>;

const ACCOUNT: &str = "account:1";

struct Lab {
    client: Client,
    namespace: String,
    failures: usize,
}

#[tokio::main]
async fn main() -> ExitCode {
    let endpoint = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("OPREG_ENDPOINT").ok())
        .unwrap_or_else(|| "http://127.0.0.1:50051".into());
    let client = match opreg_client::connect(endpoint.clone()).await {
        Ok(client) => client,
        Err(error) => {
            eprintln!("cannot reach opreg at {endpoint}: {error}");
            return ExitCode::FAILURE;
        }
    };
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let mut lab = Lab {
        client,
        namespace: format!("lab-{}", stamp.as_micros()),
        failures: 0,
    };
    if let Err(error) = lab.run().await {
        println!("FAIL lab aborted: {error}");
        lab.failures += 1;
    }
    if lab.failures == 0 {
        println!("all checks passed");
        ExitCode::SUCCESS
    } else {
        println!("{} check(s) failed", lab.failures);
        ExitCode::FAILURE
    }
}

impl Lab {
    fn check(&mut self, ok: bool, line: String) {
        println!("{} {line}", if ok { "ok  " } else { "FAIL" });
        self.failures += usize::from(!ok);
    }

    async fn run(&mut self) -> Result<(), Failure> {
        self.open_account().await?;
        self.concurrent_debit().await?;
        self.parameter_conflict().await?;
        self.lost_response().await?;
        self.unknown_outcome().await?;
        self.stale_token().await?;
        self.compensation().await?;
        let balance = self.balance().await?;
        self.check(
            balance == 900,
            format!("finalBalance={balance} (1000 - 100 - 100 + 100)"),
        );
        Ok(())
    }

    fn request(&self, key: &str, owner: &str, params: serde_json::Value) -> pb::ClaimRequest {
        pb::ClaimRequest {
            namespace: self.namespace.clone(),
            operation_key: key.into(),
            fingerprint: Some(pb::claim_request::Fingerprint::Parameters(parameters(
                params,
            ))),
            owner: owner.into(),
            execution_id: format!("{owner}-run"),
            ..Default::default()
        }
    }

    /// The account balance; an account never written holds 0.
    async fn balance(&mut self) -> Result<i64, Failure> {
        let found = self
            .client
            .get_resource(pb::GetResourceRequest {
                namespace: self.namespace.clone(),
                resource: ACCOUNT.into(),
            })
            .await;
        match found {
            Ok(resource) => Ok(String::from_utf8(resource.into_inner().value)?.parse()?),
            Err(status) if error_reason(&status).as_deref() == Some("RESOURCE_NOT_FOUND") => Ok(0),
            Err(status) => Err(status.into()),
        }
    }

    /// Adds `delta` to the balance under the lease of `key`, then records success.
    async fn apply(&mut self, key: &str, token: u64, delta: i64) -> Result<i64, Failure> {
        let balance = self.balance().await? + delta;
        self.client
            .fenced_write(pb::FencedWriteRequest {
                namespace: self.namespace.clone(),
                resource: ACCOUNT.into(),
                operation_key: key.into(),
                fencing_token: token,
                value: balance.to_string().into_bytes(),
            })
            .await?;
        self.complete(
            key,
            token,
            Outcome::Success(pb::Success {
                result: format!("balance={balance}").into_bytes(),
                result_ref: format!("ledger:{key}"),
            }),
        )
        .await?;
        Ok(balance)
    }

    async fn complete(
        &mut self,
        key: &str,
        token: u64,
        outcome: Outcome,
    ) -> Result<pb::Operation, Failure> {
        let response = self
            .client
            .complete(pb::CompleteRequest {
                namespace: self.namespace.clone(),
                operation_key: key.into(),
                fencing_token: token,
                outcome: Some(outcome),
            })
            .await?;
        Ok(response.into_inner().operation.unwrap_or_default())
    }

    async fn claim(&mut self, request: pb::ClaimRequest) -> Result<pb::ClaimResponse, Failure> {
        Ok(self.client.claim(request).await?.into_inner())
    }

    async fn open_account(&mut self) -> Result<(), Failure> {
        let opened = self
            .claim(self.request("open:account:1", "setup", json!({"balance": 1000})))
            .await?;
        let token = lease_token(&opened)?;
        self.apply("open:account:1", token, 1000).await?;
        Ok(())
    }

    async fn concurrent_debit(&mut self) -> Result<(), Failure> {
        let mut racers = Vec::new();
        for worker in 0..16 {
            let mut client = self.client.clone();
            let request = self.request(
                "order-A",
                &format!("worker-{worker}"),
                json!({"account": 1, "amount": 100}),
            );
            racers.push(tokio::spawn(async move { client.claim(request).await }));
        }
        let mut winners = Vec::new();
        let mut others = 0;
        for racer in racers {
            let response = racer.await??.into_inner();
            match ClaimOutcome::try_from(response.outcome) {
                Ok(ClaimOutcome::Acquired) => winners.push(response),
                _ => others += 1,
            }
        }
        self.check(
            winners.len() == 1,
            format!(
                "concurrentClaim: ACQUIRED={} IN_PROGRESS/REPLAYED={others}",
                winners.len()
            ),
        );
        let winner = winners.first().ok_or("nobody acquired order-A")?;
        let balance = self.apply("order-A", lease_token(winner)?, -100).await?;
        let replay = self
            .claim(self.request(
                "order-A",
                "worker-late",
                json!({"amount": 100, "account": 1}),
            ))
            .await?;
        let result = String::from_utf8_lossy(&replay.operation.clone().unwrap_or_default().result)
            .into_owned();
        self.check(
            outcome(&replay) == ClaimOutcome::Replayed && balance == 900,
            format!(
                "replay: outcome={:?} result={result} balance={balance}",
                outcome(&replay)
            ),
        );
        Ok(())
    }

    async fn parameter_conflict(&mut self) -> Result<(), Failure> {
        let conflict = self
            .client
            .claim(self.request("order-A", "worker-x", json!({"account": 1, "amount": 101})))
            .await;
        let (reason, fields) = match &conflict {
            Err(status) => (
                error_reason(status).unwrap_or_default(),
                error_info(status)
                    .and_then(|info| {
                        let key = pb::ErrorMetadataKey::DifferingFields.wire_name();
                        info.metadata.get(&key).cloned()
                    })
                    .unwrap_or_default(),
            ),
            Ok(_) => (String::from("accepted"), String::new()),
        };
        self.check(
            reason == pb::ErrorReason::ParameterConflict.wire_name() && fields == "amount",
            format!("amount 101 for order-A: {reason} differingFields={fields}"),
        );
        Ok(())
    }

    /// The debit commits but its answer is lost: Lookup by key settles it.
    async fn lost_response(&mut self) -> Result<(), Failure> {
        let claimed = self
            .claim(self.request("order-B", "worker-1", json!({"account": 1, "amount": 100})))
            .await?;
        let _lost_answer = self.apply("order-B", lease_token(&claimed)?, -100).await?;
        let found = self
            .client
            .lookup(pb::LookupRequest {
                namespace: self.namespace.clone(),
                operation_key: "order-B".into(),
                include_executions: true,
                ..Default::default()
            })
            .await?
            .into_inner();
        let status = found.operation.unwrap_or_default().status();
        let again = self
            .claim(self.request("order-B", "worker-2", json!({"account": 1, "amount": 100})))
            .await?;
        self.check(
            status == OperationStatus::Succeeded && outcome(&again) == ClaimOutcome::Replayed,
            format!(
                "unknownResult=resolvedByOperationKey status={status:?} executions={} retry={:?}",
                found.executions.len(),
                outcome(&again)
            ),
        );
        Ok(())
    }

    /// A payout whose answer timed out after it was sent is reconciled before
    /// anyone re-executes it.
    async fn unknown_outcome(&mut self) -> Result<(), Failure> {
        let params = json!({"payout": 42});
        let claimed = self
            .claim(self.request("payout-7", "worker-1", params.clone()))
            .await?;
        self.complete(
            "payout-7",
            lease_token(&claimed)?,
            Outcome::Unknown(pb::UnknownOutcome {
                remote_ref: "psp-7".into(),
                message: "timeout after send".into(),
            }),
        )
        .await?;
        let reconcile = self
            .claim(self.request("payout-7", "worker-2", params))
            .await?;
        let remote_ref = reconcile.operation.clone().unwrap_or_default().remote_ref;
        // The remote system says the payout never happened: schedule it again.
        let after = self
            .complete(
                "payout-7",
                lease_token(&reconcile)?,
                Outcome::Retryable(pb::RetryableError {
                    error_class: "not_applied".into(),
                    message: "psp-7 has no record".into(),
                    retry_after: None,
                }),
            )
            .await?;
        self.check(
            outcome(&reconcile) == ClaimOutcome::Reconcile
                && after.status() == OperationStatus::RetryScheduled,
            format!(
                "unknown outcome: next claim={:?} remote_ref={remote_ref} after reconcile={:?}",
                outcome(&reconcile),
                after.status()
            ),
        );
        Ok(())
    }

    async fn stale_token(&mut self) -> Result<(), Failure> {
        let mut first = self.request("settle", "worker-A", json!({"task": "settle"}));
        first.lease_ttl = Some(prost_types::Duration {
            seconds: 1,
            nanos: 0,
        });
        let old = lease_token(&self.claim(first).await?)?;
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        let taken = self
            .claim(self.request("settle", "worker-B", json!({"task": "settle"})))
            .await?;
        let new = lease_token(&taken)?;
        let write = |token: u64, value: &str| pb::FencedWriteRequest {
            namespace: self.namespace.clone(),
            resource: "lab:resource".into(),
            operation_key: "settle".into(),
            fencing_token: token,
            value: value.as_bytes().to_vec(),
        };
        let stale = self.client.fenced_write(write(old, "10")).await;
        let current = self.client.fenced_write(write(new, "20")).await;
        let stale_reason = stale
            .err()
            .and_then(|status| error_reason(&status))
            .unwrap_or_default();
        self.check(
            new > old && stale_reason == "STALE_FENCING_TOKEN" && current.is_ok(),
            format!(
                "oldToken={old} newToken={new} staleWrite={stale_reason} currentWrite={}",
                if current.is_ok() {
                    "accepted"
                } else {
                    "refused"
                }
            ),
        );
        Ok(())
    }

    async fn compensation(&mut self) -> Result<(), Failure> {
        let refund = |lab: &Self, key: &str, owner: &str| pb::ClaimRequest {
            compensates: "order-A".into(),
            ..lab.request(key, owner, json!({"refund": "order-A", "amount": 100}))
        };
        let first = self
            .claim(refund(self, "refund:order-A", "worker-1"))
            .await?;
        self.apply("refund:order-A", lease_token(&first)?, 100)
            .await?;
        let repeated = self
            .claim(refund(self, "refund:order-A", "worker-2"))
            .await?;
        let second = self
            .client
            .claim(refund(self, "refund-again:order-A", "worker-3"))
            .await;
        let reason = second
            .err()
            .and_then(|status| error_reason(&status))
            .unwrap_or_default();
        self.check(
            outcome(&repeated) == ClaimOutcome::Replayed && reason == "ALREADY_COMPENSATED",
            format!(
                "compensation applied once: repeat={:?} another={reason}",
                outcome(&repeated)
            ),
        );
        Ok(())
    }
}

fn outcome(response: &pb::ClaimResponse) -> ClaimOutcome {
    ClaimOutcome::try_from(response.outcome).unwrap_or_default()
}

fn lease_token(response: &pb::ClaimResponse) -> Result<u64, Failure> {
    response
        .lease
        .as_ref()
        .map(|lease| lease.fencing_token)
        .ok_or_else(|| format!("expected a lease, got {:?}", outcome(response)).into())
}
