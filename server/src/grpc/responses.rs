//! Domain records into protobuf messages.

use chrono::{DateTime, Utc};
use opreg_proto::v1 as pb;

use crate::domain::claim::ClaimOutcome;
use crate::domain::operation::{
    Execution, ExecutionKind, ExecutionOutcome, Lease, Operation, Resource, Status,
};
use crate::registry::ClaimAnswer;

pub fn claim(answer: ClaimAnswer) -> pb::ClaimResponse {
    pb::ClaimResponse {
        outcome: claim_outcome(answer.outcome).into(),
        lease: answer.lease().map(lease),
        retry_after: answer.retry_after.map(duration),
        operation: Some(operation(answer.operation)),
    }
}

pub fn operation(operation: Operation) -> pb::Operation {
    let lease = operation.lease().map(lease);
    let failure = operation.failure_code.is_some().then(|| pb::Failure {
        code: operation.failure_code.clone().unwrap_or_default(),
        message: operation.failure_message.clone().unwrap_or_default(),
    });
    pb::Operation {
        namespace: operation.namespace,
        operation_key: operation.operation_key,
        status: status(operation.status).into(),
        parameters_digest: operation.parameters_digest,
        result: operation.result.unwrap_or_default(),
        result_ref: operation.result_ref.unwrap_or_default(),
        failure,
        attempts: operation.attempts.max(0).unsigned_abs(),
        lease,
        next_attempt_at: operation.next_attempt_at.map(timestamp),
        remote_ref: operation.remote_ref.unwrap_or_default(),
        reconciling: operation.reconciling,
        compensates: operation.compensates.unwrap_or_default(),
        compensated_by: operation.compensated_by.unwrap_or_default(),
        created_at: Some(timestamp(operation.created_at)),
        updated_at: Some(timestamp(operation.updated_at)),
        completed_at: operation.completed_at.map(timestamp),
        last_error_class: operation.last_error_class.unwrap_or_default(),
        last_error_message: operation.last_error_message.unwrap_or_default(),
    }
}

pub fn lease(lease: Lease) -> pb::Lease {
    pb::Lease {
        owner: lease.owner,
        fencing_token: lease.fencing_token.unsigned_abs(),
        expires_at: Some(timestamp(lease.expires_at)),
        attempt: lease.attempt.max(0).unsigned_abs(),
        takeover: lease.takeover,
    }
}

pub fn execution(execution: Execution) -> pb::Execution {
    pb::Execution {
        attempt: execution.attempt.max(0).unsigned_abs(),
        execution_id: execution.execution_id,
        owner: execution.owner,
        fencing_token: execution.fencing_token.unsigned_abs(),
        started_at: Some(timestamp(execution.started_at)),
        finished_at: execution.finished_at.map(timestamp),
        outcome: execution_outcome(execution.outcome).into(),
        error_class: execution.error_class.unwrap_or_default(),
        message: execution.message.unwrap_or_default(),
        kind: execution_kind(execution.kind).into(),
    }
}

pub fn resource(resource: Resource) -> pb::GetResourceResponse {
    pb::GetResourceResponse {
        value: resource.value,
        fence: resource.fence.unsigned_abs(),
        version: resource.version.unsigned_abs(),
        updated_at: Some(timestamp(resource.updated_at)),
        operation_key: resource.operation_key,
    }
}

fn claim_outcome(outcome: ClaimOutcome) -> pb::ClaimOutcome {
    match outcome {
        ClaimOutcome::Acquired => pb::ClaimOutcome::Acquired,
        ClaimOutcome::Replayed => pb::ClaimOutcome::Replayed,
        ClaimOutcome::InProgress => pb::ClaimOutcome::InProgress,
        ClaimOutcome::RetryLater => pb::ClaimOutcome::RetryLater,
        ClaimOutcome::Reconcile => pb::ClaimOutcome::Reconcile,
        ClaimOutcome::Dead => pb::ClaimOutcome::Dead,
    }
}

fn status(status: Status) -> pb::OperationStatus {
    match status {
        Status::InProgress => pb::OperationStatus::InProgress,
        Status::Succeeded => pb::OperationStatus::Succeeded,
        Status::Failed => pb::OperationStatus::Failed,
        Status::RetryScheduled => pb::OperationStatus::RetryScheduled,
        Status::Unknown => pb::OperationStatus::Unknown,
        Status::Dead => pb::OperationStatus::Dead,
    }
}

fn execution_kind(kind: ExecutionKind) -> pb::ExecutionKind {
    match kind {
        ExecutionKind::First => pb::ExecutionKind::First,
        ExecutionKind::Retry => pb::ExecutionKind::Retry,
        ExecutionKind::Takeover => pb::ExecutionKind::Takeover,
        ExecutionKind::Reconcile => pb::ExecutionKind::Reconcile,
    }
}

fn execution_outcome(outcome: ExecutionOutcome) -> pb::ExecutionOutcome {
    match outcome {
        ExecutionOutcome::Running => pb::ExecutionOutcome::Running,
        ExecutionOutcome::Succeeded => pb::ExecutionOutcome::Succeeded,
        ExecutionOutcome::Failed => pb::ExecutionOutcome::Failed,
        ExecutionOutcome::Retryable => pb::ExecutionOutcome::Retryable,
        ExecutionOutcome::Unknown => pb::ExecutionOutcome::Unknown,
        ExecutionOutcome::Superseded => pb::ExecutionOutcome::Superseded,
    }
}

fn timestamp(at: DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: at.timestamp(),
        nanos: i32::try_from(at.timestamp_subsec_nanos()).unwrap_or(0),
    }
}

fn duration(duration: std::time::Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(duration.subsec_nanos()).unwrap_or(0),
    }
}
