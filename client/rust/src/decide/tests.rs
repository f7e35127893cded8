//! Every decision against the shared vectors, `client/testdata/decisions.json`,
//! which every other client's decision module is tested against too.

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;
use tonic::Code;
use tonic_types::{ErrorDetails, StatusExt};

use super::*;

#[derive(Deserialize)]
struct Table {
    transient_error: Vec<TransientVector>,
    retry_delay: Vec<RetryDelayVector>,
    claim_answer: Vec<ClaimVector>,
    complete_error: Vec<CompleteErrorVector>,
    renew_failure: Vec<RenewVector>,
    call_in_doubt: Vec<InDoubtVector>,
}

fn table() -> Table {
    serde_json::from_str(include_str!("../../../testdata/decisions.json"))
        .expect("client/testdata/decisions.json is a decision table")
}

/// An error as the vectors state it, turned into the status a server (or the
/// transport) answers, then into [`Error`] exactly as a failed call is.
#[derive(Deserialize)]
struct ErrorVector {
    code: String,
    reason: Option<String>,
    #[serde(default)]
    metadata: HashMap<String, String>,
    retry_delay_ms: Option<u64>,
    #[serde(default)]
    message: String,
}

impl ErrorVector {
    fn error(&self) -> Error {
        let code = match self.code.as_str() {
            "CANCELLED" => Code::Cancelled,
            "INVALID_ARGUMENT" => Code::InvalidArgument,
            "DEADLINE_EXCEEDED" => Code::DeadlineExceeded,
            "NOT_FOUND" => Code::NotFound,
            "ALREADY_EXISTS" => Code::AlreadyExists,
            "PERMISSION_DENIED" => Code::PermissionDenied,
            "RESOURCE_EXHAUSTED" => Code::ResourceExhausted,
            "FAILED_PRECONDITION" => Code::FailedPrecondition,
            "ABORTED" => Code::Aborted,
            "INTERNAL" => Code::Internal,
            "UNAVAILABLE" => Code::Unavailable,
            "UNAUTHENTICATED" => Code::Unauthenticated,
            other => panic!("no gRPC code {other} in the table's vocabulary"),
        };
        let mut details = ErrorDetails::new();
        if let Some(reason) = &self.reason {
            details.set_error_info(reason, crate::ERROR_DOMAIN, self.metadata.clone());
        }
        if let Some(ms) = self.retry_delay_ms {
            details.set_retry_info(Some(Duration::from_millis(ms)));
        }
        let status = tonic::Status::with_error_details(code, self.message.clone(), details);
        Error::from(status)
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1_000.0
}

fn assert_ms(name: &str, got: Duration, expected_ms: f64) {
    assert!(
        (ms(got) - expected_ms).abs() < 1.0,
        "{name}: waits {} ms, not {expected_ms} ms",
        ms(got)
    );
}

#[derive(Deserialize)]
struct TransientVector {
    name: String,
    error: ErrorVector,
    expect: bool,
}

#[test]
fn transient_error() {
    for vector in table().transient_error {
        let error = vector.error.error();
        assert_eq!(
            error.is_transient(),
            vector.expect,
            "{}: {error:?}",
            vector.name
        );
    }
}

#[derive(Deserialize)]
struct RetryDelayVector {
    name: String,
    attempt: u32,
    retry_info_ms: Option<u64>,
    random: f64,
    expect_ms: f64,
}

#[test]
fn retry_delay_vectors() {
    for vector in table().retry_delay {
        let asked = vector.retry_info_ms.map(Duration::from_millis);
        let wait = retry_delay(vector.attempt, asked, vector.random);
        assert_ms(&vector.name, wait, vector.expect_ms);
    }
}

#[derive(Deserialize)]
struct ClaimVector {
    name: String,
    answer: ClaimAnswerVector,
    #[serde(default = "a_long_time")]
    remaining_ms: u64,
    #[serde(default)]
    random: f64,
    expect: ClaimExpectation,
}

fn a_long_time() -> u64 {
    120_000
}

#[derive(Deserialize)]
struct ClaimAnswerVector {
    outcome: String,
    status: Option<String>,
    result: Option<String>,
    failure: Option<FailureVector>,
    #[serde(default)]
    lease: bool,
    retry_after_ms: Option<u64>,
    waited_ms: Option<u64>,
    #[serde(default)]
    remote_ref: String,
}

#[derive(Deserialize)]
struct FailureVector {
    code: String,
    message: String,
}

#[derive(Deserialize)]
struct ClaimExpectation {
    step: String,
    reconcile: Option<bool>,
    value: Option<String>,
    replayed: Option<bool>,
    error: Option<String>,
    code: Option<String>,
    wait_ms: Option<f64>,
}

impl ClaimAnswerVector {
    fn response(&self) -> pb::ClaimResponse {
        let outcome = ClaimOutcome::from_str_name(&format!("CLAIM_OUTCOME_{}", self.outcome))
            .expect("a claim outcome");
        let status = self
            .status
            .as_deref()
            .map_or(OperationStatus::Unspecified, |status| {
                OperationStatus::from_str_name(&format!("OPERATION_STATUS_{status}"))
                    .expect("an operation status")
            });
        let operation = pb::Operation {
            namespace: "payments".into(),
            operation_key: "debit:order-42".into(),
            status: status.into(),
            result: self.result.clone().unwrap_or_default().into_bytes(),
            failure: self.failure.as_ref().map(|failure| pb::Failure {
                code: failure.code.clone(),
                message: failure.message.clone(),
            }),
            remote_ref: self.remote_ref.clone(),
            ..Default::default()
        };
        pb::ClaimResponse {
            outcome: outcome.into(),
            operation: Some(operation),
            lease: self.lease.then(|| pb::Lease {
                fencing_token: 7,
                ..Default::default()
            }),
            retry_after: self
                .retry_after_ms
                .map(|ms| proto_duration(Duration::from_millis(ms))),
            waited: self
                .waited_ms
                .map(|ms| proto_duration(Duration::from_millis(ms))),
        }
    }
}

#[test]
fn claim_answer() {
    for vector in table().claim_answer {
        let name = &vector.name;
        let expect = &vector.expect;
        let remaining = Duration::from_millis(vector.remaining_ms);
        let step = decide_claim_answer(vector.answer.response(), remaining, vector.random);
        match (expect.step.as_str(), step) {
            ("execute", ClaimStep::Execute { lease, reconcile }) => {
                assert_eq!(Some(reconcile), expect.reconcile, "{name}");
                assert_eq!(lease.fencing_token, 7, "{name}");
            }
            ("wait", ClaimStep::Wait(wait)) => {
                assert_ms(name, wait, expect.wait_ms.expect("wait_ms"));
            }
            ("return", ClaimStep::Return(Ok(completed))) => {
                let value = expect.value.as_deref().unwrap_or_default().as_bytes();
                assert_eq!(completed.result, value, "{name}");
                assert_eq!(Some(completed.replayed), expect.replayed, "{name}");
            }
            ("raise", ClaimStep::Return(Err(error))) => {
                assert_eq!(Some(error.kind()), expect.error.as_deref(), "{name}");
                if let RunError::Business { code, replayed, .. } = &error {
                    assert_eq!(Some(code), expect.code.as_ref(), "{name}");
                    assert_eq!(Some(*replayed), expect.replayed, "{name}");
                }
            }
            (expected, step) => panic!("{name}: expected {expected}, decided {step:?}"),
        }
    }
}

#[derive(Deserialize)]
struct CompleteErrorVector {
    name: String,
    error: ErrorVector,
    expect: String,
}

#[test]
fn complete_error() {
    for vector in table().complete_error {
        let decided = decide_complete_error(&RunError::Rpc(vector.error.error()));
        let expected = match vector.expect.as_str() {
            "lease_lost" => CompleteError::LeaseLost,
            "raise" => CompleteError::Raise,
            "in_doubt" => CompleteError::InDoubt,
            other => panic!("{}: no complete_error answer {other}", vector.name),
        };
        assert_eq!(decided, expected, "{}", vector.name);
    }
}

#[derive(Deserialize)]
struct RenewVector {
    name: String,
    error: ErrorVector,
    attempt: u32,
    trusted_left_ms: u64,
    random: f64,
    expect: RenewExpectation,
}

#[derive(Deserialize)]
struct RenewExpectation {
    lost: bool,
    wait_ms: Option<f64>,
}

#[test]
fn renew_failure() {
    for vector in table().renew_failure {
        let name = &vector.name;
        let error = vector.error.error();
        let left = Duration::from_millis(vector.trusted_left_ms);
        match decide_renew_failure(Some(&error), vector.attempt, left, vector.random) {
            RenewStep::Lost => assert!(vector.expect.lost, "{name}: lost"),
            RenewStep::RetryAfter(wait) => {
                assert!(!vector.expect.lost, "{name}: retried after {wait:?}");
                assert_ms(name, wait, vector.expect.wait_ms.expect("wait_ms"));
            }
        }
    }
}

#[derive(Deserialize)]
struct InDoubtVector {
    name: String,
    reported: String,
    token: u64,
    lookup: Option<LookupVector>,
    expect: String,
}

#[derive(Deserialize)]
struct LookupVector {
    status: String,
    executions: Vec<ExecutionVector>,
}

#[derive(Deserialize)]
struct ExecutionVector {
    token: u64,
    outcome: String,
}

impl LookupVector {
    fn response(&self) -> pb::LookupResponse {
        let status = OperationStatus::from_str_name(&format!("OPERATION_STATUS_{}", self.status))
            .expect("an operation status");
        pb::LookupResponse {
            operation: Some(pb::Operation {
                status: status.into(),
                ..Default::default()
            }),
            executions: self
                .executions
                .iter()
                .map(|execution| pb::Execution {
                    fencing_token: execution.token,
                    outcome: execution_outcome(&execution.outcome).into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }
}

fn execution_outcome(name: &str) -> ExecutionOutcome {
    ExecutionOutcome::from_str_name(&format!("EXECUTION_OUTCOME_{name}"))
        .expect("an execution outcome")
}

#[test]
fn call_in_doubt() {
    for vector in table().call_in_doubt {
        let name = &vector.name;
        let reported = match vector.reported.as_str() {
            "success" => ExecutionOutcome::Succeeded,
            "failure" => ExecutionOutcome::Failed,
            "retryable" => ExecutionOutcome::Retryable,
            "unknown" => ExecutionOutcome::Unknown,
            other => panic!("{name}: no report {other}"),
        };
        let found = vector.lookup.as_ref().map(LookupVector::response);
        let decided = match decide_call_in_doubt(found, vector.token, reported) {
            InDoubt::Recorded(_) => "recorded",
            InDoubt::LeaseLost => "lease_lost",
            InDoubt::NotRecorded => "not_recorded",
        };
        assert_eq!(decided, vector.expect, "{name}");
    }
}

/// What the table cannot state: what work's result becomes, and when a
/// recorded report is followed by another Claim.
#[test]
fn work_reports_and_what_follows_them() {
    let (outcome, failure) = work_report(Ok(Success::new(b"done".to_vec())));
    assert!(matches!(&outcome, Outcome::Success(s) if s.result == b"done") && failure.is_none());
    assert_eq!(recorded_as(&outcome), ExecutionOutcome::Succeeded);
    assert!(!claims_again(&outcome, true));

    let (outcome, failure) = work_report(Err(WorkError::Transient {
        message: "busy".into(),
        retry_after: Some(Duration::from_secs(2)),
    }));
    assert!(matches!(&outcome, Outcome::Retryable(r)
        if r.error_class == "transient" && r.retry_after == Some(proto_duration(Duration::from_secs(2)))));
    assert!(failure.is_none() && claims_again(&outcome, false));

    let (outcome, failure) = work_report(Err(WorkError::SentButUnconfirmed {
        remote_ref: "remote-1".into(),
        message: "timed out".into(),
    }));
    assert_eq!(recorded_as(&outcome), ExecutionOutcome::Unknown);
    assert!(failure.is_none());
    assert!(claims_again(&outcome, true), "reconciled by the next Claim");
    assert!(!claims_again(&outcome, false), "no one to ask");

    let (outcome, failure) = work_report(Err(WorkError::Other("disk full".into())));
    assert!(matches!(&outcome, Outcome::Retryable(r) if r.error_class == "work_error"));
    assert_eq!(
        failure.map(|error| error.to_string()).as_deref(),
        Some("disk full")
    );
}
